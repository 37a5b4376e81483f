//! Typed parse errors: what was wrong, and at which byte.
//!
//! Every parser in this crate returns [`FormatError`]: a [`FormatErrorKind`] plus the absolute byte
//! position (within the input the caller handed in, e.g. a `.log` file) where the problem was found.
//! Callers match on the kind to decide between "truncate here" and "fail", so kinds are data, not prose.

use std::fmt;

use crate::wire::CompressionType;

/// A parse or validation failure with the byte position where it was detected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// What was wrong.
    pub kind: FormatErrorKind,
    /// Absolute byte position of the problem, relative to the start of the input given to the
    /// outermost parser (for a `.log` file: the file offset).
    pub position: u64,
}

impl FormatError {
    /// Builds an error of `kind` found at `position`.
    pub fn new(kind: FormatErrorKind, position: u64) -> Self {
        FormatError { kind, position }
    }

    /// Returns the same error with its position shifted by `base` (used when a parser that works on
    /// a sub-slice reports to a caller that knows where the slice starts).
    #[must_use]
    pub fn offset_by(mut self, base: u64) -> Self {
        self.position = self.position.saturating_add(base);
        self
    }
}

/// The kinds of format error. `#[non_exhaustive]` so new checks can be added without a breaking
/// change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// Fewer bytes than a field or structure needs.
    Truncated {
        /// Bytes needed from `position` on.
        need: u64,
        /// Bytes available from `position` on.
        have: u64,
    },
    /// A batch's length field is below the minimum (14 bytes, Kafka's `RECORD_OVERHEAD_V0`), or a
    /// v2 batch is smaller than its 61-byte header.
    BadLength(i64),
    /// Magic byte is not 0, 1 or 2 (or not the magic a v2-only parser accepts).
    BadMagic(i8),
    /// The stored checksum does not match the computed one (CRC-32C for v2, CRC-32 for v0/v1).
    CrcMismatch {
        /// Checksum stored in the batch.
        stored: u32,
        /// Checksum computed over the bytes.
        computed: u32,
    },
    /// A varint/varlong ran past its maximum length (5 / 10 bytes).
    BadVarint,
    /// Compression id 5..=7 in the attributes.
    UnknownCompression(u8),
    /// The batch declares a negative record count.
    NegativeRecordCount(i32),
    /// The records ended before the declared count was reached ("premature EOF").
    RecordCountMismatch {
        /// Records declared in the batch header.
        declared: i32,
        /// Records actually found.
        found: i32,
    },
    /// Bytes remain after the declared number of records were read.
    TrailingBytes(u64),
    /// A record's length varint is negative or its body does not consume exactly that many bytes.
    BadRecordLength {
        /// Length declared by the record.
        declared: i64,
        /// Bytes the record body actually consumed (or were available).
        actual: i64,
    },
    /// A record's header count is negative or larger than the bytes left could hold.
    BadHeaderCount(i32),
    /// A record header key has a negative length (Kafka: InvalidRecordException).
    NegativeHeaderKeyLength(i32),
    /// A length field is larger than the remaining input.
    LengthOutOfRange {
        /// The declared length.
        declared: i64,
        /// The bytes remaining.
        remaining: u64,
    },
    /// The decompressor rejected the input.
    Decompression {
        /// The codec in use.
        codec: CompressionType,
        /// What the decompressor said.
        reason: String,
    },
    /// Decompressed output would exceed the configured limit (a decompression bomb or a lie
    /// about sizes).
    DecompressedTooLarge {
        /// The codec in use.
        codec: CompressionType,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A control record key shorter than 4 bytes or with a negative version.
    BadControlKey,
    /// A control record value (end-transaction marker, MirrorPidResetRecord) does not decode.
    BadControlValue {
        /// Control record type id (0 abort, 1 commit, 7 mirror pid reset, ...).
        control_type: i16,
        /// What was wrong.
        reason: &'static str,
    },
    /// A control batch whose record is missing or not as Kafka writes it.
    BadControlBatch(&'static str),
    /// A legacy (magic 0/1) entry was met where only v2 is supported.
    LegacyBatch(i8),
    /// A field value that the format forbids (e.g. negative base timestamp other than -1).
    InvalidField(&'static str),
}

impl fmt::Display for FormatErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FormatErrorKind::*;
        match self {
            Truncated { need, have } => write!(f, "truncated: need {need} bytes, have {have}"),
            BadLength(l) => write!(f, "invalid batch length {l}"),
            BadMagic(m) => write!(f, "invalid magic {m}"),
            CrcMismatch { stored, computed } => {
                write!(f, "CRC mismatch: stored {stored}, computed {computed}")
            }
            BadVarint => write!(f, "varint too long"),
            UnknownCompression(c) => write!(f, "unknown compression type id {c}"),
            NegativeRecordCount(n) => write!(f, "negative record count {n}"),
            RecordCountMismatch { declared, found } => write!(
                f,
                "incorrect declared batch size, premature EOF reached: declared {declared} records, found {found}"
            ),
            TrailingBytes(n) => write!(
                f,
                "incorrect declared batch size, {n} bytes remaining after the last record"
            ),
            BadRecordLength { declared, actual } => {
                write!(f, "invalid record size: declared {declared}, actual {actual}")
            }
            BadHeaderCount(n) => write!(f, "invalid header count {n}"),
            NegativeHeaderKeyLength(n) => write!(f, "invalid negative header key size {n}"),
            LengthOutOfRange {
                declared,
                remaining,
            } => write!(f, "length {declared} exceeds the {remaining} bytes remaining"),
            Decompression { codec, reason } => {
                write!(f, "{} decompression failed: {reason}", codec.name())
            }
            DecompressedTooLarge { codec, limit } => write!(
                f,
                "{} decompressed size exceeds the limit of {limit} bytes",
                codec.name()
            ),
            BadControlKey => write!(f, "invalid control record key"),
            BadControlValue {
                control_type,
                reason,
            } => write!(f, "invalid control record value (type {control_type}): {reason}"),
            BadControlBatch(why) => write!(f, "invalid control batch: {why}"),
            LegacyBatch(m) => write!(f, "legacy message format (magic {m}) is not supported here"),
            InvalidField(what) => write!(f, "invalid field: {what}"),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte position {}", self.kind, self.position)
    }
}

impl std::error::Error for FormatError {}

/// Result alias for this crate.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
