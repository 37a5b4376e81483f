//! The four codecs against Kafka's framings and against hostile input.
//!
//! Invariants checked here:
//! - what we write decodes back (every codec, empty to 1 MiB, random and compressible input), and
//!   carries the exact header bytes Kafka writes (gzip, xerial snappy, Kafka's lz4 frame, zstd);
//! - what Kafka (kafka-clients 4.3.0, Java) and kafka-python 2.3.3 wrote in `testdata/` decodes to
//!   exactly `recordsCount` length-prefixed records;
//! - decompression never panics, reports corrupt input as `Decompression`, output past the limit
//!   as `DecompressedTooLarge`, and never allocates more than the limit plus one block, whatever
//!   sizes the input claims (enforced with an allocation budget on the test allocator).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::path::PathBuf;

use proptest::prelude::*;
use record_format::internals::{
    compress, compress_with_level, decompress, decompress_snappy_raw, decompress_snappy_xerial,
    lz4_header_checksum, lz4_header_checksum_broken, GZIP_HEADER, LZ4_FRAME_MAGIC, LZ4_KAFKA_BD,
    LZ4_KAFKA_FLG, XERIAL_HEADER, XERIAL_MAGIC,
};
use record_format::FormatErrorKind;
use record_format::{CompressionType, DecodeLimits};
use testkit::XorShift;

/// Memory budgets without `unsafe` of our own: the test binary's allocator is `cap::Cap`, and
/// [`alloc_gate::within`] lowers its limit for the duration of one call, so any allocation past
/// the budget fails and aborts this test binary (a loud failure). Every test in this binary takes
/// [`alloc_gate::serial`] first, so no other test allocates while a budget is in force.
mod alloc_gate {
    use std::alloc::System;
    use std::sync::{Mutex, MutexGuard};

    use cap::Cap;

    #[global_allocator]
    static ALLOC: Cap<System> = Cap::new(System, usize::MAX);
    static SERIAL: Mutex<()> = Mutex::new(());

    /// Serialises the tests of this binary.
    pub fn serial() -> MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` allowing at most `budget` bytes more than are live now.
    pub fn within<T>(budget: usize, f: impl FnOnce() -> T) -> T {
        let base = ALLOC.allocated();
        ALLOC
            .set_limit(base.saturating_add(budget))
            .expect("limit is above what is allocated");
        let r = f();
        ALLOC.set_limit(usize::MAX).expect("lifting the limit");
        r
    }
}

use alloc_gate::{serial, within};

const CODECS: [CompressionType; 4] = [
    CompressionType::Gzip,
    CompressionType::Snappy,
    CompressionType::Lz4,
    CompressionType::Zstd,
];

const MIB: usize = 1024 * 1024;

fn limits(max_decompressed_bytes: usize) -> DecodeLimits {
    DecodeLimits {
        max_decompressed_bytes,
    }
}

/// Deterministic pseudo-random bytes (the testkit's generator), incompressible for every codec.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_be_bytes());
    }
    v.truncate(len);
    v
}

/// Record-like text that compresses well.
fn compressible_bytes(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while v.len() < len {
        v.extend_from_slice(format!("key-{i} value line {} lorem ipsum;", i % 97).as_bytes());
        i += 1;
    }
    v.truncate(len);
    v
}

fn is_corrupt(r: &Result<Vec<u8>, FormatErrorKind>, codec: CompressionType) -> bool {
    matches!(r, Err(FormatErrorKind::Decompression { codec: c, reason }) if *c == codec && !reason.is_empty())
}

fn is_too_large(
    r: &Result<Vec<u8>, FormatErrorKind>,
    codec: CompressionType,
    limit: usize,
) -> bool {
    matches!(r, Err(FormatErrorKind::DecompressedTooLarge { codec: c, limit: l }) if *c == codec && *l == limit)
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

#[test]
fn round_trip_every_codec() {
    let _serial = serial();
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("one byte", vec![42]),
        ("small", b"hello, kafka".to_vec()),
        ("1 MiB random", random_bytes(MIB, 7)),
        ("1 MiB compressible", compressible_bytes(MIB)),
        ("1 MiB + 1 zeros", vec![0; MIB + 1]),
    ];
    for codec in CODECS.into_iter().chain([CompressionType::None]) {
        for (name, input) in &inputs {
            let compressed = compress(codec, input);
            let back = decompress(codec, &compressed, &DecodeLimits::default())
                .unwrap_or_else(|e| panic!("{codec:?} {name}: {e}"));
            assert!(back == *input, "{codec:?} {name}: round trip differs");
            if name.contains("compressible") && codec != CompressionType::None {
                assert!(
                    compressed.len() < input.len() / 3,
                    "{codec:?} did not compress"
                );
            }
        }
    }
}

#[test]
fn round_trip_exactly_at_the_limit() {
    let _serial = serial();
    let input = compressible_bytes(100_000);
    for codec in CODECS.into_iter().chain([CompressionType::None]) {
        let c = compress(codec, &input);
        assert_eq!(decompress(codec, &c, &limits(input.len())).unwrap(), input);
        let r = decompress(codec, &c, &limits(input.len() - 1));
        assert!(is_too_large(&r, codec, input.len() - 1), "{codec:?}: {r:?}");
    }
}

#[test]
fn levels_round_trip_and_keep_the_header() {
    let _serial = serial();
    let input = compressible_bytes(200_000);
    for level in [-1, 0, 1, 5, 9, 100, i32::MIN] {
        let c = compress_with_level(CompressionType::Gzip, &input, level);
        assert_eq!(c[..10], GZIP_HEADER, "gzip level {level}");
        assert_eq!(
            decompress(CompressionType::Gzip, &c, &DecodeLimits::default()).unwrap(),
            input
        );
    }
    for level in [i32::MIN, -5, 0, 1, 3, 19, 22, i32::MAX] {
        let c = compress_with_level(CompressionType::Zstd, &input, level);
        assert_eq!(
            decompress(CompressionType::Zstd, &c, &DecodeLimits::default()).unwrap(),
            input,
            "zstd level {level}"
        );
    }
    for codec in [
        CompressionType::Snappy,
        CompressionType::Lz4,
        CompressionType::None,
    ] {
        assert_eq!(
            compress_with_level(codec, &input, 9),
            compress(codec, &input)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Kafka-written fixtures
// ---------------------------------------------------------------------------------------------

fn testdata(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct FixtureBatch {
    position: usize,
    records_count: i32,
    records: Vec<u8>,
}

/// Splits a `.log` file into batches: `[61, 12 + batchLength)` is the records section.
fn batches(file: &[u8]) -> Vec<FixtureBatch> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < file.len() {
        let len = i32::from_be_bytes(file[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let batch = &file[pos..pos + 12 + len];
        out.push(FixtureBatch {
            position: pos,
            records_count: i32::from_be_bytes(batch[57..61].try_into().unwrap()),
            records: batch[61..].to_vec(),
        });
        pos += 12 + len;
    }
    assert_eq!(pos, file.len(), "batches must fill the file");
    out
}

/// A zig-zag varint (Kafka's `ByteUtils.readVarint`), returning value and bytes used.
fn varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut raw = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i64 ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

/// Counts length-prefixed records in a decompressed records section; `None` unless they fill it
/// exactly.
fn count_records(mut b: &[u8]) -> Option<i32> {
    let mut n = 0;
    while !b.is_empty() {
        let (len, used) = varint(b)?;
        let len = usize::try_from(len).ok()?;
        b = b.get(used + len..)?;
        n += 1;
    }
    Some(n)
}

fn codec_of(name: &str) -> CompressionType {
    match name {
        "gzip" => CompressionType::Gzip,
        "snappy" => CompressionType::Snappy,
        "lz4" => CompressionType::Lz4,
        "zstd" => CompressionType::Zstd,
        _ => unreachable!(),
    }
}

#[test]
fn decodes_kafka_written_batches() {
    let _serial = serial();
    for producer in ["kafka-clients", "kafka-python"] {
        for name in ["gzip", "snappy", "lz4", "zstd"] {
            let codec = codec_of(name);
            let file = testdata(&format!("{producer}/{name}.log"));
            let found = batches(&file);
            assert!(found.len() >= 3, "{producer}/{name}");
            for b in found {
                let out = decompress(codec, &b.records, &DecodeLimits::default())
                    .unwrap_or_else(|e| panic!("{producer}/{name} @{}: {e}", b.position));
                assert!(!out.is_empty());
                assert_eq!(
                    count_records(&out),
                    Some(b.records_count),
                    "{producer}/{name} @{}: records do not fill the decompressed section",
                    b.position
                );
                // Our writer's output decodes to the same records.
                let again = compress(codec, &out);
                assert_eq!(
                    decompress(codec, &again, &DecodeLimits::default()).unwrap(),
                    out
                );
            }
        }
    }
}

#[test]
fn our_headers_are_the_bytes_kafka_writes() {
    let _serial = serial();
    let first = |name: &str| batches(&testdata(&format!("kafka-clients/{name}.log"))).remove(0);

    // lz4: 04 22 4D 18 | FLG 60 | BD 40 | HC 82.
    assert_eq!(lz4_header_checksum(&[LZ4_KAFKA_FLG, LZ4_KAFKA_BD]), 0x82);
    let ours = compress(CompressionType::Lz4, b"some records");
    assert_eq!(ours[..7], [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
    let kafka = first("lz4");
    assert_eq!(ours[..7], kafka.records[..7]);
    assert_eq!(
        compress(CompressionType::Lz4, b"")[..],
        [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82, 0, 0, 0, 0]
    );

    // snappy: xerial magic, version 1, min compatible 1.
    let ours = compress(CompressionType::Snappy, b"some records");
    assert_eq!(ours[..16], XERIAL_HEADER);
    assert_eq!(ours[..16], first("snappy").records[..16]);
    assert_eq!(XERIAL_HEADER[..8], XERIAL_MAGIC);

    // gzip: Java's GZIPOutputStream header.
    let ours = compress(CompressionType::Gzip, b"some records");
    assert_eq!(ours[..10], GZIP_HEADER);
    assert_eq!(ours[..10], first("gzip").records[..10]);

    // zstd: magic, FHD 00 (no content size, no checksum, not single-segment), window 2 MiB (58).
    let kafka = first("zstd");
    let content = decompress(
        CompressionType::Zstd,
        &kafka.records,
        &DecodeLimits::default(),
    )
    .unwrap();
    let ours = compress(CompressionType::Zstd, &content);
    assert_eq!(ours[..6], [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58]);
    assert_eq!(ours[..6], kafka.records[..6]);
}

/// Decompressed length of each xerial chunk.
fn xerial_chunk_lens(stream: &[u8]) -> Vec<usize> {
    let mut lens = Vec::new();
    let mut p = 16;
    while p < stream.len() {
        let len = i32::from_be_bytes(stream[p..p + 4].try_into().unwrap()) as usize;
        lens.push(snap::raw::decompress_len(&stream[p + 4..p + 4 + len]).unwrap());
        p += 4 + len;
    }
    lens
}

/// For each block of a 7-byte-header lz4 frame: stored uncompressed?
fn lz4_stored_flags(frame: &[u8]) -> Vec<bool> {
    let mut flags = Vec::new();
    let mut p = 7;
    loop {
        let mut word: [u8; 4] = frame[p..p + 4].try_into().unwrap();
        word.reverse();
        let word = u32::from_be_bytes(word);
        if word == 0 {
            return flags;
        }
        flags.push(word & 0x8000_0000 != 0);
        p += 4 + (word & 0x7fff_ffff) as usize;
    }
}

/// Byte-identical output is not a requirement (decode compatibility is); the test prints how many
/// batches match and asserts the layout that must match: the same xerial chunking (32 KiB), the
/// same lz4 block split and stored/compressed choice (a stored block is then byte-identical).
#[test]
fn compressed_bytes_vs_kafka() {
    let _serial = serial();
    for name in ["gzip", "snappy", "lz4", "zstd"] {
        let codec = codec_of(name);
        let (mut same, mut total) = (0, 0);
        for b in batches(&testdata(&format!("kafka-clients/{name}.log"))) {
            let content = decompress(codec, &b.records, &DecodeLimits::default()).unwrap();
            let ours = compress(codec, &content);
            total += 1;
            if ours == b.records {
                same += 1;
            }
            match codec {
                CompressionType::Snappy => {
                    assert_eq!(xerial_chunk_lens(&ours), xerial_chunk_lens(&b.records));
                }
                CompressionType::Lz4 => {
                    let flags = lz4_stored_flags(&b.records);
                    assert_eq!(lz4_stored_flags(&ours), flags, "@{}", b.position);
                    if flags.first() == Some(&true) {
                        let block = 7 + 4 + 64 * 1024;
                        assert_eq!(ours[..block], b.records[..block]);
                    }
                }
                _ => {}
            }
        }
        println!("{name}: {same}/{total} batches byte-identical to kafka-clients 4.3.0");
    }
}

#[test]
fn lz4_reads_the_content_size_frame_kafka_python_writes() {
    let _serial = serial();
    let b = batches(&testdata("kafka-python/lz4.log")).remove(0);
    // FLG 0x68: content size present; HC covers FLG, BD and the 8-byte size.
    assert_eq!(b.records[4], 0x68);
    assert_eq!(b.records[14], lz4_header_checksum(&b.records[4..14]));
    // A lying content size is caught.
    let mut lie = b.records.clone();
    lie[6] ^= 1;
    lie[14] = lz4_header_checksum(&lie[4..14]);
    assert!(is_corrupt(
        &decompress(CompressionType::Lz4, &lie, &DecodeLimits::default()),
        CompressionType::Lz4
    ));
}

// ---------------------------------------------------------------------------------------------
// Bombs and lies about sizes
// ---------------------------------------------------------------------------------------------

#[test]
fn decompression_bombs_stop_at_the_limit_without_allocating_past_it() {
    let _serial = serial();
    let zeros = vec![0u8; 100 * MIB];
    for codec in CODECS {
        let bomb = compress(codec, &zeros);
        assert!(
            bomb.len() < 6 * MIB,
            "{codec:?} bomb is {} bytes",
            bomb.len()
        );
        // The output's capacity never passes the limit, but growing it by doubling may move it,
        // so old and new buffer are briefly live together: 1.5 x limit. Plus one block (lz4 64
        // KiB, snappy 32 KiB, gzip/zstd 64 KiB read chunk) and decoder state (flate2's inflater
        // ~ 40 KiB; libzstd allocates with malloc, which is not counted).
        let r = within(MIB + MIB / 2 + 256 * 1024, || {
            decompress(codec, &bomb, &limits(MIB))
        });
        assert!(is_too_large(&r, codec, MIB), "{codec:?}: {r:?}");
    }
}

#[test]
fn default_limit_is_256_mib() {
    let _serial = serial();
    assert_eq!(DecodeLimits::default().max_decompressed_bytes, 256 * MIB);
    let r = decompress(CompressionType::None, &[1, 2, 3], &limits(2));
    assert!(is_too_large(&r, CompressionType::None, 2));
}

/// Runs `f`, allowing it at most 2 MiB of allocation (`what` names the case in a failure).
fn cheaply<T>(what: &str, f: impl FnOnce() -> T) -> T {
    eprintln!("bounded case: {what}");
    within(2 * MIB, f)
}

/// Unsigned LEB128 as snappy's length preamble.
fn uvarint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

#[test]
fn snappy_raw_block_claiming_4_gib() {
    let _serial = serial();
    let mut block = uvarint(u64::from(u32::MAX));
    block.extend_from_slice(&[0x00, b'x']);
    let s = CompressionType::Snappy;
    let r = cheaply("snappy 4 GiB", || {
        decompress(s, &block, &DecodeLimits::default())
    });
    assert!(is_too_large(&r, s, 256 * MIB), "{r:?}");
    let r = cheaply("snappy raw 4 GiB", || {
        decompress_snappy_raw(&block, &DecodeLimits::default())
    });
    assert!(is_too_large(&r, s, 256 * MIB), "{r:?}");

    // Inside xerial framing too.
    let mut xerial = XERIAL_HEADER.to_vec();
    xerial.extend_from_slice(&(block.len() as i32).to_be_bytes());
    xerial.extend_from_slice(&block);
    let r = cheaply("xerial 4 GiB", || {
        decompress(s, &xerial, &DecodeLimits::default())
    });
    assert!(is_too_large(&r, s, 256 * MIB), "{r:?}");

    // A preamble within the limit that the data does not fill.
    let mut short = uvarint(1000);
    short.extend_from_slice(&[0x08, b'a', b'b', b'c']);
    assert!(is_corrupt(
        &decompress(s, &short, &DecodeLimits::default()),
        s
    ));
    // A preamble longer than any u32.
    assert!(is_corrupt(
        &decompress(s, &[0xff; 12], &DecodeLimits::default()),
        s
    ));
}

#[test]
fn xerial_chunk_lengths_that_lie() {
    let _serial = serial();
    let s = CompressionType::Snappy;
    let good = compress(s, b"abcdefgh");
    let d = |b: &[u8]| decompress(s, b, &DecodeLimits::default());

    let mut past_end = good.clone();
    past_end[16..20].copy_from_slice(&1_000_000i32.to_be_bytes());
    assert!(is_corrupt(&d(&past_end), s));

    let mut negative = good.clone();
    negative[16..20].copy_from_slice(&(-1i32).to_be_bytes());
    assert!(is_corrupt(&d(&negative), s));

    let mut zero = XERIAL_HEADER.to_vec();
    zero.extend_from_slice(&0i32.to_be_bytes());
    assert!(is_corrupt(&d(&zero), s));

    let mut stray = good.clone();
    stray.extend_from_slice(&[0, 0]);
    assert!(is_corrupt(&d(&stray), s));

    let mut old_version = good.clone();
    old_version[8..12].copy_from_slice(&0i32.to_be_bytes());
    assert!(is_corrupt(&d(&old_version), s));

    // The explicit xerial entry point refuses raw blocks.
    let raw = snap::raw::Encoder::new().compress_vec(b"raw").unwrap();
    assert!(is_corrupt(
        &decompress_snappy_xerial(&raw, &DecodeLimits::default()),
        s
    ));
}

#[test]
fn snappy_accepts_raw_blocks_concatenated_streams_and_the_bare_header() {
    let _serial = serial();
    let s = CompressionType::Snappy;
    let d = |b: &[u8]| decompress(s, b, &DecodeLimits::default());
    let raw = snap::raw::Encoder::new()
        .compress_vec(b"no xerial header here")
        .unwrap();
    assert_eq!(d(&raw).unwrap(), b"no xerial header here");
    assert_eq!(d(&[]).unwrap(), b"");
    assert_eq!(d(&XERIAL_HEADER).unwrap(), b"");
    let mut two = compress(s, b"first ");
    two.extend_from_slice(&compress(s, b"second"));
    assert_eq!(d(&two).unwrap(), b"first second");
    assert_eq!(
        decompress_snappy_xerial(&two, &DecodeLimits::default()).unwrap(),
        b"first second"
    );
    // 1..=15 bytes starting with the magic are a (bad) raw block, as in snappy-java.
    assert!(is_corrupt(&d(&XERIAL_HEADER[..12]), s));
}

/// A frame with the given FLG and BD, correct HC, then `body`.
fn lz4_frame(flg: u8, bd: u8, content_size: Option<u64>, body: &[u8]) -> Vec<u8> {
    let mut f = LZ4_FRAME_MAGIC.to_vec();
    f.extend_from_slice(&[flg, bd]);
    if let Some(n) = content_size {
        f.extend_from_slice(&n.to_be_bytes().iter().rev().copied().collect::<Vec<_>>());
    }
    f.push(lz4_header_checksum(&f[4..]));
    f.extend_from_slice(body);
    f
}

fn le32(v: u32) -> Vec<u8> {
    v.to_be_bytes().iter().rev().copied().collect()
}

fn xxh32(data: &[u8]) -> u32 {
    twox_hash::XxHash32::oneshot(0, data)
}

#[test]
fn lz4_block_sizes_that_lie() {
    let _serial = serial();
    let l = CompressionType::Lz4;
    let d = |b: &[u8]| decompress(l, b, &DecodeLimits::default());

    // Stored block of 64 KiB + 1 in a 64 KiB frame.
    let mut body = le32((64 * 1024 + 1) | 0x8000_0000);
    body.extend_from_slice(&vec![0u8; 64 * 1024 + 1]);
    body.extend_from_slice(&[0; 4]);
    let r = cheaply("lz4 oversize", || d(&lz4_frame(0x60, 0x40, None, &body)));
    assert!(is_corrupt(&r, l), "{r:?}");

    // Block size past the end of the input.
    let mut body = le32(60_000);
    body.extend_from_slice(b"abc");
    assert!(is_corrupt(&d(&lz4_frame(0x60, 0x40, None, &body)), l));

    // 0x7fffffff: far beyond any block size.
    let body = le32(0x7fff_ffff);
    assert!(is_corrupt(
        &cheaply("lz4 2 GiB block", || d(&lz4_frame(0x60, 0x70, None, &body))),
        l
    ));

    // Content size claiming 4 GiB: never used to allocate; the mismatch is corruption.
    let mut body = le32(3 | 0x8000_0000);
    body.extend_from_slice(b"abc");
    body.extend_from_slice(&[0; 4]);
    let frame = lz4_frame(0x68, 0x40, Some(4 << 30), &body);
    assert!(is_corrupt(
        &cheaply("lz4 4 GiB content size", || d(&frame)),
        l
    ));
    let frame = lz4_frame(0x68, 0x40, Some(3), &body);
    assert_eq!(d(&frame).unwrap(), b"abc");

    // A compressed block whose matches expand past 64 KiB.
    let big = lz4_flex::block::compress(&vec![7u8; 200_000]);
    let mut body = le32(big.len() as u32);
    body.extend_from_slice(&big);
    body.extend_from_slice(&[0; 4]);
    assert!(is_corrupt(
        &cheaply("lz4 expanding block", || d(&lz4_frame(
            0x60, 0x40, None, &body
        ))),
        l
    ));
    // ... fine in a 4 MiB-block frame, and too large for a 100 KiB limit.
    assert_eq!(
        d(&lz4_frame(0x60, 0x70, None, &body)).unwrap(),
        vec![7u8; 200_000]
    );
    let r = decompress(l, &lz4_frame(0x60, 0x70, None, &body), &limits(100_000));
    assert!(is_too_large(&r, l, 100_000), "{r:?}");
}

/// Regression: a block's scratch used to be sized and zeroed per block (up to 4 MiB each), so a
/// 1 MiB frame of tiny blocks cost hundreds of GB of memset. Cost must follow the input and output.
#[test]
fn many_tiny_blocks_and_frames_stay_cheap() {
    let _serial = serial();
    // lz4: 4 MiB maximum block size, 100k blocks of one literal byte each.
    let tiny = lz4_flex::block::compress(b"x");
    let mut body = Vec::new();
    for _ in 0..100_000 {
        body.extend_from_slice(&le32(tiny.len() as u32));
        body.extend_from_slice(&tiny);
    }
    body.extend_from_slice(&[0; 4]);
    let frame = lz4_frame(0x60, 0x70, None, &body);
    let out = within(8 * MIB, || {
        decompress(CompressionType::Lz4, &frame, &DecodeLimits::default())
    })
    .unwrap();
    assert_eq!(out.len(), 100_000);

    // zstd: 100k one-byte frames, each a separate read from the decoder.
    let one = compress(CompressionType::Zstd, b"x");
    let many: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * 100_000)
        .collect();
    let out = within(8 * MIB, || {
        decompress(CompressionType::Zstd, &many, &DecodeLimits::default())
    })
    .unwrap();
    assert_eq!(out.len(), 100_000);

    // snappy: a preamble within the 256 MiB budget that a 10-byte block cannot fill is refused
    // before the output is allocated.
    let mut lie = uvarint(200 * MIB as u64);
    lie.extend_from_slice(&[0x08, b'a', b'b', b'c']);
    let r = cheaply("snappy 200 MiB preamble", || {
        decompress(CompressionType::Snappy, &lie, &DecodeLimits::default())
    });
    assert!(is_corrupt(&r, CompressionType::Snappy), "{r:?}");
}

#[test]
fn lz4_header_checks() {
    let _serial = serial();
    let l = CompressionType::Lz4;
    let d = |b: &[u8]| decompress(l, b, &DecodeLimits::default());
    let good = compress(l, b"payload");
    assert_eq!(d(&good).unwrap(), b"payload");

    let mut bad_hc = good.clone();
    bad_hc[6] ^= 0xff;
    assert!(is_corrupt(&d(&bad_hc), l));

    // Kafka < 0.10's "broken" HC (hash over magic + FLG + BD) is accepted.
    let broken = lz4_header_checksum_broken(&[0x60, 0x40]);
    assert_ne!(broken, 0x82);
    let mut old = good.clone();
    old[6] = broken;
    assert_eq!(d(&old).unwrap(), b"payload");

    for (flg, bd, why) in [
        (0x20, 0x40, "version 0"),
        (0x40, 0x40, "dependent blocks"),
        (0x61, 0x40, "dictionary id"),
        (0x62, 0x40, "reserved FLG bit"),
        (0x60, 0x41, "reserved BD bits"),
        (0x60, 0x30, "block size 3"),
        (0x60, 0xc0, "reserved BD bit 7"),
    ] {
        let f = lz4_frame(flg, bd, None, &[0, 0, 0, 0]);
        assert!(is_corrupt(&d(&f), l), "{why}");
    }
    assert!(
        is_corrupt(&d(b"\x04\x22\x4d\x19\x60\x40\x82\0\0\0\0"), l),
        "magic"
    );
    // No end mark.
    assert!(is_corrupt(&d(&good[..good.len() - 4]), l));
    // Bytes after the end mark are ignored, as Kafka does; so is 0x80000000 as an end mark.
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"junk");
    assert_eq!(d(&trailing).unwrap(), b"payload");
    let mut alt_end = good[..good.len() - 4].to_vec();
    alt_end.extend_from_slice(&le32(0x8000_0000));
    assert_eq!(d(&alt_end).unwrap(), b"payload");
}

#[test]
fn lz4_block_and_content_checksums_are_verified() {
    let _serial = serial();
    let l = CompressionType::Lz4;
    let d = |b: &[u8]| decompress(l, b, &DecodeLimits::default());
    let data = compressible_bytes(150_000);
    // FLG 0x74: version 1, independent blocks, block checksum, content checksum.
    let mut body = Vec::new();
    for chunk in data.chunks(64 * 1024) {
        let c = lz4_flex::block::compress(chunk);
        body.extend_from_slice(&le32(c.len() as u32));
        body.extend_from_slice(&c);
        body.extend_from_slice(&le32(xxh32(&c)));
    }
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(&le32(xxh32(&data)));
    let frame = lz4_frame(0x74, 0x40, None, &body);
    assert_eq!(d(&frame).unwrap(), data);

    let mut bad_block_sum = frame.clone();
    let mut len_be: [u8; 4] = frame[7..11].try_into().unwrap();
    len_be.reverse();
    let first_block_len = u32::from_be_bytes(len_be) as usize;
    bad_block_sum[11 + first_block_len] ^= 1;
    assert!(is_corrupt(&d(&bad_block_sum), l));

    let mut bad_content_sum = frame.clone();
    *bad_content_sum.last_mut().unwrap() ^= 1;
    assert!(is_corrupt(&d(&bad_content_sum), l));
    assert!(is_corrupt(&d(&frame[..frame.len() - 2]), l));

    // lz4_flex's own frame encoder (content checksum on) is read too.
    let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
        lz4_flex::frame::FrameInfo::new().content_checksum(true),
        Vec::new(),
    );
    std::io::Write::write_all(&mut enc, &data).unwrap();
    let frame = enc.finish().unwrap();
    assert_eq!(d(&frame).unwrap(), data);
}

#[test]
fn zstd_lies_and_huge_windows() {
    let _serial = serial();
    let z = CompressionType::Zstd;
    let d = |b: &[u8]| decompress(z, b, &DecodeLimits::default());
    // Single-segment frame claiming 4 GiB of content (FHD 0xa0: 4-byte size, single segment),
    // followed by one tiny raw block.
    let mut lie = vec![0x28, 0xb5, 0x2f, 0xfd, 0xa0];
    lie.extend_from_slice(&le32(u32::MAX));
    lie.extend_from_slice(&[0x19, 0x00, 0x00]); // last, raw, size 3
    lie.extend_from_slice(b"abc");
    assert!(is_corrupt(
        &cheaply("zstd 4 GiB content size", || d(&lie)),
        z
    ));

    // Window of 2^31 bytes: rejected before the window is allocated.
    let mut huge = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (31 - 10) << 3];
    huge.extend_from_slice(&[0x19, 0x00, 0x00]);
    huge.extend_from_slice(b"abc");
    assert!(is_corrupt(&cheaply("zstd 2 GiB window", || d(&huge)), z));

    // A 2 MiB window (what Kafka writes) is fine even under a 1 KiB limit.
    let mut kafka_like = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (21 - 10) << 3];
    kafka_like.extend_from_slice(&[0x19, 0x00, 0x00]);
    kafka_like.extend_from_slice(b"abc");
    assert_eq!(decompress(z, &kafka_like, &limits(1024)).unwrap(), b"abc");

    // Concatenated frames and skippable frames are read; trailing garbage is not.
    let mut two = compress(z, b"first ");
    two.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9]);
    two.extend_from_slice(&compress(z, b"second"));
    assert_eq!(d(&two).unwrap(), b"first second");
    two.extend_from_slice(b"garbage!");
    assert!(is_corrupt(&d(&two), z));
}

#[test]
fn gzip_members_and_trailing_bytes() {
    let _serial = serial();
    let g = CompressionType::Gzip;
    let d = |b: &[u8]| decompress(g, b, &DecodeLimits::default());
    let mut two = compress(g, b"first ");
    two.extend_from_slice(&compress(g, b"second"));
    assert_eq!(d(&two).unwrap(), b"first second");

    // Java's GZIPInputStream ignores bytes after a member that are not a gzip header.
    let mut trailing = two.clone();
    trailing.extend_from_slice(b"not a gzip header");
    assert_eq!(d(&trailing).unwrap(), b"first second");
    let mut partial_header = two.clone();
    partial_header.extend_from_slice(&GZIP_HEADER[..6]);
    assert_eq!(d(&partial_header).unwrap(), b"first second");

    // A complete header followed by garbage is a member, and a corrupt one.
    let mut bad_member = two.clone();
    bad_member.extend_from_slice(&GZIP_HEADER);
    bad_member.extend_from_slice(&[0xff; 20]);
    assert!(is_corrupt(&d(&bad_member), g));

    // A member written by another gzip (flate2's default header: OS 255, name field) reads.
    let mut other = flate2::GzBuilder::new()
        .filename("records")
        .write(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut other, b"named").unwrap();
    assert_eq!(d(&other.finish().unwrap()).unwrap(), b"named");

    // A bad trailer CRC.
    let mut bad_crc = compress(g, b"payload");
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 1;
    assert!(is_corrupt(&d(&bad_crc), g));
    assert!(is_corrupt(&d(&[]), g));
}

// ---------------------------------------------------------------------------------------------
// Garbage and truncation
// ---------------------------------------------------------------------------------------------

#[test]
fn every_truncation_is_an_error_or_a_prefix() {
    let _serial = serial();
    let input = compressible_bytes(100_000);
    for codec in CODECS {
        let full = compress(codec, &input);
        let step = (full.len() / 300).max(1);
        for cut in (0..full.len())
            .step_by(step)
            .chain(full.len().saturating_sub(20)..full.len())
        {
            let r = decompress(codec, &full[..cut], &DecodeLimits::default());
            match (&r, codec) {
                // A xerial stream cut at a chunk boundary (or to nothing) is a shorter valid
                // stream, as in snappy-java.
                (Ok(out), CompressionType::Snappy) => assert!(input.starts_with(out), "cut {cut}"),
                _ => assert!(
                    is_corrupt(&r, codec),
                    "{codec:?} cut at {cut}/{}: {r:?}",
                    full.len()
                ),
            }
        }
    }
}

#[test]
fn garbage_is_a_decompression_error() {
    let _serial = serial();
    for codec in CODECS {
        for seed in 1..50u64 {
            let junk = random_bytes((seed * 37 % 500) as usize + 1, seed);
            let r = decompress(codec, &junk, &DecodeLimits::default());
            assert!(is_corrupt(&r, codec), "{codec:?} seed {seed}: {r:?}");
        }
    }
}

#[test]
fn flipped_bytes_never_panic() {
    let _serial = serial();
    let input = compressible_bytes(20_000);
    for codec in CODECS {
        let full = compress(codec, &input);
        for i in 0..full.len() {
            let mut bad = full.clone();
            bad[i] ^= 0x5a;
            let r = decompress(codec, &bad, &limits(64 * 1024));
            if let Ok(out) = r {
                assert!(out.len() <= 64 * 1024);
            }
        }
    }
}

fn with_prefix(codec: CompressionType) -> Vec<u8> {
    match codec {
        CompressionType::Gzip => GZIP_HEADER.to_vec(),
        CompressionType::Snappy => XERIAL_HEADER.to_vec(),
        CompressionType::Lz4 => compress(CompressionType::Lz4, b"")[..7].to_vec(),
        CompressionType::Zstd => vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58],
        CompressionType::None => Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048), headed in any::<bool>()) {
        let _serial = serial();
        for codec in CODECS {
            let mut input = if headed { with_prefix(codec) } else { Vec::new() };
            input.extend_from_slice(&data);
            match decompress(codec, &input, &limits(64 * 1024)) {
                Ok(out) => prop_assert!(out.len() <= 64 * 1024),
                Err(FormatErrorKind::Decompression { codec: c, .. })
                | Err(FormatErrorKind::DecompressedTooLarge { codec: c, .. }) => prop_assert_eq!(c, codec),
                Err(other) => prop_assert!(false, "unexpected error kind {:?}", other),
            }
        }
    }

    #[test]
    fn arbitrary_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _serial = serial();
        for codec in CODECS {
            let c = compress(codec, &data);
            prop_assert_eq!(decompress(codec, &c, &DecodeLimits::default()).unwrap(), data.clone());
        }
    }
}
