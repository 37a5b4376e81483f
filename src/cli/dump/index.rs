//! Dumping `.index`, `.timeindex` and `.txnindex` files (Kafka's `dumpIndex`, `dumpTimeIndex`,
//! `dumpTxnIndex`), decoding the entries straight from the bytes (no lock, no mmap):
//!
//! ```text
//! .index      8 bytes per entry:  int32 relativeOffset | int32 position
//! .timeindex 12 bytes per entry:  int64 timestamp      | int32 relativeOffset
//! .txnindex  34 bytes per entry:  int16 version | int64 producerId | int64 firstOffset
//!                                 | int64 lastOffset | int64 lastStableOffset
//! ```
//! The base offset comes from the file name. Offset and time index dumps stop at the first entry
//! after the first whose offset equals the base offset (the zero-filled preallocated tail), as
//! Kafka's do. Entries are verified against the segment's `.log` next to the index when it
//! exists; problems are collected and printed on stderr after all files, in Kafka's words.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use segment_store::internals::{OffsetIndexView, TimeIndexView};
use segment_store::IndexCorruption;

use record_format::{Batches, DecodeLimits, LogEntry};
use segment_store::internals::FileKind;
use segment_store::AbortedTxn;
use serde::Serialize;

use super::json::{self, EntriesSummary, ErrorJson};
use super::{absolute, io_msg, Dumper, KEPT_PROBLEMS};

/// Bytes per `.index` entry.
pub const OFFSET_ENTRY_SIZE: usize = 8;
/// Bytes per `.timeindex` entry.
pub const TIME_ENTRY_SIZE: usize = 12;
/// Bytes per `.txnindex` entry.
pub const TXN_ENTRY_SIZE: usize = 34;

/// One `.index` entry with its absolute offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetEntry {
    /// `"indexEntry"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Base offset + relative offset.
    pub offset: i64,
    /// Byte position of the batch in the `.log`.
    pub position: i32,
}

/// One `.timeindex` entry with its absolute offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeEntry {
    /// `"timeIndexEntry"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The max timestamp up to `offset`.
    pub timestamp: i64,
    /// Base offset + relative offset.
    pub offset: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TxnLine {
    #[serde(rename = "type")]
    kind: &'static str,
    version: i16,
    producer_id: i64,
    first_offset: i64,
    last_offset: i64,
    last_stable_offset: i64,
}

/// All whole entries of an offset index (no zero-stop), through segment-store's index view.
/// One at a time: an index may be gigabytes of entries.
pub fn offset_entries(base: i64, bytes: &[u8]) -> impl Iterator<Item = OffsetEntry> + '_ {
    let view = OffsetIndexView::new(base, bytes);
    (0..view.entries())
        .filter_map(move |n| view.entry(n))
        .map(|e| OffsetEntry {
            kind: "indexEntry",
            offset: e.offset,
            position: e.position.0 as i32,
        })
}

/// All whole entries of a time index (no zero-stop), through segment-store's index view.
/// One at a time: an index may be gigabytes of entries.
pub fn time_entries(base: i64, bytes: &[u8]) -> impl Iterator<Item = TimeEntry> + '_ {
    let view = TimeIndexView::new(base, bytes);
    (0..view.entries())
        .filter_map(move |n| view.entry(n))
        .map(|e| TimeEntry {
            kind: "timeIndexEntry",
            timestamp: e.timestamp,
            offset: e.offset,
        })
}

/// Kafka's `OffsetIndex.sanityCheck` (segment-store's index view), in Kafka's words.
pub fn offset_index_sanity(base: i64, bytes: &[u8]) -> Result<(), String> {
    match OffsetIndexView::new(base, bytes).sanity_check() {
        Ok(()) => Ok(()),
        Err(IndexCorruption::LastOffsetBelowBase { last_offset, .. }) => Err(format!(
            "corrupt index: the last offset is {last_offset} which is less than the base offset \
             {base}"
        )),
        Err(IndexCorruption::LengthNotMultiple { len, entry_size }) => Err(format!(
            "corrupt index: {len} bytes is not a multiple of {entry_size}"
        )),
        Err(e) => Err(format!("corrupt index: {e}")),
    }
}

/// Kafka's `TimeIndex.sanityCheck` (segment-store's index view), in Kafka's words.
pub fn time_index_sanity(base: i64, bytes: &[u8]) -> Result<(), String> {
    match TimeIndexView::new(base, bytes).sanity_check() {
        Ok(()) => Ok(()),
        Err(IndexCorruption::LastTimestampBelowFirst { first, last }) => Err(format!(
            "corrupt time index: the last timestamp is {last} which is less than the first \
             timestamp {first}"
        )),
        Err(IndexCorruption::LastOffsetBelowBase { last_offset, .. }) => Err(format!(
            "corrupt time index: the last offset is {last_offset} which is less than the base \
             offset {base}"
        )),
        Err(IndexCorruption::LengthNotMultiple { len, entry_size }) => Err(format!(
            "corrupt time index: {len} bytes is not a multiple of {entry_size}"
        )),
        Err(e) => Err(format!("corrupt time index: {e}")),
    }
}

/// The last offset of the first batch in `log[position .. position + max_message_size]` (Kafka:
/// `fileRecords.slice(position, maxMessageSize).batches().iterator().next().lastOffset()`).
pub fn first_batch_last_offset(log: &[u8], position: i32, max_message_size: i32) -> Option<i64> {
    let start = usize::try_from(position).ok()?;
    let len = usize::try_from(max_message_size).ok()?;
    let end = start.saturating_add(len).min(log.len());
    let slice = log.get(start..end)?;
    match Batches::new(slice, start as u64).next() {
        Some(Ok(entry)) => Some(entry.last_offset()),
        _ => None,
    }
}

/// Time index problems of one file, printed like Kafka's `TimeIndexDumpErrors`.
#[derive(Debug, Default)]
pub struct TimeIndexErrors {
    /// Absolute path of the `.timeindex`.
    pub file: String,
    /// (index timestamp, max timestamp in the log batch).
    pub mismatches: Vec<(i64, i64)>,
    /// (index timestamp, previous index timestamp).
    pub out_of_order: Vec<(i64, i64)>,
    /// (index offset, last offset of the batch found, or −1).
    pub not_found: Vec<(i64, i64)>,
    /// How many `not_found` entries name a record inside a batch rather than its last offset:
    /// what Kafka 2.x wrote (the offset of the batch's max-timestamp record). Kafka 4's tool
    /// reports them as not found; they are not damage.
    pub legacy_entries: usize,
    /// Problems past the first `KEPT_PROBLEMS` of their kind: counted, not kept.
    pub omitted: u64,
    /// Whether one of them was damage (not a Kafka 2.x entry).
    pub omitted_damage: bool,
}

impl TimeIndexErrors {
    fn is_empty(&self) -> bool {
        self.mismatches.is_empty()
            && self.out_of_order.is_empty()
            && self.not_found.is_empty()
            && self.omitted == 0
    }

    /// Problems other than Kafka 2.x entries.
    fn is_damage(&self) -> bool {
        !self.mismatches.is_empty()
            || !self.out_of_order.is_empty()
            || self.not_found.len() > self.legacy_entries
            || self.omitted_damage
    }

    /// Pushes the damage `x` (a mismatch, an out-of-order entry) if `v` holds fewer than
    /// [`KEPT_PROBLEMS`]; counts it otherwise.
    fn keep(v: &mut Vec<(i64, i64)>, x: (i64, i64), omitted: &mut u64, damage: &mut bool) {
        if v.len() < KEPT_PROBLEMS {
            v.push(x);
        } else {
            *omitted += 1;
            *damage = true;
        }
    }

    /// An entry whose offset is not a batch's last offset (`legacy`: inside a batch, as Kafka
    /// 2.x wrote them).
    fn not_found_entry(&mut self, offset: i64, found: i64, legacy: bool) {
        if self.not_found.len() < KEPT_PROBLEMS {
            self.not_found.push((offset, found));
            self.legacy_entries += usize::from(legacy);
        } else {
            self.omitted += 1;
            self.omitted_damage |= !legacy;
        }
    }
}

/// Prints the time index problems of all files, grouped by kind as Kafka does.
pub(crate) fn print_time_index_errors(
    list: &[TimeIndexErrors],
    err: &mut impl Write,
) -> io::Result<()> {
    for t in list.iter().filter(|t| !t.mismatches.is_empty()) {
        writeln!(err, "Found timestamp mismatch in :{}", t.file)?;
        for (a, b) in &t.mismatches {
            writeln!(err, "  Index timestamp: {a}, log timestamp: {b}")?;
        }
    }
    for t in list.iter().filter(|t| !t.out_of_order.is_empty()) {
        writeln!(err, "Found out of order timestamp in :{}", t.file)?;
        for (a, b) in &t.out_of_order {
            writeln!(
                err,
                "  Index timestamp: {a}, Previously indexed timestamp: {b}"
            )?;
        }
    }
    for t in list.iter().filter(|t| !t.not_found.is_empty()) {
        writeln!(
            err,
            "The following indexed offsets are not found in :{}",
            t.file
        )?;
        for (a, b) in &t.not_found {
            writeln!(err, "Indexed offset: {a}, found log offset: {b}")?;
        }
    }
    Ok(())
}

/// `<dir>/<name up to the first '.'>.log`, the segment an index belongs to.
pub fn companion_log(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    path.with_file_name(format!("{stem}{}", FileKind::Log.suffix()))
}

/// (base offset, last offset, max record timestamp) of a batch of the log.
fn batch_summary(entry: &LogEntry<'_>) -> (i64, i64, i64) {
    let max_ts = match entry {
        LogEntry::V2(b) => b
            .records(&DecodeLimits::default())
            .ok()
            .and_then(|rs| {
                rs.iter()
                    .map(|r| r.map(|r| r.timestamp()))
                    .collect::<Result<Vec<_>, _>>()
                    .ok()
            })
            .and_then(|ts| ts.into_iter().max())
            .unwrap_or(-1),
        LogEntry::Legacy(_) => -1,
    };
    let base = match entry {
        LogEntry::V2(b) => b.base_offset(),
        LogEntry::Legacy(l) => l.offset(),
    };
    (base, entry.last_offset(), max_ts)
}

/// The batches of a log walked as the time index's entries ask for them: the first batch whose
/// last offset reaches an offset, found from where the previous search stopped (from the start
/// again only when an entry's offset goes back). Nothing is kept but the current batch: the
/// log may be gigabytes.
struct BatchCursor<'a> {
    log: &'a [u8],
    batches: record_format::BatchIterator<'a>,
    current: Option<(i64, i64, i64)>,
    last_query: Option<i64>,
}

impl<'a> BatchCursor<'a> {
    fn new(log: &'a [u8]) -> Self {
        BatchCursor {
            log,
            batches: Batches::new(log, 0),
            current: None,
            last_query: None,
        }
    }

    /// (base, last, max timestamp) of the first batch whose last offset is `>= offset`.
    fn find(&mut self, offset: i64) -> Option<(i64, i64, i64)> {
        // The first batch reaching a larger offset is never before the one reaching a smaller
        // one: the walk goes on from here unless the offset went back.
        if self.last_query.is_some_and(|q| q > offset) {
            self.batches = Batches::new(self.log, 0);
            self.current = None;
        }
        self.last_query = Some(offset);
        loop {
            if let Some(c) = self.current.filter(|(_, last, _)| *last >= offset) {
                return Some(c);
            }
            let Some(Ok(entry)) = self.batches.next() else {
                self.current = None;
                return None;
            };
            self.current = Some(batch_summary(&entry));
        }
    }
}

/// An index or log file for reading: mapped if large (page cache, not the process's memory),
/// read if small; one that cannot be mapped and is longer than [`MAX_READ_BYTES`] is an error
/// that names its size.
fn open_bytes(path: &Path) -> io::Result<segment_store::internals::ReadOnlyBytes> {
    use segment_store::internals::ReadOnlyBytes;
    use segment_store::{StdFs, Storage};
    let to_io = |e: segment_store::SegmentError| {
        io::Error::new(e.io_kind().unwrap_or(io::ErrorKind::Other), e.to_string())
    };
    let handle = StdFs
        .open(path, segment_store::OpenMode::Read)
        .map_err(to_io)?;
    let size = handle.len().map_err(to_io)?;
    if let Some(map) = ReadOnlyBytes::map_guarded(&StdFs, path, size).map_err(to_io)? {
        return Ok(map);
    }
    if size > MAX_READ_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{size} bytes, more than is read where the file cannot be mapped ({MAX_READ_BYTES} bytes)"),
        ));
    }
    ReadOnlyBytes::read_from(handle.as_ref(), size).map_err(to_io)
}

/// The longest index or log read into memory where it cannot be mapped.
const MAX_READ_BYTES: u64 = 32 << 20;

impl<O: Write, E: Write> Dumper<'_, O, E> {
    fn read_index(
        &mut self,
        path: &Path,
    ) -> io::Result<Option<segment_store::internals::ReadOnlyBytes>> {
        match open_bytes(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) => {
                self.read_failed(path, &e)?;
                Ok(None)
            }
        }
    }

    /// The segment's `.log`, or `None` with a warning (entries are then printed unverified).
    fn read_companion_log(
        &mut self,
        path: &Path,
    ) -> io::Result<Option<segment_store::internals::ReadOnlyBytes>> {
        let log = companion_log(path);
        match open_bytes(&log) {
            Ok(b) => Ok(Some(b)),
            Err(e) if self.args.verify_index_only => {
                // Verifying was asked for and cannot be done: that is a failure, not a pass.
                self.damaged();
                writeln!(
                    self.err,
                    "{}: not verified: no log segment {} ({})",
                    path.display(),
                    log.display(),
                    io_msg(&e)
                )?;
                Ok(None)
            }
            Err(e) => {
                writeln!(
                    self.err,
                    "warning: {}: not verified against {}: {}",
                    path.display(),
                    log.display(),
                    io_msg(&e)
                )?;
                Ok(None)
            }
        }
    }

    fn sanity_result(&mut self, path: &Path, r: Result<(), String>) -> io::Result<()> {
        match r {
            Ok(()) => writeln!(self.out, "{} passed sanity check.", path.display()),
            Err(msg) => {
                self.damaged();
                writeln!(self.err, "{}: {msg}", path.display())
            }
        }
    }

    fn partial_entry(
        &mut self,
        path: &Path,
        len: usize,
        size: usize,
    ) -> io::Result<Option<ErrorJson>> {
        let extra = len % size;
        if extra == 0 {
            return Ok(None);
        }
        self.damaged();
        let position = (len - extra) as u64;
        let msg = format!("{extra} bytes at the end do not form a {size}-byte entry");
        writeln!(
            self.err,
            "{}: {msg} at byte position {position}",
            path.display()
        )?;
        Ok(Some(ErrorJson::other("partialEntry", position, msg)))
    }

    fn entries_summary(
        &mut self,
        entries: usize,
        len: usize,
        size: usize,
        error: Option<ErrorJson>,
    ) -> io::Result<()> {
        let valid = (len - len % size) as u64;
        json::emit(
            self.out,
            &EntriesSummary {
                kind: "summary",
                entries,
                valid_bytes: valid,
                invalid_bytes: len as u64 - valid,
                error,
            },
        )
    }

    /// Dumps a `.index` file.
    pub(crate) fn dump_offset_index(&mut self, path: &Path) -> io::Result<()> {
        let base = self.base_offset(path)?;
        let Some(bytes) = self.read_index(path)? else {
            return Ok(());
        };
        let bytes = bytes.bytes();
        if offset_entries(base, bytes).next().is_none() {
            let error = self.partial_entry(path, bytes.len(), OFFSET_ENTRY_SIZE)?;
            if self.args.json {
                return self.entries_summary(0, bytes.len(), OFFSET_ENTRY_SIZE, error);
            }
            return writeln!(self.out, "{} is empty.", path.display());
        }
        if self.args.index_sanity_check {
            return self.sanity_result(path, offset_index_sanity(base, bytes));
        }
        let mut error = self.partial_entry(path, bytes.len(), OFFSET_ENTRY_SIZE)?;
        let log = self.read_companion_log(path)?;
        let log = log.as_ref().map(|l| l.bytes());
        let mut mismatches = BTreeMap::new();
        let mut printed = 0;
        for (i, e) in offset_entries(base, bytes).enumerate() {
            if i > 0 && e.offset == base {
                break;
            }
            if let Some(log) = log {
                let found = first_batch_last_offset(log, e.position, self.args.max_message_size)
                    .unwrap_or(-1);
                if found != e.offset {
                    let omitted = &mut self.omitted_problems;
                    super::log::keep_pair(&mut mismatches, Reverse(e.offset), found, omitted);
                    error.get_or_insert_with(|| {
                        ErrorJson::other(
                            "indexMismatch",
                            (i * OFFSET_ENTRY_SIZE) as u64,
                            format!(
                                "index offset {} points at position {} whose batch has last offset {found}",
                                e.offset, e.position
                            ),
                        )
                    });
                }
            }
            if self.args.json {
                json::emit(self.out, &e)?;
            } else if !self.args.verify_index_only {
                writeln!(self.out, "offset: {} position: {}", e.offset, e.position)?;
            }
            printed += 1;
        }
        if !mismatches.is_empty() {
            self.damaged();
            self.index_mismatches.push((absolute(path), mismatches));
        }
        if self.args.json {
            self.entries_summary(printed, bytes.len(), OFFSET_ENTRY_SIZE, error)?;
        }
        Ok(())
    }

    /// Dumps a `.timeindex` file.
    pub(crate) fn dump_time_index(&mut self, path: &Path) -> io::Result<()> {
        let base = self.base_offset(path)?;
        let Some(bytes) = self.read_index(path)? else {
            return Ok(());
        };
        let bytes = bytes.bytes();
        if self.args.index_sanity_check {
            return self.sanity_result(path, time_index_sanity(base, bytes));
        }
        let mut error = self.partial_entry(path, bytes.len(), TIME_ENTRY_SIZE)?;
        let log = if time_entries(base, bytes).next().is_none() {
            None
        } else {
            self.read_companion_log(path)?
        };
        let mut batches = log.as_ref().map(|l| BatchCursor::new(l.bytes()));
        let mut errors = TimeIndexErrors {
            file: absolute(path),
            ..TimeIndexErrors::default()
        };
        let mut prev_ts = -1i64;
        let mut printed = 0;
        for (i, e) in time_entries(base, bytes).enumerate() {
            if i > 0 && e.offset == base {
                break;
            }
            if let Some(batches) = &mut batches {
                match batches.find(e.offset) {
                    None => errors.not_found_entry(e.offset, -1, false),
                    Some((base, last, _)) if last != e.offset => {
                        errors.not_found_entry(e.offset, last, base <= e.offset)
                    }
                    Some((_, _, max_ts)) => {
                        if max_ts != e.timestamp {
                            TimeIndexErrors::keep(
                                &mut errors.mismatches,
                                (e.timestamp, max_ts),
                                &mut errors.omitted,
                                &mut errors.omitted_damage,
                            );
                        }
                        if prev_ts >= e.timestamp {
                            TimeIndexErrors::keep(
                                &mut errors.out_of_order,
                                (e.timestamp, prev_ts),
                                &mut errors.omitted,
                                &mut errors.omitted_damage,
                            );
                        }
                    }
                }
                if errors.is_damage() && error.is_none() {
                    error = Some(ErrorJson::other(
                        "timeIndexMismatch",
                        (i * TIME_ENTRY_SIZE) as u64,
                        format!(
                            "entry (timestamp {}, offset {}) does not match the log",
                            e.timestamp, e.offset
                        ),
                    ));
                }
            }
            if self.args.json {
                json::emit(self.out, &e)?;
            } else if !self.args.verify_index_only {
                writeln!(self.out, "timestamp: {} offset: {}", e.timestamp, e.offset)?;
            }
            prev_ts = e.timestamp;
            printed += 1;
        }
        self.omitted_problems += errors.omitted;
        if errors.is_damage() {
            self.damaged();
        }
        if !errors.is_empty() {
            self.time_index_errors.push(errors);
        }
        if self.args.json {
            self.entries_summary(printed, bytes.len(), TIME_ENTRY_SIZE, error)?;
        }
        Ok(())
    }

    /// Dumps a `.txnindex` file.
    pub(crate) fn dump_txn_index(&mut self, path: &Path) -> io::Result<()> {
        self.base_offset(path)?;
        let Some(bytes) = self.read_index(path)? else {
            return Ok(());
        };
        let bytes = bytes.bytes();
        let mut error = self.partial_entry(path, bytes.len(), TXN_ENTRY_SIZE)?;
        let mut printed = 0;
        for (i, chunk) in bytes.chunks_exact(TXN_ENTRY_SIZE).enumerate() {
            let Ok(raw) = <&[u8; TXN_ENTRY_SIZE]>::try_from(chunk) else {
                break;
            };
            let t = AbortedTxn::from_bytes(raw);
            if t.version > 0 {
                let position = (i * TXN_ENTRY_SIZE) as u64;
                let msg = format!("unexpected aborted transaction version {}", t.version);
                writeln!(
                    self.err,
                    "{}: {msg} at byte position {position}",
                    path.display()
                )?;
                self.damaged();
                error = Some(ErrorJson::other("badVersion", position, msg));
                break;
            }
            if self.args.json {
                json::emit(
                    self.out,
                    &TxnLine {
                        kind: "abortedTxn",
                        version: t.version,
                        producer_id: t.producer_id,
                        first_offset: t.first_offset,
                        last_offset: t.last_offset,
                        last_stable_offset: t.last_stable_offset,
                    },
                )?;
            } else {
                writeln!(
                    self.out,
                    "version: {} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
                    t.version, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                )?;
            }
            printed += 1;
        }
        if self.args.json {
            self.entries_summary(printed, bytes.len(), TXN_ENTRY_SIZE, error)?;
        }
        Ok(())
    }
}
