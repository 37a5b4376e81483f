//! [`SimulatedFs`]: an in-memory [`Storage`] that keeps, per file, the *live* bytes (what reads
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
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use segment_store::io::{copy_range_through_handles, EntryType, FileHandle, OpenMode, Storage};
use segment_store::{Result, SegmentError};

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

/// An in-memory [`Storage`] that models what a crash keeps. Cheap to clone (shared state).
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

/// The unit of atomicity of [`CrashModel::Weak`]: a crash keeps each unsynced block of a file
/// whole or not at all.
pub const BLOCK_SIZE: usize = 4096;

/// What a crash may leave, selectable per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrashModel {
    /// The durable bytes and names only (what was synced), plus at most a prefix of the write
    /// in flight ([`TornWrite`]): [`SimulatedFs::crash`].
    #[default]
    Today,
    /// As weak as real file systems (ALICE, CrashMonkey, LazyFS): see [`WeakModel`] and
    /// [`SimulatedFs::crash_states`].
    Weak(WeakModel),
}

/// The weak crash model and how many of its states to explore at one crash point.
///
/// What survives a crash, besides everything synced:
///
/// * any subset of the unsynced [`BLOCK_SIZE`] blocks of every file (written, or zeroed by a
///   resize or truncating open, since the file's last `sync_data`/`sync_all`), the write in flight
///   at the crash point included: each block whole or not at all, in any order;
/// * a file's new size with or without its data: a grown file reads as zeros where its blocks
///   did not survive, a shrunk one may keep its old size;
/// * any subset of the directory entry changes (create, rename, remove, `create_dir`,
///   `create_dir_all`, `remove_dir`, in the order made) not yet made durable by a sync of their
///   directory (of both for a rename): a name may persist before the data it names, which is
///   then whatever survived of that file's data (all of it only if the file was synced first).
///   Composite operations ([`Storage::copy_range`], rename-based quarantine,
///   `write_atomically`) are these steps.
///
/// With `k` such choices at a crash point (blocks, sizes and entry changes), all `2^k` states are
/// explored when `k <= exhaustive_up_to`, otherwise `samples` states drawn from `seed` (plus the
/// two extremes: nothing unsynced kept, everything kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeakModel {
    /// Largest `k` explored exhaustively (at most 20).
    pub exhaustive_up_to: u32,
    /// States drawn when `k` is larger.
    pub samples: usize,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for WeakModel {
    /// All `2^k` states up to `k = 12` (4,096), else 64 seeded samples.
    fn default() -> Self {
        WeakModel {
            exhaustive_up_to: 12,
            samples: 64,
            seed: 1,
        }
    }
}

/// One state a crash may leave: the files (path → bytes) and the directories.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CrashImage {
    /// Every file and its bytes.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    /// Every directory (the root excluded).
    pub dirs: BTreeSet<PathBuf>,
}

/// The states [`SimulatedFs::crash_states`] explored at one crash point.
#[derive(Debug, Clone, Default)]
pub struct CrashStates {
    /// Independent choices a crash had (unsynced blocks, sizes, directory entry changes).
    pub choices: u32,
    /// Whether all `2^choices` states were explored (else a seeded sample).
    pub exhaustive: bool,
    /// States explored (before removing duplicates).
    pub explored: u64,
    /// The distinct images, the all-nothing one (what [`TornWrite::None`] keeps) first.
    pub images: Vec<CrashImage>,
}

#[derive(Debug, Clone, Copy)]
enum Choice {
    Block(u64, u64),
    Size(u64),
    Name(usize),
}

fn next_rand(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

impl SimState {
    /// The bytes of `inode` with the write in flight applied (what the weak model may keep).
    fn latest(&self, id: u64) -> Vec<u8> {
        let mut bytes = self
            .inodes
            .get(&id)
            .map(|n| n.live.clone())
            .unwrap_or_default();
        if let Some(w) = self.inflight.as_ref().filter(|w| w.inode == id) {
            write_into(&mut bytes, w.offset, &w.data);
        }
        bytes
    }

    fn choices(&self) -> Vec<Choice> {
        let mut named: BTreeSet<u64> = self.durable_files.values().copied().collect();
        for op in &self.name_ops {
            if let NameKind::Link(_, i) | NameKind::Rename(_, _, i) = op.kind {
                named.insert(i);
            }
        }
        let mut out = Vec::new();
        for id in named {
            let Some(n) = self.inodes.get(&id) else {
                continue;
            };
            let mut blocks = n.dirty.clone();
            let latest_len = if let Some(w) = self.inflight.as_ref().filter(|w| w.inode == id) {
                let end = w.offset + w.data.len() as u64;
                let block = BLOCK_SIZE as u64;
                blocks.extend(w.offset / block..end.div_ceil(block));
                end.max(n.live.len() as u64)
            } else {
                n.live.len() as u64
            };
            if latest_len != n.durable.len() as u64 {
                out.push(Choice::Size(id));
            }
            out.extend(blocks.into_iter().map(|b| Choice::Block(id, b)));
        }
        out.extend((0..self.name_ops.len()).map(Choice::Name));
        out
    }

    fn image_of(&self, choices: &[Choice], keep: &dyn Fn(usize) -> bool) -> CrashImage {
        let mut files = self.durable_files.clone();
        let mut dirs = self.durable_dirs.clone();
        let mut sizes = BTreeSet::new();
        let mut blocks: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (n, c) in choices.iter().enumerate() {
            if !keep(n) {
                continue;
            }
            match *c {
                Choice::Size(i) => {
                    sizes.insert(i);
                }
                Choice::Block(i, b) => blocks.entry(i).or_default().push(b),
                Choice::Name(k) => match self.name_ops.get(k).map(|op| &op.kind) {
                    Some(NameKind::Link(p, i)) => {
                        files.insert(p.clone(), *i);
                    }
                    Some(NameKind::Unlink(p, i)) if files.get(p) == Some(i) => {
                        files.remove(p);
                    }
                    Some(NameKind::Rename(from, to, i)) => {
                        if files.get(from) == Some(i) {
                            files.remove(from);
                        }
                        files.insert(to.clone(), *i);
                    }
                    Some(NameKind::MkDir(d)) => {
                        dirs.insert(d.clone());
                    }
                    Some(NameKind::RmDir(d)) => {
                        dirs.remove(d);
                    }
                    Some(NameKind::Unlink(..)) | None => {}
                },
            }
        }
        let reachable_dir = |d: &Path| d.ancestors().all(|a| is_root(a) || dirs.contains(a));
        files.retain(|p, _| p.parent().is_none_or(reachable_dir));
        let kept_dirs: BTreeSet<PathBuf> = dirs
            .iter()
            .filter(|d| d.parent().is_none_or(reachable_dir))
            .cloned()
            .collect();
        let mut contents: HashMap<u64, Vec<u8>> = HashMap::new();
        let files = files
            .into_iter()
            .map(|(p, id)| {
                let bytes = contents
                    .entry(id)
                    .or_insert_with(|| self.file_state(id, sizes.contains(&id), &blocks))
                    .clone();
                (p, bytes)
            })
            .collect();
        CrashImage {
            files,
            dirs: kept_dirs,
        }
    }

    fn file_state(&self, id: u64, new_size: bool, blocks: &BTreeMap<u64, Vec<u64>>) -> Vec<u8> {
        let Some(n) = self.inodes.get(&id) else {
            return Vec::new();
        };
        let latest = self.latest(id);
        let mut bytes = n.durable.clone();
        if new_size {
            bytes.resize(latest.len(), 0);
        }
        for &b in blocks.get(&id).map(Vec::as_slice).unwrap_or_default() {
            let start = usize::try_from(b)
                .unwrap_or(usize::MAX)
                .saturating_mul(BLOCK_SIZE);
            let end = start
                .saturating_add(BLOCK_SIZE)
                .min(bytes.len())
                .min(latest.len());
            if let (Some(dst), Some(src)) = (bytes.get_mut(start..end), latest.get(start..end)) {
                dst.copy_from_slice(src);
            }
        }
        bytes
    }
}

impl SimulatedFs {
    /// The states a crash now may leave under `model` (see [`WeakModel`]), without crashing:
    /// call [`Self::crash`] afterwards. `salt` varies the sample between crash points.
    pub fn crash_states(&self, model: &WeakModel, salt: u64) -> CrashStates {
        let st = self.lock();
        let choices = st.choices();
        let k = u32::try_from(choices.len()).unwrap_or(u32::MAX);
        let mut seen = BTreeSet::new();
        let mut images = Vec::new();
        let mut add = |img: CrashImage| {
            if seen.insert(img.clone()) {
                images.push(img);
            }
        };
        let exhaustive = k <= model.exhaustive_up_to.min(20);
        let explored;
        if exhaustive {
            explored = 1u64 << k;
            for mask in 0..explored {
                add(st.image_of(&choices, &|n| mask >> n & 1 == 1));
            }
        } else {
            add(st.image_of(&choices, &|_| false));
            add(st.image_of(&choices, &|_| true));
            let mut x = (model.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
            for _ in 0..model.samples {
                let bits: Vec<bool> = (0..choices.len())
                    .map(|_| next_rand(&mut x) & 1 == 1)
                    .collect();
                add(st.image_of(&choices, &|n| bits.get(n).copied().unwrap_or(false)));
            }
            explored = model.samples as u64 + 2;
        }
        CrashStates {
            choices: k,
            exhaustive,
            explored,
            images,
        }
    }

    /// A file system holding `image`, all of it durable (to recover a crash state through the
    /// seam). Each ancestor of a file or directory is created as well.
    pub fn from_image(image: &CrashImage) -> SimulatedFs {
        let fs = SimulatedFs::new();
        for d in &image.dirs {
            fs.create_durable_dir_all(d);
        }
        {
            let mut st = fs.lock();
            for (path, bytes) in &image.files {
                for a in path.ancestors().skip(1).filter(|a| !is_root(a)) {
                    st.live_dirs.insert(a.to_path_buf());
                    st.durable_dirs.insert(a.to_path_buf());
                }
                let i = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(
                    i,
                    Inode {
                        live: bytes.clone(),
                        durable: bytes.clone(),
                        dirty: BTreeSet::new(),
                    },
                );
                st.live_files.insert(path.clone(), i);
                st.durable_files.insert(path.clone(), i);
            }
        }
        fs
    }

    /// The image [`Self::crash`]`(`[`TornWrite::None`]`)` would leave, directories included.
    pub fn durable_state(&self) -> CrashImage {
        let st = self.lock();
        st.image_of(&[], &|_| false)
    }
}

/// A handle into a [`SimulatedFs`].
#[derive(Debug)]
pub struct SimFile {
    fs: SimulatedFs,
    inode: u64,
    epoch: u64,
    path: PathBuf,
    writable: bool,
}

impl SimFile {
    fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(sim_err(
                &self.path,
                op,
                io::ErrorKind::PermissionDenied,
                "opened read-only",
            ))
        }
    }
}

impl FileHandle for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn len(&self) -> Result<u64> {
        let mut st = self.fs.lock();
        Ok(st.inode(self, "len")?.live.len() as u64)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut st = self.fs.lock();
        let live = &st.inode(self, "read_at")?.live;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(live.len());
        let src = live.get(start..).unwrap_or_default();
        let n = src.len().min(buf.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), src.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok(n)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_writable("write_at")?;
        let mut st = self.fs.lock();
        st.inode(self, "write_at")?;
        st.stats.writes += 1;
        let pending = PendingWrite {
            inode: self.inode,
            offset,
            data: data.to_vec(),
        };
        if let Err(e) = st.tick(&self.path, "write_at") {
            // The write was in flight when the "crash" happened: a torn crash may keep part of it.
            if st.inflight.is_none() {
                st.inflight = Some(PendingWrite {
                    inode: self.inode,
                    offset,
                    data: data.to_vec(),
                });
            }
            st.pending.push(pending);
            return Err(e);
        }
        let inode = st.inode(self, "write_at")?;
        write_into(&mut inode.live, offset, data);
        inode.touch(offset, offset + data.len() as u64);
        st.pending.push(pending);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.check_writable("set_len")?;
        let mut st = self.fs.lock();
        st.inode(self, "set_len")?;
        st.tick(&self.path, "set_len")?;
        let len = usize::try_from(len).map_err(|_| {
            sim_err(
                &self.path,
                "set_len",
                io::ErrorKind::InvalidInput,
                "too large",
            )
        })?;
        let inode = st.inode(self, "set_len")?;
        let old = inode.live.len() as u64;
        inode.live.resize(len, 0);
        inode.touch(old.min(len as u64), old.max(len as u64));
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        let mut st = self.fs.lock();
        st.inode(self, "sync_data")?;
        st.stats.syncs += 1;
        st.tick(&self.path, "sync_data")?;
        let inode = st.inode(self, "sync_data")?;
        inode.durable = inode.live.clone();
        inode.dirty.clear();
        let id = self.inode;
        st.pending.retain(|w| w.inode != id);
        Ok(())
    }
    fn sync_all(&self) -> Result<()> {
        self.sync_data()
    }
}

impl Storage for SimulatedFs {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn FileHandle>> {
        let mut st = self.lock();
        let existing = st.live_files.get(path).copied();
        let inode = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(sim_err(
                    path,
                    "open",
                    io::ErrorKind::AlreadyExists,
                    "file exists",
                ))
            }
            (Some(i), OpenMode::CreateTruncate) => {
                st.tick(path, "open")?;
                if let Some(n) = st.inodes.get_mut(&i) {
                    let old = n.live.len() as u64;
                    n.live.clear();
                    n.touch(0, old);
                }
                i
            }
            (Some(i), _) => i,
            (None, OpenMode::Read | OpenMode::ReadWrite) => {
                return Err(sim_err(
                    path,
                    "open",
                    io::ErrorKind::NotFound,
                    "no such file",
                ))
            }
            (None, _) => {
                st.check_parent(path, "open")?;
                st.tick(path, "open")?;
                let i = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(i, Inode::default());
                st.live_files.insert(path.to_path_buf(), i);
                st.note_name(NameKind::Link(path.to_path_buf(), i));
                i
            }
        };
        Ok(Box::new(SimFile {
            fs: self.clone(),
            inode,
            epoch: st.epoch,
            path: path.to_path_buf(),
            writable: mode.writable(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.lock().live_files.contains_key(path))
    }

    fn entry_type(&self, path: &Path) -> Result<Option<EntryType>> {
        let st = self.lock();
        Ok(if st.live_files.contains_key(path) {
            Some(EntryType::File)
        } else if st.dir_exists(path) {
            Some(EntryType::Dir)
        } else {
            None
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.lock();
        st.tick(from, "rename")?;
        st.check_parent(to, "rename")?;
        let inode = st
            .live_files
            .remove(from)
            .ok_or_else(|| sim_err(from, "rename", io::ErrorKind::NotFound, "no such file"))?;
        st.live_files.insert(to.to_path_buf(), inode);
        st.note_name(NameKind::Rename(
            from.to_path_buf(),
            to.to_path_buf(),
            inode,
        ));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut st = self.lock();
        st.tick(path, "remove_file")?;
        let inode = st
            .live_files
            .remove(path)
            .ok_or_else(|| sim_err(path, "remove_file", io::ErrorKind::NotFound, "no such file"))?;
        st.note_name(NameKind::Unlink(path.to_path_buf(), inode));
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> Result<Vec<OsString>> {
        let st = self.lock();
        if !st.dir_exists(dir) {
            return Err(sim_err(
                dir,
                "read_dir",
                io::ErrorKind::NotFound,
                "no such directory",
            ));
        }
        let mut names: Vec<OsString> = st
            .live_files
            .keys()
            .chain(st.live_dirs.iter())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
            .collect();
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        let mut st = self.lock();
        st.tick(dir, "create_dir_all")?;
        let mut new: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !is_root(a) && !st.live_dirs.contains(*a))
            .map(Path::to_path_buf)
            .collect();
        new.reverse();
        for a in new {
            st.live_dirs.insert(a.clone());
            st.note_name(NameKind::MkDir(a));
        }
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.lock();
        st.tick(dir, "remove_dir")?;
        if !st.live_dirs.contains(dir) {
            return Err(sim_err(
                dir,
                "remove_dir",
                io::ErrorKind::NotFound,
                "no such directory",
            ));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        if st.live_files.keys().any(in_dir) || st.live_dirs.iter().any(in_dir) {
            return Err(sim_err(
                dir,
                "remove_dir",
                io::ErrorKind::DirectoryNotEmpty,
                "directory not empty",
            ));
        }
        st.live_dirs.remove(dir);
        st.note_name(NameKind::RmDir(dir.to_path_buf()));
        Ok(())
    }

    fn supports_sync_filesystem(&self) -> bool {
        true
    }

    fn sync_filesystem(&self, dir: &Path) -> Result<()> {
        let mut st = self.lock();
        st.stats.syncs += 1;
        st.tick(dir, "sync_filesystem")?;
        for inode in st.inodes.values_mut() {
            inode.durable = inode.live.clone();
            inode.dirty.clear();
        }
        st.pending.clear();
        st.name_ops.clear();
        st.durable_files = st.live_files.clone();
        st.durable_dirs = st.live_dirs.clone();
        Ok(())
    }

    /// Through the handles ([`copy_range_through_handles`]): the creation, each write of a chunk
    /// that is not all zeros, the final `set_len` and the `fsync` are I/O points of their own, so a
    /// crash (or [`SimulatedFs::fail_after`], standing for `ENOSPC`) can stop the copy between any
    /// two of them.
    fn copy_range(&self, from: &Path, offset: u64, len: u64, to: &Path) -> Result<u64> {
        copy_range_through_handles(self, from, offset, len, to)
    }

    fn create_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.lock();
        st.check_parent(dir, "create_dir")?;
        if st.live_dirs.contains(dir) || st.live_files.contains_key(dir) {
            return Err(sim_err(
                dir,
                "create_dir",
                io::ErrorKind::AlreadyExists,
                "file exists",
            ));
        }
        st.tick(dir, "create_dir")?;
        st.live_dirs.insert(dir.to_path_buf());
        st.note_name(NameKind::MkDir(dir.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.lock();
        st.stats.syncs += 1;
        st.tick(dir, "sync_dir")?;
        if !st.dir_exists(dir) {
            return Err(sim_err(
                dir,
                "sync_dir",
                io::ErrorKind::NotFound,
                "no such directory",
            ));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        st.durable_files.retain(|p, _| !in_dir(p));
        let live: Vec<(PathBuf, u64)> = st
            .live_files
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        st.durable_files.extend(live);
        st.durable_dirs.retain(|p| !in_dir(p));
        let dirs: Vec<PathBuf> = st.live_dirs.iter().filter(|p| in_dir(p)).cloned().collect();
        st.durable_dirs.extend(dirs);
        for op in &mut st.name_ops {
            op.unsynced.remove(dir);
        }
        st.name_ops.retain(|op| !op.unsynced.is_empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segment_store::io::write_atomically;

    fn setup() -> (SimulatedFs, PathBuf) {
        let fs = SimulatedFs::new();
        let dir = PathBuf::from("/data/t-0");
        fs.create_durable_dir_all(&dir);
        (fs, dir)
    }

    #[test]
    fn unsynced_data_is_lost() {
        let (fs, dir) = setup();
        let p = dir.join("f");
        let f = fs.open(&p, OpenMode::Create).unwrap();
        fs.sync_dir(&dir).unwrap();
        f.append(b"hello").unwrap();
        f.sync_data().unwrap();
        f.append(b" world").unwrap();
        assert_eq!(fs.read(&p).unwrap(), b"hello world");
        let img = fs.crash(TornWrite::None);
        assert_eq!(img.get(&p).unwrap(), b"hello");
        assert_eq!(fs.read(&p).unwrap(), b"hello");
        // Old handles are stale after a crash.
        assert!(f.len().is_err());
    }

    #[test]
    fn torn_tail_keeps_prefix_of_last_write() {
        let (fs, dir) = setup();
        let p = dir.join("f");
        let f = fs.open(&p, OpenMode::Create).unwrap();
        fs.sync_dir(&dir).unwrap();
        f.append(b"abc").unwrap();
        f.sync_data().unwrap();
        f.append(b"defgh").unwrap();
        let img = fs.crash(TornWrite::Prefix(2));
        assert_eq!(img.get(&p).unwrap(), b"abcde");
        // Prefix larger than the write is clamped.
        let f = fs.open(&p, OpenMode::ReadWrite).unwrap();
        f.append(b"XY").unwrap();
        let img = fs.crash(TornWrite::Prefix(100));
        assert_eq!(img.get(&p).unwrap(), b"abcdeXY");
    }

    #[test]
    fn create_and_rename_need_dir_sync() {
        let (fs, dir) = setup();
        let a = dir.join("a");
        let b = dir.join("b");
        let f = fs.open(&a, OpenMode::Create).unwrap();
        f.append(b"x").unwrap();
        f.sync_all().unwrap();
        // File data synced but the name is not durable.
        assert!(fs.crash(TornWrite::None).is_empty());
        assert!(!fs.exists(&a).unwrap());

        let f = fs.open(&a, OpenMode::Create).unwrap();
        f.append(b"x").unwrap();
        f.sync_all().unwrap();
        fs.sync_dir(&dir).unwrap();
        fs.rename(&a, &b).unwrap();
        assert!(fs.exists(&b).unwrap());
        // Rename not durable without sync_dir: the old name comes back.
        let img = fs.crash(TornWrite::None);
        assert_eq!(img.keys().collect::<Vec<_>>(), vec![&a]);

        fs.rename(&a, &b).unwrap();
        fs.sync_dir(&dir).unwrap();
        let img = fs.crash(TornWrite::None);
        assert_eq!(img.keys().collect::<Vec<_>>(), vec![&b]);
        assert_eq!(img.get(&b).unwrap(), b"x");

        fs.remove_file(&b).unwrap();
        assert_eq!(
            fs.crash(TornWrite::None).len(),
            1,
            "remove needs dir sync too"
        );
        fs.remove_file(&b).unwrap();
        fs.sync_dir(&dir).unwrap();
        assert!(fs.crash(TornWrite::None).is_empty());
    }

    #[test]
    fn fail_after_stops_io_and_torn_keeps_inflight_write() {
        let (fs, dir) = setup();
        let p = dir.join("f");
        let f = fs.open(&p, OpenMode::Create).unwrap();
        fs.sync_dir(&dir).unwrap();
        let before = fs.stats();
        fs.fail_after(1);
        f.append(b"12").unwrap();
        assert!(f.append(b"3456").is_err());
        assert!(f.sync_data().is_err());
        assert_eq!(fs.stats().io_points, before.io_points + 1);
        assert_eq!(fs.stats().writes, before.writes + 2);
        // The in-flight write lands after the durable (empty) image at offset 2: a zero gap.
        let img = fs.crash(TornWrite::Prefix(3));
        assert_eq!(img.get(&p).unwrap(), &[0, 0, b'3', b'4', b'5']);
    }

    #[test]
    fn remove_dir_needs_an_empty_dir_and_a_dir_sync() {
        let (fs, dir) = setup();
        let sub = dir.join("q");
        fs.create_dir_all(&sub).unwrap();
        fs.sync_dir(&dir).unwrap();
        let f = sub.join("f");
        fs.open(&f, OpenMode::Create).unwrap();
        let err = fs.remove_dir(&sub).unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::DirectoryNotEmpty));
        fs.remove_file(&f).unwrap();
        fs.remove_dir(&sub).unwrap();
        assert!(fs.list_dir(&dir).unwrap().is_empty());
        assert!(fs.remove_dir(&sub).is_err());
        fs.crash(TornWrite::None);
        assert_eq!(
            fs.list_dir(&dir).unwrap(),
            vec![OsString::from("q")],
            "the removal needs a sync of the parent"
        );
        fs.remove_dir(&sub).unwrap();
        fs.sync_dir(&dir).unwrap();
        fs.crash(TornWrite::None);
        assert!(fs.list_dir(&dir).unwrap().is_empty());
    }

    #[test]
    fn write_atomically_leaves_the_old_or_the_new_content_at_every_crash_point() {
        // open(.tmp), write, fsync, rename, fsync of the directory: five I/O points.
        for n in 0..=5 {
            let (fs, dir) = setup();
            let p = dir.join("state");
            write_atomically(&fs, &p, b"old").unwrap();
            fs.fail_after(n);
            let r = write_atomically(&fs, &p, b"new!");
            assert_eq!(r.is_ok(), n == 5, "crash after {n} points: {r:?}");
            let img = fs.crash(TornWrite::Prefix(usize::MAX));
            assert_eq!(img.keys().collect::<Vec<_>>(), vec![&p], "after {n} points");
            let want: &[u8] = if n == 5 { b"new!" } else { b"old" };
            assert_eq!(img.get(&p).unwrap(), want, "after {n} points");
        }
    }

    #[test]
    fn set_len_and_dirs() {
        let (fs, dir) = setup();
        let sub = dir.join("sub");
        fs.create_dir_all(&sub).unwrap();
        assert_eq!(fs.list_dir(&dir).unwrap(), vec![OsString::from("sub")]);
        let p = sub.join("f");
        let f = fs.open(&p, OpenMode::CreateNew).unwrap();
        assert!(fs.open(&p, OpenMode::CreateNew).is_err());
        f.set_len(4).unwrap();
        assert_eq!(fs.read(&p).unwrap(), vec![0; 4]);
        assert!(fs.open(&dir.join("nope/x"), OpenMode::Create).is_err());
        // Neither sub nor f was made durable.
        fs.crash(TornWrite::None);
        assert!(fs.list_dir(&dir).unwrap().is_empty());
    }

    fn weak() -> WeakModel {
        WeakModel::default()
    }

    #[test]
    fn weak_model_keeps_any_subset_of_unsynced_blocks_and_a_size_without_data() {
        let (fs, dir) = setup();
        let p = dir.join("f");
        let f = fs.open(&p, OpenMode::Create).unwrap();
        fs.sync_dir(&dir).unwrap();
        f.append(&[1u8; BLOCK_SIZE]).unwrap();
        f.sync_data().unwrap();
        // Two more blocks and a half, unsynced: a size and three blocks to choose.
        f.append(&[2u8; BLOCK_SIZE * 2 + 100]).unwrap();
        let states = fs.crash_states(&weak(), 0);
        assert_eq!(
            (states.choices, states.exhaustive, states.explored),
            (4, true, 16)
        );
        let contents: BTreeSet<Vec<u8>> = states
            .images
            .iter()
            .map(|i| i.files.get(&p).cloned().unwrap())
            .collect();
        let synced = vec![1u8; BLOCK_SIZE];
        assert!(contents.contains(&synced), "nothing unsynced kept");
        // The new size without its data: zeros after the synced block.
        let mut zeros = synced.clone();
        zeros.resize(BLOCK_SIZE * 3 + 100, 0);
        assert!(contents.contains(&zeros));
        // The last block without the one before it.
        let mut hole = zeros.clone();
        hole[BLOCK_SIZE * 3..].fill(2);
        assert!(contents.contains(&hole));
        // Every image keeps the synced block.
        assert!(contents.iter().all(|c| c.starts_with(&synced)));
        // The model the `crash` of today keeps none of it.
        assert_eq!(fs.crash(TornWrite::None).get(&p), Some(&synced));
        assert_eq!(fs.crash_states(&weak(), 0).choices, 0);
    }

    #[test]
    fn weak_model_lets_a_rename_persist_before_the_data_unless_it_was_synced() {
        for fsync_first in [false, true] {
            let (fs, dir) = setup();
            let p = dir.join("state");
            write_atomically(&fs, &p, b"old").unwrap();
            let tmp = dir.join("state.tmp");
            let f = fs.open(&tmp, OpenMode::CreateTruncate).unwrap();
            f.write_at(0, b"new!").unwrap();
            if fsync_first {
                f.sync_all().unwrap();
            }
            fs.rename(&tmp, &p).unwrap();
            let weak_contents: BTreeSet<Vec<u8>> = fs
                .crash_states(&weak(), 0)
                .images
                .iter()
                .filter_map(|i| i.files.get(&p).cloned())
                .collect();
            let mut want: BTreeSet<Vec<u8>> = [b"old".to_vec(), b"new!".to_vec()].into();
            if !fsync_first {
                // The name without the data, or with only its new size.
                want.extend([Vec::new(), vec![0; 4]]);
            }
            assert_eq!(weak_contents, want, "fsync first: {fsync_first}");
            // Today's model: the rename is not durable without a sync of the directory.
            assert_eq!(fs.crash(TornWrite::None).get(&p).unwrap(), b"old");
        }
    }

    #[test]
    fn weak_model_directory_entries_are_durable_only_after_a_directory_sync() {
        let (fs, dir) = setup();
        let sub = dir.join("q");
        fs.create_dir(&sub).unwrap();
        let f = fs.open(&sub.join("x"), OpenMode::CreateNew).unwrap();
        f.sync_all().unwrap();
        let states = fs.crash_states(&weak(), 0);
        // mkdir q, create q/x: q/x survives only with q.
        assert_eq!(states.choices, 2);
        let kept: BTreeSet<(bool, bool)> = states
            .images
            .iter()
            .map(|i| (i.dirs.contains(&sub), i.files.contains_key(&sub.join("x"))))
            .collect();
        assert_eq!(kept, [(false, false), (true, false), (true, true)].into());
        fs.sync_dir(&sub).unwrap();
        fs.sync_dir(&dir).unwrap();
        let states = fs.crash_states(&weak(), 0);
        assert_eq!((states.choices, states.images.len()), (0, 1));
        assert!(states.images[0].files.contains_key(&sub.join("x")));
    }

    #[test]
    fn weak_model_samples_a_fixed_number_of_states_beyond_the_exhaustive_bound() {
        let (fs, dir) = setup();
        let p = dir.join("f");
        let f = fs.open(&p, OpenMode::Create).unwrap();
        fs.sync_dir(&dir).unwrap();
        f.append(&vec![3u8; BLOCK_SIZE * 20]).unwrap();
        let model = WeakModel {
            samples: 10,
            ..weak()
        };
        let a = fs.crash_states(&model, 7);
        assert_eq!((a.choices, a.exhaustive, a.explored), (21, false, 12));
        assert!(a.images.len() > 2 && a.images.len() <= 12);
        // Seeded: the same sample again.
        assert_eq!(fs.crash_states(&model, 7).images, a.images);
        // The in-flight write's blocks are choices too.
        fs.fail_after(0);
        assert!(f.append(&[4u8; 10]).is_err());
        assert_eq!(fs.crash_states(&model, 7).choices, 22);
    }

    #[test]
    fn from_image_recreates_a_durable_tree() {
        let (fs, dir) = setup();
        write_atomically(&fs, &dir.join("a"), b"1").unwrap();
        fs.create_dir_all(&dir.join("e/f")).unwrap();
        fs.sync_dir(&dir).unwrap();
        fs.sync_dir(&dir.join("e")).unwrap();
        let img = fs.durable_state();
        let copy = SimulatedFs::from_image(&img);
        assert_eq!(copy.read(&dir.join("a")).unwrap(), b"1");
        assert_eq!(
            copy.entry_type(&dir.join("e/f")).unwrap(),
            Some(EntryType::Dir)
        );
        copy.crash(TornWrite::None);
        assert_eq!(copy.durable_state(), img);
    }
}
