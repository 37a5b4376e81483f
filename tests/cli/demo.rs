//! `seglog demo`, run as the real binary (what README's first command runs): every step is
//! printed, the barrier (in the new leader epoch) makes the reused producer id safe where the
//! scratch copy without it drops the batch as a duplicate, the torn tail is quarantined byte for
//! byte, exit 0. Every `--scenario`: with the barrier each partition directory verifies clean
//! and audits without error; with `--no-barrier` the audit reports the collision exactly where
//! producer ids collide.

use super::common::tempdir;
use super::run::{assert_no_panic, seglog};

const HEADINGS: [&str; 7] = [
    "== 1. cluster A produces (A/orders-0)",
    "== 2. cluster B mirrors A byte for byte (B/orders-0)",
    "== 3. B fails over: stop mirroring (STOPPING steps, then the barrier)",
    "== 4. a local producer on B is given producer id 5 and starts at sequence 0",
    "== 5. B crashes in the middle of a write (a torn tail)",
    "== 6. B restarts: recovery (LogLoader::load) quarantines the torn tail",
    "== 7. B's segment (seglog dump --deep-iteration)",
];

#[test]
fn demo_prints_every_step_and_exits_0() {
    let dir = tempdir();
    let root = dir.path().join("demo");
    let (code, stdout, stderr) = seglog(&["demo".as_ref(), root.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    let lines: Vec<&str> = stdout.lines().collect();
    for h in HEADINGS {
        assert!(lines.contains(&h), "missing {h:?} in\n{stdout}");
    }
    assert!(lines.len() <= 110, "{} lines", lines.len());
    // The problem comes first, in a few lines before step 1: the barrier and the crash.
    let intro: Vec<&str> = lines
        .iter()
        .copied()
        .take_while(|l| !l.starts_with("== 1."))
        .collect();
    assert!(intro.len() < lines.len(), "no step 1 in\n{stdout}");
    assert!(intro.len() <= 9, "{intro:#?}");
    let intro = intro.join(" ");
    for needle in ["KIP-1279", "MIRROR_PID_RESET", "producer ids", "torn tail"] {
        assert!(
            intro.contains(needle),
            "missing {needle:?} before step 1: {intro}"
        );
    }
    for needle in [
        "B/orders-0/00000000000000000000.log is byte-identical to A/orders-0/00000000000000000000.log",
        "B: a client append (pid 9) is rejected: partition is read-only for clients in mirror state MIRRORING",
        "B: mirror-state -> STOPPING step=FEED_STOPPED source=cluster-A lso=9 policy=TRUNCATE_TO_LAST_STABLE leader_epoch=10",
        "B: mirror-state -> STOPPING step=TRUNCATED source=cluster-A lso=9 policy=TRUNCATE_TO_LAST_STABLE last_mirrored_offset=9",
        "B: mirror-state -> STOPPING step=EPOCH_BUMPED source=cluster-A lso=9 policy=TRUNCATE_TO_LAST_STABLE last_mirrored_offset=9 last_mirrored_epoch=0 leader_epoch=10",
        "B: mirror-state -> STOPPED barrier_offset=9 last_mirror_epoch=0",
        // The barrier opens the new leader epoch, MIRROR_EPOCH_FENCE (10) above the mirrored
        // batches' epoch 0.
        "baseOffset: 9 lastOffset: 9 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 10 ",
        r#"MirrorPidReset {"version":0,"sourceClusterId":"cluster-A"}"#,
        "B: pid 5 epoch 0 seq 0..1 -> written at offsets 10..11",
        "silently dropped as a duplicate of offset 0",
        "identical to the torn write",
        "B: mirror-state is STOPPED barrier_offset=9 last_mirror_epoch=0",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
    // The files are really there: the quarantined tail next to B's recovered segment.
    let q = root.join("B/orders-0/quarantine/0001/00000000000000000000.log.cut-681");
    assert_eq!(std::fs::metadata(&q).expect("quarantined tail").len(), 45);
    assert_no_panic(&stderr);
}

#[test]
fn demo_without_dir_uses_a_fresh_temp_dir_and_prints_it() {
    let (code, stdout, stderr) = seglog(&["demo".as_ref()]);
    assert_eq!(code, 0, "{stderr}");
    let first = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Files: "))
        .expect("a line naming the files");
    let root = first
        .strip_suffix(" (left in place)")
        .expect("says it is kept");
    let root = std::path::Path::new(root);
    assert!(
        root.join("B/orders-0/00000000000000000000.log").is_file(),
        "{first}"
    );
    // The last lines say the folder stays and how to check it with this very binary.
    assert!(
        stdout.contains(&format!(
            "{} verify {}",
            env!("CARGO_BIN_EXE_seglog"),
            root.join("B/orders-0").display()
        )),
        "{stdout}"
    );
    std::fs::remove_dir_all(root).expect("clean up the demo dir");
}

#[test]
fn demo_refuses_a_non_empty_dir() {
    let dir = tempdir();
    std::fs::write(dir.path().join("keep.txt"), b"x").expect("write");
    let (code, stdout, stderr) = seglog(&["demo".as_ref(), dir.path().as_os_str()]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
}

/// Every `--scenario`: `(name, partition dirs, those whose producer ids collide without the
/// barrier, lines printed with the barrier)`.
type Scenario = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const SCENARIOS: [Scenario; 9] = [
    (
        "active-passive",
        &["A/orders-0", "B/orders-0"],
        &["B/orders-0"],
        &["B/orders-0: MIRROR_PID_RESET barrier at offset 8 in leader epoch 10"],
    ),
    (
        "failback",
        &["A/orders-0", "B/orders-0"],
        &["A/orders-0", "B/orders-0"],
        &[
            "B/orders-0: MIRROR_PID_RESET barrier at offset 10 in leader epoch 10",
            "A/orders-0: start mirroring B/orders-0, truncated 11 -> 10 (aligned by leader epoch)",
            "A/orders-0: MIRROR_PID_RESET barrier at offset 19 in leader epoch 20",
        ],
    ),
    (
        "fan-out",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &["B/orders-0", "C/orders-0"],
        &[
            "B/orders-0: MIRROR_PID_RESET barrier at offset 8 in leader epoch 10",
            "C/orders-0: MIRROR_PID_RESET barrier at offset 16 in leader epoch 10",
        ],
    ),
    (
        "fan-in",
        &["A/orders-0", "B/payments-0", "C/orders-0", "C/payments-0"],
        &["C/orders-0", "C/payments-0"],
        &[
            "C/orders-0: MIRROR_PID_RESET barrier at offset 8 in leader epoch 10",
            "C/payments-0: MIRROR_PID_RESET barrier at offset 16 in leader epoch 10",
        ],
    ),
    (
        "chain",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &["B/orders-0", "C/orders-0"],
        &[
            "B/orders-0: MIRROR_PID_RESET barrier at offset 10 in leader epoch 10",
            "C/orders-0: B/orders-0's log diverged: truncated to 10 (leader-epoch exchange)",
            "C/orders-0: MIRROR_PID_RESET barrier at offset 19 in leader epoch 20",
        ],
    ),
    (
        "collision-same-epoch",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &["B/orders-0", "C/orders-0"],
        &["B/orders-0: pid 5 epoch 0 idempotent seq 0..9 -> offsets 31..40 (leader epoch 10)"],
    ),
    (
        "collision-epochs",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &["B/orders-0", "C/orders-0"],
        &["C/orders-0 <- B/orders-0: 5 batch(es), offsets 0..40, byte for byte"],
    ),
    (
        "collision-transactions",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &["B/orders-0", "C/orders-0"],
        &["C: a read_committed consumer sees 0 record(s) of A's unfinished transaction"],
    ),
    (
        // Under TruncateToLastStable the committed records after pid 7's open transaction
        // (offsets 4..6) are cut and offset 3, read before by a read_uncommitted consumer, is
        // reused by a local record; under AbortOpenTransactions nothing read changes and
        // read_committed still sees pid 9's committed records, not pid 7's aborted ones.
        "open-txn-at-stop",
        &["A/orders-0", "B/orders-0", "C/orders-0"],
        &[],
        &[
            "B/orders-0: MIRROR_PID_RESET barrier at offset 2 in leader epoch 10",
            "3 held A-7-1, now B-20-0",
            "C/orders-0: MIRROR_PID_RESET barrier at offset 8 in leader epoch 10",
            "  read_committed:   0:A-5-0 1:A-5-1 4:A-9-0 5:A-9-1 6:A-9-2 9:C-20-0 10:C-20-1",
            "  offsets read before the stop that changed: none",
        ],
    ),
];

fn run_scenario(name: &str, no_barrier: bool) -> (tempfile::TempDir, String) {
    let dir = tempdir();
    let root = dir.path().join("demo");
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["demo".as_ref(), "--scenario".as_ref(), name.as_ref()];
    if no_barrier {
        args.push("--no-barrier".as_ref());
    }
    args.push(root.as_os_str());
    let (code, stdout, stderr) = seglog(&args);
    assert_eq!(code, 0, "{name}: {stderr}");
    assert_eq!(stderr, "", "{name}");
    assert_no_panic(&stderr);
    (dir, stdout)
}

/// With the barrier, every partition directory of every scenario verifies clean and its audit
/// finds no error; the scenario prints its steps.
#[test]
fn every_scenario_with_the_barrier_verifies_and_audits_clean() {
    for (name, parts, _, needles) in SCENARIOS {
        let (dir, stdout) = run_scenario(name, false);
        assert!(
            stdout.starts_with(&format!("seglog demo --scenario {name}: in ")),
            "{stdout}"
        );
        assert!(stdout.contains("== 1. "), "{name}: {stdout}");
        // It ends naming the folder it leaves and a `verify` that works with this very binary.
        let root = dir.path().join("demo");
        let first = root.join(parts[0]);
        for needle in [
            format!("leaves its files in {} (delete", root.display()),
            format!(
                "{} verify {}",
                env!("CARGO_BIN_EXE_seglog"),
                first.display()
            ),
        ] {
            assert!(
                stdout.contains(&needle),
                "{name}: missing {needle:?} in\n{stdout}"
            );
        }
        for needle in needles {
            assert!(
                stdout.contains(needle),
                "{name}: missing {needle:?} in\n{stdout}"
            );
        }
        let mut found: Vec<String> = Vec::new();
        for cluster in std::fs::read_dir(dir.path().join("demo")).expect("clusters") {
            let cluster = cluster.expect("entry").path();
            for part in std::fs::read_dir(&cluster).expect("partitions") {
                let part = part.expect("entry").path();
                if part.is_dir() {
                    let c = cluster
                        .file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned();
                    let p = part
                        .file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned();
                    found.push(format!("{c}/{p}"));
                }
            }
        }
        found.sort();
        assert_eq!(found, parts, "{name}: DIR/<cluster>/<topic>-<partition>/");
        for part in parts {
            let p = dir.path().join("demo").join(part);
            let (code, out, err) = seglog(&["verify".as_ref(), p.as_os_str()]);
            assert_eq!(code, 0, "{name} {part}: verify\n{out}{err}");
            let (code, out, err) =
                seglog(&["producers".as_ref(), "--audit".as_ref(), p.as_os_str()]);
            assert_eq!(code, 0, "{name} {part}: audit\n{out}{err}");
            assert!(out.contains(", 0 error(s)"), "{name} {part}: {out}");
        }
    }
}

/// Without the barrier, the audit reports the collision (exit 1) exactly where producer ids
/// collide.
#[test]
fn every_scenario_without_the_barrier_shows_the_collision_to_the_audit() {
    for (name, parts, colliding, _) in SCENARIOS {
        let (dir, stdout) = run_scenario(name, true);
        assert!(stdout.contains("--no-barrier"), "{stdout}");
        assert!(
            stdout.contains("failover WITHOUT a barrier"),
            "{name}: {stdout}"
        );
        assert!(!stdout.contains("MIRROR_PID_RESET barrier at"), "{name}");
        for part in parts {
            let p = dir.path().join("demo").join(part);
            let (code, out, err) =
                seglog(&["producers".as_ref(), "--audit".as_ref(), p.as_os_str()]);
            let expected = if colliding.contains(part) { 1 } else { 0 };
            assert_eq!(code, expected, "{name} {part}: audit\n{out}{err}");
            if expected == 1 {
                assert!(out.contains("error: offset "), "{name} {part}: {out}");
            }
        }
    }
}

#[test]
fn no_barrier_needs_a_scenario_and_unknown_scenarios_are_refused() {
    let (code, _, stderr) = seglog(&["demo".as_ref(), "--no-barrier".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("required"), "{stderr}");
    let (code, _, stderr) = seglog(&["demo".as_ref(), "--scenario".as_ref(), "ring".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("invalid value 'ring' for '--scenario"),
        "{stderr}"
    );
}

/// `seglog demo --help` says the demo's folder stays behind for the user to delete.
#[test]
fn demo_help_says_the_folder_is_left_in_place() {
    let (code, stdout, stderr) = seglog(&["demo".as_ref(), "--help".as_ref()]);
    assert_eq!(code, 0, "{stderr}");
    let help = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("the demo leaves it in place, delete it when done"),
        "{stdout}"
    );
}
