//! Files replaced whole, so that a reader never sees half of one: the data go
//! to a temp file in the same directory, which `rename(2)` puts in place
//! (atomic within one filesystem). The variants differ only in what reaches
//! the disk when, and each caller picks by what a power loss may cost:
//!
//! - [`write_durable`]: temp file, write, `fsync` the file, rename, `fsync`
//!   the directory. After a power loss the path holds the old file or the new
//!   one, whole. Costs two flushes (milliseconds on a busy disk). The CNI's
//!   `install` of its own executable into `/opt/cni/bin`.
//! - [`write_unsynced`]: temp file, write, rename, no flush. A power loss may
//!   leave the file empty or gone, so only for what is rewritten after a
//!   reboot anyway and sits on a hot path: device-info files and CDI specs
//!   (under `/var/run`, a tmpfs, and written again when the next Allocate or
//!   prepare comes) inside Allocate, where one `fsync` costs ~7 ms against an
//!   Allocate p99 target under 1 ms. Also DRA's prepared-claim records and
//!   the CNI's attachment records (`nic::prepared`), on NodePrepareResources'
//!   and ADD's paths: what they describe (a VF in a pod's netns) does not
//!   outlive a power loss either, and the kubelet prepares again for the pods
//!   it starts after the reboot.
//! - [`write_renamed`]: temp file (a name the caller chose), write, rename,
//!   and the flushes later ([`Renamed::flush`]: `fdatasync` the file, `fsync`
//!   the directory). The CNI journal: it must be in place before the first
//!   step runs, and its flushes overlap the netns move instead of adding to
//!   ADD's latency (`cni/src/journal.rs` says why in that order).
//!
//! A write that fails removes its temp file. The CNI's VERSION cache
//! (`cni/src/ipam.rs`) is rewritten in place under a lock instead, on
//! purpose: see there.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file or directory could not be written, read, listed or removed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {path}")]
pub struct FileError {
    /// What was attempted (`write`, `rename into`, `flush`, …).
    pub op: &'static str,
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    /// `op` on `path` failed with `source`.
    pub fn new(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self { op, path: path.into(), source }
    }
}

/// The directory holding `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A temp name next to `path` that no other writer uses: this process and a
/// sequence number, so concurrent writes of one path (two Allocates) never
/// share a temp file.
fn unique_temp(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    parent(path).join(temp_name(&name))
}

/// The name of a new temp file for the file `name` in the same directory:
/// `.<name>.<pid>.<seq>.tmp` ([`is_temp_of`] recognises it).
pub fn temp_name(name: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.{}.{seq}.tmp", std::process::id())
}

/// Whether `candidate` is a temp file [`temp_name`] makes for `name`: what a
/// writer killed between its write and its rename leaves beside the file.
/// Only that exact shape, so a cleanup never takes another file.
pub fn is_temp_of(candidate: &str, name: &str) -> bool {
    let Some(rest) = candidate.strip_prefix('.').and_then(|c| c.strip_prefix(name)) else { return false };
    let Some(ids) = rest.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(ids.split_once('.'), Some((pid, seq)) if digits(pid) && digits(seq))
}

/// Runs `f` on the temp file `tmp`; removes `tmp` when it fails.
fn or_remove<T>(tmp: &Path, f: impl FnOnce() -> Result<T, FileError>) -> Result<T, FileError> {
    let res = f();
    if res.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    res
}

fn create_dir(dir: &Path) -> Result<(), FileError> {
    std::fs::create_dir_all(dir).map_err(|e| FileError::new("create dir", dir, e))
}

/// Replaces `path` with `data`, durably (see the module docs), creating the
/// directory if needed; `mode` (e.g. `0o755` for an executable) is set
/// exactly, whatever the umask, else the file gets the usual `0o666 & !umask`.
pub fn write_durable(path: &Path, data: &[u8], mode: Option<u32>) -> Result<(), FileError> {
    let dir = parent(path);
    create_dir(dir)?;
    let tmp = unique_temp(path);
    or_remove(&tmp, || {
        let mut f = File::create(&tmp).map_err(|e| FileError::new("create", &tmp, e))?;
        f.write_all(data).map_err(|e| FileError::new("write", &tmp, e))?;
        if let Some(m) = mode {
            f.set_permissions(std::fs::Permissions::from_mode(m))
                .map_err(|e| FileError::new("chmod", &tmp, e))?;
        }
        f.sync_all().map_err(|e| FileError::new("flush", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| FileError::new("rename into", path, e))
    })?;
    flush_dir(dir)
}

/// Replaces `path` with `data` without flushing anything (see the module docs
/// for who may), creating the directory if needed.
pub fn write_unsynced(path: &Path, data: &[u8]) -> Result<(), FileError> {
    create_dir(parent(path))?;
    let tmp = unique_temp(path);
    or_remove(&tmp, || {
        File::create(&tmp)
            .and_then(|mut f| f.write_all(data))
            .map_err(|e| FileError::new("write", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| FileError::new("rename into", path, e))
    })
}

/// A file renamed into place whose data and name may not be on disk yet.
#[derive(Debug)]
#[must_use = "flush it, or say why a power loss may take it"]
pub struct Renamed {
    file: File,
    path: PathBuf,
}

impl Renamed {
    /// `fdatasync` of the file, then `fsync` of its directory (for the rename):
    /// once this returns, a power loss keeps the new file whole.
    pub fn flush(self) -> Result<(), FileError> {
        self.file.sync_data().map_err(|e| FileError::new("flush", &self.path, e))?;
        flush_dir(parent(&self.path))
    }
}

/// Writes `data` to `tmp` (created or truncated; the caller names it, to find
/// what a killed process left) and renames it over `path`; flushes nothing
/// until [`Renamed::flush`]. The directory must exist. System calls: `openat`
/// of `tmp`, `write`, `rename` (and, on failure, `unlink` of `tmp`).
pub fn write_renamed(path: &Path, tmp: &Path, data: &[u8]) -> Result<Renamed, FileError> {
    or_remove(tmp, || {
        let mut f = File::create(tmp).map_err(|e| FileError::new("create", tmp, e))?;
        f.write_all(data).map_err(|e| FileError::new("write", tmp, e))?;
        std::fs::rename(tmp, path).map_err(|e| FileError::new("rename into", path, e))?;
        Ok(Renamed { file: f, path: path.to_path_buf() })
    })
}

/// `fsync` of a directory: the names in it (a rename) are on disk.
fn flush_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| FileError::new("flush", dir, e))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn every_variant_replaces_the_file_whole_and_leaves_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/dir/f.json");
        write_unsynced(&p, b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_durable(&p, b"two", None).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        write_renamed(&p, &d.path().join("sub/dir/.f.json.tmp"), b"three").unwrap().flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        assert_eq!(names(&d.path().join("sub/dir")), ["f.json"]);
    }

    #[test]
    fn a_durable_write_sets_the_mode_exactly() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("plugin");
        write_durable(&p, b"#!/bin/true\n", Some(0o755)).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o755);
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file_and_names_the_target() {
        let d = tempfile::tempdir().unwrap();
        // A directory in the way: rename(file, non-empty dir) fails with EISDIR.
        let p = d.path().join("taken");
        std::fs::create_dir_all(p.join("inside")).unwrap();
        for e in [
            write_unsynced(&p, b"x").unwrap_err(),
            write_durable(&p, b"x", None).unwrap_err(),
            write_renamed(&p, &d.path().join(".taken.tmp"), b"x").unwrap_err(),
        ] {
            assert_eq!((e.op, e.path.as_path()), ("rename into", p.as_path()), "{e}");
            assert_eq!(e.to_string(), format!("cannot rename into {}", p.display()));
        }
        assert_eq!(names(d.path()), ["taken"], "a temp file was left behind");
    }

    #[test]
    fn renamed_is_in_place_before_it_is_flushed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j.json");
        let r = write_renamed(&p, &d.path().join(".j.json.tmp"), b"{}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}", "readable before the flush");
        r.flush().unwrap();
    }

    #[test]
    fn only_the_temp_names_of_that_file_are_its_temp_files() {
        let t = temp_name("net-c1_net1");
        assert!(is_temp_of(&t, "net-c1_net1"), "{t}");
        assert!(is_temp_of(".f.json.12.0.tmp", "f.json"));
        for other in [
            "f.json",
            ".f.json.tmp",
            ".f.json.12.tmp",
            ".f.json.12.x.tmp",
            ".f.json.12.0.tmp.x",
            ".f.jsonx.12.0.tmp",
            ".g.json.12.0.tmp",
            "f.json.12.0.tmp",
        ] {
            assert!(!is_temp_of(other, "f.json"), "{other}");
        }
    }

    #[test]
    fn concurrent_writers_of_one_path_use_their_own_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("dev.json");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_unsynced(p, &[i; 64]).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(&p).unwrap();
        assert!(got.len() == 64 && got.iter().all(|b| *b == got[0]), "torn: {got:?}");
        assert_eq!(names(d.path()), ["dev.json"]);
    }
}
