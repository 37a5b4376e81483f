//! The image of a directory tree, to check that a read-only step changed nothing.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Every file under `dir` (recursively) with its bytes, and every directory: a picture of a
/// directory to check that planning changed nothing (the directory lock file excluded).
pub fn tree_image(dir: &Path) -> io::Result<BTreeMap<PathBuf, Option<Vec<u8>>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let p = e.path();
            if e.file_type()?.is_dir() {
                out.insert(p.clone(), None);
                stack.push(p);
            } else if e.file_name() != segment_store::internals::LOCK_FILE_NAME {
                out.insert(p.clone(), Some(std::fs::read(&p)?));
            }
        }
    }
    Ok(out)
}
