//! `seglog producers`: the producer lines, LSO and open transactions of a built log, computed
//! here from the batches the test wrote (from the snapshot and from the log start alike), and
//! `--audit` on KIP-1279's three PID collision scenarios written as real `.log` files (two
//! sources' pid 5 mirrored into one partition): without a barrier the collision findings and
//! exit 1, with the barrier only the informational reuse and exit 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use record_format::{
    end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType, RecordBatchBuilder,
};
use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{build_partition, files, producers, Written, T};

/// The expected producer lines and LSO/open-transaction lines, from what was written: per
/// producer its last data batch (sequence, offset, delta), its last batch or marker (timestamp),
/// its last marker (coordinator epoch) and an open transaction's first offset.
fn expected_state(written: &[Written]) -> Vec<String> {
    #[derive(Default)]
    struct P {
        epoch: i16,
        last_seq: i32,
        last_offset: i64,
        delta: i64,
        ts: i64,
        coord: i32,
        txn_first: Option<i64>,
    }
    let mut by_pid: BTreeMap<i64, P> = BTreeMap::new();
    for w in written {
        let p = by_pid.entry(w.pid).or_insert(P {
            coord: -1,
            last_offset: -1,
            last_seq: -1,
            ..P::default()
        });
        p.ts = w.max_ts;
        p.epoch = w.epoch;
        match w.marker {
            Some((_, coord)) => {
                p.coord = coord;
                p.txn_first = None;
            }
            None => {
                p.last_seq = w.base_seq + w.count - 1;
                p.last_offset = w.last_offset;
                p.delta = w.last_offset - w.first_offset;
                if w.txn && p.txn_first.is_none() {
                    p.txn_first = Some(w.first_offset);
                }
            }
        }
    }
    let mut lines: Vec<String> = by_pid
        .iter()
        .map(|(pid, p)| {
            format!(
                "producerId: {pid} producerEpoch: {} lastSequence: {} lastOffset: {} offsetDelta: \
                 {} lastTimestamp: {} coordinatorEpoch: {} currentTxnFirstOffset: {}",
                p.epoch,
                p.last_seq,
                p.last_offset,
                p.delta,
                p.ts,
                p.coord,
                p.txn_first.map_or("none".to_owned(), |o| o.to_string())
            )
        })
        .collect();
    let open: Vec<(i64, i64)> = by_pid
        .iter()
        .filter_map(|(pid, p)| p.txn_first.map(|o| (*pid, o)))
        .collect();
    let end = written.last().map_or(0, |w| w.last_offset + 1);
    let lso = open.iter().map(|(_, o)| *o).min().unwrap_or(end);
    lines.push(format!("lastStableOffset: {lso}"));
    lines.push(if open.is_empty() {
        "openTransactions: none".to_owned()
    } else {
        let l: Vec<String> = open
            .iter()
            .map(|(p, o)| format!("producerId {p} firstOffset {o}"))
            .collect();
        format!("openTransactions: {}", l.join(", "))
    });
    lines
}

#[test]
fn producer_lines_from_the_snapshot_and_from_the_log_start_agree_with_what_was_written() {
    let root = tempdir();
    let (dir, written) = build_partition(root.path(), "orders-0");
    let end = written.last().unwrap().last_offset + 1;
    let state = expected_state(&written);
    assert!(
        state.contains(&"openTransactions: producerId 7 firstOffset 9".to_owned()),
        "{state:?}"
    );

    // After a clean shutdown of its log directory, the state is loaded as a broker loads it:
    // from the snapshot at the log end, skipping the producers expired by now (the batches were
    // written with timestamps of 2023; `producer.id.expiration.ms` is a day): only the one with
    // an open transaction stays.
    let marker = root.path().join(".kafka_cleanshutdown");
    std::fs::write(&marker, b"{}").unwrap();
    let unexpired: Vec<String> = state
        .iter()
        .filter(|l| !(l.starts_with("producerId") && l.ends_with("currentTxnFirstOffset: none")))
        .cloned()
        .collect();
    let live = unexpired
        .iter()
        .filter(|l| l.starts_with("producerId"))
        .count();
    assert_eq!(live, 1);
    let mut expected = vec![format!(
        "orders-0: log [0, {end}), {live} producer(s), from snapshot {end:020}.snapshot + 0 \
         batch(es) replayed"
    )];
    expected.extend(unexpired);
    let out = producers(&[dir.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    let (expired, lines): (Vec<&str>, Vec<&str>) = out
        .stdout_lines()
        .into_iter()
        .partition(|l| l.starts_with("expiredAtLoad: "));
    assert_eq!(lines, expected);
    // The producers dropped are listed, each with its last timestamp (as written).
    let dropped: Vec<String> = state
        .iter()
        .filter(|l| l.starts_with("producerId") && l.ends_with("currentTxnFirstOffset: none"))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let at = |name: &str| fields[fields.iter().position(|f| *f == name).unwrap() + 1];
            format!(
                "expiredAtLoad: producerId: {} producerEpoch: {} lastTimestamp: {} ",
                at("producerId:"),
                at("producerEpoch:"),
                at("lastTimestamp:")
            )
        })
        .collect();
    assert_eq!(expired.len(), dropped.len(), "{expired:?}");
    for (line, prefix) in expired.iter().zip(&dropped) {
        assert!(line.starts_with(prefix.as_str()), "{line} / {prefix}");
    }

    // Otherwise every batch is recovered and applied from the log start.
    std::fs::remove_file(&marker).unwrap();
    for (_, snapshot) in files(&dir, ".snapshot") {
        std::fs::remove_file(snapshot).unwrap();
    }
    let mut expected = vec![format!(
        "orders-0: log [0, {end}), 4 producer(s), rebuilt from the log start ({} batches)",
        written.len()
    )];
    expected.extend(state);
    let out = producers(&[dir.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    assert_eq!(out.stdout_lines(), expected);
    assert_eq!(out.stderr, "");
}

#[test]
fn json_has_one_object_per_producer_and_a_partition_summary() {
    let root = tempdir();
    let (dir, written) = build_partition(root.path(), "orders-0");
    let out = producers(&["--json".as_ref(), dir.as_os_str()]);
    assert_eq!(out.status, Status::Success);
    let lines = out.json_lines();
    let pids: Vec<i64> = lines
        .iter()
        .filter(|l| l["type"] == "producer")
        .map(|l| l["producerId"].as_i64().unwrap())
        .collect();
    assert_eq!(pids, [5, 6, 7, 8]);
    let p7 = lines.iter().find(|l| l["producerId"] == 7).unwrap();
    let first7 = written.iter().find(|w| w.pid == 7).unwrap().first_offset;
    assert_eq!(p7["currentTxnFirstOffset"], first7);
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "partition");
    assert_eq!(summary["lastStableOffset"], first7);
    assert_eq!(
        summary["logEndOffset"],
        written.last().unwrap().last_offset + 1
    );
    assert_eq!(summary["openTransactions"][0]["producerId"], 7);
}

/// KIP-1279's PID collision scenarios: pid 5 of source A, then an unrelated pid 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// 1: same epoch, B restarts at sequence 0.
    Restart,
    /// 2: B has a lower epoch.
    Epochs,
    /// 3: transactional interleaving; B's COMMIT closes A's open transaction.
    Transactions,
}

/// One batch of the scenario: (epoch, sequence or marker, transactional, source).
enum Item {
    Data { epoch: i16, seq: i32, txn: bool },
    Marker { epoch: i16, commit: bool },
}

fn items(s: Scenario) -> (Vec<Item>, usize) {
    use Item::*;
    let d = |epoch, seq| Data {
        epoch,
        seq,
        txn: false,
    };
    let t = |epoch, seq| Data {
        epoch,
        seq,
        txn: true,
    };
    match s {
        // A: seq 0..=9 (offsets 0..=9); B: seq 0..=2. The barrier goes before B.
        Scenario::Restart => (
            (0..10)
                .map(|i| d(0, i))
                .chain((0..3).map(|i| d(0, i)))
                .collect(),
            10,
        ),
        // A: epoch 3 seq 0..=4; B: epoch 1 seq 0..=2.
        Scenario::Epochs => (
            (0..5)
                .map(|i| d(3, i))
                .chain((0..3).map(|i| d(1, i)))
                .collect(),
            5,
        ),
        // A (epoch 2) commits 0..=1, opens a transaction at 3; B (epoch 0) writes and commits;
        // A's ABORT arrives last. With the barrier (a correct failover) A's open transaction was
        // truncated away first.
        Scenario::Transactions => (
            vec![
                t(2, 0),
                t(2, 1),
                Marker {
                    epoch: 2,
                    commit: true,
                },
                t(2, 2),
                t(0, 0),
                Marker {
                    epoch: 0,
                    commit: true,
                },
                Marker {
                    epoch: 2,
                    commit: false,
                },
            ],
            3,
        ),
    }
}

/// Writes the scenario as one `.log` of single-record batches in `root/mirror-0` (raw bytes, as
/// a mirror fetcher stores them), with the barrier before B's first batch if `barrier`.
pub fn collision_log(root: &Path, scenario: Scenario, barrier: bool) -> PathBuf {
    let dir = root.join("mirror-0");
    std::fs::create_dir_all(&dir).unwrap();
    let (items, b_start) = items(scenario);
    let mut log = Vec::new();
    let mut offset = 0i64;
    for (i, item) in items.iter().enumerate() {
        if barrier && i == b_start {
            if scenario == Scenario::Transactions {
                // A correct failover truncates A's open transaction (the batch at 3) first.
                break;
            }
            log.extend(mirror_pid_reset_batch(offset, T, 0, "cluster-A"));
            offset += 1;
        }
        log.extend(batch(offset, item));
        offset += 1;
    }
    if barrier && scenario == Scenario::Transactions {
        log.extend(mirror_pid_reset_batch(offset, T, 0, "cluster-A"));
        offset += 1;
        for item in &items[4..6] {
            log.extend(batch(offset, item));
            offset += 1;
        }
    }
    std::fs::write(dir.join("00000000000000000000.log"), log).unwrap();
    // Empty indexes, as a broker leaves them for a few small batches (a missing one is a
    // finding of its own).
    std::fs::write(dir.join("00000000000000000000.index"), []).unwrap();
    std::fs::write(dir.join("00000000000000000000.timeindex"), []).unwrap();
    dir
}

fn batch(offset: i64, item: &Item) -> Vec<u8> {
    match *item {
        Item::Data { epoch, seq, txn } => {
            let mut b = RecordBatchBuilder::new(offset)
                .producer(5, epoch, seq)
                .transactional(txn);
            b.append(T + offset, Some(b"k"), Some(b"v"), &[]).unwrap();
            b.build()
        }
        Item::Marker { epoch, commit } => {
            let t = if commit {
                ControlRecordType::Commit
            } else {
                ControlRecordType::Abort
            };
            end_txn_marker_batch(offset, T + offset, 0, 5, epoch, t, 0)
        }
    }
}

fn audit_lines(out: &super::common::Output) -> Vec<String> {
    out.stdout_lines()
        .into_iter()
        .filter(|l| {
            l.starts_with("error: ")
                || l.starts_with("warning: ")
                || l.starts_with("info: ")
                || l.starts_with("audit: ")
        })
        .map(str::to_owned)
        .collect()
}

fn audit(scenario: Scenario, barrier: bool) -> super::common::Output {
    let root = tempdir();
    let dir = collision_log(root.path(), scenario, barrier);
    producers(&["--audit".as_ref(), dir.as_os_str()])
}

#[test]
fn scenario_1_same_epoch_restart() {
    let out = audit(Scenario::Restart, false);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "error: offset 10: producerId 5 epoch 0 sequence restarted at 0 after 9 (last seen at offset 9)",
            "audit: 13 batches, 1 error(s), 0 warning(s), 0 info",
        ]
    );
    let out = audit(Scenario::Restart, true);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "info: offset 11: producerId 5 reused across the MIRROR_PID_RESET barrier at offset 10 (last seen before it at offset 9)",
            "audit: 14 batches, 0 error(s), 0 warning(s), 1 info",
        ]
    );
}

#[test]
fn scenario_2_lower_epoch() {
    let out = audit(Scenario::Epochs, false);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "error: offset 5: producerId 5 epoch went backwards 3 -> 1 (last seen at offset 4)",
            "audit: 8 batches, 1 error(s), 0 warning(s), 0 info",
        ]
    );
    let out = audit(Scenario::Epochs, true);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "info: offset 6: producerId 5 reused across the MIRROR_PID_RESET barrier at offset 5 (last seen before it at offset 4)",
            "audit: 9 batches, 0 error(s), 0 warning(s), 1 info",
        ]
    );
}

#[test]
fn scenario_3_transactional_interleaving() {
    let out = audit(Scenario::Transactions, false);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "error: offset 4: producerId 5 epoch went backwards 2 -> 0 (last seen at offset 3)",
            "error: offset 5: producerId 5 COMMIT marker with epoch 0 closes the transaction opened at offset 3 with epoch 2",
            "warning: offset 6: producerId 5 ABORT marker (epoch 2) but no open transaction (last seen at offset 5)",
            "audit: 7 batches, 2 error(s), 1 warning(s), 0 info",
        ]
    );
    let out = audit(Scenario::Transactions, true);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(
        audit_lines(&out),
        [
            "info: offset 4: producerId 5 reused across the MIRROR_PID_RESET barrier at offset 3 (last seen before it at offset 2)",
            "audit: 6 batches, 0 error(s), 0 warning(s), 1 info",
        ]
    );
    // After the barrier only B's producer state is left, its transaction committed.
    assert!(
        out.stdout.contains("openTransactions: none"),
        "{}",
        out.stdout
    );
}

#[test]
fn audit_json_has_one_object_per_finding() {
    let root = tempdir();
    let dir = collision_log(root.path(), Scenario::Transactions, false);
    let out = producers(&["--audit".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    let lines = out.json_lines();
    let findings: Vec<(&str, i64)> = lines
        .iter()
        .filter(|l| l["type"] == "finding")
        .map(|l| {
            (
                l["severity"].as_str().unwrap(),
                l["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(findings, [("error", 4), ("error", 5), ("warning", 6)]);
    assert_eq!(lines.last().unwrap()["type"], "audit");
}
