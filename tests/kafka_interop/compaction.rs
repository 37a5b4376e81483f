//! Kafka's log cleaner as the oracle of `seglog compact` (issue 31).
//!
//! Each case is a partition of a compacted topic written by Kafka's `UnifiedLog.appendAsLeader`
//! (harness `compact-write`: keys, tombstones, plain, idempotent and transactional producers,
//! commits and aborts, several segments), copied twice. Kafka's `Cleaner.doClean` cleans one copy
//! (harness `compact-clean`, all cases in one JVM, a fixed clock, the range from
//! `LogCleanerManager.cleanableOffsets`), `seglog compact` the other, with the same clock, dedupe
//! buffer, `delete.retention.ms` and `segment.bytes`, pass for pass. The offset map is often
//! smaller than the dirty section, so the log is cleaned in several passes, the later ones after
//! the delete horizon of the first has passed. Every `.log`, `.index`, `.timeindex` and
//! `.txnindex` must be byte-identical (batches are uncompressed).
//!
//! `SEGLOG_KAFKA_COMPACT_CASES` (default 200), `SEGLOG_KAFKA_COMPACT_SEED` (default 1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::kafka::{copy_tree, harness, json_lines, run, seglog, Rng};
use super::{env_u64, heavy, MIN};

/// The clock of the first pass (the harness stamps records from 1_700_000_000_000 on).
const NOW: i64 = 1_700_000_000_000 + 10_000_000;

struct Case {
    name: String,
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

#[test]
fn differential_compaction() {
    let _g = heavy();
    let cases = env_u64("SEGLOG_KAFKA_COMPACT_CASES", 200);
    let seed = env_u64("SEGLOG_KAFKA_COMPACT_SEED", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(seed);
    let mut list = Vec::new();
    let mut write_args = Vec::new();
    for i in 0..cases {
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
        ]);
        list.push(Case {
            name,
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
        if k != s {
            let names: Vec<&String> = k
                .keys()
                .chain(s.keys())
                .filter(|n| k.get(*n) != s.get(*n))
                .collect();
            mismatches.push(format!(
                "{} (dedupe {} retention {} segment.bytes {} passes {}): {:?}",
                c.name, c.dedupe, c.retention, c.segment_bytes, c.passes, names
            ));
        }
    }
    if !mismatches.is_empty() {
        // Kept for a look: the originals, Kafka's and seglog's copies.
        eprintln!("cases kept in {}", tmp.keep().display());
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from Kafka's cleaner: {:#?}",
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
