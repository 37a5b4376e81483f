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
    /// Counts a mutating call; fails it if the fail point has been reached.
    fn tick(&mut self, path: &Path, op: &'static str) -> Result<()> {
        if let Some(at) = self.fail_at {
            if self.stats.io_points >= at {
                return Err(sim_err(path, op, io::ErrorKind::Other, "simulated crash"));
            }
        }
        self.stats.io_points += 1;
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
            }
            st.epoch += 1;
            st.fail_at = None;
        }
        self.durable_image()
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
            st.pending.push(pending);
            return Err(e);
        }
        write_into(&mut st.inode(self, "write_at")?.live, offset, data);
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
        st.inode(self, "set_len")?.live.resize(len, 0);
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        let mut st = self.fs.lock();
        st.inode(self, "sync_data")?;
        st.stats.syncs += 1;
        st.tick(&self.path, "sync_data")?;
        let inode = st.inode(self, "sync_data")?;
        inode.durable = inode.live.clone();
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
                    n.live.clear();
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
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut st = self.lock();
        st.tick(path, "remove_file")?;
        st.live_files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| sim_err(path, "remove_file", io::ErrorKind::NotFound, "no such file"))
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
        for a in dir.ancestors().filter(|a| !is_root(a)) {
            st.live_dirs.insert(a.to_path_buf());
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
        }
        st.pending.clear();
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
}
