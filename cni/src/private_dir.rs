//! The CNI's own directories (a state dir's `attachments/`, the node dir's
//! `locks/`): created on first use, readable by root alone.

use std::path::Path;

use crate::error::{Error, Result};

/// Creates `dir` (0700), with its parents if they are missing: one `mkdir`
/// when it exists (the usual case).
pub fn ensure(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| Error::io(dir, e))
        }
        Err(e) => Err(Error::io(dir, e)),
    }
}
