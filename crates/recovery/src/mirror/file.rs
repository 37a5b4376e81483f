//! The mirror state file: its text format, its errors, and where it is stored.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::state::{
    is_valid_source_cluster_id, MirrorPartitionState, StopPolicy, StoppingStep, MIRROR_STATE_FILE,
    MIRROR_STATE_VERSION,
};
use crate::leader_epoch::UNDEFINED_EPOCH;
use crate::snapshot::{SnapshotIo, StdIo};

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

/// Where a partition's mirror state is kept: the seam the `testkit::MirrorPartition` driver persists
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
