//! File-system calls that follow no symlink and never block on what is not a regular file.
//!
//! Every name [`crate::io::StdFs`], the directory lock and the index maps open, create, rename,
//! remove or list is reached without following a symlink in any component of its path (Linux
//! `openat2` with `RESOLVE_NO_SYMLINKS`, or a walk of the path with `O_NOFOLLOW` at each step
//! where `openat2` is missing), and operations on a name (`renameat`, `unlinkat`, `mkdirat`) go
//! through a handle of its parent directory reached the same way. The one symlink seglog
//! resolves is the directory a user names (the log directory, or a partition directory given to
//! a tool), once, when it is opened (`std::fs::canonicalize`); everything inside it is then spelled
//! as a canonical path, so a symlink met below it is a planted one and the call fails with
//! [`SYMLINK_REFUSED`].
//!
//! Files are opened first and checked after (`O_NONBLOCK`, then `fstat` of the handle): a FIFO
//! renamed over a segment between a check and an open can no longer block the open, and what is
//! not a regular file is refused with [`NOT_REGULAR`].
//!
//! On other systems the calls fall back to `std::fs` with the checks made on the path.

use std::fs;
use std::io;
use std::path::Path;

/// The message of the error a symlink inside a log directory gives.
pub const SYMLINK_REFUSED: &str =
    "a symlink on the path: seglog follows no symlink inside a log directory";

/// The message of the error a name that is not a regular file gives.
pub const NOT_REGULAR: &str = "not a regular file";

/// How [`open_file`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOpen {
    /// Open for writing too.
    pub write: bool,
    /// Create the file if it is missing.
    pub create: bool,
    /// Fail if it exists (with `create`).
    pub create_new: bool,
    /// Truncate it to 0.
    pub truncate: bool,
}

impl FileOpen {
    /// Read only; the file must exist.
    pub const READ: FileOpen = FileOpen {
        write: false,
        create: false,
        create_new: false,
        truncate: false,
    };
    /// Read and write; the file must exist.
    pub const READ_WRITE: FileOpen = FileOpen {
        write: true,
        ..FileOpen::READ
    };
    /// Read and write; created empty if missing.
    pub const CREATE: FileOpen = FileOpen {
        create: true,
        ..FileOpen::READ_WRITE
    };
}

#[cfg(test)]
/// Whether `e` is the refusal of a symlink on the path.
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    #[cfg(target_os = "linux")]
    {
        e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
            || e.to_string().contains(SYMLINK_REFUSED)
    }
    #[cfg(not(target_os = "linux"))]
    {
        e.to_string().contains(SYMLINK_REFUSED)
    }
}

fn symlink_refused() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, SYMLINK_REFUSED)
}

fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, NOT_REGULAR)
}

/// What a name in a directory is, seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use rustix::fd::{AsFd, OwnedFd};
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
    use rustix::io::Errno;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::path::Component;

    fn map(e: Errno) -> io::Error {
        if e == Errno::LOOP {
            symlink_refused()
        } else {
            io::Error::from(e)
        }
    }

    /// Opens `path` with `flags`, following no symlink anywhere on it.
    fn open_nofollow(path: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat2(CWD, path, flags, mode, ResolveFlags::NO_SYMLINKS) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => walk_open(path, flags, mode),
            // openat2 refuses a magic link or symlink with ELOOP; O_NOFOLLOW on the last
            // component also gives ELOOP.
            r => r.map_err(map),
        }
    }

    /// The fallback of [`open_nofollow`]: each component opened from the one before with
    /// `O_NOFOLLOW`.
    fn walk_open(path: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let (parent, name) = split(path)?;
        let dir = walk_dir(parent)?;
        rustix::fs::openat(&dir, name, flags, mode).map_err(map)
    }

    fn walk_dir(path: &Path) -> io::Result<OwnedFd> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut fd = rustix::fs::openat(
            CWD,
            if path.is_absolute() { "/" } else { "." },
            dir_flags,
            Mode::empty(),
        )
        .map_err(map)?;
        for c in path.components() {
            let name = match c {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
                Component::ParentDir => std::ffi::OsStr::new(".."),
                Component::Normal(n) => n,
            };
            fd = rustix::fs::openat(&fd, name, dir_flags, Mode::empty()).map_err(map)?;
        }
        Ok(fd)
    }

    /// The parent directory and the last name of `path`.
    fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a path without a file name")
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((parent, name))
    }

    /// A handle of the directory `path` (for `*at` calls, `fsync` and listing).
    pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
        open_nofollow(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).map_err(|e| {
            // O_DIRECTORY | O_NOFOLLOW on a symlink to a directory says ENOTDIR.
            let link = e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error())
                && rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            if link {
                symlink_refused()
            } else {
                e
            }
        })
    }

    pub fn open_file(path: &Path, how: FileOpen) -> io::Result<fs::File> {
        let mut flags = if how.write {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        if how.create {
            flags |= OFlags::CREATE;
        }
        if how.create_new {
            flags |= OFlags::CREATE | OFlags::EXCL;
        }
        if how.truncate {
            flags |= OFlags::TRUNC;
        }
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        // openat2 takes a mode only with O_CREAT.
        let mode = if flags.contains(OFlags::CREATE) {
            Mode::from_raw_mode(0o644)
        } else {
            Mode::empty()
        };
        let fd = open_nofollow(path, flags | OFlags::NONBLOCK, mode)?;
        let st = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(not_regular());
        }
        rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
        Ok(fs::File::from(fd))
    }

    /// A file a user named (symlinks followed), read only, opened without blocking and
    /// refused unless the handle is a regular file.
    pub fn open_named(path: &Path) -> io::Result<fs::File> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a directory, not a file",
                ))
            }
            _ => return Err(not_regular()),
        }
        rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
        Ok(fs::File::from(fd))
    }

    pub fn entry_type(path: &Path) -> io::Result<Option<EntryType>> {
        let (parent, name) = split(path)?;
        // A missing parent means a missing entry, as `lstat` says (`ENOENT`).
        let dir = match open_dir(parent) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => EntryType::File,
                FileType::Directory => EntryType::Dir,
                FileType::Symlink => EntryType::Symlink,
                _ => EntryType::Other,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(map(e)),
        }
    }

    pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
        let (fp, fname) = split(from)?;
        let (tp, tname) = split(to)?;
        let fdir = open_dir(fp)?;
        if fp == tp {
            rustix::fs::renameat(&fdir, fname, &fdir, tname).map_err(map)
        } else {
            let tdir = open_dir(tp)?;
            rustix::fs::renameat(&fdir, fname, &tdir, tname).map_err(map)
        }
    }

    pub fn remove_file(path: &Path) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let dir = open_dir(parent)?;
        rustix::fs::unlinkat(&dir, name, AtFlags::empty()).map_err(map)
    }

    pub fn remove_dir(path: &Path) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let dir = open_dir(parent)?;
        rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR).map_err(map)
    }

    pub fn create_dir_all(path: &Path) -> io::Result<()> {
        match open_dir(path) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (parent, name) = split(path)?;
        if parent != path {
            create_dir_all(parent)?;
        }
        let dir = open_dir(parent)?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(map(e)),
        }
        // What exists now must be a directory, not a symlink planted in between.
        open_dir(path).map(|_| ())
    }

    pub fn list_dir(path: &Path) -> io::Result<Vec<OsString>> {
        Ok(list_dir_typed(path)?.into_iter().map(|(n, _)| n).collect())
    }

    /// Creates the directory `path`, failing if anything is there.
    pub fn create_dir(path: &Path) -> io::Result<()> {
        let (parent, name) = split(path)?;
        let dir = open_dir(parent)?;
        rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)).map_err(map)
    }

    pub fn list_dir_typed(path: &Path) -> io::Result<Vec<(OsString, EntryType)>> {
        let dir = open_dir(path)?;
        let mut names = Vec::new();
        let it = rustix::fs::Dir::read_from(dir.as_fd()).map_err(io::Error::from)?;
        for entry in it {
            let entry = entry.map_err(io::Error::from)?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let mut t = entry.file_type();
            if t == FileType::Unknown {
                // A file system without d_type: one lstat.
                match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => t = FileType::from_raw_mode(st.st_mode),
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(map(e)),
                }
            }
            let t = match t {
                FileType::RegularFile => EntryType::File,
                FileType::Directory => EntryType::Dir,
                FileType::Symlink => EntryType::Symlink,
                _ => EntryType::Other,
            };
            names.push((OsString::from_vec(name.to_bytes().to_vec()), t));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }

    pub fn sync_dir(path: &Path) -> io::Result<()> {
        let dir = open_dir(path)?;
        rustix::fs::fsync(&dir).map_err(io::Error::from)
    }

    pub fn syncfs(path: &Path) -> io::Result<()> {
        let dir = open_dir(path)?;
        rustix::fs::syncfs(&dir).map_err(io::Error::from)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;
    use std::ffi::OsString;

    fn refuse_symlink(path: &Path) -> io::Result<()> {
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => Err(symlink_refused()),
            _ => Ok(()),
        }
    }

    pub fn open_file(path: &Path, how: FileOpen) -> io::Result<fs::File> {
        refuse_symlink(path)?;
        if let Ok(m) = fs::metadata(path) {
            if !m.is_file() {
                return Err(not_regular());
            }
        }
        let mut o = fs::OpenOptions::new();
        o.read(true)
            .write(how.write)
            .create(how.create && !how.create_new)
            .create_new(how.create_new)
            .truncate(how.truncate);
        o.open(path)
    }

    pub fn open_named(path: &Path) -> io::Result<fs::File> {
        let m = fs::metadata(path)?;
        if !m.is_file() {
            return Err(not_regular());
        }
        fs::File::open(path)
    }

    pub fn entry_type(path: &Path) -> io::Result<Option<EntryType>> {
        match fs::symlink_metadata(path) {
            Ok(m) => {
                let t = m.file_type();
                Ok(Some(if t.is_symlink() {
                    EntryType::Symlink
                } else if t.is_dir() {
                    EntryType::Dir
                } else if t.is_file() {
                    EntryType::File
                } else {
                    EntryType::Other
                }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    pub fn remove_file(path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    pub fn remove_dir(path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }
    pub fn create_dir_all(path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    pub fn create_dir(path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }
    pub fn list_dir(path: &Path) -> io::Result<Vec<OsString>> {
        Ok(list_dir_typed(path)?.into_iter().map(|(n, _)| n).collect())
    }
    pub fn list_dir_typed(path: &Path) -> io::Result<Vec<(OsString, EntryType)>> {
        refuse_symlink(path)?;
        let mut names = Vec::new();
        for e in fs::read_dir(path)? {
            let e = e?;
            let t = entry_type(&e.path())?.unwrap_or(EntryType::Other);
            names.push((e.file_name(), t));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(names)
    }
    pub fn sync_dir(path: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            fs::File::open(path)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            Ok(())
        }
    }
}

pub use imp::*;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn no_call_follows_a_symlink_at_the_name_or_above_it() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let inside = root.join("inside");
        let outside = root.join("outside");
        fs::create_dir(&inside).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), b"keep").unwrap();
        symlink(outside.join("victim"), inside.join("a.tmp")).unwrap();
        symlink(&outside, inside.join("sub")).unwrap();

        let e = open_file(&inside.join("a.tmp"), FileOpen::CREATE).unwrap_err();
        assert!(is_symlink_refusal(&e), "{e}");
        let e = open_file(&inside.join("sub/victim"), FileOpen::READ_WRITE).unwrap_err();
        assert!(is_symlink_refusal(&e), "{e}");
        assert!(is_symlink_refusal(
            &list_dir(&inside.join("sub")).unwrap_err()
        ));
        assert!(is_symlink_refusal(
            &sync_dir(&inside.join("sub")).unwrap_err()
        ));
        assert!(create_dir_all(&inside.join("sub/new")).is_err());
        assert!(!outside.join("new").exists());
        assert!(rename(&inside.join("sub/victim"), &inside.join("x")).is_err());
        assert!(remove_file(&inside.join("sub/victim")).is_err());
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"keep");
        // A rename over the symlink replaces the link itself, never its target.
        fs::write(inside.join("b"), b"new").unwrap();
        rename(&inside.join("b"), &inside.join("a.tmp")).unwrap();
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"keep");
        assert_eq!(
            entry_type(&inside.join("sub")).unwrap(),
            Some(EntryType::Symlink)
        );
        assert_eq!(
            entry_type(&inside.join("a.tmp")).unwrap(),
            Some(EntryType::File)
        );
        assert_eq!(entry_type(&inside.join("none")).unwrap(), None);
        // Below a missing folder there is nothing either (`Log::open` of a new path asks).
        assert_eq!(entry_type(&inside.join("none/deeper")).unwrap(), None);
        // Below a symlinked folder the answer is a refusal, not "nothing".
        assert!(is_symlink_refusal(
            &entry_type(&inside.join("sub/victim")).unwrap_err()
        ));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let root = tempfile::tempdir().unwrap();
        let p = root
            .path()
            .canonicalize()
            .unwrap()
            .join("00000000000000000000.log");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let e = open_file(&p, FileOpen::READ).unwrap_err();
        assert_eq!(e.to_string(), NOT_REGULAR);
        assert_eq!(entry_type(&p).unwrap(), Some(EntryType::Other));
    }
}
