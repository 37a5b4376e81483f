//! The `seglog::fuzzing` entry points over a corpus built from the committed fixtures
//! (`testdata/`), with byte flips, cuts and CRC-fixed mutations, so that plain `cargo test`
//! exercises every entry point the fuzz targets call. Also prints the throughput of the
//! in-memory partition entry point against the same inputs on real files (no timing assertion;
//! the figure is in docs/testing.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use seglog::fuzzing::{self, FileKind};
use seglog::record_format::Batches;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.log` under `testdata/`, sorted.
fn fixture_logs() -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![repo().join("testdata")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                let bytes = std::fs::read(&p).unwrap();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "fixtures missing: {}", out.len());
    out
}

/// The whole batches of a `.log`'s bytes.
fn batches_of(log: &[u8]) -> Vec<Vec<u8>> {
    Batches::new(log, 0)
        .map_while(Result::ok)
        .map(|e| e.as_bytes().to_vec())
        .collect()
}

/// Rewrites a v2 batch's CRC-32C after a mutation.
fn fix_crc(b: &mut [u8]) {
    if b.len() >= 21 && b[16] == 2 {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Deterministic mutants of `b`: single-byte flips at a spread of positions, with and without
/// the CRC recomputed, and cuts.
fn mutants(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let step = (b.len() / 24).max(1);
    for i in (0..b.len()).step_by(step) {
        let mut m = b.to_vec();
        m[i] ^= 0x41;
        out.push(m.clone());
        fix_crc(&mut m);
        out.push(m);
    }
    for cut in [0, 11, 12, 60, 61, b.len() / 2, b.len().saturating_sub(1)] {
        out.push(b[..cut.min(b.len())].to_vec());
    }
    out
}

fn record_batch_over_the_fixture_batches_and_their_mutants() {
    let (mut inputs, mut clean) = (0usize, 0usize);
    for (_, log) in fixture_logs() {
        for b in batches_of(&log) {
            let v = fuzzing::batch_verdict(&b);
            clean += usize::from(v.error.is_none());
            fuzzing::record_batch(&b);
            for m in mutants(&b) {
                fuzzing::record_batch(&m);
                inputs += 1;
            }
        }
    }
    eprintln!("record_batch: {inputs} mutants, {clean} fixture batches decode whole");
    assert!(
        clean > 50 && inputs > 1000,
        "{clean} clean, {inputs} inputs"
    );
}

fn log_bytes_over_the_fixture_logs_and_their_mutants() {
    let mut n = 0;
    for (_, log) in fixture_logs() {
        fuzzing::log_bytes(&log);
        for m in mutants(&log) {
            fuzzing::log_bytes(&m);
            n += 1;
        }
    }
    assert!(n > 500, "{n} inputs");
}

/// Partition inputs: each fixture `.log` alone under each flag combination, with a flipped byte,
/// and as two segments (split at a batch boundary) with a leader-epoch checkpoint.
fn partition_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (_, log) in fixture_logs() {
        let batches = batches_of(&log);
        for flags in [0u8, 1, 2, 4] {
            out.push(fuzzing::partition_input(flags, 3, &[(FileKind::Log, &log)]));
        }
        let mut flipped = log.clone();
        if !flipped.is_empty() {
            let i = flipped.len() * 2 / 3;
            flipped[i] ^= 0x10;
        }
        out.push(fuzzing::partition_input(0, 0, &[(FileKind::Log, &flipped)]));
        if batches.len() >= 2 {
            let half = batches.len() / 2;
            let a: Vec<u8> = batches[..half].concat();
            let b: Vec<u8> = batches[half..].concat();
            out.push(fuzzing::partition_input(
                0,
                0,
                &[
                    (FileKind::Log, &a),
                    (FileKind::LeaderEpochCheckpoint, b"0\n1\n0 0\n"),
                    (FileKind::Log, &b),
                ],
            ));
        }
    }
    out
}

/// With `FUZZ_WRITE_SEEDS=1`, writes the corpora of the new fuzz targets to
/// `fuzz/seeds/<target>/` (the nightly workflow starts from them).
fn write_seeds_when_asked() {
    if std::env::var_os("FUZZ_WRITE_SEEDS").is_none() {
        return;
    }
    let logs = fixture_logs();
    let batches: Vec<Vec<u8>> = logs.iter().flat_map(|(_, l)| batches_of(l)).collect();
    let partitions = partition_corpus();
    let dirs: Vec<Vec<u8>> = partitions
        .chunks(3)
        .map(|c| fuzzing::log_dir_input(0, c))
        .collect();
    let logs: Vec<Vec<u8>> = logs.into_iter().map(|(_, l)| l).collect();
    for (target, inputs) in [
        ("record_batch", &batches),
        ("log_bytes", &logs),
        ("partition", &partitions),
        ("log_dir", &dirs),
    ] {
        let dir = repo().join("fuzz/seeds").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let small: Vec<&Vec<u8>> = inputs.iter().filter(|i| i.len() <= 4096).collect();
        let step = (small.len() / 12).max(1);
        for (i, input) in small.iter().step_by(step).take(12).enumerate() {
            std::fs::write(dir.join(format!("fixture-{i:02}")), input).unwrap();
        }
    }
}

fn partition_over_the_fixture_logs_in_memory() {
    let corpus = partition_corpus();
    let mut opened = 0;
    let mut records = 0;
    for input in &corpus {
        let o = fuzzing::partition(input);
        opened += usize::from(o.opened);
        records += o.records;
    }
    // A log of whole Kafka-written batches opens with all its records readable.
    let (_, plain) = fixture_logs()
        .into_iter()
        .find(|(p, _)| p.ends_with("kafka-clients/plain.log"))
        .unwrap();
    let o = fuzzing::partition(&fuzzing::partition_input(0, 0, &[(FileKind::Log, &plain)]));
    let want: i64 = batches_of(&plain)
        .iter()
        .map(|b| {
            i64::from_be_bytes(b[..8].try_into().unwrap())
                + i64::from(i32::from_be_bytes(b[23..27].try_into().unwrap()))
                + 1
        })
        .max()
        .unwrap();
    assert!(o.opened);
    assert_eq!(o.log_end_offset, want);
    eprintln!(
        "partition: {} inputs, {opened} opened, {records} records read",
        corpus.len()
    );
    assert!(
        opened * 2 > corpus.len(),
        "{opened} of {} opened",
        corpus.len()
    );
}

fn log_dir_over_the_fixture_logs_in_memory() {
    let corpus = partition_corpus();
    let mut loaded = 0;
    for (i, chunk) in corpus.chunks(3).enumerate() {
        loaded += fuzzing::log_dir(&fuzzing::log_dir_input(i as u8 & 1, chunk));
    }
    assert!(loaded > corpus.len() / 2, "{loaded} partitions loaded");
}

/// The in-memory partition entry point against the same inputs opened from real files (what
/// the fuzz targets did before): inputs per second each, printed.
fn partition_in_memory_against_on_disk_throughput() {
    let corpus = partition_corpus();
    // On `/dev/shm` when there is one, as the file-based fuzz harnesses do (fsyncs cost nothing).
    let shm = Path::new("/dev/shm");
    let scratch = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let disk = scratch.path().join("log");
    let t = Instant::now();
    let mut a = Vec::new();
    for input in &corpus {
        a.push(fuzzing::partition(input));
    }
    let mem = t.elapsed();
    let t = Instant::now();
    let mut b = Vec::new();
    for input in &corpus {
        b.push(fuzzing::partition_on_disk(input, &disk));
    }
    let file = t.elapsed();
    assert_eq!(a, b, "the in-memory and the file-based runs disagree");
    let per_s = |d: std::time::Duration| corpus.len() as f64 / d.as_secs_f64();
    eprintln!(
        "partition: {} inputs; in memory {:.0} inputs/s ({:.1} µs each), on files in {} {:.0} inputs/s ({:.1} µs each)",
        corpus.len(),
        per_s(mem),
        mem.as_secs_f64() * 1e6 / corpus.len() as f64,
        Path::new(scratch.path()).display(),
        per_s(file),
        file.as_secs_f64() * 1e6 / corpus.len() as f64,
    );
}

/// Every cargo-fuzz target in `fuzz/fuzz_targets/` is one call of an entry point of
/// `seglog::fuzzing`, and every entry point here has its target.
fn every_fuzz_target_is_one_call_of_an_entry_point() {
    type EntryPoint = (&'static str, fn(&[u8]));
    let entry_points: [EntryPoint; 12] = [
        ("batch_parse", fuzzing::batch_parse),
        ("batch_iter", fuzzing::batch_iter),
        ("control_record", fuzzing::control_record),
        ("index_files", fuzzing::index_files),
        ("segment_recover", fuzzing::segment_recover),
        ("snapshot", fuzzing::snapshot),
        ("producer_state", fuzzing::producer_state),
        ("log_loader", fuzzing::log_loader),
        ("record_batch", fuzzing::record_batch),
        ("log_bytes", fuzzing::log_bytes),
        ("partition", |d| {
            fuzzing::partition(d);
        }),
        ("log_dir", |d| {
            fuzzing::log_dir(d);
        }),
    ];
    let dir = repo().join("fuzz/fuzz_targets");
    let mut targets: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    targets.sort();
    let mut names: Vec<String> = entry_points.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(targets, names);
    let workflow =
        std::fs::read_to_string(repo().join(".github/workflows/nightly-fuzz.yml")).unwrap();
    for (name, f) in entry_points {
        let src = std::fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap();
        let body: Vec<&str> = src
            .lines()
            .filter(|l| !l.starts_with("//") && !l.starts_with("#!") && !l.trim().is_empty())
            .collect();
        assert!(
            body.concat()
                .contains(&format!("seglog::fuzzing::{name}(data)")),
            "{name}: {body:?}"
        );
        assert!(body.len() <= 3, "{name} is more than a call: {body:?}");
        assert!(
            workflow.contains(name),
            "{name} is not in the nightly matrix"
        );
        // Each runs on the empty input.
        f(&[]);
    }
}

/// One test, so that the entry points' per-process scratch directories are removed once every
/// part is done (the parts would race with the removal as separate tests).
#[test]
fn fuzzing_entry_points() {
    eprintln!("-- record_batch_over_the_fixture_batches_and_their_mutants");
    record_batch_over_the_fixture_batches_and_their_mutants();
    eprintln!("-- log_bytes_over_the_fixture_logs_and_their_mutants");
    log_bytes_over_the_fixture_logs_and_their_mutants();
    eprintln!("-- write_seeds_when_asked");
    write_seeds_when_asked();
    eprintln!("-- partition_over_the_fixture_logs_in_memory");
    partition_over_the_fixture_logs_in_memory();
    eprintln!("-- log_dir_over_the_fixture_logs_in_memory");
    log_dir_over_the_fixture_logs_in_memory();
    eprintln!("-- partition_in_memory_against_on_disk_throughput");
    partition_in_memory_against_on_disk_throughput();
    eprintln!("-- every_fuzz_target_is_one_call_of_an_entry_point");
    every_fuzz_target_is_one_call_of_an_entry_point();
    fuzzing::remove_scratch_dirs();
}

/// Set in the child process of [`in_memory_runs_create_no_real_file`].
const NO_REAL_FILES_CHILD: &str = "SEGLOG_TEST_NO_REAL_FILES_CHILD";

/// A `crash_test_fn` run of a partition opened with `seglog::Log` under the run's root, a batch
/// flushed and acknowledged, a roll, and a close.
fn crash_test_fn_on_a_log() -> testkit::FnSummary {
    use seglog::record_format::RecordBatchBuilder;
    use seglog::{AppendOrigin, Config, Log};
    use std::error::Error;
    use testkit::{crash_test_fn, CrashEnv, FnOptions, Recovered};

    fn config(
        env_storage: std::sync::Arc<dyn seglog::segment_store::Storage>,
        clock: std::sync::Arc<dyn seglog::Clock>,
    ) -> Config {
        let mut config = Config::default()
            .with_storage(env_storage)
            .with_clock(clock)
            .with_segment_bytes(200)
            .with_recovery_threads(1);
        config = config.without_background_tasks();
        config
    }
    let workload = |env: &CrashEnv| -> Result<(), Box<dyn Error>> {
        let log = Log::open(
            env.root().join("events-0"),
            config(env.storage(), env.dyn_clock()),
        )?;
        for seq in 0..4 {
            let mut b = RecordBatchBuilder::new(0).producer(1, 0, seq);
            b.append(testkit::TIMESTAMP, Some(b"k"), Some(b"value"), &[])?;
            log.append_as_leader(&b.build(), 0, AppendOrigin::Client)?;
            log.flush()?;
            env.ack("events-0", vec![seq as u8]);
        }
        log.close()?;
        // While the runs go on: nothing of them on the real file system.
        let real = real_entries_of_this_process();
        if !real.is_empty() {
            return Err(format!("real files or folders: {real:?}").into());
        }
        Ok(())
    };
    let check = |state: &Recovered<'_>| -> Result<(), Box<dyn Error>> {
        let log = Log::open(
            state.root().join("events-0"),
            config(state.storage(), state.dyn_clock()),
        )?;
        let acked = state.acked_for("events-0").len() as i64;
        if log.log_end_offset() < acked {
            return Err(format!(
                "{} acknowledged, log ends at {}",
                acked,
                log.log_end_offset()
            )
            .into());
        }
        log.close()?;
        Ok(())
    };
    let options = FnOptions {
        sample_points: Some((12, 7)),
        ..FnOptions::default()
    };
    crash_test_fn(&options, workload, check).unwrap()
}

/// The entries of `dir` whose name holds `pid` as a number of its own (`seglog-fuzz-<pid>`).
fn entries_naming(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let pid = pid.to_string();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .split(|c: char| !c.is_ascii_digit())
                .any(|t| t == pid)
        })
        .collect()
}

/// What this process has in `/dev/shm` (entries naming its pid) and in its temp dir (all
/// entries: the test gives the child process an empty one of its own).
fn real_entries_of_this_process() -> Vec<PathBuf> {
    let mut out = entries_naming(Path::new("/dev/shm"), std::process::id());
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        out.extend(entries.map(|e| e.unwrap().path()));
    }
    out
}

/// The in-memory entry points (`fuzzing::partition`, `fuzzing::log_dir`) and a `crash_test_fn`
/// run on `seglog::Log` create nothing on the real file system, the offset and time indexes
/// included. Run in a child process whose temp dir is a fresh empty directory: it stays empty,
/// and no entry of `/dev/shm` names the child's pid (the scratch directories' naming).
#[test]
fn in_memory_runs_create_no_real_file() {
    if std::env::var_os(NO_REAL_FILES_CHILD).is_some() {
        // First, so that the workload's own look at the real file system sees only its runs.
        let sum = crash_test_fn_on_a_log();
        let corpus = partition_corpus();
        let mut opened = 0;
        for input in corpus.iter().take(40) {
            opened += usize::from(fuzzing::partition(input).opened);
        }
        assert!(opened > 0);
        assert!(fuzzing::log_dir(&fuzzing::log_dir_input(0, &corpus[..3])) > 0);
        assert!(
            sum.violations.is_empty() && sum.crash_points > 0,
            "{sum}: {:?}",
            sum.violations
        );
        eprintln!("child: {opened} partitions opened; crash_test_fn: {sum}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let child_tmp = tmp.path().join("tmp");
    std::fs::create_dir(&child_tmp).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "in_memory_runs_create_no_real_file",
            "--nocapture",
        ])
        .env(NO_REAL_FILES_CHILD, "1")
        .env("TMPDIR", &child_tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let shm = entries_naming(Path::new("/dev/shm"), pid);
    for p in &shm {
        let _ = std::fs::remove_dir_all(p);
    }
    let in_tmp: Vec<PathBuf> = std::fs::read_dir(&child_tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(in_tmp.is_empty(), "created in the temp dir: {in_tmp:?}");
    assert!(shm.is_empty(), "created in /dev/shm: {shm:?}");
    assert!(out.status.success(), "the child failed: {log}");
    assert!(
        log.contains("crash_test_fn:"),
        "the child did not run: {log}"
    );
}
