//! A model check, with `loom`, of how readers take a partition's published bounds beside its
//! writer (`recovery::LogReader`, `docs/design.md` "Concurrency"): every interleaving of one
//! writer and one reader, with the memory orderings the protocol uses, is explored.
//!
//! The model: the segments are a `RwLock` (as `LocalLog`'s segment list is) holding the values
//! at each offset, the log end and a truncation count; the published bounds are one atomic
//! word holding the bound and the truncation count it was published at (as one `ReadState` is
//! swapped in whole). The writer appends a committed value, publishes a bound above it,
//! truncates it away, publishes the lower bound, then appends a value it never publishes (an
//! open transaction's, say). A reader must never return that value: bounds published before a
//! truncation must not be used on the segments after it.
//!
//! `a_reader_that_ignores_truncations_reads_past_the_bound` shows the model finds the race the
//! protocol closes: without the truncation checks the reader returns the unpublished value.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, RwLock};
use loom::thread;

/// The committed value the writer appends first, and the value it appends after the truncation
/// and never publishes.
const COMMITTED: u64 = 1;
const UNPUBLISHED: u64 = 2;

#[derive(Default)]
struct Segments {
    values: [u64; 2],
    log_end: usize,
    truncations: u64,
}

struct Partition {
    segments: RwLock<Segments>,
    /// `bound << 32 | truncations`, stored whole.
    published: AtomicU64,
}

impl Partition {
    fn publish(&self, bound: u64) {
        let truncations = self.segments.read().unwrap().truncations;
        self.published
            .store(bound << 32 | truncations, Ordering::Release);
    }

    fn append(&self, value: u64) {
        let mut s = self.segments.write().unwrap();
        let end = s.log_end;
        s.values[end] = value;
        s.log_end += 1;
    }

    fn truncate_to(&self, offset: usize) {
        let mut s = self.segments.write().unwrap();
        for v in &mut s.values[offset..] {
            *v = 0;
        }
        s.log_end = offset;
        s.truncations += 1;
    }

    /// The values below the published bound, as one read copies them.
    fn copy_below(&self, bound: u64) -> Vec<u64> {
        let s = self.segments.read().unwrap();
        let end = (bound as usize).min(s.log_end);
        s.values[..end].to_vec()
    }

    fn truncations(&self) -> u64 {
        self.segments.read().unwrap().truncations
    }

    /// `LogReader::with_view`: bounds that predate the last truncation are loaded again; a read
    /// the log truncated under is done again; after the attempts, nothing is readable.
    fn read(&self, attempts: usize) -> Vec<u64> {
        for _ in 0..attempts {
            let state = self.published.load(Ordering::Acquire);
            let (bound, published_at) = (state >> 32, state & 0xffff_ffff);
            let truncations = self.truncations();
            if truncations != published_at {
                thread::yield_now();
                continue;
            }
            let values = self.copy_below(bound);
            if self.truncations() == truncations {
                return values;
            }
        }
        Vec::new()
    }

    /// A reader without the truncation checks.
    fn read_ignoring_truncations(&self) -> Vec<u64> {
        let bound = self.published.load(Ordering::Acquire) >> 32;
        self.copy_below(bound)
    }
}

fn writer(p: &Partition) {
    p.append(COMMITTED);
    p.publish(1);
    p.truncate_to(0);
    p.publish(0);
    p.append(UNPUBLISHED);
}

fn run(read: fn(&Partition) -> Vec<u64>) {
    loom::model(move || {
        let p = Arc::new(Partition {
            segments: RwLock::new(Segments::default()),
            published: AtomicU64::new(0),
        });
        let w = {
            let p = p.clone();
            thread::spawn(move || writer(&p))
        };
        let seen = read(&p);
        w.join().unwrap();
        assert!(
            !seen.contains(&UNPUBLISHED),
            "the reader returned a value above the bound: {seen:?}"
        );
        assert!(seen.iter().all(|&v| v == COMMITTED), "{seen:?}");
    });
}

#[test]
fn readers_never_use_bounds_published_before_a_truncation() {
    run(|p| p.read(2));
}

#[test]
#[should_panic(expected = "above the bound")]
fn a_reader_that_ignores_truncations_reads_past_the_bound() {
    run(Partition::read_ignoring_truncations);
}
