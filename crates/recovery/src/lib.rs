//! Producer state, snapshots, log loading, and the KIP-1279 `MIRROR_PID_RESET` barrier.
