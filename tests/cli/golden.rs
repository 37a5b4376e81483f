//! Committed golden outputs under `tests/golden/`. `UPDATE_GOLDEN=1 cargo test -p seglog --test
//! cli golden` rewrites them; review the diff before committing. Temp-dir and repository paths
//! are replaced by `<tmp>` and `<repo>` so the files are stable.

use std::path::Path;

use record_format::{end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType};
use recovery::internals::encode_snapshot;
use recovery::SnapshotEntry;
use segment_store::AbortedTxn;

use super::common::{assert_lines_eq, dump, repo, sample_log, tempdir, testdata, write, Output};

/// The KIP-1279 barrier record line (the seglog rendering of control type 7).
const BARRIER_LINE: &str = r#"| offset: 42 CreateTime: 1700000000000 keySize: 4 valueSize: 7 sequence: -1 headerKeys: [] MirrorPidReset {"version":0,"sourceClusterId":"abc"}"#;

fn normalize(text: &str, tmp: Option<&Path>) -> String {
    let mut s = text.replace(&repo().display().to_string(), "<repo>");
    if let Some(t) = tmp {
        s = s.replace(&t.display().to_string(), "<tmp>");
    }
    s
}

/// Compares `actual` with `tests/golden/<name>`, or rewrites it when `UPDATE_GOLDEN=1`.
fn check_golden(name: &str, actual: &str) {
    let path = repo().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_lines_eq(actual, &expected, name);
}

/// stdout, then the stderr lines prefixed with `stderr: `, then the exit code.
fn transcript(out: &Output, tmp: Option<&Path>) -> String {
    let mut s = normalize(&out.stdout, tmp);
    for l in out.stderr.lines() {
        s += &format!("stderr: {}\n", normalize(l, tmp));
    }
    s += &format!("exit: {}\n", out.status.code());
    s
}

#[test]
fn barrier_batch() {
    let dir = tempdir();
    let path = write(
        dir.path(),
        "00000000000000000042.log",
        &mirror_pid_reset_batch(42, 1_700_000_000_000, 5, "abc"),
    );
    let out = dump(&[
        "--deep-iteration".as_ref(),
        "--print-data-log".as_ref(),
        path.as_os_str(),
    ]);
    let lines = out.stdout_lines();
    assert_eq!(lines[1], "Log starting offset: 42");
    assert_eq!(
        lines[2],
        "baseOffset: 42 lastOffset: 42 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 5 isTransactional: false isControl: true deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 79 magic: 2 compresscodec: none crc: 2204224202 isvalid: true"
    );
    assert_eq!(lines[3], BARRIER_LINE);
    assert_eq!(lines.len(), 4);
    check_golden("barrier-42.txt", &transcript(&out, Some(dir.path())));

    let out = dump(&[
        "--json".as_ref(),
        "--deep-iteration".as_ref(),
        path.as_os_str(),
    ]);
    check_golden("barrier-42.jsonl", &transcript(&out, Some(dir.path())));
}

#[test]
fn kafka_written_control_records() {
    for (name, file) in [
        ("kraft-control.txt", "kafka-clients/kraft-control.log"),
        ("transactional.txt", "kafka-clients/transactional.log"),
    ] {
        let path = testdata().join(file);
        let out = dump(&[
            "--deep-iteration".as_ref(),
            "--print-data-log".as_ref(),
            path.as_os_str(),
        ]);
        check_golden(name, &transcript(&out, None));
    }
}

/// One invocation over a whole segment: `.log`, `.index`, `.timeindex`, `.txnindex`,
/// `.snapshot`, and a file it ignores.
#[test]
fn whole_segment() {
    let dir = tempdir();
    let d = dir.path();
    let (mut log, layout) = sample_log(100, 2);
    let marker_at = log.len();
    log.extend_from_slice(&end_txn_marker_batch(
        106,
        1_700_000_000_106,
        1,
        77,
        2,
        ControlRecordType::Abort,
        9,
    ));
    write(d, "00000000000000000100.log", &log);
    let mut index = Vec::new();
    for (rel, pos) in [
        (2i32, 0i32),
        (5, layout[1].0 as i32),
        (6, marker_at as i32),
        (0, 0),
    ] {
        index.extend_from_slice(&rel.to_be_bytes());
        index.extend_from_slice(&pos.to_be_bytes());
    }
    write(d, "00000000000000000100.index", &index);
    let mut time = Vec::new();
    for (ts, rel) in [(1_700_000_000_102i64, 2i32), (1_700_000_000_106, 6), (0, 0)] {
        time.extend_from_slice(&ts.to_be_bytes());
        time.extend_from_slice(&rel.to_be_bytes());
    }
    write(d, "00000000000000000100.timeindex", &time);
    write(
        d,
        "00000000000000000100.txnindex",
        &AbortedTxn::new(77, 103, 106, 100).to_bytes(),
    );
    write(
        d,
        "00000000000000000107.snapshot",
        &encode_snapshot(&[SnapshotEntry {
            producer_id: 77,
            producer_epoch: 2,
            last_sequence: -1,
            last_offset: -1,
            offset_delta: 0,
            timestamp: 1_700_000_000_106,
            coordinator_epoch: 9,
            current_txn_first_offset: -1,
        }]),
    );
    write(d, "leader-epoch-checkpoint", b"0\n1\n1 100\n");
    let files: Vec<String> = [
        "00000000000000000100.log",
        "00000000000000000100.index",
        "00000000000000000100.timeindex",
        "00000000000000000100.txnindex",
        "00000000000000000107.snapshot",
        "leader-epoch-checkpoint",
    ]
    .iter()
    .map(|f| d.join(f).display().to_string())
    .collect();
    let joined = files.join(",");
    let out = dump(&["--deep-iteration", "--files", joined.as_str()]);
    assert_eq!(out.status, seglog::cli::Status::Success, "{}", out.stderr);
    check_golden("segment-100.txt", &transcript(&out, Some(d)));

    let out = dump(&["--json", "--deep-iteration", "--files", joined.as_str()]);
    check_golden("segment-100.jsonl", &transcript(&out, Some(d)));
}

#[test]
fn truncated_segment() {
    let dir = tempdir();
    let (log, layout) = sample_log(0, 3);
    let path = write(
        dir.path(),
        "00000000000000000000.log",
        &log[..layout[2].0 + 25],
    );
    let out = dump(&[
        "--deep-iteration".as_ref(),
        "--print-data-log".as_ref(),
        path.as_os_str(),
    ]);
    check_golden("truncated.txt", &transcript(&out, Some(dir.path())));
    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    check_golden("truncated.jsonl", &transcript(&out, Some(dir.path())));
}

/// CRC-32 (IEEE), as legacy messages use, bit by bit.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A legacy uncompressed message: offset, size, crc, magic, attributes, [timestamp], key, value.
fn legacy_message(offset: i64, magic: u8, ts: i64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = vec![magic, 0];
    if magic == 1 {
        body.extend_from_slice(&ts.to_be_bytes());
    }
    body.extend_from_slice(&(key.len() as i32).to_be_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(&(value.len() as i32).to_be_bytes());
    body.extend_from_slice(value);
    let mut out = offset.to_be_bytes().to_vec();
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc32(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[test]
fn legacy_entries_print_kafkas_legacy_lines() {
    let dir = tempdir();
    let v0 = legacy_message(0, 0, -1, b"k", b"abc");
    let v1 = legacy_message(1, 1, 1_700_000_000_000, b"k", b"xyz");
    let crc0 = u32::from_be_bytes(v0[12..16].try_into().expect("4 bytes"));
    let crc1 = u32::from_be_bytes(v1[12..16].try_into().expect("4 bytes"));
    let mut log = v0.clone();
    log.extend_from_slice(&v1);
    let path = write(dir.path(), "00000000000000000000.log", &log);
    let out = dump(&["--print-data-log".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, seglog::cli::Status::Success, "{}", out.stderr);
    let expected = format!(
        "Dumping {p}\nLog starting offset: 0\n\
         offset: 0 position: 0 NoTimestampType: -1 size: {s0} magic: 0 compresscodec: none crc: {crc0} isvalid: true\n\
         | offset: 0 NoTimestampType: -1 keySize: 1 valueSize: 3 isValid: true crc: {crc0} key: k payload: abc\n\
         offset: 1 position: {s0} CreateTime: 1700000000000 size: {s1} magic: 1 compresscodec: none crc: {crc1} isvalid: true\n\
         | offset: 1 CreateTime: 1700000000000 keySize: 1 valueSize: 3 isValid: true crc: {crc1} key: k payload: xyz\n",
        p = path.display(),
        s0 = v0.len(),
        s1 = v1.len(),
    );
    assert_lines_eq(&out.stdout, &expected, "legacy");
}

#[test]
fn kraft_snapshot_checkpoint_header() {
    let dir = tempdir();
    let path = write(
        dir.path(),
        "00000000000000000010-0000000001.checkpoint",
        &mirror_pid_reset_batch(0, 1_700_000_000_000, 1, "abc"),
    );
    let out = dump(&[path.as_os_str()]);
    let lines = out.stdout_lines();
    assert_eq!(lines[1], "Snapshot end offset: 10, epoch: 1");
    assert!(lines[2].starts_with("baseOffset: 0 "));
    assert_eq!(out.status, seglog::cli::Status::Success);
}
