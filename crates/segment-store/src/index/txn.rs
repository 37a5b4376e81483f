//! The transaction index (`.txnindex`), Kafka's `TransactionIndex` and `AbortedTxn`.
//!
//! A plain (not mapped, not preallocated) file of 34-byte entries, one per aborted
//! transaction whose ABORT marker is in the segment, in increasing `last_offset` order. The file
//! is created lazily on the first append. All I/O goes through [`crate::io::Storage`], so crashes
//! can be simulated.
//!
//! ```text
//! entry (34 bytes, big-endian):
//!   0  2  version            (0; a larger version is corruption)
//!   2  8  producer id
//!  10  8  first offset       (first offset of the aborted transaction)
//!  18  8  last offset        (offset of the ABORT marker)
//!  26  8  last stable offset (LSO when the marker was appended)
//! ```
//!
//! A trailing partial entry (fewer than 34 bytes) is ignored, as Kafka's iterator does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{IndexCorruption, Result, SegmentError};
use crate::index::{be_i64, round_down};
use crate::io::{FileHandle, OpenMode, Storage};

/// Entries read at a time by the readers of the index (64 KiB of them).
pub const READ_CHUNK_ENTRIES: usize = 65536 / ENTRY_SIZE;

const VERSION_OFFSET: usize = 0;
const PRODUCER_ID_OFFSET: usize = VERSION_OFFSET + 2;
const FIRST_OFFSET_OFFSET: usize = PRODUCER_ID_OFFSET + 8;
const LAST_OFFSET_OFFSET: usize = FIRST_OFFSET_OFFSET + 8;
const LAST_STABLE_OFFSET_OFFSET: usize = LAST_OFFSET_OFFSET + 8;
/// Size of one entry.
pub const ENTRY_SIZE: usize = LAST_STABLE_OFFSET_OFFSET + 8;
const _: () = assert!(ENTRY_SIZE == 34);

/// The only entry version.
pub const CURRENT_VERSION: i16 = 0;

/// One aborted transaction (Kafka `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    /// Entry version (0 when written by this crate or Kafka; negative values are read as is).
    pub version: i16,
    /// The producer.
    pub producer_id: i64,
    /// First offset of the transaction.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// Last stable offset when the marker was written.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// A version-0 entry.
    pub fn new(
        producer_id: i64,
        first_offset: i64,
        last_offset: i64,
        last_stable_offset: i64,
    ) -> Self {
        AbortedTxn {
            version: CURRENT_VERSION,
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset,
        }
    }

    /// The 34 on-disk bytes.
    pub fn to_bytes(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        let fields: [&[u8]; 5] = [
            &self.version.to_be_bytes(),
            &self.producer_id.to_be_bytes(),
            &self.first_offset.to_be_bytes(),
            &self.last_offset.to_be_bytes(),
            &self.last_stable_offset.to_be_bytes(),
        ];
        for (dst, src) in out.iter_mut().zip(fields.into_iter().flatten()) {
            *dst = *src;
        }
        out
    }

    /// Decodes 34 bytes (version unchecked).
    pub fn from_bytes(b: &[u8; ENTRY_SIZE]) -> Self {
        AbortedTxn {
            version: i16::from_be_bytes([b[0], b[1]]),
            producer_id: be_i64(b, PRODUCER_ID_OFFSET),
            first_offset: be_i64(b, FIRST_OFFSET_OFFSET),
            last_offset: be_i64(b, LAST_OFFSET_OFFSET),
            last_stable_offset: be_i64(b, LAST_STABLE_OFFSET_OFFSET),
        }
    }
}

/// Result of [`TransactionIndex::collect_aborted_txns`] (Kafka `TxnIndexSearchResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnIndexSearchResult {
    /// Aborted transactions overlapping the fetch range, in index order.
    pub aborted_transactions: Vec<AbortedTxn>,
    /// Whether the search can stop at this segment (an entry's LSO reached the upper bound).
    pub is_complete: bool,
}

/// The transaction index of one segment.
#[derive(Debug)]
pub struct TransactionIndex {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    start_offset: i64,
    /// Shared with the active segment's published tail, whose readers read it up to
    /// [`Self::len`].
    handle: Option<Arc<dyn FileHandle>>,
    /// The file's length as this index wrote it (at open: as found).
    len: u64,
    last_offset: Option<i64>,
    /// Whether nothing changed since the last [`Self::flush`] (false at open).
    synced: AtomicBool,
}

impl TransactionIndex {
    /// Opens the index of the segment starting at `start_offset`. The file is opened now if it
    /// exists, otherwise created on the first [`Self::append`].
    ///
    /// Unlike Kafka (which starts with no last offset after a reopen), the last complete entry's
    /// `last_offset` is loaded, so the increasing-offset rule also holds across reopens.
    pub fn open(storage: Arc<dyn Storage>, path: &Path, start_offset: i64) -> Result<Self> {
        let handle: Option<Arc<dyn FileHandle>> = if storage.exists(path)? {
            Some(Arc::from(storage.open(path, OpenMode::ReadWrite)?))
        } else {
            None
        };
        let len = match &handle {
            Some(h) => h.len()?,
            None => 0,
        };
        let mut idx = TransactionIndex {
            storage,
            path: path.to_path_buf(),
            start_offset,
            handle,
            len,
            last_offset: None,
            synced: AtomicBool::new(false),
        };
        if let Some(h) = &idx.handle {
            let complete = round_down(h.len()?, ENTRY_SIZE);
            if complete > 0 {
                let mut b = [0u8; ENTRY_SIZE];
                h.read_exact_at(complete - ENTRY_SIZE as u64, &mut b)?;
                idx.last_offset = Some(AbortedTxn::from_bytes(&b).last_offset);
            }
        }
        Ok(idx)
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's base offset.
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// Appends `txn`; its `last_offset` must not be below the previous entry's
    /// ([`SegmentError::InvalidOffset`]). Kafka requires strictly increasing last offsets; equal
    /// ones are accepted here because one `MIRROR_PID_RESET` barrier aborts every transaction
    /// still open at its own offset (Kafka's readers scan every entry, so they read them too). Creates the file if needed. Not synced: see
    /// [`Self::flush`].
    pub fn append(&mut self, txn: &AbortedTxn) -> Result<()> {
        self.append_all(std::slice::from_ref(txn))
    }

    /// [`Self::append`] of each of `txns` in order, written with one write: recovery rebuilds a
    /// segment's index from its scan this way (one write call per entry took most of the time
    /// of installing the scan of a 1 GiB segment with 14,000 aborted transactions). Nothing is
    /// written if an entry's `last_offset` is below the one before it.
    pub fn append_all(&mut self, txns: &[AbortedTxn]) -> Result<()> {
        let mut last = self.last_offset;
        for txn in txns {
            if let Some(last) = last {
                if last > txn.last_offset {
                    return Err(SegmentError::InvalidOffset {
                        path: self.path.clone(),
                        offset: txn.last_offset,
                        last_offset: last,
                    });
                }
            }
            last = Some(txn.last_offset);
        }
        if txns.is_empty() {
            return Ok(());
        }
        let handle = match &mut self.handle {
            Some(h) => h,
            h @ None => h.insert(Arc::from(self.storage.open(&self.path, OpenMode::Create)?)),
        };
        let bytes: Vec<u8> = txns.iter().flat_map(AbortedTxn::to_bytes).collect();
        *self.synced.get_mut() = false;
        let at = handle.append(&bytes)?;
        self.len = at + bytes.len() as u64;
        self.last_offset = last;
        Ok(())
    }

    /// The file, shared (`None` until the first entry is written): what the active segment's
    /// published tail reads, up to [`Self::whole_entries_len`].
    pub(crate) fn shared_handle(&self) -> Option<&Arc<dyn FileHandle>> {
        self.handle.as_ref()
    }

    /// The bytes of the whole entries this index wrote or found.
    pub(crate) fn whole_entries_len(&self) -> u64 {
        round_down(self.len, ENTRY_SIZE)
    }

    /// Calls `f` with every complete entry and its byte position, in order, until it returns
    /// `false`; an entry of a later version than 0 is an error when it is reached (as Kafka's
    /// iterator throws). Read [`READ_CHUNK_ENTRIES`] entries at a time: memory is bounded by
    /// that window, not by the file.
    fn for_each_entry(&self, f: impl FnMut(u64, AbortedTxn) -> Result<bool>) -> Result<()> {
        let Some(h) = &self.handle else {
            return Ok(());
        };
        for_each_entry_in(h.as_ref(), round_down(h.len()?, ENTRY_SIZE), &self.path, f)
    }

    /// All aborted transactions in the index.
    pub fn all_aborted_txns(&self) -> Result<Vec<AbortedTxn>> {
        let mut out = Vec::new();
        self.for_each_entry(|_, t| {
            out.push(t);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Kafka's `collectAbortedTxns`: entries with `last_offset >= fetch_offset` and
    /// `first_offset < upper_bound_offset`; complete as soon as an entry's last stable offset is
    /// `>= upper_bound_offset` (that entry is included if it matches).
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<TxnIndexSearchResult> {
        match &self.handle {
            Some(h) => collect_aborted_in(
                h.as_ref(),
                round_down(h.len()?, ENTRY_SIZE),
                &self.path,
                fetch_offset,
                upper_bound_offset,
            ),
            None => Ok(TxnIndexSearchResult {
                aborted_transactions: Vec::new(),
                is_complete: false,
            }),
        }
    }

    /// Truncates the file at the first entry with `last_offset >= offset`; no-op if there is
    /// none (a trailing partial entry then stays, as in Kafka).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let mut new_last = None;
        let mut cut_at = None;
        self.for_each_entry(|position, txn| {
            if txn.last_offset >= offset {
                cut_at = Some(position);
                return Ok(false);
            }
            new_last = Some(txn.last_offset);
            Ok(true)
        })?;
        if let Some(position) = cut_at {
            if let Some(h) = &self.handle {
                *self.synced.get_mut() = false;
                h.set_len(position)?;
                self.len = position;
            }
            self.last_offset = new_last;
        }
        Ok(())
    }

    /// Removes all entries (truncates the file to 0 if it exists).
    pub fn reset(&mut self) -> Result<()> {
        if let Some(h) = &self.handle {
            *self.synced.get_mut() = false;
            h.set_len(0)?;
            self.len = 0;
        }
        self.last_offset = None;
        Ok(())
    }

    /// Kafka's `sanityCheck`: every entry's `last_offset` must be `>= start_offset`.
    pub fn sanity_check(&self) -> Result<()> {
        self.for_each_entry(|_, txn| {
            if txn.last_offset < self.start_offset {
                return Err(SegmentError::CorruptIndex {
                    path: self.path.clone(),
                    reason: IndexCorruption::TxnBelowStart {
                        last_offset: txn.last_offset,
                        start_offset: self.start_offset,
                    },
                });
            }
            Ok(true)
        })
    }

    /// Makes the entries durable (Kafka: `channel.force(true)`); no system call when nothing
    /// changed since the last flush.
    pub fn flush(&self) -> Result<()> {
        match &self.handle {
            Some(_) if self.synced.load(Ordering::Acquire) => Ok(()),
            Some(h) => {
                h.sync_all()?;
                self.synced.store(true, Ordering::Release);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Whether the index has no complete entry.
    pub fn is_empty(&self) -> Result<bool> {
        match &self.handle {
            Some(h) => Ok(h.len()? < ENTRY_SIZE as u64),
            None => Ok(true),
        }
    }
}

/// Calls `f` with every complete entry of the index file `h` below byte `end` and its byte
/// position, in order, until it returns `false`; an entry of a later version than 0 is an error
/// when it is reached (as Kafka's iterator throws). Read [`READ_CHUNK_ENTRIES`] entries at a
/// time: memory is bounded by that window, not by the file.
fn for_each_entry_in(
    h: &dyn FileHandle,
    end: u64,
    path: &Path,
    mut f: impl FnMut(u64, AbortedTxn) -> Result<bool>,
) -> Result<()> {
    let mut buf = vec![0u8; READ_CHUNK_ENTRIES * ENTRY_SIZE];
    let mut at = 0u64;
    while at < end {
        let want = usize::try_from(end - at).map_or(buf.len(), |n| n.min(buf.len()));
        let chunk = buf.get_mut(..want).unwrap_or_default();
        let n = h.read_at(at, chunk)?;
        if n < ENTRY_SIZE {
            break;
        }
        for (i, raw) in chunk
            .get(..n)
            .unwrap_or_default()
            .chunks_exact(ENTRY_SIZE)
            .enumerate()
        {
            let Ok(b) = <&[u8; ENTRY_SIZE]>::try_from(raw) else {
                break;
            };
            let position = at + (i * ENTRY_SIZE) as u64;
            let txn = AbortedTxn::from_bytes(b);
            if txn.version > CURRENT_VERSION {
                return Err(SegmentError::CorruptIndex {
                    path: path.to_path_buf(),
                    reason: IndexCorruption::UnsupportedTxnVersion {
                        version: txn.version,
                        position,
                    },
                });
            }
            if !f(position, txn)? {
                return Ok(());
            }
        }
        at += round_down(n as u64, ENTRY_SIZE);
    }
    Ok(())
}

/// Kafka's `collectAbortedTxns` over the entries of the index file `h` below byte `end`
/// ([`TransactionIndex::collect_aborted_txns`]; the active segment's published tail reads its
/// index this way).
pub(crate) fn collect_aborted_in(
    h: &dyn FileHandle,
    end: u64,
    path: &Path,
    fetch_offset: i64,
    upper_bound_offset: i64,
) -> Result<TxnIndexSearchResult> {
    let mut aborted_transactions = Vec::new();
    let mut is_complete = false;
    for_each_entry_in(h, end, path, |_, txn| {
        if txn.last_offset >= fetch_offset && txn.first_offset < upper_bound_offset {
            aborted_transactions.push(txn);
        }
        is_complete = txn.last_stable_offset >= upper_bound_offset;
        Ok(!is_complete)
    })?;
    Ok(TxnIndexSearchResult {
        aborted_transactions,
        is_complete,
    })
}
