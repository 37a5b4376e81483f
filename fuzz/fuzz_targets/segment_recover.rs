//! Fuzz target `segment_recover`: `seglog::fuzzing::segment_recover` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::segment_recover(data));
