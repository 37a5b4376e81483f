//! Snapshot overlay: the producer-state rules run unchanged against a copy-on-write overlay of
//! the directory ([`PlanIo`]), their file operations recorded instead of made.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustc_hash::FxHashMap;

use super::types::{SnapshotOp, SnapshotPhase};
use super::work;
use crate::snapshot::{SnapshotIo, StorageIo};

#[derive(Default)]
struct Overlay {
    /// Files the plan changes, as it leaves them. (Hashed: the plan of a full recovery writes a
    /// snapshot per segment, and ordering paths compares them component by component.)
    files: FxHashMap<PathBuf, FileState>,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
    phase: Option<SnapshotPhase>,
}

/// A file of the [`Overlay`].
struct FileState {
    content: Content,
    /// A `Write` among the overlay's operations wrote it.
    written: bool,
}

/// What a file of the [`Overlay`] holds.
enum Content {
    /// Removed (or moved away).
    Removed,
    /// Moved here with these bytes.
    Bytes(Vec<u8>),
    /// The bytes of the `Write` at this index of the operations (kept once, not twice).
    Written(usize),
}

impl Overlay {
    /// Sets what `path` holds, keeping whether it was written.
    fn set(&mut self, path: &Path, content: Content) {
        match self.files.get_mut(path) {
            Some(f) => f.content = content,
            None => {
                self.files.insert(
                    path.to_path_buf(),
                    FileState {
                        content,
                        written: false,
                    },
                );
            }
        }
    }

    /// The bytes of `path`: `None` if the plan did not change it, `Some(None)` if removed.
    fn bytes_of(&self, path: &Path) -> Option<Option<&[u8]>> {
        let f = self.files.get(path)?;
        Some(match &f.content {
            Content::Removed => None,
            Content::Bytes(b) => Some(b),
            Content::Written(i) => match self.ops.get(*i) {
                Some((_, SnapshotOp::Write { bytes, .. })) => Some(bytes),
                _ => None,
            },
        })
    }
}

/// A [`SnapshotIo`] that reads through the real one and records every change instead of making it.
pub(super) struct PlanIo {
    base: StorageIo,
    overlay: Mutex<Overlay>,
    /// Each directory's names as listed once: a plan changes nothing, so they stay true.
    listed: Mutex<BTreeMap<PathBuf, BTreeSet<String>>>,
}

impl PlanIo {
    /// `listed`: a directory and its names, as the plan already listed them.
    pub(super) fn new(base: StorageIo, listed: (PathBuf, &[OsString])) -> Self {
        let (dir, names) = listed;
        let names = names.iter().filter_map(|n| n.to_str()).map(str::to_owned);
        Self {
            base,
            overlay: Mutex::new(Overlay {
                phase: Some(SnapshotPhase::BeforeInstall),
                ..Overlay::default()
            }),
            listed: Mutex::new(BTreeMap::from([(dir, names.collect())])),
        }
    }

    /// The names of `dir` on the storage (listed at most once; a missing directory is empty)
    /// that `keep` keeps.
    fn base_list(
        &self,
        dir: &Path,
        mut keep: impl FnMut(&str) -> bool,
    ) -> io::Result<BTreeSet<String>> {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        work::probe(1);
        if !listed.contains_key(dir) {
            let names: BTreeSet<String> = match self.base.list(dir) {
                Ok(n) => n.into_iter().collect(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
                Err(e) => return Err(e),
            };
            listed.insert(dir.to_path_buf(), names);
        }
        Ok(listed
            .get(dir)
            .into_iter()
            .flatten()
            .filter(|n| keep(n))
            .cloned()
            .collect())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Overlay> {
        self.overlay.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn set_phase(&self, phase: SnapshotPhase) {
        self.lock().phase = Some(phase);
    }

    fn record(&self, op: SnapshotOp) {
        let mut o = self.lock();
        let phase = o.phase.unwrap_or(SnapshotPhase::AfterInstall);
        o.ops.push((phase, op));
    }

    fn move_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        // A file longer than a snapshot is read is not carried over (nothing in the plan reads
        // it at its new name): its move is recorded, its bytes are never in memory.
        let bytes = match self.read_capped(from, crate::snapshot::MAX_SNAPSHOT_BYTES) {
            Ok(bytes) => Some(bytes),
            Err(e) if crate::snapshot::too_large_size(&e).is_some() => None,
            Err(e) => return Err(e),
        };
        let mut o = self.lock();
        o.set(from, Content::Removed);
        if let Some(bytes) = bytes {
            o.set(to, Content::Bytes(bytes));
        }
        Ok(())
    }

    pub(super) fn quarantine(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.move_file(from, to)?;
        self.record(SnapshotOp::Quarantine {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    /// Whether the plan writes `path` (a snapshot the scan takes).
    pub(super) fn written(&self, path: &Path) -> bool {
        work::probe(1);
        self.lock().files.get(path).is_some_and(|f| f.written)
    }

    pub(super) fn into_ops(self) -> Vec<(SnapshotPhase, SnapshotOp)> {
        self.overlay
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .ops
    }
}

impl SnapshotIo for PlanIo {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.lock().bytes_of(path) {
            Some(Some(b)) => return Ok(b.to_vec()),
            Some(None) => return Err(io::Error::from(io::ErrorKind::NotFound)),
            None => {}
        }
        self.base.read(path)
    }

    fn read_capped(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        match self.lock().bytes_of(path) {
            Some(Some(b)) if b.len() as u64 > limit => {
                return Err(crate::snapshot::file_too_large(path, b.len() as u64, limit))
            }
            Some(Some(b)) => return Ok(b.to_vec()),
            Some(None) => return Err(io::Error::from(io::ErrorKind::NotFound)),
            None => {}
        }
        self.base.read_capped(path, limit)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut o = self.lock();
        let phase = o.phase.unwrap_or(SnapshotPhase::AfterInstall);
        let at = o.ops.len();
        o.ops.push((
            phase,
            SnapshotOp::Write {
                path: path.to_path_buf(),
                bytes: bytes.to_vec(),
            },
        ));
        o.set(path, Content::Written(at));
        if let Some(f) = o.files.get_mut(path) {
            f.written = true;
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let o = self.lock();
        let mut names = self.base_list(dir, |n| {
            work::probe(1);
            !matches!(
                o.files.get(&dir.join(n)),
                Some(FileState {
                    content: Content::Removed,
                    ..
                })
            )
        })?;
        for (p, f) in &o.files {
            if !matches!(f.content, Content::Removed) && p.parent() == Some(dir) {
                if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
                    work::probe(1);
                    names.insert(n.to_owned());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        // The snapshot rules rename only to set a corrupt snapshot aside.
        self.move_file(from, to)?;
        self.record(SnapshotOp::SetAside {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        if let Some(f) = self.lock().files.get(path) {
            return !matches!(f.content, Content::Removed);
        }
        let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        match (path.parent().and_then(|d| listed.get(d)), path.file_name()) {
            (Some(names), Some(name)) => {
                work::probe(1);
                name.to_str().is_some_and(|n| names.contains(n))
            }
            _ => self.base.exists(path),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.lock().set(path, Content::Removed);
        self.record(SnapshotOp::Remove {
            path: path.to_path_buf(),
        });
        Ok(())
    }
}
