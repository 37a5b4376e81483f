//! `.index`, `.timeindex`, `.txnindex` and `.snapshot` dumps on files built in a temp dir.

use recovery::internals::encode_snapshot;
use recovery::SnapshotEntry;
use seglog::cli::Status;
use segment_store::AbortedTxn;

use super::common::{dump, sample_log, tempdir, write};

/// `.index` bytes: (relative offset, position) entries, then `zero_tail` all-zero entries.
fn offset_index(entries: &[(i32, i32)], zero_tail: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (rel, pos) in entries {
        out.extend_from_slice(&rel.to_be_bytes());
        out.extend_from_slice(&pos.to_be_bytes());
    }
    out.resize(out.len() + 8 * zero_tail, 0);
    out
}

/// `.timeindex` bytes: (timestamp, relative offset) entries, then `zero_tail` zero entries.
fn time_index(entries: &[(i64, i32)], zero_tail: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (ts, rel) in entries {
        out.extend_from_slice(&ts.to_be_bytes());
        out.extend_from_slice(&rel.to_be_bytes());
    }
    out.resize(out.len() + 12 * zero_tail, 0);
    out
}

const BASE: i64 = 100;
const LOG: &str = "00000000000000000100.log";

/// A segment at offset 100 with 4 batches of 3 records (last offsets 102, 105, 108, 111).
fn segment(dir: &std::path::Path) -> Vec<(usize, i64)> {
    let (log, layout) = sample_log(BASE, 4);
    write(dir, LOG, &log);
    layout
}

#[test]
fn offset_index_dump_stops_at_the_zero_filled_tail() {
    let dir = tempdir();
    let layout = segment(dir.path());
    let entries = [(2, 0), (5, layout[1].0 as i32), (11, layout[3].0 as i32)];
    let path = write(
        dir.path(),
        "00000000000000000100.index",
        &offset_index(&entries, 5),
    );
    let out = dump(&[path.as_os_str()]);
    let expected = format!(
        "Dumping {p}\noffset: 102 position: 0\noffset: 105 position: {}\noffset: 111 position: {}\n",
        layout[1].0,
        layout[3].0,
        p = path.display()
    );
    assert_eq!(out.stdout, expected);
    assert_eq!(out.stderr, "");
    assert_eq!(out.status, Status::Success);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    let lines = out.json_lines();
    assert_eq!(lines[0]["type"], "file");
    assert_eq!(lines[0]["fileType"], "offsetIndex");
    assert_eq!(lines[0]["baseOffset"], BASE);
    assert_eq!(
        lines[1],
        serde_json::json!({"type": "indexEntry", "offset": 102, "position": 0})
    );
    assert_eq!(lines.len(), 5);
    let summary = &lines[4];
    assert_eq!(summary["entries"], 3);
    assert_eq!(summary["invalidBytes"], 0);
    assert!(summary["error"].is_null());
}

#[test]
fn verify_index_only_reports_mismatches_like_kafka() {
    let dir = tempdir();
    let layout = segment(dir.path());
    // 104 is not a batch's last offset: the batch at that position ends at 105.
    let entries = [(2, 0), (4, layout[1].0 as i32)];
    let path = write(
        dir.path(),
        "00000000000000000100.index",
        &offset_index(&entries, 0),
    );
    let out = dump(&["--verify-index-only".as_ref(), path.as_os_str()]);
    assert_eq!(out.stdout, format!("Dumping {}\n", path.display()));
    let abs = std::path::absolute(&path).expect("absolute");
    assert_eq!(
        out.stderr,
        format!(
            "Mismatches in :{}\n  Index offset: 104, log offset: 105\n",
            abs.display()
        )
    );
    assert_eq!(out.status, Status::Damaged);

    // Without --verify-index-only the entries are printed too.
    let out = dump(&[path.as_os_str()]);
    assert!(out.stdout.contains("offset: 104 position: "));
    assert_eq!(out.status, Status::Damaged);
}

#[test]
fn empty_index_and_sanity_check() {
    let dir = tempdir();
    segment(dir.path());
    let empty = write(dir.path(), "00000000000000000100.index", &[]);
    let out = dump(&[empty.as_os_str()]);
    assert_eq!(
        out.stdout,
        format!("Dumping {0}\n{0} is empty.\n", empty.display())
    );
    assert_eq!(out.status, Status::Success);

    let good = write(
        dir.path(),
        "00000000000000000100.index",
        &offset_index(&[(2, 0)], 3),
    );
    let out = dump(&["--index-sanity-check".as_ref(), good.as_os_str()]);
    assert_eq!(
        out.stdout,
        format!("Dumping {0}\n{0} passed sanity check.\n", good.display())
    );
    assert_eq!(out.status, Status::Success);

    // 12 bytes: not a multiple of 8.
    let mut bad = offset_index(&[(2, 0)], 0);
    bad.extend_from_slice(&[0; 4]);
    let bad = write(dir.path(), "00000000000000000100.index", &bad);
    let out = dump(&["--index-sanity-check".as_ref(), bad.as_os_str()]);
    assert_eq!(out.stdout, format!("Dumping {}\n", bad.display()));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("not a multiple of 8"), "{}", out.stderr);
    assert_eq!(out.status, Status::Damaged);
}

#[test]
fn time_index_dump_and_verification() {
    let dir = tempdir();
    segment(dir.path());
    let ts = |o: i64| 1_700_000_000_000 + o;
    let good = time_index(&[(ts(102), 2), (ts(108), 8)], 2);
    let path = write(dir.path(), "00000000000000000100.timeindex", &good);
    let out = dump(&[path.as_os_str()]);
    assert_eq!(
        out.stdout,
        format!(
            "Dumping {}\ntimestamp: 1700000000102 offset: 102\ntimestamp: 1700000000108 offset: 108\n",
            path.display()
        )
    );
    assert_eq!(out.stderr, "");
    assert_eq!(out.status, Status::Success);

    let out = dump(&["--index-sanity-check".as_ref(), path.as_os_str()]);
    // The zero-filled tail is the last entry Kafka's sanity check looks at: timestamp 0 is less
    // than the first timestamp, so a preallocated time index fails it (and is rebuilt on load).
    assert_eq!(out.status, Status::Damaged, "{}", out.stdout);

    // Wrong timestamp at 105, and offset 104 is not a batch's last offset.
    let bad = time_index(&[(ts(102), 2), (ts(100), 4), (ts(99), 5)], 0);
    let path = write(dir.path(), "00000000000000000100.timeindex", &bad);
    let out = dump(&["--verify-index-only".as_ref(), path.as_os_str()]);
    assert_eq!(out.stdout, format!("Dumping {}\n", path.display()));
    let abs = std::path::absolute(&path).expect("absolute");
    assert_eq!(
        out.stderr,
        format!(
            "Found timestamp mismatch in :{0}\n  Index timestamp: 1700000000099, log timestamp: 1700000000105\n\
             Found out of order timestamp in :{0}\n  Index timestamp: 1700000000099, Previously indexed timestamp: 1700000000100\n\
             The following indexed offsets are not found in :{0}\nIndexed offset: 104, found log offset: 105\n",
            abs.display()
        )
    );
    assert_eq!(out.status, Status::Damaged);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    let lines = out.json_lines();
    assert_eq!(
        lines[1],
        serde_json::json!({"type": "timeIndexEntry", "timestamp": ts(102), "offset": 102})
    );
    assert_eq!(
        lines.last().expect("summary")["error"]["kind"],
        "timeIndexMismatch"
    );
}

#[test]
fn txn_index_dump() {
    let dir = tempdir();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&AbortedTxn::new(7, 100, 110, 100).to_bytes());
    bytes.extend_from_slice(&AbortedTxn::new(8, 120, 130, 115).to_bytes());
    let path = write(dir.path(), "00000000000000000100.txnindex", &bytes);
    let out = dump(&[path.as_os_str()]);
    assert_eq!(
        out.stdout,
        format!(
            "Dumping {}\n\
             version: 0 producerId: 7 firstOffset: 100 lastOffset: 110 lastStableOffset: 100\n\
             version: 0 producerId: 8 firstOffset: 120 lastOffset: 130 lastStableOffset: 115\n",
            path.display()
        )
    );
    assert_eq!(out.status, Status::Success);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    assert_eq!(
        out.json_lines()[1],
        serde_json::json!({"type": "abortedTxn", "version": 0, "producerId": 7, "firstOffset": 100,
                           "lastOffset": 110, "lastStableOffset": 100})
    );

    // A torn trailing entry: the whole entries are printed, the rest is reported.
    bytes.truncate(34 + 20);
    let path = write(dir.path(), "00000000000000000100.txnindex", &bytes);
    let out = dump(&[path.as_os_str()]);
    assert_eq!(out.stdout.lines().count(), 2);
    assert_eq!(out.status, Status::Damaged);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

#[test]
fn producer_snapshot_dump() {
    let dir = tempdir();
    let entries = [
        SnapshotEntry {
            producer_id: 1000,
            producer_epoch: 3,
            last_sequence: 7,
            last_offset: 42,
            offset_delta: 2,
            timestamp: 1_700_000_000_042,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        },
        SnapshotEntry {
            producer_id: 2000,
            producer_epoch: 0,
            last_sequence: -1,
            last_offset: -1,
            offset_delta: 0,
            timestamp: 1_700_000_000_000,
            coordinator_epoch: 11,
            current_txn_first_offset: 40,
        },
    ];
    let bytes = encode_snapshot(&entries);
    let path = write(dir.path(), "00000000000000000043.snapshot", &bytes);
    let out = dump(&[path.as_os_str()]);
    assert_eq!(
        out.stdout,
        format!(
            "Dumping {}\n\
             producerId: 1000 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 1700000000042 firstSequence: 5 lastSequence: 7 lastOffset: 42 offsetDelta: 2 timestamp: 1700000000042\n\
             producerId: 2000 producerEpoch: 0 coordinatorEpoch: 11 currentTxnFirstOffset: OptionalLong[40] lastTimestamp: 1700000000000\n",
            path.display()
        )
    );
    assert_eq!(out.status, Status::Success);

    let out = dump(&["--json".as_ref(), path.as_os_str()]);
    let lines = out.json_lines();
    assert_eq!(lines[1]["type"], "producerSnapshotEntry");
    assert_eq!(lines[1]["firstSequence"], 5);
    assert!(lines[2]["lastOffset"].is_null());
    assert_eq!(lines[2]["currentTxnFirstOffset"], 40);
    assert_eq!(lines[3]["entries"], 2);

    let mut corrupt = bytes.clone();
    corrupt[20] ^= 1;
    let path = write(dir.path(), "00000000000000000043.snapshot", &corrupt);
    let out = dump(&[path.as_os_str()]);
    assert_eq!(out.stdout, format!("Dumping {}\n", path.display()));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("crc"), "{}", out.stderr);
    assert_eq!(out.status, Status::Damaged);
}
