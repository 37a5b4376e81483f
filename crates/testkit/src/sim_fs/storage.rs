//! The [`Storage`] and [`FileHandle`] implementations of [`SimulatedFs`].

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use super::{is_root, sim_err, write_into, Inode, NameKind, PendingWrite, SimulatedFs};
use segment_store::internals::copy_range_through_handles;
use segment_store::Result;
use segment_store::{EntryType, FileHandle, OpenMode, Storage};

/// A handle into a [`SimulatedFs`].
#[derive(Debug)]
pub struct SimFile {
    fs: SimulatedFs,
    pub(super) inode: u64,
    pub(super) epoch: u64,
    pub(super) path: PathBuf,
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
