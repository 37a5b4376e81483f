//! The segments of a log: the locks around them, the bounded cache of open inactive segments,
//! and what they are.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

use super::{
    Inner, LocalLog, LogBounds, LogConfig, PublishedBounds, SegmentInfo, Slot,
    MAX_OPEN_INACTIVE_SEGMENTS,
};
use crate::error::{Result, SegmentError};
use crate::segment::LogSegment;

impl LocalLog {
    pub(super) fn read_inner(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The segment list under its write lock; the offsets and counts readers load without it
    /// are published when the guard is dropped, before the lock is released.
    pub(super) fn write_inner(&self) -> WriteInner<'_> {
        WriteInner {
            inner: self.inner.write().unwrap_or_else(|p| p.into_inner()),
            published: &self.published,
        }
    }

    pub(super) fn opened(&self) -> std::sync::MutexGuard<'_, Vec<i64>> {
        self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The segment's files, opened: the active (last) one writable at its maximum index size,
    /// any other with its `.log` mapped read-only for zero-copy reads.
    fn open_segment(&self, base: i64, active: bool, truncations: u64) -> Result<LogSegment> {
        if active {
            let mut seg = LogSegment::open_active(&self.ctx, &self.dir, base)?;
            seg.resize_indexes(self.config.max_index_size)?;
            seg.publish_tail(truncations);
            Ok(seg)
        } else {
            let mut seg = LogSegment::open(&self.ctx, &self.dir, base)?;
            seg.map_log()?;
            Ok(seg)
        }
    }

    /// The segment at `base` (which must be in `inner`), opened if it is not (under the read
    /// lock: opening is serialised by [`Self::opened`]).
    pub(super) fn seg<'a>(&self, inner: &'a Inner, base: i64) -> Result<&'a LogSegment> {
        let slot = inner
            .segments
            .get(&base)
            .ok_or_else(|| self.no_segment(inner, base))?;
        if let Some(seg) = slot.seg.get() {
            return Ok(seg);
        }
        let mut opened = self.opened();
        if slot.seg.get().is_none() {
            let active = inner.segments.keys().next_back() == Some(&base);
            let seg = self.open_segment(base, active, self.truncations())?;
            // Cannot be set already: every opening holds `opened`.
            let _ = slot.seg.set(Box::new(seg));
            opened.push(base);
        }
        slot.seg
            .get()
            .map(|s| &**s)
            .ok_or_else(|| self.no_segment(inner, base))
    }

    /// [`Self::seg`] under the write lock.
    pub(super) fn seg_mut<'a>(
        &self,
        inner: &'a mut Inner,
        base: i64,
    ) -> Result<&'a mut LogSegment> {
        let active = inner.segments.keys().next_back() == Some(&base);
        let truncations = self.truncations();
        let missing = self.no_segment(inner, base);
        let slot = inner.segments.get_mut(&base).ok_or(missing)?;
        if slot.seg.get().is_none() {
            let seg = self.open_segment(base, active, truncations)?;
            let _ = slot.seg.set(Box::new(seg));
            self.opened().push(base);
        }
        let missing = SegmentError::OffsetOutOfRange {
            offset: base,
            log_start_offset: base,
            log_end_offset: base,
        };
        slot.seg.get_mut().map(|s| &mut **s).ok_or(missing)
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

    /// The active (last) segment, opened.
    pub(super) fn active_mut<'a>(&self, inner: &'a mut Inner) -> Result<&'a mut LogSegment> {
        let Some(&base) = inner.segments.keys().next_back() else {
            return Err(self.no_segment(inner, inner.log_end_offset));
        };
        self.seg_mut(inner, base)
    }

    /// [`LogConfig::max_open_inactive_segments`], at least 1.
    fn max_open(&self) -> usize {
        self.config.max_open_inactive_segments.max(1)
    }

    /// Closes the inactive segments opened on demand beyond the
    /// [`LogConfig::max_open_inactive_segments`] read last.
    pub(super) fn trim(&self, inner: &mut Inner) -> Result<()> {
        let max_open = self.max_open();
        let mut opened = self.opened();
        if opened.len() <= max_open {
            return Ok(());
        }
        let active = inner.segments.keys().next_back().copied();
        // The most recently opened are kept (each base once).
        let mut keep = Vec::with_capacity(max_open);
        let mut close = Vec::new();
        for &base in opened.iter().rev() {
            if Some(base) == active || keep.contains(&base) || close.contains(&base) {
                continue;
            }
            if keep.len() < max_open.div_ceil(2) {
                keep.push(base);
            } else {
                close.push(base);
            }
        }
        keep.reverse();
        *opened = keep;
        drop(opened);
        for base in close {
            if let Some(slot) = inner.segments.get_mut(&base) {
                slot.release()?;
            }
        }
        Ok(())
    }

    /// [`Self::trim`] after an operation under the read lock, if it opened too many segments.
    pub(super) fn trim_after_read(&self) -> Result<()> {
        if self.opened().len() > self.max_open() {
            let mut inner = self.write_inner();
            self.trim(&mut inner)?;
        }
        Ok(())
    }

    /// Closes every open segment's files, the active one's too (`LogSegment::release`: its
    /// indexes trimmed, nothing flushed): the log then holds no descriptor and no map until it is
    /// next read or appended to. For a log directory that keeps many partitions open.
    pub fn release_segments(&self) -> Result<()> {
        let mut inner = self.write_inner();
        for slot in inner.segments.values_mut() {
            slot.release()?;
        }
        self.opened().clear();
        Ok(())
    }

    /// The number of segments whose files are open now (the active one included).
    pub fn open_segments(&self) -> usize {
        self.read_inner()
            .segments
            .values()
            .filter(|s| s.seg.get().is_some())
            .count()
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
    /// A number that changes whenever segments are added, removed or renamed, or the log end
    /// moves down (a truncation): a reader that combines two reads (a fetch's bytes and its
    /// aborted transactions) compares it before and after to know that both saw one layout.
    /// Loaded without a lock.
    pub fn generation(&self) -> u64 {
        let truncations = self.truncations();
        self.published
            .dir_changes
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
    /// The log start and end offsets, the recovery point and the truncation count as of one
    /// moment: one acquisition of the segment list's lock where the four accessors take four
    /// (a writer publishes them after every append).
    pub fn bounds(&self) -> LogBounds {
        let inner = self.read_inner();
        LogBounds {
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
            recovery_point: inner.recovery_point,
            truncations: self.truncations(),
        }
    }
    /// Base offset of the active (last) segment.
    pub fn active_segment_base(&self) -> i64 {
        self.read_inner()
            .segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
    }
    /// Total size of all segments' `.log` files.
    pub fn size(&self) -> u64 {
        self.read_inner().segments.values().map(Slot::size).sum()
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
                self.trim_after_read()?;
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
            self.trim_after_read()?;
        }
    }

    /// Runs `f` over the segments (in base-offset order) under the read lock, each opened as the
    /// iterator reaches it (an error if it cannot be); those opened are closed again afterwards
    /// but for the last ones read.
    pub fn with_segments<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<&LogSegment>>) -> R,
    ) -> Result<R> {
        self.with_segments_from(i64::MIN, f)
    }

    /// [`Self::with_segments`] from the segment holding `offset` (the last whose base offset is
    /// at most `offset`; the first segment if there is none).
    pub fn with_segments_from<R>(
        &self,
        offset: i64,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<&LogSegment>>) -> R,
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
        self.trim_after_read()?;
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

/// [`LocalLog::write_inner`]'s guard: publishes [`Inner`]'s offsets and counts
/// ([`PublishedBounds`]) when dropped, while the write lock is still held.
pub(super) struct WriteInner<'a> {
    inner: RwLockWriteGuard<'a, Inner>,
    published: &'a PublishedBounds,
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
        self.inner
            .publish_active_tail(self.published.truncations.load());
        self.published.store(&self.inner);
    }
}

impl Inner {
    /// Publishes the active segment's tail anew if it is open and its tail is missing (a new or
    /// reopened segment) or was made before the last truncation (appends keep a current tail
    /// current themselves).
    fn publish_active_tail(&mut self, truncations: u64) {
        let active = self.segments.values_mut().next_back();
        if let Some(seg) = active.and_then(|s| s.seg.get_mut()) {
            if seg.tail().is_none_or(|t| t.truncations() != truncations) {
                seg.publish_tail(truncations);
            }
        }
    }

    /// The base offsets of at most [`MAX_OPEN_INACTIVE_SEGMENTS`] segments after `after`: the
    /// window a walk over every segment takes under one read lock, trimming between windows so
    /// that the open descriptors stay bounded.
    pub(super) fn window_after(&self, after: i64) -> Vec<i64> {
        self.segments
            .range(after.saturating_add(1)..)
            .map(|(&b, _)| b)
            .take(MAX_OPEN_INACTIVE_SEGMENTS)
            .collect()
    }
}
