//! `seglog dump`'s internal-topic decoders against Kafka's own `DumpLogSegments`.
//!
//! `testdata/kafka-internal/` holds segments of `__consumer_offsets`, `__transaction_state`,
//! `__share_group_state`, `__cluster_metadata` (log and snapshot) and `__remote_log_metadata`
//! written with Kafka's own serdes, and `expected/<case>.txt`: what Kafka 4.3.1's
//! `kafka.tools.DumpLogSegments` printed for them (both by `tools/dump-fixtures/regen.sh`).
//! Every case must match line for line (stdout, stderr with `@DIR@` for the fixture directory,
//! exit status); `--json` must carry the same decoded objects. `kafka2-timeindex/` is a segment
//! with the time index Kafka 2.x wrote (entries name the max-timestamp record inside a batch).
//! `testdata/kafka-broker/` holds the same for files a real Kafka 4.3.1 broker wrote
//! (`tools/dump-fixtures/broker.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::{assert_lines_eq, testdata};

fn dir() -> PathBuf {
    testdata().join("kafka-internal")
}

/// The fixture sets: written with Kafka's classes (`kafka-internal`), and by a real Kafka 4.3.1
/// broker (`kafka-broker`, by `tools/dump-fixtures/broker.sh`).
fn dirs() -> [PathBuf; 2] {
    [dir(), testdata().join("kafka-broker")]
}

/// `name|flags|file` lines of `expected/cases.txt` in `dir`.
fn cases_in(dir: &Path) -> Vec<(String, Vec<String>, String)> {
    let text = std::fs::read_to_string(dir.join("expected/cases.txt")).expect("cases.txt");
    let cases: Vec<_> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut parts = l.split('|');
            let name = parts.next().expect("name").to_owned();
            let flags = parts
                .next()
                .expect("flags")
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            let file = parts.next().expect("file").to_owned();
            (name, flags, file)
        })
        .collect();
    assert!(
        cases.len() >= 8,
        "expected the case list, found {}",
        cases.len()
    );
    cases
}

/// Runs the real executable in `cwd` (Kafka prints the path as given).
fn run_in(cwd: &Path, args: &[String]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .current_dir(cwd)
        .arg("dump")
        .args(args)
        .output()
        .expect("run seglog");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_case_prints_what_kafka_printed() {
    for dir in dirs() {
        every_case_in(&dir);
    }
}

fn every_case_in(dir: &Path) {
    for (name, flags, file) in cases_in(dir) {
        let expected = std::fs::read(dir.join(format!("expected/{name}.txt"))).expect("expected");
        let expected = String::from_utf8_lossy(&expected);
        let mut args = flags.clone();
        args.push("--files".to_owned());
        args.push(file.clone());
        let (code, stdout, stderr) = run_in(dir, &args);
        assert_lines_eq(&stdout, &expected, &name);
        let read = |ext: &str| {
            std::fs::read_to_string(dir.join(format!("expected/{name}.{ext}"))).expect(ext)
        };
        let abs = std::path::absolute(dir).expect("absolute");
        let expected_err = read("stderr").replace("@DIR@", &abs.display().to_string());
        assert_lines_eq(&stderr, &expected_err, &format!("{name} (stderr)"));
        let expected_code: i32 = read("code").trim().parse().expect("exit code");
        assert_eq!(code, expected_code, "{name}: exit status");
    }
}

/// The ` key: ` and ` payload: ` JSON of each record line of Kafka's text, by offset.
fn kafka_objects(text: &str) -> Vec<(i64, Option<serde_json::Value>, Option<serde_json::Value>)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| offset: ")) {
        let offset: i64 = line["| offset: ".len()..]
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("offset");
        let key = line.find(" key: {").map(|i| {
            let rest = &line[i + " key: ".len()..];
            let end = rest.find(" payload: ").unwrap_or(rest.len());
            serde_json::from_str(&rest[..end]).expect("key json")
        });
        let value = line
            .find(" payload: {")
            .map(|i| serde_json::from_str(&line[i + " payload: ".len()..]).expect("payload json"));
        out.push((offset, key, value));
    }
    out
}

#[test]
fn json_carries_the_objects_kafka_printed() {
    let mut checked = 0;
    for dir in dirs() {
        checked += json_objects_in(&dir);
    }
    assert!(checked >= 80, "only {checked} decoded values compared");
}

fn json_objects_in(dir: &Path) -> usize {
    let mut checked = 0;
    for (name, flags, file) in cases_in(dir) {
        if !flags.iter().any(|f| f.ends_with("-decoder")) || flags.len() != 1 {
            continue;
        }
        if flags[0] == "--remote-log-metadata-decoder" {
            continue; // Kafka prints Java toString there, not JSON
        }
        let expected =
            std::fs::read_to_string(dir.join(format!("expected/{name}.txt"))).expect("expected");
        let mut args = flags.clone();
        args.push("--json".to_owned());
        args.push(file.clone());
        let (code, stdout, stderr) = run_in(dir, &args);
        assert_eq!(code, 0, "{name}: {stderr}");
        let records: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
            .filter(|v| v["type"] == "record")
            .collect();
        for (offset, key, value) in kafka_objects(&expected) {
            let r = records
                .iter()
                .find(|r| r["offset"] == offset)
                .unwrap_or_else(|| panic!("{name}: no record {offset}"));
            if let Some(k) = key {
                assert_eq!(r["decodedKey"], k, "{name}: key of offset {offset}");
            }
            if let Some(v) = value {
                assert_eq!(r["decodedValue"], v, "{name}: value of offset {offset}");
                checked += 1;
            }
            assert!(
                r["keySize"].is_i64() && r["valueSize"].is_i64(),
                "{name}: sizes"
            );
        }
    }
    checked
}

#[test]
fn records_that_do_not_decode_keep_their_bytes_and_say_why() {
    let (code, stdout, stderr) = run_in(
        &dir(),
        &[
            "--offsets-decoder".to_owned(),
            "--json".to_owned(),
            "__consumer_offsets-0/00000000000000000000.log".to_owned(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let errors: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|v| v["type"] == "record" && !v["decodeError"].is_null())
        .collect();
    let reasons: Vec<&str> = errors
        .iter()
        .map(|e| e["decodeError"]["reason"].as_str().expect("reason"))
        .collect();
    assert_eq!(errors.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("unknown record type 99"), "{reasons:?}");
    assert!(
        reasons[1].contains("unknown record version 9"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("needed 8 bytes"), "{reasons:?}");
    for e in &errors {
        assert!(e["key"].is_string(), "raw key kept: {e}");
        assert!(e["decodeError"]["position"].as_u64().is_some_and(|p| p > 0));
    }
}

#[test]
fn a_custom_decoder_class_is_refused_with_one_line() {
    let (code, stdout, stderr) = run_in(
        &dir(),
        &[
            "--value-decoder-class".to_owned(),
            "com.example.MyDecoder".to_owned(),
            "__transaction_state-0/00000000000000000000.log".to_owned(),
        ],
    );
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("com.example.MyDecoder") && stderr.contains("no Java"),
        "{stderr}"
    );
}

#[test]
fn plain_decoders_show_hex_and_base64() {
    let file = "__share_group_state-0/00000000000000000000.log".to_owned();
    let (_, hex_out, _) = run_in(
        &dir(),
        &["--key-decoder".to_owned(), "hex".to_owned(), file.clone()],
    );
    let (_, b64_out, _) = run_in(
        &dir(),
        &["--value-decoder".to_owned(), "base64".to_owned(), file],
    );
    // ShareSnapshotKey: int16 type 0, then "sg" (int16 length 2) ...
    assert!(hex_out.contains(" key: 000000027367"), "{hex_out}");
    assert!(b64_out.contains(" payload: AAA"), "{b64_out}");
}

/// Every prefix and many single-byte corruptions of every fixture key and value: the decoders
/// never panic, and a failure names a byte position inside the field it read.
#[test]
fn damaged_records_never_panic_and_errors_point_inside_the_record() {
    use record_format::{Batches, DecodeLimits, LogEntry};
    use seglog::cli::dump::decoders::{Decoder, Field};

    let files = [
        (
            "__consumer_offsets-0/00000000000000000000.log",
            Decoder::Offsets,
        ),
        (
            "__transaction_state-0/00000000000000000000.log",
            Decoder::TransactionLog,
        ),
        (
            "__share_group_state-0/00000000000000000000.log",
            Decoder::ShareGroupState,
        ),
        (
            "__cluster_metadata-0/00000000000000000000.log",
            Decoder::ClusterMetadata,
        ),
        (
            "__remote_log_metadata-0/00000000000000000000.log",
            Decoder::RemoteLogMetadata,
        ),
    ];
    let mut tried = 0usize;
    let mut failed = 0usize;
    for (file, decoder) in files {
        let bytes = std::fs::read(dir().join(file)).expect("fixture");
        for entry in Batches::new(&bytes, 0) {
            let Ok(LogEntry::V2(b)) = entry else { continue };
            for r in b.records(&DecodeLimits::default()).expect("records").iter() {
                let r = r.expect("record");
                let (key, value) = (r.key(), r.value());
                let variants = |orig: Option<&[u8]>| -> Vec<Option<Vec<u8>>> {
                    let Some(o) = orig else { return vec![None] };
                    let mut v: Vec<Option<Vec<u8>>> =
                        (0..=o.len()).map(|n| Some(o[..n].to_vec())).collect();
                    for i in 0..o.len() {
                        for x in [0x00u8, 0x7f, 0x80, 0xff] {
                            let mut m = o.to_vec();
                            m[i] = x;
                            v.push(Some(m));
                        }
                    }
                    v
                };
                let base = 1_000_000u64;
                for k in variants(key).iter().take(64) {
                    for v in variants(value) {
                        let kf = Field {
                            bytes: k.as_deref(),
                            position: base,
                        };
                        let vf = Field {
                            bytes: v.as_deref(),
                            position: 2 * base,
                        };
                        let p = decoder.parse(r.offset(), kf, vf);
                        tried += 1;
                        assert!(p.key.is_some() || p.value.is_some(), "something is printed");
                        if let Some(e) = p.error {
                            failed += 1;
                            let inside = |start: u64, f: &Option<Vec<u8>>| {
                                e.position >= start
                                    && e.position
                                        <= start + f.as_ref().map_or(0, |b| b.len() as u64)
                            };
                            assert!(
                                inside(base, k) || inside(2 * base, &v),
                                "{file} offset {}: error position {} outside the record: {}",
                                r.offset(),
                                e.position,
                                e.reason
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(
        tried > 10_000 && failed > 1_000,
        "tried {tried}, failed {failed}"
    );
}
