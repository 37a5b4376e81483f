//! A cleaning pass crashed at every I/O point, through the storage seam (`testkit::crash_test_fn`
//! on `SimulatedFs`), under today's crash model and the weak one (any subset of unsynced 4 KiB
//! blocks, sizes without data, names before data, directory entries durable only after the
//! directory's fsync).
//!
//! The workload writes a keyed log over several segments (plain, idempotent and transactional
//! producers, tombstones, an aborted transaction, a `MIRROR_PID_RESET` barrier), closes it, and
//! then runs `Log::compact`. Whatever the crash left, the log opened again must hold:
//! * the newest value of every key, as a `read_committed` consumer sees it, at its offset;
//! * the producer state of the original log (the cleaner keeps each producer's last batch);
//! * the log end offset;
//! * at every offset it holds, the record the original log held there (no removed record
//!   comes back in another's place), and every record the uncrashed compaction kept.
//!
//! The expected values come from the same log written on real files without any crash.

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;

use seglog::record_format::{
    end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType, RecordBatchBuilder,
};
use seglog::recovery::ConsumedRecord;
use seglog::segment_store::Storage;
use seglog::{CleanerConfig, Clock, Config, IsolationLevel, Log};
use testkit::{crash_test_fn, CrashEnv, CrashModel, FnOptions, Recovered, WeakModel};

const T0: i64 = testkit::TIMESTAMP;

fn config(storage: Option<Arc<dyn Storage>>, clock: Arc<dyn Clock>) -> Config {
    let mut config = Config::default()
        .with_clock(clock)
        .with_segment_bytes(700)
        .with_recovery_threads(1)
        .with_cleaner(CleanerConfig::default());
    if let Some(storage) = storage {
        config = config.with_storage(storage);
    }
    // Indexes of 4 KiB: on the simulated storage they are held in memory and copied at each
    // simulated state (the cleaner's groups keep segment.index.bytes of the config below).
    config.log.log.max_index_size = 4096;
    config = config.without_background_tasks();
    config
}

/// The batches of the log: keys `k0`..`k4` rewritten many times, producers 0 (none), 101-102
/// (idempotent), 103 (transactional, one commit and one abort), a barrier in the middle.
fn batches() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    let mut seq = [0i32; 4];
    let push = |b: Vec<u8>, n: i64, offset: &mut i64, out: &mut Vec<Vec<u8>>| {
        out.push(b);
        *offset += n;
    };
    for i in 0..24i64 {
        let ts = T0 + i;
        if i == 12 {
            let b = mirror_pid_reset_batch(offset, ts, 0, "source-cluster");
            push(b, 1, &mut offset, &mut out);
            seq = [0; 4];
            continue;
        }
        if i == 8 || i == 17 {
            let t = if i == 8 {
                ControlRecordType::Commit
            } else {
                ControlRecordType::Abort
            };
            let b = end_txn_marker_batch(offset, ts, 0, 103, 0, t, 5);
            push(b, 1, &mut offset, &mut out);
            continue;
        }
        let p = (i % 4) as usize;
        let mut b = RecordBatchBuilder::new(offset);
        if p > 0 {
            b = b.producer(100 + p as i64, 0, seq[p]).transactional(p == 3);
            seq[p] += 2;
        }
        for r in 0..2 {
            let key = format!("k{}", (i + r) % 5);
            let value = format!("v{offset}-{r}");
            let tombstone = i % 7 == 6 && r == 0;
            let v = (!tombstone).then_some(value.as_bytes());
            b.append(ts, Some(key.as_bytes()), v, &[]).expect("append");
        }
        push(b.build(), 2, &mut offset, &mut out);
    }
    out
}

/// Every record a consumer sees from the log start (fetch after fetch).
fn consume_all(
    log: &Log,
    isolation: IsolationLevel,
) -> Result<Vec<ConsumedRecord>, Box<dyn Error>> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let fetch = log.read(offset, 1 << 24, isolation)?;
        if fetch.records.is_empty() {
            break;
        }
        out.extend(seglog::recovery::consume(&fetch)?);
        offset = fetch.next_fetch_offset;
    }
    Ok(out)
}

type Record = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What the log holds: offset → (key, value), every record (aborted ones included).
fn records(log: &Log) -> Result<BTreeMap<i64, Record>, Box<dyn Error>> {
    Ok(consume_all(log, IsolationLevel::ReadUncommitted)?
        .into_iter()
        .map(|r| (r.offset, (r.key, r.value)))
        .collect())
}

/// Each key's newest record as a `read_committed` consumer sees it: key → (offset, value).
type Newest = BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)>;

fn newest(log: &Log) -> Result<Newest, Box<dyn Error>> {
    let mut out = BTreeMap::new();
    for r in consume_all(log, IsolationLevel::ReadCommitted)? {
        if let Some(k) = r.key {
            out.insert(k, (r.offset, r.value));
        }
    }
    Ok(out)
}

type Producers = BTreeMap<i64, (i16, i32, i64, i32, Option<i64>)>;

fn producers(log: &Log) -> Producers {
    log.producer_state()
        .expect("an open log")
        .active_producers()
        .into_iter()
        .map(|(pid, e)| {
            (
                pid,
                (
                    e.producer_epoch(),
                    e.last_seq(),
                    e.last_data_offset(),
                    e.coordinator_epoch(),
                    e.current_txn_first_offset(),
                ),
            )
        })
        .collect()
}

fn write(log: &mut Log) -> Result<(), Box<dyn Error>> {
    for b in batches() {
        log.append_as_follower(&b)?;
    }
    log.roll()?;
    let end = log.log_end_offset();
    log.set_high_watermark(end)?;
    Ok(())
}

/// What the log must hold after any crash: computed on real files, no crash.
struct Expected {
    original: BTreeMap<i64, Record>,
    compacted: BTreeMap<i64, Record>,
    newest: Newest,
    producers: Producers,
    end: i64,
}

fn expected() -> Expected {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("logs").join("table-0");
    let clock = Arc::new(testkit::ManualClock::new(T0));
    let mut log = Log::open(&dir, config(None, clock.clone())).expect("open");
    write(&mut log).expect("write");
    let original = records(&log).expect("records");
    let newest = newest(&log).expect("newest");
    let producers = producers(&log);
    let end = log.log_end_offset();
    let report = log.compact().expect("compact");
    assert!(
        report.groups.len() >= 2,
        "the pass should rewrite several groups: {report:?}"
    );
    let compacted = records(&log).expect("records");
    assert!(
        compacted.len() < original.len(),
        "the pass removed nothing ({} records)",
        original.len()
    );
    log.close().expect("close");
    Expected {
        original,
        compacted,
        newest,
        producers,
        end,
    }
}

fn workload(env: &CrashEnv) -> Result<(), Box<dyn Error>> {
    let dir = env.root().join("logs").join("table-0");
    let mut log = Log::open(&dir, config(Some(env.storage()), env.dyn_clock()))?;
    write(&mut log)?;
    log.close()?;
    env.ack("log", "written");
    let log = Log::open(&dir, config(Some(env.storage()), env.dyn_clock()))?;
    log.compact()?;
    log.close()?;
    env.ack("log", "compacted");
    Ok(())
}

fn check(want: &Expected, state: &Recovered<'_>) -> Result<(), Box<dyn Error>> {
    let acked = state.acked_for("log");
    if acked.is_empty() {
        return Ok(());
    }
    let dir = state.root().join("logs").join("table-0");
    let log = Log::open(&dir, config(Some(state.storage()), state.dyn_clock()))?;
    let found = records(&log)?;
    if log.log_end_offset() != want.end {
        return Err(format!("log end {} (want {})", log.log_end_offset(), want.end).into());
    }
    for (offset, record) in &found {
        if want.original.get(offset) != Some(record) {
            return Err(format!("offset {offset} holds a record the original did not").into());
        }
    }
    if let Some(missing) = want.compacted.keys().find(|o| !found.contains_key(o)) {
        return Err(format!("offset {missing}, kept by the compaction, is gone").into());
    }
    if acked.contains(&b"compacted".as_slice()) && found != want.compacted {
        return Err(format!(
            "compaction acknowledged but {} records found (want {})",
            found.len(),
            want.compacted.len()
        )
        .into());
    }
    if newest(&log)? != want.newest {
        return Err("the newest value of some key changed".into());
    }
    if producers(&log) != want.producers {
        return Err(format!(
            "producer state {:?} (want {:?})",
            producers(&log),
            want.producers
        )
        .into());
    }
    log.close()?;
    Ok(())
}

fn run(model: CrashModel) {
    let want = expected();
    let options = FnOptions {
        model,
        ..FnOptions::default()
    };
    let summary = crash_test_fn(&options, workload, |s| check(&want, s)).expect("crash test");
    eprintln!("{summary}");
    assert!(summary.crash_points > 100, "{summary}");
    assert!(
        summary.violations.is_empty(),
        "{summary}\n{}",
        summary.violations.join("\n")
    );
}

#[test]
fn a_cleaning_pass_crashed_at_every_io_point_loses_nothing_it_keeps() {
    run(CrashModel::Today);
}

#[test]
fn a_cleaning_pass_crashed_under_the_weak_model_loses_nothing_it_keeps() {
    run(CrashModel::Weak(WeakModel {
        exhaustive_up_to: 6,
        samples: 8,
        seed: 1,
    }));
}
