//! Damaged `.log` files: whatever is valid is printed, then the trailer / summary, exit 1, and
//! one stderr line per problem. Kafka's tool prints invalid-CRC batches with `isvalid: false`
//! and goes on, which seglog keeps (text output stays Kafka's), adding the exit status.

use record_format::{ControlRecordType, RecordBatchBuilder};
use seglog::cli::Status;

use super::common::{dump, sample_log, tempdir, write};

const NAME: &str = "00000000000000000000.log";

fn batch_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("baseOffset: "))
        .collect()
}

#[test]
fn flipped_crc_byte_prints_every_batch_and_exits_1() {
    let dir = tempdir();
    let (mut log, layout) = sample_log(0, 4);
    let second = layout[1].0;
    log[second + 17] ^= 0xff; // first CRC byte
    let path = write(dir.path(), NAME, &log);

    let out = dump(&["--deep-iteration".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    let batches = batch_lines(&out.stdout);
    assert_eq!(batches.len(), 4, "{}", out.stdout);
    assert!(batches[0].ends_with("isvalid: true"));
    assert!(batches[1].ends_with("isvalid: false"), "{}", batches[1]);
    assert!(batches[3].ends_with("isvalid: true"));
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("| offset: "))
            .count(),
        12
    );
    assert!(!out.stdout.contains("invalid bytes"));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("CRC mismatch"), "{}", out.stderr);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    let lines = out.json_lines();
    let batches: Vec<_> = lines.iter().filter(|l| l["type"] == "batch").collect();
    assert_eq!(batches.len(), 4);
    assert_eq!(batches[1]["crcValid"], false);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["validBytes"], second);
    assert_eq!(summary["nextOffset"], layout[0].1 + 1);
    assert_eq!(summary["invalidBytes"], log.len() - second);
    assert_eq!(summary["error"]["kind"], "crcMismatch");
}

#[test]
fn truncated_tail_prints_the_kafka_trailer_and_exits_1() {
    let dir = tempdir();
    let (log, layout) = sample_log(0, 3);
    let cut = layout[2].0 + 30;
    let path = write(dir.path(), NAME, &log[..cut]);

    let out = dump(&[
        "--deep-iteration".as_ref(),
        "--print-data-log".as_ref(),
        path.as_os_str(),
    ]);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(batch_lines(&out.stdout).len(), 2);
    assert_eq!(
        out.stdout.lines().last(),
        Some(format!("Found 30 invalid bytes at the end of {NAME}").as_str())
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    let summary = out.json_lines().pop().expect("summary");
    assert_eq!(summary["validBytes"], layout[2].0);
    assert_eq!(summary["invalidBytes"], 30);
    assert_eq!(summary["nextOffset"], layout[1].1 + 1);
    assert_eq!(summary["error"]["kind"], "incompleteBatch");
    assert_eq!(summary["error"]["position"], layout[2].0);

    // With --max-bytes Kafka prints no trailer, and a cut at the limit is not damage.
    let out = dump(&[
        "--max-bytes".as_ref(),
        std::ffi::OsStr::new(&(layout[1].0 + 10).to_string()),
        path.as_os_str(),
    ]);
    assert_eq!(batch_lines(&out.stdout).len(), 1);
    assert!(!out.stdout.contains("invalid bytes"));
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
}

#[test]
fn garbage_after_the_last_batch() {
    let dir = tempdir();
    let (mut log, layout) = sample_log(0, 2);
    let end = log.len();
    log.extend_from_slice(&[0xab; 40]);
    let path = write(dir.path(), NAME, &log);

    let out = dump(&[path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(batch_lines(&out.stdout).len(), 2);
    assert_eq!(
        out.stdout.lines().last(),
        Some(format!("Found 40 invalid bytes at the end of {NAME}").as_str())
    );
    assert!(
        out.stderr.contains("invalid batch length"),
        "{}",
        out.stderr
    );

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    let summary = out.json_lines().pop().expect("summary");
    assert_eq!(summary["validBytes"], end);
    assert_eq!(summary["nextOffset"], layout[1].1 + 1);
    assert_eq!(summary["error"]["kind"], "badLength");
    assert_eq!(summary["error"]["position"], end);
}

#[test]
fn bad_magic_in_the_middle_stops_there() {
    let dir = tempdir();
    let (mut log, layout) = sample_log(0, 3);
    log[layout[1].0 + 16] = 7;
    let path = write(dir.path(), NAME, &log);
    let out = dump(&["--deep-iteration".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(batch_lines(&out.stdout).len(), 1);
    let trailing = log.len() - layout[1].0;
    assert_eq!(
        out.stdout.lines().last(),
        Some(format!("Found {trailing} invalid bytes at the end of {NAME}").as_str())
    );
    assert!(out.stderr.contains("invalid magic 7"), "{}", out.stderr);
}

/// A COMMIT marker whose value is 3 bytes: printed raw with the error, and the dump goes on.
#[test]
fn undecodable_control_value_is_printed_raw_and_the_dump_goes_on() {
    let dir = tempdir();
    let mut marker = RecordBatchBuilder::new(3)
        .producer(9, 0, -1)
        .transactional(true)
        .control(true);
    marker
        .append_control_record(
            1_700_000_000_003,
            ControlRecordType::Commit,
            Some(&[0, 0, 7]),
        )
        .expect("control record");
    let (mut log, _) = sample_log(0, 1);
    let (more, _) = sample_log(4, 1);
    log.extend_from_slice(&marker.build());
    let marker_position = log.len() - marker.build().len();
    log.extend_from_slice(&more);
    let path = write(dir.path(), NAME, &log);

    let out = dump(&["--deep-iteration".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(batch_lines(&out.stdout).len(), 3);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("| offset: 3 "))
        .expect("marker record line");
    assert!(
        line.starts_with(
            "| offset: 3 CreateTime: 1700000000003 keySize: 4 valueSize: 3 sequence: -1 headerKeys: [] controlType: COMMIT(1) value: 000007 error: "
        ),
        "{line}"
    );
    assert!(out.stdout.contains("| offset: 6 "), "the dump went on");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);

    let out = dump(&[
        "--json".as_ref(),
        "--deep-iteration".as_ref(),
        path.as_os_str(),
    ]);
    let lines = out.json_lines();
    let rec = lines
        .iter()
        .find(|l| l["type"] == "record" && l["offset"] == 3)
        .expect("marker record");
    assert_eq!(rec["controlType"], 1);
    assert!(rec["controlError"].is_string(), "{rec}");
    assert!(rec.get("coordinatorEpoch").is_none());
    // Every batch is CRC-valid: validBytes and nextOffset describe framing and CRCs only, as
    // Kafka's tool, verify and recovery see the file; the decoding error is still reported.
    let summary = lines.last().expect("summary");
    assert!(marker_position > 0);
    assert_eq!(summary["validBytes"], log.len());
    assert_eq!(summary["invalidBytes"], 0);
    assert_eq!(summary["nextOffset"], 7);
    assert_eq!(summary["error"]["kind"], "badControlValue");
    assert_eq!(lines.iter().filter(|l| l["type"] == "record").count(), 7);
}

/// A batch with a valid CRC whose record count lies: its records fail to decode, reported on
/// stderr; the next batch is still dumped.
#[test]
fn records_that_do_not_decode_are_reported_and_the_next_batch_is_dumped() {
    let dir = tempdir();
    let (mut log, layout) = sample_log(0, 2);
    let first = &mut log[..layout[1].0];
    first[57..61].copy_from_slice(&5i32.to_be_bytes()); // declares 5 records, holds 3
    let crc = crc32c::crc32c(&first[21..]);
    first[17..21].copy_from_slice(&crc.to_be_bytes());
    let path = write(dir.path(), NAME, &log);

    let out = dump(&["--deep-iteration".as_ref(), path.as_os_str()]);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(batch_lines(&out.stdout).len(), 2);
    assert!(batch_lines(&out.stdout)[0].ends_with("isvalid: true"));
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("| offset: "))
            .count(),
        6
    );
    assert!(out.stderr.contains("premature EOF"), "{}", out.stderr);

    let summary = dump(&[
        "--json".as_ref(),
        "--deep-iteration".as_ref(),
        path.as_os_str(),
    ])
    .json_lines()
    .pop()
    .expect("summary");
    // Both batches' framing and CRCs are valid: validBytes and nextOffset cover the whole file
    // (recovery keeps it all), and the decoding error is still reported.
    assert_eq!(summary["validBytes"], log.len());
    assert_eq!(summary["nextOffset"], layout[1].1 + 1);
    assert_eq!(summary["error"]["kind"], "recordCountMismatch");
}
