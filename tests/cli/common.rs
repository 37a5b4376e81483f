//! Helpers: paths, running `seglog dump` in-process, hex, building segments.

use std::path::{Path, PathBuf};

use clap::Parser;
use seglog::cli::dump::DumpArgs;
use seglog::cli::Status;

/// `<repo>`.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `<repo>/testdata`.
pub fn testdata() -> PathBuf {
    repo().join("testdata")
}

/// Every fixture `.log` (with its `.json`) in the three fixture directories, sorted.
pub fn fixture_logs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["kafka-clients", "kafka-python", "seglog-built"] {
        for e in std::fs::read_dir(testdata().join(dir)).expect("fixture dir") {
            let p = e.expect("dir entry").path();
            if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the fixture set, found {}",
        out.len()
    );
    out
}

/// What one in-process run printed.
#[derive(Debug)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub status: Status,
}

impl Output {
    pub fn stdout_lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// Every stdout line parsed as JSON.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

/// Runs `seglog dump <argv>` in-process (argv without the `dump`).
pub fn dump<S: AsRef<std::ffi::OsStr>>(argv: &[S]) -> Output {
    let mut full: Vec<std::ffi::OsString> = vec!["dump".into()];
    full.extend(argv.iter().map(|a| a.as_ref().to_os_string()));
    let args = DumpArgs::try_parse_from(full).unwrap_or_else(|e| panic!("bad test argv: {e}"));
    dump_args(&args)
}

/// Runs `seglog dump` with `args` in-process.
pub fn dump_args(args: &DumpArgs) -> Output {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = seglog::cli::dump::run(args, &mut out, &mut err);
    Output {
        stdout: String::from_utf8(out).expect("stdout is UTF-8"),
        stderr: String::from_utf8(err).expect("stderr is UTF-8"),
        status,
    }
}

/// Parses hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write test file");
    p
}

/// Compares two texts line by line, failing with the first differing line.
pub fn assert_lines_eq(actual: &str, expected: &str, what: &str) {
    let a: Vec<&str> = actual.lines().collect();
    let e: Vec<&str> = expected.lines().collect();
    for (i, (x, y)) in a.iter().zip(e.iter()).enumerate() {
        assert_eq!(x, y, "{what}: line {} differs", i + 1);
    }
    assert_eq!(
        a.len(),
        e.len(),
        "{what}: line count differs\nactual:\n{actual}"
    );
}

/// A segment starting at `base`: `batches` batches of 3 records each (timestamps
/// 1_700_000_000_000 + offset), then returns the bytes and each batch's (position, last offset).
pub fn sample_log(base: i64, batches: usize) -> (Vec<u8>, Vec<(usize, i64)>) {
    let mut log = Vec::new();
    let mut layout = Vec::new();
    let mut offset = base;
    for _ in 0..batches {
        let mut b = record_format::RecordBatchBuilder::new(offset).partition_leader_epoch(1);
        for _ in 0..3 {
            let v = format!("value-{offset}");
            b.append(
                1_700_000_000_000 + offset,
                Some(b"k"),
                Some(v.as_bytes()),
                &[],
            )
            .expect("append");
            offset += 1;
        }
        layout.push((log.len(), offset - 1));
        log.extend_from_slice(&b.build());
    }
    (log, layout)
}

/// A temp dir.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Runs `cmd` (its stdout and stderr captured, stdin empty) and returns what it printed; fails
/// the test, killing the child, if it has not exited within `limit`. The output is read while the
/// child runs, so a child that prints more than a pipe holds does not stall.
pub fn run_bounded(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::Instant;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            r.read_to_end(&mut buf).expect("read child output");
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} did not finish in {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    std::process::Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}
