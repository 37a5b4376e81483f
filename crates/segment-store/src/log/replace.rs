//! Sealed segments replaced by cleaned ones while the log is open (Kafka's
//! `LocalLog.replaceSegments`, which the log cleaner calls under the log's lock).

use std::sync::Arc;

use super::{LocalLog, Slot};
use crate::error::{Result, SegmentError};
use crate::file_name::{file_name, FileKind, TempSuffix};
use crate::io::OpenMode;
use crate::segment::{DeletedFiles, LogSegment};

/// The files of a segment, the `.log` last to appear and first to go.
const KINDS: [FileKind; 4] = [
    FileKind::TxnIndex,
    FileKind::TimeIndex,
    FileKind::Index,
    FileKind::Log,
];

impl LocalLog {
    /// Replaces the sealed segments at `old_bases` by the segment whose files a cleaning pass
    /// left as `.swap` files at `new_base` (the swap's commit point is behind: the `.swap` names
    /// are durable, so a crash from here on has the loader complete the swap). Under the segment
    /// list's write lock, so that no read copies from a segment while it goes: the replaced
    /// segments are closed, their files renamed `<name>.deleted` (removed `file.delete.delay.ms`
    /// later, as Kafka's `replaceSegments` does; a reader holding one reads on), the directory
    /// synced (so that no crash can leave them live beside the new segment), the `.swap` files
    /// renamed to their live names, and the new segment listed, closed (the next read opens it). Reads and appends wait for that
    /// one directory sync, as Kafka's wait for its `replaceSegments`. The directory is marked
    /// changed: the next flush syncs the renames.
    ///
    /// Refused, with nothing changed, for the active segment or a base that is not a segment.
    pub fn replace_segments(&self, new_base: i64, old_bases: &[i64]) -> Result<()> {
        let mut inner = self.write_inner();
        if inner.closed {
            return Err(SegmentError::Closed {
                dir: self.dir.clone(),
            });
        }
        let active = inner.segments.keys().next_back().copied();
        for &base in old_bases {
            let reason = if Some(base) == active {
                "it is the active segment"
            } else if !inner.segments.contains_key(&base) {
                "the log has no such segment"
            } else {
                continue;
            };
            return Err(SegmentError::NotReplaceable {
                dir: self.dir.clone(),
                base,
                reason,
            });
        }
        let storage = &self.ctx.storage;
        let log_swap = self
            .dir
            .join(file_name(new_base, FileKind::Log, Some(TempSuffix::Swap)));
        if !storage.exists(&log_swap)? {
            return Err(SegmentError::NotReplaceable {
                dir: self.dir.clone(),
                base: new_base,
                reason: "no cleaned segment was swapped in at this base",
            });
        }
        for &base in old_bases {
            // Unmapped and closed before their files go, once no reader holds them (readers
            // that still reach them load the list again).
            if let Some(Slot::Sealed(s)) = inner.segments.remove(&base) {
                self.opened().retain(|o| !Arc::ptr_eq(o, &s));
                drop(s.take(|| LogSegment::open(&self.ctx, &self.dir, base))?);
            }
        }
        inner.mark_segments_removed();
        let mut deleted = Vec::new();
        for &base in old_bases {
            let mut files = Vec::new();
            for kind in KINDS.iter().rev() {
                let live = self.dir.join(file_name(base, *kind, None));
                if storage.exists(&live)? {
                    let to = self
                        .dir
                        .join(file_name(base, *kind, Some(TempSuffix::Deleted)));
                    storage.rename(&live, &to)?;
                    files.push(to);
                }
            }
            deleted.push(DeletedFiles::new(base, storage.clone(), files));
        }
        storage.sync_dir(&self.dir)?;
        for kind in KINDS {
            let swap = self
                .dir
                .join(file_name(new_base, kind, Some(TempSuffix::Swap)));
            if storage.exists(&swap)? {
                storage.rename(&swap, &self.dir.join(file_name(new_base, kind, None)))?;
            }
        }
        let size = storage
            .open(
                &self.dir.join(file_name(new_base, FileKind::Log, None)),
                OpenMode::Read,
            )?
            .len()?;
        inner
            .segments
            .insert(new_base, Slot::sealed(new_base, size, None));
        drop(inner);
        for files in deleted {
            self.defer_removal(files)?;
        }
        Ok(())
    }
}
