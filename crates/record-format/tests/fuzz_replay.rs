//! Replays the fuzz harnesses on stable, without a fuzzer: every seed in `fuzz/seeds/<target>/`
//! (the committed fixtures cut into batches) and every input that ever crashed or hung a target,
//! committed under `fuzz/regressions/<target>/`. Invariant: no harness assertion fails and nothing
//! panics for any committed input, so CI keeps the coverage the fuzzer found.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

#[path = "../../../fuzz/harness.rs"]
mod harness;

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz"));
    let mut out = Vec::new();
    for dir in ["seeds", "regressions"] {
        let d = root.join(dir).join(target);
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
            {
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            out.push((p, bytes));
        }
    }
    out.sort();
    out
}

fn replay(target: &str, f: fn(&[u8]), min_inputs: usize) {
    let inputs = inputs(target);
    assert!(
        inputs.len() >= min_inputs,
        "{target}: expected at least {min_inputs} committed inputs, found {}",
        inputs.len()
    );
    for (path, bytes) in &inputs {
        eprintln!("{target}: {}", path.display());
        f(bytes);
        // Every prefix of a seed must be handled too (truncated files are the common case).
        for cut in [
            0,
            1,
            12,
            17,
            61,
            bytes.len() / 2,
            bytes.len().saturating_sub(1),
        ] {
            f(&bytes[..cut.min(bytes.len())]);
        }
    }
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
