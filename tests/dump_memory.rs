//! Allocation budgets of the tools, enforced by this test binary's allocator (`cap::Cap`): an
//! allocation past the budget fails and aborts the binary, a loud failure. Only the heap counts
//! (the budget is on allocations): mapped file pages are page cache, not the process's memory.
//!
//! * `seglog dump --print-data-log` (and `--json --deep-iteration`) on a record whose value is far
//!   larger than the memory it may use: the batch is streamed from the file (see
//!   `src/cli/dump/stream.rs`), so the dump of a 40 MiB value fits in an 8 MiB allocation budget,
//!   and prints exactly the line the whole-value conversion (`java_utf8_lossy`, the JDK's rules)
//!   gives.
//! * `seglog verify` and `seglog recover --full` of one partition of 100,000 segments
//!   (`testkit::write_tiny_segments`, on a tmpfs when there is one) fit in 128 MiB: the plan keeps
//!   no path per segment or file, one segment's bytes open at a time, no index views of clean
//!   segments, and the snapshot bytes it writes once (docs/benchmarks.md, "Many segments in one
//!   partition").

use std::alloc::System;
use std::io::{self, Write};

use cap::Cap;
use seglog::cli::dump::DumpArgs;
use seglog::cli::Status;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Serialises the tests of this binary: a budget is global, so no other test may allocate
/// while one is in force.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` allowing at most `budget` bytes more than are live now.
fn within<T>(budget: usize, f: impl FnOnce() -> T) -> T {
    let base = ALLOC.allocated();
    ALLOC
        .set_limit(base.saturating_add(budget))
        .expect("limit is above what is allocated");
    let r = f();
    ALLOC.set_limit(usize::MAX).expect("lifting the limit");
    r
}

/// Checks the output against the expected bytes as it is written, without keeping it.
struct Compare<'a> {
    expected: &'a [u8],
    at: usize,
    first_difference: Option<usize>,
}

impl Write for Compare<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let want = self.expected.get(self.at..self.at + buf.len());
        if self.first_difference.is_none() && want != Some(buf) {
            self.first_difference = Some(self.at);
        }
        self.at += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const TS: i64 = 1_700_000_000_000;

/// A value of printable text with multi-byte characters and invalid UTF-8 sprinkled in, some of
/// them straddling the 256 KiB copy chunks; and the log: a small batch, then one batch of three
/// records whose first has the big value.
fn big_log(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, Vec<u8>, usize) {
    let mut value = Vec::with_capacity(40 << 20);
    let mut i = 0u32;
    while value.len() < 40 << 20 {
        match i % 7 {
            0 => value.extend_from_slice("€".as_bytes()),
            3 => value.push(0xff),
            _ => value.extend_from_slice(format!("v{i} ").as_bytes()),
        }
        i += 1;
    }
    let path = dir.join("00000000000000000000.log");
    let mut log = Vec::new();
    let mut small = record_format::RecordBatchBuilder::new(0);
    small
        .append(TS, Some(b"k0"), Some(b"v0"), &[])
        .expect("append");
    log.extend_from_slice(&small.build());
    let mut big = record_format::RecordBatchBuilder::new(1);
    big.append(
        TS + 1,
        Some(b"big"),
        Some(&value),
        &[
            record_format::Header::new("h1", Some(b"x".as_slice())),
            record_format::Header::new("h2", None),
        ],
    )
    .expect("append");
    big.append(TS + 2, None, None, &[]).expect("append");
    big.append(TS + 3, Some(b"k3"), Some(b"v3"), &[])
        .expect("append");
    let big_position = log.len();
    log.extend_from_slice(&big.build());
    std::fs::write(&path, &log).expect("write log");
    (path, value, log, big_position)
}

/// Collects the output's lines, except that `record` lines are compared with `records` as they
/// are written, never kept.
struct JsonLines<'a> {
    records: &'a [String],
    next: usize,
    at: usize,
    line: Vec<u8>,
    in_record: Option<bool>,
    others: Vec<String>,
    mismatch: Option<String>,
}

impl Write for JsonLines<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &byte in buf {
            if self.in_record.is_none() {
                self.line.push(byte);
                let prefix = br#"{"type":"record""#;
                if self.line.len() == prefix.len() || byte == b'\n' {
                    self.in_record = Some(self.line == prefix);
                    if self.in_record == Some(true) {
                        self.at = 0;
                        for &b in prefix {
                            self.compare(b);
                        }
                        self.line.clear();
                    }
                }
                if byte != b'\n' {
                    continue;
                }
            } else if self.in_record == Some(true) {
                if byte == b'\n' {
                    let want = self.records.get(self.next).map_or(0, String::len);
                    if self.at != want && self.mismatch.is_none() {
                        self.mismatch =
                            Some(format!("record line {} length {}", self.next, self.at));
                    }
                    self.next += 1;
                    self.in_record = None;
                } else {
                    self.compare(byte);
                }
                continue;
            } else {
                self.line.push(byte);
                if byte != b'\n' {
                    continue;
                }
            }
            // End of a line that is not a record.
            if self.in_record != Some(true) {
                let l = String::from_utf8_lossy(&self.line).trim_end().to_owned();
                self.others.push(l);
                self.line.clear();
                self.in_record = None;
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl JsonLines<'_> {
    fn compare(&mut self, byte: u8) {
        let want = self
            .records
            .get(self.next)
            .and_then(|l| l.as_bytes().get(self.at));
        if want != Some(&byte) && self.mismatch.is_none() {
            self.mismatch = Some(format!(
                "record line {} differs at byte {}",
                self.next, self.at
            ));
        }
        self.at += 1;
    }
}

#[test]
fn json_of_a_40_mib_value_is_streamed_within_an_8_mib_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, value, log, _) = big_log(dir.path());
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let records = vec![
        format!(
            r#"{{"type":"record","offset":0,"timestamp":{TS},"keySize":2,"valueSize":2,"key":"6b30","value":"7630","headers":[],"sequence":-1}}"#
        ),
        format!(
            r#"{{"type":"record","offset":1,"timestamp":{},"keySize":3,"valueSize":{},"key":"626967","value":"{}","headers":[{{"key":"h1","value":"78"}},{{"key":"h2","value":null}}],"sequence":-1}}"#,
            TS + 1,
            value.len(),
            hex(&value)
        ),
        format!(
            r#"{{"type":"record","offset":2,"timestamp":{},"keySize":-1,"valueSize":-1,"key":null,"value":null,"headers":[],"sequence":-1}}"#,
            TS + 2
        ),
        format!(
            r#"{{"type":"record","offset":3,"timestamp":{},"keySize":2,"valueSize":2,"key":"6b33","value":"7633","headers":[],"sequence":-1}}"#,
            TS + 3
        ),
    ];
    let log_len = log.len();
    drop(value);
    drop(log);
    let args = DumpArgs {
        json: true,
        deep_iteration: true,
        ..DumpArgs::new([&path])
    };
    let mut out = JsonLines {
        records: &records,
        next: 0,
        at: 0,
        line: Vec::with_capacity(64 << 10),
        in_record: None,
        others: Vec::with_capacity(16),
        mismatch: None,
    };
    let mut err = Vec::with_capacity(4096);
    let status = within(8 << 20, || {
        seglog::cli::dump::run(&args, &mut out, &mut err)
    });
    assert_eq!(status, Status::Success, "{}", String::from_utf8_lossy(&err));
    assert_eq!(out.mismatch, None);
    assert_eq!(out.next, records.len(), "record lines");
    let others: Vec<serde_json::Value> = out
        .others
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = others
        .iter()
        .map(|o| o["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["file", "batch", "batch", "summary"]);
    let big = &others[2];
    assert_eq!(big["baseOffset"], 1);
    assert_eq!(big["count"], 3);
    assert_eq!(big["crcValid"], true);
    assert_eq!(
        big["batchLength"].as_u64(),
        big["size"].as_u64().map(|s| s - 12)
    );
    assert_eq!(others[3]["validBytes"].as_u64(), Some(log_len as u64));
    assert_eq!(others[3]["nextOffset"], 4);
}

#[test]
fn a_40_mib_value_is_streamed_within_an_8_mib_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, value, log, big_position) = big_log(dir.path());
    let big_batch = &log[big_position..];
    let view = record_format::RecordBatch::new(big_batch, big_position as u64).expect("batch");
    let batch_line = seglog::cli::dump::log::batch_line(&view);
    assert!(batch_line.contains("isvalid: true"));
    let first_line = {
        let small_view = record_format::RecordBatch::new(&log[..big_position], 0).expect("small");
        seglog::cli::dump::log::batch_line(&small_view)
    };
    let expected = format!(
        "Dumping {p}\nLog starting offset: 0\n{first_line}\n\
         | offset: 0 CreateTime: {TS} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k0 payload: v0\n\
         {batch_line}\n\
         | offset: 1 CreateTime: {t1} keySize: 3 valueSize: {n} sequence: -1 headerKeys: [h1,h2] key: big payload: {text}\n\
         | offset: 2 CreateTime: {t2} keySize: -1 valueSize: -1 sequence: -1 headerKeys: []\n\
         | offset: 3 CreateTime: {t3} keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k3 payload: v3\n",
        p = path.display(),
        t1 = TS + 1,
        t2 = TS + 2,
        t3 = TS + 3,
        n = value.len(),
        text = seglog::cli::dump::java_utf8::java_utf8_lossy(&value),
    );
    drop(value);
    drop(log);
    let args = DumpArgs {
        print_data_log: true,
        ..DumpArgs::new([&path])
    };
    let mut out = Compare {
        expected: expected.as_bytes(),
        at: 0,
        first_difference: None,
    };
    let mut err = Vec::with_capacity(4096);
    let status = within(8 << 20, || {
        seglog::cli::dump::run(&args, &mut out, &mut err)
    });
    assert_eq!(status, Status::Success, "{}", String::from_utf8_lossy(&err));
    assert_eq!(out.first_difference, None, "output differs");
    assert_eq!(out.at, expected.len(), "output length");
}

/// A scratch folder on a tmpfs when there is one (300,000 small files).
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

/// The budget of `seglog verify` and `seglog recover --full` of one partition of 100,000
/// segments.
const SEGMENTS_BUDGET: usize = 128 << 20;

/// `verify`, then `recover --full`, of one partition of 100,000 tiny segments, each within
/// [`SEGMENTS_BUDGET`] of allocations. (Failed before with the allocations of the plan: a path
/// per file and per segment file, every segment's bytes and index views kept, the snapshot bytes
/// twice; and, in `recover`, each file's path in the report's before/after stamps and every
/// closed segment's whole struct: peaks of about 340 MB and 480 MB.)
#[test]
fn verify_and_recover_full_of_100_000_segments_fit_128_mib() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let root = scratch();
    let dir = root.path().join("orders-0");
    testkit::write_tiny_segments(&dir, 100_000).expect("segments");

    let verify = seglog::cli::verify::VerifyArgs {
        dir: dir.clone(),
        json: false,
        threads: None,
    };
    let (mut out, mut err) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    let status = within(SEGMENTS_BUDGET, || {
        seglog::cli::verify::run(&verify, &mut out, &mut err)
    });
    let text = String::from_utf8_lossy(&out);
    assert_eq!(
        status,
        Status::Success,
        "{text}{}",
        String::from_utf8_lossy(&err)
    );
    assert!(
        text.starts_with("orders-0: ok (100000 segment(s), 100000 batches"),
        "{text}"
    );

    let recover = seglog::cli::recover::RecoverArgs {
        dir: dir.clone(),
        full: true,
        json: false,
        now_ms: None,
        threads: None,
    };
    // `written:` names every file recovery rewrote (200,000 indexes and 100,000 snapshots): the
    // output is counted, not kept.
    let mut lines = CountLines(0);
    let mut err = Vec::with_capacity(4096);
    let status = within(SEGMENTS_BUDGET, || {
        seglog::cli::recover::run(&recover, &mut lines, &mut err)
    });
    assert_eq!(status, Status::Success, "{}", String::from_utf8_lossy(&err));
    assert!(lines.0 > 0);
    let snapshots = std::fs::read_dir(&dir)
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".snapshot")
        })
        .count();
    assert_eq!(
        snapshots, 100_000,
        "a snapshot at each segment boundary and the log end"
    );
}

/// Counts the lines written to it.
struct CountLines(usize);

impl Write for CountLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.iter().filter(|&&b| b == b'\n').count();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
