//! The leader-epoch cache of a partition (Kafka `LeaderEpochFileCache`), persisted in the
//! partition directory's `leader-epoch-checkpoint` (version 0, `epoch startOffset` lines; written
//! atomically by segment-store's [`LeaderEpochCheckpointFile`]).
//!
//! The cache maps each leader epoch to the first offset written in it, in increasing order of
//! both. Appends [`assign`](LeaderEpochFileCache::assign) an epoch when a batch carries a newer
//! one; truncating the log removes epochs from the end
//! ([`truncate_from_end`](LeaderEpochFileCache::truncate_from_end)); advancing the log start
//! offset trims epochs from the start
//! ([`truncate_from_start`](LeaderEpochFileCache::truncate_from_start)).
//!
//! Difference from Kafka: Kafka's `assign` also accepts an epoch *lower* than the latest (it then
//! drops every entry with a higher epoch or start offset). Appends only ever call it with a newer
//! epoch (`UnifiedLog` checks `epoch > latestEpoch` first), so here `assign` ignores anything that
//! is not newer than the latest entry or that starts before it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use segment_store::internals::LEADER_EPOCH_CHECKPOINT_FILE;
use segment_store::{EpochEntry, LeaderEpochCheckpointFile, SegmentError, Storage};

/// Kafka `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// Leader epoch → start offset, kept in memory and written to `leader-epoch-checkpoint` on every
/// change.
#[derive(Debug)]
pub struct LeaderEpochFileCache {
    entries: Vec<EpochEntry>,
    file: LeaderEpochCheckpointFile,
    /// What the checkpoint file durably holds (`None`: no file, or unknown after a failed
    /// write): a flush of the same entries writes nothing.
    on_disk: Option<Vec<EpochEntry>>,
}

impl LeaderEpochFileCache {
    /// Opens the cache of the partition in `dir`, reading `leader-epoch-checkpoint` if present.
    /// A missing file is an empty cache; a malformed one is an error.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> Result<Self, SegmentError> {
        let path = Self::path_in(dir);
        let file = LeaderEpochCheckpointFile::new(Arc::clone(&storage), &path);
        let on_disk = if storage.exists(&path)? {
            Some(file.read()?)
        } else {
            None
        };
        let mut cache = Self {
            entries: Vec::new(),
            file,
            on_disk: None,
        };
        // Keep only a well-ordered sequence, as `assign` would have built it.
        for e in on_disk.iter().flatten() {
            cache.push_if_newer(*e);
        }
        cache.on_disk = on_disk;
        Ok(cache)
    }

    /// `<dir>/leader-epoch-checkpoint`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(LEADER_EPOCH_CHECKPOINT_FILE)
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The latest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The earliest entry, if any.
    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// Kafka `assign(EpochEntry)`: nothing to do when `e` repeats the latest epoch at or after
    /// its start; otherwise the entries that would break monotonicity (from the latest back, while
    /// their epoch is `>= e.epoch` or their start `>= e.start_offset`) are dropped and `e` is
    /// appended (`maybeTruncateNonMonotonicEntries`).
    fn push_if_newer(&mut self, e: EpochEntry) -> bool {
        if e.epoch < 0 || e.start_offset < 0 {
            return false;
        }
        if let Some(last) = self.entries.last() {
            if e.epoch == last.epoch && e.start_offset >= last.start_offset {
                return false;
            }
        }
        while let Some(last) = self.entries.last() {
            if last.epoch >= e.epoch || last.start_offset >= e.start_offset {
                self.entries.pop();
            } else {
                break;
            }
        }
        self.entries.push(e);
        true
    }

    /// Records that `epoch` starts at `start_offset` as Kafka's `LeaderEpochFileCache.assign`
    /// does (see `push_if_newer`; negative values are ignored). Writes the checkpoint when
    /// something changed. Returns whether it did.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, SegmentError> {
        let changed = self.push_if_newer(EpochEntry {
            epoch,
            start_offset,
        });
        if changed {
            self.flush()?;
        }
        Ok(changed)
    }

    /// Kafka `truncateFromEnd(endOffset)`: removes the entries whose start offset is
    /// `>= end_offset` (after a log truncation to `end_offset`). Writes the checkpoint when
    /// something changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<bool, SegmentError> {
        if end_offset < 0 {
            return Ok(false);
        }
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        let changed = self.entries.len() != before;
        if changed {
            self.flush()?;
        }
        Ok(changed)
    }

    /// Kafka `truncateFromStart(startOffset)`: removes the entries wholly before `start_offset`;
    /// the entry covering it (the last one starting at or before it) is kept with its start
    /// moved up to `start_offset`. Writes the checkpoint when something changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<bool, SegmentError> {
        let Some(floor) = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset)
        else {
            return Ok(false);
        };
        let mut changed = floor > 0;
        self.entries.drain(..floor);
        if let Some(first) = self.entries.first_mut() {
            if first.start_offset < start_offset {
                first.start_offset = start_offset;
                changed = true;
            }
        }
        if changed {
            self.flush()?;
        }
        Ok(changed)
    }

    /// Kafka `endOffsetFor(requestedEpoch, logEndOffset)`: `(epoch, end offset)` where the end
    /// offset is the start of the first epoch above `requested` (or `log_end_offset` if
    /// `requested` is the latest) and `epoch` the largest known epoch `<= requested` (or
    /// `requested` itself when it is below every known epoch). Unknown (above the latest, or
    /// undefined): `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        end_offset_for(&self.entries, requested, log_end_offset)
    }

    /// Removes every entry (Kafka `clearAndFlush`).
    pub fn clear(&mut self) -> Result<(), SegmentError> {
        self.entries.clear();
        self.flush()
    }

    /// Writes the checkpoint file atomically, unless it already holds exactly these entries
    /// (Kafka writes it only on a change too; the file read at open or last written was made
    /// durable by its atomic write).
    pub fn flush(&mut self) -> Result<(), SegmentError> {
        if self.on_disk.as_deref() == Some(self.entries.as_slice()) {
            return Ok(());
        }
        self.on_disk = None;
        self.file.write(&self.entries)?;
        self.on_disk = Some(self.entries.clone());
        Ok(())
    }
}

/// Kafka `LeaderEpochFileCache.endOffsetFor` over `entries` (oldest first, increasing epochs and
/// start offsets); see [`LeaderEpochFileCache::end_offset_for`].
pub fn end_offset_for(entries: &[EpochEntry], requested: i32, log_end_offset: i64) -> (i32, i64) {
    if requested == UNDEFINED_EPOCH {
        return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    }
    if entries.last().map(|e| e.epoch) == Some(requested) {
        return (requested, log_end_offset);
    }
    let Some(higher) = entries.iter().find(|e| e.epoch > requested) else {
        return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    };
    match entries.iter().rev().find(|e| e.epoch <= requested) {
        Some(floor) => (floor.epoch, higher.start_offset),
        None => (requested, higher.start_offset),
    }
}

/// A copy of a log's leader epochs and end offset: answers `OffsetsForLeaderEpoch` as that log
/// did when it was taken (a source partition seen over the network, or a log that is about to
/// be changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochHistory {
    /// The epochs, oldest first.
    pub entries: Vec<EpochEntry>,
    /// The log end offset.
    pub log_end_offset: i64,
}

impl EpochHistory {
    /// The epochs and end offset of `log` now.
    pub fn of(log: &crate::PartitionLog) -> Self {
        Self {
            entries: log.leader_epoch_cache().entries().to_vec(),
            log_end_offset: log.log_end_offset(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segment_store::StdFs;

    fn pairs(c: &LeaderEpochFileCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    /// Kafka's `assign` drops the entries a new one would contradict
    /// (`maybeTruncateNonMonotonicEntries`): recovery meets this when a batch's leader epoch
    /// (outside the CRC) is damaged, found by differential recovery against Kafka 4.3.1.
    #[test]
    fn assign_drops_non_monotonic_entries_as_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochFileCache::open(Arc::new(StdFs), dir.path()).unwrap();
        assert!(c.assign(2, 10).unwrap());
        assert!(c.assign(4, 20).unwrap());
        assert!(c.assign(3, 15).unwrap(), "older epoch: the newer ones go");
        assert_eq!(pairs(&c), [(2, 10), (3, 15)]);
        assert!(
            c.assign(5, 12).unwrap(),
            "earlier start: the later entries go"
        );
        assert_eq!(pairs(&c), [(2, 10), (5, 12)]);
        assert!(c.assign(5, 11).unwrap(), "same epoch, earlier start");
        assert_eq!(pairs(&c), [(2, 10), (5, 11)]);
        assert!(c.assign(8193, 3).unwrap());
        assert_eq!(pairs(&c), [(8193, 3)]);
    }

    #[test]
    fn assign_truncate_and_end_offset_follow_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochFileCache::open(Arc::new(StdFs), dir.path()).unwrap();
        assert!(c.assign(2, 10).unwrap());
        assert!(!c.assign(2, 12).unwrap(), "same epoch, later start");
        assert!(c.assign(4, 20).unwrap());
        assert!(c.assign(6, 30).unwrap());
        assert_eq!(pairs(&c), [(2, 10), (4, 20), (6, 30)]);
        assert_eq!(c.end_offset_for(6, 99), (6, 99));
        assert_eq!(c.end_offset_for(5, 99), (4, 30));
        assert_eq!(c.end_offset_for(1, 99), (1, 10));
        assert_eq!(
            c.end_offset_for(7, 99),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert!(c.truncate_from_end(25).unwrap());
        assert_eq!(pairs(&c), [(2, 10), (4, 20)]);
        assert!(c.truncate_from_start(22).unwrap());
        assert_eq!(pairs(&c), [(4, 22)]);
        assert!(!c.truncate_from_start(5).unwrap());
        let reopened = LeaderEpochFileCache::open(Arc::new(StdFs), dir.path()).unwrap();
        assert_eq!(pairs(&reopened), [(4, 22)]);
        assert_eq!(
            std::fs::read_to_string(LeaderEpochFileCache::path_in(dir.path())).unwrap(),
            "0\n1\n4 22\n"
        );
    }
}
