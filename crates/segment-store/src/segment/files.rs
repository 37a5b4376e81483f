//! A segment's files: flush, close, delete and move.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::LogSegment;
use crate::error::Result;
use crate::file_name::{segment_file_path, FileKind, DELETED_FILE_SUFFIX};
use crate::io::{index_storage, Storage};

impl LogSegment {
    /// Kafka's `flush`: makes the `.log`, both mapped indexes and the transaction index durable.
    pub fn flush(&self) -> Result<()> {
        self.log.flush()?;
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()
    }

    /// Kafka's `close`: the final time-index entry, trimmed indexes, a flushed `.log`.
    pub fn close(self) -> Result<()> {
        self.close_with(true)
    }

    /// [`Self::close`]; without `sync` nothing is flushed (the caller makes the file system
    /// durable afterwards, see [`crate::io::Storage::sync_filesystem`]).
    pub(crate) fn close_with(mut self, sync: bool) -> Result<()> {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.force_final_time_index_entry()?;
        }
        if sync {
            self.log.flush()?;
            self.txn_index.flush()?;
        }
        let LogSegment {
            offset_index,
            time_index,
            ..
        } = self;
        offset_index.close()?;
        time_index.close()
    }

    /// Closes the segment's files to free their descriptors and maps, to be opened again when
    /// the log next needs the segment (see [`crate::log::LocalLog`]): the final time-index entry
    /// as [`Self::close`] writes it, indexes trimmed only where the log gave them room (an index
    /// the log neither created nor grew is left with the bytes it was found with), no flush
    /// (what was written is in the page cache; a later flush opens the files again).
    pub(crate) fn release(mut self) -> Result<()> {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.force_final_time_index_entry()?;
        }
        let LogSegment {
            offset_index,
            time_index,
            ..
        } = self;
        offset_index.close_without_room()?;
        time_index.close_without_room()
    }

    /// Deletes the segment's files: each is first renamed to `<name>.deleted` (what a loader
    /// removes if a crash interrupts), the directory synced, then the files removed.
    pub fn delete(self) -> Result<()> {
        self.mark_deleted()?.remove()
    }

    /// The first half of Kafka's `deleteSegmentFiles`: each of the segment's files is renamed to
    /// `<name>.deleted` (what a loader removes if a crash interrupts) and the directory synced.
    /// The files stay until [`DeletedFiles::remove`]: a reader that already holds a descriptor
    /// or a map of them reads on. Mapped indexes are renamed on the real file system
    /// (`index_storage`).
    pub(crate) fn mark_deleted(self) -> Result<DeletedFiles> {
        let LogSegment {
            base_offset,
            dir,
            ctx,
            log,
            offset_index,
            time_index,
            txn_index,
            ..
        } = self;
        drop((log, offset_index, time_index, txn_index));
        let mut files = Vec::new();
        for kind in [FileKind::Log, FileKind::TxnIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if ctx.storage.exists(&p)? {
                let to = deleted_path(&p);
                ctx.storage.rename(&p, &to)?;
                files.push((true, to));
            }
        }
        let indexes = index_storage(ctx.storage.as_ref());
        for kind in [FileKind::Index, FileKind::TimeIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if indexes.exists(&p)? {
                let to = deleted_path(&p);
                indexes.rename(&p, &to)?;
                files.push((false, to));
            }
        }
        ctx.storage.sync_dir(&dir)?;
        Ok(DeletedFiles {
            base_offset,
            storage: ctx.storage,
            files,
        })
    }

    /// Moves the segment's files (`.log`, `.index`, `.timeindex`, `.txnindex`, those that exist)
    /// into `to_dir` under their own names, syncing both directories. Nothing is deleted; used by
    /// a loader that sets segments aside instead of deleting them. The offset and time indexes go
    /// without the room the log gave them (trimmed to their entries if it grew them). Returns
    /// the new paths.
    pub fn move_to(self, to_dir: &Path) -> Result<Vec<PathBuf>> {
        let LogSegment {
            base_offset,
            dir,
            ctx,
            log,
            offset_index,
            time_index,
            txn_index,
            ..
        } = self;
        drop((log, txn_index));
        offset_index.close_without_room()?;
        time_index.close_without_room()?;
        ctx.storage.create_dir_all(to_dir)?;
        let mut moved = Vec::new();
        for kind in [FileKind::Log, FileKind::TxnIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if ctx.storage.exists(&p)? {
                let to = segment_file_path(to_dir, base_offset, kind);
                ctx.storage.rename(&p, &to)?;
                moved.push(to);
            }
        }
        let indexes = index_storage(ctx.storage.as_ref());
        for kind in [FileKind::Index, FileKind::TimeIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if indexes.exists(&p)? {
                // Mapped indexes live on the real file system, whatever wraps it.
                indexes.create_dir_all(to_dir)?;
                let to = segment_file_path(to_dir, base_offset, kind);
                indexes.rename(&p, &to)?;
                moved.push(to);
            }
        }
        ctx.storage.sync_dir(to_dir)?;
        ctx.storage.sync_dir(&dir)?;
        Ok(moved)
    }
}

/// The `.deleted` files of a segment [`LogSegment::mark_deleted`] renamed, until they are removed
/// (Kafka removes them `file.delete.delay.ms` later).
pub(crate) struct DeletedFiles {
    base_offset: i64,
    storage: Arc<dyn Storage>,
    /// Each file, and whether it goes through `storage` (`false`: a mapped index, on the real
    /// file system when `storage` has no maps).
    files: Vec<(bool, PathBuf)>,
}

impl std::fmt::Debug for DeletedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletedFiles")
            .field("base_offset", &self.base_offset)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl DeletedFiles {
    /// Files already renamed `.deleted` through `storage`.
    pub(crate) fn new(base_offset: i64, storage: Arc<dyn Storage>, files: Vec<PathBuf>) -> Self {
        DeletedFiles {
            base_offset,
            storage,
            files: files.into_iter().map(|p| (true, p)).collect(),
        }
    }

    /// The base offset of the segment the files were.
    pub(crate) fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Removes the files (those already gone are skipped).
    pub(crate) fn remove(self) -> Result<()> {
        let indexes = index_storage(self.storage.as_ref());
        for (through_storage, p) in self.files {
            if through_storage {
                remove_file_if_exists(self.storage.as_ref(), &p)?;
            } else {
                remove_file_if_exists(indexes, &p)?;
            }
        }
        Ok(())
    }
}

fn deleted_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(DELETED_FILE_SUFFIX);
    PathBuf::from(s)
}

/// Removes the file `p` of `storage` if there is one (a lookup first where the storage is not the
/// real file system: a simulated removal of nothing would still be an I/O point).
pub(super) fn remove_file_if_exists(storage: &dyn Storage, p: &Path) -> Result<()> {
    if !storage.supports_mmap() && !storage.exists(p)? {
        return Ok(());
    }
    match storage.remove_file(p) {
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(()),
        r => r,
    }
}
