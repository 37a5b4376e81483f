//! The one file abstraction every write path in this crate goes through, so that crashes can be
//! simulated.
//!
//! [`Storage`] is the directory-level API (open, rename, remove, list, `sync_dir`) and
//! [`FileHandle`] the per-file API (`read_at`, `write_at`/`append`, `set_len`, `sync_data`).
//! [`StdFs`] implements them over `std::fs`; the `testkit` crate's `SimulatedFs` implements them
//! in memory, keeping only what was synced when it "crashes".
//!
//! [`write_atomically`] is the one way small state files (checkpoints, producer snapshots, the
//! `mirror-state` file) are replaced: `<file>.tmp`, fsync, rename, fsync of the directory.
//!
//! The offset and time indexes are memory-mapped where the storage names real files
//! ([`Storage::supports_mmap`]): a map writes to the page cache without a call to intercept, so
//! there they are opened, renamed and removed on the real file system ([`index_storage`]). On
//! any other storage (the simulated one) they are held in memory and read and written through
//! this seam, with the durability points of a map (see `index::file`): nothing of a partition
//! lives outside the storage. The transaction index, the checkpoint files, the recovery crate's
//! producer snapshots, `mirror-state` file and quarantine folders always go through it.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Result, SegmentError};
use crate::file_name::CHECKPOINT_TMP_SUFFIX;
pub use crate::nofollow::EntryType;
use crate::nofollow::{self, FileOpen};

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; created empty if missing.
    Create,
    /// Read and write; created if missing, truncated to 0 if present.
    CreateTruncate,
    /// Read and write; fails with `AlreadyExists` if present.
    CreateNew,
}

impl OpenMode {
    /// Whether a file opened this way may be written.
    pub fn writable(self) -> bool {
        !matches!(self, OpenMode::Read)
    }
}

/// An open file. All methods take `&self`; a handle is used by one owner at a time.
pub trait FileHandle: Send + Sync + fmt::Debug {
    /// The path the file was opened at.
    fn path(&self) -> &Path;
    /// Current length in bytes.
    fn len(&self) -> Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads up to `buf.len()` bytes at `offset`; returns fewer only at end of file.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Writes all of `data` at `offset`, extending the file (with zeros) if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Writes `data` at the end of the file and returns the position it was written at.
    fn append(&self, data: &[u8]) -> Result<u64> {
        let pos = self.len()?;
        self.write_at(pos, data)?;
        Ok(pos)
    }
    /// Truncates or zero-extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> Result<()>;
    /// Makes the file's data and metadata durable (`fsync`). Does not make its name durable:
    /// that takes [`Storage::sync_dir`] of the parent.
    fn sync_all(&self) -> Result<()>;

    /// The operating system's descriptor of the open file, for system calls that take one
    /// (`sendfile`, `splice`, `copy_file_range`): `None` where the handle is not an OS file (the
    /// `testkit` crate's simulated storage), the default.
    #[cfg(unix)]
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Reads exactly `buf.len()` bytes at `offset` (`UnexpectedEof` if the file is shorter).
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf)?;
        if n < buf.len() {
            return Err(SegmentError::io(
                self.path(),
                "read_exact_at",
                io::Error::from(io::ErrorKind::UnexpectedEof),
            ));
        }
        Ok(())
    }

    /// Reads the whole file.
    fn read_to_end(&self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len()?).map_err(|_| {
            SegmentError::io(
                self.path(),
                "read_to_end",
                io::Error::from(io::ErrorKind::OutOfMemory),
            )
        })?;
        let mut buf = vec![0u8; len];
        let n = self.read_at(0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// A file system: the directory-level operations.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens (or creates) the file at `path`.
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn FileHandle>>;
    /// Whether a file exists at `path`.
    fn exists(&self, path: &Path) -> Result<bool>;
    /// Atomically renames a file, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Names of the entries of `dir` (files and directories), sorted.
    fn list_dir(&self, dir: &Path) -> Result<Vec<OsString>>;
    /// Creates `dir` and its missing ancestors.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Removes the empty directory `dir` (an error if it holds anything).
    fn remove_dir(&self, dir: &Path) -> Result<()>;
    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Whether [`Self::sync_filesystem`] is available.
    fn supports_sync_filesystem(&self) -> bool {
        false
    }
    /// Makes everything written to the file system that holds `dir` durable, every file's data
    /// and every directory entry, with one call (Linux `syncfs`): what a sync of every file and
    /// directory there would do. An error of kind `Unsupported` where
    /// [`Self::supports_sync_filesystem`] is false.
    fn sync_filesystem(&self, dir: &Path) -> Result<()> {
        Err(SegmentError::io(
            dir,
            "syncfs",
            io::Error::new(io::ErrorKind::Unsupported, "no syncfs on this storage"),
        ))
    }
    /// Whether paths name real files of the operating system, so that they may be
    /// memory-mapped (see `crate::mmap`). `false` for simulated storage, whose files exist
    /// only in memory.
    fn supports_mmap(&self) -> bool {
        false
    }
    /// What `path` is, without following it: `None` when nothing is there. Storage without
    /// symlinks (the simulated one) says `File` or `Dir`.
    fn entry_type(&self, path: &Path) -> Result<Option<EntryType>> {
        if self.exists(path)? {
            return Ok(Some(EntryType::File));
        }
        Ok(self.list_dir(path).ok().map(|_| EntryType::Dir))
    }
    /// [`Self::list_dir`] with what each name is ([`Self::entry_type`]), sorted by name.
    fn list_dir_typed(&self, dir: &Path) -> Result<Vec<(OsString, EntryType)>> {
        let mut out = Vec::new();
        for name in self.list_dir(dir)? {
            if let Some(t) = self.entry_type(&dir.join(&name))? {
                out.push((name, t));
            }
        }
        Ok(out)
    }
    /// Creates the directory a user named (a log directory) with its missing ancestors and
    /// returns the path every name inside it is then spelled from. The real file system
    /// resolves the symlinks of that path here, once (the one place seglog follows a symlink:
    /// the directory may itself be one); the simulated one has none and returns `dir`.
    fn resolve_root(&self, dir: &Path) -> Result<PathBuf> {
        self.create_dir_all(dir)?;
        Ok(dir.to_path_buf())
    }
    /// Reads a whole file.
    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        self.open(path, OpenMode::Read)?.read_to_end()
    }
    /// Copies `len` bytes of the file `from`, starting at `offset`, into the new file `to`
    /// (refused with `AlreadyExists` if `to` exists), and makes the copy's data durable
    /// (`fsync`; its name needs a [`Self::sync_dir`] of the parent). Memory is bounded by a
    /// window (`COPY_CHUNK_BYTES`), never by `len`, and holes of `from` stay holes in `to`
    /// where the storage can tell them. Fewer bytes are copied if `from` ends sooner; returns
    /// the length of `to`. On an error `to` may exist, partly written: write it under a name
    /// that does not read as complete (see `PARTIAL_SUFFIX`) and rename it when this returns.
    fn copy_range(&self, from: &Path, offset: u64, len: u64, to: &Path) -> Result<u64> {
        copy_range_through_handles(self, from, offset, len, to)
    }
    /// Creates the directory `dir`, whose parent must exist; an error of kind `AlreadyExists` if
    /// something is there already (a folder that must be new, such as a quarantine folder, is
    /// never written into by accident). The new entry is not synced (see [`Self::sync_dir`]).
    fn create_dir(&self, dir: &Path) -> Result<()> {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dir.file_name().unwrap_or_default();
        if self.list_dir(parent)?.iter().any(|n| n == name) {
            return Err(SegmentError::io(
                dir,
                "create_dir",
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        self.create_dir_all(dir)
    }
    /// Reads a whole file of at most `limit` bytes; a longer one is refused with
    /// [`SegmentError::FileTooLarge`] (its size named), without reading it. For files whose
    /// format bounds their size, or that seglog only ever writes small: memory stays bounded
    /// whatever is found on disk.
    fn read_capped(&self, path: &Path, limit: u64) -> Result<Vec<u8>> {
        let h = self.open(path, OpenMode::Read)?;
        let size = h.len()?;
        if size > limit {
            return Err(SegmentError::FileTooLarge {
                path: path.to_path_buf(),
                size,
                limit,
            });
        }
        // `size` fits: `limit` is what the caller lets be held in memory.
        let mut buf = vec![0u8; usize::try_from(size).unwrap_or(0)];
        let n = h.read_at(0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// The storage the offset and time index files of `storage` are on: the real file system where
/// `storage` can map ([`Storage::supports_mmap`]: they are memory-mapped there, beside any
/// wrapper of it), else `storage` itself (they are then held in memory and go through it).
pub fn index_storage(storage: &dyn Storage) -> &dyn Storage {
    if storage.supports_mmap() {
        &StdFs
    } else {
        storage
    }
}

/// The window [`Storage::copy_range`] copies through.
pub const COPY_CHUNK_BYTES: usize = 1 << 20;

/// Suffix of a copy being written (`<name>.partial`): renamed to `<name>` once complete and
/// synced, so that an interrupted copy (a crash, `ENOSPC`) never bears the name of a complete one.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// `<path>.partial` (`PARTIAL_SUFFIX`).
pub fn partial_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(PARTIAL_SUFFIX);
    PathBuf::from(p)
}

/// [`Storage::copy_range`] through the storage's file handles, a `COPY_CHUNK_BYTES` chunk at a
/// time: a chunk of zeros is not written (the destination is extended over it by `set_len`, which
/// a sparse-capable file system leaves as a hole), so the holes of the source stay holes.
pub fn copy_range_through_handles<S: Storage + ?Sized>(
    storage: &S,
    from: &Path,
    offset: u64,
    len: u64,
    to: &Path,
) -> Result<u64> {
    let src = storage.open(from, OpenMode::Read)?;
    let end = src.len()?.min(offset.saturating_add(len));
    let dst = storage.open(to, OpenMode::CreateNew)?;
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut at = offset;
    while at < end {
        let want = usize::try_from(end - at).map_or(COPY_CHUNK_BYTES, |n| n.min(COPY_CHUNK_BYTES));
        let chunk = buf.get_mut(..want).unwrap_or_default();
        let n = src.read_at(at, chunk)?;
        if n == 0 {
            break;
        }
        let chunk = chunk.get(..n).unwrap_or_default();
        if chunk.iter().any(|&b| b != 0) {
            dst.write_at(at - offset, chunk)?;
        }
        at += n as u64;
    }
    let copied = at.saturating_sub(offset);
    if dst.len()? != copied {
        dst.set_len(copied)?;
    }
    dst.sync_all()?;
    Ok(copied)
}

/// Creates `dir` and its missing ancestors and makes their entries durable (a sync of the
/// parent of each one created), so that what is later synced inside cannot vanish with its
/// folder's name.
pub fn create_dir_all_durably(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for a in dir.ancestors() {
        if a.as_os_str().is_empty() || storage.entry_type(a)?.is_some() {
            break;
        }
        missing.push(a);
    }
    if missing.is_empty() {
        return Ok(());
    }
    storage.create_dir_all(dir)?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage.sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Replaces the file at `path` with `bytes` so that a crash leaves either the old or the new
/// content: writes `<path>.tmp`, fsyncs it, renames it over `path`, fsyncs the directory. The
/// new content is durable when this returns.
pub fn write_atomically(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(CHECKPOINT_TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    {
        let h = storage.open(&tmp, OpenMode::CreateTruncate)?;
        h.write_at(0, bytes)?;
        h.sync_all()?;
    }
    storage.rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    storage.sync_dir(dir)
}

// ------------------------------------------------------------------------------------------------
// std::fs

/// [`Storage`] over `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFs;

/// A [`FileHandle`] over `std::fs::File`.
#[derive(Debug)]
pub struct StdFile {
    file: fs::File,
    path: PathBuf,
}

impl StdFile {
    fn err(&self, op: &'static str) -> impl FnOnce(io::Error) -> SegmentError + '_ {
        move |e| SegmentError::io(&self.path, op, e)
    }
}

#[cfg(unix)]
fn pread(file: &fs::File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}
#[cfg(unix)]
fn pwrite_all(file: &fs::File, offset: u64, data: &[u8]) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, offset)
}
#[cfg(windows)]
fn pread(file: &fs::File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}
#[cfg(windows)]
fn pwrite_all(file: &fs::File, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, data, offset)?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        data = data.get(n..).unwrap_or_default();
        offset += n as u64;
    }
    Ok(())
}

impl FileHandle for StdFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(self.err("metadata"))?.len())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..) {
            if rest.is_empty() {
                break;
            }
            match pread(&self.file, offset + done as u64, rest) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SegmentError::io(&self.path, "read_at", e)),
            }
        }
        Ok(done)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        pwrite_all(&self.file, offset, data).map_err(self.err("write_at"))
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(self.err("set_len"))
    }
    fn sync_data(&self) -> Result<()> {
        self.file.sync_data().map_err(self.err("sync_data"))
    }
    fn sync_all(&self) -> Result<()> {
        self.file.sync_all().map_err(self.err("sync_all"))
    }
    #[cfg(unix)]
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(&self.file))
    }
}

impl StdFs {
    /// Opens a file a user named on the command line for reading: symlinks are followed (the
    /// name is the user's), the open does not block (a FIFO would wait for a writer) and the
    /// handle is refused unless it is a regular file. The error's message says which.
    pub fn open_named(path: &Path) -> io::Result<fs::File> {
        nofollow::open_named(path)
    }

    /// Opens `path` as [`Storage::open`] does, as a `std::fs::File`: no symlink followed on the
    /// path, refused unless it is a regular file (checked on the handle, after the open).
    pub fn open_std(path: &Path, mode: OpenMode) -> Result<fs::File> {
        let how = match mode {
            OpenMode::Read => FileOpen::READ,
            OpenMode::ReadWrite => FileOpen::READ_WRITE,
            OpenMode::Create => FileOpen::CREATE,
            OpenMode::CreateTruncate => FileOpen {
                truncate: true,
                ..FileOpen::CREATE
            },
            OpenMode::CreateNew => FileOpen {
                create_new: true,
                ..FileOpen::CREATE
            },
        };
        nofollow::open_file(path, how).map_err(|e| SegmentError::io(path, "open", e))
    }
}

impl Storage for StdFs {
    fn supports_mmap(&self) -> bool {
        true
    }
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn FileHandle>> {
        let file = StdFs::open_std(path, mode)?;
        Ok(Box::new(StdFile {
            file,
            path: path.to_path_buf(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        nofollow::entry_type(path)
            .map(|t| t.is_some())
            .map_err(|e| SegmentError::io(path, "exists", e))
    }
    fn entry_type(&self, path: &Path) -> Result<Option<EntryType>> {
        nofollow::entry_type(path).map_err(|e| SegmentError::io(path, "lstat", e))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        nofollow::rename(from, to).map_err(|e| SegmentError::io(from, "rename", e))
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        nofollow::remove_file(path).map_err(|e| SegmentError::io(path, "remove_file", e))
    }
    fn list_dir(&self, dir: &Path) -> Result<Vec<OsString>> {
        nofollow::list_dir(dir).map_err(|e| SegmentError::io(dir, "read_dir", e))
    }
    fn list_dir_typed(&self, dir: &Path) -> Result<Vec<(OsString, EntryType)>> {
        nofollow::list_dir_typed(dir).map_err(|e| SegmentError::io(dir, "read_dir", e))
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        nofollow::create_dir_all(dir).map_err(|e| SegmentError::io(dir, "create_dir_all", e))
    }
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        nofollow::remove_dir(dir).map_err(|e| SegmentError::io(dir, "remove_dir", e))
    }
    fn supports_sync_filesystem(&self) -> bool {
        cfg!(target_os = "linux")
    }
    #[cfg(target_os = "linux")]
    fn sync_filesystem(&self, dir: &Path) -> Result<()> {
        // Since Linux 5.8, syncfs also reports a failed write-back of any file of the file
        // system since the last syncfs call (as fsync does for one file).
        nofollow::syncfs(dir).map_err(|e| SegmentError::io(dir, "syncfs", e))
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        nofollow::sync_dir(dir).map_err(|e| SegmentError::io(dir, "sync_dir", e))
    }
    fn resolve_root(&self, dir: &Path) -> Result<PathBuf> {
        fs::create_dir_all(dir).map_err(|e| SegmentError::io(dir, "create_dir_all", e))?;
        fs::canonicalize(dir).map_err(|e| SegmentError::io(dir, "canonicalize", e))
    }
    fn copy_range(&self, from: &Path, offset: u64, len: u64, to: &Path) -> Result<u64> {
        #[cfg(target_os = "linux")]
        {
            std_copy::copy_range(from, offset, len, to)
        }
        #[cfg(not(target_os = "linux"))]
        {
            copy_range_through_handles(self, from, offset, len, to)
        }
    }
    fn create_dir(&self, dir: &Path) -> Result<()> {
        nofollow::create_dir(dir).map_err(|e| SegmentError::io(dir, "create_dir", e))
    }
}

/// [`StdFs`]'s [`Storage::copy_range`] on Linux: the data extents of the range
/// (`SEEK_DATA`/`SEEK_HOLE`) copied in the kernel (`copy_file_range`, or `pread`/`pwrite` of
/// [`COPY_CHUNK_BYTES`] where the file systems cannot), the holes left unwritten.
#[cfg(target_os = "linux")]
mod std_copy {
    use std::fs;
    use std::io;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use rustix::fs::SeekFrom;

    use super::COPY_CHUNK_BYTES;
    use crate::error::{Result, SegmentError};

    pub(super) fn copy_range(from: &Path, offset: u64, len: u64, to: &Path) -> Result<u64> {
        let err = |path: &Path, op: &'static str| {
            let path = path.to_path_buf();
            move |e: io::Error| SegmentError::io(path, op, e)
        };
        // No symlink followed on either path; the source refused unless a regular file.
        let src = super::StdFs::open_std(from, super::OpenMode::Read)?;
        let meta = src.metadata().map_err(err(from, "metadata"))?;
        let mut end = meta.len().min(offset.saturating_add(len));
        let dst = super::StdFs::open_std(to, super::OpenMode::CreateNew)?;
        let mut buf = Vec::new();
        let mut at = offset;
        while at < end {
            // The next data extent [data, hole) at or after `at`; none: the rest is a hole.
            let data = match rustix::fs::seek(&src, SeekFrom::Data(at)) {
                Ok(d) => d,
                Err(rustix::io::Errno::NXIO) => end,
                // No SEEK_DATA here: all of it is data.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => at,
                Err(e) => return Err(err(from, "seek_data")(e.into())),
            };
            if data >= end {
                break;
            }
            let hole = match rustix::fs::seek(&src, SeekFrom::Hole(data)) {
                Ok(h) => h,
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => end,
                Err(e) => return Err(err(from, "seek_hole")(e.into())),
            };
            let extent_end = hole.clamp(data + 1, end);
            let reached = copy_extent(&src, &dst, data, extent_end, offset, &mut buf)
                .map_err(err(to, "copy_range"))?;
            if reached < extent_end {
                // The file ended sooner (it shrank since its length was read).
                end = reached;
                break;
            }
            at = extent_end;
        }
        let copied = end.saturating_sub(offset);
        dst.set_len(copied).map_err(err(to, "set_len"))?;
        dst.sync_all().map_err(err(to, "sync_all"))?;
        Ok(copied)
    }

    /// Copies `[from, to)` of `src` to `[from - offset, to - offset)` of `dst`; returns where
    /// the copy stopped (`to`, or sooner where `src` ends sooner).
    fn copy_extent(
        src: &fs::File,
        dst: &fs::File,
        mut from: u64,
        to: u64,
        offset: u64,
        buf: &mut Vec<u8>,
    ) -> io::Result<u64> {
        let mut in_kernel = true;
        while from < to {
            let want =
                usize::try_from(to - from).map_or(COPY_CHUNK_BYTES, |n| n.min(COPY_CHUNK_BYTES));
            if in_kernel {
                let mut off_in = from;
                let mut off_out = from - offset;
                match rustix::fs::copy_file_range(
                    src,
                    Some(&mut off_in),
                    dst,
                    Some(&mut off_out),
                    want,
                ) {
                    Ok(0) => return Ok(from),
                    Ok(n) => {
                        from += n as u64;
                        continue;
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    // Across file systems on older kernels, or where the file system has no
                    // support: copy through a buffer.
                    Err(
                        rustix::io::Errno::XDEV
                        | rustix::io::Errno::NOSYS
                        | rustix::io::Errno::INVAL
                        | rustix::io::Errno::OPNOTSUPP,
                    ) => in_kernel = false,
                    Err(e) => return Err(e.into()),
                }
            }
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let chunk = buf.get_mut(..want).unwrap_or_default();
            let n = match src.read_at(chunk, from) {
                Ok(0) => return Ok(from),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            dst.write_all_at(chunk.get(..n).unwrap_or_default(), from - offset)?;
            from += n as u64;
        }
        Ok(from)
    }
}

/// A buffer for reads, its bytes starting on a page boundary. The kernel copies a read out of
/// the page cache with `rep movsb`, which slows down into a destination that is not 32-byte
/// aligned, and the allocator starts a fresh block of a large size 16 bytes past such a
/// boundary: reads go into page-aligned memory.
#[derive(Debug, Default)]
pub struct ReadBuf {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

impl ReadBuf {
    /// The alignment of the first byte.
    pub const ALIGN: usize = 4096;

    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> ReadBuf {
        let mut buf = ReadBuf::default();
        buf.set_len(len);
        buf
    }

    /// Makes the buffer `len` bytes long. Reallocates (zero-filled) only when it is too short;
    /// otherwise the bytes are what the buffer held before: the caller reads over them.
    pub fn set_len(&mut self, len: usize) {
        if self.capacity() < len {
            self.vec = vec![0u8; len.saturating_add(Self::ALIGN)];
            self.start = self.vec.as_ptr().align_offset(Self::ALIGN).min(Self::ALIGN);
        }
        self.len = len;
    }

    /// Shortens the buffer to at most `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// How long the buffer can be without reallocating.
    pub fn capacity(&self) -> usize {
        self.vec.len().saturating_sub(self.start)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.vec
            .get(self.start..self.start + self.len)
            .unwrap_or_default()
    }

    /// The bytes, to read into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.vec
            .get_mut(self.start..self.start + self.len)
            .unwrap_or_default()
    }
}

impl AsRef<[u8]> for ReadBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for ReadBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::ReadBuf;

    fn aligned(b: &mut ReadBuf) -> bool {
        (b.as_mut_slice().as_ptr() as usize).is_multiple_of(ReadBuf::ALIGN)
    }

    #[test]
    fn read_buf_starts_on_a_page_and_keeps_its_bytes_when_it_fits() {
        let mut b = ReadBuf::default();
        assert!(b.as_slice().is_empty());
        for len in [1, 16, 4095, 4096, 100_000, 1 << 20] {
            let mut b = ReadBuf::zeroed(len);
            assert_eq!(b.as_slice().len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            assert!(aligned(&mut b), "len {len}");
        }
        b.set_len(8192);
        b.as_mut_slice().fill(7);
        let cap = b.capacity();
        assert!(cap >= 8192);
        // Shorter, then longer again within the capacity: the same bytes, no reallocation.
        b.set_len(100);
        b.truncate(50);
        assert_eq!(b.as_slice(), &[7u8; 50][..]);
        b.truncate(80);
        assert_eq!(b.as_slice().len(), 50);
        b.set_len(8192);
        assert_eq!(b.capacity(), cap);
        assert!(b.as_slice().iter().all(|&x| x == 7));
        assert!(aligned(&mut b));
        // Longer than the capacity: a new zero-filled buffer, aligned.
        b.set_len(cap + 1);
        assert_eq!(b.as_slice().len(), cap + 1);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        assert!(aligned(&mut b));
    }
}
