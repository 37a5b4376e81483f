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
//! rename, fsync of the directory, through [`SnapshotIo::write_atomically`]; a partition log's
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

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::leader_epoch::{UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
use crate::snapshot::{SnapshotIo, StdIo};

/// Name of the state file in the partition directory.
pub const MIRROR_STATE_FILE: &str = "mirror-state";
/// The version of the `mirror-state` format written (version 1 is read too).
pub const MIRROR_STATE_VERSION: u32 = 2;

/// How far above every leader epoch a mirroring partition has seen its stop's new epoch goes.
///
/// The destination's barrier, and every local batch after it, must carry an epoch that no
/// batch of the source can have, or a node aligning by leader epoch (failback, chain) finds
/// the epoch in both logs and keeps its own batches where the other has the barrier. The
/// destination only sees the source epochs it mirrored; the source may have had elections
/// since. The KIP-1279 prototype keeps the destination's epoch at least 4 above the source's
/// (it bumps by 10 when the source comes within 3). Ours is stricter: the stop's epoch is
/// always this much above every epoch the destination's log held when the feed stopped (its
/// batches and its leader-epoch cache, before truncation), so up to 9 source elections the
/// destination never saw cannot reach it. While mirroring, the destination's own epoch is kept
/// above the source's by the same distance ([`fenced_mirror_epoch`]), and the stop's epoch is
/// never below it.
pub const MIRROR_EPOCH_FENCE: i32 = 10;

/// While mirroring, the destination's own leader epoch stays more than this far above every
/// source epoch it mirrors: a mirrored batch whose epoch comes within this distance makes the
/// destination bump ([`fenced_mirror_epoch`]). The KIP-1279 prototype's `EPOCH_FENCING` uses
/// the same margin (3).
pub const MIRROR_EPOCH_MARGIN: i32 = 3;

/// The destination's leader epoch after mirroring a batch of `source_epoch` while its epoch is
/// `current`: unchanged while the source stays more than [`MIRROR_EPOCH_MARGIN`] below it,
/// otherwise [`MIRROR_EPOCH_FENCE`] above the larger of the two. The KIP-1279 prototype bumps
/// by 10 from the destination's epoch when the source comes within 3; this is the same when the
/// source is below the destination and stricter when a source election jumped past it (the
/// prototype's `current + 10` could still be at or below the source's epoch). `None` when the
/// epoch would overflow. A `current` below 0 (not chosen yet) counts as 0.
pub fn fenced_mirror_epoch(current: i32, source_epoch: i32) -> Option<i32> {
    let current = current.max(0);
    if source_epoch < current.saturating_sub(MIRROR_EPOCH_MARGIN) {
        return Some(current);
    }
    current.max(source_epoch).checked_add(MIRROR_EPOCH_FENCE)
}

/// A partition's mirror state (KIP-1279 `MirrorPartitionState`, reduced to what the log needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPartitionState {
    /// Batches from `source_cluster_id` are appended as they are; read-only for clients.
    Mirroring {
        /// The source cluster's id (written into the barrier at stop).
        source_cluster_id: String,
        /// The destination's own leader epoch while mirroring, chosen by the library: at start
        /// [`MIRROR_EPOCH_FENCE`] above every epoch the log holds, then kept above every
        /// mirrored source epoch by [`fenced_mirror_epoch`] (persisted before the batch that
        /// needs it is appended). The caller's metadata follows it; a lower epoch from the
        /// caller is refused. The mirrored batches keep the source's epochs, and so does the
        /// leader-epoch cache. −1: not chosen (a file written before epochs were kept here).
        leader_epoch: i32,
        /// A partition that never mirrored (`Local`) starts mirroring with history of its own
        /// that the source cannot hold (the source tells no Last Mirror Epoch: it never
        /// mirrored from this log's cluster): every batch is its own, so the log is truncated
        /// fully and starts at 0. Persisted before the truncation (the partition is read-only
        /// from then on) and cleared after it is durable; while set, mirrored appends are
        /// refused and [`MirroredLog::start_mirroring`] repeats the truncation.
        full_truncation_pending: bool,
    },
    /// Stopping, at `step`; read-only for clients and for the mirror feed.
    Stopping {
        /// The last step that is durable.
        step: StoppingStep,
        /// The source cluster's id.
        source_cluster_id: String,
        /// The log's last stable offset when the feed stopped: the stop point. A resume
        /// truncates to it, never to a recomputed LSO.
        lso: i64,
        /// The log end after truncating to the stop point (the offset after the last mirrored
        /// batch kept); set from [`StoppingStep::Truncated`] on.
        last_mirrored_offset: Option<i64>,
        /// The leader epoch of the last mirrored batch kept (−1: the log is empty); set from
        /// [`StoppingStep::Truncated`] on.
        last_mirrored_epoch: Option<i32>,
        /// The new leader epoch the barrier is written in; set from
        /// [`StoppingStep::EpochBumped`] on (from [`StoppingStep::FeedStopped`] on for a stop
        /// that started with this version).
        leader_epoch: Option<i32>,
        /// What the stop does with open transactions (a version-1 state: the default).
        policy: StopPolicy,
    },
    /// Mirroring stopped; the barrier at `barrier_offset` is durable; writable.
    Stopped {
        /// Base offset of the barrier this stop wrote (or found). Under
        /// [`StopPolicy::TruncateToLastStable`] also the end offset of the Last Mirror Epoch
        /// (under [`StopPolicy::AbortOpenTransactions`] that is the first ABORT marker's
        /// offset, where the stop's epoch starts).
        barrier_offset: i64,
        /// The Last Mirror Epoch (LME): the leader epoch of the last mirrored batch kept by the
        /// stop (−1: none, or unknown for a state written by version 1). A node that aligns to
        /// this log (failback, chain) truncates to the smaller of its own end offset for this
        /// epoch and `barrier_offset`.
        last_mirror_epoch: i32,
    },
    /// Never mirrored; writable.
    Local,
}

/// What a mirror stop does with the source's transactions still open at the stop.
///
/// `docs/barrier.md` ("Open transactions at stop") states the trade-off with what
/// `read_committed` and `read_uncommitted` consumers see under each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum StopPolicy {
    /// The KIP-1279 design text: the stop point is the last stable offset; the log is truncated
    /// there, so an open transaction's records go, and with them every later record, committed
    /// ones included (a `read_uncommitted` consumer may have read them; their offsets are
    /// reused by local writes). The default.
    #[default]
    TruncateToLastStable,
    /// The KIP-1279 prototype: nothing is truncated (the stop point is the log end); an ABORT
    /// marker is written for every open transaction (its producer id and epoch as the log last
    /// shows them, the coordinator epoch from producer state or −1, in the stop's new leader
    /// epoch), then the barrier.
    AbortOpenTransactions,
}

impl StopPolicy {
    /// The name used in the `mirror-state` file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TruncateToLastStable => "TRUNCATE_TO_LAST_STABLE",
            Self::AbortOpenTransactions => "ABORT_OPEN_TRANSACTIONS",
        }
    }
}

/// The durable steps of [`MirrorPartitionState::Stopping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoppingStep {
    /// The fetcher is removed and the LSO recorded; the log is not truncated yet.
    FeedStopped,
    /// The log is truncated to the LSO (durably); last mirrored offset and epoch recorded.
    Truncated,
    /// The new leader epoch is chosen (and may or may not be in the leader-epoch cache yet); the
    /// barrier may or may not be written yet.
    EpochBumped,
}

/// The name of a [`MirrorPartitionState`], for errors and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorStateKind {
    /// [`MirrorPartitionState::Mirroring`].
    Mirroring,
    /// [`MirrorPartitionState::Stopping`].
    Stopping,
    /// [`MirrorPartitionState::Stopped`].
    Stopped,
    /// [`MirrorPartitionState::Local`].
    Local,
}

impl MirrorPartitionState {
    /// The state's name.
    pub fn kind(&self) -> MirrorStateKind {
        match self {
            Self::Mirroring { .. } => MirrorStateKind::Mirroring,
            Self::Stopping { .. } => MirrorStateKind::Stopping,
            Self::Stopped { .. } => MirrorStateKind::Stopped,
            Self::Local => MirrorStateKind::Local,
        }
    }

    /// Whether clients may append: only in `Stopped` and `Local`.
    pub fn accepts_client_appends(&self) -> bool {
        matches!(self, Self::Stopped { .. } | Self::Local)
    }
}

impl MirrorStateKind {
    /// The name used in the `mirror-state` file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mirroring => "MIRRORING",
            Self::Stopping => "STOPPING",
            Self::Stopped => "STOPPED",
            Self::Local => "LOCAL",
        }
    }
}

impl fmt::Display for MirrorStateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StoppingStep {
    /// The name used in the `mirror-state` file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FeedStopped => "FEED_STOPPED",
            Self::Truncated => "TRUNCATED",
            Self::EpochBumped => "EPOCH_BUMPED",
        }
    }
}

/// Whether `id` can be a source cluster id: non-empty, no control characters.
pub fn is_valid_source_cluster_id(id: &str) -> bool {
    !id.is_empty() && !id.chars().any(char::is_control)
}

// ------------------------------------------------------------------------------------------------
// The file format
// ------------------------------------------------------------------------------------------------

/// Errors reading or writing the `mirror-state` file.
#[derive(Debug)]
#[non_exhaustive]
pub enum MirrorStateError {
    /// The file's content is not a valid `mirror-state`.
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number where the problem was found.
        line: usize,
        /// What was wrong.
        reason: MalformedReason,
    },
    /// A state that cannot be written (its source cluster id is empty or has control characters,
    /// or an offset is negative).
    Unrepresentable(MirrorPartitionState),
    /// An I/O operation failed.
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// Why a `mirror-state` file is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MalformedReason {
    /// The bytes are not UTF-8.
    NotUtf8,
    /// The file ends before this line (expected content named).
    MissingLine(&'static str),
    /// The version line is not a version we know.
    UnsupportedVersion(String),
    /// Unknown state name.
    UnknownState(String),
    /// Unknown stopping step.
    UnknownStep(String),
    /// Unknown stop policy.
    UnknownPolicy(String),
    /// A `truncate_fully` value other than `pending`.
    UnknownTruncation(String),
    /// The line is not `<expected>=…`.
    ExpectedKey {
        /// The key that must come here.
        expected: &'static str,
        /// The line found.
        found: String,
    },
    /// The value of a leader epoch is not `-1` or a non-negative `i32`.
    BadEpoch {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
    },
    /// The value of an offset is not a non-negative decimal integer.
    BadOffset {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
    },
    /// The source cluster id is empty or contains control characters.
    BadSourceClusterId(String),
    /// A non-empty line after the last field, or a missing final newline.
    TrailingContent(String),
}

impl fmt::Display for MirrorStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { path, line, reason } => {
                write!(f, "malformed mirror state {} line {line}: ", path.display())?;
                match reason {
                    MalformedReason::NotUtf8 => f.write_str("not UTF-8"),
                    MalformedReason::MissingLine(what) => write!(f, "missing {what}"),
                    MalformedReason::UnsupportedVersion(v) => {
                        write!(f, "unsupported version {v:?}")
                    }
                    MalformedReason::UnknownState(s) => write!(f, "unknown state {s:?}"),
                    MalformedReason::UnknownStep(s) => write!(f, "unknown stopping step {s:?}"),
                    MalformedReason::UnknownPolicy(s) => write!(f, "unknown stop policy {s:?}"),
                    MalformedReason::UnknownTruncation(s) => {
                        write!(f, "truncate_fully is {s:?}, not \"pending\"")
                    }
                    MalformedReason::ExpectedKey { expected, found } => {
                        write!(f, "expected {expected}=…, found {found:?}")
                    }
                    MalformedReason::BadOffset { key, value } => {
                        write!(f, "{key} is not a non-negative offset: {value:?}")
                    }
                    MalformedReason::BadEpoch { key, value } => {
                        write!(f, "{key} is not a leader epoch: {value:?}")
                    }
                    MalformedReason::BadSourceClusterId(id) => {
                        write!(f, "invalid source cluster id {id:?}")
                    }
                    MalformedReason::TrailingContent(s) => write!(f, "unexpected content {s:?}"),
                }
            }
            Self::Unrepresentable(state) => {
                write!(f, "mirror state cannot be persisted: {state:?}")
            }
            Self::Io { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for MirrorStateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Encodes `state` in the `mirror-state` format (module docs).
pub fn encode_mirror_state(state: &MirrorPartitionState) -> Result<String, MirrorStateError> {
    let bad = || MirrorStateError::Unrepresentable(state.clone());
    let mut out = format!("{MIRROR_STATE_VERSION}\n{}\n", state.kind());
    match state {
        MirrorPartitionState::Mirroring {
            source_cluster_id,
            leader_epoch,
            full_truncation_pending,
        } => {
            if !is_valid_source_cluster_id(source_cluster_id) || *leader_epoch < -1 {
                return Err(bad());
            }
            out.push_str(&format!("source={source_cluster_id}\n"));
            if *leader_epoch >= 0 {
                out.push_str(&format!("leader_epoch={leader_epoch}\n"));
            }
            if *full_truncation_pending {
                out.push_str("truncate_fully=pending\n");
            }
        }
        MirrorPartitionState::Stopping {
            step,
            source_cluster_id,
            lso,
            last_mirrored_offset,
            last_mirrored_epoch,
            leader_epoch,
            policy,
        } => {
            let values_ok = *lso >= 0
                && last_mirrored_offset.is_none_or(|o| o >= 0)
                && last_mirrored_epoch.is_none_or(|e| e >= -1)
                && leader_epoch.is_none_or(|e| e >= 0);
            let (truncated, bumped) = match step {
                StoppingStep::FeedStopped => (false, false),
                StoppingStep::Truncated => (true, false),
                StoppingStep::EpochBumped => (true, true),
            };
            let shape_ok = last_mirrored_offset.is_some() == truncated
                && last_mirrored_epoch.is_some() == truncated
                && (leader_epoch.is_some() || !bumped);
            if !is_valid_source_cluster_id(source_cluster_id) || !values_ok || !shape_ok {
                return Err(bad());
            }
            out.push_str(&format!(
                "step={}\nsource={source_cluster_id}\nlso={lso}\npolicy={}\n",
                step.as_str(),
                policy.as_str()
            ));
            if let (Some(o), Some(e)) = (last_mirrored_offset, last_mirrored_epoch) {
                out.push_str(&format!(
                    "last_mirrored_offset={o}\nlast_mirrored_epoch={e}\n"
                ));
            }
            if let Some(e) = leader_epoch {
                out.push_str(&format!("leader_epoch={e}\n"));
            }
        }
        MirrorPartitionState::Stopped {
            barrier_offset,
            last_mirror_epoch,
        } => {
            if *barrier_offset < 0 || *last_mirror_epoch < -1 {
                return Err(bad());
            }
            out.push_str(&format!(
                "barrier_offset={barrier_offset}\nlast_mirror_epoch={last_mirror_epoch}\n"
            ));
        }
        MirrorPartitionState::Local => {}
    }
    Ok(out)
}

/// A line reader that knows its line numbers.
struct Lines<'a> {
    rest: &'a str,
    line: usize,
}

impl<'a> Lines<'a> {
    /// The next `\n`-terminated line and its number.
    fn next(&mut self, what: &'static str) -> Result<(usize, &'a str), (usize, MalformedReason)> {
        self.line += 1;
        match self.rest.split_once('\n') {
            Some((l, rest)) => {
                self.rest = rest;
                Ok((self.line, l))
            }
            None => Err((self.line, MalformedReason::MissingLine(what))),
        }
    }

    /// Whether the next line is `key=…`.
    fn next_is(&self, key: &str) -> bool {
        self.rest
            .split_once('\n')
            .and_then(|(l, _)| l.split_once('='))
            .is_some_and(|(k, _)| k == key)
    }

    fn field(&mut self, key: &'static str) -> Result<(usize, &'a str), (usize, MalformedReason)> {
        let (n, l) = self.next(key)?;
        match l.split_once('=') {
            Some((k, v)) if k == key => Ok((n, v)),
            _ => Err((
                n,
                MalformedReason::ExpectedKey {
                    expected: key,
                    found: l.to_owned(),
                },
            )),
        }
    }

    fn offset(&mut self, key: &'static str) -> Result<i64, (usize, MalformedReason)> {
        let (n, v) = self.field(key)?;
        let bad = || {
            (
                n,
                MalformedReason::BadOffset {
                    key,
                    value: v.to_owned(),
                },
            )
        };
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        v.parse().map_err(|_| bad())
    }

    /// `-1` or a non-negative `i32` (`min` is −1 or 0).
    fn epoch(&mut self, key: &'static str, min: i32) -> Result<i32, (usize, MalformedReason)> {
        let (n, v) = self.field(key)?;
        let bad = || {
            (
                n,
                MalformedReason::BadEpoch {
                    key,
                    value: v.to_owned(),
                },
            )
        };
        let digits = v.strip_prefix('-').unwrap_or(v);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        match v.parse::<i32>() {
            Ok(e) if e >= min => Ok(e),
            _ => Err(bad()),
        }
    }

    fn source(&mut self) -> Result<String, (usize, MalformedReason)> {
        let (n, v) = self.field("source")?;
        if !is_valid_source_cluster_id(v) {
            return Err((n, MalformedReason::BadSourceClusterId(v.to_owned())));
        }
        Ok(v.to_owned())
    }

    fn end(self) -> Result<(), (usize, MalformedReason)> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            let first = self.rest.split('\n').next().unwrap_or_default();
            Err((
                self.line + 1,
                MalformedReason::TrailingContent(first.to_owned()),
            ))
        }
    }
}

/// Decodes the `mirror-state` format; errors carry the 1-based line number.
pub fn decode_mirror_state(bytes: &[u8]) -> Result<MirrorPartitionState, (usize, MalformedReason)> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let valid = bytes.get(..e.valid_up_to()).unwrap_or_default();
        let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
        (line, MalformedReason::NotUtf8)
    })?;
    let mut lines = Lines {
        rest: text,
        line: 0,
    };
    let (n, version) = lines.next("version")?;
    let v2 = match version {
        "1" => false,
        "2" => true,
        _ => return Err((n, MalformedReason::UnsupportedVersion(version.to_owned()))),
    };
    let (n, name) = lines.next("state")?;
    let state = match name {
        "MIRRORING" => MirrorPartitionState::Mirroring {
            source_cluster_id: lines.source()?,
            leader_epoch: if v2 && lines.next_is("leader_epoch") {
                lines.epoch("leader_epoch", 0)?
            } else {
                UNDEFINED_EPOCH
            },
            full_truncation_pending: if v2 && lines.next_is("truncate_fully") {
                let (n, v) = lines.field("truncate_fully")?;
                if v != "pending" {
                    return Err((n, MalformedReason::UnknownTruncation(v.to_owned())));
                }
                true
            } else {
                false
            },
        },
        "STOPPING" => {
            let (n, step) = lines.field("step")?;
            let step = match step {
                "FEED_STOPPED" => StoppingStep::FeedStopped,
                "TRUNCATED" => StoppingStep::Truncated,
                "EPOCH_BUMPED" => StoppingStep::EpochBumped,
                other => return Err((n, MalformedReason::UnknownStep(other.to_owned()))),
            };
            let source_cluster_id = lines.source()?;
            let lso = lines.offset("lso")?;
            let policy = if v2 {
                let (n, v) = lines.field("policy")?;
                match v {
                    "TRUNCATE_TO_LAST_STABLE" => StopPolicy::TruncateToLastStable,
                    "ABORT_OPEN_TRANSACTIONS" => StopPolicy::AbortOpenTransactions,
                    other => return Err((n, MalformedReason::UnknownPolicy(other.to_owned()))),
                }
            } else {
                StopPolicy::TruncateToLastStable
            };
            let (last_mirrored_offset, last_mirrored_epoch) = match step {
                StoppingStep::FeedStopped => (None, None),
                StoppingStep::Truncated | StoppingStep::EpochBumped => (
                    Some(lines.offset("last_mirrored_offset")?),
                    Some(lines.epoch("last_mirrored_epoch", -1)?),
                ),
            };
            let leader_epoch = match step {
                StoppingStep::EpochBumped => Some(lines.epoch("leader_epoch", 0)?),
                _ if v2 && lines.next_is("leader_epoch") => Some(lines.epoch("leader_epoch", 0)?),
                _ => None,
            };
            MirrorPartitionState::Stopping {
                step,
                source_cluster_id,
                lso,
                last_mirrored_offset,
                last_mirrored_epoch,
                leader_epoch,
                policy,
            }
        }
        "STOPPED" => MirrorPartitionState::Stopped {
            barrier_offset: lines.offset("barrier_offset")?,
            last_mirror_epoch: if v2 {
                lines.epoch("last_mirror_epoch", -1)?
            } else {
                UNDEFINED_EPOCH
            },
        },
        "LOCAL" => MirrorPartitionState::Local,
        other => return Err((n, MalformedReason::UnknownState(other.to_owned()))),
    };
    lines.end()?;
    Ok(state)
}

/// Where a partition's mirror state is kept: the seam the [`MirrorPartition`] driver persists
/// through (production: [`MirrorStateFile`]; tests: an in-memory store that can crash).
pub trait MirrorStateStore {
    /// The persisted state; [`MirrorPartitionState::Local`] when none was ever persisted.
    fn load(&self) -> Result<MirrorPartitionState, MirrorStateError>;
    /// Replaces the persisted state durably and atomically: after a crash, [`load`] returns
    /// either the old or the new state.
    ///
    /// [`load`]: MirrorStateStore::load
    fn store(&mut self, state: &MirrorPartitionState) -> Result<(), MirrorStateError>;
}

/// The `mirror-state` file of one partition directory, through a [`SnapshotIo`].
#[derive(Debug, Clone)]
pub struct MirrorStateFile<I: SnapshotIo = StdIo> {
    path: PathBuf,
    io: I,
}

impl MirrorStateFile<StdIo> {
    /// The `mirror-state` file of `partition_dir`, over `std::fs`.
    pub fn in_dir(partition_dir: &Path) -> Self {
        Self::with_io(partition_dir, StdIo)
    }
}

impl<I: SnapshotIo> MirrorStateFile<I> {
    /// The `mirror-state` file of `partition_dir`, through `io`.
    pub fn with_io(partition_dir: &Path, io: I) -> Self {
        Self {
            path: partition_dir.join(MIRROR_STATE_FILE),
            io,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl<I: SnapshotIo> MirrorStateStore for MirrorStateFile<I> {
    fn load(&self) -> Result<MirrorPartitionState, MirrorStateError> {
        if !self.io.exists(&self.path) {
            return Ok(MirrorPartitionState::Local);
        }
        let bytes = self
            .io
            .read(&self.path)
            .map_err(|source| MirrorStateError::Io {
                path: self.path.clone(),
                op: "reading mirror state",
                source,
            })?;
        decode_mirror_state(&bytes).map_err(|(line, reason)| MirrorStateError::Malformed {
            path: self.path.clone(),
            line,
            reason,
        })
    }

    fn store(&mut self, state: &MirrorPartitionState) -> Result<(), MirrorStateError> {
        let text = encode_mirror_state(state)?;
        self.io
            .write_atomically(&self.path, text.as_bytes())
            .map_err(|source| MirrorStateError::Io {
                path: self.path.clone(),
                op: "writing mirror state",
                source,
            })
    }
}

// ------------------------------------------------------------------------------------------------
// Leader epochs: the OffsetsForLeaderEpoch exchange of log alignment
// ------------------------------------------------------------------------------------------------

/// The answer of a log to Kafka's `OffsetsForLeaderEpoch` request: `(epoch, end offset)` where
/// `epoch` is the largest leader epoch `<= requested` the log knows and `end offset` the start of
/// the next higher epoch (the log end offset for the latest epoch); `(UNDEFINED_EPOCH,
/// UNDEFINED_EPOCH_OFFSET)` when `requested` is above every epoch it knows (Kafka
/// `LeaderEpochFileCache.endOffsetFor`).
pub trait EpochEndOffsets {
    /// See the trait docs.
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64);

    /// The Last Mirror Epoch this log persisted when it stopped mirroring, while it is
    /// `Stopped` (what the promoted side tells the old source at failback); `None` otherwise.
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        None
    }
}

impl<T: EpochEndOffsets + ?Sized> EpochEndOffsets for &T {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        (**self).end_offset_for_epoch(requested)
    }
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        (**self).last_mirror_epoch()
    }
}

/// What a completed mirror stop did: [`MirroredLog::stop_mirroring_outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StopOutcome {
    /// The barrier's offset.
    pub barrier_offset: i64,
    /// The leader epoch the stop chose (the barrier's).
    pub leader_epoch: i32,
}

/// The Last Mirror Epoch of a stopped destination (KIP-1279 LOG_ALIGNMENT): the leader epoch
/// of the last mirrored batch its stop kept, that epoch's end offset in its log (where the
/// stop's epoch starts: the barrier, or the first ABORT marker of an
/// [`StopPolicy::AbortOpenTransactions`] stop), the barrier's offset, and the stop's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LastMirrorEpoch {
    /// The last source epoch kept (−1: none).
    pub epoch: i32,
    /// Its end offset in the stopped log.
    pub end_offset: i64,
    /// The barrier's offset.
    pub barrier_offset: i64,
    /// The leader epoch of the barrier (the stop's new epoch).
    pub stop_epoch: i32,
}

/// Where a log must be truncated so that everything it keeps is what `source` holds at the same
/// offsets: Kafka's follower truncation after `OffsetsForLeaderEpoch`
/// (`AbstractFetcherThread.getOffsetTruncationState`), iterated until it completes.
///
/// Ask the source for the end offset of our latest epoch. If it answers with that epoch, the
/// logs agree up to `min(its end offset, our end offset for that epoch)`. If it answers with an
/// older epoch we also know, they agree up to `min` of both ends for that epoch. If we do not
/// know the epoch it answers with, cut to our end offset for the largest epoch below it and ask
/// again with that epoch. The result never exceeds `local`'s log end offset.
///
/// Two cases Kafka settles with the follower's high watermark are settled here without it (a
/// mirror's high watermark says nothing about the source): a log with data but no leader epoch
/// aligns to its log start offset (nothing kept); when the source has no epoch as high as ours
/// (Kafka's `UNDEFINED_EPOCH_OFFSET` answer), our data from that epoch on cannot be in it, so we
/// cut where that epoch starts and ask about the epoch below. An empty log is already aligned.
///
/// When the source is a stopped destination that tells its Last Mirror Epoch
/// ([`EpochEndOffsets::last_mirror_epoch`]) and this log does not hold its barrier yet
/// (failback, or a chain node that has not received it), the result is also at most
/// `min(our end offset for the LME, the LME's end offset)`, the prototype's rule, which does
/// not depend on the two clusters' epoch numbers (it holds when a source election reached the
/// stop's epoch number, which [`MIRROR_EPOCH_FENCE`] makes unlikely, not impossible).
///
/// The result can be below `local`'s log start offset (retention passed the point where the
/// logs diverge): the caller then truncates fully and starts the log there, as Kafka does.
pub fn alignment_point<L: MirrorLog + ?Sized>(local: &L, source: &dyn EpochEndOffsets) -> i64 {
    let by_epoch = alignment_by_epoch(local, source);
    let Some(lme) = source.last_mirror_epoch() else {
        return by_epoch;
    };
    let end = local.log_end_offset();
    if end <= local.log_start_offset() {
        return by_epoch;
    }
    // A log that holds the barrier at the LME's end offset received it already (a chain node
    // past it): the epochs say where it stands. A read error counts as "not held" (the cut is
    // then deeper than needed, never shallower).
    if matches!(local.find_barrier_from(lme.barrier_offset), Ok(Some(at)) if at == lme.barrier_offset)
    {
        return by_epoch;
    }
    let ours = if lme.epoch == UNDEFINED_EPOCH {
        UNDEFINED_EPOCH_OFFSET
    } else {
        local.end_offset_for_epoch(lme.epoch).1
    };
    let by_lme = if ours == UNDEFINED_EPOCH_OFFSET {
        lme.end_offset
    } else {
        ours.min(lme.end_offset)
    };
    by_epoch.min(by_lme).min(end)
}

fn alignment_by_epoch<L: MirrorLog + ?Sized>(local: &L, source: &dyn EpochEndOffsets) -> i64 {
    let log_start = local.log_start_offset();
    let mut end = local.log_end_offset();
    if end <= log_start {
        return end;
    }
    let Some(mut epoch) = local.latest_epoch() else {
        return log_start;
    };
    // Each round moves to a strictly smaller epoch, so this ends; the bound is a guard.
    for _ in 0..=u16::MAX {
        let (leader_epoch, leader_end) = source.end_offset_for_epoch(epoch);
        if leader_end == UNDEFINED_EPOCH_OFFSET {
            // The source has no epoch as high as ours: none of our data from this epoch on is
            // in it. Cut where this epoch starts and ask about the one below.
            let Some(below) = epoch.checked_sub(1) else {
                return log_start;
            };
            let (lower, start) = local.end_offset_for_epoch(below);
            end = start.min(end);
            if end <= log_start || lower >= epoch || lower == UNDEFINED_EPOCH {
                return end.max(log_start);
            }
            epoch = lower;
            continue;
        }
        if leader_epoch == UNDEFINED_EPOCH {
            return leader_end.min(end);
        }
        let (follower_epoch, follower_end) = local.end_offset_for_epoch(leader_epoch);
        if follower_epoch == UNDEFINED_EPOCH || follower_end == UNDEFINED_EPOCH_OFFSET {
            // Below our log start the source's end can be: retention passed it.
            return leader_end.min(end);
        }
        if follower_epoch == leader_epoch {
            return follower_end.min(leader_end).min(end);
        }
        // We do not know the source's epoch: keep what we have up to our end of the largest
        // epoch below it, then ask again about that one.
        end = follower_end.min(end);
        if follower_epoch >= epoch {
            break;
        }
        epoch = follower_epoch;
    }
    end.max(log_start)
}

// ------------------------------------------------------------------------------------------------
// The transition driver
// ------------------------------------------------------------------------------------------------

/// What the mirror state driver needs from the partition log.
pub trait MirrorLog: EpochEndOffsets {
    /// The log's error type.
    type Error: std::error::Error + 'static;
    /// The last stable offset (no open or undecided transaction below it; `<=` the log end).
    fn last_stable_offset(&self) -> i64;
    /// The first offset of the log.
    fn log_start_offset(&self) -> i64;
    /// The offset the next append gets.
    fn log_end_offset(&self) -> i64;
    /// The latest leader epoch of the leader-epoch cache, if any.
    fn latest_epoch(&self) -> Option<i32>;
    /// Whether the high watermark (which bounds the last stable offset) is known. After an
    /// unclean restart a high watermark the caller owns comes from a checkpoint that may be
    /// stale or missing; a stop refuses to take its stop point until it is set again.
    fn high_watermark_known(&self) -> bool;
    /// Removes every batch at or above `offset` (a no-op when `offset >= log_end_offset`) and
    /// rebuilds producer state. Durable after the next [`flush`](MirrorLog::flush).
    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error>;
    /// Removes every batch and starts the log empty at `offset` (Kafka
    /// `truncateFullyAndStartAt`): alignment to a point below the log start offset. Durable
    /// after the next [`flush`](MirrorLog::flush).
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error>;
    /// Records in the leader-epoch cache, durably (the checkpoint is written atomically), that
    /// `epoch` starts at `start_offset` (Kafka `assign`, as a new leader does at its log end); a
    /// no-op when `epoch` is already the latest.
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error>;
    /// Finds a `MIRROR_PID_RESET` batch at offset `>= from`; returns its offset.
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error>;
    /// The largest partition leader epoch carried by any batch in the log, `None` when no batch
    /// carries one. Read from the batches, not from the leader-epoch cache, which can have lost
    /// entries (a lost checkpoint).
    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error>;
    /// Appends the barrier in `leader_epoch` (COORDINATOR origin, past any read-only check) and
    /// returns its offset; must apply it to producer state. Durable after the next
    /// [`flush`](MirrorLog::flush).
    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error>;
    /// Makes every earlier append and truncation durable (fsync).
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Appends an ABORT marker for every open transaction, in `leader_epoch` (COORDINATOR
    /// origin, past any read-only check): its producer id and producer epoch as the log last
    /// shows them, the coordinator epoch from producer state (−1 when unknown). Returns how
    /// many it wrote. Durable after the next [`flush`](MirrorLog::flush).
    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error>;
}

/// An operation the mirror state driver was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorOp {
    /// [`MirroredLog::start_mirroring`].
    StartMirroring,
    /// [`MirroredLog::stop_mirroring`].
    Stop,
}

/// Errors of the mirror state driver.
#[derive(Debug)]
#[non_exhaustive]
pub enum MirrorError<E> {
    /// A client append while the partition is mirrored (`Mirroring` or `Stopping`).
    ReadOnly {
        /// The partition's state.
        state: MirrorStateKind,
    },
    /// The operation is not allowed in the current state.
    InvalidTransition {
        /// The partition's state.
        from: MirrorStateKind,
        /// What was asked.
        op: MirrorOp,
    },
    /// `start_mirroring` from a different source while already mirroring.
    SourceMismatch {
        /// The source being mirrored.
        current: String,
        /// The source asked for.
        requested: String,
    },
    /// The source cluster id is empty or contains control characters.
    InvalidSourceClusterId(String),
    /// The log returned a barrier offset below the truncation point (a broken [`MirrorLog`]).
    BarrierBeforeTruncationPoint {
        /// Offset returned by `append_barrier` or `find_barrier_from`.
        barrier_offset: i64,
        /// The truncation point.
        last_mirrored_offset: i64,
    },
    /// No leader epoch above the log's: its latest epoch is `i32::MAX`.
    EpochExhausted,
    /// A stop was asked for while the high watermark is not known (an unclean restart with a
    /// high watermark the caller owns, not set since): the stop point, the last stable offset
    /// bounded by the high watermark, could cut committed data. Set the high watermark first.
    HighWatermarkUnknown,
    /// The partition log failed.
    Log(E),
    /// Persisting or loading the state failed.
    State(MirrorStateError),
}

impl<E: fmt::Display> fmt::Display for MirrorError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadOnly { state } => {
                write!(
                    f,
                    "partition is read-only for clients in mirror state {state}"
                )
            }
            Self::InvalidTransition { from, op } => {
                let op = match op {
                    MirrorOp::StartMirroring => "start mirroring",
                    MirrorOp::Stop => "stop mirroring",
                };
                write!(f, "cannot {op} in mirror state {from}")
            }
            Self::SourceMismatch { current, requested } => write!(
                f,
                "already mirroring from {current:?}, cannot mirror from {requested:?}"
            ),
            Self::InvalidSourceClusterId(id) => write!(f, "invalid source cluster id {id:?}"),
            Self::BarrierBeforeTruncationPoint {
                barrier_offset,
                last_mirrored_offset,
            } => write!(
                f,
                "barrier at offset {barrier_offset} is below the truncation point \
                 {last_mirrored_offset}"
            ),
            Self::EpochExhausted => f.write_str("no leader epoch left above the log's"),
            Self::HighWatermarkUnknown => f.write_str(
                "the high watermark is not known since an unclean restart: set it before \
                 stopping mirroring",
            ),
            Self::Log(e) => write!(f, "partition log: {e}"),
            Self::State(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for MirrorError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Log(e) => Some(e),
            Self::State(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<MirrorStateError> for MirrorError<E> {
    fn from(e: MirrorStateError) -> Self {
        Self::State(e)
    }
}

/// A partition log that owns its mirror state: the KIP-1279 transition driver, as provided
/// methods over [`MirrorLog`] and two state accessors. [`crate::PartitionLog`] implements it (its
/// appends enforce the state); [`MirrorPartition`] pairs any [`MirrorLog`] with a separate
/// [`MirrorStateStore`].
///
/// Every transition persists its state before it is visible through
/// [`mirror_state`](Self::mirror_state), so the in-memory state never runs ahead of what a crash
/// would leave behind. On error the in-memory state is the last persisted one; call
/// [`resume_mirror_stop`](Self::resume_mirror_stop) (or reopen) to continue.
pub trait MirroredLog: MirrorLog {
    /// The current (persisted) state.
    fn mirror_state(&self) -> &MirrorPartitionState;

    /// Persists `next` durably and atomically, then makes it the current state.
    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError>;

    /// Whether clients (and transaction coordinators) may append: `Stopped` or `Local`.
    fn accepts_client_appends(&self) -> bool {
        self.mirror_state().accepts_client_appends()
    }

    /// `Ok` if clients may append, else [`MirrorError::ReadOnly`].
    fn check_client_append(&self) -> Result<(), MirrorError<Self::Error>> {
        if self.accepts_client_appends() {
            Ok(())
        } else {
            Err(MirrorError::ReadOnly {
                state: self.mirror_state().kind(),
            })
        }
    }

    /// Whether the mirror fetcher may append (only in `Mirroring`, once a first start's full
    /// truncation is durable).
    fn accepts_mirrored_appends(&self) -> bool {
        matches!(
            self.mirror_state(),
            MirrorPartitionState::Mirroring {
                full_truncation_pending: false,
                ..
            }
        )
    }

    /// Starts mirroring from `source_cluster_id`, from `Local` or `Stopped` (failback): persists
    /// `Mirroring` first (read-only for clients from then on), then the KIP's log alignment —
    /// truncates the log to [`alignment_point`] against `source` (the source partition's
    /// `OffsetsForLeaderEpoch` answers; below the log start: truncates fully and starts there)
    /// and fsyncs. No client write can therefore be accepted between a truncation and the state
    /// that forbids it: a crash before the state is persisted leaves the log untouched and
    /// writable; one after it leaves it read-only, and calling again (already `Mirroring` from
    /// the same source) aligns again, a no-op when the log is aligned.
    fn start_mirroring(
        &mut self,
        source_cluster_id: &str,
        source: &dyn EpochEndOffsets,
    ) -> Result<(), MirrorError<Self::Error>> {
        if !is_valid_source_cluster_id(source_cluster_id) {
            return Err(MirrorError::InvalidSourceClusterId(
                source_cluster_id.to_owned(),
            ));
        }
        match self.mirror_state() {
            MirrorPartitionState::Local | MirrorPartitionState::Stopped { .. } => {}
            MirrorPartitionState::Mirroring {
                source_cluster_id: current,
                full_truncation_pending,
                ..
            } => {
                if current != source_cluster_id {
                    return Err(MirrorError::SourceMismatch {
                        current: current.clone(),
                        requested: source_cluster_id.to_owned(),
                    });
                }
                // A start interrupted after its state was persisted may not have truncated.
                if *full_truncation_pending {
                    return truncate_fully_for_mirroring(self);
                }
                return align(self, source);
            }
            MirrorPartitionState::Stopping { .. } => {
                return Err(MirrorError::InvalidTransition {
                    from: MirrorStateKind::Stopping,
                    op: MirrorOp::StartMirroring,
                })
            }
        }
        // The destination's own epoch, above everything the log holds (its local epochs too);
        // chosen before alignment removes any epoch.
        let leader_epoch = fenced_stop_epoch(self)?;
        // A partition that never mirrored holds only its own batches. Unless the source tells
        // a Last Mirror Epoch (it mirrored from this log: failback, whose rule finds what the
        // two share), nothing of it is in the source, whatever the two clusters' epoch numbers
        // say: the log is truncated fully, after the state that marks it pending is durable.
        let full_truncation_pending = matches!(self.mirror_state(), MirrorPartitionState::Local)
            && source.last_mirror_epoch().is_none()
            && self.log_end_offset() > 0;
        self.persist_mirror_state(MirrorPartitionState::Mirroring {
            source_cluster_id: source_cluster_id.to_owned(),
            leader_epoch,
            full_truncation_pending,
        })?;
        if full_truncation_pending {
            return truncate_fully_for_mirroring(self);
        }
        align(self, source)
    }

    /// Stops mirroring: runs the `Stopping` steps (module docs) and returns the barrier's
    /// offset. The caller has removed the fetcher. From `Stopping` this continues the stop
    /// ([`resume_mirror_stop`](Self::resume_mirror_stop)); from `Stopped` it returns the
    /// existing barrier's offset.
    fn stop_mirroring(&mut self) -> Result<i64, MirrorError<Self::Error>> {
        self.stop_mirroring_with(StopPolicy::default())
    }

    /// [`stop_mirroring`](Self::stop_mirroring) under `policy` (a stop already under way
    /// continues under the policy it started with).
    fn stop_mirroring_with(&mut self, policy: StopPolicy) -> Result<i64, MirrorError<Self::Error>> {
        match self.mirror_state().clone() {
            MirrorPartitionState::Mirroring {
                full_truncation_pending: true,
                ..
            } => {
                // A first start that did not finish: its log holds no mirrored batch to keep.
                truncate_fully_for_mirroring(self)?;
                self.stop_mirroring_with(policy)
            }
            MirrorPartitionState::Mirroring {
                source_cluster_id,
                leader_epoch: mirroring_epoch,
                full_truncation_pending: false,
            } => {
                // Step 1: the stop point, durable in the log before it is persisted, and the
                // new leader epoch, fenced from every epoch the log holds before truncation.
                let lso = match policy {
                    StopPolicy::TruncateToLastStable => {
                        // The LSO, bounded by the high watermark: never from one that an unclean
                        // restart left stale or missing (it would cut committed data).
                        if !self.high_watermark_known() {
                            return Err(MirrorError::HighWatermarkUnknown);
                        }
                        self.last_stable_offset()
                    }
                    // Nothing is truncated.
                    StopPolicy::AbortOpenTransactions => self.log_end_offset(),
                };
                // Never below the epoch the destination used while mirroring (the caller's
                // metadata holds it).
                let leader_epoch = fenced_stop_epoch(self)?.max(mirroring_epoch);
                self.flush().map_err(MirrorError::Log)?;
                self.persist_mirror_state(MirrorPartitionState::Stopping {
                    step: StoppingStep::FeedStopped,
                    source_cluster_id,
                    lso,
                    last_mirrored_offset: None,
                    last_mirrored_epoch: None,
                    leader_epoch: Some(leader_epoch),
                    policy,
                })?;
                continue_stopping(self)
            }
            MirrorPartitionState::Stopping { .. } => continue_stopping(self),
            MirrorPartitionState::Stopped { barrier_offset, .. } => Ok(barrier_offset),
            MirrorPartitionState::Local => Err(MirrorError::InvalidTransition {
                from: MirrorStateKind::Local,
                op: MirrorOp::Stop,
            }),
        }
    }

    /// [`stop_mirroring_with`](Self::stop_mirroring_with), returning the barrier's offset and
    /// the leader epoch the library chose for the stop (the barrier's; local appends continue
    /// in it, and a lower one is refused, so the caller's metadata follows it).
    fn stop_mirroring_outcome(
        &mut self,
        policy: StopPolicy,
    ) -> Result<StopOutcome, MirrorError<Self::Error>>
    where
        Self: Sized,
    {
        let barrier_offset = self.stop_mirroring_with(policy)?;
        let leader_epoch = last_mirror_epoch_of(self.mirror_state(), self, self.latest_epoch())
            .map_or(UNDEFINED_EPOCH, |lme| lme.stop_epoch);
        Ok(StopOutcome {
            barrier_offset,
            leader_epoch,
        })
    }

    /// Continues an interrupted stop from its persisted step (after reopening, or after an error
    /// from [`stop_mirroring`](Self::stop_mirroring)); does nothing in other states. Returns the
    /// state reached.
    ///
    /// A stop that failed before `Stopping{FeedStopped}` was persisted left `Mirroring`: nothing
    /// was changed, and the coordinator (whose desired state is still "stopped") calls
    /// [`stop_mirroring`](Self::stop_mirroring) again.
    fn resume_mirror_stop(&mut self) -> Result<&MirrorPartitionState, MirrorError<Self::Error>> {
        if matches!(self.mirror_state(), MirrorPartitionState::Stopping { .. }) {
            continue_stopping(self)?;
        }
        Ok(self.mirror_state())
    }
}

/// Truncates `p` to [`alignment_point`] against `source` (fully, starting there, when it is
/// below the log start) and fsyncs; nothing when the log is aligned already.
fn align<P: MirroredLog + ?Sized>(
    p: &mut P,
    source: &dyn EpochEndOffsets,
) -> Result<(), MirrorError<P::Error>> {
    let point = alignment_point(p, source);
    if point < p.log_start_offset() {
        p.truncate_fully_and_start_at(point)
            .map_err(MirrorError::Log)?;
    } else if point < p.log_end_offset() {
        p.truncate_to(point).map_err(MirrorError::Log)?;
    } else {
        return Ok(());
    }
    p.flush().map_err(MirrorError::Log)
}

/// The full truncation of a first start (`Mirroring{full_truncation_pending}` is persisted):
/// truncates fully, starting at 0, fsyncs, then persists `Mirroring` without the mark. Repeated
/// as a whole after a crash anywhere in it (truncating an empty log at 0 changes nothing).
fn truncate_fully_for_mirroring<P: MirroredLog + ?Sized>(
    p: &mut P,
) -> Result<(), MirrorError<P::Error>> {
    let MirrorPartitionState::Mirroring {
        source_cluster_id,
        leader_epoch,
        full_truncation_pending: true,
    } = p.mirror_state().clone()
    else {
        return Ok(());
    };
    p.truncate_fully_and_start_at(0).map_err(MirrorError::Log)?;
    p.flush().map_err(MirrorError::Log)?;
    p.persist_mirror_state(MirrorPartitionState::Mirroring {
        source_cluster_id,
        leader_epoch,
        full_truncation_pending: false,
    })?;
    Ok(())
}

/// The new leader epoch of a stop: [`MIRROR_EPOCH_FENCE`] above every epoch in the log's
/// batches and its leader-epoch cache.
fn fenced_stop_epoch<P: MirroredLog + ?Sized>(p: &P) -> Result<i32, MirrorError<P::Error>> {
    let in_batches = p.max_batch_epoch().map_err(MirrorError::Log)?;
    let seen = p
        .latest_epoch()
        .unwrap_or(UNDEFINED_EPOCH)
        .max(in_batches.unwrap_or(UNDEFINED_EPOCH))
        .max(0);
    seen.checked_add(MIRROR_EPOCH_FENCE)
        .ok_or(MirrorError::EpochExhausted)
}

/// Steps 2–6 from whatever step is persisted.
fn continue_stopping<P: MirroredLog + ?Sized>(p: &mut P) -> Result<i64, MirrorError<P::Error>> {
    let MirrorPartitionState::Stopping {
        step,
        source_cluster_id,
        lso,
        last_mirrored_offset,
        last_mirrored_epoch,
        leader_epoch,
        policy,
    } = p.mirror_state().clone()
    else {
        return Err(MirrorError::InvalidTransition {
            from: p.mirror_state().kind(),
            op: MirrorOp::Stop,
        });
    };
    // Step 2: truncate to the persisted stop point. Step 1 made it durable, so the log reaches
    // it unless storage lost fsynced data; then the log end is the most that is left.
    let (point, last_epoch) = match (step, last_mirrored_offset, last_mirrored_epoch) {
        (StoppingStep::Truncated | StoppingStep::EpochBumped, Some(point), Some(epoch)) => {
            // Repeated: nothing may have landed past the stop point but our own barrier (every
            // append is refused while stopping; a log written by an older version accepted
            // follower appends here). Keep the barrier if it is there, cut anything else.
            // Under AbortOpenTransactions the stop's own ABORT markers lie between the stop
            // point and the barrier: nothing else can, so there is nothing to cut.
            let keep = match p.find_barrier_from(point).map_err(MirrorError::Log)? {
                Some(at) if at == point => point.saturating_add(1),
                _ => point,
            };
            if policy == StopPolicy::TruncateToLastStable && p.log_end_offset() > keep {
                p.truncate_to(keep).map_err(MirrorError::Log)?;
                p.flush().map_err(MirrorError::Log)?;
            }
            (point, epoch)
        }
        _ => {
            let point = lso.min(p.log_end_offset());
            p.truncate_to(point).map_err(MirrorError::Log)?;
            p.flush().map_err(MirrorError::Log)?;
            // The Last Mirror Epoch: the epoch of the last batch kept, from the batches as well
            // as the cache (a lost or stale `leader-epoch-checkpoint` leaves the cache short).
            let in_batches = p.max_batch_epoch().map_err(MirrorError::Log)?;
            let epoch = p.latest_epoch().max(in_batches).unwrap_or(UNDEFINED_EPOCH);
            p.persist_mirror_state(MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: source_cluster_id.clone(),
                lso,
                last_mirrored_offset: Some(point),
                last_mirrored_epoch: Some(epoch),
                leader_epoch,
                policy,
            })?;
            (point, epoch)
        }
    };
    // Step 3: the new epoch, chosen at step 1 (before truncation removed any epoch) and
    // persisted before it is used, so a resume uses the same. A state written by version 1
    // has none before this step: then it is fenced from what the truncated log holds.
    let epoch = match (step, leader_epoch) {
        (StoppingStep::EpochBumped, Some(epoch)) => epoch,
        _ => {
            let epoch = match leader_epoch {
                Some(epoch) => epoch,
                None => fenced_stop_epoch(p)?.max(last_epoch.saturating_add(MIRROR_EPOCH_FENCE)),
            };
            p.persist_mirror_state(MirrorPartitionState::Stopping {
                step: StoppingStep::EpochBumped,
                source_cluster_id: source_cluster_id.clone(),
                lso,
                last_mirrored_offset: Some(point),
                last_mirrored_epoch: Some(last_epoch),
                leader_epoch: Some(epoch),
                policy,
            })?;
            epoch
        }
    };
    p.assign_epoch(epoch, point).map_err(MirrorError::Log)?;
    // Step 4: a barrier at or after the stop point can only be ours (truncation removed
    // everything there and nothing else may append while stopping); one from an earlier attempt
    // may have survived a crash.
    let barrier_offset = match p.find_barrier_from(point).map_err(MirrorError::Log)? {
        Some(offset) => offset,
        None => {
            // Step 3b (AbortOpenTransactions): an ABORT marker for every transaction still
            // open, in the new epoch. Recomputed from producer state on a resume, so markers
            // that survived a crash are not written twice.
            if policy == StopPolicy::AbortOpenTransactions {
                p.abort_open_transactions(epoch).map_err(MirrorError::Log)?;
            }
            p.append_barrier(&source_cluster_id, epoch)
                .map_err(MirrorError::Log)?
        }
    };
    if barrier_offset < point {
        return Err(MirrorError::BarrierBeforeTruncationPoint {
            barrier_offset,
            last_mirrored_offset: point,
        });
    }
    // Step 5, also when the barrier was found: it may be in the log but not yet durable.
    p.flush().map_err(MirrorError::Log)?;
    // Step 6.
    p.persist_mirror_state(MirrorPartitionState::Stopped {
        barrier_offset,
        last_mirror_epoch: last_epoch,
    })?;
    Ok(barrier_offset)
}

/// A [`MirrorLog`] paired with a separate [`MirrorStateStore`]: the driver for logs that do not
/// own their mirror state (tests drive a fake log through it).
#[derive(Debug)]
pub struct MirrorPartition<L, S> {
    log: L,
    store: S,
    state: MirrorPartitionState,
}

impl<L: MirrorLog, S: MirrorStateStore> MirrorPartition<L, S> {
    /// Loads the persisted state. Does not resume an interrupted stop: call
    /// [`resume`](Self::resume) before serving (until then a `Stopping` partition stays
    /// read-only).
    pub fn open(log: L, store: S) -> Result<Self, MirrorError<L::Error>> {
        let state = store.load()?;
        Ok(Self { log, store, state })
    }

    /// The current (persisted) state.
    pub fn state(&self) -> &MirrorPartitionState {
        &self.state
    }

    /// The partition log.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The state store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Gives back the log and the store.
    pub fn into_parts(self) -> (L, S) {
        (self.log, self.store)
    }

    /// [`MirroredLog::stop_mirroring`].
    pub fn stop(&mut self) -> Result<i64, MirrorError<L::Error>> {
        self.stop_mirroring()
    }

    /// [`MirroredLog::resume_mirror_stop`].
    pub fn resume(&mut self) -> Result<&MirrorPartitionState, MirrorError<L::Error>> {
        self.resume_mirror_stop()
    }
}

impl<L: MirrorLog, S> EpochEndOffsets for MirrorPartition<L, S> {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.log.end_offset_for_epoch(requested)
    }
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        last_mirror_epoch_of(&self.state, &self.log, self.log.latest_epoch())
    }
}

/// The Last Mirror Epoch of a log in `state` whose latest leader epoch is `latest_epoch` (only
/// `Stopped` has one): the stop epoch is the epoch whose range holds the barrier.
pub fn last_mirror_epoch_of(
    state: &MirrorPartitionState,
    log: &dyn EpochEndOffsets,
    latest_epoch: Option<i32>,
) -> Option<LastMirrorEpoch> {
    let MirrorPartitionState::Stopped {
        barrier_offset,
        last_mirror_epoch,
    } = *state
    else {
        return None;
    };
    // The stop's epoch is the one whose range contains the barrier, found by walking down from
    // the latest.
    let mut epoch = latest_epoch?;
    for _ in 0..=u16::MAX {
        if epoch == UNDEFINED_EPOCH {
            return None;
        }
        let below = epoch.checked_sub(1)?;
        let (lower, start) = log.end_offset_for_epoch(below);
        // `start` is where `epoch` starts (the end of the largest epoch below it).
        if lower == UNDEFINED_EPOCH || start <= barrier_offset {
            let end_offset = if lower == UNDEFINED_EPOCH {
                barrier_offset
            } else {
                start.min(barrier_offset)
            };
            return Some(LastMirrorEpoch {
                epoch: last_mirror_epoch,
                end_offset,
                barrier_offset,
                stop_epoch: epoch,
            });
        }
        epoch = lower;
    }
    None
}

impl<L: MirrorLog, S> MirrorLog for MirrorPartition<L, S> {
    type Error = L::Error;
    fn last_stable_offset(&self) -> i64 {
        self.log.last_stable_offset()
    }
    fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }
    fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.log.latest_epoch()
    }
    fn high_watermark_known(&self) -> bool {
        self.log.high_watermark_known()
    }
    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error> {
        self.log.truncate_to(offset)
    }
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error> {
        self.log.truncate_fully_and_start_at(offset)
    }
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error> {
        self.log.assign_epoch(epoch, start_offset)
    }
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error> {
        self.log.find_barrier_from(from)
    }
    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error> {
        self.log.max_batch_epoch()
    }
    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error> {
        self.log.append_barrier(source_cluster_id, leader_epoch)
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.log.flush()
    }
    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error> {
        self.log.abort_open_transactions(leader_epoch)
    }
}

impl<L: MirrorLog, S: MirrorStateStore> MirroredLog for MirrorPartition<L, S> {
    fn mirror_state(&self) -> &MirrorPartitionState {
        &self.state
    }

    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError> {
        self.store.store(&next)?;
        self.state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(state: MirrorPartitionState) {
        let text = encode_mirror_state(&state).unwrap();
        assert_eq!(
            decode_mirror_state(text.as_bytes()).unwrap(),
            state,
            "{text}"
        );
    }

    #[test]
    fn every_state_round_trips() {
        roundtrip(MirrorPartitionState::Local);
        roundtrip(MirrorPartitionState::Mirroring {
            source_cluster_id: "a=b c".into(),
            leader_epoch: 14,
            full_truncation_pending: false,
        });
        roundtrip(MirrorPartitionState::Mirroring {
            source_cluster_id: "A".into(),
            leader_epoch: 10,
            full_truncation_pending: true,
        });
        assert_eq!(
            encode_mirror_state(&MirrorPartitionState::Mirroring {
                source_cluster_id: "A".into(),
                leader_epoch: 10,
                full_truncation_pending: true,
            })
            .unwrap(),
            "2\nMIRRORING\nsource=A\nleader_epoch=10\ntruncate_fully=pending\n"
        );
        roundtrip(MirrorPartitionState::Mirroring {
            source_cluster_id: "A".into(),
            leader_epoch: -1,
            full_truncation_pending: false,
        });
        roundtrip(MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 0,
            last_mirrored_offset: None,
            last_mirrored_epoch: None,
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        });
        roundtrip(MirrorPartitionState::Stopping {
            step: StoppingStep::Truncated,
            source_cluster_id: "A".into(),
            lso: i64::MAX,
            last_mirrored_offset: Some(7),
            last_mirrored_epoch: Some(-1),
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        });
        roundtrip(MirrorPartitionState::Stopping {
            step: StoppingStep::EpochBumped,
            source_cluster_id: "A".into(),
            lso: 7,
            last_mirrored_offset: Some(7),
            last_mirrored_epoch: Some(i32::MAX - 1),
            leader_epoch: Some(i32::MAX),
            policy: StopPolicy::TruncateToLastStable,
        });
        roundtrip(MirrorPartitionState::Stopped {
            barrier_offset: 42,
            last_mirror_epoch: 3,
        });
        roundtrip(MirrorPartitionState::Stopped {
            barrier_offset: 42,
            last_mirror_epoch: -1,
        });
    }

    #[test]
    fn unrepresentable_states_are_refused() {
        for state in [
            MirrorPartitionState::Mirroring {
                source_cluster_id: String::new(),
                leader_epoch: 0,
                full_truncation_pending: false,
            },
            MirrorPartitionState::Mirroring {
                source_cluster_id: "a\nb".into(),
                leader_epoch: 0,
                full_truncation_pending: false,
            },
            MirrorPartitionState::Mirroring {
                source_cluster_id: "A".into(),
                leader_epoch: -2,
                full_truncation_pending: false,
            },
            MirrorPartitionState::Stopped {
                barrier_offset: -1,
                last_mirror_epoch: 0,
            },
            MirrorPartitionState::Stopped {
                barrier_offset: 1,
                last_mirror_epoch: -2,
            },
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: Some(3),
                last_mirrored_epoch: Some(0),
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: None,
                last_mirrored_epoch: None,
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: Some(3),
                last_mirrored_epoch: Some(-2),
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
            MirrorPartitionState::Stopping {
                step: StoppingStep::EpochBumped,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: Some(3),
                last_mirrored_epoch: Some(0),
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
        ] {
            let r = encode_mirror_state(&state);
            assert!(
                matches!(r, Err(MirrorStateError::Unrepresentable(ref s)) if *s == state),
                "{r:?}"
            );
        }
    }

    #[test]
    fn non_utf8_reports_its_line() {
        let r = decode_mirror_state(b"1\nMIRRORING\nsource=\xff\n");
        assert_eq!(r, Err((3, MalformedReason::NotUtf8)));
    }
}
