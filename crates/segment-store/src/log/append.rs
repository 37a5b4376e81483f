//! Appends and rolls.

use record_format::Batches;

use std::sync::Arc;

use super::list::SealedSlot;
use super::{AppendOutcome, Inner, LocalLog, Slot, Summary};
use crate::error::{Result, SegmentError};
use crate::file_name::FileKind;
use crate::segment::{LogOffsetMetadata, LogSegment, RollParams};

impl LocalLog {
    fn summarize(&self, records: &[u8]) -> Result<Summary> {
        let mut s: Option<Summary> = None;
        let mut it = Batches::new(records, 0);
        for e in &mut it {
            let e = e.map_err(|error| SegmentError::Format {
                path: self.dir.clone(),
                error,
            })?;
            let (max_ts, base) = match &e {
                record_format::LogEntry::V2(b) => (b.max_timestamp(), b.base_offset()),
                record_format::LogEntry::Legacy(l) => (-1, l.offset()),
            };
            let last = e.last_offset();
            match &mut s {
                None => {
                    s = Some(Summary {
                        first_offset: base,
                        last_offset: last,
                        max_timestamp: max_ts,
                        offset_of_max_timestamp: last,
                    })
                }
                Some(s) => {
                    if base <= s.last_offset {
                        return Err(SegmentError::UnexpectedAppendOffset {
                            path: self.dir.clone(),
                            first_offset: base,
                            expected: s.last_offset + 1,
                        });
                    }
                    s.last_offset = last;
                    if max_ts > s.max_timestamp {
                        s.max_timestamp = max_ts;
                        s.offset_of_max_timestamp = last;
                    }
                }
            }
        }
        if let Some(error) = it.incomplete_error() {
            return Err(SegmentError::Format {
                path: self.dir.clone(),
                error,
            });
        }
        s.ok_or_else(|| SegmentError::Format {
            path: self.dir.clone(),
            error: record_format::FormatError::new(
                record_format::FormatErrorKind::Truncated {
                    need: record_format::internals::RECORD_BATCH_OVERHEAD as u64,
                    have: records.len() as u64,
                },
                0,
            ),
        })
    }

    /// Appends whole batches whose offsets are already assigned (the first at or above the log
    /// end offset, increasing). Rolls first if the active segment meets a roll condition.
    pub fn append(&self, records: &[u8]) -> Result<AppendOutcome> {
        let s = self.summarize(records)?;
        if records.len() as u64 > self.config.segment_bytes {
            return Err(SegmentError::RecordsTooLarge {
                size: records.len() as u64,
                max: self.config.segment_bytes,
            });
        }
        let params = RollParams {
            max_segment_bytes: self.config.segment_bytes,
            max_segment_ms: self.config.segment_ms,
            roll_jitter_ms: self.config.segment_jitter_ms,
            max_timestamp_in_messages: s.max_timestamp,
            max_offset_in_messages: s.last_offset,
            messages_size: records.len() as u64,
            now_ms: self.ctx.clock.now_ms(),
        };
        let mut inner = self.write_inner();
        if s.first_offset < inner.log_end_offset {
            return Err(SegmentError::UnexpectedAppendOffset {
                path: self.dir.clone(),
                first_offset: s.first_offset,
                expected: inner.log_end_offset,
            });
        }
        let mut reason = self.active_mut(&mut inner)?.should_roll(&params)?;
        if reason.is_some() && inner.recovery_point < inner.log_end_offset {
            // The roll flushes first: done without the write lock, so that readers do not wait
            // for the disk; then the roll condition is looked at again.
            drop(inner);
            self.flush(i64::MAX)?;
            inner = self.write_inner();
            reason = self.active_mut(&mut inner)?.should_roll(&params)?;
        }
        let rolled = match reason {
            Some(r) => Some((self.roll_locked(&mut inner, Some(s.first_offset))?, r)),
            None => None,
        };
        let seg = self.active_mut(&mut inner)?;
        let position = seg.append(
            s.last_offset,
            s.max_timestamp,
            s.offset_of_max_timestamp,
            records,
        )?;
        let base = seg.base_offset();
        inner.log_end_offset = s.last_offset + 1;
        if rolled.is_some() {
            self.trim_cache();
        }
        Ok(AppendOutcome {
            first_offset: s.first_offset,
            last_offset: s.last_offset,
            max_timestamp: s.max_timestamp,
            position: LogOffsetMetadata {
                message_offset: s.first_offset,
                segment_base_offset: base,
                relative_position_in_segment: position,
            },
            rolled,
        })
    }

    /// Kafka's `roll`: flushes the log up to its end (the recovery point moves there), seals the
    /// active segment and starts a new one at `max(expected_next_offset, log end offset)`.
    /// Returns the new base offset.
    pub fn roll(&self, expected_next_offset: Option<i64>) -> Result<i64> {
        // Flushed without the write lock first (readers go on meanwhile); the roll's own flush
        // then has nothing left to write unless an append came in between.
        self.flush(i64::MAX)?;
        let mut inner = self.write_inner();
        self.roll_locked(&mut inner, expected_next_offset)
    }

    pub(super) fn roll_locked(
        &self,
        inner: &mut Inner,
        expected_next_offset: Option<i64>,
    ) -> Result<i64> {
        // Kafka flushes up to the new base at every roll (asynchronously). Here it is done
        // first: the next sync of the directory (a snapshot, a deletion, a flush) makes the new
        // segment's name durable, and an older segment whose tail a crash then lost would leave
        // a gap in the offsets below it. So only the active segment ever holds unflushed data
        // (a truncation is synced at once, see `truncate_to`).
        self.flush_locked(inner, inner.log_end_offset)?;
        let new_offset = expected_next_offset.unwrap_or(0).max(inner.log_end_offset);
        if let Some((&base, slot)) = inner.segments.iter().next_back() {
            if base == new_offset && slot.size() == 0 {
                // Kafka recreates the empty active segment.
                if let Some(old) = inner.segments.remove(&base) {
                    old.into_segment(self, base)?.delete()?;
                }
            } else if base >= new_offset {
                return Err(SegmentError::SegmentExists {
                    path: crate::file_name::segment_file_path(&self.dir, base, FileKind::Log),
                    base_offset: new_offset,
                });
            } else {
                self.active_mut(inner)?.on_become_inactive_segment()?;
                // Now sealed: shared with readers, and closed when others were read since.
                if let Some(Slot::Active { seg, size }) = inner.segments.remove(&base) {
                    let seg = seg.into_inner().map(|s| *s);
                    let size = seg.as_ref().map_or(size, LogSegment::size);
                    let slot = Arc::new(SealedSlot::new(base, size, seg));
                    if slot.is_open() {
                        self.note_opened(&slot);
                    }
                    inner.segments.insert(base, Slot::Sealed(slot));
                }
            }
        }
        let seg = LogSegment::create(&self.ctx, &self.dir, new_offset)?;
        inner.segments.insert(new_offset, Slot::active(seg));
        inner.mark_dir_dirty();
        Ok(new_offset)
    }
}
