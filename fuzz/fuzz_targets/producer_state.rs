//! Fuzz target `producer_state`: `seglog::fuzzing::producer_state` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::producer_state(data));
