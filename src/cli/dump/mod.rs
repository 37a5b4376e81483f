//! `seglog dump`: a drop-in for Kafka's `kafka-dump-log.sh` (`DumpLogSegments`).
//!
//! Text output is Kafka's, line for line (reference §8.2); `--json` prints one JSON object per
//! line instead. Files are dispatched on their suffix: `.log` (and KRaft `.checkpoint`) → batches
//! and records ([`log`]), `.index` / `.timeindex` / `.txnindex` ([`index`]), `.snapshot` →
//! producer state ([`snapshot`]); anything else is `Ignoring unknown file <f>` on stderr.
//!
//! Where seglog differs from Kafka (on purpose):
//! * damaged input (invalid CRC, undecodable records, trailing bytes, index mismatches, corrupt
//!   snapshots) is exit code 1 with one stderr line per problem, after everything valid was
//!   printed; Kafka exits 0, or 1 with a stack trace;
//! * a missing, unreadable or directory path is one stderr line and exit 2 before any output;
//! * a file name without a numeric base offset (`plain.log`) is read with base offset 0 and a
//!   warning, where Kafka fails;
//! * a control record whose key or value does not decode is still printed, with its raw bytes and
//!   the error, and the dump goes on;
//! * the KIP-1279 barrier (control type 7) prints ` MirrorPidReset {"version":0,"sourceClusterId":"…"}`
//!   (upstream Kafka prints ` controlType: UNKNOWN(7)`).

pub mod decoders;
pub mod index;
pub mod java_utf8;
pub mod json;
mod kraft;
pub mod log;
pub mod snapshot;
pub mod stream;

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use segment_store::internals::FileKind;

use crate::cli::Status;

/// Kafka's default `--max-message-size` (5 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: i32 = 5 * 1024 * 1024;

const AFTER_HELP: &str = "\
Examples:
  seglog dump --deep-iteration --print-data-log --files 00000000000000000000.log
  seglog dump 00000000000000000000.index 00000000000000000000.timeindex
  seglog dump --json --deep-iteration 00000000000000000042.log | jq .
  seglog dump --offsets-decoder __consumer_offsets-7/00000000000000000000.log
  seglog dump --cluster-metadata-decoder __cluster_metadata-0/00000000000000000000.log

Exit status: 0 all files read and consistent; 1 damaged data (everything valid is still
printed); 2 usage error (bad flags, missing or unreadable file, no dumpable file).";

/// Arguments of `seglog dump` (the flags of `kafka-dump-log.sh`, plus `--json`).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "dump",
    about = "Dump Kafka log segments, indexes and producer snapshots (like kafka-dump-log.sh)",
    after_help = AFTER_HELP
)]
pub struct DumpArgs {
    /// Files to dump, comma-separated (as kafka-dump-log.sh --files)
    #[arg(long, value_delimiter = ',', value_name = "FILE,...")]
    pub files: Vec<PathBuf>,
    /// Files to dump
    #[arg(value_name = "FILE")]
    pub paths: Vec<PathBuf>,
    /// Iterate the records of every batch (not just the batch headers)
    #[arg(long)]
    pub deep_iteration: bool,
    /// Print record keys and values (implies --deep-iteration)
    #[arg(long)]
    pub print_data_log: bool,
    /// Do not print record metadata
    #[arg(long)]
    pub skip_record_metadata: bool,
    /// Only check that the index passes the startup sanity check
    #[arg(long)]
    pub index_sanity_check: bool,
    /// Verify index entries against the log without printing them
    #[arg(long)]
    pub verify_index_only: bool,
    /// Read at most this many bytes of each .log file
    #[arg(long, value_name = "N", default_value_t = i32::MAX, allow_negative_numbers = true,
          value_parser = non_negative_size)]
    pub max_bytes: i32,
    /// Bytes read from the log at each .index entry when verifying it
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_MESSAGE_SIZE,
          allow_negative_numbers = true, value_parser = non_negative_size)]
    pub max_message_size: i32,
    /// One JSON object per line instead of Kafka's text
    #[arg(long, conflicts_with_all = ["verify_index_only", "index_sanity_check"])]
    pub json: bool,
    /// Decode records as __consumer_offsets records (offset commits, classic, consumer, share
    /// and streams group records); implies --print-data-log
    #[arg(long, group = "internal_decoder")]
    pub offsets_decoder: bool,
    /// Decode records as __transaction_state records; implies --print-data-log
    #[arg(long, group = "internal_decoder")]
    pub transaction_log_decoder: bool,
    /// Decode records as KRaft metadata records (__cluster_metadata and snapshots); implies
    /// --print-data-log
    #[arg(long, group = "internal_decoder")]
    pub cluster_metadata_decoder: bool,
    /// Decode records as __share_group_state records; implies --print-data-log
    #[arg(long, group = "internal_decoder")]
    pub share_group_state_decoder: bool,
    /// Decode records as __remote_log_metadata records; implies --print-data-log
    #[arg(long, group = "internal_decoder")]
    pub remote_log_metadata_decoder: bool,
    /// Kafka decoder class for keys: org.apache.kafka.tools.api.StringDecoder, DefaultDecoder
    /// (shown as hex), IntegerDecoder or LongDecoder; implies --print-data-log
    #[arg(long, value_name = "CLASS", num_args = 0..=1, default_missing_value = "StringDecoder",
          conflicts_with_all = ["internal_decoder", "key_decoder"])]
    pub key_decoder_class: Option<String>,
    /// Kafka decoder class for values (as --key-decoder-class); implies --print-data-log
    #[arg(long, value_name = "CLASS", num_args = 0..=1, default_missing_value = "StringDecoder",
          conflicts_with_all = ["internal_decoder", "value_decoder"])]
    pub value_decoder_class: Option<String>,
    /// How record keys are printed; implies --print-data-log
    #[arg(
        long,
        value_enum,
        value_name = "DECODER",
        conflicts_with = "internal_decoder"
    )]
    pub key_decoder: Option<decoders::PlainDecoder>,
    /// How record values are printed; implies --print-data-log
    #[arg(
        long,
        value_enum,
        value_name = "DECODER",
        conflicts_with = "internal_decoder"
    )]
    pub value_decoder: Option<decoders::PlainDecoder>,
}

/// `--max-bytes` / `--max-message-size`: a byte count from 0 to 2147483647.
fn non_negative_size(s: &str) -> Result<i32, String> {
    let n: i64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    if n < 0 {
        return Err(format!(
            "{n} is negative: give a byte count from 0 to {} (the default reads whole files)",
            i32::MAX
        ));
    }
    i32::try_from(n).map_err(|_| format!("{n} is larger than the maximum, {}", i32::MAX))
}

impl Default for DumpArgs {
    fn default() -> Self {
        DumpArgs {
            files: Vec::new(),
            paths: Vec::new(),
            deep_iteration: false,
            print_data_log: false,
            skip_record_metadata: false,
            index_sanity_check: false,
            verify_index_only: false,
            max_bytes: i32::MAX,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            json: false,
            offsets_decoder: false,
            transaction_log_decoder: false,
            cluster_metadata_decoder: false,
            share_group_state_decoder: false,
            remote_log_metadata_decoder: false,
            key_decoder_class: None,
            value_decoder_class: None,
            key_decoder: None,
            value_decoder: None,
        }
    }
}

impl DumpArgs {
    /// Default flags for `paths`.
    pub fn new<P: Into<PathBuf>>(paths: impl IntoIterator<Item = P>) -> Self {
        DumpArgs {
            paths: paths.into_iter().map(Into::into).collect(),
            ..DumpArgs::default()
        }
    }

    /// `--print-data-log` implies `--deep-iteration` (as in Kafka).
    pub fn is_deep(&self) -> bool {
        self.deep_iteration || self.prints_data()
    }

    /// Record contents are printed: `--print-data-log` or any decoder flag (as in Kafka).
    pub fn prints_data(&self) -> bool {
        self.print_data_log || self.decoder_given()
    }

    fn decoder_given(&self) -> bool {
        self.offsets_decoder
            || self.transaction_log_decoder
            || self.cluster_metadata_decoder
            || self.share_group_state_decoder
            || self.remote_log_metadata_decoder
            || self.key_decoder_class.is_some()
            || self.value_decoder_class.is_some()
            || self.key_decoder.is_some()
            || self.value_decoder.is_some()
    }

    /// The record parser the flags choose, or the one-line reason a decoder class is refused.
    pub fn decoder(&self) -> Result<decoders::Decoder, String> {
        use decoders::{Decoder, PlainDecoder};
        Ok(if self.offsets_decoder {
            Decoder::Offsets
        } else if self.transaction_log_decoder {
            Decoder::TransactionLog
        } else if self.cluster_metadata_decoder {
            Decoder::ClusterMetadata
        } else if self.remote_log_metadata_decoder {
            Decoder::RemoteLogMetadata
        } else if self.share_group_state_decoder {
            Decoder::ShareGroupState
        } else {
            let pick = |class: &Option<String>, plain: Option<PlainDecoder>| match class {
                Some(c) => PlainDecoder::from_class(c),
                None => Ok(plain.unwrap_or_default()),
            };
            Decoder::Plain {
                key: pick(&self.key_decoder_class, self.key_decoder)?,
                value: pick(&self.value_decoder_class, self.value_decoder)?,
            }
        })
    }

    /// Whether `--json` record objects carry decoded keys and values.
    pub fn json_decodes(&self) -> bool {
        self.decoder_given()
    }

    /// `--files` then the positional paths, in order.
    pub fn all_files(&self) -> impl Iterator<Item = &PathBuf> {
        self.files.iter().chain(self.paths.iter())
    }
}

/// What a path is, by its suffix (Kafka dispatches on the text after the last `.`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// `.log`: a segment's batches.
    Log,
    /// `.checkpoint`: a KRaft snapshot (batches, with a snapshot header line).
    KraftSnapshot,
    /// `.index`: offset index.
    OffsetIndex,
    /// `.timeindex`: time index.
    TimeIndex,
    /// `.txnindex`: aborted transactions.
    TxnIndex,
    /// `.snapshot`: producer state snapshot.
    ProducerSnapshot,
}

impl FileType {
    /// The type of `path` from its suffix, `None` for anything else.
    pub fn of(path: &Path) -> Option<FileType> {
        if path.extension()? == "checkpoint" {
            return Some(FileType::KraftSnapshot);
        }
        Some(match FileKind::of_path(path)? {
            FileKind::Log => FileType::Log,
            FileKind::Index => FileType::OffsetIndex,
            FileKind::TimeIndex => FileType::TimeIndex,
            FileKind::TxnIndex => FileType::TxnIndex,
            FileKind::Snapshot => FileType::ProducerSnapshot,
        })
    }

    /// The name used in JSON `file` lines.
    pub fn name(self) -> &'static str {
        match self {
            FileType::Log => "log",
            FileType::KraftSnapshot => "kraftSnapshot",
            FileType::OffsetIndex => "offsetIndex",
            FileType::TimeIndex => "timeIndex",
            FileType::TxnIndex => "txnIndex",
            FileType::ProducerSnapshot => "producerSnapshot",
        }
    }
}

/// Runs `seglog dump`: writes the dump of every file to `out`, diagnostics to `err`.
pub fn run(args: &DumpArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let files: Vec<&PathBuf> = args.all_files().collect();
    if files.is_empty() {
        let _ = writeln!(
            err,
            "error: no files to dump: give --files a,b,c or paths (see 'seglog dump --help')"
        );
        return Status::Usage;
    }
    let decoder = match args.decoder() {
        Ok(d) => d,
        Err(msg) => {
            let _ = writeln!(err, "{msg}");
            return Status::Usage;
        }
    };
    // Every user-level file problem (missing, a directory, unreadable) is reported before any
    // output, whatever the suffix.
    for f in &files {
        if let Err(msg) = check_readable(f) {
            let _ = writeln!(err, "error: {msg}");
            return Status::Usage;
        }
    }
    let mut d = Dumper {
        args,
        decoder,
        out,
        err,
        status: Status::Success,
        dumped: 0,
        index_mismatches: Vec::new(),
        time_index_errors: Vec::new(),
        non_consecutive: Vec::new(),
        omitted_problems: 0,
    };
    match d.dump_all(&files) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return d.status,
        Err(e) => {
            let _ = writeln!(d.err, "error: cannot write output: {e}");
            return Status::Usage;
        }
    }
    if d.dumped == 0 && d.status == Status::Success {
        // Only unknown files were given: each already has its `Ignoring unknown file` line.
        return Status::Usage;
    }
    d.status
}

fn check_readable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    // Opened first, checked on the handle: a FIFO, device or socket (which could block a read
    // forever) is refused even if it replaced a file after a check of the path.
    match segment_store::StdFs::open_named(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(format!("{shown} is {e}")),
        Err(e) => Err(format!("cannot open {shown}: {}", io_msg(&e))),
    }
}

/// An I/O error without Rust's ` (os error N)` tail.
pub(crate) fn io_msg(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// Kafka's `Long.parseLong(name.split("\\.")[0])`: the base offset from a file name.
pub fn base_offset_from_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_str()?;
    name.split('.').next()?.parse().ok()
}

/// Java's `File.getAbsolutePath()`: the path joined to the working directory, not canonicalised.
pub(crate) fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// One `seglog dump` invocation: options, sinks, and the stderr reports Kafka prints after all
/// files (index mismatches, time index errors, non-consecutive offsets).
pub(crate) struct Dumper<'a, O: Write, E: Write> {
    pub(crate) args: &'a DumpArgs,
    /// How record keys and values are printed.
    pub(crate) decoder: decoders::Decoder,
    pub(crate) out: &'a mut O,
    pub(crate) err: &'a mut E,
    pub(crate) status: Status,
    dumped: usize,
    /// Per `.index` (absolute path): index offset → first batch's last offset, printed
    /// descending like Kafka's reverse-ordered `TreeMap`.
    pub(crate) index_mismatches: Vec<(String, BTreeMap<Reverse<i64>, i64>)>,
    pub(crate) time_index_errors: Vec<index::TimeIndexErrors>,
    /// Per `.log` (absolute path): previous offset → the offset that followed it.
    pub(crate) non_consecutive: Vec<(String, BTreeMap<i64, i64>)>,
    /// Problems found past the first [`KEPT_PROBLEMS`] of their kind in their file: counted, not
    /// kept (a damaged index of gigabytes would otherwise fill memory with them).
    pub(crate) omitted_problems: u64,
}

/// How many problems of one kind (index mismatches, each kind of time index error,
/// non-consecutive offsets) are kept per file for the reports printed after all files.
pub(crate) const KEPT_PROBLEMS: usize = 100_000;

impl<O: Write, E: Write> Dumper<'_, O, E> {
    fn dump_all(&mut self, files: &[&PathBuf]) -> io::Result<()> {
        for path in files {
            let ty = FileType::of(path);
            if !self.args.json {
                writeln!(self.out, "Dumping {}", path.display())?;
            }
            let Some(ty) = ty else {
                writeln!(self.err, "Ignoring unknown file {}", path.display())?;
                continue;
            };
            self.dumped += 1;
            if self.args.json {
                let base = base_offset_from_name(path);
                json::emit(
                    self.out,
                    &json::FileLine {
                        kind: "file",
                        path: path.display().to_string(),
                        file_type: ty.name(),
                        base_offset: base,
                    },
                )?;
            }
            match ty {
                FileType::Log | FileType::KraftSnapshot => self.dump_log(path, ty)?,
                FileType::OffsetIndex => self.dump_offset_index(path)?,
                FileType::TimeIndex => self.dump_time_index(path)?,
                FileType::TxnIndex => self.dump_txn_index(path)?,
                FileType::ProducerSnapshot => self.dump_producer_snapshot(path)?,
            }
        }
        self.print_reports()
    }

    pub(crate) fn damaged(&mut self) {
        self.status = self.status.max(Status::Damaged);
    }

    /// A file that passed the up-front check could not be read after all.
    pub(crate) fn read_failed(&mut self, path: &Path, e: &io::Error) -> io::Result<()> {
        self.status = Status::Usage;
        writeln!(
            self.err,
            "error: cannot read {}: {}",
            path.display(),
            io_msg(e)
        )
    }

    /// The base offset from the file name, or 0 with a warning.
    pub(crate) fn base_offset(&mut self, path: &Path) -> io::Result<i64> {
        match base_offset_from_name(path) {
            Some(b) => Ok(b),
            None => {
                writeln!(
                    self.err,
                    "warning: {}: the file name does not start with a base offset; using 0",
                    path.display()
                )?;
                Ok(0)
            }
        }
    }

    fn print_reports(&mut self) -> io::Result<()> {
        for (file, mismatches) in &self.index_mismatches {
            writeln!(self.err, "Mismatches in :{file}")?;
            for (Reverse(index_offset), log_offset) in mismatches {
                writeln!(
                    self.err,
                    "  Index offset: {index_offset}, log offset: {log_offset}"
                )?;
            }
        }
        index::print_time_index_errors(&self.time_index_errors, self.err)?;
        for (file, pairs) in &self.non_consecutive {
            writeln!(self.err, "Non-consecutive offsets in {file}")?;
            for (a, b) in pairs {
                writeln!(self.err, "  {a} is followed by {b}")?;
            }
        }
        if self.omitted_problems > 0 {
            writeln!(
                self.err,
                "{} more problems not listed (the first {KEPT_PROBLEMS} of each kind in each file are)",
                self.omitted_problems
            )?;
        }
        Ok(())
    }
}
