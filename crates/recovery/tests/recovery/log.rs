//! The partition log on real files: leader appends assign offsets and leader epochs without
//! touching the CRC; producer state is checked before anything is written (duplicates return
//! the original offsets, fenced or out-of-order batches write nothing); follower appends keep
//! bytes; the barrier clears producer state in log order on every origin; ABORT markers reach the
//! `.txnindex` with Kafka's LSO; reads are bounded by HW/LSO and the consumer view hides control
//! batches (the barrier included) and aborted records; truncation rebuilds producer state across
//! barriers; rolls and clean closes write snapshots; the `MirrorLog` impl drives a real stop.

use std::path::Path;

use record_format::{
    end_txn_marker_batch, mirror_pid_reset_batch, Batches, ControlRecordType, LogEntry,
    RecordBatch, RecordBatchBuilder,
};
use recovery::read_snapshot;
use recovery::{
    consume, AppendOrigin, EpochHistory, IsolationLevel, LoadOptions, LogLoader, MirrorLog,
    MirrorPartitionState, MirrorStateKind, MirroredLog, PartitionLog, PartitionLogConfig,
    PartitionLogError, ProducerStateError,
};
use segment_store::{AbortedTxn, LogConfig};

/// Wall-clock-ish timestamps so that snapshot loading never expires producers.
/// Fixed for the whole run, so that two logs built from the same appends hold the same bytes.
pub fn ts() -> i64 {
    static NOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *NOW.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    })
}

/// A client batch of `n` records (offsets from 0: the leader assigns them).
pub fn batch(pid: i64, epoch: i16, seq: i32, n: i32, txn: bool) -> Vec<u8> {
    batch_at(0, pid, epoch, seq, n, txn, -1)
}

/// A batch at `base` with leader epoch `ple` (a replicated batch).
pub fn batch_at(base: i64, pid: i64, epoch: i16, seq: i32, n: i32, txn: bool, ple: i32) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(base)
        .partition_leader_epoch(ple)
        .transactional(txn);
    if pid >= 0 {
        b = b.producer(pid, epoch, seq);
    }
    let t = ts();
    for i in 0..n {
        let v = format!("v{}", base + i64::from(i));
        b.append(t, Some(b"k"), Some(v.as_bytes()), &[]).unwrap();
    }
    b.build()
}

pub fn marker(pid: i64, epoch: i16, commit: bool) -> Vec<u8> {
    let t = if commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    end_txn_marker_batch(0, ts(), 0, pid, epoch, t, 0)
}

pub fn open(dir: &Path) -> PartitionLog {
    open_with(dir, LogConfig::default())
}

pub fn open_with(dir: &Path, log: LogConfig) -> PartitionLog {
    let opts = LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log,
                ..Default::default()
            },
            ..recovery::Config::default()
        },
        ..Default::default()
    };
    LogLoader::load(dir, &opts).unwrap().0
}

pub fn small_segments(bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: bytes,
        index_interval_bytes: 1,
        ..LogConfig::default()
    }
}

pub fn log_file(dir: &Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}.log"))
}

/// `(base offset, partition leader epoch, crc, valid)` of every batch of a `.log`.
pub fn batches_of(bytes: &[u8]) -> Vec<(i64, i32, u32, bool)> {
    Batches::new(bytes, 0)
        .map(|e| match e.unwrap() {
            LogEntry::V2(b) => (
                b.base_offset(),
                b.partition_leader_epoch(),
                b.crc(),
                b.validate().is_ok(),
            ),
            LogEntry::Legacy(_) => panic!("legacy"),
        })
        .collect()
}

fn crc_of(bytes: &[u8]) -> u32 {
    RecordBatch::new(bytes, 0).unwrap().crc()
}

#[test]
fn leader_append_assigns_offsets_and_epoch_leaving_the_crc_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let a = batch(1, 0, 0, 3, false);
    let b = batch(1, 0, 3, 2, false);
    let mut both = a.clone();
    both.extend_from_slice(&b);
    let info = log
        .append_as_leader(&both, 5, AppendOrigin::Client)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    assert_eq!((info.num_batches, info.duplicate), (2, false));
    let info = log
        .append_as_leader(&batch(2, 0, 0, 1, false), 6, AppendOrigin::Client)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (5, 5));
    assert_eq!(log.log_end_offset(), 6);

    let file = std::fs::read(log_file(dir.path(), 0)).unwrap();
    let got = batches_of(&file);
    assert_eq!(got.len(), 3);
    assert_eq!((got[0].0, got[0].1, got[0].2), (0, 5, crc_of(&a)));
    assert_eq!((got[1].0, got[1].1, got[1].2), (3, 5, crc_of(&b)));
    assert_eq!((got[2].0, got[2].1), (5, 6));
    assert!(got.iter().all(|g| g.3), "every batch re-validates");
    let epochs: Vec<(i32, i64)> = log
        .leader_epoch_cache()
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, [(5, 0), (6, 5)]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n2\n5 0\n6 5\n"
    );
}

#[test]
fn duplicate_append_returns_the_original_offsets_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(&batch(9, 0, 0, 1, false), 0, AppendOrigin::Client)
        .unwrap();
    let original = log
        .append_as_leader(&batch(1, 0, 0, 3, false), 0, AppendOrigin::Client)
        .unwrap();
    let size = std::fs::metadata(log_file(dir.path(), 0)).unwrap().len();
    let retry = log
        .append_as_leader(&batch(1, 0, 0, 3, false), 0, AppendOrigin::Client)
        .unwrap();
    assert!(retry.duplicate);
    assert_eq!(
        (retry.first_offset, retry.last_offset),
        (original.first_offset, original.last_offset)
    );
    assert_eq!((retry.first_offset, retry.last_offset), (1, 3));
    assert_eq!(
        std::fs::metadata(log_file(dir.path(), 0)).unwrap().len(),
        size
    );
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn fenced_out_of_order_and_invalid_appends_are_typed_errors_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(&batch(1, 2, 0, 2, false), 0, AppendOrigin::Client)
        .unwrap();
    let size = || std::fs::metadata(log_file(dir.path(), 0)).unwrap().len();
    let before = size();

    let e = log
        .append_as_leader(&batch(1, 1, 2, 1, false), 0, AppendOrigin::Client)
        .unwrap_err();
    assert!(
        matches!(
            e,
            PartitionLogError::ProducerState(ProducerStateError::InvalidProducerEpoch {
                producer_id: 1,
                epoch: 1,
                current_epoch: 2,
                ..
            })
        ),
        "{e:?}"
    );
    let e = log
        .append_as_leader(&batch(1, 2, 5, 1, false), 0, AppendOrigin::Client)
        .unwrap_err();
    assert!(
        matches!(
            e,
            PartitionLogError::ProducerState(ProducerStateError::OutOfOrderSequence {
                producer_id: 1,
                first_sequence: 5,
                current_last_sequence: 1,
                ..
            })
        ),
        "{e:?}"
    );
    let e = log
        .append_as_leader(&marker(1, 2, true), 0, AppendOrigin::Client)
        .unwrap_err();
    assert!(
        matches!(e, PartitionLogError::ControlBatchFromClient { position: 0 }),
        "{e:?}"
    );
    let mut bad = batch(3, 0, 0, 1, false);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let e = log
        .append_as_leader(&bad, 0, AppendOrigin::Client)
        .unwrap_err();
    assert!(
        matches!(&e, PartitionLogError::InvalidRecords(f) if matches!(f.kind, record_format::FormatErrorKind::CrcMismatch { .. })),
        "{e:?}"
    );
    let mut partial = batch(3, 0, 0, 1, false);
    partial.truncate(partial.len() - 3);
    assert!(matches!(
        log.append_as_leader(&partial, 0, AppendOrigin::Client),
        Err(PartitionLogError::InvalidRecords(_))
    ));
    assert_eq!(size(), before);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(
        log.producer_state().last_entry(1).unwrap().last_seq(),
        1,
        "state untouched"
    );
}

#[test]
fn follower_append_keeps_bytes_identical_and_takes_epochs_from_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let mut bytes = batch_at(0, 4, 0, 0, 2, false, 3);
    bytes.extend(batch_at(2, 4, 0, 2, 1, false, 3));
    bytes.extend(batch_at(3, 5, 1, 0, 1, false, 7));
    let info = log.append_as_follower(&bytes).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 3));
    assert_eq!(std::fs::read(log_file(dir.path(), 0)).unwrap(), bytes);
    let epochs: Vec<(i32, i64)> = log
        .leader_epoch_cache()
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, [(3, 0), (7, 3)]);
    // Below the log end: refused.
    assert!(matches!(
        log.append_as_follower(&batch_at(3, 6, 0, 0, 1, false, 7)),
        Err(PartitionLogError::OffsetBelowLogEnd {
            first_offset: 3,
            log_end_offset: 4
        })
    ));
    // Replication only warns about an epoch regression.
    let info = log
        .append_as_follower(&batch_at(4, 5, 0, 1, 1, false, 7))
        .unwrap();
    assert_eq!(info.warnings.len(), 1);
}

#[test]
fn barrier_in_a_follower_append_clears_state_in_log_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let mut bytes = batch_at(0, 7, 0, 0, 1, false, 1);
    bytes.extend(mirror_pid_reset_batch(1, ts(), 1, "src"));
    bytes.extend(batch_at(2, 8, 0, 0, 1, false, 1));
    let info = log.append_as_follower(&bytes).unwrap();
    assert_eq!(info.barriers.len(), 1);
    assert_eq!(info.barriers[0].offset, 1);
    assert_eq!(info.barriers[0].producers_removed, 1);
    let pids: Vec<i64> = log
        .producer_state()
        .active_producers()
        .keys()
        .copied()
        .collect();
    assert_eq!(pids, [8], "producer 7 came before the barrier, 8 after it");
    assert_eq!(log.producer_state().map_end_offset(), 3);
    assert_eq!(log.find_barrier_from(0).unwrap(), Some(1));
    assert_eq!(log.find_barrier_from(2).unwrap(), None);
}

pub fn txn_index_entries(path: &Path) -> Vec<AbortedTxn> {
    let bytes = std::fs::read(path).unwrap_or_default();
    bytes
        .chunks_exact(34)
        .map(|c| AbortedTxn::from_bytes(c.try_into().unwrap()))
        .collect()
}

/// Offsets: 0 data(9), 1–2 txn(1), 3 txn(2), 4 ABORT(1), 5 COMMIT(2), 6 barrier, 7 data(9).
fn transactional_log(dir: &Path) -> PartitionLog {
    let mut log = open(dir);
    let c = AppendOrigin::Client;
    let k = AppendOrigin::Coordinator;
    log.append_as_leader(&batch(9, 0, 0, 1, false), 0, c)
        .unwrap();
    log.append_as_leader(&batch(1, 0, 0, 2, true), 0, c)
        .unwrap();
    log.append_as_leader(&batch(2, 0, 0, 1, true), 0, c)
        .unwrap();
    let abort = log.append_as_leader(&marker(1, 0, false), 0, k).unwrap();
    assert_eq!(abort.first_offset, 4);
    assert_eq!(abort.aborted_txns.len(), 1);
    log.append_as_leader(&marker(2, 0, true), 0, k).unwrap();
    let barrier = log
        .append_as_leader(&mirror_pid_reset_batch(0, ts(), 0, "src"), 0, k)
        .unwrap();
    assert_eq!(barrier.first_offset, 6);
    log.append_as_leader(&batch(9, 0, 0, 1, false), 0, c)
        .unwrap();
    log
}

#[test]
fn abort_marker_writes_a_txnindex_entry_with_kafkas_lso() {
    let dir = tempfile::tempdir().unwrap();
    let _log = transactional_log(dir.path());
    let entries = txn_index_entries(&dir.path().join(format!("{:020}.txnindex", 0)));
    // Producer 2's transaction (first offset 3) was still open when producer 1 aborted at 4.
    assert_eq!(entries, [AbortedTxn::new(1, 1, 4, 3)]);
}

/// Three transactions still open when a barrier arrives (a log no correct failover writes, but
/// one a reader must handle): each gets its own `.txnindex` entry ending at the barrier, live and
/// after a full recovery alike, and `read_committed` skips all their records.
#[test]
fn every_transaction_open_at_a_barrier_gets_a_txnindex_entry_live_and_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    // Offsets: 0 data(9), 1 txn(1), 2 txn(2), 3 txn(3), 4 barrier, 5 data(9).
    let mut bytes = batch_at(0, 9, 0, 0, 1, false, 1);
    bytes.extend(batch_at(1, 1, 0, 0, 1, true, 1));
    bytes.extend(batch_at(2, 2, 0, 0, 1, true, 1));
    bytes.extend(batch_at(3, 3, 0, 0, 1, true, 1));
    bytes.extend(mirror_pid_reset_batch(4, ts(), 1, "src"));
    bytes.extend(batch_at(5, 9, 0, 0, 1, false, 1));
    let info = log.append_as_follower(&bytes).unwrap();
    assert_eq!(info.barriers[0].aborted_txns.len(), 3);
    // Kafka's LSO for each: the first offset of the earliest other open transaction, else the
    // barrier's offset + 1.
    let want = [
        AbortedTxn::new(1, 1, 4, 2),
        AbortedTxn::new(2, 2, 4, 3),
        AbortedTxn::new(3, 3, 4, 5),
    ];
    let txnindex = dir.path().join(format!("{:020}.txnindex", 0));
    assert_eq!(txn_index_entries(&txnindex), want);
    log.set_high_watermark(i64::MAX);
    let rc = log.read(0, 1 << 20, IsolationLevel::ReadCommitted).unwrap();
    assert_eq!(rc.aborted_transactions.as_deref(), Some(&want[..]));
    let offsets: Vec<i64> = consume(&rc).unwrap().iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 5]);
    log.close().unwrap();

    // Full recovery rebuilds the same entries (and a clean load keeps them).
    std::fs::remove_file(&txnindex).unwrap();
    let opts = LoadOptions {
        config: recovery::Config {
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..Default::default()
    };
    let (log, report) = LogLoader::load(dir.path(), &opts).unwrap();
    assert_eq!(report.batches_scanned, 6);
    assert_eq!(txn_index_entries(&txnindex), want);
    log.close().unwrap();
}

#[test]
fn read_committed_skips_aborted_records_and_hides_markers_and_the_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = transactional_log(dir.path());
    log.set_high_watermark(i64::MAX);
    assert_eq!(log.high_watermark(), 8);
    assert_eq!(log.last_stable_offset(), 8);

    let rc = log.read(0, 1 << 20, IsolationLevel::ReadCommitted).unwrap();
    assert_eq!(
        rc.aborted_transactions.as_deref(),
        Some(&[AbortedTxn::new(1, 1, 4, 3)][..])
    );
    let offsets: Vec<i64> = consume(&rc).unwrap().iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 3, 7]);

    let ru = log
        .read(0, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert!(ru.aborted_transactions.is_none());
    let records = consume(&ru).unwrap();
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 7], "no marker, no barrier");
    assert_eq!(records[1].value.as_deref(), Some(&b"v0"[..]));
    // The raw fetch does contain the barrier: only the consumer view hides it.
    let raw_bases: Vec<i64> = batches_of(&ru.records).iter().map(|b| b.0).collect();
    assert_eq!(raw_bases, [0, 1, 3, 4, 5, 6, 7]);
    // A fetch from the middle of a batch starts at the asked offset.
    let mid = log
        .read(2, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert_eq!(consume(&mid).unwrap()[0].offset, 2);
}

#[test]
fn reads_are_bounded_by_the_high_watermark_and_the_lso() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let c = AppendOrigin::Client;
    log.append_as_leader(&batch(9, 0, 0, 2, false), 0, c)
        .unwrap(); // 0-1
    log.append_as_leader(&batch(1, 0, 0, 1, true), 0, c)
        .unwrap(); // 2 (open txn)
    log.append_as_leader(&batch(9, 0, 2, 1, false), 0, c)
        .unwrap(); // 3
    assert_eq!(log.high_watermark(), 0);
    let r = log
        .read(0, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert!(r.records.is_empty());
    log.set_high_watermark(2);
    let r = log
        .read(0, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert_eq!(batches_of(&r.records).len(), 1);
    log.set_high_watermark(4);
    assert_eq!(
        log.last_stable_offset(),
        2,
        "the open transaction pins the LSO"
    );
    let r = log
        .read(0, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert_eq!(consume(&r).unwrap().len(), 4);
    let r = log.read(0, 1 << 20, IsolationLevel::ReadCommitted).unwrap();
    assert_eq!(r.last_stable_offset, 2);
    let offsets: Vec<i64> = consume(&r).unwrap().iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1]);
    log.append_as_leader(&marker(1, 0, true), 0, AppendOrigin::Coordinator)
        .unwrap();
    log.set_high_watermark(5);
    assert_eq!(log.last_stable_offset(), 5);
    assert!(matches!(
        log.read(6, 10, IsolationLevel::ReadUncommitted),
        Err(PartitionLogError::OffsetOutOfRange { offset: 6, .. })
    ));
}

/// Appends a mix of producers, a transaction and a barrier over small segments; returns the
/// offsets at which each append started.
pub fn mixed_log(dir: &Path) -> (PartitionLog, Vec<i64>) {
    let mut log = open_with(dir, small_segments(300));
    let c = AppendOrigin::Client;
    let k = AppendOrigin::Coordinator;
    let mut starts = Vec::new();
    let appends: Vec<(Vec<u8>, AppendOrigin)> = vec![
        (batch(1, 0, 0, 2, false), c),
        (batch(2, 0, 0, 1, true), c),
        (batch(1, 0, 2, 1, false), c),
        (mirror_pid_reset_batch(0, ts(), 0, "src"), k),
        (batch(3, 0, 0, 1, false), c),
        (batch(1, 1, 0, 1, false), c),
        (batch(3, 0, 1, 2, false), c),
    ];
    for (bytes, origin) in appends {
        let info = log.append_as_leader(&bytes, 0, origin).unwrap();
        starts.push(info.first_offset);
    }
    (log, starts)
}

/// Every batch of `log` as `(last offset, bytes)`.
pub fn all_batches(log: &PartitionLog) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < log.log_end_offset() {
        let f = log.local_log().read(off, 1, true).unwrap();
        let e = Batches::new(&f.records, 0).next().unwrap().unwrap();
        out.push((e.last_offset(), e.as_bytes().to_vec()));
        off = e.last_offset() + 1;
    }
    out
}

/// A fresh log holding the batches below `end`, appended as a follower would.
pub fn reference_log(dir: &Path, batches: &[(i64, Vec<u8>)], end: i64) -> PartitionLog {
    let mut l = open(dir);
    for (last, bytes) in batches {
        if *last < end {
            l.append_as_follower(bytes).unwrap();
        }
    }
    l
}

#[test]
fn truncate_to_rebuilds_producer_state_from_snapshots_and_replay_across_a_barrier() {
    let src = tempfile::tempdir().unwrap();
    let (source, _) = mixed_log(src.path());
    let batches = all_batches(&source);
    let dir = tempfile::tempdir().unwrap();
    let (mut log, starts) = mixed_log(dir.path());
    assert!(
        log.local_log().segments().unwrap().len() > 2,
        "the test needs rolls"
    );
    // For every append boundary, truncating there equals a run of the prefix.
    for &target in starts.iter().rev() {
        assert!(log.truncate_to(target).unwrap());
        assert_eq!(log.log_end_offset(), target);
        let r = tempfile::tempdir().unwrap();
        let reference = reference_log(r.path(), &batches, target);
        let (got, expect) = (log.producer_state(), reference.producer_state());
        assert_eq!(
            got.snapshot_entries(),
            expect.snapshot_entries(),
            "at {target}"
        );
        assert_eq!(got.ongoing_txns(), expect.ongoing_txns(), "at {target}");
        assert_eq!(got.map_end_offset(), target);
    }
    // After the barrier (append 3) only producer 3 is known; before it, producers 1 and 2.
    let d = tempfile::tempdir().unwrap();
    let (mut log, starts) = mixed_log(d.path());
    log.truncate_to(starts[5]).unwrap();
    let pids: Vec<i64> = log
        .producer_state()
        .active_producers()
        .keys()
        .copied()
        .collect();
    assert_eq!(pids, [3]);
    log.truncate_to(starts[3]).unwrap();
    let pids: Vec<i64> = log
        .producer_state()
        .active_producers()
        .keys()
        .copied()
        .collect();
    assert_eq!(pids, [1, 2]);
    assert_eq!(log.producer_state().ongoing_txns().len(), 1);
    assert!(matches!(
        log.truncate_to(1),
        Err(PartitionLogError::NotBatchAligned {
            target: 1,
            batch_base_offset: 0
        })
    ));
}

#[test]
fn roll_writes_a_snapshot_named_after_the_new_base_with_the_state_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_with(dir.path(), small_segments(150));
    let c = AppendOrigin::Client;
    let first = log
        .append_as_leader(&batch(1, 0, 0, 2, false), 0, c)
        .unwrap();
    assert_eq!(first.rolled_to, None);
    let second = log
        .append_as_leader(&batch(2, 0, 0, 2, false), 0, c)
        .unwrap();
    assert_eq!(second.rolled_to, Some(2));
    let snap = dir.path().join(format!("{:020}.snapshot", 2));
    let entries = read_snapshot(&snap).unwrap();
    assert_eq!(entries.len(), 1, "producer 2 came after the roll");
    assert_eq!((entries[0].producer_id, entries[0].last_offset), (1, 1));
    assert_eq!(log.producer_state().last_snapshot_offset(), 2);
    assert!(log_file(dir.path(), 2).exists());
}

#[test]
fn clean_close_writes_a_snapshot_at_the_log_end_and_the_epoch_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(&batch(1, 0, 0, 3, false), 4, AppendOrigin::Client)
        .unwrap();
    let closed = log.close().unwrap();
    assert_eq!(closed.log_end_offset, 3);
    let entries = read_snapshot(&dir.path().join(format!("{:020}.snapshot", 3))).unwrap();
    assert_eq!((entries.len(), entries[0].producer_id), (1, 1));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n1\n4 0\n"
    );
}

fn count_barriers(log: &PartitionLog) -> usize {
    let data = log.local_log().read(0, 1 << 24, true).unwrap();
    Batches::new(&data.records, 0)
        .filter(|e| match e.as_ref().unwrap() {
            LogEntry::V2(b) => record_format::is_mirror_pid_reset_batch(b).unwrap(),
            LogEntry::Legacy(_) => false,
        })
        .count()
}

/// Read-only is enforced by the partition log itself (it was only advisory: a caller that
/// skipped `check_client_append` could write into a mirrored partition): client and coordinator
/// appends are refused while `Mirroring`, mirror appends once `Stopping` began, intra-cluster
/// follower appends work in every state; the state survives a reopen.
#[test]
fn partition_log_enforces_its_mirror_state_and_stops_in_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    assert_eq!(log.mirror_state(), &MirrorPartitionState::Local);
    log.start_mirroring("source-cluster", &EpochHistory::of(&log))
        .unwrap();
    // The mirror fetcher appends the source's batches as they are (source pid 5, epoch 3).
    let mut mirrored = batch_at(0, 5, 0, 0, 2, false, 3);
    mirrored.extend(batch_at(2, 5, 0, 2, 1, false, 3));
    log.append_as_mirror(&mirrored).unwrap();
    log.set_high_watermark(i64::MAX);
    for origin in [AppendOrigin::Client, AppendOrigin::Coordinator] {
        let bytes = if origin == AppendOrigin::Client {
            batch(9, 0, 0, 1, false)
        } else {
            end_txn_marker_batch(0, ts(), 0, 9, 0, ControlRecordType::Abort, 0)
        };
        let r = log.append_as_leader(&bytes, 3, origin);
        assert!(
            matches!(
                r,
                Err(PartitionLogError::ReadOnly {
                    state: MirrorStateKind::Mirroring
                })
            ),
            "{origin:?}: {r:?}"
        );
    }
    assert_eq!(log.log_end_offset(), 3, "nothing written");
    // Reopened, the partition is still mirroring and still refuses clients.
    drop(log);
    let mut log = open(dir.path());
    assert_eq!(
        log.mirror_state(),
        &MirrorPartitionState::Mirroring {
            source_cluster_id: "source-cluster".into(),
            // Chosen at start: 10 above the empty log's epoch 0; the source's epoch 3 stays
            // more than 3 below it.
            leader_epoch: 10,
            full_truncation_pending: false,
        }
    );
    let r = log.append_as_leader(&batch(9, 0, 0, 1, false), 3, AppendOrigin::Client);
    assert!(
        matches!(r, Err(PartitionLogError::ReadOnly { .. })),
        "{r:?}"
    );
    log.set_high_watermark(i64::MAX);
    // Without a barrier, a local producer given pid 5 would be taken for a duplicate.
    assert!(log
        .producer_state()
        .check_duplicate(
            &recovery::BatchSummary::from_batch(
                &RecordBatch::new(&batch(5, 0, 0, 2, false), 0).unwrap()
            )
            .unwrap()
        )
        .is_some());

    let barrier = log.stop_mirroring().unwrap();
    assert_eq!(barrier, 3);
    assert_eq!(
        log.mirror_state(),
        &MirrorPartitionState::Stopped {
            barrier_offset: 3,
            last_mirror_epoch: 3,
        }
    );
    assert_eq!(
        log.stop_mirroring().unwrap(),
        3,
        "stopping again writes nothing"
    );
    assert_eq!(count_barriers(&log), 1);
    assert_eq!(log.recovery_point(), 4, "the barrier is fsynced");
    assert!(log.producer_state().active_producers().is_empty());
    // The barrier is in epoch 13 (MIRROR_EPOCH_FENCE above the mirrored epoch 3), recorded
    // from its offset.
    let data = log.local_log().read(3, 1 << 20, true).unwrap();
    let LogEntry::V2(b) = Batches::new(&data.records, 0).next().unwrap().unwrap() else {
        panic!()
    };
    assert_eq!((b.base_offset(), b.partition_leader_epoch()), (3, 13));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n2\n3 0\n13 3\n"
    );
    assert_eq!(log.leader_epoch(), 13);
    // Stopped: the mirror feed is refused, intra-cluster replication is not.
    let r = log.append_as_mirror(&batch_at(4, 5, 0, 3, 1, false, 3));
    assert!(
        matches!(
            r,
            Err(PartitionLogError::NotMirroring {
                state: MirrorStateKind::Stopped
            })
        ),
        "{r:?}"
    );
    log.append_as_follower(&batch_at(4, 8, 0, 0, 1, false, 4))
        .unwrap();

    // The local producer reusing pid 5 with the mirrored sequences is NOT a duplicate.
    let info = log
        .append_as_leader(&batch(5, 0, 0, 2, false), 13, AppendOrigin::Client)
        .unwrap();
    assert!(!info.duplicate);
    assert_eq!((info.first_offset, info.last_offset), (5, 6));
    assert_eq!(log.find_barrier_from(0).unwrap(), Some(3));
    assert_eq!(MirrorLog::log_end_offset(&log), 7);
}

/// Intra-cluster follower appends (a replica of a mirrored partition following its leader) work
/// while `Mirroring`; from the persisted stop point until the barrier (every `Stopping` step,
/// under both policies), every append is refused: the mirror feed, clients, the coordinator,
/// and (defect: it was accepted and landed past the stop point, where
/// only the barrier may go) followers.
#[test]
fn follower_appends_are_refused_while_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.start_mirroring("src", &EpochHistory::of(&log)).unwrap();
    log.append_as_follower(&batch_at(0, 5, 0, 0, 1, false, 0))
        .unwrap();
    // Every step from the persisted stop point until the barrier, under both policies.
    for step in [
        recovery::StoppingStep::FeedStopped,
        recovery::StoppingStep::Truncated,
        recovery::StoppingStep::EpochBumped,
    ] {
        for policy in [
            recovery::StopPolicy::TruncateToLastStable,
            recovery::StopPolicy::AbortOpenTransactions,
        ] {
            let after_step_1 = step != recovery::StoppingStep::FeedStopped;
            log.persist_mirror_state(MirrorPartitionState::Stopping {
                step,
                source_cluster_id: "src".into(),
                lso: 1,
                last_mirrored_offset: after_step_1.then_some(1),
                last_mirrored_epoch: after_step_1.then_some(0),
                leader_epoch: Some(10),
                policy,
            })
            .unwrap();
            let ctx = format!("{step:?} {policy:?}");
            let r = log.append_as_mirror(&batch_at(1, 5, 0, 1, 1, false, 0));
            assert!(
                matches!(
                    r,
                    Err(PartitionLogError::NotMirroring {
                        state: MirrorStateKind::Stopping
                    })
                ),
                "{ctx}: {r:?}"
            );
            for (origin, bytes) in [
                (AppendOrigin::Client, batch(7, 0, 0, 1, false)),
                (
                    AppendOrigin::Coordinator,
                    end_txn_marker_batch(0, ts(), 10, 5, 0, ControlRecordType::Abort, 0),
                ),
            ] {
                let r = log.append_as_leader(&bytes, 10, origin);
                assert!(
                    matches!(
                        r,
                        Err(PartitionLogError::ReadOnly {
                            state: MirrorStateKind::Stopping
                        })
                    ),
                    "{ctx} {origin:?}: {r:?}"
                );
            }
            let r = log.append_as_follower(&batch_at(1, 5, 0, 1, 1, false, 0));
            assert!(
                matches!(
                    r,
                    Err(PartitionLogError::ReadOnly {
                        state: MirrorStateKind::Stopping
                    })
                ),
                "{ctx}: {r:?}"
            );
            assert_eq!(log.log_end_offset(), 1, "{ctx}");
        }
    }
}

fn snapshot_file_offsets(dir: &Path) -> Vec<i64> {
    recovery::internals::list_snapshots(dir)
        .unwrap()
        .into_iter()
        .map(|f| f.offset)
        .collect()
}

/// Kafka `ProducerStateManager`'s snapshot management on the partition log: the newest and
/// oldest snapshot offsets, `deleteSnapshotsBefore`, and `removeStraySnapshots` (every snapshot
/// not at a segment's base goes, except the newest such one when it is at or above the active
/// segment's base); each deletion is returned, and producer state is untouched.
#[test]
fn snapshot_management_follows_kafkas_producer_state_manager() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    assert_eq!(log.latest_snapshot_offset().unwrap(), None);
    assert_eq!(log.oldest_snapshot_offset().unwrap(), None);
    let c = AppendOrigin::Client;
    log.append_as_leader(&batch(1, 0, 0, 2, false), 0, c)
        .unwrap(); // 0..=1
    log.take_producer_snapshot().unwrap(); // 2: no segment there
    log.append_as_leader(&batch(1, 0, 2, 1, false), 0, c)
        .unwrap(); // 2
    assert_eq!(log.roll().unwrap(), 3);
    log.append_as_leader(&batch(1, 0, 3, 2, false), 0, c)
        .unwrap(); // 3..=4
    assert_eq!(log.roll().unwrap(), 5);
    log.append_as_leader(&batch(1, 0, 5, 1, false), 0, c)
        .unwrap(); // 5
    log.take_producer_snapshot().unwrap(); // 6
    log.append_as_leader(&batch(1, 0, 6, 1, false), 0, c)
        .unwrap(); // 6
    log.take_producer_snapshot().unwrap(); // 7
    assert_eq!(snapshot_file_offsets(dir.path()), [2, 3, 5, 6, 7]);
    assert_eq!(log.latest_snapshot_offset().unwrap(), Some(7));
    assert_eq!(log.oldest_snapshot_offset().unwrap(), Some(2));

    // Segments at 0, 3 and 5: 2 and 6 are stray; 7, the newest stray, is above 5 and stays.
    let removed: Vec<i64> = log
        .remove_stray_snapshots()
        .unwrap()
        .into_iter()
        .map(|f| f.offset)
        .collect();
    assert_eq!(removed, [2, 6]);
    assert_eq!(snapshot_file_offsets(dir.path()), [3, 5, 7]);

    let deleted: Vec<i64> = log
        .delete_snapshots_before(5)
        .unwrap()
        .into_iter()
        .map(|f| f.offset)
        .collect();
    assert_eq!(deleted, [3]);
    assert_eq!(log.oldest_snapshot_offset().unwrap(), Some(5));
    assert_eq!(log.latest_snapshot_offset().unwrap(), Some(7));
    assert!(log.delete_snapshots_before(5).unwrap().is_empty());

    // Producer state is not the files': the producer goes on in sequence.
    assert_eq!(
        log.producer_state().last_entry(1).map(|e| e.last_seq()),
        Some(6)
    );
    log.append_as_leader(&batch(1, 0, 7, 1, false), 0, c)
        .unwrap();
}

/// `(base offset, last offset)` of every batch of `records`.
fn batch_ranges(records: &[u8]) -> Vec<(i64, i64)> {
    Batches::new(records, 0)
        .map(|e| match e.unwrap() {
            LogEntry::V2(b) => (b.base_offset(), b.last_offset()),
            LogEntry::Legacy(_) => panic!("legacy batch"),
        })
        .collect()
}

/// Four segments: producer 2's plain records, producer 1's transaction spanning the first two
/// segments and aborted in the third, producer 3's transaction left open in the fourth.
fn log_for_reads(dir: &Path) -> PartitionLog {
    let mut log = open(dir);
    let c = AppendOrigin::Client;
    log.append_as_leader(&batch(2, 0, 0, 2, false), 0, c)
        .unwrap(); // 0..=1
    log.append_as_leader(&batch(1, 0, 0, 2, true), 0, c)
        .unwrap(); // 2..=3
    assert_eq!(log.roll().unwrap(), 4);
    log.append_as_leader(&batch(2, 0, 2, 2, false), 0, c)
        .unwrap(); // 4..=5
    log.append_as_leader(&batch(1, 0, 2, 1, true), 0, c)
        .unwrap(); // 6
    assert_eq!(log.roll().unwrap(), 7);
    log.append_as_leader(&marker(1, 0, false), 0, AppendOrigin::Coordinator)
        .unwrap(); // 7: ABORT
    log.append_as_leader(&batch(2, 0, 4, 3, false), 0, c)
        .unwrap(); // 8..=10
    assert_eq!(log.roll().unwrap(), 11);
    log.append_as_leader(&batch(3, 0, 0, 2, true), 0, c)
        .unwrap(); // 11..=12, open
    assert_eq!(log.set_high_watermark(13), 13);
    assert_eq!(log.last_stable_offset(), 11);
    log
}

/// Each fetch says where the next one starts, so a reader goes on across segments without
/// parsing the batches: following `next_fetch_offset` from 0 returns every batch below the
/// bound exactly once, whatever `max_bytes`; a fetch at the bound returns nothing and points at
/// itself.
#[test]
fn fetches_go_on_at_their_next_fetch_offset_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_for_reads(dir.path());
    let all = [(0, 1), (2, 3), (4, 5), (6, 6), (7, 7), (8, 10), (11, 12)];
    for max_bytes in [1, 1 << 20] {
        let mut offset = 0;
        let mut seen = Vec::new();
        while offset < 13 {
            let f = log
                .read(offset, max_bytes, IsolationLevel::ReadUncommitted)
                .unwrap();
            let ranges = batch_ranges(&f.records);
            assert!(
                !ranges.is_empty(),
                "a fetch below the bound returns a batch"
            );
            assert_eq!(f.next_fetch_offset, ranges.last().unwrap().1 + 1);
            seen.extend(ranges);
            offset = f.next_fetch_offset;
        }
        assert_eq!(seen, all, "max_bytes {max_bytes}");
    }
    // From inside a batch: that batch, and the offset after it.
    let f = log.read(9, 1, IsolationLevel::ReadUncommitted).unwrap();
    assert_eq!(
        (batch_ranges(&f.records), f.next_fetch_offset),
        (vec![(8, 10)], 11)
    );
    // At the bound of each isolation level: nothing, and the same offset again.
    let f = log
        .read(13, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    assert_eq!((f.records.len(), f.next_fetch_offset), (0, 13));
    let f = log
        .read(11, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    assert_eq!((f.records.len(), f.next_fetch_offset), (0, 11));
}

/// `iter_from` is the consumer's fetch loop across segments: from the offset asked for (inside a
/// batch), up to the high watermark or the last stable offset at its creation, control batches
/// hidden, and under `ReadCommitted` the records of a transaction aborted two segments after it
/// began skipped.
#[test]
fn iter_from_crosses_segments_and_skips_a_transaction_aborted_in_a_later_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_for_reads(dir.path());
    let offsets = |from: i64, isolation| -> Vec<i64> {
        let it = log.iter_from(from, isolation).unwrap();
        it.map(|r| r.unwrap().offset).collect()
    };
    assert_eq!(
        offsets(0, IsolationLevel::ReadUncommitted),
        [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12]
    );
    assert_eq!(
        offsets(0, IsolationLevel::ReadCommitted),
        [0, 1, 4, 5, 8, 9, 10]
    );
    assert_eq!(
        offsets(1, IsolationLevel::ReadCommitted),
        [1, 4, 5, 8, 9, 10]
    );
    assert_eq!(
        offsets(5, IsolationLevel::ReadUncommitted),
        [5, 6, 8, 9, 10, 11, 12]
    );
    assert!(offsets(11, IsolationLevel::ReadCommitted).is_empty());
    let mut it = log.iter_from(0, IsolationLevel::ReadCommitted).unwrap();
    assert_eq!(it.bound(), 11);
    assert_eq!(it.by_ref().count(), 7);
    assert_eq!(it.next_fetch_offset(), 11);
    assert!(matches!(
        log.iter_from(14, IsolationLevel::ReadUncommitted),
        Err(PartitionLogError::OffsetOutOfRange { offset: 14, .. })
    ));
}
