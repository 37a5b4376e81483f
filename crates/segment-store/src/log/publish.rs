//! What a partition's writer publishes to readers that take no lock: the active segment's tail
//! (its size, its offset- and time-index entries, its max timestamp so far) and the truncation
//! count that tells a reader its read may have crossed a truncation.
//!
//! # The handoff
//!
//! One writer, any number of readers, no lock between them:
//!
//! 1. The writer writes an append's bytes to the `.log` and pushes the index entries of its
//!    batches ([`ActiveTail::push_offset_entry`], [`ActiveTail::push_time_entry`]: plain
//!    stores, unpublished), then publishes a [`TailState`] ([`ActiveTail::publish`]): the size
//!    and the entry counts as of that moment, swapped in whole, so a reader never sees a size
//!    from one append and a max timestamp from another.
//! 2. A reader loads the published state ([`ActiveTail::snapshot`]) and reads only below it:
//!    bytes below `size`, entries below the counts. Everything below was written before the
//!    state was published, and the publication is a release store read with acquire.
//! 3. The entry logs are append-only: an entry, once published, never changes. A truncation of
//!    the active segment does not cut them; the writer builds a new tail holding the entries
//!    that remain ([`ActiveTail::truncated`]) and the log publishes that one. A reader of the
//!    old tail reads entries that are still as they were, but the `.log` bytes below its size
//!    may have been cut or overwritten: the writer bumps the [`TruncationCount`] before it
//!    truncates the file and makes the new tail with the new count. A reader loads the count,
//!    then the tail, and reads again unless the tail carries that count (else it may be the
//!    tail of before a truncation under way) and the count is the same after its read
//!    ([`TruncationCount::load`]).
//!
//! `tests/loom_publish.rs` model-checks this handoff with `loom`: it includes this file with
//! `loom`'s atomics in place of `std`'s (the `sync` module next to it chooses them), and
//! explores every interleaving of a writer and a reader.

use std::sync::OnceLock;

use super::sync::{fence, AtomicU64, Ordering, StateCell};

/// Entries of the first bucket of an [`EntryLog`]; bucket `b` holds `FIRST_BUCKET << b`.
pub(crate) const FIRST_BUCKET: usize = 64;
/// Buckets of an [`EntryLog`]: room for `FIRST_BUCKET * (2^BUCKETS - 1)` entries, more than any
/// index holds (a 32-bit relative offset per entry).
const BUCKETS: usize = 27;

/// An append-only log of entries of `W` words, readable without a lock below a count published
/// elsewhere. Memory grows with the entries, at most twice what they take: bucket `b` (of
/// `FIRST_BUCKET << b` entries) is allocated when the first entry reaches it.
#[derive(Debug)]
pub(crate) struct EntryLog<const W: usize> {
    buckets: [OnceLock<Box<[AtomicU64]>>; BUCKETS],
    /// Entries written (the writer's count; readers use a published one).
    written: AtomicU64,
}

impl<const W: usize> Default for EntryLog<W> {
    fn default() -> Self {
        EntryLog {
            buckets: std::array::from_fn(|_| OnceLock::new()),
            written: AtomicU64::new(0),
        }
    }
}

/// The bucket holding entry `n`, and the entry's index in it.
pub(crate) fn bucket_of(n: usize) -> (usize, usize) {
    let k = n / FIRST_BUCKET + 1;
    let b = (usize::BITS - 1 - k.leading_zeros()) as usize;
    let bucket_start = FIRST_BUCKET * ((1 << b) - 1);
    (b, n - bucket_start)
}

impl<const W: usize> EntryLog<W> {
    /// Entries written so far (the writer's own count: not a bound for readers).
    pub(crate) fn written(&self) -> usize {
        self.written.load(Ordering::Relaxed) as usize
    }

    /// Appends an entry (the writer only: one thread at a time). `false` when the log is full.
    pub(crate) fn push(&self, words: [u64; W]) -> bool {
        let n = self.written();
        let (b, i) = bucket_of(n);
        let Some(cell) = self.buckets.get(b) else {
            return false;
        };
        let bucket = cell.get_or_init(|| {
            (0..(FIRST_BUCKET << b) * W)
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        for (k, w) in words.into_iter().enumerate() {
            if let Some(slot) = bucket.get(i * W + k) {
                slot.store(w, Ordering::Relaxed);
            }
        }
        self.written.store(n as u64 + 1, Ordering::Relaxed);
        true
    }

    /// Entry `n`. Only for `n` below a count published after the entry was pushed (and loaded
    /// with acquire): anything else may read an entry still being written.
    pub(crate) fn get(&self, n: usize) -> Option<[u64; W]> {
        let (b, i) = bucket_of(n);
        let bucket = self.buckets.get(b)?.get()?;
        let mut words = [0; W];
        for (k, w) in words.iter_mut().enumerate() {
            *w = bucket.get(i * W + k)?.load(Ordering::Relaxed);
        }
        Some(words)
    }
}

/// What readers of an [`ActiveTail`] may read: published whole by the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TailState {
    /// Bytes of the `.log` holding whole batches.
    pub(crate) size: u64,
    /// Offset-index entries readable.
    pub(crate) offset_entries: usize,
    /// Time-index entries readable.
    pub(crate) time_entries: usize,
    /// The segment's max timestamp so far, and the offset of its batch.
    pub(crate) max_timestamp: i64,
    /// [`Self::max_timestamp`]'s offset.
    pub(crate) offset_of_max_timestamp: i64,
    /// Bytes of the transaction index holding whole entries.
    pub(crate) txn_bytes: u64,
}

/// The active segment as readers see it: its published state and its index entries (offset
/// index: `relative offset << 32 | position`; time index: timestamp, relative offset).
#[derive(Debug, Default)]
pub(crate) struct ActiveTail {
    /// The [`TruncationCount`] when this tail was made.
    truncations: u64,
    offsets: EntryLog<1>,
    times: EntryLog<2>,
    state: StateCell<TailState>,
}

impl ActiveTail {
    /// A tail whose state is `state` with no entries (entries pushed, then
    /// [`Self::publish`]ed), made when the [`TruncationCount`] was `truncations`.
    pub(crate) fn new(state: TailState, truncations: u64) -> ActiveTail {
        ActiveTail {
            truncations,
            offsets: EntryLog::default(),
            times: EntryLog::default(),
            state: StateCell::new(TailState {
                offset_entries: 0,
                time_entries: 0,
                ..state
            }),
        }
    }

    /// Pushes an offset-index entry, unpublished (the writer only). `false` when full.
    pub(crate) fn push_offset_entry(&self, relative_offset: u32, position: u32) -> bool {
        self.offsets
            .push([u64::from(relative_offset) << 32 | u64::from(position)])
    }

    /// Pushes a time-index entry, unpublished (the writer only). `false` when full.
    pub(crate) fn push_time_entry(&self, timestamp: i64, relative_offset: u32) -> bool {
        self.times
            .push([timestamp as u64, u64::from(relative_offset)])
    }

    /// Publishes the size and max timestamp with every entry pushed so far (the writer only,
    /// after the bytes below `size` are written).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn publish(&self, size: u64, max_timestamp: i64, offset_of_max_timestamp: i64) {
        let txn_bytes = self.state.load().txn_bytes;
        self.publish_with_txn(size, max_timestamp, offset_of_max_timestamp, txn_bytes);
    }

    /// [`Self::publish`] with the transaction index's whole entries so far (`txn_bytes`).
    pub(crate) fn publish_with_txn(
        &self,
        size: u64,
        max_timestamp: i64,
        offset_of_max_timestamp: i64,
        txn_bytes: u64,
    ) {
        self.state.store(TailState {
            size,
            offset_entries: self.offsets.written(),
            time_entries: self.times.written(),
            max_timestamp,
            offset_of_max_timestamp,
            txn_bytes,
        });
    }

    /// The [`TruncationCount`] when this tail was made: a reader that loaded another count
    /// before it loaded this tail reads again (the tail may predate a truncation in progress).
    pub(crate) fn truncations(&self) -> u64 {
        self.truncations
    }

    /// A copy of this tail cut to `offset_entries` offset-index and `time_entries` time-index
    /// entries, published as `state`: the tail a truncation publishes, made after
    /// [`TruncationCount::begin`] returned `truncations` (this one stays as it is for readers
    /// that hold it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn truncated(
        &self,
        offset_entries: usize,
        time_entries: usize,
        state: TailState,
        truncations: u64,
    ) -> ActiveTail {
        let tail = ActiveTail::new(state, truncations);
        let now = self.state.load();
        for n in 0..offset_entries.min(now.offset_entries) {
            if let Some(e) = self.offsets.get(n) {
                tail.offsets.push(e);
            }
        }
        for n in 0..time_entries.min(now.time_entries) {
            if let Some(e) = self.times.get(n) {
                tail.times.push(e);
            }
        }
        tail.publish(
            state.size,
            state.max_timestamp,
            state.offset_of_max_timestamp,
        );
        tail
    }

    /// The published state and the entries below it.
    pub(crate) fn snapshot(&self) -> TailSnapshot<'_> {
        TailSnapshot {
            state: self.state.load(),
            tail: self,
        }
    }
}

/// One published state of an [`ActiveTail`], with its entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailSnapshot<'a> {
    /// What was published.
    pub(crate) state: TailState,
    tail: &'a ActiveTail,
}

impl TailSnapshot<'_> {
    /// Offset-index entry `n` as (relative offset, position), below the published count.
    pub(crate) fn offset_entry(&self, n: usize) -> Option<(u32, u32)> {
        if n >= self.state.offset_entries {
            return None;
        }
        let [w] = self.tail.offsets.get(n)?;
        Some(((w >> 32) as u32, w as u32))
    }

    /// Time-index entry `n` as (timestamp, relative offset), below the published count.
    pub(crate) fn time_entry(&self, n: usize) -> Option<(i64, u32)> {
        if n >= self.state.time_entries {
            return None;
        }
        let [t, o] = self.tail.times.get(n)?;
        Some((t as i64, o as u32))
    }
}

/// How many times the log end moved down. The writer calls [`Self::begin`] before it cuts or
/// overwrites anything a reader may be reading, and makes the tail it then publishes with the
/// new count. A reader loads the count, then the tail, and reads again unless the tail was made
/// at that count ([`ActiveTail::truncations`]) and the count is still the same after its read.
#[derive(Debug, Default)]
pub(crate) struct TruncationCount(AtomicU64);

impl TruncationCount {
    /// Counts a truncation about to happen (the writer only) and returns the new count: every
    /// write after this call is ordered after it.
    pub(crate) fn begin(&self) -> u64 {
        let n = self.0.load(Ordering::Relaxed).wrapping_add(1);
        self.0.store(n, Ordering::Relaxed);
        fence(Ordering::Release);
        n
    }

    /// The count. The acquire fence first orders every read made before this call before the
    /// load: a read that saw a byte written after a truncation began sees the count moved.
    pub(crate) fn load(&self) -> u64 {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Acquire)
    }
}
