//! Kafka's own `UnifiedLog.read` as the oracle of seglog's fetch (`Log::fetch`).
//!
//! Partitions written by Kafka's `UnifiedLog.appendAsLeader` (harness `write`: plain and
//! compressed batches, idempotent and transactional producers, commits and aborts, a
//! transaction left open, leader epoch changes, small segments), each loaded twice, by Kafka
//! (harness `read`) and by `Log::open`, with the same high watermark: the log end, and an offset
//! inside the log. Then the same random requests (offset, max bytes, isolation, min one message)
//! go to both: the bytes returned (length and CRC-32), `firstEntryIncomplete`, the aborted
//! transactions under `read_committed` (or no list), and out-of-range errors must be identical.
//! On the same loads, `ListOffsets` (`fetchOffsetByTimestamp`: the special timestamps, including
//! KIP-734's max timestamp, and ~200 timestamps across and past the log) and
//! `OffsetsForLeaderEpoch` (`endOffsetForEpoch`, every epoch around the log's) must answer the
//! same offset, timestamp and leader epoch.
//!
//! `SEGLOG_KAFKA_READ_FETCHES` (default 1,200 in all), `SEGLOG_KAFKA_READ_SEED` (default 1).

use seglog::{Config, FetchIsolation, HighWatermark, Log};
use serde_json::{json, Value};

use super::kafka::{copy_tree, harness, json_lines, Rng};
use super::{env_u64, heavy, MIN};

const MAX_BYTES: [usize; 10] = [0, 1, 11, 61, 100, 700, 1500, 4096, 20_000, 1 << 20];

fn isolation_name(i: FetchIsolation) -> &'static str {
    match i {
        FetchIsolation::LogEnd => "log_end",
        FetchIsolation::HighWatermark => "high_watermark",
        FetchIsolation::TxnCommitted => "txn_committed",
    }
}

/// seglog's answer in the harness's JSON form.
fn seglog_answer(log: &Log, offset: i64, max: usize, iso: FetchIsolation, min_one: bool) -> Value {
    match log.fetch(offset, max, iso, min_one) {
        Ok(f) => json!({
            "len": f.records.len(),
            "crc": crc32fast::hash(&f.records),
            "incomplete": f.first_entry_incomplete,
            "aborted": f.aborted_transactions.map(|list| list
                .iter()
                .map(|t| json!([t.producer_id, t.first_offset]))
                .collect::<Vec<_>>()),
        }),
        Err(seglog::Error::Log(seglog::recovery::PartitionLogError::OffsetOutOfRange {
            ..
        })) => json!({"error": "OffsetOutOfRangeException"}),
        Err(e) => json!({"error": e.to_string()}),
    }
}

fn kafka_answer(v: &Value) -> Value {
    match v.get("error") {
        Some(e) => json!({"error": e}),
        None => json!({
            "len": v["len"],
            "crc": v["crc"],
            "incomplete": v["incomplete"],
            "aborted": v["aborted"],
        }),
    }
}

#[test]
fn fetches_and_offset_lookups_are_identical_to_kafkas_unified_log() {
    let _g = heavy();
    let fetches = env_u64("SEGLOG_KAFKA_READ_FETCHES", 1_200);
    let seed = env_u64("SEGLOG_KAFKA_READ_SEED", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    // (seed of the partition, batches, segment bytes, high watermark inside the log)
    let cases = [
        (seed, 300u64, 4096u64, false),
        (seed + 1, 300, 16_384, true),
    ];
    let per_case = fetches / cases.len() as u64 + 1;
    let (mut compared, mut with_aborted, mut partial, mut mismatches) =
        (0u64, 0u64, 0u64, Vec::new());
    let mut lookups_compared = 0u64;
    for (n, &(pseed, batches, segment_bytes, mid_hw)) in cases.iter().enumerate() {
        let base = tmp.path().join(format!("base-{n}")).join("reads-0");
        harness(
            &[
                "write",
                &base.display().to_string(),
                &pseed.to_string(),
                &batches.to_string(),
                &segment_bytes.to_string(),
            ],
            5 * MIN,
        );
        let (kafka_dir, seglog_dir) = (
            tmp.path().join(format!("kafka-{n}")),
            tmp.path().join(format!("seglog-{n}")),
        );
        copy_tree(base.parent().expect("parent"), &kafka_dir);
        copy_tree(base.parent().expect("parent"), &seglog_dir);

        let log = Log::open(
            seglog_dir.join("reads-0"),
            Config::default().with_high_watermark(HighWatermark::Manual),
        )
        .expect("seglog opens the partition");
        let end = log.log_end_offset();
        let mut rng = Rng::new(pseed * 7919 + 3);
        // A high watermark inside the log where no transaction is undecided (after a load,
        // Kafka forgets the completed transactions its latest snapshot covers, so the last
        // stable offset below such a high watermark is Kafka's own choice: docs/kafka-interop.md).
        let mut hw = end;
        if mid_hw {
            for h in (end / 2 + rng.below(7) as i64)..end {
                log.set_high_watermark(h).unwrap();
                if log.last_stable_offset() == h {
                    hw = h;
                    break;
                }
            }
        }
        log.set_high_watermark(hw).unwrap();

        let mut requests = String::new();
        let mut asked = Vec::new();
        for _ in 0..per_case {
            // Offsets in the log, with the ends and one past them.
            let offset = match rng.below(20) {
                0 => end,
                1 => end + 1,
                2 => hw,
                _ => rng.below(end as u64) as i64,
            };
            let max = MAX_BYTES[rng.below(MAX_BYTES.len() as u64) as usize];
            let iso = [
                FetchIsolation::LogEnd,
                FetchIsolation::HighWatermark,
                FetchIsolation::TxnCommitted,
                FetchIsolation::TxnCommitted,
            ][rng.below(4) as usize];
            let min_one = rng.below(3) != 0;
            requests.push_str(&format!(
                "{offset} {max} {} {}\n",
                isolation_name(iso),
                u8::from(min_one)
            ));
            asked.push((offset, max, iso, min_one));
        }
        // ListOffsets and OffsetsForLeaderEpoch on the same load: the special timestamps,
        // timestamps across the log's range and past it, and every leader epoch around those
        // the log has.
        let first_ts = log
            .fetch_offset_by_timestamp(0)
            .expect("lookup")
            .map_or(0, |t| t.timestamp);
        let max_ts = log
            .fetch_offset_by_timestamp(seglog::recovery::MAX_TIMESTAMP)
            .expect("lookup")
            .map_or(0, |t| t.timestamp);
        let mut lookups = Vec::new();
        for t in [-1i64, -2, -3, -4, -5, 0, first_ts, max_ts, max_ts + 1] {
            lookups.push(format!("ts {t}"));
        }
        for _ in 0..200 {
            let span = (max_ts - first_ts + 20).max(1) as u64;
            lookups.push(format!("ts {}", first_ts - 10 + rng.below(span) as i64));
        }
        let latest = log
            .end_offset_for_leader_epoch(i32::MAX)
            .map_or(0, |(e, _)| e)
            .max(log.leader_epoch());
        for e in -1..=latest + 2 {
            lookups.push(format!("epoch {e}"));
        }
        for l in &lookups {
            requests.push_str(l);
            requests.push('\n');
        }
        let file = tmp.path().join(format!("requests-{n}"));
        std::fs::write(&file, &requests).expect("requests");
        let out = harness(
            &[
                "read",
                &kafka_dir.join("reads-0").display().to_string(),
                &hw.to_string(),
                &file.display().to_string(),
            ],
            5 * MIN,
        );
        let lines = json_lines(&out);
        let (head, answers) = lines.split_first().expect("the harness's first line");
        assert_eq!(head["log_end_offset"], json!(end), "log end offsets differ");
        assert_eq!(head["high_watermark"], json!(hw));
        assert_eq!(
            head["last_stable_offset"],
            json!(log.last_stable_offset()),
            "last stable offsets differ"
        );
        assert_eq!(
            answers.len(),
            asked.len() + lookups.len(),
            "one answer a request"
        );
        let (answers, lookup_answers) = answers.split_at(asked.len());
        for (l, k) in lookups.iter().zip(lookup_answers) {
            let (what, arg) = l.split_once(' ').expect("a lookup");
            let arg: i64 = arg.parse().expect("a number");
            let got = if what == "ts" {
                match log.fetch_offset_by_timestamp(arg).expect("lookup") {
                    Some(t) => json!({"timestamp": t.timestamp, "offset": t.offset,
                                      "epoch": t.leader_epoch}),
                    None => json!({"none": true}),
                }
            } else {
                match log.end_offset_for_leader_epoch(arg as i32) {
                    Some((e, o)) => json!({"epoch": e, "offset": o}),
                    None => json!({"none": true}),
                }
            };
            lookups_compared += 1;
            if &got != k {
                mismatches.push(format!("case {n} {l}: kafka {k}, seglog {got}"));
            }
        }
        for (&(offset, max, iso, min_one), k) in asked.iter().zip(answers) {
            let want = kafka_answer(k);
            let got = seglog_answer(&log, offset, max, iso, min_one);
            compared += 1;
            if want["aborted"].as_array().is_some_and(|a| !a.is_empty()) {
                with_aborted += 1;
            }
            if want["len"].as_u64().is_some_and(|l| l > 0) && max < 1 << 20 && !min_one {
                partial += 1;
            }
            if want != got {
                mismatches.push(format!(
                    "case {n} fetch({offset}, {max}, {}, min_one {min_one}): kafka {want}, seglog {got}",
                    isolation_name(iso)
                ));
            }
        }
        log.close().expect("close");
    }
    eprintln!(
        "reads: {compared} fetches and {lookups_compared} ListOffsets/OffsetsForLeaderEpoch \
         lookups compared, {with_aborted} with aborted transactions, {partial} size-bound \
         without min-one, {} mismatches",
        mismatches.len()
    );
    assert!(compared >= fetches, "{compared} fetches");
    assert!(
        with_aborted > 20,
        "too few fetches with aborted transactions: {with_aborted}"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {compared} fetches differ:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
