//! `seglog`: the command line tool. Argument parsing and dispatch only; every subcommand is a
//! library function in `src/` that writes to `impl Write` (see `lib.rs`).

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use seglog::cli::compact::CompactArgs;
use seglog::cli::crash_test::CrashTestArgs;
use seglog::cli::demo::DemoArgs;
use seglog::cli::dump::DumpArgs;
use seglog::cli::producers::ProducersArgs;
use seglog::cli::recover::RecoverArgs;
use seglog::cli::verify::VerifyArgs;
use seglog::cli::Status;

#[derive(Debug, Parser)]
#[command(
    name = "seglog",
    version,
    about = "Kafka on-disk log format engine with the KIP-1279 MIRROR_PID_RESET barrier",
    after_help = "Examples:\n  seglog demo\n  seglog dump --deep-iteration --print-data-log 00000000000000000000.log\n  seglog verify /var/kafka-logs/orders-0\n  seglog recover /var/kafka-logs\n  seglog producers --audit /var/kafka-logs/orders-0\n\nExit status: 0 success; 1 damaged data or problems found; 2 usage or I/O error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Dump log segments, indexes and producer snapshots (a drop-in for kafka-dump-log.sh)
    Dump(DumpArgs),
    /// Check a partition or log directory as recovery would, without changing anything
    Verify(VerifyArgs),
    /// Recover a partition or log directory (as a broker at startup) and report what was cut
    Recover(RecoverArgs),
    /// One pass of Kafka's log cleaner over a partition; --dry-run to see what it would do
    Compact(CompactArgs),
    /// Producer state rebuilt from a partition's log; --audit for PID collisions
    Producers(ProducersArgs),
    /// Run the KIP-1279 failover demo on built-in sample data
    Demo(DemoArgs),
    /// Crash generated workloads at every I/O point, recover and verify each image
    CrashTest(CrashTestArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let stderr = io::stderr();
    let mut err = stderr.lock();
    let status = match &cli.command {
        Command::Dump(args) => seglog::cli::dump::run(args, &mut out, &mut err),
        Command::Verify(args) => seglog::cli::verify::run(args, &mut out, &mut err),
        Command::Recover(args) => seglog::cli::recover::run(args, &mut out, &mut err),
        Command::Compact(args) => seglog::cli::compact::run(args, &mut out, &mut err),
        Command::Producers(args) => seglog::cli::producers::run(args, &mut out, &mut err),
        Command::Demo(args) => seglog::cli::demo::run(args, &mut out, &mut err),
        Command::CrashTest(args) => seglog::cli::crash_test::run(args, &mut out, &mut err),
    };
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let _ = writeln!(err, "error: cannot write output: {e}");
            Status::Usage.into()
        }
        _ => status.into(),
    }
}

/// `--help` / `--version` print normally (exit 0); any other argument error is one line on
/// stderr and exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            Status::Success.into()
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!("error: a subcommand is required: dump, verify, recover, compact, producers, crash-test or demo (see 'seglog --help')");
            Status::Usage.into()
        }
        _ => {
            // clap's message up to its first blank line, on one line: a list such as the
            // missing required arguments follows the first line, indented.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let message = if message.is_empty() {
                "error: invalid arguments".to_owned()
            } else {
                message.join(" ")
            };
            eprintln!("{message} (see '{}')", help_command());
            Status::Usage.into()
        }
    }
}

/// `seglog <subcommand> --help` when the arguments name a subcommand, `seglog --help` otherwise.
fn help_command() -> String {
    let sub = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    match sub {
        Some(name) if Cli::command().find_subcommand(&name).is_some() => {
            format!("seglog {name} --help")
        }
        _ => "seglog --help".to_owned(),
    }
}
