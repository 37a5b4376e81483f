//! Fuzz target `batch_parse`: see `fuzz/harness.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::batch_parse(data));
