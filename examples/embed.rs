//! Embedding seglog as the storage of one partition: open (creating it), idempotent and
//! transactional appends, reads at both isolation levels, a clean close, a crash and the
//! recovery after it, and the producer state that survives both.
//!
//! ```text
//! cargo run --example embed -- /tmp/embed      # leaves a Kafka log directory in /tmp/embed
//! seglog verify /tmp/embed                     # exits 0
//! ```

use std::error::Error;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use seglog::record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use seglog::{AppendOrigin, Clock, Config, IsolationLevel, Log, SystemClock};

/// An idempotent producer's batch: producer id, epoch 0, first sequence `seq`.
fn batch(pid: i64, seq: i32, txn: bool, values: &[&str]) -> Result<Vec<u8>, Box<dyn Error>> {
    let now = SystemClock.now_ms();
    let mut b = RecordBatchBuilder::new(0)
        .producer(pid, 0, seq)
        .transactional(txn);
    for v in values {
        b.append(now, Some(b"key"), Some(v.as_bytes()), &[])?;
    }
    Ok(b.build())
}

/// A transaction coordinator's COMMIT or ABORT marker for `pid`.
fn marker(pid: i64, commit: bool) -> Vec<u8> {
    let kind = if commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    end_txn_marker_batch(0, SystemClock.now_ms(), 0, pid, 0, kind, 0)
}

fn values(log: &Log, isolation: IsolationLevel) -> Result<Vec<String>, Box<dyn Error>> {
    Ok(log
        .consume(log.log_start_offset(), 1 << 20, isolation)?
        .into_iter()
        .map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).into_owned())
        .collect())
}

fn main() -> Result<(), Box<dyn Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: embed OUTPUT_DIR")?;
    let dir = out.join("orders-0");
    // The clock decides rolls, retention and producer expiry; the high watermark follows the
    // flushed log end (the default): readers see what is on disk.
    let config = Config::default().with_segment_bytes(1 << 20);

    // 1. Open, creating the directory.
    let log = Log::open(&dir, config.clone())?;
    println!("opened {}: {}", dir.display(), log.recovery_report());

    // 2. Idempotent appends: producer 1 writes sequences 0-1 and 2; a retry of the first
    //    batch is recognised and returns the original offsets without writing.
    let first = batch(1, 0, false, &["a", "b"])?;
    let info = log.append(&first)?;
    println!(
        "appended offsets {}..={}",
        info.first_offset, info.last_offset
    );
    log.append(&batch(1, 2, false, &["c"])?)?;
    let retry = log.append(&first)?;
    assert!(retry.duplicate, "a retried batch is a duplicate");
    println!(
        "retry of the first batch: duplicate of {}..={}",
        retry.first_offset, retry.last_offset
    );

    // 3. Transactions: producer 2 commits one, producer 3 aborts one; the markers come from
    //    the coordinator.
    log.append(&batch(2, 0, true, &["committed"])?)?;
    log.append(&batch(3, 0, true, &["aborted"])?)?;
    log.append_as_leader(&marker(2, true), 0, AppendOrigin::Coordinator)?;
    log.append(&batch(2, 1, true, &["still open"])?)?;
    log.append_as_leader(&marker(3, false), 0, AppendOrigin::Coordinator)?;

    // 4. Reads see the flushed log; read_committed stops at producer 2's open transaction
    //    and hides producer 3's aborted records.
    log.flush()?;
    let uncommitted = values(&log, IsolationLevel::ReadUncommitted)?;
    let committed = values(&log, IsolationLevel::ReadCommitted)?;
    println!(
        "read_uncommitted {:?}: {uncommitted:?}",
        log.readable_range(IsolationLevel::ReadUncommitted)
    );
    println!(
        "read_committed   {:?}: {committed:?}",
        log.readable_range(IsolationLevel::ReadCommitted)
    );
    assert_eq!(committed, ["a", "b", "c", "committed"]);
    assert_eq!(uncommitted.len(), 6);

    // 5. Close cleanly: the next open recovers nothing.
    log.append_as_leader(&marker(2, true), 0, AppendOrigin::Coordinator)?;
    log.close()?;
    let log = Log::open(&dir, config.clone())?;
    assert!(log.recovery_report().had_clean_shutdown);
    println!("reopened: {}", log.recovery_report());

    // 6. A crash: one more batch is flushed, then the process "dies" (no close) while a
    //    write is half done (garbage at the end of the active segment).
    log.append(&batch(1, 3, false, &["d"])?)?;
    log.flush()?;
    let end = log.log_end_offset();
    drop(log);
    tear_active_segment(&dir)?;

    // 7. Reopen: recovery plans and applies, quarantining the torn tail instead of deleting it.
    let log = Log::open(&dir, config)?;
    let report = log.recovery_report();
    println!("after the crash: {report}");
    assert!(!report.had_clean_shutdown);
    assert_eq!(report.cut.len(), 1, "the torn tail is cut");
    assert_eq!(log.log_end_offset(), end, "every flushed batch survived");

    // 8. Producer state survived both: producer 1's next sequence is 4.
    for (pid, e) in log.producer_state()?.active_producers() {
        println!(
            "producer {pid}: epoch {} last sequence {} last offset {}",
            e.producer_epoch(),
            e.last_seq(),
            e.last_data_offset()
        );
    }
    assert_eq!(
        log.producer_state()?.last_entry(1).map(|e| e.last_seq()),
        Some(3)
    );
    for e in log.expired_producers() {
        println!("{e}");
    }
    log.close()?;
    println!("closed cleanly; try: seglog verify {}", out.display());
    Ok(())
}

/// Appends 100 bytes of a batch that never finished to the active segment.
fn tear_active_segment(dir: &Path) -> Result<(), Box<dyn Error>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let active = logs.last().ok_or("no segment")?;
    let mut f = OpenOptions::new().append(true).open(active)?;
    let mut torn = vec![0u8; 100];
    torn[..8].copy_from_slice(&4_000_i64.to_be_bytes());
    torn[8..12].copy_from_slice(&500_i32.to_be_bytes());
    f.write_all(&torn)?;
    f.sync_all()?;
    Ok(())
}
