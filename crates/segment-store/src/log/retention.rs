//! Truncation, the log start offset, retention, flush and close.

use std::path::{Path, PathBuf};

use super::{Inner, LocalLog, Slot};
use crate::error::{Result, SegmentError};
use crate::segment::{DeletedFiles, LogSegment};

impl LocalLog {
    /// Kafka's `asyncDeleteSegment`: the segment's files renamed `<name>.deleted` (and the
    /// directory synced) now, removed once `file.delete.delay.ms` ([`LogConfig::file_delete_delay_ms`](crate::LogConfig::file_delete_delay_ms))
    /// has passed on the clock, by [`Self::delete_expired_files`].
    pub(super) fn delete_segment(&self, seg: LogSegment) -> Result<()> {
        let deleted = seg.mark_deleted()?;
        self.defer_removal(deleted)
    }

    /// Queues `deleted` for removal `file.delete.delay.ms` from now (at once if that is `0`).
    pub(super) fn defer_removal(&self, deleted: DeletedFiles) -> Result<()> {
        if self.config.file_delete_delay_ms <= 0 {
            return deleted.remove();
        }
        let due = self
            .ctx
            .clock
            .now_ms()
            .saturating_add(self.config.file_delete_delay_ms);
        self.pending_deletes().push((due, deleted));
        Ok(())
    }

    /// Kafka's scheduled `delete-file` tasks: removes the `.deleted` files of segments removed at
    /// least `file.delete.delay.ms` ago on the clock. Returns the number of segments whose files
    /// went. Called by every retention pass; a log directory's own thread calls it too. At the
    /// first removal that fails the call stops with its error: that segment's files stay
    /// `.deleted` (a loader removes them at the next open, as after a crash) and the segments not
    /// reached wait for the next call.
    pub fn delete_expired_files(&self) -> Result<usize> {
        let now = self.ctx.clock.now_ms();
        self.remove_pending(|due| due <= now)
    }

    /// The base offsets of the segments whose `.deleted` files wait for their removal.
    pub fn pending_deleted_segments(&self) -> Vec<i64> {
        self.pending_deletes()
            .iter()
            .map(|(_, d)| d.base_offset())
            .collect()
    }

    fn remove_pending(&self, expired: impl Fn(i64) -> bool) -> Result<usize> {
        let mut taken: Vec<(i64, DeletedFiles)> = {
            let mut pending = self.pending_deletes();
            let (now, later) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|(due, _)| expired(*due));
            *pending = later;
            now
        };
        let mut removed = 0;
        while let Some((_, files)) = taken.pop() {
            if let Err(e) = files.remove() {
                // Not removed: the rest waits for the next call (this one's files are as a crash
                // would leave them, `.deleted`, which a loader removes).
                let mut pending = self.pending_deletes();
                pending.extend(taken);
                pending.sort_by_key(|(due, _)| *due);
                return Err(e);
            }
            removed += 1;
        }
        Ok(removed)
    }

    fn pending_deletes(&self) -> std::sync::MutexGuard<'_, Vec<(i64, DeletedFiles)>> {
        self.pending_deletes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kafka's `truncateTo`: removes every batch from the one containing `target` on (which must
    /// be a batch boundary). A negative target is [`SegmentError::InvalidTruncation`]; a target at
    /// or past the log end offset is a no-op. Unlike Kafka, the cut is synced at once (the later
    /// segments' deletions are durable too). Returns whether anything was removed.
    pub fn truncate_to(&self, target: i64) -> Result<bool> {
        if target < 0 {
            return Err(SegmentError::InvalidTruncation {
                path: self.dir.clone(),
                target,
                current: self.log_end_offset(),
            });
        }
        let mut inner = self.write_inner();
        if target >= inner.log_end_offset {
            return Ok(false);
        }
        let first_base = inner.segments.keys().next().copied().unwrap_or(0);
        if first_base > target {
            self.begin_truncation();
            self.truncate_fully_locked(&mut inner, target)?;
            return Ok(true);
        }
        let later: Vec<i64> = inner
            .segments
            .range(target + 1..)
            .map(|(&b, _)| b)
            .collect();
        // Deleting syncs the directory, which makes the names of segments rolled since the last
        // flush durable too: flush the kept segments' data first, or a crash could keep an empty
        // later segment after an older one whose tail was lost (a gap in the offsets).
        if !later.is_empty() && inner.recovery_point < target {
            let from = inner
                .segments
                .range(..=inner.recovery_point)
                .next_back()
                .map_or(i64::MIN, |(&b, _)| b);
            let kept: Vec<i64> = inner
                .segments
                .range(from..=target)
                .map(|(&b, _)| b)
                .collect();
            for base in kept {
                self.seg(&inner, base)?.flush()?;
                self.trim_cache();
            }
        }
        // Nothing is cut before this point: readers read on during the flushes above.
        self.begin_truncation();
        // Newest first: a crash part-way leaves a contiguous prefix of segments, never a gap
        // that a later segment's base offset would paper over.
        for b in later.into_iter().rev() {
            if let Some(slot) = inner.segments.remove(&b) {
                self.delete_segment(slot.into_segment(self, b)?)?;
            }
        }
        let cut = self.active_mut(&mut inner)?.truncate_to(target)? > 0;
        inner.log_end_offset = target;
        inner.log_start_offset = inner.log_start_offset.min(target);
        inner.truncated_to(target);
        inner.mark_dir_dirty();
        // Readers go on from the truncated log while the cut is synced.
        inner.publish();
        if cut {
            // The cut is made durable at once. Left to the page cache, a crash could keep the
            // cut bytes while a later write at their place survives (an unsynced truncation
            // undone under a new batch: two histories in one file, which producer state cannot
            // replay), or keep them under a segment rolled later, below the recovery point
            // (overlapping offsets).
            self.active_mut(&mut inner)?.flush()?;
        }
        self.trim_cache();
        Ok(true)
    }

    /// Kafka's `truncateFullyAndStartAt`: deletes every segment and starts an empty one at
    /// `new_offset`, which becomes the log start and end offset.
    pub fn truncate_fully_and_start_at(&self, new_offset: i64) -> Result<()> {
        let mut inner = self.write_inner();
        self.truncate_fully_locked(&mut inner, new_offset)
    }

    /// [`Self::truncate_fully_and_start_at`] that destroys nothing: every non-empty segment is
    /// moved into `quarantine_dir` (empty ones, holding no data, are deleted), then the log starts
    /// empty at `new_offset`. For a loader whose log start checkpoint lies above the log end (Kafka
    /// deletes every segment there). Returns the moved files.
    pub fn quarantine_fully_and_start_at(
        &self,
        new_offset: i64,
        quarantine_dir: &Path,
    ) -> Result<Vec<PathBuf>> {
        let mut inner = self.write_inner();
        self.begin_truncation();
        let mut moved = Vec::new();
        for (base, slot) in inner.segments.take() {
            let empty = slot.size() == 0;
            let seg = slot.into_segment(self, base)?;
            if empty {
                self.delete_segment(seg)?;
            } else {
                moved.extend(seg.move_to(quarantine_dir)?);
            }
        }
        self.opened().clear();
        self.start_empty_at(&mut inner, new_offset)?;
        Ok(moved)
    }

    fn truncate_fully_locked(&self, inner: &mut Inner, new_offset: i64) -> Result<()> {
        self.begin_truncation();
        for (base, slot) in inner.segments.take() {
            self.delete_segment(slot.into_segment(self, base)?)?;
        }
        self.opened().clear();
        self.start_empty_at(inner, new_offset)
    }

    /// One empty segment at `new_offset`, which becomes the log start, end and recovery point
    /// (the segments are gone already).
    fn start_empty_at(&self, inner: &mut Inner, new_offset: i64) -> Result<()> {
        let seg = LogSegment::create(&self.ctx, &self.dir, new_offset)?;
        inner.segments.insert(new_offset, Slot::active(seg));
        inner.log_start_offset = new_offset;
        inner.log_end_offset = new_offset;
        inner.recovery_point = new_offset;
        inner.mark_dir_dirty();
        Ok(())
    }

    /// Kafka's `maybeIncrementLogStartOffset`: raises the log start offset (never lowers it).
    /// Above the log end offset is [`SegmentError::OffsetOutOfRange`]. Segments wholly below it
    /// are deleted by the next [`Self::delete_old_segments`].
    pub fn increment_log_start_offset(&self, new_start: i64) -> Result<bool> {
        let mut inner = self.write_inner();
        if new_start > inner.log_end_offset {
            return Err(SegmentError::OffsetOutOfRange {
                offset: new_start,
                log_start_offset: inner.log_start_offset,
                log_end_offset: inner.log_end_offset,
            });
        }
        if new_start > inner.log_start_offset {
            inner.log_start_offset = new_start;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Kafka's `deleteOldSegments`: deletes, oldest first, segments that breach retention by time
    /// (`now - largest timestamp > retention.ms`), by size (total size minus the segment still
    /// `>= retention.bytes`) or lie wholly below the log start offset (the next segment's base
    /// `<= log start offset`). Deletion stops at the first segment that breaches nothing, never
    /// passes `high_watermark` (a segment is deletable only if the next base, or the log end
    /// offset for the last, is `<= high_watermark`) and never deletes an empty active segment;
    /// if every segment goes, a new empty one is rolled first. Returns the number deleted.
    pub fn delete_old_segments(&self, high_watermark: i64) -> Result<usize> {
        self.delete_old_segments_with(high_watermark, &mut |_| Ok::<(), SegmentError>(()))
    }

    /// [`Self::delete_old_segments`], calling `on_roll(new_base)` after rolling the new empty
    /// segment that replaces them all and before deleting any (Kafka's `roll`, where the caller
    /// takes the producer snapshot named after the new base).
    pub fn delete_old_segments_with<E: From<SegmentError>>(
        &self,
        high_watermark: i64,
        on_roll: &mut dyn FnMut(i64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E> {
        self.delete_expired_files()?;
        let now = self.ctx.clock.now_ms();
        let mut inner = self.write_inner();
        let mut total = 0usize;
        // Kafka runs the three predicates one after the other.
        for rule in [Rule::Time, Rule::Size, Rule::StartOffset] {
            total += self.delete_by_rule(&mut inner, rule, now, high_watermark, on_roll)?;
        }
        Ok(total)
    }

    fn delete_by_rule<E: From<SegmentError>>(
        &self,
        inner: &mut Inner,
        rule: Rule,
        now: i64,
        hw: i64,
        on_roll: &mut dyn FnMut(i64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E> {
        let total_size: u64 = inner.segments.values().map(Slot::size).sum();
        let mut size_diff = match rule {
            Rule::Size if self.config.retention_bytes >= 0 => {
                let r = self.config.retention_bytes as u64;
                if total_size < r {
                    return Ok(0);
                }
                total_size - r
            }
            Rule::Size => return Ok(0),
            Rule::Time if self.config.retention_ms < 0 => return Ok(0),
            _ => 0,
        };
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        let mut deletable = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let Some(slot) = inner.segments.get(&base) else {
                break;
            };
            let size = slot.size();
            let next = bases.get(i + 1).copied();
            let upper = next.unwrap_or(inner.log_end_offset);
            let last_and_empty = next.is_none() && size == 0;
            let breach = match rule {
                Rule::Time => {
                    let largest = self.seg(inner, base)?.largest_timestamp();
                    self.trim_cache();
                    now.saturating_sub(largest) > self.config.retention_ms
                }
                Rule::Size => {
                    if size_diff >= size {
                        size_diff -= size;
                        true
                    } else {
                        false
                    }
                }
                Rule::StartOffset => next.is_some_and(|n| n <= inner.log_start_offset),
            };
            if hw >= upper && breach && !last_and_empty {
                deletable.push(base);
            } else {
                break;
            }
        }
        if deletable.is_empty() {
            return Ok(0);
        }
        if deletable.len() == inner.segments.len() {
            let base = self.roll_locked(inner, None)?;
            on_roll(base)?;
            // The new segment's name durable before any old one is renamed away: a crash that
            // kept a rename but not the creation would leave no segment at all, and the log
            // would restart at offset 0 below offsets it had handed out.
            self.ctx.storage.sync_dir(&self.dir)?;
        }
        // Entries of the directory go (and readers combining two reads see a new layout),
        // counted before the first, so that a removal that fails part-way is counted too.
        inner.mark_segments_removed();
        for &base in &deletable {
            if let Some(slot) = inner.segments.remove(&base) {
                self.delete_segment(slot.into_segment(self, base)?)?;
            }
        }
        if let Some(&first) = inner.segments.keys().next() {
            inner.log_start_offset = inner.log_start_offset.max(first);
        }
        self.trim_cache();
        Ok(deletable.len())
    }

    /// Kafka's `flush(offset)`: flushes the segments holding offsets in
    /// `[recovery point, up_to_offset)` (and the directory, if segments were created or deleted
    /// since the last flush), then advances the recovery point to `up_to_offset` (capped at the
    /// log end offset).
    ///
    /// The fsyncs run under the writer's lock for reading, one segment at a time (readers never
    /// take it), and only the move of the recovery point takes it for writing.
    pub fn flush(&self, up_to_offset: i64) -> Result<()> {
        let (up_to, mut next, truncations) = {
            let inner = self.read_inner();
            let up_to = up_to_offset.min(inner.log_end_offset);
            if up_to <= inner.recovery_point {
                return Ok(());
            }
            let from = inner
                .segments
                .range(..=inner.recovery_point)
                .next_back()
                .map_or(i64::MIN, |(&b, _)| b);
            (up_to, from, self.truncations())
        };
        loop {
            let inner = self.read_inner();
            let Some(base) = inner.segments.range(next..up_to).next().map(|(&b, _)| b) else {
                break;
            };
            self.seg(&inner, base)?.flush()?;
            drop(inner);
            // Segments opened only to be flushed are closed as the flush goes.
            self.trim_cache();
            next = base.saturating_add(1);
        }
        let dir_changes = {
            let inner = self.read_inner();
            if inner.dir_dirty {
                self.ctx.storage.sync_dir(&self.dir)?;
            }
            inner.dir_changes
        };
        let mut inner = self.write_inner();
        if inner.dir_changes == dir_changes {
            // No entry of the directory changed since its sync.
            inner.dir_dirty = false;
        }
        if self.truncations() == truncations {
            // A truncation beside the flush may have replaced what it synced: the recovery point
            // then stays (the next flush moves it).
            inner.recovery_point = inner.recovery_point.max(up_to.min(inner.log_end_offset));
        }
        Ok(())
    }

    pub(super) fn flush_locked(&self, inner: &mut Inner, up_to_offset: i64) -> Result<()> {
        let up_to = up_to_offset.min(inner.log_end_offset);
        if up_to <= inner.recovery_point {
            return Ok(());
        }
        let from = inner
            .segments
            .range(..=inner.recovery_point)
            .next_back()
            .map_or(i64::MIN, |(&b, _)| b);
        let bases: Vec<i64> = inner.segments.range(from..up_to).map(|(&b, _)| b).collect();
        for base in bases {
            self.seg(inner, base)?.flush()?;
            // Segments opened only to be flushed are closed as the flush goes.
            self.trim_cache();
        }
        if inner.dir_dirty {
            self.ctx.storage.sync_dir(&self.dir)?;
            inner.dir_dirty = false;
        }
        inner.recovery_point = up_to;
        Ok(())
    }

    /// Flushes everything and closes every segment (trimming indexes).
    pub fn close(self) -> Result<()> {
        self.close_with(true)
    }

    /// [`Self::close`] without any flush: for a caller that makes the whole file system durable
    /// afterwards with one [`crate::io::Storage::sync_filesystem`] (a log directory closing
    /// many partitions). Until then nothing written since the last flush is durable.
    pub fn close_unsynced(self) -> Result<()> {
        self.close_with(false)
    }

    fn close_with(self, sync: bool) -> Result<()> {
        self.close_shared(sync)
    }

    /// [`Self::close`] (`sync`) or [`Self::close_unsynced`] through a shared reference, for a
    /// log that readers on other threads may still hold: its segments are closed, and every
    /// later read or write fails with [`SegmentError::Closed`].
    pub fn close_shared(&self, sync: bool) -> Result<()> {
        let mut inner = self.write_inner();
        if inner.closed {
            return Ok(());
        }
        if sync {
            // Segments released since their last write are flushed through a handle opened for it.
            let end = inner.log_end_offset;
            self.flush_locked(&mut inner, end)?;
        }
        inner.closed = true;
        let segments = inner.segments.take();
        self.opened().clear();
        for (_, slot) in segments {
            // A segment not open has nothing to close (its indexes were trimmed when it was
            // released) nor to flush (flushed when it was released or before: see `flush`).
            match slot {
                Slot::Active { seg, .. } => {
                    if let Some(seg) = seg.into_inner() {
                        seg.close_with(sync)?;
                    }
                }
                // Closed when the last reader holding it lets go (sealed at its roll: its
                // indexes trimmed and synced then). A transaction-index entry written into it
                // since (a marker's, rarely) is synced here.
                Slot::Sealed(s) => {
                    if let (true, Some(seg)) = (sync, s.close()) {
                        seg.flush()?;
                    }
                }
            }
        }
        // The `.deleted` files of removed segments go with the log: no reader is left to need them.
        self.remove_pending(|_| true)?;
        // Closing changes no directory entry (the indexes are trimmed in place): the directory
        // is synced only when an entry changed since the last sync.
        if sync && inner.dir_dirty {
            self.ctx.storage.sync_dir(&self.dir)?;
            inner.dir_dirty = false;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Time,
    Size,
    StartOffset,
}
