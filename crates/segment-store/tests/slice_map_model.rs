//! A model check, with `loom`, of how a held file slice copies out of a sealed segment's map
//! while the segment's writer may truncate the file (`SharedMap` in `file_records.rs`,
//! `docs/design.md` "Zero-copy fetch: file slices"): every interleaving of one reader and one
//! writer, with the memory orderings the gate uses, is explored.
//!
//! The model: the map's bytes are one word that a copy reads and the truncation overwrites
//! (relaxed: the gate alone must order them; a truncated file under a live map is what a copy
//! must never meet, `SIGBUS`); the gate is the two atomics of `SharedMap`. A copy announces
//! itself in `copies`, then checks `retired`, and reads the map only if it is not retired; the
//! writer sets `retired`, waits until `copies` is zero, then truncates. A copy that read the
//! map must have read it before the truncation in every execution `loom` explores (it explores
//! every value a relaxed load may return), so the model fails if a copy can read the truncated
//! bytes.
//!
//! The two `should_panic` models show it finds the races the gate closes: without the
//! sequentially consistent fences (each side's store may then pass its own later load), and
//! with the copy checking `retired` before it announces itself.
//!
//! The gate orders with `fence(SeqCst)` rather than `SeqCst` accesses: `loom` models the fences
//! fully and treats `SeqCst` accesses as acquire/release.

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

struct Gate {
    /// The map's bytes: read by a copy, overwritten by the truncation.
    map: AtomicU64,
    copies: AtomicUsize,
    retired: AtomicBool,
}

/// One variant of the protocol.
#[derive(Clone, Copy)]
struct Protocol {
    /// Each side's `fence(SeqCst)` between its store and its load of the other's atomic.
    fences: bool,
    /// The copy checks `retired` before it announces itself (the wrong order).
    check_first: bool,
}

const SHARED_MAP: Protocol = Protocol {
    fences: true,
    check_first: false,
};

impl Gate {
    /// `SharedMap::copy_to`: `Some(bytes)` when it read the map, `None` when the map was retired.
    fn copy(&self, p: Protocol) -> Option<u64> {
        let retired = if p.check_first {
            let r = self.retired.load(Ordering::Relaxed);
            self.copies.fetch_add(1, Ordering::Relaxed);
            r
        } else {
            self.copies.fetch_add(1, Ordering::Relaxed);
            if p.fences {
                fence(Ordering::SeqCst);
            }
            self.retired.load(Ordering::Relaxed)
        };
        let copied = (!retired).then(|| self.map.load(Ordering::Relaxed));
        self.copies.fetch_sub(1, Ordering::Release);
        copied
    }

    /// `SharedMap::retire`, then the truncation of the file.
    fn retire_and_truncate(&self, p: Protocol) {
        self.retired.store(true, Ordering::Relaxed);
        if p.fences {
            fence(Ordering::SeqCst);
        }
        while self.copies.load(Ordering::Acquire) != 0 {
            thread::yield_now();
        }
        self.map.store(0, Ordering::Relaxed);
    }
}

fn run(p: Protocol) {
    loom::model(move || {
        let gate = Arc::new(Gate {
            map: AtomicU64::new(7),
            copies: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
        });
        let writer = {
            let gate = gate.clone();
            thread::spawn(move || gate.retire_and_truncate(p))
        };
        let copied = gate.copy(p);
        writer.join().unwrap();
        // A copy that read the map read it whole, before the truncation.
        assert!(copied.is_none_or(|v| v == 7), "{copied:?}");
    });
}

#[test]
fn a_copy_out_of_the_map_never_overlaps_the_truncation() {
    run(SHARED_MAP);
}

#[test]
#[should_panic]
fn without_the_fences_a_copy_overlaps_the_truncation() {
    run(Protocol {
        fences: false,
        ..SHARED_MAP
    });
}

#[test]
#[should_panic]
fn checking_before_announcing_lets_a_copy_overlap_the_truncation() {
    run(Protocol {
        check_first: true,
        ..SHARED_MAP
    });
}
