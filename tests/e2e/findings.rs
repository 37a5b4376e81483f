//! Library bugs found by the end-to-end tests, each kept as a regression test of the correct
//! behaviour (both fixed in `crates/recovery/src/log/`).
//!
//! 1. `PartitionLog::collect_aborted_transactions` stops at the first segment whose base offset
//!    reaches the upper bound (`if seg.base_offset() >= upper_bound_offset { break; }`). Kafka's
//!    `LocalLog.collectAbortedTransactions` has no such check: an aborted transaction is indexed
//!    in the segment holding its ABORT marker, which can be any later segment, so the search goes
//!    on until a segment's search is complete. With the early break, a read_committed fetch of a
//!    segment whose transaction was aborted by a marker in a later segment gets no
//!    aborted-transaction entry, and the consumer shows the aborted records.
//! 2. A barrier that meets an open transaction completes it as aborted (`docs/barrier.md` §5)
//!    with a transaction-index entry for that producer id, but no ABORT batch carrying the
//!    producer id is written. Kafka's consumer (and `ConsumerReader`, which follows it) removes a
//!    producer id from its aborted set only at an ABORT marker of that producer id, so within one
//!    fetch every later transactional batch of the same producer id is skipped — and after a
//!    barrier, the same producer id is exactly what the local producer that collides reuses. Its
//!    committed transaction is invisible to read_committed consumers whenever it is fetched
//!    together with the aborted one (one 1 GiB segment holds both in practice). Writing real
//!    ABORT markers for the open transactions before the barrier, as the KIP-1279 forks do,
//!    avoids it; `MirrorPartition::stop` avoids it too by truncating to the LSO first, so only a
//!    log whose barrier was written without that truncation is affected.

use recovery::{consume, FetchResult, IsolationLevel, MirrorLog};
use segment_store::AbortedTxn;

use crate::common::{batches, idem, txn, values, Node};

#[test]
fn an_abort_marker_in_a_later_segment_still_hides_the_aborted_records() {
    let mut a = Node::new("A");
    a.produce(&txn(7, 0, 0, 10, "t7")).unwrap(); // 0..=9, segment 0
    a.produce(&idem(9, 0, 0, 10, "i9")).unwrap(); // 10..=19, rolls to segment 10
    a.write_marker(7, 0, false).unwrap(); // ABORT at 20, in segment 10
    let bases: Vec<i64> = a
        .log()
        .local_log()
        .segments()
        .unwrap()
        .iter()
        .map(|s| s.base_offset)
        .collect();
    assert_eq!(bases, [0, 10]);
    let fetch = a
        .log()
        .read(0, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    let seen: Vec<String> = consume(&fetch)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(
        fetch.aborted_transactions,
        Some(vec![AbortedTxn::new(7, 0, 20, 21)])
    );
    assert!(seen.is_empty(), "aborted records shown: {seen:?}");
}

#[test]
fn after_a_barrier_abort_the_reused_producer_ids_commit_is_visible_in_the_same_fetch() {
    // A's producer 5 leaves a transaction open at 11; B appends the barrier without truncating
    // (it aborts that transaction at 31); B's local producer, also pid 5, commits 32..=41.
    let mut a = Node::new("A");
    a.produce(&txn(5, 0, 0, 10, "a5-t1")).unwrap();
    a.write_marker(5, 0, true).unwrap();
    a.produce(&txn(5, 0, 10, 10, "a5-t2")).unwrap();
    a.produce(&idem(9, 0, 0, 10, "a9-0")).unwrap();
    let mut b = Node::mirror_of("B", &a);
    b.failover_without_barrier(false);
    b.with_log(|l| {
        MirrorLog::append_barrier(l, "cluster-A", l.leader_epoch()).unwrap();
        l.set_high_watermark(l.log_end_offset());
    });
    b.produce(&txn(5, 1, 0, 10, "b5-t1")).unwrap();
    b.write_marker(5, 1, true).unwrap();

    // One fetch holding the whole log, as one large segment would return it.
    let log = b.log();
    let records: Vec<u8> = batches(log).into_iter().flat_map(|x| x.bytes).collect();
    let fetch = FetchResult {
        fetch_offset: 0,
        isolation: IsolationLevel::ReadCommitted,
        records,
        first_entry_incomplete: false,
        high_watermark: log.high_watermark(),
        last_stable_offset: log.last_stable_offset(),
        log_start_offset: 0,
        aborted_transactions: Some(
            log.collect_aborted_transactions(0, log.log_end_offset())
                .unwrap(),
        ),
        next_fetch_offset: log.log_end_offset(),
    };
    assert_eq!(
        fetch.aborted_transactions,
        Some(vec![AbortedTxn::new(5, 11, 31, 32)])
    );
    let seen: Vec<String> = consume(&fetch)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(
        seen,
        [values("a5-t1", 10), values("a9-0", 10), values("b5-t1", 10)].concat()
    );
}
