//! Fuzz target `batch_parse`: `seglog::fuzzing::batch_parse` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::batch_parse(data));
