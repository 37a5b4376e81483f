//! Property: for random logs (several producers, epochs, sequences, transactions, markers,
//! barriers), applying all batches in one call, applying them one by one, and taking a snapshot
//! at a random point then reloading it and replaying the rest all reach the same producer state
//! (as persisted in snapshots), the same open transactions and the same LSO. This is what makes
//! a barrier mean the same thing on a leader, on a follower and in recovery.

use std::collections::BTreeMap;

use proptest::prelude::*;
use recovery::internals::increment_sequence;
use recovery::AppendOrigin::{self, Client, Coordinator, Replication};
use recovery::{BatchSummary, CompletedTxn, ProducerStateManager, SnapshotEntry, TxnMetadata};

use crate::common::*;

#[derive(Debug, Clone)]
enum Seq {
    Next,
    Zero,
    Any(i32),
}

#[derive(Debug, Clone)]
enum Op {
    Data {
        pid: i64,
        epoch: i16,
        seq: Seq,
        count: i32,
        txn: bool,
    },
    Marker {
        pid: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    },
    EmptyControl {
        pid: i64,
    },
    Barrier,
    Plain {
        count: i32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let seq = prop_oneof![6 => Just(Seq::Next), 1 => Just(Seq::Zero), 1 => any::<i32>().prop_map(Seq::Any)];
    prop_oneof![
        10 => (0i64..4, 0i16..3, seq, 1i32..4, any::<bool>())
            .prop_map(|(pid, epoch, seq, count, txn)| Op::Data { pid, epoch, seq, count, txn }),
        4 => (0i64..4, 0i16..3, any::<bool>(), 0i32..3).prop_map(|(pid, epoch, commit, coordinator_epoch)| {
            Op::Marker { pid, epoch, commit, coordinator_epoch }
        }),
        1 => (0i64..4).prop_map(|pid| Op::EmptyControl { pid }),
        2 => Just(Op::Barrier),
        1 => (1i32..3).prop_map(|count| Op::Plain { count }),
    ]
}

/// Turns ops into batches with increasing offsets (with occasional gaps, as compaction leaves).
fn build(ops: &[(Op, bool)]) -> Vec<BatchSummary> {
    let mut offset = 0i64;
    let mut next_seq: BTreeMap<i64, i32> = BTreeMap::new();
    let mut out = Vec::new();
    for (op, gap) in ops {
        if *gap {
            offset += 1;
        }
        let b = match op {
            Op::Data {
                pid,
                epoch,
                seq,
                count,
                txn: is_txn,
            } => {
                let first = match seq {
                    Seq::Next => next_seq.get(pid).copied().unwrap_or(0),
                    Seq::Zero => 0,
                    Seq::Any(s) => s.rem_euclid(i32::MAX),
                };
                next_seq.insert(*pid, increment_sequence(first, *count));
                if *is_txn {
                    txn(*pid, *epoch, first, offset, *count)
                } else {
                    data(*pid, *epoch, first, offset, *count)
                }
            }
            Op::Marker {
                pid,
                epoch,
                commit,
                coordinator_epoch,
            } => marker(*pid, *epoch, offset, *commit, *coordinator_epoch),
            Op::EmptyControl { pid } => {
                let mut m = marker(*pid, 0, offset, true, 0);
                m.control = None;
                m.records_count = 0;
                m
            }
            Op::Barrier => barrier(offset),
            Op::Plain { count } => plain(offset, *count),
        };
        offset = b.last_offset + 1;
        out.push(b);
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
struct State {
    entries: Vec<SnapshotEntry>,
    ongoing: Vec<TxnMetadata>,
    first_undecided: Option<i64>,
    first_unstable_after_hw: Option<i64>,
    map_end: i64,
}

fn state(psm: &ProducerStateManager) -> State {
    let mut at_hw = psm.clone();
    at_hw.on_high_watermark_updated(psm.map_end_offset());
    State {
        entries: psm.snapshot_entries(),
        ongoing: psm.ongoing_txns().values().copied().collect(),
        first_undecided: psm.first_undecided_offset(),
        first_unstable_after_hw: at_hw.first_unstable_offset(),
        map_end: psm.map_end_offset(),
    }
}

struct OneByOne {
    psm: ProducerStateManager,
    accepted: Vec<BatchSummary>,
    completed: Vec<CompletedTxn>,
    duplicates: usize,
}

fn one_by_one(batches: &[BatchSummary], origin: AppendOrigin) -> OneByOne {
    let mut r = OneByOne {
        psm: ProducerStateManager::default(),
        accepted: Vec::new(),
        completed: Vec::new(),
        duplicates: 0,
    };
    for b in batches {
        let before = state(&r.psm);
        match r.psm.apply_batches([b], origin) {
            Ok(out) => {
                r.accepted.push(b.clone());
                r.completed.extend(out.completed_txns);
                r.duplicates += out.duplicates.len();
            }
            Err(_) => assert_eq!(state(&r.psm), before, "a refused batch leaves no trace"),
        }
    }
    r
}

fn check_one_call_equals_one_by_one(batches: &[BatchSummary], origin: AppendOrigin) -> OneByOne {
    let r = one_by_one(batches, origin);
    let mut all = ProducerStateManager::default();
    let out = all
        .apply_batches(&r.accepted, origin)
        .unwrap_or_else(|e| panic!("{origin:?}: accepted batches refused in one call: {e}"));
    assert_eq!(
        state(&all),
        state(&r.psm),
        "{origin:?}: one call vs one by one"
    );
    assert_eq!(
        out.completed_txns, r.completed,
        "{origin:?}: completed transactions"
    );
    assert_eq!(out.duplicates.len(), r.duplicates, "{origin:?}: duplicates");
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn one_call_equals_one_by_one_equals_snapshot_replay(
        ops in prop::collection::vec((op(), prop::bool::weighted(0.1)), 0..40),
        split in any::<prop::sample::Index>(),
    ) {
        let batches = build(&ops);
        let r = check_one_call_equals_one_by_one(&batches, Replication);

        // Snapshot at a random point, reload into a fresh manager, replay the rest.
        let k = split.index(r.accepted.len() + 1);
        let (head, tail) = r.accepted.split_at(k);
        let dir = tempfile::tempdir().unwrap();
        let mut first = ProducerStateManager::default();
        first.apply_batches(head, Replication).unwrap();
        first.take_snapshot(dir.path()).unwrap();
        let mut reloaded = ProducerStateManager::default();
        let load = reloaded.load_from_snapshot(dir.path(), 0, i64::MAX, 0).unwrap();
        prop_assert!(load.set_aside.is_empty());
        prop_assert_eq!(load.loaded.is_some(), first.map_end_offset() > 0);
        reloaded.apply_batches(tail, Replication).unwrap();
        prop_assert_eq!(state(&reloaded), state(&r.psm));

        // No producer that was last touched before the last barrier survives it.
        if let Some(last_barrier) = r.accepted.iter().rposition(|b| b.is_mirror_pid_reset()) {
            let after: Vec<i64> = r.accepted[last_barrier..].iter().filter(|b| b.has_producer_id()).map(|b| b.producer_id).collect();
            for e in state(&r.psm).entries {
                prop_assert!(after.contains(&e.producer_id));
            }
        }
    }

    #[test]
    fn one_call_equals_one_by_one_for_client_and_coordinator(
        ops in prop::collection::vec((op(), prop::bool::weighted(0.1)), 0..40),
    ) {
        let batches = build(&ops);
        check_one_call_equals_one_by_one(&batches, Client);
        check_one_call_equals_one_by_one(&batches, Coordinator);
    }
}

/// Everything the manager holds: producers, ongoing and unreplicated transactions, map end.
type FullState = (
    BTreeMap<i64, recovery::ProducerStateEntry>,
    BTreeMap<i64, TxnMetadata>,
    BTreeMap<i64, TxnMetadata>,
    i64,
);

/// Everything the manager holds, for exact comparisons.
fn full_state(psm: &ProducerStateManager) -> FullState {
    (
        psm.active_producers()
            .into_iter()
            .map(|(pid, e)| (pid, e.clone()))
            .collect(),
        psm.ongoing_txns().clone(),
        psm.unreplicated_txns().clone(),
        psm.map_end_offset(),
    )
}

/// Bends a valid batch into something replication must refuse or warn about: a control batch
/// without its control record, of another control type, an older epoch, a lower coordinator
/// epoch, a non-transactional batch inside a transaction, offsets that go backwards.
fn bend(b: &mut BatchSummary, how: u8) {
    use recovery::ControlInfo;
    match how {
        1 if b.is_control => b.control = None,
        2 if b.is_control => b.control = Some(ControlInfo::Other(3)),
        3 => b.producer_epoch = b.producer_epoch.saturating_sub(1),
        4 => {
            if let Some(ControlInfo::EndTxn {
                coordinator_epoch, ..
            }) = &mut b.control
            {
                *coordinator_epoch -= 1;
            }
        }
        5 => b.is_transactional = !b.is_transactional,
        6 => b.last_offset = b.base_offset - 1,
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The in-place recovery path (`apply_replicated_batch`) is `apply_batches([b], Replication)`:
    /// same state, same outputs, same errors, batch after batch, including refused batches.
    #[test]
    fn apply_replicated_batch_equals_apply_batches_of_one(
        ops in prop::collection::vec((op(), prop::bool::weighted(0.1)), 0..60),
        bends in prop::collection::vec(prop_oneof![6 => Just(0u8), 1 => 1u8..7], 60),
    ) {
        let mut batches = build(&ops);
        for (b, how) in batches.iter_mut().zip(&bends) {
            bend(b, *how);
        }
        let mut reference = ProducerStateManager::default();
        let mut fast = ProducerStateManager::default();
        let mut out = recovery::AppliedBatches::default();
        let (mut accepted, mut refused) = (0, 0);
        for b in &batches {
            out = recovery::AppliedBatches::default();
            let want = reference.apply_batches([b], Replication);
            let got = fast.apply_replicated_batch(b, &mut out);
            match (want, got) {
                (Ok(want), Ok(())) => {
                    accepted += 1;
                    prop_assert_eq!(&out, &want, "outputs for {:?}", b);
                }
                (Err(want), Err(got)) => {
                    refused += 1;
                    prop_assert_eq!(got, want, "error for {:?}", b);
                    prop_assert_eq!(&out, &recovery::AppliedBatches::default());
                }
                (want, got) => prop_assert!(false, "{:?}: apply_batches {:?}, in place {:?}", b, want, got),
            }
            prop_assert_eq!(full_state(&fast), full_state(&reference), "state after {:?}", b);
        }
        prop_assert_eq!(accepted + refused, batches.len());
        // Outputs are appended to what `out` holds, never replaced.
        let kept = out.clone();
        fast.apply_replicated_batch(&barrier(fast.map_end_offset()), &mut out).unwrap();
        prop_assert_eq!(out.barriers.len(), kept.barriers.len() + 1);
        prop_assert_eq!(&out.barriers[..kept.barriers.len()], &kept.barriers[..]);
        prop_assert_eq!(&out.completed_txns[..kept.completed_txns.len()], &kept.completed_txns[..]);
        prop_assert_eq!(&out.warnings, &kept.warnings);
    }
}
