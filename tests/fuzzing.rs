//! The `seglog::fuzzing` entry points over a corpus built from the committed fixtures
//! (`testdata/`), with byte flips, cuts and CRC-fixed mutations, so that plain `cargo test`
//! exercises every entry point the fuzz targets call. Also prints the throughput of the
//! in-memory partition entry point against the same inputs on real files (no timing assertion;
//! the figure is in docs/testing.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use seglog::fuzzing::{self, FileKind};
use seglog::record_format::Batches;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.log` under `testdata/`, sorted.
fn fixture_logs() -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![repo().join("testdata")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                let bytes = std::fs::read(&p).unwrap();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "fixtures missing: {}", out.len());
    out
}

/// The whole batches of a `.log`'s bytes.
fn batches_of(log: &[u8]) -> Vec<Vec<u8>> {
    Batches::new(log, 0)
        .map_while(Result::ok)
        .map(|e| e.as_bytes().to_vec())
        .collect()
}

/// Rewrites a v2 batch's CRC-32C after a mutation.
fn fix_crc(b: &mut [u8]) {
    if b.len() >= 21 && b[16] == 2 {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Deterministic mutants of `b`: single-byte flips at a spread of positions, with and without
/// the CRC recomputed, and cuts.
fn mutants(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let step = (b.len() / 24).max(1);
    for i in (0..b.len()).step_by(step) {
        let mut m = b.to_vec();
        m[i] ^= 0x41;
        out.push(m.clone());
        fix_crc(&mut m);
        out.push(m);
    }
    for cut in [0, 11, 12, 60, 61, b.len() / 2, b.len().saturating_sub(1)] {
        out.push(b[..cut.min(b.len())].to_vec());
    }
    out
}

#[test]
fn record_batch_over_the_fixture_batches_and_their_mutants() {
    let (mut inputs, mut clean) = (0usize, 0usize);
    for (_, log) in fixture_logs() {
        for b in batches_of(&log) {
            let v = fuzzing::batch_verdict(&b);
            clean += usize::from(v.error.is_none());
            fuzzing::record_batch(&b);
            for m in mutants(&b) {
                fuzzing::record_batch(&m);
                inputs += 1;
            }
        }
    }
    eprintln!("record_batch: {inputs} mutants, {clean} fixture batches decode whole");
    assert!(
        clean > 50 && inputs > 1000,
        "{clean} clean, {inputs} inputs"
    );
}

#[test]
fn log_bytes_over_the_fixture_logs_and_their_mutants() {
    let mut n = 0;
    for (_, log) in fixture_logs() {
        fuzzing::log_bytes(&log);
        for m in mutants(&log) {
            fuzzing::log_bytes(&m);
            n += 1;
        }
    }
    assert!(n > 500, "{n} inputs");
}

/// Partition inputs: each fixture `.log` alone under each flag combination, with a flipped byte,
/// and as two segments (split at a batch boundary) with a leader-epoch checkpoint.
fn partition_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (_, log) in fixture_logs() {
        let batches = batches_of(&log);
        for flags in [0u8, 1, 2, 4] {
            out.push(fuzzing::partition_input(flags, 3, &[(FileKind::Log, &log)]));
        }
        let mut flipped = log.clone();
        if !flipped.is_empty() {
            let i = flipped.len() * 2 / 3;
            flipped[i] ^= 0x10;
        }
        out.push(fuzzing::partition_input(0, 0, &[(FileKind::Log, &flipped)]));
        if batches.len() >= 2 {
            let half = batches.len() / 2;
            let a: Vec<u8> = batches[..half].concat();
            let b: Vec<u8> = batches[half..].concat();
            out.push(fuzzing::partition_input(
                0,
                0,
                &[
                    (FileKind::Log, &a),
                    (FileKind::LeaderEpochCheckpoint, b"0\n1\n0 0\n"),
                    (FileKind::Log, &b),
                ],
            ));
        }
    }
    out
}

/// With `FUZZ_WRITE_SEEDS=1`, writes the corpora of the new fuzz targets to
/// `fuzz/seeds/<target>/` (the nightly workflow starts from them).
#[test]
fn write_seeds_when_asked() {
    if std::env::var_os("FUZZ_WRITE_SEEDS").is_none() {
        return;
    }
    let logs = fixture_logs();
    let batches: Vec<Vec<u8>> = logs.iter().flat_map(|(_, l)| batches_of(l)).collect();
    let partitions = partition_corpus();
    let dirs: Vec<Vec<u8>> = partitions
        .chunks(3)
        .map(|c| fuzzing::log_dir_input(0, c))
        .collect();
    let logs: Vec<Vec<u8>> = logs.into_iter().map(|(_, l)| l).collect();
    for (target, inputs) in [
        ("record_batch", &batches),
        ("log_bytes", &logs),
        ("partition", &partitions),
        ("log_dir", &dirs),
    ] {
        let dir = repo().join("fuzz/seeds").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let small: Vec<&Vec<u8>> = inputs.iter().filter(|i| i.len() <= 4096).collect();
        let step = (small.len() / 12).max(1);
        for (i, input) in small.iter().step_by(step).take(12).enumerate() {
            std::fs::write(dir.join(format!("fixture-{i:02}")), input).unwrap();
        }
    }
}

#[test]
fn partition_over_the_fixture_logs_in_memory() {
    let corpus = partition_corpus();
    let mut opened = 0;
    let mut records = 0;
    for input in &corpus {
        let o = fuzzing::partition(input);
        opened += usize::from(o.opened);
        records += o.records;
    }
    // A log of whole Kafka-written batches opens with all its records readable.
    let (_, plain) = fixture_logs()
        .into_iter()
        .find(|(p, _)| p.ends_with("kafka-clients/plain.log"))
        .unwrap();
    let o = fuzzing::partition(&fuzzing::partition_input(0, 0, &[(FileKind::Log, &plain)]));
    let want: i64 = batches_of(&plain)
        .iter()
        .map(|b| {
            i64::from_be_bytes(b[..8].try_into().unwrap())
                + i64::from(i32::from_be_bytes(b[23..27].try_into().unwrap()))
                + 1
        })
        .max()
        .unwrap();
    assert!(o.opened);
    assert_eq!(o.log_end_offset, want);
    eprintln!(
        "partition: {} inputs, {opened} opened, {records} records read",
        corpus.len()
    );
    assert!(
        opened * 2 > corpus.len(),
        "{opened} of {} opened",
        corpus.len()
    );
}

#[test]
fn log_dir_over_the_fixture_logs_in_memory() {
    let corpus = partition_corpus();
    let mut loaded = 0;
    for (i, chunk) in corpus.chunks(3).enumerate() {
        loaded += fuzzing::log_dir(&fuzzing::log_dir_input(i as u8 & 1, chunk));
    }
    assert!(loaded > corpus.len() / 2, "{loaded} partitions loaded");
}

/// The in-memory partition entry point against the same inputs opened from real files (what
/// the fuzz targets did before): inputs per second each, printed.
#[test]
fn partition_in_memory_against_on_disk_throughput() {
    let corpus = partition_corpus();
    // On `/dev/shm` when there is one, as the file-based fuzz harnesses do (fsyncs cost nothing).
    let shm = Path::new("/dev/shm");
    let scratch = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let disk = scratch.path().join("log");
    let t = Instant::now();
    let mut a = Vec::new();
    for input in &corpus {
        a.push(fuzzing::partition(input));
    }
    let mem = t.elapsed();
    let t = Instant::now();
    let mut b = Vec::new();
    for input in &corpus {
        b.push(fuzzing::partition_on_disk(input, &disk));
    }
    let file = t.elapsed();
    assert_eq!(a, b, "the in-memory and the file-based runs disagree");
    let per_s = |d: std::time::Duration| corpus.len() as f64 / d.as_secs_f64();
    eprintln!(
        "partition: {} inputs; in memory {:.0} inputs/s ({:.1} µs each), on files in {} {:.0} inputs/s ({:.1} µs each)",
        corpus.len(),
        per_s(mem),
        mem.as_secs_f64() * 1e6 / corpus.len() as f64,
        Path::new(scratch.path()).display(),
        per_s(file),
        file.as_secs_f64() * 1e6 / corpus.len() as f64,
    );
}
