//! The child process of the SIGKILL test (`crates/testkit/tests/kill9.rs`): works on a log
//! directory until it is killed. See [`testkit::kill_child`].

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use testkit::kill_child::{run, KillChildArgs};

fn main() -> ExitCode {
    let args = KillChildArgs::parse();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let stderr = io::stderr();
    let mut err = stderr.lock();
    let code = run(&args, &mut out, &mut err);
    let _ = out.flush();
    ExitCode::from(code)
}
