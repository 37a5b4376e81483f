//! What consumers read around a barrier.
//!
//! 1. Three transactions are open when a barrier arrives (a writer that skipped the truncation
//!    to the LSO): the barrier aborts them, and the transaction index gets one entry per
//!    transaction, all ending at the barrier, each with the last stable offset Kafka computes
//!    when the transactions complete one after the other (the next one's first offset, then the
//!    barrier + 1). A consumer written here from Kafka's `CompletedFetch.nextFetchedRecord` and
//!    `TransactionIndex.collectAbortedTxns` — **no barrier special case** — reads exactly the
//!    committed records for every fetch start and every fetch bound, including bounds between
//!    the three first offsets, where an index search that stops at an entry with a wrong last
//!    stable offset would miss the later transactions and show their records.
//! 2. `ConsumerReader` and producer state agree on what a barrier is: any control batch whose
//!    first record has type 7, with or without a producer id.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use record_format::{
    Batches, ControlRecordKey, ControlRecordType, DecodeLimits, LogEntry, MirrorPidResetRecord,
    RecordBatchBuilder,
};
use recovery::{ConsumerReader, FetchResult, IsolationLevel, MirrorLog, PartitionLog};
use segment_store::AbortedTxn;

use crate::common::{batches, idem, ts, txn, Node};

/// The control type of a control batch's first record.
fn control_type(b: &record_format::RecordBatch<'_>) -> Option<ControlRecordType> {
    let records = b.records(&DecodeLimits::default()).unwrap();
    let r = records.iter().next()?.unwrap();
    Some(ControlRecordKey::parse(r.key().unwrap(), 0).unwrap().1)
}

/// Kafka's read_committed consumer over one fetch (`CompletedFetch`): aborted transactions in a
/// min-heap by first offset; before each batch with a producer id, every aborted transaction
/// starting at or before the batch's last offset adds its producer id; an ABORT marker removes
/// its producer id; a transactional batch of a producer in the set is skipped; control batches
/// are never returned. Nothing else.
fn kafka_consumer(fetch: &FetchResult) -> Vec<i64> {
    let mut heap: BinaryHeap<std::cmp::Reverse<(i64, i64)>> = fetch
        .aborted_transactions
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|t| std::cmp::Reverse((t.first_offset, t.producer_id)))
        .collect();
    let mut aborted = BTreeSet::new();
    let mut out = Vec::new();
    for e in Batches::new(&fetch.records, 0) {
        let LogEntry::V2(b) = e.unwrap() else {
            panic!("legacy")
        };
        if b.has_producer_id() {
            while let Some(std::cmp::Reverse((first, pid))) = heap.peek().copied() {
                if first > b.last_offset() {
                    break;
                }
                heap.pop();
                aborted.insert(pid);
            }
            if b.is_control() {
                if control_type(&b) == Some(ControlRecordType::Abort) {
                    aborted.remove(&b.producer_id());
                }
            } else if b.is_transactional() && aborted.contains(&b.producer_id()) {
                continue;
            }
        }
        if b.is_control() {
            continue;
        }
        let records = b.records(&DecodeLimits::default()).unwrap();
        for r in records.iter() {
            let o = r.unwrap().offset();
            if o >= fetch.fetch_offset {
                out.push(o);
            }
        }
    }
    out
}

/// The offsets a read_committed consumer must see, from the log alone: records of
/// non-transactional batches, and of transactions that a COMMIT (not an ABORT or a barrier)
/// ended.
fn committed_offsets(log: &PartitionLog) -> BTreeSet<i64> {
    let all = batches(log);
    let mut open: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for b in &all {
        let v = b.view();
        if b.barrier_source().is_some() {
            open.clear();
            continue;
        }
        if v.is_control() {
            let ranges = open.remove(&v.producer_id()).unwrap_or_default();
            if control_type(&v) == Some(ControlRecordType::Commit) {
                for (first, last) in ranges {
                    out.extend(first..=last);
                }
            }
        } else if v.is_transactional() {
            open.entry(v.producer_id())
                .or_default()
                .push((v.base_offset(), v.last_offset()));
        } else {
            out.extend(v.base_offset()..=v.last_offset());
        }
    }
    out
}

#[test]
fn three_transactions_open_at_one_barrier_read_by_kafkas_consumer_algorithm() {
    let mut a = Node::new("A");
    let t1 = a.produce(&txn(21, 0, 0, 3, "t21")).unwrap().first_offset;
    a.produce(&idem(9, 0, 0, 4, "i9")).unwrap();
    a.produce(&txn(5, 0, 0, 2, "c5")).unwrap();
    a.write_marker(5, 0, true).unwrap();
    let t2 = a.produce(&txn(22, 1, 0, 2, "t22")).unwrap().first_offset;
    a.produce(&txn(21, 0, 3, 2, "t21b")).unwrap();
    a.produce(&idem(9, 0, 4, 3, "i9b")).unwrap();
    let t3 = a.produce(&txn(23, 2, 0, 4, "t23")).unwrap().first_offset;
    a.produce(&txn(22, 1, 2, 1, "t22b")).unwrap();
    a.produce(&idem(9, 0, 7, 2, "i9c")).unwrap();
    assert_eq!(a.log().last_stable_offset(), t1);
    // A writer that skipped the truncation to the LSO writes the barrier now.
    let barrier = a.with_log(|l| {
        let at = MirrorLog::append_barrier(l, "cluster-Z", l.leader_epoch() + 1).unwrap();
        l.set_high_watermark(l.log_end_offset());
        at
    });
    // Local traffic after the failover, producer ids the barrier's transactions never had.
    a.produce(&txn(5, 0, 2, 3, "c5b")).unwrap();
    a.produce(&idem(9, 0, 9, 2, "i9d")).unwrap();
    a.write_marker(5, 0, true).unwrap();
    let end = a.leo();
    assert_eq!(a.log().last_stable_offset(), end);
    assert!(
        a.log().local_log().segments().unwrap().len() > 3,
        "several segments"
    );

    // The index entries: one per transaction, all ending at the barrier, last stable offsets as
    // the three complete in order.
    let aborted = a.log().collect_aborted_transactions(0, end).unwrap();
    assert_eq!(
        aborted,
        [
            AbortedTxn::new(21, t1, barrier, t2),
            AbortedTxn::new(22, t2, barrier, t3),
            AbortedTxn::new(23, t3, barrier, barrier + 1),
        ]
    );

    let expected = committed_offsets(a.log());
    let boundaries: Vec<i64> = batches(a.log()).iter().map(|b| b.base_offset).collect();
    let mut bounds_seen = BTreeSet::new();
    for &start in &boundaries {
        for max_bytes in [1, 90, 150, 250, 1 << 20] {
            let fetch = a
                .log()
                .read(start, max_bytes, IsolationLevel::ReadCommitted)
                .unwrap();
            let Some(upper) = Batches::new(&fetch.records, 0)
                .map(|e| e.unwrap().last_offset() + 1)
                .last()
            else {
                continue;
            };
            // Which of the three first offsets the fetch range [start, upper) straddles.
            bounds_seen.insert((
                [t1, t2, t3].iter().filter(|&&t| t < start).count(),
                [t1, t2, t3].iter().filter(|&&t| t < upper).count(),
            ));
            let want: Vec<i64> = expected.range(start..upper).copied().collect();
            assert_eq!(
                kafka_consumer(&fetch),
                want,
                "Kafka's consumer, fetch [{start}, {upper})"
            );
            let ours: Vec<i64> = ConsumerReader::new(IsolationLevel::ReadCommitted)
                .read(&fetch)
                .unwrap()
                .iter()
                .map(|r| r.offset)
                .collect();
            assert_eq!(ours, want, "ConsumerReader, fetch [{start}, {upper})");
        }
    }
    // Fetches bounded between the first offsets: [before t1, between t1 and t2), [between t1
    // and t2, between t2 and t3), [between t2 and t3, after t3), and within each gap.
    for seen in [(0, 1), (1, 1), (1, 2), (2, 2), (2, 3)] {
        assert!(
            bounds_seen.contains(&seen),
            "{seen:?} not covered: {bounds_seen:?}"
        );
    }
}

/// A control batch of type 7 that carries a producer id is a barrier for producer state, and
/// now for `ConsumerReader` too (it required "no producer id", so a local producer reusing the
/// id of a transaction the barrier aborted stayed hidden in the same fetch).
#[test]
fn consumer_reader_and_producer_state_agree_on_what_a_barrier_is() {
    let mut a = Node::new("A");
    a.produce(&txn(5, 0, 0, 2, "a5")).unwrap(); // 0..=1, left open
    let at = a.leo();
    let value = MirrorPidResetRecord::new("cluster-Z").to_bytes();
    let mut b = RecordBatchBuilder::new(at).producer(9, 0, -1).control(true);
    b.append_control_record(ts(), ControlRecordType::MirrorPidReset, Some(&value))
        .unwrap();
    let barrier = b.build();
    let info = a.with_log(|l| {
        let info = l.append_as_follower(&barrier).unwrap();
        l.set_high_watermark(l.log_end_offset());
        info
    });
    assert_eq!(info.barriers.len(), 1, "producer state: a barrier");
    assert!(a.log().producer_state().is_empty());
    // The local producer reuses pid 5 and commits.
    a.produce(&txn(5, 0, 0, 3, "b5")).unwrap();
    a.write_marker(5, 0, true).unwrap();
    let fetch = a
        .log()
        .read(0, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    let seen: Vec<i64> = ConsumerReader::new(IsolationLevel::ReadCommitted)
        .read(&fetch)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(seen, [at + 1, at + 2, at + 3]);
}
