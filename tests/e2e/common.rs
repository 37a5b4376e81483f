//! Clusters, nodes, the mirror feed, batch builders and the recovery cross-check shared by the
//! end-to-end tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use record_format::{
    end_txn_marker_batch, Batches, ControlRecordKey, ControlRecordType, DecodeLimits, LogEntry,
    MirrorPidResetRecord, RecordBatch, RecordBatchBuilder,
};
use recovery::read_snapshot;
use recovery::{
    consume, AppendOrigin, IsolationLevel, LoadOptions, LogAppendInfo, LogLoader,
    MirrorPartitionState, MirroredLog, PartitionLog, PartitionLogConfig, PartitionLogError,
    ProducerStateWarning, SnapshotEntry, TxnMetadata,
};
use segment_store::LogConfig;
use tempfile::TempDir;

/// One timestamp for the whole run, close to the wall clock, so that loading a snapshot never
/// expires a producer (`producer.id.expiration.ms` is one day).
pub fn ts() -> i64 {
    static NOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *NOW.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    })
}

/// Small segments (a few batches each) so that every scenario rolls, and rolls write producer
/// snapshots on both sides of every barrier; small indexes so that nothing big is mapped.
pub fn config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: 300,
            index_interval_bytes: 128,
            max_index_size: 24 * 64,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

/// Opens (recovering from scratch) the partition in `dir`.
pub fn open_log(dir: &Path) -> PartitionLog {
    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    LogLoader::load(dir, &opts).unwrap().0
}

/// A client batch of `n` records, values `"{tag}-{i}"` (the leader assigns the offsets).
/// `pid < 0`: no producer id.
pub fn data(pid: i64, epoch: i16, seq: i32, n: i32, txn: bool, tag: &str) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0).transactional(txn);
    if pid >= 0 {
        b = b.producer(pid, epoch, seq);
    }
    for i in 0..n {
        let v = format!("{tag}-{i}");
        b.append(ts(), Some(b"k"), Some(v.as_bytes()), &[]).unwrap();
    }
    b.build()
}

/// An idempotent (non-transactional) batch.
pub fn idem(pid: i64, epoch: i16, seq: i32, n: i32, tag: &str) -> Vec<u8> {
    data(pid, epoch, seq, n, false, tag)
}

/// A transactional batch.
pub fn txn(pid: i64, epoch: i16, seq: i32, n: i32, tag: &str) -> Vec<u8> {
    data(pid, epoch, seq, n, true, tag)
}

/// A COMMIT (`commit`) or ABORT marker, coordinator epoch 0.
pub fn marker(pid: i64, epoch: i16, commit: bool) -> Vec<u8> {
    let t = if commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    end_txn_marker_batch(0, ts(), 0, pid, epoch, t, 0)
}

/// The values `"{tag}-0" .. "{tag}-{n-1}"`.
pub fn values(tag: &str, n: i32) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// A cluster: a temporary directory with one folder per partition.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: &'static str,
    root: Rc<TempDir>,
}

impl Cluster {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            root: Rc::new(tempfile::tempdir().unwrap()),
        }
    }

    /// The cluster id written into the barriers of partitions mirrored from this cluster.
    pub fn id(&self) -> String {
        format!("cluster-{}", self.name)
    }

    /// Opens partition `topic_partition` (e.g. `"orders-0"`), created empty if new.
    pub fn partition(&self, topic_partition: &str) -> Node {
        let dir = self.root.path().join(topic_partition);
        std::fs::create_dir_all(&dir).unwrap();
        let log = open_log(&dir);
        Node {
            name: format!("{}/{topic_partition}", self.name),
            cluster: self.clone(),
            dir,
            log: Some(log),
            divergence_truncations: Vec::new(),
            mirror_warnings: Vec::new(),
        }
    }
}

/// One partition of one cluster; the partition log owns (and enforces) its mirror state.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub cluster: Cluster,
    pub dir: PathBuf,
    log: Option<PartitionLog>,
    /// Offsets the mirror feed truncated this node to after the source diverged.
    pub divergence_truncations: Vec<i64>,
    /// Producer-state warnings of the mirror feed's appends (replication rules).
    pub mirror_warnings: Vec<ProducerStateWarning>,
}

impl Node {
    /// Partition `t-0` of a new cluster `name`.
    pub fn new(name: &'static str) -> Self {
        Cluster::new(name).partition("t-0")
    }

    /// A new cluster `name` whose `t-0` mirrors `source` from its first offset.
    pub fn mirror_of(name: &'static str, source: &Node) -> Self {
        let mut n = Self::new(name);
        n.start_mirroring(source);
        n.mirror_from(source);
        n
    }

    pub fn log(&self) -> &PartitionLog {
        self.log.as_ref().unwrap()
    }

    pub fn leo(&self) -> i64 {
        self.log().log_end_offset()
    }

    /// The leader epoch local appends are stamped with: the partition's latest.
    pub fn leader_epoch(&self) -> i32 {
        self.log().leader_epoch()
    }

    /// Runs `f` on the partition log.
    pub fn with_log<R>(&mut self, f: impl FnOnce(&mut PartitionLog) -> R) -> R {
        f(self.log.as_mut().unwrap())
    }

    fn append(
        &mut self,
        records: &[u8],
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        let epoch = self.leader_epoch();
        self.with_log(|l| {
            let info = l.append_as_leader(records, epoch, origin)?;
            // A single replica: everything appended is committed.
            l.set_high_watermark(l.log_end_offset());
            Ok(info)
        })
    }

    /// A produce request (client origin: sequence/epoch checks, duplicate detection).
    pub fn produce(&mut self, records: &[u8]) -> Result<LogAppendInfo, PartitionLogError> {
        self.append(records, AppendOrigin::Client)
    }

    /// A transaction coordinator writing a marker.
    pub fn write_marker(
        &mut self,
        pid: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        self.append(&marker(pid, epoch, commit), AppendOrigin::Coordinator)
    }

    /// `start_mirroring` from `source`'s cluster: aligns this partition to `source` by leader
    /// epoch (failback truncates local history the source does not hold).
    pub fn start_mirroring(&mut self, source: &Node) {
        let id = source.cluster.id();
        self.with_log(|l| l.start_mirroring(&id, source.log()).unwrap());
        let log = self.log();
        assert!(log.accepts_mirrored_appends());
        assert!(!log.accepts_client_appends());
    }

    /// Failover through `stop_mirroring`: truncate to the LSO, new leader epoch, barrier in it,
    /// writable. Local appends then use that epoch. Returns the barrier's offset.
    pub fn stop(&mut self) -> i64 {
        let barrier = self.with_log(|l| {
            let barrier = l.stop_mirroring().unwrap();
            l.set_high_watermark(l.log_end_offset());
            barrier
        });
        assert!(self.log().accepts_client_appends());
        barrier
    }

    /// The failover of a system without KIP-1279's barrier: the partition becomes writable
    /// (`Local`), truncated to the LSO if `truncate`; no barrier, no new epoch.
    pub fn failover_without_barrier(&mut self, truncate: bool) {
        self.with_log(|l| {
            l.persist_mirror_state(MirrorPartitionState::Local).unwrap();
            if truncate {
                l.truncate_to(l.last_stable_offset()).unwrap();
            }
        });
        assert!(self.log().accepts_client_appends());
    }

    /// A failover that forgets producer state without writing anything into the log (no
    /// barrier): as [`failover_without_barrier`](Self::failover_without_barrier), then a clean
    /// restart without producer snapshots, which Kafka loads as empty producer state. The
    /// leader accepts reused producer ids afterwards, but nothing in the log says why.
    pub fn failover_forgetting_producers_without_barrier(&mut self, truncate: bool) {
        self.failover_without_barrier(truncate);
        let log = self.log.take().unwrap();
        let hw = log.high_watermark();
        let closed = log.close().unwrap();
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "snapshot") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let opts = LoadOptions {
            config: recovery::Config {
                log: config(),
                ..recovery::Config::default()
            },
            had_clean_shutdown: true,
            recovery_point: closed.log_end_offset,
            high_watermark: Some(hw),
            ..LoadOptions::default()
        };
        let log = LogLoader::load(&self.dir, &opts).unwrap().0;
        assert!(log.producer_state().is_empty());
        self.log = Some(log);
    }

    /// The mirror feed: first the fetcher's leader-epoch exchange (`align_to_source`: if the
    /// source failed over and its log diverged from this one, truncate to where they diverge,
    /// recorded in `divergence_truncations`), then every batch of `source` below its high
    /// watermark that this node does not have yet, byte for byte, through `append_as_mirror`.
    /// Returns the number of batches copied.
    pub fn mirror_from(&mut self, source: &Node) -> usize {
        self.mirror_from_until(source, i64::MAX)
    }

    /// As [`mirror_from`](Self::mirror_from), stopping once this node's log end reaches
    /// `until` (batch by batch).
    pub fn mirror_from_until(&mut self, source: &Node, until: i64) -> usize {
        assert!(
            self.log().accepts_mirrored_appends(),
            "{} is not mirroring",
            self.name
        );
        if let Some(at) = self.with_log(|l| l.align_to_source(source.log()).unwrap()) {
            self.with_log(|l| l.set_high_watermark(l.log_end_offset()));
            self.divergence_truncations.push(at);
        }
        let mut copied = 0;
        while self.leo() < until {
            let from = self.leo();
            let fetch = source
                .log()
                .read(from, 1, IsolationLevel::ReadUncommitted)
                .unwrap();
            if fetch.records.is_empty() {
                return copied;
            }
            let info = self.with_log(|l| {
                let info = l.append_as_mirror(&fetch.records).unwrap();
                assert_eq!(info.first_offset, from, "the feed keeps offsets");
                l.set_high_watermark(l.log_end_offset());
                info
            });
            copied += info.num_batches;
            self.mirror_warnings.extend(info.warnings);
        }
        copied
    }

    /// Takes the partition log out (the node is unusable afterwards).
    pub fn into_log(mut self) -> PartitionLog {
        self.log.take().unwrap()
    }
}

/// One batch of a log: offsets and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub bytes: Vec<u8>,
}

impl LoggedBatch {
    pub fn view(&self) -> RecordBatch<'_> {
        RecordBatch::new(&self.bytes, 0).unwrap()
    }

    /// `Some(source cluster id)` if this is a `MIRROR_PID_RESET` barrier (parsed here from the
    /// control key and value, independently of the library's detection).
    pub fn barrier_source(&self) -> Option<String> {
        let b = self.view();
        if !b.is_control() {
            return None;
        }
        let records = b.records(&DecodeLimits::default()).unwrap();
        let r = records.iter().next()?.unwrap();
        let (_, t) = ControlRecordKey::parse(r.key().unwrap(), 0).unwrap();
        (t == ControlRecordType::MirrorPidReset).then(|| {
            MirrorPidResetRecord::parse(r.value().unwrap(), 0)
                .unwrap()
                .source_cluster_id
                .to_string()
        })
    }
}

/// Every batch of `log`, in offset order (through the segment reads, bounded by nothing).
pub fn batches(log: &PartitionLog) -> Vec<LoggedBatch> {
    let mut out = Vec::new();
    let mut off = log.log_start_offset();
    while off < log.log_end_offset() {
        let f = log.local_log().read(off, 1 << 20, true).unwrap();
        for e in Batches::new(&f.records, 0).validate_crc(true) {
            let LogEntry::V2(b) = e.unwrap() else {
                panic!("legacy entry")
            };
            out.push(LoggedBatch {
                base_offset: b.base_offset(),
                last_offset: b.last_offset(),
                bytes: b.as_bytes().to_vec(),
            });
            off = b.next_offset();
        }
    }
    out
}

/// Offsets of the barriers of `log`, with their source cluster ids.
pub fn barriers(log: &PartitionLog) -> Vec<(i64, String)> {
    batches(log)
        .iter()
        .filter_map(|b| b.barrier_source().map(|s| (b.base_offset, s)))
        .collect()
}

/// The partition's `.log` files concatenated in offset order: the raw bytes on disk.
pub fn raw_log(dir: &Path) -> Vec<u8> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// Asserts that `a` and `b` hold the same batches, at the same offsets, with the same bytes, below
/// `end`, and that their `.log` files hold the same bytes for that range.
pub fn assert_same_bytes(a: &Node, b: &Node, end: i64) {
    let below = |n: &Node| -> Vec<LoggedBatch> {
        batches(n.log())
            .into_iter()
            .filter(|x| x.base_offset < end)
            .collect()
    };
    let (ba, bb) = (below(a), below(b));
    assert!(
        ba.last().is_some_and(|x| x.last_offset == end - 1),
        "{}: no batch ends at {}",
        a.name,
        end - 1
    );
    assert_eq!(ba.len(), bb.len(), "{} vs {}: batch count", a.name, b.name);
    for (x, y) in ba.iter().zip(&bb) {
        assert_eq!(
            (x.base_offset, x.last_offset),
            (y.base_offset, y.last_offset),
            "{} vs {}: offsets",
            a.name,
            b.name
        );
        assert!(
            x.bytes == y.bytes,
            "{} vs {}: batch at {} differs",
            a.name,
            b.name,
            x.base_offset
        );
    }
    let len: usize = ba.iter().map(|x| x.bytes.len()).sum();
    let (ra, rb) = (raw_log(&a.dir), raw_log(&b.dir));
    assert!(ra.len() >= len && rb.len() >= len);
    assert!(
        ra[..len] == rb[..len],
        "{} vs {}: .log bytes differ below offset {end}",
        a.name,
        b.name
    );
}

/// What a read_committed (or read_uncommitted) consumer sees from the log start, as
/// `(offset, value)`: fetch after fetch (a fetch returns batches of one segment), each read with
/// its own aborted-transaction list (the one `PartitionLog::read` returns), as Kafka's consumer
/// does.
pub fn consumed(log: &PartitionLog, isolation: IsolationLevel) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let fetch = log.read(offset, 64 << 20, isolation).unwrap();
        let Some(next) = Batches::new(&fetch.records, 0)
            .map(|e| e.unwrap().last_offset() + 1)
            .last()
        else {
            return out;
        };
        out.extend(consume(&fetch).unwrap().into_iter().map(|r| {
            (
                r.offset,
                String::from_utf8(r.value.unwrap_or_default()).unwrap(),
            )
        }));
        offset = next;
    }
}

/// The values a read_committed consumer sees.
pub fn committed_values(log: &PartitionLog) -> Vec<String> {
    consumed(log, IsolationLevel::ReadCommitted)
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// Everything about producer state that a reopen must reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub entries: Vec<SnapshotEntry>,
    pub ongoing: BTreeMap<i64, TxnMetadata>,
    pub read_committed: Vec<(i64, String)>,
}

pub fn observe(log: &PartitionLog) -> Observed {
    let psm = log.producer_state();
    Observed {
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
        last_stable_offset: log.last_stable_offset(),
        entries: psm.snapshot_entries(),
        ongoing: psm.ongoing_txns().clone(),
        read_committed: consumed(log, IsolationLevel::ReadCommitted),
    }
}

fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".snapshot")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

/// Crashes `node` (drops the log without closing it) and checks that every way of reopening
/// reaches the live producer state, LSO and read_committed view:
/// 1. recovery from scratch (`full: true`: every segment CRC-checked and replayed, barriers
///    included);
/// 2. a clean close, then a clean open from the snapshot at the log end;
/// 3. a copy of the closed directory keeping only snapshots at or below `barrier`, opened
///    cleanly: producer state = an older snapshot + a replay that crosses the barrier.
pub fn assert_recovery_agrees(node: Node, barrier: i64) {
    let name = node.name.clone();
    // Keeps the cluster's directory alive.
    let _cluster = node.cluster.clone();
    let log = node.into_log();
    let live = observe(&log);
    let dir = log.dir().to_path_buf();
    let segments = log.local_log().segments().unwrap().len();
    assert!(segments > 2, "{name}: the scenario should roll");
    drop(log);

    let full = LoadOptions {
        config: recovery::Config {
            log: config(),
            full_recovery: true,
            ..recovery::Config::default()
        },
        high_watermark: Some(live.high_watermark),
        ..LoadOptions::default()
    };
    let (log, report) = LogLoader::load(&dir, &full).unwrap();
    assert_eq!(report.segments_scanned, segments, "{name}: {report}");
    assert!(report.cut.is_empty(), "{name}: {report}");
    assert_eq!(observe(&log), live, "{name}: recovery from scratch");
    log.close().unwrap();

    let clean = LoadOptions {
        config: recovery::Config {
            log: config(),
            ..recovery::Config::default()
        },
        had_clean_shutdown: true,
        recovery_point: live.log_end_offset,
        high_watermark: Some(live.high_watermark),
        ..LoadOptions::default()
    };
    let (log, report) = LogLoader::load(&dir, &clean).unwrap();
    assert_eq!(report.segments_scanned, 0, "{name}");
    assert_eq!(observe(&log), live, "{name}: clean reopen");
    log.close().unwrap();

    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != ".lock" {
            std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
        }
    }
    for off in snapshot_offsets(copy.path()) {
        if off > barrier {
            std::fs::remove_file(copy.path().join(format!("{off:020}.snapshot"))).unwrap();
        }
    }
    let kept = snapshot_offsets(copy.path());
    let from = *kept.last().unwrap_or_else(|| panic!("{name}: no snapshot"));
    assert!(from > 0 && from <= barrier, "{name}: snapshot at {from}");
    let entries = read_snapshot(&copy.path().join(format!("{from:020}.snapshot"))).unwrap();
    assert!(
        !entries.is_empty(),
        "{name}: the snapshot before the barrier holds mirrored producers"
    );
    let (log, report) = LogLoader::load(copy.path(), &clean).unwrap();
    assert_eq!(report.segments_scanned, 0, "{name}");
    assert_eq!(
        observe(&log),
        live,
        "{name}: snapshot at {from} + replay across the barrier at {barrier}"
    );
}
