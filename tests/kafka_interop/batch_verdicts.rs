//! Differential fuzzing of the batch and record parsers against Kafka's own
//! (`tools/kafka/harness/.../BatchVerdicts.java`, one JVM for every input, heap capped): batches
//! from the fixtures and broker-written logs, mutated (most with the CRC recomputed after the
//! mutation, so that the record parsers are reached), each judged by both. Every Kafka exception
//! class maps to the seglog error kinds in [`MAPPING`] (the table in docs/testing.md); any other
//! pair, or a different record count or offsets, is a disagreement.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use seglog::record_format::{Batches, DecodeLimits, FormatErrorKind, LogEntry};

use super::kafka::{java, repo, wait_bounded, Rng};

/// seglog's decompression limit in this comparison.
pub const LIMIT: usize = 1 << 20;

/// A verdict, as both sides print it: stage, class (Kafka's exception class, or seglog's error
/// kind), records decoded, hash of their offsets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Verdict {
    pub stage: &'static str,
    pub class: String,
    pub count: u64,
    pub hash: i64,
}

fn stage(s: &str) -> &'static str {
    match s {
        "none" => "none",
        "frame" | "valid" => "batch",
        "records" => "records",
        "ok" => "ok",
        "legacy" => "legacy",
        other => panic!("unknown stage {other}"),
    }
}

/// The seglog error kind's name (the variant).
pub fn kind_name(k: &FormatErrorKind) -> String {
    let s = format!("{k:?}");
    s.split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// seglog's verdict: the framing of `Batches` (Kafka's `ByteBufferLogInputStream`), the
/// batch's `validate` (size and CRC: `ensureValid`), then its records with a [`LIMIT`]
/// decompression budget (Kafka's record iterator).
pub fn seglog_verdict(data: &[u8]) -> Verdict {
    let v = |stage: &'static str, class: String, count: u64, hash: i64| Verdict {
        stage,
        class,
        count,
        hash,
    };
    let mut it = Batches::new(data, 0);
    let entry = match it.next() {
        None => return v("none", "-".into(), 0, 0),
        Some(Err(e)) => return v("batch", kind_name(&e.kind), 0, 0),
        Some(Ok(e)) => e,
    };
    let batch = match entry {
        LogEntry::Legacy(l) => {
            return match l.validate() {
                Ok(()) => v("legacy", "-".into(), 0, 0),
                Err(e) => v("legacy", kind_name(&e.kind), 0, 0),
            }
        }
        LogEntry::V2(b) => b,
    };
    if let Err(e) = batch.validate() {
        return v("batch", kind_name(&e.kind), 0, 0);
    }
    let limits = DecodeLimits {
        max_decompressed_bytes: LIMIT,
    };
    let records = match batch.records(&limits) {
        Ok(r) => r,
        Err(e) => return v("records", kind_name(&e.kind), 0, 0),
    };
    let (mut count, mut hash) = (0u64, 0i64);
    for r in records.iter() {
        match r {
            Ok(r) => {
                count += 1;
                hash = hash.wrapping_mul(31).wrapping_add(r.offset());
            }
            Err(e) => return v("records", kind_name(&e.kind), count, hash),
        }
    }
    v("ok", "-".into(), count, hash)
}

/// Kafka's exception classes and the seglog error kinds each stands for, per stage. A pair
/// not listed here (or in [`expected_difference`]) is a disagreement. The same table is in
/// docs/testing.md.
pub const MAPPING: &[(&str, &str, &[&str])] = &[
    // stage, Kafka class, seglog kinds
    (
        "batch",
        "CorruptRecordException",
        &["BadLength", "CrcMismatch", "BadMagic"],
    ),
    (
        "legacy",
        "CorruptRecordException",
        &["CrcMismatch", "BadLength"],
    ),
    (
        "records",
        "InvalidRecordException",
        &[
            "NegativeRecordCount",
            "RecordCountMismatch",
            "TrailingBytes",
            "BadRecordLength",
            "BadHeaderCount",
            "NegativeHeaderKeyLength",
            "LengthOutOfRange",
            "Truncated",
            "BadVarint",
        ],
    ),
    (
        "records",
        "IllegalArgumentException",
        &["BadVarint", "UnknownCompression"],
    ),
    ("records", "KafkaException", &["Decompression"]),
    ("records", "SnappyError", &["Decompression"]),
    ("records", "OutOfMemoryError", &["DecompressedTooLarge"]),
];

/// Where Kafka and seglog differ by design, each with its reason (docs/testing.md). `None`
/// when the pair is not one of them.
pub fn expected_difference(
    input: &[u8],
    kafka: &Verdict,
    seglog: &Verdict,
) -> Option<&'static str> {
    let be32 = |at: usize| {
        input
            .get(at..at + 4)
            .map(|b| i32::from_be_bytes(b.try_into().unwrap()))
    };
    let size = be32(8).unwrap_or(0);
    let count = be32(57).unwrap_or(0);
    let (k, o) = (
        (kafka.stage, kafka.class.as_str()),
        (seglog.stage, seglog.class.as_str()),
    );
    match (k, o) {
        // MemoryRecords checks the length and magic fields before whether the batch is whole;
        // FileRecords (what recovery reads) and seglog stop silently at an incomplete last batch
        // (at most the 17 bytes up to the magic, or fewer than the length field says).
        (("batch", "CorruptRecordException"), ("none", "-"))
            if input.len() <= 17 || (input.len() as i64) < i64::from(size) + 12 =>
        {
            Some("incomplete last batch, bad header")
        }
        // `size + 12` overflows an int in MemoryRecords; FileRecords and seglog stop silently.
        (("batch", "IllegalArgumentException"), ("none", "-")) if size > i32::MAX - 12 => {
            Some("length field overflows")
        }
        // seglog decompresses the whole batch first (bounded); Kafka streams, so it decodes
        // records before the stream fails, or stops reading it after the declared records.
        (("records", _), ("records", "Decompression"))
        | (("ok", "-"), ("records", "Decompression"))
            if seglog.count == 0 =>
        {
            Some("whole-batch decompression")
        }
        // seglog checks the declared count before decompressing; Kafka after.
        (("records", "KafkaException" | "SnappyError"), ("records", "NegativeRecordCount")) => {
            Some("count checked before decompression")
        }
        // A compressed batch declaring no records: Kafka's streaming iterator opens the
        // decompression stream anyway, seglog decompresses nothing when the payload is empty.
        (("records", "KafkaException" | "SnappyError"), ("ok", "-")) if count == 0 => {
            Some("compressed batch of no records")
        }
        // seglog refuses a batch that decompresses (or says it does) past its limit before
        // decoding it; Kafka decodes it, or fails otherwise.
        (("records", _) | ("ok", "-"), ("records", "DecompressedTooLarge"))
            if kafka.class != "OutOfMemoryError" =>
        {
            Some("seglog's decompression limit")
        }
        // Kafka allocates what a length or count field declares and runs out of its capped
        // heap; seglog bounds by its decompression limit or the bytes left.
        (("records", "OutOfMemoryError"), ("records", _)) => Some("Kafka out of memory"),
        _ => None,
    }
}

/// Whether the two verdicts agree: the same stage and, where both failed, a mapped pair; the
/// same records decoded before the end or the error.
pub fn agree(kafka: &Verdict, seglog: &Verdict) -> bool {
    if kafka.stage != seglog.stage || (kafka.count, kafka.hash) != (seglog.count, seglog.hash) {
        return false;
    }
    if kafka.class == "-" || seglog.class == "-" {
        return kafka.class == seglog.class;
    }
    MAPPING.iter().any(|(s, k, kinds)| {
        *s == kafka.stage && *k == kafka.class && kinds.contains(&seglog.class.as_str())
    })
}

/// Kafka's verdicts on `inputs`, one JVM with a `heap_mb` heap.
pub fn kafka_verdicts(inputs: &[Vec<u8>], heap_mb: u32, scratch: &Path) -> Vec<Verdict> {
    let frames = scratch.join("frames.bin");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&frames).unwrap());
        for i in inputs {
            f.write_all(&(i.len() as u32).to_be_bytes()).unwrap();
            f.write_all(i).unwrap();
        }
        f.flush().unwrap();
    }
    let mut c = java();
    // The later -Xmx wins over java()'s.
    c.arg(format!("-Xmx{heap_mb}m"))
        .arg("seglog.kafka.BatchVerdicts")
        .stdin(Stdio::from(std::fs::File::open(&frames).unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("start BatchVerdicts");
    let out = wait_bounded(child, Duration::from_secs(600), "BatchVerdicts");
    assert!(
        out.status.success(),
        "BatchVerdicts failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let verdicts: Vec<Verdict> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 4, "bad line {l}");
            Verdict {
                stage: stage(f[0]),
                class: f[1].to_string(),
                count: f[2].parse().unwrap(),
                hash: f[3].parse().unwrap(),
            }
        })
        .collect();
    assert_eq!(verdicts.len(), inputs.len(), "one verdict per input");
    verdicts
}

/// Every whole batch of every `.log` under `testdata/` (client-, broker-, python- and
/// seglog-written).
pub fn seed_batches() -> Vec<Vec<u8>> {
    let mut logs: Vec<PathBuf> = Vec::new();
    let mut stack = vec![repo().join("testdata")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                logs.push(p);
            }
        }
    }
    logs.sort();
    let mut out = Vec::new();
    for p in logs {
        let bytes = std::fs::read(&p).unwrap();
        for e in Batches::new(&bytes, 0).map_while(Result::ok) {
            if e.size_in_bytes() <= 64 * 1024 {
                out.push(e.as_bytes().to_vec());
            }
        }
    }
    out
}

fn fix_crc(b: &mut [u8]) {
    if b.len() >= 21 {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

fn set_length(b: &mut [u8]) {
    if b.len() >= 12 {
        let n = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&n.to_be_bytes());
    }
}

const INTERESTING: [i32; 10] = [-1, 0, 1, 2, 127, 128, 255, 65_535, i32::MAX, i32::MIN];

/// One mutant of `seed`: 1-3 mutations (byte flips and sets, header fields set to interesting
/// values, varint bytes, bytes inserted or deleted in the records with the length field
/// following, cuts, appended bytes); then, 7 times in 8, the CRC recomputed. Returns the mutant
/// and whether its CRC was recomputed.
pub fn mutate(seed: &[u8], rng: &mut Rng) -> (Vec<u8>, bool) {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        let len = b.len().max(1) as u64;
        match rng.below(10) {
            0 | 1 => {
                let i = rng.below(len) as usize;
                if let Some(x) = b.get_mut(i) {
                    *x ^= 1 << rng.below(8);
                }
            }
            2 => {
                let i = rng.below(len) as usize;
                if let Some(x) = b.get_mut(i) {
                    *x = rng.below(256) as u8;
                }
            }
            3 => {
                // records count (57..61), length (8..12), attributes (21..23), or a field of
                // the first record
                let at = [57usize, 8, 21, 61, 53, 49][rng.below(6) as usize];
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                if at == 21 {
                    if b.len() > 22 {
                        b[22] = (b[22] & !7) | rng.below(8) as u8;
                    }
                } else if b.len() >= at + 4 {
                    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            4 => {
                // a varint byte in the records
                if b.len() > 61 {
                    let i = 61 + rng.below((b.len() - 61) as u64) as usize;
                    b[i] = [0x80, 0xff, 0x7f, 0x01, 0x00][rng.below(5) as usize];
                }
            }
            5 => {
                // insert bytes in the records, the length following
                let i =
                    61.min(b.len()) + rng.below((b.len().saturating_sub(61) + 1) as u64) as usize;
                let n = 1 + rng.below(4) as usize;
                for _ in 0..n {
                    b.insert(i.min(b.len()), rng.below(256) as u8);
                }
                set_length(&mut b);
            }
            6 => {
                // delete bytes in the records, the length following
                if b.len() > 62 {
                    let i = 61 + rng.below((b.len() - 61) as u64) as usize;
                    let n = (1 + rng.below(4) as usize).min(b.len() - i);
                    b.drain(i..i + n);
                    set_length(&mut b);
                }
            }
            7 => {
                let cut = rng.below(len + 1) as usize;
                b.truncate(cut);
            }
            8 => {
                for _ in 0..1 + rng.below(16) {
                    b.push(rng.below(256) as u8);
                }
            }
            _ => {
                // the magic byte
                if b.len() > 16 {
                    b[16] = [0u8, 1, 3, 0xff][rng.below(4) as usize];
                }
            }
        }
    }
    let fixed = rng.below(8) != 0;
    if fixed {
        fix_crc(&mut b);
    }
    (b, fixed)
}

/// The figures of one comparison.
#[derive(Debug, Default)]
pub struct Summary {
    pub inputs: usize,
    pub crc_recomputed: usize,
    pub past_crc: usize,
    pub pairs: BTreeMap<(String, String), usize>,
    pub expected: BTreeMap<&'static str, usize>,
    pub disagreements: Vec<(usize, Verdict, Verdict)>,
}

/// Both verdicts on every input.
pub fn compare(inputs: &[Vec<u8>], fixed: &[bool], heap_mb: u32, scratch: &Path) -> Summary {
    let t = Instant::now();
    let kafka = kafka_verdicts(inputs, heap_mb, scratch);
    let kafka_time = t.elapsed();
    let t = Instant::now();
    let ours: Vec<Verdict> = inputs.iter().map(|i| seglog_verdict(i)).collect();
    let seglog_time = t.elapsed();
    eprintln!(
        "batch verdicts: {} inputs, Kafka {kafka_time:?}, seglog {seglog_time:?}",
        inputs.len()
    );
    let mut s = Summary {
        inputs: inputs.len(),
        crc_recomputed: fixed.iter().filter(|f| **f).count(),
        ..Summary::default()
    };
    for (i, (k, o)) in kafka.iter().zip(&ours).enumerate() {
        if matches!(k.stage, "records" | "ok") {
            s.past_crc += 1;
        }
        *s.pairs
            .entry((
                format!("{} {}", k.stage, k.class),
                format!("{} {}", o.stage, o.class),
            ))
            .or_default() += 1;
        if !agree(k, o) {
            match expected_difference(&inputs[i], k, o) {
                Some(why) => *s.expected.entry(why).or_default() += 1,
                None => s.disagreements.push((i, k.clone(), o.clone())),
            }
        }
    }
    s
}
