//! Fuzz target `snapshot`: `seglog::fuzzing::snapshot` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::snapshot(data));
