//! Loading a log directory as Kafka's `LogManager` does: the partitions it holds, each loaded
//! by [`LogLoader`](crate::LogLoader) (docs/recovery.md).
//!
//! [`load_log_dir`] reads the root
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
//! `replication-offset-checkpoint`, the `.kafka_cleanshutdown` marker (deleted at once, so a crash
//! during loading counts as unclean; written again by [`LoadedLogDir::close`]), one `<topic>-<partition>`
//! folder per partition (`-delete`, `-future`, `-stray` folders skipped), partitions recovered in
//! parallel.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use segment_store::internals::{
    parse_partition_dir_name, PartitionDirKind, CLEANER_OFFSET_CHECKPOINT_FILE,
    CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_store::{
    DirLock, EntryType, LogEnv, OffsetCheckpointFile, OpenMode, SegmentError, TopicPartition,
};

use crate::config::{CloseSync, Config};
use crate::log::{PartitionLog, PartitionLogError};

use crate::loader::{LoadOptions, RecoveryReport};
use crate::plan::LogLoader;

impl LoadOptions {
    /// The options a broker would load the partition directory `dir` with: the clean-shutdown
    /// marker and the recovery-point, log-start-offset and replication-offset checkpoints of its
    /// parent log directory, when it has them (read, never changed; unreadable checkpoints count
    /// as empty, as Kafka logs and ignores them). `full` ignores marker and recovery point.
    pub fn for_partition_dir(dir: &Path, full: bool) -> LoadOptions {
        let mut opts = LoadOptions {
            config: Config::default().with_full_recovery(full),
            ..LoadOptions::default()
        };
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return opts;
        };
        let Ok(parsed) = parse_partition_dir_name(name) else {
            return opts;
        };
        let tp = TopicPartition::new(parsed.topic, parsed.partition);
        let env = &opts.config.env;
        opts.had_clean_shutdown = env
            .storage
            .exists(&parent.join(CLEAN_SHUTDOWN_FILE))
            .unwrap_or(false);
        let checkpoints = read_log_dir_checkpoints(env, parent);
        opts.recovery_point = checkpoints.recovery_points.get(&tp).copied().unwrap_or(0);
        opts.log_start_offset = checkpoints.log_start_offsets.get(&tp).copied().unwrap_or(0);
        opts.high_watermark = checkpoints.high_watermarks.get(&tp).copied();
        opts
    }
}

/// A loaded log directory (the part of Kafka's `LogManager` that owns one).
#[derive(Debug)]
pub struct LoadedLogDir {
    /// The directory.
    pub dir: PathBuf,
    /// Whether it had a clean-shutdown marker.
    pub had_clean_shutdown: bool,
    /// The partitions.
    pub partitions: BTreeMap<TopicPartition, PartitionLog>,
    /// One report per partition, in partition order.
    pub reports: Vec<RecoveryReport>,
    /// `-delete`, `-future` and `-stray` folders that were not loaded.
    pub skipped: Vec<PathBuf>,
    /// Partitions refused at load and left untouched (Kafka takes a log directory offline;
    /// here only the partition is): a symlink or an entry of the wrong type where seglog reads
    /// or writes. Never recreated: [`LoadedLogDir`]'s users refuse to create them again.
    pub offline: Vec<OfflinePartition>,
    /// The offline partitions' entries of the three checkpoints as they were read at load
    /// (`(checkpoint file name, partition, offset)`): written back unchanged, since the
    /// partitions are untouched.
    offline_entries: Vec<(&'static str, TopicPartition, i64)>,
    /// Partitions loaded from a folder whose name is not the one Kafka gives them (see
    /// [`scan_log_dir`]).
    pub non_canonical: Vec<NonCanonicalDir>,
    /// Log-directory checkpoints that could not be read and were ignored (see
    /// [`read_log_dir_checkpoints`]).
    pub checkpoint_warnings: Vec<CheckpointWarning>,
    config: Config,
    last_hw_checkpoint_ms: i64,
    _lock: DirLock,
}

/// A partition directory a [`LoadedLogDir`] refused to load, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfflinePartition {
    /// The directory (as found in the log directory, not followed).
    pub dir: PathBuf,
    /// The partition its name stands for.
    pub partition: Option<TopicPartition>,
    /// Why it was refused.
    pub reason: String,
}

/// The files of a log directory seglog reads or writes itself (each also as `<name>.tmp`).
const LOG_DIR_FILES: [&str; 7] = [
    segment_store::internals::LOCK_FILE_NAME,
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    segment_store::internals::CLEANER_OFFSET_CHECKPOINT_FILE,
    "meta.properties",
];

/// Refuses the whole log directory, before anything in it changes, if one of the files it
/// reads or writes itself is a symlink or not a regular file.
fn refuse_log_dir_entries(
    dir: &Path,
    entries: &[(std::ffi::OsString, EntryType)],
) -> Result<(), PartitionLogError> {
    for (name, found) in entries {
        if *found == EntryType::File {
            continue;
        }
        let Some(n) = name.to_str() else { continue };
        let base = n
            .strip_suffix(segment_store::internals::CHECKPOINT_TMP_SUFFIX)
            .unwrap_or(n);
        if LOG_DIR_FILES.contains(&base) {
            return Err(PartitionLogError::Refused {
                path: dir.join(name),
                found: *found,
            });
        }
    }
    Ok(())
}

/// `entries` of the checkpoint `name`, with the offline partitions' entries as they were read.
fn with_offline(
    offline: &[(&'static str, TopicPartition, i64)],
    name: &str,
    mut entries: Vec<(TopicPartition, i64)>,
) -> Vec<(TopicPartition, i64)> {
    entries.extend(
        offline
            .iter()
            .filter(|(n, _, _)| *n == name)
            .map(|(_, tp, v)| (tp.clone(), *v)),
    );
    entries
}

/// Whether a partition's load error takes only that partition offline (its files untouched)
/// rather than the whole directory.
fn takes_partition_offline(e: &PartitionLogError) -> bool {
    matches!(e, PartitionLogError::Refused { .. })
}

/// The folder of a log directory Kafka keeps for remote-storage index caches
/// (`RemoteIndexCache.DIR_NAME`); `LogManager` does not load it as a partition.
pub const REMOTE_LOG_INDEX_CACHE_DIR: &str = "remote-log-index-cache";

/// Why a folder of a log directory is refused rather than loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A partition directory that is a symlink: its files would be written outside.
    Symlink,
    /// A folder whose name cannot be a partition Kafka created: not `<topic>-<partition>`, an
    /// empty or illegal topic, a negative partition.
    BadName,
    /// One of two or more folders that name the same partition (`orders-0` and `orders-00`).
    Duplicate,
}

/// A folder of a log directory refused by [`scan_log_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedDir {
    /// Why.
    pub kind: RefusalKind,
    /// The folder as taken offline.
    pub offline: OfflinePartition,
}

/// A folder of a log directory loaded under another name than Kafka would give it
/// (`orders-00` is partition 0 of `orders`, whose folder Kafka names `orders-0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonCanonicalDir {
    /// The folder.
    pub dir: PathBuf,
    /// The partition it is loaded as, as Kafka parses the name.
    pub partition: TopicPartition,
}

impl fmt::Display for NonCanonicalDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the folder name is not the one Kafka gives partition {tp} ({tp}): loaded as {tp}, \
             as Kafka parses the name",
            tp = self.partition
        )
    }
}

/// What the folders of a log directory are, by name and type (Kafka `LogManager.loadLogs` and
/// `UnifiedLog.parseTopicPartitionName`). The one reading of a log directory's names: loading,
/// `verify` and `recover` use it alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogDirScan {
    /// The live partitions to load, one folder each, in name order.
    pub partitions: Vec<(TopicPartition, PathBuf)>,
    /// `-delete`, `-future` and `-stray` folders: Kafka's, not loaded, not findings.
    pub skipped: Vec<PathBuf>,
    /// Folders refused: never loaded, never changed.
    pub refused: Vec<RefusedDir>,
    /// Partitions loaded from a folder whose name is not the canonical `<topic>-<partition>`.
    pub non_canonical: Vec<NonCanonicalDir>,
}

/// Reads the entries of the log directory `dir` (names and types, not followed): every folder
/// is a live partition, a folder Kafka keeps (`-delete`/`-future`/`-stray`,
/// [`REMOTE_LOG_INDEX_CACHE_DIR`]), or refused. Files are not folders of partitions and are
/// left to their own readers.
pub fn scan_log_dir(dir: &Path, entries: &[(std::ffi::OsString, EntryType)]) -> LogDirScan {
    let mut scan = LogDirScan::default();
    let mut live: BTreeMap<TopicPartition, Vec<(PathBuf, EntryType)>> = BTreeMap::new();
    let mut sorted: Vec<&(std::ffi::OsString, EntryType)> = entries.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, found) in sorted {
        if !matches!(found, EntryType::Dir | EntryType::Symlink) {
            continue;
        }
        let path = dir.join(name);
        let refuse = |kind, partition, reason: String| RefusedDir {
            kind,
            offline: OfflinePartition {
                dir: path.clone(),
                partition,
                reason,
            },
        };
        if name == REMOTE_LOG_INDEX_CACHE_DIR {
            continue;
        }
        let parsed = match parse_partition_dir_name(name) {
            Ok(p) => p,
            // A symlink elsewhere is not a partition: nothing reads or writes through it.
            Err(_) if *found == EntryType::Symlink => continue,
            Err(e) => {
                scan.refused.push(refuse(
                    RefusalKind::BadName,
                    None,
                    format!("{e}: never loaded"),
                ));
                continue;
            }
        };
        let tp = TopicPartition::new(parsed.topic, parsed.partition);
        if let Err(e) = tp.validate() {
            scan.refused.push(refuse(
                RefusalKind::BadName,
                None,
                format!("{name:?} cannot be a partition directory ({e}): never loaded"),
            ));
            continue;
        }
        if *found == EntryType::Symlink {
            let e = PartitionLogError::Refused {
                path: path.clone(),
                found: *found,
            };
            scan.refused
                .push(refuse(RefusalKind::Symlink, Some(tp), e.to_string()));
            continue;
        }
        if parsed.kind != PartitionDirKind::Live {
            scan.skipped.push(path);
            continue;
        }
        live.entry(tp).or_default().push((path, *found));
    }
    for (tp, dirs) in live {
        if let [(path, _)] = dirs.as_slice() {
            if path.file_name() != Some(OsStr::new(&tp.to_string())) {
                scan.non_canonical.push(NonCanonicalDir {
                    dir: path.clone(),
                    partition: tp.clone(),
                });
            }
            scan.partitions.push((tp, path.clone()));
            continue;
        }
        let names: Vec<String> = dirs
            .iter()
            .map(|(p, _)| {
                p.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            })
            .collect();
        for (path, _) in dirs {
            scan.refused.push(RefusedDir {
                kind: RefusalKind::Duplicate,
                offline: OfflinePartition {
                    dir: path,
                    partition: Some(tp.clone()),
                    reason: format!(
                        "{} folders name partition {tp} ({}); Kafka refuses such a log \
                         directory: neither is loaded nor changed",
                        names.len(),
                        names.join(", ")
                    ),
                },
            });
        }
    }
    scan.refused
        .sort_by(|a, b| a.offline.dir.cmp(&b.offline.dir));
    scan
}

/// A log-directory checkpoint that could not be read, and what recovery does instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointWarning {
    /// The checkpoint file.
    pub path: PathBuf,
    /// The 1-based line of the problem, when it is one line's.
    pub line: Option<usize>,
    /// What is wrong with it.
    pub problem: String,
    /// What recovery does instead.
    pub consequence: &'static str,
}

impl fmt::Display for CheckpointWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unreadable (")?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}): {}", self.problem, self.consequence)
    }
}

/// The checkpoints of a log directory as loading uses them, and those it could not read.
#[derive(Debug, Clone, Default)]
pub struct LogDirCheckpoints {
    /// `recovery-point-offset-checkpoint`.
    pub recovery_points: BTreeMap<TopicPartition, i64>,
    /// `log-start-offset-checkpoint`.
    pub log_start_offsets: BTreeMap<TopicPartition, i64>,
    /// `replication-offset-checkpoint`.
    pub high_watermarks: BTreeMap<TopicPartition, i64>,
    /// Each checkpoint present that could not be read (a missing one is not a problem).
    pub warnings: Vec<CheckpointWarning>,
}

/// The log-directory checkpoints with what recovery does when one cannot be read.
const LOG_DIR_CHECKPOINTS: [(&str, &str); 4] = [
    (
        RECOVERY_POINT_CHECKPOINT_FILE,
        "recovery ignores it, as Kafka does, and after an unclean shutdown recovers every \
         partition from offset 0",
    ),
    (
        LOG_START_OFFSET_CHECKPOINT_FILE,
        "recovery ignores it, as Kafka does, and starts each log at its first segment's base \
         offset",
    ),
    (
        REPLICATION_OFFSET_CHECKPOINT_FILE,
        "recovery ignores it and starts each partition's high watermark at its log start offset",
    ),
    (
        CLEANER_OFFSET_CHECKPOINT_FILE,
        "recovery does not use it; Kafka's log cleaner ignores it and cleans each compacted \
         log from its start",
    ),
];

/// Reads the checkpoints of the log directory `dir` (never changing them). An unreadable one
/// counts as empty, as Kafka's `LogManager` logs and ignores it, and is listed with the line or
/// size that makes it unreadable. The one reading of them: loading, `verify` and `recover` use
/// it alike.
pub fn read_log_dir_checkpoints(env: &LogEnv, dir: &Path) -> LogDirCheckpoints {
    let mut out = LogDirCheckpoints::default();
    for (name, consequence) in LOG_DIR_CHECKPOINTS {
        let path = dir.join(name);
        if !env.storage.exists(&path).unwrap_or(false) {
            continue;
        }
        let file = OffsetCheckpointFile::new(Arc::clone(&env.storage), &path);
        let map: BTreeMap<TopicPartition, i64> = match file.read() {
            Ok(entries) => entries.into_iter().collect(),
            Err(e) => {
                let (line, problem) = match &e {
                    SegmentError::MalformedCheckpoint { line, reason, .. } => {
                        (Some(*line), reason.to_string())
                    }
                    other => (None, other.to_string()),
                };
                out.warnings.push(CheckpointWarning {
                    path,
                    line,
                    problem,
                    consequence,
                });
                continue;
            }
        };
        match name {
            RECOVERY_POINT_CHECKPOINT_FILE => out.recovery_points = map,
            LOG_START_OFFSET_CHECKPOINT_FILE => out.log_start_offsets = map,
            REPLICATION_OFFSET_CHECKPOINT_FILE => out.high_watermarks = map,
            _ => {}
        }
    }
    out
}

/// Runs `f` on the job of every partition on `threads` threads (each taking the next job when it
/// finishes one, as Kafka's per-directory recovery pool does); the results in partition order.
fn per_partition<J: Send, R: Send>(
    threads: usize,
    jobs: Vec<(TopicPartition, J)>,
    f: impl Fn(J) -> R + Sync,
) -> Vec<(TopicPartition, R)> {
    // One thread, or one job: no thread to start (a partition opened alone, as `Log::open` does).
    if threads <= 1 || jobs.len() <= 1 {
        let mut results: Vec<(TopicPartition, R)> =
            jobs.into_iter().map(|(tp, job)| (tp, f(job))).collect();
        results.sort_by(|a, b| a.0.cmp(&b.0));
        return results;
    }
    let queue = Mutex::new(jobs);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some((tp, job)) = job else { break };
                let r = f(job);
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((tp, r));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by(|a, b| a.0.cmp(&b.0));
    results
}

/// Loads every partition of the log directory `dir` on [`Config::recovery_threads`] threads.
/// See the module docs. The first partition that fails to load fails the whole directory (Kafka
/// takes the directory offline).
pub fn load_log_dir(dir: &Path, config: &Config) -> Result<LoadedLogDir, PartitionLogError> {
    let env = &config.env;
    segment_store::internals::create_dir_all_durably(env.storage.as_ref(), dir)?;
    let dir = &env.storage.resolve_root(dir)?;
    let entries = env.storage.list_dir_typed(dir)?;
    refuse_log_dir_entries(dir, &entries)?;
    let lock = DirLock::acquire_in(env.storage.as_ref(), dir)?;
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    let had_clean_shutdown = env.storage.exists(&marker)?;
    let checkpoints = read_log_dir_checkpoints(env, dir);
    let scan = scan_log_dir(dir, &entries);
    let skipped = scan.skipped;
    let mut offline: Vec<OfflinePartition> = scan.refused.into_iter().map(|r| r.offline).collect();
    let mut jobs = Vec::new();
    for (tp, path) in scan.partitions {
        let load = LoadOptions {
            config: config.clone(),
            had_clean_shutdown,
            recovery_point: checkpoints.recovery_points.get(&tp).copied().unwrap_or(0),
            log_start_offset: checkpoints.log_start_offsets.get(&tp).copied().unwrap_or(0),
            high_watermark: checkpoints.high_watermarks.get(&tp).copied(),
        };
        jobs.push((tp, (path, load)));
    }
    if had_clean_shutdown {
        env.storage.remove_file(&marker)?;
        env.storage.sync_dir(dir)?;
    }

    let policy = config.high_watermark;
    let results = per_partition(config.threads(), jobs, |(path, load)| {
        // The log directory's lock covers its partitions: none takes a `.lock` of its own.
        let r =
            LogLoader::load_with_lock(&path, &load, lock.clone()).and_then(|(mut log, report)| {
                // After an unclean shutdown the checkpointed high watermark may be stale or
                // missing. A missing entry after a clean one is a high watermark that was not
                // known when the directory closed (a caller-owned one not set since an unclean
                // restart): still unknown, never the log start offset (an empty log has no
                // other).
                let missing =
                    load.high_watermark.is_none() && log.log_end_offset() > log.log_start_offset();
                if !had_clean_shutdown || missing {
                    log.reestablish_high_watermark(policy)?;
                }
                // No segment stays open: a log directory of any number of partitions holds no
                // descriptor per partition until one is read or appended to.
                log.local_log().release_segments()?;
                Ok((log, report))
            });
        (r, path)
    });
    let mut partitions = BTreeMap::new();
    let mut reports = Vec::new();
    for (tp, (r, path)) in results {
        match r {
            Ok((log, report)) => {
                partitions.insert(tp, log);
                reports.push(report);
            }
            Err(e) if takes_partition_offline(&e) => offline.push(OfflinePartition {
                dir: path,
                partition: Some(tp),
                reason: e.to_string(),
            }),
            Err(e) => {
                return Err(PartitionLogError::Partition {
                    dir: path,
                    source: Box::new(e),
                })
            }
        }
    }
    let mut offline_entries = Vec::new();
    for tp in offline.iter().filter_map(|o| o.partition.as_ref()) {
        for (name, map) in [
            (RECOVERY_POINT_CHECKPOINT_FILE, &checkpoints.recovery_points),
            (
                LOG_START_OFFSET_CHECKPOINT_FILE,
                &checkpoints.log_start_offsets,
            ),
            (
                REPLICATION_OFFSET_CHECKPOINT_FILE,
                &checkpoints.high_watermarks,
            ),
        ] {
            if let Some(&v) = map.get(tp) {
                offline_entries.push((name, tp.clone(), v));
            }
        }
    }
    Ok(LoadedLogDir {
        dir: dir.to_path_buf(),
        had_clean_shutdown,
        partitions,
        reports,
        skipped,
        offline,
        offline_entries,
        non_canonical: scan.non_canonical,
        checkpoint_warnings: checkpoints.warnings,
        config: config.clone(),
        last_hw_checkpoint_ms: env.clock.now_ms(),
        _lock: lock,
    })
}

impl LoadedLogDir {
    /// The offline partitions' entries of the three checkpoints as they were read at load,
    /// `(checkpoint file name, partition, offset)`: whoever writes a checkpoint of this
    /// directory writes them back unchanged.
    pub fn offline_checkpoint_entries(&self) -> &[(&'static str, TopicPartition, i64)] {
        &self.offline_entries
    }

    /// The settings it was loaded with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The lock on the log directory, which covers its partitions (see
    /// [`LogLoader::load_with_lock`] for creating one).
    pub fn lock(&self) -> &DirLock {
        &self._lock
    }

    fn write_checkpoint(
        &self,
        name: &str,
        entries: &[(TopicPartition, i64)],
    ) -> Result<(), PartitionLogError> {
        let entries = with_offline(&self.offline_entries, name, entries.to_vec());
        OffsetCheckpointFile::new(Arc::clone(&self.config.env.storage), &self.dir.join(name))
            .write(&entries)?;
        Ok(())
    }

    /// Kafka `ReplicaManager.checkpointHighWatermarks`: writes every partition's high watermark
    /// to `replication-offset-checkpoint` (atomically: temporary file, fsync, rename, directory
    /// fsync), so that an unclean restart starts from these instead of the log start offsets.
    pub fn checkpoint_high_watermarks(&mut self) -> Result<(), PartitionLogError> {
        let hws: Vec<(TopicPartition, i64)> = self
            .partitions
            .iter()
            .filter_map(|(tp, log)| Some((tp.clone(), log.checkpointable_high_watermark()?)))
            .collect();
        self.write_checkpoint(REPLICATION_OFFSET_CHECKPOINT_FILE, &hws)?;
        self.last_hw_checkpoint_ms = self.config.env.clock.now_ms();
        Ok(())
    }

    /// The periodic task of Kafka's `ReplicaManager` (`highwatermark-checkpoint`): checkpoints
    /// the high watermarks when [`Config::high_watermark_checkpoint_interval_ms`] has
    /// passed on the clock since the last checkpoint. Returns whether it wrote one.
    pub fn maybe_checkpoint_high_watermarks(&mut self) -> Result<bool, PartitionLogError> {
        let now = self.config.env.clock.now_ms();
        if now.saturating_sub(self.last_hw_checkpoint_ms)
            < self.config.high_watermark_checkpoint_interval_ms
        {
            return Ok(false);
        }
        self.checkpoint_high_watermarks()?;
        Ok(true)
    }

    /// Flushes every partition up to its log end, then checkpoints what is now durable: the
    /// recovery points (Kafka `LogManager.checkpointLogRecoveryOffsets`), the log start offsets
    /// and the high watermarks.
    pub fn flush(&mut self) -> Result<(), PartitionLogError> {
        let mut recovery = Vec::new();
        let mut starts = Vec::new();
        for (tp, log) in &mut self.partitions {
            log.flush()?;
            recovery.push((tp.clone(), log.recovery_point()));
            starts.push((tp.clone(), log.log_start_offset()));
        }
        self.write_checkpoint(RECOVERY_POINT_CHECKPOINT_FILE, &recovery)?;
        self.write_checkpoint(LOG_START_OFFSET_CHECKPOINT_FILE, &starts)?;
        self.checkpoint_high_watermarks()
    }

    /// Clean shutdown (Kafka `LogManager.shutdown`): close every partition (flush, producer
    /// snapshot, leader-epoch checkpoint) on [`Config::recovery_threads`] threads, as Kafka closes
    /// a directory's logs on its recovery thread pool; once every partition is closed and
    /// durable (see [`CloseSync`]), write the recovery-point, log-start-offset and
    /// high-watermark checkpoints, then the `.kafka_cleanshutdown` marker. The first partition
    /// that fails to close fails the whole close (no checkpoint and no marker are written; every
    /// other partition is still closed).
    pub fn close(self) -> Result<(), PartitionLogError> {
        let env = self.config.env.clone();
        let unsynced = self.config.close_sync == CloseSync::FileSystem
            && env.storage.supports_sync_filesystem();
        let jobs = self.partitions.into_iter().collect();
        let closed = per_partition(self.config.threads(), jobs, |log: PartitionLog| {
            log.close_with(!unsynced)
        });
        let mut recovery = Vec::new();
        let mut starts = Vec::new();
        let mut hws = Vec::new();
        for (tp, r) in closed {
            let closed = r?;
            recovery.push((tp.clone(), closed.log_end_offset));
            starts.push((tp.clone(), closed.log_start_offset));
            if let Some(hw) = closed.high_watermark {
                hws.push((tp, hw));
            }
        }
        if unsynced {
            // Everything the partitions wrote is durable before any checkpoint says so.
            env.storage.sync_filesystem(&self.dir)?;
        }
        for (name, entries) in [
            (RECOVERY_POINT_CHECKPOINT_FILE, recovery),
            (LOG_START_OFFSET_CHECKPOINT_FILE, starts),
            (REPLICATION_OFFSET_CHECKPOINT_FILE, hws),
        ] {
            let entries = with_offline(&self.offline_entries, name, entries);
            // A checkpoint that already holds these entries (read back whole) stays as it is:
            // its atomic write made it durable.
            let file = OffsetCheckpointFile::new(Arc::clone(&env.storage), &self.dir.join(name));
            if file.read().ok().as_ref() != Some(&entries) {
                file.write(&entries)?;
            }
        }
        // An offline partition was left as it was: after an unclean shutdown it still needs its
        // recovery, which a clean-shutdown marker would skip.
        if !self.offline.is_empty() && !self.had_clean_shutdown {
            return Ok(());
        }
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        let h = env.storage.open(&marker, OpenMode::CreateTruncate)?;
        h.write_at(0, br#"{"version":0,"brokerEpoch":-1}"#)?;
        h.sync_all()?;
        env.storage.sync_dir(&self.dir)?;
        Ok(())
    }
}
