//! Benchmarks of the record-format layer (filled in with the batch parser).
use criterion::{criterion_group, criterion_main, Criterion};

fn crc_baseline(c: &mut Criterion) {
    let data = vec![7u8; 1 << 20];
    c.bench_function("crc32c_1MiB", |b| b.iter(|| crc32c::crc32c(&data)));
}

criterion_group!(benches, crc_baseline);
criterion_main!(benches);
