//! The segment list readers see without a lock: the sealed segments, shared, and the active
//! segment's published tail, swapped in whole by the writer whenever the list changes.
//!
//! A sealed segment is an immutable object shared between the writer's list and readers
//! (`Arc<LogSegment>`, in a [`SealedSlot`] that opens it on demand and closes it again to bound
//! descriptors). The active segment is the writer's own: readers see it only through its
//! [`PublishedTail`]. A writer that must change or remove a sealed segment first publishes a list
//! without it (or a truncation count readers check), then waits until no reader holds it
//! ([`SealedSlot::take`]): a reader holds a segment for one call only.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use arc_swap::ArcSwapOption;

use super::{LocalLog, Slot};
use crate::error::{Result, SegmentError};
use crate::segment::{LogSegment, PublishedTail};

/// How long an opener tries again when the files of a segment it opens are still locked by an
/// object of that segment being dropped on another thread: that drop is under way, but a loaded
/// machine may not run its thread for a while (a count of quick retries ran out under a parallel
/// test run). Files locked by anything else are reported once this has passed.
const LOCKED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Retries that only yield before the opener sleeps between tries (1 ms).
const LOCKED_YIELDS: usize = 1_000;

/// One sealed segment: its base offset and size (fixed: a sealed segment that changes becomes a
/// new slot), and its files, opened when first needed.
#[derive(Debug)]
pub(super) struct SealedSlot {
    pub(super) base: i64,
    pub(super) size: u64,
    seg: ArcSwapOption<LogSegment>,
    /// Serialises opening and taking. The `Weak` finds a segment still alive in a reader after
    /// the slot closed it (its mapped indexes stay locked until it is dropped: a second object
    /// of the same segment could not open them). `None`: taken by the writer, gone.
    opening: Mutex<Option<Weak<LogSegment>>>,
    /// When a reader or the writer last reached the segment through the slot, on the log's use
    /// count: the cache of open segments closes the least recently used first.
    last_used: AtomicU64,
}

impl SealedSlot {
    /// A slot for a sealed segment, open (`Some`) or not.
    pub(super) fn new(base: i64, size: u64, seg: Option<LogSegment>) -> SealedSlot {
        let seg = seg.map(Arc::new);
        SealedSlot {
            base,
            size,
            opening: Mutex::new(Some(seg.as_ref().map_or_else(Weak::new, Arc::downgrade))),
            seg: ArcSwapOption::new(seg),
            last_used: AtomicU64::new(0),
        }
    }

    /// Notes a use of the segment at `tick` of the log's use count.
    pub(super) fn touch(&self, tick: u64) {
        self.last_used.store(tick, Ordering::Relaxed);
    }

    /// The tick of the last use.
    pub(super) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    fn opening(&self) -> MutexGuard<'_, Option<Weak<LogSegment>>> {
        self.opening.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The segment if it is open.
    pub(super) fn get(&self) -> Option<Arc<LogSegment>> {
        self.seg.load_full()
    }

    /// Whether the segment is open.
    pub(super) fn is_open(&self) -> bool {
        self.seg.load().is_some()
    }

    /// The segment, opened if it is not (`true` with it then). `None` once the writer took it
    /// ([`Self::take`]): the reader loads the list again.
    pub(super) fn open(&self, log: &LocalLog) -> Result<Option<(Arc<LogSegment>, bool)>> {
        if let Some(seg) = self.get() {
            return Ok(Some((seg, false)));
        }
        let mut opening = self.opening();
        let Some(weak) = opening.as_ref() else {
            return Ok(None);
        };
        if let Some(seg) = self.get() {
            return Ok(Some((seg, false)));
        }
        let seg = match weak.upgrade() {
            Some(seg) => seg,
            None => Arc::new(open_retrying(|| log.open_sealed(self.base))?),
        };
        *opening = Some(Arc::downgrade(&seg));
        self.seg.store(Some(Arc::clone(&seg)));
        Ok(Some((seg, true)))
    }

    /// Closes the segment's files once no reader holds it (readers holding it read on). Returns
    /// the slot's reference, for the caller to drop outside its locks.
    pub(super) fn close(&self) -> Option<Arc<LogSegment>> {
        self.seg.swap(None)
    }

    /// The segment by value, for the writer to change, move or delete, once no reader holds it
    /// (waiting for those that do: each holds it for one call); `open_closed` opens it when it
    /// is not open. The slot is gone afterwards: readers that still reach it load the list
    /// again. The caller has published a list without this slot, or moved the truncation
    /// count, first, or rebuilds the list when its write section ends.
    pub(super) fn take(
        &self,
        open_closed: impl FnMut() -> Result<LogSegment>,
    ) -> Result<LogSegment> {
        let mut held = {
            let mut opening = self.opening();
            let weak = opening.take().unwrap_or_default();
            self.seg.swap(None).or_else(|| weak.upgrade())
        };
        loop {
            match held.map(Arc::try_unwrap) {
                None => {
                    let opened = open_retrying(open_closed);
                    if opened.is_err() {
                        // Not taken after all: readers that still reach the slot open it (and
                        // meet the error) rather than wait for a list that may not change.
                        *self.opening() = Some(Weak::new());
                    }
                    return opened;
                }
                Some(Ok(seg)) => return Ok(seg),
                Some(Err(seg)) => {
                    held = Some(seg);
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// `open`, again while the segment's files are locked by an object of it being dropped.
fn open_retrying(mut open: impl FnMut() -> Result<LogSegment>) -> Result<LogSegment> {
    let started = std::time::Instant::now();
    let mut attempts = 0;
    loop {
        match open() {
            Err(SegmentError::Locked { .. }) if started.elapsed() < LOCKED_WAIT => {
                attempts += 1;
                if attempts < LOCKED_YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            r => return r,
        }
    }
}

/// The active segment as the published list holds it.
#[derive(Debug, Clone)]
pub(super) struct ActiveRef {
    pub(super) base: i64,
    /// Its tail while it is open; `None` once released (a reader that needs its bytes has the
    /// writer open it again: [`LocalLog::open_active_for_read`]).
    pub(super) tail: Option<Arc<PublishedTail>>,
    /// Its size when it is not open.
    pub(super) closed_size: u64,
}

impl ActiveRef {
    /// The `.log`'s size as published.
    pub(super) fn size(&self) -> u64 {
        self.tail.as_ref().map_or(self.closed_size, |t| t.size())
    }
}

/// The segment list readers load ([`LocalLog`]'s `list`).
#[derive(Debug, Default)]
pub(super) struct SegmentList {
    /// Every segment but the last, ascending.
    pub(super) sealed: Vec<Arc<SealedSlot>>,
    /// The last segment; `None` when the log holds none (closed).
    pub(super) active: Option<ActiveRef>,
    /// The truncation count the list was made at: a reader that loaded another count first
    /// loads the list again (the writer is truncating).
    pub(super) truncations: u64,
    /// The log was closed.
    pub(super) closed: bool,
    /// Where the read bounds readers asked for last lie in this list's segments.
    pub(super) bound_positions: BoundPositions,
}

/// Where an offset's batch lies: the base offset of the segment holding it and the batch's byte
/// position there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BoundPosition {
    pub(super) offset: i64,
    pub(super) segment_base: i64,
    pub(super) position: u64,
}

/// The positions of the last two read bounds readers looked up in one [`SegmentList`] (Kafka
/// keeps the high watermark's and the last stable offset's `LogOffsetMetadata` for the same
/// reason): a fetch bounded by the high watermark or the last stable offset needs the byte
/// position of the batch holding it, which is in the active segment near its newest bytes
/// while a writer appends, and finding it walks batch headers there, often past the
/// segment's map, with a `pread`. A bound moves only when the writer moves it (a flush, a
/// committed transaction), so most fetches find its position here.
///
/// An entry is kept in the list it was found in: a position stays right as long as that list
/// is the published one at its truncation count (appends write after every batch the list
/// already holds; a roll, retention, the cleaner or a truncation publishes a new list, whose
/// entries start empty). A position found in an attempt that a truncation then voids is stored
/// in a list no later attempt uses (its truncation count is behind).
#[derive(Debug, Default)]
pub(super) struct BoundPositions {
    /// Most recently found first.
    recent: [ArcSwapOption<BoundPosition>; 2],
}

impl BoundPositions {
    /// The position of `offset`, if found in this list before.
    pub(super) fn get(&self, offset: i64) -> Option<BoundPosition> {
        self.recent.iter().find_map(|slot| {
            slot.load()
                .as_deref()
                .copied()
                .filter(|p| p.offset == offset)
        })
    }

    /// Keeps `found` as the most recent, the previous most recent second. Readers storing at
    /// once may each lose the other's: a later reader finds it again.
    pub(super) fn put(&self, found: BoundPosition) {
        let [first, second] = &self.recent;
        let previous = first.swap(Some(Arc::new(found)));
        if previous
            .as_deref()
            .is_some_and(|p| p.offset != found.offset)
        {
            second.store(previous);
        }
    }
}

/// One segment of a [`SegmentList`], as a reader takes it.
#[derive(Debug, Clone, Copy)]
pub(super) enum ListEntry<'a> {
    Sealed(&'a Arc<SealedSlot>),
    Active(&'a ActiveRef),
}

impl ListEntry<'_> {
    pub(super) fn base(&self) -> i64 {
        match self {
            ListEntry::Sealed(s) => s.base,
            ListEntry::Active(a) => a.base,
        }
    }
}

impl SegmentList {
    /// The list of `segments` (the last one the active segment) at truncation count
    /// `truncations`.
    pub(super) fn of(segments: &Segments, truncations: u64, closed: bool) -> SegmentList {
        let mut sealed = Vec::with_capacity(segments.len().saturating_sub(1));
        let mut active = None;
        for (&base, slot) in segments.iter() {
            match slot {
                Slot::Sealed(s) => sealed.push(Arc::clone(s)),
                Slot::Active { seg, size } => {
                    active = Some(ActiveRef {
                        base,
                        tail: seg.get().and_then(|s| s.tail().cloned()),
                        closed_size: *size,
                    })
                }
            }
        }
        SegmentList {
            sealed,
            active,
            truncations,
            closed,
            bound_positions: BoundPositions::default(),
        }
    }

    /// Whether the active segment of `segments` is the one this list holds, with the same
    /// tail (an append changes neither).
    pub(super) fn active_matches(&self, segments: &Segments) -> bool {
        let last = segments.iter().next_back();
        match (last, &self.active) {
            (None, None) => true,
            (Some((&base, Slot::Active { seg, size })), Some(a)) => {
                let tail = seg.get().and_then(|s| s.tail());
                a.base == base
                    && match (tail, &a.tail) {
                        (Some(t), Some(u)) => Arc::ptr_eq(t, u),
                        (None, None) => a.closed_size == *size,
                        _ => false,
                    }
            }
            _ => false,
        }
    }

    /// How many segments.
    pub(super) fn len(&self) -> usize {
        self.sealed.len() + usize::from(self.active.is_some())
    }

    /// Segment `i` (ascending).
    pub(super) fn get(&self, i: usize) -> Option<ListEntry<'_>> {
        match self.sealed.get(i) {
            Some(s) => Some(ListEntry::Sealed(s)),
            None if i == self.sealed.len() => self.active.as_ref().map(ListEntry::Active),
            None => None,
        }
    }

    /// The index of the segment holding `offset`: the last whose base offset is at most
    /// `offset`; `None` if every base is above it.
    pub(super) fn floor(&self, offset: i64) -> Option<usize> {
        let sealed = self.sealed.partition_point(|s| s.base <= offset);
        let active = self.active.as_ref().is_some_and(|a| a.base <= offset);
        (sealed + usize::from(active)).checked_sub(1)
    }

    /// The active segment's base and size; (0, 0) with none.
    pub(super) fn active_base_and_size(&self) -> (i64, u64) {
        self.active.as_ref().map_or((0, 0), |a| (a.base, a.size()))
    }
}

/// The writer's segment map: every change to it but the active segment's own (appends, opening
/// or closing it) marks the published list stale, to be rebuilt when the write section ends.
#[derive(Debug, Default)]
pub(super) struct Segments {
    map: BTreeMap<i64, Slot>,
    pub(super) changed: bool,
}

impl Deref for Segments {
    type Target = BTreeMap<i64, Slot>;

    fn deref(&self) -> &BTreeMap<i64, Slot> {
        &self.map
    }
}

impl Segments {
    pub(super) fn new(map: BTreeMap<i64, Slot>) -> Segments {
        Segments { map, changed: true }
    }

    pub(super) fn insert(&mut self, base: i64, slot: Slot) -> Option<Slot> {
        self.changed = true;
        self.map.insert(base, slot)
    }

    pub(super) fn remove(&mut self, base: &i64) -> Option<Slot> {
        self.changed = true;
        self.map.remove(base)
    }

    pub(super) fn take(&mut self) -> BTreeMap<i64, Slot> {
        self.changed = true;
        std::mem::take(&mut self.map)
    }

    /// The last slot, for the active segment's own changes (not a change of the list).
    pub(super) fn last_mut(&mut self) -> Option<(i64, &mut Slot)> {
        self.map.iter_mut().next_back().map(|(&b, s)| (b, s))
    }

    /// Any slot, for a change of the list (a slot replaced).
    pub(super) fn get_mut(&mut self, base: &i64) -> Option<&mut Slot> {
        self.changed = true;
        self.map.get_mut(base)
    }
}
