//! Producer-id collision audit: what `seglog producers --audit` prints.
//!
//! Reads [`BatchSummary`]s in log order and reports where the log shows what KIP-1279 calls a PID
//! collision: two unrelated producers writing under one producer id, which Kafka's producer state
//! manager accepts without an error when the batches arrive by replication (KIP text, "PID
//! collision" scenarios 1–3; `docs/barrier.md`). The audit keeps, per producer id, roughly what
//! the PSM keeps (epoch, last sequence, the last five batches, the open transaction) and reports
//! each check that Kafka would fail or only warn about:
//!
//! | finding | seen when | severity |
//! |---|---|---|
//! | [`EpochWentBackwards`](AuditKind::EpochWentBackwards) | a batch or marker with a lower epoch than the last one | error |
//! | [`NewEpochSequenceNotZero`](AuditKind::NewEpochSequenceNotZero) | a data batch bumps the epoch but does not start at sequence 0 | error |
//! | [`SequenceRestart`](AuditKind::SequenceRestart) | same epoch, sequence back to 0 after a non-zero one | error |
//! | [`SequenceGap`](AuditKind::SequenceGap) | same epoch, sequence is not last + 1 | error backwards, warning forwards (compaction removes whole batches) |
//! | [`Duplicate`](AuditKind::Duplicate) | same epoch and sequences as one of the last five batches (the client path would answer it as a duplicate *without writing it*) | error |
//! | [`TxnClosedByLowerEpoch`](AuditKind::TxnClosedByLowerEpoch) | a COMMIT/ABORT with an epoch below the epoch that opened the transaction it closes | error |
//! | [`NonTransactionalInTxn`](AuditKind::NonTransactionalInTxn) | a non-transactional batch while the id's transaction is open | error |
//! | [`NewEpochInOpenTxn`](AuditKind::NewEpochInOpenTxn) | a transactional batch with a higher epoch while a transaction opened in a lower epoch is open, no marker or barrier in between (the PSM merges them: the new epoch's marker closes both) | error |
//! | [`MarkerWithoutOpenTxn`](AuditKind::MarkerWithoutOpenTxn) | a COMMIT/ABORT for a known id with no open transaction | warning (legal if the transaction added the partition but wrote nothing to it) |
//! | [`OpenTxnAtBarrier`](AuditKind::OpenTxnAtBarrier) | a transaction still open at a `MIRROR_PID_RESET` barrier (the barrier aborts it) | warning |
//! | [`PidReusedAcrossBarrier`](AuditKind::PidReusedAcrossBarrier) | an id seen before a barrier appears again after it: the situation the barrier makes safe | info |
//!
//! A barrier resets all tracking, as it resets the PSM, so a correct failover (truncate to the LSO,
//! barrier, local producers) produces only the informational reuse findings. Each batch produces
//! at most one finding about its own producer (the first check that fails, in the table's
//! order), plus possibly a reuse finding. Producers first seen mid-stream are taken as they are
//! (their earlier batches may have been deleted), as Kafka accepts an unknown producer with any
//! sequence.

use std::collections::BTreeMap;
use std::fmt;

use rustc_hash::FxHashMap;

use crate::producer_state::increment_sequence;
use crate::producer_state::BatchRing;
use crate::summary::{BatchSummary, ControlInfo};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Two producers (or a corrupted producer) under one id.
    Error,
    /// Unusual, but a correct log can show it.
    Warning,
    /// Expected after a failover; reported for provenance.
    Info,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
        })
    }
}

/// One audit finding: the batch that showed it, the producer id concerned, and what was found.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuditFinding {
    /// The base offset of the batch (or marker, or barrier) that showed the finding.
    pub offset: i64,
    /// The producer id concerned.
    pub producer_id: i64,
    /// What was found.
    pub kind: AuditKind,
}

/// What an [`AuditFinding`] found. `previous_offset` is the last offset of the producer id's
/// previous batch or marker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AuditKind {
    /// Epoch lower than the producer's last epoch (Kafka: `InvalidProducerEpochException`, or
    /// only a warning for replicated batches).
    EpochWentBackwards {
        /// Its epoch.
        epoch: i16,
        /// The producer's epoch before it.
        previous_epoch: i16,
        /// Last offset of the producer's previous batch.
        previous_offset: i64,
    },
    /// A data batch with a higher epoch whose first sequence is not 0.
    NewEpochSequenceNotZero {
        /// Its (new) epoch.
        epoch: i16,
        /// The producer's epoch before it.
        previous_epoch: i16,
        /// The batch's first sequence.
        first_sequence: i32,
        /// Last offset of the producer's previous batch.
        previous_offset: i64,
    },
    /// Same epoch, first sequence 0 after a batch ending at a non-zero sequence.
    SequenceRestart {
        /// The epoch.
        epoch: i16,
        /// Last sequence of the previous batch.
        previous_sequence: i32,
        /// Last offset of the producer's previous batch.
        previous_offset: i64,
    },
    /// Same epoch, first sequence neither the expected one nor 0.
    SequenceGap {
        /// The epoch.
        epoch: i16,
        /// The batch's first sequence.
        first_sequence: i32,
        /// Previous last sequence + 1 (0 if the epoch has no batch yet).
        expected_sequence: i32,
        /// Last offset of the producer's previous batch.
        previous_offset: i64,
    },
    /// Same epoch and the same first and last sequence as a cached batch (Kafka's
    /// `findDuplicateBatch`).
    Duplicate {
        /// The epoch.
        epoch: i16,
        /// First sequence.
        first_sequence: i32,
        /// Last sequence.
        last_sequence: i32,
        /// Base offset of the earlier batch it duplicates.
        original_offset: i64,
    },
    /// A COMMIT/ABORT whose epoch is below the epoch of the batch that opened the transaction it
    /// closes: one producer's marker closing another producer's transaction.
    TxnClosedByLowerEpoch {
        /// COMMIT (`true`) or ABORT.
        commit: bool,
        /// The marker's epoch.
        marker_epoch: i16,
        /// First offset of the transaction.
        txn_first_offset: i64,
        /// Epoch of the batch that opened it.
        txn_epoch: i16,
    },
    /// A non-transactional batch while the producer's transaction is open (Kafka:
    /// `InvalidTxnStateException`).
    NonTransactionalInTxn {
        /// First offset of the open transaction.
        txn_first_offset: i64,
    },
    /// A transactional batch with a higher epoch than the one that opened the producer's still
    /// open transaction, with no marker or barrier in between. Kafka's PSM accepts a higher
    /// epoch for replicated batches and keeps the open transaction's first offset, so the two
    /// become one transaction and the new epoch's COMMIT/ABORT decides the old epoch's records
    /// too (KIP-1279 PID collision scenario 3 with a higher local epoch). A correct producer
    /// never does this: an epoch bump ends the open transaction with a marker first.
    NewEpochInOpenTxn {
        /// The batch's epoch.
        epoch: i16,
        /// First offset of the open transaction.
        txn_first_offset: i64,
        /// Epoch of the batch that opened it.
        txn_epoch: i16,
    },
    /// A COMMIT/ABORT for a producer with no open transaction.
    MarkerWithoutOpenTxn {
        /// The marker's epoch.
        epoch: i16,
        /// COMMIT (`true`) or ABORT.
        commit: bool,
        /// Last offset of the producer's previous batch.
        previous_offset: i64,
    },
    /// A transaction still open when a barrier arrives; the barrier aborts it.
    OpenTxnAtBarrier {
        /// First offset of the transaction.
        txn_first_offset: i64,
    },
    /// A producer id seen before a barrier and again after it (informational).
    PidReusedAcrossBarrier {
        /// The latest barrier before `offset`.
        barrier_offset: i64,
        /// Last offset of the id's last batch before that barrier.
        previous_offset: i64,
    },
}

impl AuditFinding {
    /// How serious it is (see the module table).
    pub fn severity(&self) -> Severity {
        self.kind.severity()
    }
}

impl AuditKind {
    /// How serious it is (see the module table).
    pub fn severity(&self) -> Severity {
        match self {
            Self::SequenceGap {
                first_sequence,
                expected_sequence,
                ..
            } if first_sequence > expected_sequence => Severity::Warning,
            Self::MarkerWithoutOpenTxn { .. } | Self::OpenTxnAtBarrier { .. } => Severity::Warning,
            Self::PidReusedAcrossBarrier { .. } => Severity::Info,
            _ => Severity::Error,
        }
    }
}

fn marker_name(commit: bool) -> &'static str {
    if commit {
        "COMMIT"
    } else {
        "ABORT"
    }
}

impl fmt::Display for AuditFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offset {}: producerId {} {}",
            self.offset, self.producer_id, self.kind
        )
    }
}

/// The text after "offset N: producerId P ".
impl fmt::Display for AuditKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EpochWentBackwards { .. }
            | Self::NewEpochSequenceNotZero { .. }
            | Self::SequenceRestart { .. }
            | Self::SequenceGap { .. }
            | Self::Duplicate { .. } => self.fmt_sequence_finding(f),
            Self::TxnClosedByLowerEpoch { .. }
            | Self::NonTransactionalInTxn { .. }
            | Self::NewEpochInOpenTxn { .. }
            | Self::MarkerWithoutOpenTxn { .. }
            | Self::OpenTxnAtBarrier { .. }
            | Self::PidReusedAcrossBarrier { .. } => self.fmt_txn_finding(f),
        }
    }
}

impl AuditKind {
    /// The epoch and sequence findings.
    fn fmt_sequence_finding(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EpochWentBackwards {
                epoch,
                previous_epoch,
                previous_offset,
                ..
            } => write!(
                f,
                "epoch went backwards {previous_epoch} -> {epoch} (last seen at offset \
                 {previous_offset})"
            ),
            Self::NewEpochSequenceNotZero {
                epoch,
                previous_epoch,
                first_sequence,
                previous_offset,
                ..
            } => write!(
                f,
                "new epoch {epoch} (was {previous_epoch}) starts at sequence {first_sequence}, \
                 not 0 (last seen at offset {previous_offset})"
            ),
            Self::SequenceRestart {
                epoch,
                previous_sequence,
                previous_offset,
                ..
            } => write!(
                f,
                "epoch {epoch} sequence restarted at 0 after {previous_sequence} (last seen at \
                 offset {previous_offset})"
            ),
            Self::SequenceGap {
                epoch,
                first_sequence,
                expected_sequence,
                previous_offset,
                ..
            } => write!(
                f,
                "epoch {epoch} sequence {first_sequence}, expected {expected_sequence} (last \
                 seen at offset {previous_offset})"
            ),
            Self::Duplicate {
                epoch,
                first_sequence,
                last_sequence,
                original_offset,
                ..
            } => write!(
                f,
                "epoch {epoch} sequences {first_sequence}..{last_sequence} duplicate the batch \
                 at offset {original_offset}"
            ),
            // `Display::fmt` sends only the variants above here.
            other => fmt::Debug::fmt(other, f),
        }
    }

    /// The transaction and barrier findings.
    fn fmt_txn_finding(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TxnClosedByLowerEpoch {
                commit,
                marker_epoch,
                txn_first_offset,
                txn_epoch,
                ..
            } => write!(
                f,
                "{} marker with epoch {marker_epoch} closes the transaction opened at offset \
                 {txn_first_offset} with epoch {txn_epoch}",
                marker_name(*commit)
            ),
            Self::NonTransactionalInTxn {
                txn_first_offset, ..
            } => write!(
                f,
                "non-transactional batch inside its transaction open since offset \
                 {txn_first_offset}"
            ),
            Self::NewEpochInOpenTxn {
                epoch,
                txn_first_offset,
                txn_epoch,
                ..
            } => write!(
                f,
                "epoch {epoch} writes into the transaction opened at offset {txn_first_offset} \
                 with epoch {txn_epoch}, no marker in between"
            ),
            Self::MarkerWithoutOpenTxn {
                epoch,
                commit,
                previous_offset,
                ..
            } => write!(
                f,
                "{} marker (epoch {epoch}) but no open transaction (last seen at offset \
                 {previous_offset})",
                marker_name(*commit)
            ),
            Self::OpenTxnAtBarrier {
                txn_first_offset, ..
            } => write!(
                f,
                "transaction open since offset {txn_first_offset} is still open at the \
                 MIRROR_PID_RESET barrier"
            ),
            Self::PidReusedAcrossBarrier {
                barrier_offset,
                previous_offset,
                ..
            } => write!(
                f,
                "reused across the MIRROR_PID_RESET barrier at offset {barrier_offset} (last \
                 seen before it at offset {previous_offset})"
            ),
            // `Display::fmt` sends only the variants above here.
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// A cached data batch (like Kafka's `BatchMetadata`).
#[derive(Debug, Clone, Copy, Default)]
struct Cached {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
}

/// What the audit remembers of one producer id since the last barrier.
#[derive(Debug, Clone)]
struct Track {
    epoch: i16,
    /// Last sequence of the last data batch in `epoch` (`None` after a marker bumped the epoch).
    last_sequence: Option<i32>,
    /// Last offset of the id's last batch or marker.
    last_offset: i64,
    /// The last [`crate::producer_state::NUM_BATCHES_TO_RETAIN`] data batches of `epoch`.
    cache: BatchRing<Cached>,
    /// First offset and epoch of the open transaction.
    open_txn: Option<(i64, i16)>,
}

impl Track {
    fn new(epoch: i16) -> Self {
        Self {
            epoch,
            last_sequence: None,
            last_offset: -1,
            cache: BatchRing::new(),
            open_txn: None,
        }
    }

    /// Takes a data batch in, as the PSM does for replicated batches: it is in the log, so it
    /// wins (epoch, sequence, cache, transaction).
    fn record_data(&mut self, batch: &BatchSummary) {
        self.set_epoch(batch.producer_epoch);
        if batch.is_transactional && self.open_txn.is_none() {
            self.open_txn = Some((batch.base_offset, batch.producer_epoch));
        }
        self.cache.push(Cached {
            first_sequence: batch.base_sequence,
            last_sequence: batch.last_sequence,
            base_offset: batch.base_offset,
        });
        self.last_sequence = Some(batch.last_sequence);
        self.last_offset = batch.last_offset;
    }

    fn set_epoch(&mut self, epoch: i16) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.cache.clear();
            self.last_sequence = None;
        }
    }
}

/// The audit over a stream of batches in log order.
#[derive(Debug, Clone, Default)]
pub struct ProducerAudit {
    /// By producer id. Looked up for every batch: a hash map, as a B-tree of a dozen interleaved
    /// producers mispredicts its way down for each one.
    tracks: FxHashMap<i64, Track>,
    /// Ids seen before the latest barrier and not since: their last offset before it.
    before_barrier: BTreeMap<i64, i64>,
    last_barrier: Option<i64>,
    findings: Vec<AuditFinding>,
}

impl ProducerAudit {
    /// An audit that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Audits the next batch in log order; returns the findings it produced.
    pub fn observe(&mut self, batch: &BatchSummary) -> &[AuditFinding] {
        let start = self.findings.len();
        if batch.is_mirror_pid_reset() {
            self.barrier(batch.base_offset);
        } else if batch.has_producer_id() {
            if batch.is_control {
                if let Some(ControlInfo::EndTxn { commit, .. }) = batch.control {
                    self.marker(batch, commit);
                }
                // Empty control batches are no-ops for producer state; other control types with
                // a producer id are the PSM's business (it refuses them).
            } else {
                self.data(batch);
            }
        }
        self.findings.get(start..).unwrap_or_default()
    }

    /// Everything found so far, in log order.
    pub fn findings(&self) -> &[AuditFinding] {
        &self.findings
    }

    /// Ends the audit.
    pub fn into_findings(self) -> Vec<AuditFinding> {
        self.findings
    }

    fn barrier(&mut self, offset: i64) {
        // In producer-id order, so that the findings come out the same on every run.
        let mut tracks: Vec<(i64, Track)> = self.tracks.drain().collect();
        tracks.sort_unstable_by_key(|(producer_id, _)| *producer_id);
        for (producer_id, track) in tracks {
            if let Some((txn_first_offset, _)) = track.open_txn {
                self.findings.push(AuditFinding {
                    offset,
                    producer_id,
                    kind: AuditKind::OpenTxnAtBarrier { txn_first_offset },
                });
            }
            self.before_barrier.insert(producer_id, track.last_offset);
        }
        self.last_barrier = Some(offset);
    }

    /// An id seen for the first time since the latest barrier: was it used before it?
    fn check_reuse(&mut self, batch: &BatchSummary) {
        let producer_id = batch.producer_id;
        // No barrier yet, or every id seen before it already checked: nothing to find.
        if self.before_barrier.is_empty() {
            return;
        }
        if let (Some(previous_offset), Some(barrier_offset)) =
            (self.before_barrier.remove(&producer_id), self.last_barrier)
        {
            self.findings.push(AuditFinding {
                offset: batch.base_offset,
                producer_id,
                kind: AuditKind::PidReusedAcrossBarrier {
                    barrier_offset,
                    previous_offset,
                },
            });
        }
    }

    fn data(&mut self, batch: &BatchSummary) {
        let producer_id = batch.producer_id;
        let offset = batch.base_offset;
        let epoch = batch.producer_epoch;
        let first = batch.base_sequence;
        let Some(track) = self.tracks.get_mut(&producer_id) else {
            // First sight of the id (in the stream or since the barrier): taken as it is.
            self.check_reuse(batch);
            let mut track = Track::new(epoch);
            track.record_data(batch);
            self.tracks.insert(producer_id, track);
            return;
        };
        let previous_offset = track.last_offset;
        let finding = if epoch < track.epoch {
            Some(AuditFinding {
                offset,
                producer_id,
                kind: AuditKind::EpochWentBackwards {
                    epoch,
                    previous_epoch: track.epoch,
                    previous_offset,
                },
            })
        } else if epoch > track.epoch {
            (first != 0).then_some(AuditFinding {
                offset,
                producer_id,
                kind: AuditKind::NewEpochSequenceNotZero {
                    epoch,
                    previous_epoch: track.epoch,
                    first_sequence: first,
                    previous_offset,
                },
            })
        } else {
            let expected = track
                .last_sequence
                .map_or(0, |last| increment_sequence(last, 1));
            if first == expected {
                None
            } else {
                // Searched only for an out-of-sequence batch (the common case is in sequence).
                let duplicate = track
                    .cache
                    .iter()
                    .find(|c| c.first_sequence == first && c.last_sequence == batch.last_sequence);
                match (duplicate, track.last_sequence) {
                    (Some(original), _) => Some(AuditFinding {
                        offset,
                        producer_id,
                        kind: AuditKind::Duplicate {
                            epoch,
                            first_sequence: first,
                            last_sequence: batch.last_sequence,
                            original_offset: original.base_offset,
                        },
                    }),
                    (None, Some(previous_sequence)) if first == 0 => Some(AuditFinding {
                        offset,
                        producer_id,
                        kind: AuditKind::SequenceRestart {
                            epoch,
                            previous_sequence,
                            previous_offset,
                        },
                    }),
                    (None, _) => Some(AuditFinding {
                        offset,
                        producer_id,
                        kind: AuditKind::SequenceGap {
                            epoch,
                            first_sequence: first,
                            expected_sequence: expected,
                            previous_offset,
                        },
                    }),
                }
            }
        };
        let txn_finding = match track.open_txn {
            Some((txn_first_offset, _)) if !batch.is_transactional => Some(AuditFinding {
                offset,
                producer_id,
                kind: AuditKind::NonTransactionalInTxn { txn_first_offset },
            }),
            Some((txn_first_offset, txn_epoch)) if epoch > txn_epoch => Some(AuditFinding {
                offset,
                producer_id,
                kind: AuditKind::NewEpochInOpenTxn {
                    epoch,
                    txn_first_offset,
                    txn_epoch,
                },
            }),
            _ => None,
        };
        let finding = finding.or(txn_finding);
        track.record_data(batch);
        self.findings.extend(finding);
    }

    fn marker(&mut self, batch: &BatchSummary, commit: bool) {
        let producer_id = batch.producer_id;
        let offset = batch.base_offset;
        let epoch = batch.producer_epoch;
        let Some(track) = self.tracks.get_mut(&producer_id) else {
            // First sight of the id: its transaction's data may be before the audited range.
            self.check_reuse(batch);
            let mut track = Track::new(epoch);
            track.last_offset = batch.last_offset;
            self.tracks.insert(producer_id, track);
            return;
        };
        let finding = if epoch < track.epoch {
            Some(AuditFinding {
                offset,
                producer_id,
                kind: AuditKind::EpochWentBackwards {
                    epoch,
                    previous_epoch: track.epoch,
                    previous_offset: track.last_offset,
                },
            })
        } else {
            match track.open_txn {
                None => Some(AuditFinding {
                    offset,
                    producer_id,
                    kind: AuditKind::MarkerWithoutOpenTxn {
                        epoch,
                        commit,
                        previous_offset: track.last_offset,
                    },
                }),
                Some((txn_first_offset, txn_epoch)) if epoch < txn_epoch => Some(AuditFinding {
                    offset,
                    producer_id,
                    kind: AuditKind::TxnClosedByLowerEpoch {
                        commit,
                        marker_epoch: epoch,
                        txn_first_offset,
                        txn_epoch,
                    },
                }),
                Some(_) => None,
            }
        };
        track.set_epoch(epoch);
        track.open_txn = None;
        track.last_offset = batch.last_offset;
        self.findings.extend(finding);
    }
}

/// Audits `batches` (in log order) and returns every finding.
pub fn audit_batches<'a, I>(batches: I) -> Vec<AuditFinding>
where
    I: IntoIterator<Item = &'a BatchSummary>,
{
    let mut audit = ProducerAudit::new();
    for batch in batches {
        audit.observe(batch);
    }
    audit.into_findings()
}
