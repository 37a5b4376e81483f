//! The active segment's tail as readers without a lock see it (`log/publish.rs`): the segment
//! holds the [`PublishedTail`] it last published and pushes each append's index entries into
//! it; a reader reads the `.log` through its shared handle up to the published size.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::view::SegmentView;
use super::LogSegment;
use crate::error::Result;
use crate::file_records::{FileRecords, SharedMap};
use crate::index::txn::collect_aborted_in;
use crate::index::TimestampOffset;
use crate::index::TxnIndexSearchResult;
use crate::index::{offset_entry, time_entry, OffsetEntries, OffsetPosition, TimeEntries};
use crate::io::FileHandle;
use crate::log::publish::{ActiveTail, TailSnapshot, TailState};

/// An active segment's tail with what a reader needs beside it: the base offset and the
/// `.log`'s shared handle.
#[derive(Debug)]
pub(crate) struct PublishedTail {
    base_offset: i64,
    /// [`LogSegment::created_ms`] (a change makes a new tail: [`LogSegment::become_active`]).
    created_ms: i64,
    log: Arc<dyn FileHandle>,
    /// The writer's read-only map of the `.log`'s first bytes (`FileRecords::refresh_tail_map`),
    /// read through its gate; swapped when the writer maps the grown file again.
    map: ArcSwapOption<SharedMap>,
    tail: ActiveTail,
    /// The transaction index, read up to the published `txn_bytes`; `None` while it has no file.
    txn: Option<Arc<dyn FileHandle>>,
    txn_path: std::path::PathBuf,
}

impl PublishedTail {
    /// The entries and state the writer pushes and publishes.
    pub(super) fn active(&self) -> &ActiveTail {
        &self.tail
    }

    /// [`ActiveTail::truncations`].
    pub(crate) fn truncations(&self) -> u64 {
        self.tail.truncations()
    }

    /// Kafka's `largestTimestamp` of the segment as published: the max timestamp so far if
    /// known, else the segment's creation time ([`LogSegment::largest_timestamp`]).
    pub(crate) fn largest_timestamp(&self) -> i64 {
        let max = self.tail.snapshot().state.max_timestamp;
        if max >= 0 {
            max
        } else {
            self.created_ms
        }
    }

    /// Kafka's `collectAbortedTxns` over the published transaction-index entries (as
    /// [`crate::TransactionIndex::collect_aborted_txns`]).
    pub(crate) fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<TxnIndexSearchResult> {
        let Some(h) = &self.txn else {
            return Ok(TxnIndexSearchResult {
                aborted_transactions: Vec::new(),
                is_complete: false,
            });
        };
        let end = self.tail.snapshot().state.txn_bytes;
        collect_aborted_in(
            h.as_ref(),
            end,
            &self.txn_path,
            fetch_offset,
            upper_bound_offset,
        )
    }

    /// The published size of the `.log`.
    pub(crate) fn size(&self) -> u64 {
        self.tail.snapshot().state.size
    }

    /// [`ActiveTail::snapshot`].
    pub(crate) fn snapshot(&self) -> TailSnapshot<'_> {
        self.tail.snapshot()
    }

    /// Runs `f` over one published state of the tail: the `.log` up to the published size, the
    /// index entries below the published counts, the published max timestamp.
    pub(crate) fn with_view<R>(
        &self,
        f: impl FnOnce(SegmentView<'_, TailIndex<'_>, TailIndex<'_>>) -> R,
    ) -> R {
        let snapshot = self.tail.snapshot();
        let index = TailIndex::new(self.base_offset, snapshot);
        let log = FileRecords::shared(
            Arc::clone(&self.log),
            snapshot.state.size,
            self.map.load_full(),
        );
        f(SegmentView {
            base_offset: self.base_offset,
            log: &log,
            offsets: &index,
            times: &index,
            max_timestamp_so_far: TimestampOffset {
                timestamp: snapshot.state.max_timestamp,
                offset: snapshot.state.offset_of_max_timestamp,
            },
        })
    }
}

impl LogSegment {
    /// Publishes this segment as the active one: a new [`ActiveTail`] holding its offset- and
    /// time-index entries, its size and max timestamp, made at truncation count `truncations`.
    /// Appends then push their entries into it and publish it again.
    pub(crate) fn publish_tail(&mut self, truncations: u64) -> Arc<PublishedTail> {
        let tail = ActiveTail::new(TailState::default(), truncations);
        for e in (0..self.offset_index.entries()).filter_map(|n| self.offset_index.entry(n)) {
            tail.push_offset_entry(self.relative(e.offset), e.position.0);
        }
        for e in (0..self.time_index.entries()).filter_map(|n| self.time_index.entry(n)) {
            tail.push_time_entry(e.timestamp, self.relative(e.offset));
        }
        let txn = self.txn_index.shared_handle().cloned();
        self.remap_log_if_due();
        let tail = Arc::new(PublishedTail {
            base_offset: self.base_offset,
            created_ms: self.created_ms,
            log: Arc::clone(self.log.handle()),
            map: ArcSwapOption::new(self.log.tail_map()),
            tail,
            txn,
            txn_path: self.txn_index.path().to_path_buf(),
        });
        self.tail = Some(Arc::clone(&tail));
        self.publish_state();
        tail
    }

    /// If the segment publishes a tail: a new one (of the same truncation count) after its
    /// indexes or `.log` were cut or rebuilt. A tail's entries never shrink: readers holding the
    /// old one read on, and their truncation count says whether what they read still holds.
    pub(super) fn republish_tail(&mut self) {
        if let Some(truncations) = self.tail.as_ref().map(|t| t.truncations()) {
            self.publish_tail(truncations);
        }
    }

    /// The tail this segment publishes to, while it is the active one.
    pub(crate) fn tail(&self) -> Option<&Arc<PublishedTail>> {
        self.tail.as_ref()
    }

    /// Publishes the transaction index's entries after an append to it: a new tail if the
    /// index file was created by it (the tail holds its handle), else the new length.
    pub(super) fn publish_txn_index(&mut self) {
        let Some(tail) = &self.tail else { return };
        if tail.txn.is_none() && self.txn_index.shared_handle().is_some() {
            self.republish_tail();
        } else {
            self.publish_state();
        }
    }

    /// Maps the grown `.log` again for readers of the tail when it has grown enough
    /// (`FileRecords::refresh_tail_map`), and publishes the map.
    pub(super) fn refresh_tail_map(&mut self) {
        if self.tail.is_some() && self.remap_log_if_due() {
            if let Some(tail) = &self.tail {
                tail.map.store(self.log.tail_map());
            }
        }
    }

    /// `FileRecords::refresh_tail_map` where the storage maps files and the `.log` has grown
    /// enough: whether the map changed.
    fn remap_log_if_due(&mut self) -> bool {
        self.log.tail_map_due()
            && self.ctx.storage.supports_mmap()
            && self.log.refresh_tail_map(&self.ctx.lock)
    }

    /// Publishes the size and max timestamp with the entries pushed so far.
    pub(super) fn publish_state(&self) {
        if let Some(tail) = &self.tail {
            tail.active().publish_with_txn(
                self.size(),
                self.max_timestamp_so_far.timestamp,
                self.max_timestamp_so_far.offset,
                self.txn_index.whole_entries_len(),
            );
        }
    }

    /// `offset` relative to the base offset, as the indexes hold it (their entries fit 32 bits).
    pub(super) fn relative(&self, offset: i64) -> u32 {
        u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX)
    }
}

/// One published state of an active segment's tail as the index searches see it
/// ([`crate::index::lookup`] and the others answer over it as over the mapped indexes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailIndex<'a> {
    base_offset: i64,
    snapshot: TailSnapshot<'a>,
}

impl<'a> TailIndex<'a> {
    /// The entries of `snapshot`, of the segment at `base_offset`.
    pub(crate) fn new(base_offset: i64, snapshot: TailSnapshot<'a>) -> TailIndex<'a> {
        TailIndex {
            base_offset,
            snapshot,
        }
    }

    /// What was published.
    #[cfg(test)]
    pub(crate) fn state(&self) -> TailState {
        self.snapshot.state
    }
}

impl OffsetEntries for TailIndex<'_> {
    fn base_offset(&self) -> i64 {
        self.base_offset
    }
    fn entries(&self) -> usize {
        self.snapshot.state.offset_entries
    }
    fn entry(&self, n: usize) -> Option<OffsetPosition> {
        let (relative, position) = self.snapshot.offset_entry(n)?;
        Some(offset_entry(self.base_offset, relative, position))
    }
}

impl TimeEntries for TailIndex<'_> {
    fn base_offset(&self) -> i64 {
        self.base_offset
    }
    fn entries(&self) -> usize {
        self.snapshot.state.time_entries
    }
    fn entry(&self, n: usize) -> Option<TimestampOffset> {
        let (timestamp, relative) = self.snapshot.time_entry(n)?;
        Some(time_entry(self.base_offset, timestamp, relative))
    }
}
