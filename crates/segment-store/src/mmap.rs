//! The only module in seglog with `unsafe`: memory-mapping files ([`MmapFile`] under the
//! directory lock, [`GuardedMap`] without it), and anonymous mappings on huge pages for large
//! tables ([`HugePageAlloc`]).
//!
//! Mapping a file is `unsafe` in `memmap2` because the bytes behind a map can change, or vanish,
//! under the program: another process may write or truncate the file (a read of a page past the
//! new end raises `SIGBUS`), and even this process could truncate it through another handle. A
//! safe wrapper is only sound if it rules those out; see [`MmapFile`] for how this one does.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::{Result, SegmentError};
use crate::io::{OpenMode, StdFs};
use crate::lock::{DirLock, LockedFile};

/// [`MmapFile::write_at`] writes at least this many bytes through the file handle rather than
/// through the map.
const WRITE_THROUGH_FILE_BYTES: usize = 64 * 1024;

/// A file mapped into memory for reading (and, if opened writable, writing in place).
///
/// # Invariants
///
/// The safe API rests on these; each `unsafe` block below names the ones it relies on.
///
/// 1. **The owner holds the directory lock.** Every constructor takes the [`DirLock`] of a
///    directory containing the file and keeps a clone for the map's lifetime, so no other
///    cooperating process can open the directory's files while the map exists.
/// 2. **One map per file per process.** The file handle holds an exclusive `fs2` lock on the file
///    itself for the map's lifetime, so a second [`MmapFile`] on the same file (in this process or
///    another seglog process) fails with [`SegmentError::Locked`] instead of aliasing the map.
/// 3. **Never truncated while mapped.** The length only changes in [`MmapFile::resize`], which
///    drops (unmaps) the current map *before* `set_len` and maps again afterwards, as Kafka's
///    `AbstractIndex.resize` does with `safeForceUnmap`. No view of the old map can outlive it:
///    views borrow `&self`, and `resize` takes `&mut self`. A sealed `.log`'s read-only map that
///    file slices share (`SharedMap` in `file_records.rs`) is reached by them only through a gate
///    the segment retires (waiting for the copies in flight) before it drops its map and before
///    the file's length changes. So is the active segment's read-only map of its `.log` (mapped
///    at the length the file had, again as it grows: appends only lengthen the file), which
///    readers of the published tail share: the segment retires it before any truncation of the
///    file, before it seals, and when it is dropped.
/// 4. **Other processes must not modify the file.** This is a convention the lock files make
///    checkable for seglog processes; it cannot be enforced against arbitrary programs (nor
///    against a running Kafka broker, whose JVM locks do not interact with `flock`). Do not run
///    seglog on files another program is writing.
/// 5. **Reads are bounds-checked slices.** Callers get `&[u8]` views and decode with
///    `from_be_bytes`; nothing is cast to a struct.
///
/// An empty file is not mapped at all (the view is the empty slice): zero-length maps are not
/// portable.
pub struct MmapFile {
    // Field order matters for drop: the map is unmapped before the file (and its lock) closes.
    map: Option<Map>,
    file: LockedFile,
    path: PathBuf,
    len: u64,
    writable: bool,
    _dir_lock: DirLock,
}

enum Map {
    ReadOnly(Mmap),
    ReadWrite(MmapMut),
}

impl std::fmt::Debug for MmapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

fn to_usize(path: &Path, len: u64) -> Result<usize> {
    usize::try_from(len).map_err(|_| {
        SegmentError::io(
            path,
            "mmap",
            io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"),
        )
    })
}

impl MmapFile {
    /// Maps an existing file, locking it exclusively (see the invariants).
    pub fn open(lock: &DirLock, path: &Path, writable: bool) -> Result<MmapFile> {
        let file = Self::open_existing(lock, path, writable)?;
        Self::from_file(lock, path, file, writable, None)
    }

    /// Opens the existing regular file `path`, which `lock` must cover.
    fn open_existing(lock: &DirLock, path: &Path, writable: bool) -> Result<File> {
        Self::check_covered(lock, path)?;
        let mode = if writable {
            OpenMode::ReadWrite
        } else {
            OpenMode::Read
        };
        StdFs::open_std(path, mode)
    }

    /// [`Self::open`] (writable), first zero-extending the file to `len` if it is shorter and
    /// `grow_from(its length)` says so: one map of the final length instead of a map of the old
    /// one and a resize. Returns the length the file had.
    pub fn open_grown(
        lock: &DirLock,
        path: &Path,
        len: u64,
        grow_from: impl Fn(u64) -> bool,
    ) -> Result<(MmapFile, u64)> {
        let file = Self::open_existing(lock, path, true)?;
        let mut m = Self::from_file_unmapped(lock, path, file, true, None)?;
        let original = m.len;
        if len > original && grow_from(original) {
            to_usize(path, len)?;
            m.file
                .file()
                .set_len(len)
                .map_err(|e| SegmentError::io(path, "set_len", e))?;
            m.len = len;
        }
        m.map = m.map_current()?;
        Ok((m, original))
    }

    /// Creates a new file (failing if it exists), sets its length to `len` (zero-filled) and maps
    /// it writable.
    pub fn create(lock: &DirLock, path: &Path, len: u64) -> Result<MmapFile> {
        Self::check_covered(lock, path)?;
        let file = StdFs::open_std(path, OpenMode::CreateNew)?;
        Self::from_file(lock, path, file, true, Some(len))
    }

    fn check_covered(lock: &DirLock, path: &Path) -> Result<()> {
        if lock.covers(path) {
            Ok(())
        } else {
            Err(SegmentError::NotUnderLock {
                path: path.to_path_buf(),
                lock_dir: lock.dir().to_path_buf(),
            })
        }
    }

    fn from_file(
        lock: &DirLock,
        path: &Path,
        file: File,
        writable: bool,
        set_len: Option<u64>,
    ) -> Result<MmapFile> {
        let mut m = Self::from_file_unmapped(lock, path, file, writable, set_len)?;
        m.map = m.map_current()?;
        Ok(m)
    }

    /// [`Self::from_file`] without the map (the caller maps).
    fn from_file_unmapped(
        lock: &DirLock,
        path: &Path,
        file: File,
        writable: bool,
        set_len: Option<u64>,
    ) -> Result<MmapFile> {
        // Invariant 2, before the length is read or changed and before mapping.
        let file = LockedFile::lock(path, file)?;
        if let Some(len) = set_len {
            file.file()
                .set_len(len)
                .map_err(|e| SegmentError::io(path, "set_len", e))?;
        }
        let len = file
            .file()
            .metadata()
            .map_err(|e| SegmentError::io(path, "metadata", e))?
            .len();
        Ok(MmapFile {
            map: None,
            file,
            path: path.to_path_buf(),
            len,
            writable,
            _dir_lock: lock.clone(),
        })
    }

    /// Maps `self.file` at `self.len`. Must only be called with no live map.
    fn map_current(&self) -> Result<Option<Map>> {
        if self.len == 0 {
            return Ok(None);
        }
        let len = to_usize(&self.path, self.len)?;
        let map = if self.writable {
            // SAFETY: invariants 1, 2 and 4 mean no other handle writes or truncates this file
            // while the map exists; invariant 3 (callers hold no other map: `map` is `None` here)
            // means this process does not truncate it either. `len` is the file's current length,
            // so every mapped page is backed by the file.
            let m = unsafe { MmapOptions::new().len(len).map_mut(self.file.file()) };
            let m = m.map_err(|e| SegmentError::io(&self.path, "mmap", e))?;
            // Writable maps are the offset and time indexes: written one entry at a time and
            // binary-searched. Without this hint the first touch of a fresh, preallocated (sparse)
            // index faults in a whole readahead window of zero pages, on the append path.
            // Advisory only, so a failure is ignored.
            #[cfg(unix)]
            let _ = m.advise(memmap2::Advice::Random);
            Map::ReadWrite(m)
        } else {
            let mut options = MmapOptions::new();
            options.len(len);
            // SAFETY: as above: invariants 1-4 keep the file at least `len` bytes long and
            // unmodified by others for the lifetime of the map.
            let m = unsafe { options.map(self.file.file()) };
            let m = m.map_err(|e| SegmentError::io(&self.path, "mmap", e))?;
            // Read-only maps are mostly `.log` files read front to back (fetches, producer-state
            // replays): twice the read-around of a fault when they are not in the page cache.
            // Advisory only.
            #[cfg(target_os = "linux")]
            let _ = rustix::fs::fadvise(self.file.file(), 0, None, rustix::fs::Advice::Sequential);
            Map::ReadOnly(m)
        };
        Ok(Some(map))
    }

    /// The mapped file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file (and map) length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The whole mapped file.
    pub fn as_slice(&self) -> &[u8] {
        match &self.map {
            None => &[],
            Some(Map::ReadOnly(m)) => m,
            Some(Map::ReadWrite(m)) => m,
        }
    }

    /// `len` bytes at `offset`, or `None` if out of bounds.
    pub fn read(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.as_slice().get(offset..offset.checked_add(len)?)
    }

    /// Copies `data` into the map at `offset`. Fails if read-only or out of bounds.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(SegmentError::ReadOnly {
                path: self.path.clone(),
            });
        }
        let out_of_bounds = || {
            SegmentError::io(
                &self.path,
                "mmap write",
                io::Error::new(io::ErrorKind::InvalidInput, "write past the end of the map"),
            )
        };
        let end = offset.checked_add(data.len()).ok_or_else(out_of_bounds)?;
        match &mut self.map {
            #[cfg(unix)]
            Some(Map::ReadWrite(m)) if data.len() >= WRITE_THROUGH_FILE_BYTES => {
                use std::os::unix::fs::FileExt;
                if m.get(offset..end).is_none() {
                    return Err(out_of_bounds());
                }
                // Through the file: the map shows the same page-cache pages, and no view of the
                // map is alive (`&mut self`). One `pwrite` fills fresh pages without taking a
                // write fault per page.
                let position = u64::try_from(offset).map_err(|_| out_of_bounds())?;
                self.file
                    .file()
                    .write_all_at(data, position)
                    .map_err(|e| SegmentError::io(&self.path, "write_at", e))
            }
            Some(Map::ReadWrite(m)) => {
                let dst = m.get_mut(offset..end).ok_or_else(out_of_bounds)?;
                dst.copy_from_slice(data);
                Ok(())
            }
            _ if data.is_empty() && offset == 0 => Ok(()),
            _ => Err(out_of_bounds()),
        }
    }

    /// Writes dirty pages back to the file (`msync`).
    pub fn flush(&self) -> Result<()> {
        match &self.map {
            Some(Map::ReadWrite(m)) => m
                .flush()
                .map_err(|e| SegmentError::io(&self.path, "msync", e)),
            _ => Ok(()),
        }
    }

    /// [`Self::flush`], then the file's data and length synced (`fdatasync`): a length set by a
    /// resize is durable only once its file is synced, which `msync` does not do.
    pub fn sync(&self) -> Result<()> {
        self.flush()?;
        if self.writable {
            self.file
                .file()
                .sync_data()
                .map_err(|e| SegmentError::io(&self.path, "fdatasync", e))?;
        }
        Ok(())
    }

    /// Unmaps, sets the file length to `len` and closes (unlocking): [`Self::resize`] without
    /// mapping the new length only to unmap it again.
    pub fn close_with_len(mut self, len: u64) -> Result<()> {
        // Invariant 3: unmapped before the length changes.
        self.map = None;
        if len == self.len {
            return Ok(());
        }
        self.set_file_len(len)
            .map_err(|e| SegmentError::io(&self.path, "set_len", e))
    }

    /// Sets the file's length, through a temporary read-write handle if it is mapped read-only
    /// (as Kafka's `resize` does). The caller has unmapped it (invariant 3).
    fn set_file_len(&self, len: u64) -> io::Result<()> {
        if self.writable {
            self.file.file().set_len(len)
        } else {
            StdFs::open_std(&self.path, OpenMode::ReadWrite)
                .map_err(io::Error::other)?
                .set_len(len)
        }
    }

    /// Changes the file length to `new_len` (truncating or zero-extending) and remaps it.
    /// Unmaps first, so no map ever covers bytes past the end of the file. Works on read-only
    /// maps too (through a temporary read-write handle), as Kafka's `resize` does.
    pub fn resize(&mut self, new_len: u64) -> Result<()> {
        if new_len == self.len {
            return Ok(());
        }
        // Fail before unmapping if the new length cannot be mapped at all.
        to_usize(&self.path, new_len)?;
        // Invariant 3: unmap before the length changes. Unmapping a shared map loses nothing
        // (dirty pages stay in the page cache and are written back as usual), so no msync here:
        // durability is `flush`'s job, as in Kafka's `AbstractIndex.resize`.
        self.map = None;
        match self.set_file_len(new_len) {
            Ok(()) => self.len = new_len,
            Err(e) => {
                // The length did not change: restore the old map before reporting.
                self.map = self.map_current()?;
                return Err(SegmentError::io(&self.path, "set_len", e));
            }
        }
        self.map = self.map_current()?;
        Ok(())
    }
}

/// A read-only map of a file whose directory this process does not lock (a `.log` that `verify`
/// scans, which a broker may truncate meanwhile), on Linux.
///
/// Such a map cannot rule out invariant 4 of [`MmapFile`]: a page past the file's new end, once
/// truncated, raises `SIGBUS` at its next access, which would end the process. A guarded map
/// registers its address range with this module's `SIGBUS` handler (installed once, the first
/// time one is made): a fault inside a registered range maps anonymous zero pages over the rest
/// of that map, so the access reads zeros, and marks the map [`GuardedMap::was_truncated`]; a
/// fault anywhere else goes to the handler that was there before (Rust's own, which reports a
/// stack overflow) or ends the process as `SIGBUS` does by default. A scan over a guarded map
/// therefore never crashes, and says afterwards whether the file changed under it.
///
/// Bytes a concurrent writer changes inside the range (rewriting rather than truncating) are
/// read as they come, as a `pread` would: the parsers take any bytes.
///
/// When a file is mapped guarded rather than read, and why the handler is kept: docs/design.md,
/// "Reading segment files: maps, guarded maps and reads".
pub struct GuardedMap {
    // Field order matters for drop: the range is unregistered before it is unmapped.
    #[cfg(target_os = "linux")]
    slot: guard::SlotLease,
    #[cfg(target_os = "linux")]
    map: Mmap,
    len: usize,
}

impl std::fmt::Debug for GuardedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMap")
            .field("len", &self.len)
            .field("truncated", &self.was_truncated())
            .finish_non_exhaustive()
    }
}

impl GuardedMap {
    /// Maps the regular file `path` (`len` bytes, its length when the caller opened it)
    /// read-only without any lock, or `None` where a guarded map cannot be made: not Linux, the
    /// handler could not be installed, all [`guard::SLOTS`] ranges are in use, or `len` is 0.
    /// The caller then reads the file instead.
    pub fn open(path: &Path, len: u64) -> Result<Option<GuardedMap>> {
        #[cfg(target_os = "linux")]
        {
            if len == 0 || !guard::install() {
                return Ok(None);
            }
            let len = to_usize(path, len)?;
            let file = StdFs::open_std(path, OpenMode::Read)?;
            let Some(slot) = guard::SlotLease::take() else {
                return Ok(None);
            };
            // SAFETY: no lock keeps the file from changing (invariant 4 of `MmapFile` does not
            // hold), which is what the guard is for: before any byte of the map is read, its
            // range is registered with the SIGBUS handler (`slot.register` below), so a page the
            // file no longer backs reads as zeros instead of ending the process, and the range
            // stays registered until the map is gone (`slot` is dropped first). Bytes rewritten
            // in place by another process are read as they are, as with `pread`: nothing here
            // relies on them staying the same (views are bounds-checked byte slices, invariant 5).
            let map = unsafe { MmapOptions::new().len(len).map(&file) };
            let map = map.map_err(|e| SegmentError::io(path, "mmap", e))?;
            slot.register(map.as_ptr() as usize, len);
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
            Ok(Some(GuardedMap { slot, map, len }))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (path, len);
            Ok(None)
        }
    }

    /// The mapped bytes (zeros where the file was truncated under the map).
    pub fn as_slice(&self) -> &[u8] {
        #[cfg(target_os = "linux")]
        {
            &self.map
        }
        #[cfg(not(target_os = "linux"))]
        {
            &[]
        }
    }

    /// Lets go of the pages of `[from, to)` (rounded inwards to whole pages) that this map holds
    /// in the process's memory, so that a scan front to back keeps only the window it is in,
    /// not the whole file: they stay in the page cache, and a later read of them maps them again.
    /// Advisory: a failure changes nothing.
    pub fn release(&self, from: usize, to: usize) {
        #[cfg(target_os = "linux")]
        {
            let page = guard::page_size();
            let from = from.div_ceil(page).saturating_mul(page);
            let to = to.min(self.len) / page * page;
            if from >= to {
                return;
            }
            // SAFETY: `[from, to)` is whole pages inside this map (bounds checked above). The map
            // is a shared, read-only map of a file (or, past a truncation, anonymous zero pages):
            // MADV_DONTNEED only drops the pages from this process's page tables, and the next
            // read maps the same page-cache page (or zero page) again, so no byte that a live
            // view of the map reads changes.
            unsafe {
                libc::madvise(
                    self.map.as_ptr().add(from) as *mut libc::c_void,
                    to - from,
                    libc::MADV_DONTNEED,
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (from, to);
    }

    /// Whether a read of the map faulted on a page the file no longer backed (it was truncated,
    /// or the page could not be read from the disk), so some bytes read as zeros: whatever was
    /// concluded from them is not about the file as it is.
    pub fn was_truncated(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.slot.hit()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

/// The `SIGBUS` handler of [`GuardedMap`] and its table of guarded ranges.
#[cfg(target_os = "linux")]
pub mod guard {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    /// How many guarded maps can exist at once (one per scanning thread is what recovery uses).
    pub const SLOTS: usize = 64;

    /// One guarded range. Its `start` and `end` change only between two increments of
    /// `generation` (odd while they change), all sequentially consistent, so a handler that
    /// reads the same even generation before and after reading them has read one range, not the
    /// start of one and the end of the next.
    struct Slot {
        taken: AtomicBool,
        generation: AtomicUsize,
        start: AtomicUsize,
        end: AtomicUsize,
        hit: AtomicBool,
    }

    impl Slot {
        const fn new() -> Slot {
            Slot {
                taken: AtomicBool::new(false),
                generation: AtomicUsize::new(0),
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                hit: AtomicBool::new(false),
            }
        }

        /// The registered range's end if it contains `addr`; `None` for a slot that is empty or
        /// changing (never the slot of the faulting map: that map is alive, so its range is).
        fn end_if_covers(&self, addr: usize) -> Option<usize> {
            let before = self.generation.load(Ordering::SeqCst);
            let start = self.start.load(Ordering::SeqCst);
            let end = self.end.load(Ordering::SeqCst);
            let after = self.generation.load(Ordering::SeqCst);
            let stable = before == after && before.is_multiple_of(2);
            (stable && start != 0 && start <= addr && addr < end).then_some(end)
        }

        fn set(&self, start: usize, end: usize) {
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.start.store(start, Ordering::SeqCst);
            self.end.store(end, Ordering::SeqCst);
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    /// The `SIGBUS` action before ours, for faults outside every guarded range.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    static INSTALLED: OnceLock<bool> = OnceLock::new();

    /// One slot of the table, held by one [`super::GuardedMap`]; freed on drop.
    pub(super) struct SlotLease(&'static Slot);

    impl SlotLease {
        pub(super) fn take() -> Option<SlotLease> {
            TABLE
                .iter()
                .find(|s| {
                    s.taken
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                })
                .map(SlotLease)
        }

        pub(super) fn register(&self, start: usize, len: usize) {
            self.0.hit.store(false, Ordering::SeqCst);
            self.0.set(start, start.saturating_add(len));
        }

        pub(super) fn hit(&self) -> bool {
            self.0.hit.load(Ordering::Acquire)
        }
    }

    impl Drop for SlotLease {
        fn drop(&mut self) {
            self.0.set(0, 0);
            self.0.taken.store(false, Ordering::Release);
        }
    }

    /// The page size the handler rounds to.
    pub(super) fn page_size() -> usize {
        PAGE.load(Ordering::Relaxed)
    }

    /// Installs the handler once; whether it is in place now (code embedding seglog may have
    /// installed a `SIGBUS` action of its own since: then no guarded map is made).
    pub(super) fn install() -> bool {
        *INSTALLED.get_or_init(install_once)
            && current_action().is_some_and(|a| a.sa_sigaction == on_sigbus as *const () as usize)
    }

    /// The `SIGBUS` action in place.
    fn current_action() -> Option<libc::sigaction> {
        // SAFETY: `sigaction` is plain data, for which all zeros is a valid value.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the current action (null new action) into a valid out-parameter
        // changes nothing.
        let read = unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) };
        (read == 0).then_some(current)
    }

    fn install_once() -> bool {
        // SAFETY: `sysconf` only reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(page) = usize::try_from(page) {
            if page.is_power_of_two() {
                PAGE.store(page, Ordering::Relaxed);
            }
        }
        let Some(previous) = current_action() else {
            return false;
        };
        let _ = PREVIOUS.set(previous);
        // SAFETY: `on_sigbus` has the SA_SIGINFO signature and does only async-signal-safe things
        // (atomic loads and stores, `mmap`, `signal`, `raise`, or the previous action); its mask
        // is empty (SIGBUS itself stays blocked while it runs, the default without SA_NODEFER);
        // it runs on the alternate stack where the thread has one (Rust's threads do).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) == 0
        }
    }

    extern "C" fn on_sigbus(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler; `si_addr` is
        // the faulting address when the kernel raised the signal for a fault (`si_code` > 0),
        // and is not looked at otherwise (a SIGBUS sent with `kill` carries no address).
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        let page = PAGE.load(Ordering::Relaxed);
        for slot in TABLE.iter().filter(|_| code > 0) {
            let Some(end) = slot.end_if_covers(addr) else {
                continue;
            };
            let from = addr & !(page - 1);
            // SAFETY: [from, end) lies inside a live map of a `GuardedMap` (its range stays
            // registered until the map is gone), which only reads it; MAP_FIXED replaces just
            // those pages of it with anonymous zero pages, so the faulting read and every later
            // read of the range find memory, and the map's own `munmap` removes them with it.
            let p = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                slot.hit.store(true, Ordering::Release);
                return;
            }
            break;
        }
        // Not a guarded range: what would have happened without this handler.
        match PREVIOUS.get() {
            Some(previous)
                if previous.sa_sigaction != libc::SIG_DFL
                    && previous.sa_sigaction != libc::SIG_IGN =>
            {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: an action installed with SA_SIGINFO has this signature.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(previous.sa_sigaction) };
                    f(signal, info, context);
                } else {
                    // SAFETY: an action installed without SA_SIGINFO has this signature.
                    let f: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(previous.sa_sigaction) };
                    f(signal);
                }
            }
            _ => {
                // SAFETY: restoring the default action and raising the signal again (delivered
                // when this handler returns) ends the process as SIGBUS does by default.
                unsafe {
                    libc::signal(signal, libc::SIG_DFL);
                    libc::raise(signal);
                }
            }
        }
    }
}

/// Anonymous memory on transparent huge pages, for large tables probed at random (the producer
/// table of a partition with many producers: every append looks up a different entry).
///
/// Probing a table of tens of MiB at random misses the TLB on nearly every lookup with 4 KiB
/// pages, and in a virtual machine each miss is a two-level page walk; a 2 MiB page covers what
/// 512 small ones do, so the table's pages stay in the TLB. An allocation of at least
/// [`huge_pages::HUGE_PAGE`] is an anonymous private mapping aligned to a huge page, its length
/// rounded up to whole huge pages, advised `MADV_HUGEPAGE` (the kernel's `madvise` setting of
/// transparent huge pages; with `never`, or where `madvise` fails, the memory is ordinary pages).
/// Smaller allocations, and every allocation off Linux, come from the global allocator.
#[derive(Debug, Clone, Copy, Default)]
pub struct HugePageAlloc;

/// Sizes and the mapping calls behind [`HugePageAlloc`].
pub mod huge_pages {
    use std::alloc::Layout;
    use std::ptr::NonNull;

    /// The size of a transparent huge page on x86_64 and aarch64 with 4 KiB base pages.
    pub const HUGE_PAGE: usize = 2 << 20;

    /// Whether an allocation of `layout` is mapped rather than taken from the global allocator.
    pub(super) fn mapped(layout: Layout) -> bool {
        cfg!(target_os = "linux") && layout.size() >= HUGE_PAGE && layout.align() <= HUGE_PAGE
    }

    /// The length mapped for `layout` (whole huge pages).
    pub(super) fn mapped_len(layout: Layout) -> Option<usize> {
        layout.size().checked_next_multiple_of(HUGE_PAGE)
    }

    /// A fresh mapping of `len` bytes (a multiple of [`HUGE_PAGE`]) starting on a huge-page
    /// boundary, advised `MADV_HUGEPAGE`; `None` if the kernel refuses the mapping.
    #[cfg(target_os = "linux")]
    pub(super) fn map(len: usize) -> Option<NonNull<u8>> {
        let padded = len.checked_add(HUGE_PAGE)?;
        // SAFETY: an anonymous private mapping at an address the kernel picks aliases nothing;
        // the result is checked against MAP_FAILED before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                padded,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let addr = base as usize;
        let start = addr.next_multiple_of(HUGE_PAGE);
        let head = start - addr;
        let tail = padded - head - len;
        // SAFETY: both ranges lie inside the mapping just made, which nothing else refers to,
        // and are page-aligned (the mapping's start and `start` are; so are `len` and `padded`);
        // unmapping them leaves exactly `start .. start + len` mapped.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            // A hint: where transparent huge pages are off, the advice fails and the memory
            // stays on ordinary pages, which is still correct memory.
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        NonNull::new(start as *mut u8)
    }

    /// Never called off Linux ([`mapped`] is false there).
    #[cfg(not(target_os = "linux"))]
    pub(super) fn map(_len: usize) -> Option<NonNull<u8>> {
        None
    }

    /// Unmaps what [`map`] returned for `len`.
    ///
    /// # Safety
    ///
    /// `ptr` was returned by [`map`] for this `len`, and nothing uses the memory any more.
    #[cfg(target_os = "linux")]
    pub(super) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: `ptr .. ptr + len` is a whole mapping `map` made, unused from here on (the
        // function's contract).
        unsafe {
            libc::munmap(ptr.as_ptr().cast(), len);
        }
    }

    /// Never called off Linux ([`mapped`] is false there).
    ///
    /// # Safety
    ///
    /// None needed: it does nothing.
    #[cfg(not(target_os = "linux"))]
    pub(super) unsafe fn unmap(_ptr: NonNull<u8>, _len: usize) {}
}

// SAFETY: memory returned by `allocate` is valid for the layout's size and alignment until
// `deallocate`: a mapping starts on a huge-page boundary (at least the layout's alignment, as
// `mapped` requires) and is at least the layout's size, or the global allocator's own block;
// `deallocate` tells the two apart by the layout alone (the caller passes the one it allocated
// with), and a copy of the allocator (a unit struct) frees what another copy allocated, as the
// trait asks.
unsafe impl allocator_api2::alloc::Allocator for HugePageAlloc {
    fn allocate(
        &self,
        layout: std::alloc::Layout,
    ) -> std::result::Result<std::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        if !huge_pages::mapped(layout) {
            return allocator_api2::alloc::Global.allocate(layout);
        }
        let len = huge_pages::mapped_len(layout).ok_or(allocator_api2::alloc::AllocError)?;
        let ptr = huge_pages::map(len).ok_or(allocator_api2::alloc::AllocError)?;
        Ok(std::ptr::NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, layout: std::alloc::Layout) {
        if !huge_pages::mapped(layout) {
            // SAFETY: `ptr` came from the global allocator with this layout (`allocate` above).
            unsafe { allocator_api2::alloc::Global.deallocate(ptr, layout) };
            return;
        }
        if let Some(len) = huge_pages::mapped_len(layout) {
            // SAFETY: `ptr` came from `allocate` with this layout, so from `map` with this
            // `len`, and the caller is done with it (the trait's contract).
            unsafe { huge_pages::unmap(ptr, len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn create_write_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x.index");
        let mut m = MmapFile::create(&lock, &p, 16).unwrap();
        assert_eq!(m.as_slice(), &[0u8; 16]);
        m.write_at(4, &[1, 2, 3, 4]).unwrap();
        assert!(m.write_at(14, &[1, 2, 3]).is_err());
        m.flush().unwrap();
        drop(m);
        assert_eq!(std::fs::read(&p).unwrap()[4..8], [1, 2, 3, 4]);
        let m = MmapFile::open(&lock, &p, false).unwrap();
        assert_eq!(m.read(4, 4).unwrap(), &[1, 2, 3, 4]);
        assert!(m.read(15, 2).is_none());
        assert!(matches!(
            MmapFile::open(&lock, &p, false),
            Err(SegmentError::Locked { .. })
        ));
    }

    #[test]
    fn read_only_rejects_writes() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, [9u8; 8]).unwrap();
        let mut m = MmapFile::open(&lock, &p, false).unwrap();
        assert!(matches!(
            m.write_at(0, &[1]),
            Err(SegmentError::ReadOnly { .. })
        ));
        // Resizing a read-only map goes through a temporary read-write handle.
        m.resize(4).unwrap();
        assert_eq!(m.as_slice(), &[9u8; 4]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4);
    }

    #[test]
    fn resize_down_and_up_keeps_data_and_never_shows_a_truncated_map() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x");
        let mut m = MmapFile::create(&lock, &p, 4096).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        m.write_at(0, &data).unwrap();
        m.resize(100).unwrap();
        assert_eq!(m.len(), 100);
        assert_eq!(m.as_slice(), &data[..100]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 100);
        m.resize(8192).unwrap();
        assert_eq!(m.as_slice().len(), 8192);
        assert_eq!(&m.as_slice()[..100], &data[..100]);
        assert!(m.as_slice()[100..].iter().all(|&b| b == 0));
        m.resize(0).unwrap();
        assert!(m.as_slice().is_empty() && m.is_empty());
        m.resize(8).unwrap();
        assert_eq!(m.as_slice(), &[0u8; 8]);
    }

    #[test]
    fn refuses_files_outside_the_locked_dir() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(a.path()).unwrap();
        let p = b.path().join("x");
        assert!(matches!(
            MmapFile::create(&lock, &p, 8),
            Err(SegmentError::NotUnderLock { .. })
        ));
        assert!(!p.exists());
    }

    /// A file truncated under a guarded map: the pages it still backs read as before, the ones
    /// past its new end read as zeros instead of raising SIGBUS, and the map says so.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_guarded_map_reads_zeros_past_a_truncation_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.log");
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::write(&p, &data).unwrap();
        let m = GuardedMap::open(&p, data.len() as u64)
            .unwrap()
            .expect("guarded map");
        assert_eq!(m.as_slice(), &data[..]);
        assert!(!m.was_truncated());
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(10_000)
            .unwrap();
        let bytes = m.as_slice();
        // The page holding the new end is still the file's (zeros past the end in it).
        assert_eq!(&bytes[..10_000], &data[..10_000]);
        assert!(!m.was_truncated());
        assert!(bytes[40_000..].iter().all(|&b| b == 0));
        assert!(m.was_truncated());
        assert!(bytes[12_288..].iter().all(|&b| b == 0));
        // Another map of the same file is its own: untouched, it has seen nothing.
        let other = GuardedMap::open(&p, 10_000).unwrap().expect("guarded map");
        assert_eq!(other.as_slice(), &data[..10_000]);
        assert!(!other.was_truncated());
        drop(m);
        // A fresh map in the freed slot starts clean.
        let again = GuardedMap::open(&p, 10_000).unwrap().expect("guarded map");
        assert!(!again.was_truncated());
    }

    /// Outside every guarded range, SIGBUS still ends the process: a map under the lock whose
    /// file another handle truncates (invariant 4 broken on purpose), read in a child process
    /// that holds a guarded map too (so the handler is installed).
    #[cfg(target_os = "linux")]
    #[test]
    fn sigbus_outside_guarded_maps_still_ends_the_process() {
        use std::os::unix::process::ExitStatusExt;
        if !in_child() {
            let status = run_as_child("sigbus_outside_guarded_maps_still_ends_the_process");
            assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let guarded = GuardedMap::open(&file_of_64_kib(dir.path(), "x.log"), 64 * 1024)
            .unwrap()
            .expect("guarded map");
        std::hint::black_box(guarded.as_slice()[0]);
        let q = file_of_64_kib(dir.path(), "y.log");
        let lock = DirLock::acquire(dir.path()).unwrap();
        let m = MmapFile::open(&lock, &q, false).unwrap();
        OpenOptions::new()
            .write(true)
            .open(&q)
            .unwrap()
            .set_len(0)
            .unwrap();
        std::hint::black_box(m.as_slice()[40_000]);
        unreachable!("the read above raises SIGBUS");
    }

    /// Code embedding seglog that installs a `SIGBUS` action of its own after ours turns guarded
    /// maps off (the file is then read): the guard does not assume a handler it no longer has.
    /// Run in a child process, whose signal actions it may change.
    #[cfg(target_os = "linux")]
    #[test]
    fn no_guarded_map_once_another_sigbus_action_replaced_ours() {
        if !in_child() {
            let status = run_as_child("no_guarded_map_once_another_sigbus_action_replaced_ours");
            assert!(status.success(), "{status:?}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = file_of_64_kib(dir.path(), "x.log");
        assert!(GuardedMap::open(&p, 64 * 1024).unwrap().is_some());
        // SAFETY: setting the default action of SIGBUS, in a process of its own.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        assert!(GuardedMap::open(&p, 64 * 1024).unwrap().is_none());
    }

    /// Whether this process is the child [`run_as_child`] started.
    #[cfg(target_os = "linux")]
    fn in_child() -> bool {
        std::env::var_os("SEGLOG_TEST_SIGBUS_CHILD").is_some()
    }

    /// Runs the test `mmap::tests::<name>` alone in a child process of this test binary (signal
    /// actions are the whole process's), where [`in_child`] is true: the test's child half. A
    /// child still running after 60 s (a handler that returns without mending the fault re-runs
    /// the faulting read forever) is killed, and its status says so.
    #[cfg(target_os = "linux")]
    fn run_as_child(name: &str) -> std::process::ExitStatus {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &format!("mmap::tests::{name}")])
            .env("SEGLOG_TEST_SIGBUS_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                return child.wait().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The `VmFlags` of the mapping of `/proc/self/smaps` that starts at `start`, with its end.
    #[cfg(target_os = "linux")]
    fn smaps_of(start: usize) -> Option<(usize, String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut end = None;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    end = (a == start).then_some(b);
                    continue;
                }
            }
            if let (Some(e), Some(flags)) = (end, line.strip_prefix("VmFlags:")) {
                return Some((e, flags.trim().to_string()));
            }
        }
        None
    }

    #[test]
    fn huge_page_allocations_hold_their_bytes_and_large_ones_are_advised_huge_pages() {
        use allocator_api2::alloc::Allocator;
        use std::alloc::Layout;
        let alloc = HugePageAlloc;
        // Below a huge page: the global allocator's block. From one huge page up: a mapping of
        // whole huge pages on a huge-page boundary.
        for size in [64, 100_000, huge_pages::HUGE_PAGE, 21 * 1024 * 1024 + 7] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            let block = alloc.allocate(layout).unwrap();
            assert!(block.len() >= size);
            let ptr = block.cast::<u8>();
            assert_eq!(ptr.as_ptr() as usize % 16, 0);
            // SAFETY: `block` is valid for `block.len()` bytes until deallocated (the trait's
            // promise, which this test checks by using all of them).
            let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), block.len()) };
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
            #[cfg(target_os = "linux")]
            if size >= huge_pages::HUGE_PAGE {
                let start = ptr.as_ptr() as usize;
                assert_eq!(start % huge_pages::HUGE_PAGE, 0, "{size}");
                assert_eq!(block.len() % huge_pages::HUGE_PAGE, 0, "{size}");
                let (end, flags) = smaps_of(start).expect("a mapping of its own");
                assert_eq!(end - start, block.len(), "{size}: {flags}");
                // `hg`: advised MADV_HUGEPAGE (where the kernel has transparent huge pages and
                // they are not off).
                let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
                if thp.is_ok_and(|t| !t.contains("[never]")) {
                    assert!(
                        flags.split_whitespace().any(|f| f == "hg"),
                        "{size}: {flags}"
                    );
                }
            }
            // SAFETY: allocated above with this layout, no longer used.
            unsafe { alloc.deallocate(ptr, layout) };
            #[cfg(target_os = "linux")]
            if size >= huge_pages::HUGE_PAGE {
                assert!(
                    smaps_of(ptr.as_ptr() as usize).is_none(),
                    "{size}: unmapped"
                );
            }
        }
    }

    /// A file `name` in `dir` of 64 KiB of ones.
    #[cfg(target_os = "linux")]
    fn file_of_64_kib(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, vec![1u8; 64 * 1024]).unwrap();
        p
    }

    #[cfg(unix)]
    #[test]
    fn an_unmapped_file_is_free_even_while_a_child_shares_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let p = dir.path().join("x.index");
        let m = MmapFile::create(&lock, &p, 16).unwrap();
        let mut child = crate::lock::tests::share_with_child(m.file.file());
        drop(m);
        let again = MmapFile::open(&lock, &p, false);
        child.kill().ok();
        child.wait().ok();
        assert!(again.is_ok(), "{again:?}");
    }
}
