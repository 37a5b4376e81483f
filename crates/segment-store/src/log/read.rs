//! Reads: batches from an offset, exact reads, offsets by timestamp, aborted transactions.
//!
//! No read takes a lock the writer takes. A read loads the truncation count, the published
//! offsets and the published segment list (in that order: the writer publishes the list before
//! the offsets, so the list is at least as new as the log end the reader loaded), walks the list
//! (a sealed segment through its shared object, the active one through its published tail), and
//! starts again if the truncation count moved meanwhile, if the list was made at another count
//! (a truncation in progress), or if a sealed segment it reached was taken by the writer. Bytes
//! of the active segment are read inside the attempt, so a truncation that cut them makes it
//! start again; bytes of a sealed segment stay valid while the reader holds the segment (the
//! writer waits for it before it changes or removes one).

use std::borrow::Cow;
use std::sync::Arc;

use super::list::{BoundPosition, ListEntry, SegmentList};
use super::{ExactFetch, ExactSlice, FetchData, LocalLog};
use crate::error::{Result, SegmentError};
use crate::file_records::{whole_batches_len, TimestampAndOffset};
use crate::file_slice::FileSlice;
use crate::index::AbortedTxn;
use crate::segment::{FetchDataInfo, LogOffsetMetadata, LogSegment, PublishedTail, ReadBounds};

/// What [`LocalLog::exact_inner`] found: the answer's place, its bytes as `take` made them.
struct Exact<T> {
    fetch_offset_metadata: LogOffsetMetadata,
    data: Option<T>,
    first_entry_incomplete: bool,
    upper_bound_offset: i64,
}

/// How one attempt of a read ended.
enum Step<T> {
    Done(T),
    /// The list changed under the attempt: load it again.
    Again,
    /// The active segment is released: have the writer open it, then load the list again.
    OpenActive,
}

/// The published state one attempt reads.
struct Snapshot {
    list: arc_swap::Guard<Arc<SegmentList>>,
    log_start_offset: i64,
    log_end_offset: i64,
}

impl Snapshot {
    /// [`SegmentError::OffsetOutOfRange`] unless `offset` lies in `[log start, log end]`.
    fn check_in_range(&self, offset: i64) -> Result<()> {
        if offset > self.log_end_offset || offset < self.log_start_offset {
            return Err(self.out_of_range(offset));
        }
        Ok(())
    }

    fn out_of_range(&self, offset: i64) -> SegmentError {
        SegmentError::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        }
    }

    /// The index of the segment holding `offset`, which is in range.
    fn floor(&self, offset: i64) -> Result<usize> {
        self.list
            .floor(offset)
            .ok_or_else(|| self.out_of_range(offset))
    }
}

/// A segment a reader holds for one attempt.
#[derive(Debug, Clone)]
enum Held {
    Sealed(Arc<LogSegment>),
    Active(Arc<PublishedTail>),
}

/// Runs `$body` over the read functions of a held segment (`SegmentView`), whichever kind.
macro_rules! view {
    ($held:expr, |$v:ident| $body:expr) => {
        match $held {
            Held::Sealed(s) => {
                let $v = s.view();
                $body
            }
            Held::Active(t) => t.with_view(|$v| $body),
        }
    };
}

/// The value of a step that completed; any other ends the attempt with it.
macro_rules! done {
    ($step:expr) => {
        match $step {
            Step::Done(v) => v,
            other => return Ok(other.cast()),
        }
    };
}

impl Held {
    fn size(&self) -> u64 {
        match self {
            Held::Sealed(s) => s.size(),
            Held::Active(t) => t.size(),
        }
    }

    fn largest_timestamp(&self) -> i64 {
        match self {
            Held::Sealed(s) => s.largest_timestamp(),
            Held::Active(t) => t.largest_timestamp(),
        }
    }

    fn max_timestamp_so_far(&self) -> i64 {
        match self {
            Held::Sealed(s) => s.max_timestamp_so_far(),
            Held::Active(t) => t.snapshot().state.max_timestamp,
        }
    }

    /// The bytes `b` names, read now (a sealed segment's from its map when mapped).
    fn read_vec(&self, b: &ReadBounds) -> Result<Vec<u8>> {
        match self {
            Held::Sealed(s) => s.read_vec(b),
            Held::Active(t) => t
                .with_view(|v| v.log.slice(b.position, b.fetch_size))
                .to_vec(),
        }
    }

    /// The bytes `b` names as a slice of the `.log` that finds the offset a reader of them
    /// fetches next when asked ([`FileSlice::next_offset`]).
    fn slice(&self, b: &ReadBounds) -> FileSlice {
        view!(self, |v| v.fetch_slice(b))
    }
}

/// What [`LocalLog::read_with`] found: bounds in a sealed segment, whose bytes are borrowed
/// from its map after the attempt, or bytes already read.
enum Found {
    Sealed(Arc<LogSegment>, ReadBounds),
    Owned(FetchDataInfo<'static>),
}

/// `bytes` cut to whole batches.
fn whole_batches(bytes: Cow<'_, [u8]>) -> Cow<'_, [u8]> {
    let whole = whole_batches_len(&bytes);
    if whole == bytes.len() {
        return bytes;
    }
    match bytes {
        Cow::Borrowed(b) => Cow::Borrowed(b.get(..whole).unwrap_or_default()),
        Cow::Owned(mut v) => {
            v.truncate(whole);
            Cow::Owned(v)
        }
    }
}

impl LocalLog {
    /// Runs `attempt` over the published state until it completes with the truncation count
    /// unchanged (see the module docs).
    fn with_snapshot<T>(&self, mut attempt: impl FnMut(&Snapshot) -> Result<Step<T>>) -> Result<T> {
        let mut spins = 0u32;
        loop {
            let truncations = self.truncations();
            let log_end_offset = self.log_end_offset();
            let log_start_offset = self.log_start_offset();
            // A guard, not a clone: readers do not share a reference count to move.
            let list = self.list.load();
            if list.closed {
                return Err(SegmentError::Closed {
                    dir: self.dir.clone(),
                });
            }
            let step = if list.truncations == truncations {
                attempt(&Snapshot {
                    list,
                    log_start_offset,
                    log_end_offset,
                })
            } else {
                Ok(Step::Again)
            };
            let moved = self.truncations() != truncations;
            match step {
                Ok(Step::Done(t)) if !moved => return Ok(t),
                Err(e) if !moved => return Err(e),
                Ok(Step::OpenActive) => self.open_active_for_read()?,
                _ => {}
            }
            spins = spins.saturating_add(1);
            if spins > 16 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The segment `entry` of `list`, held for the attempt (a sealed one opened if it is not).
    fn hold(&self, list: &SegmentList, entry: ListEntry<'_>) -> Result<Step<Held>> {
        Ok(match entry {
            ListEntry::Sealed(slot) => match self.open_slot(slot)? {
                Some(seg) => Step::Done(Held::Sealed(seg)),
                None => Step::Again,
            },
            ListEntry::Active(a) => match &a.tail {
                Some(t) if t.truncations() == list.truncations => {
                    Step::Done(Held::Active(Arc::clone(t)))
                }
                Some(_) => Step::Again,
                None => Step::OpenActive,
            },
        })
    }

    /// Reads whole batches from the batch containing `start_offset`, at most `max_bytes` (at
    /// least one batch if `min_one_message`), crossing into later segments when the segment
    /// holding `start_offset` has nothing at or above it. `f` sees records borrowed from a sealed
    /// segment's map (zero-copy; the segment is held while `f` runs: a truncation into it or
    /// its removal waits for `f`, so `f` must not call a writing method of this log) or read
    /// from the active segment.
    pub fn read_with<R>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        f: impl FnOnce(FetchDataInfo<'_>) -> R,
    ) -> Result<R> {
        let found = self.with_snapshot(|snap| {
            self.find_batches(snap, start_offset, max_bytes, min_one_message)
        });
        self.trim_cache();
        Ok(match found? {
            Found::Owned(info) => f(info),
            Found::Sealed(seg, b) => {
                let records = whole_batches(seg.read_at_bounds(&b)?);
                f(FetchDataInfo {
                    fetch_offset_metadata: b.fetch_offset_metadata,
                    records,
                    first_entry_incomplete: b.first_entry_incomplete,
                })
            }
        })
    }

    /// One attempt of [`Self::read_with`].
    fn find_batches(
        &self,
        snap: &Snapshot,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
    ) -> Result<Step<Found>> {
        snap.check_in_range(start_offset)?;
        let (active_base, active_size) = snap.list.active_base_and_size();
        let at_end = FetchDataInfo {
            fetch_offset_metadata: LogOffsetMetadata {
                message_offset: snap.log_end_offset,
                segment_base_offset: active_base,
                relative_position_in_segment: active_size,
            },
            records: Cow::Borrowed(&[][..]),
            first_entry_incomplete: false,
        };
        if start_offset == snap.log_end_offset {
            return Ok(Step::Done(Found::Owned(at_end)));
        }
        for i in snap.floor(start_offset)?..snap.list.len() {
            let Some(entry) = snap.list.get(i) else { break };
            let held = done!(self.hold(&snap.list, entry)?);
            let bounds = view!(&held, |v| v.read_bounds(
                start_offset,
                max_bytes,
                None,
                min_one_message
            ))?;
            let Some(b) = bounds else {
                self.trim_cache();
                continue;
            };
            return Ok(Step::Done(match held {
                Held::Sealed(seg) => Found::Sealed(seg, b),
                Held::Active(_) => Found::Owned(FetchDataInfo {
                    fetch_offset_metadata: b.fetch_offset_metadata,
                    records: whole_batches(Cow::Owned(held.read_vec(&b)?)),
                    first_entry_incomplete: b.first_entry_incomplete,
                }),
            }));
        }
        Ok(Step::Done(Found::Owned(at_end)))
    }

    /// Kafka's `LocalLog.read` exactly, bounded by `max_offset` (the log end for a follower, the
    /// high watermark or the last stable offset for consumers): the bytes Kafka's
    /// `LogSegment.read` returns from the segment holding `start_offset` (or the next one holding
    /// a batch at or after it), stopping at the byte position of the batch holding `max_offset`,
    /// at most `max_bytes` (at least the first batch with `min_one_message`), the last batch
    /// possibly cut short. `None` when no segment holds a batch at or after `start_offset` (Kafka
    /// then answers with no records and no aborted-transaction list). The answer's
    /// `upper_bound_offset` is looked up only with `aborted_range` (Kafka's
    /// `fetchUpperBoundOffset`, an offset-index search, which Kafka makes for `read_committed`
    /// fetches only); without it, it is the fetch offset: no aborted transaction goes with the
    /// bytes. See [`ExactFetch`].
    pub fn read_exact(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
        aborted_range: bool,
    ) -> Result<Option<ExactFetch>> {
        let r = self.exact_inner(
            start_offset,
            max_bytes,
            min_one_message,
            max_offset,
            aborted_range,
            |held, b| held.read_vec(b),
        );
        self.trim_cache();
        let Some(e) = r? else {
            return Ok(None);
        };
        Ok(Some(ExactFetch {
            data: FetchData {
                fetch_offset_metadata: e.fetch_offset_metadata,
                records: e.data.unwrap_or_default(),
                first_entry_incomplete: e.first_entry_incomplete,
            },
            upper_bound_offset: e.upper_bound_offset,
        }))
    }

    /// [`Self::read_exact`] without reading the bytes: the same range of the same segment, as a
    /// [`FileSlice`](crate::FileSlice) of its `.log` (Kafka's `LogSegment.read` returns such a
    /// slice of its `FileRecords`). The slice is `None` when the answer has no bytes. See
    /// [`ExactSlice`].
    pub fn slice_exact(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
        aborted_range: bool,
    ) -> Result<Option<ExactSlice>> {
        let r = self.exact_inner(
            start_offset,
            max_bytes,
            min_one_message,
            max_offset,
            aborted_range,
            |held, b| Ok(held.slice(b)),
        );
        self.trim_cache();
        Ok(r?.map(|e| ExactSlice {
            fetch_offset_metadata: e.fetch_offset_metadata,
            slice: e.data.filter(|s| !s.is_empty()),
            first_entry_incomplete: e.first_entry_incomplete,
            upper_bound_offset: e.upper_bound_offset,
        }))
    }

    /// The one computation behind [`Self::read_exact`] and [`Self::slice_exact`]: finds the
    /// segment and the [`ReadBounds`] of Kafka's answer and has `take` turn them into its bytes
    /// (read or sliced). `data` is `None` when no segment was read (the fetch offset is at or
    /// past `max_offset`).
    fn exact_inner<T>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
        aborted_range: bool,
        mut take: impl FnMut(&Held, &ReadBounds) -> Result<T>,
    ) -> Result<Option<Exact<T>>> {
        self.with_snapshot(|snap| {
            snap.check_in_range(start_offset)?;
            let floor = snap.floor(start_offset)?;
            let bound = max_offset.min(snap.log_end_offset);
            let (bound_base, bound_position) = done!(self.offset_position(snap, bound)?);
            if start_offset >= max_offset {
                return Ok(Step::Done(Some(Exact {
                    fetch_offset_metadata: LogOffsetMetadata {
                        message_offset: start_offset,
                        segment_base_offset: bound_base,
                        relative_position_in_segment: bound_position,
                    },
                    data: None,
                    first_entry_incomplete: false,
                    upper_bound_offset: start_offset,
                })));
            }
            for i in floor..snap.list.len() {
                let Some(entry) = snap.list.get(i) else { break };
                let base = entry.base();
                let held = done!(self.hold(&snap.list, entry)?);
                let max_position = match base.cmp(&bound_base) {
                    std::cmp::Ordering::Less => held.size(),
                    std::cmp::Ordering::Equal => bound_position,
                    // Past the bound's segment: Kafka reads nothing there (`maxPositionOpt` empty).
                    std::cmp::Ordering::Greater => 0,
                };
                let bounds = view!(&held, |v| v.read_bounds(
                    start_offset,
                    max_bytes,
                    Some(max_position),
                    min_one_message
                ))?;
                let Some(b) = bounds else {
                    self.trim_cache();
                    continue;
                };
                let meta = b.fetch_offset_metadata;
                let upper_bound_offset = if aborted_range {
                    view!(&held, |v| v.fetch_upper_bound_offset(
                        meta.message_offset,
                        meta.relative_position_in_segment,
                        b.fetch_size
                    ))
                    .unwrap_or_else(|| {
                        snap.list
                            .get(i + 1)
                            .map_or(snap.log_end_offset, |e| e.base())
                    })
                } else {
                    start_offset
                };
                return Ok(Step::Done(Some(Exact {
                    fetch_offset_metadata: meta,
                    data: Some(take(&held, &b)?),
                    first_entry_incomplete: b.first_entry_incomplete,
                    upper_bound_offset,
                })));
            }
            Ok(Step::Done(None))
        })
    }

    /// Kafka's `convertToOffsetMetadataOrThrow`: the segment holding `offset` and the byte
    /// position of its batch holding it; the active segment's end for the log end offset (or an
    /// offset no batch holds). A position found is kept in the list for the next fetch with the
    /// same bound ([`super::list::BoundPositions`]), as Kafka keeps the high watermark's offset
    /// metadata.
    fn offset_position(&self, snap: &Snapshot, offset: i64) -> Result<Step<(i64, u64)>> {
        let (active_base, active_size) = snap.list.active_base_and_size();
        if offset >= snap.log_end_offset {
            return Ok(Step::Done((active_base, active_size)));
        }
        if let Some(p) = snap.list.bound_positions.get(offset) {
            return Ok(Step::Done((p.segment_base, p.position)));
        }
        let last = snap.list.len().saturating_sub(1);
        let floor = snap.list.floor(offset).unwrap_or(last);
        for i in floor..snap.list.len() {
            let Some(entry) = snap.list.get(i) else { break };
            let base = entry.base();
            let held = done!(self.hold(&snap.list, entry)?);
            if let Some(p) = view!(&held, |v| v.translate_offset(offset, 0))? {
                snap.list.bound_positions.put(BoundPosition {
                    offset,
                    segment_base: base,
                    position: p.position,
                });
                return Ok(Step::Done((base, p.position)));
            }
        }
        Ok(Step::Done((active_base, active_size)))
    }

    /// [`Self::read_with`] returning an owned copy.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
    ) -> Result<FetchData> {
        self.read_with(start_offset, max_bytes, min_one_message, |info| FetchData {
            fetch_offset_metadata: info.fetch_offset_metadata,
            records: info.records.into_owned(),
            first_entry_incomplete: info.first_entry_incomplete,
        })
    }

    /// Kafka's `fetchOffsetByTimestamp` for a real timestamp: the first record with timestamp
    /// `>= timestamp` at or after the log start offset, searching the first segment whose largest
    /// timestamp reaches it.
    pub fn fetch_offset_by_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        let r = self.with_snapshot(|snap| {
            for i in 0..snap.list.len() {
                let Some(entry) = snap.list.get(i) else { break };
                let held = done!(self.hold(&snap.list, entry)?);
                if held.largest_timestamp() >= timestamp {
                    let start = snap.log_start_offset;
                    let found = view!(&held, |v| v.find_offset_by_timestamp(timestamp, start))?;
                    return Ok(Step::Done(found));
                }
                // Segments opened only to be looked at are closed as the walk goes.
                self.trim_cache();
            }
            Ok(Step::Done(None))
        });
        self.trim_cache();
        r
    }

    /// Kafka's `MAX_TIMESTAMP` lookup (KIP-734): in the first segment with the largest
    /// max timestamp so far, the first record carrying it
    /// ([`LogSegment::offset_of_max_timestamp`](crate::LogSegment::offset_of_max_timestamp)).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        let r = self.with_snapshot(|snap| {
            let mut best: Option<(Held, i64)> = None;
            for i in 0..snap.list.len() {
                let Some(entry) = snap.list.get(i) else { break };
                let held = done!(self.hold(&snap.list, entry)?);
                let max = held.max_timestamp_so_far();
                // The first segment with the largest (Kafka keeps the first on ties).
                if best.as_ref().is_none_or(|(_, m)| max > *m) {
                    best = Some((held, max));
                }
                self.trim_cache();
            }
            Ok(Step::Done(match best {
                Some((held, _)) => view!(&held, |v| v.offset_of_max_timestamp())?,
                None => None,
            }))
        });
        self.trim_cache();
        r
    }

    /// Kafka's `LocalLog.collectAbortedTransactions`: the aborted transactions overlapping
    /// `[start_offset, upper_bound_offset)`, from the transaction indexes of the segment holding
    /// `start_offset` on (an aborted transaction is indexed in the segment holding its ABORT
    /// marker, which may be any later segment), until one says the search is complete.
    pub fn collect_aborted_txns(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>> {
        let r = self.with_snapshot(|snap| {
            let mut out = Vec::new();
            for i in snap.list.floor(start_offset).unwrap_or(0)..snap.list.len() {
                let Some(entry) = snap.list.get(i) else { break };
                let found = match done!(self.hold(&snap.list, entry)?) {
                    Held::Sealed(s) => s.collect_aborted_txns(start_offset, upper_bound_offset)?,
                    Held::Active(t) => t.collect_aborted_txns(start_offset, upper_bound_offset)?,
                };
                out.extend(found.aborted_transactions);
                if found.is_complete {
                    break;
                }
                self.trim_cache();
            }
            Ok(Step::Done(out))
        });
        self.trim_cache();
        r
    }
}

impl<T> Step<T> {
    /// A step that did not complete, as a step of another type.
    fn cast<U>(self) -> Step<U> {
        match self {
            Step::Done(_) | Step::Again => Step::Again,
            Step::OpenActive => Step::OpenActive,
        }
    }
}
