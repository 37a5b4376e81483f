//! Time per segment against the number of segments of one partition: `seglog verify`'s plan
//! (`LogLoader::plan_audited`, full) and the whole `seglog recover --full` of a partition
//! (`LogLoader::load` with `full: true`, closed outside the timing), each at 1,000 segments and at
//! `SEGLOG_BENCH_SCALING_SEGMENTS` (default 100,000) segments of one tiny batch each
//! (`testkit::write_tiny_segments`). Planning is O(n log n), so the time per segment should stay
//! flat (goal: within 1.5×).
//!
//! The ratio is measured in one run: `SEGLOG_BENCH_PAIRS` (default 5) back-to-back pairs (the
//! small partition, then the large one), printed as the median of
//! `(large time / large segments) / (small time / small segments)`; criterion's own groups follow
//! with elements (segments) per second.
//!
//! `recover --full` holds a bounded number of segments open whatever their count, so it runs at
//! the same large size (`SEGLOG_BENCH_SCALING_RECOVER_SEGMENTS`, default the large size).
//!
//! The partitions are generated once under `/dev/shm` (a tmpfs) when it exists, else under
//! `<target>/bench-data/`, as `segments-tiny-<n>/orders-0` (`verify`: never changed) and
//! `segments-tiny-<n>-recover/orders-0` (recovered once before timing, so every timed recovery
//! starts from the same files).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use recovery::{LoadOptions, LogLoader};

const SMALL: u32 = 1_000;
const COMPLETE_MARKER: &str = "generation-complete";

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn large() -> u32 {
    env_u32("SEGLOG_BENCH_SCALING_SEGMENTS", 100_000)
}

fn large_recover() -> u32 {
    env_u32("SEGLOG_BENCH_SCALING_RECOVER_SEGMENTS", large())
}

fn root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.join("seglog-bench-data");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    target.join("bench-data")
}

/// The partition of `n` tiny segments for `what` ("" or "-recover"), generated if missing.
fn partition(n: u32, what: &str) -> PathBuf {
    let top = root().join(format!("segments-tiny-{n}{what}"));
    let dir = top.join("orders-0");
    if !top.join(COMPLETE_MARKER).exists() {
        let started = Instant::now();
        let _ = std::fs::remove_dir_all(&top);
        testkit::write_tiny_segments(&dir, n).expect("generate segments");
        if !what.is_empty() {
            recover(&dir);
        }
        std::fs::write(top.join(COMPLETE_MARKER), "").expect("marker");
        eprintln!(
            "generated {} ({n} segments) in {:.1?}",
            dir.display(),
            started.elapsed()
        );
    }
    dir
}

fn verify(dir: &Path) -> Duration {
    let opts = LoadOptions::for_partition_dir(dir, true);
    let started = Instant::now();
    let plan = LogLoader::plan_audited(dir, &opts).expect("plan");
    let took = started.elapsed();
    assert!(plan.log_end_offset > 0);
    took
}

fn recover(dir: &Path) -> Duration {
    let opts = LoadOptions::for_partition_dir(dir, true);
    let started = Instant::now();
    let (log, _) = LogLoader::load(dir, &opts).expect("recover");
    let took = started.elapsed();
    log.close().expect("close");
    took
}

/// The median over back-to-back pairs of the time per segment at `large` against at `SMALL`.
fn per_segment_ratio(name: &str, large: u32, run: fn(&Path) -> Duration, small: &Path, big: &Path) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let pairs = env_u32("SEGLOG_BENCH_PAIRS", 5).max(1);
    let mut ratios: Vec<f64> = Vec::new();
    let (mut small_us, mut large_us) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        let s = run(small).as_secs_f64() / f64::from(SMALL);
        let l = run(big).as_secs_f64() / f64::from(large);
        small_us.push(s * 1e6);
        large_us.push(l * 1e6);
        ratios.push(l / s);
    }
    for v in [&mut ratios, &mut small_us, &mut large_us] {
        v.sort_by(f64::total_cmp);
    }
    let m = ratios.len() / 2;
    eprintln!(
        "{name}: time per segment at {large} segments / at {SMALL}: median {:.2} over {pairs} \
         back-to-back pairs (min {:.2}, max {:.2}; medians {:.2} us and {:.2} us per segment)",
        ratios[m],
        ratios[0],
        ratios[ratios.len() - 1],
        large_us[m],
        small_us[m]
    );
}

fn segments_scaling(c: &mut Criterion) {
    let large = large();
    let large_recover = large_recover();
    let (vs, vl) = (partition(SMALL, ""), partition(large, ""));
    per_segment_ratio("verify plan", large, verify, &vs, &vl);
    let (rs, rl) = (
        partition(SMALL, "-recover"),
        partition(large_recover, "-recover"),
    );
    per_segment_ratio("recover --full", large_recover, recover, &rs, &rl);

    let mut g = c.benchmark_group("segments_scaling");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    for (n, dir) in [(SMALL, &vs), (large, &vl)] {
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::new("verify_plan", n), dir, |b, dir| {
            b.iter_custom(|iters| (0..iters).map(|_| verify(dir)).sum())
        });
    }
    for (n, dir) in [(SMALL, &rs), (large_recover, &rl)] {
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::new("recover_full", n), dir, |b, dir| {
            b.iter_custom(|iters| (0..iters).map(|_| recover(dir)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, segments_scaling);
criterion_main!(benches);
