//! Tests of the tail publication (`publish.rs`) on one thread: the buckets, what a snapshot
//! reads, what a truncated copy keeps. Its handoff between threads is `tests/loom_publish.rs`'s.

use super::publish::{bucket_of, ActiveTail, TailState, FIRST_BUCKET};

#[test]
fn buckets_double_and_cover_every_entry_once() {
    assert_eq!(bucket_of(0), (0, 0));
    assert_eq!(bucket_of(FIRST_BUCKET - 1), (0, FIRST_BUCKET - 1));
    assert_eq!(bucket_of(FIRST_BUCKET), (1, 0));
    assert_eq!(bucket_of(3 * FIRST_BUCKET - 1), (1, 2 * FIRST_BUCKET - 1));
    assert_eq!(bucket_of(3 * FIRST_BUCKET), (2, 0));
    let mut expect = (0, 0);
    for n in 0..100_000 {
        let got = bucket_of(n);
        assert_eq!(got, expect, "entry {n}");
        expect = if got.1 + 1 == FIRST_BUCKET << got.0 {
            (got.0 + 1, 0)
        } else {
            (got.0, got.1 + 1)
        };
    }
}

#[test]
fn entries_read_back_only_below_the_published_count() {
    let tail = ActiveTail::new(TailState::default(), 0);
    for n in 0..1000u32 {
        assert!(tail.push_offset_entry(n, n * 10));
        if n % 3 == 0 {
            assert!(tail.push_time_entry(i64::from(n) * 7, n));
        }
    }
    assert_eq!(
        tail.snapshot().offset_entry(0),
        None,
        "nothing published yet"
    );
    tail.publish(10_000, 6993, 999);
    let s = tail.snapshot();
    assert_eq!(s.state.offset_entries, 1000);
    assert_eq!(s.state.time_entries, 334);
    for n in 0..1000u32 {
        assert_eq!(s.offset_entry(n as usize), Some((n, n * 10)));
    }
    assert_eq!(s.offset_entry(1000), None);
    assert_eq!(s.time_entry(333), Some((999 * 7, 999)));
    assert_eq!(s.time_entry(334), None);
    assert!(tail.push_offset_entry(1000, 10_000));
    assert_eq!(s.offset_entry(1000), None, "a snapshot does not grow");
}

#[test]
fn a_truncated_tail_keeps_the_entries_below_the_cut_and_leaves_the_old_one_whole() {
    let tail = ActiveTail::new(TailState::default(), 0);
    for n in 0..200u32 {
        tail.push_offset_entry(n, n * 100);
        tail.push_time_entry(i64::from(n), n);
    }
    tail.publish(20_000, 199, 199);
    let cut = tail.truncated(
        50,
        40,
        TailState {
            size: 5_000,
            max_timestamp: 39,
            offset_of_max_timestamp: 39,
            ..TailState::default()
        },
        1,
    );
    assert_eq!((tail.truncations(), cut.truncations()), (0, 1));
    let s = cut.snapshot();
    assert_eq!(
        (s.state.size, s.state.offset_entries, s.state.time_entries),
        (5_000, 50, 40)
    );
    assert_eq!(s.offset_entry(49), Some((49, 4_900)));
    assert_eq!(s.offset_entry(50), None);
    assert_eq!(s.time_entry(39), Some((39, 39)));
    cut.push_offset_entry(50, 9);
    cut.publish(5_100, 39, 39);
    assert_eq!(cut.snapshot().offset_entry(50), Some((50, 9)));
    assert_eq!(tail.snapshot().offset_entry(50), Some((50, 5_000)));
}

/// The log's active segment publishes a tail equal to its indexes, size and max timestamp, made
/// at the log's truncation count; no sealed segment publishes one.
fn check_tails(log: &super::LocalLog, step: &str) {
    let inner = log.read_inner();
    let last = inner.segments.keys().next_back().copied();
    for (&base, slot) in inner.segments.iter() {
        let seg: &crate::LogSegment = match slot {
            super::Slot::Active { seg, .. } => match seg.get() {
                Some(s) => s,
                None => continue,
            },
            super::Slot::Sealed(s) => match s.get() {
                Some(s) => {
                    assert!(
                        s.tail().is_none(),
                        "{step}: sealed segment {base} has a tail"
                    );
                    continue;
                }
                None => continue,
            },
        };
        if Some(base) != last {
            assert!(
                seg.tail().is_none(),
                "{step}: sealed segment {base} has a tail"
            );
            continue;
        }
        let tail = seg
            .tail()
            .expect("the open active segment publishes a tail");
        assert_eq!(tail.truncations(), log.truncations(), "{step}");
        let s = tail.snapshot();
        assert_eq!(s.state.size, seg.size(), "{step}");
        assert_eq!(tail.largest_timestamp(), seg.largest_timestamp(), "{step}");
        assert_eq!(
            (s.state.max_timestamp, s.state.offset_of_max_timestamp),
            (
                seg.max_timestamp_so_far(),
                seg.offset_of_max_timestamp_so_far()
            ),
            "{step}"
        );
        check_searches(seg, crate::segment::TailIndex::new(base, s), step);
        tail.with_view(|view| check_reads(seg, &view, log.log_end_offset(), step));
        let index = seg.offset_index();
        assert_eq!(s.state.offset_entries, index.entries(), "{step}");
        for n in 0..index.entries() {
            let e = index.entry(n).expect("entry");
            let want = (
                u32::try_from(e.offset - base).expect("relative"),
                e.position.0,
            );
            assert_eq!(s.offset_entry(n), Some(want), "{step}: offset entry {n}");
        }
        let index = seg.time_index();
        assert_eq!(s.state.time_entries, index.entries(), "{step}");
        for n in 0..index.entries() {
            let e = index.entry(n).expect("entry");
            let want = (
                e.timestamp,
                u32::try_from(e.offset - base).expect("relative"),
            );
            assert_eq!(s.time_entry(n), Some(want), "{step}: time entry {n}");
        }
    }
}

/// Kafka's index searches answer over the published tail as over the mapped indexes.
fn check_searches(seg: &crate::LogSegment, tail: crate::segment::TailIndex<'_>, step: &str) {
    use crate::index::{fetch_upper_bound_offset, lookup, scan_start_before, time_lookup};
    use crate::index::{FilePosition, OffsetPosition};

    let base = seg.base_offset();
    let (offsets, times) = (seg.offset_index(), seg.time_index());
    let last = offsets.last_offset() + 3;
    for target in (base - 2)..=last {
        assert_eq!(
            lookup(&tail, target),
            offsets.lookup(target),
            "{step}: {target}"
        );
    }
    for position in (0..=tail.state().size + 2).step_by(7) {
        let p = u32::try_from(position).expect("position");
        assert_eq!(
            scan_start_before(&tail, position),
            offsets.scan_start_before(position),
            "{step}: {position}"
        );
        for size in [0, 1, 90, 300, 1_000] {
            let from = OffsetPosition {
                offset: base,
                position: FilePosition(p),
            };
            assert_eq!(
                fetch_upper_bound_offset(&tail, from, size),
                offsets.fetch_upper_bound_offset(from, size),
                "{step}: {position} + {size}"
            );
        }
    }
    for ts in (900..12_000).step_by(37) {
        assert_eq!(time_lookup(&tail, ts), times.lookup(ts), "{step}: {ts}");
    }
}

/// The read functions answer over the published tail as over the segment.
fn check_reads<O, T>(
    seg: &crate::LogSegment,
    tail: &crate::segment::SegmentView<'_, O, T>,
    log_end_offset: i64,
    step: &str,
) where
    O: crate::index::OffsetEntries,
    T: crate::index::TimeEntries,
{
    let own = seg.view();
    let base = seg.base_offset();
    for offset in (base - 1)..=(log_end_offset + 1) {
        let got = tail.translate_offset(offset, 0).expect("translate");
        assert_eq!(got, own.translate_offset(offset, 0).expect("translate"));
        for max_size in [0, 100, 1_000, 1 << 20] {
            for max_position in [None, Some(seg.size() / 2)] {
                for min_one in [false, true] {
                    let want = own
                        .read_bounds(offset, max_size, max_position, min_one)
                        .expect("bounds");
                    let got = tail
                        .read_bounds(offset, max_size, max_position, min_one)
                        .expect("bounds");
                    assert_eq!(got, want, "{step}: read_bounds({offset}, {max_size})");
                    let Some(b) = want else { continue };
                    let (t, o) = (tail.fetch_slice(&b), own.fetch_slice(&b));
                    assert_eq!(
                        (t.position(), t.len(), t.walk_from),
                        (o.position(), o.len(), o.walk_from)
                    );
                    assert_eq!(
                        t.next_offset().expect("next"),
                        o.next_offset().expect("next")
                    );
                    let (o, p) = (offset, b.position);
                    assert_eq!(
                        tail.fetch_upper_bound_offset(o, p, b.fetch_size),
                        own.fetch_upper_bound_offset(o, p, b.fetch_size),
                        "{step}: upper bound at {offset}"
                    );
                }
            }
        }
    }
    for ts in (900..12_000).step_by(331) {
        let got = tail
            .find_offset_by_timestamp(ts, base)
            .expect("by timestamp");
        let want = own
            .find_offset_by_timestamp(ts, base)
            .expect("by timestamp");
        assert_eq!(got, want, "{step}: timestamp {ts}");
    }
    let got = tail.offset_of_max_timestamp().expect("max timestamp");
    assert_eq!(got, own.offset_of_max_timestamp().expect("max"), "{step}");
}

#[test]
fn the_active_segment_publishes_its_indexes_through_appends_rolls_truncations_and_reopens() {
    use record_format::RecordBatchBuilder;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = super::LogConfig {
        segment_bytes: 6_000,
        index_interval_bytes: 300,
        retention_ms: -1,
        ..super::LogConfig::default()
    };
    let log = super::LocalLog::open(dir.path(), config, 0).expect("open");
    check_tails(&log, "open");
    // A fixed pseudo-random walk (an LCG): the same steps on every run.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let (mut most_segments, mut into_sealed) = (0, 0);
    for step in 0..400 {
        let end = log.log_end_offset();
        let segments = log.segment_bases().len();
        let what = match next(20) {
            0 => {
                log.roll(None).expect("roll");
                "roll"
            }
            1 => {
                let start = log.log_start_offset();
                let target = start + next(u64::try_from(end - start).unwrap_or(0) + 1) as i64;
                log.truncate_to(target).expect("truncate");
                if log.segment_bases().len() < segments {
                    into_sealed += 1;
                }
                "truncate"
            }
            2 => {
                log.release_segments().expect("release");
                check_tails(&log, "released");
                log.read(end, 1, true)
                    .expect("read at the end reopens the active segment");
                "release and reopen"
            }
            _ => {
                let records = 1 + next(5) as i64;
                let ts = 1_000 + next(10_000) as i64;
                let mut b = RecordBatchBuilder::new(end).partition_leader_epoch(0);
                for i in 0..records {
                    b.append(ts + i, Some(b"key"), Some(&[7u8; 60]), &[])
                        .expect("record");
                }
                log.append(&b.build()).expect("append");
                "append"
            }
        };
        check_tails(&log, &format!("step {step}: {what}"));
        most_segments = most_segments.max(log.segment_bases().len());
    }
    assert!(most_segments > 3, "the walk rolled: {most_segments}");
    assert!(
        into_sealed > 3,
        "truncations into sealed segments: {into_sealed}"
    );
}

/// Readers that take the active segment's published tail from the published list and read
/// through it without a lock, beside a writer that appends and truncates, following the truncation
/// count rule (`publish.rs`): every read they accept holds whole, valid batches in offset order,
/// from the batch holding the offset asked for (or the next).
#[test]
fn readers_of_the_published_tail_never_accept_bytes_a_truncation_cut() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use record_format::{Batches, LogEntry, RecordBatchBuilder};

    let dir = tempfile::tempdir().expect("tempdir");
    let config = super::LogConfig {
        index_interval_bytes: 300,
        retention_ms: -1,
        ..super::LogConfig::default()
    };
    let log = Arc::new(super::LocalLog::open(dir.path(), config, 0).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = |seed: u64| {
        let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut accepted, mut again, mut n) = (0u64, 0u64, seed);
            while !stop.load(Ordering::Relaxed) {
                n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let before = log.truncations();
                // The tail as the published list holds it.
                let tail = log.list.load().active.as_ref().and_then(|a| a.tail.clone());
                let Some(tail) = tail.filter(|t| t.truncations() == before) else {
                    again += 1;
                    continue;
                };
                let end = log.log_end_offset();
                // Near the end, where the truncations cut.
                let offset = (end - 1 - (n >> 33) as i64 % 30).max(0);
                let read = tail.with_view(|view| {
                    let Some(b) = view.read_bounds(offset, 4_096, None, true)? else {
                        return Ok(None);
                    };
                    let bytes = view.log.read(b.position, b.fetch_size)?.into_owned();
                    Ok::<_, crate::SegmentError>(Some(bytes))
                });
                if log.truncations() != before {
                    again += 1;
                    continue;
                }
                let Some(bytes) = read.expect("a read no truncation ran beside succeeds") else {
                    continue;
                };
                let whole = crate::file_records::whole_batches_len(&bytes);
                let mut expect_base = None;
                for e in Batches::new(bytes.get(..whole).unwrap_or_default(), 0) {
                    let Ok(LogEntry::V2(b)) = e else {
                        panic!("not a v2 batch: {e:?}")
                    };
                    b.validate().expect("a whole batch with its CRC");
                    // Truncations need not fall on batch boundaries, so offsets may skip.
                    if let Some(base) = expect_base {
                        assert!(b.base_offset() >= base, "offsets increase");
                    } else {
                        assert!(
                            offset <= b.last_offset(),
                            "the batch holding {offset} or after"
                        );
                    }
                    expect_base = Some(b.last_offset() + 1);
                }
                assert!(expect_base.is_some(), "at least the batch holding {offset}");
                accepted += 1;
            }
            (accepted, again)
        })
    };
    let readers = [reader(1), reader(2)];
    let mut n: u64 = 7;
    for round in 0..6_000u32 {
        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let end = log.log_end_offset();
        if round % 4 == 3 && end > 0 {
            log.truncate_to(end - 1 - (n >> 33) as i64 % end.min(12))
                .expect("truncate");
            continue;
        }
        let mut b = RecordBatchBuilder::new(end).partition_leader_epoch(0);
        for i in 0..3 {
            let value = [(round % 251) as u8; 60];
            b.append(i64::from(round) + i, Some(b"key"), Some(&value), &[])
                .expect("record");
        }
        log.append(&b.build()).expect("append");
    }
    stop.store(true, Ordering::Relaxed);
    let (mut accepted, mut again) = (0, 0);
    for r in readers {
        let (a, g) = r.join().expect("reader");
        accepted += a;
        again += g;
    }
    assert!(accepted > 100, "reads accepted: {accepted}, again: {again}");
}

/// No read takes a lock the writer takes: with the writer's lock held on this thread, every
/// read of the read path completes on another one (with the segment list behind a lock, as
/// before, each would wait), and returns the bytes appended, across every segment.
#[test]
fn every_read_completes_while_the_writer_holds_its_lock() {
    use record_format::RecordBatchBuilder;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = super::LogConfig {
        segment_bytes: 2_000,
        index_interval_bytes: 300,
        retention_ms: -1,
        // Fewer open than there are segments: the walks open and close segments.
        max_open_inactive_segments: 2,
        ..super::LogConfig::default()
    };
    let log = Arc::new(super::LocalLog::open(dir.path(), config, 0).expect("open"));
    let mut appended = Vec::new();
    for n in 0..40i64 {
        let mut b = RecordBatchBuilder::new(n * 2).partition_leader_epoch(0);
        for i in 0..2 {
            b.append(1_000 + n * 10 + i, Some(b"key"), Some(&[n as u8; 100]), &[])
                .expect("record");
        }
        let batch = b.build();
        log.append(&batch).expect("append");
        appended.extend_from_slice(&batch);
    }
    let end = log.log_end_offset();
    assert_eq!(end, 80);
    assert!(log.segment_bases().len() > 5, "{:?}", log.segment_bases());
    log.append_aborted_txns(&[crate::AbortedTxn::new(7, 76, 79, 70)])
        .expect("txn index");

    let guard = log.write_inner();
    let (tx, rx) = mpsc::channel();
    let reader = Arc::clone(&log);
    std::thread::spawn(move || {
        let log = reader;
        let mut all = Vec::new();
        let mut offset = 0;
        while offset < end {
            let got = log.read(offset, 1 << 20, true).expect("read");
            let last = record_format::Batches::new(&got.records, 0)
                .filter_map(|e| e.ok())
                .last()
                .map(|e| e.last_offset())
                .expect("a batch");
            all.extend_from_slice(&got.records);
            offset = last + 1;
        }
        let exact = log.read_exact(10, 1 << 20, true, end, true).expect("exact");
        let slice = log
            .slice_exact(10, 1 << 20, true, end, true)
            .expect("slice");
        let sliced = slice
            .and_then(|s| s.slice)
            .map(|s| s.to_vec().expect("slice read"));
        let by_time = log.fetch_offset_by_timestamp(1_201).expect("by timestamp");
        let max = log.offset_of_max_timestamp().expect("max timestamp");
        let aborted = log.collect_aborted_txns(0, end).expect("aborted");
        let _ = tx.send((
            all,
            exact.map(|e| e.data.records),
            sliced,
            by_time.map(|t| t.offset),
            max.map(|t| t.offset),
            aborted,
            log.bounds().log_end_offset,
        ));
    });
    let got = rx.recv_timeout(Duration::from_secs(30));
    drop(guard);
    let (all, exact, sliced, by_time, max, aborted, bound_end) =
        got.expect("the reads completed while the writer held its lock");
    assert_eq!(all, appended, "every batch, in order, across the segments");
    assert!(exact.is_some_and(|e| !e.is_empty() && sliced.as_deref() == Some(&e[..])));
    // Timestamp 1,201 is batch 20's second record, offset 41.
    assert_eq!(by_time, Some(41));
    // The largest timestamp, 1,391, is the last batch's last record, offset 79.
    assert_eq!(max, Some(79));
    assert_eq!(aborted, vec![crate::AbortedTxn::new(7, 76, 79, 70)]);
    assert_eq!(bound_end, end);
}
