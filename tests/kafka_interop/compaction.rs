//! Kafka's log cleaner as the oracle of `seglog compact` (issue 31).
//!
//! `differential_compaction`: each case is a partition of a compacted topic written by Kafka's
//! `UnifiedLog.appendAsLeader` (harness `compact-write`: keys, tombstones, plain, idempotent and
//! transactional producers, commits and aborts, several segments), copied twice. Kafka's
//! `Cleaner.doClean` cleans one copy (harness `compact-clean`, all cases in one JVM, a fixed clock,
//! the range from `LogCleanerManager.cleanableOffsets`), `seglog compact` the other, with the same
//! clock, dedupe buffer, `delete.retention.ms` and `segment.bytes`, pass for pass. The offset map
//! is often smaller than the dirty section, so the log is cleaned in several passes, the later
//! ones after the delete horizon of the first has passed.
//!
//! * Uncompressed cases: every `.log`, `.index`, `.timeindex` and `.txnindex` byte-identical.
//! * Compressed cases (gzip, snappy, lz4, zstd in turn): a rebuilt batch is recompressed by each
//!   side's own codec library, so its bytes, length and CRC differ. Required: the same segment
//!   files; every batch header identical but for `batchLength` and `crc` (base offset, partition
//!   leader epoch, magic, attributes, last offset delta, base and max timestamps, producer id and
//!   epoch, base sequence, record count); `.txnindex` byte-identical; and Kafka's
//!   `DumpLogSegments` (`--deep-iteration --print-data-log`, one JVM per side) printing the same
//!   text for both sides once `position`, `size` and `crc` are left out: each batch's line, every
//!   decoded record (offset, timestamp, key and value sizes, sequence, header keys, key,
//!   payload). The offset and time indexes cannot be equal: an offset-index entry is written
//!   after every `index.interval.bytes` of batches, so where a recompressed batch has another
//!   size an entry falls on another batch (and its position follows the sizes). Required: each
//!   side's `.index` and `.timeindex` are exactly what `LogSegment.append`'s rule builds from that
//!   side's own `.log` (`appended_indexes`; Kafka's side checks the rule as written here).
//!
//! `SEGLOG_KAFKA_COMPACT_CASES` (uncompressed, default 200),
//! `SEGLOG_KAFKA_COMPACT_COMPRESSED_CASES` (default 48), `SEGLOG_KAFKA_COMPACT_SEED` (default 1).
//!
//! `broker_serves_a_log_seglog_compacted`: a live broker's compacted topic, cleaned by `seglog
//! compact`, served to Kafka's consumer after a restart (see the test).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::kafka::{copy_tree, harness, json_lines, run, seglog, Broker, Rng};
use super::{consume, env_u64, heavy, partition_dirs, MIN};

/// The clock of the first pass (the harness stamps records from 1_700_000_000_000 on).
const NOW: i64 = 1_700_000_000_000 + 10_000_000;

struct Case {
    name: String,
    codec: &'static str,
    dedupe: u64,
    retention: i64,
    segment_bytes: u64,
    passes: u64,
}

/// The segment and index files of a partition, by name.
fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        if [".log", ".index", ".timeindex", ".txnindex"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            out.insert(name, std::fs::read(&p).expect("read"));
        }
    }
    out
}

/// The codecs of the compressed cases (Kafka's and seglog's).
const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];

/// Each v2 batch header of a segment without its `batchLength` and `crc`: base offset, partition
/// leader epoch, magic, attributes, last offset delta, base and max timestamps, producer id and
/// epoch, base sequence, record count (bytes 0..8, 12..17 and 21..61).
fn batch_headers(log: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 61 <= log.len() {
        let len = i32::from_be_bytes(log[at + 8..at + 12].try_into().expect("4 bytes"));
        let h = &log[at..at + 61];
        out.push([&h[..8], &h[12..17], &h[21..61]].concat());
        at += 12 + usize::try_from(len).expect("batch length");
    }
    assert_eq!(at, log.len(), "a segment ends in a partial batch");
    out
}

/// The `.index` and `.timeindex` that Kafka's `LogSegment.append` writes for `log` (a cleaned
/// segment of base offset `base`, then made inactive): for each batch, an offset-index entry
/// (its last offset, its position) and a time-index entry (the largest timestamp so far and its
/// batch's last offset, when larger than the last entry's) once more than `index.interval.bytes`
/// (4096) were written since the last entry; the final time-index entry when the segment becomes
/// inactive.
fn appended_indexes(log: &[u8], base: i64) -> (Vec<u8>, Vec<u8>) {
    let (mut index, mut time) = (Vec::new(), Vec::new());
    let (mut max_ts, mut offset_of_max) = (-1i64, base);
    let mut last_time_entry = -1i64;
    let mut time_append = |time: &mut Vec<u8>, ts: i64, offset: i64| {
        if ts > last_time_entry {
            time.extend(ts.to_be_bytes());
            time.extend(
                i32::try_from(offset - base)
                    .expect("relative")
                    .to_be_bytes(),
            );
            last_time_entry = ts;
        }
    };
    let (mut at, mut since_entry) = (0usize, 0usize);
    while at + 61 <= log.len() {
        let b = &log[at..];
        let len = 12
            + usize::try_from(i32::from_be_bytes(b[8..12].try_into().expect("4")))
                .expect("batch length");
        let last = i64::from_be_bytes(b[..8].try_into().expect("8"))
            + i64::from(i32::from_be_bytes(b[23..27].try_into().expect("4")));
        let batch_max = i64::from_be_bytes(b[35..43].try_into().expect("8"));
        if batch_max > max_ts {
            (max_ts, offset_of_max) = (batch_max, last);
        }
        if since_entry > 4096 {
            index.extend(i32::try_from(last - base).expect("relative").to_be_bytes());
            index.extend(u32::try_from(at).expect("position").to_be_bytes());
            time_append(&mut time, max_ts, offset_of_max);
            since_entry = 0;
        }
        at += len;
        since_entry += len;
    }
    time_append(&mut time, max_ts, offset_of_max);
    (index, time)
}

/// `DumpLogSegments` output split by file (`case-N/compacted-0/<file>` under `root`), each
/// batch line without the fields that depend on the compressed bytes (`position`, `size`, `crc`).
fn dump_sections(text: &str, root: &Path) -> BTreeMap<String, String> {
    let prefix = format!("{}/", root.display());
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("Dumping ") {
            if let Some((k, v)) = current.take() {
                out.insert(k, v);
            }
            let rel = path.strip_prefix(&prefix).unwrap_or(path).to_string();
            current = Some((rel, String::new()));
            continue;
        }
        let Some((_, body)) = current.as_mut() else {
            continue;
        };
        let line = line.replace(&prefix, "");
        let mut kept = Vec::new();
        let mut words = line.split(' ').peekable();
        while let Some(w) = words.next() {
            if matches!(w, "position:" | "size:" | "crc:") {
                words.next();
            } else {
                kept.push(w);
            }
        }
        body.push_str(&kept.join(" "));
        body.push('\n');
    }
    if let Some((k, v)) = current {
        out.insert(k, v);
    }
    out
}

#[test]
fn differential_compaction() {
    let _g = heavy();
    let cases = env_u64("SEGLOG_KAFKA_COMPACT_CASES", 200);
    let seed = env_u64("SEGLOG_KAFKA_COMPACT_SEED", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(seed);
    let compressed = env_u64("SEGLOG_KAFKA_COMPACT_COMPRESSED_CASES", 48);
    let mut list = Vec::new();
    let mut write_args = Vec::new();
    // The uncompressed cases first (their draws do not depend on how many compressed ones follow).
    for i in 0..cases + compressed {
        let codec = if i < cases {
            "none"
        } else {
            CODECS[((i - cases) % 4) as usize]
        };
        let name = format!("case-{i}");
        let batches = 60 + rng.below(500);
        let segment_bytes = [4096u64, 16384, 65536, 1 << 20][rng.below(4) as usize];
        // Offset maps from 8 slots (several passes) to ample (one pass).
        let dedupe = [24 * 8, 24 * 40, 24 * 200, 1 << 20][rng.below(4) as usize];
        let retention = [1000i64, 86_400_000][rng.below(2) as usize];
        let passes = 1 + rng.below(3);
        let dir = tmp.path().join("base").join(&name).join("compacted-0");
        write_args.extend([
            dir.display().to_string(),
            (seed * 100_000 + i).to_string(),
            batches.to_string(),
            segment_bytes.to_string(),
            codec.to_string(),
        ]);
        list.push(Case {
            name,
            codec,
            dedupe,
            retention,
            segment_bytes,
            passes,
        });
    }
    let args: Vec<&str> = write_args.iter().map(String::as_str).collect();
    let mut w = vec!["compact-write"];
    w.extend(args);
    harness(&w, 10 * MIN);

    let part = |side: &str, c: &Case| -> PathBuf {
        tmp.path().join(side).join(&c.name).join("compacted-0")
    };
    let mut clean_args = vec!["compact-clean".to_string()];
    for c in &list {
        for side in ["kafka", "seglog", "orig"] {
            copy_tree(
                &tmp.path().join("base").join(&c.name),
                &tmp.path().join(side).join(&c.name),
            );
        }
        clean_args.extend([
            NOW.to_string(),
            c.dedupe.to_string(),
            c.retention.to_string(),
            c.segment_bytes.to_string(),
            c.passes.to_string(),
            part("kafka", c).display().to_string(),
        ]);
    }
    let args: Vec<&str> = clean_args.iter().map(String::as_str).collect();
    let kafka_out = harness(&args, 10 * MIN);
    let kafka_passes = json_lines(&kafka_out);

    let (mut changed, mut multi_pass, mut mismatches) = (0, 0, Vec::new());
    let mut to_dump: Vec<(String, String)> = Vec::new();
    let mut recompressed = 0;
    for c in &list {
        let dir = part("seglog", c);
        for pass in 0..c.passes as i64 {
            let now = NOW + pass * (c.retention + 1);
            let mut cmd = seglog();
            cmd.args([
                "compact",
                "--now-ms",
                &now.to_string(),
                "--dedupe-buffer-size",
                &c.dedupe.to_string(),
                "--delete-retention-ms",
                &c.retention.to_string(),
                "--segment-bytes",
                &c.segment_bytes.to_string(),
            ])
            .arg(&dir);
            let out = run(cmd, MIN, "seglog compact");
            assert!(
                out.status.success(),
                "{}: seglog compact pass {pass}: {}",
                c.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let k = segment_files(&part("kafka", c));
        let s = segment_files(&dir);
        if k != segment_files(&part("orig", c)) {
            changed += 1;
        }
        let cleaned_passes = kafka_passes
            .iter()
            .filter(|p| {
                p["dir"].as_str() == Some(&*part("kafka", c).display().to_string())
                    && p["first_dirty"] != p["first_uncleanable"]
            })
            .count();
        if cleaned_passes > 1 {
            multi_pass += 1;
        }
        let describe = |names: Vec<&String>| {
            format!(
                "{} ({} dedupe {} retention {} segment.bytes {} passes {}): {:?}",
                c.name, c.codec, c.dedupe, c.retention, c.segment_bytes, c.passes, names
            )
        };
        if c.codec == "none" {
            if k != s {
                let names = k
                    .keys()
                    .chain(s.keys())
                    .filter(|n| k.get(*n) != s.get(*n))
                    .collect();
                mismatches.push(describe(names));
            }
        } else if !k.keys().eq(s.keys()) {
            // Compressed: the same segments first; the rest is compared from Kafka's dump below.
            let names = k
                .keys()
                .chain(s.keys())
                .filter(|n| k.contains_key(*n) != s.contains_key(*n))
                .collect();
            mismatches.push(describe(names));
        } else {
            if k != s {
                recompressed += 1;
            }
            let differ: Vec<&String> = k
                .keys()
                .filter(|n| {
                    if let Some(base) = n.strip_suffix(".log") {
                        let base: i64 = base.parse().expect("segment base offset");
                        let kafka_side = appended_indexes(&k[*n], base);
                        batch_headers(&k[*n]) != batch_headers(&s[*n])
                            // Kafka's indexes follow the rule; seglog's follow it on its batches.
                            || kafka_side != (k[&format!("{base:020}.index")].clone(), k[&format!("{base:020}.timeindex")].clone())
                            || appended_indexes(&s[*n], base)
                                != (s[&format!("{base:020}.index")].clone(), s[&format!("{base:020}.timeindex")].clone())
                    } else {
                        n.ends_with(".txnindex") && k.get(*n) != s.get(*n)
                    }
                })
                .collect();
            if !differ.is_empty() {
                mismatches.push(describe(differ));
            }
            for n in k.keys().filter(|n| n.ends_with(".log")) {
                to_dump.push((c.name.clone(), n.clone()));
            }
        }
    }
    // Compressed cases: Kafka's DumpLogSegments reads both sides' files (one JVM per side).
    let mut dumped = 0;
    if !to_dump.is_empty() {
        let dumps: Vec<BTreeMap<String, String>> = ["kafka", "seglog"]
            .iter()
            .map(|side| {
                let root = tmp.path().join(side);
                let files: Vec<String> = to_dump
                    .iter()
                    .map(|(case, n)| {
                        root.join(case)
                            .join("compacted-0")
                            .join(n)
                            .display()
                            .to_string()
                    })
                    .collect();
                let text = harness(
                    &[
                        "dump",
                        "--deep-iteration",
                        "--print-data-log",
                        "--files",
                        &files.join(","),
                    ],
                    10 * MIN,
                );
                dump_sections(&text, &root)
            })
            .collect();
        for (case, n) in &to_dump {
            let key = format!("{case}/compacted-0/{n}");
            let (k, s) = (dumps[0].get(&key), dumps[1].get(&key));
            assert!(k.is_some() && s.is_some(), "no dump of {key}");
            dumped += 1;
            if k != s {
                let (k, s) = (k.unwrap(), s.unwrap());
                let first = k
                    .lines()
                    .zip(s.lines())
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| format!("\n kafka:  {a}\n seglog: {b}"))
                    .unwrap_or_else(|| "(one is a prefix of the other)".into());
                mismatches.push(format!("{key}: {first}"));
            }
        }
    }
    eprintln!(
        "{} cases ({compressed} compressed: {recompressed} with recompressed batches, {dumped} files \
         compared through DumpLogSegments), {changed} changed by Kafka's cleaner, {multi_pass} in \
         several passes, {} differ",
        list.len(),
        mismatches.len()
    );
    if !mismatches.is_empty() {
        // Kept for a look: the originals, Kafka's and seglog's copies.
        eprintln!("cases kept in {}", tmp.keep().display());
    }
    assert!(
        mismatches.is_empty(),
        "{} differences from Kafka's cleaner in {} cases: {:#?}",
        mismatches.len(),
        list.len(),
        mismatches
    );
    // The cases must exercise the cleaner: most change the log, some take several passes.
    assert!(changed * 2 > list.len(), "only {changed} cases changed");
    if list.len() >= 20 {
        assert!(multi_pass > 0, "no case was cleaned in more than one pass");
    }
}

/// A broker restarted on a log `seglog compact` cleaned serves exactly the records a compaction
/// keeps, to Kafka's own consumer. The broker (its cleaner off: `log.cleaner.enable=false`)
/// writes a compacted topic of one partition, about six 1 MiB segments: an idempotent lz4
/// producer's keyed records and tombstones, a transactional producer's commits and aborts. After a
/// clean stop `seglog compact --topic` cleans the log directory; the broker restarts with no
/// clean-shutdown marker and no recovery points (it re-validates every batch, seglog's
/// recompressed ones too) and serves, under both isolation levels, what the producers' acks say
/// a compaction keeps: below the active segment the newest committed record of each key (a
/// tombstone among them as a null value: its delete horizon has not passed), no aborted record,
/// and every record of the active segment; every offset as acked.
#[test]
fn broker_serves_a_log_seglog_compacted() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tempdir");
    let log_dir = tmp.path().join("kafka-logs");
    let no_cleaner = "log.cleaner.enable=false\n";
    let broker = Broker::start_with(tmp.path(), &log_dir, true, no_cleaner);
    broker.client(
        "create-topic",
        &[
            "compacted",
            "1",
            "cleanup.policy=compact",
            "segment.bytes=1048576",
        ],
    );
    let produced = json_lines(&broker.client("produce-compacted", &["compacted", "40"]));
    let status = broker.stop();
    assert!(
        status.success() || status.code() == Some(143),
        "broker exit {status}"
    );
    let dir = &partition_dirs(&log_dir, "compacted")[0];
    let bases: Vec<i64> = segment_files(dir)
        .keys()
        .filter_map(|n| n.strip_suffix(".log").map(|b| b.parse().expect("base")))
        .collect();
    assert!(bases.len() >= 4, "segments {bases:?}");
    let active = *bases.iter().max().expect("segments");
    let log_bytes = |d: &Path| -> usize {
        segment_files(d)
            .iter()
            .filter(|(n, _)| n.ends_with(".log"))
            .map(|(_, b)| b.len())
            .sum()
    };
    let before = log_bytes(dir);

    // The expected records, from the acks alone.
    let key_of = |r: &Value| r["key"].as_str().expect("key").to_string();
    let aborted = |r: &Value| r["aborted"].as_bool() == Some(true);
    let mut newest: BTreeMap<String, i64> = BTreeMap::new();
    for r in produced.iter().filter(|r| !aborted(r)) {
        let o = r["offset"].as_i64().expect("offset");
        if o < active {
            let e = newest.entry(key_of(r)).or_insert(o);
            *e = (*e).max(o);
        }
    }
    let (mut want_all, mut want_committed) = (BTreeMap::new(), BTreeMap::new());
    let (mut tombstones, mut aborted_in_active) = (0, 0);
    for r in &produced {
        let o = r["offset"].as_i64().expect("offset");
        let kept = if o < active {
            !aborted(r) && newest[&key_of(r)] == o
        } else {
            true
        };
        if !kept {
            continue;
        }
        let mut v = r.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("aborted");
        }
        if o < active && v["value_len"] == -1 {
            tombstones += 1;
        }
        if o >= active && aborted(r) {
            aborted_in_active += 1;
        }
        want_all.insert((0, o), v.clone());
        if !aborted(r) {
            want_committed.insert((0, o), v);
        }
    }
    assert!(
        tombstones > 0,
        "no tombstone is the newest record of its key below the active segment"
    );

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        .to_string();
    let mut cmd = seglog();
    cmd.args([
        "compact",
        "--topic",
        "compacted",
        "--now-ms",
        &now_ms,
        "--segment-bytes",
        "1048576",
        "--dedupe-buffer-size",
        "1048576",
    ])
    .arg(&log_dir);
    let out = run(cmd, MIN, "seglog compact");
    assert!(
        out.status.success(),
        "seglog compact: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = log_bytes(dir);
    assert!(
        after * 2 < before,
        "compaction kept {after} of {before} bytes"
    );

    let _ = std::fs::remove_file(log_dir.join(".kafka_cleanshutdown"));
    let _ = std::fs::remove_file(log_dir.join("recovery-point-offset-checkpoint"));
    let broker = Broker::start_with(tmp.path(), &log_dir, false, no_cleaner);
    let got_all = consume(&broker, "compacted", 1, "read_uncommitted");
    let got_committed = consume(&broker, "compacted", 1, "read_committed");
    let console = broker.console_text();
    broker.stop();
    eprintln!(
        "{} records acked, {} kept below offset {active} (the active segment's base; {tombstones} \
         tombstones), {} served under read_uncommitted ({aborted_in_active} aborted in the \
         active segment), {} under read_committed; .log bytes {before} -> {after}",
        produced.len(),
        newest.len(),
        want_all.len(),
        want_committed.len()
    );
    assert_eq!(got_all.len(), want_all.len(), "read_uncommitted count");
    assert_eq!(got_all, want_all, "read_uncommitted");
    assert_eq!(got_committed, want_committed, "read_committed");
    let errors: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("compacted-0"))
        .collect();
    assert!(errors.is_empty(), "the broker logged errors: {errors:#?}");
}
