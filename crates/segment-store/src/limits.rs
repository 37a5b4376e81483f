//! The process's file-descriptor limit and use (Linux only: `/proc/self/limits`,
//! `/proc/self/fd`; elsewhere `None`), for tools and tests that report or budget descriptors.
//!
//! Nothing seglog keeps open grows with the segments or partitions: a log opens an inactive
//! segment when it reads or writes it and keeps at most
//! [`crate::log::MAX_OPEN_INACTIVE_SEGMENTS`] of them open afterwards (each up to
//! [`DESCRIPTORS_PER_SEGMENT`] descriptors), recovery closes each segment once it has written it,
//! and a log directory takes one lock for all its partitions and keeps none of their segments
//! open after loading. So no recovery is refused up front for its size. A
//! [`FileSlice`](crate::FileSlice) handed out by a fetch keeps its `.log`'s descriptor open until
//! it is dropped, whatever the log closes meanwhile.

/// Descriptors an open inactive segment holds at most: the `.log`'s handle and its read-only
/// map, the mapped `.index` and `.timeindex` (each map keeps its file locked; the `.txnindex` is
/// opened when it is used). The active segment holds as many (its `.log`'s map once the file
/// reaches 1 MiB).
pub const DESCRIPTORS_PER_SEGMENT: u64 = 4;

#[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_and_the_open_count_are_read_on_linux() {
        if cfg!(target_os = "linux") {
            let limit = open_files_limit().expect("RLIMIT_NOFILE");
            let open = open_files().expect("open descriptors");
            assert!(open >= 3 && open < limit, "{open} open of {limit}");
        }
    }
}
