//! `plan_audited` (what `seglog verify` runs) compares every offset-index entry with the batch at
//! its position and every time-index entry with the log's last offset. Each test damages one
//! entry of an index seglog wrote and expects the finding that names exactly that entry: the
//! entries are read in place from the index bytes, in position order (a sorted copy only when the
//! index lists them out of order).

use std::path::Path;

use record_format::Batches;
use recovery::{AppendOrigin, LoadOptions, LogLoader};
use recovery::{IndexFinding, IndexProblem};
use segment_store::internals::FileKind;
use segment_store::LogConfig;

use super::log::{batch, open_with};

const BATCHES: usize = 12;

/// One segment of twelve batches with an offset-index entry after each but the first, closed
/// cleanly; returns the `.log`'s batches as (position, last offset).
fn build(dir: &Path) -> Vec<(u64, i64)> {
    let mut log = open_with(
        dir,
        LogConfig {
            index_interval_bytes: 1,
            ..LogConfig::default()
        },
    );
    for i in 0..BATCHES {
        log.append_as_leader(
            &batch(7, 0, 2 * i as i32, 2, false),
            0,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    log.close().unwrap();
    let bytes = std::fs::read(dir.join(format!("{:020}.log", 0))).unwrap();
    Batches::new(&bytes, 0)
        .map(|e| {
            let e = e.unwrap();
            (e.position(), e.last_offset())
        })
        .collect()
}

fn index_path(dir: &Path, ext: &str) -> std::path::PathBuf {
    dir.join(format!("{:020}.{ext}", 0))
}

/// The offset index's entries as (relative offset, position).
fn read_index(dir: &Path) -> Vec<(i32, u32)> {
    std::fs::read(index_path(dir, "index"))
        .unwrap()
        .chunks_exact(8)
        .map(|c| {
            (
                i32::from_be_bytes(c[..4].try_into().unwrap()),
                u32::from_be_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect()
}

fn write_index(dir: &Path, entries: &[(i32, u32)]) {
    let bytes: Vec<u8> = entries
        .iter()
        .flat_map(|(o, p)| [o.to_be_bytes(), p.to_be_bytes()].concat())
        .collect();
    std::fs::write(index_path(dir, "index"), bytes).unwrap();
}

fn index_findings(dir: &Path) -> Vec<IndexFinding> {
    let opts = LoadOptions::for_partition_dir(dir, true);
    let plan = LogLoader::plan_audited(dir, &opts).unwrap();
    assert_eq!(plan.segments.len(), 1);
    plan.segments[0].index_findings.clone()
}

/// The problems of the index findings.
fn problems(dir: &Path) -> Vec<IndexProblem> {
    index_findings(dir).into_iter().map(|f| f.problem).collect()
}

/// Entry `n` of `entries` names `log_offset`'s batch with another offset.
fn mismatch(entries: &[(i32, u32)], n: usize, log_offset: i64) -> IndexProblem {
    IndexProblem::OffsetMismatch {
        entry: n,
        index_offset: i64::from(entries[n].0),
        log_offset,
        position: entries[n].1,
    }
}

#[test]
fn an_intact_index_has_no_findings_and_names_every_batch_but_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let batches = build(dir.path());
    let entries = read_index(dir.path());
    // The index as Kafka's append rule writes it: one entry per batch after the first, with
    // the batch's last offset and position (checked against the `.log`, not the code).
    let want: Vec<(i32, u32)> = batches[1..]
        .iter()
        .map(|&(p, last)| (last as i32, p as u32))
        .collect();
    assert_eq!(entries, want);
    assert_eq!(index_findings(dir.path()), Vec::new());
}

#[test]
fn a_wrong_offset_and_a_position_inside_a_batch_are_named_by_entry() {
    let dir = tempfile::tempdir().unwrap();
    let batches = build(dir.path());
    let mut entries = read_index(dir.path());
    entries[3].0 += 1;
    entries[6].1 += 5;
    write_index(dir.path(), &entries);
    let findings = index_findings(dir.path());
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert_eq!(findings[0].problem, mismatch(&entries, 3, batches[4].1));
    assert_eq!(
        findings[1].problem,
        IndexProblem::NotBatchBoundary {
            entry: 6,
            offset: entries[6].0 as i64,
            position: entries[6].1,
        }
    );
    assert!(findings.iter().all(|f| f.kind == FileKind::Index));
}

#[test]
fn an_entry_past_the_log_is_reported_once_and_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let batches = build(dir.path());
    let log_size = std::fs::metadata(dir.path().join(format!("{:020}.log", 0)))
        .unwrap()
        .len();
    let mut entries = read_index(dir.path());
    entries[5].1 = log_size as u32 + 100;
    // The entries after it are still compared.
    entries[8].0 += 1;
    write_index(dir.path(), &entries);
    assert_eq!(
        problems(dir.path()),
        vec![
            IndexProblem::EntryBeyondLog {
                entry: 5,
                offset: i64::from(entries[5].0),
                position: log_size as u32 + 100,
                log_size,
            },
            mismatch(&entries, 8, batches[9].1),
        ]
    );
}

#[test]
fn entries_out_of_order_are_compared_by_position() {
    let dir = tempfile::tempdir().unwrap();
    let batches = build(dir.path());
    let mut entries = read_index(dir.path());
    // Two intact entries swapped: each still names its batch rightly.
    entries.swap(2, 7);
    write_index(dir.path(), &entries);
    assert_eq!(problems(dir.path()), Vec::new());
    // And a wrong offset among them is still found, with its own entry number.
    entries[7].0 -= 1;
    write_index(dir.path(), &entries);
    assert_eq!(
        problems(dir.path()),
        vec![mismatch(&entries, 7, batches[3].1)]
    );
}

#[test]
fn a_time_index_entry_past_the_last_offset_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let batches = build(dir.path());
    let last = batches.last().unwrap().1;
    let path = index_path(dir.path(), "timeindex");
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() % 12, 0);
    let n = bytes.len() / 12;
    let last_ts = i64::from_be_bytes(bytes[bytes.len() - 12..bytes.len() - 4].try_into().unwrap());
    bytes.extend_from_slice(&(last_ts + 1).to_be_bytes());
    bytes.extend_from_slice(&(last as i32 + 5).to_be_bytes());
    std::fs::write(&path, bytes).unwrap();
    let findings = index_findings(dir.path());
    assert_eq!(
        findings
            .iter()
            .map(|f| (f.kind, f.problem.clone()))
            .collect::<Vec<_>>(),
        vec![(
            FileKind::TimeIndex,
            IndexProblem::TimeEntryBeyondLog {
                entry: n,
                timestamp: last_ts + 1,
                offset: last + 5,
                last_offset: last,
            }
        )]
    );
}
