//! Producer state snapshot files, version 1, byte for byte as Kafka writes them
//! (`ProducerSnapshot.json`, `ProducerStateManager.writeSnapshot/readSnapshot`; reference §4.5).
//!
//! ```text
//! header (10 bytes)
//!   0   int16   version = 1
//!   2   uint32  CRC-32C of bytes [6, EOF)
//!   6   int32   entry count n (non-nullable array)
//! entries (46 bytes each), from byte 10
//!   0   int64   producerId
//!   8   int16   producerEpoch
//!   10  int32   lastSequence           (−1: no cached batch)
//!   14  int64   lastOffset             (−1: no cached batch)
//!   22  int32   offsetDelta            (0: no cached batch)
//!   26  int64   timestamp              (the entry's last timestamp)
//!   34  int32   coordinatorEpoch
//!   38  int64   currentTxnFirstOffset  (−1: no open transaction)
//! ```
//! File name: `<20-digit offset>.snapshot`, the offset being the manager's map end offset.
//!
//! Differences from Kafka, all on the safe side: files are written atomically (temporary file,
//! fsync, rename, fsync of the directory) where Kafka writes in place; entries are written in
//! producer-id order (Kafka: hash-map order; readers do not care); bytes after the last entry are
//! reported as corrupt (Kafka ignores them when the CRC matches, which its own writer never
//! produces); and a corrupt snapshot met while loading is renamed to `<name>.corrupt` and
//! reported instead of being deleted.
//!
//! File operations go through a [`SnapshotIo`]. The partition log and the loader use
//! [`StorageIo`], i.e. segment-store's [`Storage`] seam that the segments are written through
//! (so a simulated file system sees snapshots exactly as it sees the `.log` files); the
//! functions without a `_with` suffix use [`StdIo`] (the real file system, e.g. for read-only
//! tools).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use segment_store::{SegmentError, StdFs, Storage};

use crate::error::{CorruptReason, SnapshotError};
use crate::producer_state::{
    is_producer_expired, BatchMetadata, ExpiredProducer, ProducerStateEntry, ProducerStateManager,
};

/// `ProducerSnapshotVersion`.
pub const PRODUCER_SNAPSHOT_VERSION: i16 = 1;
/// Offset of the version field.
pub const VERSION_OFFSET: usize = 0;
/// Offset of the CRC field.
pub const CRC_OFFSET: usize = VERSION_OFFSET + 2;
/// Offset of the entry count; the CRC covers `[COUNT_OFFSET, EOF)`.
pub const COUNT_OFFSET: usize = CRC_OFFSET + 4;
/// Offset of the first entry; also the header size.
pub const ENTRIES_OFFSET: usize = COUNT_OFFSET + 4;

/// Entry field offsets, each derived from the one before.
pub const ENTRY_PRODUCER_ID_OFFSET: usize = 0;
/// Producer epoch (int16).
pub const ENTRY_EPOCH_OFFSET: usize = ENTRY_PRODUCER_ID_OFFSET + 8;
/// Last sequence (int32).
pub const ENTRY_LAST_SEQUENCE_OFFSET: usize = ENTRY_EPOCH_OFFSET + 2;
/// Last offset (int64).
pub const ENTRY_LAST_OFFSET_OFFSET: usize = ENTRY_LAST_SEQUENCE_OFFSET + 4;
/// Offset delta (int32).
pub const ENTRY_OFFSET_DELTA_OFFSET: usize = ENTRY_LAST_OFFSET_OFFSET + 8;
/// Timestamp (int64).
pub const ENTRY_TIMESTAMP_OFFSET: usize = ENTRY_OFFSET_DELTA_OFFSET + 4;
/// Coordinator epoch (int32).
pub const ENTRY_COORDINATOR_EPOCH_OFFSET: usize = ENTRY_TIMESTAMP_OFFSET + 8;
/// Current transaction first offset (int64).
pub const ENTRY_TXN_FIRST_OFFSET_OFFSET: usize = ENTRY_COORDINATOR_EPOCH_OFFSET + 4;
/// Size of one entry (46).
pub const ENTRY_SIZE: usize = ENTRY_TXN_FIRST_OFFSET_OFFSET + 8;

/// Suffix of snapshot files (segment-store names every file of a partition).
pub(crate) use segment_store::internals::PRODUCER_SNAPSHOT_FILE_SUFFIX as SNAPSHOT_SUFFIX;
/// Suffix appended to a corrupt snapshot set aside by loading.
pub const CORRUPT_SUFFIX: &str = ".corrupt";

/// One producer as persisted in a snapshot (only the newest cached batch survives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotEntry {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Last sequence of the newest batch, −1 if none.
    pub last_sequence: i32,
    /// Last offset of the newest batch, −1 if none.
    pub last_offset: i64,
    /// Offset delta of the newest batch, 0 if none.
    pub offset_delta: i32,
    /// The entry's last timestamp.
    pub timestamp: i64,
    /// Coordinator epoch.
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, −1 if none.
    pub current_txn_first_offset: i64,
}

impl SnapshotEntry {
    /// What Kafka writes for `entry`.
    pub fn from_entry(entry: &ProducerStateEntry) -> Self {
        Self {
            producer_id: entry.producer_id(),
            producer_epoch: entry.producer_epoch(),
            last_sequence: entry.last_seq(),
            last_offset: entry.last_data_offset(),
            offset_delta: entry.last_offset_delta(),
            timestamp: entry.last_timestamp(),
            coordinator_epoch: entry.coordinator_epoch(),
            current_txn_first_offset: entry.current_txn_first_offset().unwrap_or(-1),
        }
    }

    /// What Kafka restores: batch metadata only if `last_offset >= 0`; an open transaction
    /// unless `current_txn_first_offset == -1`.
    pub fn to_entry(&self) -> ProducerStateEntry {
        let batch = (self.last_offset >= 0).then_some(BatchMetadata {
            last_seq: self.last_sequence,
            last_offset: self.last_offset,
            offset_delta: self.offset_delta,
            timestamp: self.timestamp,
        });
        let txn = (self.current_txn_first_offset != -1).then_some(self.current_txn_first_offset);
        ProducerStateEntry::new(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.timestamp,
            txn,
            batch,
        )
    }
}

/// Encodes a version-1 snapshot.
pub fn encode_snapshot(entries: &[SnapshotEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRIES_OFFSET + ENTRY_SIZE * entries.len());
    out.extend_from_slice(&PRODUCER_SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
    out.extend_from_slice(&count.to_be_bytes());
    for e in entries.iter().take(count as usize) {
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.producer_epoch.to_be_bytes());
        out.extend_from_slice(&e.last_sequence.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.offset_delta.to_be_bytes());
        out.extend_from_slice(&e.timestamp.to_be_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
    }
    let crc = record_format::internals::crc32c(out.get(COUNT_OFFSET..).unwrap_or_default());
    if let Some(slot) = out.get_mut(CRC_OFFSET..COUNT_OFFSET) {
        slot.copy_from_slice(&crc.to_be_bytes());
    }
    out
}

fn be<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], (CorruptReason, u64)> {
    bytes
        .get(at..at.saturating_add(N))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or_else(|| {
            let have = bytes.len().saturating_sub(at);
            (
                CorruptReason::Truncated {
                    need: N as u64,
                    have: have as u64,
                },
                at as u64,
            )
        })
}

/// Decodes a version-1 snapshot, checking (in Kafka's order) version, CRC, then the entries.
/// Errors give the reason and the byte position.
pub fn decode_snapshot(bytes: &[u8]) -> Result<Vec<SnapshotEntry>, (CorruptReason, u64)> {
    let version = i16::from_be_bytes(be(bytes, VERSION_OFFSET)?);
    if version != PRODUCER_SNAPSHOT_VERSION {
        return Err((CorruptReason::BadVersion(version), VERSION_OFFSET as u64));
    }
    let stored = u32::from_be_bytes(be(bytes, CRC_OFFSET)?);
    let computed = record_format::internals::crc32c(bytes.get(COUNT_OFFSET..).unwrap_or_default());
    if stored != computed {
        return Err((
            CorruptReason::CrcMismatch { stored, computed },
            CRC_OFFSET as u64,
        ));
    }
    let count = i32::from_be_bytes(be(bytes, COUNT_OFFSET)?);
    let n = usize::try_from(count)
        .map_err(|_| (CorruptReason::NegativeCount(count), COUNT_OFFSET as u64))?;
    let mut entries = Vec::with_capacity(n.min(bytes.len() / ENTRY_SIZE));
    let mut pos = ENTRIES_OFFSET;
    for _ in 0..n {
        let entry: [u8; ENTRY_SIZE] = be(bytes, pos)?;
        let f = |at: usize| be::<8>(&entry, at).map(i64::from_be_bytes);
        let f4 = |at: usize| be::<4>(&entry, at).map(i32::from_be_bytes);
        let shift = |(r, p): (CorruptReason, u64)| (r, p + pos as u64);
        entries.push(SnapshotEntry {
            producer_id: f(ENTRY_PRODUCER_ID_OFFSET).map_err(shift)?,
            producer_epoch: be::<2>(&entry, ENTRY_EPOCH_OFFSET)
                .map(i16::from_be_bytes)
                .map_err(shift)?,
            last_sequence: f4(ENTRY_LAST_SEQUENCE_OFFSET).map_err(shift)?,
            last_offset: f(ENTRY_LAST_OFFSET_OFFSET).map_err(shift)?,
            offset_delta: f4(ENTRY_OFFSET_DELTA_OFFSET).map_err(shift)?,
            timestamp: f(ENTRY_TIMESTAMP_OFFSET).map_err(shift)?,
            coordinator_epoch: f4(ENTRY_COORDINATOR_EPOCH_OFFSET).map_err(shift)?,
            current_txn_first_offset: f(ENTRY_TXN_FIRST_OFFSET_OFFSET).map_err(shift)?,
        });
        pos += ENTRY_SIZE;
    }
    if bytes.len() > pos {
        let extra = (bytes.len() - pos) as u64;
        return Err((CorruptReason::TrailingBytes { count, extra }, pos as u64));
    }
    Ok(entries)
}

/// `<20-digit offset>.snapshot` (Kafka `LogFileUtils.producerSnapshotFile`).
pub fn snapshot_file_name(offset: i64) -> Result<String, SnapshotError> {
    if offset < 0 {
        return Err(SnapshotError::InvalidOffset(offset));
    }
    Ok(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// The offset of a `<digits>.snapshot` name; `None` for anything else (including `.corrupt`
/// and `.tmp` files).
pub fn parse_snapshot_file_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The file operations snapshots (and the `mirror-state` file) need: [`StorageIo`] goes through
/// segment-store's [`Storage`] seam, [`StdIo`] uses the real file system, and tests can inject
/// faults with their own.
pub trait SnapshotIo {
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Replaces `path` with `bytes` so that a crash leaves either the old or the new file.
    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Names of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Whether a path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entry changes of `dir` durable (its `fsync`). The default does nothing: for
    /// implementations with nothing to make durable.
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Reads a whole file of at most `limit` bytes; a longer one is an error of kind
    /// `FileTooLarge` (`file_too_large`), not read. The default reads the file first: for
    /// implementations whose files are in memory already.
    fn read_capped(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        let bytes = self.read(path)?;
        if bytes.len() as u64 > limit {
            return Err(file_too_large(path, bytes.len() as u64, limit));
        }
        Ok(bytes)
    }
}

/// The longest producer snapshot read (16 MiB: some 360,000 producers of one partition). Kafka's
/// format bounds it only by its `int32` count; a longer file is corrupt
/// ([`CorruptReason::TooLarge`]), not read.
pub const MAX_SNAPSHOT_BYTES: u64 = 16 << 20;

/// The error of [`SnapshotIo::read_capped`] for a file of `size` bytes: kind `FileTooLarge`,
/// carrying a [`SegmentError::FileTooLarge`] ([`too_large_size`] gets the size back).
pub fn file_too_large(path: &Path, size: u64, limit: u64) -> io::Error {
    into_io(SegmentError::FileTooLarge {
        path: path.to_path_buf(),
        size,
        limit,
    })
}

/// The size and limit an error of `file_too_large` carries.
pub fn too_large_size(e: &io::Error) -> Option<(u64, u64)> {
    match e.get_ref()?.downcast_ref::<SegmentError>()? {
        SegmentError::FileTooLarge { size, limit, .. } => Some((*size, *limit)),
        _ => None,
    }
}

/// [`SnapshotIo`] over `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdIo;

impl SnapshotIo for StdIo {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdFs.read(path).map_err(into_io)
    }

    fn read_capped(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        StdFs.read_capped(path, limit).map_err(into_io)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        segment_store::internals::write_atomically(&StdFs, path, bytes).map_err(into_io)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        Ok(StdFs
            .list_dir(dir)
            .map_err(into_io)?
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to).map_err(into_io)
    }

    fn exists(&self, path: &Path) -> bool {
        StdFs.exists(path).unwrap_or(false)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFs.remove_file(path).map_err(into_io)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir).map_err(into_io)
    }
}

/// [`SnapshotIo`] through segment-store's [`Storage`] seam: the storage a partition's segments
/// are written through (`LogEnv::storage`). Atomic writes are [`segment_store::internals::write_atomically`]
/// (`<file>.tmp`, fsync, rename, fsync of the directory); removals and renames become durable
/// with the next sync of the directory, as for every other file of the seam.
#[derive(Debug, Clone)]
pub struct StorageIo(pub Arc<dyn Storage>);

impl StorageIo {
    /// A [`SnapshotIo`] over `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Self(storage)
    }
}

/// A seam error as an `io::Error` of the same kind (the path and operation stay in its message).
fn into_io(e: SegmentError) -> io::Error {
    io::Error::new(e.io_kind().unwrap_or(io::ErrorKind::Other), e)
}

impl SnapshotIo for StorageIo {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.0.read(path).map_err(into_io)
    }

    fn read_capped(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        self.0.read_capped(path, limit).map_err(into_io)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        segment_store::internals::write_atomically(self.0.as_ref(), path, bytes).map_err(into_io)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        Ok(self
            .0
            .list_dir(dir)
            .map_err(into_io)?
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to).map_err(into_io)
    }

    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path).unwrap_or(false)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path).map_err(into_io)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.sync_dir(dir).map_err(into_io)
    }
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> SnapshotError + 'a {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// A snapshot file found in a directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SnapshotFile {
    /// Its offset (the map end offset it was taken at).
    pub offset: i64,
    /// Its path.
    pub path: PathBuf,
}

/// A corrupt snapshot that loading renamed out of the way.
#[derive(Debug)]
pub struct SetAsideSnapshot {
    /// The snapshot as it was found.
    pub file: SnapshotFile,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// Why (always [`SnapshotError::Corrupt`]).
    pub error: SnapshotError,
}

/// Writes `entries` as the snapshot at `offset` in `dir`, atomically. Returns its path.
pub fn write_snapshot(
    dir: &Path,
    offset: i64,
    entries: &[SnapshotEntry],
) -> Result<PathBuf, SnapshotError> {
    write_snapshot_with(&StdIo, dir, offset, entries)
}

/// [`write_snapshot`] through `io`.
pub fn write_snapshot_with(
    io: &dyn SnapshotIo,
    dir: &Path,
    offset: i64,
    entries: &[SnapshotEntry],
) -> Result<PathBuf, SnapshotError> {
    let path = dir.join(snapshot_file_name(offset)?);
    io.write_atomically(&path, &encode_snapshot(entries))
        .map_err(io_err(&path, "writing producer snapshot"))?;
    Ok(path)
}

/// Reads and validates a snapshot file.
pub fn read_snapshot(path: &Path) -> Result<Vec<SnapshotEntry>, SnapshotError> {
    read_snapshot_with(&StdIo, path)
}

/// [`read_snapshot`] through `io`.
pub fn read_snapshot_with(
    io: &dyn SnapshotIo,
    path: &Path,
) -> Result<Vec<SnapshotEntry>, SnapshotError> {
    let bytes = match io.read_capped(path, MAX_SNAPSHOT_BYTES) {
        Ok(bytes) => bytes,
        Err(e) => {
            if let Some((size, limit)) = too_large_size(&e) {
                return Err(SnapshotError::Corrupt {
                    path: path.to_path_buf(),
                    reason: CorruptReason::TooLarge { size, limit },
                    position: limit,
                });
            }
            return Err(io_err(path, "reading producer snapshot")(e));
        }
    };
    decode_snapshot(&bytes).map_err(|(reason, position)| SnapshotError::Corrupt {
        path: path.to_path_buf(),
        reason,
        position,
    })
}

/// The snapshot files of `dir`, by ascending offset.
pub fn list_snapshots(dir: &Path) -> Result<Vec<SnapshotFile>, SnapshotError> {
    list_snapshots_with(&StdIo, dir)
}

/// [`list_snapshots`] through `io`.
pub fn list_snapshots_with(
    io: &dyn SnapshotIo,
    dir: &Path,
) -> Result<Vec<SnapshotFile>, SnapshotError> {
    Ok(snapshot_names(io, dir)?
        .into_iter()
        .map(|(offset, n)| SnapshotFile {
            offset,
            path: dir.join(n),
        })
        .collect())
}

/// The snapshot files of `dir` as (offset, name), in [`list_snapshots_with`]'s order, without a
/// path each (a directory of 100,000 segments has as many snapshots; most callers need one or a
/// few of them).
pub(crate) fn snapshot_names(
    io: &dyn SnapshotIo,
    dir: &Path,
) -> Result<Vec<(i64, String)>, SnapshotError> {
    let names = io.list(dir).map_err(io_err(dir, "listing snapshots in"))?;
    let mut files: Vec<(i64, String)> = names
        .into_iter()
        .filter_map(|n| parse_snapshot_file_name(&n).map(|offset| (offset, n)))
        .collect();
    // As their paths order (one folder: by name).
    files.sort_unstable();
    Ok(files)
}

/// The newest snapshot file of `dir` with offset `<= offset` (not validated).
pub fn latest_snapshot_at_or_below(
    dir: &Path,
    offset: i64,
) -> Result<Option<SnapshotFile>, SnapshotError> {
    Ok(list_snapshots(dir)?
        .into_iter()
        .rev()
        .find(|f| f.offset <= offset))
}

/// The result of looking for the newest valid snapshot.
#[derive(Debug, Default)]
pub struct LatestValidSnapshot {
    /// The snapshot read, with its entries.
    pub loaded: Option<(SnapshotFile, Vec<SnapshotEntry>)>,
    /// Newer snapshots that were corrupt and were renamed to `*.corrupt`, newest first.
    pub set_aside: Vec<SetAsideSnapshot>,
}

/// Reads the newest valid snapshot with offset `<= at_or_below`. Each corrupt one met on the way
/// is renamed to `<name>.corrupt` (never deleted; a numeric suffix avoids overwriting an earlier
/// one) and reported, and the next older one is tried. I/O errors stop the search.
pub fn read_latest_valid_snapshot(
    io: &dyn SnapshotIo,
    dir: &Path,
    at_or_below: i64,
) -> Result<LatestValidSnapshot, SnapshotError> {
    let mut out = LatestValidSnapshot::default();
    let files = snapshot_names(io, dir)?;
    let files = files
        .into_iter()
        .rev()
        .filter(|(offset, _)| *offset <= at_or_below)
        .map(|(offset, n)| SnapshotFile {
            offset,
            path: dir.join(n),
        });
    for file in files {
        match read_snapshot_with(io, &file.path) {
            Ok(entries) => {
                out.loaded = Some((file, entries));
                break;
            }
            Err(error @ SnapshotError::Corrupt { .. }) => {
                let moved_to = set_aside_path(io, &file.path);
                io.rename(&file.path, &moved_to)
                    .map_err(io_err(&file.path, "setting aside corrupt snapshot"))?;
                out.set_aside.push(SetAsideSnapshot {
                    file,
                    moved_to,
                    error,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn set_aside_path(io: &dyn SnapshotIo, path: &Path) -> PathBuf {
    let mut base = path.as_os_str().to_owned();
    base.push(CORRUPT_SUFFIX);
    let first = PathBuf::from(&base);
    if !io.exists(&first) {
        return first;
    }
    (1u32..)
        .map(|i| {
            let mut p = base.clone();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        })
        .find(|p| !io.exists(p))
        .unwrap_or(first)
}

/// Deletes the snapshot files of `dir` with offset `> offset` (obsolete after a truncation),
/// through `io`. Returns the deleted files.
pub fn delete_snapshots_above_with(
    io: &dyn SnapshotIo,
    dir: &Path,
    offset: i64,
) -> Result<Vec<SnapshotFile>, SnapshotError> {
    delete_snapshots_where(io, dir, |o| o > offset)
}

/// Kafka `ProducerStateManager.latestSnapshotOffset`: the offset of the newest snapshot file of
/// `dir`, if any.
pub fn latest_snapshot_offset_with(
    io: &dyn SnapshotIo,
    dir: &Path,
) -> Result<Option<i64>, SnapshotError> {
    Ok(snapshot_names(io, dir)?.last().map(|f| f.0))
}

/// Kafka `ProducerStateManager.oldestSnapshotOffset`: the offset of the oldest snapshot file of
/// `dir`, if any.
pub fn oldest_snapshot_offset_with(
    io: &dyn SnapshotIo,
    dir: &Path,
) -> Result<Option<i64>, SnapshotError> {
    Ok(snapshot_names(io, dir)?.first().map(|f| f.0))
}

/// Kafka `ProducerStateManager.deleteSnapshotsBefore`: deletes the snapshot files of `dir` with
/// offset `< offset`. Returns the deleted files.
pub fn delete_snapshots_before_with(
    io: &dyn SnapshotIo,
    dir: &Path,
    offset: i64,
) -> Result<Vec<SnapshotFile>, SnapshotError> {
    delete_snapshots_where(io, dir, |o| o < offset)
}

/// Which snapshot files Kafka's `ProducerStateManager.removeStraySnapshots` deletes for a log
/// whose segments start at `segment_base_offsets`: every snapshot not at a segment's base, except
/// the newest of them when it is at or above the newest segment's base (the snapshot a clean
/// shutdown writes at the log end). With no segment, every stray snapshot but the newest.
pub fn stray_snapshots(
    snapshots: &[SnapshotFile],
    segment_base_offsets: &[i64],
) -> Vec<SnapshotFile> {
    let bases: std::collections::BTreeSet<i64> = segment_base_offsets.iter().copied().collect();
    let mut stray: Vec<&SnapshotFile> = snapshots
        .iter()
        .filter(|f| !bases.contains(&f.offset))
        .collect();
    stray.sort_by_key(|f| f.offset);
    let keep_newest = match (stray.last(), bases.last()) {
        (Some(newest), Some(&max_base)) => newest.offset >= max_base,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if keep_newest {
        stray.pop();
    }
    stray.into_iter().cloned().collect()
}

/// [`stray_snapshots`] of `dir`, deleted. Returns the deleted files.
pub fn remove_stray_snapshots_with(
    io: &dyn SnapshotIo,
    dir: &Path,
    segment_base_offsets: &[i64],
) -> Result<Vec<SnapshotFile>, SnapshotError> {
    let stray = stray_snapshots(&list_snapshots_with(io, dir)?, segment_base_offsets);
    for f in &stray {
        io.remove(&f.path)
            .map_err(io_err(&f.path, "deleting snapshot"))?;
    }
    if !stray.is_empty() {
        io.sync_dir(dir).map_err(io_err(
            dir,
            "syncing the directory after deleting snapshots",
        ))?;
    }
    Ok(stray)
}

fn delete_snapshots_where(
    io: &dyn SnapshotIo,
    dir: &Path,
    pred: impl Fn(i64) -> bool,
) -> Result<Vec<SnapshotFile>, SnapshotError> {
    let mut deleted = Vec::new();
    for (offset, name) in snapshot_names(io, dir)? {
        if pred(offset) {
            let f = SnapshotFile {
                offset,
                path: dir.join(name),
            };
            io.remove(&f.path)
                .map_err(io_err(&f.path, "deleting snapshot"))?;
            deleted.push(f);
        }
    }
    // Durable before any later deletion: a crash must not keep the deletion of a newer snapshot
    // without that of an older one (the older one, loaded, would stand for producer state that
    // the newer one and the segments deleted since had moved on from).
    if !deleted.is_empty() {
        io.sync_dir(dir).map_err(io_err(
            dir,
            "syncing the directory after deleting snapshots",
        ))?;
    }
    Ok(deleted)
}

/// What loading producer state from a snapshot did.
#[derive(Debug, Default)]
pub struct SnapshotLoad {
    /// The snapshot loaded, if any.
    pub loaded: Option<SnapshotFile>,
    /// Producers skipped because they had expired, with when and why.
    pub expired_producers: Vec<ExpiredProducer>,
    /// Corrupt snapshots renamed to `*.corrupt`, newest first.
    pub set_aside: Vec<SetAsideSnapshot>,
    /// Out-of-range snapshots deleted by [`ProducerStateManager::truncate_and_reload`].
    pub deleted: Vec<SnapshotFile>,
}

impl ProducerStateManager {
    /// The entries a snapshot of the current state holds, by producer id.
    pub fn snapshot_entries(&self) -> Vec<SnapshotEntry> {
        let mut entries: Vec<SnapshotEntry> = self
            .producers
            .iter()
            .map(SnapshotEntry::from_entry)
            .collect();
        entries.sort_unstable_by_key(|e| e.producer_id);
        entries
    }

    /// Kafka `takeSnapshot`: if the map end offset is past the last snapshot, write a snapshot
    /// at the map end offset. Returns its path, or `None` if nothing was written.
    pub fn take_snapshot(&mut self, dir: &Path) -> Result<Option<PathBuf>, SnapshotError> {
        self.take_snapshot_with(&StdIo, dir)
    }

    /// [`Self::take_snapshot`] through `io`.
    pub fn take_snapshot_with(
        &mut self,
        io: &dyn SnapshotIo,
        dir: &Path,
    ) -> Result<Option<PathBuf>, SnapshotError> {
        if self.last_map_offset <= self.last_snap_offset {
            return Ok(None);
        }
        let path = write_snapshot_with(io, dir, self.last_map_offset, &self.snapshot_entries())?;
        self.last_snap_offset = self.last_map_offset;
        Ok(Some(path))
    }

    /// Kafka `loadFromSnapshot`: forget all state, then load the newest valid snapshot with
    /// offset `<= at_or_below`, skipping producers expired at `now_ms` (no open transaction and
    /// `now − last timestamp >= producer.id.expiration.ms`). Map end and last snapshot offsets
    /// become the snapshot's offset, or `log_start_offset` if there is none. Corrupt snapshots
    /// are set aside (see `read_latest_valid_snapshot`).
    pub fn load_from_snapshot(
        &mut self,
        dir: &Path,
        log_start_offset: i64,
        at_or_below: i64,
        now_ms: i64,
    ) -> Result<SnapshotLoad, SnapshotError> {
        self.load_from_snapshot_with(&StdIo, dir, log_start_offset, at_or_below, now_ms)
    }

    /// [`Self::load_from_snapshot`] through `io`.
    pub fn load_from_snapshot_with(
        &mut self,
        io: &dyn SnapshotIo,
        dir: &Path,
        log_start_offset: i64,
        at_or_below: i64,
        now_ms: i64,
    ) -> Result<SnapshotLoad, SnapshotError> {
        let found = read_latest_valid_snapshot(io, dir, at_or_below)?;
        self.producers.clear();
        self.ongoing_txns.clear();
        self.unreplicated_txns.clear();
        let mut out = SnapshotLoad {
            set_aside: found.set_aside,
            ..SnapshotLoad::default()
        };
        match found.loaded {
            Some((file, entries)) => {
                let expiration = self.config.producer_id_expiration_ms;
                for e in entries {
                    let entry = e.to_entry();
                    if is_producer_expired(&entry, now_ms, expiration) {
                        out.expired_producers
                            .push(ExpiredProducer::of(&entry, now_ms, expiration));
                    } else {
                        self.load_producer_entry(entry);
                    }
                }
                self.last_snap_offset = file.offset;
                self.last_map_offset = file.offset;
                out.loaded = Some(file);
            }
            None => {
                self.last_snap_offset = log_start_offset;
                self.last_map_offset = log_start_offset;
            }
        }
        Ok(out)
    }

    /// Kafka `truncateAndReload`: delete snapshots outside `(log_start_offset, log_end_offset]`;
    /// then, if the map end differs from `log_end_offset`, reload from the newest valid snapshot
    /// (the caller replays from [`Self::map_end_offset`] to `log_end_offset`); otherwise only
    /// apply the new log start offset.
    pub fn truncate_and_reload(
        &mut self,
        dir: &Path,
        log_start_offset: i64,
        log_end_offset: i64,
        now_ms: i64,
    ) -> Result<SnapshotLoad, SnapshotError> {
        self.truncate_and_reload_with(&StdIo, dir, log_start_offset, log_end_offset, now_ms)
    }

    /// [`Self::truncate_and_reload`] through `io`.
    pub fn truncate_and_reload_with(
        &mut self,
        io: &dyn SnapshotIo,
        dir: &Path,
        log_start_offset: i64,
        log_end_offset: i64,
        now_ms: i64,
    ) -> Result<SnapshotLoad, SnapshotError> {
        let deleted =
            delete_snapshots_where(io, dir, |o| o > log_end_offset || o <= log_start_offset)?;
        let mut out = if log_end_offset != self.last_map_offset {
            self.load_from_snapshot_with(io, dir, log_start_offset, log_end_offset, now_ms)?
        } else {
            self.forget_below_log_start(io, dir, log_start_offset)?;
            SnapshotLoad::default()
        };
        out.deleted = deleted;
        Ok(out)
    }

    /// Kafka `onLogStartOffsetIncremented` after retention or `deleteRecords`, with
    /// `deleteProducerSnapshots` of the deleted segments: deletes the snapshots below
    /// `oldest_segment_base` (the base of the first segment left; the snapshot *at* it, which
    /// describes the producers of the deleted segments, is kept), forgets unreplicated
    /// transactions that ended below `log_start_offset`, and moves the map end offset up to it.
    /// Returns the deleted files.
    pub fn on_log_start_offset_incremented_with(
        &mut self,
        io: &dyn SnapshotIo,
        dir: &Path,
        log_start_offset: i64,
        oldest_segment_base: i64,
    ) -> Result<Vec<SnapshotFile>, SnapshotError> {
        let deleted = delete_snapshots_where(io, dir, |o| o < oldest_segment_base)?;
        self.forget_below_log_start(io, dir, log_start_offset)?;
        Ok(deleted)
    }

    /// Kafka `onLogStartOffsetIncremented` (in-memory part): forgets unreplicated transactions
    /// that ended below `log_start_offset`, moves the map end offset up to it, and takes the
    /// newest snapshot left (or the log start) as the last snapshot offset.
    fn forget_below_log_start(
        &mut self,
        io: &dyn SnapshotIo,
        dir: &Path,
        log_start_offset: i64,
    ) -> Result<(), SnapshotError> {
        self.unreplicated_txns
            .retain(|_, t| t.last_offset.is_none_or(|l| l >= log_start_offset));
        self.last_map_offset = self.last_map_offset.max(log_start_offset);
        self.last_snap_offset = snapshot_names(io, dir)?
            .last()
            .map_or(log_start_offset, |f| f.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stray_snapshots_are_kafkas() {
        let files = |offsets: &[i64]| -> Vec<SnapshotFile> {
            offsets
                .iter()
                .map(|&offset| SnapshotFile {
                    offset,
                    path: PathBuf::from(format!("{offset}.snapshot")),
                })
                .collect()
        };
        let offsets = |v: Vec<SnapshotFile>| v.into_iter().map(|f| f.offset).collect::<Vec<_>>();
        // The newest stray is kept only at or above the newest base.
        assert_eq!(
            offsets(stray_snapshots(&files(&[1, 4, 9]), &[0, 4, 8])),
            [1]
        );
        assert_eq!(
            offsets(stray_snapshots(&files(&[1, 4, 7]), &[0, 4, 8])),
            [1, 7]
        );
        // No segment: every stray one but the newest.
        assert_eq!(offsets(stray_snapshots(&files(&[1, 4, 7]), &[])), [1, 4]);
        assert!(stray_snapshots(&files(&[0, 4]), &[0, 4]).is_empty());
    }

    #[test]
    fn layout_constants_match_kafka() {
        assert_eq!((CRC_OFFSET, COUNT_OFFSET, ENTRIES_OFFSET), (2, 6, 10));
        assert_eq!(ENTRY_SIZE, 46);
        assert_eq!(ENTRY_TXN_FIRST_OFFSET_OFFSET, 38);
    }

    #[test]
    fn decode_never_panics_on_prefixes_of_a_valid_file() {
        let e = SnapshotEntry {
            producer_id: 1,
            producer_epoch: 2,
            last_sequence: 3,
            last_offset: 4,
            offset_delta: 5,
            timestamp: 6,
            coordinator_epoch: 7,
            current_txn_first_offset: 8,
        };
        let bytes = encode_snapshot(&[e, e]);
        for n in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..n]).is_err(), "prefix {n}");
        }
        assert_eq!(decode_snapshot(&bytes).unwrap(), vec![e, e]);
    }
}
