//! Fuzz target `partition`: `seglog::fuzzing::partition` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = seglog::fuzzing::partition(data);
});
