//! The mirroring topologies of KIP-1279 on real partition directories: active-passive, failback,
//! fan-out, fan-in and chain. Clusters are separate directories; every mirror feed first aligns
//! by leader epoch (the `OffsetsForLeaderEpoch` rule: divergence is found by epochs, never by
//! comparing bytes) and then copies whole batches byte for byte through `append_as_mirror`.
//!
//! After every step each node is checked against:
//! * **byte identity**: the mirrored range holds the same batches at the same offsets, and the
//!   same bytes in the `.log` files, as the source;
//! * **a reference model** of producer state written here from the log alone (per producer id:
//!   epoch, last sequence, last data offset, first offset of the open transaction; everything
//!   forgotten at every `MIRROR_PID_RESET` barrier, whoever wrote it), which must equal the
//!   library's producer state, open transactions and last stable offset.
//!
//! Every cluster's local producers start at producer id 5, 7 and 9 (sequence 0, epoch 0), so
//! every failover is a collision.

use std::collections::{BTreeMap, BTreeSet};

use recovery::{EpochEndOffsets, LogAppendInfo, PartitionLog};

use crate::common::{
    assert_recovery_agrees, assert_same_bytes, barriers, batches, idem, marker, txn, Cluster, Node,
};

/// The model's view of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    epoch: i16,
    last_seq: i32,
    last_offset: i64,
    txn_first_offset: Option<i64>,
    /// Every cached batch, oldest first, as `(last sequence, last offset, offset delta)`: the
    /// data batches of the current epoch, at most the last five (Kafka
    /// `NUM_BATCHES_TO_RETAIN`).
    batches: Vec<(i32, i64, i32)>,
}

const UNKNOWN: Expected = Expected {
    epoch: -1,
    last_seq: -1,
    last_offset: -1,
    txn_first_offset: None,
    batches: Vec::new(),
};

/// The reference model: a fold over the log's batches in offset order.
fn model(log: &PartitionLog) -> BTreeMap<i64, Expected> {
    let mut m: BTreeMap<i64, Expected> = BTreeMap::new();
    for b in batches(log) {
        if b.barrier_source().is_some() {
            m.clear();
            continue;
        }
        let v = b.view();
        if !v.has_producer_id() {
            continue;
        }
        let e = m.entry(v.producer_id()).or_insert(UNKNOWN);
        if v.producer_epoch() != e.epoch {
            // A new epoch forgets the cached batches.
            e.last_seq = -1;
            e.last_offset = -1;
            e.batches.clear();
        }
        e.epoch = v.producer_epoch();
        if v.is_control() {
            e.txn_first_offset = None;
        } else {
            e.last_seq = v.last_sequence();
            e.last_offset = v.last_offset();
            if e.batches.len() == 5 {
                e.batches.remove(0);
            }
            let delta = i32::try_from(v.last_offset() - v.base_offset()).unwrap();
            e.batches.push((v.last_sequence(), v.last_offset(), delta));
            if v.is_transactional() && e.txn_first_offset.is_none() {
                e.txn_first_offset = Some(v.base_offset());
            }
        }
    }
    m
}

/// The library's producer state in the model's terms.
fn actual(log: &PartitionLog) -> BTreeMap<i64, Expected> {
    log.producer_state()
        .active_producers()
        .iter()
        .map(|(&pid, e)| {
            (
                pid,
                Expected {
                    epoch: e.producer_epoch(),
                    last_seq: e.last_seq(),
                    last_offset: e.last_data_offset(),
                    txn_first_offset: e.current_txn_first_offset(),
                    batches: e
                        .batch_metadata()
                        .iter()
                        .map(|b| (b.last_seq, b.last_offset, b.offset_delta))
                        .collect(),
                },
            )
        })
        .collect()
}

/// Producer state, open transactions and LSO of `node` equal the model of its log.
fn assert_model(node: &Node) -> BTreeMap<i64, Expected> {
    let log = node.log();
    let m = model(log);
    assert_eq!(actual(log), m, "{}: producer state", node.name);
    let open: BTreeSet<i64> = m.values().filter_map(|e| e.txn_first_offset).collect();
    let ongoing: BTreeSet<i64> = log
        .producer_state()
        .ongoing_txns()
        .keys()
        .copied()
        .collect();
    assert_eq!(ongoing, open, "{}: open transactions", node.name);
    let hw = log.high_watermark();
    assert_eq!(hw, log.log_end_offset(), "{}", node.name);
    let lso = open.first().map_or(hw, |&o| o.min(hw));
    assert_eq!(log.last_stable_offset(), lso, "{}: LSO", node.name);
    m
}

fn pids(m: &BTreeMap<i64, Expected>) -> Vec<i64> {
    m.keys().copied().collect()
}

/// The local producers of one cluster: the next sequence per producer id and epoch.
#[derive(Debug)]
struct Producers {
    cluster: &'static str,
    next_seq: BTreeMap<(i64, i16), i32>,
    epoch: i16,
}

impl Producers {
    fn new(cluster: &'static str, epoch: i16) -> Self {
        Self {
            cluster,
            next_seq: BTreeMap::new(),
            epoch,
        }
    }

    fn send(&mut self, node: &mut Node, pid: i64, n: i32, transactional: bool) -> LogAppendInfo {
        let seq = self.next_seq.entry((pid, self.epoch)).or_insert(0);
        let tag = format!("{}{pid}s{seq}", self.cluster);
        let bytes = if transactional {
            txn(pid, self.epoch, *seq, n, &tag)
        } else {
            idem(pid, self.epoch, *seq, n, &tag)
        };
        let info = node.produce(&bytes).unwrap();
        assert!(
            !info.duplicate,
            "{}: {tag} taken for a duplicate",
            node.name
        );
        assert!(info.warnings.is_empty());
        *seq += n;
        info
    }

    fn end_txn(&mut self, node: &mut Node, pid: i64, commit: bool) {
        node.write_marker(pid, self.epoch, commit).unwrap();
    }

    /// One round: idempotent 5, a committed transaction of 7, idempotent 9, an aborted
    /// transaction of 7.
    fn round(&mut self, node: &mut Node) {
        self.send(node, 5, 10, false);
        self.send(node, 7, 4, true);
        self.send(node, 7, 3, true);
        self.end_txn(node, 7, true);
        self.send(node, 9, 2, false);
        self.send(node, 7, 2, true);
        self.end_txn(node, 7, false);
    }

    /// Opens a transaction of producer 7 (left open) with a one-record batch, so that the
    /// offset after it is a batch boundary; returns its first offset.
    fn open_txn(&mut self, node: &mut Node) -> i64 {
        self.send(node, 7, 1, true).first_offset
    }
}

/// Everything `a` and `b` both hold is identical, and so is their producer state.
fn assert_mirror(source: &Node, mirror: &Node) {
    assert_eq!(mirror.leo(), source.leo(), "{} lags", mirror.name);
    assert_same_bytes(source, mirror, source.leo());
    assert_eq!(assert_model(source), assert_model(mirror));
}

#[test]
fn active_passive_failover() {
    let mut a = Node::new("A");
    let mut b = Cluster::new("B").partition("t-0");
    b.start_mirroring(&a);
    let mut pa = Producers::new("a", 0);
    for _ in 0..3 {
        pa.round(&mut a);
        assert!(b.mirror_from(&a) > 0);
        assert_mirror(&a, &b);
    }
    // A opens a transaction, B mirrors it, A is lost.
    let open = pa.open_txn(&mut a);
    b.mirror_from(&a);
    assert_mirror(&a, &b);
    assert_eq!(b.log().last_stable_offset(), open);

    let barrier = b.stop();
    assert_eq!(barrier, open, "truncated to the LSO, then the barrier");
    assert_eq!(barriers(b.log()), [(open, "cluster-A".to_owned())]);
    assert_same_bytes(&a, &b, open);
    assert!(assert_model(&b).is_empty());

    let mut pb = Producers::new("b", 0);
    pb.round(&mut b);
    pb.round(&mut b);
    let m = assert_model(&b);
    assert_eq!(pids(&m), [5, 7, 9]);
    assert!(m.values().all(|e| e.last_offset > barrier), "{m:?}");
    assert_eq!(m[&5].last_seq, 19, "B's producer 5 counts from 0");
    assert_recovery_agrees(b, barrier);
}

/// Mirrors `source` into `node` up to and including the barrier at `barrier`, and checks that
/// right after it `node` has no producer at all (so none of `gone`), with its producer state,
/// every cached batch included, equal to the model.
fn mirror_through_barrier(node: &mut Node, source: &Node, barrier: i64, gone: &[i64]) {
    node.mirror_from_until(source, barrier + 1);
    assert_eq!(
        node.leo(),
        barrier + 1,
        "{}: stopped after the barrier",
        node.name
    );
    assert!(
        barriers(node.log()).iter().any(|(at, _)| *at == barrier),
        "{}: the barrier at {barrier} was not received: {:?}",
        node.name,
        barriers(node.log())
    );
    let psm = node.log().producer_state();
    for pid in gone {
        assert!(
            psm.last_entry(*pid).is_none(),
            "{}: producer {pid} survived the propagated barrier",
            node.name
        );
    }
    assert!(psm.active_producers().is_empty(), "{}", node.name);
    assert!(psm.ongoing_txns().is_empty(), "{}", node.name);
    assert!(assert_model(node).is_empty());
}

/// Failback in both directions. Each side also runs a producer the other never reuses (A's pid
/// 11 at epoch 3, B's pid 12 at epoch 2): only the propagated barrier can clear it on the other
/// side, and it must be gone right after that barrier. Alignment is by leader epoch: the side
/// coming back truncates at the barrier's offset because the barrier opens a new epoch (a
/// barrier written in the old epoch leaves the returning side's own batch at that offset in
/// place, and the barrier never arrives).
#[test]
fn failback() {
    let mut a = Node::new("A");
    let mut b = Cluster::new("B").partition("t-0");
    b.start_mirroring(&a);
    let mut pa = Producers::new("a", 0);
    let mut pa11 = Producers::new("a", 3);
    pa.round(&mut a);
    pa11.send(&mut a, 11, 3, false);
    pa.round(&mut a);
    pa11.send(&mut a, 11, 2, true);
    pa11.end_txn(&mut a, 11, true);
    let open = pa.open_txn(&mut a);
    b.mirror_from(&a);
    assert_mirror(&a, &b);
    // A writes a tail B never receives, then is lost.
    pa.send(&mut a, 5, 10, false);
    pa11.send(&mut a, 11, 4, false);
    pa.send(&mut a, 9, 10, false);
    assert!(a.leo() > b.leo());
    assert_eq!(a.log().leader_epoch_cache().latest_epoch(), Some(0));

    // Failover to B: B's barrier opens epoch 10 (MIRROR_EPOCH_FENCE above A's epoch 0) at the
    // stop point.
    let b_barrier = b.stop();
    assert_eq!(b_barrier, open);
    assert_eq!(b.leader_epoch(), 10);
    assert_eq!(b.log().end_offset_for_epoch(0), (0, b_barrier));
    let mut pb = Producers::new("b", 0);
    let mut pb12 = Producers::new("b", 2);
    pb.round(&mut b);
    pb12.send(&mut b, 12, 3, false);
    assert_eq!(pids(&assert_model(&b)), [5, 7, 9, 12]);

    // A comes back as a mirror of B: asked about A's latest epoch (0), B answers that epoch 0
    // ends at its barrier; A truncates there (its own batch at that offset included) and the
    // next fetch brings B's barrier, which clears A's own producers, pid 11 included.
    a.start_mirroring(&b);
    assert_eq!(a.leo(), b_barrier, "aligned to B's end of epoch 0");
    assert!(a.log().producer_state().last_entry(11).is_some());
    mirror_through_barrier(&mut a, &b, b_barrier, &[11]);
    a.mirror_from(&b);
    assert!(a.divergence_truncations.is_empty());
    assert_mirror(&b, &a);
    let m = assert_model(&a);
    assert!(m.values().all(|e| e.last_offset > b_barrier), "{m:?}");

    // More local traffic on B, left with an open transaction; A keeps up.
    pb.round(&mut b);
    pb12.send(&mut b, 12, 1, false);
    let b_open = pb.open_txn(&mut b);
    a.mirror_from(&b);
    assert_mirror(&b, &a);
    // B writes a tail A never receives, then is lost.
    pb12.send(&mut b, 12, 2, false);
    pb.send(&mut b, 9, 2, false);

    // Failback: A stops mirroring (truncating B's open transaction away, then its own barrier in
    // epoch 20, ten above B's 10); B becomes A's mirror, aligns to A's end of epoch 10 (A's
    // barrier) and receives
    // A's barrier, which clears B's producers, pid 12 included.
    let a_barrier = a.stop();
    assert_eq!(a_barrier, b_open);
    assert_eq!(a.leader_epoch(), 20);
    assert!(assert_model(&a).is_empty());
    let mut pa2 = Producers::new("A", 0);
    pa2.round(&mut a);
    b.start_mirroring(&a);
    assert_eq!(b.leo(), a_barrier);
    assert!(b.log().producer_state().last_entry(12).is_some());
    mirror_through_barrier(&mut b, &a, a_barrier, &[12]);
    b.mirror_from(&a);
    assert!(b.divergence_truncations.is_empty());
    assert_mirror(&a, &b);
    let expect_barriers = vec![
        (b_barrier, "cluster-A".to_owned()),
        (a_barrier, "cluster-B".to_owned()),
    ];
    assert_eq!(barriers(a.log()), expect_barriers);
    assert_eq!(barriers(b.log()), expect_barriers);
    let m = assert_model(&b);
    assert_eq!(pids(&m), [5, 7, 9]);
    assert!(m.values().all(|e| e.last_offset > a_barrier));
    assert_recovery_agrees(a, a_barrier);
    assert_recovery_agrees(b, a_barrier);
}

#[test]
fn fan_out() {
    let mut a = Node::new("A");
    let mut b = Cluster::new("B").partition("t-0");
    let mut c = Cluster::new("C").partition("t-0");
    b.start_mirroring(&a);
    c.start_mirroring(&a);
    let mut pa = Producers::new("a", 0);
    pa.round(&mut a);
    b.mirror_from(&a);
    pa.round(&mut a);
    c.mirror_from(&a);
    b.mirror_from(&a);
    assert_mirror(&a, &b);
    assert_mirror(&a, &c);
    let open = pa.open_txn(&mut a);
    b.mirror_from(&a);
    c.mirror_from(&a);

    // B fails over on its own (A stays up): only B gets a barrier.
    let b_barrier = b.stop();
    assert_eq!(b_barrier, open);
    let mut pb = Producers::new("b", 0);
    pb.round(&mut b);

    // A finishes its transaction and goes on; C keeps mirroring A, unaffected.
    pa.end_txn(&mut a, 7, true);
    pa.round(&mut a);
    c.mirror_from(&a);
    assert_mirror(&a, &c);
    assert!(barriers(c.log()).is_empty() && barriers(a.log()).is_empty());

    // Later C fails over too, with its own barrier.
    let c_barrier = c.stop();
    assert_eq!(c_barrier, a.leo());
    let mut pc = Producers::new("c", 0);
    pc.round(&mut c);
    assert_same_bytes(&a, &b, b_barrier);
    assert_same_bytes(&a, &c, c_barrier);
    assert_eq!(barriers(b.log()), [(b_barrier, "cluster-A".to_owned())]);
    assert_eq!(barriers(c.log()), [(c_barrier, "cluster-A".to_owned())]);
    let (mb, mc) = (assert_model(&b), assert_model(&c));
    assert!(mb.values().all(|e| e.last_offset > b_barrier));
    assert!(mc.values().all(|e| e.last_offset > c_barrier));
    assert_ne!(mb, mc, "independent producer state per destination");
    assert_model(&a);
    assert_recovery_agrees(b, b_barrier);
    assert_recovery_agrees(c, c_barrier);
}

#[test]
fn fan_in_different_topics() {
    let a = Cluster::new("A");
    let b = Cluster::new("B");
    let c = Cluster::new("C");
    let mut orders = a.partition("orders-0");
    let mut payments = b.partition("payments-0");
    let mut c_orders = c.partition("orders-0");
    let mut c_payments = c.partition("payments-0");
    c_orders.start_mirroring(&orders);
    c_payments.start_mirroring(&payments);
    // Both sources use producer ids 5, 7 and 9, at different epochs.
    let mut pa = Producers::new("a", 0);
    let mut pb = Producers::new("b", 2);
    for _ in 0..2 {
        pa.round(&mut orders);
        pb.round(&mut payments);
        pb.round(&mut payments);
        c_orders.mirror_from(&orders);
        c_payments.mirror_from(&payments);
        assert_mirror(&orders, &c_orders);
        assert_mirror(&payments, &c_payments);
    }
    let (mo, mp) = (assert_model(&c_orders), assert_model(&c_payments));
    assert_eq!((mo[&5].epoch, mp[&5].epoch), (0, 2));
    assert_ne!(mo[&5].last_offset, mp[&5].last_offset);

    // C stops mirroring orders: only that partition gets a barrier; payments keeps mirroring B
    // with B's producer state intact.
    let orders_barrier = c_orders.stop();
    let mut pc = Producers::new("c", 0);
    pc.round(&mut c_orders);
    let mut pc_payments = Producers::new("c", 0);
    pb.round(&mut payments);
    c_payments.mirror_from(&payments);
    assert_mirror(&payments, &c_payments);
    assert_eq!(assert_model(&c_payments)[&5].epoch, 2);
    assert!(barriers(c_payments.log()).is_empty());

    let payments_barrier = c_payments.stop();
    pc_payments.round(&mut c_payments);
    assert_eq!(
        barriers(c_orders.log()),
        [(orders_barrier, "cluster-A".to_owned())]
    );
    assert_eq!(
        barriers(c_payments.log()),
        [(payments_barrier, "cluster-B".to_owned())]
    );
    assert_same_bytes(&orders, &c_orders, orders_barrier);
    assert_same_bytes(&payments, &c_payments, payments_barrier);
    for (n, barrier) in [(&c_orders, orders_barrier), (&c_payments, payments_barrier)] {
        let m = assert_model(n);
        assert_eq!(pids(&m), [5, 7, 9]);
        assert!(m.values().all(|e| e.epoch == 0 && e.last_offset > barrier));
    }
    assert!(c_orders.dir.ends_with("orders-0") && c_payments.dir.ends_with("payments-0"));
    assert_eq!(c_orders.dir.parent(), c_payments.dir.parent());
    assert_recovery_agrees(c_orders, orders_barrier);
    assert_recovery_agrees(c_payments, payments_barrier);
}

/// A chain A -> B -> C where A's producer 11 (epoch 3) is never reused downstream: when B fails
/// over, C's feed detects by leader epoch that B's log diverged at B's barrier (C still holds
/// A's open transaction there), truncates there, receives the barrier, and has no producer left
/// right after it.
#[test]
fn chain_failover_at_b_then_at_c() {
    let mut a = Node::new("A");
    let mut b = Cluster::new("B").partition("t-0");
    let mut c = Cluster::new("C").partition("t-0");
    b.start_mirroring(&a);
    c.start_mirroring(&b);
    let mut pa = Producers::new("a", 0);
    let mut pa11 = Producers::new("a", 3);
    for _ in 0..2 {
        pa.round(&mut a);
        pa11.send(&mut a, 11, 2, false);
        b.mirror_from(&a);
        c.mirror_from(&b);
        assert_mirror(&a, &b);
        assert_mirror(&b, &c);
    }
    let open = pa.open_txn(&mut a);
    b.mirror_from(&a);
    c.mirror_from(&b);
    assert_mirror(&b, &c);

    // A is lost: B fails over (truncates A's open transaction, barrier).
    let b_barrier = b.stop();
    assert_eq!(b_barrier, open);
    let mut pb = Producers::new("b", 0);
    pb.round(&mut b);
    // C still holds the truncated transaction: its feed asks B about C's latest epoch (0), B
    // answers that epoch 0 ends at its barrier, C truncates there, then receives B's barrier,
    // which clears C's (mirrored) producer state too, pid 11 included.
    let before = c.leo();
    assert!(before > b_barrier);
    assert!(c.log().producer_state().last_entry(11).is_some());
    mirror_through_barrier(&mut c, &b, b_barrier, &[11]);
    assert_eq!(c.divergence_truncations, [b_barrier]);
    c.mirror_from(&b);
    assert_mirror(&b, &c);
    let m = assert_model(&c);
    assert!(m.values().all(|e| e.last_offset > b_barrier));

    // B leaves a transaction open and is lost: C fails over.
    pb.round(&mut b);
    let b_open = pb.open_txn(&mut b);
    c.mirror_from(&b);
    assert_mirror(&b, &c);
    let c_barrier = c.stop();
    assert_eq!(c_barrier, b_open);
    let mut pc = Producers::new("c", 0);
    pc.round(&mut c);
    assert_same_bytes(&a, &c, b_barrier);
    assert_same_bytes(&b, &c, c_barrier);
    assert_eq!(
        barriers(c.log()),
        [
            (b_barrier, "cluster-A".to_owned()),
            (c_barrier, "cluster-B".to_owned())
        ]
    );
    let m = assert_model(&c);
    assert_eq!(pids(&m), [5, 7, 9]);
    assert!(m.values().all(|e| e.last_offset > c_barrier));
    assert_model(&a);
    assert_model(&b);
    assert_recovery_agrees(c, c_barrier);
}

#[test]
fn chain_failover_at_c_while_a_to_b_goes_on() {
    let mut a = Node::new("A");
    let mut b = Cluster::new("B").partition("t-0");
    let mut c = Cluster::new("C").partition("t-0");
    b.start_mirroring(&a);
    c.start_mirroring(&b);
    let mut pa = Producers::new("a", 0);
    pa.round(&mut a);
    pa.round(&mut a);
    b.mirror_from(&a);
    c.mirror_from(&b);
    assert_mirror(&b, &c);

    // The B -> C link fails over: C gets a barrier, A and B are unaffected.
    let c_barrier = c.stop();
    assert_eq!(c_barrier, a.leo());
    let mut pc = Producers::new("c", 0);
    pc.round(&mut c);
    pa.round(&mut a);
    b.mirror_from(&a);
    assert_mirror(&a, &b);
    assert!(barriers(b.log()).is_empty());
    assert_eq!(pids(&assert_model(&b)), [5, 7, 9]);
    assert_same_bytes(&b, &c, c_barrier);
    let m = assert_model(&c);
    assert!(m.values().all(|e| e.last_offset > c_barrier));

    // Then A is lost too: B fails over, independently of C.
    let open = pa.open_txn(&mut a);
    b.mirror_from(&a);
    let b_barrier = b.stop();
    assert_eq!(b_barrier, open);
    let mut pb = Producers::new("b", 0);
    pb.round(&mut b);
    assert!(assert_model(&b).values().all(|e| e.last_offset > b_barrier));
    assert_eq!(barriers(c.log()), [(c_barrier, "cluster-B".to_owned())]);
    assert_recovery_agrees(b, b_barrier);
    assert_recovery_agrees(c, c_barrier);
}

/// The model is not trivially the library: it reproduces a hand-computed state.
#[test]
fn model_sanity() {
    let mut a = Node::new("A");
    a.produce(&idem(5, 0, 0, 3, "x")).unwrap();
    a.produce(&txn(7, 1, 0, 2, "y")).unwrap();
    let refused = a.produce(&marker(7, 1, true));
    assert!(matches!(
        refused,
        Err(recovery::PartitionLogError::ControlBatchFromClient { .. })
    ));
    let m = assert_model(&a);
    assert_eq!(
        m[&5],
        Expected {
            epoch: 0,
            last_seq: 2,
            last_offset: 2,
            txn_first_offset: None,
            batches: vec![(2, 2, 2)],
        }
    );
    assert_eq!(
        m[&7],
        Expected {
            epoch: 1,
            last_seq: 1,
            last_offset: 4,
            txn_first_offset: Some(3),
            batches: vec![(1, 4, 1)],
        }
    );
    a.write_marker(7, 1, true).unwrap();
    assert_eq!(assert_model(&a)[&7].txn_first_offset, None);
}
