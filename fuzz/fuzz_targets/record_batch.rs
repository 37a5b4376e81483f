//! Fuzz target `record_batch`: `seglog::fuzzing::record_batch` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = seglog::fuzzing::record_batch(data);
});
