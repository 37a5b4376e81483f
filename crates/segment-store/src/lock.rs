//! [`DirLock`]: the exclusive lock on a log (or partition) directory.
//!
//! Kafka's `LogManager` locks each log directory through a `.lock` file in it; we do the same
//! with an `fs2` exclusive advisory lock (`flock` on Unix, `LockFileEx` on Windows) taken without
//! waiting. A second attempt, from this process (through another open file) or another one, fails
//! at once with [`SegmentError::Locked`]. The lock is released when the last clone of the
//! [`DirLock`] is dropped (or the process dies).
//!
//! An `flock` belongs to the open file description, and a child forked by any thread of this
//! process shares that description until it calls `exec` (which closes our descriptors, all
//! opened close-on-exec). Closing our descriptor in that window would leave the lock held by the
//! child, and a log closed and reopened at once would find its own directory locked. So every
//! lock taken here (`LockedFile`) is released with an explicit unlock, which acts on the shared
//! description, before the descriptor closes.
//!
//! Caveat: the JVM's `FileChannel.tryLock` uses POSIX record locks (`fcntl`), which do not
//! interact with `flock` on Linux, so this lock keeps out other seglog processes but not a
//! running Kafka broker. Do not point seglog at a directory a live broker owns.

use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::file_name::LOCK_FILE_NAME;
use crate::io::Storage;

/// An exclusive lock on a directory, held while any clone is alive.
#[derive(Debug, Clone)]
pub struct DirLock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The canonical path of the locked directory.
    dir: PathBuf,
    lock_path: PathBuf,
    /// Keeps the lock: dropping it unlocks. `None` on storage that is not the operating
    /// system's file system ([`DirLock::acquire_in`]).
    _file: Option<LockedFile>,
    /// A shared lock on the parent directory's `.lock`, if it has one (a partition directory
    /// inside a log directory): a log directory opened whole takes that lock exclusively, and
    /// holds no lock per partition (as Kafka locks once per log directory), so the two keep each
    /// other out.
    _parent: Option<LockedFile>,
}

/// A file holding an exclusive `fs2` lock, unlocked explicitly when dropped (see the module
/// docs for why closing is not enough).
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
}

impl LockedFile {
    /// Locks `file` exclusively without waiting: [`SegmentError::Locked`] naming `path` if
    /// another open file description holds a lock on it.
    pub(crate) fn lock(path: &Path, file: File) -> Result<LockedFile> {
        match fs2::FileExt::try_lock_exclusive(&file) {
            Ok(()) => Ok(LockedFile { file }),
            Err(e) if is_contended(&e) => Err(SegmentError::Locked {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(SegmentError::io(path, "lock", e)),
        }
    }

    /// [`Self::lock`], shared: other shared locks are let in, an exclusive one is not.
    pub(crate) fn lock_shared(path: &Path, file: File) -> Result<LockedFile> {
        match fs2::FileExt::try_lock_shared(&file) {
            Ok(()) => Ok(LockedFile { file }),
            Err(e) if is_contended(&e) => Err(SegmentError::Locked {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(SegmentError::io(path, "lock", e)),
        }
    }

    /// The locked file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // Best effort: if the unlock fails, closing still releases the lock unless a forked
        // child shares the description, and then its exec does.
        let _ = fs2::FileExt::unlock(&self.file);
    }
}

/// Whether `e` means "someone else holds the lock".
pub(crate) fn is_contended(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

impl DirLock {
    /// Creates `<dir>/.lock` if needed and locks it exclusively, failing at once with
    /// [`SegmentError::Locked`] if it is already locked. No symlink on `dir`'s path is
    /// followed (the directory a user names is resolved before, by whoever opens it): a
    /// partition directory that is a symlink, or a `.lock` that is one, is refused.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        // Not followed if it is a symlink (a dangling one would create a file outside).
        let given = dir.join(LOCK_FILE_NAME);
        let file = crate::io::StdFs::open_std(&given, crate::io::OpenMode::Create)?;
        let dir = dir
            .canonicalize()
            .map_err(|e| SegmentError::io(dir, "canonicalize", e))?;
        let lock_path = dir.join(LOCK_FILE_NAME);
        let file = LockedFile::lock(&lock_path, file)?;
        let parent = match dir.parent() {
            Some(parent) => Self::share_parent_lock(&parent.join(LOCK_FILE_NAME))?,
            None => None,
        };
        Ok(DirLock {
            inner: Arc::new(Inner {
                dir,
                lock_path,
                _file: Some(file),
                _parent: parent,
            }),
        })
    }

    /// A shared lock on `lock_path` (the parent directory's `.lock`) if it is a regular file
    /// there; [`SegmentError::Locked`] if a log directory holds it. Nothing is created.
    fn share_parent_lock(lock_path: &Path) -> Result<Option<LockedFile>> {
        let file = match crate::io::StdFs::open_std(lock_path, crate::io::OpenMode::Read) {
            Ok(file) => file,
            // Absent, a symlink, unreadable: no log directory's lock to share.
            Err(_) => return Ok(None),
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(None);
        }
        LockedFile::lock_shared(lock_path, file).map(Some)
    }

    /// [`Self::acquire`] where `storage` is the operating system's file system (where its
    /// files may be memory-mapped: [`Storage::supports_mmap`]); on any other storage (the
    /// testkit's simulated one, whose files exist only in memory) nothing is created or locked
    /// on the real file system and the lock is the directory's name only: no other process
    /// can reach such a directory, and the path need not exist outside the storage.
    pub fn acquire_in(storage: &dyn Storage, dir: &Path) -> Result<DirLock> {
        if storage.supports_mmap() {
            return Self::acquire(dir);
        }
        Ok(DirLock {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                lock_path: dir.join(LOCK_FILE_NAME),
                _file: None,
                _parent: None,
            }),
        })
    }

    /// Whether this is the lock of a directory on simulated storage ([`Self::acquire_in`]):
    /// no file is locked.
    pub fn is_simulated(&self) -> bool {
        self.inner._file.is_none()
    }

    /// The canonical path of the locked directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The `.lock` file.
    pub fn lock_path(&self) -> &Path {
        &self.inner.lock_path
    }

    /// Whether `path` (which must exist, or whose parent must exist) lies inside the locked
    /// directory, after resolving symlinks.
    pub fn covers(&self, path: &Path) -> bool {
        // On simulated storage the directory exists only in memory (nothing to resolve on the
        // real file system): a name under it, spelled so.
        if self.is_simulated() {
            return path.starts_with(&self.inner.dir)
                && !path
                    .components()
                    .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
        }
        // A name directly in the locked directory, spelled as its canonical path, needs no
        // resolving (every component but the last is canonical): only the name itself could be
        // a symlink leading out. One `lstat` instead of a `readlink` per component.
        if let (Some(parent), Some(Component::Normal(_))) =
            (path.parent(), path.components().next_back())
        {
            if parent == self.inner.dir {
                return match std::fs::symlink_metadata(path) {
                    Ok(m) => !m.file_type().is_symlink(),
                    Err(e) => e.kind() == io::ErrorKind::NotFound,
                };
            }
            // A name in a directory of the locked one (a partition of a log directory): neither
            // the name nor that directory may be a symlink. Two `lstat`s.
            if let (Some(grand), Some(Component::Normal(_))) =
                (parent.parent(), parent.components().next_back())
            {
                if grand == self.inner.dir
                    && std::fs::symlink_metadata(parent).is_ok_and(|m| m.file_type().is_dir())
                {
                    return match std::fs::symlink_metadata(path) {
                        Ok(m) => !m.file_type().is_symlink(),
                        Err(e) => e.kind() == io::ErrorKind::NotFound,
                    };
                }
            }
        }
        let resolved = path.canonicalize().ok().or_else(|| {
            let parent = path.parent()?.canonicalize().ok()?;
            Some(parent.join(path.file_name()?))
        });
        resolved.is_some_and(|p| p.starts_with(&self.inner.dir))
    }
}

#[cfg(all(test, unix))]
pub(crate) mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A process sharing `file`'s open file description (as a child forked by another thread
    /// does until it execs): `sleep` with the file as its standard input.
    pub(crate) fn share_with_child(file: &File) -> Child {
        let dup = file.try_clone().expect("dup");
        Command::new("sleep")
            .arg("30")
            .stdin(Stdio::from(dup))
            .spawn()
            .expect("spawn sleep")
    }

    #[test]
    fn covers_names_in_the_dir_but_not_symlinks_leading_out() {
        let dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let d = lock.dir().to_path_buf();
        std::fs::write(d.join("a.index"), b"x").unwrap();
        std::fs::write(out.path().join("b.index"), b"x").unwrap();
        std::os::unix::fs::symlink(out.path().join("b.index"), d.join("b.index")).unwrap();
        std::os::unix::fs::symlink(out.path(), d.join("sub")).unwrap();
        assert!(lock.covers(&d.join("a.index")));
        assert!(lock.covers(&d.join("new.index")), "a name not yet created");
        assert!(!lock.covers(&d.join("b.index")), "a symlink leading out");
        assert!(
            !lock.covers(&d.join("sub").join("b.index")),
            "through a symlinked dir"
        );
        assert!(!lock.covers(&d.join("..").join("x.index")));
        assert!(!lock.covers(&out.path().join("b.index")));
    }

    #[test]
    fn a_dropped_lock_is_free_even_while_a_child_shares_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(SegmentError::Locked { .. })
        ));
        let mut child = share_with_child(lock.inner._file.as_ref().expect("a real lock").file());
        drop(lock);
        let again = DirLock::acquire(dir.path());
        child.kill().ok();
        child.wait().ok();
        assert!(again.is_ok(), "{again:?}");
    }
}
