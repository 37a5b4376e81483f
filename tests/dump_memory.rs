//! `seglog dump --print-data-log` on a record whose value is far larger than the memory it may
//! use: the batch is streamed from the file (see `src/dump/stream.rs`), so the dump of a 40 MiB
//! value fits in an 8 MiB allocation budget, and prints exactly the line a whole-value
//! conversion gives. The budget is enforced by this test binary's allocator (`cap::Cap`): an
//! allocation past it fails and aborts the binary, a loud failure.

use std::alloc::System;
use std::io::{self, Write};

use cap::Cap;
use seglog::dump::DumpArgs;
use seglog::Status;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

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

#[test]
fn a_40_mib_value_is_streamed_within_an_8_mib_budget() {
    // A value of printable text with multi-byte characters and invalid UTF-8 sprinkled in,
    // some of them straddling the 256 KiB copy chunks.
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
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("00000000000000000000.log");
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
    let big_batch = big.build();
    let big_position = log.len();
    log.extend_from_slice(&big_batch);
    std::fs::write(&path, &log).expect("write log");

    let view = record_format::RecordBatch::new(&big_batch, big_position as u64).expect("batch");
    let batch_line = seglog::dump::log::batch_line(&view);
    assert!(batch_line.contains("isvalid: true"));
    let first_line = {
        let small_view = record_format::RecordBatch::new(&log[..big_position], 0).expect("small");
        seglog::dump::log::batch_line(&small_view)
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
        text = String::from_utf8_lossy(&value),
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
    let status = within(8 << 20, || seglog::dump::run(&args, &mut out, &mut err));
    assert_eq!(status, Status::Success, "{}", String::from_utf8_lossy(&err));
    assert_eq!(out.first_difference, None, "output differs");
    assert_eq!(out.at, expected.len(), "output length");
}
