//! Framing and CRC checking of a segment's entries on every core while recovery applies them in
//! order.
//!
//! Recovery must apply batches strictly in log order and stop at the first invalid one, but
//! checking CRCs is most of its cost and needs no order. The file is cut into chunks of about
//! [`CHUNK_BYTES`] of whole entries. A unit of work is "frame the next chunk (walk its headers
//! from the framing frontier), then check every CRC in it"; framing is short and serialised by a
//! lock, checking runs in parallel. Helper threads do units until the file is framed; the applying
//! thread does one whenever the chunk it needs next is not ready yet, so no core idles. Nothing
//! past an invalid entry is ever applied, and the first problem in log order is the one reported.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use record_format::{Batches, FormatError, IterEnd, LogEntry};

/// Bytes of entries per chunk: large enough that a unit's bookkeeping costs nothing next to its
/// CRCs, small enough that applying starts a fraction of a millisecond after recovery does.
pub(crate) const CHUNK_BYTES: usize = 1024 * 1024;

const PENDING: u8 = 0;
const VALID: u8 = 1;
const INVALID: u8 = 2;

/// Why framing stopped.
#[derive(Debug, Clone)]
pub(crate) enum FrameEnd {
    /// A malformed entry (length, magic, header) at the error's position.
    Error(FormatError),
    /// The iterator's own end: complete, or an incomplete trailing entry.
    End(IterEnd),
}

#[derive(Debug)]
struct Frontier {
    /// Byte position (in `data`) where the next chunk starts.
    pos: usize,
    /// Index of the next chunk.
    next: usize,
    /// Set once framing reached the end or a malformed entry.
    end: Option<FrameEnd>,
    /// No more units (an invalid chunk was found, or the applier gave up).
    stopped: bool,
}

/// One file's chunks, their entries and CRC verdicts.
pub(crate) struct Chunks<'a> {
    data: &'a [u8],
    base_position: u64,
    chunks: Vec<OnceLock<Vec<LogEntry<'a>>>>,
    verdicts: Vec<AtomicU8>,
    /// Number of chunks once framing has ended, else `usize::MAX`.
    total: AtomicUsize,
    frontier: Mutex<Frontier>,
}

/// What the applier gets for chunk `i`.
pub(crate) enum Ready<'c, 'a> {
    /// The chunk's entries and whether every CRC in it matched.
    Chunk(&'c [LogEntry<'a>], bool),
    /// There is no chunk `i`: framing ended before it.
    Finished,
}

impl<'a> Chunks<'a> {
    /// `data` is the whole file; its first byte is at `base_position`.
    pub(crate) fn new(data: &'a [u8], base_position: u64) -> Self {
        // Every chunk but the last holds at least CHUNK_BYTES, so this many slots always suffice
        // (the last slot also takes whatever remains).
        let slots = data.len() / CHUNK_BYTES + 2;
        Self {
            data,
            base_position,
            chunks: (0..slots).map(|_| OnceLock::new()).collect(),
            verdicts: (0..slots).map(|_| AtomicU8::new(PENDING)).collect(),
            total: AtomicUsize::new(usize::MAX),
            frontier: Mutex::new(Frontier {
                pos: 0,
                next: 0,
                end: None,
                stopped: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Frontier> {
        self.frontier.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frames the next chunk and checks its CRCs. Returns `false` once there is nothing left.
    pub(crate) fn work(&self) -> bool {
        let Some(i) = self.frame_next() else {
            return false;
        };
        let entries = self.chunks.get(i).and_then(OnceLock::get);
        let valid = entries.is_none_or(|es| es.iter().all(|e| e.validate().is_ok()));
        if let Some(v) = self.verdicts.get(i) {
            v.store(if valid { VALID } else { INVALID }, Ordering::Release);
        }
        if !valid {
            // Nothing after an invalid entry is applied: stop framing.
            self.stop();
        }
        true
    }

    fn frame_next(&self) -> Option<usize> {
        let mut f = self.lock();
        if f.stopped || f.end.is_some() {
            return None;
        }
        let i = f.next;
        let slot = self.chunks.get(i)?;
        let last_slot = i + 1 == self.chunks.len();
        let rest = self.data.get(f.pos..).unwrap_or_default();
        let mut it = Batches::new(rest, self.base_position + f.pos as u64);
        let (mut entries, mut bytes) = (Vec::new(), 0usize);
        let mut end = None;
        while bytes < CHUNK_BYTES || last_slot {
            match it.next() {
                Some(Ok(e)) => {
                    bytes += e.size_in_bytes();
                    entries.push(e);
                }
                Some(Err(e)) => {
                    end = Some(FrameEnd::Error(e));
                    break;
                }
                None => {
                    end = Some(FrameEnd::End(
                        it.stopped_at().cloned().unwrap_or(IterEnd::Complete),
                    ));
                    break;
                }
            }
        }
        // An iterator that stopped exactly at a chunk boundary is found out by the next unit.
        f.pos += bytes;
        f.next = i + 1;
        if end.is_some() {
            f.end = end;
            self.total.store(i + 1, Ordering::Release);
        }
        // `slot` is set once: only the holder of the frontier lock frames chunk `i`.
        let _ = slot.set(entries);
        Some(i)
    }

    /// Waits for chunk `i`, doing units of work while it is not ready.
    pub(crate) fn ready(&self, i: usize) -> Ready<'_, 'a> {
        loop {
            // (`i` past the slots cannot happen: the last slot frames to the end of the data.)
            if i >= self.total.load(Ordering::Acquire) || i >= self.chunks.len() {
                return Ready::Finished;
            }
            let verdict = self
                .verdicts
                .get(i)
                .map_or(VALID, |v| v.load(Ordering::Acquire));
            if verdict != PENDING {
                let entries = self
                    .chunks
                    .get(i)
                    .and_then(OnceLock::get)
                    .map_or(&[][..], Vec::as_slice);
                return Ready::Chunk(entries, verdict == VALID);
            }
            if !self.work() {
                // Chunk `i` is being checked by another thread (it is at most one unit of work
                // away), or it will never be framed because the units were stopped.
                let f = self.lock();
                if f.stopped && i >= f.next {
                    return Ready::Finished;
                }
                drop(f);
                std::thread::yield_now();
            }
        }
    }

    /// Why framing stopped (once [`Ready::Finished`] was returned).
    pub(crate) fn end(&self) -> Option<FrameEnd> {
        self.lock().end.clone()
    }

    /// No further unit starts (running ones finish).
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
    }
}

/// Helper threads for recovery's CRC checks: every other core, at most three.
pub(crate) fn helper_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .min(3)
}
