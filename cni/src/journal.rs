//! Per-attachment journals (`<stateDir>/attachments/`), and the node-wide
//! state every network shares (`<node dir>/`, [`crate::conf::NODE_DIR_ENV`]):
//! lock files (`locks/`) and the records of VFs given out in userspace mode
//! (`vfs/`, [`crate::step::UserspaceVf`]).
//!
//! A journal lists the [`Step`]s of one ADD, each with what its undo needs,
//! and is written once, before the first step runs: every undo is idempotent
//! and harmless for a step that never ran, so DEL (or GC) after a crash at
//! any point restores the host. DEL removes the journal once everything is
//! undone, and flushes that removal ([`remove`]). Journals record their
//! network, so GC collects per network.
//!
//! File names are unambiguous and short: `<containerID>:<ifname>.json`
//! (`:` is in neither alphabet), or `%<hash of the ID>:<ifname>.json` when
//! that or its temp file `.<name>.tmp` would pass 255 bytes (NAME_MAX; a
//! container ID starts with an alphanumeric, so the two forms never meet).
//! The journal repeats the ID and interface, so even a hash collision is
//! detected, not followed.
//!
//! A journal is written to its temp file and renamed into place, then
//! flushed with its directory before ADD returns ([`save`] says why in that
//! order). A process killed before the rename leaves the temp file; the DEL
//! of that attachment, which the runtime sends after any ADD it did not see
//! succeed, removes it ([`remove_leftovers`]).
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
//!   near as `/proc/self/schedstat` tells ([`process_began`]), so a DEL that
//!   ran while the ADD was still starting counts too, and an ADD the runtime
//!   sends after the DEL returned (podman's `network connect` after a
//!   `disconnect`, the same IDs) is never refused.
//!
//! A record lives [`DEL_MEMORY`] (each DEL drops older ones); an ADD that
//! reaches the lock later than that after it began is refused for the same
//! reason, its record may be gone. Nothing else is left behind: the lock
//! files were there already, no marker file appears. A DEL that cannot tell
//! the VF (no journal, `deviceID` or `prevResult`) takes no lock and leaves
//! no record.
//!
//! The previous release wrote `<containerID>-<ifname>.json` (ambiguous: `X` +
//! `x-net1` and `X-x` + `net1` share a name) holding the whole stdin. DEL and
//! GC still read those ([`Legacy`]), checking the IDs inside, and undo them
//! like ours; their network is the `name` their saved IPAM config carries.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nic::PciAddr;
use plumbing::atomic_file::{self, FileError};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::step::{DeviceInfoFile, IpamLease, LinkState, NetdevMove, PfAttrs, RdmaMove, Step, VfAttrs};

/// The journal format we write.
pub const VERSION: u32 = 2;

/// One attachment's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// Network name (`None` only for a migrated journal that did not say).
    pub network: Option<String>,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
    /// The VF.
    pub pci: Option<PciAddr>,
    /// The steps ADD planned, in order; any of them may have run.
    pub steps: Vec<Step>,
    /// The IPAM plugin's refusal of the release at an earlier DEL
    /// (`cmd::del`): a DEL refused the same way again gives up on the lease
    /// and keeps the journal, with only its IPAM step, as the record of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_refused: Option<String>,
}

impl Journal {
    /// Whether this journal is the attachment `(container_id, ifname)`.
    pub fn is(&self, container_id: &str, ifname: &str) -> bool {
        self.container_id == container_id && self.ifname == ifname
    }
}

/// FNV-1a, 128 bits (draft-eastlake-fnv): stable across builds and
/// releases, unlike std's hasher, which journal names must be.
fn fnv1a128(data: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    data.iter().fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

/// The longest file name (`NAME_MAX`, include/uapi/linux/limits.h).
const NAME_MAX: usize = 255;

/// The journal file name of `(container_id, ifname)`.
pub fn file_name(container_id: &str, ifname: &str) -> String {
    let plain = format!("{container_id}:{ifname}.json");
    if temp_name(&plain).len() <= NAME_MAX {
        plain
    } else {
        format!("%{:032x}:{ifname}.json", fnv1a128(container_id.as_bytes()))
    }
}

/// The temp file a journal named `name` is written to before its rename.
fn temp_name(name: &str) -> String {
    format!(".{name}.tmp")
}

/// The attachments directory of a state dir.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("attachments")
}

/// The node-wide record of a VF given out in userspace mode
/// ([`crate::step::UserspaceVf`]): `<node dir>/vfs/<pci>.json`.
pub fn vf_record(node_dir: &Path, pci: PciAddr) -> PathBuf {
    node_dir.join("vfs").join(format!("{pci}.json"))
}

/// A journal found on disk.
#[derive(Debug)]
pub struct Found {
    /// Its file.
    pub path: PathBuf,
    /// Its content (migrated if it was a previous release's).
    pub journal: Journal,
}

/// Reads one journal file of either format.
pub fn read(p: &Path) -> Result<Option<Journal>> {
    let bytes = match std::fs::read(p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(p, e)),
    };
    let corrupt = |e: serde_json::Error| Error::Corrupt { path: p.to_path_buf(), why: e.to_string() };
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(corrupt)?;
    if v.get("version").is_some() {
        serde_json::from_value(v).map(Some).map_err(corrupt)
    } else {
        serde_json::from_value::<Legacy>(v).map(|l| Some(l.migrate())).map_err(corrupt)
    }
}

/// The journal of `(container_id, ifname)`: ours, else the previous
/// release's (only if it really is that attachment's).
pub fn find(state_dir: &Path, container_id: &str, ifname: &str) -> Result<Option<Found>> {
    let d = dir(state_dir);
    let path = d.join(file_name(container_id, ifname));
    if let Some(journal) = read(&path)? {
        if !journal.is(container_id, ifname) {
            return Err(Error::Collision {
                path,
                owner: format!("{}/{}", journal.container_id, journal.ifname),
                wanted: format!("{container_id}/{ifname}"),
            });
        }
        return Ok(Some(Found { path, journal }));
    }
    let legacy = format!("{container_id}-{ifname}.json");
    if legacy.len() > NAME_MAX {
        // Too long a name for the previous release to have written.
        return Ok(None);
    }
    let legacy = d.join(legacy);
    match read(&legacy)? {
        Some(journal) if journal.is(container_id, ifname) => Ok(Some(Found { path: legacy, journal })),
        _ => Ok(None),
    }
}

/// Every journal file in the state dir (for GC): each parsed, or the error
/// that made it unreadable.
pub fn list(state_dir: &Path) -> Result<Vec<(PathBuf, Result<Journal>)>> {
    let d = dir(state_dir);
    let rd = match std::fs::read_dir(&d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&d, e)),
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        match read(&p) {
            Ok(Some(j)) => out.push((p, Ok(j))),
            Ok(None) => {} // removed meanwhile
            Err(err) => out.push((p, Err(err))),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The attachment VF `pci` was given to after the one journaled at `path`:
/// another journal naming the VF and written later (the ADDs of a VF run one
/// at a time under its lock, and each writes its journal once, before its
/// first step). `None`: the VF is still this attachment's, as far as the
/// state dir knows. Reads every journal: DEL and GC ask only when the
/// attachment's pod netns is gone (a node reboot, a sandbox killed without
/// its DEL), the one way another ADD can have had the VF meanwhile.
pub fn later_owner(state_dir: &Path, path: &Path, pci: PciAddr) -> Option<String> {
    let written = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mine = written(path)?;
    list(state_dir).ok()?.into_iter().find_map(|(p, j)| {
        let j = j.ok()?;
        (p != path && j.pci == Some(pci) && written(&p).is_some_and(|t| t > mine))
            .then(|| format!("{}/{}", j.container_id, j.ifname))
    })
}

/// A journal in place under its name, being flushed to disk on its own
/// thread ([`save`]).
#[derive(Debug)]
pub struct Saved {
    flush: std::thread::JoinHandle<Result<()>>,
}

impl Saved {
    /// Waits until the journal and its name are on disk.
    pub fn durable(self) -> Result<()> {
        self.flush
            .join()
            .unwrap_or_else(|_| Err(Error::io("journal flush", std::io::Error::other("panicked"))))
    }
}

/// Writes a journal atomically (temp file, rename) and starts flushing it
/// (`fdatasync` of the file, then `fsync` of its directory, for the rename)
/// on a thread of its own; [`Saved::durable`] waits for that.
///
/// Why the flush follows the rename instead of preceding it: the journal
/// must be in place before the first step runs (a killed process leaves the
/// page cache intact, and DEL reads it there), and flushing first would put
/// both flushes on ADD's path: 7-8 ms median here under load
/// (cni/benches/add_del.rs, `ADD_DEL_EXPLAIN`; 0.24 ms on an idle virtual
/// disk, 10.6 ms at p90). Flushed while the netns move runs (~20 ms), they
/// cost nothing, and ADD returns only once they are done: the journal of
/// every attachment a runtime knows of survives a power loss whole. A power
/// loss during an ADD that has not returned may leave its journal empty; the
/// runtime's DEL then tears down without it (IPAM from its configuration,
/// the VF by `deviceID`) and removes it.
pub fn save(p: &Path, j: &Journal) -> Result<Saved> {
    let dir = p.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(temp_name(p.file_name().and_then(|n| n.to_str()).unwrap_or("journal")));
    let body = serde_json::to_vec(j).map_err(|e| Error::io(p, std::io::Error::other(e)))?;
    let file_error = |e: FileError| Error::io(&e.path, e.source);
    let renamed = atomic_file::write_renamed(p, &tmp, &body).map_err(file_error)?;
    let flush = std::thread::spawn(move || renamed.flush().map_err(file_error));
    Ok(Saved { flush })
}

/// Removes what an interrupted ADD or an earlier build may have left of the
/// attachment `(container_id, ifname)` besides its journal: the temp file of
/// a write killed before its rename, and the `.corrupt` copy earlier builds
/// set an unreadable journal aside as. Called by its DEL (the runtime sends
/// one after every ADD it did not see succeed) under the VF lock, which an
/// ADD of the attachment still running (orphaned, beside its DEL) holds
/// while it writes its journal. Two `unlink`s, `ENOENT` as a rule.
pub fn remove_leftovers(state_dir: &Path, container_id: &str, ifname: &str) {
    let name = file_name(container_id, ifname);
    let d = dir(state_dir);
    for p in [d.join(temp_name(&name)), d.join(format!("{name}.corrupt"))] {
        match std::fs::remove_file(&p) {
            Ok(()) => {
                tracing::info!(file = %p.display(), "removed a leftover of an interrupted ADD or an earlier build");
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %p.display(), error = %e, "cannot remove a leftover file"),
        }
    }
}

/// Files of the attachments directory no DEL will come for (GC): `.corrupt`
/// copies earlier builds made (their DEL had torn down without them) and
/// temp files older than `stale` (an ADD renames its own within
/// milliseconds). Returns those it removed.
pub fn sweep(state_dir: &Path, stale: Duration) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir(state_dir)) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let old = || {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|a| a > stale)
        };
        let garbage = name.ends_with(".json.corrupt")
            || (name.starts_with('.') && name.ends_with(".json.tmp") && old());
        if garbage && std::fs::remove_file(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed
}

/// Removes a journal, ignoring "not found", and flushes its directory
/// (`fsync`), so that a power loss cannot bring back the journal of an
/// attachment torn down: its runtime will not send another DEL (Multus drops
/// its cache), and a GC would undo it over whatever has the VF by then.
/// DEL, rollback and GC only; ADD's success path removes nothing.
pub fn remove(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => {
            let d = p.parent().unwrap_or(Path::new("/"));
            File::open(d).and_then(|d| d.sync_all()).map_err(|e| Error::io(d, e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(p, e)),
    }
}

/// Creates the state dir with its `attachments/` (0700) if needed: one
/// `mkdir` when it exists (the usual case).
pub fn ensure_dirs(state_dir: &Path) -> Result<()> {
    ensure_subdirs(state_dir, &["attachments"])
}

/// Creates the node dir with its `locks/` (0700) if needed.
pub fn ensure_node_dir(node_dir: &Path) -> Result<()> {
    ensure_subdirs(node_dir, &["locks"])
}

fn ensure_subdirs(base: &Path, subs: &[&str]) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for sub in subs {
        let d = base.join(sub);
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| Error::io(&d, e))?,
            Err(e) => return Err(Error::io(&d, e)),
        }
    }
    Ok(())
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
            // SAFETY: flock on a descriptor we own.
            let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                return Ok(Self { file, path: p });
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

    /// Remembers that a DEL of the attachment `key` ([`file_name`]) ran now,
    /// without finding its journal (module doc); drops records older than
    /// [`DEL_MEMORY`] or of another boot. Written in place (the lock is on
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

/// `CLOCK_MONOTONIC`, in ns.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// This boot's ID ("" if unreadable: then no record is of this boot).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// When this process began, in ns of `CLOCK_MONOTONIC`: now less the time it
/// has run and waited to run (`/proc/self/schedstat`: `sum_exec_runtime` and
/// `run_delay`, both counted from the fork; Documentation/scheduler/sched-stats.rst),
/// that is its fork plus any time it slept, which before `main` is none to
/// speak of. Never before the fork, so a DEL that returned before the fork
/// never counts as after it. Call it first thing: later it would count the
/// time spent waiting for stdin or a lock. Without schedstat (a kernel
/// without `CONFIG_SCHED_INFO`): now.
pub fn process_began() -> u64 {
    let now = monotonic_ns();
    let spent = std::fs::read_to_string("/proc/self/schedstat").ok().and_then(|s| {
        let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(f.next()??.saturating_add(f.next()??))
    });
    now.saturating_sub(spent.unwrap_or(0))
}

/// The previous release's journal (`<containerID>-<ifname>.json`), as it
/// wrote it: step names, and the state to restore kept beside them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Legacy {
    container_id: String,
    ifname: String,
    #[serde(default)]
    netns: String,
    pci: Option<PciAddr>,
    original: LegacyOriginal,
    vf_undo: Option<LegacyVfUndo>,
    #[serde(default)]
    rdma: Vec<String>,
    mac: Option<String>,
    ipam_conf: Option<serde_json::Value>,
    ipam_type: Option<String>,
    device_info_file: Option<PathBuf>,
    #[serde(default)]
    steps: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct LegacyOriginal {
    name: String,
    mac: Option<String>,
    mtu: Option<u32>,
    up: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case")]
struct LegacyVfUndo {
    pf_netdev: String,
    vf: u32,
    mac: Option<String>,
    vlan: Option<(u16, u8, bool)>,
    spoofchk: Option<bool>,
    trust: Option<bool>,
    rate: Option<(u32, u32)>,
    link_state: Option<String>,
}

impl Legacy {
    /// The same undo, as steps: `pf_attrs`, `ipam`, `move_netdev` (with
    /// `link_config`), `move_rdma`, `device_info`; `addresses` needed none.
    pub fn migrate(self) -> Journal {
        let mut steps = Vec::new();
        let network =
            self.ipam_conf.as_ref().and_then(|c| c.get("name")).and_then(|n| n.as_str()).map(str::to_string);
        for s in &self.steps {
            match s.as_str() {
                "pf_attrs" => {
                    if let Some(u) = &self.vf_undo {
                        steps.push(Step::PfAttrs(PfAttrs::restoring(
                            &u.pf_netdev,
                            u.vf,
                            VfAttrs {
                                mac: u.mac.clone(),
                                vlan: u.vlan,
                                spoofchk: u.spoofchk,
                                trust: u.trust,
                                rate: u.rate,
                                link_state: u.link_state.clone(),
                            },
                        )));
                    }
                }
                "ipam" => {
                    if let (Some(t), Some(c)) = (&self.ipam_type, &self.ipam_conf) {
                        steps.push(Step::Ipam(IpamLease::new(t.clone(), c.clone())));
                    }
                }
                "move_netdev" => steps.push(Step::MoveNetdev(NetdevMove::restoring(
                    &self.original.name,
                    &self.ifname,
                    // What it had in the pod: the MAC set, or the final one.
                    self.mac.clone(),
                    LinkState {
                        // The old DEL restored the MAC only if ADD had set one.
                        mac: self.mac.as_ref().and(self.original.mac.clone()),
                        mtu: self.original.mtu,
                        up: self.original.up,
                    },
                ))),
                "move_rdma" => steps.push(Step::MoveRdma(RdmaMove { devices: self.rdma.clone() })),
                "device_info" => {
                    if let Some(f) = &self.device_info_file {
                        steps.push(Step::DeviceInfo(DeviceInfoFile::removing(f.clone())));
                    }
                }
                _ => {}
            }
        }
        Journal {
            version: VERSION,
            network,
            container_id: self.container_id,
            ifname: self.ifname,
            netns: self.netns,
            pci: self.pci,
            steps,
            ipam_refused: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unambiguous_and_short_for_any_container_id() {
        // The previous release's "X"+"x-net1" and "X-x"+"net1" collided.
        assert_ne!(file_name("X", "x-net1"), file_name("X-x", "net1"));
        assert_eq!(file_name("abc", "net1"), "abc:net1.json");
        let long = "a".repeat(1024);
        let n = file_name(&long, "averyverylongif");
        assert!(n.len() <= 255 && n.starts_with('%'), "{n}");
        assert_ne!(n, file_name(&"a".repeat(1023), "averyverylongif"));
        // Plain while its temp file `.<name>.tmp` fits NAME_MAX; one more byte is hashed.
        let at = "b".repeat(255 - ".:net1.json.tmp".len());
        assert_eq!(temp_name(&file_name(&at, "net1")).len(), 255);
        assert!(file_name(&format!("{at}b"), "net1").starts_with('%'));
        for n in 1..=1024 {
            let name = file_name(&"c".repeat(n), "averyverylongif");
            assert!(temp_name(&name).len() <= NAME_MAX, "{n}: {name}");
        }
    }

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

    #[test]
    fn fnv_matches_the_reference_vector() {
        // draft-eastlake-fnv, FNV-1a 128-bit of the empty string and "a".
        assert_eq!(fnv1a128(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn a_previous_release_journal_migrates_into_the_same_undo() {
        let old = serde_json::json!({
            "containerId": "c1", "ifname": "net1", "netns": "/run/netns/p", "pci": "0000:3b:00.2",
            "original": {"name": "ens1f0v2", "mac": "02:00:00:00:00:01", "mtu": 1500, "up": false},
            "vfUndo": {"pf_netdev": "ens1f0", "vf": 2, "mac": null, "vlan": [0, 0, false], "spoofchk": null,
                       "trust": true, "rate": null, "link_state": null},
            "rdma": ["mlx5_2"], "mac": "02:11:22:33:44:55", "mtu": 9000,
            "ipamConf": {"cniVersion": "1.0.0", "name": "rdma-a", "ipam": {"type": "host-local"}},
            "ipamType": "host-local", "deviceInfoFile": "/run/devinfo.json",
            "steps": ["pf_attrs", "ipam", "move_netdev", "link_config", "move_rdma", "addresses", "device_info"],
            "complete": true, "result": {}
        });
        let j = serde_json::from_value::<Legacy>(old).unwrap().migrate();
        assert_eq!(j.network.as_deref(), Some("rdma-a"));
        assert!(j.is("c1", "net1"));
        let kinds: Vec<&str> = j.steps.iter().map(Step::name).collect();
        assert_eq!(kinds, ["pf_attrs", "ipam", "move_netdev", "move_rdma", "device_info"]);
        match &j.steps[2] {
            Step::MoveNetdev(m) => {
                assert_eq!((m.host_name.as_str(), m.pod_name.as_str()), ("ens1f0v2", "net1"));
                assert_eq!(m.original.mac.as_deref(), Some("02:00:00:00:00:01"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn find_reads_ours_and_the_previous_release_but_only_for_its_owner() {
        let d = tempfile::tempdir().unwrap();
        ensure_dirs(d.path()).unwrap();
        let legacy = serde_json::json!({"containerId": "X", "ifname": "x-net1",
            "original": {"name": "v0", "mac": null, "mtu": 1500, "up": false}, "steps": ["move_netdev"]});
        std::fs::write(dir(d.path()).join("X-x-net1.json"), legacy.to_string()).unwrap();
        assert!(find(d.path(), "X-x", "net1").unwrap().is_none(), "same legacy name, other attachment");
        let f = find(d.path(), "X", "x-net1").unwrap().unwrap();
        assert_eq!(f.journal.steps.len(), 1);
        std::fs::write(dir(d.path()).join(file_name("Y", "net1")), b"{not json").unwrap();
        assert!(matches!(find(d.path(), "Y", "net1"), Err(Error::Corrupt { .. })));
        let all = list(d.path()).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all.iter().filter(|(_, j)| j.is_err()).count(), 1);
    }
}
