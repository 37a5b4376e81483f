//! KIP-1279 mirror partition states, as far as the storage layer needs them (reference §9.2, §9.3;
//! `docs/barrier.md`, "Mirror partition states").
//!
//! ```text
//!   Local ──start_mirroring──▶ Mirroring ──stop──▶ Stopping{FeedStopped} ──▶ Stopping{Truncated}
//!     ▲        (log alignment)     ▲                                                 │
//!     │ (never mirrored)           │                                                 ▼
//!     │                            └──start_mirroring (failback)── Stopped ◀── Stopping{EpochBumped}
//! ```
//!
//! * `start_mirroring` (the KIP's LOG_ALIGNMENT step): a partition with history of its own is
//!   truncated to the source's end offset for the last leader epoch both logs share, found with
//!   Kafka's `OffsetsForLeaderEpoch` rule over the two leader-epoch caches ([`alignment_point`]),
//!   so that everything it keeps is byte for byte what the source holds at the same offsets and
//!   the next fetch starts where they diverged (a barrier the source wrote there arrives next).
//!   A partition that never mirrored (`Local`) and holds batches of its own, starting to mirror a
//!   source that tells no Last Mirror Epoch, keeps none of them: it is truncated fully and starts
//!   at 0, after `Mirroring` is persisted with `truncate_fully=pending` (cleared once the
//!   truncation is durable; a repeated start finishes it).
//! * `Mirroring`: the fetcher appends the source's batches as they are; clients may not write.
//!   The destination's own leader epoch (chosen at start, [`MIRROR_EPOCH_FENCE`] above every
//!   epoch the log holds) is persisted in the state and bumped before a mirrored batch whose
//!   epoch comes within [`MIRROR_EPOCH_MARGIN`] of it ([`fenced_mirror_epoch`]).
//! * `Stopping`: a sequence of durable steps, each persisted before the next one starts, so that a
//!   crash at any point resumes where it left off ([`MirroredLog::resume_mirror_stop`]):
//!   1. the caller has removed the fetcher; the log's last stable offset (the stop point) is
//!      computed, with the new leader epoch ([`MIRROR_EPOCH_FENCE`] above every epoch in the
//!      log's batches and leader-epoch cache, before truncation), the log flushed (so the stop
//!      point survives any crash), and `Stopping{step: FeedStopped, lso, leader_epoch}`
//!      persisted. A resume truncates to this persisted
//!      point, never to a recomputed LSO (after an unclean restart the high watermark, and with
//!      it the LSO, can be stale);
//!   2. truncate the log to the stop point, fsync, persist `Stopping{step: Truncated,
//!      last_mirrored_offset, last_mirrored_epoch}` (the new log end and the leader epoch of the
//!      last batch kept);
//!   3. persist `Stopping{step: EpochBumped, leader_epoch}` (the epoch of step 1), then record
//!      it in the leader-epoch cache
//!      (`leader-epoch-checkpoint`, written atomically) as starting at the stop point;
//!   4. unless a barrier already exists at or after the stop point (one from an interrupted
//!      attempt), append the `MIRROR_PID_RESET` barrier with the source cluster id, **in the new
//!      leader epoch**;
//!   5. fsync the log;
//!   6. persist `Stopped{barrier_offset, last_mirror_epoch}` (the Last Mirror Epoch: the epoch
//!      of the last batch kept; its end offset is the stop point, where the stop's epoch
//!      starts).
//! * `Stopped`: writable. `Local`: never mirrored (no `mirror-state` file), writable.
//!
//! Because the barrier opens a leader epoch no earlier batch has, a node that aligns to this log
//! by leader epoch (failback, chain) truncates at the barrier's offset and then receives the
//! barrier itself.
//!
//! Invariants (tested by crashing after every durable operation, `tests/recovery/mirror.rs`, and
//! on a real [`PartitionLog`](crate::PartitionLog) through the storage seam): the partition never
//! accepts client appends before the barrier is durable, the barrier is written exactly once per
//! stop (on resume we look for it before writing it), and no batch below the stop point is lost.
//!
//! Differences from the KIP-1279 forks: they skip the barrier when the source cluster id is
//! unknown; we refuse to start mirroring without one, so every stop writes a barrier. They abort
//! open transactions with ABORT markers before the barrier ([`StopPolicy::AbortOpenTransactions`]
//! here); the default [`StopPolicy::TruncateToLastStable`] removes every open transaction's data
//! first. Either way none is open at the barrier (and if one were, the barrier itself aborts it,
//! see [`crate::barrier`]).
//!
//! # The `mirror-state` file
//! A small UTF-8 text file in the partition directory, written atomically (temporary file, fsync,
//! rename, fsync of the directory, through [`SnapshotIo::write_atomically`](crate::SnapshotIo::write_atomically); a partition log's
//! own file goes through the log's storage seam). Lines end with `\n`; the first line is the
//! format version, the second the state, then `key=value` lines in exactly this order (the value
//! is everything after the first `=`):
//!
//! ```text
//! 2                         version (2 is written; 1 and 2 are read; version 0 had no epochs)
//! MIRRORING                 source=<id>,
//!                           leader_epoch=<i32>           (version 2, optional: the
//!                                                         destination's own epoch; absent
//!                                                         reads as -1, not chosen),
//!                           truncate_fully=pending       (version 2, optional: a first
//!                                                         start whose full truncation is
//!                                                         not durable yet)
//! STOPPING                  step=FEED_STOPPED|TRUNCATED|EPOCH_BUMPED, source=<id>, lso=<i64>,
//!                           policy=TRUNCATE_TO_LAST_STABLE|ABORT_OPEN_TRANSACTIONS
//!                                                        (version 2 only),
//!                           last_mirrored_offset=<i64>, last_mirrored_epoch=<i32>
//!                                                        (from step=TRUNCATED on),
//!                           leader_epoch=<i32>           (version 2: from step=FEED_STOPPED
//!                                                         on, optional before EPOCH_BUMPED;
//!                                                         version 1: only when EPOCH_BUMPED)
//! STOPPED                   barrier_offset=<i64>,
//!                           last_mirror_epoch=<i32>      (version 2 only; a version-1 file
//!                                                         reads as -1, unknown)
//! LOCAL                     (no fields; a missing file also means LOCAL)
//! ```
//! Offsets are non-negative decimal integers; `last_mirrored_epoch` is `-1` (no epoch: an empty
//! log) or a non-negative `i32`, `leader_epoch` a non-negative `i32`. A source cluster id is
//! non-empty and contains no control characters (Kafka cluster ids are 22-character base64
//! UUIDs). Anything else (unknown version, state or step, a missing, extra or reordered line, a
//! bad number) is reported as [`MirrorStateError::Malformed`] with its 1-based line number.

mod alignment;
mod file;
mod last_epoch;
mod state;
mod stopping;
#[cfg(test)]
mod tests;
mod transitions;

pub use alignment::{alignment_point, EpochEndOffsets, LastMirrorEpoch, StopOutcome};
pub use file::{
    decode_mirror_state, encode_mirror_state, MalformedReason, MirrorStateError, MirrorStateFile,
    MirrorStateStore,
};
pub use last_epoch::last_mirror_epoch_of;
pub use state::{
    fenced_mirror_epoch, MirrorPartitionState, MirrorStateKind, StopPolicy, StoppingStep,
    MIRROR_EPOCH_FENCE, MIRROR_EPOCH_MARGIN, MIRROR_STATE_FILE,
};
pub use transitions::{MirrorError, MirrorLog, MirrorOp, MirroredLog};
