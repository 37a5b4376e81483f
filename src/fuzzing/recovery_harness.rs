//! Fuzz harnesses for `recovery`, shared by the cargo-fuzz targets `snapshot`, `producer_state`
//! and `log_loader` and by the stable replay test module
//! `crates/recovery/tests/recovery/fuzz_replay.rs`. `snapshot` checks the decoder against the
//! format's exact acceptance rule and a byte-exact re-encoding; `producer_state` runs the producer
//! state manager against a reference model; `log_loader` runs recovery's one engine
//! (`LogLoader::plan`, then `LogLoader::apply`) on a damaged partition.
#![allow(
    dead_code,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

#[path = "input.rs"]
mod input;
#[path = "scratch.rs"]
mod scratch_dir;

use std::collections::BTreeMap;

use recovery::internals::{decode_snapshot, encode_snapshot};
use recovery::{ProducerStateManager, SnapshotEntry};

#[path = "recovery_harness/loader.rs"]
mod loader;
#[path = "recovery_harness/producers.rs"]
mod producers;

pub use loader::{log_loader, remove_scratch};
pub use producers::{producer_state, remove_snapshot_dir};

/// `snapshot`: `decode_snapshot` on arbitrary bytes.
///
/// * It accepts exactly the files the version-1 layout allows: version 1, CRC-32C of bytes
///   `[6, EOF)` equal to the stored one, a non-negative count and exactly `10 + 46 * count` bytes;
/// * what it accepts re-encodes to the same bytes (`encode_snapshot` keeps the entry order, so
///   this is byte equality, not just equal entries);
/// * loading the entries into a manager (Kafka `loadProducerEntry`) and taking the snapshot
///   entries back gives each producer's last entry, in producer-id order, with the fields Kafka
///   drops for an entry without a cached batch (`last_offset < 0`) reset to their defaults; the
///   open transactions are those of the loaded entries.
pub fn snapshot(data: &[u8]) {
    let decoded = decode_snapshot(data);
    let accept = data.len() >= 10
        && i16::from_be_bytes([data[0], data[1]]) == 1
        && u32::from_be_bytes(data[2..6].try_into().unwrap()) == crc32c::crc32c(&data[6..])
        && i32::from_be_bytes(data[6..10].try_into().unwrap())
            .try_into()
            .is_ok_and(|n: usize| {
                n.checked_mul(46).and_then(|b| b.checked_add(10)) == Some(data.len())
            });
    let entries = match decoded {
        Ok(entries) => entries,
        Err((reason, position)) => {
            assert!(
                !accept,
                "rejected a well-formed snapshot: {reason:?} at {position}"
            );
            assert!(position <= data.len() as u64, "error position past the end");
            return;
        }
    };
    assert!(accept, "accepted a malformed snapshot");
    assert_eq!(entries.len(), (data.len() - 10) / 46);
    assert_eq!(encode_snapshot(&entries), data, "encode(decode(x)) != x");

    let mut psm = ProducerStateManager::default();
    let mut want: BTreeMap<i64, SnapshotEntry> = BTreeMap::new();
    let mut ongoing: BTreeMap<i64, i64> = BTreeMap::new();
    for e in &entries {
        psm.load_producer_entry(e.to_entry());
        let mut n = *e;
        if n.last_offset < 0 {
            n.last_sequence = -1;
            n.last_offset = -1;
            n.offset_delta = 0;
        }
        want.insert(e.producer_id, n);
        if e.current_txn_first_offset != -1 {
            ongoing.insert(e.current_txn_first_offset, e.producer_id);
        }
    }
    assert_eq!(
        psm.snapshot_entries(),
        want.into_values().collect::<Vec<_>>()
    );
    let got: BTreeMap<i64, i64> = psm
        .ongoing_txns()
        .iter()
        .map(|(k, t)| (*k, t.producer_id))
        .collect();
    assert_eq!(got, ongoing);
}
