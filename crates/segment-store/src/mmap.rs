//! The only module in seglog with `unsafe`: memory-mapping index files.
//!
//! Mapping a file is `unsafe` in `memmap2` because the bytes behind a map can change, or vanish,
//! under the program: another process may write or truncate the file (a read of a page past the
//! new end raises `SIGBUS`), and even this process could truncate it through another handle. A
//! safe wrapper is only sound if it rules those out; see [`MmapFile`] for how this one does.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::{Result, SegmentError};
use crate::lock::{DirLock, LockedFile};

/// [`MmapFile::write_at`] writes at least this many bytes through the file handle rather than
/// through the map.
const WRITE_THROUGH_FILE_BYTES: usize = 64 * 1024;

/// A file mapped into memory for reading (and, if opened writable, writing in place).
///
/// # Invariants
///
/// The safe API rests on these; each `unsafe` block below names the ones it relies on.
///
/// 1. **The owner holds the directory lock.** Every constructor takes the [`DirLock`] of a
///    directory containing the file and keeps a clone for the map's lifetime, so no other
///    cooperating process can open the directory's files while the map exists.
/// 2. **One map per file per process.** The file handle holds an exclusive `fs2` lock on the file
///    itself for the map's lifetime, so a second [`MmapFile`] on the same file (in this process or
///    another seglog process) fails with [`SegmentError::Locked`] instead of aliasing the map.
/// 3. **Never truncated while mapped.** The length only changes in [`MmapFile::resize`], which
///    drops (unmaps) the current map *before* `set_len` and maps again afterwards, as Kafka's
///    `AbstractIndex.resize` does with `safeForceUnmap`. No view of the old map can outlive it:
///    views borrow `&self`, and `resize` takes `&mut self`.
/// 4. **Other processes must not modify the file.** This is a convention the lock files make
///    checkable for seglog processes; it cannot be enforced against arbitrary programs (nor
///    against a running Kafka broker, whose JVM locks do not interact with `flock`). Do not run
///    seglog on files another program is writing.
/// 5. **Reads are bounds-checked slices.** Callers get `&[u8]` views and decode with
///    `from_be_bytes`; nothing is cast to a struct.
///
/// An empty file is not mapped at all (the view is the empty slice): zero-length maps are not
/// portable.
pub struct MmapFile {
    // Field order matters for drop: the map is unmapped before the file (and its lock) closes.
    map: Option<Map>,
    file: LockedFile,
    path: PathBuf,
    len: u64,
    writable: bool,
    _dir_lock: DirLock,
}

enum Map {
    ReadOnly(Mmap),
    ReadWrite(MmapMut),
}

impl std::fmt::Debug for MmapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

fn to_usize(path: &Path, len: u64) -> Result<usize> {
    usize::try_from(len).map_err(|_| {
        SegmentError::io(
            path,
            "mmap",
            io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"),
        )
    })
}

impl MmapFile {
    /// Maps an existing file, locking it exclusively (see the invariants).
    pub fn open(lock: &DirLock, path: &Path, writable: bool) -> Result<MmapFile> {
        let file = Self::open_existing(lock, path, writable)?;
        Self::from_file(lock, path, file, writable, None)
    }

    /// Opens the existing regular file `path`, which `lock` must cover.
    fn open_existing(lock: &DirLock, path: &Path, writable: bool) -> Result<File> {
        Self::check_covered(lock, path)?;
        crate::io::refuse_non_regular(path)?;
        OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| SegmentError::io(path, "open", e))
    }

    /// [`Self::open`] (writable), first zero-extending the file to `len` if it is shorter and
    /// `grow_from(its length)` says so: one map of the final length instead of a map of the old
    /// one and a resize. Returns the length the file had.
    pub fn open_grown(
        lock: &DirLock,
        path: &Path,
        len: u64,
        grow_from: impl Fn(u64) -> bool,
    ) -> Result<(MmapFile, u64)> {
        let file = Self::open_existing(lock, path, true)?;
        let mut m = Self::from_file_unmapped(lock, path, file, true, None)?;
        let original = m.len;
        if len > original && grow_from(original) {
            to_usize(path, len)?;
            m.file
                .file()
                .set_len(len)
                .map_err(|e| SegmentError::io(path, "set_len", e))?;
            m.len = len;
        }
        m.map = m.map_current()?;
        Ok((m, original))
    }

    /// Creates a new file (failing if it exists), sets its length to `len` (zero-filled) and maps
    /// it writable.
    pub fn create(lock: &DirLock, path: &Path, len: u64) -> Result<MmapFile> {
        Self::check_covered(lock, path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| SegmentError::io(path, "create", e))?;
        Self::from_file(lock, path, file, true, Some(len))
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

    fn from_file(
        lock: &DirLock,
        path: &Path,
        file: File,
        writable: bool,
        set_len: Option<u64>,
    ) -> Result<MmapFile> {
        let mut m = Self::from_file_unmapped(lock, path, file, writable, set_len)?;
        m.map = m.map_current()?;
        Ok(m)
    }

    /// [`Self::from_file`] without the map (the caller maps).
    fn from_file_unmapped(
        lock: &DirLock,
        path: &Path,
        file: File,
        writable: bool,
        set_len: Option<u64>,
    ) -> Result<MmapFile> {
        // Invariant 2, before the length is read or changed and before mapping.
        let file = LockedFile::lock(path, file)?;
        if let Some(len) = set_len {
            file.file()
                .set_len(len)
                .map_err(|e| SegmentError::io(path, "set_len", e))?;
        }
        let len = file
            .file()
            .metadata()
            .map_err(|e| SegmentError::io(path, "metadata", e))?
            .len();
        Ok(MmapFile {
            map: None,
            file,
            path: path.to_path_buf(),
            len,
            writable,
            _dir_lock: lock.clone(),
        })
    }

    /// Maps `self.file` at `self.len`. Must only be called with no live map.
    fn map_current(&self) -> Result<Option<Map>> {
        if self.len == 0 {
            return Ok(None);
        }
        let len = to_usize(&self.path, self.len)?;
        let map = if self.writable {
            // SAFETY: invariants 1, 2 and 4 mean no other handle writes or truncates this file
            // while the map exists; invariant 3 (callers hold no other map: `map` is `None` here)
            // means this process does not truncate it either. `len` is the file's current length,
            // so every mapped page is backed by the file.
            let m = unsafe { MmapOptions::new().len(len).map_mut(self.file.file()) };
            let m = m.map_err(|e| SegmentError::io(&self.path, "mmap", e))?;
            // Writable maps are the offset and time indexes: written one entry at a time and
            // binary-searched. Without this hint the first touch of a fresh, preallocated (sparse)
            // index faults in a whole readahead window of zero pages (measured: most of the cost
            // of a segment append). Advisory only, so a failure is ignored.
            #[cfg(unix)]
            let _ = m.advise(memmap2::Advice::Random);
            Map::ReadWrite(m)
        } else {
            let mut options = MmapOptions::new();
            options.len(len);
            // SAFETY: as above: invariants 1-4 keep the file at least `len` bytes long and
            // unmodified by others for the lifetime of the map.
            let m = unsafe { options.map(self.file.file()) };
            let m = m.map_err(|e| SegmentError::io(&self.path, "mmap", e))?;
            // Read-only maps are mostly `.log` files read front to back (fetches, producer-state
            // replays): twice the read-around of a fault when they are not in the page cache.
            // Advisory only.
            #[cfg(target_os = "linux")]
            let _ = rustix::fs::fadvise(self.file.file(), 0, None, rustix::fs::Advice::Sequential);
            Map::ReadOnly(m)
        };
        Ok(Some(map))
    }

    /// The mapped file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file (and map) length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The whole mapped file.
    pub fn as_slice(&self) -> &[u8] {
        match &self.map {
            None => &[],
            Some(Map::ReadOnly(m)) => m,
            Some(Map::ReadWrite(m)) => m,
        }
    }

    /// `len` bytes at `offset`, or `None` if out of bounds.
    pub fn read(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.as_slice().get(offset..offset.checked_add(len)?)
    }

    /// Copies `data` into the map at `offset`. Fails if read-only or out of bounds.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(SegmentError::ReadOnly {
                path: self.path.clone(),
            });
        }
        let out_of_bounds = || {
            SegmentError::io(
                &self.path,
                "mmap write",
                io::Error::new(io::ErrorKind::InvalidInput, "write past the end of the map"),
            )
        };
        let end = offset.checked_add(data.len()).ok_or_else(out_of_bounds)?;
        match &mut self.map {
            #[cfg(unix)]
            Some(Map::ReadWrite(m)) if data.len() >= WRITE_THROUGH_FILE_BYTES => {
                use std::os::unix::fs::FileExt;
                if m.get(offset..end).is_none() {
                    return Err(out_of_bounds());
                }
                // Through the file: the map shows the same page-cache pages, and no view of the
                // map is alive (`&mut self`). One `pwrite` fills fresh pages far faster than a
                // write fault per page (6x for the 1.7 MB offset index of a 1 GiB segment).
                let position = u64::try_from(offset).map_err(|_| out_of_bounds())?;
                self.file
                    .file()
                    .write_all_at(data, position)
                    .map_err(|e| SegmentError::io(&self.path, "write_at", e))
            }
            Some(Map::ReadWrite(m)) => {
                let dst = m.get_mut(offset..end).ok_or_else(out_of_bounds)?;
                dst.copy_from_slice(data);
                Ok(())
            }
            _ if data.is_empty() && offset == 0 => Ok(()),
            _ => Err(out_of_bounds()),
        }
    }

    /// Writes dirty pages back to the file (`msync`).
    pub fn flush(&self) -> Result<()> {
        match &self.map {
            Some(Map::ReadWrite(m)) => m
                .flush()
                .map_err(|e| SegmentError::io(&self.path, "msync", e)),
            _ => Ok(()),
        }
    }

    /// Unmaps, sets the file length to `len` and closes (unlocking): [`Self::resize`] without
    /// mapping the new length only to unmap it again.
    pub fn close_with_len(mut self, len: u64) -> Result<()> {
        // Invariant 3: unmapped before the length changes.
        self.map = None;
        if len == self.len {
            return Ok(());
        }
        self.set_file_len(len)
            .map_err(|e| SegmentError::io(&self.path, "set_len", e))
    }

    /// Sets the file's length, through a temporary read-write handle if it is mapped read-only
    /// (as Kafka's `resize` does). The caller has unmapped it (invariant 3).
    fn set_file_len(&self, len: u64) -> io::Result<()> {
        if self.writable {
            self.file.file().set_len(len)
        } else {
            OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|f| f.set_len(len))
        }
    }

    /// Changes the file length to `new_len` (truncating or zero-extending) and remaps it.
    /// Unmaps first, so no map ever covers bytes past the end of the file. Works on read-only
    /// maps too (through a temporary read-write handle), as Kafka's `resize` does.
    pub fn resize(&mut self, new_len: u64) -> Result<()> {
        if new_len == self.len {
            return Ok(());
        }
        // Fail before unmapping if the new length cannot be mapped at all.
        to_usize(&self.path, new_len)?;
        // Invariant 3: unmap before the length changes. Unmapping a shared map loses nothing
        // (dirty pages stay in the page cache and are written back as usual), so no msync here:
        // durability is `flush`'s job, as in Kafka's `AbstractIndex.resize`.
        self.map = None;
        match self.set_file_len(new_len) {
            Ok(()) => self.len = new_len,
            Err(e) => {
                // The length did not change: restore the old map before reporting.
                self.map = self.map_current()?;
                return Err(SegmentError::io(&self.path, "set_len", e));
            }
        }
        self.map = self.map_current()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_write_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x.index");
        let mut m = MmapFile::create(&lock, &p, 16).unwrap();
        assert_eq!(m.as_slice(), &[0u8; 16]);
        m.write_at(4, &[1, 2, 3, 4]).unwrap();
        assert!(m.write_at(14, &[1, 2, 3]).is_err());
        m.flush().unwrap();
        drop(m);
        assert_eq!(std::fs::read(&p).unwrap()[4..8], [1, 2, 3, 4]);
        let m = MmapFile::open(&lock, &p, false).unwrap();
        assert_eq!(m.read(4, 4).unwrap(), &[1, 2, 3, 4]);
        assert!(m.read(15, 2).is_none());
        assert!(matches!(
            MmapFile::open(&lock, &p, false),
            Err(SegmentError::Locked { .. })
        ));
    }

    #[test]
    fn read_only_rejects_writes() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, [9u8; 8]).unwrap();
        let mut m = MmapFile::open(&lock, &p, false).unwrap();
        assert!(matches!(
            m.write_at(0, &[1]),
            Err(SegmentError::ReadOnly { .. })
        ));
        // Resizing a read-only map goes through a temporary read-write handle.
        m.resize(4).unwrap();
        assert_eq!(m.as_slice(), &[9u8; 4]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4);
    }

    #[test]
    fn resize_down_and_up_keeps_data_and_never_shows_a_truncated_map() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x");
        let mut m = MmapFile::create(&lock, &p, 4096).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        m.write_at(0, &data).unwrap();
        m.resize(100).unwrap();
        assert_eq!(m.len(), 100);
        assert_eq!(m.as_slice(), &data[..100]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 100);
        m.resize(8192).unwrap();
        assert_eq!(m.as_slice().len(), 8192);
        assert_eq!(&m.as_slice()[..100], &data[..100]);
        assert!(m.as_slice()[100..].iter().all(|&b| b == 0));
        m.resize(0).unwrap();
        assert!(m.as_slice().is_empty() && m.is_empty());
        m.resize(8).unwrap();
        assert_eq!(m.as_slice(), &[0u8; 8]);
    }

    #[test]
    fn refuses_files_outside_the_locked_dir() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(a.path()).unwrap();
        let p = b.path().join("x");
        assert!(matches!(
            MmapFile::create(&lock, &p, 8),
            Err(SegmentError::NotUnderLock { .. })
        ));
        assert!(!p.exists());
    }

    #[cfg(unix)]
    #[test]
    fn an_unmapped_file_is_free_even_while_a_child_shares_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x.index");
        let m = MmapFile::create(&lock, &p, 16).unwrap();
        let mut child = crate::lock::tests::share_with_child(m.file.file());
        drop(m);
        let again = MmapFile::open(&lock, &p, false);
        child.kill().ok();
        child.wait().ok();
        assert!(again.is_ok(), "{again:?}");
    }
}
