//! Planning the leftovers of interrupted operations (`.deleted`, `.cleaned`, `.swap`, orphan
//! indexes), the live segment files they leave, and the quarantine directory's name.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use record_format::Batches;
use rustc_hash::FxHashSet;
use segment_store::internals::ParsedName;
use segment_store::internals::{parse_file_name, segment_file_path, FileKind, TempSuffix};
use segment_store::SegmentError;

use super::indexes::open_index;
use super::types::LeftoverAction;
use super::{search_by, work};
use crate::loader::{LoadOptions, QUARANTINE_DIR};
use crate::log::PartitionLogError;

/// A live segment file and where its bytes are before the leftovers are handled. Its path is
/// `<dir>/<its name>` ([`LiveFile::path`]): a partition of 100,000 segments has 300,000 of them,
/// so no path is kept but a `.swap`'s.
#[derive(Debug, Clone)]
pub(super) struct LiveFile {
    pub(super) parsed: ParsedName,
    /// The `.swap` renamed into place as this file; `None`: the file itself.
    pub(super) swap: Option<PathBuf>,
}

impl LiveFile {
    /// Its live name in `dir` (a parsed name without a temporary suffix is exactly
    /// [`file_name`]'s).
    fn path(&self, dir: &Path) -> PathBuf {
        segment_file_path(dir, self.parsed.base_offset, self.parsed.kind)
    }

    /// Where its bytes are before the leftovers are handled.
    pub(super) fn source(&self, dir: &Path) -> PathBuf {
        self.swap.clone().unwrap_or_else(|| self.path(dir))
    }
}

/// The live files of a plan by (base offset, kind): one segment's files are found by a binary
/// search, not by a pass over every file of the partition.
pub(super) struct LiveIndex<'a> {
    /// By (base offset, kind); files of the same key in their order among the live files.
    files: Vec<&'a LiveFile>,
}

impl<'a> LiveIndex<'a> {
    pub(super) fn new(live: &'a [LiveFile]) -> Self {
        let mut files: Vec<&LiveFile> = live.iter().collect();
        // Stable: of two files with one key, the first among `live` is found, as a pass finds it.
        files.sort_by_key(|f| (f.parsed.base_offset, f.parsed.kind));
        LiveIndex { files }
    }

    /// The first live file of the segment at `base` of `kind`.
    pub(super) fn get(&self, base: i64, kind: FileKind) -> Option<&'a LiveFile> {
        let key = (base, kind);
        let at = match search_by(&self.files, |f| {
            (f.parsed.base_offset, f.parsed.kind)
                .cmp(&key)
                // The first of equal keys: search on as if the key were greater.
                .then(std::cmp::Ordering::Greater)
        }) {
            Ok(i) | Err(i) => i,
        };
        self.files
            .get(at)
            .copied()
            .filter(|f| (f.parsed.base_offset, f.parsed.kind) == key)
    }
}

fn not_found_is_empty<T>(r: Result<Vec<T>, SegmentError>) -> Result<Vec<T>, SegmentError> {
    match r {
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Ok(Vec::new()),
        r => r,
    }
}

/// Whether `name` is a live `.log`, `.index`, `.timeindex` or `.txnindex`: nothing but the
/// segment planning looks at those names (the snapshot rules never list nor ask for them).
fn is_live_segment_name(name: &OsString) -> bool {
    parse_file_name(name).is_ok_and(|p| p.temp.is_none() && p.kind != FileKind::Snapshot)
}

/// Kafka `removeTempFilesAndCollectSwapFiles` + swap completion and orphan index removal, decided
/// only: the actions, the live files they leave, and the names of `dir` as listed but the live
/// segment files' ([`is_live_segment_name`]).
#[allow(clippy::type_complexity)]
pub(super) fn plan_leftovers(
    opts: &LoadOptions,
    dir: &Path,
) -> Result<(Vec<LeftoverAction>, Vec<LiveFile>, Vec<OsString>), PartitionLogError> {
    let storage = &opts.config.env.storage;
    let mut actions = Vec::new();
    let typed = not_found_is_empty(storage.list_dir_typed(dir))?;
    refuse_hostile_entries(dir, &typed)?;
    let mut names: Vec<OsString> = typed.into_iter().map(|(n, _)| n).collect();
    let mut parsed: Vec<(&OsString, ParsedName)> = names
        .iter()
        .filter_map(|name| parse_file_name(name).ok().map(|p| (name, p)))
        .collect();
    // In the order of their paths (all in `dir`): by name.
    parsed.sort_by(|a, b| a.0.cmp(b.0));
    let min_cleaned = parsed
        .iter()
        .filter(|(_, p)| p.temp == Some(TempSuffix::Cleaned))
        .map(|(_, p)| p.base_offset)
        .min()
        .unwrap_or(i64::MAX);
    let mut swaps = Vec::new();
    let mut live = Vec::with_capacity(parsed.len());
    for (name, p) in parsed {
        match p.temp {
            Some(TempSuffix::Deleted) | Some(TempSuffix::Cleaned) => {
                let path = dir.join(name);
                actions.push(LeftoverAction::Remove { path, kind: p.kind });
            }
            Some(TempSuffix::Swap) if p.base_offset >= min_cleaned => {
                let path = dir.join(name);
                actions.push(LeftoverAction::Remove { path, kind: p.kind });
            }
            Some(TempSuffix::Swap) => swaps.push((dir.join(name), p)),
            None => live.push(LiveFile {
                parsed: p,
                swap: None,
            }),
        }
    }
    names.retain(|n| !is_live_segment_name(n));
    // A cleaner's completed output is renamed into place and replaces the segments in its range
    // (Kafka's swap completion); any other `.swap` is stray and moves to quarantine.
    let (complete, stray) = classify_swaps(opts, dir, swaps, &live)?;
    for (path, p) in stray {
        actions.push(LeftoverAction::Quarantine { path, kind: p.kind });
    }
    if let Some((lo, hi)) = complete.range {
        for f in &live {
            let p = &f.parsed;
            if p.kind != FileKind::Snapshot && p.base_offset >= lo && p.base_offset < hi {
                actions.push(LeftoverAction::Remove {
                    path: f.path(dir),
                    kind: p.kind,
                });
            }
        }
        live.retain(|f| {
            let p = &f.parsed;
            p.kind == FileKind::Snapshot || p.base_offset < lo || p.base_offset >= hi
        });
    }
    // A live file is named by its (base offset, kind).
    let live_keys: FxHashSet<(i64, FileKind)> = if complete.swaps.is_empty() {
        FxHashSet::default()
    } else {
        live.iter()
            .map(|f| (f.parsed.base_offset, f.parsed.kind))
            .collect()
    };
    let mut replaced = FxHashSet::default();
    let mut renamed = Vec::with_capacity(complete.swaps.len());
    for (path, p) in &complete.swaps {
        if matches!(p.kind, FileKind::Index | FileKind::TimeIndex) {
            // Kafka deletes a swap's offset and time indexes and rebuilds them from the
            // CRC-valid `.log.swap` (`removeTempFilesAndCollectSwapFiles`): derived data whose
            // bytes a crash may have left anywhere between written and synced.
            actions.push(LeftoverAction::Remove {
                path: path.clone(),
                kind: p.kind,
            });
            continue;
        }
        let to = segment_file_path(dir, p.base_offset, p.kind);
        work::probe(1);
        if live_keys.contains(&(p.base_offset, p.kind)) {
            // Not covered by the swapped range, yet the rename would replace it.
            actions.push(LeftoverAction::SetAside {
                path: to.clone(),
                kind: p.kind,
            });
            replaced.insert((p.base_offset, p.kind));
        }
        actions.push(LeftoverAction::Rename {
            from: path.clone(),
            to: to.clone(),
            kind: p.kind,
        });
        renamed.push(LiveFile {
            parsed: ParsedName { temp: None, ..*p },
            swap: Some(path.clone()),
        });
    }
    if !replaced.is_empty() {
        live.retain(|f| !replaced.contains(&(f.parsed.base_offset, f.parsed.kind)));
    }
    live.extend(renamed);
    // Orphan indexes (no `.log`).
    let logs: std::collections::BTreeSet<i64> = live
        .iter()
        .filter(|f| f.parsed.kind == FileKind::Log)
        .map(|f| f.parsed.base_offset)
        .collect();
    live.retain(|f| {
        let orphan = matches!(
            f.parsed.kind,
            FileKind::Index | FileKind::TimeIndex | FileKind::TxnIndex
        ) && !logs.contains(&f.parsed.base_offset);
        if orphan {
            actions.push(LeftoverAction::Remove {
                path: f.path(dir),
                kind: f.parsed.kind,
            });
        }
        !orphan
    });
    Ok((actions, live, names))
}

/// Names of a partition directory that seglog reads or writes, besides those
/// [`parse_file_name`] knows (segment files, snapshots and their temporary forms).
const PARTITION_FILES: [&str; 4] = [
    segment_store::internals::LOCK_FILE_NAME,
    segment_store::internals::LEADER_EPOCH_CHECKPOINT_FILE,
    segment_store::internals::PARTITION_METADATA_FILE,
    crate::mirror::MIRROR_STATE_FILE,
];

/// Refuses the partition if one of its names is a symlink, if a name seglog reads or writes as a
/// file is anything but a regular file, or if `quarantine` is not a directory: writing through
/// such a name could reach outside the log directory, reading it could block forever.
fn refuse_hostile_entries(
    dir: &Path,
    entries: &[(OsString, segment_store::EntryType)],
) -> Result<(), PartitionLogError> {
    use segment_store::EntryType;
    for (name, found) in entries {
        let refused = match found {
            EntryType::Symlink => true,
            _ if name == QUARANTINE_DIR => *found != EntryType::Dir,
            EntryType::File => false,
            _ => {
                let base = name.to_str().map(|n| {
                    n.strip_suffix(segment_store::internals::CHECKPOINT_TMP_SUFFIX)
                        .unwrap_or(n)
                });
                parse_file_name(name).is_ok()
                    || base.is_some_and(|b| {
                        PARTITION_FILES.contains(&b)
                            || parse_file_name(std::ffi::OsStr::new(b)).is_ok()
                    })
            }
        };
        if refused {
            return Err(PartitionLogError::Refused {
                path: dir.join(name),
                found: *found,
            });
        }
    }
    Ok(())
}

/// The `.swap` files a cleaner completed, and the offset range their `.log.swap`s cover.
#[derive(Default)]
struct CompleteSwaps {
    swaps: Vec<(PathBuf, ParsedName)>,
    range: Option<(i64, i64)>,
}

/// The offset range `[base, next)` of a `.log.swap` that is CRC-valid throughout (every byte in a
/// batch whose CRC matches, at least one batch); `None` for any other.
fn valid_swap_range(
    opts: &LoadOptions,
    path: &Path,
    base: i64,
) -> Result<Option<(i64, i64)>, PartitionLogError> {
    // Mapped when large, never read whole into memory (a `.swap` is a segment's size).
    let bytes = open_index(opts.config.env.storage.as_ref(), path, None)?;
    let bytes = bytes.bytes();
    let mut batches = Batches::new(bytes, 0).validate_crc(true);
    let mut next = None;
    for entry in batches.by_ref() {
        match entry {
            Ok(e) if e.last_offset() >= base => {
                next = Some(next.unwrap_or(base).max(e.last_offset().saturating_add(1)))
            }
            _ => return Ok(None),
        }
    }
    Ok(next
        .filter(|_| batches.valid_prefix_end() == bytes.len() as u64)
        .map(|n| (base, n)))
}

/// The next offset of the live `.log` at `path` (its base when it holds no batch): the end of its
/// valid batches.
fn live_log_next_offset(
    opts: &LoadOptions,
    path: &Path,
    base: i64,
) -> Result<i64, PartitionLogError> {
    let bytes = open_index(opts.config.env.storage.as_ref(), path, None)?;
    let mut next = base;
    for entry in Batches::new(bytes.bytes(), 0).flatten() {
        next = next.max(entry.last_offset().saturating_add(1));
    }
    Ok(next)
}

/// Splits `swaps` into a cleaner's completed output and stray files. The `.log.swap`s are
/// complete when each is CRC-valid throughout and together they cover exactly the live segments
/// they replace (those whose base offset lies in their range): the range ends at or after the
/// last offset of the last segment replaced, so no offset the log holds is lost. A `.index`,
/// `.timeindex` or `.txnindex` swap is complete when its `.log.swap` is. Everything else is stray
/// (renaming it into place would replace a live file, or drop offsets the log holds).
fn classify_swaps(
    opts: &LoadOptions,
    dir: &Path,
    swaps: Vec<(PathBuf, ParsedName)>,
    live: &[LiveFile],
) -> Result<(CompleteSwaps, Vec<(PathBuf, ParsedName)>), PartitionLogError> {
    let mut valid_logs = BTreeMap::new();
    let mut any_invalid = false;
    for (path, p) in swaps.iter().filter(|(_, p)| p.kind == FileKind::Log) {
        match valid_swap_range(opts, path, p.base_offset)? {
            Some(r) => {
                valid_logs.insert(p.base_offset, r);
            }
            None => any_invalid = true,
        }
    }
    let mut range: Option<(i64, i64)> = None;
    for &(lo, hi) in valid_logs.values() {
        range = Some(match range {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }
    // The last live segment the range replaces must end inside it.
    let covers = match range {
        None => false,
        Some((lo, hi)) => {
            let last = live
                .iter()
                .filter(|f| {
                    f.parsed.kind == FileKind::Log
                        && f.parsed.base_offset >= lo
                        && f.parsed.base_offset < hi
                })
                .max_by_key(|f| f.parsed.base_offset);
            match last {
                None => true,
                Some(f) => live_log_next_offset(opts, &f.source(dir), f.parsed.base_offset)? <= hi,
            }
        }
    };
    // One stray `.log.swap` among them: the group is not a cleaner's output as found.
    let complete = covers && !any_invalid;
    let mut out = CompleteSwaps::default();
    let mut stray = Vec::new();
    for (path, p) in swaps {
        if complete && valid_logs.contains_key(&p.base_offset) {
            out.swaps.push((path, p));
        } else {
            stray.push((path, p));
        }
    }
    if complete {
        out.range = range;
    }
    Ok((out, stray))
}

/// The quarantine folder a recovery of `dir` would create: `<dir>/quarantine/<n>`, `n` a number
/// no folder there has ([`unused_quarantine_number`]).
/// `names`: the names of `dir` (no `quarantine` among them: no folder to list).
pub(super) fn next_quarantine_dir(
    opts: &LoadOptions,
    dir: &Path,
    names: &[OsString],
) -> Result<PathBuf, PartitionLogError> {
    let root = dir.join(QUARANTINE_DIR);
    let existing = if names.iter().any(|n| n == QUARANTINE_DIR) {
        not_found_is_empty(opts.config.env.storage.list_dir(&root))?
    } else {
        Vec::new()
    };
    Ok(root.join(format!("{:04}", unused_quarantine_number(&existing))))
}

/// One more than the largest number among `names` (1 if there is none), or, when that would
/// wrap (a folder numbered `u64::MAX`), the smallest number no name has: never one in use.
pub(super) fn unused_quarantine_number(names: &[OsString]) -> u64 {
    let used: std::collections::BTreeSet<u64> = names
        .iter()
        .filter_map(|name| name.to_str().and_then(|s| s.parse::<u64>().ok()))
        .collect();
    match used.last() {
        None => 1,
        Some(&max) => max.checked_add(1).unwrap_or_else(|| {
            // At most `used.len()` numbers are taken, so one of the first `used.len() + 1` is
            // free.
            (1..=u64::MAX)
                .find(|k| !used.contains(k))
                .unwrap_or(u64::MAX)
        }),
    }
}
