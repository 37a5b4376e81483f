//! `seglog demo`, run as the real binary (what README's first command runs): every step is
//! printed, the barrier makes the reused producer id safe where the scratch copy without it
//! drops the batch as a duplicate, the torn tail is quarantined byte for byte, exit 0.

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
    for needle in [
        "B/orders-0/00000000000000000000.log is byte-identical to A/orders-0/00000000000000000000.log",
        "B: a client append (pid 9) is rejected: partition is read-only for clients in mirror state MIRRORING",
        "B: mirror-state -> STOPPING step=FEED_STOPPED source=cluster-A lso=9",
        "B: mirror-state -> STOPPING step=TRUNCATED source=cluster-A lso=9 last_mirrored_offset=9",
        "B: mirror-state -> STOPPING step=EPOCH_BUMPED source=cluster-A lso=9 last_mirrored_offset=9 last_mirrored_epoch=0 leader_epoch=1",
        "B: mirror-state -> STOPPED barrier_offset=9",
        // The barrier opens the new leader epoch (the mirrored batches are in epoch 0).
        "baseOffset: 9 lastOffset: 9 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 1 ",
        r#"MirrorPidReset {"version":0,"sourceClusterId":"cluster-A"}"#,
        "B: pid 5 epoch 0 seq 0..1 -> written at offsets 10..11",
        "silently dropped as a duplicate of offset 0",
        "identical to the torn write",
        "B: mirror-state is STOPPED barrier_offset=9",
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
    let first = stdout.lines().next().expect("a first line");
    let root = first.rsplit(", in ").next().expect("the directory");
    let root = std::path::Path::new(root);
    assert!(
        root.join("B/orders-0/00000000000000000000.log").is_file(),
        "{first}"
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
