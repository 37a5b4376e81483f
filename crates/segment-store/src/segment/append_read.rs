//! Appends to a segment and reads from it: offsets translated through the offset index,
//! timestamps through the time index.

use std::borrow::Cow;

use super::scan::{check_framing, headers_in};
use super::{FetchDataInfo, LogOffsetMetadata, LogSegment};
use crate::error::{Result, SegmentError};
use crate::file_records::{whole_batches_len, LogOffsetPosition, TimestampAndOffset};
use crate::file_slice::FileSlice;
use crate::index::{FilePosition, OffsetIndex, TimeIndex, TimestampOffset};

/// Where the bytes of Kafka's `LogSegment.read` lie in the `.log` ([`LogSegment::read_exact`]
/// reads them, [`LogSegment::slice`] hands them out unread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadBounds {
    /// Where the fetch starts.
    pub(crate) fetch_offset_metadata: LogOffsetMetadata,
    /// The first byte: the start of the batch holding the fetch offset.
    pub(crate) position: u64,
    /// How many bytes from `position` (the last batch may be cut short).
    pub(crate) fetch_size: usize,
    /// The first batch is larger than `fetch_size`.
    pub(crate) first_entry_incomplete: bool,
    /// A batch start at or before the bytes' end from which a walk of headers finds the next
    /// fetch offset: an offset-index entry, or `position` (see `SegmentView::fetch_slice`).
    pub(crate) walk_from: u64,
}

impl LogSegment {
    /// Kafka's `append`: writes `records` (whole v2 batches with offsets assigned, all
    /// `<= largest_offset`) and maintains the indexes per batch. `largest_timestamp` becomes
    /// the rolling base timestamp if the segment was empty; `(largest_timestamp,
    /// offset_of_max_timestamp)` raise the max timestamp so far if the per-batch values did not
    /// already. Returns the position the records were written at. Malformed framing is
    /// rejected before anything is written.
    pub fn append(
        &mut self,
        largest_offset: i64,
        largest_timestamp: i64,
        offset_of_max_timestamp: i64,
        records: &[u8],
    ) -> Result<u64> {
        let mut position = self.log.size();
        if records.is_empty() {
            return Ok(position);
        }
        self.ensure_offset_in_range(largest_offset)?;
        let end = position + records.len() as u64;
        if end > i32::MAX as u64 {
            return Err(SegmentError::PositionOverflow {
                path: self.log.path().to_path_buf(),
                position: end,
            });
        }
        check_framing(self.log.path(), records, position)?;
        if position == 0 {
            self.rolling_based_timestamp = Some(largest_timestamp);
        }
        let start = self.log.append(records)?;
        for h in headers_in(records, start) {
            if h.max_timestamp > self.max_timestamp_so_far.timestamp {
                self.max_timestamp_so_far = TimestampOffset {
                    timestamp: h.max_timestamp,
                    offset: h.last_offset,
                };
            }
            if self.bytes_since_last_index_entry > u64::from(self.ctx.config.index_interval_bytes) {
                self.offset_index
                    .append(h.last_offset, FilePosition(position as u32))?;
                let timed = self.time_index.maybe_append(
                    self.max_timestamp_so_far.timestamp,
                    self.max_timestamp_so_far.offset,
                    false,
                )?;
                if let Some(tail) = self.tail.as_ref().map(|t| t.active()) {
                    tail.push_offset_entry(self.relative(h.last_offset), position as u32);
                    if timed {
                        tail.push_time_entry(
                            self.max_timestamp_so_far.timestamp,
                            self.relative(self.max_timestamp_so_far.offset),
                        );
                    }
                }
                self.bytes_since_last_index_entry = 0;
            }
            position += u64::from(h.size);
            self.bytes_since_last_index_entry += u64::from(h.size);
        }
        if largest_timestamp > self.max_timestamp_so_far.timestamp {
            self.max_timestamp_so_far = TimestampOffset {
                timestamp: largest_timestamp,
                offset: offset_of_max_timestamp,
            };
        }
        self.refresh_tail_map();
        self.publish_state();
        Ok(start)
    }

    /// Kafka's `translateOffset`: the batch containing `offset` (the first whose last offset is
    /// `>= offset`), searching from the index entry or `starting_position`, whichever is later.
    pub fn translate_offset(
        &self,
        offset: i64,
        starting_position: u64,
    ) -> Result<Option<LogOffsetPosition>> {
        self.view().translate_offset(offset, starting_position)
    }

    /// Kafka's `read`, cut to whole batches: from the batch containing `start_offset`, at most
    /// `max_size` bytes (at least the first batch if `min_one_message`) and not past
    /// `max_position` (default: the segment size). `None` if `start_offset` is past the
    /// segment's last batch.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<FetchDataInfo<'_>>> {
        let Some(mut info) =
            self.read_exact(start_offset, max_size, max_position, min_one_message)?
        else {
            return Ok(None);
        };
        let whole = whole_batches_len(&info.records);
        if whole < info.records.len() {
            info.records = match info.records {
                Cow::Borrowed(b) => Cow::Borrowed(b.get(..whole).unwrap_or_default()),
                Cow::Owned(mut v) => {
                    v.truncate(whole);
                    Cow::Owned(v)
                }
            };
        }
        Ok(Some(info))
    }

    /// Kafka's `LogSegment.read` exactly: the bytes from the batch containing `start_offset`,
    /// `min(max_position - start, max_size)` of them (`max_size` raised to the first batch's size
    /// if `min_one_message`), so the last batch may be cut short, as Kafka's fetch may end; empty
    /// when that is 0 bytes. `first_entry_incomplete` when the first batch is larger than what
    /// may be returned. `None` if `start_offset` is past the segment's last batch.
    pub fn read_exact(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<FetchDataInfo<'_>>> {
        let Some(b) = self.read_bounds(start_offset, max_size, max_position, min_one_message)?
        else {
            return Ok(None);
        };
        Ok(Some(FetchDataInfo {
            fetch_offset_metadata: b.fetch_offset_metadata,
            records: self.read_at_bounds(&b)?,
            first_entry_incomplete: b.first_entry_incomplete,
        }))
    }

    /// The bytes at `bounds`, copied: out of the read-only map of a sealed segment (a
    /// `memmove`, the fastest copy), else read from the file.
    pub(crate) fn read_vec(&self, bounds: &ReadBounds) -> Result<Vec<u8>> {
        if self.log.is_mapped() {
            Ok(self.read_at_bounds(bounds)?.into_owned())
        } else {
            self.slice(bounds.position, bounds.fetch_size).to_vec()
        }
    }

    /// The bytes `bounds` (from [`Self::read_bounds`]) name: borrowed from the map when
    /// mapped, else read.
    pub(crate) fn read_at_bounds(&self, bounds: &ReadBounds) -> Result<Cow<'_, [u8]>> {
        self.log.read(bounds.position, bounds.fetch_size)
    }

    /// Where the bytes of [`Self::read_exact`] lie, without reading them: `fetch_size` bytes
    /// from `position` (0 when the read is empty). `None` if `start_offset` is past the
    /// segment's last batch.
    pub(crate) fn read_bounds(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<ReadBounds>> {
        self.view()
            .read_bounds(start_offset, max_size, max_position, min_one_message)
    }

    /// `len` bytes at `position` of the `.log` as a [`FileSlice`] ([`FileRecords::slice`]).
    ///
    /// [`FileRecords::slice`]: crate::FileRecords::slice
    pub(crate) fn slice(&self, position: u64, len: usize) -> FileSlice {
        self.log.slice(position, len)
    }

    /// Kafka's `LogSegment.fetchUpperBoundOffset`: the offset of the first offset-index entry at
    /// or after byte `position + fetch_size`, if any (the upper bound of the aborted
    /// transactions a fetch of `fetch_size` bytes from `position` returns).
    pub fn fetch_upper_bound_offset(
        &self,
        offset: i64,
        position: u64,
        fetch_size: usize,
    ) -> Option<i64> {
        self.view()
            .fetch_upper_bound_offset(offset, position, fetch_size)
    }

    /// Kafka's `readNextOffset`: the offset after the last batch (the base offset if empty).
    pub fn read_next_offset(&self) -> Result<i64> {
        let from = u64::from(self.offset_index.last_entry().position.0);
        let mut next = self.base_offset;
        for h in self.log.headers_from(from) {
            next = h?.next_offset();
        }
        Ok(next)
    }

    /// Kafka's `hasOverflow`: the segment holds an offset that does not fit 32 bits relative to
    /// its base (possible in segments written by old Kafka versions).
    pub fn has_overflow(&self) -> Result<bool> {
        let next = self.read_next_offset()?;
        Ok(next > self.base_offset && !self.can_convert_to_relative_offset(next - 1))
    }

    /// Kafka's `findOffsetByTimestamp`: the first record with timestamp `>= timestamp` and
    /// offset `>= starting_offset`, starting the scan from the time and offset indexes.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        self.view()
            .find_offset_by_timestamp(timestamp, starting_offset)
    }

    /// Kafka's `MAX_TIMESTAMP` lookup in this segment (KIP-734): the first batch from the
    /// offset-index entry of [`Self::offset_of_max_timestamp_so_far`] whose max timestamp is
    /// [`Self::max_timestamp_so_far`], and in it the first record with that timestamp (Kafka's
    /// `offsetOfMaxTimestamp`), with the batch's leader epoch if it has one. `None` when no
    /// batch or record matches (an empty segment, a legacy batch).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        self.view().offset_of_max_timestamp()
    }

    /// The segment as the read functions see it ([`SegmentView`](super::view::SegmentView)):
    /// its `.log`, its mapped indexes, its max timestamp so far.
    pub(crate) fn view(&self) -> super::view::SegmentView<'_, OffsetIndex, TimeIndex> {
        super::view::SegmentView {
            base_offset: self.base_offset,
            log: &self.log,
            offsets: &self.offset_index,
            times: &self.time_index,
            max_timestamp_so_far: self.max_timestamp_so_far,
        }
    }
}
