//! [`LogDir`]: a Kafka log directory of many partitions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use recovery::CleanReport;
use recovery::{
    load_log_dir, ExpiredProducer, LoadOptions, LogLoader, PartitionLog, RecoveryReport,
};
use segment_store::internals::DELETE_DIR_SUFFIX;
use segment_store::{EntryType, Storage, TopicPartition};

use crate::error::{Error, Result};
use crate::log::Log;
use crate::scheduler::Scheduler;
use crate::{Config, HighWatermark};

/// A Kafka log directory (`log.dirs` entry): one `<topic>-<partition>` folder per partition,
/// the `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
/// `replication-offset-checkpoint` files, and the `.kafka_cleanshutdown` marker. The part of
/// Kafka's `LogManager` that owns one directory.
///
/// [`open`](Self::open) creates the directory if it is missing and loads every partition, in
/// parallel on [`Config::recovery_threads`]; partitions are recovered (planned, then applied,
/// quarantining instead of deleting) only when the marker is missing, i.e. after an unclean
/// shutdown. [`close`](Self::close) flushes everything and writes the checkpoints and the
/// marker, so the next open recovers nothing.
///
/// **High watermarks.** After an unclean shutdown, [`open`](Self::open) re-establishes each
/// partition's high watermark as [`Config::high_watermark`] says before anything can use it:
/// [`HighWatermark::FlushedLogEnd`] fsyncs the recovered log and takes its end,
/// [`HighWatermark::LogEnd`] takes the log end, and with [`HighWatermark::Manual`] (the caller
/// owns it, as replication does) the loaded value is only the checkpoint's, which may be stale
/// or missing: it is marked unknown and a mirror stop refuses to take its stop point until the
/// caller sets it ([`recovery::MirrorError::HighWatermarkUnknown`]). A high watermark that is not
/// known gets no entry in `replication-offset-checkpoint` (timer, flush or close), and an open
/// that finds no entry for a partition with data re-establishes it as after an unclean
/// shutdown, so a clean close never turns it into a trusted value.
///
/// **Background tasks.** The directory runs Kafka's periodic tasks itself, on one thread of its
/// own, on the clock of [`Config::env`]: `highwatermark-checkpoint` (every
/// [`Config::high_watermark_checkpoint_interval_ms`] it writes `replication-offset-checkpoint`
/// if a high watermark changed), `kafka-recovery-point-checkpoint` (every
/// [`Config::recovery_point_checkpoint_interval_ms`] the recovery-point and log-start-offset
/// checkpoints, so recovery after a crash starts near the last flush) and, if
/// [`Config::flush_interval_ms`] is set, `kafka-log-flusher` (each partition flushed that often).
/// [`Config::without_background_tasks`] turns them off.
///
/// **Partitions are [`Log`] handles.** [`partition`](Self::partition) and
/// [`create_partition`](Self::create_partition) hand out the same `Log` type [`Log::open`]
/// gives: clone it into the thread that writes the partition and the threads that read it.
/// [`flush`](Self::flush) and [`close`](Self::close) take every partition's writer lock in turn
/// (reads go on); after [`close`](Self::close) the handles given out before are closed: writes
/// fail with [`Error::Closed`], reads with a closed-log error. [`compact`](Self::compact) cleans
/// the open partitions: their handles stay usable, and appends and reads go on during a pass.
/// Dropping a `LogDir` without [`close`](Self::close) is an unclean shutdown: its background
/// thread stops and no checkpoint is written, but handles still held keep their partitions open
/// (and the directory locked) until they are dropped; the next open recovers.
///
/// ```
/// use seglog::record_format::RecordBatchBuilder;
/// use seglog::{Config, IsolationLevel, LogDir, TopicPartition};
///
/// let tmp = tempfile::tempdir()?;
/// let mut dir = LogDir::open(tmp.path(), Config::default())?;
/// let orders = TopicPartition::new("orders", 0);
/// let log = dir.create_partition(orders.clone())?; // a `Log`
/// dir.create_partition(TopicPartition::new("orders", 1))?;
///
/// let mut batch = RecordBatchBuilder::new(0);
/// batch.append(dir.config().env.clock.now_ms(), None, Some(b"placed"), &[])?;
/// let writer = {
///     let log = log.clone();
///     std::thread::spawn(move || -> seglog::Result<()> {
///         log.append(&batch.build())?;
///         log.flush() // durable, and readable under the default policy
///     })
/// };
/// writer.join().expect("writer thread")?;
/// let records = log.consume(0, 1 << 20, IsolationLevel::ReadCommitted)?;
/// assert_eq!(records[0].value.as_deref(), Some(&b"placed"[..]));
/// assert_eq!(dir.partitions().count(), 2);
/// dir.delete_partition(&TopicPartition::new("orders", 1))?;
/// dir.close()?;
///
/// let dir = LogDir::open(tmp.path(), Config::default())?;
/// assert!(dir.had_clean_shutdown());
/// assert_eq!(dir.partitions().collect::<Vec<_>>(), [&orders]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LogDir {
    /// First, so that it is dropped (its thread stopped) before the directory and its lock.
    scheduler: Scheduler,
    /// The directory as loaded; its partition map is empty but while [`Self::with_all`] lends it
    /// the partitions' writers (to flush, checkpoint or close them all).
    inner: recovery::LoadedLogDir,
    /// A handle on each partition.
    logs: BTreeMap<TopicPartition, Log>,
    config: Config,
    deleted: u64,
}

impl LogDir {
    /// Opens (creating it if missing) the log directory `dir` and loads its partitions. See
    /// the type docs.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<LogDir> {
        let inner = load_log_dir(dir.as_ref(), &config)?;
        let scheduler = Scheduler::start(
            inner.dir.clone(),
            &config,
            inner.offline_checkpoint_entries().to_vec(),
        )
        .map_err(|e| {
            Error::Log(recovery::PartitionLogError::Io {
                path: inner.dir.clone(),
                op: "start the log directory's scheduler thread",
                source: e,
            })
        })?;
        let mut inner = inner;
        let mut logs = BTreeMap::new();
        // After an unclean shutdown the engine re-established the high watermarks
        // (`PartitionLog::reestablish_high_watermark`).
        for (tp, mut log) in std::mem::take(&mut inner.partitions) {
            follow_policy(&mut log, config.high_watermark);
            log.publish();
            let cell = log.high_watermark_cell();
            let report = report_of(&inner, &tp, log.dir())?;
            let handle = Log::of_dir(tp.clone(), log, config.clone(), report);
            scheduler.watch(tp.clone(), cell, handle.clone());
            logs.insert(tp, handle);
        }
        Ok(LogDir {
            scheduler,
            inner,
            logs,
            config,
            deleted: 0,
        })
    }

    /// The partitions refused at open and left untouched, each with its reason (a symlink, or
    /// a FIFO or device, where seglog reads or writes; a folder whose name cannot be a
    /// partition; two folders naming the same partition). They are not loaded, not recreated by
    /// [`Self::create_partition`] (an error), and not in the checkpoints this directory writes.
    pub fn offline_partitions(&self) -> &[recovery::OfflinePartition] {
        &self.inner.offline
    }

    /// Partitions loaded from a folder whose name is not the one Kafka gives them
    /// (`orders-00` for `orders-0`): loaded as Kafka parses the name, listed here as a warning.
    pub fn non_canonical_partitions(&self) -> &[recovery::NonCanonicalDir] {
        &self.inner.non_canonical
    }

    /// The log-directory checkpoints that could not be read and were ignored, each with the
    /// line (or size) that makes it unreadable and what recovery did instead.
    pub fn checkpoint_warnings(&self) -> &[recovery::CheckpointWarning] {
        &self.inner.checkpoint_warnings
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the last shutdown was clean (the marker was there): nothing was recovered.
    pub fn had_clean_shutdown(&self) -> bool {
        self.inner.had_clean_shutdown
    }

    /// What loading did to each partition (in partition order): what was recovered, cut and
    /// quarantined, and which producers expired.
    pub fn recovery_reports(&self) -> &[RecoveryReport] {
        &self.inner.reports
    }

    /// `-delete`, `-future` and `-stray` folders that were not loaded.
    pub fn skipped(&self) -> &[PathBuf] {
        &self.inner.skipped
    }

    /// The partitions, in order.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.logs.keys()
    }

    /// A handle on a partition's log (Kafka `UnifiedLog`), the same [`Log`] type as
    /// [`Log::open`] gives: append, read, flush, roll, truncate, mirror. Clone it into the
    /// threads that write and read the partition (one writer at a time, any number of readers:
    /// `docs/design.md`, "Concurrency"). It stays usable until the directory is closed.
    pub fn partition(&self, tp: &TopicPartition) -> Option<Log> {
        self.logs.get(tp).cloned()
    }

    /// Every partition's handle, in order.
    pub fn logs(&self) -> impl Iterator<Item = (&TopicPartition, &Log)> {
        self.logs.iter()
    }

    /// Creates the partition `tp` (its `<topic>-<partition>` folder and an empty active
    /// segment) and returns its log. [`Error::PartitionExists`] if it is loaded already.
    /// [`Error::InvalidPartition`] for a topic-partition Kafka could not have created (nothing is
    /// created: its folder would not be a partition's, or not inside the log directory).
    pub fn create_partition(&mut self, tp: TopicPartition) -> Result<Log> {
        if let Err(reason) = tp.validate() {
            return Err(Error::InvalidPartition {
                partition: tp,
                reason,
            });
        }
        if self.logs.contains_key(&tp) {
            return Err(Error::PartitionExists(tp));
        }
        if let Some(o) = self
            .inner
            .offline
            .iter()
            .find(|o| o.partition.as_ref() == Some(&tp))
        {
            return Err(Error::PartitionOffline {
                partition: tp,
                reason: o.reason.clone(),
            });
        }
        let path = self.inner.dir.join(tp.to_string());
        // A partition that does not exist yet has nothing to recover.
        let new = !self.config.env.storage.exists(&path)?;
        let opts = LoadOptions {
            config: self.config.clone(),
            had_clean_shutdown: new,
            ..LoadOptions::default()
        };
        let lock = self.inner.lock().clone();
        let (mut log, report) = LogLoader::load_with_lock(&path, &opts, lock).map_err(|e| {
            Error::Log(recovery::PartitionLogError::Partition {
                dir: path.clone(),
                source: Box::new(e),
            })
        })?;
        self.config.env.storage.sync_dir(&self.inner.dir)?;
        if !log.high_watermark_known() {
            // A folder that was there already was recovered: its high watermark is
            // re-established as after an unclean open of the directory.
            log.reestablish_high_watermark(self.config.high_watermark)
                .map_err(Error::Log)?;
        }
        follow_policy(&mut log, self.config.high_watermark);
        log.publish();
        let cell = log.high_watermark_cell();
        self.inner.reports.push(report.clone());
        let handle = Log::of_dir(tp.clone(), log, self.config.clone(), report);
        self.scheduler.watch(tp.clone(), cell, handle.clone());
        self.logs.insert(tp, handle.clone());
        Ok(handle)
    }

    /// Deletes the partition `tp` as Kafka does: the log is closed, its folder renamed to
    /// `<topic>-<partition>.<id>-delete` (the log directory synced: a crash from here on leaves
    /// a folder the next open skips) and then removed. Its entries leave the checkpoints at the
    /// next [`flush`](Self::flush) or [`close`](Self::close). Returns whether it existed.
    pub fn delete_partition(&mut self, tp: &TopicPartition) -> Result<bool> {
        let Some(handle) = self.logs.remove(tp) else {
            return Ok(false);
        };
        self.scheduler.unwatch(tp);
        self.inner.reports.retain(|r| r.partition != tp.to_string());
        let taken = {
            let _maintenance = handle.lock_maintenance();
            handle.lock_writer().take()
        };
        let Some(log) = taken else {
            return Ok(false);
        };
        let closed = log.close()?;
        self.deleted = self.deleted.wrapping_add(1);
        let id = format!(
            "{:016x}{:016x}",
            self.config.env.clock.now_ms(),
            self.deleted
        );
        let to = self.inner.dir.join(format!("{tp}.{id}{DELETE_DIR_SUFFIX}"));
        self.config.env.storage.rename(&closed.dir, &to)?;
        self.config.env.storage.sync_dir(&self.inner.dir)?;
        if !self.config.env.storage.supports_mmap() {
            // Storage of its own (simulated): the folder exists only there.
            remove_tree(self.config.env.storage.as_ref(), &to)?;
            return Ok(true);
        }
        // The memory-mapped indexes live on the real file system, beside the storage seam, so
        // the folder is removed there (a folder only the seam knows of is already gone for it).
        match std::fs::remove_dir_all(&to) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Log(recovery::PartitionLogError::Io {
                    path: to.clone(),
                    op: "remove",
                    source: e,
                }))
            }
            _ => Ok(true),
        }
    }

    /// Flushes every partition up to its log end and writes the recovery-point,
    /// log-start-offset and high-watermark checkpoints (with [`HighWatermark::FlushedLogEnd`],
    /// the high watermarks first move to the flushed ends).
    pub fn flush(&mut self) -> Result<()> {
        // Each partition on its own first (its appends wait for its fsync only), then the
        // checkpoints of what is durable now.
        for log in self.logs.values() {
            log.flush()?;
        }
        self.write_checkpoints()
    }

    /// The recovery-point, log-start-offset and high-watermark checkpoints (each partition
    /// flushed again first: what is unflushed since its own flush).
    pub(crate) fn write_checkpoints(&mut self) -> Result<()> {
        self.with_all(|inner| Ok(inner.flush()?))
    }

    /// Lends every partition's writer to the loaded directory for `f` (its partition map holds
    /// them meanwhile; writes of every partition wait, reads do not), with the high-watermark
    /// timer kept out, then gives them back and publishes what changed. Writers closed already
    /// are left out.
    fn with_all<R>(
        &mut self,
        f: impl FnOnce(&mut recovery::LoadedLogDir) -> Result<R>,
    ) -> Result<R> {
        let mut guards = Vec::with_capacity(self.logs.len());
        for (tp, handle) in &self.logs {
            let mut guard = handle.lock_writer();
            if let Some(log) = guard.take() {
                self.inner.partitions.insert(tp.clone(), log);
            }
            guards.push((tp, guard));
        }
        let inner = &mut self.inner;
        let r = self.scheduler.exclusive(|| f(inner));
        for (tp, mut guard) in guards {
            if let Some(mut log) = self.inner.partitions.remove(tp) {
                follow_policy(&mut log, self.config.high_watermark);
                log.publish();
                *guard = Some(log);
            }
        }
        r
    }

    /// Kafka's `PeriodicProducerExpirationCheck`: if
    /// [`Config::producer_id_expiration_check_interval_ms`] passed on the clock of
    /// [`Config::env`] since the last check (or the open), removes from every partition the producers with no open
    /// transaction whose last write is at least `producer.id.expiration.ms` old
    /// ([`PartitionLog::remove_expired_producers`]) and returns them; otherwise does nothing
    /// (returns an empty list). Every [`Log`](crate::Log) write and every [`Self::flush`] call
    /// it; the check itself is a clock read, the removal O(producers) once per interval.
    pub fn maybe_remove_expired_producers(
        &mut self,
    ) -> Result<Vec<(TopicPartition, ExpiredProducer)>> {
        let mut expired = Vec::new();
        for (tp, log) in &self.logs {
            expired.extend(
                log.maybe_remove_expired_producers()?
                    .into_iter()
                    .map(|e| (tp.clone(), e)),
            );
        }
        Ok(expired)
    }

    /// Kafka `checkpointHighWatermarks`: writes `replication-offset-checkpoint` now.
    pub fn checkpoint_high_watermarks(&mut self) -> Result<()> {
        self.with_all(|inner| Ok(inner.checkpoint_high_watermarks()?))
    }

    /// Writes `replication-offset-checkpoint` if
    /// [`Config::high_watermark_checkpoint_interval_ms`] passed since the last one (Kafka's
    /// periodic task, which the directory also runs on its own thread). Returns whether it
    /// wrote one.
    pub fn maybe_checkpoint_high_watermarks(&mut self) -> Result<bool> {
        self.with_all(|inner| Ok(inner.maybe_checkpoint_high_watermarks()?))
    }

    /// The error of the last `replication-offset-checkpoint` write of the directory's own
    /// timer, if it failed (it tries again at its next interval).
    pub fn high_watermark_checkpoint_error(&self) -> Option<String> {
        self.scheduler.last_error()
    }

    /// Clean shutdown: every partition closed (flushed, producer snapshot, leader-epoch
    /// checkpoint), the checkpoints written, then the `.kafka_cleanshutdown` marker. The next
    /// [`open`](Self::open) recovers nothing.
    ///
    /// Under [`HighWatermark::FlushedLogEnd`] the high watermarks written are the log ends:
    /// closing flushes every partition to its end (see [`Config::close_sync`]) before any
    /// checkpoint is written.
    pub fn close(mut self) -> Result<()> {
        // No timer write after (or during) the close's own checkpoints.
        self.scheduler.stop();
        // Every writer taken out for good: the handles still held elsewhere are closed.
        let mut guards = Vec::with_capacity(self.logs.len());
        for (tp, handle) in &self.logs {
            // A cleaning pass or retention under way ends first.
            let maintenance = handle.lock_maintenance();
            let mut guard = handle.lock_writer();
            if let Some(mut log) = guard.take() {
                if self.config.high_watermark != HighWatermark::Manual {
                    let end = log.log_end_offset();
                    log.set_high_watermark(end);
                }
                log.publish();
                self.inner.partitions.insert(tp.clone(), log);
            }
            guards.push((maintenance, guard));
        }
        let LogDir { inner, .. } = self;
        let r = inner.close();
        drop(guards);
        Ok(r?)
    }
}

impl LogDir {
    /// One pass of Kafka's log cleaner over each of the partitions `partitions` (see
    /// [`Log::compact`](crate::Log::compact) and `docs/cleaner.md`), on the open directory, on
    /// `log.cleaner.threads` threads ([`CleanerConfig::threads`](recovery::CleanerConfig::threads)),
    /// their reads and writes throttled together to `log.cleaner.io.max.bytes.per.second`, with
    /// [`Config::cleaner`]'s settings and the time of [`Config::env`]'s clock. Appends and reads
    /// of every partition go on meanwhile. Returns each partition's report in the order given. A partition
    /// the directory does not hold is [`Error::UnknownPartition`], before anything changes.
    /// Which topics are compacted is the caller's to say (`cleanup.policy` is topic metadata,
    /// not kept in the log directory).
    pub fn compact(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, CleanReport)>> {
        let jobs = partitions
            .iter()
            .map(|tp| {
                self.logs
                    .get(tp)
                    .map(|log| (tp.clone(), log.clone()))
                    .ok_or_else(|| Error::UnknownPartition(tp.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        clean_all(&self.config, jobs)
    }

    /// Kafka's log cleaner over the compacted partitions (those `is_compacted` says have
    /// `cleanup.policy=compact`): each is weighed read-only as Kafka's `LogCleanerManager` weighs
    /// it ([`recovery::internals::cleaner::schedule::candidate`]: its cleanable ratio, how overdue its
    /// oldest dirty segment is), and those due ([`recovery::internals::cleaner::schedule::due`]: ratio above
    /// `min.cleanable.dirty.ratio`, or `max.compaction.lag.ms` passed) get one pass each
    /// ([`Self::compact`]), the filthiest first. Returns the reports of the passes run, in that
    /// order. A service calls it from time to time, as Kafka's cleaner threads wake up every
    /// `log.cleaner.backoff.ms`; the directory stays open and its partitions writable.
    pub fn compact_due(
        &self,
        is_compacted: impl Fn(&TopicPartition) -> bool,
    ) -> Result<Vec<(TopicPartition, CleanReport)>> {
        let mut candidates = Vec::new();
        for (tp, log) in self.logs.iter().filter(|(tp, _)| is_compacted(tp)) {
            let live = log.with_partition(|p| p.live_cleaning())?;
            candidates.push(recovery::internals::cleaner::schedule::candidate(
                &self.config.env.storage,
                &live.log,
                tp,
                &self.config.cleaner,
            )?);
        }
        let due = recovery::internals::cleaner::schedule::due(candidates, &self.config.cleaner);
        let jobs = due
            .into_iter()
            .filter_map(|c| self.logs.get(&c.tp).map(|log| (c.tp.clone(), log.clone())))
            .collect();
        clean_all(&self.config, jobs)
    }
}

/// One pass over each partition ([`Log::compact`]), on `log.cleaner.threads` threads (each
/// taking the next partition), the I/O of all of them throttled together when
/// `log.cleaner.io.max.bytes.per.second` is set. The reports in the order of `jobs`; the first
/// error once every started pass has ended.
fn clean_all(
    config: &Config,
    jobs: Vec<(TopicPartition, Log)>,
) -> Result<Vec<(TopicPartition, CleanReport)>> {
    use recovery::internals::cleaner::schedule::{ThreadSleeper, Throttler};
    let cleaner = &config.cleaner;
    let throttler = (cleaner.io_max_bytes_per_second < f64::MAX).then(|| {
        Arc::new(Throttler::new(
            cleaner.io_max_bytes_per_second,
            Arc::clone(&config.env.clock),
            Arc::new(ThreadSleeper),
        ))
    });
    let threads = usize::try_from(cleaner.threads.max(1)).unwrap_or(1);
    let results: Vec<std::sync::Mutex<Option<_>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (Some((_, log)), Some(slot)) = (jobs.get(i), results.get(i)) else {
            break;
        };
        let r = log.compact_throttled(throttler.clone());
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    };
    if threads <= 1 || jobs.len() <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads.min(jobs.len()) {
                s.spawn(work);
            }
        });
    }
    let mut reports = Vec::with_capacity(jobs.len());
    for ((tp, _), slot) in jobs.into_iter().zip(results) {
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(report)) => reports.push((tp, report)),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(reports)
}

/// Moves the high watermark as `policy` says, after a load, flush or append.
pub(crate) fn follow_policy(log: &mut PartitionLog, policy: HighWatermark) {
    log.follow_high_watermark_policy(policy);
}

/// The load report of `tp`, whose folder is `dir` (named as Kafka names it, or not: see
/// [`LogDir::non_canonical_partitions`]).
fn report_of(
    inner: &recovery::LoadedLogDir,
    tp: &TopicPartition,
    dir: &Path,
) -> Result<RecoveryReport> {
    let name = tp.to_string();
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    inner
        .reports
        .iter()
        .find(|r| r.partition == name || Some(&r.partition) == folder.as_ref())
        .cloned()
        .ok_or_else(|| Error::UnknownPartition(tp.clone()))
}

/// Removes `dir` and everything in it through `storage`.
fn remove_tree(storage: &dyn Storage, dir: &Path) -> Result<()> {
    for (name, kind) in storage.list_dir_typed(dir)? {
        let path = dir.join(name);
        if kind == EntryType::Dir {
            remove_tree(storage, &path)?;
        } else {
            storage.remove_file(&path)?;
        }
    }
    Ok(storage.remove_dir(dir)?)
}
