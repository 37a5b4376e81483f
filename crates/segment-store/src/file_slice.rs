//! [`FileSlice`]: a byte range of a segment's `.log`, handed out instead of a copy of its bytes
//! (Kafka's `FileRecords.slice`), for a server that passes file regions to `sendfile`.
//!
//! A slice holds the `.log`'s open handle (shared with the segment, an `Arc`), not its path and
//! not a map: what the log does to the segment after the slice was taken changes what a read
//! of the slice finds only as the open file itself changes.
//!
//! | after the slice was taken | a read of the slice |
//! | --- | --- |
//! | appends to the segment | the slice's bytes (it does not grow) |
//! | retention deletes the segment, the log is closed, the segment is closed to bound descriptors | the slice's bytes: the open descriptor keeps the file readable after `unlink` (on Unix) |
//! | a truncation below the slice's end | a short read: the bytes the file still holds, [`SegmentError::SliceTruncated`] from [`FileSlice::to_vec`] |
//! | a truncation and new appends over the slice's range | the new bytes (as Kafka's slice of a truncated `FileRecords` would) |
//!
//! A slice of a sealed segment is read by a copy out of the segment's read-only map while the
//! segment keeps the map; once the segment gives it up (before any change of the file's length:
//! an append, a truncation, closing the segment) the slice reads with `pread`s through
//! [`FileHandle::read_at`]. The hand-over is a gate of two atomics, not a lock (`SharedMap` in
//! `file_records.rs`), so a truncation under a slice cannot fault.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::file_records::SharedMap;
use crate::io::FileHandle;

/// A range of a segment's `.log`, kept readable while it is held (see the module docs).
#[derive(Clone)]
pub struct FileSlice {
    handle: Arc<dyn FileHandle>,
    /// The sealed segment's map, while the segment keeps it.
    map: Option<Arc<SharedMap>>,
    position: u64,
    len: u64,
}

impl fmt::Debug for FileSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSlice")
            .field("path", &self.handle.path())
            .field("position", &self.position)
            .field("len", &self.len)
            .finish()
    }
}

impl FileSlice {
    /// The `len` bytes at `position` of the file open as `handle` (and mapped as `map`).
    pub(crate) fn new(
        handle: Arc<dyn FileHandle>,
        map: Option<Arc<SharedMap>>,
        position: u64,
        len: u64,
    ) -> FileSlice {
        FileSlice {
            handle,
            map,
            position,
            len,
        }
    }

    /// The path the file was opened at (it may have been renamed or deleted since).
    pub fn path(&self) -> &Path {
        self.handle.path()
    }

    /// The slice's first byte in the file (Kafka's slice `start`).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The slice's length in bytes (Kafka's `sizeInBytes` of the slice).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the slice has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the slice's bytes from `offset` (counted from the slice's start) into `buf`, at
    /// most `buf.len()` and not past the slice's end; returns how many were read. Fewer than
    /// asked only when the file now ends inside the slice (a truncation after the slice was
    /// taken): a short read, never a fault.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let left = self.len.saturating_sub(offset);
        let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        let Some(dst) = buf.get_mut(..want) else {
            return Ok(0);
        };
        if dst.is_empty() {
            return Ok(0);
        }
        let at = self.position.saturating_add(offset);
        if let Some(()) = self.map.as_ref().and_then(|m| m.copy_to(at, dst)) {
            return Ok(dst.len());
        }
        self.handle.read_at(at, dst)
    }

    /// Reads the slice from its start into `buf` ([`Self::read_at`] from 0): the first
    /// `min(buf.len(), len)` bytes, fewer if the file was truncated inside the slice.
    pub fn read_into(&self, buf: &mut [u8]) -> Result<usize> {
        self.read_at(0, buf)
    }

    /// The slice's bytes, all of them: [`SegmentError::SliceTruncated`] if the file now ends
    /// inside the slice.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(|_| {
            SegmentError::io(
                self.path(),
                "read",
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            )
        })?;
        let mut buf = vec![0u8; len];
        let read = self.read_into(&mut buf)?;
        if read < len {
            return Err(SegmentError::SliceTruncated {
                path: self.path().to_path_buf(),
                position: self.position,
                len: self.len,
                read: read as u64,
            });
        }
        Ok(buf)
    }

    /// The open file's descriptor, for `sendfile` from [`Self::position`] for [`Self::len`]
    /// bytes; valid while the slice is held. `None` on storage that is not an OS file system
    /// (the `testkit` crate's simulated one): read the bytes with [`Self::read_into`] there.
    #[cfg(unix)]
    pub fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.handle.as_fd()
    }

    /// [`Self::as_fd`] as a raw descriptor (for `libc::sendfile`); valid while the slice is held.
    #[cfg(unix)]
    pub fn as_raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.as_fd().map(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd))
    }
}
