//! A KIP-1279 failover on two partitions: a target partition mirrors a source cluster's
//! partition byte for byte, the mirror is stopped (the `MIRROR_PID_RESET` barrier is written),
//! and a local producer then reuses a producer id the source used, without a sequence error.
//!
//! ```text
//! cargo run --example mirror_failover -- /tmp/failover
//! seglog verify /tmp/failover/source && seglog verify /tmp/failover/target   # both exit 0
//! ```

use std::error::Error;
use std::path::PathBuf;

use seglog::record_format::RecordBatchBuilder;
use seglog::recovery::MirrorPartitionState;
use seglog::{Clock, Config, Error as LogError, IsolationLevel, Log, SystemClock};

/// Producer id 5, epoch 0, first sequence `seq`, with `n` records.
fn batch(seq: i32, n: usize, what: &str) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut b = RecordBatchBuilder::new(0).producer(5, 0, seq);
    for i in 0..n {
        let value = format!("{what} {}", seq as usize + i);
        b.append(SystemClock.now_ms(), None, Some(value.as_bytes()), &[])?;
    }
    Ok(b.build())
}

fn main() -> Result<(), Box<dyn Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: mirror_failover OUTPUT_DIR")?;
    let config = Config::default();

    // The source cluster's partition: producer 5 writes sequences 0..=5.
    let source = Log::open(out.join("source").join("orders-0"), config.clone())?;
    source.append(&batch(0, 3, "east")?)?;
    source.append(&batch(3, 3, "east")?)?;
    source.flush()?;

    // The target partition mirrors it: aligned by leader epoch, then read-only for clients.
    let target = Log::open(out.join("target").join("orders-0"), config)?;
    target.start_mirroring("east", &source)?;
    let mut offset = target.log_end_offset();
    while offset < source.high_watermark() {
        let fetch = source.read(offset, 1 << 20, IsolationLevel::ReadUncommitted)?;
        let info = target.append_as_mirror(&fetch.records)?;
        println!(
            "mirrored offsets {}..={}",
            info.first_offset, info.last_offset
        );
        offset = target.log_end_offset();
    }
    match target.append(&batch(0, 1, "local")?) {
        Err(LogError::Log(e)) => println!("while mirroring, a client append is refused: {e}"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }

    // Failover: stop mirroring. The stop point is the last stable offset; the barrier goes
    // after it and resets every producer the source used.
    let barrier = target.stop_mirroring()?;
    println!("mirroring stopped, barrier at offset {barrier}");
    assert_eq!(barrier, 6, "the barrier follows everything mirrored");
    assert!(matches!(
        target.mirror_state()?,
        MirrorPartitionState::Stopped { .. }
    ));

    // A local producer that happens to get id 5 starts at sequence 0: accepted.
    let info = target.append(&batch(0, 2, "west")?)?;
    println!(
        "local producer 5 (sequence 0) appended at {}..={}",
        info.first_offset, info.last_offset
    );
    target.flush()?;
    for r in target.consume(0, 1 << 20, IsolationLevel::ReadCommitted)? {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        println!("  offset {}: {value}", r.offset);
    }
    let producers = target.producer_state()?;
    let entry = producers.last_entry(5).ok_or("producer 5")?;
    println!(
        "producer 5 on the target: epoch {} last sequence {}",
        entry.producer_epoch(),
        entry.last_seq()
    );
    assert_eq!(entry.last_seq(), 1);

    source.close()?;
    target.close()?;
    println!(
        "closed; try: seglog verify {} && seglog verify {}",
        out.join("source").display(),
        out.join("target").display()
    );
    Ok(())
}
