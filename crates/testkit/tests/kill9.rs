//! The real-process crash test (issue #6, item 3): a child process appends and fsyncs in a loop
//! and reports what it made durable; this test kills it with SIGKILL at random moments, reopens
//! the directory and checks the properties of the simulated crash tests.
//!
//! The child is the testkit's `kill-child` binary (protocol in
//! `crates/testkit/src/kill_child.rs`): it loads the log directory as a broker would, resumes an interrupted
//! mirror stop, then appends (idempotent and transactional producers, COMMIT/ABORT markers from
//! the coordinator, follower appends), flushes, closes and reopens cleanly, and fails over
//! (start mirroring, mirrored batches, stop: Stopping → barrier → Stopped), printing `W` before
//! each write, `T` before each truncation, and `D`/`F`/`S` once the library reported a batch
//! durable, a recovery point, or `Stopped`.
//!
//! Each round spawns a child on the *same* directory (so each one recovers what the previous kill
//! left), kills it after a random delay or after a random number of output lines, then:
//! 1. removes the clean-shutdown marker, as any broker startup does;
//! 2. runs `testkit::check_dir` on the partition (unclean load from the last
//!    reported recovery point): every batch reported durable and not released by a later
//!    truncation is there byte for byte; the `.log` files are a valid prefix of batches the child
//!    announced at those offsets; the offset index agrees with the log; producer state and LSO
//!    equal a reference replay of the recovered batches; the barrier is there once `Stopped` was
//!    reported; no error, no panic;
//! 3. checks that recovery destroyed nothing: every `.log` is unchanged or cut to a prefix whose
//!    cut bytes are in the new `quarantine/<n>/<base>.log.cut-<position>`, and every vanished
//!    segment is in that quarantine folder byte for byte;
//! 4. in one round out of three closes the directory cleanly (`load_log_dir` + `LogDir::close`,
//!    which must cut nothing more), so the next child starts from a clean shutdown.
//!
//! `SEGLOG_KILL9_SEED` (default 1) and `SEGLOG_KILL9_ROUNDS` (default 24) replay or extend a run;
//! `SEGLOG_KILL9_SECONDS` (default 25) bounds its duration: no round starts after it. Every
//! failure names the seed and the round. The figures are printed on stderr
//! (`cargo test --test kill9 -- --nocapture`).
#![cfg(unix)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use recovery::load_log_dir;
use segment_store::internals::{parse_file_name, quarantine_file_name, CLEAN_SHUTDOWN_FILE};
use testkit::kill_child::{log_dir_config, partition_dir, workload};
use testkit::{check_dir, Expectation, XorShift};

const SEGMENT_BYTES: u64 = 2048;
const DEFAULT_SEED: u64 = 1;
const DEFAULT_ROUNDS: u64 = 24;
/// Bounds the test's duration (not an assertion): no new round starts after it.
const DEFAULT_SECONDS: u64 = 25;
/// Bounds a wait for the child's output lines (not an assertion).
const LINE_WAIT: Duration = Duration::from_secs(3);
const SIGKILL: i32 = 9;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Kills the child if the test panics before it does.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            if let Err(e) = self.0.kill() {
                eprintln!("kill9: cannot kill child {}: {e}", self.0.id());
            }
            if let Err(e) = self.0.wait() {
                eprintln!("kill9: cannot reap child {}: {e}", self.0.id());
            }
        }
    }
}

/// When a round kills its child.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// After this many milliseconds from the spawn (may be during loading).
    AfterMs(u64),
    /// After this many complete output lines.
    AfterLines(usize),
}

struct ChildRun {
    /// Complete lines (a line cut by the kill is dropped: its step had not started).
    lines: Vec<String>,
    stderr: String,
    status: ExitStatus,
}

fn run_child(root: &Path, seed: u64, kill: Kill) -> ChildRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kill-child"))
        .arg("--dir")
        .arg(root)
        .args(["--seed", &seed.to_string()])
        .args(["--segment-bytes", &SEGMENT_BYTES.to_string()])
        .args(["--max-seconds", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kill-child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut stderr = child.stderr.take().expect("child stderr");
    let mut guard = Guard(child);
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || -> std::io::Result<()> {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            if r.read_line(&mut line)? == 0 || tx.send(line).is_err() {
                return Ok(());
            }
        }
    });
    let errors = thread::spawn(move || -> std::io::Result<String> {
        let mut s = String::new();
        stderr.read_to_string(&mut s)?;
        Ok(s)
    });
    let mut lines = Vec::new();
    match kill {
        Kill::AfterMs(ms) => thread::sleep(Duration::from_millis(ms)),
        Kill::AfterLines(n) => {
            let deadline = Instant::now() + LINE_WAIT;
            while lines.len() < n {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(l) => lines.push(l),
                    Err(_) => break,
                }
            }
        }
    }
    guard.0.kill().expect("SIGKILL the child");
    let status = guard.0.wait().expect("reap the child");
    reader
        .join()
        .expect("stdout reader thread")
        .expect("reading the child's stdout");
    lines.extend(rx.iter());
    let stderr = errors
        .join()
        .expect("stderr reader thread")
        .expect("reading the child's stderr");
    let lines = lines
        .into_iter()
        .filter_map(|l| l.strip_suffix('\n').map(str::to_owned))
        .collect();
    ChildRun {
        lines,
        stderr,
        status,
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd hex length {}", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex: {e}")))
        .collect()
}

#[derive(Debug, Default)]
struct Figures {
    rounds: u64,
    kills: u64,
    kills_before_load: u64,
    lines: u64,
    writes: u64,
    durable_reports: u64,
    truncations: u64,
    stops: u64,
    child_loads: u64,
    child_clean_loads: u64,
    child_clean_closes: u64,
    child_cut_bytes: u64,
    batches_checked: u64,
    durable_checked: u64,
    durable_lost: u64,
    cut_bytes: u64,
    segments_moved: u64,
    parent_clean_closes: u64,
    max_log_end: i64,
}

/// Applies one protocol line (see `src/cli/kill_child.rs`) to the expectation.
fn apply(exp: &mut Expectation, fig: &mut Figures, line: &str) -> Result<(), String> {
    let mut words = line.split(' ');
    let tag = words.next().unwrap_or("");
    let mut offset = || -> Result<i64, String> {
        words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("no offset in {line:?}"))
    };
    match tag {
        "W" => {
            let o = offset()?;
            let bytes = unhex(line.rsplit(' ').next().unwrap_or(""))?;
            exp.written.entry(o).or_default().insert(bytes);
            fig.writes += 1;
        }
        "T" => {
            let t = offset()?;
            exp.durable.retain(|o, _| *o < t);
            exp.stopped_barrier = exp.stopped_barrier.filter(|b| *b < t);
            exp.recovery_point = exp.recovery_point.min(t);
            fig.truncations += 1;
        }
        "D" => {
            let o = offset()?;
            let bytes = unhex(line.rsplit(' ').next().unwrap_or(""))?;
            if !exp.written.get(&o).is_some_and(|s| s.contains(&bytes)) {
                return Err(format!("D at offset {o}: a batch never announced by W"));
            }
            if let Some(old) = exp.durable.insert(o, bytes.clone()) {
                if old != bytes {
                    return Err(format!("durable batch at offset {o} changed"));
                }
            }
            fig.durable_reports += 1;
        }
        "F" => exp.recovery_point = offset()?,
        "S" => {
            exp.stopped_barrier = Some(offset()?);
            fig.stops += 1;
        }
        "L" => {
            fig.child_loads += 1;
            for w in words {
                if w == "clean=1" {
                    fig.child_clean_loads += 1;
                }
                if let Some(n) = w.strip_prefix("cut=") {
                    fig.child_cut_bytes += n.parse::<u64>().map_err(|e| format!("{line}: {e}"))?;
                }
            }
        }
        "C" => fig.child_clean_closes += 1,
        _ => return Err(format!("unknown line {line:?}")),
    }
    Ok(())
}

/// The `.log` files of `dir`, by name.
fn log_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let e = e.expect("directory entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") && e.path().is_file() {
            out.insert(name, std::fs::read(e.path()).expect("read .log"));
        }
    }
    out
}

/// Every file under `dir/quarantine/`, by path.
fn quarantine_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(folders) = std::fs::read_dir(dir.join("quarantine")) else {
        return out;
    };
    for folder in folders {
        let folder = folder.expect("directory entry").path();
        for f in std::fs::read_dir(&folder).expect("quarantine folder") {
            let p = f.expect("directory entry").path();
            out.insert(p.clone(), std::fs::read(&p).expect("read quarantine file"));
        }
    }
    out
}

/// Recovery destroyed nothing: each `.log` is unchanged or cut to a prefix with the cut bytes in
/// quarantine; each vanished `.log` is in quarantine; no new `.log` holds data.
fn check_nothing_destroyed(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    new_quarantine: &BTreeMap<String, Vec<u8>>,
    fig: &mut Figures,
) -> Vec<String> {
    let mut v = Vec::new();
    for (name, old) in before {
        match after.get(name) {
            Some(new) if new == old => {}
            Some(new) if old.starts_with(new) => {
                let base = parse_file_name(name.as_ref())
                    .map(|p| p.base_offset)
                    .unwrap_or(-1);
                let cut_name = quarantine_file_name(base, new.len() as u64);
                let cut = &old[new.len()..];
                if new_quarantine.get(&cut_name).map(Vec::as_slice) == Some(cut) {
                    fig.cut_bytes += cut.len() as u64;
                } else {
                    v.push(format!(
                        "{name}: {} bytes cut at byte {} are not in quarantine as {cut_name}",
                        cut.len(),
                        new.len()
                    ));
                }
            }
            Some(_) => v.push(format!("{name}: recovery changed bytes it kept")),
            None => {
                if new_quarantine.get(name) == Some(old) {
                    fig.segments_moved += 1;
                } else {
                    v.push(format!("{name}: gone, and not in quarantine"));
                }
            }
        }
    }
    for (name, new) in after {
        if !before.contains_key(name) && !new.is_empty() {
            v.push(format!(
                "{name}: created by recovery with {} bytes",
                new.len()
            ));
        }
    }
    v
}

#[test]
fn sigkill_at_random_moments_loses_no_durable_batch() {
    let seed = env_u64("SEGLOG_KILL9_SEED", DEFAULT_SEED);
    let rounds = env_u64("SEGLOG_KILL9_ROUNDS", DEFAULT_ROUNDS);
    let budget = Duration::from_secs(env_u64("SEGLOG_KILL9_SECONDS", DEFAULT_SECONDS));
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("logs");
    let pdir = partition_dir(&root);
    let w = workload(seed, SEGMENT_BYTES);
    let mut rng = XorShift::new(seed ^ 0x4B11_9000);
    let mut exp = Expectation::default();
    let mut fig = Figures::default();
    let started = Instant::now();

    for round in 0..rounds {
        if round > 0 && started.elapsed() > budget {
            break;
        }
        let ctx = format!("seed {seed} round {round} (SEGLOG_KILL9_SEED={seed})");
        fig.rounds += 1;
        let kill = match rng.below(4) {
            // While the child starts and loads (recovers) the directory.
            0 => Kill::AfterMs(rng.below(6)),
            1 => Kill::AfterMs(rng.below(100)),
            _ => Kill::AfterLines(1 + rng.below(1000) as usize),
        };
        let child_seed = seed.wrapping_mul(1_000_003).wrapping_add(round);
        let run = run_child(&root, child_seed, kill);
        assert_eq!(
            run.status.signal(),
            Some(SIGKILL),
            "{ctx}: the child was not killed but ended with {:?}; stderr:\n{}\nlast lines:\n{}",
            run.status,
            run.stderr,
            run.lines[run.lines.len().saturating_sub(5)..].join("\n")
        );
        fig.kills += 1;
        fig.lines += run.lines.len() as u64;
        if !run.lines.iter().any(|l| l.starts_with("L ")) {
            fig.kills_before_load += 1;
        }
        for line in &run.lines {
            if let Err(e) = apply(&mut exp, &mut fig, line) {
                panic!("{ctx}: child output: {e}");
            }
        }

        // 1. A broker starting up removes the clean-shutdown marker first.
        let marker = root.join(CLEAN_SHUTDOWN_FILE);
        if marker.exists() {
            std::fs::remove_file(&marker).expect("remove the clean-shutdown marker");
        }
        // 2. and 3.
        let before = log_files(&pdir);
        let quarantined = quarantine_files(&pdir);
        let out = check_dir(&w, &pdir, &exp);
        fig.batches_checked += out.batches;
        fig.durable_checked += exp.durable.len() as u64;
        fig.durable_lost += out.durable_lost;
        fig.max_log_end = fig.max_log_end.max(out.log_end_offset);
        assert!(
            out.violations.is_empty() && out.durable_lost == 0,
            "{ctx} ({kill:?}): {} durable batches lost; violations:\n{}",
            out.durable_lost,
            out.violations.join("\n")
        );
        let after = log_files(&pdir);
        let new_quarantine: BTreeMap<String, Vec<u8>> = quarantine_files(&pdir)
            .into_iter()
            .filter(|(p, _)| !quarantined.contains_key(p))
            .filter_map(|(p, b)| Some((p.file_name()?.to_string_lossy().into_owned(), b)))
            .collect();
        let v = check_nothing_destroyed(&before, &after, &new_quarantine, &mut fig);
        assert!(v.is_empty(), "{ctx} ({kill:?}): {}", v.join("\n"));

        // 4. Sometimes a clean shutdown before the next child.
        if rng.below(3) == 0 {
            let ld = load_log_dir(&root, &log_dir_config(SEGMENT_BYTES))
                .unwrap_or_else(|e| panic!("{ctx}: loading for a clean close: {e}"));
            let cut: Vec<_> = ld.reports.iter().flat_map(|r| r.cut.iter()).collect();
            assert!(cut.is_empty(), "{ctx}: a second recovery cut {cut:?}");
            ld.close()
                .unwrap_or_else(|e| panic!("{ctx}: clean close: {e}"));
            fig.parent_clean_closes += 1;
        }
    }

    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "kill9: seed {seed}: {} rounds, {} kills ({} before the child had loaded), {} lines; \
         child: {} loads ({} clean), {} clean closes, {} batches announced, {} durable reports, \
         {} truncations, {} stops, {} bytes cut by its recovery; checks: {} batches checked, \
         {} durable batches checked, {} durable batches lost, {} bytes cut to quarantine, \
         {} segments moved, {} clean closes by the test; log end up to {}; {elapsed:.1}s",
        fig.rounds,
        fig.kills,
        fig.kills_before_load,
        fig.lines,
        fig.child_loads,
        fig.child_clean_loads,
        fig.child_clean_closes,
        fig.writes,
        fig.durable_reports,
        fig.truncations,
        fig.stops,
        fig.child_cut_bytes,
        fig.batches_checked,
        fig.durable_checked,
        fig.durable_lost,
        fig.cut_bytes,
        fig.segments_moved,
        fig.parent_clean_closes,
        fig.max_log_end,
    );
    assert_eq!(fig.kills, fig.rounds, "seed {seed}: every round kills");
    assert_eq!(fig.durable_lost, 0, "seed {seed}: durable batches lost");
}
