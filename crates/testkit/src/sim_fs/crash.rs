//! Crashes: the crash models, the crash images a crash can leave, and their enumeration.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::{is_root, write_into, Inode, NameKind, SimState, SimulatedFs};

/// The unit of atomicity of [`CrashModel::Weak`]: a crash keeps each unsynced block of a file
/// whole or not at all.
pub const BLOCK_SIZE: usize = 4096;

/// What a crash may leave, selectable per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrashModel {
    /// The durable bytes and names only (what was synced), plus at most a prefix of the write
    /// in flight ([`TornWrite`](crate::TornWrite)): [`SimulatedFs::crash`].
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
///   Composite operations ([`Storage::copy_range`](segment_store::Storage::copy_range), rename-based quarantine,
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
    /// The distinct images, the all-nothing one (what [`TornWrite::None`](crate::TornWrite::None) keeps) first.
    pub images: Vec<CrashImage>,
}

#[derive(Debug, Clone, Copy)]
enum Choice {
    Block(u64, u64),
    Size(u64),
    Name(usize),
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
            let mut x = crate::rng::XorShift::new(
                (model.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1,
            );
            for _ in 0..model.samples {
                let bits: Vec<bool> = (0..choices.len()).map(|_| x.next_u64() & 1 == 1).collect();
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

    /// The image [`Self::crash`]`(`[`TornWrite::None`](crate::TornWrite::None)`)` would leave, directories included.
    pub fn durable_state(&self) -> CrashImage {
        let st = self.lock();
        st.image_of(&[], &|_| false)
    }
}
