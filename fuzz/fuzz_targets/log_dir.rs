//! Fuzz target `log_dir`: `seglog::fuzzing::log_dir` (feature `fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = seglog::fuzzing::log_dir(data);
});
