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
//! assert_eq!(batches.stopped_at(), Some(&record_format::batches::IterEnd::Complete));
//! # Ok::<(), record_format::FormatError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)
)]
#![warn(missing_docs)]

pub mod batch;
pub mod batches;
pub mod builder;
pub mod checksum;
pub mod compression;
pub mod control;
pub mod cursor;
pub mod error;
pub mod record;
pub mod scan;
pub mod wire;

pub use batch::{RecordBatch, TimestampType};
pub use batches::{BatchHeader, BatchIterator, Batches, IterEnd, LegacyEntry, LogEntry};
pub use builder::{end_txn_marker_batch, mirror_pid_reset_batch, RecordBatchBuilder};
pub use compression::{CompressionType, DecodeLimits};
pub use control::{
    is_mirror_pid_reset_batch, ControlRecord, ControlRecordKey, ControlRecordType,
    EndTransactionMarker, MirrorPidResetRecord,
};
pub use error::{FormatError, FormatErrorKind};
pub use record::{Header, Record, Records};
pub use scan::{scan_log, ChunkChain};
