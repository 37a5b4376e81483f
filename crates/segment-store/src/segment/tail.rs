//! The active segment's tail as readers without a lock see it (`log/publish.rs`): the segment
//! holds the [`ActiveTail`] it last published and pushes each append's index entries into it.

use std::sync::Arc;

use super::LogSegment;
use crate::log::publish::{ActiveTail, TailState};

impl LogSegment {
    /// Publishes this segment as the active one: a new [`ActiveTail`] holding its offset- and
    /// time-index entries, its size and max timestamp, made at truncation count `truncations`.
    /// Appends then push their entries into it and publish it again.
    pub(crate) fn publish_tail(&mut self, truncations: u64) -> Arc<ActiveTail> {
        let tail = ActiveTail::new(TailState::default(), truncations);
        for e in (0..self.offset_index.entries()).filter_map(|n| self.offset_index.entry(n)) {
            tail.push_offset_entry(self.relative(e.offset), e.position.0);
        }
        for e in (0..self.time_index.entries()).filter_map(|n| self.time_index.entry(n)) {
            tail.push_time_entry(e.timestamp, self.relative(e.offset));
        }
        let tail = Arc::new(tail);
        self.tail = Some(Arc::clone(&tail));
        self.publish_state();
        tail
    }

    /// The tail this segment publishes to, while it is the active one.
    pub(crate) fn tail(&self) -> Option<&Arc<ActiveTail>> {
        self.tail.as_ref()
    }

    /// Publishes the size and max timestamp with the entries pushed so far.
    pub(super) fn publish_state(&self) {
        if let Some(tail) = &self.tail {
            tail.publish(
                self.size(),
                self.max_timestamp_so_far.timestamp,
                self.max_timestamp_so_far.offset,
            );
        }
    }

    /// `offset` relative to the base offset, as the indexes hold it (their entries fit 32 bits).
    pub(super) fn relative(&self, offset: i64) -> u32 {
        u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX)
    }
}
