//! The zero-copy fetch, `Log::fetch_slices`, against the plain `Log::fetch` of the same bytes.
//!
//! Layout: one partition of ~64 MiB in 16 MiB segments (four sealed, read through their
//! read-only maps by `fetch`, and the active one), of batches of one record with a 1,000-byte
//! value (1,072 bytes each), written once under `SEGLOG_BENCH_DIR`, else `/dev/shm` when it
//! exists, else the temp directory, so both paths read the page cache. A pass is the 1 MiB
//! fetches that cover the log from offset 0 to its end, each fetch starting at the previous one's
//! next fetch offset (a fetch stops at its segment's end, so a pass is 69 fetches of 64 MiB in
//! all).
//!
//! Variants, each a whole pass, elements = bytes fetched:
//! - `fetch`: `Log::fetch` (the bytes copied into a new `Vec`), the baseline;
//! - `slices_read`: `Log::fetch_slices`, then the slice read into one reused 1 MiB buffer (what
//!   a server without `sendfile` does): copied out of a sealed segment's map, `pread` from the
//!   active one;
//! - `slices_read_chunked`: the same in 64 KiB reads into one reused 64 KiB buffer (a bounce
//!   buffer that stays in the cache);
//! - `slices_only`: `Log::fetch_slices` alone, the cost of producing the answer a server hands to
//!   `sendfile`;
//! - `slices_sendfile` (Linux): `Log::fetch_slices`, then `sendfile` of the slice to
//!   `/dev/null` (page references passed through the kernel's pipe and dropped, no byte copied:
//!   the floor of `sendfile` to a socket).
//!
//! Printed first: the medians of `SEGLOG_BENCH_PAIRS` (default 9) alternating rounds of the five
//! and the throughput ratio of each slice variant to `fetch` (one run);
//! criterion's `zero_copy` group follows (`-- no-criterion-group` skips it). Before timing, every
//! slice of a pass is checked to read the bytes `fetch` returns.
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use seglog::record_format::RecordBatchBuilder;
use seglog::segment_store::LogConfig;
use seglog::{Config, FetchIsolation, HighWatermark, Log};
use testkit::ManualClock;

const T0: i64 = 1_700_000_000_000;
const LOG_BYTES: u64 = 64 << 20;
const SEGMENT_BYTES: u64 = 16 << 20;
const FETCH_BYTES: usize = 1 << 20;
const VALUE_BYTES: usize = 1_000;
const CHUNK_BYTES: usize = 64 << 10;

fn scratch() -> tempfile::TempDir {
    if let Some(dir) = std::env::var_os("SEGLOG_BENCH_DIR") {
        return tempfile::tempdir_in(dir).expect("scratch");
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("scratch")
    } else {
        tempfile::tempdir().expect("scratch")
    }
}

/// The log of the layout above, in `dir`.
fn build(dir: &Path) -> Log {
    let config = Config::default()
        .with_clock(Arc::new(ManualClock::new(T0)))
        .with_high_watermark(HighWatermark::LogEnd)
        .with_log_config(LogConfig {
            segment_bytes: SEGMENT_BYTES,
            retention_ms: -1,
            ..LogConfig::default()
        });
    let log = Log::open(dir, config).expect("open");
    let value = [0x5au8; VALUE_BYTES];
    let mut written = 0u64;
    let mut i = 0i64;
    while written < LOG_BYTES {
        let mut b = RecordBatchBuilder::new(0);
        b.append(
            T0 + i,
            Some(format!("key-{i:08}").as_bytes()),
            Some(&value),
            &[],
        )
        .expect("record");
        let batch = b.build();
        log.append(&batch).expect("append");
        written += batch.len() as u64;
        i += 1;
    }
    log
}

/// The fetch offsets of one pass over the log, and the bytes each fetch returns in all.
fn pass_offsets(log: &Log) -> (Vec<i64>, u64) {
    let (mut offsets, mut bytes) = (Vec::new(), 0u64);
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let r = log
            .fetch(offset, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch");
        offsets.push(offset);
        bytes += r.records.len() as u64;
        offset = r.next_fetch_offset;
    }
    (offsets, bytes)
}

fn fetch_pass(log: &Log, offsets: &[i64]) -> Duration {
    let t = Instant::now();
    for &o in offsets {
        let r = log
            .fetch(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch");
        black_box(&r.records);
    }
    t.elapsed()
}

fn slices_read_pass(log: &Log, offsets: &[i64], buf: &mut [u8]) -> Duration {
    let t = Instant::now();
    for &o in offsets {
        let r = log
            .fetch_slices(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch_slices");
        if let Some(s) = &r.slice {
            black_box(s.read_into(buf).expect("read"));
        }
        black_box(&buf);
    }
    t.elapsed()
}

/// [`slices_read_pass`] with a bounce buffer of [`CHUNK_BYTES`]: each slice read in chunks
/// into the same small buffer (a server that copies a slice to a socket without `sendfile`).
fn slices_chunked_pass(log: &Log, offsets: &[i64], chunk: &mut [u8]) -> Duration {
    let t = Instant::now();
    for &o in offsets {
        let r = log
            .fetch_slices(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch_slices");
        let Some(s) = &r.slice else { continue };
        let mut at = 0u64;
        while at < s.len() {
            let n = s.read_at(at, chunk).expect("read");
            if n == 0 {
                break;
            }
            black_box(&chunk);
            at += n as u64;
        }
    }
    t.elapsed()
}

fn slices_only_pass(log: &Log, offsets: &[i64]) -> Duration {
    let t = Instant::now();
    for &o in offsets {
        let r = log
            .fetch_slices(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch_slices");
        black_box(&r.slice);
    }
    t.elapsed()
}

/// `sendfile` of each slice to `/dev/null` (Linux): the kernel takes references to the
/// page-cache pages and the sink drops them, no byte is copied; the lower bound of handing the
/// slice to `sendfile` on a socket.
#[cfg(target_os = "linux")]
fn slices_sendfile_pass(log: &Log, offsets: &[i64], sink: &std::fs::File) -> Duration {
    let t = Instant::now();
    for &o in offsets {
        let r = log
            .fetch_slices(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch_slices");
        let Some(s) = &r.slice else { continue };
        let fd = s.as_fd().expect("a real file");
        let (mut position, mut left) = (s.position(), s.len() as usize);
        while left > 0 {
            let n = rustix::fs::sendfile(sink, fd, Some(&mut position), left).expect("sendfile");
            if n == 0 {
                break;
            }
            left -= n;
        }
        black_box(left);
    }
    t.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn bench(c: &mut Criterion) {
    let tmp = scratch();
    let log = build(&tmp.path().join("zero-copy-0"));
    let (offsets, bytes) = pass_offsets(&log);
    let mut buf = vec![0u8; FETCH_BYTES];
    // Every slice reads the bytes the plain fetch returns.
    for &o in &offsets {
        let r = log
            .fetch(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch");
        let s = log
            .fetch_slices(o, FETCH_BYTES, FetchIsolation::HighWatermark, true)
            .expect("fetch_slices");
        let n = s
            .slice
            .as_ref()
            .map_or(0, |s| s.read_into(&mut buf).expect("read"));
        assert!(buf.get(..n) == Some(&r.records[..]), "offset {o}");
    }
    let pairs: usize = std::env::var("SEGLOG_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    #[cfg(target_os = "linux")]
    let sink = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let (mut plain, mut read, mut chunked, mut only, mut sent) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        plain.push(fetch_pass(&log, &offsets).as_secs_f64());
        read.push(slices_read_pass(&log, &offsets, &mut buf).as_secs_f64());
        chunked.push(slices_chunked_pass(&log, &offsets, &mut chunk).as_secs_f64());
        only.push(slices_only_pass(&log, &offsets).as_secs_f64());
        #[cfg(target_os = "linux")]
        sent.push(slices_sendfile_pass(&log, &offsets, &sink).as_secs_f64());
    }
    let (p, r, o, f) = (median(plain), median(read), median(only), median(sent));
    let k = median(chunked);
    let mib = bytes as f64 / f64::from(1 << 20);
    eprintln!(
        "zero_copy: {} fetches of up to 1 MiB, {mib:.1} MiB per pass, in {}; medians of {pairs} \
         rounds: fetch {:.2} ms ({:.0} MiB/s), slices_read {:.2} ms ({:.0} MiB/s), \
         slices_read_chunked {:.2} ms ({:.0} MiB/s), slices_only {:.3} ms, slices_sendfile (to \
         /dev/null, Linux) {:.3} ms; throughput slices_read / fetch {:.2}x, slices_read_chunked / \
         fetch {:.2}x, slices_only / fetch {:.1}x, slices_sendfile / fetch {:.1}x",
        offsets.len(),
        tmp.path().display(),
        p * 1e3,
        mib / p,
        r * 1e3,
        mib / r,
        k * 1e3,
        mib / k,
        o * 1e3,
        f * 1e3,
        p / r,
        p / k,
        p / o,
        p / f,
    );

    let mut g = c.benchmark_group("zero_copy");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("fetch", |b| b.iter(|| fetch_pass(&log, &offsets)));
    g.bench_function("slices_read", |b| {
        b.iter(|| slices_read_pass(&log, &offsets, &mut buf))
    });
    g.bench_function("slices_read_chunked", |b| {
        b.iter(|| slices_chunked_pass(&log, &offsets, &mut chunk))
    });
    g.bench_function("slices_only", |b| {
        b.iter(|| slices_only_pass(&log, &offsets))
    });
    #[cfg(target_os = "linux")]
    g.bench_function("slices_sendfile", |b| {
        b.iter(|| slices_sendfile_pass(&log, &offsets, &sink))
    });
    g.finish();
    log.close().expect("close");
}

criterion_group!(benches, bench);
criterion_main!(benches);
