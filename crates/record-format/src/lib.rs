//! Kafka's v2 record batch format, byte for byte: batches, records, the four codecs, control
//! records (including KIP-1279's `MIRROR_PID_RESET`) and the write path. No I/O, no `unsafe`, and
//! no panic on any input: every parser returns a [`FormatError`] naming what was wrong and where.
//!
//! ```
//! use record_format::{Batches, DecodeLimits, Header, LogEntry, RecordBatchBuilder};
//!
//! // Write: one batch at offset 100 with two records.
//! let mut builder = RecordBatchBuilder::new(100).partition_leader_epoch(3);
//! builder.append(1_700_000_000_000, Some(b"k"), Some(b"v1"), &[])?;
//! builder.append(1_700_000_000_005, None, Some(b"v2"), &[Header { key: b"h", value: None }])?;
//! let log = builder.build();
//!
//! // Read it back as a `.log` file, checking CRCs.
//! let mut batches = Batches::new(&log, 0).validate_crc(true);
//! let Some(Ok(LogEntry::V2(batch))) = batches.next() else { panic!("expected a batch") };
//! assert_eq!((batch.base_offset(), batch.last_offset()), (100, 101));
//! let records = batch.records(&DecodeLimits::default())?;
//! let offsets: Vec<i64> = records.iter().map(|r| r.map(|r| r.offset())).collect::<Result<_, _>>()?;
//! assert_eq!(offsets, [100, 101]);
//! let second = records.iter().nth(1).unwrap()?;
//! assert_eq!(second.value(), Some(&b"v2"[..]));
//! assert_eq!(second.headers().next().map(|h| h.key), Some(&b"h"[..]));
//! assert!(batches.next().is_none());
//! assert_eq!(batches.stopped_at(), Some(&record_format::IterEnd::Complete));
//! # Ok::<(), record_format::FormatError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)
)]
#![warn(missing_docs)]
// Without `internals`, the plumbing only other seglog crates call is unused here; dead code is
// checked with the feature on, as the workspace builds it.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

mod batch;
mod batches;
mod builder;
mod checksum;
mod compression;
mod control;
mod cursor;
mod error;
mod record;
mod scan;
mod streaming;
mod wire;

pub use batch::{RecordBatch, TimestampType};
pub use batches::{BatchHeader, BatchIterator, Batches, IterEnd, LegacyEntry, LogEntry};
pub use builder::{end_txn_marker_batch, mirror_pid_reset_batch, RecordBatchBuilder};
pub use compression::DecodeLimits;
pub use control::{
    is_mirror_pid_reset_batch, ControlRecord, ControlRecordKey, ControlRecordType,
    EndTransactionMarker, MirrorPidResetRecord,
};
pub use error::{FormatError, FormatErrorKind};
pub use record::{Header, Record, Records};
pub use streaming::{FieldSpan, HeaderBuf, ReadError, RecordReader, StreamedRecord};
pub use wire::{CompressionType, DEFAULT_MAX_DECOMPRESSED_BYTES, NO_TIMESTAMP};

/// Plumbing that seglog's other crates share with this one (the wire layout, in-place batch
/// edits, checksums, varints, the parallel scan). Behind the `internals` feature; not part of
/// the supported API and free to change.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::batch::{
        compute_attributes, decrement_sequence, increment_sequence,
        set_base_offset_and_leader_epoch, set_max_timestamp_log_append_time,
    };
    pub use crate::batches::incomplete_batch_error;
    pub use crate::checksum::{crc32c, crc32c_append};
    pub use crate::compression::{
        compress, compress_with_level, decompress, decompress_snappy_raw, decompress_snappy_xerial,
        lz4_header_checksum, lz4_header_checksum_broken, GZIP_HEADER, LZ4_FRAME_MAGIC,
        LZ4_KAFKA_BD, LZ4_KAFKA_FLG, XERIAL_HEADER, XERIAL_MAGIC,
    };
    pub use crate::control::end_txn_marker;
    pub use crate::cursor::*;
    pub use crate::scan::{
        scan_file, scan_log, scan_sequential, scan_window, Apply, ChunkChain, ChunkChecks, LogScan,
        ReadAt, ScannedBatch, ScannedEntry, WindowEnd, DEFAULT_REGION_BYTES, READ_CHUNK_BYTES,
        SCAN_WINDOW_BYTES,
    };
    pub use crate::wire::*;
}
