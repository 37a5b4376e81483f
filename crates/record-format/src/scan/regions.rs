//! The regions of a buffer and their scan: each region's entries found and checked, by the
//! reader or a helper thread, and handed out in order as [`Piece`]s.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::chain::{buffer_bytes, lock, ChainReader, StopOnDrop};
use super::entry::ScannedEntry;
use super::{
    ATTRIBUTES_AT, CLAIMED, CRC_AT, CRC_END, LAST_OFFSET_DELTA_AT, LOOKAHEAD_REGIONS, MAGIC_AT,
    MAX_CANDIDATE_CRCS, MAX_ENTRY_REGIONS, MIN_V2_LENGTH, UNCLAIMED,
};
use crate::batches::{Batches, IterEnd};
use crate::cursor::be_i32_at;
use crate::wire::{LOG_OVERHEAD, RECORD_OVERHEAD_V0, SIZE_OFFSET};

/// The entries walked from one start position.
#[derive(Debug)]
pub(super) struct Span<'a> {
    /// Position (in the data) just past the last entry.
    pub(super) end: usize,
    /// The valid entries walked.
    pub(super) entries: Vec<ScannedEntry<'a>>,
    /// Set when the walk met the end of the data, a malformed entry or an entry whose CRC (or
    /// legacy checksum) does not match (an error at that entry's start) before its stop position.
    pub(super) frame_end: Option<IterEnd>,
}

/// One file's regions, their starts and their walked spans.
#[derive(Debug)]
pub(crate) struct Regions<'a> {
    pub(super) data: &'a [u8],
    base_position: u64,
    region_bytes: usize,
    /// Candidate batch start of each region (`None`: no candidate in it). Region 0 starts at 0.
    starts: Vec<OnceLock<Option<usize>>>,
    claims: Vec<AtomicU8>,
    /// Each region's walk, from its walker to the chain reader, who takes it (or leaves it, if
    /// the chain does not arrive at the region's start). Only the claimer of a region walks it,
    /// and the reader takes a region's walk at most once.
    pub(super) spans: Vec<Mutex<Option<Span<'a>>>>,
    /// Entry buffers the reader is done with, oldest first, for the next walks (the entries in
    /// flight stay a few regions' worth, not the file's). A buffer is taken again only once
    /// [`SPARE_BYTES`] were given back after it.
    pub(super) spare: Mutex<VecDeque<Vec<ScannedEntry<'a>>>>,
    /// Next region a helper tries to claim.
    next: AtomicUsize,
    /// The region the chain reader has reached: helpers stay at most [`MAX_LEAD`] regions
    /// ahead of it, so that the entries they walked are still in the shared cache when the
    /// reader applies them.
    pub(super) reached: AtomicUsize,
    /// A chain reader follows the helpers (set by [`Regions::follow_chain`]); without one
    /// (`scan_log`) helpers are not held back.
    chained: AtomicBool,
    /// No further unit starts (running ones finish).
    stopped: AtomicBool,
    /// See [`Regions::bytes_checked`].
    checked: AtomicU64,
}

/// How many regions a helper may walk ahead of the chain reader.
pub(crate) const MAX_LEAD: usize = 8;

/// Bytes of entry buffers the reader gives back before the oldest one is walked into again.
/// The reader has just read a buffer it gives back: written again at once, each of its cache
/// lines has to be taken back from the reader's core first (the walking thread spent a third of
/// its time waiting for those stores). Once about this much more was given back after it, the
/// buffer has left the reader's cache for the shared one, where the writer's stores find it
/// fastest (the rule: a buffer is reused only once it is cold in the reader's cache).
pub(super) const SPARE_BYTES: usize = 2 << 20;

/// What the applier gets next.
#[derive(Debug)]
pub(crate) enum Piece<'a> {
    /// The next entries of the chain, every one of them valid (the first invalid entry ends the
    /// chain: see `ChainReader::end`). Give the buffer back with `ChainReader::recycle` once
    /// done with it.
    Entries(Vec<ScannedEntry<'a>>),
    /// The chain has no more entries (see `ChainReader::end`).
    Finished,
}

impl<'a> Regions<'a> {
    /// `data` is the whole file; its first byte is at `base_position`; regions of `region` bytes
    /// ([`DEFAULT_REGION_BYTES`](super::DEFAULT_REGION_BYTES) unless a test wants many).
    pub(crate) fn new(data: &'a [u8], base_position: u64, region: usize) -> Self {
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
    pub(super) fn count(&self) -> usize {
        self.spans.len()
    }

    /// Does units of work until every region is taken or [`Self::stop`] was called.
    pub(crate) fn help(&self) {
        while self.work(true) {}
    }

    /// Claims the next free region in file order and walks it. `false` once there is none. A
    /// `helper` (not the chain reader itself) stays at most [`MAX_LEAD`] regions ahead of the
    /// reader.
    pub(super) fn work(&self, helper: bool) -> bool {
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

    pub(super) fn claim(&self, k: usize) -> bool {
        self.claims.get(k).is_some_and(|c| {
            c.compare_exchange(UNCLAIMED, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Walks region `k` from its start to the next region's start (the caller claimed it).
    pub(super) fn process(&self, k: usize) {
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
    fn entry_buffer(&self) -> Vec<ScannedEntry<'a>> {
        let mut spare = lock(&self.spare);
        let after_oldest: usize = spare.iter().skip(1).map(buffer_bytes).sum();
        if after_oldest < SPARE_BYTES {
            return Vec::new();
        }
        spare.pop_front().unwrap_or_default()
    }

    /// The candidate start of region `k` (computed once, by whoever asks first).
    pub(super) fn start(&self, k: usize) -> Option<usize> {
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
    #[cfg(test)]
    pub(crate) fn bytes_checked(&self) -> u64 {
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
    pub(super) fn walk(&self, start: usize, stop: usize, bounded: bool) -> Span<'a> {
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
                    span.entries.push(ScannedEntry::new(e));
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
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Runs `f` over this data's [`ChainReader`] while up to `helpers` threads walk regions (none
    /// when there is a single region; a thread that cannot be spawned leaves its share to the
    /// others), then stops and joins them, so no helper thread outlives the call.
    pub(crate) fn follow_chain<R>(
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
    pub(crate) fn reader(&self) -> ChainReader<'_, 'a> {
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

/// Bytes of an entry up to the end of its `length` field (offset, length).
pub(super) const LENGTH_END: usize = LOG_OVERHEAD;

/// Where the entry at `position` whose first bytes are `head` (at least [`LENGTH_END`]) ends by
/// its `length` field; `None` for a length the iterator refuses (shorter than the smallest
/// entry), so that the chain never goes on inside bytes it has already passed.
pub(super) fn entry_end(position: u64, head: &[u8]) -> Option<u64> {
    let len = be_i32_at(head, SIZE_OFFSET);
    if len < RECORD_OVERHEAD_V0 as i32 {
        return None;
    }
    position.checked_add(LENGTH_END as u64 + u64::try_from(len).ok()?)
}
