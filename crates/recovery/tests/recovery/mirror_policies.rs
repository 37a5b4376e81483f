//! The two stop policies on a real partition log, with a transaction open at the stop: what is
//! cut or kept, the ABORT markers of `AbortOpenTransactions` (producer id and epoch as the log
//! shows them, coordinator epoch from producer state, the stop's leader epoch), the
//! `.txnindex`, the last stable offset, and what a consumer following Kafka's fetch algorithm
//! (`recovery::consume`) reads under `read_committed` and `read_uncommitted`.

use record_format::{
    end_txn_marker_batch, Batches, ControlRecordType, LogEntry, RecordBatchBuilder,
};
use recovery::{
    consume, EpochHistory, IsolationLevel, MirrorPartitionState, PartitionLog, StopPolicy,
    MIRROR_EPOCH_FENCE,
};

use super::log::open;

const T0: i64 = 1_700_000_000_000;

fn one(base: i64, pid: i64, seq: i32, txn: bool, value: &str) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(base)
        .partition_leader_epoch(0)
        .producer(pid, 0, seq)
        .transactional(txn);
    b.append(T0, None, Some(value.as_bytes()), &[]).unwrap();
    b.build()
}

/// The source's partition as mirrored: pid 12 commits a transaction at 0 (COMMIT at 1 with
/// coordinator epoch 5), opens another at 2 that is never finished; pid 11 writes committed
/// records c3..c7 at 3..=7. LSO 2, log end 8.
fn mirrored(dir: &std::path::Path) -> PartitionLog {
    let mut log = open(dir);
    log.start_mirroring("cluster-A", &EpochHistory::of(&log))
        .unwrap();
    log.append_as_mirror(&one(0, 12, 0, true, "t0")).unwrap();
    log.append_as_mirror(&end_txn_marker_batch(
        1,
        T0,
        0,
        12,
        0,
        ControlRecordType::Commit,
        5,
    ))
    .unwrap();
    log.append_as_mirror(&one(2, 12, 1, true, "open")).unwrap();
    for i in 0..5 {
        log.append_as_mirror(&one(
            3 + i,
            11,
            i32::try_from(i).unwrap(),
            false,
            &format!("c{}", 3 + i),
        ))
        .unwrap();
    }
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    assert_eq!((log.last_stable_offset(), end), (2, 8));
    log
}

/// What a consumer following Kafka's fetch algorithm reads from the log start, fetch after
/// fetch (a fetch returns one segment's batches at most).
fn read(log: &PartitionLog, isolation: IsolationLevel) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    let bound = match isolation {
        IsolationLevel::ReadUncommitted => log.high_watermark(),
        IsolationLevel::ReadCommitted => log.last_stable_offset(),
    };
    while offset < bound {
        let fetch = log.read(offset, 1 << 20, isolation).unwrap();
        let next = Batches::new(&fetch.records, 0)
            .filter_map(|e| match e.unwrap() {
                LogEntry::V2(b) => Some(b.next_offset()),
                LogEntry::Legacy(_) => None,
            })
            .last();
        out.extend(
            consume(&fetch)
                .unwrap()
                .into_iter()
                .map(|r| (r.offset, String::from_utf8(r.value.unwrap()).unwrap())),
        );
        match next {
            Some(n) if n > offset => offset = n,
            _ => break,
        }
    }
    out
}

/// Every control batch: `(base offset, producer id, producer epoch, leader epoch)`.
fn control_batches(log: &PartitionLog) -> Vec<(i64, i64, i16, i32)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.local_log().read(offset, 1 << 20, true).unwrap();
        let mut next = offset;
        for e in Batches::new(&data.records, 0) {
            let LogEntry::V2(b) = e.unwrap() else {
                continue;
            };
            if b.is_control() {
                out.push((
                    b.base_offset(),
                    b.producer_id(),
                    b.producer_epoch(),
                    b.partition_leader_epoch(),
                ));
            }
            next = b.next_offset();
        }
        assert!(next > offset);
        offset = next;
    }
    out
}

/// The design text's policy: the stop point is the LSO (2), so the open transaction goes and
/// with it the committed c3..c7 a `read_uncommitted` consumer had already read; offset 3 is then
/// reused by a different, local record.
#[test]
fn truncate_to_last_stable_cuts_committed_records_after_an_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = mirrored(dir.path());
    let before = read(&log, IsolationLevel::ReadUncommitted);
    assert!(before.contains(&(3, "c3".to_owned())));

    assert_eq!(
        log.stop_mirroring_with(StopPolicy::TruncateToLastStable)
            .unwrap(),
        2
    );
    let epoch = log.leader_epoch();
    log.append_as_leader(
        &one(0, 30, 0, false, "local"),
        epoch,
        recovery::AppendOrigin::Client,
    )
    .unwrap();
    log.set_high_watermark(i64::MAX);
    let after = read(&log, IsolationLevel::ReadUncommitted);
    assert_eq!(after, [(0, "t0".to_owned()), (3, "local".to_owned())]);
    assert_ne!(
        before.iter().find(|r| r.0 == 3),
        after.iter().find(|r| r.0 == 3)
    );
}

/// The prototype's policy: nothing is cut; an ABORT marker for pid 12's open transaction (its
/// producer epoch 0, coordinator epoch 5 from producer state, leader epoch of the stop) at the
/// old log end, then the barrier; the `.txnindex` has the aborted transaction, the LSO moves
/// past both, a `read_committed` consumer reads c3..c7 but not the aborted record, and a
/// `read_uncommitted` one reads everything it read before.
#[test]
fn abort_open_transactions_keeps_every_record_and_aborts_the_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = mirrored(dir.path());
    let before = read(&log, IsolationLevel::ReadUncommitted);

    assert_eq!(
        log.stop_mirroring_with(StopPolicy::AbortOpenTransactions)
            .unwrap(),
        9,
        "the barrier after the marker at 8"
    );
    let epoch = log.leader_epoch();
    assert_eq!(epoch, MIRROR_EPOCH_FENCE);
    assert_eq!(
        log.mirror_state(),
        &MirrorPartitionState::Stopped {
            barrier_offset: 9,
            last_mirror_epoch: 0,
        }
    );
    assert_eq!(
        control_batches(&log),
        [(1, 12, 0, 0), (8, 12, 0, epoch), (9, -1, -1, epoch)]
    );
    let marker = log.local_log().read(8, 1 << 20, true).unwrap();
    let LogEntry::V2(b) = Batches::new(&marker.records, 0).next().unwrap().unwrap() else {
        panic!()
    };
    // An ABORT with coordinator epoch 5 (from producer state).
    assert_eq!(
        recovery::BatchSummary::from_batch(&b).unwrap().control,
        Some(recovery::ControlInfo::EndTxn {
            commit: false,
            coordinator_epoch: 5
        })
    );

    let aborted = log.collect_aborted_transactions(0, 10).unwrap();
    assert_eq!(
        aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect::<Vec<_>>(),
        [(12, 2, 8)]
    );
    log.set_high_watermark(i64::MAX);
    assert_eq!(log.last_stable_offset(), 10);
    let committed = read(&log, IsolationLevel::ReadCommitted);
    assert_eq!(
        committed,
        [
            (0, "t0".to_owned()),
            (3, "c3".to_owned()),
            (4, "c4".to_owned()),
            (5, "c5".to_owned()),
            (6, "c6".to_owned()),
            (7, "c7".to_owned()),
        ]
    );
    assert_eq!(read(&log, IsolationLevel::ReadUncommitted), before);
    assert!(log.producer_state().ongoing_txns().is_empty());
}

/// A transactional batch of one record from `pid` in producer epoch `epoch`.
fn txn_in(base: i64, pid: i64, epoch: i16, seq: i32, value: &str) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(base)
        .partition_leader_epoch(0)
        .producer(pid, epoch, seq)
        .transactional(true);
    b.append(T0, None, Some(value.as_bytes()), &[]).unwrap();
    b.build()
}

/// Two transactions open at an `AbortOpenTransactions` stop: pid 21 in producer epoch 3 that
/// never had a marker (coordinator epoch unknown), pid 22 in producer epoch 7 whose earlier
/// transaction was committed by coordinator epoch 4. Each gets its own ABORT marker, in
/// first-offset order: the producer id and epoch as the log last shows them, the coordinator
/// epoch from producer state (-1 for pid 21), the stop's leader epoch; the `.txnindex` gets one
/// entry per aborted transaction with strictly increasing last offsets, and the LSO moves past
/// the markers and the barrier.
#[test]
fn abort_open_transactions_writes_one_marker_per_transaction_as_the_log_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.start_mirroring("cluster-A", &EpochHistory::of(&log))
        .unwrap();
    log.append_as_mirror(&txn_in(0, 22, 7, 0, "c0")).unwrap();
    log.append_as_mirror(&end_txn_marker_batch(
        1,
        T0,
        0,
        22,
        7,
        ControlRecordType::Commit,
        4,
    ))
    .unwrap();
    log.append_as_mirror(&txn_in(2, 21, 3, 0, "open-21"))
        .unwrap();
    log.append_as_mirror(&txn_in(3, 22, 7, 1, "open-22"))
        .unwrap();
    log.append_as_mirror(&txn_in(4, 21, 3, 1, "open-21b"))
        .unwrap();
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    assert_eq!((log.last_stable_offset(), end), (2, 5));

    assert_eq!(
        log.stop_mirroring_with(StopPolicy::AbortOpenTransactions)
            .unwrap(),
        7,
        "markers at 5 and 6, the barrier at 7"
    );
    let epoch = log.leader_epoch();
    assert_eq!(epoch, MIRROR_EPOCH_FENCE);
    assert_eq!(
        control_batches(&log),
        [
            (1, 22, 7, 0),
            (5, 21, 3, epoch),
            (6, 22, 7, epoch),
            (7, -1, -1, epoch)
        ]
    );
    let coordinator_epochs: Vec<_> = [5, 6]
        .into_iter()
        .map(|offset| {
            let data = log.local_log().read(offset, 1 << 20, true).unwrap();
            let LogEntry::V2(b) = Batches::new(&data.records, 0).next().unwrap().unwrap() else {
                panic!()
            };
            recovery::BatchSummary::from_batch(&b).unwrap().control
        })
        .collect();
    assert_eq!(
        coordinator_epochs,
        [
            Some(recovery::ControlInfo::EndTxn {
                commit: false,
                coordinator_epoch: -1
            }),
            Some(recovery::ControlInfo::EndTxn {
                commit: false,
                coordinator_epoch: 4
            }),
        ]
    );

    // Every segment's `.txnindex`, in offset order (the markers' segment rolled at 5).
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txnindex"))
        .collect();
    files.sort();
    let index: Vec<_> = files
        .iter()
        .flat_map(|f| super::log::txn_index_entries(f))
        .collect();
    let entries: Vec<_> = index
        .iter()
        .map(|a| (a.producer_id, a.first_offset, a.last_offset))
        .collect();
    assert_eq!(entries, [(21, 2, 5), (22, 3, 6)]);
    assert_eq!(index, log.collect_aborted_transactions(0, 10).unwrap());
    assert!(index
        .windows(2)
        .all(|w| w[0].last_offset < w[1].last_offset));
    log.set_high_watermark(i64::MAX);
    assert_eq!(
        log.last_stable_offset(),
        8,
        "past the markers and the barrier"
    );
    assert!(log.producer_state().ongoing_txns().is_empty());
    assert_eq!(
        read(&log, IsolationLevel::ReadCommitted),
        [(0, "c0".to_owned())]
    );
}
