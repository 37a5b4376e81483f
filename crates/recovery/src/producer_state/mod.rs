//! The producer state manager (Kafka: `ProducerStateManager`, `ProducerAppendInfo`,
//! `ProducerStateEntry`, `BatchMetadata`, `TxnMetadata`, `CompletedTxn`, `AppendOrigin`).
//!
//! Rules follow `kafka-storage-format.md` §7 (transaction version 0/1 marker rules; KIP-890
//! verification state and TV2 epoch-bump markers are not modelled because a [`BatchSummary`](crate::BatchSummary)
//! carries no transaction version).
//!
//! Two layers:
//! * the low-level Kafka API: [`ProducerStateManager::prepare_update`] →
//!   [`ProducerAppendInfo::append`] → [`ProducerStateManager::update`], then for each completed
//!   transaction [`ProducerStateManager::last_stable_offset`] and
//!   [`ProducerStateManager::complete_txn`], then [`ProducerStateManager::update_map_end_offset`];
//! * [`ProducerStateManager::apply_batches`], which does all of that for a run of batches in log
//!   order, including the KIP-1279 barrier (see [`crate::barrier`]), and is all-or-nothing: on
//!   error the manager is unchanged.

mod append_info;
mod barrier;
mod entry;
mod manager;
mod replicated;
mod ring;
mod rules;
mod table;
#[cfg(test)]
mod tests;

pub use append_info::{ProducerAppendInfo, ProducerStateWarning};
pub use barrier::BarrierOutcome;
pub(crate) use entry::is_producer_expired;
pub use entry::{
    AbortedTxnRecord, BatchMetadata, CompletedTxn, ExpiredProducer, ProducerStateEntry, TxnMetadata,
};
pub use manager::{
    AppliedBatches, DuplicateBatch, ProducerStateManager, ProducerStateManagerConfig,
    ProducerStateUpdate,
};
pub use ring::BatchRing;
pub use rules::{decrement_sequence, in_sequence, increment_sequence};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// Default `producer.id.expiration.ms` (1 day).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;

/// Who is appending (Kafka `AppendOrigin`, without `RAFT_LEADER`), which decides the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppendOrigin {
    /// Produce requests: epoch and sequence checks throw; duplicates are detected.
    Client,
    /// Group/transaction/mirror coordinators: epoch and coordinator-epoch checks throw; no
    /// sequence checks.
    Coordinator,
    /// Follower fetch and log recovery/rebuild: epoch and coordinator-epoch regressions are only
    /// reported as [`ProducerStateWarning`]s.
    Replication,
}
