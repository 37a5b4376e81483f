//! `Log::fetch_slices`, the zero-copy form of `Log::fetch`, on real files in temp dirs.
//!
//! Invariants: for any fetch offset, byte limit, isolation and `min_one_message`, the slice
//! holds exactly the bytes `fetch` copies for the same call, with the same aborted
//! transactions, offsets and `first_entry_incomplete` (on a log of many 8 KiB segments with
//! committed, aborted and open transactions, some spanning segments). A slice keeps its file
//! open: it reads its bytes after retention deleted its segment and after the log was closed;
//! after a truncation below its end it gives a short read and a typed error, never a fault.

use std::path::Path;
use std::sync::Arc;

use seglog::record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use seglog::segment_store::{FileSlice, LogConfig, SegmentError};
use seglog::{AppendOrigin, Config, FetchIsolation, FetchResult, FetchSlices, HighWatermark, Log};
use testkit::ManualClock;
use testkit::XorShift;

const T0: i64 = 1_700_000_000_000;
const SEGMENT_BYTES: u64 = 8 * 1024;

fn config() -> Config {
    Config::default()
        .with_clock(Arc::new(ManualClock::new(T0)))
        .with_high_watermark(HighWatermark::Manual)
        .with_log_config(LogConfig {
            segment_bytes: SEGMENT_BYTES,
            ..LogConfig::default()
        })
}

/// A batch of `records` values of `size` bytes from `producer` (transactional or not).
fn batch(producer: i64, sequence: i32, records: usize, size: usize, txn: bool) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0)
        .producer(producer, 0, sequence)
        .transactional(txn);
    for i in 0..records {
        let value = vec![(sequence as usize + i) as u8; size];
        b.append(T0, Some(b"k"), Some(&value), &[]).unwrap();
    }
    b.build()
}

fn marker(log: &Log, producer: i64, kind: ControlRecordType) {
    let m = end_txn_marker_batch(0, T0, 0, producer, 0, kind, 0);
    log.append_as_leader(&m, 0, AppendOrigin::Coordinator)
        .unwrap();
}

/// A log of many segments: plain batches from producer 1 between the batches of three
/// transactional producers (10, 11, 12), whose transactions commit or abort after a few
/// batches each (so some span segments); producer 12's last one is left open. The high
/// watermark sits a few offsets below the log end.
fn mixed_log(dir: &Path, seed: u64) -> Log {
    let log = Log::open(dir, config()).unwrap();
    let mut rng = XorShift::new(seed);
    let mut seq = [0i32; 4];
    let mut open = [0u32; 3];
    for step in 0..400 {
        let who = rng.below(4) as usize;
        let records = 1 + rng.below(4) as usize;
        let size = 20 + rng.below(400) as usize;
        if who == 3 {
            log.append(&batch(1, seq[3], records, size, false)).unwrap();
        } else {
            let pid = 10 + who as i64;
            let ends = open[who] > 0 && rng.below(4) == 0 && !(who == 2 && step > 380);
            if ends {
                let kind = if rng.below(2) == 0 {
                    ControlRecordType::Abort
                } else {
                    ControlRecordType::Commit
                };
                marker(&log, pid, kind);
                open[who] = 0;
                continue;
            }
            log.append(&batch(pid, seq[who], records, size, true))
                .unwrap();
            open[who] += 1;
        }
        let i = if who == 3 { 3 } else { who };
        seq[i] += records as i32;
    }
    log.set_high_watermark(log.log_end_offset() - 3).unwrap();
    log
}

/// `Log::fetch`'s bytes at `offset` (1 MiB at most, to the log end, `min_one_message`) and the
/// slice `Log::fetch_slices` answers for the same call.
fn fetched_and_slice(log: &Log, offset: i64) -> (Vec<u8>, FileSlice) {
    let fetch = log
        .fetch(offset, 1 << 20, FetchIsolation::LogEnd, true)
        .unwrap();
    let slices = log
        .fetch_slices(offset, 1 << 20, FetchIsolation::LogEnd, true)
        .unwrap();
    (fetch.records, slices.slice.unwrap())
}

fn slice_bytes(s: &FetchSlices) -> Vec<u8> {
    s.slice
        .as_ref()
        .map_or_else(Vec::new, |s| s.to_vec().unwrap())
}

/// The slice's bytes are fetch's, and every other field is equal.
fn assert_same_answer(slices: &FetchSlices, fetch: &FetchResult, ctx: &str) {
    let bytes = slice_bytes(slices);
    assert!(
        bytes == fetch.records,
        "{ctx}: the slice's {} bytes differ from fetch's {}",
        bytes.len(),
        fetch.records.len()
    );
    assert_eq!(slices.len(), fetch.records.len() as u64, "{ctx}");
    assert!(slices.slice.as_ref().is_none_or(|s| !s.is_empty()), "{ctx}");
    assert_eq!(slices.fetch_offset, fetch.fetch_offset, "{ctx}");
    assert_eq!(slices.isolation, fetch.isolation, "{ctx}");
    assert_eq!(
        slices.first_entry_incomplete, fetch.first_entry_incomplete,
        "{ctx}"
    );
    assert_eq!(slices.high_watermark, fetch.high_watermark, "{ctx}");
    assert_eq!(slices.last_stable_offset, fetch.last_stable_offset, "{ctx}");
    assert_eq!(slices.log_start_offset, fetch.log_start_offset, "{ctx}");
    assert_eq!(
        slices.aborted_transactions, fetch.aborted_transactions,
        "{ctx}"
    );
    assert_eq!(
        slices.next_fetch_offset().expect("next fetch offset"),
        fetch.next_fetch_offset,
        "{ctx}"
    );
}

#[test]
fn slices_hold_the_bytes_fetch_returns_on_random_fetches() {
    let tmp = tempfile::tempdir().unwrap();
    let log = mixed_log(&tmp.path().join("t-0"), 7);
    let segments = std::fs::read_dir(tmp.path().join("t-0"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
        .count();
    assert!(segments >= 10, "{segments} segments");
    assert!(log.last_stable_offset() < log.high_watermark());
    assert!(log.high_watermark() < log.log_end_offset());

    let mut rng = XorShift::new(42);
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let isolations = [
        FetchIsolation::LogEnd,
        FetchIsolation::HighWatermark,
        FetchIsolation::TxnCommitted,
    ];
    let (mut with_bytes, mut with_aborted, mut cut_short) = (0, 0, 0);
    for i in 0..3_000 {
        let offset = start + rng.below((end - start + 1) as u64) as i64;
        let max_bytes = match rng.below(4) {
            0 => rng.below(64) as usize,
            1 => rng.below(2_000) as usize,
            2 => rng.below(3 * SEGMENT_BYTES) as usize,
            _ => 1 << 20,
        };
        let isolation = isolations[rng.below(3) as usize];
        let min_one = rng.below(2) == 0;
        let ctx = format!("#{i}: {offset} {max_bytes} {isolation:?} {min_one}");
        let fetch = log.fetch(offset, max_bytes, isolation, min_one).unwrap();
        let slices = if i % 2 == 0 {
            log.fetch_slices(offset, max_bytes, isolation, min_one)
                .unwrap()
        } else {
            // The partition log's own, at its bounds as they are (unchanged here).
            log.with_partition(|p| p.fetch_slices(offset, max_bytes, isolation, min_one))
                .unwrap()
                .unwrap()
        };
        assert_same_answer(&slices, &fetch, &ctx);
        with_bytes += usize::from(!fetch.records.is_empty());
        with_aborted += usize::from(
            fetch
                .aborted_transactions
                .as_ref()
                .is_some_and(|a| !a.is_empty()),
        );
        cut_short += usize::from(fetch.next_fetch_offset < offset + 1 && !fetch.records.is_empty());
    }
    assert!(with_bytes > 1_500, "{with_bytes} answers with bytes");
    assert!(
        with_aborted > 50,
        "{with_aborted} answers with aborted transactions"
    );
    assert!(cut_short > 10, "{cut_short} answers of one batch cut short");
    log.close().unwrap();
}

#[cfg(unix)]
#[test]
fn the_descriptor_of_a_slice_reads_the_fetched_bytes() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let log = mixed_log(&tmp.path().join("t-0"), 3);
    let fetch = log.fetch(5, 5_000, FetchIsolation::LogEnd, true).unwrap();
    let slices = log
        .fetch_slices(5, 5_000, FetchIsolation::LogEnd, true)
        .unwrap();
    let slice = slices.slice.unwrap();
    let file = std::fs::File::from(slice.as_fd().unwrap().try_clone_to_owned().unwrap());
    let mut buf = vec![0u8; slice.len() as usize];
    file.read_exact_at(&mut buf, slice.position()).unwrap();
    assert_eq!(buf, fetch.records);
    log.close().unwrap();
}

#[test]
fn a_slice_reads_its_bytes_after_retention_deleted_its_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let log = mixed_log(&tmp.path().join("t-0"), 5);
    let (records, slice) = fetched_and_slice(&log, 0);
    let path = slice.path().to_path_buf();
    assert!(path.exists());
    assert!(log.delete_records_before(log.high_watermark()).unwrap());
    assert!(log.apply_retention().unwrap() > 0);
    assert!(!path.exists(), "{} still there", path.display());
    assert_eq!(slice.to_vec().unwrap(), records);
    log.close().unwrap();
}

#[test]
fn a_slice_reads_its_bytes_after_the_log_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let log = mixed_log(&tmp.path().join("t-0"), 9);
    let end = log.log_end_offset();
    // The active segment's last batches, and a sealed segment's first ones.
    let mut held = Vec::new();
    for offset in [end - 2, 0] {
        let (records, slice) = fetched_and_slice(&log, offset);
        held.push((slice, records));
    }
    log.close().unwrap();
    for (slice, records) in held {
        let mut buf = vec![0u8; records.len() + 10];
        assert_eq!(slice.read_into(&mut buf).unwrap(), records.len());
        assert_eq!(buf[..records.len()], records[..]);
    }
}

#[test]
fn a_truncation_below_a_held_slice_gives_a_short_read_not_a_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let log = mixed_log(&tmp.path().join("t-0"), 11);
    // Four batches of one record at the start of a fresh segment.
    log.roll().unwrap();
    let first = log.log_end_offset();
    let bs: Vec<Vec<u8>> = (0..4).map(|i| batch(2, i, 1, 100, false)).collect();
    for b in &bs {
        log.append(b).unwrap();
    }
    let slices = log
        .fetch_slices(first, 1 << 20, FetchIsolation::LogEnd, true)
        .unwrap();
    let slice = slices.slice.unwrap();
    let before = slice.to_vec().unwrap();
    assert_eq!(before.len(), bs.iter().map(Vec::len).sum::<usize>());
    // Cut inside the slice: its first two batches are left.
    assert!(log.truncate_to(first + 2).unwrap());
    let kept = bs[0].len() + bs[1].len();
    let mut buf = vec![0u8; before.len()];
    assert_eq!(slice.read_into(&mut buf).unwrap(), kept, "a short read");
    assert_eq!(buf[..kept], before[..kept]);
    let err = slice.to_vec().unwrap_err();
    let SegmentError::SliceTruncated {
        position,
        len,
        read,
        ..
    } = err
    else {
        panic!("{err}");
    };
    assert_eq!(
        (position, len, read),
        (slice.position(), slice.len(), kept as u64)
    );
    // Cut at the slice's start: nothing of it is left.
    assert!(log.truncate_to(first).unwrap());
    assert_eq!(slice.read_into(&mut buf).unwrap(), 0);
    assert_eq!(slice.read_at(5, &mut buf).unwrap(), 0);
    log.close().unwrap();
}

/// A log of `sealed` segments of 16 one-record batches each (sealed: read through their
/// read-only maps) and an active one, all from one idempotent producer; the first offset of each
/// sealed segment.
fn sealed_log(dir: &Path, sealed: usize) -> (Log, Vec<i64>) {
    let log = Log::open(dir, config()).unwrap();
    let mut firsts = Vec::new();
    let mut seq = 0;
    for _ in 0..sealed {
        firsts.push(log.log_end_offset());
        for _ in 0..16 {
            log.append(&batch(3, seq, 1, 300, false)).unwrap();
            seq += 1;
        }
        log.roll().unwrap();
    }
    log.append(&batch(3, seq, 1, 300, false)).unwrap();
    log.set_high_watermark(log.log_end_offset()).unwrap();
    (log, firsts)
}

#[test]
fn a_truncation_into_a_sealed_segment_under_a_held_slice_gives_a_short_read_not_a_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, firsts) = sealed_log(&tmp.path().join("t-0"), 3);
    let first = firsts[1];
    // The whole middle segment, sealed and mapped.
    let (records, slice) = fetched_and_slice(&log, first);
    assert_eq!(slice.to_vec().unwrap(), records);
    let batch_len = records.len() / 16;
    // Cut the sealed segment after its fifth batch (the segment after it goes too).
    assert!(log.truncate_to(first + 5).unwrap());
    let mut buf = vec![0u8; records.len()];
    assert_eq!(
        slice.read_into(&mut buf).unwrap(),
        5 * batch_len,
        "a short read"
    );
    assert_eq!(buf[..5 * batch_len], records[..5 * batch_len]);
    assert!(matches!(
        slice.to_vec().unwrap_err(),
        SegmentError::SliceTruncated { .. }
    ));
    // The segment takes appends again; the slice reads the new bytes at its positions, as
    // Kafka's slice of a truncated `FileRecords` would.
    let again = batch(4, 0, 1, 300, false);
    log.append(&again).unwrap();
    let appended = log
        .fetch(first + 5, 1 << 20, FetchIsolation::LogEnd, true)
        .unwrap()
        .records;
    assert_eq!(appended.len(), again.len());
    let n = slice.read_into(&mut buf).unwrap();
    assert_eq!(n, 5 * batch_len + again.len());
    assert_eq!(buf[5 * batch_len..n], appended[..]);
    log.close().unwrap();
}

#[test]
fn readers_of_held_slices_never_fault_while_the_writer_truncates_their_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, firsts) = sealed_log(&tmp.path().join("t-0"), 12);
    // A slice of every sealed segment, and the bytes it held when taken.
    let held: Vec<_> = firsts
        .iter()
        .map(|&f| {
            let s = log
                .fetch_slices(f, 1 << 20, FetchIsolation::LogEnd, true)
                .unwrap()
                .slice
                .unwrap();
            let bytes = s.to_vec().unwrap();
            (s, bytes)
        })
        .collect();
    let held = Arc::new(held);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Odd while a truncation runs: a read that overlaps one may see the kernel's zeroing of the
    // cut page (as a `pread` beside an `ftruncate` may), so only reads between truncations are
    // compared byte for byte; every read is checked not to fault.
    let truncating = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (held, stop) = (Arc::clone(&held), Arc::clone(&stop));
            let truncating = Arc::clone(&truncating);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let (mut reads, mut compared) = (0u64, 0u64);
                let mut i = r;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || compared < 100 {
                    let (slice, bytes) = &held[i % held.len()];
                    let before = truncating.load(std::sync::atomic::Ordering::SeqCst);
                    let n = slice.read_into(&mut buf).unwrap();
                    let after = truncating.load(std::sync::atomic::Ordering::SeqCst);
                    assert!(n <= bytes.len(), "slice {i}");
                    if before == after && before.is_multiple_of(2) {
                        // Before its truncation, all of it; after, a prefix of it (nothing was
                        // appended in this test).
                        assert!(buf[..n] == bytes[..n], "slice {i}");
                        compared += 1;
                    }
                    reads += 1;
                    i += 1;
                }
                (reads, compared)
            })
        })
        .collect();
    // Truncate from the end down, into each sealed segment's middle, while the readers read.
    let truncate = |offset: i64| {
        truncating.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let cut = log.truncate_to(offset).unwrap();
        truncating.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        cut
    };
    for &f in firsts.iter().rev() {
        assert!(truncate(f + 8));
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(truncate(f) || f == 0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        let (reads, compared) = r.join().unwrap();
        assert!(
            reads >= compared && compared >= 100,
            "{reads} reads, {compared} compared"
        );
    }
    for (slice, _) in held.iter() {
        let mut buf = vec![0u8; 16];
        assert_eq!(
            slice.read_into(&mut buf).unwrap(),
            0,
            "every slice cut to nothing"
        );
    }
    log.close().unwrap();
}

#[test]
fn a_segment_closed_and_reopened_under_a_held_slice_maps_again() {
    let tmp = tempfile::tempdir().unwrap();
    // More sealed segments than a log keeps open, so reading them all closes the first.
    let (log, firsts) = sealed_log(&tmp.path().join("t-0"), 12);
    let (records, slice) = fetched_and_slice(&log, 0);
    for &f in &firsts[1..] {
        log.fetch(f, 1 << 20, FetchIsolation::LogEnd, true).unwrap();
    }
    // The first segment was closed to bound descriptors; opened again (and mapped again, its
    // file lock free) by this fetch, while the slice of its first opening is held.
    assert_eq!(
        log.fetch(0, 1 << 20, FetchIsolation::LogEnd, true)
            .unwrap()
            .records,
        records
    );
    assert_eq!(slice.to_vec().unwrap(), records);
    log.close().unwrap();
    assert_eq!(slice.to_vec().unwrap(), records);
}

/// The active segment is read out of a read-only map of its grown file (taken from 1 MiB on,
/// again as it grows), through the gate a sealed segment's map has: fetches and slices of it
/// hold the appended bytes; truncations of the active segment under readers and held slices
/// give short reads and whole answers, never a fault; appends after them are read back.
#[test]
fn the_active_segment_is_read_through_its_map_beside_truncations() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let config = Config::default()
        .with_clock(Arc::new(ManualClock::new(T0)))
        .with_high_watermark(HighWatermark::Manual)
        .with_segment_bytes(64 << 20);
    let log = Log::open(&dir, config).unwrap();
    // One producer, one record a batch: batch `i` holds offset `i` and sequence `i`.
    let bs: Vec<Vec<u8>> = (0..3_000).map(|i| batch(5, i, 1, 1_000, false)).collect();
    for b in &bs {
        log.append(b).unwrap();
    }
    if cfg!(target_os = "linux") {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let active = dir.join("00000000000000000000.log");
        assert!(
            maps.contains(active.to_str().unwrap()),
            "the active segment's .log is mapped"
        );
    }
    let held: Vec<(FileSlice, Vec<u8>)> = (0..100)
        .map(|k| {
            let (records, slice) = fetched_and_slice(&log, k * 30);
            assert_eq!(slice.to_vec().unwrap(), records, "offset {}", k * 30);
            (slice, records)
        })
        .collect();
    let held = Arc::new(held);
    let bs = Arc::new(bs);
    let stop = Arc::new(AtomicBool::new(false));
    // Odd while the writer truncates or appends again: only answers taken between two such
    // changes, with the log whole, are compared byte for byte.
    let changing = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (log, held, bs) = (log.clone(), Arc::clone(&held), Arc::clone(&bs));
            let (stop, changing) = (Arc::clone(&stop), Arc::clone(&changing));
            std::thread::spawn(move || {
                let mut rng = XorShift::new(r + 1);
                let mut buf = vec![0u8; 1 << 20];
                let mut compared = 0u64;
                while !stop.load(Ordering::Relaxed) || compared < 200 {
                    let before = changing.load(Ordering::SeqCst);
                    let (slice, bytes) = &held[rng.next_u64() as usize % held.len()];
                    let n = slice.read_into(&mut buf).unwrap();
                    assert!(n <= bytes.len());
                    let offset = (rng.next_u64() % 3_000) as i64;
                    let fetched = log.fetch(offset, 4_096, FetchIsolation::LogEnd, true);
                    let after = changing.load(Ordering::SeqCst);
                    if before == after && before % 4 == 0 {
                        assert!(buf[..n] == bytes[..n] && n == bytes.len());
                        // The batch as appended: its base offset assigned, the rest from its
                        // magic byte on as built (the leader epoch is the log's).
                        let fetched = fetched.unwrap().records;
                        let first = &bs[offset as usize];
                        assert_eq!(fetched[..8], offset.to_be_bytes(), "offset {offset}");
                        assert!(fetched[16..first.len()] == first[16..], "offset {offset}");
                        compared += 1;
                    }
                }
                compared
            })
        })
        .collect();
    // Truncate the active segment from its end down, below most held slices, then append the
    // same batches again; four changes a round (cut, cut done, appends, appends done).
    for round in 0..6i64 {
        let cut = 2_900 - round * 450;
        changing.fetch_add(1, Ordering::SeqCst);
        assert!(log.truncate_to(cut).unwrap());
        changing.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(5));
        changing.fetch_add(1, Ordering::SeqCst);
        for b in &bs[cut as usize..] {
            log.append(b).unwrap();
        }
        changing.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 200);
    }
    // A cut below a held slice: a short read of what is left, then the bytes appended again.
    let (slice, bytes) = &held[50];
    assert!(log.truncate_to(1_510).unwrap());
    let mut buf = vec![0u8; bytes.len()];
    let left = bs[1_500..1_510].iter().map(Vec::len).sum::<usize>();
    assert_eq!(slice.read_into(&mut buf).unwrap(), left.min(bytes.len()));
    assert_eq!(buf[..left.min(bytes.len())], bytes[..left.min(bytes.len())]);
    log.close().unwrap();
}
