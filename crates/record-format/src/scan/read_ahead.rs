//! A file read through a handle: one helper thread reads it in chunks a few chunks ahead of the
//! applying thread, which frames and applies each chunk while it is still in the cache the read
//! left it in (a copy into a buffer larger than the CPU's caches costs as much again as the
//! copy).
//!
//! The CRCs of the entries that lie whole in a chunk are checked by the reading thread while the
//! applying thread has another chunk to work on ([`ChunkChain`], [`ChunkChecks`]), else by the
//! applying thread; every other CRC is checked by the applying thread. An entry a chunk ends inside
//! is carried into the next chunk's headroom, or (longer than that) gathered until it is whole.
//! Memory: a few chunks and the longest entry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::{
    helper_threads, scan_trusting, scan_window, Apply, ChunkChain, FormatError, WindowEnd,
};

/// Which thread of [`scan_file`] checks the CRCs of the entries that lie whole in a chunk (those
/// across a chunk boundary are always checked by the applying thread). The result is the same
/// whichever does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkChecks {
    /// The reading thread while the applying thread has a chunk to work on, else the applying
    /// thread: the work balances between the two, whichever of reading and applying is slower.
    #[default]
    Balanced,
    /// Always the reading thread.
    Reader,
    /// Always the applying thread.
    Scanner,
}

/// Bytes [`scan_file`] reads at a time: small enough that a chunk is still in the core's cache
/// when it is checked.
pub const READ_CHUNK_BYTES: usize = 1 << 20;

/// Room before each chunk for the end of an entry the previous chunk ended inside: a whole number
/// of 4 KiB pages, so that a chunk read into a page-aligned buffer starts on a page.
const CHUNK_HEADROOM: usize = 64 << 10;

/// Chunks read ahead of the applying thread.
const READ_AHEAD_CHUNKS: usize = 4;

/// The window of [`scan_file`] on one thread (no helper thread, or a file of one chunk): read,
/// scanned, reused.
pub const SCAN_WINDOW_BYTES: u64 = 32 << 20;

/// How long a thread of [`scan_file`] spins waiting for the other before it parks: a little more
/// than the time a chunk takes to check, so that a thread waiting for the next chunk is rarely
/// parked (waking a parked thread costs the waker a system call and both cores a context switch).
const SPIN_BEFORE_PARKING: std::time::Duration = std::time::Duration::from_micros(200);

/// `read(at, buf)` fills `buf` with the file's bytes from absolute position `at`.
pub type ReadAt<'r, R> = dyn Fn(u64, &mut [u8]) -> Result<(), R> + Sync + 'r;

/// A chunk the reading thread sends: the file's bytes from `at` in `buf` after
/// [`CHUNK_HEADROOM`], and the entries in them whose CRCs it checked.
struct ReadChunk<B> {
    at: u64,
    buf: B,
    checked: Option<std::ops::Range<u64>>,
}

/// The scan of a whole file of `file_size` bytes read through `read` into buffers made by `new_buf` (of the length asked for): the valid
/// entries applied in order by `apply` on this thread; returns where the valid prefix ends (see
/// [`WindowEnd::Done`]). The same entries, order and end as [`super::scan_sequential`] over the
/// file's bytes. `region_bytes` are the regions of the one-thread path's windows.
pub fn scan_file<E, R, B>(
    file_size: u64,
    read: &ReadAt<'_, R>,
    new_buf: &(dyn Fn(usize) -> B + Sync),
    checks: ChunkChecks,
    region_bytes: usize,
    apply: &mut Apply<'_, E>,
) -> Result<Option<FormatError>, E>
where
    E: From<R>,
    R: Send,
    B: AsRef<[u8]> + AsMut<[u8]> + Send,
{
    if helper_threads() == 0 || file_size <= READ_CHUNK_BYTES as u64 {
        return scan_in_windows(file_size, read, new_buf, region_bytes, apply);
    }
    let (free_tx, free_rx) = mpsc::sync_channel::<B>(READ_AHEAD_CHUNKS);
    let (full_tx, full_rx) = mpsc::sync_channel::<Result<ReadChunk<B>, R>>(READ_AHEAD_CHUNKS);
    // Chunks sent and not yet taken by the applying thread.
    let queued = &AtomicUsize::new(0);
    for _ in 0..READ_AHEAD_CHUNKS {
        // Cannot fail: the channel holds as many buffers and its receiver is alive.
        let _ = free_tx.send(new_buf(CHUNK_HEADROOM + READ_CHUNK_BYTES));
    }
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("seglog-read".into())
            .spawn_scoped(scope, move || {
                read_chunks(file_size, read, checks, queued, &free_rx, &full_tx)
            });
        if reader.is_err() {
            drop((free_tx, full_rx));
            return scan_in_windows(file_size, read, new_buf, region_bytes, apply);
        }
        let scanned = apply_chunks(file_size, &full_rx, &free_tx, queued, apply);
        // Ends the reader: it stops at its next send or wait for a buffer.
        drop((free_tx, full_rx));
        scanned
    })
}

/// The reading thread of [`scan_file`]: the chunks in file order, until the file ends or the
/// applying thread drops its ends of the channels.
fn read_chunks<R, B: AsRef<[u8]> + AsMut<[u8]>>(
    size: u64,
    read: &ReadAt<'_, R>,
    checks: ChunkChecks,
    queued: &AtomicUsize,
    free: &mpsc::Receiver<B>,
    full: &mpsc::SyncSender<Result<ReadChunk<B>, R>>,
) {
    let (mut at, mut chain) = (0u64, ChunkChain::new());
    while at < size {
        let Ok(mut buf) = recv_spinning(free) else {
            return;
        };
        let n = (size - at).min(READ_CHUNK_BYTES as u64);
        let end = CHUNK_HEADROOM + n as usize;
        let filled = buf
            .as_mut()
            .get_mut(CHUNK_HEADROOM..end)
            .map_or(Ok(()), |b| read(at, b));
        let chunk = filled.map(|()| {
            let data = buf.as_ref().get(CHUNK_HEADROOM..end).unwrap_or_default();
            // Balanced: the CRCs are checked here only while the applying thread has a chunk to
            // work on; one waiting for this chunk gets it at once and checks them itself.
            let here = match checks {
                ChunkChecks::Balanced => queued.load(Ordering::Acquire) > 0,
                ChunkChecks::Reader => true,
                ChunkChecks::Scanner => false,
            };
            let checked = if here {
                chain.check(at, data)
            } else {
                chain.follow(at, data);
                None
            };
            ReadChunk { at, buf, checked }
        });
        queued.fetch_add(1, Ordering::AcqRel);
        if full.send(chunk).is_err() {
            return;
        }
        at += n;
    }
}

/// The applying side of [`scan_file`]: the chunks in file order.
fn apply_chunks<E: From<R>, R, B: AsRef<[u8]> + AsMut<[u8]>>(
    size: u64,
    full: &mpsc::Receiver<Result<ReadChunk<B>, R>>,
    free: &mpsc::SyncSender<B>,
    queued: &AtomicUsize,
    apply: &mut Apply<'_, E>,
) -> Result<Option<FormatError>, E> {
    // The bytes from `position` up to the next chunk, not yet scanned.
    let (mut position, mut carry) = (0u64, Vec::new());
    // Ends when the reader has sent the last chunk: the scan of that one is `Done`.
    while let Ok(read) = recv_spinning(full) {
        queued.fetch_sub(1, Ordering::AcqRel);
        let ReadChunk {
            at,
            mut buf,
            checked,
        } = read?;
        let n =
            usize::try_from((size - at).min(READ_CHUNK_BYTES as u64)).unwrap_or(READ_CHUNK_BYTES);
        let end = if carry.len() <= CHUNK_HEADROOM {
            let from = CHUNK_HEADROOM - carry.len();
            if let Some(head) = buf.as_mut().get_mut(from..CHUNK_HEADROOM) {
                head.copy_from_slice(&carry);
            }
            let bytes = buf
                .as_ref()
                .get(from..CHUNK_HEADROOM + n)
                .unwrap_or_default();
            let end = scan_trusting(bytes, position, size, checked, apply)?;
            carry.clear();
            if let WindowEnd::Next(next) = end {
                let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                carry.extend_from_slice(bytes.get(rest..).unwrap_or_default());
            }
            end
        } else {
            carry.extend_from_slice(
                buf.as_ref()
                    .get(CHUNK_HEADROOM..CHUNK_HEADROOM + n)
                    .unwrap_or_default(),
            );
            // Other bytes than the ones the reader checked: every CRC is checked here.
            let end = scan_trusting(&carry, position, size, None, apply)?;
            if let WindowEnd::Next(next) = end {
                let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                carry.drain(..rest.min(carry.len()));
            }
            end
        };
        match end {
            WindowEnd::Next(next) => position = next,
            WindowEnd::Done(cut) => return Ok(cut),
        }
        // The reader may be done already: then the buffer is simply dropped.
        let _ = free.send(buf);
    }
    Ok(None)
}

/// [`scan_file`] on this thread alone: one window of [`SCAN_WINDOW_BYTES`] at a time (grown for a
/// longer entry), each checked on the helper threads ([`scan_window`]).
fn scan_in_windows<E: From<R>, R, B: AsRef<[u8]> + AsMut<[u8]>>(
    size: u64,
    read: &ReadAt<'_, R>,
    new_buf: &(dyn Fn(usize) -> B + Sync),
    region_bytes: usize,
    apply: &mut Apply<'_, E>,
) -> Result<Option<FormatError>, E> {
    let to_len = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let mut buf = new_buf(to_len(SCAN_WINDOW_BYTES.min(size)));
    let (mut position, mut window) = (0u64, SCAN_WINDOW_BYTES);
    loop {
        let len = to_len(window.min(size.saturating_sub(position)));
        if buf.as_ref().len() < len {
            buf = new_buf(len);
        }
        let bytes = buf.as_mut().get_mut(..len).unwrap_or_default();
        read(position, bytes)?;
        match scan_window(bytes, position, size, region_bytes, apply)? {
            WindowEnd::Done(cut) => return Ok(cut),
            WindowEnd::Next(next) if next == position => window = window.saturating_mul(2),
            WindowEnd::Next(next) => {
                position = next;
                window = SCAN_WINDOW_BYTES;
            }
        }
    }
}

/// The next item of `rx`: spinning for at most [`SPIN_BEFORE_PARKING`], then parked.
fn recv_spinning<T>(rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvError> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(item) => return Ok(item),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN_BEFORE_PARKING => {
                std::hint::spin_loop();
            }
            Err(mpsc::TryRecvError::Empty) => return rx.recv(),
        }
    }
}
