//! The read functions of a segment over its parts, wherever they are held: a [`LogSegment`]'s
//! `.log` and mapped indexes, or an active segment's tail published to readers that take no
//! lock (`segment/tail.rs`: the `.log` read through its shared handle up to the published size,
//! the published index entries). The same code answers both, so their answers are the same.
//!
//! [`LogSegment`]: super::LogSegment

use record_format::RecordBatch;

use super::append_read::ReadBounds;
use super::LogOffsetMetadata;
use crate::error::{Result, SegmentError};
use crate::file_records::{FileRecords, LogOffsetPosition, TimestampAndOffset};
use crate::file_slice::FileSlice;
use crate::index::TimestampOffset;
use crate::index::{self, FilePosition, OffsetEntries, OffsetPosition, TimeEntries};

/// A segment's parts, as the read functions need them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentView<'a, O, T> {
    /// The base offset.
    pub(crate) base_offset: i64,
    /// The `.log` (its size bounds every read).
    pub(crate) log: &'a FileRecords,
    /// The offset-index entries.
    pub(crate) offsets: &'a O,
    /// The time-index entries.
    pub(crate) times: &'a T,
    /// The max timestamp so far and the offset of its batch.
    pub(crate) max_timestamp_so_far: TimestampOffset,
}

impl<O: OffsetEntries, T: TimeEntries> SegmentView<'_, O, T> {
    /// Kafka's `translateOffset`: the batch containing `offset` (the first whose last offset is
    /// `>= offset`), searching from the index entry or `starting_position`, whichever is later.
    pub(crate) fn translate_offset(
        &self,
        offset: i64,
        starting_position: u64,
    ) -> Result<Option<LogOffsetPosition>> {
        let mapping = index::lookup(self.offsets, offset);
        self.log.search_for_offset_with_size(
            offset,
            u64::from(mapping.position.0).max(starting_position),
        )
    }

    /// Where the bytes of Kafka's `LogSegment.read` lie, without reading them: `fetch_size` bytes
    /// from `position` (0 when the read is empty). `None` if `start_offset` is past the
    /// segment's last batch.
    pub(crate) fn read_bounds(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<ReadBounds>> {
        // Kafka's `translateOffset`, with the slice's walk point looked up while the first
        // header comes: that header, at the offset-index entry, is in no cache when readers
        // jump at random, and nothing else can start before it is read.
        let mapping = index::lookup(self.offsets, start_offset);
        let from = u64::from(mapping.position.0);
        self.log.prefetch_header(from);
        let max_position = max_position.unwrap_or(self.log.size()).min(self.log.size());
        // An entry below `from + max_size` is below the bytes' end, wherever in the walk from
        // `from` the batch holding the offset is (a start at or after `from`, a size of at
        // least `max_size` unless `max_position` cuts it): a walk from it reaches that end.
        let walk_from = index::scan_start_before(
            self.offsets,
            from.saturating_add(max_size as u64).min(max_position),
        );
        let Some(start) = self.log.search_for_offset_with_size(start_offset, from)? else {
            return Ok(None);
        };
        let fetch_offset_metadata = LogOffsetMetadata {
            message_offset: start_offset,
            segment_base_offset: self.base_offset,
            relative_position_in_segment: start.position,
        };
        let adjusted = if min_one_message {
            max_size.max(start.size as usize)
        } else {
            max_size
        };
        let walk_from = walk_from.max(start.position);
        if adjusted == 0 || max_position <= start.position {
            return Ok(Some(ReadBounds {
                fetch_offset_metadata,
                position: start.position,
                fetch_size: 0,
                first_entry_incomplete: false,
                walk_from,
            }));
        }
        Ok(Some(ReadBounds {
            fetch_offset_metadata,
            position: start.position,
            fetch_size: ((max_position - start.position) as usize).min(adjusted),
            first_entry_incomplete: adjusted < start.size as usize,
            walk_from,
        }))
    }

    /// The bytes `bounds` name as a [`FileSlice`] of the `.log` whose
    /// [`FileSlice::next_offset`] walks the headers from [`ReadBounds::walk_from`] (an
    /// offset-index entry before the bytes' end, or their start), not every header of the
    /// range.
    pub(crate) fn fetch_slice(&self, bounds: &ReadBounds) -> FileSlice {
        self.log
            .slice_walking_from(bounds.position, bounds.fetch_size, bounds.walk_from)
    }

    /// Kafka's `LogSegment.fetchUpperBoundOffset`: the offset of the first offset-index entry at
    /// or after byte `position + fetch_size`, if any (the upper bound of the aborted
    /// transactions a fetch of `fetch_size` bytes from `position` returns).
    pub(crate) fn fetch_upper_bound_offset(
        &self,
        offset: i64,
        position: u64,
        fetch_size: usize,
    ) -> Option<i64> {
        let from = OffsetPosition {
            offset,
            position: FilePosition(u32::try_from(position).unwrap_or(u32::MAX)),
        };
        index::fetch_upper_bound_offset(
            self.offsets,
            from,
            u32::try_from(fetch_size).unwrap_or(u32::MAX),
        )
        .map(|p| p.offset)
    }

    /// Kafka's `findOffsetByTimestamp`: the first record with timestamp `>= timestamp` and
    /// offset `>= starting_offset`, starting the scan from the time and offset indexes.
    pub(crate) fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let to = index::time_lookup(self.times, timestamp);
        let position = index::lookup(self.offsets, to.offset.max(starting_offset)).position;
        self.log
            .search_for_timestamp(timestamp, u64::from(position.0), starting_offset)
    }

    /// Kafka's `MAX_TIMESTAMP` lookup in this segment (KIP-734): the first batch from the
    /// offset-index entry of the offset of the max timestamp so far whose max timestamp is the
    /// max timestamp so far, and in it the first record with that timestamp (Kafka's
    /// `offsetOfMaxTimestamp`), with the batch's leader epoch if it has one. `None` when no
    /// batch or record matches (an empty segment, a legacy batch).
    pub(crate) fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        let max = self.max_timestamp_so_far.timestamp;
        let from = index::lookup(self.offsets, self.max_timestamp_so_far.offset);
        for h in self.log.headers_from(u64::from(from.position.0)) {
            let h = h?;
            if h.max_timestamp != max {
                continue;
            }
            if h.magic < 2 {
                return Ok(None);
            }
            let bytes = self.log.read(h.position, h.size as usize)?;
            let format = |error| SegmentError::Format {
                path: self.log.path().to_path_buf(),
                error,
            };
            let batch = RecordBatch::new(&bytes, h.position).map_err(format)?;
            let records = batch
                .records(&record_format::DecodeLimits::default())
                .map_err(format)?;
            for r in records.iter() {
                let r = r.map_err(format)?;
                if r.timestamp() == max {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: max,
                        offset: r.offset(),
                        leader_epoch: (h.partition_leader_epoch >= 0)
                            .then_some(h.partition_leader_epoch),
                    }));
                }
            }
            return Ok(None);
        }
        Ok(None)
    }
}
