//! Replays the segment-store fuzz harnesses (`src/fuzzing/store.rs`, public as `seglog::fuzzing::{index_files, segment_recover}`) on stable, without a fuzzer:
//! every seed in `fuzz/seeds/<target>/` and every input that ever failed a target, committed under
//! `fuzz/regressions/<target>/`. Invariant: no harness assertion fails for any committed input or
//! any of its prefixes, so CI keeps what the fuzzer found.
//!
//! `FUZZ_WRITE_SEEDS=1 cargo test -p segment-store --test fuzz_replay` regenerates
//! the seeds from files written by this crate.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

#[path = "../../../src/fuzzing/store.rs"]
mod harness;

use std::path::PathBuf;
use std::sync::Arc;

use segment_store::internals::FilePosition;
use segment_store::{AbortedTxn, DirLock, OffsetIndex, StdFs, TimeIndex, TransactionIndex};

#[path = "../../../fuzz/replay.rs"]
mod replay_inputs;

fn fuzz_dir() -> PathBuf {
    replay_inputs::fuzz_dir(env!("CARGO_MANIFEST_DIR"))
}

fn replay(target: &str, f: fn(&[u8]), min_inputs: usize) {
    replay_inputs::replay(&fuzz_dir(), target, f, min_inputs, &[0, 1, 3, 4, 12, 37]);
}

/// One test for both targets: they share the per-process scratch directory, removed at the end.
#[test]
fn index_files_and_segment_recover_corpora() {
    replay("index_files", harness::index_files, 6);
    replay("segment_recover", harness::segment_recover, 4);
    harness::remove_temp_root();
}

/// The seed corpora, built from files this crate writes: checked against the committed seeds
/// (rewritten with `FUZZ_WRITE_SEEDS=1`).
#[test]
fn write_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = DirLock::acquire(tmp.path()).unwrap();
    let fuzz = fuzz_dir();
    let write = |target: &str, name: &str, bytes: &[u8]| {
        replay_inputs::seed(&fuzz, target, name, bytes);
    };
    // index_files: [kind, base selector, target seed, file...]; base selector 1 = offset 100.
    for (name, n) in [("offset-empty", 0u32), ("offset-3", 3), ("offset-40", 40)] {
        let p = tmp.path().join(format!("{name}.index"));
        let mut idx = OffsetIndex::open(&lock, &p, 100, 4096, true).unwrap();
        for i in 0..n {
            idx.append(100 + i64::from(i) * 3 + 2, FilePosition(i * 500))
                .unwrap();
        }
        idx.close().unwrap();
        let mut input = vec![0, 1, 7];
        input.extend(std::fs::read(&p).unwrap());
        write("index_files", name, &input);
    }
    for (name, n) in [("time-1", 1i64), ("time-5", 5), ("time-30", 30)] {
        let p = tmp.path().join(format!("{name}.timeindex"));
        let mut idx = TimeIndex::open(&lock, &p, 100, 4096, true).unwrap();
        for i in 0..n {
            idx.maybe_append(1_700_000_000_000 + i * 1000, 100 + i * 4, false)
                .unwrap();
        }
        idx.close().unwrap();
        let mut input = vec![1, 1, 9];
        input.extend(std::fs::read(&p).unwrap());
        write("index_files", name, &input);
    }
    for (name, n) in [("txn-2", 2i64), ("txn-6", 6)] {
        let p = tmp.path().join(format!("{name}.txnindex"));
        let mut idx = TransactionIndex::open(Arc::new(StdFs), &p, 100).unwrap();
        for i in 0..n {
            idx.append(&AbortedTxn::new(
                i % 3,
                100 + i * 10,
                105 + i * 10,
                101 + i * 10,
            ))
            .unwrap();
        }
        idx.flush().unwrap();
        let mut input = vec![2, 1, 0];
        input.extend(std::fs::read(&p).unwrap());
        write("index_files", name, &input);
    }
    // segment_recover: [base sel, interval/8, batches-1, (shape, value len)*, script...].
    write(
        "segment_recover",
        "clean-4",
        &[0, 2, 3, 0x21, 10, 0x02, 40, 0x13, 0, 0x80, 63],
    );
    write(
        "segment_recover",
        "flip-crc",
        &[1, 0, 2, 0x21, 10, 0x03, 40, 0x20, 0, 0, 0, 40, 0x55],
    );
    write(
        "segment_recover",
        "torn-tail",
        &[0, 1, 4, 1, 5, 2, 6, 3, 7, 0, 8, 1, 1, 0x01, 0x00, 0xf0],
    );
    write(
        "segment_recover",
        "garbage",
        &[2, 4, 1, 0x33, 20, 1, 30, 0xfe, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
    );
    write(
        "segment_recover",
        "base-offset-flip",
        &[0, 0, 3, 0, 1, 0, 1, 0, 1, 0, 0, 0x0d, 0x80, 0, 0, 0],
    );
}
