//! Fuzz target `index_files`: `seglog::fuzzing::index_files` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::index_files(data));
