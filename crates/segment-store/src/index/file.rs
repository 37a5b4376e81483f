//! The bytes of an offset or time index file: memory-mapped where the storage names real files
//! ([`Storage::supports_mmap`]), otherwise held in memory and read from and written back to the
//! file through the [`Storage`] seam (the testkit's simulated storage), so that nothing of an
//! index lives outside the seam.
//!
//! The in-memory kind keeps the durability points of the mapped one, so that a simulated crash
//! sees what a power loss could leave of a map:
//!
//! - a write only changes the buffer, as a write to a map only dirties pages of the page cache;
//! - [`IndexBytes::flush`] (the map's `msync`, which syncs the file's data) writes the changed
//!   bytes to the file and syncs its data;
//! - a length change ([`IndexBytes::resize`], [`IndexBytes::close_with_len`], the preallocation of
//!   [`IndexBytes::create`] and [`IndexBytes::open_grown`]) is a `set_len` of the file, not synced,
//!   as the map's `ftruncate` is; the changed bytes are written to the file first (not synced),
//!   as the pages of an unmapped map stay in the page cache;
//! - dropping it without a close loses the changed bytes (a crash may lose a map's dirty
//!   pages): every way seglog closes an index closes it ([`IndexBytes::close_with_len`]).

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Result, SegmentError};
use crate::io::{FileHandle, OpenMode, Storage};
use crate::lock::DirLock;
use crate::mmap::MmapFile;

/// An index file: a map ([`MmapFile`]) or a buffer kept through the storage seam.
#[derive(Debug)]
pub(crate) enum IndexBytes {
    /// Memory-mapped (a real file system).
    Mapped(MmapFile),
    /// In memory, through the storage seam.
    Stored(StoredFile),
}

/// An index file held in memory, read at open and written back through a [`FileHandle`].
pub(crate) struct StoredFile {
    storage: Arc<dyn Storage>,
    /// `None` once closed.
    file: Option<Box<dyn FileHandle>>,
    path: PathBuf,
    bytes: Vec<u8>,
    writable: bool,
    /// The bytes changed since they were last written to the file (behind a lock: a flush
    /// takes `&self`, as the map's `msync` does).
    dirty: Mutex<Option<Range<usize>>>,
    /// Whether the file changed (bytes written, length set) since its data was last synced:
    /// a flush of an unchanged file syncs nothing (as an `fdatasync` of a clean file writes
    /// nothing).
    unsynced: AtomicBool,
}

impl std::fmt::Debug for StoredFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredFile")
            .field("path", &self.path)
            .field("len", &self.bytes.len())
            .field("writable", &self.writable)
            .field("dirty", &*self.dirty())
            .finish_non_exhaustive()
    }
}

fn check_covered(lock: &DirLock, path: &Path) -> Result<()> {
    if lock.covers(path) {
        Ok(())
    } else {
        Err(SegmentError::NotUnderLock {
            path: path.to_path_buf(),
            lock_dir: lock.dir().to_path_buf(),
        })
    }
}

fn too_large(path: &Path, op: &'static str) -> SegmentError {
    SegmentError::io(
        path,
        op,
        io::Error::new(io::ErrorKind::InvalidInput, "index file too large"),
    )
}

impl IndexBytes {
    /// Opens the existing file `path` ([`MmapFile::open`] where `storage` can map).
    pub(crate) fn open(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        writable: bool,
    ) -> Result<IndexBytes> {
        if storage.supports_mmap() {
            return MmapFile::open(lock, path, writable).map(IndexBytes::Mapped);
        }
        StoredFile::open(storage, lock, path, writable).map(IndexBytes::Stored)
    }

    /// [`MmapFile::open_grown`]: opened writable, zero-extended to `len` first if it is
    /// shorter and `grow_from(its length)` says so. Returns the length the file had.
    pub(crate) fn open_grown(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        len: u64,
        grow_from: impl Fn(u64) -> bool,
    ) -> Result<(IndexBytes, u64)> {
        if storage.supports_mmap() {
            let (m, original) = MmapFile::open_grown(lock, path, len, grow_from)?;
            return Ok((IndexBytes::Mapped(m), original));
        }
        let mut f = StoredFile::open(storage, lock, path, true)?;
        let original = f.bytes.len() as u64;
        if len > original && grow_from(original) {
            f.set_len(len)?;
        }
        Ok((IndexBytes::Stored(f), original))
    }

    /// [`MmapFile::create`]: a new file (failing if it exists) of `len` zero bytes.
    pub(crate) fn create(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        len: u64,
    ) -> Result<IndexBytes> {
        if storage.supports_mmap() {
            return MmapFile::create(lock, path, len).map(IndexBytes::Mapped);
        }
        check_covered(lock, path)?;
        let handle = storage.open(path, OpenMode::CreateNew)?;
        let mut f = StoredFile {
            storage: Arc::clone(storage),
            file: Some(handle),
            path: path.to_path_buf(),
            bytes: Vec::new(),
            writable: true,
            dirty: Mutex::new(None),
            unsynced: AtomicBool::new(false),
        };
        f.set_len(len)?;
        Ok(IndexBytes::Stored(f))
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            IndexBytes::Mapped(m) => m.path(),
            IndexBytes::Stored(f) => &f.path,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            IndexBytes::Mapped(m) => m.len(),
            IndexBytes::Stored(f) => f.bytes.len() as u64,
        }
    }

    /// `len` bytes at `offset`, or `None` if out of bounds.
    pub(crate) fn read(&self, offset: usize, len: usize) -> Option<&[u8]> {
        match self {
            IndexBytes::Mapped(m) => m.read(offset, len),
            IndexBytes::Stored(f) => f.bytes.get(offset..offset.checked_add(len)?),
        }
    }

    /// Writes `data` at `offset` (in the buffer or the map; durable at [`Self::flush`]).
    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        match self {
            IndexBytes::Mapped(m) => m.write_at(offset, data),
            IndexBytes::Stored(f) => f.write_at(offset, data),
        }
    }

    /// Makes the written bytes durable (the map's `msync`).
    pub(crate) fn flush(&self) -> Result<()> {
        match self {
            IndexBytes::Mapped(m) => m.flush(),
            IndexBytes::Stored(f) => f.flush(),
        }
    }

    /// Makes the written bytes and the file's length durable (the map's `msync` and an
    /// `fdatasync`; in memory the changed bytes written and the file's data synced).
    pub(crate) fn sync(&self) -> Result<()> {
        match self {
            IndexBytes::Mapped(m) => m.sync(),
            IndexBytes::Stored(f) => f.sync(),
        }
    }

    /// Closes the file with length `len` ([`MmapFile::close_with_len`]).
    pub(crate) fn close_with_len(self, len: u64) -> Result<()> {
        match self {
            IndexBytes::Mapped(m) => m.close_with_len(len),
            IndexBytes::Stored(mut f) => {
                f.write_back(len)?;
                if len != f.bytes.len() as u64 {
                    f.set_len(len)?;
                }
                f.file = None;
                Ok(())
            }
        }
    }

    /// Truncates or zero-extends the file to `new_len` ([`MmapFile::resize`]).
    pub(crate) fn resize(&mut self, new_len: u64) -> Result<()> {
        match self {
            IndexBytes::Mapped(m) => m.resize(new_len),
            IndexBytes::Stored(f) => {
                if new_len == f.bytes.len() as u64 {
                    return Ok(());
                }
                f.write_back(new_len)?;
                f.set_len(new_len)
            }
        }
    }
}

impl StoredFile {
    fn open(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        writable: bool,
    ) -> Result<StoredFile> {
        check_covered(lock, path)?;
        let mode = if writable {
            OpenMode::ReadWrite
        } else {
            OpenMode::Read
        };
        let handle = storage.open(path, mode)?;
        let bytes = handle.read_to_end()?;
        Ok(StoredFile {
            storage: Arc::clone(storage),
            file: Some(handle),
            path: path.to_path_buf(),
            bytes,
            writable,
            dirty: Mutex::new(None),
            unsynced: AtomicBool::new(false),
        })
    }

    fn dirty(&self) -> MutexGuard<'_, Option<Range<usize>>> {
        self.dirty.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn handle(&self, op: &'static str) -> Result<&dyn FileHandle> {
        self.file
            .as_deref()
            .ok_or_else(|| SegmentError::io(&self.path, op, io::Error::other("index file closed")))
    }

    fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(SegmentError::ReadOnly {
                path: self.path.clone(),
            });
        }
        let out_of_bounds = || {
            SegmentError::io(
                &self.path,
                "index write",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "write past the end of the index",
                ),
            )
        };
        let end = offset.checked_add(data.len()).ok_or_else(out_of_bounds)?;
        let dst = self.bytes.get_mut(offset..end).ok_or_else(out_of_bounds)?;
        dst.copy_from_slice(data);
        if !data.is_empty() {
            let dirty = self.dirty.get_mut().unwrap_or_else(|p| p.into_inner());
            *dirty = Some(match dirty.take() {
                Some(d) => d.start.min(offset)..d.end.max(end),
                None => offset..end,
            });
        }
        Ok(())
    }

    /// Writes the changed bytes below `limit` to the file (not synced) and forgets the rest.
    fn write_back(&self, limit: u64) -> Result<()> {
        let mut guard = self.dirty();
        let Some(dirty) = guard.take() else {
            return Ok(());
        };
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let range = dirty.start..dirty.end.min(limit);
        if range.start >= range.end {
            return Ok(());
        }
        let Some(data) = self.bytes.get(range.clone()) else {
            return Ok(());
        };
        self.unsynced.store(true, Ordering::Relaxed);
        if let Err(e) = self.handle("write_at")?.write_at(range.start as u64, data) {
            *guard = Some(dirty);
            return Err(e);
        }
        Ok(())
    }

    /// Sets the file's length (not synced) and the buffer's, zero-extended. Through a
    /// read-write handle of its own if the index is read-only (as the map's `resize` does).
    fn set_len(&mut self, len: u64) -> Result<()> {
        let new_len = usize::try_from(len).map_err(|_| too_large(&self.path, "set_len"))?;
        self.unsynced.store(true, Ordering::Relaxed);
        if self.writable {
            self.handle("set_len")?.set_len(len)?;
        } else {
            self.storage
                .open(&self.path, OpenMode::ReadWrite)?
                .set_len(len)?;
        }
        self.bytes.resize(new_len, 0);
        let dirty = self.dirty.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dirty {
            d.end = d.end.min(new_len);
            if d.start >= d.end {
                *dirty = None;
            }
        }
        Ok(())
    }

    /// The map's `msync` (a no-op on a read-only or empty, unmapped, one): the changed bytes
    /// written and the file's data synced.
    fn flush(&self) -> Result<()> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        self.sync()
    }

    /// The map's `msync` and an `fdatasync` of a writable file, also of an empty one (whose
    /// length change, a trim to no entries, becomes durable only so).
    fn sync(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.write_back(u64::MAX)?;
        if !self.unsynced.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let synced = self.handle("sync_data")?.sync_data();
        if synced.is_err() {
            self.unsynced.store(true, Ordering::Relaxed);
        }
        synced
    }
}
