//! Kafka's `CleanedTransactionMetadata`: while the cleaner walks batches in offset order, which
//! transactions are aborted (their data batches are removed), which markers may go (their
//! transaction left no data behind), and which aborted transactions the cleaned segment's
//! `.txnindex` must keep.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use record_format::ControlRecordType;
use segment_store::AbortedTxn;

/// An aborted transaction by first offset, smallest first out of the heap.
#[derive(Debug, PartialEq, Eq)]
struct ByFirstOffset(AbortedTxn);

impl Ord for ByFirstOffset {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.first_offset.cmp(&self.0.first_offset)
    }
}

impl PartialOrd for ByFirstOffset {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug)]
struct OngoingAborted {
    txn: AbortedTxn,
    last_observed_batch_offset: Option<i64>,
}

/// The transaction state of one walk over batches.
#[derive(Debug, Default)]
pub struct CleanedTransactionMetadata {
    ongoing_committed: BTreeSet<i64>,
    ongoing_aborted: BTreeMap<i64, OngoingAborted>,
    aborted: BinaryHeap<ByFirstOffset>,
    /// Aborted transactions whose marker is kept, for the cleaned segment's `.txnindex`.
    pub retained_aborted: Vec<AbortedTxn>,
}

impl CleanedTransactionMetadata {
    /// Adds aborted transactions read from the `.txnindex` files.
    pub fn add_aborted_transactions(&mut self, txns: impl IntoIterator<Item = AbortedTxn>) {
        self.aborted.extend(txns.into_iter().map(ByFirstOffset));
    }

    fn consume_aborted_up_to(&mut self, offset: i64) {
        while self
            .aborted
            .peek()
            .is_some_and(|t| t.0.first_offset <= offset)
        {
            if let Some(ByFirstOffset(t)) = self.aborted.pop() {
                self.ongoing_aborted
                    .entry(t.producer_id)
                    .or_insert(OngoingAborted {
                        txn: t,
                        last_observed_batch_offset: None,
                    });
            }
        }
    }

    /// A control batch read: whether it may be discarded (its transaction left no data).
    /// `first` is the type of its first record, `None` for a control batch emptied by an
    /// earlier cleaning.
    pub fn on_control_batch_read(
        &mut self,
        last_offset: i64,
        producer_id: i64,
        first: Option<ControlRecordType>,
    ) -> bool {
        self.consume_aborted_up_to(last_offset);
        match first {
            None => true,
            Some(ControlRecordType::Abort) => match self.ongoing_aborted.remove(&producer_id) {
                Some(a) if a.last_observed_batch_offset.is_some() => {
                    self.retained_aborted.push(a.txn);
                    false
                }
                _ => true,
            },
            Some(ControlRecordType::Commit) => !self.ongoing_committed.remove(&producer_id),
            Some(_) => false,
        }
    }

    /// A data batch read: whether it belongs to an aborted transaction.
    pub fn on_batch_read(
        &mut self,
        last_offset: i64,
        producer_id: i64,
        transactional: bool,
    ) -> bool {
        self.consume_aborted_up_to(last_offset);
        if !transactional {
            return false;
        }
        match self.ongoing_aborted.get_mut(&producer_id) {
            Some(a) => {
                a.last_observed_batch_offset = Some(last_offset);
                true
            }
            None => {
                self.ongoing_committed.insert(producer_id);
                false
            }
        }
    }
}
