//! Node-wide locks: `<node dir>/locks/<name>.lock` ([`crate::conf::NODE_DIR_ENV`]),
//! shared by every network on the node, so that two networks' state dirs
//! cannot both hand out one VF (`vf-<pci>`) or set one PF's VF attributes at
//! once (`pf-<pci>`). A VF's lock file also remembers the DELs that found no
//! journal, for the ADDs they overtook (below).
//!
//! # A DEL that overtakes its ADD
//!
//! The ADDs and DELs of a VF run one at a time under its lock
//! (`locks/vf-<pci>.lock`, node-wide, so two networks' state dirs cannot
//! both hand out one VF). A DEL may still come while its own ADD runs: under
//! Multus the runtime's timeout kills Multus, not us, and the runtime's DEL
//! then runs beside our orphaned ADD. Two orders:
//!
//! - the ADD holds the VF lock: the DEL waits for it, then reads the journal
//!   (always after taking the lock, never only before) and undoes it all;
//! - the DEL takes the lock before the ADD: it finds no journal, and leaves
//!   a record of itself in the VF's lock file ([`Lock::note_del`]: the
//!   attachment, and when, on `CLOCK_MONOTONIC` with the boot ID). The ADD,
//!   once it holds the lock, refuses to go on if a DEL of its attachment ran
//!   after the ADD began ([`Lock::del_after`], code 3): nothing is attached to
//!   a sandbox the runtime has torn down. "Began" is the process's fork, as
//!   near as `/proc/self/schedstat` tells ([`crate::clock::process_began`]),
//!   so a DEL that ran while the ADD was still starting counts too, and an
//!   ADD the runtime sends after the DEL returned (podman's `network connect`
//!   after a `disconnect`, the same IDs) is never refused.
//!
//! A record lives [`DEL_MEMORY`] (each DEL drops older ones); an ADD that
//! reaches the lock later than that after it began is refused for the same
//! reason, its record may be gone. Nothing else is left behind: the lock
//! files were there already, no marker file appears. A DEL that cannot tell
//! the VF (no journal, `deviceID` or `prevResult`) takes no lock and leaves
//! no record.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::clock::monotonic_ns;
use crate::error::{Error, Result};
use crate::private_dir;

/// Creates the node dir with its `locks/` (0700) if needed.
pub fn ensure_node_dir(node_dir: &Path) -> Result<()> {
    private_dir::ensure(&node_dir.join("locks"))
}

/// An exclusive `flock(2)`, released when the last descriptor of its open
/// file is closed: on drop, unless a child inherited it ([`Lock::raw_fd`]).
#[derive(Debug)]
pub struct Lock {
    file: File,
    path: PathBuf,
}

impl Lock {
    /// Takes `<node dir>/locks/<name>.lock`, waiting at most `wait`;
    /// times out as [`Error::Busy`] (code 11).
    pub fn take(node_dir: &Path, name: &str, what: &str, wait: Duration) -> Result<Self> {
        let p = node_dir.join("locks").join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| Error::io(&p, e))?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            // `flock(LOCK_EX | LOCK_NB)` on Linux: the lock belongs to the open
            // file, which a child inheriting the descriptor shares ([`Lock::raw_fd`]).
            match file.try_lock() {
                Ok(()) => return Ok(Self { file, path: p }),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(TryLockError::Error(e)) => return Err(Error::io(&p, e)),
            }
            if Instant::now() >= deadline {
                return Err(Error::Busy { what: what.to_string(), ms: wait.as_millis() as u64 });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

impl Lock {
    /// The descriptor, for a child to inherit: a `flock` belongs to the open
    /// file, so the lock then lasts until both have closed it.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    /// The DEL records in the lock file (lines `del <boot ID> <ns> <key>`);
    /// a line that does not parse (a write cut short) is no record.
    fn dels(&self) -> Result<Vec<DelRecord>> {
        let len = self.file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        let mut body = vec![0; len as usize];
        self.file.read_exact_at(&mut body, 0).map_err(|e| Error::io(&self.path, e))?;
        Ok(String::from_utf8_lossy(&body).lines().filter_map(DelRecord::parse).collect())
    }

    /// Remembers that a DEL of the attachment `key`
    /// ([`crate::journal::file_name`]) ran now, without finding its journal
    /// (module doc); drops records older than [`DEL_MEMORY`] or of another
    /// boot. Written in place (the lock is on
    /// this inode; a rename would replace it): the new lines first, then the
    /// length, so a write cut short leaves whole old lines behind at worst.
    pub fn note_del(&self, key: &str) -> Result<()> {
        let (now, boot) = (monotonic_ns(), boot_id());
        let mut body = String::new();
        for r in self.dels()? {
            if r.boot == boot && now.saturating_sub(r.at) < DEL_MEMORY.as_nanos() as u64 && r.key != key {
                body.push_str(&r.line());
            }
        }
        body.push_str(&DelRecord { boot, at: now, key: key.to_string() }.line());
        self.file
            .write_all_at(body.as_bytes(), 0)
            .and_then(|()| self.file.set_len(body.len() as u64))
            .map_err(|e| Error::io(&self.path, e))
    }

    /// How long after `began` (ns of `CLOCK_MONOTONIC`) a DEL of the
    /// attachment `key` ran, if one ran after it in this boot.
    pub fn del_after(&self, key: &str, began: u64) -> Result<Option<Duration>> {
        let later: Vec<DelRecord> =
            self.dels()?.into_iter().filter(|r| r.key == key && r.at > began).collect();
        if later.is_empty() {
            return Ok(None);
        }
        let boot = boot_id();
        Ok(later.iter().filter(|r| r.boot == boot).map(|r| Duration::from_nanos(r.at - began)).max())
    }
}

/// How long a VF's lock file remembers a DEL that found no journal
/// ([`Lock::note_del`]): longer than any runtime waits for an ADD (the
/// kubelet's runtime request timeout is 2 minutes, RunPodSandbox's deadline
/// twice that); an ADD older than this when it reaches the lock is refused.
pub const DEL_MEMORY: Duration = Duration::from_secs(600);

/// One DEL remembered in a lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DelRecord {
    /// `/proc/sys/kernel/random/boot_id` when it ran: the clock restarts at boot.
    boot: String,
    /// When, ns of `CLOCK_MONOTONIC`.
    at: u64,
    /// The attachment's journal file name.
    key: String,
}

impl DelRecord {
    fn parse(line: &str) -> Option<Self> {
        let mut f = line.split(' ');
        let (tag, boot, at, key) = (f.next()?, f.next()?, f.next()?, f.next()?);
        (tag == "del" && f.next().is_none() && !boot.is_empty() && !key.is_empty()).then_some(())?;
        Some(DelRecord { boot: boot.to_string(), at: at.parse().ok()?, key: key.to_string() })
    }

    fn line(&self) -> String {
        format!("del {} {} {}\n", self.boot, self.at, self.key)
    }
}

/// This boot's ID ("" if unreadable: then no record is of this boot).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vf_lock_file_remembers_dels_for_the_adds_that_began_before_them() {
        let d = tempfile::tempdir().unwrap();
        ensure_node_dir(d.path()).unwrap();
        let lock = Lock::take(d.path(), "vf-x", "VF x", Duration::from_secs(1)).unwrap();
        let began = monotonic_ns();
        assert_eq!(lock.del_after("c1:net1.json", began).unwrap(), None);
        lock.note_del("c1:net1.json").unwrap();
        lock.note_del("c2:net1.json").unwrap();
        assert!(lock.del_after("c1:net1.json", began).unwrap().is_some(), "a DEL after the ADD began");
        assert_eq!(lock.del_after("c1:net2.json", began).unwrap(), None, "another attachment");
        assert_eq!(
            lock.del_after("c1:net1.json", monotonic_ns()).unwrap(),
            None,
            "an ADD begun after the DEL"
        );
        // Another boot's records are dropped; a line cut short (a DEL killed
        // while writing) and the tail of a longer old content are no records.
        let path = d.path().join("locks/vf-x.lock");
        let mut body = std::fs::read_to_string(&path).unwrap();
        body.push_str("del 00000000-other-boot 1 c3:net1.json\ndel ");
        std::fs::write(&path, format!("{body}{}", "x".repeat(40))).unwrap();
        assert_eq!(lock.dels().unwrap().len(), 3);
        lock.note_del("c1:net1.json").unwrap();
        let keys: Vec<String> = lock.dels().unwrap().into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["c2:net1.json", "c1:net1.json"], "one record per attachment, this boot's");
        assert!(!std::fs::read_to_string(&path).unwrap().contains('x'), "shortened to the new content");
    }
}
