//! The `seglog` command line tool as a library: one module per subcommand, each a `run` function
//! that writes to `impl Write` (stdout, stderr) and returns a [`Status`], so the binary and the
//! tests call the same code. `main.rs` only parses arguments and dispatches.
//!
//! Exit codes shared by every subcommand ([`Status::code`]): 0 success, 1 the data is damaged
//! (the valid part was still printed), 2 a usage error (bad flags, missing or unreadable file).

pub mod compact;
pub mod crash_test;
pub mod demo;
pub mod dump;
pub mod partition;
pub mod producers;
pub mod recover;
pub mod status;
pub mod verify;

pub use status::Status;
