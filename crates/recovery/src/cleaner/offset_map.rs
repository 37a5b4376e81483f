//! Kafka's `SkimpyOffsetMap`: a fixed-capacity table of (MD5 of key, offset) slots.
//!
//! The map has `memory / 24` slots (16 digest bytes + an 8-byte offset each) and never more: memory
//! is what `log.cleaner.dedupe.buffer.size / log.cleaner.threads` allows. The cleaner stops filling
//! it at `slots * log.cleaner.io.buffer.load.factor` entries, which is where a dirty section too
//! large for one pass is split. Two keys with the same digest are the same key here, as in Kafka.
//!
//! What the map answers is Kafka's (the newest offset per digest, the same capacity); where a
//! digest sits is not. The buffer is allocated zeroed (the operating system maps its pages when
//! they are first written) and the keys live in a prefix of it, a linear-probing table that is
//! never more than half full until it spans the whole buffer: it doubles in place as keys come.
//! A log with few keys thus touches a few cache lines and pages, not slots spread over the whole
//! buffer.
#![allow(
    clippy::indexing_slicing,
    reason = "fixed-size digests and slots indexed below their length, checked where computed"
)]

use super::md5::md5;

/// Bytes of a slot: the digest, then the offset (Kafka's `bytesPerEntry` for MD5).
pub const BYTES_PER_ENTRY: usize = 16 + 8;

/// Slots of the table a map starts with (or all of them, when it has fewer).
const INITIAL_TABLE_SLOTS: usize = 4096;

/// What [`OffsetMap::put_replacing`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// The key was new and no slot was free: nothing changed.
    Refused,
    /// The key was new and took a slot.
    New,
    /// The key was there, at this offset, which the new one replaced.
    Replaced(i64),
}

/// The offset map of one cleaner thread.
#[derive(Debug)]
pub struct OffsetMap {
    bytes: Vec<u8>,
    /// Slots of the buffer (Kafka's capacity).
    slots: usize,
    /// Slots of the table in use: the first `table` slots of the buffer.
    table: usize,
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
            table: slots.min(INITIAL_TABLE_SLOTS),
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

    /// Empties the map. Only the table in use is written (the rest of the buffer is still zero).
    pub fn clear(&mut self) {
        if self.entries > 0 {
            self.bytes[..self.table * BYTES_PER_ENTRY].fill(0);
        }
        self.table = self.slots.min(INITIAL_TABLE_SLOTS);
        self.entries = 0;
        self.latest_offset = -1;
    }

    /// Fraction of slots in use.
    pub fn utilization(&self) -> f64 {
        if self.slots == 0 {
            0.0
        } else {
            self.entries as f64 / self.slots as f64
        }
    }

    /// The slot a digest is probed from in a table of `table` slots.
    fn home(hash: &[u8; 16], table: usize) -> usize {
        let mut w = [0u8; 8];
        w.copy_from_slice(&hash[..8]);
        ((u128::from(u64::from_be_bytes(w)) * table as u128) >> 64) as usize
    }

    /// Kafka's `isEmpty`: a slot of all zeros.
    fn is_empty_at(&self, slot: usize) -> bool {
        let pos = slot * BYTES_PER_ENTRY;
        self.bytes[pos..pos + BYTES_PER_ENTRY] == [0u8; BYTES_PER_ENTRY]
    }

    fn hash_at(&self, slot: usize) -> &[u8] {
        let pos = slot * BYTES_PER_ENTRY;
        &self.bytes[pos..pos + 16]
    }

    fn take(&mut self, slot: usize) -> [u8; BYTES_PER_ENTRY] {
        let pos = slot * BYTES_PER_ENTRY;
        let mut e = [0u8; BYTES_PER_ENTRY];
        e.copy_from_slice(&self.bytes[pos..pos + BYTES_PER_ENTRY]);
        self.bytes[pos..pos + BYTES_PER_ENTRY].fill(0);
        e
    }

    fn set(&mut self, slot: usize, entry: &[u8; BYTES_PER_ENTRY]) {
        let pos = slot * BYTES_PER_ENTRY;
        self.bytes[pos..pos + BYTES_PER_ENTRY].copy_from_slice(entry);
    }

    /// Doubles the table in place (up to the whole buffer): every entry of the old table is
    /// moved to its place in the new one once, an entry whose place holds an entry not yet
    /// moved taking that place and moving the one it displaces next.
    fn grow(&mut self) {
        let old = self.table;
        let table = (old * 2).min(self.slots);
        self.table = table;
        // One bit per slot of the new table: whether it holds an entry already moved.
        let mut moved = vec![0u64; table.div_ceil(64)];
        let is_moved = |m: &[u64], slot: usize| m[slot / 64] >> (slot % 64) & 1 == 1;
        let mark = |m: &mut [u64], slot: usize| m[slot / 64] |= 1 << (slot % 64);
        for i in 0..old {
            if is_moved(&moved, i) || self.is_empty_at(i) {
                continue;
            }
            let mut cur = self.take(i);
            'place: loop {
                let mut hash = [0u8; 16];
                hash.copy_from_slice(&cur[..16]);
                let mut slot = Self::home(&hash, table);
                loop {
                    if self.is_empty_at(slot) {
                        self.set(slot, &cur);
                        mark(&mut moved, slot);
                        break 'place;
                    }
                    if !is_moved(&moved, slot) {
                        let next = self.take(slot);
                        self.set(slot, &cur);
                        mark(&mut moved, slot);
                        cur = next;
                        continue 'place;
                    }
                    slot = if slot + 1 == table { 0 } else { slot + 1 };
                }
            }
        }
    }

    /// The slot holding `hash`, or the empty slot where it would go (`None`: the table is full
    /// and does not hold it).
    fn find(&self, hash: &[u8; 16]) -> Option<usize> {
        let mut slot = Self::home(hash, self.table);
        for _ in 0..self.table {
            if self.is_empty_at(slot) || self.hash_at(slot) == hash {
                return Some(slot);
            }
            slot = if slot + 1 == self.table { 0 } else { slot + 1 };
        }
        None
    }

    /// Records `offset` as the newest offset of `key`. Refused (false) when a new key would need
    /// a slot and none is free.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        self.put_replacing(key, offset) != Put::Refused
    }

    /// [`Self::put`], saying which offset of the key it replaced, if any.
    pub fn put_replacing(&mut self, key: &[u8], offset: i64) -> Put {
        self.put_digest(&md5(key), offset)
    }

    /// [`Self::put_replacing`] of the key whose MD5 digest is `hash`.
    pub fn put_digest(&mut self, hash: &[u8; 16], offset: i64) -> Put {
        let hash = *hash;
        let mut entry = [0u8; BYTES_PER_ENTRY];
        entry[..16].copy_from_slice(&hash);
        entry[16..].copy_from_slice(&offset.to_be_bytes());
        match self.find(&hash) {
            Some(slot) if !self.is_empty_at(slot) => {
                let replaced = self.offset_at(slot);
                self.set(slot, &entry);
                self.latest_offset = offset;
                return Put::Replaced(replaced);
            }
            _ if self.entries >= self.slots => return Put::Refused,
            _ => {}
        }
        if self.table < self.slots && (self.entries + 1) * 2 > self.table {
            self.grow();
        }
        let Some(slot) = self.find(&hash) else {
            return Put::Refused;
        };
        self.set(slot, &entry);
        self.latest_offset = offset;
        self.entries += 1;
        Put::New
    }

    fn offset_at(&self, slot: usize) -> i64 {
        let pos = slot * BYTES_PER_ENTRY + 16;
        let mut o = [0u8; 8];
        o.copy_from_slice(&self.bytes[pos..pos + 8]);
        i64::from_be_bytes(o)
    }

    /// Reads the slot each digest's probe starts at, and nothing else: the reads do not wait on
    /// one another, so the memory serves them together, and the puts of these digests that
    /// follow find their slots in the cache instead of waiting on the memory one after the other.
    pub fn touch(&self, digests: &[[u8; 16]]) {
        let mut seen = 0u8;
        for hash in digests {
            let slot = Self::home(hash, self.table);
            seen ^= self.bytes.get(slot * BYTES_PER_ENTRY).copied().unwrap_or(0);
        }
        std::hint::black_box(seen);
    }

    /// The newest offset recorded for `key`, `-1` if none.
    pub fn get(&self, key: &[u8]) -> i64 {
        if self.slots == 0 {
            return -1;
        }
        let hash = md5(key);
        match self.find(&hash) {
            Some(slot) if !self.is_empty_at(slot) => self.offset_at(slot),
            _ => -1,
        }
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
    fn the_table_grows_in_place_and_answers_as_a_dictionary() {
        // 5,000 slots: the table starts at 4,096, doubles to the whole buffer at 2,049 keys,
        // and takes keys up to every slot.
        let mut m = OffsetMap::new(5_000 * BYTES_PER_ENTRY);
        let mut model = std::collections::HashMap::new();
        let mut rng = testkit::XorShift::new(0x9e37_79b9_7f4a_7c15);
        for offset in 0..40_000i64 {
            let x = rng.next_u64();
            let key = format!("key-{}", x % 6_000);
            let fits = model.contains_key(&key) || model.len() < 5_000;
            assert_eq!(m.put(key.as_bytes(), offset), fits, "put {key} at {offset}");
            if fits {
                model.insert(key, offset);
            }
            assert_eq!(m.size(), model.len());
            if offset % 997 == 0 || model.len() == 2_049 {
                for (k, o) in &model {
                    assert_eq!(m.get(k.as_bytes()), *o, "{k} after {offset} puts");
                }
            }
        }
        assert_eq!(m.size(), 5_000, "every slot is taken");
        for (k, o) in &model {
            assert_eq!(m.get(k.as_bytes()), *o);
        }
        assert_eq!(m.get(b"absent"), -1, "a full table answers an absent key");
        m.clear();
        assert_eq!((m.size(), m.get(b"key-1")), (0, -1));
        assert!(
            m.bytes.iter().all(|b| *b == 0),
            "clear zeroes what was used"
        );
    }

    #[test]
    fn kafka_sizing() {
        // Kafka's default: 128 MiB dedupe buffer over one thread.
        let mem = OffsetMap::memory_for(128 * 1024 * 1024, 1);
        assert_eq!(mem / BYTES_PER_ENTRY, 5_592_405);
        assert_eq!(OffsetMap::memory_for(u64::MAX, 1), i32::MAX as usize);
    }
}
