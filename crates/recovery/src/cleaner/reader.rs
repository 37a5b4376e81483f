//! Reading a segment's batches for cleaning, and its aborted transactions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::{CleanerError, Result};
use super::segments::SegmentFiles;
use super::CleanerConfig;
use record_format::internals::{LOG_OVERHEAD, RECORD_BATCH_OVERHEAD};
use record_format::{ControlRecordKey, ControlRecordType, DecodeLimits, FormatError, RecordBatch};
use segment_store::internals::ReadOnlyBytes;
use segment_store::internals::{file_name, FileKind};
use segment_store::AbortedTxn;
use segment_store::{FileHandle, OpenMode, Storage};

/// The header of one batch as the cleaner reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head {
    pub(super) last_offset: i64,
    pub(super) max_timestamp: i64,
    pub(super) producer_id: i64,
    pub(super) producer_epoch: i16,
    pub(super) transactional: bool,
    pub(super) control: bool,
}

/// Reads the batches of a `.log` through a window of at least `io_buffer_size` bytes (grown to
/// the batch size, up to `max_message_bytes`), never the whole file.
pub(super) struct BatchReader<'a> {
    handle: Box<dyn FileHandle>,
    path: PathBuf,
    size: u64,
    position: u64,
    /// The read buffer: grown, never shrunk or zeroed again; `window_len` bytes of it are the
    /// file's from `window_start`.
    window: Vec<u8>,
    window_len: usize,
    window_start: u64,
    /// The whole file, mapped read-only, when the storage can map it (a [`GuardedMap`]: a
    /// truncation under it reads zeros and is reported), instead of the window; the pages
    /// behind the reader are let go as it moves on, so that it holds a window of the file.
    ///
    /// [`GuardedMap`]: segment_store::internals::GuardedMap
    mapped: Option<ReadOnlyBytes>,
    released: u64,
    /// Batches that start below this position are not CRC-checked: the pass checked them when
    /// it built its offset map (the file is a sealed segment, and a map of it reports a
    /// truncation).
    checked_below: u64,
    config: &'a CleanerConfig,
}

impl<'a> BatchReader<'a> {
    pub(super) fn open(
        storage: &dyn Storage,
        path: &Path,
        config: &'a CleanerConfig,
    ) -> Result<Self> {
        let handle = storage.open(path, OpenMode::Read)?;
        let size = handle.len()?;
        // Where no map can be made the file is read through the window.
        let mapped = ReadOnlyBytes::map_guarded(storage, path, size)
            .unwrap_or(None)
            .filter(|m| m.bytes().len() as u64 == size);
        Ok(BatchReader {
            handle,
            path: path.to_path_buf(),
            size,
            position: 0,
            window: Vec::new(),
            window_len: 0,
            window_start: 0,
            mapped,
            released: 0,
            checked_below: 0,
            config,
        })
    }

    /// Batches starting below `position` are taken as CRC-checked already (`u64::MAX`: no batch
    /// is checked, only its framing, as for reading the last offset).
    pub(super) fn checked_below(mut self, position: u64) -> Self {
        self.checked_below = position;
        self
    }

    /// Goes on at `position`, which must be where a batch starts, past the batches before it
    /// unread.
    pub(super) fn skip_to(&mut self, position: u64) {
        self.position = position;
    }

    /// The position after the last batch returned.
    pub(super) fn position(&self) -> u64 {
        self.position
    }

    fn unsupported(&self, reason: impl Into<String>) -> CleanerError {
        CleanerError::Unsupported {
            path: self.path.clone(),
            position: self.position,
            reason: reason.into(),
        }
    }

    /// The window's bytes read from the file.
    fn valid(&self) -> &[u8] {
        match &self.mapped {
            Some(m) => m.bytes(),
            None => self.window.get(..self.window_len).unwrap_or(&[]),
        }
    }

    /// An error if the mapped file was truncated while it was read.
    fn check_mapped(&self) -> Result<()> {
        match &self.mapped {
            Some(m) if m.was_truncated() => {
                Err(self.unsupported("the segment was truncated while it was read"))
            }
            _ => Ok(()),
        }
    }

    /// Ensures bytes `[position, position + len)` are in the window.
    fn fill(&mut self, len: u64) -> Result<()> {
        let end = self.position + len;
        if self.mapped.is_some() {
            // The whole file is there; let go of what lies a read buffer behind.
            if let Some(m) = &self.mapped {
                let behind = self
                    .position
                    .saturating_sub(self.config.io_buffer_size as u64);
                if behind >= self.released + (1 << 20) {
                    m.release(self.released as usize, behind as usize);
                    self.released = behind;
                }
            }
            if end > self.size {
                return Err(self.unsupported("the segment ends inside a batch"));
            }
            return Ok(());
        }
        let window_end = self.window_start + self.window_len as u64;
        if self.position >= self.window_start && end <= window_end {
            return Ok(());
        }
        let want = (self.config.io_buffer_size as u64)
            .max(len)
            .min(self.size - self.position);
        let want = usize::try_from(want).map_err(|_| self.unsupported("window too large"))?;
        if self.window.len() < want {
            self.window.resize(want, 0);
        }
        self.window_len = 0;
        let buf = self
            .window
            .get_mut(..want)
            .ok_or_else(|| CleanerError::Unsupported {
                path: self.path.clone(),
                position: self.position,
                reason: "window too large".into(),
            })?;
        let n = self.handle.read_at(self.position, buf)?.min(want);
        self.window_len = n;
        self.window_start = self.position;
        if (n as u64) < len {
            return Err(self.unsupported("the segment ends inside a batch"));
        }
        Ok(())
    }

    /// The next batch and its position, `None` at the end of the file.
    pub(super) fn next_batch(&mut self) -> Result<Option<(u64, RecordBatch<'_>)>> {
        if self.position >= self.size {
            self.check_mapped()?;
            return Ok(None);
        }
        if self.size - self.position < LOG_OVERHEAD as u64 {
            return Err(self.unsupported("a partial batch header at the end of the segment"));
        }
        self.fill(LOG_OVERHEAD as u64)?;
        let at = (self.position - self.window_start) as usize;
        let len_bytes: [u8; 4] = self
            .valid()
            .get(at + 8..at + 12)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.unsupported("short read"))?;
        let length = i32::from_be_bytes(len_bytes);
        let total = u64::try_from(length)
            .ok()
            .map(|l| l + LOG_OVERHEAD as u64)
            .filter(|t| *t >= RECORD_BATCH_OVERHEAD as u64)
            .ok_or_else(|| self.unsupported(format!("batch length {length}")))?;
        if total
            > self
                .config
                .max_message_bytes
                .max(self.config.io_buffer_size) as u64
                + 12
        {
            return Err(
                self.unsupported(format!("a batch of {total} bytes, above max.message.bytes"))
            );
        }
        self.fill(total)?;
        let position = self.position;
        self.position += total;
        let at = (position - self.window_start) as usize;
        let bytes =
            self.valid()
                .get(at..at + total as usize)
                .ok_or_else(|| CleanerError::Unsupported {
                    path: self.path.clone(),
                    position,
                    reason: "short read".into(),
                })?;
        let batch = RecordBatch::new(bytes, position).map_err(|source| CleanerError::Format {
            path: self.path.clone(),
            source,
        })?;
        if batch.magic() < 2 {
            return Err(CleanerError::Unsupported {
                path: self.path.clone(),
                position,
                reason: format!("a magic v{} batch (only v2 is cleaned)", batch.magic()),
            });
        }
        if position < self.checked_below {
            return Ok(Some((position, batch)));
        }
        if let Err(source) = batch.validate() {
            self.check_mapped()?;
            return Err(CleanerError::Format {
                path: self.path.clone(),
                source,
            });
        }
        Ok(Some((position, batch)))
    }
}

pub(super) fn head(b: &RecordBatch<'_>) -> Head {
    Head {
        last_offset: b.last_offset(),
        max_timestamp: b.max_timestamp(),
        producer_id: b.producer_id(),
        producer_epoch: b.producer_epoch(),
        transactional: b.is_transactional(),
        control: b.is_control(),
    }
}

pub(super) fn format_err(path: &Path, source: FormatError) -> CleanerError {
    CleanerError::Format {
        path: path.to_path_buf(),
        source,
    }
}

/// The type of a control batch's first record (`None` when it has none).
pub(super) fn first_control_type(
    path: &Path,
    b: &RecordBatch<'_>,
) -> Result<Option<ControlRecordType>> {
    let records = b
        .records(&DecodeLimits::default())
        .map_err(|e| format_err(path, e))?;
    let mut it = records.iter();
    match it.next() {
        None => Ok(None),
        Some(r) => {
            let r = r.map_err(|e| format_err(path, e))?;
            let key = r.key().unwrap_or(&[]);
            let (_, t) =
                ControlRecordKey::parse(key, r.key_position()).map_err(|e| format_err(path, e))?;
            Ok(Some(t))
        }
    }
}

/// All aborted transactions of the `.txnindex` files, per segment base offset.
pub(super) fn read_txn_indexes(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentFiles],
) -> Result<BTreeMap<i64, Vec<AbortedTxn>>> {
    use segment_store::internals::TXN_INDEX_ENTRY_SIZE as ENTRY_SIZE;
    let mut out = BTreeMap::new();
    for s in segments {
        let path = dir.join(file_name(s.base_offset, FileKind::TxnIndex, None));
        if !storage.exists(&path)? {
            continue;
        }
        let bytes = storage.read_capped(&path, 1 << 30)?;
        let txns = bytes
            .chunks_exact(ENTRY_SIZE)
            .filter_map(|c| <&[u8; ENTRY_SIZE]>::try_from(c).ok())
            .map(AbortedTxn::from_bytes)
            .collect();
        out.insert(s.base_offset, txns);
    }
    Ok(out)
}

/// Kafka's `collectAbortedTransactions(start, upper)`: from the segment holding `start` on, the
/// aborted transactions overlapping `[start, upper)`, stopping after the first whose last stable
/// offset reaches `upper`.
pub(super) fn collect_aborted(
    txns: &BTreeMap<i64, Vec<AbortedTxn>>,
    start: i64,
    upper: i64,
) -> Vec<AbortedTxn> {
    let from = txns
        .range(..=start)
        .next_back()
        .map_or(i64::MIN, |(b, _)| *b);
    let mut out = Vec::new();
    for list in txns.range(from..).map(|(_, l)| l) {
        for t in list {
            if t.last_offset >= start && t.first_offset < upper {
                out.push(*t);
            }
            if t.last_stable_offset >= upper {
                return out;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use record_format::{FormatErrorKind, RecordBatchBuilder};
    use segment_store::StdFs;

    /// Reads the `.log` at `path`, taking batches below `checked_below` as CRC-checked: the
    /// batches read, and the error that ended the read.
    fn read(path: &Path, checked_below: u64) -> (usize, Option<CleanerError>) {
        let config = CleanerConfig::default();
        let mut reader = BatchReader::open(&StdFs, path, &config)
            .expect("open")
            .checked_below(checked_below);
        let mut n = 0;
        loop {
            match reader.next_batch() {
                Ok(Some(_)) => n += 1,
                Ok(None) => return (n, None),
                Err(e) => return (n, Some(e)),
            }
        }
    }

    /// A segment over 1 MiB (mapped) and one under (read through the window): a corrupt batch
    /// is reported at its CRC field unless it lies below `checked_below`.
    #[test]
    fn batches_from_checked_below_on_are_crc_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        for count in [100usize, 1_000] {
            let mut log = Vec::new();
            let mut starts = Vec::new();
            for i in 0..count as i64 {
                let mut b = RecordBatchBuilder::new(i);
                b.append(i, Some(format!("k{i}").as_bytes()), Some(&[7u8; 1024]), &[])
                    .expect("append");
                starts.push(log.len() as u64);
                log.extend_from_slice(&b.build());
            }
            let path = dir.path().join(format!("{count:020}.log"));
            std::fs::write(&path, &log).expect("write");
            assert_eq!(read(&path, 0).0, count, "a sound segment is read whole");
            for bad in [0, count / 2, count - 1] {
                let mut corrupt = log.clone();
                // A byte of the value: the CRC no longer matches.
                corrupt[starts[bad] as usize + 200] ^= 0x55;
                std::fs::write(&path, &corrupt).expect("write");
                for below in [0, starts[bad]] {
                    let (n, err) = read(&path, below);
                    assert_eq!(n, bad, "batches read before the corrupt batch {bad}");
                    match err {
                        Some(CleanerError::Format { source, .. }) => {
                            assert!(
                                matches!(source.kind, FormatErrorKind::CrcMismatch { .. }),
                                "{source:?}"
                            );
                            let crc_field =
                                starts[bad] + record_format::internals::CRC_OFFSET as u64;
                            assert_eq!(source.position, crc_field);
                        }
                        other => panic!("batch {bad}, checked below {below}: {other:?}"),
                    }
                }
                let past = starts.get(bad + 1).copied().unwrap_or(log.len() as u64);
                let (n, err) = read(&path, past);
                assert!(err.is_none(), "{err:?}");
                assert_eq!(n, count, "a batch below checked_below is not checked again");
            }
        }
    }
}
