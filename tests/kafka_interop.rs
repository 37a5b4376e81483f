//! Apache Kafka itself in the test loop (issue #13): a live KRaft broker, Kafka's own
//! `UnifiedLog`/`LogLoader`, `ProducerStateManager` readers and `DumpLogSegments` as oracles.
//!
//! Needs the jars: `tools/kafka/fetch.sh` (Java 17+, Maven). Without them every test here fails
//! with a line naming that script. Not part of `cargo test --workspace` (`test = false` in
//! Cargo.toml); run it with `cargo test --test kafka_interop` (CI runs it after the Rust suite).
//!
//! What is compared, and where seglog is deliberately different, is written in
//! docs/kafka-interop.md. In short:
//! * `broker_clean_stop_then_seglog_append`: a broker's log dir after a clean stop: `seglog verify`
//!   clean and changes nothing; `seglog dump` and `DumpLogSegments` print the same text for every
//!   file; seglog appends (data, transactions, a MIRROR_PID_RESET barrier) to a topic the broker
//!   created; the restarted broker recovers it without cutting anything and serves exactly the
//!   expected records under both isolation levels.
//! * `broker_kill9_recovery_agrees`: broker killed with SIGKILL while producing; `seglog recover`
//!   on a copy and the broker's own recovery on the original keep the same bytes, indexes and
//!   producer state; a broker on seglog's copy serves the same records and cuts nothing.
//! * `mirror_stop_policies_served_by_kafka`: a transaction open at a KIP-1279 mirror stop, one
//!   partition per stop policy; the restarted broker serves what each policy kept.
//! * `differential_recovery`: ≥ 500 seeded damaged partitions written by Kafka's `UnifiedLog`,
//!   recovered by Kafka (harness) and by `seglog recover`; kept bytes and state compared.
//! * `batch_verdicts_agree_with_kafka_on_mutated_batches`: 100,000 mutated batches (most with
//!   the CRC recomputed) judged by Kafka's batch iterator, `ensureValid` and record iterator
//!   (`BatchVerdicts.java`) and by seglog's parsers; `each_kafka_exception_class_maps_to_its_seglog_kind`
//!   produces each Kafka exception class of the mapping table (docs/testing.md).
//! * `compaction::differential_compaction`: 248 seeded compacted partitions cleaned by Kafka's
//!   own `Cleaner` (harness, fixed clock) and by `seglog compact`; every segment and index file
//!   byte-identical for the 200 uncompressed ones; for the 48 compressed ones the batch headers
//!   (but for length and CRC) and the records as Kafka's dump tool reads them, and indexes built by
//!   Kafka's rule from each side's own batches.
//! * `compaction::broker_serves_a_log_seglog_compacted`: a broker restarted on a compacted topic
//!   `seglog compact` cleaned serves exactly the records the producers' acks say a compaction keeps.
//! * `reads::fetches_and_offset_lookups_are_identical_to_kafkas_unified_log`: ≥ 1,000 random
//!   fetches (offset, max bytes, isolation, min one message) on Kafka-written partitions with
//!   transactions, answered by Kafka's `UnifiedLog.read` and by `Log::fetch`: the same bytes,
//!   `firstEntryIncomplete` and aborted transactions; and `ListOffsets`/`OffsetsForLeaderEpoch`
//!   lookups answered alike.
#![cfg(unix)]

#[path = "kafka_interop/batch_verdicts.rs"]
mod batch_verdicts;
#[path = "kafka_interop/kafka.rs"]
mod kafka;

#[path = "kafka_interop/compaction.rs"]
mod compaction;
#[path = "kafka_interop/reads.rs"]
mod reads;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use kafka::{copy_tree, file_hashes, harness, json_lines, run, run_ok, seglog, Broker, Rng};
use serde_json::Value;

/// One heavy test at a time (brokers and JVMs on a 2-core machine).
static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

const MIN: Duration = Duration::from_secs(60);

fn create_topic(b: &Broker, topic: &str, partitions: u32) {
    b.client(
        "create-topic",
        &[
            topic,
            &partitions.to_string(),
            "segment.bytes=1100000",
            "max.message.bytes=4194304",
        ],
    );
}

/// Records by (partition, offset), as the harness prints them.
type Records = BTreeMap<(i64, i64), Value>;

/// Records printed by the harness (`produce-mix`, `consume`), keyed by (partition, offset).
fn records(text: &str) -> BTreeMap<(i64, i64), Value> {
    json_lines(text)
        .into_iter()
        .map(|mut v| {
            let key = (
                v["partition"].as_i64().expect("partition"),
                v["offset"].as_i64().expect("offset"),
            );
            if let Some(o) = v.as_object_mut() {
                o.remove("aborted");
            }
            (key, v)
        })
        .collect()
}

fn consume(
    b: &Broker,
    topic: &str,
    partitions: u32,
    isolation: &str,
) -> BTreeMap<(i64, i64), Value> {
    records(&b.client("consume", &[topic, &partitions.to_string(), isolation]))
}

/// Partition directories of `topic` in a log dir, sorted.
fn partition_dirs(log_dir: &Path, topic: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .expect("read log dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.rsplit_once('-'))
                    .is_some_and(|(t, part)| t == topic && part.parse::<u32>().is_ok())
        })
        .collect();
    v.sort();
    v
}

/// The files of a partition dir whose name ends with one of `suffixes` (not in quarantine/).
fn files_with(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read partition dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| suffixes.iter().any(|s| n.ends_with(s)))
        })
        .collect();
    v.sort();
    v
}

/// Every dumpable file under a log dir (all partitions, internal topics included).
fn dumpable(log_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(log_dir).expect("read log dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(files_with(
                &p,
                &[".log", ".index", ".timeindex", ".txnindex", ".snapshot"],
            ));
        }
    }
    out.sort();
    out
}

/// `seglog dump` and Kafka's `DumpLogSegments` print the same text for `files`
/// (`.log` with `--deep-iteration --print-data-log`, and the internal topics' `.log` with their
/// decoder: `--offsets-decoder`, `--transaction-log-decoder`, `--cluster-metadata-decoder`). Returns how many lines were a KIP-1279
/// barrier, the one deliberate difference: Kafka 4.x prints the record of control type 7 as
/// `controlType: UNKNOWN(7)`, seglog as ` MirrorPidReset {...}` (same text before it).
fn assert_dumps_agree(files: &[PathBuf]) -> usize {
    let mut barriers = 0;
    for f in files {
        let name = f.display().to_string();
        let mut args = vec!["--files".to_string(), name.clone()];
        if name.ends_with(".log") {
            args.insert(0, "--print-data-log".into());
            args.insert(0, "--deep-iteration".into());
            // Kafka's internal topics, decoded by both tools' decoders.
            let topic_dir = f
                .parent()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy());
            let decoder = match topic_dir.as_deref() {
                Some(d) if d.starts_with("__consumer_offsets-") => Some("--offsets-decoder"),
                Some(d) if d.starts_with("__transaction_state-") => {
                    Some("--transaction-log-decoder")
                }
                Some(d) if d.starts_with("__cluster_metadata-") => {
                    Some("--cluster-metadata-decoder")
                }
                _ => None,
            };
            if let Some(flag) = decoder {
                args.insert(0, flag.into());
            }
        }
        let mut kargs = vec!["dump"];
        kargs.extend(args.iter().map(String::as_str));
        let kafka_text = harness(&kargs, MIN);
        let mut c = seglog();
        c.arg("dump").args(&args);
        let out = run(c, MIN, "seglog dump");
        let ours = String::from_utf8_lossy(&out.stdout);
        let (k, s): (Vec<&str>, Vec<&str>) = (kafka_text.lines().collect(), ours.lines().collect());
        let barrier = |kl: &str, sl: &str| {
            kl.strip_suffix(" controlType: UNKNOWN(7)")
                .is_some_and(|prefix| sl.starts_with(&format!("{prefix} MirrorPidReset {{")))
        };
        let first = k
            .iter()
            .zip(&s)
            .position(|(a, b)| a != b && !barrier(a, b))
            .or((k.len() != s.len()).then_some(k.len().min(s.len())));
        if let Some(first) = first {
            panic!(
                "seglog dump differs from DumpLogSegments for {name} at line {} ({} vs {} lines):\n kafka:  {}\n seglog: {}\n(stderr: {})",
                first + 1,
                k.len(),
                s.len(),
                k.get(first).unwrap_or(&"<end>"),
                s.get(first).unwrap_or(&"<end>"),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        barriers += k.iter().zip(&s).filter(|(a, b)| a != b).count();
    }
    barriers
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The harness's JSON for a record (see `Harness.recordJson`).
fn record_json(
    partition: i64,
    offset: i64,
    key: Option<&[u8]>,
    value: &[u8],
    headers: &[(&str, Option<&[u8]>)],
) -> Value {
    let hs: Vec<Value> = headers
        .iter()
        .map(|(k, v)| serde_json::json!([k, v.map(hex)]))
        .collect();
    serde_json::json!({
        "partition": partition, "offset": offset, "key": key.map(hex),
        "value_len": value.len(), "value_crc": crc32fast::hash(value), "headers": hs,
    })
}

/// The last (epoch, start offset) of a partition's `leader-epoch-checkpoint`.
fn last_leader_epoch(dir: &Path) -> i32 {
    let text = std::fs::read_to_string(dir.join("leader-epoch-checkpoint")).unwrap_or_default();
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .last()
        .unwrap_or(0)
}

/// Appends with seglog's library (the broker stopped): plain records, an idempotent batch, an
/// aborted and a committed transaction (markers as the coordinator writes them), a
/// MIRROR_PID_RESET barrier, then more plain records. Returns what consumers must see
/// (read_uncommitted, read_committed).
fn seglog_append(dir: &Path) -> (Records, Records) {
    use record_format::{
        end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType, Header, RecordBatchBuilder,
    };
    use recovery::{AppendOrigin, LoadOptions, LogLoader};
    let epoch = last_leader_epoch(dir);
    let (mut log, report) =
        LogLoader::load(dir, &LoadOptions::default()).expect("seglog loads the broker's partition");
    assert!(
        report.cut.is_empty(),
        "seglog cut a cleanly stopped broker partition: {report:?}"
    );
    let now = 1_790_000_000_000_i64;
    let mut all = BTreeMap::new();
    let mut committed = BTreeMap::new();
    let data = |log: &mut recovery::PartitionLog,
                pid: Option<(i64, i16, i32, bool)>,
                n: usize,
                tag: &str|
     -> Vec<(i64, Value)> {
        let mut b = RecordBatchBuilder::new(0);
        if let Some((id, ep, seq, txn)) = pid {
            b = b.producer(id, ep, seq).transactional(txn);
        }
        let mut expect = Vec::new();
        for i in 0..n {
            let key = format!("{tag}-{i}");
            let value = format!("value {tag} {i} {}", "x".repeat(i * 37));
            let key_opt = (i % 3 != 0).then_some(key.as_bytes());
            let headers = if i % 2 == 0 {
                vec![Header {
                    key: b"seglog",
                    value: Some(tag.as_bytes()),
                }]
            } else {
                vec![]
            };
            let off = b
                .append(now + i as i64, key_opt, Some(value.as_bytes()), &headers)
                .expect("append");
            let hs: Vec<(&str, Option<&[u8]>)> =
                headers.iter().map(|h| ("seglog", h.value)).collect();
            expect.push((
                off,
                key_opt.map(<[u8]>::to_vec),
                value.into_bytes(),
                hs.iter()
                    .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
                    .collect::<Vec<_>>(),
            ));
        }
        let info = log
            .append_as_leader(&b.build(), epoch, AppendOrigin::Client)
            .expect("seglog append");
        expect
            .into_iter()
            .map(|(rel, k, v, hs)| {
                let off = info.first_offset + rel;
                let hs: Vec<(&str, Option<&[u8]>)> =
                    hs.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
                (off, record_json(0, off, k.as_deref(), &v, &hs))
            })
            .collect()
    };
    let mut keep = |recs: Vec<(i64, Value)>, is_committed: bool| {
        for (o, v) in recs {
            if is_committed {
                committed.insert((0, o), v.clone());
            }
            all.insert((0, o), v);
        }
    };
    keep(data(&mut log, None, 5, "plain"), true);
    keep(
        data(&mut log, Some((900_001, 0, 0, false)), 4, "idem"),
        true,
    );
    keep(
        data(&mut log, Some((900_002, 3, 0, true)), 3, "aborted"),
        false,
    );
    let marker = |log: &mut recovery::PartitionLog, pid: i64, ep: i16, t: ControlRecordType| {
        let m = end_txn_marker_batch(0, now, epoch, pid, ep, t, 5);
        log.append_as_leader(&m, epoch, AppendOrigin::Coordinator)
            .expect("marker");
    };
    marker(&mut log, 900_002, 3, ControlRecordType::Abort);
    keep(
        data(&mut log, Some((900_003, 1, 0, true)), 3, "committed"),
        true,
    );
    marker(&mut log, 900_003, 1, ControlRecordType::Commit);
    let barrier = mirror_pid_reset_batch(0, now, epoch, "source-cluster-A");
    log.append_as_leader(&barrier, epoch, AppendOrigin::Coordinator)
        .expect("barrier");
    keep(
        data(&mut log, Some((900_001, 0, 4, false)), 2, "after-barrier"),
        true,
    );
    keep(data(&mut log, None, 3, "tail"), true);
    log.close().expect("seglog close");
    (all, committed)
}

/// A mirrored partition of a broker-created topic (the broker stopped), with a transaction of
/// producer 800001 open at the stop between committed records, stopped by seglog under
/// `policy`, then two local records. Returns what consumers must see (read_uncommitted,
/// read_committed).
fn mirror_then_stop(
    dir: &Path,
    partition: i64,
    policy: recovery::StopPolicy,
) -> (Records, Records) {
    use record_format::RecordBatchBuilder;
    use recovery::{AppendOrigin, EpochHistory, LoadOptions, LogLoader, StopPolicy};
    let epoch = last_leader_epoch(dir);
    let (mut log, _) = LogLoader::load(dir, &LoadOptions::default()).expect("load");
    log.start_mirroring("cluster-A", &EpochHistory::of(&log))
        .expect("start mirroring");
    let now = 1_790_000_000_000_i64;
    let mut all = BTreeMap::new();
    let mut committed = BTreeMap::new();
    let mut next = 0_i64;
    let mut mirror = |log: &mut recovery::PartitionLog,
                      pid: Option<(i64, bool)>,
                      values: &[&str],
                      is_committed: bool| {
        let mut b = RecordBatchBuilder::new(next).partition_leader_epoch(epoch);
        if let Some((id, txn)) = pid {
            b = b.producer(id, 0, 0).transactional(txn);
        }
        for v in values {
            b.append(now, None, Some(v.as_bytes()), &[])
                .expect("append");
        }
        log.append_as_mirror(&b.build()).expect("mirror");
        for v in values {
            let r = record_json(partition, next, None, v.as_bytes(), &[]);
            all.insert((partition, next), r.clone());
            if is_committed {
                committed.insert((partition, next), r);
            }
            next += 1;
        }
    };
    mirror(&mut log, None, &["p0", "p1"], true);
    mirror(&mut log, Some((800_001, true)), &["open0", "open1"], false);
    mirror(&mut log, Some((800_002, false)), &["c0", "c1", "c2"], true);
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    let barrier = log.stop_mirroring_with(policy).expect("stop");
    if policy == StopPolicy::TruncateToLastStable {
        // The open transaction and the committed records after it are cut.
        assert_eq!(barrier, 2);
        all.retain(|(_, o), _| *o < 2);
        committed.retain(|(_, o), _| *o < 2);
    } else {
        // Marker at 7, barrier at 8: nothing cut.
        assert_eq!(barrier, 8);
    }
    let mut b = RecordBatchBuilder::new(0);
    for v in ["local0", "local1"] {
        b.append(now, None, Some(v.as_bytes()), &[])
            .expect("append");
    }
    let leader_epoch = log.leader_epoch();
    let info = log
        .append_as_leader(&b.build(), leader_epoch, AppendOrigin::Client)
        .expect("local append");
    for (i, v) in ["local0", "local1"].iter().enumerate() {
        let o = info.first_offset + i as i64;
        let r = record_json(partition, o, None, v.as_bytes(), &[]);
        all.insert((partition, o), r.clone());
        committed.insert((partition, o), r);
    }
    log.close().expect("close");
    (all, committed)
}

/// A transaction open at a mirror stop, under each stop policy (one partition each), served by
/// a broker restarted on the log with Kafka's own consumer: `TruncateToLastStable` leaves only
/// the records before the open transaction and the local ones; `AbortOpenTransactions` keeps
/// every record, and Kafka's `read_committed` consumer hides the aborted transaction's records
/// by the ABORT marker and `.txnindex` entry seglog wrote.
#[test]
fn mirror_stop_policies_served_by_kafka() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tempdir");
    let log_dir = tmp.path().join("kafka-logs");
    let broker = Broker::start(tmp.path(), &log_dir, true);
    create_topic(&broker, "stops", 2);
    let status = broker.stop();
    assert!(
        status.success() || status.code() == Some(143),
        "broker exit {status}"
    );
    let dirs = partition_dirs(&log_dir, "stops");
    assert_eq!(dirs.len(), 2);
    let mut want_all = BTreeMap::new();
    let mut want_committed = BTreeMap::new();
    for (p, policy) in [
        (0, recovery::StopPolicy::TruncateToLastStable),
        (1, recovery::StopPolicy::AbortOpenTransactions),
    ] {
        let (a, c) = mirror_then_stop(&dirs[p], p as i64, policy);
        want_all.extend(a);
        want_committed.extend(c);
    }
    let _ = std::fs::remove_file(log_dir.join(".kafka_cleanshutdown"));
    let _ = std::fs::remove_file(log_dir.join("recovery-point-offset-checkpoint"));
    let broker = Broker::start(tmp.path(), &log_dir, false);
    assert_eq!(consume(&broker, "stops", 2, "read_uncommitted"), want_all);
    assert_eq!(
        consume(&broker, "stops", 2, "read_committed"),
        want_committed
    );
    broker.stop();
}

/// (a) A live broker's log dir after a clean stop, and a topic seglog appended to.
#[test]
fn broker_clean_stop_then_seglog_append() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tempdir");
    let log_dir = tmp.path().join("kafka-logs");
    let broker = Broker::start(tmp.path(), &log_dir, true);
    create_topic(&broker, "mixed", 8);
    create_topic(&broker, "appended", 1);
    let produced_text = broker.client("produce-mix", &["mixed"]);
    let produced_all = records(&produced_text);
    let produced_committed: BTreeMap<_, _> = json_lines(&produced_text)
        .into_iter()
        .filter(|v| v.get("aborted").is_none())
        .map(|v| {
            (
                (
                    v["partition"].as_i64().unwrap_or(-1),
                    v["offset"].as_i64().unwrap_or(-1),
                ),
                v,
            )
        })
        .collect();
    assert!(
        produced_all.len() > 2500,
        "produce-mix acked {} records",
        produced_all.len()
    );
    // The oracle of the later steps: the broker itself serves what was acked.
    assert_eq!(
        consume(&broker, "mixed", 8, "read_uncommitted"),
        produced_all
    );
    assert_eq!(
        consume(&broker, "mixed", 8, "read_committed"),
        produced_committed
    );
    let status = broker.stop();
    assert!(
        status.success() || status.code() == Some(143),
        "broker exit {status}"
    );

    // Segments rolled (segment.bytes 1 MiB) on the plain and compressed partitions.
    let mixed = partition_dirs(&log_dir, "mixed");
    assert_eq!(mixed.len(), 8);
    assert!(
        files_with(&mixed[0], &[".log"]).len() >= 2,
        "no roll in mixed-0"
    );
    assert!(
        files_with(&mixed[6], &[".txnindex"])
            .iter()
            .any(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0) > 0),
        "no aborted txn indexed"
    );

    // seglog verify: clean, and the directory is byte for byte as it was.
    let before = file_hashes(&log_dir);
    let mut c = seglog();
    c.arg("verify").arg(&log_dir);
    let out = run(c, MIN, "seglog verify");
    assert_eq!(
        out.status.code(),
        Some(0),
        "seglog verify on a cleanly stopped broker:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        file_hashes(&log_dir),
        before,
        "seglog verify changed the log dir"
    );

    // seglog dump and DumpLogSegments, every file the broker wrote.
    let files = dumpable(&log_dir);
    for internal in [
        "__cluster_metadata-0",
        "__consumer_offsets-0",
        "__transaction_state-0",
    ] {
        assert!(
            files.iter().any(|f| f.to_string_lossy().contains(internal)),
            "no {internal} file to dump"
        );
    }
    assert_eq!(assert_dumps_agree(&files), 0);

    // seglog appends to "appended-0" while the broker is stopped.
    let appended = partition_dirs(&log_dir, "appended")
        .pop()
        .expect("appended-0");
    let (want_all, want_committed) = seglog_append(&appended);
    // The broker must really recover on restart (no marker, no recovery points), and cut nothing.
    let _ = std::fs::remove_file(log_dir.join(".kafka_cleanshutdown"));
    let _ = std::fs::remove_file(log_dir.join("recovery-point-offset-checkpoint"));
    let logs_before: BTreeMap<_, _> = file_hashes(&log_dir)
        .into_iter()
        .filter(|(k, _)| {
            k.ends_with(".log") && (k.starts_with("mixed-") || k.starts_with("appended-"))
        })
        .collect();
    let broker = Broker::start(tmp.path(), &log_dir, false);
    assert_eq!(
        consume(&broker, "appended", 1, "read_uncommitted"),
        want_all,
        "read_uncommitted of seglog's appends"
    );
    assert_eq!(
        consume(&broker, "appended", 1, "read_committed"),
        want_committed,
        "read_committed of seglog's appends"
    );
    assert_eq!(
        consume(&broker, "mixed", 8, "read_committed"),
        produced_committed
    );
    let console = broker.console_text();
    broker.stop();
    let logs_after: BTreeMap<_, _> = file_hashes(&log_dir)
        .into_iter()
        .filter(|(k, _)| logs_before.contains_key(k))
        .collect();
    assert_eq!(
        logs_after, logs_before,
        "the broker's recovery changed a .log seglog wrote or kept\n{console}"
    );
    // (c) DumpLogSegments prints the barrier, and seglog dump prints the same text.
    let seg = files_with(&appended, &[".log"]);
    let text = harness(
        &[
            "dump",
            "--deep-iteration",
            "--files",
            &seg[0].display().to_string(),
        ],
        MIN,
    );
    assert!(text.contains("controlType: UNKNOWN(7)"), "{text}");
    let barrier_lines = assert_dumps_agree(&files_with(
        &appended,
        &[".log", ".index", ".timeindex", ".txnindex", ".snapshot"],
    ));
    assert_eq!(barrier_lines, 1, "one barrier record in appended-0");
    // Loaded without error: the broker logged nothing at ERROR about the partition.
    let errors: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("appended"))
        .collect();
    assert!(
        errors.is_empty(),
        "broker errors about appended-0:\n{}",
        errors.join("\n")
    );
}

/// Kafka's view of a recovered partition: the harness `inspect` JSON, minus its path.
fn inspect(dirs: &[PathBuf]) -> Vec<Value> {
    if dirs.is_empty() {
        return Vec::new();
    }
    let mut args = vec!["inspect".to_string()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    json_lines(&harness(&a, MIN * 5))
        .into_iter()
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("dir");
                o.remove("loaded");
            }
            v
        })
        .collect()
}

/// `.log`, `.index`, `.timeindex`, `.txnindex` of a partition dir (not quarantine), name → bytes hash.
fn kept_files(dir: &Path) -> BTreeMap<String, (u32, u64)> {
    files_with(dir, &[".log", ".index", ".timeindex", ".txnindex"])
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).expect("read");
            (
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                (crc32c::crc32c(&b), b.len() as u64),
            )
        })
        .collect()
}

/// (a) kill -9 during produce: the broker's own recovery and `seglog recover` agree.
#[test]
fn broker_kill9_recovery_agrees() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tempdir");
    let log_dir = tmp.path().join("kafka-logs");
    let broker = Broker::start(tmp.path(), &log_dir, true);
    create_topic(&broker, "loop", 4);
    let mut producer = kafka::java()
        .args([
            "seglog.kafka.Harness",
            "produce-loop",
            &broker.bootstrap,
            "loop",
            "4",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("producer");
    // Let it produce (and roll segments) for a while, then kill the broker mid-stream.
    let stdout = producer.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let start = std::time::Instant::now();
    let mut acked: Vec<(i64, i64)> = Vec::new();
    while acked.len() < 40_000 && start.elapsed() < Duration::from_secs(40) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Ok(v) = serde_json::from_str::<Value>(&l) {
                acked.push((
                    v["partition"].as_i64().unwrap_or(-1),
                    v["offset"].as_i64().unwrap_or(-1),
                ));
            }
        }
    }
    broker.kill9();
    let _ = producer.kill();
    let _ = producer.wait();
    while let Ok(l) = rx.try_recv() {
        if let Ok(v) = serde_json::from_str::<Value>(&l) {
            acked.push((
                v["partition"].as_i64().unwrap_or(-1),
                v["offset"].as_i64().unwrap_or(-1),
            ));
        }
    }
    assert!(
        acked.len() > 1000,
        "only {} records acked before the kill",
        acked.len()
    );

    // seglog recovers a copy; the broker recovers the original.
    let copy = tmp.path().join("seglog-logs");
    copy_tree(&log_dir, &copy);
    eprintln!("kill -9 after {} acked records", acked.len());
    let mut c = seglog();
    c.arg("recover").arg(&copy);
    let out = run_ok(c, MIN * 3, "seglog recover");
    eprintln!("seglog recover: {}", out.lines().last().unwrap_or(""));
    let broker = Broker::start(tmp.path(), &log_dir, false);
    let served_uncommitted = consume(&broker, "loop", 4, "read_uncommitted");
    let served_committed = consume(&broker, "loop", 4, "read_committed");
    broker.stop();
    for (p, o) in &acked {
        assert!(
            served_uncommitted.contains_key(&(*p, *o)),
            "acked record loop-{p}@{o} lost by the broker's recovery"
        );
    }

    let (kd, sd) = (
        partition_dirs(&log_dir, "loop"),
        partition_dirs(&copy, "loop"),
    );
    assert_eq!(kd.len(), 4);
    for (k, s) in kd.iter().zip(&sd) {
        assert_eq!(
            kept_files(s),
            kept_files(k),
            "kept files of {}",
            k.display()
        );
    }
    let (ki, si) = (inspect(&kd), inspect(&sd));
    for (k, s) in ki.iter().zip(&si) {
        assert_eq!(s["segments"], k["segments"]);
        assert_eq!(s["producers"], k["producers"], "producer snapshot entries");
        assert_eq!(s["aborted_txns"], k["aborted_txns"]);
        assert_eq!(
            s["snapshot_offset"], k["snapshot_offset"],
            "snapshot at the log end offset"
        );
        // The restarted broker starts a new leader epoch; seglog's epochs are its prefix.
        let (ke, se) = (
            k["leader_epochs"].as_array().cloned().unwrap_or_default(),
            s["leader_epochs"].as_array().cloned().unwrap_or_default(),
        );
        assert!(
            ke.starts_with(&se) && !se.is_empty(),
            "leader epochs: kafka {ke:?} seglog {se:?}"
        );
    }

    // A broker on seglog's recovered copy (made to recover it all again) cuts nothing and serves
    // the same records.
    let _ = std::fs::remove_file(copy.join(".kafka_cleanshutdown"));
    let _ = std::fs::remove_file(copy.join("recovery-point-offset-checkpoint"));
    let logs_before: BTreeMap<_, _> = file_hashes(&copy)
        .into_iter()
        .filter(|(k, _)| k.starts_with("loop-") && k.ends_with(".log") && !k.contains("quarantine"))
        .collect();
    let broker = Broker::start(tmp.path(), &copy, false);
    assert_eq!(
        consume(&broker, "loop", 4, "read_uncommitted"),
        served_uncommitted
    );
    assert_eq!(
        consume(&broker, "loop", 4, "read_committed"),
        served_committed
    );
    broker.stop();
    let logs_after: BTreeMap<_, _> = file_hashes(&copy)
        .into_iter()
        .filter(|(k, _)| logs_before.contains_key(k))
        .collect();
    assert_eq!(
        logs_after, logs_before,
        "the broker's recovery changed what seglog recovered"
    );
}

/// One seeded damage of a partition directory; returns a description.
fn damage(dir: &Path, rng: &mut Rng, recovery_points: &mut BTreeMap<String, i64>) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let logs = files_with(dir, &[".log"]);
    let pick = |rng: &mut Rng, v: &[PathBuf]| -> Option<PathBuf> {
        (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
    };
    let kind = rng.below(10);
    let mut desc = String::new();
    match kind {
        0 => {
            // Torn tail of the last segment.
            let f = logs.last().expect("a segment").clone();
            let len = std::fs::metadata(&f).expect("len").len();
            let at = rng.below(len + 1);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&f)
                .expect("open")
                .set_len(at)
                .expect("truncate");
            desc = format!("torn tail {} at {at}", f.display());
        }
        1 | 2 => {
            // Bit flip anywhere in a segment.
            let f = pick(rng, &logs).expect("a segment");
            let mut b = std::fs::read(&f).expect("read");
            if !b.is_empty() {
                let at = rng.below(b.len() as u64) as usize;
                b[at] ^= 1 << rng.below(8);
                std::fs::write(&f, &b).expect("write");
                desc = format!("bit flip {} at {at}", f.display());
            }
        }
        3 => {
            // Truncated index or time index.
            let idx = files_with(dir, &[".index", ".timeindex", ".txnindex"]);
            if let Some(f) = pick(rng, &idx) {
                let len = std::fs::metadata(&f).expect("len").len();
                let at = rng.below(len + 1);
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&f)
                    .expect("open")
                    .set_len(at)
                    .expect("truncate");
                desc = format!("truncated {} at {at}", f.display());
            }
        }
        4 => {
            // Zero-filled index range.
            let idx = files_with(dir, &[".index", ".timeindex", ".txnindex"]);
            if let Some(f) = pick(rng, &idx) {
                let mut b = std::fs::read(&f).expect("read");
                if !b.is_empty() {
                    let from = rng.below(b.len() as u64) as usize;
                    b[from..].iter_mut().for_each(|x| *x = 0);
                    std::fs::write(&f, &b).expect("write");
                    desc = format!("zeroed {} from {from}", f.display());
                }
            }
        }
        5 => {
            // Zero-filled tail (as after a crash with preallocated or unwritten pages).
            let f = logs.last().expect("a segment").clone();
            let mut b = std::fs::read(&f).expect("read");
            let len = b.len() as u64;
            let from = rng.below(len + 1) as usize;
            b[from..].iter_mut().for_each(|x| *x = 0);
            b.extend(std::iter::repeat_n(0u8, rng.below(4096) as usize));
            std::fs::write(&f, &b).expect("write");
            desc = format!("zero tail {} from {from}", f.display());
        }
        6 => {
            // Deleted snapshots.
            for s in files_with(dir, &[".snapshot"]) {
                if rng.below(2) == 0 {
                    std::fs::remove_file(&s).expect("rm");
                    desc.push_str(&format!("deleted {} ", s.display()));
                }
            }
        }
        7 => {
            // Corrupt snapshot.
            if let Some(f) = pick(rng, &files_with(dir, &[".snapshot"])) {
                let mut b = std::fs::read(&f).expect("read");
                if !b.is_empty() {
                    let at = rng.below(b.len() as u64) as usize;
                    b[at] ^= 0x5a;
                    std::fs::write(&f, &b).expect("write");
                    desc = format!("corrupt snapshot {} at {at}", f.display());
                }
            }
        }
        _ => {
            // Stale recovery point: recovery starts at an earlier segment (or mid-segment).
            let bases: Vec<i64> = logs
                .iter()
                .filter_map(|p| p.file_stem()?.to_str()?.parse().ok())
                .collect();
            let rp = bases[rng.below(bases.len() as u64) as usize] + rng.below(3) as i64;
            recovery_points.insert(name.clone(), rp);
            desc = format!("recovery point {rp}");
        }
    }
    desc
}

fn write_checkpoint(path: &Path, entries: &BTreeMap<String, i64>) {
    let mut text = format!("0\n{}\n", entries.len());
    for (dir, off) in entries {
        let (t, p) = dir.rsplit_once('-').expect("topic-partition");
        text.push_str(&format!("{t} {p} {off}\n"));
    }
    std::fs::write(path, text).expect("write checkpoint");
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (b) Differential recovery: Kafka's `UnifiedLog`/`LogLoader` and `seglog recover` on the same
/// seeded damage. `SEGLOG_KAFKA_DIFF_CASES` (default 500), `SEGLOG_KAFKA_DIFF_SEED` (default 1).
#[test]
fn differential_recovery() {
    let _g = heavy();
    let cases = env_u64("SEGLOG_KAFKA_DIFF_CASES", 500);
    let seed = env_u64("SEGLOG_KAFKA_DIFF_SEED", 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    // Base partitions written by Kafka's own append path (UnifiedLog.appendAsLeader).
    let bases: Vec<PathBuf> = (0..6u64)
        .map(|i| {
            let d = tmp.path().join("base").join(format!("base-{i}"));
            harness(
                &[
                    "write",
                    &d.display().to_string(),
                    &(seed * 100 + i).to_string(),
                    "160",
                    "12288",
                ],
                MIN,
            );
            d
        })
        .collect();
    let (kdir, sdir, fdir) = (
        tmp.path().join("kafka"),
        tmp.path().join("seglog"),
        tmp.path().join("kafka-full"),
    );
    std::fs::create_dir_all(&kdir).expect("mkdir");
    std::fs::create_dir_all(&fdir).expect("mkdir");
    std::fs::create_dir_all(&sdir).expect("mkdir");
    let mut rng = Rng::new(seed);
    let mut rps = BTreeMap::new();
    let mut descs = BTreeMap::new();
    for case in 0..cases {
        let base = &bases[rng.below(bases.len() as u64) as usize];
        let name = format!("diff-{case}");
        let staged = tmp.path().join("stage").join(&name);
        copy_tree(base, &staged);
        let mut d = Vec::new();
        for _ in 0..1 + rng.below(2) {
            d.push(damage(&staged, &mut rng, &mut rps));
        }
        copy_tree(&staged, &kdir.join(&name));
        copy_tree(&staged, &fdir.join(&name));
        copy_tree(&staged, &sdir.join(&name));
        descs.insert(name, d.join("; "));
    }
    for d in [&kdir, &sdir] {
        write_checkpoint(&d.join("recovery-point-offset-checkpoint"), &rps);
    }
    let names: Vec<String> = descs.keys().cloned().collect();
    let kdirs: Vec<PathBuf> = names.iter().map(|n| kdir.join(n)).collect();
    let sdirs: Vec<PathBuf> = names.iter().map(|n| sdir.join(n)).collect();
    let fdirs: Vec<PathBuf> = names.iter().map(|n| fdir.join(n)).collect();

    // Kafka: one JVM, every partition as LogManager.loadLog would (parent's checkpoints).
    let mut args = vec!["recover".to_string(), "--threads".into(), "2".into()];
    args.extend(kdirs.iter().map(|d| d.display().to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let t0 = std::time::Instant::now();
    let kafka_out = json_lines(&harness(&a, MIN * 10));
    let kafka_secs = t0.elapsed().as_secs_f64();
    // Kafka again, every segment recovered (for indexes it does not check below the recovery point).
    let mut args = vec![
        "recover".to_string(),
        "--full".into(),
        "--threads".into(),
        "2".into(),
    ];
    args.extend(fdirs.iter().map(|d| d.display().to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    harness(&a, MIN * 10);
    // seglog: one process per partition (with the parent's checkpoints, as Kafka's loadLog), so a
    // partition the loader refuses does not stop the others (on a log dir, Kafka and seglog both
    // refuse the whole directory then).
    let t0 = std::time::Instant::now();
    let seglog_status: Vec<(Option<i32>, String)> = sdirs
        .iter()
        .map(|d| {
            let mut c = seglog();
            c.arg("recover").arg(d);
            let out = run(c, MIN, "seglog recover");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect();
    let seglog_secs = t0.elapsed().as_secs_f64();
    let seglog_inspect = inspect(&sdirs);

    let mut failures = Vec::new();
    let mut kafka_refused = 0;
    let mut rebuilt_indexes = 0;
    let mut offsets_backwards = 0;
    let mut kafka_kept_after_cut = 0;
    for (i, name) in names.iter().enumerate() {
        let k = &kafka_out[i];
        let (code, stderr) = &seglog_status[i];
        if let Some(e) = k.get("error") {
            // Kafka refused the partition: seglog must refuse it too (exit 1), not claim a
            // recovery.
            eprintln!(
                "{name} [{}]: Kafka refused: {e}; seglog: {stderr}",
                descs[name]
            );
            kafka_refused += 1;
            if *code != Some(1) {
                failures.push(format!(
                    "{name} [{}]: Kafka refused ({e}), seglog exit {code:?}",
                    descs[name]
                ));
            }
            continue;
        }
        // A damaged base offset (outside the CRC) that makes offsets go backwards: Kafka's
        // recovery hits InvalidOffsetException in the index, empties that segment and drops the
        // later ones; seglog refuses the partition (exit 1, nothing changed). Documented in
        // docs/kafka-interop.md.
        let kafka_emptied = k["segments"]
            .as_array()
            .and_then(|v| v.last())
            .is_some_and(|l| l["bytes"] == 0);
        if *code == Some(1)
            && stderr.contains("which is not larger than the last offset")
            && kafka_emptied
        {
            offsets_backwards += 1;
            continue;
        }
        if *code != Some(0) {
            failures.push(format!(
                "{name} [{}]: Kafka recovered it, seglog exit {code:?}: {stderr}",
                descs[name]
            ));
            continue;
        }
        let mut k = k.clone();
        // Kafka's leader epochs as loaded (in memory): it flushes the truncated checkpoint file
        // asynchronously, seglog at once.
        k["leader_epochs"] = k["loaded"]["leader_epochs"].clone();
        let s = &seglog_inspect[i];
        let mut diffs = Vec::new();
        // Kafka recovers a segment whose index fails the load-time sanity check (a damaged
        // .txnindex) on its own, in loadSegmentFiles, and ignores what that cut: the later
        // segments stay (the log has an offset gap). seglog cuts the log there, as for any cut,
        // and quarantines the later segments. Then the segments seglog kept must be Kafka's
        // first ones, byte for byte, and the others must be in seglog's quarantine.
        let (ks, ss) = (
            k["segments"].as_array().cloned().unwrap_or_default(),
            s["segments"].as_array().cloned().unwrap_or_default(),
        );
        if ks.len() > ss.len() && ks.starts_with(&ss) {
            let quarantined: Vec<String> = std::fs::read_dir(sdirs[i].join("quarantine"))
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
                .map(|f| f.file_name().to_string_lossy().into_owned())
                .collect();
            let all_there = ks[ss.len()..].iter().all(|seg| {
                let base = seg["base"].as_i64().unwrap_or(-1);
                quarantined.contains(&format!("{base:020}.log"))
            });
            let (kf, sf) = (kept_files(&kdirs[i]), kept_files(&sdirs[i]));
            if all_there && sf.iter().all(|(n, h)| kf.get(n) == Some(h)) {
                kafka_kept_after_cut += 1;
                continue;
            }
        }
        for field in [
            "segments",
            "producers",
            "aborted_txns",
            "leader_epochs",
            "snapshot_offset",
            "corrupt_snapshots",
        ] {
            if k[field] != s[field] {
                diffs.push(format!("{field}: kafka {} seglog {}", k[field], s[field]));
            }
        }
        let (kf, sf, ff) = (
            kept_files(&kdirs[i]),
            kept_files(&sdirs[i]),
            kept_files(&fdirs[i]),
        );
        let mut names: Vec<String> = Vec::new();
        for n in kf.keys().chain(sf.keys()) {
            if kf.get(n) == sf.get(n) || names.contains(n) {
                continue;
            }
            // Kafka checks index files only in the segments it recovers (they are opened lazily);
            // seglog sanity-checks every index and rebuilds a damaged one by recovering its
            // segment. Such an index must then be the one Kafka builds when it recovers the
            // segment (the `--full` run).
            let is_index = n.ends_with(".index") || n.ends_with(".timeindex");
            if is_index && sf.contains_key(n) && sf.get(n) == ff.get(n) {
                rebuilt_indexes += 1;
                continue;
            }
            names.push(n.clone());
        }
        if !names.is_empty() {
            diffs.push(format!("files differ: {names:?}"));
        }
        if !diffs.is_empty() {
            failures.push(format!("{name} [{}]: {}", descs[name], diffs.join("; ")));
        }
    }
    eprintln!(
        "differential recovery: {cases} cases (seed {seed}), {} agreed ({rebuilt_indexes} index files rebuilt by seglog where Kafka kept them), {kafka_refused} refused by both, {offsets_backwards} with offsets going backwards refused by seglog and emptied by Kafka, {kafka_kept_after_cut} cut in a segment with a damaged .txnindex where Kafka kept the later segments; kafka {kafka_secs:.1} s, seglog {seglog_secs:.1} s",
        cases as usize - failures.len() - kafka_refused - offsets_backwards - kafka_kept_after_cut
    );
    if !failures.is_empty() && std::env::var_os("SEGLOG_KAFKA_DIFF_KEEP").is_some() {
        eprintln!("kept for inspection: {}", tmp.keep().display());
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ (seed {seed}); first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// seglog dump decodes keys and values as DumpLogSegments' `StringDecoder` (the JDK's UTF-8
/// decoder, whose U+FFFD rules differ from Rust's): random and UTF-8-shaped byte strings.
#[test]
fn java_utf8_decoding_matches_the_jdk() {
    let _g = heavy();
    let mut rng = Rng::new(env_u64("SEGLOG_KAFKA_DIFF_SEED", 1));
    let interesting = [
        0x00u8, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1,
        0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xf7, 0xf8, 0xfe, 0xff,
    ];
    let inputs: Vec<Vec<u8>> = (0..20_000)
        .map(|i| {
            let len = rng.below(if i % 2 == 0 { 6 } else { 24 }) as usize;
            (0..len)
                .map(|_| {
                    if rng.below(3) == 0 {
                        rng.below(256) as u8
                    } else {
                        interesting[rng.below(interesting.len() as u64) as usize]
                    }
                })
                .collect()
        })
        .collect();
    let text: String = inputs.iter().map(|b| format!("{}\n", hex(b))).collect();
    let mut c = kafka::java();
    c.args(["seglog.kafka.Harness", "utf8"]);
    let input = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(input.path(), text).expect("write");
    c.stdin(std::fs::File::open(input.path()).expect("open"));
    let out = run_ok(c, MIN, "harness utf8");
    let java: Vec<&str> = out.lines().collect();
    assert_eq!(java.len(), inputs.len());
    let mut wrong = Vec::new();
    for (b, j) in inputs.iter().zip(&java) {
        let ours = hex(seglog::cli::dump::java_utf8::java_utf8_lossy(b).as_bytes());
        if ours != *j {
            wrong.push(format!("{}: jdk {j} seglog {ours}", hex(b)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} differ:\n{}",
        wrong.len(),
        inputs.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
}

/// Differential fuzzing of the batch and record parsers against Kafka's
/// (`batch_verdicts.rs`): ≥ 100,000 mutants of the fixtures' and broker-written batches (7 in
/// 8 with the CRC recomputed), each judged by Kafka (`ensureValid`, the record iterator; heap
/// capped at 64 MiB) and by seglog; every pair of verdicts must be one the mapping table allows,
/// with the same records. `SEGLOG_DIFF_INPUTS` and `SEGLOG_DIFF_SEED` change the run.
#[test]
fn batch_verdicts_agree_with_kafka_on_mutated_batches() {
    let n = env_u64("SEGLOG_DIFF_INPUTS", 100_000) as usize;
    let mut rng = Rng::new(env_u64("SEGLOG_DIFF_SEED", 1));
    let seeds = batch_verdicts::seed_batches();
    assert!(seeds.len() > 200, "{} seed batches", seeds.len());
    let mut inputs = seeds.clone();
    let mut fixed = vec![false; seeds.len()];
    while inputs.len() < n {
        let seed = &seeds[rng.below(seeds.len() as u64) as usize];
        let (m, f) = batch_verdicts::mutate(seed, &mut rng);
        inputs.push(m);
        fixed.push(f);
    }
    let scratch = tempfile::tempdir().unwrap();
    let s = batch_verdicts::compare(&inputs, &fixed, 64, scratch.path());
    eprintln!(
        "{} inputs ({} seeds), CRC recomputed on {}, {} past Kafka's CRC check ({:.1}%)",
        s.inputs,
        seeds.len(),
        s.crc_recomputed,
        s.past_crc,
        100.0 * s.past_crc as f64 / s.inputs as f64
    );
    for ((k, o), count) in &s.pairs {
        eprintln!("  Kafka {k:<40} seglog {o:<40} {count}");
    }
    for (why, count) in &s.expected {
        eprintln!("  expected difference: {why}: {count}");
    }
    let mut shown = std::collections::BTreeSet::new();
    for (i, k, o) in &s.disagreements {
        if shown.insert((k.stage, k.class.clone(), o.stage, o.class.clone())) {
            eprintln!(
                "DISAGREE #{i}: Kafka {k:?} seglog {o:?}\n  {}",
                hex(&inputs[*i])
            );
        }
    }
    assert!(
        s.disagreements.is_empty(),
        "{} disagreements with Kafka",
        s.disagreements.len()
    );
}

/// Every Kafka exception class of the mapping table (docs/testing.md), and the memory classes,
/// each produced by a crafted input: Kafka throws exactly that class and seglog returns exactly
/// the error kind the table maps it to.
#[test]
fn each_kafka_exception_class_maps_to_its_seglog_kind() {
    use seglog::record_format::{CompressionType, RecordBatchBuilder};
    let batch = |codec: CompressionType, values: &[Vec<u8>]| {
        let mut b = RecordBatchBuilder::new(0).compression(codec);
        for (i, v) in values.iter().enumerate() {
            b.append(1_700_000_000_000 + i as i64, Some(b"k"), Some(v), &[])
                .unwrap();
        }
        b.build()
    };
    let fix = |mut b: Vec<u8>| {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    };
    let plain = batch(CompressionType::None, &[b"one".to_vec(), b"two".to_vec()]);
    let gzip = batch(
        CompressionType::Gzip,
        &[vec![b'x'; 300], vec![b'y'; 300], vec![b'z'; 300]],
    );
    // CRC not fixed: the stored CRC no longer matches.
    let mut bad_crc = plain.clone();
    *bad_crc.last_mut().unwrap() ^= 1;
    // A length field below Kafka's minimum (14).
    let mut short = plain.clone();
    short[8..12].copy_from_slice(&13i32.to_be_bytes());
    // A legacy (magic 1) entry whose CRC-32 does not match.
    let mut legacy = plain.clone();
    legacy[16] = 1;
    // One record more declared than present.
    let mut count = plain.clone();
    count[57..61].copy_from_slice(&3i32.to_be_bytes());
    // The first record's key length (after length, attributes, timestamp and offset deltas)
    // overruns its body: Kafka's buffer underflow, rethrown as InvalidRecordException.
    let mut underflow = plain.clone();
    underflow[65] = 0x7e;
    // Compression id 5.
    let mut codec = plain.clone();
    codec[22] = (codec[22] & !7) | 5;
    // A byte of the gzip stream flipped.
    let mut bad_gzip = gzip.clone();
    let mid = 61 + (bad_gzip.len() - 61) / 2;
    bad_gzip[mid] ^= 0xff;
    // A snappy batch with one byte of its compressed data flipped, at every position: some of
    // them make snappy-java throw its own SnappyError.
    let snappy = batch(
        CompressionType::Snappy,
        &[
            b"line 1: lorem ipsum".to_vec(),
            b"line 2: dolor sit amet".to_vec(),
        ],
    );
    let snappy_mutants: Vec<Vec<u8>> = (61..snappy.len())
        .map(|i| {
            let mut m = snappy.clone();
            m[i] ^= 0xff;
            fix(m)
        })
        .collect();
    // 96 MiB of zeros in one record: beyond seglog's 1 MiB limit and Kafka's 64 MiB heap.
    let bomb = batch(CompressionType::Gzip, &[vec![0u8; 96 << 20]]);
    // 2 MiB: beyond seglog's limit, within Kafka's heap.
    let big = batch(CompressionType::Gzip, &[vec![0u8; 2 << 20]]);
    /// Name, input, Kafka's (stage, class), seglog's (stage, kind).
    type Case = (
        &'static str,
        Vec<u8>,
        (&'static str, &'static str),
        (&'static str, &'static str),
    );
    let cases: Vec<Case> = vec![
        (
            "CRC",
            bad_crc,
            ("batch", "CorruptRecordException"),
            ("batch", "CrcMismatch"),
        ),
        (
            "length",
            short,
            ("batch", "CorruptRecordException"),
            ("batch", "BadLength"),
        ),
        (
            "legacy",
            legacy,
            ("legacy", "CorruptRecordException"),
            ("legacy", "CrcMismatch"),
        ),
        (
            "count",
            fix(count),
            ("records", "InvalidRecordException"),
            ("records", "RecordCountMismatch"),
        ),
        (
            "underflow",
            fix(underflow),
            ("records", "InvalidRecordException"),
            ("records", "LengthOutOfRange"),
        ),
        (
            "codec",
            fix(codec),
            ("records", "IllegalArgumentException"),
            ("records", "UnknownCompression"),
        ),
        (
            "gzip",
            fix(bad_gzip),
            ("records", "KafkaException"),
            ("records", "Decompression"),
        ),
        (
            "bomb",
            bomb,
            ("records", "OutOfMemoryError"),
            ("records", "DecompressedTooLarge"),
        ),
        (
            "limit",
            big,
            ("ok", "-"),
            ("records", "DecompressedTooLarge"),
        ),
    ];
    let mut inputs: Vec<Vec<u8>> = cases.iter().map(|c| c.1.clone()).collect();
    inputs.extend(snappy_mutants.iter().cloned());
    let scratch = tempfile::tempdir().unwrap();
    let kafka = batch_verdicts::kafka_verdicts(&inputs, 64, scratch.path());
    let mut snappy_errors = 0;
    for (m, k) in snappy_mutants.iter().zip(&kafka[cases.len()..]) {
        if k.class == "SnappyError" {
            snappy_errors += 1;
            let o = batch_verdicts::seglog_verdict(m);
            assert_eq!((o.stage, o.class.as_str()), ("records", "Decompression"));
            assert!(
                batch_verdicts::agree(k, &o)
                    || batch_verdicts::expected_difference(m, k, &o).is_some()
            );
        }
    }
    assert!(
        snappy_errors > 0,
        "no flip made snappy-java throw SnappyError"
    );
    for ((name, input, want_kafka, want_seglog), k) in cases.iter().zip(&kafka) {
        let o = batch_verdicts::seglog_verdict(input);
        assert_eq!((k.stage, k.class.as_str()), *want_kafka, "{name}: Kafka");
        assert_eq!((o.stage, o.class.as_str()), *want_seglog, "{name}: seglog");
        assert!(
            batch_verdicts::agree(k, &o)
                || batch_verdicts::expected_difference(input, k, &o).is_some(),
            "{name}: {k:?} vs {o:?} is in no row of the table"
        );
    }
}
