//! The append-only `.log` of one segment (Kafka's `FileRecords`).
//!
//! Every write (append, truncate, sync) goes through a [`FileHandle`] from a [`Storage`], so crash
//! tests can run it on the `testkit` crate's `SimulatedFs`.
//!
//! **Reads.** A sealed segment (one that will not be appended to again, see
//! [`FileRecords::map_read_only`]) on a real file system is memory-mapped read-only and reads are
//! zero-copy `&[u8]` slices of the map ([`Cow::Borrowed`]). The active segment is read with
//! `read_at` into a fresh buffer ([`Cow::Owned`]): mapping a file that grows would need remapping
//! on every append, and a copy of a fetch-sized range is cheap next to the append itself. A map
//! is dropped before any call that changes the file (append, truncate), which the borrow checker
//! enforces: reads borrow `&self`, mutations take `&mut self` (invariant 3 of
//! [`MmapFile`]).
//!
//! **Walking batches.** [`FileRecords::headers_from`] follows Kafka's `FileLogInputStream.nextBatch`
//! (see `record_format::batches`) but reads only each batch's header, so searching from an index
//! entry costs a few small reads, not a read of the rest of the file.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use record_format::internals::{
    HEADER_SIZE_UP_TO_MAGIC, LAST_OFFSET_DELTA_OFFSET, LEGACY_V1_TIMESTAMP_OFFSET, LOG_OVERHEAD,
    MAGIC_OFFSET, MAGIC_V1, MAGIC_V2, MAX_TIMESTAMP_OFFSET, NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET, RECORD_BATCH_OVERHEAD, RECORD_OVERHEAD_V0, SIZE_OFFSET,
};
use record_format::{BatchIterator, Batches, DecodeLimits, FormatError, FormatErrorKind, LogEntry};

use crate::error::{Result, SegmentError};
use crate::file_slice::FileSlice;
use crate::index::TimestampOffset;
use crate::io::{FileHandle, OpenMode, ReadBuf, Storage};
use crate::lock::DirLock;
use crate::mmap::{GuardedMap, MmapFile};
use record_format::internals::{be_i32_at as be_i32, be_i64_at as be_i64};

/// The header fields of one batch in a `.log`, as read by `FileRecords::headers_from`.
pub use record_format::BatchHeader;

/// Where a batch containing an offset starts (Kafka `LogOffsetPosition`; its `offset` is
/// [`BatchHeader::last_offset`]).
pub type LogOffsetPosition = BatchHeader;

/// A record found by timestamp (Kafka `FileRecords.TimestampAndOffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    /// The record's timestamp.
    pub timestamp: i64,
    /// The record's offset.
    pub offset: i64,
    /// The batch's partition leader epoch, if it has one (`>= 0`).
    pub leader_epoch: Option<i32>,
}

/// Parses a header from `head` (at least the first 17 bytes of the batch, up to 61), given the
/// bytes available in the file from `position` (`remaining`). `Ok(None)` means "stop": an
/// incomplete trailing batch, as in Kafka's `nextBatch`.
pub(crate) fn parse_header(
    head: &[u8],
    position: u64,
    remaining: u64,
) -> Result<Option<BatchHeader>, FormatError> {
    if remaining <= HEADER_SIZE_UP_TO_MAGIC as u64 || head.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Ok(None);
    }
    let size = be_i32(head, SIZE_OFFSET);
    if size < RECORD_OVERHEAD_V0 as i32 {
        return Err(FormatError::new(
            FormatErrorKind::BadLength(i64::from(size)),
            position,
        ));
    }
    let total = LOG_OVERHEAD as u64 + size as u64;
    if total > remaining {
        return Ok(None);
    }
    let magic = head.get(MAGIC_OFFSET).map_or(-1, |&b| b as i8);
    let offset = be_i64(head, 0);
    let header = match magic {
        MAGIC_V2 => {
            if total < RECORD_BATCH_OVERHEAD as u64 || head.len() < RECORD_BATCH_OVERHEAD {
                return Err(FormatError::new(
                    FormatErrorKind::BadLength(i64::from(size)),
                    position,
                ));
            }
            BatchHeader {
                position,
                size: total as u32,
                magic,
                base_offset: offset,
                last_offset: offset + i64::from(be_i32(head, LAST_OFFSET_DELTA_OFFSET)),
                max_timestamp: be_i64(head, MAX_TIMESTAMP_OFFSET),
                partition_leader_epoch: be_i32(head, PARTITION_LEADER_EPOCH_OFFSET),
            }
        }
        0..=MAGIC_V1 => BatchHeader {
            position,
            size: total as u32,
            magic,
            base_offset: offset,
            last_offset: offset,
            max_timestamp: if magic == MAGIC_V1 && head.len() >= LEGACY_V1_TIMESTAMP_OFFSET + 8 {
                be_i64(head, LEGACY_V1_TIMESTAMP_OFFSET)
            } else {
                NO_TIMESTAMP
            },
            partition_leader_epoch: -1,
        },
        _ => {
            return Err(FormatError::new(FormatErrorKind::BadMagic(magic), position));
        }
    };
    Ok(Some(header))
}

/// Length of the longest prefix of `bytes` made of whole batches (by the 12-byte framing only).
pub(crate) fn whole_batches_len(bytes: &[u8]) -> usize {
    let mut pos = 0usize;
    loop {
        let Some(rest) = bytes.get(pos..) else {
            return pos;
        };
        if rest.len() < LOG_OVERHEAD {
            return pos;
        }
        let size = be_i32(rest, SIZE_OFFSET);
        if size < RECORD_OVERHEAD_V0 as i32 {
            return pos;
        }
        let total = LOG_OVERHEAD + size as usize;
        if total > rest.len() {
            return pos;
        }
        pos += total;
    }
}

/// The bytes of a `.log` from some position on, borrowed from the map or read into a buffer.
#[derive(Debug)]
pub struct FileBatches<'a> {
    bytes: Cow<'a, [u8]>,
    position: u64,
}

impl FileBatches<'_> {
    /// An iterator over the batches (record-format's, positions absolute in the file).
    pub fn iter(&self) -> BatchIterator<'_> {
        Batches::new(&self.bytes, self.position)
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Position of the first byte in the file.
    pub fn position(&self) -> u64 {
        self.position
    }
}

/// Iterator over batch headers; see [`FileRecords::headers_from`].
#[derive(Debug)]
pub struct HeaderIter<'a> {
    records: &'a FileRecords,
    position: u64,
    end: u64,
    done: bool,
    /// Where the file is not mapped: bytes read ahead from `ahead_start` (one `pread` of up to
    /// [`HEADER_READ_AHEAD`] bytes serves the headers of the batches it holds).
    ahead: Vec<u8>,
    ahead_start: u64,
}

/// How far a [`HeaderIter`] over a file that is not mapped reads at once: an offset index entry
/// every 4 KiB (Kafka's `index.interval.bytes`) puts most walks within one read.
pub const HEADER_READ_AHEAD: usize = 4 << 10;

impl HeaderIter<'_> {
    /// The header bytes at the iterator's position: from the map, or from the bytes read ahead
    /// (read again from there when they do not hold them).
    fn head(&mut self, remaining: u64) -> Result<&[u8]> {
        if let Some(s) = self.records.map_slice(self.position, RECORD_BATCH_OVERHEAD) {
            return Ok(s);
        }
        let want = (RECORD_BATCH_OVERHEAD as u64).min(remaining) as usize;
        let held = self
            .position
            .checked_sub(self.ahead_start)
            .and_then(|at| usize::try_from(at).ok())
            .filter(|at| at.saturating_add(want) <= self.ahead.len());
        let at = match held {
            Some(at) => at,
            None if self.records.gate().is_some_and(|g| {
                self.ahead.resize(want, 0);
                let dst = self.ahead.get_mut(..want).unwrap_or_default();
                g.copy_header_to(self.position, dst).is_some()
            }) =>
            {
                // Out of the map: this header's bytes alone.
                self.ahead_start = self.position;
                0
            }
            None => {
                let len = (HEADER_READ_AHEAD as u64).min(remaining) as usize;
                self.ahead.resize(len, 0);
                let n = self
                    .records
                    .handle
                    .read_at(self.position, &mut self.ahead)?;
                self.ahead.truncate(n);
                self.ahead_start = self.position;
                if n < want {
                    // The file ends inside the header: `read_exact_at` reports it (or reads it
                    // whole, had the file grown since).
                    self.ahead.resize(want, 0);
                    let dst = self.ahead.get_mut(..want).unwrap_or_default();
                    self.records.handle.read_exact_at(self.position, dst)?;
                }
                0
            }
        };
        Ok(self.ahead.get(at..at + want).unwrap_or_default())
    }
}

impl Iterator for HeaderIter<'_> {
    type Item = Result<BatchHeader>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let remaining = self.end.saturating_sub(self.position);
        let position = self.position;
        let head = match self.head(remaining) {
            Ok(head) => head,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        match parse_header(head, position, remaining) {
            Ok(Some(h)) => {
                self.position = h.end();
                Some(Ok(h))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(SegmentError::Format {
                    path: self.records.path.clone(),
                    error,
                }))
            }
        }
    }
}

/// The whole content of a file, read without changing anything (a recovery plan's view of a
/// `.log`): mapped read-only when the caller holds the directory's lock and the storage is a real
/// file system, read into memory through the storage otherwise.
#[derive(Debug)]
pub enum ReadOnlyBytes {
    /// A read-only map (see [`MmapFile`]'s invariants).
    Mapped(MmapFile),
    /// A read-only map without the lock ([`GuardedMap`]).
    Guarded(GuardedMap),
    /// Bytes held in memory, not read from a file (e.g. an empty stand-in for a missing one).
    Owned(Vec<u8>),
    /// A copy of the file, in a page-aligned buffer ([`ReadOnlyBytes::read_from`]).
    Read(ReadBuf),
}

/// Files smaller than this are read rather than mapped by [`ReadOnlyBytes::open`]: for a small
/// file the map (its file lock, `mmap`, the page faults, and the `munmap` that interrupts every
/// other thread of the process to flush its TLB) costs more than copying the bytes.
pub const MAP_MIN_BYTES: u64 = 1 << 20;

impl ReadOnlyBytes {
    /// The first `len` bytes of the file behind `handle` (fewer if it is shorter), read into the
    /// buffer this thread's last small read released: a fresh one of a small file's size is an
    /// anonymous map whose `munmap` would interrupt the other threads.
    pub fn read_from(handle: &dyn FileHandle, len: u64) -> Result<Self> {
        let mut buf = SPARE
            .try_with(|s| s.borrow_mut().take())
            .ok()
            .flatten()
            .unwrap_or_default();
        buf.set_len(usize::try_from(len).unwrap_or(0));
        let n = handle.read_at(0, buf.as_mut_slice())?;
        buf.truncate(n);
        Ok(ReadOnlyBytes::Read(buf))
    }

    /// Maps (with `lock`, if at least [`MAP_MIN_BYTES`]) or reads `path`
    /// ([`Self::read_from`]).
    pub fn open(storage: &dyn Storage, path: &Path, lock: Option<&DirLock>) -> Result<Self> {
        let handle = storage.open(path, OpenMode::Read)?;
        let len = handle.len()?;
        Self::from_handle(storage, path, handle, len, lock)
    }

    /// [`Self::open`] with `path` already open as `handle`, `len` bytes long.
    pub fn from_handle(
        storage: &dyn Storage,
        path: &Path,
        handle: Box<dyn FileHandle>,
        len: u64,
        lock: Option<&DirLock>,
    ) -> Result<Self> {
        match Self::map_lock(storage, lock, len) {
            Some(lock) => {
                drop(handle);
                Ok(ReadOnlyBytes::Mapped(MmapFile::open(lock, path, false)?))
            }
            None => Self::read_from(handle.as_ref(), len),
        }
    }

    /// A [`GuardedMap`] of the file `path` of `len` bytes, for a reader without the directory
    /// lock: `None` where [`Self::open`] would read it (a file under [`MAP_MIN_BYTES`], storage
    /// that cannot map) or no guarded map can be made ([`GuardedMap::open`]).
    pub fn map_guarded(storage: &dyn Storage, path: &Path, len: u64) -> Result<Option<Self>> {
        if !storage.supports_mmap() || len < MAP_MIN_BYTES {
            return Ok(None);
        }
        Ok(GuardedMap::open(path, len)?.map(ReadOnlyBytes::Guarded))
    }

    /// Lets go of the memory that `[from, to)` of a guarded map holds ([`GuardedMap::release`]);
    /// nothing for the other kinds.
    pub fn release(&self, from: usize, to: usize) {
        if let ReadOnlyBytes::Guarded(m) = self {
            m.release(from, to);
        }
    }

    /// Whether these bytes came from a guarded map whose file was truncated while it was read
    /// ([`GuardedMap::was_truncated`]): they are then not the file's.
    pub fn was_truncated(&self) -> bool {
        matches!(self, ReadOnlyBytes::Guarded(m) if m.was_truncated())
    }

    /// `lock` if [`Self::open`] maps a file of `len` bytes under it (`storage` can map, and the
    /// file has at least [`MAP_MIN_BYTES`]), `None` if it reads it.
    pub fn map_lock<'l>(
        storage: &dyn Storage,
        lock: Option<&'l DirLock>,
        len: u64,
    ) -> Option<&'l DirLock> {
        lock.filter(|_| storage.supports_mmap() && len >= MAP_MIN_BYTES)
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            ReadOnlyBytes::Mapped(m) => m.as_slice(),
            ReadOnlyBytes::Guarded(m) => m.as_slice(),
            ReadOnlyBytes::Owned(v) => v,
            ReadOnlyBytes::Read(b) => b.as_slice(),
        }
    }
}

thread_local! {
    /// One buffer of a dropped small [`ReadOnlyBytes`], reused by the thread's next small read.
    static SPARE: std::cell::RefCell<Option<ReadBuf>> = const { std::cell::RefCell::new(None) };
}

impl Drop for ReadOnlyBytes {
    fn drop(&mut self) {
        // The larger of the spare and this buffer is kept (a tiny index read must not replace
        // the buffer of a small `.log`), up to a small file's size.
        if let ReadOnlyBytes::Read(v) = self {
            if v.capacity() <= MAP_MIN_BYTES as usize + ReadBuf::ALIGN {
                let v = std::mem::take(v);
                let _ = SPARE.try_with(|s| {
                    let mut spare = s.borrow_mut();
                    if spare.as_ref().is_none_or(|o| o.capacity() < v.capacity()) {
                        *spare = Some(v);
                    }
                });
            }
        }
    }
}

/// How many batches past the one just read [`prefetch_headers`] asks for, at most.
const HEADERS_AHEAD: usize = 3;

/// Asks the CPU for the lines holding the headers of the [`HEADERS_AHEAD`] batches after the
/// one whose header `header` is (at `start` in `bytes`), as if they were its size; not past
/// [`HEADER_READ_AHEAD`] ahead (Kafka's `index.interval.bytes`: a walk from an offset-index
/// entry rarely goes further). A hint: a wrong guess costs a line, nothing is read. A no-op
/// off x86_64.
fn prefetch_headers(bytes: &[u8], start: usize, header: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let length = be_i32(header, SIZE_OFFSET);
        let Ok(size) = usize::try_from(i64::from(length) + LOG_OVERHEAD as i64) else {
            return;
        };
        if size < RECORD_BATCH_OVERHEAD {
            return;
        }
        let mut at = start;
        for _ in 0..HEADERS_AHEAD {
            at = at.saturating_add(size);
            if at - start > HEADER_READ_AHEAD {
                break;
            }
            prefetch_lines(bytes, at);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, start, header);
}

/// Asks the CPU for the lines of a batch header at `start` in `bytes`: its first and last
/// bytes, as it may straddle two lines. A hint; a no-op off x86_64 or outside `bytes`.
fn prefetch_lines(bytes: &[u8], start: usize) {
    #[cfg(target_arch = "x86_64")]
    for byte in [start, start.saturating_add(RECORD_BATCH_OVERHEAD - 1)] {
        if let Some(b) = bytes.get(byte) {
            safe_arch::prefetch_t0(b);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, start);
}

/// A `.log`'s read-only map, shared by its [`FileRecords`] and the [`FileSlice`]s it hands out (a
/// sealed segment's map, or the active segment's map of its first bytes, which readers of the
/// published tail also find batch headers through), so a slice is read by a copy out of the
/// map, as a plain fetch is, instead of a `pread`.
///
/// A slice may be held long after the segment changed, and the map must never be read past a
/// length the file no longer has (`SIGBUS`). So the segment **retires** the map before anything
/// changes the file's length or the segment gives the map up (an append, a truncation, an unmap,
/// closing the segment): from then on a slice reads through the file handle (a truncation is a
/// short read). The gate between the two is a pair of atomics, never a lock: a copy announces
/// itself in `copies`, then checks `retired`; a retirement sets `retired`, then waits until
/// `copies` is zero. A sequentially consistent fence on each side, between its store and its
/// load, makes at least one of them see the other: either the copy sees the map retired and
/// does not read it, or the retirement sees the copy in flight and waits for it to end (at most
/// one copy of a slice's length; the copy's release of `copies` orders its reads before the
/// truncation). A reader never waits; only the segment's writer does, and only for copies
/// already in flight.
/// `crates/segment-store/tests/slice_map_model.rs` checks this protocol with `loom`.
#[derive(Debug)]
pub(crate) struct SharedMap {
    /// The map (the segment holds it too); taken out by the retirement once no copy is in
    /// flight, so that it is unmapped, its file lock released, when the segment drops it.
    map: ArcSwapOption<MmapFile>,
    /// Copies out of the map in flight.
    copies: AtomicUsize,
    /// Set once the segment gave the map up: no copy starts after it.
    retired: AtomicBool,
}

impl SharedMap {
    fn new(map: Arc<MmapFile>) -> SharedMap {
        SharedMap {
            map: ArcSwapOption::new(Some(map)),
            copies: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
        }
    }

    /// Copies the bytes at `position` into `dst`, all of them or none: `None` when the map was
    /// retired or does not hold the whole range (the caller reads through the handle).
    pub(crate) fn copy_to(&self, position: u64, dst: &mut [u8]) -> Option<()> {
        self.announced(|map| {
            let src = map.read(usize::try_from(position).ok()?, dst.len())?;
            dst.copy_from_slice(src);
            Some(())
        })
    }

    /// [`Self::copy_to`] of a batch header at `position`, which also asks the CPU for the
    /// headers of the next few batches, guessed at this batch's size ([`prefetch_headers`]):
    /// a walk of batch headers then waits for one line of memory, not one per batch in turn.
    pub(crate) fn copy_header_to(&self, position: u64, dst: &mut [u8]) -> Option<()> {
        self.announced(|map| {
            let start = usize::try_from(position).ok()?;
            let src = map.read(start, dst.len())?;
            dst.copy_from_slice(src);
            prefetch_headers(map.as_slice(), start, dst);
            Some(())
        })
    }

    /// Asks the CPU for the lines of a batch header at `position` (a hint: nothing is read),
    /// unless the map was retired.
    pub(crate) fn prefetch_header(&self, position: u64) {
        let _ = self.announced(|map| {
            prefetch_lines(map.as_slice(), usize::try_from(position).ok()?);
            Some(())
        });
    }

    /// Runs `f` on the map unless it was retired, announced in `copies` (the gate above).
    fn announced<R>(&self, f: impl FnOnce(&MmapFile) -> Option<R>) -> Option<R> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        // Orders the announcement before the check, against `retire`'s fence.
        std::sync::atomic::fence(Ordering::SeqCst);
        let done = if self.retired.load(Ordering::Relaxed) {
            None
        } else {
            let map = self.map.load();
            map.as_deref().and_then(f)
        };
        // Releases the copy's reads of the map to the retirement that sees the count drop.
        self.copies.fetch_sub(1, Ordering::Release);
        done
    }

    /// Stops every later copy, waits for those in flight, then unmaps: after it, nothing reads
    /// the map, the file's lock is released and its length may change.
    fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        while self.copies.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
        self.map.store(None);
    }
}

/// The `.log` file of a segment.
#[derive(Debug)]
pub struct FileRecords {
    // Field order: the map is dropped before the handle.
    /// The read-only map of a sealed segment, and its share with the [`FileSlice`]s (retired
    /// before the map is dropped).
    map: Option<(Arc<MmapFile>, Arc<SharedMap>)>,
    /// The active segment's read-only map of the file's first `tail_len` bytes, taken as the
    /// file grew ([`Self::refresh_tail_map`]), shared with readers of the published tail and
    /// the slices they take; reached only through its gate, retired before the file's length
    /// drops or the segment seals.
    tail: Option<Arc<SharedMap>>,
    tail_len: u64,
    /// A reader's view of the writer's `tail` map ([`Self::shared`]): read through its gate,
    /// never retired here.
    tail_view: Option<Arc<SharedMap>>,
    /// Shared with the [`FileSlice`]s handed out, which keep the file open.
    handle: Arc<dyn FileHandle>,
    path: PathBuf,
    size: u64,
    /// Whether nothing changed since the last [`Self::flush`] (false at open: what the file
    /// held before is not known to be durable).
    synced: AtomicBool,
}

impl FileRecords {
    /// Opens (or, with a creating `mode`, creates) the `.log` at `path`. The size is the file's
    /// length.
    pub fn open(storage: &dyn Storage, path: &Path, mode: OpenMode) -> Result<FileRecords> {
        let handle: Arc<dyn FileHandle> = Arc::from(storage.open(path, mode)?);
        let size = handle.len()?;
        Ok(FileRecords {
            map: None,
            tail: None,
            tail_len: 0,
            tail_view: None,
            handle,
            path: path.to_path_buf(),
            size,
            synced: AtomicBool::new(false),
        })
    }

    /// A read-only view of the `.log` open as `handle`, of `size` bytes (the active segment's
    /// published size): what a reader without a lock reads the active segment through, out of
    /// the writer's `tail` map where it covers the bytes, else with `pread`.
    pub(crate) fn shared(
        handle: Arc<dyn FileHandle>,
        size: u64,
        tail: Option<Arc<SharedMap>>,
    ) -> FileRecords {
        FileRecords {
            map: None,
            tail: None,
            tail_len: 0,
            tail_view: tail,
            path: handle.path().to_path_buf(),
            handle,
            size,
            synced: AtomicBool::new(true),
        }
    }

    /// Asks the CPU for the lines of the batch header at `position` where the bytes are
    /// mapped (a hint: nothing is read; see `SegmentView::read_bounds`).
    pub(crate) fn prefetch_header(&self, position: u64) {
        if let Some((all, start)) = self.mapped_at(position) {
            prefetch_lines(all, start);
        } else if let Some(gate) = self.gate() {
            gate.prefetch_header(position);
        }
    }

    /// The whole map and `position` in it, where the file is mapped.
    fn mapped_at(&self, position: u64) -> Option<(&[u8], usize)> {
        let (m, _) = self.map.as_ref()?;
        Some((m.as_slice(), usize::try_from(position).ok()?))
    }

    /// The gate of a map that may hold the file's bytes: the sealed segment's, the active
    /// segment's tail map, or a reader's view of the latter.
    fn gate(&self) -> Option<&Arc<SharedMap>> {
        self.map
            .as_ref()
            .map(|(_, s)| s)
            .or(self.tail.as_ref())
            .or(self.tail_view.as_ref())
    }

    /// Maps the active segment's file again, read-only at its current length, once it has grown
    /// past the last map by an eighth of that map's length (1 to 16 MiB), from [`MAP_MIN_BYTES`]
    /// on: readers of the published tail then find batch headers and copy slices out of the map
    /// below that length instead of reading them with `pread`. The old map is retired first (its
    /// file lock goes with it). Returns whether the map changed; a map that cannot be made is
    /// no map (reads go through the handle). Only for real files; `lock` must cover the file.
    pub(crate) fn refresh_tail_map(&mut self, lock: &DirLock) -> bool {
        if !self.tail_map_due() {
            return false;
        }
        self.retire_tail_map();
        if let Ok(map) = MmapFile::open(lock, &self.path, false) {
            if map.len() == self.size {
                self.tail = Some(Arc::new(SharedMap::new(Arc::new(map))));
            }
        }
        // Not tried again before the file grows as much, mapped or not.
        self.tail_len = self.size;
        true
    }

    /// Whether [`Self::refresh_tail_map`] would map the file again now: a comparison, for the
    /// append path.
    pub(crate) fn tail_map_due(&self) -> bool {
        let next = if self.tail_len == 0 {
            MAP_MIN_BYTES
        } else {
            self.tail_len + (self.tail_len / 8).clamp(MAP_MIN_BYTES, 16 << 20)
        };
        self.size >= next && self.map.is_none()
    }

    /// The active segment's tail map, to publish to readers.
    pub(crate) fn tail_map(&self) -> Option<Arc<SharedMap>> {
        self.tail.clone()
    }

    /// Retires the tail map (`SharedMap`): readers and slices holding it read through the handle
    /// from now on, and the file's length may change.
    pub(crate) fn retire_tail_map(&mut self) {
        if let Some(shared) = self.tail.take() {
            shared.retire();
        }
        self.tail_len = 0;
    }

    /// The open file, shared with the slices handed out.
    pub(crate) fn handle(&self) -> &Arc<dyn FileHandle> {
        &self.handle
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size in bytes (Kafka `sizeInBytes`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether reads are served from a read-only map.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// Maps the file read-only so that reads become zero-copy. Only for real files (the caller
    /// checks [`Storage::supports_mmap`]); `lock` must cover the file. The map is dropped again by
    /// the next append or truncation.
    pub fn map_read_only(&mut self, lock: &DirLock) -> Result<()> {
        if self.map.is_none() && self.size > 0 {
            let map = MmapFile::open(lock, &self.path, false)?;
            if map.len() == self.size {
                let map = Arc::new(map);
                let shared = Arc::new(SharedMap::new(Arc::clone(&map)));
                self.map = Some((map, shared));
            }
        }
        Ok(())
    }

    /// Drops the map, if any, retiring it first (`SharedMap`): slices taken from it read
    /// through the handle from now on.
    pub fn unmap(&mut self) {
        if let Some((_map, shared)) = self.map.take() {
            shared.retire();
        }
    }

    fn map_slice(&self, position: u64, len: usize) -> Option<&[u8]> {
        let (all, start) = self.mapped_at(position)?;
        let end = start.checked_add(len)?.min(all.len());
        all.get(start..end)
    }

    /// Appends `data` and returns the position it was written at. Not durable until
    /// [`Self::flush`].
    pub fn append(&mut self, data: &[u8]) -> Result<u64> {
        self.unmap();
        let position = self.size;
        *self.synced.get_mut() = false;
        self.handle.write_at(position, data)?;
        self.size += data.len() as u64;
        Ok(position)
    }

    /// Up to `len` bytes at `position` (fewer at the end of the file; empty past it). Borrowed
    /// from the map when mapped, else read into a buffer.
    pub fn read(&self, position: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        let avail = self.size.saturating_sub(position);
        let len = (len as u64).min(avail) as usize;
        if len == 0 {
            return Ok(Cow::Borrowed(&[]));
        }
        if let Some(s) = self.map_slice(position, len) {
            if s.len() == len {
                return Ok(Cow::Borrowed(s));
            }
        }
        let mut buf = vec![0u8; len];
        self.handle.read_exact_at(position, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// Kafka's `slice(position, size)`: up to `len` bytes at `position` (fewer at the end of the
    /// file; empty past it) as a [`FileSlice`] of the open file, read later: out of the sealed
    /// segment's map while the segment keeps it (`SharedMap`), else through the handle.
    pub fn slice(&self, position: u64, len: usize) -> FileSlice {
        let len = (len as u64).min(self.size.saturating_sub(position));
        FileSlice::new(
            Arc::clone(&self.handle),
            self.gate().cloned(),
            position,
            len,
        )
    }

    /// [`Self::slice`] whose [`FileSlice::next_offset`] walks batch headers from `walk_from`
    /// (a batch start inside the slice, before its last whole batch).
    pub(crate) fn slice_walking_from(
        &self,
        position: u64,
        len: usize,
        walk_from: u64,
    ) -> FileSlice {
        let mut slice = self.slice(position, len);
        slice.walk_from = walk_from.max(position);
        slice
    }

    /// All bytes from `position` to the end, to iterate with record-format's iterator.
    pub fn batches_from(&self, position: u64) -> Result<FileBatches<'_>> {
        let len = usize::try_from(self.size.saturating_sub(position)).map_err(|_| {
            SegmentError::io(
                &self.path,
                "read",
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            )
        })?;
        Ok(FileBatches {
            bytes: self.read(position, len)?,
            position,
        })
    }

    /// Batch headers from `position` on, by Kafka's `nextBatch` rules: stops silently at an
    /// incomplete trailing batch; a length below 14 or an unknown magic is an error (once).
    pub fn headers_from(&self, position: u64) -> HeaderIter<'_> {
        HeaderIter {
            records: self,
            position,
            end: self.size,
            done: false,
            ahead: Vec::new(),
            ahead_start: 0,
        }
    }

    /// Kafka's `searchForOffsetWithSize`: the first batch from `starting_position` on whose last
    /// offset is `>= target_offset`.
    pub fn search_for_offset_with_size(
        &self,
        target_offset: i64,
        starting_position: u64,
    ) -> Result<Option<LogOffsetPosition>> {
        for h in self.headers_from(starting_position) {
            let h = h?;
            if h.last_offset >= target_offset {
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    /// Kafka's `searchForTimestamp`: the first record, in batches from `starting_position` whose
    /// max timestamp is `>= target_timestamp`, with `timestamp >= target_timestamp` and
    /// `offset >= starting_offset`. Decompresses only candidate batches.
    pub fn search_for_timestamp(
        &self,
        target_timestamp: i64,
        starting_position: u64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let limits = DecodeLimits::default();
        for h in self.headers_from(starting_position) {
            let h = h?;
            if h.max_timestamp < target_timestamp || h.magic != MAGIC_V2 {
                continue;
            }
            let bytes = self.read(h.position, h.size as usize)?;
            let format = |error: FormatError| SegmentError::Format {
                path: self.path.clone(),
                error,
            };
            let Some(Ok(LogEntry::V2(batch))) = Batches::new(&bytes, h.position).next() else {
                continue;
            };
            let records = batch.records(&limits).map_err(format)?;
            for r in records.iter() {
                let r = r.map_err(format)?;
                if r.timestamp() >= target_timestamp && r.offset() >= starting_offset {
                    let epoch = batch.partition_leader_epoch();
                    return Ok(Some(TimestampAndOffset {
                        timestamp: r.timestamp(),
                        offset: r.offset(),
                        leader_epoch: (epoch >= 0).then_some(epoch),
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Kafka's `largestTimestampAfter`: the largest batch max timestamp from `starting_position`
    /// on, with the last offset of its batch; `(NO_TIMESTAMP, -1)` if there is none.
    pub fn largest_timestamp_after(&self, starting_position: u64) -> Result<TimestampOffset> {
        let mut best = TimestampOffset {
            timestamp: NO_TIMESTAMP,
            offset: -1,
        };
        for h in self.headers_from(starting_position) {
            let h = h?;
            if h.max_timestamp > best.timestamp {
                best = TimestampOffset {
                    timestamp: h.max_timestamp,
                    offset: h.last_offset,
                };
            }
        }
        Ok(best)
    }

    /// Kafka's `truncateTo`: cuts the file to `target_size` bytes and returns the bytes removed.
    /// A target above the current size is [`SegmentError::InvalidTruncation`].
    pub fn truncate_to(&mut self, target_size: u64) -> Result<u64> {
        if target_size > self.size {
            return Err(SegmentError::InvalidTruncation {
                path: self.path.clone(),
                target: i64::try_from(target_size).unwrap_or(i64::MAX),
                current: i64::try_from(self.size).unwrap_or(i64::MAX),
            });
        }
        let removed = self.size - target_size;
        if removed > 0 || self.handle.len()? > target_size {
            // Invariant 3 of MmapFile: unmap (the slices' copies retired) before the length
            // changes.
            self.unmap();
            self.retire_tail_map();
            *self.synced.get_mut() = false;
            self.handle.set_len(target_size)?;
            self.size = target_size;
        }
        Ok(removed)
    }

    /// Makes the appended bytes durable (`fdatasync`); no system call when nothing changed
    /// since the last flush.
    pub fn flush(&self) -> Result<()> {
        if self.synced.load(Ordering::Acquire) {
            return Ok(());
        }
        self.handle.sync_data()?;
        self.synced.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for FileRecords {
    /// Retires the map (`SharedMap`): a slice that outlives the segment reads through the
    /// handle, so a later open of the same file may change its length.
    fn drop(&mut self) {
        self.unmap();
        self.retire_tail_map();
    }
}
