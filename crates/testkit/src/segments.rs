//! Partitions of many tiny segments, built directly as files: the scaling tests and benchmarks
//! of planning, recovery and descriptors need tens of thousands of segments, which appending
//! through the log with a tiny `segment.bytes` would take minutes to make.

use std::io;
use std::path::Path;

use record_format::RecordBatchBuilder;
use segment_store::internals::{segment_file_path, FileKind};

/// The producer id of the batches [`write_tiny_segments`] writes.
pub const TINY_SEGMENT_PRODUCER: i64 = 1;

/// Writes `count` segments into the partition directory `dir` (created if missing): segment `i`
/// has base offset `i` and holds one v2 batch of one 8-byte record at offset `i` (idempotent
/// producer `TINY_SEGMENT_PRODUCER`, epoch 0, sequence `i`, timestamp `1_700_000_000_000 +
/// i`), about 80 bytes, with an empty `.index` and `.timeindex` beside it (what a Kafka broker
/// leaves for a segment of one small batch: no entry before `index.interval.bytes`; a missing
/// index is a finding recovery rebuilds). Returns the log end offset (`count`).
pub fn write_tiny_segments(dir: &Path, count: u32) -> io::Result<i64> {
    std::fs::create_dir_all(dir)?;
    for i in 0..count {
        let offset = i64::from(i);
        let mut b = RecordBatchBuilder::new(offset).producer(
            TINY_SEGMENT_PRODUCER,
            0,
            i32::try_from(i).unwrap_or(i32::MAX),
        );
        b.append(
            1_700_000_000_000 + offset,
            None,
            Some(&offset.to_be_bytes()),
            &[],
        )
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        std::fs::write(segment_file_path(dir, offset, FileKind::Log), b.build())?;
        std::fs::write(segment_file_path(dir, offset, FileKind::Index), [])?;
        std::fs::write(segment_file_path(dir, offset, FileKind::TimeIndex), [])?;
    }
    Ok(i64::from(count))
}
