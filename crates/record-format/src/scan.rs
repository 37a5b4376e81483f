//! Validating a whole `.log` buffer on several threads, with results exactly those of one
//! sequential CRC-checking scan.
//!
//! Walking the batch headers and checking CRCs is most of the cost of validating a log. The buffer
//! is cut into [`Regions`] of [`DEFAULT_REGION_BYTES`]. Each region (after the first) starts at
//! its first *candidate* batch start: the first position in it that looks like a v2 batch header
//! (magic 2, no unknown attribute bit, a non-negative last offset delta, a length that fits, a
//! following header that also has magic 2) whose CRC matches. A unit of work takes one region and
//! walks the entries from its start up to the next region's start, checking every CRC as it goes,
//! so the header walk (and, over a fresh memory map, the page faults) and the CRC pass over each
//! batch happen together, on whichever thread took the region.
//!
//! Candidates are only hints. The one walk that counts is the chain of entries from the start of
//! the buffer, and the [`ChainReader`] follows it: a region's entries are used only when the chain
//! arrives exactly at that region's start. If it does not (a record's value that happens to hold a
//! batch, or a batch longer than a region), the reader walks the gap itself, checking every CRC,
//! until the chain meets a later region's start again. So the entries handed out, the first
//! invalid one and the way framing ended are always exactly those of one sequential scan.
//!
//! No input makes this cost much more than one pass ([`Regions::bytes_checked`] counts it): a
//! candidate must be a batch of at most four regions, at most two candidate CRCs are computed per
//! region, and a region's walk leaves any longer entry to the reader, who walks it only if it is on
//! the chain.
//!
//! Helper threads ([`Regions::help`]) take regions in buffer order; the reader takes the region it
//! needs next whenever no one has, and otherwise the next free one while it waits, so no thread
//! idles. [`scan_log`] is this with `threads - 1` helpers; segment-store's recovery applies each
//! [`Piece`] as it comes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::batches::{BatchHeader, Batches, IterEnd, LogEntry};
use crate::cursor::be_i32_at;
use crate::error::FormatError;
use crate::wire::{LOG_OVERHEAD, RECORD_OVERHEAD_V0, SIZE_OFFSET};

/// Result of [`scan_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// Entries of the valid prefix, in file order.
    pub batches: Vec<BatchHeader>,
    /// Absolute position where the valid prefix ends.
    pub valid_prefix_end: u64,
    /// Why the scan stopped (`Complete`, `IncompleteTrailing` or the first `Error`).
    pub end: IterEnd,
}

impl LogScan {
    /// The first error, if the scan stopped on one.
    pub fn error(&self) -> Option<&FormatError> {
        match &self.end {
            IterEnd::Error(e) => Some(e),
            _ => None,
        }
    }
}

/// Scans `bytes` (whose first byte is at absolute `base_position`) checking every entry's CRC on
/// up to `threads` threads (1 = on the calling thread). Equivalent to iterating
/// `Batches::new(bytes, base_position).validate_crc(true)` to the end.
pub fn scan_log(bytes: &[u8], base_position: u64, threads: usize) -> LogScan {
    scan_in_regions(bytes, base_position, threads, DEFAULT_REGION_BYTES)
}

fn scan_in_regions(bytes: &[u8], base_position: u64, threads: usize, region: usize) -> LogScan {
    let regions = Regions::new(bytes, base_position, region);
    let (batches, end) = regions.follow_chain(threads.saturating_sub(1), |reader| {
        let mut batches = Vec::new();
        while let Piece::Entries(entries) = reader.next_piece() {
            batches.extend(entries.iter().map(LogEntry::header));
            reader.recycle(entries);
        }
        (batches, reader.end())
    });
    let valid_prefix_end = batches
        .last()
        .map_or(base_position, |b| b.position + u64::from(b.size));
    LogScan {
        batches,
        valid_prefix_end,
        end: end.unwrap_or(IterEnd::Complete),
    }
}

/// Bytes per region: large enough that a unit's bookkeeping (finding the region's start, one
/// extra CRC) costs nothing next to its CRCs, small enough that applying starts a fraction of a
/// millisecond after recovery does and the last region does not leave a core idle for long.
pub const DEFAULT_REGION_BYTES: usize = 1024 * 1024;

/// How many regions past its own a unit looks for the next region's start before walking to a
/// plain position instead (a batch longer than several regions, or a zero-filled tail).
const LOOKAHEAD_REGIONS: usize = 4;

/// A region walk leaves an entry longer than this many regions to the reader (who walks it only
/// if it is on the chain), and a candidate start must be of a batch no longer than that: so no
/// input, however crafted, makes a region cost more than a few regions' worth of CRC work.
const MAX_ENTRY_REGIONS: usize = 4;

/// Candidates whose CRC is computed per region before the search gives up (the region then has
/// no start and the walks around it simply go on).
const MAX_CANDIDATE_CRCS: usize = 2;

/// Bytes of a v2 batch header up to and including the CRC field.
const CRC_END: usize = 21;
/// Byte position of the magic and of the CRC in a batch header.
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
/// Smallest `length` field of a v2 batch (61-byte header, minus the 12 bytes before `length`'s
/// end).
const MIN_V2_LENGTH: usize = 49;

const UNCLAIMED: u8 = 0;
const CLAIMED: u8 = 1;

/// The entries walked from one start position.
#[derive(Debug)]
struct Span<'a> {
    /// Position (in the data) just past the last entry.
    end: usize,
    /// The valid entries walked.
    entries: Vec<LogEntry<'a>>,
    /// Set when the walk met the end of the data, a malformed entry or an entry whose CRC (or
    /// legacy checksum) does not match (an error at that entry's start) before its stop position.
    frame_end: Option<IterEnd>,
}

/// One file's regions, their starts and their walked spans.
#[derive(Debug)]
pub struct Regions<'a> {
    data: &'a [u8],
    base_position: u64,
    region_bytes: usize,
    /// Candidate batch start of each region (`None`: no candidate in it). Region 0 starts at 0.
    starts: Vec<OnceLock<Option<usize>>>,
    claims: Vec<AtomicU8>,
    /// Each region's walk, from its walker to the chain reader, who takes it (or leaves it, if
    /// the chain does not arrive at the region's start). Only the claimer of a region walks it,
    /// and the reader takes a region's walk at most once.
    spans: Vec<Mutex<Option<Span<'a>>>>,
    /// Entry buffers the reader is done with, oldest first, for the next walks (the entries in
    /// flight stay a few regions' worth, not the file's). A buffer is taken again only once
    /// [`SPARE_BYTES`] were given back after it.
    spare: Mutex<VecDeque<Vec<LogEntry<'a>>>>,
    /// Next region a helper tries to claim.
    next: AtomicUsize,
    /// The region the chain reader has reached: helpers stay at most [`MAX_LEAD`] regions
    /// ahead of it, so that the entries they walked are still in the shared cache when the
    /// reader applies them.
    reached: AtomicUsize,
    /// A chain reader follows the helpers (set by [`Regions::follow_chain`]); without one
    /// (`scan_log`) helpers are not held back.
    chained: AtomicBool,
    /// No further unit starts (running ones finish).
    stopped: AtomicBool,
    /// See [`Regions::bytes_checked`].
    checked: AtomicU64,
}

/// How many regions a helper may walk ahead of the chain reader.
pub const MAX_LEAD: usize = 8;

/// Bytes of entry buffers the reader gives back before the oldest one is walked into again.
/// The reader has just read a buffer it gives back: written again at once, each of its cache
/// lines has to be taken back from the reader's core first (the walking thread spent a third of
/// its time waiting for those stores). Once about this much more was given back after it, the
/// buffer has left the reader's cache for the shared one, where the writer's stores find it
/// fastest (over a 1 GiB segment of 1 KB batches, ~24 buffers: measured faster than 16 or 40).
const SPARE_BYTES: usize = 2 << 20;

/// What the applier gets next.
#[derive(Debug)]
pub enum Piece<'a> {
    /// The next entries of the chain, every one of them valid (the first invalid entry ends the
    /// chain: see [`ChainReader::end`]). Give the buffer back with [`ChainReader::recycle`] once
    /// done with it.
    Entries(Vec<LogEntry<'a>>),
    /// The chain has no more entries (see [`ChainReader::end`]).
    Finished,
}

impl<'a> Regions<'a> {
    /// `data` is the whole file; its first byte is at `base_position`; regions of `region` bytes
    /// ([`DEFAULT_REGION_BYTES`] unless a test wants many).
    pub fn new(data: &'a [u8], base_position: u64, region: usize) -> Self {
        let region_bytes = region.max(1);
        let regions = data.len().div_ceil(region_bytes).max(1);
        Self {
            data,
            base_position,
            region_bytes,
            starts: (0..regions).map(|_| OnceLock::new()).collect(),
            claims: (0..regions).map(|_| AtomicU8::new(UNCLAIMED)).collect(),
            spans: (0..regions).map(|_| Mutex::new(None)).collect(),
            spare: Mutex::new(VecDeque::new()),
            next: AtomicUsize::new(0),
            reached: AtomicUsize::new(0),
            chained: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            checked: AtomicU64::new(0),
        }
    }

    /// Number of regions.
    fn count(&self) -> usize {
        self.spans.len()
    }

    /// Does units of work until every region is taken or [`Self::stop`] was called.
    pub fn help(&self) {
        while self.work(true) {}
    }

    /// Claims the next free region in file order and walks it. `false` once there is none. A
    /// `helper` (not the chain reader itself) stays at most [`MAX_LEAD`] regions ahead of the
    /// reader.
    fn work(&self, helper: bool) -> bool {
        loop {
            if self.stopped.load(Ordering::Acquire) {
                return false;
            }
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.count() {
                return false;
            }
            // Not too far ahead of the reader (who claims `k` itself if it gets there first).
            while helper
                && self.chained.load(Ordering::Acquire)
                && k > self.reached.load(Ordering::Acquire) + MAX_LEAD
                && !self.stopped.load(Ordering::Acquire)
                && self
                    .claims
                    .get(k)
                    .is_some_and(|c| c.load(Ordering::Acquire) == UNCLAIMED)
            {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            if self.claim(k) {
                self.process(k);
                return true;
            }
        }
    }

    fn claim(&self, k: usize) -> bool {
        self.claims.get(k).is_some_and(|c| {
            c.compare_exchange(UNCLAIMED, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Walks region `k` from its start to the next region's start (the caller claimed it).
    fn process(&self, k: usize) {
        let span = match self.start(k) {
            Some(start) => {
                let stop = self.next_start_after(k);
                let span = self.walk(start, stop, true);
                if matches!(span.frame_end, Some(IterEnd::Error(_))) {
                    // Nothing after an invalid entry is applied. (Should this region be off the
                    // chain after all, the reader walks what it needs itself.)
                    self.stop();
                }
                span
            }
            None => Span {
                end: 0,
                entries: Vec::new(),
                frame_end: None,
            },
        };
        if let Some(slot) = self.spans.get(k) {
            *lock(slot) = Some(span);
        }
    }

    /// An empty entry buffer: the oldest spare one if [`SPARE_BYTES`] were given back after it,
    /// else a new one.
    fn entry_buffer(&self) -> Vec<LogEntry<'a>> {
        let mut spare = lock(&self.spare);
        let after_oldest: usize = spare.iter().skip(1).map(buffer_bytes).sum();
        if after_oldest < SPARE_BYTES {
            return Vec::new();
        }
        spare.pop_front().unwrap_or_default()
    }

    /// The candidate start of region `k` (computed once, by whoever asks first).
    fn start(&self, k: usize) -> Option<usize> {
        let slot = self.starts.get(k)?;
        *slot.get_or_init(|| {
            if k == 0 {
                return Some(0);
            }
            let from = k.checked_mul(self.region_bytes)?;
            let to = from.saturating_add(self.region_bytes).min(self.data.len());
            let mut crcs = 0;
            for p in from..to {
                let Some(covered) = self.plausible_batch(p) else {
                    continue;
                };
                if crcs == MAX_CANDIDATE_CRCS {
                    return None;
                }
                crcs += 1;
                self.count_checked(covered.len());
                let stored = self.data.get(p + CRC_AT..p + CRC_END);
                if stored == Some(&crate::checksum::crc32c(covered).to_be_bytes()[..]) {
                    return Some(p);
                }
            }
            None
        })
    }

    fn max_entry_bytes(&self) -> usize {
        self.region_bytes.saturating_mul(MAX_ENTRY_REGIONS)
    }

    fn count_checked(&self, bytes: usize) {
        self.checked.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes of the entries walked and of the candidates checked so far (every one of them
    /// CRC-checked): about the data's length when every candidate was on the chain, more for
    /// look-alikes, and bounded by a few regions' worth per region whatever the input.
    pub fn bytes_checked(&self) -> u64 {
        self.checked.load(Ordering::Relaxed)
    }

    /// Where a walk of region `k` stops: the next region's candidate start (looking a few regions
    /// ahead), else a plain position, else the end of the data.
    fn next_start_after(&self, k: usize) -> usize {
        let last = (k + LOOKAHEAD_REGIONS).min(self.count() - 1);
        for j in k + 1..=last {
            if let Some(s) = self.start(j) {
                return s;
            }
        }
        if last + 1 >= self.count() {
            self.data.len()
        } else {
            (last + 1).saturating_mul(self.region_bytes)
        }
    }

    /// Whether a v2 batch plausibly starts at `p` (then: the bytes its CRC covers): magic 2,
    /// attributes with no unknown bit, a non-negative last offset delta, a length that fits and
    /// is at most [`MAX_ENTRY_REGIONS`] regions, and the next header (if any) with magic 2 as well.
    /// The checks on the header itself come first, so that random bytes are rejected before
    /// anything further away is read.
    fn plausible_batch(&self, p: usize) -> Option<&'a [u8]> {
        let d = self.data;
        if d.get(p + MAGIC_AT) != Some(&2) {
            return None;
        }
        let be32 = |at: usize| {
            d.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_be_bytes)
        };
        // attributes (int16 at 21): compression 0-4 in bits 0-2, bits 3-6 flags, the rest zero;
        // lastOffsetDelta (int32 at 23) >= 0.
        let attributes_ok = matches!(d.get(p + ATTRIBUTES_AT..p + ATTRIBUTES_AT + 2),
            Some(&[0, low]) if low & 0x80 == 0 && low & 0x07 <= 4);
        if !attributes_ok || be32(p + LAST_OFFSET_DELTA_AT).is_none_or(|v| v >= 0x8000_0000) {
            return None;
        }
        let len = be32(p + 8).and_then(|l| usize::try_from(l).ok())?;
        let next = (p + 12).checked_add(len)?;
        if len < MIN_V2_LENGTH || len > self.max_entry_bytes() || next > d.len() {
            return None;
        }
        if next != d.len() && d.get(next + MAGIC_AT) != Some(&2) {
            return None;
        }
        d.get(p + CRC_END..next)
    }

    /// Walks the entries from `start`, checking every CRC, until an entry ends at or past `stop`
    /// (when `stop` is the end of the data: until the iterator ends), an invalid entry, or the
    /// end of framing. A `bounded` walk (a region's) also ends before an entry longer than
    /// [`MAX_ENTRY_REGIONS`] regions: the reader walks that one if it is on the chain.
    fn walk(&self, start: usize, stop: usize, bounded: bool) -> Span<'a> {
        let rest = self.data.get(start..).unwrap_or_default();
        // The iterator checks each CRC itself: the same check made on each entry after the
        // iterator returned it measured 4x slower over a map of memory-resident pages.
        let mut it = Batches::new(rest, self.base_position + start as u64)
            .validate_crc(true)
            .max_entry_bytes(if bounded {
                self.max_entry_bytes()
            } else {
                usize::MAX
            });
        let to_the_end = stop >= self.data.len();
        let mut span = Span {
            end: start,
            entries: self.entry_buffer(),
            frame_end: None,
        };
        let mut checked = 0;
        while span.end < stop || to_the_end {
            match it.next() {
                Some(Ok(e)) => {
                    checked += e.size_in_bytes();
                    span.end += e.size_in_bytes();
                    span.entries.push(e);
                }
                Some(Err(e)) => {
                    // At the entry's start, as the sequential iterator reports it (a CRC
                    // mismatch too).
                    span.frame_end = Some(IterEnd::Error(e));
                    break;
                }
                None => {
                    // Without a reason: the next entry is longer than a bounded walk takes.
                    span.frame_end = it.stopped_at().cloned();
                    break;
                }
            }
        }
        self.count_checked(checked);
        span
    }

    /// No further unit starts (running ones finish).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Runs `f` over this data's [`ChainReader`] while up to `helpers` threads walk regions (none
    /// when there is a single region; a thread that cannot be spawned leaves its share to the
    /// others), then stops and joins them, so no helper thread outlives the call.
    pub fn follow_chain<R>(
        &self,
        helpers: usize,
        f: impl FnOnce(&mut ChainReader<'_, 'a>) -> R,
    ) -> R {
        let helpers = if self.count() > 1 { helpers } else { 0 };
        self.chained.store(true, Ordering::Release);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..helpers)
                .map_while(|_| {
                    std::thread::Builder::new()
                        .name("seglog-scan".into())
                        .spawn_scoped(scope, || self.help())
                        .ok()
                })
                .collect();
            // Stopped however `f` ends: a helper waiting for the reader to come nearer would
            // otherwise wait for ever, and the scope with it, if `f` panicked.
            let stop = StopOnDrop(self);
            let mut reader = self.reader();
            let out = f(&mut reader);
            drop(stop);
            // Joined explicitly: the scope's own wait returns once the helpers' closures are
            // done, before their threads have exited (and freed their thread-locals).
            for h in handles {
                if let Err(panic) = h.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            out
        })
    }

    /// Follows the chain of entries from the start of the file.
    pub fn reader(&self) -> ChainReader<'_, 'a> {
        ChainReader {
            regions: self,
            pos: 0,
            region: 0,
            done: false,
            end: None,
            gap_walks: 0,
        }
    }
}

/// The applier's side: the file's entries in log order, exactly as one sequential scan frames
/// them, with their CRC verdicts.
#[derive(Debug)]
pub struct ChainReader<'c, 'a> {
    regions: &'c Regions<'a>,
    /// Where the chain is: the end of the entries handed out so far.
    pos: usize,
    /// First region whose start may still be at or after `pos`.
    region: usize,
    done: bool,
    end: Option<IterEnd>,
    /// How many gaps between region starts this thread walked itself.
    gap_walks: usize,
}

impl<'c, 'a> ChainReader<'c, 'a> {
    /// The next entries of the chain.
    pub fn next_piece(&mut self) -> Piece<'a> {
        if self.done {
            return Piece::Finished;
        }
        let regions = self.regions;
        // The first region whose start is not behind the chain.
        let mut next_start = None;
        while self.region < regions.count() {
            match regions.start(self.region) {
                Some(s) if s >= self.pos => {
                    next_start = Some(s);
                    break;
                }
                _ => self.region += 1,
            }
        }
        regions.reached.store(self.region, Ordering::Release);
        let region = next_start
            .filter(|&s| s == self.pos)
            .and_then(|_| self.span(self.region));
        let (entries, span_end, frame_end) = if let Some(span) = region {
            // The chain arrives at this region's start: its walk is the chain's.
            self.region += 1;
            regions.reached.store(self.region, Ordering::Release);
            (span.entries, span.end, span.frame_end)
        } else {
            // Between region starts (or past the last): walk the gap on this thread.
            let stop = next_start.unwrap_or(regions.data.len());
            let span = regions.walk(self.pos, stop, false);
            self.gap_walks += 1;
            (span.entries, span.end, span.frame_end)
        };
        self.pos = span_end;
        if frame_end.is_some() {
            self.done = true;
            self.end = frame_end;
        }
        Piece::Entries(entries)
    }

    /// Region `k`'s walk: done by this thread if nobody took it, else awaited (doing other
    /// regions meanwhile).
    fn span(&self, k: usize) -> Option<Span<'a>> {
        let regions = self.regions;
        let slot = regions.spans.get(k)?;
        if regions.claim(k) {
            regions.process(k);
        }
        loop {
            if let Some(span) = lock(slot).take() {
                return Some(span);
            }
            // Another thread is walking region `k` (at most one unit of work away).
            if !regions.work(false) {
                std::thread::yield_now();
            }
        }
    }

    /// Gives back the buffer of a [`Piece::Entries`], for a later walk to fill again.
    pub fn recycle(&self, mut entries: Vec<LogEntry<'a>>) {
        entries.clear();
        // A buffer that holds nothing (a region without a start) is no use to a walk, and at the
        // front of the spares it would keep every other from being taken again.
        if entries.capacity() == 0 {
            return;
        }
        lock(&self.regions.spare).push_back(entries);
    }

    /// Why the chain stopped, once [`Piece::Finished`] was returned: `Complete`, an incomplete
    /// trailing entry, or the first error (a malformed entry or a CRC mismatch) at the start of
    /// the entry it names, exactly as the sequential iterator with `validate_crc(true)` ends.
    pub fn end(&self) -> Option<IterEnd> {
        self.end.clone()
    }

    /// How many gaps between region starts the reader walked itself (0 when every region's
    /// candidate start was on the chain).
    pub fn gap_walks(&self) -> usize {
        self.gap_walks
    }
}

/// Calls [`Regions::stop`] when dropped.
struct StopOnDrop<'r, 'a>(&'r Regions<'a>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Bytes an entry buffer holds.
fn buffer_bytes(entries: &Vec<LogEntry<'_>>) -> usize {
    entries
        .capacity()
        .saturating_mul(std::mem::size_of::<LogEntry<'_>>())
}

/// Locks `m`; a walker that panicked leaves nothing half-written in these slots (each is set or
/// taken whole), so a poisoned lock is used as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Follows the chain of entries of a file read in consecutive chunks (each chunk's bytes in a
/// buffer of its own), checking the CRC of every entry that lies whole inside a chunk: what one
/// thread can do for a file while another applies it.
///
/// [`ChunkChain::check`] returns, for each chunk, the positions of the chain's entries that lie
/// whole in it, all of them valid. An entry across a chunk boundary is not checked; the chain
/// goes on at its end (its `length` field says where). After an invalid entry the chain is lost
/// and no further ranges come. The ranges are only a help to whoever applies the chunk: such a
/// walk may skip the CRCs of the entries from a range's start to its end in *the same bytes*
/// once its own chain arrives exactly at the range's start (framing is a function of the bytes
/// and the start position), and checks everything else itself.
#[derive(Debug, Clone)]
pub struct ChunkChain {
    /// Absolute position of the next entry on the chain (`None`: lost).
    next: Option<u64>,
    /// The first bytes of the entry at `next` when a chunk ended before its `length` field did.
    head: Vec<u8>,
}

impl Default for ChunkChain {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkChain {
    /// A chain starting at the file's first byte.
    pub fn new() -> Self {
        Self {
            next: Some(0),
            head: Vec::new(),
        }
    }

    /// The chunk `data`, whose first byte is at absolute position `at`, following the previous
    /// chunk: the range of absolute positions of the whole, valid entries of the chain in it
    /// (`None` when there are none).
    pub fn check(&mut self, at: u64, data: &[u8]) -> Option<std::ops::Range<u64>> {
        self.walk(at, data, true)
    }

    /// The chunk `data` at `at`, following the previous chunk, walked without checking any CRC:
    /// the chain goes on through it (for the next chunks' [`Self::check`]), and nothing is
    /// vouched for.
    pub fn follow(&mut self, at: u64, data: &[u8]) {
        self.walk(at, data, false);
    }

    fn walk(&mut self, at: u64, data: &[u8], crc: bool) -> Option<std::ops::Range<u64>> {
        let mut next = self.next?;
        let end = at.saturating_add(data.len() as u64);
        if next < at {
            // The previous chunk ended inside the length field of the entry at `next`.
            let want = LENGTH_END.saturating_sub(self.head.len());
            self.head
                .extend_from_slice(data.get(..want.min(data.len())).unwrap_or_default());
            if self.head.len() < LENGTH_END {
                return None;
            }
            self.next = entry_end(next, &self.head);
            self.head.clear();
            next = self.next?;
        }
        if next >= end {
            return None;
        }
        let from = usize::try_from(next.checked_sub(at)?).ok()?;
        let rest = data.get(from..).unwrap_or_default();
        let mut it = Batches::new(rest, next).validate_crc(crc);
        for entry in &mut it {
            if entry.is_err() {
                break;
            }
        }
        let valid_end = it.valid_prefix_end();
        self.next = match it.stopped_at() {
            Some(IterEnd::Complete) => Some(valid_end),
            Some(IterEnd::IncompleteTrailing { position, .. }) => {
                let tail = rest
                    .get(usize::try_from(position.saturating_sub(next)).unwrap_or(usize::MAX)..)
                    .unwrap_or_default();
                if tail.len() < LENGTH_END {
                    self.head.extend_from_slice(tail);
                    Some(*position)
                } else {
                    entry_end(*position, tail)
                }
            }
            _ => None,
        };
        (crc && valid_end > next).then_some(next..valid_end)
    }
}

/// Bytes of an entry up to the end of its `length` field (offset, length).
const LENGTH_END: usize = LOG_OVERHEAD;

/// Where the entry at `position` whose first bytes are `head` (at least [`LENGTH_END`]) ends by
/// its `length` field; `None` for a length the iterator refuses (shorter than the smallest
/// entry), so that the chain never goes on inside bytes it has already passed.
fn entry_end(position: u64, head: &[u8]) -> Option<u64> {
    let len = be_i32_at(head, SIZE_OFFSET);
    if len < RECORD_OVERHEAD_V0 as i32 {
        return None;
    }
    position.checked_add(LENGTH_END as u64 + u64::try_from(len).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FormatErrorKind, RecordBatchBuilder};

    fn log(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let mut b = RecordBatchBuilder::new(i as i64 * 3);
            for j in 0..3 {
                b.append(1000 + j, None, Some(&[i as u8; 50]), &[]).unwrap();
            }
            out.extend_from_slice(&b.build());
        }
        out
    }

    fn sequential(bytes: &[u8], base: u64) -> (Vec<u64>, u64, IterEnd) {
        let mut it = Batches::new(bytes, base).validate_crc(true);
        let positions = it.by_ref().flatten().map(|e| e.position()).collect();
        (
            positions,
            it.valid_prefix_end(),
            it.stopped_at().cloned().unwrap(),
        )
    }

    #[test]
    fn parallel_scan_equals_sequential_iteration_for_every_single_corruption() {
        let clean = log(20);
        for threads in [1, 2, 3, 8] {
            let s = scan_log(&clean, 100, threads);
            assert_eq!(s.end, IterEnd::Complete);
            assert_eq!(s.batches.len(), 20);
            assert_eq!(s.valid_prefix_end, 100 + clean.len() as u64);
        }
        // Flip one byte at many positions (CRC errors, length errors, bad magic) and cut the
        // tail at many lengths: the parallel scan must agree with the sequential iterator.
        for pos in (0..clean.len()).step_by(7) {
            let mut bad = clean.clone();
            bad[pos] ^= 0x5a;
            for threads in [1, 2, 4] {
                let s = scan_in_regions(&bad, 0, threads, 300);
                let (positions, end, stop) = sequential(&bad, 0);
                assert_eq!(
                    s.batches.iter().map(|b| b.position).collect::<Vec<_>>(),
                    positions,
                    "flip at {pos}, {threads} threads"
                );
                assert_eq!(s.valid_prefix_end, end);
                assert_eq!(s.end, stop, "flip at {pos}");
            }
        }
        for cut in (0..clean.len()).step_by(13) {
            let s = scan_in_regions(&clean[..cut], 0, 2, 300);
            let (positions, end, stop) = sequential(&clean[..cut], 0);
            assert_eq!(s.batches.len(), positions.len());
            assert_eq!((s.valid_prefix_end, s.end), (end, stop));
        }
    }

    /// xorshift64*.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    fn batch(base: i64, values: &[Vec<u8>]) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(base);
        for (i, v) in values.iter().enumerate() {
            b.append(1_000 + i as i64, None, Some(v), &[]).unwrap();
        }
        b.build()
    }

    /// A log whose record values are sometimes themselves two complete, valid batches (so that
    /// region starts land on look-alikes off the chain), sometimes several regions long, and
    /// otherwise random bytes.
    fn tricky_log(rng: &mut Rng, region: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut base = 0i64;
        for _ in 0..40 {
            let kind = rng.below(10);
            let values: Vec<Vec<u8>> = (0..1 + rng.below(3))
                .map(|_| {
                    if kind < 3 {
                        let a = batch(7, &[vec![2u8; 1 + rng.below(300) as usize]]);
                        let b = batch(9, &[vec![5u8; 1 + rng.below(300) as usize]]);
                        [a, b].concat()
                    } else if kind == 3 {
                        (0..region * (1 + rng.below(5) as usize))
                            .map(|_| rng.next() as u8)
                            .collect()
                    } else {
                        (0..rng.below(600)).map(|_| rng.next() as u8).collect()
                    }
                })
                .collect();
            let b = batch(base, &values);
            base += values.len() as i64;
            out.extend(b);
        }
        out
    }

    /// What one sequential CRC-checking scan says: the positions of the valid entries, and the
    /// first problem.
    fn sequential_scan(data: &[u8]) -> (Vec<u64>, IterEnd) {
        let mut it = Batches::new(data, 0).validate_crc(true);
        let positions = it
            .by_ref()
            .map_while(|e| e.ok())
            .map(|e| e.position())
            .collect();
        (
            positions,
            it.stopped_at().cloned().unwrap_or(IterEnd::Complete),
        )
    }

    /// The same through the regions, with `helpers` helper threads: also how many gaps the
    /// reader walked itself.
    fn chained(data: &[u8], region: usize, helpers: usize) -> (Vec<u64>, IterEnd, usize) {
        let regions = Regions::new(data, 0, region);
        regions.follow_chain(helpers, |reader| {
            let mut positions = Vec::new();
            while let Piece::Entries(entries) = reader.next_piece() {
                positions.extend(entries.iter().map(|e| e.position()));
            }
            let end = reader.end().expect("the reader stopped without a reason");
            (positions, end, reader.gap_walks())
        })
    }

    #[test]
    fn the_chain_through_regions_is_exactly_the_sequential_scan() {
        let mut rng = Rng(0x5EED_0FC4_A1A1);
        let mut gap_walks = 0;
        let mut kinds = [0usize; 3];
        for case in 0..120 {
            let region = [256, 1000, 4096][case % 3];
            let mut data = tricky_log(&mut rng, region);
            match case % 6 {
                0 => {}
                1 | 2 => {
                    for _ in 0..1 + rng.below(2) {
                        let at = rng.below(data.len() as u64) as usize;
                        data[at] ^= 1 << rng.below(8);
                    }
                }
                3 => data.truncate(rng.below(data.len() as u64) as usize),
                4 => {
                    // A zero-filled tail, as a crash can leave in preallocated blocks.
                    let at = rng.below(data.len() as u64) as usize;
                    data[at..].fill(0);
                    data.resize(data.len() + 20 * region, 0);
                }
                _ => {
                    let at = rng.below(data.len() as u64) as usize;
                    let to = (at + 8).min(data.len());
                    data[at..to].fill(0xFF);
                }
            }
            let want = sequential_scan(&data);
            kinds[match want.1 {
                IterEnd::Complete => 0,
                IterEnd::IncompleteTrailing { .. } => 1,
                IterEnd::Error(_) => 2,
            }] += 1;
            for helpers in [0, 1, 3] {
                let (positions, end, gaps) = chained(&data, region, helpers);
                assert_eq!(
                    (&positions, &end),
                    (&want.0, &want.1),
                    "case {case}, {helpers} helpers"
                );
                gap_walks += gaps;
                let scan = scan_in_regions(&data, 0, helpers + 1, region);
                let scanned: Vec<u64> = scan.batches.iter().map(|b| b.position).collect();
                assert_eq!((&scanned, &scan.end), (&want.0, &want.1), "case {case}");
            }
        }
        // The cases reach every kind of end, and look-alikes and long batches sent the reader
        // into gaps it had to walk itself.
        assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
        assert!(gap_walks > 0);
    }

    #[test]
    fn given_back_buffers_are_walked_into_again_once_old_and_stay_bounded() {
        // ~8 MiB of small batches in 64 KiB regions: ~130 regions, each buffer ~80 KiB. No
        // helper, so that the order of takes and gives is the same on every run (helpers, and a
        // reader waiting for one, walk regions ahead, whose buffers come back later).
        let value = vec![7u8; 4];
        let data: Vec<u8> = (0..110_000)
            .flat_map(|i| batch(i, std::slice::from_ref(&value)))
            .collect();
        let regions = Regions::new(&data, 0, 64 << 10);
        let (mut reused, mut largest, mut most_spare) = (0, 0, 0);
        let positions = regions.follow_chain(0, |reader| {
            let mut positions = Vec::new();
            let mut seen: Vec<*const LogEntry<'_>> = Vec::new();
            while let Piece::Entries(entries) = reader.next_piece() {
                positions.extend(entries.iter().map(|e| e.position()));
                reused += usize::from(seen.contains(&entries.as_ptr()));
                seen.push(entries.as_ptr());
                largest = largest.max(buffer_bytes(&entries));
                reader.recycle(entries);
                // Empty buffers given back (as regions without a start leave) are not kept.
                reader.recycle(Vec::new());
                let spare_bytes = lock(&regions.spare).iter().map(buffer_bytes).sum();
                most_spare = most_spare.max(spare_bytes);
            }
            positions
        });
        assert_eq!(positions, sequential_scan(&data).0);
        // The spare buffers stay at SPARE_BYTES and two buffers, whatever the file's size: a new
        // one is made only while they hold less than SPARE_BYTES and the oldest, and comes back.
        assert!(
            most_spare <= SPARE_BYTES + 2 * largest,
            "{most_spare} spare bytes, buffers of {largest}"
        );
        // Reused, but not at once: 2 MiB of ~80 KiB buffers were given back in between.
        assert!(reused > 50, "{reused} buffers reused");
        let spare = lock(&regions.spare);
        assert!(
            spare.len() * largest >= SPARE_BYTES,
            "{} spare",
            spare.len()
        );
    }

    #[test]
    fn a_reader_that_panics_stops_the_helpers_and_the_panic_comes_out() {
        // Helpers wait for the reader to come nearer; a reader that panics must not
        // leave them (and the call) waiting for ever. Run on a thread, so that a hang fails.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let values = vec![vec![1u8; 4]];
            let data: Vec<u8> = (0..110_000).flat_map(|i| batch(i, &values)).collect();
            let regions = Regions::new(&data, 0, 64 << 10);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                regions.follow_chain(1, |reader| {
                    for _ in 0..25 {
                        if let Piece::Entries(entries) = reader.next_piece() {
                            reader.recycle(entries);
                        }
                    }
                    panic!("reader failed")
                })
            }));
            let _ = done.send(outcome.is_err());
        });
        let panicked = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("follow_chain hung after its reader panicked");
        assert!(panicked);
    }

    #[test]
    fn an_empty_file_is_complete() {
        let (positions, end, _) = chained(&[], 1024, 1);
        assert_eq!((positions, end), (vec![], IterEnd::Complete));
    }

    #[test]
    fn a_bad_crc_at_a_region_start_is_the_first_problem() {
        let mut rng = Rng(42);
        let values: Vec<Vec<u8>> = vec![(0..900).map(|_| rng.next() as u8).collect()];
        let batches: Vec<Vec<u8>> = (0..20).map(|i| batch(i, &values)).collect();
        let mut data = batches.concat();
        let size = batches[0].len();
        // Region 5 (of `size` bytes each, plus one) starts at batch 5, which is corrupt.
        data[5 * size + 100] ^= 0x10;
        let (positions, end, _) = chained(&data, size + 1, 1);
        assert_eq!(
            positions,
            (0..5).map(|i| (i * size) as u64).collect::<Vec<_>>()
        );
        match end {
            IterEnd::Error(e) => {
                assert!(
                    matches!(e.kind, FormatErrorKind::CrcMismatch { .. }),
                    "{e:?}"
                );
                assert_eq!(e.position, (5 * size) as u64);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A reader alone over `data` computes at most 8 CRCs per byte of it.
    fn assert_checked_at_most_8_times(data: &[u8], region: usize) {
        let regions = Regions::new(data, 0, region);
        let mut reader = regions.reader();
        while let Piece::Entries(..) = reader.next_piece() {}
        let checked = regions.bytes_checked();
        assert!(
            checked <= 8 * data.len() as u64,
            "{checked} bytes checked for {} bytes of data",
            data.len()
        );
    }

    /// Record values full of batch-header look-alikes (magic 2, clean attributes, a length that
    /// lands on the next look-alike, a wrong CRC) at every 61 bytes: the region search computes
    /// at most two candidate CRCs per region and no look-alike longer than four regions is
    /// considered, so the CRC work stays within a small multiple of the data, and the result is
    /// still the sequential scan's.
    #[test]
    fn look_alike_headers_cannot_multiply_the_work() {
        let region = 4096;
        let unit_len = 61;
        let mut unit = vec![0u8; unit_len];
        // length = 61 * 100 - 12: the "next header" lands on another look-alike 100 units on.
        unit[8..12].copy_from_slice(&((unit_len * 100 - 12) as u32).to_be_bytes());
        unit[MAGIC_AT] = 2;
        let value: Vec<u8> = unit.repeat(200);
        let data: Vec<u8> = (0..30)
            .flat_map(|i| {
                batch(
                    i * 4,
                    &[value.clone(), value.clone(), vec![1; 10], value.clone()],
                )
            })
            .collect();
        let (want_positions, want_end) = sequential_scan(&data);
        assert_eq!(want_positions.len(), 30);
        for helpers in [0, 1, 3] {
            let (positions, end, _) = chained(&data, region, helpers);
            assert_eq!((&positions, &end), (&want_positions, &want_end));
        }
        assert_checked_at_most_8_times(&data, region);
    }

    #[test]
    fn an_intact_log_is_checked_about_once() {
        let mut rng = Rng(7);
        let values: Vec<Vec<u8>> = vec![(0..3000).map(|_| rng.next() as u8).collect()];
        let data: Vec<u8> = (0..200).flat_map(|i| batch(i, &values)).collect();
        let regions = Regions::new(&data, 0, 64 * 1024);
        std::thread::scope(|scope| {
            scope.spawn(|| regions.help());
            let mut reader = regions.reader();
            while let Piece::Entries(..) = reader.next_piece() {}
            assert_eq!(reader.gap_walks(), 0);
        });
        let checked = regions.bytes_checked();
        // Every byte once, plus one candidate batch per region after the first.
        let extra = (data.len() / (64 * 1024)) as u64 * 3100;
        assert!(
            checked >= data.len() as u64 && checked <= data.len() as u64 + extra,
            "{checked}"
        );
    }

    /// Record values that each hold a small valid batch followed by the header of a 500 KB batch:
    /// the small batch passes as the candidate start of about every other region, off the chain.
    /// The result is still the sequential scan's, and the work stays within a small multiple of
    /// the data (the walks from the look-alikes meet a CRC mismatch and stop the helpers).
    #[test]
    fn look_alike_batches_inside_values_cost_little() {
        let region = 4096;
        let inner = batch(5, &[vec![9; 20]]);
        // The 61-byte header of a real batch with a 500 KB value (and none of its records).
        let fake = batch(6, &[vec![3; 500_000]])[..61].to_vec();
        let mut rng = Rng(11);
        // Batches of about a region, the look-alike in the middle: about every other region's
        // search meets it before the next real batch start.
        let data: Vec<u8> = (0..270)
            .flat_map(|i| {
                let mut filler = || -> Vec<u8> { (0..1800).map(|_| rng.next() as u8).collect() };
                let value = [filler(), inner.clone(), fake.clone(), filler()].concat();
                batch(i, &[value])
            })
            .collect();
        assert!(data.len() > 1_000_000);
        let (want_positions, want_end) = sequential_scan(&data);
        assert_eq!(want_positions.len(), 270);
        let (positions, end, gaps) = chained(&data, region, 1);
        assert_eq!((&positions, &end), (&want_positions, &want_end));
        assert!(gaps > 0, "the look-alikes were taken as region starts");
        assert_checked_at_most_8_times(&data, region);
    }

    /// The entries by their `length` fields from the start (bytes 8..12, plus the 12 bytes before
    /// them), whatever their CRCs or lengths: (position, end).
    fn framing_chain(data: &[u8]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut p = 0usize;
        while let Some(len) = data.get(p + 8..p + 12) {
            let end = p + 12 + u32::from_be_bytes(len.try_into().unwrap()) as usize;
            out.push((p as u64, end as u64));
            if end > data.len() {
                break;
            }
            p = end;
        }
        out
    }

    #[test]
    fn a_chunk_chain_does_not_follow_a_length_that_ends_inside_the_chunks_it_has_seen() {
        let data = log(3);
        let second = framing_chain(&data)[1].0 as usize;
        let mut bad = data.clone();
        // The second entry's length field says 3 bytes: it ends before the chunk boundary.
        bad[second + 8..second + 12].copy_from_slice(&3i32.to_be_bytes());
        for split in [second + 12, second + 14, second + 17, second + 5] {
            let mut chain = ChunkChain::new();
            let first = chain.check(0, &bad[..split]);
            assert_eq!(first, Some(0..second as u64), "split at {split}");
            // Neither a panic nor a range: the chain is lost at the bad entry.
            assert_eq!(
                chain.check(split as u64, &bad[split..]),
                None,
                "split at {split}"
            );
        }
    }

    #[test]
    fn a_chunk_chain_checks_exactly_the_whole_valid_entries_of_each_chunk() {
        let mut rng = Rng(0x5eed_c4a1);
        for round in 0..300 {
            let mut data = tricky_log(&mut rng, 700);
            match round % 4 {
                0 => {}
                1 => {
                    let at = rng.below(data.len() as u64) as usize;
                    data[at] ^= 1 << rng.below(8);
                }
                2 => data.truncate(rng.below(data.len() as u64) as usize),
                _ => {
                    let at = rng.below(data.len() as u64) as usize;
                    data[at..].fill(0);
                }
            }
            // The valid entries of one sequential scan, as (position, end).
            let valid: Vec<(u64, u64)> = Batches::new(&data, 0)
                .validate_crc(true)
                .map_while(|e| e.ok())
                .map(|e| (e.position(), e.position() + e.size_in_bytes() as u64))
                .collect();
            let chain = framing_chain(&data);
            let mut chunks = ChunkChain::new();
            let (mut at, mut bounds, mut covered) = (0usize, Vec::new(), Vec::new());
            while at < data.len() {
                // Tiny chunks too: a chunk may end inside an entry's length field more than once.
                let n = match rng.below(4) {
                    0 => 1 + rng.below(12) as usize,
                    1 => 1 + rng.below(300) as usize,
                    _ => 1 + rng.below(5_000) as usize,
                }
                .min(data.len() - at);
                let chunk = &data[at..at + n];
                // Some chunks only followed, not checked (a helper whose applier is idle).
                if rng.below(3) == 0 {
                    chunks.follow(at as u64, chunk);
                    at += n;
                    continue;
                }
                bounds.push((at as u64, (at + n) as u64));
                if let Some(r) = chunks.check(at as u64, chunk) {
                    assert!(
                        r.start >= at as u64 && r.end <= (at + n) as u64,
                        "round {round}"
                    );
                    // A run of whole valid entries in these bytes, on the chain of the file.
                    let bytes =
                        &chunk[(r.start - at as u64) as usize..(r.end - at as u64) as usize];
                    let mut it = Batches::new(bytes, r.start).validate_crc(true);
                    for e in &mut it {
                        let e = e.expect("a checked entry is valid");
                        assert!(
                            chain.iter().any(|&(p, _)| p == e.position()),
                            "round {round}"
                        );
                        covered.push(e.position());
                    }
                    assert_eq!(it.stopped_at(), Some(&IterEnd::Complete), "round {round}");
                }
                at += n;
            }
            // Every valid entry that lies whole in one checked chunk was checked.
            for &(p, end) in &valid {
                if bounds.iter().any(|&(a, b)| a <= p && end <= b) {
                    assert!(
                        covered.contains(&p),
                        "round {round}: entry at {p} not checked"
                    );
                }
            }
            let mut sorted = covered.clone();
            sorted.dedup();
            assert_eq!(sorted, covered, "round {round}: an entry checked twice");
        }
    }
}
