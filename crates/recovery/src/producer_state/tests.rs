//! Tests of the producer state manager.

use super::entry::{BatchMetadata, ProducerStateEntry};
use super::manager::ProducerStateManager;
use super::rules::{decrement_sequence, in_sequence, increment_sequence};
use super::NUM_BATCHES_TO_RETAIN;

#[test]
fn producers_come_out_by_id_whatever_order_they_came_in() {
    let mut psm = ProducerStateManager::default();
    // Ids in a scrambled order, spread as real ones are; every third one idle long enough
    // to expire.
    let ids: Vec<i64> = (0..500i64)
        .map(|i| (i * 7919) % 500 * 1_000_003 + 17)
        .collect();
    let expiration = psm.config().producer_id_expiration_ms;
    for &pid in &ids {
        let last_timestamp = if pid % 3 == 0 { 0 } else { expiration };
        psm.load_producer_entry(ProducerStateEntry::new(
            pid,
            0,
            -1,
            last_timestamp,
            None,
            [],
        ));
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    let shown: Vec<i64> = psm.active_producers().keys().copied().collect();
    assert_eq!(shown, sorted);
    let in_snapshot: Vec<i64> = psm
        .snapshot_entries()
        .iter()
        .map(|e| e.producer_id)
        .collect();
    assert_eq!(in_snapshot, sorted, "a snapshot lists its producers by id");
    assert_eq!(psm.producer_count(), ids.len());
    let removed = psm.remove_expired_producers(expiration);
    let expected: Vec<i64> = sorted.iter().copied().filter(|p| p % 3 == 0).collect();
    assert_eq!(removed, expected, "expired producers are reported by id");
    assert_eq!(psm.producer_count(), ids.len() - expected.len());
}

#[test]
fn sequence_arithmetic_matches_kafka_and_never_overflows() {
    assert_eq!(increment_sequence(5, 3), 8);
    assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
    assert_eq!(increment_sequence(i32::MAX - 2, 5), 2);
    assert_eq!(decrement_sequence(8, 3), 5);
    assert_eq!(decrement_sequence(2, 5), i32::MAX - 2);
    for (a, b) in [
        (i32::MIN, i32::MAX),
        (i32::MAX, i32::MIN),
        (i32::MIN, i32::MIN),
    ] {
        let _ = increment_sequence(a, b);
        let _ = decrement_sequence(a, b);
        let _ = in_sequence(a, b);
    }
    assert!(
        !in_sequence(i32::MAX, i32::MIN),
        "computed in i64: no wrap to MIN"
    );
}

#[test]
fn entry_keeps_at_most_five_batches_and_clears_on_epoch_change() {
    let b = |i: i64| BatchMetadata {
        last_seq: i as i32,
        last_offset: i,
        offset_delta: 0,
        timestamp: i,
    };
    let mut e = ProducerStateEntry::new(1, 0, -1, -1, None, (0..7).map(b));
    assert_eq!(e.batch_metadata().len(), NUM_BATCHES_TO_RETAIN);
    assert_eq!((e.first_seq(), e.last_seq()), (2, 6));
    assert!(e.add_batch(1, b(7)));
    assert_eq!(e.batch_metadata().len(), 1);
    assert!(!e.add_batch(1, b(8)));
    assert_eq!(e.last_timestamp(), 8);
}
