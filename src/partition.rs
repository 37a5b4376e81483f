//! Read-only access to partition and log directories, shared by `verify`, `producers` and
//! `recover`: what a directory is, its segments scanned the way recovery scans them, and the
//! producer-state line every subcommand prints.
//!
//! Nothing here opens a segment through segment-store (which locks the directory, maps and
//! resizes indexes): files are read into memory and parsed with record-format, so a command built
//! on this module leaves the directory's bytes and file list exactly as it found them.

use std::io;
use std::path::{Path, PathBuf};

use record_format::{Batches, FormatError, FormatErrorKind, IterEnd, LogEntry};
use recovery::{BatchSummary, SnapshotEntry};
use segment_store::file_name::{
    parse_file_name, parse_partition_dir_name, FileKind, PartitionDirKind,
};

use crate::dump::io_msg;

/// What a directory given on the command line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A partition directory (it holds `*.log` segments).
    Partition(PathBuf),
    /// A log directory: its `<topic>-<partition>` subdirectories, sorted.
    LogDir {
        /// The log directory.
        dir: PathBuf,
        /// Its live partition directories.
        partitions: Vec<PathBuf>,
    },
}

/// Decides whether `dir` is a partition directory (any `*.log`) or a log directory (any
/// `<topic>-<partition>` subdirectory). A partition directory without segments counts when its
/// own name is `<topic>-<partition>`. Errors are one line, for the user.
pub fn detect(dir: &Path) -> Result<Target, String> {
    let shown = dir.display();
    let meta =
        std::fs::metadata(dir).map_err(|e| format!("cannot open {shown}: {}", io_msg(&e)))?;
    if !meta.is_dir() {
        return Err(format!(
            "{shown} is not a directory: give a partition directory or a log directory"
        ));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {shown}: {}", io_msg(&e)))?;
    let mut has_log = false;
    let mut partitions = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read {shown}: {}", io_msg(&e)))?;
        let name = e.file_name();
        let path = e.path();
        if path.is_dir() {
            if parse_partition_dir_name(&name).is_ok_and(|p| p.kind == PartitionDirKind::Live) {
                partitions.push(path);
            }
        } else if parse_file_name(&name).is_ok_and(|p| p.kind == FileKind::Log && p.temp.is_none())
        {
            has_log = true;
        }
    }
    if has_log {
        return Ok(Target::Partition(dir.to_path_buf()));
    }
    if !partitions.is_empty() {
        partitions.sort();
        return Ok(Target::LogDir {
            dir: dir.to_path_buf(),
            partitions,
        });
    }
    let own = dir.file_name().unwrap_or_default();
    if parse_partition_dir_name(own).is_ok_and(|p| p.kind == PartitionDirKind::Live) {
        return Ok(Target::Partition(dir.to_path_buf()));
    }
    Err(format!(
        "{shown} is neither a partition directory (no *.log files) nor a log directory \
         (no <topic>-<partition> subdirectories)"
    ))
}

/// The partitions of a target, in order.
pub fn partitions(target: &Target) -> Vec<PathBuf> {
    match target {
        Target::Partition(p) => vec![p.clone()],
        Target::LogDir { partitions, .. } => partitions.clone(),
    }
}

/// The name shown for a partition directory (its last component).
pub fn partition_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The live files of `kind` in `dir` (no `.deleted`/`.cleaned`/`.swap` suffix), by base offset.
pub fn files_of_kind(dir: &Path, kind: FileKind) -> io::Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Ok(p) = parse_file_name(&e.file_name()) {
            if p.kind == kind && p.temp.is_none() && e.path().is_file() {
                out.push((p.base_offset, e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// One batch of a segment's valid prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPos {
    /// Byte position in the `.log`.
    pub position: u64,
    /// Size including the 12-byte log overhead.
    pub size: u64,
    /// Last offset.
    pub last_offset: i64,
}

/// A `.log` read into memory and scanned as recovery scans it (framing and CRC of every batch,
/// offsets within the segment), without touching the file.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Base offset from the file name.
    pub base: i64,
    /// The `.log`.
    pub path: PathBuf,
    /// The whole file.
    pub bytes: Vec<u8>,
    /// The valid prefix, batch by batch.
    pub batches: Vec<BatchPos>,
    /// End of the valid prefix: recovery keeps `[0, valid_end)` and cuts the rest.
    pub valid_end: u64,
    /// Why the batch at `valid_end` is not valid (`None`: the whole file is valid).
    pub error: Option<FormatError>,
    /// A batch (position, last offset) whose offset cannot be stored relative to the base
    /// offset: recovery refuses the segment (segment-store's `OffsetOverflow`).
    pub offset_overflow: Option<(u64, i64)>,
}

impl Segment {
    /// Reads and scans the segment `path` with base offset `base`.
    pub fn scan(base: i64, path: &Path) -> io::Result<Segment> {
        let bytes = std::fs::read(path)?;
        let mut batches = Vec::new();
        let mut error = None;
        let mut offset_overflow = None;
        let mut it = Batches::new(&bytes, 0).validate_crc(true);
        for entry in &mut it {
            match entry {
                Ok(e) => {
                    let last = e.last_offset();
                    // segment-store's `ensure_offset_in_range`: the offset must be expressible
                    // relative to the base offset (recovery refuses the segment otherwise).
                    if last < base || last - base > i64::from(i32::MAX) {
                        offset_overflow = Some((e.position(), last));
                        break;
                    }
                    batches.push(BatchPos {
                        position: e.position(),
                        size: e.size_in_bytes() as u64,
                        last_offset: last,
                    });
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        if error.is_none() && offset_overflow.is_none() {
            if let Some(IterEnd::IncompleteTrailing { position, bytes: n }) = it.stopped_at() {
                error = Some(incomplete_tail(&bytes, *position, *n));
            }
        }
        let valid_end = batches.last().map_or(0, |b| b.position + b.size);
        Ok(Segment {
            base,
            path: path.to_path_buf(),
            bytes,
            batches,
            valid_end,
            error,
            offset_overflow,
        })
    }

    /// Bytes recovery would cut.
    pub fn cut_bytes(&self) -> u64 {
        self.bytes.len() as u64 - self.valid_end
    }

    /// One past the last valid offset (the base offset if the valid prefix is empty).
    pub fn next_offset(&self) -> i64 {
        self.batches
            .last()
            .map_or(self.base, |b| b.last_offset.saturating_add(1))
    }

    /// The file name (`00000000000000000000.log`).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The batch summaries of the valid prefix, in order (v2 batches only, as recovery visits
    /// them); a batch whose control record does not decode ends the list with its error and
    /// base offset.
    pub fn summaries(&self) -> (Vec<BatchSummary>, Option<(i64, FormatError)>) {
        let valid = self
            .bytes
            .get(..usize::try_from(self.valid_end).unwrap_or(usize::MAX))
            .unwrap_or_default();
        let mut out = Vec::new();
        for entry in Batches::new(valid, 0).flatten() {
            if let LogEntry::V2(b) = entry {
                match BatchSummary::from_batch(&b) {
                    Ok(s) => out.push(s),
                    Err(e) => return (out, Some((b.base_offset(), e))),
                }
            }
        }
        (out, None)
    }
}

/// The error recovery reports for `n` trailing bytes at `position` that are not a whole batch.
fn incomplete_tail(bytes: &[u8], position: u64, n: u64) -> FormatError {
    let rest = bytes
        .get(usize::try_from(position).unwrap_or(usize::MAX)..)
        .unwrap_or_default();
    let need = match rest.get(8..12).and_then(|s| <[u8; 4]>::try_from(s).ok()) {
        Some(len) => 12 + u64::from(u32::try_from(i32::from_be_bytes(len)).unwrap_or(0)),
        None => record_format::wire::RECORD_BATCH_OVERHEAD as u64,
    };
    FormatError::new(FormatErrorKind::Truncated { need, have: n }, position)
}

/// The segments of a partition as recovery would leave them: every segment up to and including
/// the first one with bytes to cut (later ones would move to quarantine). Returns them and the
/// number of later segments.
pub fn scan_partition(dir: &Path) -> io::Result<(Vec<Segment>, usize)> {
    let logs = files_of_kind(dir, FileKind::Log)?;
    let mut out = Vec::new();
    let total = logs.len();
    for (base, path) in logs {
        let seg = Segment::scan(base, &path)?;
        let cut = seg.error.is_some() || seg.offset_overflow.is_some();
        out.push(seg);
        if cut {
            break;
        }
    }
    let later = total - out.len();
    Ok((out, later))
}

/// One producer as every subcommand prints it: `producerId: 5 producerEpoch: 0 lastSequence: 3
/// lastOffset: 3 offsetDelta: 1 lastTimestamp: … coordinatorEpoch: -1 currentTxnFirstOffset:
/// none`.
pub fn producer_line(e: &SnapshotEntry) -> String {
    let txn = if e.current_txn_first_offset >= 0 {
        e.current_txn_first_offset.to_string()
    } else {
        "none".to_owned()
    };
    format!(
        "producerId: {} producerEpoch: {} lastSequence: {} lastOffset: {} offsetDelta: {} \
         lastTimestamp: {} coordinatorEpoch: {} currentTxnFirstOffset: {txn}",
        e.producer_id,
        e.producer_epoch,
        e.last_sequence,
        e.last_offset,
        e.offset_delta,
        e.timestamp,
        e.coordinator_epoch,
    )
}
