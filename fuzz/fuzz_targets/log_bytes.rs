//! Fuzz target `log_bytes`: `seglog::fuzzing::log_bytes` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = seglog::fuzzing::log_bytes(data);
});
