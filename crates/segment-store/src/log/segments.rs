//! The segments of a log: the writer's lock, the published list, the bounded cache of open
//! inactive segments, and what they are.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

use arc_swap::ArcSwap;

use super::list::{SealedSlot, SegmentList};
use super::{
    Inner, LocalLog, LogBounds, LogConfig, PublishedBounds, SegmentInfo, Slot,
    MAX_OPEN_INACTIVE_SEGMENTS,
};
use crate::error::{Result, SegmentError};
use crate::segment::LogSegment;

/// A segment as [`LocalLog::with_segments`] hands it out: the active one borrowed from the log,
/// a sealed one shared (held open for as long as this lives).
#[derive(Debug)]
pub enum SegmentRef<'a> {
    /// The active segment.
    Active(&'a LogSegment),
    /// A sealed segment.
    Sealed(Arc<LogSegment>),
}

impl Deref for SegmentRef<'_> {
    type Target = LogSegment;

    fn deref(&self) -> &LogSegment {
        match self {
            SegmentRef::Active(s) => s,
            SegmentRef::Sealed(s) => s,
        }
    }
}

impl LocalLog {
    /// The writer's lock for reading (flushes, [`Self::with_segments`]).
    pub(super) fn read_inner(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer's lock; the segment list and the offsets and counts readers load without it
    /// are published when the guard is dropped, before the lock is released.
    pub(super) fn write_inner(&self) -> WriteInner<'_> {
        WriteInner {
            inner: self.inner.write().unwrap_or_else(|p| p.into_inner()),
            published: &self.published,
            list: &self.list,
        }
    }

    pub(super) fn opened(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SealedSlot>>> {
        self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The active segment's files, opened writable at its maximum index size, publishing its
    /// tail at truncation count `truncations`.
    fn open_active_segment(&self, base: i64, truncations: u64) -> Result<LogSegment> {
        let mut seg = LogSegment::open_active(&self.ctx, &self.dir, base)?;
        seg.resize_indexes(self.config.max_index_size)?;
        seg.publish_tail(truncations);
        Ok(seg)
    }

    /// A sealed segment's files, opened with its `.log` mapped read-only for zero-copy reads.
    pub(super) fn open_sealed(&self, base: i64) -> Result<LogSegment> {
        let mut seg = LogSegment::open(&self.ctx, &self.dir, base)?;
        seg.map_log()?;
        Ok(seg)
    }

    /// A sealed slot's segment, opened if it is not (noted in the cache of open segments).
    /// `None` if the writer took it.
    pub(super) fn open_slot(&self, slot: &Arc<SealedSlot>) -> Result<Option<Arc<LogSegment>>> {
        slot.touch(self.uses.fetch_add(1, Ordering::Relaxed));
        Ok(slot.open(self)?.map(|(seg, opened)| {
            if opened {
                self.opened().push(Arc::clone(slot));
            }
            seg
        }))
    }

    /// Puts a slot whose segment was just opened in the cache of open segments, as just used.
    pub(super) fn note_opened(&self, slot: &Arc<SealedSlot>) {
        slot.touch(self.uses.fetch_add(1, Ordering::Relaxed));
        self.opened().push(Arc::clone(slot));
    }

    /// The segment at `base` (which must be in `inner`), opened if it is not.
    pub(super) fn seg<'a>(&self, inner: &'a Inner, base: i64) -> Result<SegmentRef<'a>> {
        let slot = inner
            .segments
            .get(&base)
            .ok_or_else(|| self.no_segment(inner, base))?;
        match slot {
            Slot::Sealed(s) => self
                .open_slot(s)?
                .map(SegmentRef::Sealed)
                .ok_or_else(|| self.no_segment(inner, base)),
            Slot::Active { seg, .. } => {
                if let Some(seg) = seg.get() {
                    return Ok(SegmentRef::Active(seg));
                }
                // Under the writer's lock for reading (a flush, `with_segments`), openers of the
                // released active segment take turns on the cache's lock: a second object of the
                // segment could not lock its indexes.
                let _opening = self.opened();
                if seg.get().is_none() {
                    let opened = self.open_active_segment(base, self.truncations())?;
                    let _ = seg.set(Box::new(opened));
                }
                seg.get()
                    .map(|s| SegmentRef::Active(s))
                    .ok_or_else(|| self.no_segment(inner, base))
            }
        }
    }

    fn no_segment(&self, inner: &Inner, base: i64) -> SegmentError {
        if inner.closed {
            return SegmentError::Closed {
                dir: self.dir.clone(),
            };
        }
        SegmentError::OffsetOutOfRange {
            offset: base,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        }
    }

    /// The active (last) segment, opened; a sealed segment left last (by a truncation or a
    /// recovery) becomes the active one, once no reader holds it.
    pub(super) fn active_mut<'a>(&self, inner: &'a mut Inner) -> Result<&'a mut LogSegment> {
        let truncations = self.truncations();
        let Some((base, slot)) = inner.segments.last_mut() else {
            return Err(self.no_segment(inner, inner.log_end_offset));
        };
        if let Slot::Sealed(s) = slot {
            let s = Arc::clone(s);
            self.opened().retain(|o| !Arc::ptr_eq(o, &s));
            let seg = s.take(|| self.open_active_segment(base, truncations))?;
            inner.segments.insert(base, Slot::active(seg));
        }
        let missing = self.no_segment(inner, base);
        let Some((_, Slot::Active { seg, .. })) = inner.segments.last_mut() else {
            return Err(missing);
        };
        if seg.get().is_none() {
            let _ = seg.set(Box::new(self.open_active_segment(base, truncations)?));
        }
        seg.get_mut().map(|s| &mut **s).ok_or(missing)
    }

    /// For a reader that needs the active segment while it is released (after
    /// [`Self::release_segments`]): opens it under the writer's lock, which publishes its tail.
    /// The one lock a read may take, once per release.
    pub(super) fn open_active_for_read(&self) -> Result<()> {
        let mut inner = self.write_inner();
        if inner.closed {
            return Err(SegmentError::Closed {
                dir: self.dir.clone(),
            });
        }
        self.active_mut(&mut inner).map(|_| ())
    }

    /// Runs `f` on the segment at `base` by value-like access: the active one in place, a
    /// sealed one taken once no reader holds it and listed again afterwards (open, its `.log`
    /// mapped), even when `f` fails.
    pub(super) fn with_seg_mut<R>(
        &self,
        inner: &mut Inner,
        base: i64,
        f: impl FnOnce(&mut LogSegment) -> Result<R>,
    ) -> Result<R> {
        let last = inner.segments.keys().next_back().copied();
        if Some(base) == last {
            return f(self.active_mut(inner)?);
        }
        let Some(Slot::Sealed(s)) = inner.segments.get(&base) else {
            return Err(self.no_segment(inner, base));
        };
        let s = Arc::clone(s);
        self.opened().retain(|o| !Arc::ptr_eq(o, &s));
        let mut seg = s.take(|| LogSegment::open(&self.ctx, &self.dir, base))?;
        let r = f(&mut seg);
        let size = seg.size();
        let mapped = r.is_ok() && seg.map_log().is_ok();
        let slot = Arc::new(SealedSlot::new(base, size, mapped.then_some(seg)));
        if mapped {
            self.note_opened(&slot);
        }
        inner.segments.insert(base, Slot::Sealed(slot));
        r
    }

    /// [`LogConfig::max_open_inactive_segments`], at least 1.
    fn max_open(&self) -> usize {
        self.config.max_open_inactive_segments.max(1)
    }

    /// Closes the inactive segments opened on demand beyond the
    /// [`LogConfig::max_open_inactive_segments`] used last (a reader holding one reads on; its
    /// files close when it lets go). Takes no lock but the cache's.
    pub(super) fn trim_cache(&self) {
        let max_open = self.max_open();
        let closed: Vec<_> = {
            let mut opened = self.opened();
            if opened.len() <= max_open {
                return;
            }
            // The most recently used are kept, each slot once. Readers touch slots meanwhile:
            // the order is of the ticks read once here, one per slot (a sort by a key that moves
            // may panic).
            let mut slots: Vec<Arc<SealedSlot>> = opened.drain(..).collect();
            slots.sort_unstable_by_key(|s| Arc::as_ptr(s) as usize);
            slots.dedup_by(|a, b| Arc::ptr_eq(a, b));
            let mut by_use: Vec<(u64, Arc<SealedSlot>)> =
                slots.into_iter().map(|s| (s.last_used(), s)).collect();
            by_use.sort_unstable_by_key(|&(tick, _)| std::cmp::Reverse(tick));
            let keep = max_open.min(by_use.len());
            let close = by_use.split_off(keep);
            opened.extend(by_use.into_iter().map(|(_, s)| s));
            close.iter().map(|(_, s)| s.close()).collect()
        };
        // Unmapped and closed out of the cache's lock.
        drop(closed);
    }

    /// Closes every open segment's files, the active one's too (`LogSegment::release`: its
    /// indexes trimmed, nothing flushed): the log then holds no descriptor and no map until it is
    /// next read or appended to. For a log directory that keeps many partitions open.
    pub fn release_segments(&self) -> Result<()> {
        let mut inner = self.write_inner();
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        for base in bases {
            // The active one's slot changes (its tail goes): the list is published again.
            if let Some(slot) = inner.segments.get_mut(&base) {
                slot.release()?;
            }
        }
        let closed = std::mem::take(&mut *self.opened());
        drop(closed);
        Ok(())
    }

    /// The number of segments whose files are open now (the active one included).
    pub fn open_segments(&self) -> usize {
        self.read_inner()
            .segments
            .values()
            .filter(|s| s.is_open())
            .count()
    }

    /// The base offsets of the segments whose files are open now (the active one included).
    pub fn open_segment_bases(&self) -> Vec<i64> {
        self.read_inner()
            .segments
            .iter()
            .filter(|(_, s)| s.is_open())
            .map(|(b, _)| *b)
            .collect()
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// The offset after the last appended batch (without a lock).
    pub fn log_end_offset(&self) -> i64 {
        self.published.log_end_offset.load(Ordering::Acquire)
    }
    /// The first offset readable (without a lock).
    pub fn log_start_offset(&self) -> i64 {
        self.published.log_start_offset.load(Ordering::Acquire)
    }
    /// Everything below this offset is durable (without a lock).
    pub fn recovery_point(&self) -> i64 {
        self.published.recovery_point.load(Ordering::Acquire)
    }
    /// A number that changes whenever segments are removed or replaced (retention, the
    /// cleaner) or the log end moves down (a truncation), not when a roll adds one: a reader
    /// that combines two reads (a fetch's bytes and its aborted transactions) compares it before
    /// and after to know that nothing it read was taken away between them. Loaded without a
    /// lock.
    pub fn generation(&self) -> u64 {
        let truncations = self.truncations();
        self.published
            .removals
            .load(Ordering::Acquire)
            .wrapping_add(truncations)
    }
    /// How many times the log end moved down (truncations) since the log was opened: bounds
    /// published before a truncation are stale after it. Loaded without a lock.
    pub fn truncations(&self) -> u64 {
        self.published.truncations.load()
    }

    /// Counts a truncation about to begin (under the write lock, before anything is cut) and
    /// returns the new count: the tail the active segment publishes afterwards carries it.
    pub(super) fn begin_truncation(&self) -> u64 {
        self.published.truncations.begin()
    }
    /// The log start and end offsets, the recovery point and the truncation count, loaded
    /// without a lock (again if a truncation moved the count meanwhile).
    pub fn bounds(&self) -> LogBounds {
        loop {
            let truncations = self.truncations();
            let bounds = LogBounds {
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.log_end_offset(),
                recovery_point: self.recovery_point(),
                truncations,
            };
            if self.truncations() == truncations {
                return bounds;
            }
        }
    }
    /// Base offset of the active (last) segment (without a lock).
    pub fn active_segment_base(&self) -> i64 {
        self.list.load().active_base_and_size().0
    }
    /// Total size of all segments' `.log` files (without a lock).
    pub fn size(&self) -> u64 {
        let list = self.list.load();
        let sealed: u64 = list.sealed.iter().map(|s| s.size).sum();
        sealed + list.active_base_and_size().1
    }
    /// A summary of every segment, in base-offset order (each segment opened in turn, closed
    /// again but for the last ones read).
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        self.segments_from(Vec::new())
    }

    /// [`Self::segments`] after the bases already in `out`, a few segments at a time.
    fn segments_from(&self, mut out: Vec<SegmentInfo>) -> Result<Vec<SegmentInfo>> {
        loop {
            let after = out.last().map_or(i64::MIN, |s| s.base_offset);
            let inner = self.read_inner();
            let bases = inner.window_after(after);
            if bases.is_empty() || after == i64::MAX {
                drop(inner);
                self.trim_cache();
                return Ok(out);
            }
            for base in bases {
                let s = self.seg(&inner, base)?;
                out.push(SegmentInfo {
                    base_offset: s.base_offset(),
                    size: s.size(),
                    largest_timestamp: s.largest_timestamp(),
                    index_entries: s.offset_index().entries(),
                    time_index_entries: s.time_index().entries(),
                });
            }
            drop(inner);
            self.trim_cache();
        }
    }

    /// Runs `f` over the segments (in base-offset order) under the writer's lock for reading
    /// (appends, rolls and truncations wait; for tools and checks, not the read path), each
    /// opened as the iterator reaches it (an error if it cannot be); those opened are closed again afterwards
    /// but for the last ones read.
    pub fn with_segments<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<SegmentRef<'_>>>) -> R,
    ) -> Result<R> {
        self.with_segments_from(i64::MIN, f)
    }

    /// [`Self::with_segments`] from the segment holding `offset` (the last whose base offset is
    /// at most `offset`; the first segment if there is none).
    pub fn with_segments_from<R>(
        &self,
        offset: i64,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<SegmentRef<'_>>>) -> R,
    ) -> Result<R> {
        let r = {
            let inner = self.read_inner();
            let inner = &*inner;
            let from = inner
                .segments
                .range(..=offset)
                .next_back()
                .map_or(i64::MIN, |(&b, _)| b);
            f(&mut inner
                .segments
                .range(from..)
                .map(|(&b, _)| self.seg(inner, b)))
        };
        self.trim_cache();
        Ok(r)
    }

    /// The base offset of the first segment.
    pub fn first_segment_base(&self) -> Option<i64> {
        self.read_inner().segments.keys().next().copied()
    }

    /// The base offsets of every segment, ascending, without opening any.
    pub fn segment_bases(&self) -> Vec<i64> {
        self.read_inner().segments.keys().copied().collect()
    }
}

/// [`LocalLog::write_inner`]'s guard: publishes the active segment's tail, the segment list
/// (if it changed) and [`Inner`]'s offsets and counts ([`PublishedBounds`]), in that order, when
/// dropped, while the lock is still held.
pub(super) struct WriteInner<'a> {
    inner: RwLockWriteGuard<'a, Inner>,
    published: &'a PublishedBounds,
    list: &'a ArcSwap<SegmentList>,
}

impl Deref for WriteInner<'_> {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl DerefMut for WriteInner<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.inner
    }
}

impl Drop for WriteInner<'_> {
    fn drop(&mut self) {
        // Runs before the field `inner` (the lock guard) is dropped.
        self.publish();
    }
}

impl WriteInner<'_> {
    /// Publishes what the guard publishes when dropped, now: for a section that goes on with
    /// work readers need not wait for (the fsync of a truncation's cut).
    pub(super) fn publish(&mut self) {
        let truncations = self.published.truncations.load();
        self.inner.publish_active_tail(truncations);
        let current = self.list.load();
        let stale = self.inner.segments.changed
            || current.truncations != truncations
            || current.closed != self.inner.closed
            || !current.active_matches(&self.inner.segments);
        drop(current);
        if stale {
            self.list.store(Arc::new(SegmentList::of(
                &self.inner.segments,
                truncations,
                self.inner.closed,
            )));
            self.inner.segments.changed = false;
        }
        self.published.store(&self.inner);
    }
}

impl Inner {
    /// Publishes the active segment's tail anew if it is open and its tail is missing (a new or
    /// reopened segment) or was made before the last truncation (appends keep a current tail
    /// current themselves).
    fn publish_active_tail(&mut self, truncations: u64) {
        if let Some((_, Slot::Active { seg, .. })) = self.segments.last_mut() {
            if let Some(seg) = seg.get_mut() {
                if seg.tail().is_none_or(|t| t.truncations() != truncations) {
                    seg.publish_tail(truncations);
                }
            }
        }
    }

    /// The base offsets of at most [`MAX_OPEN_INACTIVE_SEGMENTS`] segments after `after`: the
    /// window a walk over every segment takes under one hold of the writer's lock for reading,
    /// trimming between windows so that the open descriptors stay bounded.
    pub(super) fn window_after(&self, after: i64) -> Vec<i64> {
        self.segments
            .range(after.saturating_add(1)..)
            .map(|(&b, _)| b)
            .take(MAX_OPEN_INACTIVE_SEGMENTS)
            .collect()
    }
}
