//! A model check, with `loom`, of how the writer of a partition hands the active segment's tail
//! to readers that take no lock (`src/log/publish.rs`, `docs/design.md` "Concurrency"): every
//! interleaving of one writer and one reader is explored, with the memory orderings the code
//! uses.
//!
//! The code checked is `publish.rs` itself, compiled here a second time with `loom`'s atomics
//! in place of `std`'s (the `sync` module below; the library's `log/sync.rs` gives the same names
//! to `std`'s and `arc-swap`'s). The `.log` is modelled as words written with relaxed stores (a
//! batch is one word, its value says which offset and which generation wrote it), the log's
//! pointer to its current tail as a mutex-guarded `Arc` (an `arc-swap` in the library).
//!
//! The writer appends two batches, truncates the second away and appends another over the same
//! bytes. The invariants: a reader never reads a byte of the `.log` below a published size that
//! was not written before the publication, nor an index entry that points at one; and a reader
//! whose truncation count did not move during its read never returns a byte written after a
//! truncation began with a tail published before it.
//!
//! Three tests show the model finds each bug the protocol rules out: a writer that publishes the
//! size before it writes the bytes, a reader that ignores the truncation count, and a reader that
//! compares the count before and after its read but not with its tail's (it may load the count
//! of a truncation under way and the tail of before it).

use loom::thread;
use std::sync::Arc;

/// What `publish.rs` is written against, from `loom`.
mod sync {
    pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};

    /// A value replaced whole: a mutex in the model (an `arc-swap` in the library; both a
    /// release store and an acquire load).
    #[derive(Debug, Default)]
    pub(crate) struct StateCell<T>(loom::sync::Mutex<T>);

    impl<T: Copy> StateCell<T> {
        pub(crate) fn new(value: T) -> StateCell<T> {
            StateCell(loom::sync::Mutex::new(value))
        }

        pub(crate) fn load(&self) -> T {
            *self.0.lock().unwrap()
        }

        pub(crate) fn store(&self, value: T) {
            *self.0.lock().unwrap() = value;
        }
    }
}

#[path = "../src/log/publish.rs"]
#[allow(dead_code)]
mod publish;

use publish::{ActiveTail, TailState, TruncationCount};
use sync::{AtomicU64, Ordering};

/// Batches the model's `.log` holds at most.
const WORDS: usize = 2;
/// The generation a batch written after the truncation carries (`value >> 8`).
const AFTER_TRUNCATION: u64 = 1;

fn value(offset: u32, generation: u64) -> u64 {
    generation << 8 | (u64::from(offset) + 1)
}

/// What one read returned: (relative offset, word) per published entry.
struct Read {
    words: Vec<(u32, u64)>,
    generation: u64,
}

impl Read {
    /// Panics on a word not written before the tail published it, or written after a
    /// truncation that began after this tail was published.
    fn check(self) -> Vec<(u32, u64)> {
        for &(relative, w) in &self.words {
            assert!(
                w & 0xff == u64::from(relative) + 1,
                "the reader saw an unwritten byte: {w}"
            );
            assert!(
                w >> 8 <= self.generation,
                "the reader saw a byte written after the truncation, under an older tail: {w}"
            );
        }
        self.words
    }
}

struct Log {
    file: [AtomicU64; WORDS],
    tail: loom::sync::Mutex<Arc<ActiveTail>>,
    truncations: TruncationCount,
}

impl Log {
    fn new() -> Log {
        Log {
            file: std::array::from_fn(|_| AtomicU64::new(0)),
            tail: loom::sync::Mutex::new(Arc::new(ActiveTail::new(TailState::default(), 0))),
            truncations: TruncationCount::default(),
        }
    }

    fn tail(&self) -> Arc<ActiveTail> {
        Arc::clone(&self.tail.lock().unwrap())
    }

    /// One batch (one word) at offset `offset`, written then published, or published first when
    /// `publish_first` (the bug).
    fn append(&self, offset: u32, generation: u64, publish_first: bool) {
        let tail = self.tail();
        let position = offset as usize;
        let write = || {
            if let Some(w) = self.file.get(position) {
                w.store(value(offset, generation), Ordering::Relaxed);
            }
        };
        if !publish_first {
            write();
        }
        assert!(tail.push_offset_entry(offset, offset));
        tail.publish(u64::from(offset) + 1, generation as i64, i64::from(offset));
        if publish_first {
            write();
        }
    }

    /// Cuts the log to `offset` batches: the count first, then a new tail, then the bytes.
    fn truncate_to(&self, offset: u32) {
        let truncations = self.truncations.begin();
        let old = self.tail();
        let cut = old.truncated(
            offset as usize,
            0,
            TailState {
                size: u64::from(offset),
                max_timestamp: -1,
                offset_of_max_timestamp: -1,
                ..TailState::default()
            },
            truncations,
        );
        *self.tail.lock().unwrap() = Arc::new(cut);
        for w in self.file.iter().skip(offset as usize) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// The words the published offset-index entries point at (the bytes below the published
    /// size), the entries' relative offsets, and the generation the tail had then; `None` when
    /// the tail is not the one of the truncation count `truncations` (pass `None` to ignore it).
    fn read_once(&self, truncations: Option<u64>) -> Option<Read> {
        let tail = self.tail();
        if truncations.is_some_and(|t| t != tail.truncations()) {
            return None;
        }
        let s = tail.snapshot();
        let mut words = Vec::new();
        for n in 0..s.state.offset_entries {
            let (relative, position) = s.offset_entry(n).expect("published entry");
            assert!(u64::from(position) < s.state.size, "entry past the size");
            let w = self.file[position as usize].load(Ordering::Relaxed);
            words.push((relative, w));
        }
        Some(Read {
            words,
            generation: s.state.max_timestamp.max(0) as u64,
        })
    }

    /// `LogReader::with_view`'s retry: a read of a tail made at another count, or during which the
    /// count moved, is done again.
    fn read(&self, attempts: usize) -> Option<Read> {
        self.read_checking(attempts, true)
    }

    /// [`Self::read`], which checks the tail's own count only if `check_tail`.
    fn read_checking(&self, attempts: usize, check_tail: bool) -> Option<Read> {
        for _ in 0..attempts {
            let before = self.truncations.load();
            let r = self.read_once(Some(before).filter(|_| check_tail));
            if r.is_some() && self.truncations.load() == before {
                return r;
            }
            thread::yield_now();
        }
        None
    }
}

fn writer(log: &Log, publish_first: bool) {
    log.append(0, 0, publish_first);
    log.append(1, 0, publish_first);
    log.truncate_to(1);
    log.append(1, AFTER_TRUNCATION, publish_first);
}

fn run(publish_first: bool, read: fn(&Log) -> Option<Read>) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(move || {
        let log = Arc::new(Log::new());
        let w = {
            let log = Arc::clone(&log);
            thread::spawn(move || writer(&log, publish_first))
        };
        let seen = read(&log);
        w.join().unwrap();
        for (relative, w) in seen.map(|r| r.check()).unwrap_or_default() {
            assert_eq!(w & 0xff, u64::from(relative) + 1);
        }
    });
}

#[test]
fn readers_see_only_bytes_and_entries_written_before_their_publication() {
    run(false, |log| log.read(2));
}

#[test]
#[should_panic(expected = "unwritten byte")]
fn a_writer_that_publishes_before_writing_is_caught() {
    run(true, |log| log.read(2));
}

#[test]
#[should_panic(expected = "the reader saw")]
fn a_reader_that_ignores_truncations_is_caught() {
    run(false, |log| log.read_once(None));
}

#[test]
#[should_panic(expected = "the reader saw")]
fn a_reader_that_does_not_match_its_tail_to_the_count_is_caught() {
    run(false, |log| log.read_checking(2, false));
}
