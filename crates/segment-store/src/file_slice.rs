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

use record_format::internals::RECORD_BATCH_OVERHEAD;

use crate::error::{Result, SegmentError};
use crate::file_records::{parse_header, SharedMap};
use crate::io::FileHandle;

/// How many bytes [`FileSlice::next_offset`] reads at once: the batches an offset-index entry
/// before the slice's end leads to (two of Kafka's default 4 KiB intervals) in one read.
const NEXT_OFFSET_WINDOW: usize = 16 << 10;

/// A range of a segment's `.log`, kept readable while it is held (see the module docs).
#[derive(Clone)]
pub struct FileSlice {
    handle: Arc<dyn FileHandle>,
    /// The sealed segment's map, while the segment keeps it.
    map: Option<Arc<SharedMap>>,
    position: u64,
    len: u64,
    /// Where [`Self::next_offset`] starts its walk of batch headers: a batch start, at or after
    /// `position`, at or before the start of the slice's last whole batch.
    pub(crate) walk_from: u64,
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
            walk_from: position,
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

    /// One past the last offset of the last whole batch in the slice (the offset a reader of
    /// the slice fetches next), `None` if it holds no whole batch. Reads only the headers of
    /// the slice's last batches: a slice a fetch hands out walks from the offset-index entry
    /// before the entry below its end (one read of a few KiB), not the whole slice. Stops at a
    /// header it cannot parse, as a reader of the bytes stops at a batch it cannot read.
    /// [`SegmentError::SliceTruncated`] if the file now ends before the slice's last whole
    /// batch (a truncation after the slice was taken).
    pub fn next_offset(&self) -> Result<Option<i64>> {
        let end = self.position.saturating_add(self.len);
        let mut at = self.walk_from.clamp(self.position, end);
        let mut next = None;
        let mut buf =
            vec![0u8; NEXT_OFFSET_WINDOW.min(usize::try_from(end - at).unwrap_or(usize::MAX))];
        loop {
            let left = end - at;
            let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
            let Some(window) = buf.get_mut(..want) else {
                return Ok(next);
            };
            if window.is_empty() {
                return Ok(next);
            }
            let read = self.read_at(at - self.position, window)?;
            if read < window.len() {
                return Err(SegmentError::SliceTruncated {
                    path: self.path().to_path_buf(),
                    position: self.position,
                    len: self.len,
                    read: at - self.position + read as u64,
                });
            }
            let mut p = 0usize;
            loop {
                let position = at + p as u64;
                let head = window.get(p..).unwrap_or_default();
                if head.len() < RECORD_BATCH_OVERHEAD && position + (head.len() as u64) < end {
                    // A header cut by the window: read again from it.
                    break;
                }
                let head = head.get(..RECORD_BATCH_OVERHEAD).unwrap_or(head);
                match parse_header(head, position, end - position) {
                    Ok(Some(h)) => {
                        next = Some(h.next_offset());
                        p = usize::try_from(h.end() - at).unwrap_or(usize::MAX);
                        if p >= window.len() {
                            break;
                        }
                    }
                    _ => return Ok(next),
                }
            }
            at += p as u64;
        }
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

#[cfg(test)]
mod tests {
    use record_format::{Batches, RecordBatchBuilder};

    use super::*;
    use crate::file_records::FileRecords;
    use crate::io::{OpenMode, StdFs};

    /// Batches whose sizes vary (1 to 40 records of 100 bytes), so that over a 16 KiB window
    /// some header is cut by the window's end and some batch spans windows.
    fn log_bytes() -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut offset = 0i64;
        for i in 0..120i64 {
            let n = 1 + (i * 7) % 40;
            let mut b = RecordBatchBuilder::new(offset);
            for r in 0..n {
                b.append(r, None, Some(&[i as u8; 100]), &[]).unwrap();
            }
            bytes.extend_from_slice(&b.build());
            offset += n + i % 3; // gaps between batches, as compaction leaves
        }
        bytes
    }

    /// The oracle: one past the last offset of the last whole batch, by record-format's parser.
    fn parsed_next(bytes: &[u8]) -> Option<i64> {
        Batches::new(bytes, 0)
            .map_while(std::result::Result::ok)
            .last()
            .map(|b| b.last_offset() + 1)
    }

    #[test]
    fn the_next_offset_is_past_the_last_whole_batch_of_any_slice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let bytes = log_bytes();
        assert!(bytes.len() > 3 * NEXT_OFFSET_WINDOW);
        std::fs::write(&path, &bytes).unwrap();
        let records = FileRecords::open(&StdFs, &path, OpenMode::Read).unwrap();
        let starts: Vec<u64> = Batches::new(&bytes, 0)
            .map(|b| b.unwrap().position())
            .collect();
        let mut checked = 0;
        for &start in starts.iter().step_by(17) {
            for len in (0..bytes.len() as u64 - start).step_by(997) {
                let s = start as usize;
                let want = parsed_next(&bytes[s..s + len as usize]);
                // Walking from the slice's start and from a batch start inside it.
                let whole = records.slice(start, len as usize);
                assert_eq!(whole.next_offset().unwrap(), want, "{start} +{len}");
                let last_whole = Batches::new(&bytes[s..s + len as usize], 0)
                    .map_while(std::result::Result::ok)
                    .last()
                    .map(|b| start + b.position());
                let inner = starts.iter().copied().filter(|&p| p > start);
                for from in inner
                    .filter(|&p| last_whole.is_some_and(|l| p <= l))
                    .rev()
                    .take(2)
                {
                    let walked = records.slice_walking_from(start, len as usize, from);
                    assert_eq!(
                        walked.next_offset().unwrap(),
                        want,
                        "{start} +{len} from {from}"
                    );
                }
                checked += 1;
            }
        }
        assert!(checked > 500, "{checked}");
        // The whole file walked from each of the first batches: the window's ends fall at every
        // place in a batch, a header's first bytes among them.
        let all = records.slice(0, bytes.len());
        for &from in &starts[..60] {
            let walked = records.slice_walking_from(0, bytes.len(), from);
            assert_eq!(
                walked.next_offset().unwrap(),
                parsed_next(&bytes),
                "from {from}"
            );
        }
        assert_eq!(all.next_offset().unwrap(), parsed_next(&bytes));
    }

    #[test]
    fn a_slice_cut_by_a_truncation_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let bytes = log_bytes();
        std::fs::write(&path, &bytes).unwrap();
        let records = FileRecords::open(&StdFs, &path, OpenMode::Read).unwrap();
        let slice = records.slice(0, bytes.len());
        assert_eq!(slice.next_offset().unwrap(), parsed_next(&bytes));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(bytes.len() as u64 / 2)
            .unwrap();
        assert!(matches!(
            slice.next_offset(),
            Err(SegmentError::SliceTruncated { .. })
        ));
    }
}
