//! The process's file-descriptor budget, checked before recovery opens a partition's segments.
//!
//! An open log keeps up to four descriptors per segment (the `.log`'s handle, the read-only map
//! of a segment that is not the active one, which holds a descriptor of its own, and the mapped
//! `.index` and `.timeindex`) and one per partition (its `.lock`). A recovery that would need more than
//! `RLIMIT_NOFILE` leaves fails here, before anything is changed, with one line that names the
//! limit, rather than with `EMFILE` half way through (after it created index files and wrote
//! snapshots). Linux only (`/proc/self/limits`, `/proc/self/fd`); elsewhere nothing is checked.

use std::io;
use std::path::Path;

use crate::error::{Result, SegmentError};

/// Descriptors an open log keeps per segment at most: the `.log`'s handle and its read-only map
/// (every segment but the active one is mapped when the log opens), the mapped `.index` and
/// `.timeindex` (the `.txnindex` is opened when it is used).
pub const DESCRIPTORS_PER_SEGMENT: u64 = 4;

/// Descriptors an open log keeps for its active segment (not mapped: one less than
/// [`DESCRIPTORS_PER_SEGMENT`]) and its `.lock` together: as many as for any other segment.
const ACTIVE_SEGMENT_AND_LOCK: u64 = DESCRIPTORS_PER_SEGMENT;

/// A budget of at most `limit / SMALL_BUDGET_SHARE` descriptors is not checked: counting the open
/// descriptors lists `/proc/self/fd`, which costs as much as there are open, and a log directory
/// of many small partitions would pay it for each (its partitions are checked together first,
/// by [`check_descriptors`] on all of them).
const SMALL_BUDGET_SHARE: u64 = 16;

/// Descriptors kept free for what recovery opens for a moment (a snapshot, a checkpoint, a
/// segment being scanned on each thread, the standard streams).
pub const DESCRIPTOR_RESERVE: u64 = 64;

/// The soft `RLIMIT_NOFILE` of this process (`None`: unlimited or unknown).
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    // "Max open files            1024                 1048576              files"
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The descriptors this process has open now (`None`: unknown).
pub fn open_files() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // Less the one the listing itself holds.
    Some((entries.count() as u64).saturating_sub(1))
}

/// Fails, naming the limit, if keeping `segments` segments of `partitions` partitions open (each
/// partition has at least one segment, its active one; see [`DESCRIPTORS_PER_SEGMENT`]) needs more
/// descriptors than `RLIMIT_NOFILE` leaves free, with [`DESCRIPTOR_RESERVE`] kept back. A budget of
/// at most a sixteenth of the limit is let through uncounted. `dir` is the directory the error is
/// about.
pub fn check_descriptors(dir: &Path, segments: u64, partitions: u64) -> Result<()> {
    let Some(limit) = open_files_limit() else {
        return Ok(());
    };
    // Every segment but each partition's active one is mapped; the active one and the `.lock`
    // take as many as a mapped segment.
    let kept = segments
        .saturating_sub(partitions)
        .saturating_mul(DESCRIPTORS_PER_SEGMENT)
        .saturating_add(partitions.saturating_mul(ACTIVE_SEGMENT_AND_LOCK));
    if kept.saturating_mul(SMALL_BUDGET_SHARE) <= limit {
        return Ok(());
    }
    let Some(open) = open_files() else {
        return Ok(());
    };
    let needed = kept.saturating_add(DESCRIPTOR_RESERVE);
    let free = limit.saturating_sub(open);
    if needed <= free {
        return Ok(());
    }
    Err(SegmentError::Io {
        path: dir.to_path_buf(),
        op: "load",
        source: io::Error::other(format!(
            "{segments} segment(s) of {partitions} partition(s) need {needed} file descriptors \
             ({DESCRIPTORS_PER_SEGMENT} per segment, the active one's and the lock together as \
             many, {DESCRIPTOR_RESERVE} spare) \
             but RLIMIT_NOFILE (ulimit -n) is {limit} with {open} open; nothing was changed: \
             raise ulimit -n to at least {}",
            needed.saturating_add(open)
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_and_the_open_count_are_read_on_linux() {
        if cfg!(target_os = "linux") {
            let limit = open_files_limit().expect("RLIMIT_NOFILE");
            let open = open_files().expect("open descriptors");
            assert!(open >= 3 && open < limit, "{open} open of {limit}");
            // A budget that cannot fit is refused, naming the limit.
            let e = check_descriptors(Path::new("d"), limit, 1).unwrap_err();
            assert!(e.to_string().contains("RLIMIT_NOFILE"), "{e}");
            check_descriptors(Path::new("d"), 1, 1).unwrap();
            // One segment per partition: four descriptors each (three for the unmapped active
            // segment, one for the lock), so a quarter of what is free fits (with room for the
            // descriptors other tests open and close meanwhile).
            let partitions = limit.saturating_sub(open + DESCRIPTOR_RESERVE) / 4;
            check_descriptors(Path::new("d"), partitions - 32, partitions - 32).unwrap();
            check_descriptors(Path::new("d"), partitions + 32, partitions + 32).unwrap_err();
        }
    }
}
