//! [`Config`]: the one set of settings a log directory, and every partition log in it, is opened
//! with (the facade re-exports it as `seglog::Config`). Each knob is declared here once, with
//! Kafka's name; the layers below take the part they need: a partition log its
//! [`PartitionLogConfig`] (and from it, segment-store's [`LogConfig`] and the producer-state
//! manager's [`ProducerStateManagerConfig`]), segment-store its [`LogEnv`], the cleaner its
//! [`CleanerConfig`].
//!
//! A new knob is one field here (with its default in `Default`, and a `with_` method if users
//! set it often), read where it is used.

use std::sync::Arc;

use segment_store::{Clock, LogConfig, LogEnv, Storage};

use crate::cleaner::CleanerConfig;
use crate::log::{HighWatermark, PartitionLogConfig};
use crate::mirror::StopPolicy;
use crate::producer_state::ProducerStateManagerConfig;

/// How to open a log directory ([`load_log_dir`](crate::load_log_dir), `seglog::LogDir`) or a
/// single partition log (`seglog::Log`, [`LoadOptions`](crate::LoadOptions)).
///
/// ```
/// use std::sync::Arc;
/// use recovery::{Config, HighWatermark};
/// use testkit::ManualClock;
///
/// let clock = Arc::new(ManualClock::new(1_700_000_000_000));
/// let config = Config::default()
///     .with_clock(clock.clone())
///     .with_segment_bytes(1 << 20)
///     .with_producer_id_expiration_ms(86_400_000)
///     .with_high_watermark(HighWatermark::FlushedLogEnd);
/// assert_eq!(config.log.log.segment_bytes, 1 << 20);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// Settings of every partition log: segment size and roll time, retention, index
    /// intervals ([`LogConfig`]), producer-state settings such as `producer.id.expiration.ms`
    /// ([`ProducerStateManagerConfig`]) and `message.timestamp.type`.
    pub log: PartitionLogConfig,
    /// The two things that are usually implicit. `env.clock`: the clock of rolls, retention
    /// and producer expiry. Producer ids whose last write is at least
    /// `producer.id.expiration.ms` older than this clock are expired when the log is loaded
    /// (and reported: [`RecoveryReport::expired_producers`](crate::RecoveryReport)) and every
    /// [`Config::producer_id_expiration_check_interval_ms`] while it runs. Default: the system
    /// clock. `env.storage`: the storage seam every write goes through. Default: the real file
    /// system ([`StdFs`](segment_store::StdFs)); the `testkit` crate has a simulated one that
    /// can crash at any I/O.
    pub env: LogEnv,
    /// Who moves the high watermark. Default: [`HighWatermark::FlushedLogEnd`]. It also
    /// decides what an open after an unclean shutdown re-establishes: the recovered log end
    /// once fsynced (`FlushedLogEnd`), the log end (`LogEnd`), or nothing until the caller sets
    /// it (`Manual`: a mirror stop refuses until then).
    pub high_watermark: HighWatermark,
    /// Threads recovering partitions in parallel when a log directory opens after an unclean
    /// shutdown (Kafka `num.recovery.threads.per.data.dir`), and closing them. Default: the
    /// number of cores the process may run on ([`default_recovery_threads`]), deliberately more
    /// than Kafka's default of 1: a broker recovers while it is not serving anyway, but seglog's
    /// recovery is usually the whole of what its process is doing at that moment, and each
    /// partition's recovery is CPU-bound (CRC checks, producer state) once its pages are cached,
    /// so one thread per core is what finishes first. `seglog recover` and `seglog verify` take
    /// the same default (`--threads`). Each thread holds a few file descriptors at a time, not
    /// one per segment. `0` counts as 1.
    pub recovery_threads: usize,
    /// Ignore the clean-shutdown marker and the recovery points: recover every segment from
    /// the first.
    pub full_recovery: bool,
    /// Kafka `replica.high.watermark.checkpoint.interval.ms` (default 5000): how often the
    /// log directory's own timer thread writes `replication-offset-checkpoint` (when a high
    /// watermark changed), with no call needed; also the interval of
    /// `seglog::LogDir::maybe_checkpoint_high_watermarks`.
    /// `0` or less: no timer thread.
    pub high_watermark_checkpoint_interval_ms: i64,
    /// Kafka `log.flush.interval.ms`: the log directory's own thread flushes (fsyncs) each
    /// partition whose last flush by that thread is this old and which has unflushed appends;
    /// with [`HighWatermark::FlushedLogEnd`] that also makes them readable. Default `0`: no
    /// background flush (Kafka's default is never, leaving durability to replication); the
    /// caller flushes (`seglog::Log::flush`, `seglog::LogDir::flush`).
    pub flush_interval_ms: i64,
    /// Kafka `log.flush.offset.checkpoint.interval.ms` (default 60000): how often the log
    /// directory's own thread writes `recovery-point-offset-checkpoint` and
    /// `log-start-offset-checkpoint` (when they changed), so that recovery after a crash starts
    /// from recent recovery points. `0` or less: only `seglog::LogDir::flush`
    /// and `seglog::LogDir::close` write them.
    pub recovery_point_checkpoint_interval_ms: i64,
    /// Kafka `producer.id.expiration.check.interval.ms` (default 600000, ten minutes): how
    /// often producers idle for `producer.id.expiration.ms` (and with no open transaction) are
    /// dropped while the log runs, on the clock of [`Config::env`]
    /// (`seglog::LogDir::maybe_remove_expired_producers`, which every `seglog::Log` write and
    /// every `seglog::LogDir::flush` calls). `0` or less: producers expire only when a log is
    /// loaded.
    pub producer_id_expiration_check_interval_ms: i64,
    /// How `seglog::LogDir::close` makes its partitions durable before it
    /// writes the checkpoints and the clean-shutdown marker. Default:
    /// [`CloseSync::FileSystem`] (one `syncfs` of the directory's file system after all
    /// partitions closed, instead of a sync per file).
    pub close_sync: CloseSync,
    /// What a mirror stop (`seglog::Log::stop_mirroring`) does with transactions still open at
    /// the stop (KIP-1279 failover): [`StopPolicy::TruncateToLastStable`] (the design text, the
    /// default) or [`StopPolicy::AbortOpenTransactions`] (the prototype). See
    /// `docs/barrier.md`, "Open transactions at stop".
    pub mirror_stop_policy: StopPolicy,
    /// The log cleaner's settings, with Kafka's names (`log.cleaner.dedupe.buffer.size`,
    /// `log.cleaner.threads`, `log.cleaner.io.buffer.load.factor`, `delete.retention.ms`,
    /// `min.compaction.lag.ms`, ...), used by `seglog::Log::compact`; a pass groups and indexes
    /// segments by the log's own `segment.bytes`, `segment.index.bytes` and
    /// `index.interval.bytes` ([`Config::log`]), as Kafka's does. See `docs/cleaner.md`.
    pub cleaner: CleanerConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            log: PartitionLogConfig::default(),
            env: LogEnv::default(),
            high_watermark: HighWatermark::default(),
            recovery_threads: default_recovery_threads(),
            full_recovery: false,
            high_watermark_checkpoint_interval_ms: 5_000,
            flush_interval_ms: 0,
            recovery_point_checkpoint_interval_ms: 60_000,
            producer_id_expiration_check_interval_ms:
                DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
            close_sync: CloseSync::default(),
            mirror_stop_policy: StopPolicy::default(),
            cleaner: CleanerConfig::default(),
        }
    }
}

/// Kafka's default `producer.id.expiration.check.interval.ms` (ten minutes).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: i64 = 600_000;

/// The default of [`Config::recovery_threads`]: the cores this process may run on
/// (`std::thread::available_parallelism`, which follows the CPU affinity and cgroup quota), 1 if
/// that cannot be known. Asked once per process: every [`Config::default`] (and so every
/// [`LoadOptions::default`](crate::LoadOptions)) takes it, and asking reads cgroup files.
pub fn default_recovery_threads() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES
        .get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

impl Config {
    /// Uses `cleaner` for compaction.
    #[must_use]
    pub fn with_cleaner(mut self, cleaner: CleanerConfig) -> Self {
        self.cleaner = cleaner;
        self
    }
    /// Uses `clock` for rolls, retention and producer expiry.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.env.clock = clock;
        self
    }
    /// Writes through `storage`.
    #[must_use]
    pub fn with_storage(mut self, storage: Arc<dyn Storage>) -> Self {
        self.env.storage = storage;
        self
    }
    /// Kafka `segment.bytes`.
    #[must_use]
    pub fn with_segment_bytes(mut self, bytes: u64) -> Self {
        self.log.log.segment_bytes = bytes;
        self
    }
    /// Kafka `producer.id.expiration.ms`.
    #[must_use]
    pub fn with_producer_id_expiration_ms(mut self, ms: i64) -> Self {
        self.log.producer_state.producer_id_expiration_ms = ms;
        self
    }
    /// Kafka `producer.id.expiration.check.interval.ms`.
    #[must_use]
    pub fn with_producer_id_expiration_check_interval_ms(mut self, ms: i64) -> Self {
        self.producer_id_expiration_check_interval_ms = ms;
        self
    }
    /// Who moves the high watermark.
    #[must_use]
    pub fn with_high_watermark(mut self, policy: HighWatermark) -> Self {
        self.high_watermark = policy;
        self
    }
    /// How many inactive segments a log keeps open at most, those used last
    /// ([`LogConfig::max_open_inactive_segments`]; each holds up to four descriptors): raise it
    /// for readers that jump between more segments, lower it for many partitions under a low
    /// descriptor limit.
    #[must_use]
    pub fn with_max_open_inactive_segments(mut self, segments: usize) -> Self {
        self.log.log.max_open_inactive_segments = segments;
        self
    }
    /// Segment-level settings, all of them: this replaces what earlier calls set there
    /// ([`Self::with_segment_bytes`], [`Self::with_max_open_inactive_segments`]); start from
    /// `config.log.log` to change one.
    #[must_use]
    pub fn with_log_config(mut self, log: LogConfig) -> Self {
        self.log.log = log;
        self
    }
    /// Every partition log's settings.
    #[must_use]
    pub fn with_partition_log_config(mut self, log: PartitionLogConfig) -> Self {
        self.log = log;
        self
    }
    /// Sets [`Config::flush_interval_ms`]: the log directory flushes its partitions on a thread
    /// of its own every `ms` (Kafka `log.flush.interval.ms`).
    #[must_use]
    pub fn with_flush_interval_ms(mut self, ms: i64) -> Self {
        self.flush_interval_ms = ms;
        self
    }
    /// Turns every background task of the log directory off (high-watermark and recovery-point
    /// checkpoints, flushes): nothing is written but what the caller asks for, in the order it
    /// asks (what a crash test of one's own code needs for the same I/O in every run).
    #[must_use]
    pub fn without_background_tasks(mut self) -> Self {
        self.high_watermark_checkpoint_interval_ms = 0;
        self.flush_interval_ms = 0;
        self.recovery_point_checkpoint_interval_ms = 0;
        self
    }
    /// Producer-state settings.
    #[must_use]
    pub fn with_producer_state(mut self, producer_state: ProducerStateManagerConfig) -> Self {
        self.log.producer_state = producer_state;
        self
    }
    /// Threads recovering partitions in parallel.
    #[must_use]
    pub fn with_recovery_threads(mut self, threads: usize) -> Self {
        self.recovery_threads = threads;
        self
    }
    /// Sets [`Config::full_recovery`]: recover every segment, whatever the clean-shutdown
    /// marker and the recovery points say.
    #[must_use]
    pub fn with_full_recovery(mut self, full: bool) -> Self {
        self.full_recovery = full;
        self
    }
    /// What a mirror stop does with open transactions.
    #[must_use]
    pub fn with_mirror_stop_policy(mut self, policy: StopPolicy) -> Self {
        self.mirror_stop_policy = policy;
        self
    }
    /// How a closing log directory makes its partitions durable.
    #[must_use]
    pub fn with_close_sync(mut self, close_sync: CloseSync) -> Self {
        self.close_sync = close_sync;
        self
    }
    /// Sets [`Config::high_watermark_checkpoint_interval_ms`] (Kafka
    /// `replica.high.watermark.checkpoint.interval.ms`).
    #[must_use]
    pub fn with_high_watermark_checkpoint_interval_ms(mut self, ms: i64) -> Self {
        self.high_watermark_checkpoint_interval_ms = ms;
        self
    }

    /// [`Config::recovery_threads`], at least 1.
    pub fn threads(&self) -> usize {
        self.recovery_threads.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recovery uses every core by default (Kafka's default is one thread per log directory).
    #[test]
    fn recovery_threads_default_to_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(Config::default().recovery_threads, cores);
        assert_eq!(default_recovery_threads(), cores);
    }
}

/// How [`LoadedLogDir::close`](crate::LoadedLogDir::close) makes the closed partitions durable before it writes the checkpoints
/// and the clean-shutdown marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloseSync {
    /// Each partition flushes its own files as it closes (an `fsync`, `fdatasync` or `msync`
    /// per file that holds unflushed data, as Kafka's `LogManager.shutdown` does).
    PerFile,
    /// The partitions close without flushing; then one `syncfs` of the file system holding the
    /// directory makes all of it durable (PostgreSQL's `recovery_init_sync_method = syncfs`).
    /// One device flush instead of one per file; it also writes back whatever else is dirty on
    /// that file system. Where the storage has no such call, [`CloseSync::PerFile`].
    #[default]
    FileSystem,
}
