//! Replays the fuzz harnesses on stable, without a fuzzer: every seed in `fuzz/seeds/<target>/`
//! (the committed fixtures cut into batches) and every input that ever crashed or hung a target,
//! committed under `fuzz/regressions/<target>/`. Invariant: no harness assertion fails and nothing
//! panics for any committed input, so CI keeps the coverage the fuzzer found.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

#[path = "../../../src/fuzzing/parsers.rs"]
mod harness;

#[path = "../../../fuzz/replay.rs"]
mod replay_inputs;

fn replay(target: &str, f: fn(&[u8]), min_inputs: usize) {
    let fuzz = replay_inputs::fuzz_dir(env!("CARGO_MANIFEST_DIR"));
    replay_inputs::replay(&fuzz, target, f, min_inputs, &[0, 1, 12, 17, 61]);
}

#[test]
fn batch_parse_corpus() {
    replay("batch_parse", harness::batch_parse, 50);
}

#[test]
fn batch_iter_corpus() {
    replay("batch_iter", harness::batch_iter, 18);
}

#[test]
fn control_record_corpus() {
    replay("control_record", harness::control_record, 4);
}
