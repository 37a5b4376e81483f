//! Which compacted logs are due for cleaning, and at what I/O rate: Kafka's
//! `LogCleanerManager.grabFilthiestCompactedLog` (decided read-only, [`candidate`] and [`due`])
//! and its `Throttler` (`log.cleaner.io.max.bytes.per.second`, applied to every byte a pass
//! reads or writes through [`ThrottledStorage`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use segment_store::internals::FileKind;
use segment_store::Clock;
use segment_store::TopicPartition;
use segment_store::{EntryType, FileHandle, OpenMode, Storage};

use super::{
    list_segments, range, read_first_batch_timestamp, segment_path, CleanerConfig, LogToClean,
    Result, SegmentFiles,
};

/// A compacted log as the cleaner manager weighs it (Kafka's `LogToClean` sizes and
/// `maxCompactionDelay`).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerCandidate {
    /// The partition.
    pub tp: TopicPartition,
    /// Where the next pass starts.
    pub first_dirty_offset: i64,
    /// Where it must stop (the base offset of the first segment it may not clean).
    pub first_uncleanable_offset: i64,
    /// Bytes of the segments below the first dirty offset (cleaned already).
    pub clean_bytes: u64,
    /// Bytes of the segments from the first dirty offset to the first uncleanable one.
    pub cleanable_bytes: u64,
    /// How long past `max.compaction.lag.ms` its oldest dirty segment is (0: not overdue).
    pub max_compaction_delay_ms: i64,
}

impl CleanerCandidate {
    /// `clean_bytes + cleanable_bytes`.
    pub fn total_bytes(&self) -> u64 {
        self.clean_bytes.saturating_add(self.cleanable_bytes)
    }

    /// Kafka's `cleanableRatio`: cleanable bytes over total bytes (0 for an empty log).
    pub fn cleanable_ratio(&self) -> f64 {
        match self.total_bytes() {
            0 => 0.0,
            t => self.cleanable_bytes as f64 / t as f64,
        }
    }

    /// Kafka's `needCompactionNow`: `max.compaction.lag.ms` has passed for its oldest dirty
    /// segment.
    pub fn needs_compaction_now(&self) -> bool {
        self.max_compaction_delay_ms > 0
    }
}

/// Sum of the `.log` sizes of the segments overlapping `[from, to)` (Kafka's
/// `logSegments(from, to)`: from the segment holding `from` to the one holding `to - 1`).
fn bytes_in(segments: &[SegmentFiles], from: i64, to: i64) -> u64 {
    segments
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            let next = segments.get(i + 1).map_or(i64::MAX, |n| n.base_offset);
            s.base_offset < to && next > from
        })
        .map(|(_, s)| s.log_size)
        .sum()
}

/// Weighs the closed compacted partition `log` as Kafka's cleaner manager does (read only).
pub fn candidate(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanerCandidate> {
    let segments = list_segments(storage.as_ref(), &log.dir)?;
    let (first_dirty, first_uncleanable) = range(storage, log, tp, config)?;
    let clean_bytes = bytes_in(&segments, -1, first_dirty);
    let cleanable_bytes = bytes_in(&segments, first_dirty, first_dirty.max(first_uncleanable));
    // Kafka's `maxCompactionDelay`: the dirty non-active segments' first batch timestamps.
    let mut earliest = i64::MAX;
    let active = segments.last().map(|s| s.base_offset);
    let from = segments
        .iter()
        .rposition(|s| s.base_offset <= first_dirty)
        .unwrap_or(0);
    for s in segments.iter().skip(from) {
        if Some(s.base_offset) == active {
            break;
        }
        let path = segment_path(&log.dir, s.base_offset, FileKind::Log, None);
        if let Some(t) = read_first_batch_timestamp(storage.as_ref(), &path)? {
            if t > 0 {
                earliest = earliest.min(t);
            }
        }
    }
    let clean_until = log
        .now_ms
        .saturating_sub(config.max_compaction_lag_ms.max(0));
    let max_compaction_delay_ms = if earliest < clean_until {
        clean_until - earliest
    } else {
        0
    };
    Ok(CleanerCandidate {
        tp: tp.clone(),
        first_dirty_offset: first_dirty,
        first_uncleanable_offset: first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        max_compaction_delay_ms,
    })
}

/// Kafka's choice among candidates: those holding bytes whose cleanable ratio is above
/// `min.cleanable.dirty.ratio`, or that are overdue (`max.compaction.lag.ms`) with something to
/// clean; the filthiest (highest ratio) first, as Kafka's cleaner threads take them.
pub fn due(candidates: Vec<CleanerCandidate>, config: &CleanerConfig) -> Vec<CleanerCandidate> {
    let mut out: Vec<CleanerCandidate> = candidates
        .into_iter()
        .filter(|c| c.total_bytes() > 0)
        .filter(|c| {
            (c.needs_compaction_now() && c.cleanable_bytes > 0)
                || c.cleanable_ratio() > config.min_cleanable_dirty_ratio
        })
        .collect();
    out.sort_by(|a, b| b.cleanable_ratio().total_cmp(&a.cleanable_ratio()));
    out
}

/// How a [`Throttler`] waits (a test's clock moves instead).
pub trait Sleeper: Send + Sync {
    /// Waits `ms` milliseconds.
    fn sleep_ms(&self, ms: i64);
}

/// Sleeps the thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep_ms(&self, ms: i64) {
        if let Ok(ms) = u64::try_from(ms) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

/// Kafka's `Throttler` for the cleaner: every `check_interval_ms` (300, the cleaner's) it
/// compares the bytes seen since the last check with `bytes_per_second` and sleeps long enough
/// to bring the rate down to it.
pub struct Throttler {
    bytes_per_second: f64,
    check_interval_ms: i64,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    state: Mutex<(i64, f64)>,
}

impl std::fmt::Debug for Throttler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttler")
            .field("bytes_per_second", &self.bytes_per_second)
            .finish()
    }
}

impl Throttler {
    /// A throttler to `bytes_per_second` on `clock`, waiting with `sleeper`.
    pub fn new(bytes_per_second: f64, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        let start = clock.now_ms();
        Throttler {
            bytes_per_second,
            check_interval_ms: 300,
            clock,
            sleeper,
            state: Mutex::new((start, 0.0)),
        }
    }

    /// Kafka's `maybeThrottle(observed)`.
    pub fn maybe_throttle(&self, observed: u64) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1 += observed as f64;
        let now = self.clock.now_ms();
        let elapsed = now - st.0;
        if elapsed > self.check_interval_ms && st.1 > 0.0 {
            let rate = st.1 * 1000.0 / elapsed as f64;
            if rate > self.bytes_per_second {
                let desired_per_ms = self.bytes_per_second / 1000.0;
                let sleep = (st.1 / desired_per_ms - elapsed as f64).round() as i64;
                if sleep > 0 {
                    self.sleeper.sleep_ms(sleep);
                }
            }
            *st = (self.clock.now_ms(), 0.0);
        }
    }
}

/// A [`Storage`] whose file reads and writes go through a [`Throttler`]: a cleaning pass runs on
/// it when `log.cleaner.io.max.bytes.per.second` is set, so every byte it reads or writes counts,
/// as Kafka's cleaner throttles its reads and writes.
#[derive(Debug, Clone)]
pub struct ThrottledStorage {
    inner: Arc<dyn Storage>,
    throttler: Arc<Throttler>,
}

impl ThrottledStorage {
    /// `inner`, throttled by `throttler`.
    pub fn new(inner: Arc<dyn Storage>, throttler: Arc<Throttler>) -> Self {
        ThrottledStorage { inner, throttler }
    }
}

#[derive(Debug)]
struct ThrottledFile {
    inner: Box<dyn FileHandle>,
    throttler: Arc<Throttler>,
}

type SResult<T> = segment_store::Result<T>;

impl FileHandle for ThrottledFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> SResult<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> SResult<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.throttler.maybe_throttle(n as u64);
        Ok(n)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> SResult<()> {
        self.inner.write_at(offset, data)?;
        self.throttler.maybe_throttle(data.len() as u64);
        Ok(())
    }
    fn set_len(&self, len: u64) -> SResult<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> SResult<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> SResult<()> {
        self.inner.sync_all()
    }
    #[cfg(unix)]
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.as_fd()
    }
}

impl Storage for ThrottledStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> SResult<Box<dyn FileHandle>> {
        Ok(Box::new(ThrottledFile {
            inner: self.inner.open(path, mode)?,
            throttler: Arc::clone(&self.throttler),
        }))
    }
    fn exists(&self, path: &Path) -> SResult<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> SResult<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> SResult<()> {
        self.inner.remove_file(path)
    }
    fn list_dir(&self, dir: &Path) -> SResult<Vec<OsString>> {
        self.inner.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> SResult<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> SResult<()> {
        self.inner.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> SResult<()> {
        self.inner.sync_dir(dir)
    }
    fn supports_sync_filesystem(&self) -> bool {
        self.inner.supports_sync_filesystem()
    }
    fn sync_filesystem(&self, dir: &Path) -> SResult<()> {
        self.inner.sync_filesystem(dir)
    }
    /// No: a mapped file's bytes would be read without passing the throttle, so a throttled
    /// pass reads its segments through [`FileHandle::read_at`].
    fn supports_mmap(&self) -> bool {
        false
    }
    fn entry_type(&self, path: &Path) -> SResult<Option<EntryType>> {
        self.inner.entry_type(path)
    }
    fn list_dir_typed(&self, dir: &Path) -> SResult<Vec<(OsString, EntryType)>> {
        self.inner.list_dir_typed(dir)
    }
    fn resolve_root(&self, dir: &Path) -> SResult<PathBuf> {
        self.inner.resolve_root(dir)
    }
    fn read(&self, path: &Path) -> SResult<Vec<u8>> {
        let bytes = self.inner.read(path)?;
        self.throttler.maybe_throttle(bytes.len() as u64);
        Ok(bytes)
    }
    fn copy_range(&self, from: &Path, offset: u64, len: u64, to: &Path) -> SResult<u64> {
        let n = self.inner.copy_range(from, offset, len, to)?;
        self.throttler.maybe_throttle(n.saturating_mul(2));
        Ok(n)
    }
    fn create_dir(&self, dir: &Path) -> SResult<()> {
        self.inner.create_dir(dir)
    }
    fn read_capped(&self, path: &Path, limit: u64) -> SResult<Vec<u8>> {
        let bytes = self.inner.read_capped(path, limit)?;
        self.throttler.maybe_throttle(bytes.len() as u64);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// A clock that moves only when the throttler sleeps or the test says so.
    #[derive(Debug, Default)]
    struct Fake {
        now: AtomicI64,
        slept: AtomicI64,
    }
    impl Clock for Fake {
        fn now_ms(&self) -> i64 {
            self.now.load(Ordering::SeqCst)
        }
    }
    impl Sleeper for Fake {
        fn sleep_ms(&self, ms: i64) {
            self.now.fetch_add(ms, Ordering::SeqCst);
            self.slept.fetch_add(ms, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_throttler_holds_the_rate_to_its_setting() {
        let fake = Arc::new(Fake::default());
        let t = Throttler::new(100_000.0, fake.clone(), fake.clone());
        // 100 MB in 64 KiB reads, each taking 1 ms of its own (655 MB/s unthrottled): ~1,000 s
        // at 100 kB/s. (Kafka's throttler looks every 300 ms: a shorter burst is not slowed.)
        let mut total = 0u64;
        while total < 100_000_000 {
            fake.now.fetch_add(1, Ordering::SeqCst);
            t.maybe_throttle(65_536);
            total += 65_536;
        }
        let elapsed = fake.now_ms() as f64 / 1000.0;
        let rate = total as f64 / elapsed;
        assert!(
            (95_000.0..=103_000.0).contains(&rate),
            "rate {rate:.0} B/s over {elapsed:.1} s"
        );
        assert!(fake.slept.load(Ordering::SeqCst) > 900_000);
    }

    #[test]
    fn an_unthrottled_rate_never_sleeps() {
        let fake = Arc::new(Fake::default());
        let t = Throttler::new(1e12, fake.clone(), fake.clone());
        for _ in 0..10_000 {
            fake.now.fetch_add(1, Ordering::SeqCst);
            t.maybe_throttle(65_536);
        }
        assert_eq!(fake.slept.load(Ordering::SeqCst), 0);
    }

    fn c(clean: u64, cleanable: u64, delay: i64, name: &str) -> CleanerCandidate {
        CleanerCandidate {
            tp: TopicPartition::new(name, 0),
            first_dirty_offset: 0,
            first_uncleanable_offset: 0,
            clean_bytes: clean,
            cleanable_bytes: cleanable,
            max_compaction_delay_ms: delay,
        }
    }

    #[test]
    fn due_takes_ratios_above_the_minimum_or_overdue_logs_filthiest_first() {
        let config = CleanerConfig::default();
        let due = due(
            vec![
                c(100, 100, 0, "half"), // 0.5: not above the minimum
                c(100, 300, 0, "three-quarters"),
                c(100, 900, 0, "nine-tenths"),
                c(1000, 10, 5, "overdue"), // overdue with something to clean
                c(1000, 0, 5, "overdue-but-clean"),
                c(0, 0, 0, "empty"),
            ],
            &config,
        );
        let names: Vec<&str> = due.iter().map(|c| c.tp.topic.as_str()).collect();
        assert_eq!(names, ["nine-tenths", "three-quarters", "overdue"]);
    }
}
