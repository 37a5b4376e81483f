//! Integration tests of the recovery crate: one binary, one module per subsystem.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

mod audit;
mod barrier;
mod common;
mod crash;
mod fuzz_replay;
mod hw_checkpoint;
mod index_check;
mod loader;
mod log;
mod log_dir_close;
mod mirror;
mod mirror_crash;
mod mirror_epochs;
mod mirror_policies;
mod plan;
mod prop;
mod retention;
mod rules;
mod scaling;
mod snapshot;
