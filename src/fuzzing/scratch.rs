//! The per-process scratch directory of a fuzz harness, shared by the harness files
//! (`#[path]`-included by each).

use std::path::{Path, PathBuf};

/// `<base>/<prefix>-<pid>`, created, where `<base>` is `/dev/shm` when the system has it (so that
/// recovery's fsyncs cost nothing), else the temp dir.
pub fn per_process_dir(prefix: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the fuzz scratch directory");
    dir
}
