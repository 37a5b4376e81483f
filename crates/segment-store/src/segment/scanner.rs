//! The segment scanner: a segment file read in chunks ahead of the scan on a helper thread,
//! its CRCs checked as they come.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use record_format::internals::incomplete_batch_error;
use record_format::internals::ChunkChain;
use record_format::internals::NO_TIMESTAMP;
use record_format::internals::{Piece, Regions};
use record_format::{Batches, IterEnd, LogEntry};

use super::scan::{headers_in, ChunkChecks, SegmentScan};
use super::{RecoveryVisitor, SegmentConfig};
use crate::error::{Result, SegmentError};
use crate::index::offset::ENTRY_SIZE as OFFSET_ENTRY_SIZE;
use crate::index::time::ENTRY_SIZE as TIME_ENTRY_SIZE;
use crate::index::{AbortedTxn, FilePosition, OffsetPosition, TimestampOffset};
use crate::io::{FileHandle, ReadBuf};

/// Recovery's scan of one `.log`, fed window by window (so that a reader without a map needs
/// memory for one window, not the segment): framing and CRC-32C of every batch on every core,
/// region by region, while this thread applies the entries strictly in order (see
/// `record_format::scan`): offset range checks, the max timestamp, the offset and time index
/// entries by Kafka's append rule (`index.interval.bytes` from the config), and the visitor with
/// each valid v2 batch (the aborted transactions it pushes are collected). Stops at the first
/// invalid batch, or at an incomplete one at the end of the file.
#[derive(Debug)]
pub struct SegmentScanner {
    path: PathBuf,
    size: u64,
    interval: u64,
    region_bytes: usize,
    max_offset_entries: usize,
    max_time_entries: usize,
    last_time_ts: i64,
    last_index_entry: u64,
    chunk_checks: ChunkChecks,
    scan: SegmentScan,
}

impl SegmentScanner {
    /// A scanner of the `.log` at `path` of `size` bytes, with base offset `base_offset`.
    pub fn new(path: &Path, base_offset: i64, size: u64, config: &SegmentConfig) -> Self {
        let interval = u64::from(config.index_interval_bytes);
        let max_offset_entries =
            usize::try_from(config.max_index_size / OFFSET_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        let max_time_entries =
            usize::try_from(config.max_index_size / TIME_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        // At most one entry per `interval` bytes: reserved once (address space only until the
        // entries are written) instead of grown, which copies them each time it doubles.
        let expected = usize::try_from(size / interval.max(1)).unwrap_or(usize::MAX);
        Self {
            path: path.to_path_buf(),
            size,
            interval,
            region_bytes: config.recovery_region_bytes,
            max_offset_entries,
            max_time_entries,
            last_time_ts: NO_TIMESTAMP,
            last_index_entry: 0,
            chunk_checks: ChunkChecks::default(),
            scan: SegmentScan {
                base_offset,
                size,
                valid_bytes: 0,
                batches: 0,
                last_offset: None,
                max_timestamp: TimestampOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: base_offset,
                },
                offset_entries: Vec::with_capacity(expected.min(max_offset_entries)),
                time_entries: Vec::with_capacity(expected.min(max_time_entries)),
                truncated_at: None,
                aborted_txns: Vec::new(),
            },
        }
    }

    /// Which thread of [`Self::scan_file`] checks the CRCs of the batches whole in a chunk
    /// (default [`ChunkChecks::Balanced`]; the result is the same whichever does).
    #[must_use]
    pub fn chunk_checks(mut self, checks: ChunkChecks) -> Self {
        self.chunk_checks = checks;
        self
    }

    /// Scans `bytes`, the file's bytes from `position` (where the previous window asked to
    /// continue, 0 for the first). Returns where the next window must start — the first byte of
    /// a batch the window ends inside (the same position again: the window must grow), or the
    /// window's end — or `None` when the scan is over (an invalid batch, or the end of the
    /// file).
    pub fn scan<E: From<SegmentError>>(
        &mut self,
        bytes: &[u8],
        position: u64,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<Option<u64>, E> {
        let mut aborted = Vec::new();
        let regions = Regions::new(bytes, position, self.region_bytes);
        let (applied, framing_end) = regions.follow_chain(helper_threads(), |reader| {
            let mut apply = || -> std::result::Result<(), E> {
                while let Piece::Entries(entries) = reader.next_piece() {
                    for entry in entries.iter() {
                        self.apply_entry(entry, visitor, &mut aborted)?;
                    }
                    reader.recycle(entries);
                }
                Ok(())
            };
            (apply(), reader.end())
        });
        applied?;
        Ok(self.window_end(framing_end, bytes, position))
    }

    /// [`Self::scan`] on this thread alone, one entry after the other, without checking again
    /// the CRCs of `checked`: absolute positions of a chain of whole entries whose CRCs another
    /// thread checked in these same bytes ([`ChunkChain`]). They are trusted only once this walk's
    /// own chain arrives exactly at the range's start.
    fn scan_here<E: From<SegmentError>>(
        &mut self,
        bytes: &[u8],
        position: u64,
        visitor: &mut RecoveryVisitor<'_, E>,
        checked: Option<std::ops::Range<u64>>,
    ) -> std::result::Result<Option<u64>, E> {
        let mut aborted = Vec::new();
        let mut it = Batches::new(bytes, position).validate_crc(true);
        let mut trusted = false;
        loop {
            if let Some(c) = &checked {
                let at = it.valid_prefix_end();
                trusted |= at == c.start;
                it.set_validate_crc(!(trusted && at < c.end));
            }
            match it.next() {
                Some(Ok(entry)) => self.apply_entry(&entry, visitor, &mut aborted)?,
                Some(Err(_)) | None => break,
            }
        }
        Ok(self.window_end(it.stopped_at().cloned(), bytes, position))
    }

    /// Applies one valid entry, in order: its offset range, the max timestamp, the index
    /// entries by the append rule, the counts, and the visitor (v2 batches).
    fn apply_entry<E: From<SegmentError>>(
        &mut self,
        entry: &LogEntry<'_>,
        visitor: &mut RecoveryVisitor<'_, E>,
        aborted: &mut Vec<AbortedTxn>,
    ) -> std::result::Result<(), E> {
        let base_offset = self.scan.base_offset;
        let last = entry.last_offset();
        let fits = last
            .checked_sub(base_offset)
            .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r));
        if !fits {
            return Err(SegmentError::OffsetOverflow {
                path: self.path.clone(),
                offset: last,
                base_offset,
            }
            .into());
        }
        let batch_max_ts = match entry {
            LogEntry::V2(b) => b.max_timestamp(),
            LogEntry::Legacy(_) => headers_in(entry.as_bytes(), entry.position())
                .next()
                .map_or(NO_TIMESTAMP, |h| h.max_timestamp),
        };
        let s = &mut self.scan;
        if batch_max_ts > s.max_timestamp.timestamp {
            s.max_timestamp = TimestampOffset {
                timestamp: batch_max_ts,
                offset: last,
            };
        }
        if s.valid_bytes - self.last_index_entry > self.interval {
            self.index_entries(last)?;
        }
        let s = &mut self.scan;
        s.valid_bytes += entry.size_in_bytes() as u64;
        s.batches += 1;
        s.last_offset = Some(last);
        if let LogEntry::V2(batch) = entry {
            aborted.clear();
            visitor(batch, aborted)?;
            s.aborted_txns.append(aborted);
        }
        Ok(())
    }

    /// Adds the offset-index entry (and the time-index entry if the max timestamp grew) at the
    /// current valid end for a batch ending at `last`, with `OffsetIndex::append`'s and
    /// `TimeIndex::maybe_append`'s checks, so that the plan fails where the install would.
    fn index_entries(&mut self, last: i64) -> Result<()> {
        let s = &mut self.scan;
        if s.offset_entries.len() >= self.max_offset_entries {
            return Err(SegmentError::IndexFull {
                path: self.path.with_extension("index"),
                entries: s.offset_entries.len(),
            });
        }
        if let Some(prev) = s.offset_entries.last() {
            if last <= prev.offset {
                return Err(SegmentError::InvalidOffset {
                    path: self.path.with_extension("index"),
                    offset: last,
                    last_offset: prev.offset,
                });
            }
        }
        s.offset_entries.push(OffsetPosition {
            offset: last,
            position: FilePosition(s.valid_bytes as u32),
        });
        // TimeIndex::maybe_append: only a larger timestamp is written.
        if s.max_timestamp.timestamp > self.last_time_ts {
            if s.time_entries.len() + 1 >= self.max_time_entries {
                return Err(SegmentError::IndexFull {
                    path: self.path.with_extension("timeindex"),
                    entries: s.time_entries.len(),
                });
            }
            s.time_entries.push(s.max_timestamp);
            self.last_time_ts = s.max_timestamp.timestamp;
        }
        self.last_index_entry = s.valid_bytes;
        Ok(())
    }

    /// Where the next window starts after the window `bytes` read at `position` ended with
    /// `framing_end` (see [`Self::scan`]); records where and why the valid prefix ends.
    fn window_end(
        &mut self,
        framing_end: Option<IterEnd>,
        bytes: &[u8],
        position: u64,
    ) -> Option<u64> {
        let window_end = position + bytes.len() as u64;
        let at_file_end = window_end >= self.size;
        let s = &mut self.scan;
        match framing_end {
            Some(IterEnd::Error(e)) => {
                s.truncated_at = Some((e.position, e));
                None
            }
            Some(IterEnd::IncompleteTrailing { position: at, .. }) if !at_file_end => Some(at),
            Some(IterEnd::IncompleteTrailing {
                position: at,
                bytes: n,
            }) => {
                let rest = bytes
                    .get(usize::try_from(at - position).unwrap_or(usize::MAX)..)
                    .unwrap_or_default();
                s.truncated_at = Some((at, incomplete_batch_error(rest, at, n)));
                None
            }
            _ if at_file_end => None,
            _ => Some(window_end),
        }
    }

    /// The whole scan of the file behind `handle` (of the size given to [`Self::new`]), read
    /// through the file handle instead of a map. Safe without the directory lock (a map of a file
    /// a broker truncates raises `SIGBUS` at the next access), and faster than a fresh map where
    /// the page cache holds the file in small pages, as a writer leaves it: there each page of a
    /// map costs a fault and its unmapping more than copying it (docs/benchmarks.md).
    ///
    /// The file is read in chunks of [`READ_CHUNK_BYTES`] by a helper thread, a few chunks
    /// ahead of this thread, which frames and applies each chunk while it is still in the cache
    /// the read left it in (a copy into a buffer larger than the CPU's caches costs as much again
    /// as the copy). The CRCs of the batches that lie whole in a chunk are checked by the helper
    /// when this thread has another chunk to work on ([`ChunkChain`]), else here; every other
    /// CRC is checked here. A batch a chunk ends inside is carried into the next chunk's
    /// headroom, or — longer than that — gathered until it is whole. Memory: a few chunks and the
    /// longest batch.
    pub fn scan_file<E: From<SegmentError>>(
        &mut self,
        handle: &dyn FileHandle,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        if helper_threads() == 0 || self.size <= READ_CHUNK_BYTES as u64 {
            return self.scan_file_here(handle, visitor);
        }
        let (size, checks) = (self.size, self.chunk_checks);
        let (free_tx, free_rx) = mpsc::sync_channel::<ReadBuf>(READ_AHEAD_CHUNKS);
        let (full_tx, full_rx) = mpsc::sync_channel::<Result<ReadChunk>>(READ_AHEAD_CHUNKS);
        // Chunks sent and not yet taken by the scan.
        let queued = &AtomicUsize::new(0);
        for _ in 0..READ_AHEAD_CHUNKS {
            // Cannot fail: the channel holds as many buffers and its receiver is alive.
            let _ = free_tx.send(ReadBuf::zeroed(CHUNK_HEADROOM + READ_CHUNK_BYTES));
        }
        std::thread::scope(|scope| {
            let reader = std::thread::Builder::new()
                .name("seglog-read".into())
                .spawn_scoped(scope, move || {
                    let (mut at, mut chain) = (0u64, ChunkChain::new());
                    while at < size {
                        // The scan is over (or failed) once it dropped its ends of the channels.
                        let Ok(mut buf) = recv_spinning(&free_rx) else {
                            return;
                        };
                        let n = (size - at).min(READ_CHUNK_BYTES as u64);
                        let end = CHUNK_HEADROOM + n as usize;
                        let read = buf
                            .as_mut_slice()
                            .get_mut(CHUNK_HEADROOM..end)
                            .map_or(Ok(()), |b| handle.read_exact_at(at, b));
                        let chunk = read.map(|()| {
                            let data = buf.as_slice().get(CHUNK_HEADROOM..end).unwrap_or_default();
                            // Balanced: the CRCs are checked here only while the scan has a
                            // chunk to work on; a scan waiting for this one gets it at once and
                            // checks them itself.
                            let here = match checks {
                                ChunkChecks::Balanced => queued.load(Ordering::Acquire) > 0,
                                ChunkChecks::Reader => true,
                                ChunkChecks::Scanner => false,
                            };
                            let checked = if here {
                                chain.check(at, data)
                            } else {
                                chain.follow(at, data);
                                None
                            };
                            ReadChunk { at, buf, checked }
                        });
                        queued.fetch_add(1, Ordering::AcqRel);
                        if full_tx.send(chunk).is_err() {
                            return;
                        }
                        at += n;
                    }
                });
            if reader.is_err() {
                drop((free_tx, full_rx));
                return self.scan_file_here(handle, visitor);
            }
            let scanned = self.scan_chunks(&full_rx, &free_tx, queued, visitor);
            // Ends the reader: it stops at its next send or wait for a buffer.
            drop((free_tx, full_rx));
            scanned
        })
    }

    /// The consuming side of [`Self::scan_file`]: the chunks in file order.
    fn scan_chunks<E: From<SegmentError>>(
        &mut self,
        full: &mpsc::Receiver<Result<ReadChunk>>,
        free: &mpsc::SyncSender<ReadBuf>,
        queued: &AtomicUsize,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        // The bytes from `position` up to the next chunk, not yet scanned.
        let (mut position, mut carry) = (0u64, Vec::new());
        // Ends when the reader has sent the last chunk: the scan of that one returns `None`.
        while let Ok(read) = recv_spinning(full) {
            queued.fetch_sub(1, Ordering::AcqRel);
            let ReadChunk {
                at,
                mut buf,
                checked,
            } = read?;
            let n = usize::try_from((self.size - at).min(READ_CHUNK_BYTES as u64))
                .unwrap_or(READ_CHUNK_BYTES);
            let next = if carry.len() <= CHUNK_HEADROOM {
                let from = CHUNK_HEADROOM - carry.len();
                if let Some(head) = buf.as_mut_slice().get_mut(from..CHUNK_HEADROOM) {
                    head.copy_from_slice(&carry);
                }
                let bytes = buf
                    .as_slice()
                    .get(from..CHUNK_HEADROOM + n)
                    .unwrap_or_default();
                let next = self.scan_here(bytes, position, visitor, checked)?;
                carry.clear();
                if let Some(next) = next {
                    let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                    carry.extend_from_slice(bytes.get(rest..).unwrap_or_default());
                }
                next
            } else {
                carry.extend_from_slice(
                    buf.as_slice()
                        .get(CHUNK_HEADROOM..CHUNK_HEADROOM + n)
                        .unwrap_or_default(),
                );
                // Other bytes than the ones the reader checked: every CRC is checked here.
                let next = self.scan_here(&carry, position, visitor, None)?;
                if let Some(next) = next {
                    let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                    carry.drain(..rest.min(carry.len()));
                }
                next
            };
            match next {
                Some(next) => position = next,
                None => return Ok(()),
            }
            // The reader may be done already: then the buffer is simply dropped.
            let _ = free.send(buf);
        }
        Ok(())
    }

    /// [`Self::scan_file`] on this thread alone: one window of [`SCAN_WINDOW_BYTES`] at a time
    /// (grown for a longer batch), each checked on the helper threads.
    fn scan_file_here<E: From<SegmentError>>(
        &mut self,
        handle: &dyn FileHandle,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        let size = self.size;
        let mut buf = ReadBuf::default();
        let (mut position, mut window) = (0u64, SCAN_WINDOW_BYTES);
        loop {
            let len = window.min(size.saturating_sub(position));
            buf.set_len(usize::try_from(len).unwrap_or(usize::MAX));
            handle.read_exact_at(position, buf.as_mut_slice())?;
            match self.scan(buf.as_slice(), position, visitor)? {
                None => return Ok(()),
                Some(next) if next == position => window = window.saturating_mul(2),
                Some(next) => {
                    position = next;
                    window = SCAN_WINDOW_BYTES;
                }
            }
        }
    }

    /// The scan so far (the whole scan once [`Self::scan`] returned `None`).
    pub fn finish(self) -> SegmentScan {
        self.scan
    }
}

/// A chunk [`SegmentScanner::scan_file`]'s reader sends: the file's bytes from `at` in `buf`
/// after [`CHUNK_HEADROOM`], and the entries in them whose CRCs it checked.
struct ReadChunk {
    at: u64,
    buf: ReadBuf,
    checked: Option<std::ops::Range<u64>>,
}

/// Bytes [`SegmentScanner::scan_file`] reads at a time: small enough that a chunk is still in
/// the core's cache when it is checked.
pub const READ_CHUNK_BYTES: usize = 1 << 20;

/// Room before each chunk for the end of a batch the previous chunk ended inside: a whole number
/// of pages, so that the chunk the reader fills starts on one (see [`ReadBuf`]).
const CHUNK_HEADROOM: usize = 64 << 10;
const _: () = assert!(CHUNK_HEADROOM.is_multiple_of(ReadBuf::ALIGN));

/// Chunks read ahead of the scan.
const READ_AHEAD_CHUNKS: usize = 4;

/// The window of [`SegmentScanner::scan_file`] on one thread: read, scanned, reused.
pub const SCAN_WINDOW_BYTES: u64 = 32 << 20;

/// How long a thread of [`SegmentScanner::scan_file`] spins waiting for the other before it
/// parks: a little more than the time a chunk takes to check, so that a thread waiting for the
/// next chunk is rarely parked (waking a parked thread costs the waker a system call and both
/// cores a context switch, each chunk).
const SPIN_BEFORE_PARKING: std::time::Duration = std::time::Duration::from_micros(200);

/// The next item of `rx`: spinning for at most [`SPIN_BEFORE_PARKING`], then parked.
fn recv_spinning<T>(rx: &mpsc::Receiver<T>) -> std::result::Result<T, mpsc::RecvError> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(item) => return Ok(item),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN_BEFORE_PARKING => {
                std::hint::spin_loop();
            }
            Err(mpsc::TryRecvError::Empty) => return rx.recv(),
        }
    }
}

/// Helper threads for recovery's CRC checks: every other core, at most three.
fn helper_threads() -> usize {
    // Asked once per process: `available_parallelism` reads the cgroup files each time.
    static HELPERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *HELPERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .min(3)
    })
}
