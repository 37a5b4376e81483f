//! The `log_loader` harness: recovery's one engine (`LogLoader::plan`, then `LogLoader::apply`)
//! on a damaged partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::input::Input;
use super::scratch_dir;
use record_format::{mirror_pid_reset_batch, RecordBatchBuilder};
use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLogConfig};
use recovery::{LeftoverAction, SnapshotOp};
use segment_store::internals::{file_name, FileKind, TempSuffix};
use segment_store::LogConfig;
use testkit::tree_image;

// ------------------------------------------------------------------------------------------------
// log_loader
// ------------------------------------------------------------------------------------------------

/// Segments of at most this many bytes: the pristine log spans several.
const SEGMENT_BYTES: u64 = 700;

fn config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: SEGMENT_BYTES,
            index_interval_bytes: 1,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

/// A scratch directory of this process, in memory where the system has `/dev/shm`.
fn scratch() -> &'static Mutex<PathBuf> {
    static DIR: OnceLock<Mutex<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(scratch_dir::per_process_dir("seglog-fuzz-loader")))
}

/// Removes this process's scratch directory (the replay test calls it when done).
pub fn remove_scratch() {
    let dir = scratch().lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::fs::remove_dir_all(&*dir);
}

pub(super) fn batch(pid: i64, seq: i32, n: i32, txn: bool, ts: i64) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0).transactional(txn);
    if pid >= 0 {
        b = b.producer(pid, 0, seq);
    }
    for i in 0..n {
        b.append(ts + i64::from(i), Some(b"k"), Some(b"value"), &[])
            .unwrap();
    }
    b.build()
}

/// The files of a partition written through `PartitionLog` and closed cleanly: three idempotent
/// producers, a producer-less batch, an open transaction and a `MIRROR_PID_RESET` barrier half
/// way, in segments of [`SEGMENT_BYTES`] (with their indexes, `.txnindex`, snapshots and the
/// leader-epoch checkpoint). Built once per process; timestamps are the wall clock's, so that no
/// producer expires when the copy is loaded.
fn pristine() -> &'static BTreeMap<String, Vec<u8>> {
    static FILES: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let dir = scratch().lock().unwrap().join("pristine-0");
        let _ = std::fs::remove_dir_all(&dir);
        let opts = LoadOptions {
            config: recovery::Config {
                log: config(),
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        let (mut log, _) = LogLoader::load(&dir, &opts).unwrap();
        let mut seqs = [0i32; 4];
        for i in 0..14usize {
            if i == 7 {
                let barrier = mirror_pid_reset_batch(0, ts, 0, "src");
                log.append_as_leader(&barrier, 0, AppendOrigin::Coordinator)
                    .unwrap();
            }
            let pid = i % 4;
            let txn = pid == 3 && i >= 12;
            let pid_field = if pid == 0 { -1 } else { pid as i64 };
            let b = batch(pid_field, seqs[pid], 2, txn, ts);
            log.append_as_leader(&b, 0, AppendOrigin::Client).unwrap();
            seqs[pid] += 2;
        }
        log.close().unwrap();
        let mut files = BTreeMap::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name != ".lock" {
                files.insert(name, std::fs::read(e.path()).unwrap());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        files
    })
}

/// Names a damaged directory may gain: leftovers of interrupted deletions, cleanings and swaps,
/// and files named as Kafka names segments, snapshots and indexes.
const SUFFIXES: [(FileKind, Option<TempSuffix>); 9] = [
    (FileKind::Log, None),
    (FileKind::Index, None),
    (FileKind::TimeIndex, None),
    (FileKind::TxnIndex, None),
    (FileKind::Snapshot, None),
    (FileKind::Log, Some(TempSuffix::Swap)),
    (FileKind::Log, Some(TempSuffix::Deleted)),
    (FileKind::Log, Some(TempSuffix::Cleaned)),
    (FileKind::Index, Some(TempSuffix::Swap)),
];

/// `kind`'s suffix followed by the temporary one, if any (`.log.swap`).
fn suffix((kind, temp): (FileKind, Option<TempSuffix>)) -> String {
    let mut s = kind.suffix().to_string();
    if let Some(t) = temp {
        s.push_str(t.suffix());
    }
    s
}

/// Damages the partition directory `dir` as the input says: up to 8 operations, each on one of
/// the files there (by index, sorted by name): flip a byte, cut the file, append bytes, overwrite
/// bytes, delete it, extend it with zeros (a preallocated index), copy it under a leftover name,
/// or write a new file of the input's bytes under a Kafka-like name at an offset the input says.
fn damage(dir: &Path, inp: &mut Input<'_>) {
    for _ in 0..8 {
        if inp.is_empty() {
            return;
        }
        let op = inp.u8();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().is_some_and(|n| n != ".lock"))
            .collect();
        files.sort();
        if files.is_empty() {
            return;
        }
        let file = files[usize::from(inp.u8()) % files.len()].clone();
        let mut bytes = std::fs::read(&file).unwrap_or_default();
        let at = usize::from(inp.u16());
        match op % 8 {
            0 if !bytes.is_empty() => {
                let i = at % bytes.len();
                bytes[i] ^= inp.u8() | 1;
            }
            1 => bytes.truncate(at % (bytes.len() + 1)),
            2 => {
                let n = usize::from(inp.u8());
                bytes.extend(inp.take(n));
            }
            3 if !bytes.is_empty() => {
                let i = at % bytes.len();
                let n = usize::from(inp.u8() % 32).min(bytes.len() - i);
                let src = inp.take(n);
                bytes[i..i + src.len()].copy_from_slice(src);
            }
            4 => {
                std::fs::remove_file(&file).unwrap();
                continue;
            }
            5 => bytes.resize(bytes.len() + 12 * (at % 256), 0),
            6 => {
                let suffix = suffix(SUFFIXES[usize::from(inp.u8()) % SUFFIXES.len()]);
                let stem = file.file_name().unwrap().to_string_lossy();
                let stem = stem.split('.').next().unwrap_or_default().to_string();
                std::fs::write(dir.join(format!("{stem}{suffix}")), &bytes).unwrap();
                continue;
            }
            7 => {
                let (kind, temp) = SUFFIXES[usize::from(inp.u8()) % SUFFIXES.len()];
                let offset = at % 64;
                let n = usize::from(inp.u8());
                let name = file_name(offset as i64, kind, temp);
                std::fs::write(dir.join(name), inp.take(n)).unwrap();
                continue;
            }
            _ => continue,
        }
        std::fs::write(&file, &bytes).unwrap();
    }
}

/// Every file under `dir` with its bytes.
fn files_of(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    tree_image(dir).unwrap()
}

/// `log_loader`: the pristine partition, damaged as the input says, loaded with the options the
/// input picks (clean shutdown or not, `full`, a recovery point and a log start offset). Then:
///
/// * planning changes no byte and no name in the directory, with or without the audit `verify`
///   runs (`plan_audited`), and neither panics;
/// * a plan refused is refused by `LogLoader::load` on a copy with the same error;
/// * applying the plan reports exactly what the plan predicted, and leaves the producer state,
///   LSO and log end offset the plan computed;
/// * the cut bytes are in the quarantine files the plan named, byte for byte, and every file
///   moved to quarantine keeps its bytes: the bytes it was found with (a renamed `.swap`'s for
///   its live name), or those recovery wrote to it before (a snapshot taken after a recovered
///   segment, an index created empty when the log opened); a segment recovered and then
///   quarantined whole (log start past the log end) is checked as prefix plus cut tail;
/// * no byte of a live `.log` is lost without a report: it is still there or in quarantine (as
///   its valid prefix with the rest in the cut's file), or it was removed as a segment a valid
///   swap replaced (reported as handled);
/// * `LogLoader::load` (planning under the lock, then applying) of a copy of the damaged
///   directory reports the same as the plan and leaves the same state.
pub fn log_loader(data: &[u8]) {
    let mut inp = Input(data);
    let flags = inp.u8();
    let recovery_point = i64::from(inp.u8() % 40);
    let log_start = i64::from(inp.u8() % 40);
    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            full_recovery: flags & 2 != 0,
            ..recovery::Config::default()
        },
        had_clean_shutdown: flags & 1 != 0,
        recovery_point: if flags & 4 != 0 { recovery_point } else { 0 },
        log_start_offset: if flags & 8 != 0 { log_start } else { 0 },
        ..LoadOptions::default()
    };
    let pristine = pristine();
    let root = scratch().lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (root.join("a"), root.join("b"));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
    let dir = a.join("orders-0");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in pristine {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    damage(&dir, &mut inp);
    let copy = b.join("orders-0");
    std::fs::create_dir_all(&copy).unwrap();
    for (path, bytes) in files_of(&dir) {
        let to = copy.join(path.strip_prefix(&dir).unwrap());
        match bytes {
            Some(bytes) => std::fs::write(to, bytes).unwrap(),
            None => std::fs::create_dir_all(to).unwrap(),
        }
    }
    let same = |s: String| s.replace(b.to_str().unwrap(), a.to_str().unwrap());

    let before = files_of(&dir);
    let audited = LogLoader::plan_audited(&dir, &opts).map(|p| p.log_end_offset);
    let plan = LogLoader::plan(&dir, &opts);
    assert!(files_of(&dir) == before, "planning changed the directory");
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            assert!(
                audited.is_err(),
                "plan refused what plan_audited accepted: {e}"
            );
            let loaded = LogLoader::load(&copy, &opts).map(|_| ());
            assert_eq!(
                loaded.map_err(|e| same(e.to_string())),
                Err(e.to_string()),
                "the loader and the plan disagree"
            );
            return;
        }
    };
    assert_eq!(
        audited.as_ref().ok(),
        Some(&plan.log_end_offset),
        "plan_audited and plan disagree: {audited:?}"
    );
    let predicted = plan.report();
    // Segments recovered and then quarantined whole (a log start offset past the recovered log
    // end): their `.log` is the valid prefix (checked below with its cut tail), their indexes
    // the rebuilt ones.
    // Recovery takes a snapshot after each recovered segment as Kafka does, over a file of the
    // same name if there is one; one it then quarantines (beyond the log end) holds those bytes.
    let mut written: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut quarantined_snapshots: BTreeMap<PathBuf, Option<Vec<u8>>> = BTreeMap::new();
    for (_, op) in &plan.snapshot_ops {
        match op {
            SnapshotOp::Write { path, bytes } => {
                written.insert(path.clone(), bytes.clone());
            }
            SnapshotOp::Quarantine { from, to } => {
                let had = written
                    .get(from)
                    .cloned()
                    .or_else(|| before.get(from).cloned().flatten());
                quarantined_snapshots.insert(to.clone(), had);
            }
            _ => {}
        }
    }
    // A `.swap` renamed into place: the live name's bytes are the swap's.
    let renamed_into: BTreeMap<PathBuf, PathBuf> = plan
        .leftovers
        .iter()
        .filter_map(|a| match a {
            LeftoverAction::Rename { from, to, .. } => Some((to.clone(), from.clone())),
            _ => None,
        })
        .collect();
    let removed: Vec<PathBuf> = plan
        .leftovers
        .iter()
        .filter_map(|a| match a {
            LeftoverAction::Remove { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    let recovered_then_quarantined: Vec<i64> = if plan.start_at_checkpoint {
        plan.scans.iter().map(|s| s.base_offset).collect()
    } else {
        Vec::new()
    };
    let state = (
        plan.producers.snapshot_entries(),
        plan.last_stable_offset,
        plan.log_end_offset,
    );
    let cut_tails: Vec<(PathBuf, Vec<u8>)> = predicted
        .cut
        .iter()
        .map(|c| {
            let seg = plan
                .segments
                .iter()
                .find(|s| s.base_offset == c.segment)
                .expect("a cut names a planned segment");
            // A `.swap` renamed into place first: the segment's bytes are the swap's.
            let log_path = seg.log_path(&plan.dir);
            let source = plan
                .leftovers
                .iter()
                .find_map(|a| match a {
                    LeftoverAction::Rename { from, to, .. } if *to == log_path => Some(from),
                    _ => None,
                })
                .unwrap_or(&log_path);
            let bytes = std::fs::read(source).unwrap();
            (
                c.quarantined_to.clone(),
                bytes[c.position as usize..].to_vec(),
            )
        })
        .collect();
    let (log, report) = LogLoader::apply(plan).unwrap_or_else(|e| panic!("apply failed: {e}"));
    assert_eq!(format!("{report:?}"), format!("{predicted:?}"));
    assert_eq!(
        (
            log.producer_state().snapshot_entries(),
            log.last_stable_offset(),
            log.log_end_offset()
        ),
        state
    );
    for (path, tail) in &cut_tails {
        let got = std::fs::read(path).unwrap();
        assert!(
            &got == tail,
            "{}: {} bytes quarantined, {} cut",
            path.display(),
            got.len(),
            tail.len()
        );
    }
    for p in &report.quarantined_segments {
        // A live file a swap replaced is set aside as `<name>.replaced`; a quarantined segment
        // file that had a `.swap` holds the swap's bytes (renamed into place first).
        let name = p.file_name().unwrap().to_str().unwrap();
        let segment_file = [
            FileKind::Log,
            FileKind::Index,
            FileKind::TimeIndex,
            FileKind::TxnIndex,
        ]
        .iter()
        .any(|k| name.ends_with(k.suffix()));
        let base: i64 = name.get(..20).and_then(|b| b.parse().ok()).unwrap_or(-1);
        if segment_file && recovered_then_quarantined.contains(&base) {
            continue;
        }
        let had = if let Some(had) = quarantined_snapshots.get(p) {
            had.clone()
        } else {
            match name.strip_suffix(".replaced") {
                Some(live) => before.get(&dir.join(live)).cloned().flatten(),
                None => {
                    let live = dir.join(name);
                    match renamed_into.get(&live) {
                        Some(swap) => before.get(swap).cloned().flatten(),
                        // Removed first (a segment a valid swap replaced): not the same file.
                        None if removed.contains(&live) => None,
                        None => before.get(&live).cloned().flatten(),
                    }
                }
            }
        };
        // A missing offset or time index is created empty when the log opens (Kafka's
        // `AbstractIndex` does the same), and goes with its segment.
        let created = matches!(
            FileKind::of_path(p),
            Some(FileKind::Index | FileKind::TimeIndex)
        ) && had.is_none();
        let had = if created { Some(Vec::new()) } else { had };
        let got = std::fs::read(p).ok();
        assert!(
            got == had,
            "{} changed when quarantined: {:?} bytes, had {:?}",
            p.display(),
            got.map(|b| b.len()),
            had.map(|b| b.len())
        );
    }
    log.close().unwrap();
    // No byte of a live `.log` is lost unreported: each one is still there or in quarantine
    // under its own name (whole, or its valid prefix with the cut tail in the cut's file), or
    // it was removed as a segment a valid swap replaced (Kafka's rule, reported as handled).
    for (path, bytes) in &before {
        let (Some(bytes), Some(name)) = (bytes, path.file_name().and_then(|n| n.to_str())) else {
            continue;
        };
        if FileKind::of_path(path) != Some(FileKind::Log)
            || report.temp_files_handled.contains(path)
        {
            continue;
        }
        let base: i64 = name
            .trim_end_matches(FileKind::Log.suffix())
            .parse()
            .unwrap_or(-1);
        let cut = report.cut.iter().find(|c| c.segment == base);
        let kept = |f: &Vec<u8>| {
            bytes.starts_with(f)
                && (f.len() == bytes.len()
                    || cut.is_some_and(|c| {
                        c.position == f.len() as u64
                            && std::fs::read(&c.quarantined_to).ok().as_deref()
                                == Some(&bytes[f.len()..])
                    }))
        };
        let replaced = format!("{name}.replaced");
        let in_quarantine = report
            .quarantined_segments
            .iter()
            .filter(|q| {
                let n = q.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                n == name || n == replaced
            })
            .filter_map(|q| std::fs::read(q).ok());
        // An empty prefix stands for a segment cut at its first byte and then removed (empty).
        let here = std::fs::read(path).ok().into_iter().chain([Vec::new()]);
        assert!(
            here.chain(in_quarantine).any(|f| kept(&f)),
            "{name}: {} bytes lost without a report",
            bytes.len()
        );
    }

    let (loaded, loaded_report) =
        LogLoader::load(&copy, &opts).unwrap_or_else(|e| panic!("load failed: {e}"));
    assert_eq!(
        same(format!("{loaded_report:?}")),
        format!("{predicted:?}"),
        "load and plan + apply differ"
    );
    assert_eq!(
        (
            loaded.producer_state().snapshot_entries(),
            loaded.last_stable_offset(),
            loaded.log_end_offset()
        ),
        state
    );
    loaded.close().unwrap();
}
