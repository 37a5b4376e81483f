//! [`Log`]: one partition, opened or created in a directory of its own.

use std::ffi::OsStr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use recovery::SnapshotFile;
use recovery::{
    consume, AppendOrigin, ConsumedRecord, ExpiredProducer, FetchIsolation, FetchResult,
    IsolationLevel, LogAppendInfo, LogReader, PartitionLog, ProducerStateManager, RecordIter,
    RecoveryReport,
};
use segment_store::internals::{parse_partition_dir_name, PartitionDirKind};
use segment_store::{EntryType, TopicPartition};

use crate::error::{Error, Result};
use crate::log_dir::{follow_policy, LogDir};
use crate::Config;

/// One partition's log (Kafka `UnifiedLog`): segments, indexes, producer state, leader epochs
/// and transactions, in Kafka's on-disk format.
///
/// A `Log` lives in a partition directory named `<topic>-<partition>` whose parent is its own
/// Kafka log directory (checkpoints and clean-shutdown marker); opening a directory whose
/// parent holds other partitions is refused ([`Error::SharedLogDir`]: use [`LogDir`]).
/// [`open`](Self::open) creates both if missing; after a [`close`](Self::close) the next open
/// recovers nothing, after a crash it recovers the partition through
/// [`recovery::LogLoader`]'s plan/apply engine (what it cut is quarantined and reported in
/// [`recovery_report`](Self::recovery_report)).
///
/// **A handle, for many threads.** `Log` is `Clone + Send + Sync`; every method takes `&self`.
/// Clones share the partition: hand one to each thread that reads and one to the thread that
/// writes. Writes (appends, flush, roll, retention, truncation, mirror transitions) go through
/// the partition's writer lock one at a time, in the order they take it; reads never take that
/// lock: they see the bounds the writer last published and read the segments beside it, so a
/// read does not wait for an append, an fsync or producer-state work (`docs/design.md`,
/// "Concurrency"). A [`LogDir`]'s partitions are the same type ([`LogDir::partition`]).
///
/// **What readers see.** Reads return the batches in
/// [`readable_range`](Self::readable_range): from the log start offset to the high watermark
/// (`ReadUncommitted`) or to the last stable offset (`ReadCommitted`: below the first open
/// transaction too). Who moves the high watermark is [`Config::high_watermark`]: by default it
/// follows the flushed log end, so readers see what survives a crash.
///
/// ```
/// use std::sync::Arc;
/// use seglog::record_format::RecordBatchBuilder;
/// use seglog::{Config, IsolationLevel, Log};
/// use testkit::ManualClock;
///
/// let tmp = tempfile::tempdir()?;
/// let dir = tmp.path().join("orders-0");
/// // The clock is part of the config: it decides rolls, retention and producer expiry.
/// let clock = Arc::new(ManualClock::new(1_700_000_000_000));
/// let config = Config::default().with_clock(clock.clone());
/// let log = Log::open(&dir, config.clone())?;
///
/// // An idempotent producer's batch (producer id 7, epoch 0, first sequence 0).
/// let mut batch = RecordBatchBuilder::new(0).producer(7, 0, 0);
/// batch.append(1_700_000_000_000, Some(b"k"), Some(b"hello"), &[])?;
/// let info = log.append(&batch.build())?;
/// assert_eq!((info.first_offset, info.last_offset), (0, 0));
///
/// assert!(log.readable_range(IsolationLevel::ReadCommitted).is_empty()); // not flushed yet
/// log.flush()?;
/// assert_eq!(log.readable_range(IsolationLevel::ReadCommitted), 0..1);
/// let records = log.consume(0, 1 << 20, IsolationLevel::ReadCommitted)?;
/// assert_eq!(records[0].value.as_deref(), Some(&b"hello"[..]));
/// log.close()?;
///
/// let log = Log::open(&dir, config.clone())?;
/// assert!(log.recovery_report().had_clean_shutdown);
/// assert_eq!(log.producer_state()?.last_entry(7).map(|e| e.last_seq()), Some(0));
/// log.close()?;
///
/// // Two days later the producer has expired (producer.id.expiration.ms is one day): the
/// // open says so instead of dropping it silently.
/// clock.set(1_700_000_000_000 + 2 * 86_400_000);
/// let log = Log::open(&dir, config)?;
/// assert!(log.producer_state()?.last_entry(7).is_none());
/// assert_eq!(log.expired_producers()[0].producer_id, 7);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Log {
    part: Arc<Partition>,
    /// The log directory a [`Log::open`]ed partition owns, shared by its clones (taken out by
    /// [`close`](Self::close)). `None` for a [`LogDir`]'s
    /// partition: the directory owns itself.
    owned: Option<Arc<Mutex<Option<LogDir>>>>,
}

/// What every handle of one partition shares.
#[derive(Debug)]
pub(crate) struct Partition {
    tp: TopicPartition,
    dir: PathBuf,
    config: Config,
    report: RecoveryReport,
    /// The writer; `None` once its log directory closed it.
    writer: Mutex<Option<PartitionLog>>,
    /// Reads: published bounds and the shared segments, never the writer's lock.
    reader: LogReader,
    /// Held by what removes or rewrites segments (retention, truncation, mirror transitions,
    /// [`Log::with_partition`], a cleaning pass), before the writer's lock: a cleaning pass
    /// holds it from start to end while appends and reads go on.
    maintenance: Mutex<()>,
    /// When producers were last checked for expiry, on the clock.
    last_expiration_check_ms: AtomicI64,
}

impl Log {
    /// Opens the partition in `dir` (named `<topic>-<partition>`), creating it and its log
    /// directory if missing, recovering it if the last shutdown was not clean. See the type
    /// docs.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Log> {
        let dir = dir.as_ref();
        let tp = partition_of(dir)?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let others = other_partitions(&config, &parent, &tp)?;
        if !others.is_empty() {
            return Err(Error::SharedLogDir {
                dir: parent,
                others,
            });
        }
        let mut log_dir = LogDir::open(&parent, config)?;
        let log = match log_dir.partition(&tp) {
            Some(log) => log,
            None => log_dir.create_partition(tp)?,
        };
        Ok(Log {
            part: log.part,
            owned: Some(Arc::new(Mutex::new(Some(log_dir)))),
        })
    }

    /// A handle on a partition a [`LogDir`] loaded or created.
    pub(crate) fn of_dir(
        tp: TopicPartition,
        log: PartitionLog,
        config: Config,
        report: RecoveryReport,
    ) -> Log {
        let now = config.env.clock.now_ms();
        Log {
            part: Arc::new(Partition {
                tp,
                dir: log.dir().to_path_buf(),
                reader: log.reader(),
                writer: Mutex::new(Some(log)),
                maintenance: Mutex::new(()),
                config,
                report,
                last_expiration_check_ms: AtomicI64::new(now),
            }),
            owned: None,
        }
    }

    /// The writer, locked (`None` once closed).
    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, Option<PartitionLog>> {
        // A panic while holding it cannot leave a half-applied append visible: readers see
        // only what was published, and every write publishes at its end.
        self.part.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The maintenance lock (see [`Partition`]), held for `f`, which takes the writer's lock
    /// itself.
    pub(crate) fn maintain<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let _maintenance = self.lock_maintenance();
        f()
    }

    /// The maintenance lock, locked.
    pub(crate) fn lock_maintenance(&self) -> MutexGuard<'_, ()> {
        self.part
            .maintenance
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the writer, then moves the high watermark as [`Config::high_watermark`] says,
    /// runs the periodic producer-expiry check and publishes the bounds to readers.
    fn write<R>(&self, f: impl FnOnce(&mut PartitionLog) -> Result<R>) -> Result<R> {
        let mut guard = self.lock_writer();
        let log = guard
            .as_mut()
            .ok_or_else(|| Error::Closed(self.part.tp.clone()))?;
        let r = f(log);
        self.after_write(log);
        r
    }

    fn after_write(&self, log: &mut PartitionLog) {
        follow_policy(log, self.part.config.high_watermark);
        // Kafka's periodic producer expiry, on the configured clock: the producers dropped are
        // not reported here (Kafka drops them silently too);
        // `maybe_remove_expired_producers` returns them to a caller that wants them.
        self.expire_producers(log);
        log.publish();
    }

    fn expire_producers(&self, log: &mut PartitionLog) -> Vec<ExpiredProducer> {
        let interval = self.part.config.producer_id_expiration_check_interval_ms;
        let now = self.part.config.env.clock.now_ms();
        let last = self.part.last_expiration_check_ms.load(Ordering::Relaxed);
        if interval <= 0 || now.saturating_sub(last) < interval {
            return Vec::new();
        }
        self.part
            .last_expiration_check_ms
            .store(now, Ordering::Relaxed);
        log.remove_expired_producers()
    }

    /// Kafka's `PeriodicProducerExpirationCheck` for this partition, if
    /// [`Config::producer_id_expiration_check_interval_ms`] passed since the last check:
    /// removes the producers idle for `producer.id.expiration.ms` with no open transaction and
    /// returns them. Every write of the `Log` runs this check too.
    pub fn maybe_remove_expired_producers(&self) -> Result<Vec<ExpiredProducer>> {
        let mut guard = self.lock_writer();
        let log = guard
            .as_mut()
            .ok_or_else(|| Error::Closed(self.part.tp.clone()))?;
        Ok(self.expire_producers(log))
    }

    /// The topic and partition, from the directory name.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.part.tp
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.part.dir
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &Config {
        &self.part.config
    }

    /// What opening did: whether the shutdown before was clean, what recovery scanned, cut
    /// and quarantined, and the producers that expired at load.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.part.report
    }

    /// The producers dropped at load because their last write was at least
    /// `producer.id.expiration.ms` older than the clock of [`Config::env`] (Kafka does the same,
    /// silently): a later batch of such a producer is not checked against its old sequence.
    pub fn expired_producers(&self) -> &[ExpiredProducer] {
        &self.part.report.expired_producers
    }

    /// Runs `f` on the partition log underneath (Kafka `UnifiedLog`), as the writer, for what
    /// the facade does not wrap: the KIP-1279 mirror transitions ([`recovery::MirroredLog`]),
    /// leader-epoch alignment, barrier searches, indexes. Afterwards the high watermark follows
    /// [`Config::high_watermark`] and readers see what `f` changed. Appends and other writes of
    /// the partition wait for `f`; reads do not.
    pub fn with_partition<R>(&self, f: impl FnOnce(&mut PartitionLog) -> R) -> Result<R> {
        self.maintain(|| self.write(|log| Ok(f(log))))
    }

    /// A reader of this partition ([`LogReader`]): the read half of this handle on its own.
    pub fn reader(&self) -> &LogReader {
        &self.part.reader
    }

    /// A client's produce request as the leader, at the current leader epoch: batches get
    /// their offsets here; producer ids, epochs and sequences are checked (a duplicate returns
    /// the original offsets and writes nothing); control batches are refused. Not durable
    /// until [`flush`](Self::flush).
    pub fn append(&self, records: &[u8]) -> Result<LogAppendInfo> {
        self.write(|log| {
            let epoch = log.leader_epoch();
            Ok(log.append_as_leader(records, epoch, AppendOrigin::Client)?)
        })
    }

    /// Kafka `appendAsLeader` with an explicit leader epoch and origin: `Client` for produce
    /// requests, `Coordinator` for what a transaction or group coordinator writes (transaction
    /// markers, KIP-1279 barriers).
    pub fn append_as_leader(
        &self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo> {
        self.write(|log| Ok(log.append_as_leader(records, leader_epoch, origin)?))
    }

    /// Kafka `appendAsFollower`: batches replicated from a leader keep their offsets, leader
    /// epochs and bytes; producer state applies replication rules (warnings, not errors).
    pub fn append_as_follower(&self, records: &[u8]) -> Result<LogAppendInfo> {
        self.write(|log| Ok(log.append_as_follower(records)?))
    }

    /// KIP-1279: starts mirroring the partition of the cluster `source_cluster_id`, first
    /// truncating this log to where it diverges from `source` by leader epoch (a
    /// [`PartitionLog`] or [`recovery::EpochHistory`] of the source). A partition
    /// that never mirrored and holds batches of its own keeps none of them unless the source
    /// tells a Last Mirror Epoch (failback): it is truncated fully and starts at 0
    /// (`docs/barrier.md`, "Leader epochs and log alignment"). From then on client and
    /// coordinator appends are refused; [`append_as_mirror`](Self::append_as_mirror) feeds the
    /// source's batches.
    pub fn start_mirroring(
        &self,
        source_cluster_id: &str,
        source: &dyn recovery::EpochEndOffsets,
    ) -> Result<()> {
        self.maintain(|| self.write(|log| Ok(log.start_mirroring(source_cluster_id, source)?)))
    }

    /// KIP-1279's mirror fetcher: appends the source's batches as they are (offsets, leader
    /// epochs, bytes), only while mirroring.
    pub fn append_as_mirror(&self, records: &[u8]) -> Result<LogAppendInfo> {
        self.write(|log| Ok(log.append_as_mirror(records)?))
    }

    /// KIP-1279's failover: flushes (so that, with the high watermark following the flushed
    /// log end, everything mirrored is below it), then the durable `Stopping` steps under
    /// [`Config::mirror_stop_policy`]: truncation to the last stable offset (or ABORT markers
    /// for the open transactions), a leader-epoch bump, the `MIRROR_PID_RESET` barrier, then
    /// `Stopped`, after which the partition is writable and every producer id the source used
    /// starts afresh. Returns the barrier's offset; the new leader epoch is
    /// [`leader_epoch`](Self::leader_epoch). An interrupted stop is finished by the next open's
    /// owner with [`PartitionLog::resume_mirror_stop`].
    pub fn stop_mirroring(&self) -> Result<i64> {
        self.stop(|log, policy| log.stop_mirroring_with(policy))
    }

    /// [`stop_mirroring`](Self::stop_mirroring), returning the barrier's offset and the leader
    /// epoch the library chose for the stop (local appends continue in it; the caller's
    /// metadata follows it).
    pub fn stop_mirroring_outcome(&self) -> Result<recovery::StopOutcome> {
        self.stop(recovery::MirroredLog::stop_mirroring_outcome)
    }

    /// A mirror stop `stop` under [`Config::mirror_stop_policy`], after a flush that moves the
    /// high watermark to everything mirrored (with the default policy).
    fn stop<R>(
        &self,
        stop: impl FnOnce(
            &mut PartitionLog,
            recovery::StopPolicy,
        )
            -> std::result::Result<R, recovery::MirrorError<recovery::PartitionLogError>>,
    ) -> Result<R> {
        let policy = self.part.config.mirror_stop_policy;
        self.maintain(|| {
            self.write(|log| {
                log.flush()?;
                self.after_write(log);
                Ok(stop(log, policy)?)
            })
        })
    }

    /// The KIP-1279 mirror state ([`PartitionLog::mirror_state`]): never mirrored, mirroring,
    /// stopping or stopped.
    pub fn mirror_state(&self) -> Result<recovery::MirrorPartitionState> {
        let guard = self.lock_writer();
        let log = guard
            .as_ref()
            .ok_or_else(|| Error::Closed(self.part.tp.clone()))?;
        Ok(log.mirror_state().clone())
    }

    /// The partition's leader epoch ([`PartitionLog::leader_epoch`]): while mirroring, the
    /// destination's own epoch, which the library keeps above every mirrored source epoch
    /// (a lower one from the caller is refused by
    /// [`PartitionLog::set_mirror_leader_epoch`]); after a stop, the stop's. The caller's
    /// metadata follows it.
    pub fn leader_epoch(&self) -> i32 {
        self.part.reader.state().leader_epoch
    }

    /// The offsets a read at `isolation` can return now: from the log start offset to the high
    /// watermark (`ReadUncommitted`) or the last stable offset (`ReadCommitted`).
    pub fn readable_range(&self, isolation: IsolationLevel) -> Range<i64> {
        let state = self.part.reader.state();
        let end = match isolation {
            IsolationLevel::ReadUncommitted => state.high_watermark,
            IsolationLevel::ReadCommitted => state.last_stable_offset,
        };
        self.part.reader.log_start_offset()..end
    }

    /// Kafka's fetch: whole batches from the one holding `offset`, at most `max_bytes` (at
    /// least one batch), inside [`readable_range`](Self::readable_range); with
    /// `ReadCommitted`, the aborted transactions of the range too. `offset` must lie between
    /// the log start and log end offsets.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult> {
        Ok(self.part.reader.read(offset, max_bytes, isolation)?)
    }

    /// Kafka's `UnifiedLog.read` exactly, as a server hands it on: the bytes may end in a batch
    /// cut short by `max_bytes`, the bound is the log end, the high watermark or the last stable
    /// offset, and `min_one_message` says whether the first batch is returned whole when it is
    /// larger than `max_bytes` ([`PartitionLog::fetch`]). Byte-identical to Kafka 4.3.1's on
    /// broker-written logs (`kafka_interop`, `reads`).
    pub fn fetch(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchResult> {
        Ok(self
            .part
            .reader
            .fetch(offset, max_bytes, isolation, min_one_message)?)
    }

    /// [`read`](Self::read) as a consumer sees it: records, without control batches and (with
    /// `ReadCommitted`) without the records of aborted transactions.
    pub fn consume(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<Vec<ConsumedRecord>> {
        let fetch = self.read(offset, max_bytes, isolation)?;
        Ok(consume(&fetch)?)
    }

    /// The records from `offset` on as a consumer at `isolation` sees them, across segments,
    /// up to the end of [`readable_range`](Self::readable_range) when it is called (Kafka's
    /// fetch loop, [`PartitionLog::iter_from`]): control batches hidden, aborted records
    /// skipped under `ReadCommitted`. It stops at that bound (later appends are not followed:
    /// call it again from the last offset plus one) and holds a reader of its own, so appends,
    /// rolls and retention go on while it lives.
    pub fn iter_from(&self, offset: i64, isolation: IsolationLevel) -> Result<RecordIter> {
        Ok(self.part.reader.iter_from(offset, isolation)?)
    }

    /// Kafka's `ListOffsets` for this partition ([`PartitionLog::fetch_offset_by_timestamp`]):
    /// a real timestamp finds the first record at or after it; the special values
    /// [`recovery::EARLIEST_TIMESTAMP`], [`recovery::LATEST_TIMESTAMP`],
    /// [`recovery::MAX_TIMESTAMP`] (KIP-734) and the others answer as Kafka's leader does.
    /// (A broker then bounds `latest` by the isolation level: [`readable_range`](Self::readable_range).)
    pub fn fetch_offset_by_timestamp(
        &self,
        target: i64,
    ) -> Result<Option<crate::TimestampAndOffset>> {
        Ok(self.part.reader.fetch_offset_by_timestamp(target)?)
    }

    /// Kafka's `OffsetsForLeaderEpoch` for this partition: `(epoch, end offset)` for the largest
    /// leader epoch at or below `leader_epoch`, or `None` when undefined
    /// ([`PartitionLog::end_offset_for_leader_epoch`]).
    pub fn end_offset_for_leader_epoch(&self, leader_epoch: i32) -> Option<(i32, i64)> {
        self.part.reader.end_offset_for_leader_epoch(leader_epoch)
    }

    /// The offset the next batch gets.
    pub fn log_end_offset(&self) -> i64 {
        self.part.reader.log_end_offset()
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.part.reader.log_start_offset()
    }

    /// Everything below it is on disk.
    pub fn recovery_point(&self) -> i64 {
        self.part.reader.recovery_point()
    }

    /// Kafka's scheduled `delete-file` task: removes the `.deleted` files of segments that
    /// retention, truncation or the cleaner removed at least `file.delete.delay.ms`
    /// ([`LogConfig::file_delete_delay_ms`](segment_store::LogConfig::file_delete_delay_ms)) ago
    /// on the clock. A [`LogDir`](crate::LogDir)'s own thread runs it; every retention pass and
    /// the close do too. Returns the number of segments whose files went.
    pub fn delete_expired_files(&self) -> Result<usize> {
        Ok(self.part.reader.delete_expired_files()?)
    }

    /// The high watermark: the end of what `ReadUncommitted` reads see.
    pub fn high_watermark(&self) -> i64 {
        self.part.reader.state().high_watermark
    }

    /// The last stable offset: the end of what `ReadCommitted` reads see.
    pub fn last_stable_offset(&self) -> i64 {
        self.part.reader.state().last_stable_offset
    }

    /// Sets the high watermark (clamped to the log); what replication does in Kafka. With
    /// [`HighWatermark::FlushedLogEnd`](crate::HighWatermark::FlushedLogEnd) or [`HighWatermark::LogEnd`](crate::HighWatermark::LogEnd) the log moves it too.
    /// Returns the value set.
    pub fn set_high_watermark(&self, offset: i64) -> Result<i64> {
        self.write(|log| Ok(log.set_high_watermark(offset)))
    }

    /// Producer state: every producer id's epoch, last sequences and open transaction, as a
    /// copy taken now (O(producers)).
    pub fn producer_state(&self) -> Result<ProducerStateManager> {
        let guard = self.lock_writer();
        let log = guard
            .as_ref()
            .ok_or_else(|| Error::Closed(self.part.tp.clone()))?;
        Ok(log.producer_state().clone())
    }

    /// Makes everything appended so far durable (fsync of the segments, then the directory);
    /// the recovery point moves to the log end of when it started and, with
    /// [`HighWatermark::FlushedLogEnd`](crate::HighWatermark::FlushedLogEnd), readers now see
    /// it. Neither appends nor reads wait for its fsync (appends made meanwhile are durable at
    /// the next flush). The log directory's checkpoints are not written here (they say where
    /// recovery starts, not what is durable): the directory's own thread writes them
    /// ([`Config::recovery_point_checkpoint_interval_ms`],
    /// [`Config::high_watermark_checkpoint_interval_ms`]), and [`LogDir::flush`] and the close
    /// do.
    pub fn flush(&self) -> Result<()> {
        // The fsyncs run without the writer's lock: appends go on beside them.
        let flusher = self.write(|log| Ok(log.flusher()))?;
        flusher.flush()?;
        // The high watermark follows what is durable now.
        self.write(|_| Ok(()))
    }

    /// Seals the active segment and starts a new one at the log end (flushing first, with a
    /// producer snapshot at the new base). Returns the new base offset.
    pub fn roll(&self) -> Result<i64> {
        self.write(|log| Ok(log.roll()?))
    }

    /// Retention (Kafka `deleteOldSegments`): deletes the segments past `retention.ms` or
    /// `retention.bytes` or below the log start offset, never past the high watermark.
    /// Returns how many were deleted. A read in flight keeps the files of the segments it
    /// reads open until it ends.
    pub fn apply_retention(&self) -> Result<usize> {
        self.maintain(|| self.write(|log| Ok(log.delete_old_segments()?)))
    }

    /// Kafka `deleteRecords`: moves the log start offset up to `offset` (at most the high
    /// watermark); whole segments below it go at the next
    /// [`apply_retention`](Self::apply_retention). Returns whether it moved.
    pub fn delete_records_before(&self, offset: i64) -> Result<bool> {
        self.write(|log| Ok(log.delete_records_before(offset)?))
    }

    /// Removes every batch at or above `offset` (a follower's truncation after a leader
    /// change), producer state and leader epochs with it. Returns whether anything was removed.
    pub fn truncate_to(&self, offset: i64) -> Result<bool> {
        self.maintain(|| self.write(|log| Ok(log.truncate_to(offset)?)))
    }

    /// Writes a producer snapshot at the log end offset now (Kafka writes them at rolls and
    /// at close). Returns its path, or `None` if one exists there.
    pub fn take_producer_snapshot(&self) -> Result<Option<PathBuf>> {
        self.write(|log| Ok(log.take_producer_snapshot()?))
    }

    /// Kafka `ProducerStateManager.latestSnapshotOffset`: the newest producer snapshot's
    /// offset ([`PartitionLog::latest_snapshot_offset`]).
    pub fn latest_snapshot_offset(&self) -> Result<Option<i64>> {
        self.write(|log| Ok(log.latest_snapshot_offset()?))
    }

    /// Kafka `ProducerStateManager.oldestSnapshotOffset`: the oldest producer snapshot's
    /// offset ([`PartitionLog::oldest_snapshot_offset`]).
    pub fn oldest_snapshot_offset(&self) -> Result<Option<i64>> {
        self.write(|log| Ok(log.oldest_snapshot_offset()?))
    }

    /// Kafka `ProducerStateManager.deleteSnapshotsBefore`: deletes the producer snapshots below
    /// `offset` and returns them ([`PartitionLog::delete_snapshots_before`]).
    pub fn delete_snapshots_before(&self, offset: i64) -> Result<Vec<SnapshotFile>> {
        self.write(|log| Ok(log.delete_snapshots_before(offset)?))
    }

    /// Kafka `ProducerStateManager.removeStraySnapshots`: deletes the producer snapshots at no
    /// segment's base but the newest at or above the active segment's, and returns them
    /// ([`PartitionLog::remove_stray_snapshots`]).
    pub fn remove_stray_snapshots(&self) -> Result<Vec<SnapshotFile>> {
        self.write(|log| Ok(log.remove_stray_snapshots()?))
    }

    /// The read-only recovery plan of the partition as its files are now (what `seglog verify`
    /// prints, [`recovery::LogLoader::plan`] over every segment): what recovery would cut,
    /// quarantine, rebuild or warn about if the process stopped now with its writes in the page
    /// cache. Writes wait while the files are read (so the plan sees no append in flight); reads
    /// go on. [`RecoveryPlan::changes_data`](recovery::RecoveryPlan::changes_data) is `false` for
    /// a sound log.
    pub fn verify(&self) -> Result<recovery::RecoveryPlan> {
        let guard = self.lock_writer();
        let log = guard
            .as_ref()
            .ok_or_else(|| Error::Closed(self.part.tp.clone()))?;
        let opts = recovery::LoadOptions {
            config: self.part.config.clone().with_full_recovery(true),
            log_start_offset: log.log_start_offset(),
            high_watermark: Some(log.high_watermark()),
            ..recovery::LoadOptions::default()
        };
        Ok(recovery::LogLoader::plan(&self.part.dir, &opts)?)
    }

    /// Clean shutdown of a `Log` from [`Log::open`]: flush, producer snapshot, leader-epoch
    /// checkpoint, the log directory's checkpoints, then its `.kafka_cleanshutdown` marker. The
    /// next [`open`](Self::open) recovers nothing. Its other clones are closed with it: their
    /// writes fail with [`Error::Closed`], their reads with a closed-log error. Dropping every
    /// clone without `close` is an unclean shutdown. A partition of a [`LogDir`] is closed with
    /// its directory ([`LogDir::close`]): here the handle is only dropped.
    pub fn close(self) -> Result<()> {
        match self.take_owned_dir() {
            Some(dir) => dir.close(),
            None => Ok(()),
        }
    }

    fn take_owned_dir(&self) -> Option<LogDir> {
        let owned = self.owned.as_ref()?;
        owned.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// One pass of Kafka's log cleaner over the partition (see `docs/cleaner.md`), on the open
    /// log: the dirty section, from `cleaner-offset-checkpoint` (or the log start) to the first
    /// uncleanable offset (the last stable offset, the active segment, `min.compaction.lag.ms`),
    /// keeps the newest value of each key, as Kafka's cleaner does, with [`Config::cleaner`]'s
    /// settings (throttled to `log.cleaner.io.max.bytes.per.second`) and the time of
    /// [`Config::env`]'s clock. Appends and reads go on while it runs: it reads only sealed
    /// segments, and each cleaned group is committed (`.cleaned`, then `.swap`, synced: crash-safe) and put in
    /// place by the log under its writer's segment lock, where appends wait for one
    /// directory sync (reads do not). Retention, truncation and mirror transitions of the partition wait for
    /// the pass. A log without a dirty section is left as it is (a report with no group).
    pub fn compact(&self) -> Result<recovery::CleanReport> {
        self.compact_throttled(None)
    }

    /// [`Self::compact`], its I/O counted by `throttler` when one is given (a log directory's
    /// cleaner threads share one), else by a throttler of its own when the configuration
    /// limits the rate.
    pub(crate) fn compact_throttled(
        &self,
        throttler: Option<Arc<recovery::internals::cleaner::schedule::Throttler>>,
    ) -> Result<recovery::CleanReport> {
        use recovery::internals::cleaner::schedule::{ThreadSleeper, Throttler};
        let config = &self.part.config;
        let throttler = throttler.or_else(|| {
            (config.cleaner.io_max_bytes_per_second < f64::MAX).then(|| {
                Arc::new(Throttler::new(
                    config.cleaner.io_max_bytes_per_second,
                    Arc::clone(&config.env.clock),
                    Arc::new(ThreadSleeper),
                ))
            })
        });
        self.maintain(|| {
            let live = self.write(|log| Ok(log.live_cleaning()))?;
            Ok(recovery::internals::cleaner::clean_live(
                &config.env.storage,
                &live,
                &self.part.tp,
                &config.cleaner,
                throttler,
            )?)
        })
    }

    /// [`fetch`](Self::fetch) without copying the bytes, for a server that hands file regions
    /// to `sendfile` (Kafka's fetch answers with a slice of the segment's `FileRecords`): the
    /// same bound, the same aborted transactions and the same retries while segments change,
    /// and as [`FetchSlices::slice`](recovery::FetchSlices::slice) one range of the `.log` of the segment holding the fetch
    /// offset, whose bytes are [`FetchResult::records`] of the same call (`None` when there
    /// are none).
    ///
    /// What a held [`FileSlice`](segment_store::FileSlice) points to is the segment's open
    /// file, kept open until the slice is dropped, not its name and not a map:
    /// - it reads its bytes after [`apply_retention`](Self::apply_retention) deleted the
    ///   segment and after [`close`](Self::close) (on Unix an open file stays readable after
    ///   it is unlinked; until the slice is dropped its disk space is not freed and its
    ///   descriptor stays open);
    /// - after a [`truncate_to`](Self::truncate_to) below its end the file is shorter: a read
    ///   of the slice past the new end is a short read
    ///   ([`FileSlice::read_into`](segment_store::FileSlice::read_into) returns fewer bytes,
    ///   [`FileSlice::to_vec`](segment_store::FileSlice::to_vec) fails with `SliceTruncated`
    ///   and the position), never a fault: slices are read with `pread` or `sendfile` from the
    ///   descriptor, never mapped;
    /// - [`FileSlice::as_fd`](segment_store::FileSlice::as_fd) gives the descriptor for
    ///   `sendfile` (`None` on storage that is not a real file system, such as the `testkit`
    ///   crate's simulated one).
    ///
    /// [`FetchSlices::next_fetch_offset`](recovery::FetchSlices::next_fetch_offset) is
    /// [`FetchResult::next_fetch_offset`], found when asked from the headers of the slice's last
    /// batches (a read of a few KiB), not by the fetch: a server that only hands the slice to
    /// `sendfile` does not pay for it.
    pub fn fetch_slices(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<recovery::FetchSlices> {
        Ok(self
            .part
            .reader
            .fetch_slices(offset, max_bytes, isolation, min_one_message)?)
    }
}

/// A `Log` as the source of a mirror ([`Log::start_mirroring`] of another partition): its leader
/// epochs and, once stopped, its Last Mirror Epoch, read under its writer's lock (so a partition
/// is never its own source). A closed log answers as one with no epochs.
impl recovery::EpochEndOffsets for Log {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        match self.lock_writer().as_ref() {
            Some(log) => recovery::EpochEndOffsets::end_offset_for_epoch(log, requested),
            None => (recovery::UNDEFINED_EPOCH, recovery::UNDEFINED_EPOCH_OFFSET),
        }
    }

    fn last_mirror_epoch(&self) -> Option<recovery::LastMirrorEpoch> {
        self.lock_writer()
            .as_ref()
            .and_then(recovery::EpochEndOffsets::last_mirror_epoch)
    }
}

/// The topic-partition a partition directory's name says.
fn partition_of(dir: &Path) -> Result<TopicPartition> {
    let not_a_partition = || Error::NotAPartitionDir {
        dir: dir.to_path_buf(),
    };
    let name = dir.file_name().ok_or_else(not_a_partition)?;
    match parse_partition_dir_name(name) {
        Ok(p) if p.kind == PartitionDirKind::Live => {
            let tp = TopicPartition::new(p.topic, p.partition);
            match tp.validate() {
                Ok(()) => Ok(tp),
                Err(reason) => Err(Error::InvalidPartition {
                    partition: tp,
                    reason,
                }),
            }
        }
        _ => Err(not_a_partition()),
    }
}

/// The live partitions of the log directory `parent` other than `tp`.
fn other_partitions(
    config: &Config,
    parent: &Path,
    tp: &TopicPartition,
) -> Result<Vec<TopicPartition>> {
    // Through the storage seam: the log directory may exist only there (simulated storage).
    if config.env.storage.entry_type(parent)? != Some(EntryType::Dir) {
        return Ok(Vec::new());
    }
    let mut others = Vec::new();
    for (name, kind) in config.env.storage.list_dir_typed(parent)? {
        if kind != EntryType::Dir {
            continue;
        }
        if let Ok(p) = parse_partition_dir_name(OsStr::new(&name)) {
            let other = TopicPartition::new(p.topic, p.partition);
            if p.kind == PartitionDirKind::Live && &other != tp {
                others.push(other);
            }
        }
    }
    others.sort();
    Ok(others)
}
