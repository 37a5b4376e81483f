//! Validating a whole `.log` buffer on several threads.
//!
//! Walking the batch headers is cheap (one length field per batch); checking every CRC reads every
//! byte. [`scan_log`] walks the headers once on the calling thread, then checks the CRCs of
//! contiguous runs of batches on `threads` scoped threads, and reports exactly what a sequential
//! [`BatchIterator`](crate::BatchIterator) with `validate_crc(true)` would: the batches of the valid
//! prefix, where it ends, and the first error in file order.

use crate::batches::{Batches, IterEnd, LogEntry};
use crate::error::FormatError;

/// One entry of the valid prefix: where it is and the offsets it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedBatch {
    /// Absolute position of the entry.
    pub position: u64,
    /// Entry size including the 12-byte log overhead.
    pub size: u32,
    /// Magic byte.
    pub magic: i8,
    /// Last offset of the entry.
    pub last_offset: i64,
}

/// Result of [`scan_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// Entries of the valid prefix, in file order.
    pub batches: Vec<ScannedBatch>,
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
    let mut it = Batches::new(bytes, base_position);
    let mut entries: Vec<LogEntry<'_>> = Vec::new();
    for e in &mut it {
        match e {
            Ok(entry) => entries.push(entry),
            Err(_) => break,
        }
    }
    let structural_end = it.stopped_at().cloned().unwrap_or(IterEnd::Complete);

    // First entry (index) whose CRC fails, in file order.
    let first_bad = first_invalid(&entries, threads.max(1));
    let crc_failed = first_bad.is_some();
    let (kept, end) = match first_bad {
        Some((index, err)) => (index, IterEnd::Error(err)),
        None => (entries.len(), structural_end),
    };
    let batches: Vec<ScannedBatch> = entries
        .iter()
        .take(kept)
        .map(|e| ScannedBatch {
            position: e.position(),
            size: u32::try_from(e.size_in_bytes()).unwrap_or(u32::MAX),
            magic: e.magic(),
            last_offset: e.last_offset(),
        })
        .collect();
    let valid_prefix_end = batches
        .last()
        .map_or(base_position, |b| b.position + u64::from(b.size));
    let end = match end {
        // Re-position a CRC error at the start of its entry, as the sequential iterator does.
        IterEnd::Error(e) if crc_failed => {
            IterEnd::Error(FormatError::new(e.kind, valid_prefix_end))
        }
        other => other,
    };
    LogScan {
        batches,
        valid_prefix_end,
        end,
    }
}

fn first_invalid(entries: &[LogEntry<'_>], threads: usize) -> Option<(usize, FormatError)> {
    let check = |from: usize, chunk: &[LogEntry<'_>]| {
        chunk
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.validate().err().map(|err| (from + i, err)))
    };
    if threads <= 1 || entries.len() < 2 {
        return check(0, entries);
    }
    // Split into `threads` runs of about equal bytes.
    let total: usize = entries.iter().map(LogEntry::size_in_bytes).sum();
    let per = total / threads + 1;
    let mut runs: Vec<(usize, &[LogEntry<'_>])> = Vec::with_capacity(threads);
    let mut start = 0;
    let mut acc = 0;
    for (i, e) in entries.iter().enumerate() {
        acc += e.size_in_bytes();
        if acc >= per {
            runs.push((start, entries.get(start..=i).unwrap_or(&[])));
            start = i + 1;
            acc = 0;
        }
    }
    if start < entries.len() {
        runs.push((start, entries.get(start..).unwrap_or(&[])));
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .skip(1)
            .map(|&(from, chunk)| s.spawn(move || check(from, chunk)))
            .collect();
        let mut results = Vec::with_capacity(runs.len());
        if let Some(&(from, chunk)) = runs.first() {
            results.push(check(from, chunk));
        }
        for h in handles {
            // A panic in a CRC check cannot happen (no indexing, no unwrap); treat it as "no
            // result" rather than propagating.
            results.push(h.join().unwrap_or(None));
        }
        results.into_iter().flatten().min_by_key(|(i, _)| *i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordBatchBuilder;

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
                let s = scan_log(&bad, 0, threads);
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
            let s = scan_log(&clean[..cut], 0, 2);
            let (positions, end, stop) = sequential(&clean[..cut], 0);
            assert_eq!(s.batches.len(), positions.len());
            assert_eq!((s.valid_prefix_end, s.end), (end, stop));
        }
    }
}
