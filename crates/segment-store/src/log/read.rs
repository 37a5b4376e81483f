//! Reads: batches from an offset, exact reads, offsets by timestamp.

use super::{floor_base, out_of_range, ExactFetch, ExactSlice, FetchData, Inner, LocalLog};
use crate::error::Result;
use crate::file_records::TimestampAndOffset;
use crate::segment::{CopyOrSlice, FetchDataInfo, LogOffsetMetadata, LogSegment, ReadBounds};

/// What [`LocalLog::exact_inner`] found: the answer's place, its bytes as `take` made them.
struct Exact<T> {
    fetch_offset_metadata: LogOffsetMetadata,
    data: Option<T>,
    first_entry_incomplete: bool,
    upper_bound_offset: i64,
}

impl LocalLog {
    /// Reads whole batches from the batch containing `start_offset`, at most `max_bytes` (at
    /// least one batch if `min_one_message`), crossing into later segments when the segment
    /// holding `start_offset` has nothing at or above it. `f` sees records borrowed from a sealed
    /// segment's map (zero-copy) or copied from the active segment, under the read lock.
    pub fn read_with<R>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        f: impl FnOnce(FetchDataInfo<'_>) -> R,
    ) -> Result<R> {
        let r = self.read_with_inner(start_offset, max_bytes, min_one_message, f);
        self.trim_after_read()?;
        r
    }

    fn read_with_inner<R>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        f: impl FnOnce(FetchDataInfo<'_>) -> R,
    ) -> Result<R> {
        let inner = self.read_inner();
        let end = inner.log_end_offset;
        out_of_range(&self.dir, &inner, start_offset)?;
        let empty_at_end = |base: i64, size: u64| FetchDataInfo {
            fetch_offset_metadata: LogOffsetMetadata {
                message_offset: end,
                segment_base_offset: base,
                relative_position_in_segment: size,
            },
            records: std::borrow::Cow::Borrowed(&[][..]),
            first_entry_incomplete: false,
        };
        let (active_base, active_size) = inner
            .segments
            .iter()
            .next_back()
            .map_or((0, 0), |(&b, s)| (b, s.size()));
        if start_offset == end {
            return Ok(f(empty_at_end(active_base, active_size)));
        }
        let floor = floor_base(&inner, start_offset)?;
        for &base in inner.segments.range(floor..).map(|(b, _)| b) {
            let seg = self.seg(&inner, base)?;
            if let Some(info) = seg.read(start_offset, max_bytes, None, min_one_message)? {
                return Ok(f(info));
            }
        }
        Ok(f(empty_at_end(active_base, active_size)))
    }

    /// Kafka's `LocalLog.read` exactly, bounded by `max_offset` (the log end for a follower, the
    /// high watermark or the last stable offset for consumers): the bytes Kafka's
    /// `LogSegment.read` returns from the segment holding `start_offset` (or the next one holding
    /// a batch at or after it), stopping at the byte position of the batch holding `max_offset`,
    /// at most `max_bytes` (at least the first batch with `min_one_message`), the last batch
    /// possibly cut short. `None` when no segment holds a batch at or after `start_offset` (Kafka
    /// then answers with no records and no aborted-transaction list). See [`ExactFetch`].
    pub fn read_exact(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
    ) -> Result<Option<ExactFetch>> {
        let r = self.exact_inner(
            start_offset,
            max_bytes,
            min_one_message,
            max_offset,
            |seg, b| seg.copy_or_slice(b),
        );
        self.trim_after_read()?;
        // Out of the lock: the active segment's bytes are read here, beside appends.
        let Some(e) = r? else {
            return Ok(None);
        };
        Ok(Some(ExactFetch {
            data: FetchData {
                fetch_offset_metadata: e.fetch_offset_metadata,
                records: e
                    .data
                    .map(CopyOrSlice::into_vec)
                    .transpose()?
                    .unwrap_or_default(),
                first_entry_incomplete: e.first_entry_incomplete,
            },
            upper_bound_offset: e.upper_bound_offset,
        }))
    }

    /// [`Self::read_exact`] without reading the bytes: the same range of the same segment, as a
    /// [`FileSlice`](crate::FileSlice) of its `.log` (Kafka's `LogSegment.read` returns such a
    /// slice of its `FileRecords`). The slice is `None` when the answer has no bytes. See
    /// [`ExactSlice`].
    pub fn slice_exact(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
    ) -> Result<Option<ExactSlice>> {
        let r = self.exact_inner(
            start_offset,
            max_bytes,
            min_one_message,
            max_offset,
            |seg, b| {
                Ok((
                    seg.slice(b.position, b.fetch_size),
                    seg.next_fetch_offset(b),
                ))
            },
        );
        self.trim_after_read()?;
        Ok(r?.map(|e| {
            let (slice, next_fetch_offset) = e.data.unzip();
            ExactSlice {
                fetch_offset_metadata: e.fetch_offset_metadata,
                slice: slice.filter(|s| !s.is_empty()),
                first_entry_incomplete: e.first_entry_incomplete,
                upper_bound_offset: e.upper_bound_offset,
                next_fetch_offset: next_fetch_offset.unwrap_or(start_offset),
            }
        }))
    }

    /// The one computation behind [`Self::read_exact`] and [`Self::slice_exact`]: finds the
    /// segment and the [`ReadBounds`] of Kafka's answer and has `take` turn them into its bytes
    /// (read or sliced), under the read lock. `data` is `None` when no segment was read (the
    /// fetch offset is at or past `max_offset`).
    fn exact_inner<T>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
        take: impl FnOnce(&LogSegment, &ReadBounds) -> Result<T>,
    ) -> Result<Option<Exact<T>>> {
        let inner = self.read_inner();
        let end = inner.log_end_offset;
        out_of_range(&self.dir, &inner, start_offset)?;
        let floor = floor_base(&inner, start_offset)?;
        let (bound_base, bound_position) = self.offset_position(&inner, max_offset.min(end))?;
        if start_offset >= max_offset {
            return Ok(Some(Exact {
                fetch_offset_metadata: LogOffsetMetadata {
                    message_offset: start_offset,
                    segment_base_offset: bound_base,
                    relative_position_in_segment: bound_position,
                },
                data: None,
                first_entry_incomplete: false,
                upper_bound_offset: start_offset,
            }));
        }
        let mut bases = inner.segments.range(floor..).map(|(&b, _)| b).peekable();
        while let Some(base) = bases.next() {
            let seg = self.seg(&inner, base)?;
            let max_position = match base.cmp(&bound_base) {
                std::cmp::Ordering::Less => seg.size(),
                std::cmp::Ordering::Equal => bound_position,
                // Past the bound's segment: Kafka reads nothing there (`maxPositionOpt` empty).
                std::cmp::Ordering::Greater => 0,
            };
            let Some(b) =
                seg.read_bounds(start_offset, max_bytes, Some(max_position), min_one_message)?
            else {
                continue;
            };
            let meta = b.fetch_offset_metadata;
            let upper_bound_offset = seg
                .fetch_upper_bound_offset(
                    meta.message_offset,
                    meta.relative_position_in_segment,
                    b.fetch_size,
                )
                .unwrap_or_else(|| bases.peek().copied().unwrap_or(end));
            return Ok(Some(Exact {
                fetch_offset_metadata: meta,
                data: Some(take(seg, &b)?),
                first_entry_incomplete: b.first_entry_incomplete,
                upper_bound_offset,
            }));
        }
        Ok(None)
    }

    /// Kafka's `convertToOffsetMetadataOrThrow`: the segment holding `offset` and the byte
    /// position of its batch holding it; the active segment's end for the log end offset (or an
    /// offset no batch holds).
    fn offset_position(&self, inner: &Inner, offset: i64) -> Result<(i64, u64)> {
        let (active_base, active_size) = match inner.segments.keys().next_back() {
            Some(&b) => (b, self.seg(inner, b)?.size()),
            None => (0, 0),
        };
        if offset >= inner.log_end_offset {
            return Ok((active_base, active_size));
        }
        let floor = inner
            .segments
            .range(..=offset)
            .next_back()
            .map_or(active_base, |(&b, _)| b);
        for &base in inner.segments.range(floor..).map(|(b, _)| b) {
            if let Some(p) = self.seg(inner, base)?.translate_offset(offset, 0)? {
                return Ok((base, p.position));
            }
        }
        Ok((active_base, active_size))
    }

    /// [`Self::read_with`] returning an owned copy.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
    ) -> Result<FetchData> {
        let r = self.read_owned_inner(start_offset, max_bytes, min_one_message);
        self.trim_after_read()?;
        let (fetch_offset_metadata, taken, first_entry_incomplete) = r?;
        // Out of the lock: the active segment's bytes are read here, beside appends.
        let mut records = taken
            .map(CopyOrSlice::into_vec)
            .transpose()?
            .unwrap_or_default();
        records.truncate(crate::file_records::whole_batches_len(&records));
        Ok(FetchData {
            fetch_offset_metadata,
            records,
            first_entry_incomplete,
        })
    }

    /// What [`Self::read`] takes under the read lock: where the read starts, its bytes copied
    /// from a map or as a slice to read after the lock ([`LogSegment::copy_or_slice`]), whether
    /// the first batch is incomplete. The same walk as [`Self::read_with`].
    fn read_owned_inner(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
    ) -> Result<(LogOffsetMetadata, Option<CopyOrSlice>, bool)> {
        let inner = self.read_inner();
        let end = inner.log_end_offset;
        out_of_range(&self.dir, &inner, start_offset)?;
        let (active_base, active_size) = inner
            .segments
            .iter()
            .next_back()
            .map_or((0, 0), |(&b, s)| (b, s.size()));
        let at_end = LogOffsetMetadata {
            message_offset: end,
            segment_base_offset: active_base,
            relative_position_in_segment: active_size,
        };
        if start_offset == end {
            return Ok((at_end, None, false));
        }
        let floor = floor_base(&inner, start_offset)?;
        for &base in inner.segments.range(floor..).map(|(b, _)| b) {
            let seg = self.seg(&inner, base)?;
            if let Some(b) = seg.read_bounds(start_offset, max_bytes, None, min_one_message)? {
                return Ok((
                    b.fetch_offset_metadata,
                    Some(seg.copy_or_slice(&b)?),
                    b.first_entry_incomplete,
                ));
            }
        }
        Ok((at_end, None, false))
    }

    /// Kafka's `fetchOffsetByTimestamp` for a real timestamp: the first record with timestamp
    /// `>= timestamp` at or after the log start offset, searching the first segment whose largest
    /// timestamp reaches it.
    pub fn fetch_offset_by_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        self.fetch_offset_by_timestamp_from(timestamp, i64::MIN)
    }

    /// Kafka's `MAX_TIMESTAMP` lookup (KIP-734): in the first segment with the largest
    /// max timestamp so far, the first record carrying it
    /// ([`LogSegment::offset_of_max_timestamp`](crate::LogSegment::offset_of_max_timestamp)).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        // In windows of segments, trimming between them: the lookup walks every segment and the
        // descriptors stay bounded.
        let mut best: Option<(i64, i64)> = None;
        let mut after = i64::MIN;
        loop {
            let inner = self.read_inner();
            let bases = inner.window_after(after);
            if bases.is_empty() {
                let found = match best {
                    Some((base, _)) => self.seg(&inner, base)?.offset_of_max_timestamp(),
                    None => Ok(None),
                };
                drop(inner);
                self.trim_after_read()?;
                return found;
            }
            for &base in &bases {
                let max = self.seg(&inner, base)?.max_timestamp_so_far();
                // The first segment with the largest (Kafka keeps the first on ties).
                if best.is_none_or(|(_, m)| max > m) {
                    best = Some((base, max));
                }
                after = base;
            }
            drop(inner);
            self.trim_after_read()?;
        }
    }

    /// [`Self::fetch_offset_by_timestamp`] from the segment after `after`.
    fn fetch_offset_by_timestamp_from(
        &self,
        timestamp: i64,
        after: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let mut after = after;
        loop {
            let inner = self.read_inner();
            let bases = inner.window_after(after);
            let Some(&last) = bases.last().filter(|_| after < i64::MAX) else {
                return Ok(None);
            };
            for base in bases {
                let seg = self.seg(&inner, base)?;
                if seg.largest_timestamp() >= timestamp {
                    let found = seg.find_offset_by_timestamp(timestamp, inner.log_start_offset);
                    drop(inner);
                    self.trim_after_read()?;
                    return found;
                }
            }
            drop(inner);
            self.trim_after_read()?;
            after = last;
        }
    }
}
