//! KIP-1279 `MIRROR_PID_RESET`: the one place that knows what the barrier means for producer
//! state.
//!
//! # The problem
//! A mirrored partition stores the source cluster's batches byte for byte, source producer ids
//! included. When mirroring stops and the partition becomes writable, local producers get ids from
//! the destination's own allocator, which may collide with mirrored ids. Without a reset the PSM
//! then (KIP text, "PID collision" scenarios): accepts or rejects the local producer's batches
//! against the mirrored producer's sequence numbers (same epoch: out-of-order errors, or a first
//! batch wrongly recognised as a *duplicate* and acknowledged without being written); fences it
//! or only warns, depending on origin (different epochs); and lets one producer's markers close
//! the other's transaction (transactional interleaving).
//!
//! # The rule
//! A control batch whose first record has control type 7 is the barrier. When it is met, on any
//! [`AppendOrigin`](crate::AppendOrigin) and during replay from a snapshot, every producer entry is
//! removed. After it, any producer is unknown: its first batch is accepted with any sequence and
//! any epoch.
//!
//! # Decisions (where Kafka/KIP-1279 is silent, or where we differ from the forks)
//! 1. **Strict log order.** Batches before the barrier in the same append or replay chunk are
//!    applied *before* the reset; batches after it start from empty state. The forks buffer
//!    per-producer updates of a whole chunk and apply them after the loop, so producers that
//!    appear before the barrier in the same chunk survive it (reference §0 item 2), and a recovery
//!    that reads the same bytes in differently sized chunks reaches a different state.
//!    [`ProducerStateManager::apply_batches`](crate::ProducerStateManager::apply_batches) splits
//!    its input at every barrier, so "one call", "batch by batch" and "snapshot, reload, replay"
//!    agree (property-tested).
//! 2. **Open transactions are aborted at the barrier.** The fork clears only the `producers` map,
//!    leaving `ongoingTxns`: a transaction open at the barrier could then never complete (its
//!    producer entry is gone, so a later marker completes nothing) and the LSO would stall for
//!    ever. Kafka's STOPPING writes ABORT markers before the barrier, so normally nothing is open;
//!    if something is (a log written by another tool, a propagated barrier, a truncated stop), each
//!    open transaction is completed as **aborted** with `last_offset` = the barrier's base offset,
//!    in first-offset order, each with the LSO Kafka would compute for an ABORT marker written at
//!    that offset ([`last_stable_offset`](crate::ProducerStateManager::last_stable_offset) before
//!    completing it). They are returned as [`AbortedTxnRecord`]s for the transaction index and move
//!    to the unreplicated set like any completed transaction, so the first unstable offset stays
//!    put until the high watermark passes the barrier and then advances.
//!    Consequences for other layers: (a) several barrier aborts share one `last_offset`, so the
//!    txn-index writer must accept *equal* last offsets for them (Kafka's `TransactionIndex.append`
//!    insists on strictly increasing ones; its reader does not care); (b) there is no ABORT marker
//!    batch for those producers, so a READ_COMMITTED consumer keeps the producer id in its aborted
//!    set until the end of that fetch. Real ABORT markers before the barrier remain the right way
//!    to stop; this is the safety net.
//! 3. **Unreplicated transactions are kept.** They are already decided; they only wait for the
//!    high watermark, and dropping them early would move the LSO past undecided replicas' data.
//! 4. **Detection by type alone, any producer id.** Like the forks' `isMirrorPidResetBatch`, the
//!    barrier is recognised by its control type, not by `producerId == -1`; a type-7 batch never
//!    reaches per-producer state (where Kafka would fail on it as a non-ABORT/COMMIT marker).
//! 5. **All origins.** The fork triggers on COORDINATOR and REPLICATION appends and on rebuild.
//!    Clients cannot write control batches (the log validator rejects them), so also triggering on
//!    [`Client`](crate::AppendOrigin::Client) changes nothing for valid input and keeps the rule
//!    "met ⇒ reset" without exceptions.
//! 6. **No `SourceClusterId` check.** The storage layer does not compare it with anything (nor do
//!    the forks); it is reported in [`BarrierOutcome`] for provenance. A propagated barrier
//!    (failback, chains) therefore also resets state — the fork's and the latest summary's
//!    behaviour, not the earlier "inert" wording.
//! 7. **Map end offset** advances past the barrier (it has no producer id, but it is in the log).

use super::{AbortedTxnRecord, CompletedTxn, ProducerStateManager};
use crate::summary::{BatchSummary, ControlInfo};

/// What applying one barrier did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierOutcome {
    /// Base offset of the barrier batch.
    pub offset: i64,
    /// `SourceClusterId` of the barrier record.
    pub source_cluster_id: String,
    /// How many producer entries were removed.
    pub producers_removed: usize,
    /// Transactions that were still open, aborted at `offset`, in first-offset order.
    pub aborted_txns: Vec<AbortedTxnRecord>,
}

impl ProducerStateManager {
    /// Applies a `MIRROR_PID_RESET` barrier at `barrier.base_offset` (see the module docs):
    /// aborts open transactions at the barrier, removes every producer, and moves the map end
    /// offset past the barrier. Callers using the low-level API must first `update` every pending
    /// [`ProducerAppendInfo`](crate::ProducerAppendInfo) for batches before the barrier.
    pub fn apply_barrier(&mut self, barrier: &BatchSummary) -> BarrierOutcome {
        let offset = barrier.base_offset;
        let source_cluster_id = match &barrier.control {
            Some(ControlInfo::MirrorPidReset { source_cluster_id }) => source_cluster_id.clone(),
            _ => String::new(),
        };
        let mut aborted_txns = Vec::new();
        while let Some((&first_offset, txn)) = self.ongoing_txns.iter().next() {
            let completed = CompletedTxn {
                producer_id: txn.producer_id,
                first_offset,
                last_offset: offset,
                is_aborted: true,
            };
            let last_stable_offset = self.last_stable_offset(&completed);
            if self.complete_txn(&completed).is_err() {
                // Unreachable: `first_offset` was just read from `ongoing_txns`.
                break;
            }
            aborted_txns.push(AbortedTxnRecord {
                producer_id: completed.producer_id,
                first_offset,
                last_offset: offset,
                last_stable_offset,
            });
        }
        let producers_removed = self.producers.len();
        self.producers.clear();
        self.update_map_end_offset(barrier.last_offset.max(offset).saturating_add(1));
        BarrierOutcome {
            offset,
            source_cluster_id,
            producers_removed,
            aborted_txns,
        }
    }
}
