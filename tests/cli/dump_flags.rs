//! `seglog dump`'s operator paper cuts: verifying an index without its segment, `--json` with
//! `--skip-record-metadata`, record sizes in JSON, usage errors that name the subcommand's help,
//! and a message about a bad `--max-bytes` value.

use seglog::cli::Status;

use super::common::{dump, tempdir, testdata, write};
use super::run::{assert_no_panic, seglog};

#[test]
fn verify_index_only_without_a_log_segment_is_not_a_pass() {
    let dir = tempdir();
    // Two offset index entries and two time index entries, but no .log beside them.
    let mut index = Vec::new();
    for (rel, pos) in [(1i32, 0i32), (5, 4096)] {
        index.extend_from_slice(&rel.to_be_bytes());
        index.extend_from_slice(&pos.to_be_bytes());
    }
    let mut time = Vec::new();
    for (ts, rel) in [(1_700_000_000_001i64, 1i32), (1_700_000_000_005, 5)] {
        time.extend_from_slice(&ts.to_be_bytes());
        time.extend_from_slice(&rel.to_be_bytes());
    }
    for (name, bytes) in [
        ("00000000000000000100.index", &index),
        ("00000000000000000100.timeindex", &time),
    ] {
        let path = write(dir.path(), name, bytes);
        let out = dump(&["--verify-index-only".as_ref(), path.as_os_str()]);
        assert_eq!(out.status, Status::Damaged, "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains("not verified: no log segment"),
            "{name}: {}",
            out.stderr
        );
        // Printing an index without its log stays a warning and a success.
        let out = dump(&[path.as_os_str()]);
        assert_eq!(out.status, Status::Success, "{name}: {}", out.stderr);
    }
}

#[test]
fn json_works_with_skip_record_metadata() {
    let log = testdata().join("kafka-clients/transactional.log");
    let full = dump(&[
        "--json".as_ref(),
        "--deep-iteration".as_ref(),
        log.as_os_str(),
    ]);
    let skip = dump(&[
        "--json".as_ref(),
        "--skip-record-metadata".as_ref(),
        "--deep-iteration".as_ref(),
        log.as_os_str(),
    ]);
    assert_eq!(skip.status, Status::Success, "{}", skip.stderr);
    let records = |o: &super::common::Output| -> Vec<serde_json::Value> {
        o.json_lines()
            .into_iter()
            .filter(|l| l["type"] == "record")
            .collect()
    };
    let (all, skipped) = (records(&full), records(&skip));
    // Control records (the commit/abort markers) are skipped, as Kafka's text skips them.
    let data: Vec<&serde_json::Value> = all.iter().filter(|r| r["controlType"].is_null()).collect();
    assert!(all.len() > data.len(), "the fixture has control records");
    assert_eq!(skipped.len(), data.len());
    for (s, a) in skipped.iter().zip(data) {
        assert_eq!(s["offset"], a["offset"]);
        assert_eq!(s["key"], a["key"]);
        assert_eq!(s["value"], a["value"]);
        for gone in ["timestamp", "keySize", "valueSize", "headers", "sequence"] {
            assert!(s.get(gone).is_none(), "{gone} in {s}");
        }
    }
}

#[test]
fn json_records_carry_key_and_value_sizes() {
    let log = testdata().join("kafka-clients/headers-nulls.log");
    let out = dump(&[
        "--json".as_ref(),
        "--deep-iteration".as_ref(),
        log.as_os_str(),
    ]);
    let mut saw_null = false;
    for r in out
        .json_lines()
        .into_iter()
        .filter(|l| l["type"] == "record")
    {
        for (field, size) in [("key", "keySize"), ("value", "valueSize")] {
            let expected = r[field].as_str().map_or(-1, |h| (h.len() / 2) as i64);
            saw_null |= expected == -1;
            assert_eq!(r[size].as_i64(), Some(expected), "{r}");
        }
    }
    assert!(saw_null, "the fixture has null keys or values");
}

#[test]
fn usage_errors_point_at_the_subcommand_help() {
    for (args, help) in [
        (
            &["dump", "--no-such-flag", "a.log"][..],
            "see 'seglog dump --help'",
        ),
        (&["verify", "--no-such-flag"], "see 'seglog verify --help'"),
        (&["no-such-command"], "see 'seglog --help'"),
    ] {
        let argv: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (code, _, stderr) = seglog(&argv);
        assert_eq!(code, 2, "{args:?}");
        assert!(stderr.contains(help), "{args:?}: {stderr}");
        assert_no_panic(&stderr);
    }
}

#[test]
fn a_negative_max_bytes_gets_a_message_about_the_value() {
    let (code, stdout, stderr) = seglog(&[
        "dump".as_ref(),
        "--max-bytes".as_ref(),
        "-1".as_ref(),
        "a.log".as_ref(),
    ]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("-1 is negative") && !stderr.contains("unexpected argument"),
        "{stderr}"
    );
}

#[test]
fn plain_decoders_and_kafka_decoder_classes() {
    use seglog::cli::dump::decoders::PlainDecoder;
    let v = br#"{ "a" : [1, 2] }"#;
    assert_eq!(PlainDecoder::Json.show(v), r#"{"a":[1,2]}"#);
    assert_eq!(PlainDecoder::Json.show(b"not json"), "not json");
    assert_eq!(PlainDecoder::Hex.show(&[0, 0xab]), "00ab");
    assert_eq!(PlainDecoder::Base64.show(b"hi"), "aGk=");
    for (class, bytes, shown) in [
        (
            "org.apache.kafka.tools.api.StringDecoder",
            &b"x\xffy"[..],
            "x\u{FFFD}y",
        ),
        (
            "org.apache.kafka.tools.api.IntegerDecoder",
            &[0, 0, 1, 0][..],
            "256",
        ),
        (
            "org.apache.kafka.tools.api.LongDecoder",
            &[0xff; 8][..],
            "-1",
        ),
        (
            "org.apache.kafka.tools.api.DefaultDecoder",
            &[1, 2][..],
            "0102",
        ),
        ("StringDecoder", &b"s"[..], "s"),
    ] {
        let d = PlainDecoder::from_class(class).unwrap_or_else(|e| panic!("{class}: {e}"));
        assert_eq!(d.show(bytes), shown, "{class}");
    }
    let refused = PlainDecoder::from_class("com.example.StringDecoder").expect_err("custom");
    assert_eq!(refused.lines().count(), 1);
}
