//! `seglog compact [--dry-run] DIR`: one pass of Kafka's log cleaner over a partition, or over
//! the partitions of the topics named with `--topic` in a log directory (`recovery::cleaner`,
//! through [`LogDir::compact`](crate::LogDir::compact)). Which topics are compacted
//! (`cleanup.policy=compact`) is topic metadata that a log directory does not hold: the operator
//! names them, or passes `--all-topics`.
//!
//! The dry run writes nothing: it plans loading each partition as `seglog producers` does
//! (`recovery::LogLoader::plan`, the producer state and last stable offset it would load) and
//! runs the cleaner's pass without writing (`recovery::internals::cleaner::plan`), printing what each group
//! of segments would keep and remove. The run opens the log directory (recovering it if its last
//! shutdown was not clean), cleans the partitions, closes it, and prints what it did.
//!
//! Exit status: 0 done (or planned); 2 usage or I/O error, or a log the cleaner does not clean.

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use recovery::internals::cleaner::{self, LogToClean};
use recovery::{CleanReport, CleanerConfig};
use recovery::{LoadOptions, LogLoader};
use segment_store::TopicPartition;

use crate::cli::partition::{self, Target};
use crate::cli::Status;
use crate::{Config, LogDir};

/// Arguments of `seglog compact`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "compact",
    about = "One pass of Kafka's log cleaner over a partition (--dry-run: what it would do, read-only)",
    after_help = "Examples:\n  seglog compact --dry-run /var/kafka-logs/orders-0\n  seglog compact /var/kafka-logs/orders-0\n  seglog compact --topic orders --topic __consumer_offsets /var/kafka-logs\n\n\
                  Exit status: 0 done; 2 usage or I/O error, or a log the cleaner does not clean."
)]
pub struct CompactArgs {
    /// A partition directory (`<topic>-<partition>`), or a log directory with --topic or
    /// --all-topics; its shutdown clean or not
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// In a log directory: clean the partitions of this topic (a compacted one; repeatable)
    #[arg(long, value_name = "TOPIC")]
    pub topic: Vec<String>,
    /// In a log directory: clean the partitions of every topic (all are compacted ones)
    #[arg(long, conflicts_with = "topic")]
    pub all_topics: bool,
    /// Print what the pass would keep and remove, writing nothing
    #[arg(long)]
    pub dry_run: bool,
    /// The cleaner's clock in ms since the Unix epoch (delete horizons, compaction lag,
    /// producer expiry at load); default: now
    #[arg(long, value_name = "MS")]
    pub now_ms: Option<i64>,
    /// log.cleaner.dedupe.buffer.size: bytes of the offset map (with log.cleaner.threads 1)
    #[arg(long, value_name = "BYTES", default_value_t = 128 * 1024 * 1024)]
    pub dedupe_buffer_size: u64,
    /// delete.retention.ms: how long tombstones stay after the pass that set their horizon
    #[arg(long, value_name = "MS", default_value_t = 86_400_000)]
    pub delete_retention_ms: i64,
    /// min.compaction.lag.ms: segments younger than this are not cleaned
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub min_compaction_lag_ms: i64,
    /// segment.bytes (the topic's): the largest group of segments cleaned into one
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024 * 1024)]
    pub segment_bytes: u64,
    /// Clean only the partitions Kafka's cleaner would pick now: cleanable ratio above
    /// --min-cleanable-dirty-ratio, or --max-compaction-lag-ms passed; the filthiest first
    #[arg(long)]
    pub due: bool,
    /// min.cleanable.dirty.ratio (with --due)
    #[arg(long, value_name = "RATIO", default_value_t = 0.5)]
    pub min_cleanable_dirty_ratio: f64,
    /// max.compaction.lag.ms (with --due; default: never)
    #[arg(long, value_name = "MS", default_value_t = i64::MAX)]
    pub max_compaction_lag_ms: i64,
    /// log.cleaner.threads: partitions cleaned at once (and the offset map split among them)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: u32,
    /// log.cleaner.io.max.bytes.per.second: the rate of the bytes the passes read and write
    #[arg(long, value_name = "BYTES")]
    pub io_max_bytes_per_second: Option<f64>,
}

impl CompactArgs {
    fn cleaner_config(&self) -> CleanerConfig {
        CleanerConfig {
            dedupe_buffer_size: self.dedupe_buffer_size,
            delete_retention_ms: self.delete_retention_ms,
            min_compaction_lag_ms: self.min_compaction_lag_ms,
            min_cleanable_dirty_ratio: self.min_cleanable_dirty_ratio,
            max_compaction_lag_ms: self.max_compaction_lag_ms,
            threads: self.threads.max(1),
            io_max_bytes_per_second: self.io_max_bytes_per_second.unwrap_or(f64::MAX),
            ..CleanerConfig::default()
        }
    }
}

/// Runs `seglog compact`.
pub fn run(args: &CompactArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    match compact(args, out) {
        Ok(()) => Status::Success,
        Err(e) => {
            let _ = writeln!(err, "error: {}: {e}", args.dir.display());
            Status::Usage
        }
    }
}

fn compact(args: &CompactArgs, out: &mut impl Write) -> Result<(), Box<dyn std::error::Error>> {
    let clock = partition::clock(args.now_ms);
    let (log_dir, dirs) = selected(args)?;
    let cleaner_config = args.cleaner_config();
    if args.dry_run {
        for dir in &dirs {
            let mut opts = LoadOptions::for_partition_dir(dir, false);
            opts.config.env.clock = clock.clone();
            opts.config.log.log.segment_bytes = args.segment_bytes;
            let plan = LogLoader::plan(dir, &opts)?;
            let tp = partition_of(dir)?;
            let mut log = LogToClean::from_plan(&plan, clock.now_ms());
            // As the run opens the directory (`HighWatermark::FlushedLogEnd`, the default): a high
            // watermark not known from a clean shutdown's checkpoint is the recovered log end.
            if !plan.had_clean_shutdown || opts.high_watermark.is_none() {
                log.last_stable_offset = plan
                    .producers
                    .last_stable_offset_for(plan.log_end_offset, plan.log_start_offset);
            }
            if args.due {
                // The same weighing the run does (`LogDir::compact_due`), read only.
                let c = cleaner::schedule::candidate(
                    &opts.config.env.storage,
                    &log,
                    &tp,
                    &cleaner_config,
                )?;
                let is_due = !cleaner::schedule::due(vec![c.clone()], &cleaner_config).is_empty();
                writeln!(
                    out,
                    "{tp}: cleanable ratio {:.3} ({} of {} bytes dirty), {} ms past max.compaction.lag.ms: {}",
                    c.cleanable_ratio(),
                    c.cleanable_bytes,
                    c.total_bytes(),
                    c.max_compaction_delay_ms,
                    if is_due { "due" } else { "not due" }
                )?;
                if !is_due {
                    continue;
                }
            }
            let report = cleaner::plan(&opts.config.env.storage, &log, &tp, &cleaner_config)?;
            print_report(out, &tp.to_string(), &report, true)?;
        }
        return Ok(());
    }
    let config = Config::default()
        .with_clock(clock)
        .with_segment_bytes(args.segment_bytes)
        .with_cleaner(cleaner_config);
    let tps = dirs
        .iter()
        .map(|d| partition_of(d))
        .collect::<Result<Vec<_>, _>>()?;
    let opened = LogDir::open(&log_dir, config)?;
    let reports = if args.due {
        opened.compact_due(|tp| tps.contains(tp))?
    } else {
        opened.compact(&tps)?
    };
    opened.close()?;
    for (tp, report) in &reports {
        print_report(out, &tp.to_string(), report, false)?;
    }
    Ok(())
}

/// The log directory and the partition directories to clean: the one given, or those of the
/// topics named in the log directory given.
fn selected(args: &CompactArgs) -> Result<(PathBuf, Vec<PathBuf>), String> {
    match partition::detect(&args.dir)? {
        Target::Partition(dir) => {
            if !args.topic.is_empty() || args.all_topics {
                return Err(
                    "a partition directory: --topic and --all-topics select partitions \
                     of a log directory"
                        .to_owned(),
                );
            }
            let parent = dir
                .parent()
                .map_or_else(|| PathBuf::from("."), PathBuf::from);
            Ok((parent, vec![dir]))
        }
        Target::LogDir {
            dir, partitions, ..
        } => {
            if args.topic.is_empty() && !args.all_topics {
                return Err(
                    "a log directory does not record which topics are compacted \
                     (cleanup.policy is topic metadata): name them with --topic TOPIC, or pass \
                     --all-topics"
                        .to_owned(),
                );
            }
            let chosen: Vec<PathBuf> = partitions
                .into_iter()
                .filter(|p| {
                    args.all_topics
                        || partition_of(p).is_ok_and(|tp| args.topic.contains(&tp.topic))
                })
                .collect();
            let found = |t: &String| {
                chosen
                    .iter()
                    .any(|p| partition_of(p).is_ok_and(|tp| &tp.topic == t))
            };
            if let Some(missing) = args.topic.iter().find(|t| !found(t)) {
                return Err(format!("no partition of topic {missing} here"));
            }
            Ok((dir, chosen))
        }
    }
}

/// The partition a partition directory's name stands for.
fn partition_of(dir: &std::path::Path) -> Result<TopicPartition, String> {
    let name = dir.file_name().unwrap_or_default();
    segment_store::internals::parse_partition_dir_name(name)
        .map(|p| TopicPartition::new(p.topic, p.partition))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

fn print_report(
    out: &mut impl Write,
    name: &str,
    r: &CleanReport,
    dry_run: bool,
) -> std::io::Result<()> {
    if r.groups.is_empty() {
        return writeln!(
            out,
            "{name}: nothing to clean (dirty section [{}, {}) is empty)",
            r.first_dirty_offset, r.first_uncleanable_offset
        );
    }
    let (verb, wrote) = if dry_run {
        ("would clean", "would write")
    } else {
        ("cleaned", "wrote")
    };
    writeln!(
        out,
        "{name}: {verb} up to offset {} (dirty section [{}, {}); offset map {} keys of {} slots)",
        r.end_offset, r.first_dirty_offset, r.first_uncleanable_offset, r.map_keys, r.map_slots
    )?;
    for g in &r.groups {
        let segs: Vec<String> = g.segments.iter().map(i64::to_string).collect();
        writeln!(
            out,
            "  segments [{}]: read {} bytes, {wrote} {} bytes; records read {}, kept {}; batches removed {}",
            segs.join(", "),
            g.bytes_read,
            g.bytes_written,
            g.records_read,
            g.records_retained,
            g.batches_removed
        )?;
    }
    if !dry_run {
        writeln!(out, "  cleaner-offset-checkpoint: {}", r.end_offset)?;
    }
    Ok(())
}
