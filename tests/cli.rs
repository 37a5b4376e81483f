//! End-to-end tests of the `seglog` command line tool: one integration binary, one module per
//! concern (`tests/cli/*.rs`).
//!
//! * `fixtures`: every fixture `.log` under `testdata/` dumped as Kafka text and as JSON, compared
//!   line by line with what the fixture's JSON (written by Kafka's or kafka-python's own reader)
//!   implies under the `DumpLogSegments` format rules, computed here independently.
//! * `golden`: committed outputs under `tests/golden/` (`UPDATE_GOLDEN=1` rewrites them).
//! * `damaged`: bad CRC, truncated tail, garbage, undecodable records/control values: every valid
//!   batch is printed, then the summary, exit 1.
//! * `indexes`: `.index`, `.timeindex`, `.txnindex`, `.snapshot` built in a temp dir.
//! * `dump_flags`, `dump_streamed`: `seglog dump`'s operator flags; a batch of 8 MiB or more
//!   streamed from the file prints malformed UTF-8 as the JDK decodes it.
//! * `errors`: every user error is exit 2 and one stderr line.
//! * `binary`: the real executable: exit codes, no panic or backtrace.
//! * `demo`: `seglog demo` as README's first command runs it.
//! * `crash_test`: `seglog crash-test`, a short randomized run (summary line, exit 0).
//! * `descriptors`: `verify` and `recover` under a low `RLIMIT_NOFILE` (child processes).
//! * `names`: partition folder names as Kafka parses them, topic names refused at create, and
//!   unreadable log-directory checkpoints.
//! * `run`: running the real executable.
//! * `logs`: partitions on real files built with the library, the damages, in-process runners.
//! * `verify`, `recover`, `producers`: the directory subcommands on clean and damaged partitions
//!   (exact findings computed from the bytes written, the read-only guarantee, quarantine
//!   contents, KIP-1279 collision scenarios).

#[path = "cli/binary.rs"]
mod binary;
#[path = "cli/common.rs"]
mod common;
#[path = "cli/crash_test.rs"]
mod crash_test;
#[path = "cli/damaged.rs"]
mod damaged;
#[path = "cli/demo.rs"]
mod demo;
#[path = "cli/descriptors.rs"]
mod descriptors;
#[path = "cli/dump_flags.rs"]
mod dump_flags;
#[path = "cli/dump_streamed.rs"]
mod dump_streamed;
#[path = "cli/errors.rs"]
mod errors;
#[path = "cli/fixtures.rs"]
mod fixtures;
#[path = "cli/golden.rs"]
mod golden;
#[path = "cli/hostile.rs"]
mod hostile;
#[path = "cli/indexes.rs"]
mod indexes;
#[path = "cli/internal_topics.rs"]
mod internal_topics;
#[path = "cli/log_dir.rs"]
mod log_dir;
#[path = "cli/logs.rs"]
mod logs;
#[path = "cli/names.rs"]
mod names;
#[path = "cli/producers.rs"]
mod producers;
#[path = "cli/recover.rs"]
mod recover;
#[path = "cli/run.rs"]
mod run;
#[path = "cli/verify.rs"]
mod verify;
