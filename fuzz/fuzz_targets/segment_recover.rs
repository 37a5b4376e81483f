//! Fuzz target `segment_recover`: see `fuzz/harness_store.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness_store.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::segment_recover(data));
