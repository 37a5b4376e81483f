//! Crashed runs: a workload crashed at one I/O point, and the images the crash can leave
//! materialized as real directories.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use segment_store::Clock;

use super::ops::{run_ops, sim_env};
use super::workload::{Expectation, Workload, TIMESTAMP};
use crate::clock::ManualClock;
use crate::sim_fs::{CrashModel, CrashStates, SimulatedFs, TornWrite};

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh, empty, canonical directory under `root` (removed by the caller).
pub fn fresh_dir(root: &Path, prefix: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    loop {
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let d = root.join(format!("{prefix}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", d.display())),
        }
    }
}

/// One run of a workload on a fresh [`SimulatedFs`], crashed at I/O point `fail_at` (never if
/// `None`).
#[derive(Debug)]
pub struct CrashRun {
    /// What the API reported.
    pub expectation: Expectation,
    /// The error that stopped the run (the injected crash), if any.
    pub stopped_by: Option<String>,
    /// I/O points the run made.
    pub io_points: u64,
    /// The durable image (`TornWrite::None`).
    pub durable: BTreeMap<PathBuf, Vec<u8>>,
    /// The images with every byte-prefix of the write in flight (empty if none).
    pub torn: Vec<(usize, BTreeMap<PathBuf, Vec<u8>>)>,
    /// The run directory (the paths of the images are in it).
    pub dir: PathBuf,
    /// The states the weak model allows at the crash point (with [`CrashModel::Weak`]).
    pub weak: Option<CrashStates>,
}

/// Runs `w` on a fresh [`SimulatedFs`] in a fresh directory under `scratch`, failing I/O point
/// `fail_at` and every later one, then crashes. The run directory is removed.
pub fn run_crashed(w: &Workload, scratch: &Path, fail_at: Option<u64>) -> Result<CrashRun, String> {
    run_crashed_in(w, scratch, fail_at, &CrashModel::Today)
}

/// [`run_crashed`] under `model`: with [`CrashModel::Weak`], also the states it allows at the
/// crash point ([`CrashRun::weak`]).
pub fn run_crashed_in(
    w: &Workload,
    scratch: &Path,
    fail_at: Option<u64>,
    model: &CrashModel,
) -> Result<CrashRun, String> {
    let dir = fresh_dir(scratch, "run")?;
    let sim = SimulatedFs::new();
    sim.create_durable_dir_all(&dir);
    if let Some(n) = fail_at {
        sim.fail_after(n);
    }
    let clock = Arc::new(ManualClock::new(TIMESTAMP));
    let env = sim_env(&sim, &clock);
    let mut exp = Expectation::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_ops(w, &dir, &env, &clock, Some(&sim), &mut exp)
    }));
    exp.now_ms = clock.now_ms();
    let stopped_by = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("PANIC in the workload".to_owned()),
    };
    let io_points = sim.stats().io_points;
    exp.harvest_files(&sim.live_image());
    let durable = sim.durable_image();
    let weak = match model {
        CrashModel::Weak(m) => Some(sim.crash_states(m, w.seed ^ fail_at.unwrap_or(u64::MAX))),
        CrashModel::Today => None,
    };
    let full = sim.crash(TornWrite::Prefix(usize::MAX));
    exp.harvest_files(&full);
    // The write in flight, laid over the live bytes (the weak model may keep all of it).
    for img in weak.iter().flat_map(|s| &s.images) {
        exp.harvest_files(&img.files);
    }
    let torn = torn_images(&durable, &full);
    // Nothing of the run may be a real file: it was written around the seam.
    let around = files_around_the_seam(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(e) = stopped_by.as_deref().filter(|e| e.starts_with("PANIC")) {
        return Err(e.to_owned());
    }
    if !around.is_empty() {
        return Err(format!("written around the storage seam: {around:?}"));
    }
    Ok(CrashRun {
        expectation: exp,
        stopped_by,
        io_points,
        durable,
        torn,
        dir,
        weak,
    })
}

/// The real files and directories under `dir` (recursively): a run on [`SimulatedFs`] creates
/// none.
pub fn files_around_the_seam(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The torn variants between the durable image and the image keeping the whole in-flight write
/// (`TornWrite::Prefix(usize::MAX)`): if exactly one file differs and the durable bytes are a
/// prefix of the full ones (an append, the `.log` case), every length in between, i.e. every
/// byte-prefix of what the write added; otherwise only the full image.
pub fn torn_images(
    durable: &BTreeMap<PathBuf, Vec<u8>>,
    full: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<(usize, BTreeMap<PathBuf, Vec<u8>>)> {
    let diff: Vec<&PathBuf> = full
        .iter()
        .filter(|(p, b)| durable.get(*p) != Some(*b))
        .map(|(p, _)| p)
        .collect();
    let [path] = diff.as_slice() else {
        return if diff.is_empty() {
            Vec::new()
        } else {
            vec![(usize::MAX, full.clone())]
        };
    };
    let empty = Vec::new();
    let old = durable.get(*path).unwrap_or(&empty);
    let Some(new) = full.get(*path) else {
        return Vec::new();
    };
    if new.len() <= old.len() || new.get(..old.len()) != Some(old.as_slice()) {
        return vec![(usize::MAX, full.clone())];
    }
    (1..=new.len() - old.len())
        .map(|k| {
            let mut img = full.clone();
            if let Some(f) = img.get_mut(*path) {
                f.truncate(old.len() + k);
            }
            (k, img)
        })
        .collect()
}

/// Writes `image` (paths under `from`) into the empty directory `to`.
pub fn materialize(
    image: &BTreeMap<PathBuf, Vec<u8>>,
    from: &Path,
    to: &Path,
) -> Result<(), String> {
    for (path, bytes) in image {
        let rel = path
            .strip_prefix(from)
            .map_err(|_| format!("{} is outside {}", path.display(), from.display()))?;
        let dst = to.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&dst, bytes).map_err(|e| format!("{}: {e}", dst.display()))?;
    }
    Ok(())
}
