//! `seglog crash-test`: a short randomized run in-process and through the real binary.

use clap::Parser;
use seglog::cli::crash_test::{run, CrashTestArgs};
use seglog::cli::Status;

use crate::run::{assert_no_panic, seglog};

fn crash_test(args: &[&str]) -> (Status, String, String) {
    let args =
        CrashTestArgs::try_parse_from(std::iter::once("crash-test").chain(args.iter().copied()))
            .expect("arguments");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run(&args, &mut out, &mut err);
    (
        status,
        String::from_utf8(out).expect("UTF-8"),
        String::from_utf8(err).expect("UTF-8"),
    )
}

/// `(crash points, recoveries, batches verified, lost, violations)` of a summary line.
fn figures(line: &str) -> [u64; 5] {
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let before = |label: &str| -> u64 {
        let i = words
            .iter()
            .position(|w| *w == label)
            .unwrap_or_else(|| panic!("{label} in {line}"));
        words[i - 1].parse().expect("number")
    };
    [
        before("crash"),
        before("recoveries"),
        before("batches"),
        before("durable"),
        before("violations"),
    ]
}

#[test]
fn a_short_run_prints_progress_and_a_clean_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("UTF-8 path");
    let (status, out, err) = crash_test(&[
        "--iterations",
        "2",
        "--seed",
        "7",
        "--ops",
        "8",
        "--torn",
        "1",
        "--dir",
        d,
    ]);
    assert_eq!(status, Status::Success, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("iteration 1/2 seed 7: "), "{out}");
    assert!(lines[1].starts_with("iteration 2/2 seed 8: "), "{out}");
    let summary = lines[2];
    assert!(
        summary.starts_with("crash-test: 2 iterations from seed 7: "),
        "{summary}"
    );
    let [points, recoveries, batches, lost, violations] = figures(summary);
    assert!(
        points > 0 && recoveries > points && batches > 0,
        "{summary}"
    );
    assert_eq!((lost, violations), (0, 0), "{summary}");
    // The scratch directory is removed.
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn the_binary_runs_one_iteration_and_documents_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = seglog(&[
        "crash-test".as_ref(),
        "--iterations".as_ref(),
        "1".as_ref(),
        "--ops".as_ref(),
        "6".as_ref(),
        "--dir".as_ref(),
        dir.path().as_os_str(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_no_panic(&err);
    assert!(
        out.contains("0 durable batches lost, 0 violations"),
        "{out}"
    );
    let (code, help, _) = seglog(&["crash-test".as_ref(), "--help".as_ref()]);
    assert_eq!(code, 0);
    assert!(
        help.contains("Example") && help.contains("--seed"),
        "{help}"
    );
    let (code, _, err) = seglog(&["crash-test".as_ref(), "--iterations".as_ref(), "x".as_ref()]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_weak_model_explores_many_states_per_crash_point_and_finds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("UTF-8 path");
    let (status, out, err) = crash_test(&[
        // Seed 56 found a retention that renamed every segment away before the new one's
        // name was durable.
        "--iterations",
        "2",
        "--seed",
        "55",
        "--ops",
        "16",
        "--model",
        "weak",
        "--dir",
        d,
    ]);
    assert_eq!(status, Status::Success, "{out}{err}");
    let summary = out.lines().nth(2).expect("summary");
    let [points, recoveries, _, lost, violations] = figures(summary);
    assert_eq!((lost, violations), (0, 0), "{summary}");
    // More than the durable image per crash point: the weak states.
    assert!(recoveries > 2 * points, "{summary}");
    let weak = out.lines().nth(3).expect("weak model line");
    assert!(weak.starts_with("weak model: "), "{out}");
    let explored: u64 = weak
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .expect("states explored");
    assert!(explored >= recoveries, "{out}");
}
