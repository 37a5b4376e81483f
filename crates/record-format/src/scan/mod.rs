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
//! the buffer, and the [`ChainReader`](chain::ChainReader) follows it: a region's entries are used only when the chain
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
//! idles.
//!
//! A file read through a handle instead of mapped is read in chunks by one helper thread a few
//! chunks ahead of the applying thread ([`scan_file`], `read_ahead.rs`), which checks the CRCs of
//! the entries whole in a chunk ([`ChunkChain`]) while the applier has other work.
//!
//! # The boundary
//!
//! Everything parallel in seglog's reading of a log is in this module: the helper threads and
//! their atomics, the regions and their chain, the read-ahead thread, its spin-then-park wait and
//! its [`ChunkChecks`] policy. Callers see four functions, each applying the valid entries in log
//! order as [`ScannedEntry`]s and returning where the valid prefix ends:
//!
//! - [`scan_window`]: a buffer (a map, or a window read), on the helper threads;
//! - [`scan_file`]: a file of a given size through a read function, read ahead on a helper;
//! - [`scan_sequential`]: the reference, one thread, one plain iteration; the tests compare the
//!   other two with it;
//! - [`scan_log`]: the regions on a given number of threads, collecting the entries' headers.

use std::ops::Range;

use crate::batches::{incomplete_batch_error, BatchHeader, Batches, IterEnd};
use crate::error::FormatError;

mod chain;
mod entry;
mod read_ahead;
#[cfg(test)]
mod reference_tests;
mod regions;
#[cfg(test)]
mod tests;

pub use chain::ChunkChain;
pub use entry::{ScannedBatch, ScannedEntry};
pub use read_ahead::{scan_file, ChunkChecks, ReadAt, READ_CHUNK_BYTES, SCAN_WINDOW_BYTES};
use regions::{Piece, Regions};

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
            batches.extend(entries.iter().map(|e| e.entry().header()));
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

/// Where the scan of one window of a file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowEnd {
    /// The scan goes on at this absolute position: the first byte of an entry the window ends
    /// inside (the window's own start again: the window must grow), or the window's end.
    Next(u64),
    /// The scan of the file is over: every byte valid (`None`), or the valid prefix ends at the
    /// error's position (an invalid entry, or an incomplete one at the end of the file).
    Done(Option<FormatError>),
}

/// What applies each valid entry, in log order; its error ends the scan.
pub type Apply<'f, E> = dyn FnMut(&ScannedEntry<'_>) -> Result<(), E> + 'f;

/// Scans `bytes`, the bytes of a file of `file_size` bytes from absolute `position`: framing and
/// CRC of every entry on the helper threads, region by region (`region_bytes`, normally
/// [`DEFAULT_REGION_BYTES`]), while this thread applies the valid entries in order. The same
/// entries, the same order and the same end as [`scan_sequential`].
pub fn scan_window<E>(
    bytes: &[u8],
    position: u64,
    file_size: u64,
    region_bytes: usize,
    apply: &mut Apply<'_, E>,
) -> Result<WindowEnd, E> {
    let regions = Regions::new(bytes, position, region_bytes);
    let (applied, framing_end) = regions.follow_chain(helper_threads(), |reader| {
        let mut run = || -> Result<(), E> {
            while let Piece::Entries(entries) = reader.next_piece() {
                for entry in entries.iter() {
                    apply(entry)?;
                }
                reader.recycle(entries);
            }
            Ok(())
        };
        (run(), reader.end())
    });
    applied?;
    Ok(window_end(framing_end, bytes, position, file_size))
}

/// The reference scan: [`scan_window`] on this thread, one plain CRC-checking iteration.
pub fn scan_sequential<E>(
    bytes: &[u8],
    position: u64,
    file_size: u64,
    apply: &mut Apply<'_, E>,
) -> Result<WindowEnd, E> {
    let mut it = Batches::new(bytes, position).validate_crc(true);
    for entry in &mut it {
        match entry {
            Ok(entry) => apply(&ScannedEntry::new(entry))?,
            Err(_) => break,
        }
    }
    Ok(window_end(
        it.stopped_at().cloned(),
        bytes,
        position,
        file_size,
    ))
}

/// [`scan_sequential`] without checking again the CRCs of `checked`: absolute positions of a
/// chain of whole entries whose CRCs another thread checked in these same bytes ([`ChunkChain`]).
/// They are trusted only once this walk's own chain arrives exactly at the range's start.
fn scan_trusting<E>(
    bytes: &[u8],
    position: u64,
    file_size: u64,
    checked: Option<Range<u64>>,
    apply: &mut Apply<'_, E>,
) -> Result<WindowEnd, E> {
    let mut it = Batches::new(bytes, position).validate_crc(true);
    let mut trusted = false;
    loop {
        if let Some(c) = &checked {
            let at = it.valid_prefix_end();
            trusted |= at == c.start;
            it.set_validate_crc(!(trusted && at < c.end));
        }
        match it.next() {
            Some(Ok(entry)) => apply(&ScannedEntry::new(entry))?,
            Some(Err(_)) | None => break,
        }
    }
    Ok(window_end(
        it.stopped_at().cloned(),
        bytes,
        position,
        file_size,
    ))
}

/// Where the scan goes on after the window `bytes` read at `position` of a file of `file_size`
/// bytes ended with `framing_end`.
fn window_end(
    framing_end: Option<IterEnd>,
    bytes: &[u8],
    position: u64,
    file_size: u64,
) -> WindowEnd {
    let window_end = position + bytes.len() as u64;
    let at_file_end = window_end >= file_size;
    match framing_end {
        Some(IterEnd::Error(e)) => WindowEnd::Done(Some(e)),
        Some(IterEnd::IncompleteTrailing { position: at, .. }) if !at_file_end => {
            WindowEnd::Next(at)
        }
        Some(IterEnd::IncompleteTrailing {
            position: at,
            bytes: n,
        }) => {
            let rest = bytes
                .get(usize::try_from(at - position).unwrap_or(usize::MAX)..)
                .unwrap_or_default();
            WindowEnd::Done(Some(incomplete_batch_error(rest, at, n)))
        }
        _ if at_file_end => WindowEnd::Done(None),
        _ => WindowEnd::Next(window_end),
    }
}

/// Helper threads of a scan: every other core, at most three.
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
