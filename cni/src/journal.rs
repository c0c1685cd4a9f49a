//! The per-attachment journal (`<stateDir>/<containerID>-<ifname>.json`) and
//! the lock files (`<stateDir>/locks/`).
//!
//! The journal is written before each mutating step of ADD, so that a DEL
//! after a crash at any point knows what may have been done and how to undo
//! it. DEL removes it only once everything is undone.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nic::PciAddr;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::txn::Step;

/// The link's host-side state before ADD, to restore on DEL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Original {
    /// Host name of the VF netdev.
    pub name: String,
    /// Its MAC.
    pub mac: Option<String>,
    /// Its MTU.
    pub mtu: Option<u32>,
    /// Whether it was up.
    pub up: bool,
}

/// PF-side VF settings as they were (only the fields ADD changed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfUndo {
    /// PF netdev name.
    pub pf_netdev: String,
    /// VF index.
    pub vf: u32,
    /// MAC.
    pub mac: Option<String>,
    /// `(id, qos, 802.1ad)`.
    pub vlan: Option<(u16, u8, bool)>,
    /// Spoof check.
    pub spoofchk: Option<bool>,
    /// Trust.
    pub trust: Option<bool>,
    /// `(min, max)` Mb/s.
    pub rate: Option<(u32, u32)>,
    /// `auto|enable|disable`.
    pub link_state: Option<String>,
}

/// One attachment's journal.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
    /// The VF.
    pub pci: Option<PciAddr>,
    /// Host-side link state before ADD.
    pub original: Original,
    /// PF-side values to restore.
    pub vf_undo: Option<VfUndo>,
    /// RDMA devices moved into the pod.
    pub rdma: Vec<String>,
    /// MAC set in the pod.
    pub mac: Option<String>,
    /// MTU set in the pod.
    pub mtu: Option<u32>,
    /// The IPAM config (stdin JSON with the negotiated version) for DEL/GC.
    pub ipam_conf: Option<serde_json::Value>,
    /// IPAM plugin type.
    pub ipam_type: Option<String>,
    /// Device-info file written.
    pub device_info_file: Option<PathBuf>,
    /// Steps started, in order (the last may not have finished).
    pub steps: Vec<Step>,
    /// Whether ADD finished.
    pub complete: bool,
    /// The result returned by ADD.
    pub result: Option<serde_json::Value>,
}

/// Path of an attachment's journal.
pub fn path(state_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    state_dir.join(format!("{container_id}-{ifname}.json"))
}

impl Journal {
    /// Reads a journal; `None` if absent.
    pub fn load(p: &Path) -> Result<Option<Self>> {
        match std::fs::read(p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::io(p, std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p, e)),
        }
    }

    /// Writes atomically: temp file, rename. No fsync, on purpose: the journal
    /// describes kernel state (netns membership, names, RDMA placement) that a
    /// power loss resets anyway, while a crash of this process leaves the page
    /// cache intact; an fsync per step cost ~10 ms each on a virtual disk.
    pub fn save(&self, p: &Path) -> Result<()> {
        let dir = p.parent().unwrap_or(Path::new("/"));
        let tmp = dir.join(format!(".{}.tmp", p.file_name().and_then(|n| n.to_str()).unwrap_or("journal")));
        let body = serde_json::to_vec(self).map_err(|e| Error::io(p, std::io::Error::other(e)))?;
        let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(&body).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, p).map_err(|e| Error::io(p, e))
    }
}

/// Removes a file, ignoring "not found".
pub fn remove(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(p, e)),
    }
}

/// Creates the state dir (0700) if needed.
pub fn ensure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join("locks"))
        .map_err(|e| Error::io(dir, e))
}

/// An exclusive `flock(2)`, released on drop.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

impl Lock {
    /// Takes `<stateDir>/locks/<name>.lock`, waiting at most `wait`;
    /// times out as [`Error::Busy`] (code 11).
    pub fn take(state_dir: &Path, name: &str, what: &str, wait: Duration) -> Result<Self> {
        let p = state_dir.join("locks").join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| Error::io(&p, e))?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            // SAFETY: flock on a descriptor we own.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                return Ok(Self { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) && e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::io(&p, e));
            }
            if Instant::now() >= deadline {
                return Err(Error::Busy { what: what.to_string(), ms: wait.as_millis() as u64 });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}
