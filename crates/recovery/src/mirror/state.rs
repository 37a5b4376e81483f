//! The mirror partition states, their steps and the epoch fence.

use std::fmt;

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
        /// refused and [`MirroredLog::start_mirroring`](crate::MirroredLog::start_mirroring) repeats the truncation.
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
