//! The fuzzing entry point for whole partitions, in memory against real files: each input of
//! the `partition` seed corpus (`fuzz/seeds/partition/`, the partitions the nightly fuzz target
//! starts from) run by `seglog::fuzzing::partition` (a fresh `SimulatedFs` per input, nothing
//! on the real file system) and by `seglog::fuzzing::partition_on_disk` (the same input laid out
//! as real files under `/dev/shm`, a tmpfs, when it exists, and opened through the real file
//! system: what a file-based fuzz target does per input).
//!
//! Each input is two opens (the second after a clean close), a plan, and reads at both
//! isolation levels. Printed first: the time per input of each, as the medians of
//! `SEGLOG_BENCH_PAIRS` (default 15) alternating passes over the corpus, and their ratio
//! (file-based / in memory, one run); criterion's `fuzzing_partition/{in_memory,on_disk}`
//! groups follow (elements = inputs).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seglog::fuzzing;

fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/partition");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fuzz/seeds/partition")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read(p).expect("seed"))
        .collect()
}

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("scratch")
    } else {
        tempfile::tempdir().expect("scratch")
    }
}

fn pass(inputs: &[Vec<u8>], disk: Option<&Path>) -> Duration {
    let t = Instant::now();
    for input in inputs {
        match disk {
            None => {
                std::hint::black_box(fuzzing::partition(input));
            }
            Some(d) => {
                std::hint::black_box(fuzzing::partition_on_disk(input, d));
            }
        }
    }
    t.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let inputs = corpus();
    let tmp = scratch();
    let disk = tmp.path().join("log");
    let pairs: usize = std::env::var("SEGLOG_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    // Warm-up, and both kinds agree on every input.
    for input in &inputs {
        assert_eq!(
            fuzzing::partition(input),
            fuzzing::partition_on_disk(input, &disk)
        );
    }
    let n = inputs.len() as f64;
    let (mut mem, mut file) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        mem.push(pass(&inputs, None).as_secs_f64() * 1e6 / n);
        file.push(pass(&inputs, Some(&disk)).as_secs_f64() * 1e6 / n);
    }
    let ratios: Vec<f64> = mem.iter().zip(&file).map(|(m, f)| f / m).collect();
    let (m, f) = (median(mem), median(file));
    eprintln!(
        "fuzzing partition: {} inputs, in memory {m:.1} µs per input, on files in {} {f:.1} µs \
         per input; file-based / in memory {:.2}x (median of {pairs} pairs; min {:.2}, max {:.2})",
        inputs.len(),
        tmp.path().display(),
        median(ratios.clone()),
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );

    let mut g = c.benchmark_group("fuzzing_partition");
    g.throughput(Throughput::Elements(inputs.len() as u64));
    g.bench_function("in_memory", |b| b.iter(|| pass(&inputs, None)));
    g.bench_function("on_disk", |b| b.iter(|| pass(&inputs, Some(&disk))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
