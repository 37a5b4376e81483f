//! Tests of the simulated file system.

use super::crash::{WeakModel, BLOCK_SIZE};
use super::{SimulatedFs, TornWrite};

use super::*;
use segment_store::internals::write_atomically;
use segment_store::{EntryType, OpenMode, Storage};
use std::ffi::OsString;

fn setup() -> (SimulatedFs, PathBuf) {
    let fs = SimulatedFs::new();
    let dir = PathBuf::from("/data/t-0");
    fs.create_durable_dir_all(&dir);
    (fs, dir)
}

#[test]
fn unsynced_data_is_lost() {
    let (fs, dir) = setup();
    let p = dir.join("f");
    let f = fs.open(&p, OpenMode::Create).unwrap();
    fs.sync_dir(&dir).unwrap();
    f.append(b"hello").unwrap();
    f.sync_data().unwrap();
    f.append(b" world").unwrap();
    assert_eq!(fs.read(&p).unwrap(), b"hello world");
    let img = fs.crash(TornWrite::None);
    assert_eq!(img.get(&p).unwrap(), b"hello");
    assert_eq!(fs.read(&p).unwrap(), b"hello");
    // Old handles are stale after a crash.
    assert!(f.len().is_err());
}

#[test]
fn torn_tail_keeps_prefix_of_last_write() {
    let (fs, dir) = setup();
    let p = dir.join("f");
    let f = fs.open(&p, OpenMode::Create).unwrap();
    fs.sync_dir(&dir).unwrap();
    f.append(b"abc").unwrap();
    f.sync_data().unwrap();
    f.append(b"defgh").unwrap();
    let img = fs.crash(TornWrite::Prefix(2));
    assert_eq!(img.get(&p).unwrap(), b"abcde");
    // Prefix larger than the write is clamped.
    let f = fs.open(&p, OpenMode::ReadWrite).unwrap();
    f.append(b"XY").unwrap();
    let img = fs.crash(TornWrite::Prefix(100));
    assert_eq!(img.get(&p).unwrap(), b"abcdeXY");
}

#[test]
fn create_and_rename_need_dir_sync() {
    let (fs, dir) = setup();
    let a = dir.join("a");
    let b = dir.join("b");
    let f = fs.open(&a, OpenMode::Create).unwrap();
    f.append(b"x").unwrap();
    f.sync_all().unwrap();
    // File data synced but the name is not durable.
    assert!(fs.crash(TornWrite::None).is_empty());
    assert!(!fs.exists(&a).unwrap());

    let f = fs.open(&a, OpenMode::Create).unwrap();
    f.append(b"x").unwrap();
    f.sync_all().unwrap();
    fs.sync_dir(&dir).unwrap();
    fs.rename(&a, &b).unwrap();
    assert!(fs.exists(&b).unwrap());
    // Rename not durable without sync_dir: the old name comes back.
    let img = fs.crash(TornWrite::None);
    assert_eq!(img.keys().collect::<Vec<_>>(), vec![&a]);

    fs.rename(&a, &b).unwrap();
    fs.sync_dir(&dir).unwrap();
    let img = fs.crash(TornWrite::None);
    assert_eq!(img.keys().collect::<Vec<_>>(), vec![&b]);
    assert_eq!(img.get(&b).unwrap(), b"x");

    fs.remove_file(&b).unwrap();
    assert_eq!(
        fs.crash(TornWrite::None).len(),
        1,
        "remove needs dir sync too"
    );
    fs.remove_file(&b).unwrap();
    fs.sync_dir(&dir).unwrap();
    assert!(fs.crash(TornWrite::None).is_empty());
}

#[test]
fn fail_after_stops_io_and_torn_keeps_inflight_write() {
    let (fs, dir) = setup();
    let p = dir.join("f");
    let f = fs.open(&p, OpenMode::Create).unwrap();
    fs.sync_dir(&dir).unwrap();
    let before = fs.stats();
    fs.fail_after(1);
    f.append(b"12").unwrap();
    assert!(f.append(b"3456").is_err());
    assert!(f.sync_data().is_err());
    assert_eq!(fs.stats().io_points, before.io_points + 1);
    assert_eq!(fs.stats().writes, before.writes + 2);
    // The in-flight write lands after the durable (empty) image at offset 2: a zero gap.
    let img = fs.crash(TornWrite::Prefix(3));
    assert_eq!(img.get(&p).unwrap(), &[0, 0, b'3', b'4', b'5']);
}

#[test]
fn remove_dir_needs_an_empty_dir_and_a_dir_sync() {
    let (fs, dir) = setup();
    let sub = dir.join("q");
    fs.create_dir_all(&sub).unwrap();
    fs.sync_dir(&dir).unwrap();
    let f = sub.join("f");
    fs.open(&f, OpenMode::Create).unwrap();
    let err = fs.remove_dir(&sub).unwrap_err();
    assert_eq!(err.io_kind(), Some(io::ErrorKind::DirectoryNotEmpty));
    fs.remove_file(&f).unwrap();
    fs.remove_dir(&sub).unwrap();
    assert!(fs.list_dir(&dir).unwrap().is_empty());
    assert!(fs.remove_dir(&sub).is_err());
    fs.crash(TornWrite::None);
    assert_eq!(
        fs.list_dir(&dir).unwrap(),
        vec![OsString::from("q")],
        "the removal needs a sync of the parent"
    );
    fs.remove_dir(&sub).unwrap();
    fs.sync_dir(&dir).unwrap();
    fs.crash(TornWrite::None);
    assert!(fs.list_dir(&dir).unwrap().is_empty());
}

#[test]
fn write_atomically_leaves_the_old_or_the_new_content_at_every_crash_point() {
    // open(.tmp), write, fsync, rename, fsync of the directory: five I/O points.
    for n in 0..=5 {
        let (fs, dir) = setup();
        let p = dir.join("state");
        write_atomically(&fs, &p, b"old").unwrap();
        fs.fail_after(n);
        let r = write_atomically(&fs, &p, b"new!");
        assert_eq!(r.is_ok(), n == 5, "crash after {n} points: {r:?}");
        let img = fs.crash(TornWrite::Prefix(usize::MAX));
        assert_eq!(img.keys().collect::<Vec<_>>(), vec![&p], "after {n} points");
        let want: &[u8] = if n == 5 { b"new!" } else { b"old" };
        assert_eq!(img.get(&p).unwrap(), want, "after {n} points");
    }
}

#[test]
fn set_len_and_dirs() {
    let (fs, dir) = setup();
    let sub = dir.join("sub");
    fs.create_dir_all(&sub).unwrap();
    assert_eq!(fs.list_dir(&dir).unwrap(), vec![OsString::from("sub")]);
    let p = sub.join("f");
    let f = fs.open(&p, OpenMode::CreateNew).unwrap();
    assert!(fs.open(&p, OpenMode::CreateNew).is_err());
    f.set_len(4).unwrap();
    assert_eq!(fs.read(&p).unwrap(), vec![0; 4]);
    assert!(fs.open(&dir.join("nope/x"), OpenMode::Create).is_err());
    // Neither sub nor f was made durable.
    fs.crash(TornWrite::None);
    assert!(fs.list_dir(&dir).unwrap().is_empty());
}

fn weak() -> WeakModel {
    WeakModel::default()
}

#[test]
fn weak_model_keeps_any_subset_of_unsynced_blocks_and_a_size_without_data() {
    let (fs, dir) = setup();
    let p = dir.join("f");
    let f = fs.open(&p, OpenMode::Create).unwrap();
    fs.sync_dir(&dir).unwrap();
    f.append(&[1u8; BLOCK_SIZE]).unwrap();
    f.sync_data().unwrap();
    // Two more blocks and a half, unsynced: a size and three blocks to choose.
    f.append(&[2u8; BLOCK_SIZE * 2 + 100]).unwrap();
    let states = fs.crash_states(&weak(), 0);
    assert_eq!(
        (states.choices, states.exhaustive, states.explored),
        (4, true, 16)
    );
    let contents: BTreeSet<Vec<u8>> = states
        .images
        .iter()
        .map(|i| i.files.get(&p).cloned().unwrap())
        .collect();
    let synced = vec![1u8; BLOCK_SIZE];
    assert!(contents.contains(&synced), "nothing unsynced kept");
    // The new size without its data: zeros after the synced block.
    let mut zeros = synced.clone();
    zeros.resize(BLOCK_SIZE * 3 + 100, 0);
    assert!(contents.contains(&zeros));
    // The last block without the one before it.
    let mut hole = zeros.clone();
    hole[BLOCK_SIZE * 3..].fill(2);
    assert!(contents.contains(&hole));
    // Every image keeps the synced block.
    assert!(contents.iter().all(|c| c.starts_with(&synced)));
    // The model the `crash` of today keeps none of it.
    assert_eq!(fs.crash(TornWrite::None).get(&p), Some(&synced));
    assert_eq!(fs.crash_states(&weak(), 0).choices, 0);
}

#[test]
fn weak_model_lets_a_rename_persist_before_the_data_unless_it_was_synced() {
    for fsync_first in [false, true] {
        let (fs, dir) = setup();
        let p = dir.join("state");
        write_atomically(&fs, &p, b"old").unwrap();
        let tmp = dir.join("state.tmp");
        let f = fs.open(&tmp, OpenMode::CreateTruncate).unwrap();
        f.write_at(0, b"new!").unwrap();
        if fsync_first {
            f.sync_all().unwrap();
        }
        fs.rename(&tmp, &p).unwrap();
        let weak_contents: BTreeSet<Vec<u8>> = fs
            .crash_states(&weak(), 0)
            .images
            .iter()
            .filter_map(|i| i.files.get(&p).cloned())
            .collect();
        let mut want: BTreeSet<Vec<u8>> = [b"old".to_vec(), b"new!".to_vec()].into();
        if !fsync_first {
            // The name without the data, or with only its new size.
            want.extend([Vec::new(), vec![0; 4]]);
        }
        assert_eq!(weak_contents, want, "fsync first: {fsync_first}");
        // Today's model: the rename is not durable without a sync of the directory.
        assert_eq!(fs.crash(TornWrite::None).get(&p).unwrap(), b"old");
    }
}

#[test]
fn weak_model_directory_entries_are_durable_only_after_a_directory_sync() {
    let (fs, dir) = setup();
    let sub = dir.join("q");
    fs.create_dir(&sub).unwrap();
    let f = fs.open(&sub.join("x"), OpenMode::CreateNew).unwrap();
    f.sync_all().unwrap();
    let states = fs.crash_states(&weak(), 0);
    // mkdir q, create q/x: q/x survives only with q.
    assert_eq!(states.choices, 2);
    let kept: BTreeSet<(bool, bool)> = states
        .images
        .iter()
        .map(|i| (i.dirs.contains(&sub), i.files.contains_key(&sub.join("x"))))
        .collect();
    assert_eq!(kept, [(false, false), (true, false), (true, true)].into());
    fs.sync_dir(&sub).unwrap();
    fs.sync_dir(&dir).unwrap();
    let states = fs.crash_states(&weak(), 0);
    assert_eq!((states.choices, states.images.len()), (0, 1));
    assert!(states.images[0].files.contains_key(&sub.join("x")));
}

#[test]
fn weak_model_samples_a_fixed_number_of_states_beyond_the_exhaustive_bound() {
    let (fs, dir) = setup();
    let p = dir.join("f");
    let f = fs.open(&p, OpenMode::Create).unwrap();
    fs.sync_dir(&dir).unwrap();
    f.append(&vec![3u8; BLOCK_SIZE * 20]).unwrap();
    let model = WeakModel {
        samples: 10,
        ..weak()
    };
    let a = fs.crash_states(&model, 7);
    assert_eq!((a.choices, a.exhaustive, a.explored), (21, false, 12));
    assert!(a.images.len() > 2 && a.images.len() <= 12);
    // Seeded: the same sample again.
    assert_eq!(fs.crash_states(&model, 7).images, a.images);
    // The in-flight write's blocks are choices too.
    fs.fail_after(0);
    assert!(f.append(&[4u8; 10]).is_err());
    assert_eq!(fs.crash_states(&model, 7).choices, 22);
}

#[test]
fn from_image_recreates_a_durable_tree() {
    let (fs, dir) = setup();
    write_atomically(&fs, &dir.join("a"), b"1").unwrap();
    fs.create_dir_all(&dir.join("e/f")).unwrap();
    fs.sync_dir(&dir).unwrap();
    fs.sync_dir(&dir.join("e")).unwrap();
    let img = fs.durable_state();
    let copy = SimulatedFs::from_image(&img);
    assert_eq!(copy.read(&dir.join("a")).unwrap(), b"1");
    assert_eq!(
        copy.entry_type(&dir.join("e/f")).unwrap(),
        Some(EntryType::Dir)
    );
    copy.crash(TornWrite::None);
    assert_eq!(copy.durable_state(), img);
}
