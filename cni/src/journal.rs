//! Per-attachment journals (`<stateDir>/attachments/`). The node-wide state
//! every network shares is beside them: locks in `lock`, records of VFs given
//! out in userspace mode in `vf_record`.
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
//! succeed, removes it ([`remove_leftovers`]). An ADD writes its journal,
//! and a DEL reads it, only under the VF's lock (`lock`, which says what
//! happens when a DEL overtakes its ADD).
//!
//! The previous release wrote `<containerID>-<ifname>.json` (ambiguous: `X` +
//! `x-net1` and `X-x` + `net1` share a name) holding the whole stdin. DEL and
//! GC still read those ([`Legacy`]), checking the IDs inside, and undo them
//! like ours; their network is the `name` their saved IPAM config carries.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nic::PciAddr;
use plumbing::atomic_file::{self, FileError};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::private_dir;
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
    private_dir::ensure(&dir(state_dir))
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
