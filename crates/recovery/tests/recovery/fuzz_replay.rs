//! Replays the recovery fuzz harnesses (`src/fuzzing/recovery_harness.rs`, public as `seglog::fuzzing::{snapshot, producer_state, log_loader}`) on stable, without a fuzzer:
//! every seed in `fuzz/seeds/<target>/` and every input that ever failed a target, committed under
//! `fuzz/regressions/<target>/`. Invariant: no harness assertion fails for any committed input or
//! any of its prefixes, so CI keeps what the fuzzer found.
//!
//! `FUZZ_WRITE_SEEDS=1 cargo test -p recovery --test recovery fuzz_replay::write_seeds`
//! regenerates the seeds (snapshots written by `encode_snapshot`, hand-made producer scripts).

#[path = "../../../../src/fuzzing/recovery_harness.rs"]
mod harness;

use std::path::PathBuf;

use recovery::internals::encode_snapshot;
use recovery::SnapshotEntry;

#[path = "../../../../fuzz/replay.rs"]
mod replay_inputs;

fn fuzz_dir() -> PathBuf {
    replay_inputs::fuzz_dir(env!("CARGO_MANIFEST_DIR"))
}

fn replay(target: &str, f: fn(&[u8]), min_inputs: usize) {
    replay_inputs::replay(&fuzz_dir(), target, f, min_inputs, &[0, 1, 2, 6, 10, 56]);
}

#[test]
fn snapshot_corpus() {
    replay("snapshot", harness::snapshot, 4);
}

#[test]
fn producer_state_corpus() {
    replay("producer_state", harness::producer_state, 4);
    harness::remove_snapshot_dir();
}

#[test]
fn log_loader_corpus() {
    replay("log_loader", harness::log_loader, 8);
    harness::remove_scratch();
}

fn entry(pid: i64, last_offset: i64, txn: i64) -> SnapshotEntry {
    SnapshotEntry {
        producer_id: pid,
        producer_epoch: 3,
        last_sequence: 41,
        last_offset,
        offset_delta: 4,
        timestamp: 1_700_000_000_000,
        coordinator_epoch: 2,
        current_txn_first_offset: txn,
    }
}

/// The seed corpora: checked against the committed seeds (rewritten with `FUZZ_WRITE_SEEDS=1`).
#[test]
fn write_seeds() {
    let fuzz = fuzz_dir();
    let write = |target: &str, name: &str, bytes: &[u8]| {
        replay_inputs::seed(&fuzz, target, name, bytes);
    };
    write("snapshot", "empty", &encode_snapshot(&[]));
    write("snapshot", "one", &encode_snapshot(&[entry(7, 100, -1)]));
    write(
        "snapshot",
        "three-with-txn",
        &encode_snapshot(&[entry(1, 10, -1), entry(2, -1, 5), entry(9, 30, 25)]),
    );
    write(
        "snapshot",
        "unsorted-duplicate-pids",
        &encode_snapshot(&[entry(9, 30, -1), entry(1, 10, 3), entry(9, -1, 40)]),
    );
    // producer_state: 5 bytes per batch: [origin|kind|gap, pid|epoch, seq|records, ts, flags].
    // kind (bits 2..5): 0-2 data, 3 txn data, 4 COMMIT, 5 ABORT, 6 barrier, 7 odd ones.
    let b = |origin: u8, kind: u8, pid: u8, epoch: u8, seq: u8, flags: u8| {
        [origin | (kind << 2), pid | (epoch << 2), seq, 5, flags]
    };
    let seq: Vec<[u8; 5]> = vec![
        b(0, 0, 0, 2, 0, 0),
        b(0, 3, 1, 2, 1, 4),
        b(0, 0, 0, 2, 2, 0),
        b(0, 5, 1, 2, 0, 1),
        b(0, 6, 0, 0, 0, 0),
        b(0, 0, 0, 0, 0, 0),
    ];
    write("producer_state", "replication-txn-barrier", &seq.concat());
    let seq: Vec<[u8; 5]> = vec![
        b(3, 0, 0, 0, 0, 0),
        b(3, 0, 0, 0, 0, 0),
        b(3, 1, 0, 2, 0xa0, 0),
        b(3, 0, 0, 1, 0, 0),
        b(2, 4, 0, 2, 0, 2),
    ];
    write("producer_state", "client-dup-epochs", &seq.concat());
    let seq: Vec<[u8; 5]> = vec![
        b(2, 3, 0, 1, 0, 4),
        b(2, 3, 1, 1, 0, 4),
        b(2, 3, 2, 1, 0, 4),
        b(0, 6, 0, 0, 0, 8),
        b(2, 5, 1, 1, 0, 3),
        b(1, 4, 0, 0, 0, 0),
    ];
    write("producer_state", "barrier-aborts-open", &seq.concat());
    let seq: Vec<[u8; 5]> = vec![
        b(0, 7, 0, 0, 0, 0),
        b(0, 7, 1, 0, 0, 0x40),
        b(0, 7, 2, 0, 0, 0x80),
        b(0, 7, 3, 0, 0, 0xc0),
        b(1, 3, 3, 0, 0, 4),
        b(1, 0, 3, 0, 0, 0),
    ];
    write("producer_state", "odd-batches", &seq.concat());
    // log_loader: [flags (1 clean shutdown, 2 full, 4 recovery point, 8 log start), recovery
    // point, log start], then operations [op, file index, position (2 bytes), operands...]
    // on the directory's files sorted by name (op 0 flip, 1 cut, 2 append, 3 overwrite,
    // 4 delete, 5 zero-extend, 6 copy to a leftover name, 7 new file of a Kafka-like name).
    write("log_loader", "unclean", &[0, 0, 0]);
    write("log_loader", "clean", &[1, 0, 0]);
    write("log_loader", "full-from-recovery-point", &[2 | 4, 9, 0]);
    write("log_loader", "log-start-past-end", &[8, 0, 39]);
    write(
        "log_loader",
        "flip-in-first-log",
        &[0, 0, 0, 0, 1, 0, 90, 0x40],
    );
    write(
        "log_loader",
        "cut-last-files",
        &[0, 0, 0, 1, 200, 1, 0, 1, 201, 0, 30],
    );
    let mut garbage = vec![0, 0, 0, 2, 1, 0, 0, 64];
    garbage.extend((0..64u8).map(|i| i.wrapping_mul(37)));
    write("log_loader", "garbage-after-first-log", &garbage);
    write(
        "log_loader",
        "zero-filled-indexes",
        &[0, 0, 0, 5, 0, 0, 200, 5, 3, 0, 150],
    );
    write(
        "log_loader",
        "delete-snapshots-and-index",
        &[0, 0, 0, 4, 2, 0, 0, 4, 5, 0, 0],
    );
    write(
        "log_loader",
        "leftovers",
        &[0, 0, 0, 6, 1, 0, 0, 6, 6, 4, 0, 0, 7, 7, 0, 0, 5, 3, 9],
    );
    write("log_loader", "flip-snapshot", &[1, 0, 0, 0, 2, 0, 20, 0x01]);
}
