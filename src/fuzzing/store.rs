//! Fuzz harnesses for `segment-store`, shared by the cargo-fuzz targets `index_files` and
//! `segment_recover` and by the stable replay test `crates/segment-store/tests/fuzz_replay.rs`.
//! Each harness checks answers against a reference computed from the raw bytes, not only that
//! nothing panics.
//!
//! Files live in one temporary directory per process (on `/dev/shm` when it exists, so the
//! fsyncs of recovery cost nothing), locked once with a [`DirLock`]; every input reuses the same
//! file names.
#![allow(
    dead_code,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

#[path = "input.rs"]
mod input;
#[path = "scratch.rs"]
mod scratch_dir;

pub use input::Input;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use record_format::internals::ScannedBatch;
use record_format::{Batches, IterEnd, RecordBatchBuilder};
use segment_store::internals::segment_file_path;
use segment_store::internals::TXN_INDEX_ENTRY_SIZE as TXN_ENTRY_SIZE;
use segment_store::internals::{FileKind, FilePosition, SegmentContext};
use segment_store::{
    AbortedTxn, DirLock, LogSegment, OffsetIndex, OffsetPosition, SegmentConfig, SegmentError,
    StdFs, TimeIndex, TimestampOffset, TransactionIndex,
};
use testkit::ManualClock;

/// The per-process scratch directory (removed by [`remove_temp_root`]).
pub fn temp_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| scratch_dir::per_process_dir("seglog-fuzz"))
}

/// Removes the scratch directory (the replay tests call it at the end).
pub fn remove_temp_root() {
    let _ = std::fs::remove_dir_all(temp_root());
}

/// A locked sub-directory of [`temp_root`], created once per process.
#[derive(Debug)]
struct Scratch {
    dir: PathBuf,
    lock: DirLock,
}

fn scratch(cell: &'static OnceLock<Mutex<Scratch>>, name: &str) -> &'static Mutex<Scratch> {
    cell.get_or_init(|| {
        let dir = temp_root().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let lock = DirLock::acquire(&dir).unwrap();
        Mutex::new(Scratch {
            dir: lock.dir().to_path_buf(),
            lock,
        })
    })
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Base offsets worth trying: 0, small, near the 32-bit relative limit, huge.
fn base_offset(selector: u8) -> i64 {
    match selector % 6 {
        0 => 0,
        1 => 100,
        2 => i64::from(i32::MAX),
        3 => i64::MAX - i64::from(i32::MAX),
        4 => 1 << 40,
        _ => i64::from(selector),
    }
}

/// Search targets: every key in the file, its neighbours, and the extremes.
fn targets(keys: &[i64]) -> Vec<i64> {
    let mut t = vec![i64::MIN, -1, 0, 1, i64::MAX];
    for &k in keys.iter().take(64) {
        t.extend([k.saturating_sub(1), k, k.saturating_add(1)]);
    }
    t
}

fn non_decreasing(keys: &[i64]) -> bool {
    keys.windows(2).all(|w| w[0] <= w[1])
}
fn strictly_increasing(keys: &[i64]) -> bool {
    keys.windows(2).all(|w| w[0] < w[1])
}

/// `index_files`: byte 0 picks the file kind (`.index`, `.timeindex`, `.txnindex`), byte 1 the
/// segment base offset, byte 2 a search-target seed; the rest is the file. The file is opened
/// read-only (mapped indexes) and every entry, lookup and check is compared with a decoding of
/// the raw bytes:
///
/// * `entries() == len / entry_size`, each `entry(n)` is the big-endian decoding of slot `n`;
/// * `sanity_check()` is Ok exactly when Kafka's checks pass (length a multiple of the entry
///   size, last offset not below the base, for the time index last timestamp not below the
///   first). It does *not* promise sorted entries, so neither do we;
/// * every lookup answer is an entry of the index or the documented fallback, and when the keys
///   are sorted (as Kafka writes them) it is the largest entry `<=` the target;
/// * `truncate_to(o)` on strictly increasing offsets keeps exactly the entries `< o`;
/// * transaction index: entries are the complete 34-byte chunks (`AbortedTxn` round-trips both
///   ways), versions above 0 are corruption, `collect_aborted_txns` matches a filter over them.
pub fn index_files(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let (kind, base, seed, file) = (data[0] % 3, base_offset(data[1]), data[2], &data[3..]);
    static CELL: OnceLock<Mutex<Scratch>> = OnceLock::new();
    let s = scratch(&CELL, "index")
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    match kind {
        0 => offset_index(&s, base, seed, file),
        1 => time_index(&s, base, seed, file),
        _ => txn_index(&s, base, file),
    }
}

fn offset_index(s: &Scratch, base: i64, seed: u8, file: &[u8]) {
    let path = s.dir.join("00000000000000000000.index");
    std::fs::write(&path, file).unwrap();
    let mut idx = OffsetIndex::open(&s.lock, &path, base, 1 << 20, false).unwrap();
    let raw: Vec<OffsetPosition> = file
        .chunks_exact(8)
        .map(|c| OffsetPosition {
            offset: base + i64::from(be_i32(c)),
            position: FilePosition(be_u32(&c[4..])),
        })
        .collect();
    assert_eq!(idx.entries(), file.len() / 8);
    assert_eq!(idx.length(), file.len() as u64);
    assert_eq!(idx.size_in_bytes(), raw.len() * 8);
    assert!(idx.is_full(), "a read-only index has no free slot");
    for (n, e) in raw.iter().enumerate() {
        assert_eq!(idx.entry(n), Some(*e));
    }
    assert_eq!(idx.entry(raw.len()), None);
    let fallback = OffsetPosition {
        offset: base,
        position: FilePosition(0),
    };
    assert_eq!(idx.last_entry(), raw.last().copied().unwrap_or(fallback));
    assert_eq!(idx.last_offset(), idx.last_entry().offset);
    let sane = file.len().is_multiple_of(8) && raw.last().is_none_or(|l| l.offset >= base);
    assert_eq!(idx.sanity_check().is_ok(), sane, "sanity_check");

    let offsets: Vec<i64> = raw.iter().map(|e| e.offset).collect();
    let by_offset = non_decreasing(&offsets);
    for t in targets(&offsets) {
        let got = idx.lookup(t);
        assert!(
            got == fallback || raw.contains(&got),
            "lookup({t}) = {got:?} is not an entry"
        );
        if by_offset {
            match offsets.iter().rev().find(|&&o| o <= t) {
                Some(&o) => assert_eq!(got.offset, o, "lookup({t})"),
                None => assert_eq!(got, fallback, "lookup({t})"),
            }
        }
    }
    let positions: Vec<i64> = raw.iter().map(|e| i64::from(e.position.0)).collect();
    let by_position = non_decreasing(&positions);
    let sizes = [0u32, 1, u32::from(seed), 4096, u32::MAX];
    for p in targets(&positions) {
        let Ok(position) = u32::try_from(p) else {
            continue;
        };
        for size in sizes {
            let from = OffsetPosition {
                offset: base,
                position: FilePosition(position),
            };
            let target = i64::from(position) + i64::from(size);
            match idx.fetch_upper_bound_offset(from, size) {
                Some(e) => {
                    assert!(raw.contains(&e), "upper bound {e:?} is not an entry");
                    if by_position {
                        assert!(
                            i64::from(e.position.0) >= target,
                            "upper bound below target"
                        );
                    }
                }
                None => {
                    if by_position {
                        assert!(positions.last().is_none_or(|&l| l <= target));
                    }
                }
            }
        }
    }
    if strictly_increasing(&offsets) {
        let mut cuts = targets(&offsets);
        cuts.sort_unstable();
        for &t in cuts.iter().rev() {
            idx.truncate_to(t);
            let kept = offsets.iter().filter(|&&o| o < t).count();
            assert_eq!(idx.entries(), kept, "truncate_to({t})");
            assert_eq!(
                idx.last_offset(),
                offsets[..kept].last().copied().unwrap_or(base)
            );
        }
    }
}

fn time_index(s: &Scratch, base: i64, seed: u8, file: &[u8]) {
    let path = s.dir.join("00000000000000000000.timeindex");
    std::fs::write(&path, file).unwrap();
    let mut idx = TimeIndex::open(&s.lock, &path, base, 1 << 20, false).unwrap();
    let raw: Vec<TimestampOffset> = file
        .chunks_exact(12)
        .map(|c| TimestampOffset {
            timestamp: be_i64(c),
            offset: base + i64::from(be_i32(&c[8..])),
        })
        .collect();
    assert_eq!(idx.entries(), file.len() / 12);
    assert_eq!(idx.length(), file.len() as u64);
    for (n, e) in raw.iter().enumerate() {
        assert_eq!(idx.entry(n), Some(*e));
    }
    assert_eq!(idx.entry(raw.len()), None);
    let fallback = TimestampOffset {
        timestamp: -1,
        offset: base,
    };
    assert_eq!(idx.last_entry(), raw.last().copied().unwrap_or(fallback));
    let sane = file.len().is_multiple_of(12)
        && match (raw.first(), raw.last()) {
            (Some(f), Some(l)) => l.timestamp >= f.timestamp && l.offset >= base,
            _ => true,
        };
    assert_eq!(idx.sanity_check().is_ok(), sane, "sanity_check");

    let stamps: Vec<i64> = raw.iter().map(|e| e.timestamp).collect();
    let sorted = non_decreasing(&stamps);
    let mut ts = targets(&stamps);
    ts.push(i64::from(seed));
    for t in ts {
        let got = idx.lookup(t);
        assert!(
            got == fallback || raw.contains(&got),
            "lookup({t}) = {got:?} is not an entry"
        );
        if sorted {
            match stamps.iter().rev().find(|&&x| x <= t) {
                Some(&x) => assert_eq!(got.timestamp, x, "lookup({t})"),
                None => assert_eq!(got, fallback, "lookup({t})"),
            }
        }
    }
    let offsets: Vec<i64> = raw.iter().map(|e| e.offset).collect();
    if strictly_increasing(&offsets) {
        let mut cuts = targets(&offsets);
        cuts.sort_unstable();
        for &t in cuts.iter().rev() {
            idx.truncate_to(t);
            let kept = offsets.iter().filter(|&&o| o < t).count();
            assert_eq!(idx.entries(), kept, "truncate_to({t})");
            assert_eq!(
                idx.last_entry(),
                raw[..kept].last().copied().unwrap_or(fallback)
            );
        }
    }
}

fn txn_index(s: &Scratch, start: i64, file: &[u8]) {
    let path = s.dir.join("00000000000000000000.txnindex");
    std::fs::write(&path, file).unwrap();
    let idx = TransactionIndex::open(Arc::new(StdFs), &path, start).unwrap();
    let raw: Vec<AbortedTxn> = file
        .chunks_exact(TXN_ENTRY_SIZE)
        .map(|c| {
            let b: &[u8; TXN_ENTRY_SIZE] = c.try_into().unwrap();
            let t = AbortedTxn::from_bytes(b);
            assert_eq!(&t.to_bytes(), b, "AbortedTxn bytes round trip");
            assert_eq!(AbortedTxn::from_bytes(&t.to_bytes()), t);
            t
        })
        .collect();
    assert_eq!(idx.is_empty().unwrap(), raw.is_empty());
    let readable = raw.iter().all(|t| t.version <= 0);
    match idx.all_aborted_txns() {
        Ok(all) => {
            assert!(readable, "a version > 0 must be reported as corruption");
            assert_eq!(all, raw);
        }
        Err(e) => {
            assert!(!readable, "unexpected error {e}");
            assert!(matches!(e, SegmentError::CorruptIndex { .. }), "{e}");
        }
    }
    let sane = readable && raw.iter().all(|t| t.last_offset >= start);
    assert_eq!(idx.sanity_check().is_ok(), sane, "sanity_check");
    if !readable {
        return;
    }
    let mut bounds: Vec<i64> = raw
        .iter()
        .take(8)
        .flat_map(|t| [t.first_offset, t.last_offset, t.last_stable_offset])
        .collect();
    bounds.extend([i64::MIN, 0, i64::MAX]);
    for &fetch in &bounds {
        for &upper in &bounds {
            let got = idx.collect_aborted_txns(fetch, upper).unwrap();
            let mut want = Vec::new();
            let mut complete = false;
            for t in &raw {
                if t.last_offset >= fetch && t.first_offset < upper {
                    want.push(*t);
                }
                if t.last_stable_offset >= upper {
                    complete = true;
                    break;
                }
            }
            assert_eq!(got.aborted_transactions, want, "collect({fetch}, {upper})");
            assert_eq!(got.is_complete, complete);
        }
    }
}

/// Builds the batches a `segment_recover` input describes: 1..=8 batches of 1..=4 records with
/// small values, some with a producer id or the transactional flag. Returns the base offset, the
/// index interval and the concatenated batches.
pub fn recover_segment_bytes(inp: &mut Input<'_>) -> (i64, u32, Vec<u8>) {
    let base = [0i64, 1000, i64::from(u32::MAX)][usize::from(inp.u8() % 3)];
    let interval = u32::from(inp.u8()) * 8;
    let n = 1 + inp.u8() % 8;
    let mut next = base;
    let mut out = Vec::new();
    for i in 0..n {
        let shape = inp.u8();
        let records = 1 + i64::from(shape % 4);
        let value_len = usize::from(inp.u8() % 64);
        let mut b = RecordBatchBuilder::new(next)
            .partition_leader_epoch(i32::from(shape >> 6))
            .transactional(shape & 0x10 != 0);
        if shape & 0x20 != 0 {
            b = b.producer(7, 1, i32::from(i) * 4);
        }
        let value = vec![b'v'; value_len];
        for r in 0..records {
            b.append(
                1_700_000_000_000 + i64::from(i) * 10 + r,
                None,
                Some(&value),
                &[],
            )
            .unwrap();
        }
        out.extend_from_slice(&b.build());
        next += records + i64::from(shape >> 7);
    }
    (base, interval, out)
}

/// Applies the corruption script in the rest of the input: `0` flip a byte, `1` truncate,
/// `2` append garbage (copied from the input), `3` overwrite a run.
pub fn corrupt(inp: &mut Input<'_>, mut log: Vec<u8>) -> Vec<u8> {
    for _ in 0..8 {
        if inp.is_empty() {
            break;
        }
        let op = inp.u8();
        let at = usize::from(inp.u16());
        match op % 4 {
            0 if !log.is_empty() => {
                let i = at % log.len();
                log[i] ^= inp.u8() | 1;
            }
            1 => log.truncate(at % (log.len() + 1)),
            2 => {
                let n = usize::from(op >> 2);
                log.extend_from_slice(inp.take(n));
            }
            3 if !log.is_empty() => {
                let i = at % log.len();
                let n = usize::from(op >> 4).min(log.len() - i);
                let src = inp.take(n).to_vec();
                log[i..i + src.len()].copy_from_slice(&src);
            }
            _ => {}
        }
    }
    log
}

/// `segment_recover`: builds a valid segment from a few batches, corrupts it as the input says,
/// writes it to a partition directory, opens the [`LogSegment`] and recovers it with a visitor
/// that records every batch. Then:
///
/// * the `.log` is a byte-identical prefix of the corrupted file, ending where the CRC-checking
///   iterator over the corrupted file stops; re-iterating it yields exactly the batches the visitor
///   saw and ends `Complete`;
/// * the cut bytes were quarantined byte for byte (prefix + quarantined == corrupted file);
/// * for batches with increasing offsets, `lookup(last offset)` of the rebuilt offset index finds
///   a position `<=` the batch's position, and the segment passes `sanity_check`;
/// * recovery fails only when the valid prefix has offsets out of order or out of the segment's
///   32-bit range (Kafka throws there too).
pub fn segment_recover(data: &[u8]) {
    let mut inp = Input(data);
    let (base, interval, original) = recover_segment_bytes(&mut inp);
    let corrupted = corrupt(&mut inp, original);

    static CELL: OnceLock<Mutex<Scratch>> = OnceLock::new();
    let s = scratch(&CELL, "partition")
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let quarantine = s.dir.join("quarantine");
    let _ = std::fs::remove_dir_all(&quarantine);
    std::fs::create_dir_all(&quarantine).unwrap();
    for e in std::fs::read_dir(&s.dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.file_name().is_some_and(|n| n != ".lock") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let log_path = segment_file_path(&s.dir, base, FileKind::Log);
    std::fs::write(&log_path, &corrupted).unwrap();

    // What the CRC-checking iterator says about the corrupted bytes.
    let mut it = Batches::new(&corrupted, 0).validate_crc(true);
    let mut expected = Vec::new();
    for e in &mut it {
        match e {
            Ok(e) => expected.push((
                e.position(),
                e.size_in_bytes(),
                e.last_offset(),
                e.as_v2().is_some(),
            )),
            Err(_) => break,
        }
    }
    let valid_end = it.valid_prefix_end();
    let lasts: Vec<i64> = expected.iter().map(|e| e.2).collect();
    let in_range = lasts.iter().all(|&l| {
        l.checked_sub(base)
            .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r))
    });
    let ordered = in_range && strictly_increasing(&lasts);

    let ctx = SegmentContext {
        storage: Arc::new(StdFs),
        lock: s.lock.clone(),
        clock: Arc::new(ManualClock::new(0)),
        config: SegmentConfig {
            index_interval_bytes: interval,
            max_index_size: 64 * 1024,
            // Regions of 16-527 bytes: the parallel framing and CRC checks split even these
            // small segments (and spawn helper threads).
            recovery_region_bytes: 16 + interval as usize % 512,
        },
    };
    let mut seg = LogSegment::open(&ctx, &s.dir, base).unwrap();
    let mut seen: Vec<(u64, usize, i64)> = Vec::new();
    let mut visit = |b: &ScannedBatch<'_>, _: &mut Vec<AbortedTxn>| -> Result<(), SegmentError> {
        seen.push((b.position(), b.size_in_bytes(), b.last_offset()));
        Ok(())
    };
    let outcome = match seg.recover(&mut visit, &quarantine) {
        Ok(o) => o,
        Err(e) => {
            assert!(
                matches!(
                    e,
                    SegmentError::OffsetOverflow { .. } | SegmentError::InvalidOffset { .. }
                ),
                "recover failed: {e}"
            );
            assert!(!ordered, "recover failed on ordered, in-range offsets: {e}");
            return;
        }
    };
    assert_eq!(
        outcome.valid_bytes, valid_end,
        "recover stops where the iterator does"
    );
    assert_eq!(
        outcome.valid_bytes + outcome.truncated_bytes,
        corrupted.len() as u64
    );
    assert_eq!(outcome.batches, expected.len() as u64);
    assert_eq!(outcome.last_offset, lasts.last().copied());
    let valid = valid_end as usize;

    let log = std::fs::read(&log_path).unwrap();
    assert_eq!(
        log,
        corrupted[..valid],
        "the .log is a prefix of the corrupted file"
    );
    assert_eq!(seg.size(), log.len() as u64);
    match &outcome.quarantine_file {
        Some(q) => {
            assert!(outcome.truncated_bytes > 0);
            assert_eq!(
                std::fs::read(q).unwrap(),
                corrupted[valid..],
                "quarantined bytes"
            );
        }
        None => assert_eq!(outcome.truncated_bytes, 0),
    }

    let mut again = Batches::new(&log, 0).validate_crc(true);
    let mut reread = Vec::new();
    for e in &mut again {
        let e = e.expect("the recovered .log re-parses without error");
        if e.as_v2().is_some() {
            reread.push((e.position(), e.size_in_bytes(), e.last_offset()));
        }
    }
    assert_eq!(again.stopped_at(), Some(&IterEnd::Complete));
    assert_eq!(reread, seen, "the visitor saw exactly the kept v2 batches");

    if ordered {
        seg.sanity_check().expect("sanity_check after recover");
        let oi = seg.offset_index();
        for &(position, _, last, _) in &expected {
            let found = oi.lookup(last);
            assert!(found.offset <= last, "lookup({last}) = {found:?}");
            assert!(
                u64::from(found.position.0) <= position,
                "lookup({last}) = {found:?} is past the batch at {position}"
            );
        }
    }
}
