//! Fuzz target `log_loader`: `seglog::fuzzing::log_loader` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::log_loader(data));
