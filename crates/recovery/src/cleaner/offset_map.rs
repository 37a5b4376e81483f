//! Kafka's `SkimpyOffsetMap`: a fixed-size open-addressing table of (MD5 of key, offset) slots.
//!
//! The map holds `memory / 24` slots (16 digest bytes + an 8-byte offset each) and is never
//! grown: memory is what `log.cleaner.dedupe.buffer.size / log.cleaner.threads` allows. The
//! cleaner stops filling it at `slots * log.cleaner.io.buffer.load.factor` entries, which is where
//! a dirty section too large for one pass is split. Two keys with the same digest are the same
//! key here, as in Kafka.
#![allow(
    clippy::indexing_slicing,
    reason = "fixed-size digests and slots indexed below their length, checked where computed"
)]

use super::md5::md5;

/// Bytes of a slot: the digest, then the offset (Kafka's `bytesPerEntry` for MD5).
pub const BYTES_PER_ENTRY: usize = 16 + 8;

/// The offset map of one cleaner thread.
#[derive(Debug)]
pub struct OffsetMap {
    bytes: Vec<u8>,
    slots: usize,
    entries: usize,
    latest_offset: i64,
}

impl OffsetMap {
    /// A map over `memory` bytes (`memory / 24` slots).
    pub fn new(memory: usize) -> Self {
        let slots = memory / BYTES_PER_ENTRY;
        OffsetMap {
            bytes: vec![0; slots * BYTES_PER_ENTRY],
            slots,
            entries: 0,
            latest_offset: -1,
        }
    }

    /// Kafka's sizing: `min(dedupe_buffer_size / threads, i32::MAX)` bytes.
    pub fn memory_for(dedupe_buffer_size: u64, threads: u32) -> usize {
        let per = dedupe_buffer_size / u64::from(threads.max(1));
        usize::try_from(per.min(i32::MAX as u64)).unwrap_or(i32::MAX as usize)
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Distinct keys put since the last [`Self::clear`].
    pub fn size(&self) -> usize {
        self.entries
    }

    /// The last offset put, or the one set by [`Self::update_latest_offset`] (`-1` when clear).
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    /// Sets the latest offset (the cleaner moves it to the end of each batch and segment read).
    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = offset;
    }

    /// Empties the map.
    pub fn clear(&mut self) {
        self.entries = 0;
        self.latest_offset = -1;
        self.bytes.fill(0);
    }

    /// Fraction of slots in use.
    pub fn utilization(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            self.entries as f64 / self.slots as f64
        }
    }

    /// Kafka's `positionOf`: the first 4 digest bytes, then sliding 4-byte windows, then linear.
    fn position_of(&self, hash: &[u8; 16], attempt: usize) -> usize {
        let at = attempt.min(12);
        let word = i32::from_be_bytes([hash[at], hash[at + 1], hash[at + 2], hash[at + 3]]);
        let extra = attempt.saturating_sub(12) as i32;
        let probe = word.wrapping_add(extra);
        // Kafka's Utils.abs: i32::MIN maps to 0, otherwise the absolute value.
        let abs = if probe == i32::MIN { 0 } else { probe.abs() } as usize;
        (abs % self.slots) * BYTES_PER_ENTRY
    }

    fn is_empty_at(&self, pos: usize) -> bool {
        self.bytes[pos..pos + BYTES_PER_ENTRY]
            .iter()
            .all(|b| *b == 0)
    }

    /// Records `offset` as the newest offset of `key`. Refused (false) when a new key would need
    /// a slot and none is free.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        if self.entries >= self.slots {
            return false;
        }
        let hash = md5(key);
        let mut attempt = 0;
        let mut pos = self.position_of(&hash, attempt);
        while !self.is_empty_at(pos) {
            if self.bytes[pos..pos + 16] == hash {
                self.bytes[pos + 16..pos + 24].copy_from_slice(&offset.to_be_bytes());
                self.latest_offset = offset;
                return true;
            }
            attempt += 1;
            pos = self.position_of(&hash, attempt);
        }
        self.bytes[pos..pos + 16].copy_from_slice(&hash);
        self.bytes[pos + 16..pos + 24].copy_from_slice(&offset.to_be_bytes());
        self.latest_offset = offset;
        self.entries += 1;
        true
    }

    /// The newest offset recorded for `key`, `-1` if none.
    pub fn get(&self, key: &[u8]) -> i64 {
        if self.slots == 0 {
            return -1;
        }
        let hash = md5(key);
        let max_attempts = self.slots + 12;
        for attempt in 0..max_attempts {
            let pos = self.position_of(&hash, attempt);
            if self.is_empty_at(pos) {
                return -1;
            }
            if self.bytes[pos..pos + 16] == hash {
                let mut o = [0u8; 8];
                o.copy_from_slice(&self.bytes[pos + 16..pos + 24]);
                return i64::from_be_bytes(o);
            }
        }
        -1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_offset_per_key_and_fixed_capacity() {
        let mut m = OffsetMap::new(10 * BYTES_PER_ENTRY + 5);
        assert_eq!(m.slots(), 10);
        for i in 0..10i64 {
            assert!(m.put(format!("k{i}").as_bytes(), i));
            if i == 8 {
                assert!(m.put(b"k3", 42), "an existing key is overwritten in place");
                assert_eq!(m.size(), 9);
            }
        }
        assert_eq!(m.size(), 10);
        assert!(!m.put(b"new", 50), "no free slot for a new key");
        assert_eq!(m.get(b"k3"), 42);
        assert_eq!(m.get(b"k9"), 9);
        assert_eq!(m.get(b"absent"), -1);
        assert_eq!(m.latest_offset(), 9, "the last put");
        m.clear();
        assert_eq!((m.size(), m.get(b"k3"), m.latest_offset()), (0, -1, -1));
    }

    #[test]
    fn kafka_sizing() {
        // Kafka's default: 128 MiB dedupe buffer over one thread.
        let mem = OffsetMap::memory_for(128 * 1024 * 1024, 1);
        assert_eq!(mem / BYTES_PER_ENTRY, 5_592_405);
        assert_eq!(OffsetMap::memory_for(u64::MAX, 1), i32::MAX as usize);
    }
}
