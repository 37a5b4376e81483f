//! `seglog verify`, `recover` and `dump` on huge and hostile files, as the real executable runs
//! (each run in a child process with its own timeout):
//!
//! * memory is bounded by a window, not by a file's size: the peak anonymous memory (`RssAnon`
//!   of the child, sampled from `/proc/<pid>/status` while it runs; pages of mapped files are page
//!   cache and not counted) stays under [`BUDGET_KIB`] with an 8 GiB sparse segment whose tail
//!   recovery cuts, and with 2 GiB sparse checkpoint, `.snapshot`, `.txnindex`, `.timeindex` and
//!   `.index` files;
//! * the quarantined cut of a sparse segment is sparse too (its allocated blocks are those of its
//!   data, not of its length);
//! * `ENOSPC` while the cut is copied into quarantine (a small tmpfs mounted by the test, as
//!   root) leaves no file under the name of a complete cut, and the `.log` uncut.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use record_format::RecordBatchBuilder;

/// The most anonymous memory a run may use: 128 MiB.
const BUDGET_KIB: u64 = 128 * 1024;

/// What a run of the executable did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stderr: String,
    /// The largest `RssAnon` seen, in KiB.
    peak_anon_kib: u64,
}

fn rss_anon_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `seglog <args>`, killing it (and failing the test) after `timeout`; samples its
/// anonymous memory (continuously for 50 ms, then every millisecond), and kills it once that passes twice the budget.
fn seglog<S: AsRef<OsStr>>(args: &[S], timeout: Duration) -> Run {
    let out = tempfile::tempdir().expect("tempdir");
    // Standard output is not kept: a dump of a 2 GiB index prints gigabytes of entries.
    let e = out.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&e).expect("stderr file"))
        .spawn()
        .expect("spawn seglog");
    let start = Instant::now();
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = rss_anon_kib(child.id()) {
            peak = peak.max(kib);
        }
        if peak >= 2 * BUDGET_KIB {
            // Far over the budget: no need to let it take the machine's memory to the end.
            child.kill().ok();
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "seglog {:?} did not finish in {timeout:?}",
                args.iter().map(|a| a.as_ref()).collect::<Vec<_>>()
            );
        }
        // Sampled without a pause for the first 50 ms: a short run is seen too.
        if start.elapsed() > Duration::from_millis(50) {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    Run {
        code: status.code(),
        stderr: fs::read_to_string(&e).unwrap_or_default(),
        peak_anon_kib: peak,
    }
}

const TS: i64 = 1_700_000_000_000;

/// `<dir>/t-0` with one segment of 50 small batches; returns the partition and the segment's
/// length.
fn partition(dir: &Path) -> (PathBuf, u64) {
    let p = dir.join("t-0");
    fs::create_dir_all(&p).expect("mkdir");
    let mut log = Vec::new();
    for i in 0..50i64 {
        let mut b = RecordBatchBuilder::new(i);
        b.append(
            TS + i,
            Some(b"k"),
            Some(format!("value {i}").as_bytes()),
            &[],
        )
        .expect("append");
        log.extend_from_slice(&b.build());
    }
    fs::write(p.join("00000000000000000000.log"), &log).expect("write log");
    (p, log.len() as u64)
}

/// A sparse file of `len` bytes with a few bytes of `data` at `at` (not all zeros: a reader
/// cannot skip it as empty).
fn sparse(path: &Path, len: u64, at: u64, data: &[u8]) {
    let f = fs::File::create(path).expect("create");
    f.set_len(len).expect("set_len");
    f.write_all_at(data, at).expect("write");
}

fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("metadata").blocks() * 512
}

/// The quarantined files of a partition (all folders), by path.
fn quarantined(partition: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(folders) = fs::read_dir(partition.join("quarantine")) else {
        return out;
    };
    for folder in folders {
        for f in fs::read_dir(folder.expect("entry").path()).expect("read_dir") {
            out.push(f.expect("entry").path());
        }
    }
    out.sort();
    out
}

const GIB: u64 = 1 << 30;

#[test]
fn recover_cuts_an_8_gib_sparse_tail_into_a_sparse_quarantine_file_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p, valid) = partition(dir.path());
    let log = p.join("00000000000000000000.log");
    // Zeros after the batches (where recovery cuts), some data at 5 GiB, 8 GiB in all.
    let f = fs::OpenOptions::new().write(true).open(&log).expect("open");
    f.set_len(8 * GIB).expect("set_len");
    f.write_all_at(&[0xab; 1 << 20], 5 * GIB).expect("write");
    drop(f);
    let run = seglog(
        &[OsStr::new("recover"), p.as_os_str()],
        Duration::from_secs(300),
    );
    eprintln!(
        "recover, 8 GiB sparse cut: {} KiB anonymous",
        run.peak_anon_kib
    );
    assert!(
        run.peak_anon_kib < BUDGET_KIB,
        "recover used {} KiB of anonymous memory: {run:?}",
        run.peak_anon_kib
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(fs::metadata(&log).expect("log").len(), valid);
    let q = quarantined(&p);
    let cut = q
        .iter()
        .find(|f| f.to_string_lossy().contains(".log.cut-"))
        .unwrap_or_else(|| panic!("no quarantined cut among {q:?}"));
    assert_eq!(fs::metadata(cut).expect("cut").len(), 8 * GIB - valid);
    // The data at 5 GiB is there, at its place in the cut.
    let mut b = [0u8; 16];
    fs::File::open(cut)
        .expect("open cut")
        .read_exact_at(&mut b, 5 * GIB - valid)
        .expect("read cut");
    assert_eq!(b, [0xab; 16]);
    assert!(
        allocated(cut) < 64 << 20,
        "the cut of a sparse tail takes {} bytes on disk",
        allocated(cut)
    );
    assert!(
        !q.iter().any(|f| f.to_string_lossy().ends_with(".partial")),
        "{q:?}"
    );
}

/// The same with 1 GiB of dense bytes (data on disk, no holes) after the batches: the bound does
/// not depend on the file being sparse, and the cut is the bytes, byte for byte.
#[test]
fn recover_cuts_a_dense_1_gib_tail_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p, valid) = partition(dir.path());
    let log = p.join("00000000000000000000.log");
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8 | 0x80).collect();
    let f = fs::OpenOptions::new().write(true).open(&log).expect("open");
    for k in 0..1024u64 {
        f.write_all_at(&chunk, valid + k * (1 << 20))
            .expect("write");
    }
    drop(f);
    let run = seglog(
        &[OsStr::new("recover"), p.as_os_str()],
        Duration::from_secs(300),
    );
    eprintln!(
        "recover, 1 GiB dense cut: {} KiB anonymous",
        run.peak_anon_kib
    );
    assert!(
        run.peak_anon_kib < BUDGET_KIB,
        "recover used {} KiB of anonymous memory: {run:?}",
        run.peak_anon_kib
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(fs::metadata(&log).expect("log").len(), valid);
    let q = quarantined(&p);
    let cut = q
        .iter()
        .find(|f| f.to_string_lossy().contains(".log.cut-"))
        .unwrap_or_else(|| panic!("no quarantined cut among {q:?}"));
    assert_eq!(fs::metadata(cut).expect("cut").len(), GIB);
    let copy = fs::File::open(cut).expect("open cut");
    let mut b = vec![0u8; 1 << 20];
    for k in [0u64, 1, 511, 1023] {
        copy.read_exact_at(&mut b, k * (1 << 20)).expect("read cut");
        assert!(b == chunk, "the cut differs in its MiB {k}");
    }
}

/// Each auxiliary file of a partition (and a `.swap`), 2 GiB and sparse (a few bytes of data at its start, zeros
/// after), under `verify`, `recover` and (for the files `dump` reads) `dump`: every run stays
/// under the budget and ends with an exit status, not a signal.
#[test]
fn two_gib_auxiliary_files_are_never_read_whole() {
    let cases: [(&str, bool, &[u8]); 9] = [
        ("leader-epoch-checkpoint", false, b"0\n1\n0 0\n"),
        (
            "../recovery-point-offset-checkpoint",
            false,
            b"0\n1\nt 0 0\n",
        ),
        ("../log-start-offset-checkpoint", false, b"0\n1\nt 0 0\n"),
        ("../replication-offset-checkpoint", false, b"0\n1\nt 0 0\n"),
        ("00000000000000000000.snapshot", true, &[0, 1]),
        ("00000000000000000000.txnindex", true, &[0, 0]),
        ("00000000000000000000.timeindex", true, &[0, 0, 1]),
        ("00000000000000000000.index", true, &[0, 0, 0, 0]),
        // Not auxiliary, but read by the planner before any segment: a segment's size.
        ("00000000000000000000.log.swap", false, &[0, 0, 0, 0]),
    ];
    let mut over = Vec::new();
    for (name, dumped, head) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let (p, _) = partition(dir.path());
        let file = p.join(name);
        sparse(&file, 2 * GIB, 0, head);
        // The read-only runs first: recover may set the file aside or rebuild it.
        let mut runs = Vec::new();
        if dumped {
            runs.push(("dump", vec![OsStr::new("dump"), file.as_os_str()]));
        }
        runs.push(("verify", vec![OsStr::new("verify"), dir.path().as_os_str()]));
        runs.push((
            "recover",
            vec![OsStr::new("recover"), dir.path().as_os_str()],
        ));
        for (what, args) in runs {
            assert_eq!(
                fs::metadata(&file).map(|m| m.len()).ok(),
                Some(2 * GIB),
                "{what} {name}: the file is not there as made"
            );
            let run = seglog(&args, Duration::from_secs(300));
            let over_budget = run.peak_anon_kib >= BUDGET_KIB;
            assert!(
                run.code.is_some() || over_budget,
                "{what} {name}: killed by a signal: {run:?}"
            );
            eprintln!(
                "{what} {name}: {} KiB anonymous, exit {:?}",
                run.peak_anon_kib, run.code
            );
            if over_budget {
                over.push(format!(
                    "{what} {name}: {} KiB ({})",
                    run.peak_anon_kib,
                    run.stderr.lines().next().unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "over the {BUDGET_KIB} KiB budget: {over:#?}"
    );
}

/// A tmpfs of `size` mounted at a new directory, unmounted when dropped (also when the test
/// panics).
struct Tmpfs {
    at: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` where this process cannot mount (not root).
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = dir.path().join("mnt");
        fs::create_dir(&at).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { at, _dir: dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy (a child still running): detach it, it goes when the last user does.
            Command::new("umount").arg("-l").arg(&self.at).status().ok();
        }
    }
}

#[test]
fn enospc_while_quarantining_a_cut_leaves_no_file_under_a_complete_cuts_name() {
    let Some(fs_) = Tmpfs::mount("16m") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and this test cannot mount a tmpfs (it needs root)"
        );
        eprintln!("skipped: cannot mount a tmpfs (not root)");
        return;
    };
    let (p, valid) = partition(&fs_.at);
    let log = p.join("00000000000000000000.log");
    // 10 MiB of data that is not a batch after the valid ones: its copy cannot fit in what is
    // left of 16 MiB.
    let garbage: Vec<u8> = (0..10u32 << 20).map(|i| (i % 251) as u8 | 0x80).collect();
    fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open")
        .write_all_at(&garbage, valid)
        .expect("write garbage");
    let size = fs::metadata(&log).expect("log").len();
    let run = seglog(
        &[OsStr::new("recover"), p.as_os_str()],
        Duration::from_secs(120),
    );
    assert_ne!(run.code, Some(0), "recovery cannot have succeeded: {run:?}");
    assert!(
        run.stderr.contains("No space left") || run.stderr.contains("space"),
        "{run:?}"
    );
    for f in quarantined(&p) {
        let name = f.to_string_lossy().into_owned();
        assert!(
            !name.contains(".log.cut-") || name.ends_with(".partial"),
            "a file under a complete cut's name after ENOSPC: {name} ({} of {} bytes)",
            fs::metadata(&f).map(|m| m.len()).unwrap_or(0),
            size - valid
        );
    }
    assert_eq!(
        fs::metadata(&log).expect("log").len(),
        size,
        "the .log was cut though its bytes are not quarantined"
    );
    drop(fs_);
}

/// A dense 128 MiB `.index` of 16 million entries, none of which points at a batch of its small
/// log: `dump` reports them as Kafka does (every entry printed, the mismatches after all files),
/// but keeps only the first 100,000 mismatches for that report and counts the rest; `verify`
/// lists the first 1,000 entry problems and counts the rest. Memory does not grow with the number
/// of bad entries.
#[test]
fn a_dense_garbage_index_keeps_the_reports_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p, _) = partition(dir.path());
    let index = p.join("00000000000000000000.index");
    let entries = 16u32 << 20;
    let mut bytes = Vec::with_capacity(entries as usize * 8);
    for i in 0..entries {
        // Relative offsets 1, 2, 3, ... (never the base again: no zero-filled tail), positions
        // past the log's end.
        bytes.extend_from_slice(&(i + 1).to_be_bytes());
        bytes.extend_from_slice(&(1_000_000 + i).to_be_bytes());
    }
    fs::write(&index, &bytes).expect("write index");
    drop(bytes);
    let run = seglog(
        &[OsStr::new("dump"), index.as_os_str()],
        Duration::from_secs(600),
    );
    eprintln!(
        "dump, dense 128 MiB garbage .index: {} KiB anonymous",
        run.peak_anon_kib
    );
    assert!(
        run.peak_anon_kib < BUDGET_KIB,
        "dump used {} KiB of anonymous memory: {:?}",
        run.peak_anon_kib,
        run.code
    );
    assert_eq!(run.code, Some(1), "{:?}", run.stderr.lines().last());
    let listed = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("  Index offset: "))
        .count();
    assert_eq!(listed, 100_000);
    let more = u64::from(entries) - 100_000;
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with(&format!("{more} more problems not listed"))),
        "{:?}",
        run.stderr.lines().last()
    );

    let run = seglog(
        &[
            OsStr::new("verify"),
            OsStr::new("--json"),
            dir.path().as_os_str(),
        ],
        Duration::from_secs(600),
    );
    eprintln!(
        "verify, dense 128 MiB garbage .index: {} KiB anonymous",
        run.peak_anon_kib
    );
    assert!(
        run.peak_anon_kib < BUDGET_KIB,
        "verify used {} KiB of anonymous memory: {:?}",
        run.peak_anon_kib,
        run.code
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
}

/// A dense 128 MiB `.index` whose 16 million entries point inside a 1 GiB (sparse) log in no
/// order: `verify` does not sort a copy of them to check them one by one (384 MiB), it reports
/// the index as out of order.
#[test]
fn verify_of_a_dense_out_of_order_index_does_not_sort_a_copy_of_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p, _) = partition(dir.path());
    fs::OpenOptions::new()
        .write(true)
        .open(p.join("00000000000000000000.log"))
        .expect("open log")
        .set_len(GIB)
        .expect("set_len");
    let entries = 16u32 << 20;
    let mut bytes = Vec::with_capacity(entries as usize * 8);
    for i in 0..entries {
        let position = (u64::from(i).wrapping_mul(2_654_435_761) % 1_000_000_000) as u32;
        bytes.extend_from_slice(&(i + 1).to_be_bytes());
        bytes.extend_from_slice(&position.to_be_bytes());
    }
    fs::write(p.join("00000000000000000000.index"), &bytes).expect("write index");
    drop(bytes);
    let run = seglog(
        &[OsStr::new("verify"), dir.path().as_os_str()],
        Duration::from_secs(600),
    );
    eprintln!(
        "verify, dense 128 MiB out-of-order .index: {} KiB anonymous",
        run.peak_anon_kib
    );
    assert!(
        run.peak_anon_kib < BUDGET_KIB,
        "verify used {} KiB of anonymous memory: {:?}",
        run.peak_anon_kib,
        run.code
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
}
