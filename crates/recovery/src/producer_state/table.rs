//! The manager's producers by id: a hash table of entries, each found by its own producer id.
//!
//! With many producers taking turns, the entry an append looks up is not in the CPU's cache,
//! and the lookup waits for memory: the fewer bytes a producer takes, the more of them stay
//! cached and the fewer pages the table spans. The table holds the entries themselves, keyed
//! by the producer id they carry, so a slot is one entry and no separate copy of its key.
//!
//! A table of 2 MiB or more lives on transparent huge pages ([`HugePageAlloc`]): with 100,000
//! producers it spans 21 MiB, over 5,000 pages of 4 KiB, and a lookup would miss the TLB too.
//! An append asks for its producer's entry as it starts ([`ProducerTable::prefetch`]) and reads
//! it after validating the batch.

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use segment_store::internals::HugePageAlloc;

use super::entry::ProducerStateEntry;

/// The producers' entries, each under its [`ProducerStateEntry::producer_id`].
#[derive(Debug, Clone)]
pub(crate) struct ProducerTable {
    entries: HashTable<ProducerStateEntry, HugePageAlloc>,
}

fn hash(producer_id: i64) -> u64 {
    FxBuildHasher.hash_one(producer_id)
}

fn hash_of(entry: &ProducerStateEntry) -> u64 {
    hash(entry.producer_id)
}

impl Default for ProducerTable {
    fn default() -> Self {
        Self {
            entries: HashTable::new_in(HugePageAlloc),
        }
    }
}

impl ProducerTable {
    /// The entry of `producer_id`.
    pub(crate) fn get(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.entries
            .find(hash(producer_id), |e| e.producer_id == producer_id)
    }

    /// Asks the CPU to start loading the entry of `producer_id` into its cache, without waiting
    /// for it: a later [`get`](Self::get) finds it there if enough work came between. With many
    /// producers taking turns, the entry an append needs is in no cache, and its load waits for
    /// memory (a page walk and a line); issued as the append starts, that wait overlaps the
    /// batch's validation instead of stalling the producer check.
    ///
    /// Only the table's control bytes are read (they stay cached: one byte a slot): each slot
    /// they point to is prefetched, none is read, and no key is compared, so the probe stops at
    /// the first empty control byte having loaded nothing the lookup would wait for.
    pub(crate) fn prefetch(&self, producer_id: i64) {
        let _ = self.entries.find(hash(producer_id), |e| {
            e.prefetch();
            false
        });
    }

    /// The entry of `producer_id`, to change.
    pub(crate) fn get_mut(&mut self, producer_id: i64) -> Option<&mut ProducerStateEntry> {
        self.entries
            .find_mut(hash(producer_id), |e| e.producer_id == producer_id)
    }

    /// The slot of `producer_id`: its entry, or where a new one goes.
    pub(crate) fn entry(
        &mut self,
        producer_id: i64,
    ) -> Entry<'_, ProducerStateEntry, HugePageAlloc> {
        self.entries
            .entry(hash(producer_id), |e| e.producer_id == producer_id, hash_of)
    }

    /// The entry of `producer_id`, made empty (Kafka `ProducerStateEntry.empty`) if there is none.
    pub(crate) fn get_or_insert_empty(&mut self, producer_id: i64) -> &mut ProducerStateEntry {
        self.entry(producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer_id))
            .into_mut()
    }

    /// Puts `entry` under its producer id, replacing the one there.
    pub(crate) fn insert(&mut self, entry: ProducerStateEntry) {
        match self.entry(entry.producer_id) {
            Entry::Occupied(mut o) => *o.get_mut() = entry,
            Entry::Vacant(v) => {
                v.insert(entry);
            }
        }
    }

    /// Keeps the entries `keep` says to.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&mut ProducerStateEntry) -> bool) {
        self.entries.retain(keep);
    }

    /// Forgets every producer.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// How many producers there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ProducerStateEntry> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::BatchMetadata;

    fn entry(producer_id: i64, epoch: i16) -> ProducerStateEntry {
        let batch = BatchMetadata {
            last_seq: 4,
            last_offset: 10,
            offset_delta: 4,
            timestamp: 7,
        };
        ProducerStateEntry::new(producer_id, epoch, 3, 7, None, [batch])
    }

    #[test]
    fn finds_each_entry_by_its_own_producer_id() {
        let mut t = ProducerTable::default();
        for pid in [-5, 0, 1, 42, i64::MAX] {
            t.insert(entry(pid, 1));
        }
        assert_eq!(t.len(), 5);
        assert_eq!(t.get(42).map(ProducerStateEntry::producer_id), Some(42));
        assert!(t.get(43).is_none());
        // Insert replaces.
        t.insert(entry(42, 9));
        assert_eq!(t.len(), 5);
        assert_eq!(t.get(42).map(ProducerStateEntry::producer_epoch), Some(9));
        if let Some(e) = t.get_mut(0) {
            e.producer_epoch = 6;
        }
        assert_eq!(t.get(0).map(ProducerStateEntry::producer_epoch), Some(6));
        // An absent producer gets Kafka's empty entry; a present one keeps its own.
        assert_eq!(*t.get_or_insert_empty(7), ProducerStateEntry::empty(7));
        assert_eq!(t.get_or_insert_empty(1).producer_epoch(), 1);
        t.retain(|e| e.producer_id() >= 1);
        let mut left: Vec<i64> = t.iter().map(ProducerStateEntry::producer_id).collect();
        left.sort_unstable();
        assert_eq!(left, [1, 7, 42, i64::MAX]);
        t.clear();
        assert!(t.is_empty() && t.get(1).is_none());
    }

    /// A table past 2 MiB lives on its own huge-page mapping: it grows into it, is cloned,
    /// shrinks and is dropped with every entry found by its own id, and a prefetch (of present
    /// and absent ids) changes nothing.
    #[test]
    fn a_table_of_many_producers_on_huge_pages_finds_every_entry() {
        let n = 30_000_i64;
        let mut t = ProducerTable::default();
        for pid in 0..n {
            t.insert(entry(pid * 7919, (pid % 100) as i16));
        }
        assert!(std::mem::size_of::<ProducerStateEntry>() * t.len() > 4 << 20);
        for pid in (0..n).step_by(13).chain([n, n + 1, -1]) {
            t.prefetch(pid * 7919);
        }
        assert_eq!(t.len(), n as usize);
        let copy = t.clone();
        for pid in 0..n {
            let e = copy.get(pid * 7919).expect("present");
            assert_eq!(
                (e.producer_id(), e.producer_epoch()),
                (pid * 7919, (pid % 100) as i16)
            );
        }
        assert!(t.get(n * 7919).is_none() && t.get(1).is_none());
        t.retain(|e| e.producer_id() % 2 == 0);
        assert_eq!(t.len(), (0..n).filter(|p| p * 7919 % 2 == 0).count());
        assert!(t.iter().all(|e| e.producer_id() % 2 == 0));
        drop(copy);
        t.clear();
        assert!(t.is_empty());
    }

    /// With many producers, every byte of an entry is cache they compete for.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_entry_takes_168_bytes() {
        assert_eq!(std::mem::size_of::<ProducerStateEntry>(), 168);
    }
}
