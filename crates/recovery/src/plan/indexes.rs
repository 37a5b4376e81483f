//! Index checks: reading the offset, time and transaction indexes of a segment and Kafka's
//! sanity checks over their bytes, as [`IndexFinding`]s.

use std::io;
use std::path::{Path, PathBuf};

use segment_store::internals::FileKind;
use segment_store::internals::{
    index_storage, OffsetIndexView, ReadOnlyBytes, SegmentScan, TimeIndexView, TxnIndexView,
};
use segment_store::{DirLock, IndexCorruption, OffsetPosition, SegmentError};

use super::types::{IndexFinding, IndexProblem};
use crate::loader::LoadOptions;
use crate::log::PartitionLogError;
use segment_store::internals::TXN_INDEX_ENTRY_SIZE as TXN_ENTRY_SIZE;

/// The most offset-index entries sorted by position to check an index whose positions are out of
/// order ([`IndexProblem::OutOfOrderNotChecked`] past it).
pub const MAX_SORTED_ENTRIES: usize = 1 << 20;

/// How many entry problems ([`IndexProblem::EntryBeyondLog`], `NotBatchBoundary`,
/// `OffsetMismatch`, `TimeEntryBeyondLog`) are listed per segment and kind of check.
pub const MAX_ENTRY_FINDINGS: usize = 1000;

/// Pushes `f` if `findings` holds fewer than [`MAX_ENTRY_FINDINGS`]; counts it otherwise.
fn push_capped(findings: &mut Vec<IndexFinding>, f: IndexFinding, omitted: &mut u64) {
    if findings.len() < MAX_ENTRY_FINDINGS {
        findings.push(f);
    } else {
        *omitted += 1;
    }
}

/// The [`IndexProblem::MoreEntryProblems`] finding for `omitted` problems, if any.
fn more_entry_problems(omitted: u64) -> Option<IndexFinding> {
    (omitted > 0).then_some(IndexFinding {
        kind: FileKind::Index,
        problem: IndexProblem::MoreEntryProblems { count: omitted },
    })
}

/// Reads an index file that may be missing. Offset and time indexes live on the real file system
/// where the storage can map (`segment_store::internals::index_storage`), and there, under the directory
/// lock, those of `file_records::MAP_MIN_BYTES` or more are mapped rather than read ([`ReadOnlyBytes::open`]): loading looks at their first and
/// last entries only, and a crashed broker's are preallocated to 10 MiB of zeros each (reading
/// them took a tenth of recovering a 1 GiB segment).
fn read_index(
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    path: &Path,
    kind: FileKind,
) -> Result<ReadOnlyBytes, PartitionLogError> {
    let r = if matches!(kind, FileKind::Index | FileKind::TimeIndex) {
        open_index(index_storage(opts.config.env.storage.as_ref()), path, lock)
    } else {
        open_index(opts.config.env.storage.as_ref(), path, None)
    }
    .map_err(PartitionLogError::from);
    match r {
        Err(PartitionLogError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Ok(ReadOnlyBytes::Owned(Vec::new()))
        }
        Err(PartitionLogError::Segment(e)) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            Ok(ReadOnlyBytes::Owned(Vec::new()))
        }
        r => r,
    }
}

/// The longest index read into memory where it cannot be mapped (storage that cannot map, or no
/// guarded map to be had): a longer one is [`SegmentError::FileTooLarge`].
const MAX_INDEX_READ_BYTES: u64 = 32 << 20;

/// [`ReadOnlyBytes::open`] of an index (or a `.swap`), never read whole into memory when large:
/// without the lock (`verify`) a file of [`segment_store::internals::MAP_MIN_BYTES`] or more
/// is a guarded map (page cache, not the process's memory); where no map can be made, one longer
/// than [`MAX_INDEX_READ_BYTES`] is refused with its size.
pub(super) fn open_index(
    storage: &dyn segment_store::Storage,
    path: &Path,
    lock: Option<&DirLock>,
) -> Result<ReadOnlyBytes, SegmentError> {
    let handle = storage.open(path, segment_store::OpenMode::Read)?;
    let size = handle.len()?;
    if lock.is_none() {
        if let Some(map) = ReadOnlyBytes::map_guarded(storage, path, size)? {
            return Ok(map);
        }
    }
    if ReadOnlyBytes::map_lock(storage, lock, size).is_none() && size > MAX_INDEX_READ_BYTES {
        return Err(SegmentError::FileTooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_INDEX_READ_BYTES,
        });
    }
    ReadOnlyBytes::from_handle(storage, path, handle, size, lock)
}

/// The check of one scanned segment's offset and time index entries against its batches, over
/// the index files' bytes (no copy of the entries, unless the offset index is out of order).
pub(super) struct IndexCheck {
    base: i64,
    /// The offset index's bytes.
    index: ReadOnlyBytes,
    /// The time index's bytes.
    time: ReadOnlyBytes,
    /// The `.log`'s size: entries at or past it were reported already and are skipped.
    log_size: u64,
    /// How many offset-index entries there are (up to a zero-filled preallocated tail).
    count: usize,
    /// The entries inside the `.log` as (entry number, entry) by position, when the index does
    /// not list them in that order itself.
    sorted: Option<Vec<(usize, OffsetPosition)>>,
    /// The next entry (of `sorted`, or of the index) not compared yet.
    next: usize,
    /// That entry's position (`u64::MAX` when there is none): most batches are before it, and
    /// one comparison passes them (the check runs for every batch on the planning thread).
    next_position: u64,
    findings: Vec<IndexFinding>,
    /// Findings past [`MAX_ENTRY_FINDINGS`]: counted only.
    omitted: u64,
}

impl IndexCheck {
    /// The check of the offset index `index` and time index `time` of the segment at `base` whose
    /// `.log` has `log_size` bytes, and the findings about entries past the `.log`'s end.
    fn new(
        base: i64,
        index: ReadOnlyBytes,
        time: ReadOnlyBytes,
        log_size: u64,
    ) -> (Self, Vec<IndexFinding>) {
        let view = OffsetIndexView::new(base, index.bytes());
        let mut beyond = Vec::new();
        let mut beyond_omitted = 0u64;
        let (mut count, mut in_order, mut last_position) = (0, true, 0u32);
        while let Some(e) = view.entry(count) {
            // No real entry points at position 0: the preallocated tail starts here.
            if e.offset == base && e.position.0 == 0 {
                break;
            }
            if u64::from(e.position.0) >= log_size {
                let f = IndexFinding {
                    kind: FileKind::Index,
                    problem: IndexProblem::EntryBeyondLog {
                        entry: count,
                        offset: e.offset,
                        position: e.position.0,
                        log_size,
                    },
                };
                push_capped(&mut beyond, f, &mut beyond_omitted);
            } else {
                in_order &= e.position.0 >= last_position;
                last_position = e.position.0;
            }
            count += 1;
        }
        // An index not in position order is checked through a sorted copy of its entries: past
        // MAX_SORTED_ENTRIES (a copy of 24 MiB) it is reported as such, not checked entry by entry.
        let too_many = !in_order && count > MAX_SORTED_ENTRIES;
        if too_many {
            beyond.push(IndexFinding {
                kind: FileKind::Index,
                problem: IndexProblem::OutOfOrderNotChecked { entries: count },
            });
        }
        let sorted = (!in_order).then(|| {
            if too_many {
                return Vec::new();
            }
            let mut entries: Vec<(usize, OffsetPosition)> = (0..count)
                .filter_map(|n| view.entry(n).map(|e| (n, e)))
                .filter(|(_, e)| u64::from(e.position.0) < log_size)
                .collect();
            entries.sort_by_key(|(n, e)| (e.position, *n));
            entries
        });
        let mut check = IndexCheck {
            base,
            index,
            time,
            log_size,
            count,
            sorted,
            next: 0,
            next_position: 0,
            findings: Vec::new(),
            omitted: 0,
        };
        check.next_position = check.peek_position();
        beyond.extend(more_entry_problems(beyond_omitted));
        (check, beyond)
    }

    /// Both indexes are empty: [`Self::finish`] finds nothing whatever the scan.
    pub(super) fn is_empty(&self) -> bool {
        self.index.bytes().is_empty() && self.time.bytes().is_empty()
    }

    /// The next entry inside the `.log` in position order, not consumed.
    fn peek(&mut self) -> Option<(usize, OffsetPosition)> {
        match &self.sorted {
            Some(entries) => entries.get(self.next).copied(),
            None => {
                let view = OffsetIndexView::new(self.base, self.index.bytes());
                while self.next < self.count {
                    let e = view.entry(self.next)?;
                    if u64::from(e.position.0) < self.log_size {
                        return Some((self.next, e));
                    }
                    self.next += 1;
                }
                None
            }
        }
    }

    /// The position of [`Self::peek`]'s entry, `u64::MAX` when there is none.
    fn peek_position(&mut self) -> u64 {
        self.peek()
            .map_or(u64::MAX, |(_, e)| u64::from(e.position.0))
    }

    /// The batch at `position` with `last_offset`, in log order.
    pub(super) fn batch(&mut self, position: u64, last_offset: i64) {
        if position < self.next_position {
            return;
        }
        while let Some((n, e)) = self.peek() {
            let p = u64::from(e.position.0);
            if p > position {
                self.next_position = p;
                return;
            }
            self.next += 1;
            let problem = if p < position {
                IndexProblem::NotBatchBoundary {
                    entry: n,
                    offset: e.offset,
                    position: e.position.0,
                }
            } else if e.offset != last_offset {
                IndexProblem::OffsetMismatch {
                    entry: n,
                    index_offset: e.offset,
                    log_offset: last_offset,
                    position: e.position.0,
                }
            } else {
                continue;
            };
            let f = IndexFinding {
                kind: FileKind::Index,
                problem,
            };
            push_capped(&mut self.findings, f, &mut self.omitted);
        }
        self.next_position = u64::MAX;
    }

    /// The findings, once the scan is done: entries left inside the valid prefix are not on a
    /// batch boundary (those in the cut part are covered by the cut); a clean segment's time
    /// index must not name offsets past its last one.
    pub(super) fn finish(mut self, scan: &SegmentScan) -> Vec<IndexFinding> {
        self.batch(scan.valid_bytes, i64::MIN);
        // `batch(valid_bytes, ..)` compared an entry at exactly `valid_bytes` as a mismatch: at
        // the cut it belongs to the part recovery cuts.
        self.findings.retain(|f| {
            !matches!(
                f.problem,
                IndexProblem::OffsetMismatch {
                    log_offset: i64::MIN,
                    ..
                }
            )
        });
        if scan.truncated_bytes() == 0 {
            if let Some(last) = scan.last_offset {
                let view = TimeIndexView::new(self.base, self.time.bytes());
                let entries = (0..view.entries())
                    .map_while(|n| view.entry(n).map(|e| (n, e)))
                    .take_while(|(_, e)| !(e.offset == self.base && e.timestamp == 0));
                let mut time_findings = Vec::new();
                for (n, e) in entries {
                    if e.offset > last {
                        let f = IndexFinding {
                            kind: FileKind::TimeIndex,
                            problem: IndexProblem::TimeEntryBeyondLog {
                                entry: n,
                                timestamp: e.timestamp,
                                offset: e.offset,
                                last_offset: last,
                            },
                        };
                        push_capped(&mut time_findings, f, &mut self.omitted);
                    }
                }
                self.findings.extend(time_findings);
            }
        }
        self.findings.extend(more_entry_problems(self.omitted));
        self.findings
    }

    /// The offset index's bytes.
    pub(super) fn index_bytes(&self) -> &[u8] {
        self.index.bytes()
    }
}

/// The sanity checks of one segment's three indexes (Kafka's, through the shared views), and
/// for audited plans every offset- and time-index entry to check against the batches. Returns
/// what [`IndexesChecked`] holds.
pub(super) fn check_indexes(
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    base: i64,
    size: u64,
    [index_path, time_path, txn_path]: [Option<PathBuf>; 3],
    audit: bool,
) -> Result<IndexesChecked, PartitionLogError> {
    // A file the segment does not have (after leftovers) reads as empty.
    let read = |path: &Option<PathBuf>, kind| match path {
        Some(path) => read_index(opts, lock, path, kind),
        None => Ok(ReadOnlyBytes::Owned(Vec::new())),
    };
    let mut index_findings = Vec::new();
    // Beyond Kafka's sanity checks: the offset and time index of a segment holding batches must
    // be there (Kafka throws `NoSuchFileException` for a missing offset index and recovers the
    // segment; a missing time index it recreates empty, seglog rebuilds it too), and no longer
    // than `segment.index.bytes` (opening the active segment's would fail to resize it).
    let max = opts.config.log.log.max_index_size;
    let presence = |path: &Option<PathBuf>, len: usize| {
        if path.is_none() && size > 0 {
            Err(IndexCorruption::Missing)
        } else if len as u64 > max {
            Err(IndexCorruption::LargerThanMax {
                len: len as u64,
                max,
            })
        } else {
            Ok(())
        }
    };
    let index = read(&index_path, FileKind::Index)?;
    if let Err(problem) = presence(&index_path, index.bytes().len())
        .and_then(|()| OffsetIndexView::new(base, index.bytes()).sanity_check())
    {
        index_findings.push(IndexFinding {
            kind: FileKind::Index,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let time = read(&time_path, FileKind::TimeIndex)?;
    if let Err(problem) = presence(&time_path, time.bytes().len())
        .and_then(|()| TimeIndexView::new(base, time.bytes()).sanity_check())
    {
        index_findings.push(IndexFinding {
            kind: FileKind::TimeIndex,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let txn = read(&txn_path, FileKind::TxnIndex)?;
    let txn = txn.bytes();
    if let Err(problem) = TxnIndexView::new(base, txn).sanity_check() {
        index_findings.push(IndexFinding {
            kind: FileKind::TxnIndex,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let sane = index_findings.is_empty();
    if txn.len() % TXN_ENTRY_SIZE != 0 {
        index_findings.push(IndexFinding {
            kind: FileKind::TxnIndex,
            problem: IndexProblem::TxnPartialEntry {
                len: txn.len() as u64,
            },
        });
    }
    // Checking every index entry is for audited plans (`verify`); loading needs only the
    // sanity checks above. The offset-index entries past the end of the `.log` are reported at
    // once, the others checked against the batches if the segment is scanned.
    if audit {
        let (check, beyond) = IndexCheck::new(base, index, time, size);
        index_findings.extend(beyond);
        return Ok(IndexesChecked {
            index: ReadOnlyBytes::Owned(Vec::new()),
            findings: index_findings,
            sane,
            check: Some(check),
        });
    }
    Ok(IndexesChecked {
        index,
        findings: index_findings,
        sane,
        check: None,
    })
}

/// What [`check_indexes`] found for one segment.
pub(super) struct IndexesChecked {
    /// The offset index's bytes (in `check` instead, when there is one).
    pub(super) index: ReadOnlyBytes,
    /// Every finding.
    pub(super) findings: Vec<IndexFinding>,
    /// Whether Kafka's sanity checks passed (a partial `.txnindex` entry is reported only).
    pub(super) sane: bool,
    /// (audited plans) the index entries to check against the batches.
    pub(super) check: Option<IndexCheck>,
}
