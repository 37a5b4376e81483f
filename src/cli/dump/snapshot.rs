//! Dumping a producer state `.snapshot` (Kafka's `dumpProducerIdSnapshot`), decoded with
//! `recovery::internals::decode_snapshot` (version 1, CRC-32C checked).
//!
//! Text, per producer: `producerId: P producerEpoch: E coordinatorEpoch: C currentTxnFirstOffset:
//! OptionalLong.empty|OptionalLong[n] lastTimestamp: T`, then, when the entry carries batch
//! metadata (`lastOffset >= 0`, as Kafka's reader restores it), ` firstSequence: … lastSequence: …
//! lastOffset: … offsetDelta: … timestamp: …`. A corrupt snapshot is one stderr line.

use std::io::{self, Write};
use std::path::Path;

use record_format::internals::decrement_sequence;
use recovery::internals::{decode_snapshot, too_large_size, MAX_SNAPSHOT_BYTES};
use recovery::{CorruptReason, SnapshotError};
use recovery::{SnapshotEntry, SnapshotIo};
use serde::Serialize;

use super::json::{self, EntriesSummary, ErrorJson};
use super::log::optional_long;
use super::Dumper;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryLine {
    #[serde(rename = "type")]
    kind: &'static str,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    current_txn_first_offset: Option<i64>,
    last_timestamp: i64,
    first_sequence: Option<i32>,
    last_sequence: Option<i32>,
    last_offset: Option<i64>,
    offset_delta: Option<i32>,
    timestamp: Option<i64>,
}

/// Kafka's text line for one snapshot entry.
pub fn entry_line(e: &SnapshotEntry) -> String {
    let txn = (e.current_txn_first_offset >= 0).then_some(e.current_txn_first_offset);
    let mut line = format!(
        "producerId: {} producerEpoch: {} coordinatorEpoch: {} currentTxnFirstOffset: {} lastTimestamp: {}",
        e.producer_id,
        e.producer_epoch,
        e.coordinator_epoch,
        optional_long(txn),
        e.timestamp
    );
    if e.last_offset >= 0 {
        line.push_str(&format!(
            " firstSequence: {} lastSequence: {} lastOffset: {} offsetDelta: {} timestamp: {}",
            decrement_sequence(e.last_sequence, e.offset_delta),
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp
        ));
    }
    line
}

impl<O: Write, E: Write> Dumper<'_, O, E> {
    /// Dumps a `.snapshot` file.
    pub(crate) fn dump_producer_snapshot(&mut self, path: &Path) -> io::Result<()> {
        // Capped as recovery caps it: a longer file is reported corrupt with its size, not read.
        let read = recovery::StdIo.read_capped(path, MAX_SNAPSHOT_BYTES);
        let (decoded, len) = match read {
            Ok(bytes) => (decode_snapshot(&bytes), bytes.len() as u64),
            Err(e) => match too_large_size(&e) {
                Some((size, limit)) => {
                    (Err((CorruptReason::TooLarge { size, limit }, limit)), size)
                }
                None => return self.read_failed(path, &e),
            },
        };
        let (entries, error) = match decoded {
            Ok(entries) => (entries, None),
            Err((reason, position)) => {
                let e = SnapshotError::Corrupt {
                    path: path.to_path_buf(),
                    reason,
                    position,
                };
                writeln!(self.err, "{e}")?;
                self.damaged();
                (
                    Vec::new(),
                    Some(ErrorJson::other("corruptSnapshot", position, e.to_string())),
                )
            }
        };
        for e in &entries {
            if self.args.json {
                let meta = e.last_offset >= 0;
                json::emit(
                    self.out,
                    &EntryLine {
                        kind: "producerSnapshotEntry",
                        producer_id: e.producer_id,
                        producer_epoch: e.producer_epoch,
                        coordinator_epoch: e.coordinator_epoch,
                        current_txn_first_offset: (e.current_txn_first_offset >= 0)
                            .then_some(e.current_txn_first_offset),
                        last_timestamp: e.timestamp,
                        first_sequence: meta
                            .then(|| decrement_sequence(e.last_sequence, e.offset_delta)),
                        last_sequence: meta.then_some(e.last_sequence),
                        last_offset: meta.then_some(e.last_offset),
                        offset_delta: meta.then_some(e.offset_delta),
                        timestamp: meta.then_some(e.timestamp),
                    },
                )?;
            } else {
                writeln!(self.out, "{}", entry_line(e))?;
            }
        }
        if self.args.json {
            let valid = if error.is_none() { len } else { 0 };
            json::emit(
                self.out,
                &EntriesSummary {
                    kind: "summary",
                    entries: entries.len(),
                    valid_bytes: valid,
                    invalid_bytes: len - valid,
                    error,
                },
            )?;
        }
        Ok(())
    }
}
