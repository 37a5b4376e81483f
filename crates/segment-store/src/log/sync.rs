//! The synchronisation primitives `publish.rs` is written against: `std`'s atomics and an
//! `arc-swap` cell here; `tests/loom_publish.rs` gives the same names to `loom`'s and checks the
//! same code with them.

pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A value readers load and the writer replaces whole, without a lock (`arc-swap`).
#[derive(Debug, Default)]
pub(crate) struct StateCell<T>(arc_swap::ArcSwap<T>);

impl<T: Copy> StateCell<T> {
    pub(crate) fn new(value: T) -> StateCell<T> {
        StateCell(arc_swap::ArcSwap::from_pointee(value))
    }

    /// The value last stored (acquire).
    pub(crate) fn load(&self) -> T {
        **self.0.load()
    }

    /// Replaces the value (release).
    pub(crate) fn store(&self, value: T) {
        self.0.store(std::sync::Arc::new(value));
    }
}
