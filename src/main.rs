//! `seglog`: the command line tool.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") => {
            println!("seglog demo: the full demo arrives with the CLI; the record-format layer is in place.");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: seglog demo");
            ExitCode::from(2)
        }
    }
}
