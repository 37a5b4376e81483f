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
//! idles. [`scan_log`] is this with `threads - 1` helpers; segment-store's recovery applies each
//! [`Piece`] as it comes.

use crate::batches::{BatchHeader, IterEnd, LogEntry};
use crate::error::FormatError;

mod chain;
mod regions;
#[cfg(test)]
mod tests;

pub use chain::ChunkChain;
pub use regions::{Piece, Regions};

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
