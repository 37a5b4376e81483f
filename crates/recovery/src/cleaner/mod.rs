//! Log compaction as Kafka's log cleaner does it (`Cleaner`, `LogCleanerManager.cleanableOffsets`,
//! `MemoryRecords.filterTo`), byte for byte for uncompressed batches.
//!
//! One pass over a closed partition directory, through the [`Storage`] seam:
//! 1. [`cleanable_offsets`]: the dirty section runs from the checkpointed first dirty offset to
//!    the first uncleanable offset (the last stable offset, the active segment, the first
//!    segment younger than `min.compaction.lag.ms`).
//! 2. The offset map ([`OffsetMap`], Kafka's sizing) is built over the dirty section, newest
//!    offset per key, skipping aborted transactions; it stops where it is full (at
//!    `slots * log.cleaner.io.buffer.load.factor` keys) and the pass ends there: the rest is
//!    cleaned by the next pass, as Kafka splits it.
//! 3. Every segment below the map's end is rewritten, in groups that fit `segment.bytes`,
//!    `segment.index.bytes` and 32-bit relative offsets, into `<base>.log.cleaned` (with its
//!    `.index`, `.timeindex`, `.txnindex`), then swapped in: `.cleaned` → `.swap` (the commit
//!    point), the old segments removed, `.swap` → live name. The loader finishes a swap a crash
//!    interrupted and removes `.cleaned` leftovers.
//! 4. `cleaner-offset-checkpoint` in the log directory records where the next pass starts.
//!
//! [`plan`] runs steps 1–3 without writing anything (what each group would keep and remove).

pub mod md5;
pub mod offset_map;
pub mod schedule;
pub mod txn;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use segment_store::Storage;
use segment_store::TopicPartition;

mod build;
mod clean;
mod error;
mod newest;
mod pass;
mod reader;
mod segments;
mod survey;

use clean::Mode;
pub use error::CleanerError;
use error::Result;
use pass::{largest_timestamp, read_first_batch_timestamp, run_pass};
use segments::segment_path;
pub use segments::{
    cleanable_offsets, first_dirty_offset, first_uncleanable_segment, list_segments,
    read_cleaner_checkpoint, write_cleaner_checkpoint, SegmentFiles,
};

pub use offset_map::{OffsetMap, Put};
pub use txn::CleanedTransactionMetadata;

/// The cleaner's settings, with Kafka's names and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size` (128 MiB), shared by the cleaner threads.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.threads` (1): the offset map of one thread gets the buffer over this.
    pub threads: u32,
    /// `log.cleaner.io.buffer.load.factor` (0.9): how full the offset map is filled.
    pub io_buffer_load_factor: f64,
    /// `log.cleaner.io.buffer.size` (512 KiB): the read window.
    pub io_buffer_size: usize,
    /// `max.message.bytes` (1048588): the largest batch read.
    pub max_message_bytes: usize,
    /// `delete.retention.ms` (1 day): how long tombstones and markers of empty transactions
    /// stay after the cleaning that set their delete horizon.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms` (0).
    pub min_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio` (0.5): a log is due when its cleanable bytes are more than
    /// this share of its bytes (`schedule::due`).
    pub min_cleanable_dirty_ratio: f64,
    /// `max.compaction.lag.ms` (`i64::MAX`, never): a log whose oldest dirty segment's first
    /// batch is older than this is due whatever its ratio.
    pub max_compaction_lag_ms: i64,
    /// `log.cleaner.io.max.bytes.per.second` (unlimited): the rate of the bytes a pass reads
    /// and writes (`schedule::Throttler`).
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_size: 128 * 1024 * 1024,
            threads: 1,
            io_buffer_load_factor: 0.9,
            io_buffer_size: 512 * 1024,
            max_message_bytes: 1024 * 1024 + 12,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: 0.5,
            max_compaction_lag_ms: i64::MAX,
            io_max_bytes_per_second: f64::MAX,
        }
    }
}

/// Kafka's `LastRecord`: what producer state says of a producer's last write. The batch holding
/// it is kept (emptied if need be) so that the producer's sequence and epoch survive cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// Last offset of its last data batch, if producer state has one.
    pub last_data_offset: Option<i64>,
    /// Its epoch.
    pub producer_epoch: i16,
}

/// What a cleaning pass needs to know of the partition besides its files.
#[derive(Debug, Clone)]
pub struct LogToClean {
    /// The partition directory.
    pub dir: PathBuf,
    /// The log start offset.
    pub log_start_offset: i64,
    /// The log end offset, as the loaded log (or its recovery plan) has it: the cleaner never
    /// reads the active segment, whose tail a writer may be appending to or a crash may have
    /// torn.
    pub log_end_offset: i64,
    /// The last stable offset (first offset of the oldest open transaction, else the high
    /// watermark).
    pub last_stable_offset: i64,
    /// The last record of each producer producer state holds.
    pub last_records: BTreeMap<i64, LastRecord>,
    /// The cleaner's clock (delete horizons, compaction lag).
    pub now_ms: i64,
    /// The log's `segment.bytes`, `segment.index.bytes` and `index.interval.bytes`: as Kafka's
    /// cleaner (`groupSegmentsBySize(log.config.segmentSize, log.config.maxIndexSize, ...)`), a
    /// pass groups segments and indexes the cleaned ones by the log's own settings.
    pub segments: SegmentSettings,
}

/// The settings of a log's segments a cleaning pass follows (from its `LogConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSettings {
    /// `segment.bytes`: the largest group of segments cleaned into one.
    pub segment_bytes: u64,
    /// `segment.index.bytes`: the largest index of a group.
    pub max_index_size: u64,
    /// `index.interval.bytes`: the bytes between two index entries of a cleaned segment.
    pub index_interval_bytes: u32,
}

impl SegmentSettings {
    /// The settings `config` gives a log's segments.
    pub fn of(config: &segment_store::LogConfig) -> Self {
        SegmentSettings {
            segment_bytes: config.segment_bytes,
            max_index_size: config.max_index_size,
            index_interval_bytes: config.index_interval_bytes,
        }
    }
}

impl Default for SegmentSettings {
    /// Kafka's defaults (`LogConfig::default()`).
    fn default() -> Self {
        SegmentSettings::of(&segment_store::LogConfig::default())
    }
}

/// What one group's cleaning did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupReport {
    /// Base offsets of the segments cleaned into one.
    pub segments: Vec<i64>,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes of the cleaned segment.
    pub bytes_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Records kept.
    pub records_retained: u64,
    /// Batches removed whole.
    pub batches_removed: u64,
}

/// What a pass did (or would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// First dirty offset.
    pub first_dirty_offset: i64,
    /// First uncleanable offset.
    pub first_uncleanable_offset: i64,
    /// The offset the pass cleaned up to (the map's end); the next pass starts here.
    pub end_offset: i64,
    /// Slots of the offset map.
    pub map_slots: usize,
    /// Keys in the offset map.
    pub map_keys: usize,
    /// Each group cleaned.
    pub groups: Vec<GroupReport>,
}

/// The range a pass would clean: `(first dirty, first uncleanable)`, the latter the base offset
/// of the segment it falls in.
fn range(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<(i64, i64)> {
    let segments = list_segments(storage.as_ref(), &log.dir)?;
    let checkpointed = read_cleaner_checkpoint(storage, &log.dir, tp)?;
    let (dirty, uncleanable) = cleanable_offsets(
        log,
        &segments,
        log.log_end_offset,
        checkpointed,
        config.min_compaction_lag_ms,
        |s| largest_timestamp(storage.as_ref(), &log.dir, s, config),
    )?;
    Ok((dirty, first_uncleanable_segment(&segments, uncleanable)))
}

/// What one cleaning pass would do, writing nothing.
pub fn plan(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    let (dirty, uncleanable) = range(storage, log, tp, config)?;
    if dirty >= uncleanable {
        return Ok(CleanReport {
            first_dirty_offset: dirty,
            first_uncleanable_offset: uncleanable,
            end_offset: dirty,
            ..CleanReport::default()
        });
    }
    run_pass(
        storage.as_ref(),
        log,
        dirty,
        uncleanable,
        config,
        Mode::DryRun,
        &pass::Replace::Files,
    )
}

/// One cleaning pass of the closed partition in `log.dir`, then its `cleaner-offset-checkpoint`
/// entry set to where the pass ended. Nothing to clean (the dirty section is empty) is a report
/// with no group. With `log.cleaner.io.max.bytes.per.second` set, the pass's reads and writes are
/// throttled to it on the system clock ([`clean_throttled`] takes a throttler of its own).
pub fn clean(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    if config.io_max_bytes_per_second < f64::MAX {
        let throttler = Arc::new(schedule::Throttler::new(
            config.io_max_bytes_per_second,
            Arc::new(segment_store::SystemClock),
            Arc::new(schedule::ThreadSleeper),
        ));
        return clean_throttled(storage, log, tp, config, throttler);
    }
    clean_unthrottled(storage, log, tp, config)
}

/// `clean` with every byte the pass reads or writes counted by `throttler` (shared by the
/// passes of one cleaner: Kafka's throttler is one per cleaner, over its threads).
pub fn clean_throttled(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
    throttler: Arc<schedule::Throttler>,
) -> Result<CleanReport> {
    let throttled: Arc<dyn Storage> = Arc::new(schedule::ThrottledStorage::new(
        Arc::clone(storage),
        throttler,
    ));
    clean_unthrottled(&throttled, log, tp, config)
}

fn clean_unthrottled(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    clean_with(storage, log, tp, config, &pass::Replace::Files)
}

fn clean_with(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
    replace: &pass::Replace<'_>,
) -> Result<CleanReport> {
    let (dirty, uncleanable) = range(storage, log, tp, config)?;
    if dirty >= uncleanable {
        return Ok(CleanReport {
            first_dirty_offset: dirty,
            first_uncleanable_offset: uncleanable,
            end_offset: dirty,
            ..CleanReport::default()
        });
    }
    let report = run_pass(
        storage.as_ref(),
        log,
        dirty,
        uncleanable,
        config,
        Mode::Apply,
        replace,
    )?;
    write_cleaner_checkpoint(storage, &log.dir, tp, report.end_offset)?;
    Ok(report)
}

/// An open partition as a cleaning pass sees it ([`PartitionLog::live_cleaning`](crate::PartitionLog::live_cleaning)): what
/// [`LogToClean`] says, taken under the writer, and its segments, which put each cleaned group
/// in place.
#[derive(Debug, Clone)]
pub struct LiveLog {
    /// The partition's offsets and producers when the pass was asked for.
    pub log: LogToClean,
    local: Arc<segment_store::LocalLog>,
}

impl crate::PartitionLog {
    /// What a cleaning pass of this open log needs (`clean_live`), taken now, with the
    /// cleaner's clock at the log's clock.
    pub fn live_cleaning(&self) -> LiveLog {
        LiveLog {
            log: LogToClean {
                dir: self.dir().to_path_buf(),
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.log_end_offset(),
                last_stable_offset: self.last_stable_offset(),
                last_records: last_records(self.producer_state()),
                now_ms: self.clock.now_ms(),
                segments: SegmentSettings::of(&self.config.log),
            },
            local: Arc::clone(&self.local),
        }
    }
}

/// One cleaning pass of an open partition (Kafka's cleaner beside a live log): `clean`'s pass,
/// reading the sealed segments below the first uncleanable offset while the writer appends to
/// the active segment and readers read, each cleaned group committed (`.cleaned` → `.swap`,
/// synced) and then put in place by the log itself
/// ([`LocalLog::replace_segments`](segment_store::LocalLog::replace_segments)), under its
/// writer's segment lock. The caller keeps retention and truncation of the partition out while
/// the pass runs (they remove segments the pass reads). With a throttler, every byte the pass
/// reads or writes is counted by it.
pub fn clean_live(
    storage: &Arc<dyn Storage>,
    live: &LiveLog,
    tp: &TopicPartition,
    config: &CleanerConfig,
    throttler: Option<Arc<schedule::Throttler>>,
) -> Result<CleanReport> {
    let local = Arc::clone(&live.local);
    let replace = move |base: i64, replaced: &[i64]| local.replace_segments(base, replaced);
    let replace = pass::Replace::Live(&replace);
    match throttler {
        Some(t) => {
            let throttled: Arc<dyn Storage> =
                Arc::new(schedule::ThrottledStorage::new(Arc::clone(storage), t));
            clean_with(&throttled, &live.log, tp, config, &replace)
        }
        None => clean_with(storage, &live.log, tp, config, &replace),
    }
}

/// Kafka's `lastRecordsOfActiveProducers`: each producer's last data offset (if producer state
/// has one) and epoch.
pub fn last_records(
    producers: &crate::producer_state::ProducerStateManager,
) -> BTreeMap<i64, LastRecord> {
    producers
        .active_producers()
        .into_iter()
        .map(|(pid, e)| {
            let last = e.last_data_offset();
            (
                pid,
                LastRecord {
                    last_data_offset: (last >= 0).then_some(last),
                    producer_epoch: e.producer_epoch(),
                },
            )
        })
        .collect()
}
