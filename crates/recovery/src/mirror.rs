//! KIP-1279 mirror partition states, as far as the storage layer needs them (reference §9.2, §9.3;
//! `docs/barrier.md`, "Mirror partition states").
//!
//! ```text
//!   Local ──start_mirroring──▶ Mirroring ──stop──▶ Stopping{FeedStopped} ──▶ Stopping{Truncated}
//!     ▲                            ▲                                                 │
//!     │ (never mirrored)           └──────────start_mirroring (failback)── Stopped ◀─┘
//! ```
//!
//! * `Mirroring`: the fetcher appends the source's batches as they are; clients may not write.
//! * `Stopping`: a sequence of durable steps, each persisted before the next one starts, so that a
//!   crash at any point resumes where it left off ([`MirrorPartition::resume`]):
//!   1. persist `Stopping{step: FeedStopped, lso}` (the caller has removed the fetcher; `lso` is
//!      the log's last stable offset at that moment);
//!   2. truncate the log to the LSO, fsync, persist `Stopping{step: Truncated,
//!      last_mirrored_offset}` (the truncation point = the new log end);
//!   3. unless a barrier already exists at or after the truncation point, append the
//!      `MIRROR_PID_RESET` barrier with the source cluster id;
//!   4. fsync the log;
//!   5. persist `Stopped{barrier_offset}`.
//! * `Stopped`: writable. `Local`: never mirrored (no `mirror-state` file), writable.
//!
//! Invariants (tested by crashing after every durable operation, `tests/recovery/mirror.rs`):
//! the partition never accepts client appends before the barrier is durable, and the barrier is
//! written exactly once per stop (on resume we look for it before writing it).
//!
//! Differences from the KIP-1279 forks: they skip the barrier when the source cluster id is
//! unknown; we refuse to start mirroring without one, so every stop writes a barrier. They abort
//! open transactions with ABORT markers before the barrier; truncating to the LSO removes every
//! open transaction's data first, so none is open at the barrier (and if one were, the barrier
//! itself aborts it, see [`crate::barrier`]). Leader-epoch fencing (`LastMirrorEpochs`, epoch
//! bumps) belongs to the coordinator, not to the log.
//!
//! # The `mirror-state` file
//! A small UTF-8 text file in the partition directory, written atomically (temporary file, fsync,
//! rename, fsync of the directory, through [`SnapshotIo::write_atomically`]; a partition log's
//! own file, [`crate::PartitionLog::mirror_state_file`], goes through the log's storage seam).
//! Lines end with
//! `\n`; the first line is the format version, the second the state, then `key=value` lines in
//! exactly this order (the value is everything after the first `=`):
//!
//! ```text
//! 0                         version (only 0 exists)
//! MIRRORING                 source=<id>
//! STOPPING                  step=FEED_STOPPED|TRUNCATED, source=<id>, lso=<i64>,
//!                           last_mirrored_offset=<i64>   (only when step=TRUNCATED)
//! STOPPED                   barrier_offset=<i64>
//! LOCAL                     (no fields; a missing file also means LOCAL)
//! ```
//! Offsets are non-negative decimal integers. A source cluster id is non-empty and contains no
//! control characters (Kafka cluster ids are 22-character base64 UUIDs). Anything else (unknown
//! version, state or step, a missing, extra or reordered line, a bad number) is reported as
//! [`MirrorStateError::Malformed`] with its 1-based line number.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::snapshot::{SnapshotIo, StdIo};

/// Name of the state file in the partition directory.
pub const MIRROR_STATE_FILE: &str = "mirror-state";
/// The only version of the `mirror-state` format.
pub const MIRROR_STATE_VERSION: u32 = 0;

/// A partition's mirror state (KIP-1279 `MirrorPartitionState`, reduced to what the log needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPartitionState {
    /// Batches from `source_cluster_id` are appended as they are; read-only for clients.
    Mirroring {
        /// The source cluster's id (written into the barrier at stop).
        source_cluster_id: String,
    },
    /// Stopping, at `step`; read-only for clients.
    Stopping {
        /// The last step that is durable.
        step: StoppingStep,
        /// The source cluster's id.
        source_cluster_id: String,
        /// The log's last stable offset when the feed stopped.
        lso: i64,
        /// The truncation point (log end after truncating to the LSO); set from
        /// [`StoppingStep::Truncated`] on.
        last_mirrored_offset: Option<i64>,
    },
    /// Mirroring stopped; the barrier at `barrier_offset` is durable; writable.
    Stopped {
        /// Base offset of the barrier this stop wrote (or found).
        barrier_offset: i64,
    },
    /// Never mirrored; writable.
    Local,
}

/// The durable steps of [`MirrorPartitionState::Stopping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoppingStep {
    /// The fetcher is removed and the LSO recorded; the log is not truncated yet.
    FeedStopped,
    /// The log is truncated to the LSO (durably); the barrier may or may not be written yet.
    Truncated,
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
    /// The line is not `<expected>=…`.
    ExpectedKey {
        /// The key that must come here.
        expected: &'static str,
        /// The line found.
        found: String,
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
                    MalformedReason::ExpectedKey { expected, found } => {
                        write!(f, "expected {expected}=…, found {found:?}")
                    }
                    MalformedReason::BadOffset { key, value } => {
                        write!(f, "{key} is not a non-negative offset: {value:?}")
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
        MirrorPartitionState::Mirroring { source_cluster_id } => {
            if !is_valid_source_cluster_id(source_cluster_id) {
                return Err(bad());
            }
            out.push_str(&format!("source={source_cluster_id}\n"));
        }
        MirrorPartitionState::Stopping {
            step,
            source_cluster_id,
            lso,
            last_mirrored_offset,
        } => {
            let offsets_ok = *lso >= 0 && last_mirrored_offset.is_none_or(|o| o >= 0);
            let shape_ok = match step {
                StoppingStep::FeedStopped => last_mirrored_offset.is_none(),
                StoppingStep::Truncated => last_mirrored_offset.is_some(),
            };
            if !is_valid_source_cluster_id(source_cluster_id) || !offsets_ok || !shape_ok {
                return Err(bad());
            }
            out.push_str(&format!(
                "step={}\nsource={source_cluster_id}\nlso={lso}\n",
                step.as_str()
            ));
            if let Some(o) = last_mirrored_offset {
                out.push_str(&format!("last_mirrored_offset={o}\n"));
            }
        }
        MirrorPartitionState::Stopped { barrier_offset } => {
            if *barrier_offset < 0 {
                return Err(bad());
            }
            out.push_str(&format!("barrier_offset={barrier_offset}\n"));
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
    if version != MIRROR_STATE_VERSION.to_string() {
        return Err((n, MalformedReason::UnsupportedVersion(version.to_owned())));
    }
    let (n, name) = lines.next("state")?;
    let state = match name {
        "MIRRORING" => MirrorPartitionState::Mirroring {
            source_cluster_id: lines.source()?,
        },
        "STOPPING" => {
            let (n, step) = lines.field("step")?;
            let step = match step {
                "FEED_STOPPED" => StoppingStep::FeedStopped,
                "TRUNCATED" => StoppingStep::Truncated,
                other => return Err((n, MalformedReason::UnknownStep(other.to_owned()))),
            };
            let source_cluster_id = lines.source()?;
            let lso = lines.offset("lso")?;
            let last_mirrored_offset = match step {
                StoppingStep::FeedStopped => None,
                StoppingStep::Truncated => Some(lines.offset("last_mirrored_offset")?),
            };
            MirrorPartitionState::Stopping {
                step,
                source_cluster_id,
                lso,
                last_mirrored_offset,
            }
        }
        "STOPPED" => MirrorPartitionState::Stopped {
            barrier_offset: lines.offset("barrier_offset")?,
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
// The transition driver
// ------------------------------------------------------------------------------------------------

/// What the mirror state driver needs from the partition log.
pub trait MirrorLog {
    /// The log's error type.
    type Error: std::error::Error + 'static;
    /// The last stable offset (no open or undecided transaction below it; `<=` the log end).
    fn last_stable_offset(&self) -> i64;
    /// The offset the next append gets.
    fn log_end_offset(&self) -> i64;
    /// Removes every batch at or above `offset` (a no-op when `offset >= log_end_offset`) and
    /// rebuilds producer state. Durable after the next [`flush`](MirrorLog::flush).
    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error>;
    /// Finds a `MIRROR_PID_RESET` batch at offset `>= from`; returns its offset.
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error>;
    /// Appends the barrier (COORDINATOR origin) and returns its offset; must apply it to
    /// producer state. Durable after the next [`flush`](MirrorLog::flush).
    fn append_barrier(&mut self, source_cluster_id: &str) -> Result<i64, Self::Error>;
    /// Makes every earlier append and truncation durable (fsync).
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// An operation the mirror state driver was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorOp {
    /// [`MirrorPartition::start_mirroring`].
    StartMirroring,
    /// [`MirrorPartition::stop`].
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

/// A partition log together with its persisted mirror state: the KIP-1279 transition driver.
///
/// Every transition persists its state through `S` before it is visible here, so
/// [`state`](Self::state) never runs ahead of what a crash would leave behind. On error the
/// in-memory state is the last persisted one; call [`resume`](Self::resume) (or reopen) to
/// continue.
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

    /// Whether clients may append (`Stopped` or `Local`).
    pub fn accepts_client_appends(&self) -> bool {
        self.state.accepts_client_appends()
    }

    /// `Ok` if clients may append, else [`MirrorError::ReadOnly`]; the client append path calls
    /// this first.
    pub fn check_client_append(&self) -> Result<(), MirrorError<L::Error>> {
        if self.accepts_client_appends() {
            Ok(())
        } else {
            Err(MirrorError::ReadOnly {
                state: self.state.kind(),
            })
        }
    }

    /// Whether the mirror fetcher may append (only in `Mirroring`).
    pub fn accepts_mirrored_appends(&self) -> bool {
        matches!(self.state, MirrorPartitionState::Mirroring { .. })
    }

    /// Starts mirroring from `source_cluster_id`, from `Local` or `Stopped` (failback): truncates
    /// the log to its last stable offset, fsyncs, then persists `Mirroring`. A crash before the
    /// state is persisted leaves the old writable state with a truncated log; calling again
    /// truncates again. Idempotent when already mirroring from the same source.
    pub fn start_mirroring(
        &mut self,
        source_cluster_id: &str,
    ) -> Result<(), MirrorError<L::Error>> {
        if !is_valid_source_cluster_id(source_cluster_id) {
            return Err(MirrorError::InvalidSourceClusterId(
                source_cluster_id.to_owned(),
            ));
        }
        match &self.state {
            MirrorPartitionState::Local | MirrorPartitionState::Stopped { .. } => {}
            MirrorPartitionState::Mirroring {
                source_cluster_id: current,
            } => {
                return if current == source_cluster_id {
                    Ok(())
                } else {
                    Err(MirrorError::SourceMismatch {
                        current: current.clone(),
                        requested: source_cluster_id.to_owned(),
                    })
                };
            }
            MirrorPartitionState::Stopping { .. } => {
                return Err(MirrorError::InvalidTransition {
                    from: MirrorStateKind::Stopping,
                    op: MirrorOp::StartMirroring,
                })
            }
        }
        let lso = self.log.last_stable_offset();
        self.log.truncate_to(lso).map_err(MirrorError::Log)?;
        self.log.flush().map_err(MirrorError::Log)?;
        self.persist(MirrorPartitionState::Mirroring {
            source_cluster_id: source_cluster_id.to_owned(),
        })
    }

    /// Stops mirroring: runs the `Stopping` steps (module docs) and returns the barrier's
    /// offset. The caller has removed the fetcher. From `Stopping` this continues the stop
    /// ([`resume`](Self::resume)); from `Stopped` it returns the existing barrier's offset.
    pub fn stop(&mut self) -> Result<i64, MirrorError<L::Error>> {
        match &self.state {
            MirrorPartitionState::Mirroring { source_cluster_id } => {
                let lso = self.log.last_stable_offset();
                let next = MirrorPartitionState::Stopping {
                    step: StoppingStep::FeedStopped,
                    source_cluster_id: source_cluster_id.clone(),
                    lso,
                    last_mirrored_offset: None,
                };
                self.persist(next)?;
                self.continue_stopping()
            }
            MirrorPartitionState::Stopping { .. } => self.continue_stopping(),
            MirrorPartitionState::Stopped { barrier_offset } => Ok(*barrier_offset),
            MirrorPartitionState::Local => Err(MirrorError::InvalidTransition {
                from: MirrorStateKind::Local,
                op: MirrorOp::Stop,
            }),
        }
    }

    /// Continues an interrupted stop from its persisted step (after reopening, or after an error
    /// from [`stop`](Self::stop)); does nothing in other states. Returns the state reached.
    ///
    /// A stop that failed before `Stopping{FeedStopped}` was persisted left `Mirroring`: nothing
    /// was changed, and the coordinator (whose desired state is still "stopped") calls
    /// [`stop`](Self::stop) again.
    pub fn resume(&mut self) -> Result<&MirrorPartitionState, MirrorError<L::Error>> {
        if matches!(self.state, MirrorPartitionState::Stopping { .. }) {
            self.continue_stopping()?;
        }
        Ok(&self.state)
    }

    fn persist(&mut self, next: MirrorPartitionState) -> Result<(), MirrorError<L::Error>> {
        self.store.store(&next)?;
        self.state = next;
        Ok(())
    }

    /// Steps 2–5 from whatever step is persisted.
    fn continue_stopping(&mut self) -> Result<i64, MirrorError<L::Error>> {
        let MirrorPartitionState::Stopping {
            step,
            source_cluster_id,
            lso,
            last_mirrored_offset,
        } = self.state.clone()
        else {
            return Err(MirrorError::InvalidTransition {
                from: self.state.kind(),
                op: MirrorOp::Stop,
            });
        };
        let truncation_point = match (step, last_mirrored_offset) {
            (StoppingStep::Truncated, Some(point)) => point,
            _ => {
                // Step 2. After a crash the log may have lost an unflushed tail and recomputed a
                // lower LSO: never truncate above what is stable now.
                let point = lso
                    .min(self.log.last_stable_offset())
                    .min(self.log.log_end_offset());
                self.log.truncate_to(point).map_err(MirrorError::Log)?;
                self.log.flush().map_err(MirrorError::Log)?;
                self.persist(MirrorPartitionState::Stopping {
                    step: StoppingStep::Truncated,
                    source_cluster_id: source_cluster_id.clone(),
                    lso,
                    last_mirrored_offset: Some(point),
                })?;
                point
            }
        };
        // Step 3: a barrier at or after the truncation point can only be ours (truncation removed
        // everything there); one from an earlier attempt may have survived a crash.
        let barrier_offset = match self
            .log
            .find_barrier_from(truncation_point)
            .map_err(MirrorError::Log)?
        {
            Some(offset) => offset,
            None => {
                // Anything above the truncation point without a barrier did not come from this
                // stop; the truncation is durable, so this is normally a no-op.
                self.log
                    .truncate_to(truncation_point)
                    .map_err(MirrorError::Log)?;
                self.log
                    .append_barrier(&source_cluster_id)
                    .map_err(MirrorError::Log)?
            }
        };
        if barrier_offset < truncation_point {
            return Err(MirrorError::BarrierBeforeTruncationPoint {
                barrier_offset,
                last_mirrored_offset: truncation_point,
            });
        }
        // Step 4, also when the barrier was found: it may be in the log but not yet durable.
        self.log.flush().map_err(MirrorError::Log)?;
        // Step 5.
        self.persist(MirrorPartitionState::Stopped { barrier_offset })?;
        Ok(barrier_offset)
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
        });
        roundtrip(MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 0,
            last_mirrored_offset: None,
        });
        roundtrip(MirrorPartitionState::Stopping {
            step: StoppingStep::Truncated,
            source_cluster_id: "A".into(),
            lso: i64::MAX,
            last_mirrored_offset: Some(7),
        });
        roundtrip(MirrorPartitionState::Stopped { barrier_offset: 42 });
    }

    #[test]
    fn unrepresentable_states_are_refused() {
        for state in [
            MirrorPartitionState::Mirroring {
                source_cluster_id: String::new(),
            },
            MirrorPartitionState::Mirroring {
                source_cluster_id: "a\nb".into(),
            },
            MirrorPartitionState::Stopped { barrier_offset: -1 },
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: Some(3),
            },
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: "A".into(),
                lso: 3,
                last_mirrored_offset: None,
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
        let r = decode_mirror_state(b"0\nMIRRORING\nsource=\xff\n");
        assert_eq!(r, Err((3, MalformedReason::NotUtf8)));
    }
}
