//! Tests of the region scan and the chunk chain.

use super::chain::{buffer_bytes, lock, ChunkChain};
use super::regions::{Piece, Regions, SPARE_BYTES};
use super::{scan_in_regions, scan_log, MAGIC_AT};

use super::*;
use crate::batches::Batches;
use crate::{FormatErrorKind, RecordBatchBuilder};

fn log(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut b = RecordBatchBuilder::new(i as i64 * 3);
        for j in 0..3 {
            b.append(1000 + j, None, Some(&[i as u8; 50]), &[]).unwrap();
        }
        out.extend_from_slice(&b.build());
    }
    out
}

fn sequential(bytes: &[u8], base: u64) -> (Vec<u64>, u64, IterEnd) {
    let mut it = Batches::new(bytes, base).validate_crc(true);
    let positions = it.by_ref().flatten().map(|e| e.position()).collect();
    (
        positions,
        it.valid_prefix_end(),
        it.stopped_at().cloned().unwrap(),
    )
}

#[test]
fn parallel_scan_equals_sequential_iteration_for_every_single_corruption() {
    let clean = log(20);
    for threads in [1, 2, 3, 8] {
        let s = scan_log(&clean, 100, threads);
        assert_eq!(s.end, IterEnd::Complete);
        assert_eq!(s.batches.len(), 20);
        assert_eq!(s.valid_prefix_end, 100 + clean.len() as u64);
    }
    // Flip one byte at many positions (CRC errors, length errors, bad magic) and cut the
    // tail at many lengths: the parallel scan must agree with the sequential iterator.
    for pos in (0..clean.len()).step_by(7) {
        let mut bad = clean.clone();
        bad[pos] ^= 0x5a;
        for threads in [1, 2, 4] {
            let s = scan_in_regions(&bad, 0, threads, 300);
            let (positions, end, stop) = sequential(&bad, 0);
            assert_eq!(
                s.batches.iter().map(|b| b.position).collect::<Vec<_>>(),
                positions,
                "flip at {pos}, {threads} threads"
            );
            assert_eq!(s.valid_prefix_end, end);
            assert_eq!(s.end, stop, "flip at {pos}");
        }
    }
    for cut in (0..clean.len()).step_by(13) {
        let s = scan_in_regions(&clean[..cut], 0, 2, 300);
        let (positions, end, stop) = sequential(&clean[..cut], 0);
        assert_eq!(s.batches.len(), positions.len());
        assert_eq!((s.valid_prefix_end, s.end), (end, stop));
    }
}

/// The workspace's one test generator (testkit's xorshift).
type Rng = testkit::XorShift;

fn batch(base: i64, values: &[Vec<u8>]) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(base);
    for (i, v) in values.iter().enumerate() {
        b.append(1_000 + i as i64, None, Some(v), &[]).unwrap();
    }
    b.build()
}

/// A log whose record values are sometimes themselves two complete, valid batches (so that
/// region starts land on look-alikes off the chain), sometimes several regions long, and
/// otherwise random bytes.
fn tricky_log(rng: &mut Rng, region: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut base = 0i64;
    for _ in 0..40 {
        let kind = rng.below(10);
        let values: Vec<Vec<u8>> = (0..1 + rng.below(3))
            .map(|_| {
                if kind < 3 {
                    let a = batch(7, &[vec![2u8; 1 + rng.below(300) as usize]]);
                    let b = batch(9, &[vec![5u8; 1 + rng.below(300) as usize]]);
                    [a, b].concat()
                } else if kind == 3 {
                    (0..region * (1 + rng.below(5) as usize))
                        .map(|_| rng.next_u64() as u8)
                        .collect()
                } else {
                    (0..rng.below(600)).map(|_| rng.next_u64() as u8).collect()
                }
            })
            .collect();
        let b = batch(base, &values);
        base += values.len() as i64;
        out.extend(b);
    }
    out
}

/// What one sequential CRC-checking scan says: the positions of the valid entries, and the
/// first problem.
fn sequential_scan(data: &[u8]) -> (Vec<u64>, IterEnd) {
    let mut it = Batches::new(data, 0).validate_crc(true);
    let positions = it
        .by_ref()
        .map_while(|e| e.ok())
        .map(|e| e.position())
        .collect();
    (
        positions,
        it.stopped_at().cloned().unwrap_or(IterEnd::Complete),
    )
}

/// The same through the regions, with `helpers` helper threads: also how many gaps the
/// reader walked itself.
fn chained(data: &[u8], region: usize, helpers: usize) -> (Vec<u64>, IterEnd, usize) {
    let regions = Regions::new(data, 0, region);
    regions.follow_chain(helpers, |reader| {
        let mut positions = Vec::new();
        while let Piece::Entries(entries) = reader.next_piece() {
            positions.extend(entries.iter().map(|e| e.position()));
        }
        let end = reader.end().expect("the reader stopped without a reason");
        (positions, end, reader.gap_walks())
    })
}

#[test]
fn the_chain_through_regions_is_exactly_the_sequential_scan() {
    let mut rng = Rng::new(0x5EED_0FC4_A1A1);
    let mut gap_walks = 0;
    let mut kinds = [0usize; 3];
    for case in 0..120 {
        let region = [256, 1000, 4096][case % 3];
        let mut data = tricky_log(&mut rng, region);
        match case % 6 {
            0 => {}
            1 | 2 => {
                for _ in 0..1 + rng.below(2) {
                    let at = rng.below(data.len() as u64) as usize;
                    data[at] ^= 1 << rng.below(8);
                }
            }
            3 => data.truncate(rng.below(data.len() as u64) as usize),
            4 => {
                // A zero-filled tail, as a crash can leave in preallocated blocks.
                let at = rng.below(data.len() as u64) as usize;
                data[at..].fill(0);
                data.resize(data.len() + 20 * region, 0);
            }
            _ => {
                let at = rng.below(data.len() as u64) as usize;
                let to = (at + 8).min(data.len());
                data[at..to].fill(0xFF);
            }
        }
        let want = sequential_scan(&data);
        kinds[match want.1 {
            IterEnd::Complete => 0,
            IterEnd::IncompleteTrailing { .. } => 1,
            IterEnd::Error(_) => 2,
        }] += 1;
        for helpers in [0, 1, 3] {
            let (positions, end, gaps) = chained(&data, region, helpers);
            assert_eq!(
                (&positions, &end),
                (&want.0, &want.1),
                "case {case}, {helpers} helpers"
            );
            gap_walks += gaps;
            let scan = scan_in_regions(&data, 0, helpers + 1, region);
            let scanned: Vec<u64> = scan.batches.iter().map(|b| b.position).collect();
            assert_eq!((&scanned, &scan.end), (&want.0, &want.1), "case {case}");
        }
    }
    // The cases reach every kind of end, and look-alikes and long batches sent the reader
    // into gaps it had to walk itself.
    assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
    assert!(gap_walks > 0);
}

#[test]
fn given_back_buffers_are_walked_into_again_once_old_and_stay_bounded() {
    // ~8 MiB of small batches in 64 KiB regions: ~130 regions, each buffer ~80 KiB. No
    // helper, so that the order of takes and gives is the same on every run (helpers, and a
    // reader waiting for one, walk regions ahead, whose buffers come back later).
    let value = vec![7u8; 4];
    let data: Vec<u8> = (0..110_000)
        .flat_map(|i| batch(i, std::slice::from_ref(&value)))
        .collect();
    let regions = Regions::new(&data, 0, 64 << 10);
    let (mut reused, mut largest, mut most_spare) = (0, 0, 0);
    let positions = regions.follow_chain(0, |reader| {
        let mut positions = Vec::new();
        let mut seen: Vec<*const ScannedEntry<'_>> = Vec::new();
        while let Piece::Entries(entries) = reader.next_piece() {
            positions.extend(entries.iter().map(|e| e.position()));
            reused += usize::from(seen.contains(&entries.as_ptr()));
            seen.push(entries.as_ptr());
            largest = largest.max(buffer_bytes(&entries));
            reader.recycle(entries);
            // Empty buffers given back (as regions without a start leave) are not kept.
            reader.recycle(Vec::new());
            let spare_bytes = lock(&regions.spare).iter().map(buffer_bytes).sum();
            most_spare = most_spare.max(spare_bytes);
        }
        positions
    });
    assert_eq!(positions, sequential_scan(&data).0);
    // The spare buffers stay at SPARE_BYTES and two buffers, whatever the file's size: a new
    // one is made only while they hold less than SPARE_BYTES and the oldest, and comes back.
    assert!(
        most_spare <= SPARE_BYTES + 2 * largest,
        "{most_spare} spare bytes, buffers of {largest}"
    );
    // Reused, but not at once: 2 MiB of ~80 KiB buffers were given back in between.
    assert!(reused > 50, "{reused} buffers reused");
    let spare = lock(&regions.spare);
    assert!(
        spare.len() * largest >= SPARE_BYTES,
        "{} spare",
        spare.len()
    );
}

#[test]
fn a_reader_that_panics_stops_the_helpers_and_the_panic_comes_out() {
    // Helpers wait for the reader to come nearer; a reader that panics must not
    // leave them (and the call) waiting for ever. Run on a thread, so that a hang fails.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let values = vec![vec![1u8; 4]];
        let data: Vec<u8> = (0..110_000).flat_map(|i| batch(i, &values)).collect();
        let regions = Regions::new(&data, 0, 64 << 10);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            regions.follow_chain(1, |reader| {
                for _ in 0..25 {
                    if let Piece::Entries(entries) = reader.next_piece() {
                        reader.recycle(entries);
                    }
                }
                panic!("reader failed")
            })
        }));
        let _ = done.send(outcome.is_err());
    });
    let panicked = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("follow_chain hung after its reader panicked");
    assert!(panicked);
}

#[test]
fn an_empty_file_is_complete() {
    let (positions, end, _) = chained(&[], 1024, 1);
    assert_eq!((positions, end), (vec![], IterEnd::Complete));
}

#[test]
fn a_bad_crc_at_a_region_start_is_the_first_problem() {
    let mut rng = Rng::new(42);
    let values: Vec<Vec<u8>> = vec![(0..900).map(|_| rng.next_u64() as u8).collect()];
    let batches: Vec<Vec<u8>> = (0..20).map(|i| batch(i, &values)).collect();
    let mut data = batches.concat();
    let size = batches[0].len();
    // Region 5 (of `size` bytes each, plus one) starts at batch 5, which is corrupt.
    data[5 * size + 100] ^= 0x10;
    let (positions, end, _) = chained(&data, size + 1, 1);
    assert_eq!(
        positions,
        (0..5).map(|i| (i * size) as u64).collect::<Vec<_>>()
    );
    match end {
        IterEnd::Error(e) => {
            assert!(
                matches!(e.kind, FormatErrorKind::CrcMismatch { .. }),
                "{e:?}"
            );
            assert_eq!(e.position, (5 * size) as u64);
        }
        other => panic!("{other:?}"),
    }
}

/// A reader alone over `data` computes at most 8 CRCs per byte of it.
fn assert_checked_at_most_8_times(data: &[u8], region: usize) {
    let regions = Regions::new(data, 0, region);
    let mut reader = regions.reader();
    while let Piece::Entries(..) = reader.next_piece() {}
    let checked = regions.bytes_checked();
    assert!(
        checked <= 8 * data.len() as u64,
        "{checked} bytes checked for {} bytes of data",
        data.len()
    );
}

/// Record values full of batch-header look-alikes (magic 2, clean attributes, a length that
/// lands on the next look-alike, a wrong CRC) at every 61 bytes: the region search computes
/// at most two candidate CRCs per region and no look-alike longer than four regions is
/// considered, so the CRC work stays within a small multiple of the data, and the result is
/// still the sequential scan's.
#[test]
fn look_alike_headers_cannot_multiply_the_work() {
    let region = 4096;
    let unit_len = 61;
    let mut unit = vec![0u8; unit_len];
    // length = 61 * 100 - 12: the "next header" lands on another look-alike 100 units on.
    unit[8..12].copy_from_slice(&((unit_len * 100 - 12) as u32).to_be_bytes());
    unit[MAGIC_AT] = 2;
    let value: Vec<u8> = unit.repeat(200);
    let data: Vec<u8> = (0..30)
        .flat_map(|i| {
            batch(
                i * 4,
                &[value.clone(), value.clone(), vec![1; 10], value.clone()],
            )
        })
        .collect();
    let (want_positions, want_end) = sequential_scan(&data);
    assert_eq!(want_positions.len(), 30);
    for helpers in [0, 1, 3] {
        let (positions, end, _) = chained(&data, region, helpers);
        assert_eq!((&positions, &end), (&want_positions, &want_end));
    }
    assert_checked_at_most_8_times(&data, region);
}

#[test]
fn an_intact_log_is_checked_about_once() {
    let mut rng = Rng::new(7);
    let values: Vec<Vec<u8>> = vec![(0..3000).map(|_| rng.next_u64() as u8).collect()];
    let data: Vec<u8> = (0..200).flat_map(|i| batch(i, &values)).collect();
    let regions = Regions::new(&data, 0, 64 * 1024);
    std::thread::scope(|scope| {
        scope.spawn(|| regions.help());
        let mut reader = regions.reader();
        while let Piece::Entries(..) = reader.next_piece() {}
        assert_eq!(reader.gap_walks(), 0);
    });
    let checked = regions.bytes_checked();
    // Every byte once, plus one candidate batch per region after the first.
    let extra = (data.len() / (64 * 1024)) as u64 * 3100;
    assert!(
        checked >= data.len() as u64 && checked <= data.len() as u64 + extra,
        "{checked}"
    );
}

/// Record values that each hold a small valid batch followed by the header of a 500 KB batch:
/// the small batch passes as the candidate start of about every other region, off the chain.
/// The result is still the sequential scan's, and the work stays within a small multiple of
/// the data (the walks from the look-alikes meet a CRC mismatch and stop the helpers).
#[test]
fn look_alike_batches_inside_values_cost_little() {
    let region = 4096;
    let inner = batch(5, &[vec![9; 20]]);
    // The 61-byte header of a real batch with a 500 KB value (and none of its records).
    let fake = batch(6, &[vec![3; 500_000]])[..61].to_vec();
    let mut rng = Rng::new(11);
    // Batches of about a region, the look-alike in the middle: about every other region's
    // search meets it before the next real batch start.
    let data: Vec<u8> = (0..270)
        .flat_map(|i| {
            let mut filler = || -> Vec<u8> { (0..1800).map(|_| rng.next_u64() as u8).collect() };
            let value = [filler(), inner.clone(), fake.clone(), filler()].concat();
            batch(i, &[value])
        })
        .collect();
    assert!(data.len() > 1_000_000);
    let (want_positions, want_end) = sequential_scan(&data);
    assert_eq!(want_positions.len(), 270);
    let (positions, end, gaps) = chained(&data, region, 1);
    assert_eq!((&positions, &end), (&want_positions, &want_end));
    assert!(gaps > 0, "the look-alikes were taken as region starts");
    assert_checked_at_most_8_times(&data, region);
}

/// The entries by their `length` fields from the start (bytes 8..12, plus the 12 bytes before
/// them), whatever their CRCs or lengths: (position, end).
fn framing_chain(data: &[u8]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut p = 0usize;
    while let Some(len) = data.get(p + 8..p + 12) {
        let end = p + 12 + u32::from_be_bytes(len.try_into().unwrap()) as usize;
        out.push((p as u64, end as u64));
        if end > data.len() {
            break;
        }
        p = end;
    }
    out
}

#[test]
fn a_chunk_chain_does_not_follow_a_length_that_ends_inside_the_chunks_it_has_seen() {
    let data = log(3);
    let second = framing_chain(&data)[1].0 as usize;
    let mut bad = data.clone();
    // The second entry's length field says 3 bytes: it ends before the chunk boundary.
    bad[second + 8..second + 12].copy_from_slice(&3i32.to_be_bytes());
    for split in [second + 12, second + 14, second + 17, second + 5] {
        let mut chain = ChunkChain::new();
        let first = chain.check(0, &bad[..split]);
        assert_eq!(first, Some(0..second as u64), "split at {split}");
        // Neither a panic nor a range: the chain is lost at the bad entry.
        assert_eq!(
            chain.check(split as u64, &bad[split..]),
            None,
            "split at {split}"
        );
    }
}

#[test]
fn a_chunk_chain_checks_exactly_the_whole_valid_entries_of_each_chunk() {
    let mut rng = Rng::new(0x5eed_c4a1);
    for round in 0..300 {
        let mut data = tricky_log(&mut rng, 700);
        match round % 4 {
            0 => {}
            1 => {
                let at = rng.below(data.len() as u64) as usize;
                data[at] ^= 1 << rng.below(8);
            }
            2 => data.truncate(rng.below(data.len() as u64) as usize),
            _ => {
                let at = rng.below(data.len() as u64) as usize;
                data[at..].fill(0);
            }
        }
        // The valid entries of one sequential scan, as (position, end).
        let valid: Vec<(u64, u64)> = Batches::new(&data, 0)
            .validate_crc(true)
            .map_while(|e| e.ok())
            .map(|e| (e.position(), e.position() + e.size_in_bytes() as u64))
            .collect();
        let chain = framing_chain(&data);
        let mut chunks = ChunkChain::new();
        let (mut at, mut bounds, mut covered) = (0usize, Vec::new(), Vec::new());
        while at < data.len() {
            // Tiny chunks too: a chunk may end inside an entry's length field more than once.
            let n = match rng.below(4) {
                0 => 1 + rng.below(12) as usize,
                1 => 1 + rng.below(300) as usize,
                _ => 1 + rng.below(5_000) as usize,
            }
            .min(data.len() - at);
            let chunk = &data[at..at + n];
            // Some chunks only followed, not checked (a helper whose applier is idle).
            if rng.below(3) == 0 {
                chunks.follow(at as u64, chunk);
                at += n;
                continue;
            }
            bounds.push((at as u64, (at + n) as u64));
            if let Some(r) = chunks.check(at as u64, chunk) {
                assert!(
                    r.start >= at as u64 && r.end <= (at + n) as u64,
                    "round {round}"
                );
                // A run of whole valid entries in these bytes, on the chain of the file.
                let bytes = &chunk[(r.start - at as u64) as usize..(r.end - at as u64) as usize];
                let mut it = Batches::new(bytes, r.start).validate_crc(true);
                for e in &mut it {
                    let e = e.expect("a checked entry is valid");
                    assert!(
                        chain.iter().any(|&(p, _)| p == e.position()),
                        "round {round}"
                    );
                    covered.push(e.position());
                }
                assert_eq!(it.stopped_at(), Some(&IterEnd::Complete), "round {round}");
            }
            at += n;
        }
        // Every valid entry that lies whole in one checked chunk was checked.
        for &(p, end) in &valid {
            if bounds.iter().any(|&(a, b)| a <= p && end <= b) {
                assert!(
                    covered.contains(&p),
                    "round {round}: entry at {p} not checked"
                );
            }
        }
        let mut sorted = covered.clone();
        sorted.dedup();
        assert_eq!(sorted, covered, "round {round}: an entry checked twice");
    }
}
