//! Fuzz target `control_record`: `seglog::fuzzing::control_record` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::control_record(data));
