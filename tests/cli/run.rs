//! Running the real `seglog` executable with `RUST_BACKTRACE=1`.

use std::process::Command;

/// Runs `seglog <args>`; returns (exit code, stdout, stderr).
pub fn seglog(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run seglog");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

pub fn assert_no_panic(stderr: &str) {
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(bad), "{stderr}");
    }
}
