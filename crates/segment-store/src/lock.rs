//! [`DirLock`]: the exclusive lock on a log (or partition) directory.
//!
//! Kafka's `LogManager` locks each log directory through a `.lock` file in it; we do the same
//! with an `fs2` exclusive advisory lock (`flock` on Unix, `LockFileEx` on Windows) taken without
//! waiting. A second attempt, from this process (through another open file) or another one, fails
//! at once with [`SegmentError::Locked`]. The lock is released when the last clone of the
//! [`DirLock`] is dropped (or the process dies).
//!
//! Caveat: the JVM's `FileChannel.tryLock` uses POSIX record locks (`fcntl`), which do not
//! interact with `flock` on Linux, so this lock keeps out other seglog processes but not a
//! running Kafka broker. Do not point seglog at a directory a live broker owns.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::file_name::LOCK_FILE_NAME;

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
    /// Keeps the lock: closing the file releases it.
    _file: File,
}

/// Whether `e` means "someone else holds the lock".
pub(crate) fn is_contended(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

impl DirLock {
    /// Creates `<dir>/.lock` if needed and locks it exclusively, failing at once with
    /// [`SegmentError::Locked`] if it is already locked.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let dir = dir
            .canonicalize()
            .map_err(|e| SegmentError::io(dir, "canonicalize", e))?;
        let lock_path = dir.join(LOCK_FILE_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| SegmentError::io(&lock_path, "open", e))?;
        match fs2::FileExt::try_lock_exclusive(&file) {
            Ok(()) => {}
            Err(e) if is_contended(&e) => return Err(SegmentError::Locked { path: lock_path }),
            Err(e) => return Err(SegmentError::io(&lock_path, "lock", e)),
        }
        Ok(DirLock {
            inner: Arc::new(Inner {
                dir,
                lock_path,
                _file: file,
            }),
        })
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
        let resolved = path.canonicalize().ok().or_else(|| {
            let parent = path.parent()?.canonicalize().ok()?;
            Some(parent.join(path.file_name()?))
        });
        resolved.is_some_and(|p| p.starts_with(&self.inner.dir))
    }
}
