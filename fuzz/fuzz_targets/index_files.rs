//! Fuzz target `index_files`: see `fuzz/harness_store.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness_store.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::index_files(data));
