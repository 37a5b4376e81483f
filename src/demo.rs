//! `seglog demo`: placeholder until the demo subcommand lands.

use std::io::Write;

use clap::Parser;

use crate::Status;

/// Arguments of `seglog demo` (none yet).
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "demo",
    about = "Run the seglog demo on built-in sample data",
    after_help = "Example:\n  seglog demo"
)]
pub struct DemoArgs {}

/// Prints one placeholder line.
pub fn run(_args: &DemoArgs, out: &mut impl Write, _err: &mut impl Write) -> Status {
    match writeln!(
        out,
        "seglog demo: the full demo arrives with the CLI; the record-format layer is in place."
    ) {
        Ok(()) => Status::Success,
        Err(_) => Status::Usage,
    }
}
