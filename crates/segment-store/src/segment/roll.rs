//! Rolling a segment, its index maintenance, transaction index, sanity check and truncation.

use super::{LogSegment, RollParams, RollReason};
use crate::error::Result;
use crate::index::{AbortedTxn, TxnIndexSearchResult};

impl LogSegment {
    fn load_first_batch_timestamp(&mut self) -> Result<()> {
        if self.rolling_based_timestamp.is_none() {
            if let Some(h) = self.log.headers_from(0).next() {
                self.rolling_based_timestamp = Some(h?.max_timestamp);
            }
        }
        Ok(())
    }

    fn time_waited_for_roll(&mut self, now_ms: i64, message_timestamp: i64) -> Result<i64> {
        self.load_first_batch_timestamp()?;
        Ok(match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => message_timestamp.saturating_sub(ts),
            _ => now_ms.saturating_sub(self.created_ms),
        })
    }

    /// Kafka's `shouldRoll`, naming the first condition that holds.
    pub fn should_roll(&mut self, p: &RollParams) -> Result<Option<RollReason>> {
        let reached_roll_ms = self.time_waited_for_roll(p.now_ms, p.max_timestamp_in_messages)?
            > p.max_segment_ms.saturating_sub(p.roll_jitter_ms);
        let size = i128::from(self.size());
        Ok(
            if size > i128::from(p.max_segment_bytes) - i128::from(p.messages_size) {
                Some(RollReason::Size)
            } else if size > 0 && reached_roll_ms {
                Some(RollReason::Time)
            } else if self.offset_index.is_full() {
                Some(RollReason::OffsetIndexFull)
            } else if self.time_index.is_full() {
                Some(RollReason::TimeIndexFull)
            } else if !self.can_convert_to_relative_offset(p.max_offset_in_messages) {
                Some(RollReason::OffsetOverflow)
            } else {
                None
            },
        )
    }

    pub(super) fn force_final_time_index_entry(&mut self) -> Result<()> {
        self.time_index.maybe_append(
            self.max_timestamp_so_far.timestamp,
            self.max_timestamp_so_far.offset,
            true,
        )?;
        Ok(())
    }

    /// Kafka's `onBecomeInactiveSegment`: writes the final time-index entry (the max timestamp
    /// so far), trims both indexes to their entries, and (on a real file system) maps the `.log`
    /// read-only so later reads are zero-copy.
    pub fn on_become_inactive_segment(&mut self) -> Result<()> {
        self.tail = None;
        // Slices of the tail read through the handle from now on; the sealed map below takes
        // the file's lock.
        self.log.retire_tail_map();
        self.force_final_time_index_entry()?;
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        // The trimmed indexes durable at once (Kafka leaves them to the next flush, which skips
        // a segment already below the recovery point): a segment below the recovery point is
        // trusted after a crash, and an index that kept its preallocated length there would
        // bring back, as entries, bytes of a truncated past (found by the weak crash model).
        self.offset_index.sync()?;
        self.time_index.sync()?;
        self.map_log()
    }

    /// Maps the `.log` read-only if the storage is a real file system (a no-op otherwise).
    pub fn map_log(&mut self) -> Result<()> {
        if self.ctx.storage.supports_mmap() {
            self.log.map_read_only(&self.ctx.lock)?;
        }
        Ok(())
    }

    /// Whether an offset or time index file is longer than `max` (`segment.index.bytes`): its
    /// entries could not fit when it is resized to `max`.
    pub(crate) fn indexes_oversized(&self, max: u64) -> bool {
        self.offset_index.length() > max || self.time_index.length() > max
    }

    /// Removes every offset and time index entry (Kafka's `reset` of both, as recovery does
    /// before rebuilding them): for indexes that cannot be resized as they are.
    pub(crate) fn reset_offset_and_time_indexes(&mut self) -> Result<()> {
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.republish_tail();
        Ok(())
    }

    /// Resizes both mapped indexes (e.g. back to `max_index_size` when a segment becomes the
    /// active one again after loading).
    pub fn resize_indexes(&mut self, size: u64) -> Result<()> {
        self.offset_index.resize(size)?;
        self.time_index.resize(size)?;
        Ok(())
    }

    /// Kafka's `updateTxnIndex` for an aborted transaction: appends it to the transaction index.
    pub fn update_txn_index(&mut self, aborted: &AbortedTxn) -> Result<()> {
        self.txn_index.append(aborted)?;
        self.publish_txn_index();
        Ok(())
    }

    /// Aborted transactions overlapping `[fetch_offset, upper_bound_offset)`.
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<TxnIndexSearchResult> {
        self.txn_index
            .collect_aborted_txns(fetch_offset, upper_bound_offset)
    }

    /// Kafka's `sanityCheck`: the offset, time and transaction index checks.
    pub fn sanity_check(&self) -> Result<()> {
        self.offset_index.sanity_check()?;
        self.time_index.sanity_check()?;
        self.txn_index.sanity_check()
    }

    /// Kafka's batch-aligned `truncateTo`: removes every batch from the one containing `offset`
    /// on, truncates all three indexes to `offset`, resizes the mapped indexes back to their max
    /// size (the segment becomes the active one) and returns the bytes cut from the `.log`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        let mapping = self.translate_offset(offset, 0)?;
        self.offset_index.truncate_to(offset);
        self.time_index.truncate_to(offset);
        self.txn_index.truncate_to(offset)?;
        let truncated = match mapping {
            Some(m) => self.log.truncate_to(m.position)?,
            None => 0,
        };
        self.become_active()?;
        // Kafka re-reads the largest timestamp after every truncation, walking the headers from
        // the last time-index entry to the end. When nothing was cut the largest timestamp cannot
        // have changed, and that walk can be the whole segment (a segment whose timestamps do not
        // grow has few time-index entries), one 61-byte read per batch: walk only after a cut.
        if truncated > 0 && self.max_timestamp_so_far.timestamp >= 0 {
            self.max_timestamp_so_far = self.read_largest_timestamp()?;
            self.republish_tail();
        }
        Ok(truncated)
    }

    /// The segment becomes the active one (the end of [`Self::truncate_to`], and all of it for a
    /// segment whose scan was just installed as active): indexes at their maximum size, the
    /// `.log` unmapped, no bytes since the last index entry.
    pub(crate) fn become_active(&mut self) -> Result<()> {
        self.offset_index
            .resize(self.offset_index.max_index_size())?;
        self.time_index.resize(self.time_index.max_index_size())?;
        self.log.unmap();
        if self.log.size() == 0 {
            self.created_ms = self.ctx.clock.now_ms();
            self.rolling_based_timestamp = None;
        }
        self.bytes_since_last_index_entry = 0;
        self.republish_tail();
        Ok(())
    }
}
