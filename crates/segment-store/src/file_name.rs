//! Every naming rule of a Kafka log directory, in one place (Kafka: `LogFileUtils`, `UnifiedLog`,
//! `LogManager`, `CheckpointFile` users).
//!
//! Segment files are named after their base offset as a 20-digit zero-padded decimal followed by
//! a suffix (`00000000000000000042.index`); files in transit carry a second, temporary suffix
//! (`00000000000000000042.log.swap`). Partition directories are `<topic>-<partition>`; the topic
//! itself may contain `-`, so the split is at the last `-`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Result, SegmentError};

/// Suffix of a segment's record data file.
pub const LOG_FILE_SUFFIX: &str = ".log";
/// Suffix of the offset index.
pub const INDEX_FILE_SUFFIX: &str = ".index";
/// Suffix of the time index.
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of the aborted-transaction index.
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
/// Suffix of a producer-state snapshot.
pub const PRODUCER_SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
/// Temporary suffix: scheduled for asynchronous deletion.
pub const DELETED_FILE_SUFFIX: &str = ".deleted";
/// Temporary suffix: log-cleaner output in progress.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Temporary suffix: complete, ready to replace the originals.
pub const SWAP_FILE_SUFFIX: &str = ".swap";

/// Partition directory suffix: marked for deletion (`<topic>-<partition>.<id>-delete`).
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Partition directory suffix: future replica being moved between log dirs.
pub const FUTURE_DIR_SUFFIX: &str = "-future";
/// Partition directory suffix: stray replica no longer assigned to this broker.
pub const STRAY_DIR_SUFFIX: &str = "-stray";

/// The log directory lock file (Kafka's `LogManager.LockFileName`).
pub const LOCK_FILE_NAME: &str = ".lock";
/// Suffix of the temporary file a checkpoint is written to before the rename.
pub const CHECKPOINT_TMP_SUFFIX: &str = ".tmp";
/// Log-dir root: per-partition recovery points.
pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Log-dir root: per-partition log start offsets.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
/// Log-dir root: per-partition high watermarks.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Log-dir root: log cleaner progress.
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Partition dir: leader epoch → start offset.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Partition dir: topic id metadata.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Log-dir root: clean shutdown marker.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// Number of digits in a base-offset file name prefix.
pub const OFFSET_DIGITS: usize = 20;

/// The kind of a per-segment file, by its (first) suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// `.log`
    Log,
    /// `.index`
    Index,
    /// `.timeindex`
    TimeIndex,
    /// `.txnindex`
    TxnIndex,
    /// `.snapshot`
    Snapshot,
}

impl FileKind {
    /// All kinds, in a fixed order.
    pub const ALL: [FileKind; 5] = [
        FileKind::Log,
        FileKind::Index,
        FileKind::TimeIndex,
        FileKind::TxnIndex,
        FileKind::Snapshot,
    ];

    /// The suffix, with its leading dot.
    pub fn suffix(self) -> &'static str {
        match self {
            FileKind::Log => LOG_FILE_SUFFIX,
            FileKind::Index => INDEX_FILE_SUFFIX,
            FileKind::TimeIndex => TIME_INDEX_FILE_SUFFIX,
            FileKind::TxnIndex => TXN_INDEX_FILE_SUFFIX,
            FileKind::Snapshot => PRODUCER_SNAPSHOT_FILE_SUFFIX,
        }
    }

    /// The kind whose suffix ends `path`'s file name (`None` for a name with a temporary
    /// suffix, such as `.log.swap`, or any other name).
    pub fn of_path(path: &Path) -> Option<FileKind> {
        let name = path.file_name()?.as_encoded_bytes();
        FileKind::ALL
            .into_iter()
            .find(|k| name.ends_with(k.suffix().as_bytes()))
    }
}

/// A temporary suffix appended after the kind suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TempSuffix {
    /// `.deleted`
    Deleted,
    /// `.cleaned`
    Cleaned,
    /// `.swap`
    Swap,
}

impl TempSuffix {
    /// All temporary suffixes.
    pub const ALL: [TempSuffix; 3] = [TempSuffix::Deleted, TempSuffix::Cleaned, TempSuffix::Swap];

    /// The suffix, with its leading dot.
    pub fn suffix(self) -> &'static str {
        match self {
            TempSuffix::Deleted => DELETED_FILE_SUFFIX,
            TempSuffix::Cleaned => CLEANED_FILE_SUFFIX,
            TempSuffix::Swap => SWAP_FILE_SUFFIX,
        }
    }
}

/// A parsed segment file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParsedName {
    /// The base offset from the 20-digit prefix (never negative).
    pub base_offset: i64,
    /// The kind suffix.
    pub kind: FileKind,
    /// The temporary suffix, if any.
    pub temp: Option<TempSuffix>,
}

/// `base` as Kafka formats it (`NumberFormat` with 20 minimum integer digits, no grouping)
/// followed by `suffix`. Negative offsets never name files; they would format as `-` and 20
/// digits, as Java does.
pub fn offset_file_name(base: i64, suffix: &str) -> String {
    if base < 0 {
        format!("-{:020}{suffix}", base.unsigned_abs())
    } else {
        format!("{base:020}{suffix}")
    }
}

/// The name of the `kind` file of the segment at `base`, with an optional temporary suffix.
pub fn file_name(base: i64, kind: FileKind, temp: Option<TempSuffix>) -> String {
    let mut name = offset_file_name(base, kind.suffix());
    if let Some(t) = temp {
        name.push_str(t.suffix());
    }
    name
}

/// `dir` joined with [`file_name`]`(base, kind, None)`.
pub fn segment_file_path(dir: &Path, base: i64, kind: FileKind) -> PathBuf {
    dir.join(file_name(base, kind, None))
}

/// Infix of the quarantine file [`LogSegment::recover`](crate::LogSegment::recover) writes the
/// bytes it cuts to: `<20-digit base>.log.cut-<position>`. Not a Kafka name; the loader ignores
/// it (it does not parse as a segment file).
pub const QUARANTINE_INFIX: &str = ".cut-";

/// `<20-digit base>.log.cut-<position>`: where recovery keeps the bytes it cut from the `.log` of
/// the segment at `base`, starting at byte `position`.
pub fn quarantine_file_name(base: i64, position: u64) -> String {
    format!(
        "{}{QUARANTINE_INFIX}{position}",
        offset_file_name(base, LOG_FILE_SUFFIX)
    )
}

/// Parses `<exactly 20 ASCII digits><kind suffix>[<temp suffix>]`. Never panics; non-UTF-8 names
/// are rejected like any other non-matching name.
pub fn parse_file_name(name: &OsStr) -> Result<ParsedName> {
    parse_file_name_bytes(name.as_encoded_bytes()).ok_or_else(|| SegmentError::NotASegmentFile {
        name: name.to_os_string(),
    })
}

fn parse_file_name_bytes(bytes: &[u8]) -> Option<ParsedName> {
    let digits = bytes.get(..OFFSET_DIGITS)?;
    let rest = bytes.get(OFFSET_DIGITS..)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let base_offset = digits.iter().try_fold(0i64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })?;
    for kind in FileKind::ALL {
        let Some(after) = rest.strip_prefix(kind.suffix().as_bytes()) else {
            continue;
        };
        if after.is_empty() {
            return Some(ParsedName {
                base_offset,
                kind,
                temp: None,
            });
        }
        for temp in TempSuffix::ALL {
            if after == temp.suffix().as_bytes() {
                return Some(ParsedName {
                    base_offset,
                    kind,
                    temp: Some(temp),
                });
            }
        }
    }
    None
}

/// What a partition directory is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PartitionDirKind {
    /// `<topic>-<partition>`: the live replica.
    Live,
    /// `<topic>-<partition>.<id>-delete`: marked for deletion.
    Delete {
        /// The unique id between `.` and the suffix.
        unique_id: String,
    },
    /// `<topic>-<partition>.<id>-future`: future replica (log dir move).
    Future {
        /// The unique id between `.` and the suffix.
        unique_id: String,
    },
    /// `<topic>-<partition>.<id>-stray`: stray replica.
    Stray {
        /// The unique id between `.` and the suffix.
        unique_id: String,
    },
}

/// A parsed partition directory name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionDirName {
    /// Topic (may contain `-`; for `-delete` dirs Kafka may have shortened it to fit 255 bytes).
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Live, or one of the suffixed forms.
    pub kind: PartitionDirKind,
}

#[cfg(test)]
/// `<topic>-<partition>` (Kafka: `UnifiedLog.logDirName`).
pub fn partition_dir_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// Parses a partition directory name the way Kafka's `UnifiedLog.parseTopicPartitionName` does:
/// a name ending in `-delete`/`-future`/`-stray` must look like `<topic>-<partition>.<id><suffix>`
/// (no whitespace) and is cut at its last `.`; the rest is split at its last `-` into a
/// non-empty topic and a partition that parses as `i32`.
pub fn parse_partition_dir_name(name: &OsStr) -> Result<PartitionDirName> {
    parse_partition_dir_str(name).ok_or_else(|| SegmentError::NotAPartitionDir {
        name: name.to_os_string(),
    })
}

fn parse_partition_dir_str(name: &OsStr) -> Option<PartitionDirName> {
    let name = name.to_str()?;
    if name.is_empty() || !name.contains('-') {
        return None;
    }
    let suffixed = [DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX]
        .into_iter()
        .find(|s| name.ends_with(s));
    let (base, kind) = match suffixed {
        None => (name, PartitionDirKind::Live),
        Some(suffix) => {
            let stem = name.strip_suffix(suffix)?;
            if !matches_suffixed_pattern(stem) {
                return None;
            }
            let dot = stem.rfind('.')?;
            let base = stem.get(..dot)?;
            let unique_id = stem.get(dot + 1..)?.to_owned();
            let kind = match suffix {
                DELETE_DIR_SUFFIX => PartitionDirKind::Delete { unique_id },
                FUTURE_DIR_SUFFIX => PartitionDirKind::Future { unique_id },
                _ => PartitionDirKind::Stray { unique_id },
            };
            (base, kind)
        }
    };
    let dash = base.rfind('-')?;
    let topic = base.get(..dash)?;
    let partition = base.get(dash + 1..)?;
    if topic.is_empty() || partition.is_empty() {
        return None;
    }
    let partition = partition.parse::<i32>().ok()?;
    Some(PartitionDirName {
        topic: topic.to_owned(),
        partition,
        kind,
    })
}

/// Kafka's `^(\S+)-(\S+)\.(\S+)` (the part before the dir suffix): no Java whitespace, and some
/// `-` with a non-empty part on each side followed later by a `.` with a non-empty part after it.
fn matches_suffixed_pattern(stem: &str) -> bool {
    if stem.chars().any(is_java_whitespace) {
        return false;
    }
    let Some(dot) = stem.rfind('.') else {
        return false;
    };
    if dot + 1 >= stem.len() {
        return false;
    }
    // A `-` at index >= 1 with at least one byte between it and the last `.`.
    stem.get(..dot)
        .and_then(|head| head.get(1..))
        .and_then(|h| h.rfind('-').map(|i| i + 1))
        .is_some_and(|dash| dash + 1 < dot)
}

/// Java's `\s`: `[ \t\n\x0B\f\r]`.
pub(crate) fn is_java_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

#[cfg(test)]
/// Name of a partition's delete directory with the given unique id (Kafka:
/// `UnifiedLog.logDeleteDirName`, which shortens the topic so the name fits 255 bytes).
pub fn partition_delete_dir_name(topic: &str, partition: i32, unique_id: &str) -> String {
    let suffix = format!("-{partition}.{unique_id}{DELETE_DIR_SUFFIX}");
    let keep = topic.len().min(255usize.saturating_sub(suffix.len()));
    // Topics are ASCII in Kafka; fall back to the whole topic if the cut is not a char boundary.
    let prefix = topic.get(..keep).unwrap_or(topic);
    format!("{prefix}{suffix}")
}

#[cfg(test)]
/// Name of a partition's future or stray directory (Kafka: `logDirNameWithSuffix`).
pub fn partition_suffixed_dir_name(
    topic: &str,
    partition: i32,
    unique_id: &str,
    dir_suffix: &str,
) -> String {
    format!(
        "{}.{unique_id}{dir_suffix}",
        partition_dir_name(topic, partition)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_20_digits() {
        assert_eq!(offset_file_name(0, ".log"), "00000000000000000000.log");
        assert_eq!(offset_file_name(42, ".index"), "00000000000000000042.index");
        assert_eq!(
            offset_file_name(i64::MAX, ".log"),
            "09223372036854775807.log"
        );
        assert_eq!(
            file_name(7, FileKind::TimeIndex, Some(TempSuffix::Swap)),
            "00000000000000000007.timeindex.swap"
        );
    }

    #[test]
    fn parses_every_kind_and_temp() {
        for kind in FileKind::ALL {
            for temp in std::iter::once(None).chain(TempSuffix::ALL.map(Some)) {
                let n = file_name(123_456, kind, temp);
                let p = parse_file_name(OsStr::new(&n)).unwrap();
                assert_eq!(
                    p,
                    ParsedName {
                        base_offset: 123_456,
                        kind,
                        temp
                    }
                );
            }
        }
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "",
            "0000000000000000000.log",   // 19 digits
            "000000000000000000000.log", // 21 digits
            "00000000000000000000",
            "00000000000000000000.txt",
            "00000000000000000000.log.",
            "00000000000000000000.logx",
            "00000000000000000000.log.swap.swap",
            "0000000000000000000a.log",
            "99999999999999999999.log", // > i64::MAX
            "-0000000000000000001.log",
            "leader-epoch-checkpoint",
            ".lock",
        ] {
            let r = parse_file_name(OsStr::new(bad));
            assert!(
                matches!(r, Err(SegmentError::NotASegmentFile { .. })),
                "{bad}: {r:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_is_rejected_not_panicking() {
        use std::os::unix::ffi::OsStrExt;
        let name = OsStr::from_bytes(b"00000000000000000000.lo\xff");
        assert!(parse_file_name(name).is_err());
        let name = OsStr::from_bytes(b"\xff0000000000000000000.log");
        assert!(parse_file_name(name).is_err());
        assert!(parse_partition_dir_name(OsStr::from_bytes(b"t\xff-0")).is_err());
    }

    #[test]
    fn partition_dirs() {
        let p = parse_partition_dir_name(OsStr::new("my-topic-12")).unwrap();
        assert_eq!(p.topic, "my-topic");
        assert_eq!(p.partition, 12);
        assert_eq!(p.kind, PartitionDirKind::Live);
        assert_eq!(partition_dir_name("my-topic", 12), "my-topic-12");

        let d = partition_delete_dir_name("my-topic", 3, "abc123");
        assert_eq!(d, "my-topic-3.abc123-delete");
        let p = parse_partition_dir_name(OsStr::new(&d)).unwrap();
        assert_eq!(
            (p.topic.as_str(), p.partition, p.kind),
            (
                "my-topic",
                3,
                PartitionDirKind::Delete {
                    unique_id: "abc123".into()
                }
            )
        );
        let f = partition_suffixed_dir_name("t", 0, "u", FUTURE_DIR_SUFFIX);
        assert_eq!(f, "t-0.u-future");
        assert!(matches!(
            parse_partition_dir_name(OsStr::new(&f)).unwrap().kind,
            PartitionDirKind::Future { .. }
        ));
        assert!(matches!(
            parse_partition_dir_name(OsStr::new("t-0.u-stray"))
                .unwrap()
                .kind,
            PartitionDirKind::Stray { .. }
        ));

        for bad in [
            "",
            "topic",
            "-1",
            "topic-",
            "topic-x",
            "t-0-delete",
            "t-0.-delete",
            "t 1-0.u-delete",
            "t-99999999999",
        ] {
            assert!(
                matches!(
                    parse_partition_dir_name(OsStr::new(bad)),
                    Err(SegmentError::NotAPartitionDir { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn long_topic_delete_dir_fits_255() {
        let topic = "x".repeat(249);
        let d = partition_delete_dir_name(&topic, 0, &"u".repeat(32));
        assert_eq!(d.len(), 255);
        assert!(parse_partition_dir_name(OsStr::new(&d)).is_ok());
    }
}
