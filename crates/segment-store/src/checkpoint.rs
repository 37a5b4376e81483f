//! Kafka's text checkpoint files (`CheckpointFile`, `OffsetCheckpointFile`,
//! `LeaderEpochCheckpointFile`), read and written byte for byte.
//!
//! ```text
//! <version>\n          always 0 for the files here
//! <entry count>\n
//! <entry>\n            × count; fields separated by one space when written
//! ```
//!
//! Reading follows Kafka: an empty file (or one with only a version line) holds no entries; lines
//! end at `\n`, `\r` or `\r\n`; entries are split on runs of whitespace (Java's `\s+`, keeping a
//! leading empty field); a wrong version, a bad count, a malformed entry or a count mismatch is an
//! error ([`SegmentError::MalformedCheckpoint`] with the 1-based line).
//!
//! Writing is atomic through [`crate::io::Storage`]: write `<file>.tmp`, fsync it, rename it over
//! `<file>`, fsync the directory. A crash at any point leaves either the old or the new content.

use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CheckpointProblem, Result, SegmentError};
use crate::file_name::is_java_whitespace;
use crate::io::{write_atomically, OpenMode, Storage};

/// The checkpoint format version written and accepted.
pub const CURRENT_VERSION: i32 = 0;

/// The longest checkpoint file read (8 MiB): a log-dir checkpoint of ~200,000 partitions with
/// 20-character topic names, far more than a broker holds. Kafka's format has no bound (the count
/// is an `int`, whitespace runs are allowed); this one keeps the memory a damaged file can make
/// a reader use to a window. A longer file is [`SegmentError::FileTooLarge`].
pub const MAX_CHECKPOINT_BYTES: u64 = 8 << 20;

/// A topic and partition (Kafka `TopicPartition`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition, unchecked (names from outside: [`TopicPartition::try_new`]).
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl TopicPartition {
    /// Builds a topic-partition Kafka could have created: the topic passes Kafka's topic-name rules (`Topic.validate`)
    /// and the partition is not negative. Use this for names that come from outside (a partition
    /// directory created from it stays inside its log directory).
    pub fn try_new(
        topic: impl Into<String>,
        partition: i32,
    ) -> std::result::Result<Self, InvalidTopicPartition> {
        let tp = TopicPartition::new(topic, partition);
        tp.validate()?;
        Ok(tp)
    }

    /// Whether Kafka could have created this topic-partition (see [`TopicPartition::try_new`]).
    pub fn validate(&self) -> std::result::Result<(), InvalidTopicPartition> {
        validate_topic(&self.topic)?;
        if self.partition < 0 {
            return Err(InvalidTopicPartition::NegativePartition(self.partition));
        }
        Ok(())
    }
}

/// The longest topic name Kafka accepts (`Topic.MAX_NAME_LENGTH`): 249 characters, so that
/// `<topic>-<partition>.<id>-delete` folder names fit 255 bytes.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// Why a topic-partition is not one Kafka could have created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidTopicPartition {
    /// The topic is empty.
    EmptyTopic,
    /// The topic is `.` or `..`.
    DotTopic(String),
    /// The topic has more than [`MAX_TOPIC_NAME_LENGTH`] characters.
    TopicTooLong(usize),
    /// The topic holds a character other than ASCII alphanumerics, `.`, `_` and `-`; the byte
    /// position of the first one.
    IllegalCharacter {
        /// The topic.
        topic: String,
        /// Byte position of the first illegal character.
        position: usize,
    },
    /// The partition is negative.
    NegativePartition(i32),
}

impl fmt::Display for InvalidTopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidTopicPartition::EmptyTopic => write!(f, "the topic name is empty"),
            InvalidTopicPartition::DotTopic(t) => {
                write!(f, "the topic name cannot be \".\" or \"..\" (it is {t:?})")
            }
            InvalidTopicPartition::TopicTooLong(n) => write!(
                f,
                "the topic name has {n} characters, more than {MAX_TOPIC_NAME_LENGTH}"
            ),
            InvalidTopicPartition::IllegalCharacter { topic, position } => write!(
                f,
                "the topic name {topic:?} has a character other than ASCII alphanumerics, '.', \
                 '_' and '-' at byte {position}"
            ),
            InvalidTopicPartition::NegativePartition(p) => {
                write!(f, "the partition {p} is negative")
            }
        }
    }
}

impl std::error::Error for InvalidTopicPartition {}

/// Kafka's `Topic.validate`: not empty, not `.` or `..`, at most [`MAX_TOPIC_NAME_LENGTH`]
/// characters, only `[a-zA-Z0-9._-]`.
pub fn validate_topic(topic: &str) -> std::result::Result<(), InvalidTopicPartition> {
    if topic.is_empty() {
        return Err(InvalidTopicPartition::EmptyTopic);
    }
    if topic == "." || topic == ".." {
        return Err(InvalidTopicPartition::DotTopic(topic.to_owned()));
    }
    if let Some(position) = topic
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')))
    {
        return Err(InvalidTopicPartition::IllegalCharacter {
            topic: topic.to_owned(),
            position,
        });
    }
    if topic.len() > MAX_TOPIC_NAME_LENGTH {
        return Err(InvalidTopicPartition::TopicTooLong(topic.len()));
    }
    Ok(())
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A leader epoch and the first offset written in it (Kafka `EpochEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    /// Leader epoch.
    pub epoch: i32,
    /// First offset of the epoch.
    pub start_offset: i64,
}

/// An entry type of a checkpoint file: one line, formatted and parsed.
pub trait CheckpointEntry: Sized {
    /// Parses the whitespace-separated fields of one line; `None` if malformed.
    fn parse(fields: &[&str]) -> Option<Self>;
    /// Writes the line (without the newline).
    fn format(&self, out: &mut String);
}

impl CheckpointEntry for (TopicPartition, i64) {
    fn parse(fields: &[&str]) -> Option<Self> {
        let [topic, partition, offset] = fields else {
            return None;
        };
        Some((
            TopicPartition::new(*topic, partition.parse().ok()?),
            offset.parse().ok()?,
        ))
    }
    fn format(&self, out: &mut String) {
        use fmt::Write;
        let _ = write!(out, "{} {} {}", self.0.topic, self.0.partition, self.1);
    }
}

impl CheckpointEntry for EpochEntry {
    fn parse(fields: &[&str]) -> Option<Self> {
        let [epoch, start_offset] = fields else {
            return None;
        };
        Some(EpochEntry {
            epoch: epoch.parse().ok()?,
            start_offset: start_offset.parse().ok()?,
        })
    }
    fn format(&self, out: &mut String) {
        use fmt::Write;
        let _ = write!(out, "{} {}", self.epoch, self.start_offset);
    }
}

/// A checkpoint file of entries `E`.
pub struct CheckpointFile<E> {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    version: i32,
    _entries: PhantomData<fn() -> E>,
}

impl<E> fmt::Debug for CheckpointFile<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
/// `replication-offset-checkpoint`, `cleaner-offset-checkpoint`: `topic partition offset`.
pub type OffsetCheckpointFile = CheckpointFile<(TopicPartition, i64)>;
/// `leader-epoch-checkpoint`: `epoch startOffset`.
pub type LeaderEpochCheckpointFile = CheckpointFile<EpochEntry>;

impl<E: CheckpointEntry> CheckpointFile<E> {
    /// A handle on the checkpoint at `path` (nothing is touched on disk).
    pub fn new(storage: Arc<dyn Storage>, path: &Path) -> Self {
        CheckpointFile {
            storage,
            path: path.to_path_buf(),
            version: CURRENT_VERSION,
            _entries: PhantomData,
        }
    }

    /// Like [`Self::new`], and creates the file empty if it is missing, as Kafka's constructor
    /// does (the creation is not synced).
    pub fn open(storage: Arc<dyn Storage>, path: &Path) -> Result<Self> {
        let file = Self::new(storage, path);
        if !file.storage.exists(path)? {
            file.storage.open(path, OpenMode::Create)?;
        }
        Ok(file)
    }

    /// The checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and parses the file. A missing file is an I/O error (`NotFound`); one longer than
    /// [`MAX_CHECKPOINT_BYTES`] is [`SegmentError::FileTooLarge`], not read.
    pub fn read(&self) -> Result<Vec<E>> {
        let bytes = self.storage.read_capped(&self.path, MAX_CHECKPOINT_BYTES)?;
        decode(&self.path, self.version, &bytes)
    }

    /// Replaces the file's content atomically: `<file>.tmp`, fsync, rename, fsync the
    /// directory.
    pub fn write(&self, entries: &[E]) -> Result<()> {
        let bytes = encode(self.version, entries);
        write_atomically(self.storage.as_ref(), &self.path, bytes.as_bytes())
    }
}

/// The file content for `entries`.
pub fn encode<E: CheckpointEntry>(version: i32, entries: &[E]) -> String {
    let mut out = format!("{version}\n{}\n", entries.len());
    for e in entries {
        e.format(&mut out);
        out.push('\n');
    }
    out
}

/// Lines as Java's `BufferedReader.readLine` sees them: terminated by `\n`, `\r` or `\r\n`; a
/// last line without terminator counts; no empty line after a final terminator.
/// One at a time (a file of empty lines must not become a vector of them).
fn java_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            None => Some(std::mem::take(&mut rest)),
            Some(i) => {
                let (line, tail) = rest.split_at(i);
                rest = match tail {
                    [b'\r', b'\n', t @ ..] => t,
                    [_, t @ ..] => t,
                    [] => &[],
                };
                Some(line)
            }
        }
    })
}

/// Java's `Pattern.compile("\\s+").split(line)`: a leading empty field is kept when the line
/// starts with whitespace, trailing empty fields are dropped, an empty line is one empty field.
fn java_split_whitespace(line: &str) -> Vec<&str> {
    if line.is_empty() {
        return vec![""];
    }
    let mut fields = Vec::new();
    let mut field_start = Some(0);
    for (i, c) in line.char_indices() {
        if is_java_whitespace(c) {
            if let Some(s) = field_start.take() {
                fields.push(line.get(s..i).unwrap_or_default());
            }
        } else if field_start.is_none() {
            field_start = Some(i);
        }
    }
    if let Some(s) = field_start {
        fields.push(line.get(s..).unwrap_or_default());
    }
    while fields.last() == Some(&"") {
        fields.pop();
    }
    fields
}

/// Parses checkpoint content the way Kafka's `CheckpointReadBuffer.read` does.
pub fn decode<E: CheckpointEntry>(path: &Path, version: i32, bytes: &[u8]) -> Result<Vec<E>> {
    let malformed = |line: usize, reason| SegmentError::MalformedCheckpoint {
        path: path.to_path_buf(),
        line,
        reason,
    };
    // Every line is checked for UTF-8 before any is parsed (as before), without keeping them.
    let mut count = 0usize;
    for (i, raw) in java_lines(bytes).enumerate() {
        std::str::from_utf8(raw).map_err(|_| malformed(i + 1, CheckpointProblem::InvalidUtf8))?;
        count = i + 1;
    }
    let mut lines = java_lines(bytes).map(|raw| std::str::from_utf8(raw).unwrap_or_default());
    let Some(version_line) = lines.next() else {
        return Ok(Vec::new());
    };
    let found: i32 = version_line
        .parse()
        .map_err(|_| malformed(1, CheckpointProblem::NotAnInteger))?;
    if found != version {
        return Err(malformed(
            1,
            CheckpointProblem::UnsupportedVersion {
                found,
                expected: version,
            },
        ));
    }
    let Some(count_line) = lines.next() else {
        return Ok(Vec::new());
    };
    let expected: i32 = count_line
        .parse()
        .map_err(|_| malformed(2, CheckpointProblem::NotAnInteger))?;
    let found = count.saturating_sub(2);
    // Entries are kept only when their number is the one the file declares (otherwise each is
    // still parsed, for the first malformed one, but the answer is a count mismatch).
    let keep = i32::try_from(found).ok() == Some(expected);
    let mut entries = Vec::new();
    for (i, line) in lines.enumerate() {
        let entry = E::parse(&java_split_whitespace(line))
            .ok_or_else(|| malformed(i + 3, CheckpointProblem::BadEntry))?;
        if keep {
            entries.push(entry);
        }
    }
    if !keep {
        return Err(malformed(
            2,
            CheckpointProblem::CountMismatch { expected, found },
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafkas_rules() {
        for ok in ["orders", "a", "A.b_c-9", &"x".repeat(249)] {
            assert_eq!(TopicPartition::try_new(ok, 0).map(|_| ()), Ok(()), "{ok}");
        }
        let bad: [(&str, i32, InvalidTopicPartition); 7] = [
            ("", 0, InvalidTopicPartition::EmptyTopic),
            (".", 0, InvalidTopicPartition::DotTopic(".".into())),
            ("..", 0, InvalidTopicPartition::DotTopic("..".into())),
            (
                "../escape",
                0,
                InvalidTopicPartition::IllegalCharacter {
                    topic: "../escape".into(),
                    position: 2,
                },
            ),
            (
                "a b",
                0,
                InvalidTopicPartition::IllegalCharacter {
                    topic: "a b".into(),
                    position: 1,
                },
            ),
            ("neg", -1, InvalidTopicPartition::NegativePartition(-1)),
            (
                &"x".repeat(250),
                0,
                InvalidTopicPartition::TopicTooLong(250),
            ),
        ];
        for (topic, partition, want) in bad {
            assert_eq!(TopicPartition::try_new(topic, partition), Err(want));
        }
    }

    #[test]
    fn java_line_and_split_rules() {
        let lines = |b| java_lines(b).collect::<Vec<_>>();
        assert_eq!(lines(b"a\nb\r\nc\rd"), vec![&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(lines(b"a\n"), vec![&b"a"[..]]);
        assert_eq!(lines(b"a\n\n"), vec![&b"a"[..], b""]);
        assert!(lines(b"").is_empty());
        assert_eq!(java_split_whitespace("a  b\tc "), vec!["a", "b", "c"]);
        assert_eq!(java_split_whitespace(" a b"), vec!["", "a", "b"]);
        assert_eq!(java_split_whitespace(""), vec![""]);
        assert!(java_split_whitespace("   ").is_empty());
    }
}
