//! A chain of chunks read ahead of the scan, and its reader.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::entry::ScannedEntry;
use super::regions::{entry_end, Piece, Regions, Span, LENGTH_END};
use crate::batches::{Batches, IterEnd};

/// The applier's side: the file's entries in log order, exactly as one sequential scan frames
/// them, with their CRC verdicts.
#[derive(Debug)]
pub(crate) struct ChainReader<'c, 'a> {
    pub(super) regions: &'c Regions<'a>,
    /// Where the chain is: the end of the entries handed out so far.
    pub(super) pos: usize,
    /// First region whose start may still be at or after `pos`.
    pub(super) region: usize,
    pub(super) done: bool,
    pub(super) end: Option<IterEnd>,
    /// How many gaps between region starts this thread walked itself.
    pub(super) gap_walks: usize,
}

impl<'c, 'a> ChainReader<'c, 'a> {
    /// The next entries of the chain.
    pub(crate) fn next_piece(&mut self) -> Piece<'a> {
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
    pub(crate) fn recycle(&self, mut entries: Vec<ScannedEntry<'a>>) {
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
    pub(crate) fn end(&self) -> Option<IterEnd> {
        self.end.clone()
    }

    /// How many gaps between region starts the reader walked itself (0 when every region's
    /// candidate start was on the chain).
    #[cfg(test)]
    pub(crate) fn gap_walks(&self) -> usize {
        self.gap_walks
    }
}

/// Calls [`Regions::stop`] when dropped.
pub(super) struct StopOnDrop<'r, 'a>(pub(super) &'r Regions<'a>);

impl Drop for StopOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Bytes an entry buffer holds.
pub(super) fn buffer_bytes(entries: &Vec<ScannedEntry<'_>>) -> usize {
    entries
        .capacity()
        .saturating_mul(std::mem::size_of::<ScannedEntry<'_>>())
}

/// Locks `m`; a walker that panicked leaves nothing half-written in these slots (each is set or
/// taken whole), so a poisoned lock is used as it is.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
