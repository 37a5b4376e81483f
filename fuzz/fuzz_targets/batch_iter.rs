//! Fuzz target `batch_iter`: `seglog::fuzzing::batch_iter` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::batch_iter(data));
