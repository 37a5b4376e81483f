//! [`SimulatedFs`]: an in-memory [`Storage`](segment_store::Storage) that keeps, per file, the *live* bytes (what reads
//! see) and the *durable* bytes (what survives a crash), and per directory the live and durable
//! names. [`SimulatedFs::crash`] throws away everything not made durable:
//!
//! | operation                | live       | durable after                                     |
//! |--------------------------|------------|---------------------------------------------------|
//! | `write_at`, `set_len`    | at once    | `sync_data`/`sync_all` of that file               |
//! | create, rename, remove   | at once    | `sync_dir` of the parent (of both parents for rename) |
//! | `create_dir_all`, `create_dir` | at once | `sync_dir` of each new directory's parent   |
//! | `copy_range`             | at once    | as the create, writes, `set_len` and `sync_all` it is made of |
//! | `remove_dir`             | at once    | `sync_dir` of the parent                          |
//! | any of these             | at once    | `sync_filesystem` (everything, as Linux `syncfs`)  |
//!
//! That is [`CrashModel::Today`]. [`CrashModel::Weak`] keeps the same guarantees but lets a crash
//! keep more of what was not synced, as real file systems do: any subset of the unsynced 4 KiB
//! blocks, a new size without its data, directory entry changes before their directory's sync
//! and before the data they name ([`WeakModel`], [`SimulatedFs::crash_states`]).
//!
//! Memory-mapped indexes cannot go through the storage seam (a map writes to the page cache
//! without a call to intercept): a crash harness built on [`SimulatedFs`] treats `.index` and
//! `.timeindex` files as rebuilt, not as part of the durable image (Kafka re-indexes everything
//! above the recovery point).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use segment_store::{Result, SegmentError};

mod crash;
mod storage;
#[cfg(test)]
mod tests;

pub use crash::{CrashImage, CrashModel, CrashStates, WeakModel, BLOCK_SIZE};
pub use storage::SimFile;

// ------------------------------------------------------------------------------------------------
// SimulatedFs

/// What survives of the last unsynced write when [`SimulatedFs::crash`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TornWrite {
    /// Nothing unsynced survives.
    #[default]
    None,
    /// The first `n` bytes (clamped to the write's length) of the last unsynced write survive,
    /// laid over the durable image at the write's offset; if the durable image is shorter than
    /// that offset the gap reads as zeros (as a file system may expose unwritten blocks). Applied
    /// only if the file's name is durable.
    Prefix(usize),
}

/// Counters of the mutating calls made on a [`SimulatedFs`] since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimStats {
    /// Every mutating call (write, set_len, sync, create, rename, remove, mkdir, sync_dir).
    pub io_points: u64,
    /// `write_at`/`append` calls.
    pub writes: u64,
    /// `sync_data`/`sync_all`/`sync_dir` calls.
    pub syncs: u64,
}

/// An in-memory [`Storage`](segment_store::Storage) that models what a crash keeps. Cheap to clone (shared state).
///
/// Paths are used as given: use absolute, normalised paths. Directories must exist (see
/// [`SimulatedFs::create_durable_dir_all`] to set up a tree that survives crashes) before files
/// are created in them. Only files can be renamed.
///
/// Crash at a chosen point: [`SimulatedFs::fail_after`]`(n)` lets `n` more mutating calls through
/// and fails every later one with an I/O error. A write that fails that way is still recorded as
/// the last unsynced write, so `crash(TornWrite::Prefix(k))` can persist part of the write that
/// was in flight. Handles opened before a crash fail afterwards.
#[derive(Clone, Default)]
pub struct SimulatedFs {
    state: Arc<Mutex<SimState>>,
}

impl fmt::Debug for SimulatedFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("SimulatedFs")
            .field("files", &st.live_files.keys().collect::<Vec<_>>())
            .field("stats", &st.stats)
            .finish()
    }
}

#[derive(Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// The [`BLOCK_SIZE`] blocks written or resized since the last sync of the file.
    dirty: BTreeSet<u64>,
}

impl Inode {
    /// Marks the blocks of `[from, to)` unsynced.
    fn touch(&mut self, from: u64, to: u64) {
        let block = BLOCK_SIZE as u64;
        if to > from {
            self.dirty.extend(from / block..to.div_ceil(block));
        }
    }
}

/// A change of a directory entry not yet made durable by a sync of every directory it touches:
/// under [`CrashModel::Weak`] a crash may keep it or not, independently of the others.
#[derive(Debug, Clone)]
struct NameOp {
    kind: NameKind,
    /// The directories whose sync has not happened since (the parent; both for a rename).
    unsynced: BTreeSet<PathBuf>,
}

#[derive(Debug, Clone)]
enum NameKind {
    Link(PathBuf, u64),
    Unlink(PathBuf, u64),
    Rename(PathBuf, PathBuf, u64),
    MkDir(PathBuf),
    RmDir(PathBuf),
}

fn parent_of(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

struct PendingWrite {
    inode: u64,
    offset: u64,
    data: Vec<u8>,
}

#[derive(Default)]
struct SimState {
    epoch: u64,
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    live_files: BTreeMap<PathBuf, u64>,
    durable_files: BTreeMap<PathBuf, u64>,
    live_dirs: BTreeSet<PathBuf>,
    durable_dirs: BTreeSet<PathBuf>,
    /// Unsynced writes in order; the last one is what a torn crash may keep part of.
    pending: Vec<PendingWrite>,
    /// The write in flight when the fail point stopped it (never applied to the live bytes).
    inflight: Option<PendingWrite>,
    /// Directory entry changes not yet durable, in the order they were made.
    name_ops: Vec<NameOp>,
    /// Every mutating call that went through, in order (the operation and its path).
    trace: Vec<(&'static str, PathBuf)>,
    stats: SimStats,
    fail_at: Option<u64>,
}

fn sim_err(path: &Path, op: &'static str, kind: io::ErrorKind, msg: &str) -> SegmentError {
    SegmentError::io(path, op, io::Error::new(kind, msg.to_owned()))
}

fn is_root(p: &Path) -> bool {
    p.as_os_str().is_empty() || p.parent().is_none()
}

fn write_into(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(data.len());
    if buf.len() < end {
        buf.resize(end, 0);
    }
    if let Some(dst) = buf.get_mut(start..end) {
        dst.copy_from_slice(data);
    }
}

impl SimState {
    fn note_name(&mut self, kind: NameKind) {
        let unsynced = match &kind {
            NameKind::Link(p, _)
            | NameKind::Unlink(p, _)
            | NameKind::MkDir(p)
            | NameKind::RmDir(p) => BTreeSet::from([parent_of(p)]),
            NameKind::Rename(a, b, _) => BTreeSet::from([parent_of(a), parent_of(b)]),
        };
        self.name_ops.push(NameOp { kind, unsynced });
    }

    /// Counts a mutating call; fails it if the fail point has been reached.
    fn tick(&mut self, path: &Path, op: &'static str) -> Result<()> {
        if let Some(at) = self.fail_at {
            if self.stats.io_points >= at {
                return Err(sim_err(path, op, io::ErrorKind::Other, "simulated crash"));
            }
        }
        self.stats.io_points += 1;
        self.trace.push((op, path.to_path_buf()));
        Ok(())
    }

    fn dir_exists(&self, dir: &Path) -> bool {
        is_root(dir) || self.live_dirs.contains(dir)
    }

    fn check_parent(&self, path: &Path, op: &'static str) -> Result<()> {
        match path.parent() {
            Some(p) if !self.dir_exists(p) => Err(sim_err(
                path,
                op,
                io::ErrorKind::NotFound,
                "parent directory does not exist",
            )),
            _ => Ok(()),
        }
    }

    fn inode(&mut self, h: &SimFile, op: &'static str) -> Result<&mut Inode> {
        if h.epoch != self.epoch {
            return Err(sim_err(
                &h.path,
                op,
                io::ErrorKind::Other,
                "stale handle: opened before a simulated crash",
            ));
        }
        self.inodes
            .get_mut(&h.inode)
            .ok_or_else(|| sim_err(&h.path, op, io::ErrorKind::NotFound, "no such inode"))
    }
}

impl SimulatedFs {
    /// An empty file system with no durable state.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves consistent-enough state for a test harness.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `dir` and its ancestors as already durable (test setup; not an I/O point).
    pub fn create_durable_dir_all(&self, dir: &Path) {
        let mut st = self.lock();
        for a in dir.ancestors().filter(|a| !is_root(a)) {
            st.live_dirs.insert(a.to_path_buf());
            st.durable_dirs.insert(a.to_path_buf());
        }
    }

    /// Every mutating call so far that went through (the I/O points), in order: the operation
    /// and its path.
    pub fn io_trace(&self) -> Vec<(&'static str, PathBuf)> {
        self.lock().trace.clone()
    }

    /// Counters of mutating calls so far.
    pub fn stats(&self) -> SimStats {
        self.lock().stats
    }

    /// Lets `n` more mutating calls succeed, then fails all later ones until [`Self::crash`].
    pub fn fail_after(&self, n: u64) {
        let mut st = self.lock();
        st.fail_at = Some(st.stats.io_points.saturating_add(n));
    }

    /// The live contents of every file (what reads see now).
    pub fn live_image(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let st = self.lock();
        st.live_files
            .iter()
            .filter_map(|(p, i)| st.inodes.get(i).map(|n| (p.clone(), n.live.clone())))
            .collect()
    }

    /// The contents every file would have after `crash(TornWrite::None)`.
    pub fn durable_image(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let st = self.lock();
        st.durable_files
            .iter()
            .filter_map(|(p, i)| st.inodes.get(i).map(|n| (p.clone(), n.durable.clone())))
            .collect()
    }

    /// Simulates a power loss: only durable names and durable bytes remain (plus a torn prefix
    /// of the last unsynced write if asked). Clears the fail point, invalidates open handles and
    /// returns the surviving files.
    pub fn crash(&self, torn: TornWrite) -> BTreeMap<PathBuf, Vec<u8>> {
        {
            let mut st = self.lock();
            if let (TornWrite::Prefix(n), Some(w)) = (torn, st.pending.pop()) {
                let named = st.durable_files.values().any(|&i| i == w.inode);
                if let (true, Some(inode)) = (named, st.inodes.get_mut(&w.inode)) {
                    let keep = w.data.get(..n.min(w.data.len())).unwrap_or_default();
                    write_into(&mut inode.durable, w.offset, keep);
                }
            }
            st.pending.clear();
            st.inflight = None;
            st.name_ops.clear();
            // A durable name inside a directory whose own entry is not durable is lost too.
            let dirs = st.durable_dirs.clone();
            let reachable_dir = |d: &Path| d.ancestors().all(|a| is_root(a) || dirs.contains(a));
            st.durable_files
                .retain(|p, _| p.parent().is_none_or(reachable_dir));
            st.durable_dirs
                .retain(|d| d.parent().is_none_or(reachable_dir));
            st.live_files = st.durable_files.clone();
            st.live_dirs = st.durable_dirs.clone();
            let reachable: BTreeSet<u64> = st.durable_files.values().copied().collect();
            st.inodes.retain(|i, _| reachable.contains(i));
            for inode in st.inodes.values_mut() {
                inode.live = inode.durable.clone();
                inode.dirty.clear();
            }
            st.epoch += 1;
            st.fail_at = None;
        }
        self.durable_image()
    }
}
