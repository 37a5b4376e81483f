//! Replaying committed fuzz inputs on stable, shared by the replay tests of every crate
//! (`#[path]`-included): every seed in `fuzz/seeds/<target>/` and every committed finding in
//! `fuzz/regressions/<target>/`, plus several prefixes of each (truncated files are the common
//! case), through a harness function.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::path::{Path, PathBuf};

/// The `fuzz/` directory, given a crate's manifest directory and how deep it sits below the root.
pub fn fuzz_dir(manifest_dir: &str) -> PathBuf {
    let mut p = Path::new(manifest_dir).to_path_buf();
    while !p.join("fuzz").join("seeds").is_dir() {
        assert!(p.pop(), "no fuzz/seeds above {manifest_dir}");
    }
    p.join("fuzz")
}

/// Every committed input of `target`, sorted by path (dot files skipped).
pub fn inputs(fuzz: &Path, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["seeds", "regressions"] {
        let Ok(rd) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
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

/// Runs `f` on every committed input of `target` and on the prefixes of each at the lengths
/// `cuts` (clamped) plus half and all-but-one byte; at least `min_inputs` inputs must exist.
pub fn replay(fuzz: &Path, target: &str, f: fn(&[u8]), min_inputs: usize, cuts: &[usize]) {
    let inputs = inputs(fuzz, target);
    assert!(
        inputs.len() >= min_inputs,
        "{target}: expected at least {min_inputs} committed inputs, found {}",
        inputs.len()
    );
    for (path, bytes) in &inputs {
        eprintln!("{target}: {}", path.display());
        f(bytes);
        let extra = [bytes.len() / 2, bytes.len().saturating_sub(1)];
        for &cut in cuts.iter().chain(&extra) {
            f(&bytes[..cut.min(bytes.len())]);
        }
    }
}

/// A seed built from files the crates write: with `FUZZ_WRITE_SEEDS=1` it is (re)written to
/// `fuzz/seeds/<target>/<name>`; otherwise the committed seed must equal `bytes`, so a format
/// change that makes the seeds stale fails the test instead of silently weakening the corpus.
pub fn seed(fuzz: &Path, target: &str, name: &str, bytes: &[u8]) {
    let path = fuzz.join("seeds").join(target).join(name);
    if std::env::var_os("FUZZ_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
    } else {
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (regenerate with FUZZ_WRITE_SEEDS=1)",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} is stale: regenerate with FUZZ_WRITE_SEEDS=1",
            path.display()
        );
    }
}
