//! Batch builders shared by the tests.
#![allow(dead_code)]

use recovery::internals::increment_sequence;
use recovery::{
    AppendOrigin, AppliedBatches, BatchSummary, ControlInfo, ProducerStateError,
    ProducerStateManager,
};

/// A non-transactional data batch of `count` records.
pub fn data(pid: i64, epoch: i16, base_seq: i32, base_offset: i64, count: i32) -> BatchSummary {
    BatchSummary {
        base_offset,
        last_offset: base_offset + (i64::from(count) - 1),
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: base_seq,
        last_sequence: increment_sequence(base_seq, count - 1),
        max_timestamp: base_offset.saturating_add(1_000),
        is_transactional: false,
        is_control: false,
        records_count: count,
        control: None,
        size_in_bytes: 61 + 10 * count as u32,
    }
}

/// A transactional data batch.
pub fn txn(pid: i64, epoch: i16, base_seq: i32, base_offset: i64, count: i32) -> BatchSummary {
    BatchSummary {
        is_transactional: true,
        ..data(pid, epoch, base_seq, base_offset, count)
    }
}

/// An ABORT (`commit == false`) or COMMIT marker.
pub fn marker(
    pid: i64,
    epoch: i16,
    offset: i64,
    commit: bool,
    coordinator_epoch: i32,
) -> BatchSummary {
    BatchSummary {
        base_offset: offset,
        last_offset: offset,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: -1,
        last_sequence: -1,
        max_timestamp: 1_000 + offset,
        is_transactional: true,
        is_control: true,
        records_count: 1,
        control: Some(ControlInfo::EndTxn {
            commit,
            coordinator_epoch,
        }),
        size_in_bytes: 78,
    }
}

/// A MIRROR_PID_RESET barrier batch as the forks write it (pid/epoch/seq −1).
pub fn barrier(offset: i64) -> BatchSummary {
    BatchSummary {
        base_offset: offset,
        last_offset: offset,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
        max_timestamp: 1_000 + offset,
        is_transactional: false,
        is_control: true,
        records_count: 1,
        control: Some(ControlInfo::MirrorPidReset {
            source_cluster_id: "abc".into(),
        }),
        size_in_bytes: 79,
    }
}

/// A batch without producer id.
pub fn plain(offset: i64, count: i32) -> BatchSummary {
    BatchSummary {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        last_sequence: -1,
        ..data(-1, -1, -1, offset, count)
    }
}

pub fn apply(
    psm: &mut ProducerStateManager,
    batches: &[BatchSummary],
    origin: AppendOrigin,
) -> Result<AppliedBatches, ProducerStateError> {
    psm.apply_batches(batches, origin)
}

pub fn apply_ok(
    psm: &mut ProducerStateManager,
    batches: &[BatchSummary],
    origin: AppendOrigin,
) -> AppliedBatches {
    match psm.apply_batches(batches, origin) {
        Ok(a) => a,
        Err(e) => panic!("apply failed: {e} ({e:?})"),
    }
}

/// The `.log` files directly in `dir`, sorted.
pub fn logs_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}
