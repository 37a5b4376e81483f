//! Fuzz target `log_loader`: see `fuzz/harness_recovery.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness_recovery.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::log_loader(data));
