//! Kafka's `Cleaner.buildOffsetMap`: the offset map built over the dirty range, newest offset
//! per key, and what its read learns beside the map ([`MapRead`]).
//!
//! The keys of a few batches are put together: their digests computed side by side
//! ([`md5_each`]), their slots read together ([`OffsetMap::touch`]), then put one by one in offset
//! order with the ends of their batches, as Kafka puts them. The map is in the same state after
//! each batch as if each key had been put when read; only the read runs a few batches ahead.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use super::error::Result;
use super::md5::md5_each;
use super::newest::NewestOffsets;
use super::offset_map::Put;
use super::reader::{collect_aborted, first_control_type, format_err, head, BatchReader};
use super::segments::{segment_path, segments_in, SegmentFiles};
use super::survey::BatchSurvey;
use super::{CleanedTransactionMetadata, CleanerConfig, LastRecord, OffsetMap};
use record_format::{DecodeLimits, RecordBatch};
use segment_store::internals::FileKind;
use segment_store::AbortedTxn;
use segment_store::Storage;

/// What [`build_offset_map`] learns beside the map: which offsets are their key's newest, and
/// the batches it read.
#[derive(Debug)]
pub(super) struct MapRead {
    pub(super) newest: NewestOffsets,
    pub(super) survey: BatchSurvey,
}

/// Keys held back before they are put together.
const HELD_KEYS: usize = 32;

/// What the map is told, in order, for the batches held back.
#[derive(Debug)]
enum Step {
    /// The key `keys[key]` at `offset`.
    Put { key: Range<usize>, offset: i64 },
    /// The end of a batch of `size` bytes based at `base`, its last offset, its records if plain.
    BatchEnd {
        size: u64,
        base: i64,
        last_offset: i64,
        plain_records: u32,
    },
}

/// The steps of the batches read and not yet applied to the map.
#[derive(Debug, Default)]
struct Held {
    keys: Vec<u8>,
    steps: Vec<Step>,
    puts: usize,
    digests: Vec<[u8; 16]>,
}

/// The map, the read, and the bounds a segment's steps are applied with.
struct Target<'a> {
    map: &'a mut OffsetMap,
    read: &'a mut MapRead,
    segment_base: i64,
    start: i64,
    max_desired: usize,
}

impl Held {
    fn put(&mut self, key: &[u8], offset: i64) {
        let from = self.keys.len();
        self.keys.extend_from_slice(key);
        self.steps.push(Step::Put {
            key: from..self.keys.len(),
            offset,
        });
        self.puts += 1;
    }

    /// Applies the steps held, in order: `true` when the map filled up, which ends the read at
    /// the end of the batch whose key found it full (Kafka's `buildOffsetMap` returns there).
    fn apply(&mut self, t: &mut Target<'_>) -> bool {
        let keys = &self.keys;
        self.digests.clear();
        md5_each(
            self.steps.iter().filter_map(|s| match s {
                Step::Put { key, .. } => Some(keys.get(key.clone()).unwrap_or(&[])),
                Step::BatchEnd { .. } => None,
            }),
            &mut self.digests,
        );
        t.map.touch(&self.digests);
        let mut digests = self.digests.iter();
        let mut refused = false;
        let mut full = false;
        for step in &self.steps {
            match *step {
                Step::Put { offset, .. } => {
                    let Some(hash) = digests.next() else { break };
                    if t.map.size() >= t.max_desired {
                        full = true;
                        break;
                    }
                    let put = t.map.put_digest(hash, offset);
                    t.read.newest.record(offset, put);
                    refused |= put == Put::Refused;
                }
                Step::BatchEnd {
                    size,
                    base,
                    last_offset,
                    plain_records,
                } => {
                    let plain_records = if refused { 0 } else { plain_records };
                    t.read
                        .survey
                        .push(t.segment_base, size, base, plain_records);
                    refused = false;
                    if last_offset >= t.start {
                        t.map.update_latest_offset(last_offset);
                    }
                }
            }
        }
        self.keys.clear();
        self.steps.clear();
        self.puts = 0;
        full
    }
}

/// Kafka's `Cleaner.buildOffsetMap` over `[start, end)`: returns whether the map filled up.
/// A batch is surveyed as plain (see [`BatchSurvey`]) when it is a data batch, not
/// transactional, not the last of a producer in `last_records`, and each of its records, at
/// offsets `base, base + 1, ..` up to its last offset, has a key the map took.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_offset_map(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentFiles],
    txns: &BTreeMap<i64, Vec<AbortedTxn>>,
    (start, end): (i64, i64),
    last_records: &BTreeMap<i64, LastRecord>,
    map: &mut OffsetMap,
    config: &CleanerConfig,
    read: &mut MapRead,
) -> Result<bool> {
    map.clear();
    let dirty: Vec<&SegmentFiles> = segments_in(segments, start, end);
    let mut meta = CleanedTransactionMetadata::default();
    meta.add_aborted_transactions(collect_aborted(txns, start, end));
    let max_desired = (map.slots() as f64 * config.io_buffer_load_factor) as usize;
    let mut held = Held::default();
    for (i, seg) in dirty.iter().enumerate() {
        let next_start = dirty.get(i + 1).map_or(end, |s| s.base_offset);
        let path = segment_path(dir, seg.base_offset, FileKind::Log, None);
        let mut t = Target {
            map: &mut *map,
            read: &mut *read,
            segment_base: seg.base_offset,
            start,
            max_desired,
        };
        // Batches are not CRC-checked here, only framed (as Kafka's cleaner reads them): the
        // cleaning checks each batch it reads, so what it writes never comes from a corrupt
        // batch, and passes over unread the batches whose every record has a newer version.
        // A batch whose records do not decode is reported at its CRC where that is wrong.
        let mut reader = BatchReader::open(storage, &path, config)?.checked_below(u64::MAX);
        loop {
            let held_read = match reader.next_batch() {
                Ok(Some((_, b))) => {
                    hold_batch(&path, &b, start, last_records, &mut meta, &mut held).map_err(|e| {
                        b.validate()
                            .map_or_else(|crc| format_err(&path, crc), |()| e)
                    })
                }
                Ok(None) => break,
                Err(e) => Err(e),
            };
            // Where the map fills up before a batch that does not read, the read ends there
            // (as it would had every key been put when read).
            if let Err(e) = held_read {
                return if held.apply(&mut t) { Ok(true) } else { Err(e) };
            }
            if held.puts >= HELD_KEYS && held.apply(&mut t) {
                return Ok(true);
            }
        }
        if held.apply(&mut t) {
            return Ok(true);
        }
        map.update_latest_offset(next_start - 1);
    }
    Ok(false)
}

/// The steps of one batch read, held.
fn hold_batch(
    path: &Path,
    b: &RecordBatch<'_>,
    start: i64,
    last_records: &BTreeMap<i64, LastRecord>,
    meta: &mut CleanedTransactionMetadata,
    held: &mut Held,
) -> Result<()> {
    let h = head(b);
    let base = b.base_offset();
    let size = b.size_in_bytes() as u64;
    let last_of_producer = b.has_producer_id()
        && last_records
            .get(&h.producer_id)
            .is_some_and(|l| l.last_data_offset == Some(h.last_offset));
    let mut plain = !h.control && !h.transactional && !last_of_producer;
    let mut seen = 0u32;
    if h.control {
        let t = first_control_type(path, b)?;
        meta.on_control_batch_read(h.last_offset, h.producer_id, t);
    } else if !meta.on_batch_read(h.last_offset, h.producer_id, h.transactional) {
        let records = b
            .records(&DecodeLimits::default())
            .map_err(|e| format_err(path, e))?;
        for r in records.iter() {
            let r = r.map_err(|e| format_err(path, e))?;
            let taken = match r.key() {
                Some(key) if r.offset() >= start => {
                    held.put(key, r.offset());
                    true
                }
                _ => false,
            };
            plain &= taken && base.checked_add(i64::from(seen)) == Some(r.offset());
            seen = seen.saturating_add(1);
        }
    }
    plain &= seen > 0 && base.checked_add(i64::from(seen) - 1) == Some(h.last_offset);
    held.steps.push(Step::BatchEnd {
        size,
        base,
        last_offset: h.last_offset,
        plain_records: if plain { seen } else { 0 },
    });
    Ok(())
}
