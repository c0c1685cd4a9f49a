//! What DRA mode prepared for pods, and what the CNI then configured: the one
//! format shared by `kube-rdma-device-plugin dra` and `kube-rdma-cni`.
//!
//! ```text
//! <dir>/<claim uid>.json                    PreparedClaim: written by the DRA plugin at
//!                                           NodePrepareResources, removed at NodeUnprepareResources
//!                                           (it is also the plugin's checkpoint)
//! <dir>/<claim uid>_<device>.attach.json    Attachment: written by the CNI after ADD moved the
//!                                           device into a pod, removed at DEL; the plugin
//!                                           publishes it as the claim's network data
//! ```
//!
//! One writer per file, every write atomic (temp file + `rename`), so readers
//! never see half a file and two processes never write the same file. The CNI
//! finds the VF of a pod with [`select`]: by the pod UID (`K8S_POD_UID`), and
//! optionally the claim and request named in its network config. The lookup
//! is a pure function over what [`list`] read, so an NRI hook can call the same
//! code later.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PciAddr;
use plumbing::atomic_file::{write_unsynced, FileError};

/// Format version written in every file; readers refuse others.
pub const VERSION: u32 = 1;

/// Where the DRA plugin keeps these files on a node (next to its socket in the
/// kubelet's plugins dir, so they survive plugin restarts and are on the host
/// for the CNI).
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/plugins/rdma.kuberdma.io/prepared";

const CLAIM_SUFFIX: &str = ".json";
/// File name suffix of attachments (what a directory watcher looks for).
pub const ATTACH_SUFFIX: &str = ".attach.json";

/// A ResourceClaim prepared on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedClaim {
    pub version: u32,
    /// `metadata.uid` of the claim.
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The pod's name for the claim (`pod.spec.resourceClaims[].name`), from the
    /// `resource.kubernetes.io/pod-claim-name` annotation of claims made from a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_claim_name: Option<String>,
    /// UIDs of the pods the claim is reserved for (`status.reservedFor`).
    pub pods: Vec<String>,
    /// Devices of this driver in the claim's allocation, in allocation order.
    pub devices: Vec<PreparedDevice>,
}

/// One prepared device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedDevice {
    /// The claim's request it serves (`req` or, with subrequests, `req/sub`).
    pub request: String,
    /// ResourceSlice pool (the node name).
    pub pool: String,
    /// Device name in the ResourceSlice (`pci-0000-3d-00-2`).
    pub device: String,
    /// The VF's PCI address.
    pub pci: PciAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pf: Option<PciAddr>,
    /// The VF netdev's host name when prepared (informational: the CNI finds
    /// the netdev by PCI address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// RDMA devices of the VF.
    #[serde(default)]
    pub rdma_devices: Vec<String>,
    /// State of port 1 of the VF's first RDMA device when prepared (`ACTIVE`,
    /// `DOWN`, …): what the plugin publishes for the device while the host
    /// cannot see it (in a pod), after a restart too. Files written before it
    /// was recorded have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_state: Option<String>,
    /// CDI device IDs handed to the kubelet.
    #[serde(default)]
    pub cdi_ids: Vec<String>,
    /// The request's effective driver config, kept so the CDI spec can be
    /// written again (e.g. after a reboot emptied `/var/run/cdi`).
    #[serde(default)]
    pub config: DeviceConfig,
}

/// A request's effective driver config (see the device plugin's `claimconfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceConfig {
    /// Extra environment variables for the containers.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Hand out `umadN`/`issmN` too.
    #[serde(default = "yes")]
    pub umad: bool,
    /// Hand out `/dev/infiniband/rdma_cm`.
    #[serde(default = "yes")]
    pub rdma_cm: bool,
}

fn yes() -> bool {
    true
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self { env: BTreeMap::new(), umad: true, rdma_cm: true }
    }
}

/// What the CNI configured for one prepared device in a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attachment {
    pub version: u32,
    pub claim_uid: String,
    /// The device (as in [`PreparedDevice::device`]).
    pub device: String,
    /// The pod (`K8S_POD_UID`).
    pub pod_uid: String,
    /// The sandbox (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The interface name in the pod (`CNI_IFNAME`).
    pub ifname: String,
    /// Its MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Its addresses in CIDR notation (`192.0.2.5/24`), from the IPAM result.
    #[serde(default)]
    pub ips: Vec<String>,
}

/// Why a file of this format could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PreparedError {
    /// I/O on a file or the directory.
    #[error(transparent)]
    File(#[from] FileError),
    /// A file that is not this format (or another version).
    #[error("{path}: not a kube-rdma prepared-claim file: {why}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A claim UID or device name that cannot be part of a file name.
    #[error("{what} {value:?} cannot name a file (allowed: ASCII letters, digits and '-', 1-64 characters)")]
    BadName {
        /// `claim UID` or `device name`.
        what: &'static str,
        /// The value (truncated).
        value: String,
    },
}

/// A claim UID or device name is used in file names: letters, digits and `-`
/// only (UUIDs and DNS labels both fit), so nothing can escape `dir` and the
/// `_` between the two is unambiguous.
fn check_name(what: &'static str, value: &str) -> Result<(), PreparedError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(PreparedError::BadName { what, value: value.chars().take(64).collect() })
    }
}

/// `<dir>/<uid>.json`.
pub fn claim_path(dir: &Path, uid: &str) -> Result<PathBuf, PreparedError> {
    check_name("claim UID", uid)?;
    Ok(dir.join(format!("{uid}{CLAIM_SUFFIX}")))
}

/// `<dir>/<uid>_<device>.attach.json`.
pub fn attachment_path(dir: &Path, uid: &str, device: &str) -> Result<PathBuf, PreparedError> {
    check_name("claim UID", uid)?;
    check_name("device name", device)?;
    Ok(dir.join(format!("{uid}_{device}{ATTACH_SUFFIX}")))
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PreparedError + 'a {
    move |source| PreparedError::File(FileError { op, path: path.to_path_buf(), source })
}

/// Writes (or replaces) the file of `claim`; returns its path.
pub fn write_claim(dir: &Path, claim: &PreparedClaim) -> Result<PathBuf, PreparedError> {
    let path = claim_path(dir, &claim.uid)?;
    for d in &claim.devices {
        check_name("device name", &d.device)?;
    }
    write_unsynced(&path, &serde_json::to_vec_pretty(claim).unwrap_or_default())?;
    Ok(path)
}

fn parse<T: serde::de::DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    version: impl Fn(&T) -> u32,
) -> Result<T, PreparedError> {
    let v: T = serde_json::from_slice(bytes)
        .map_err(|e| PreparedError::Format { path: path.to_path_buf(), why: e.to_string() })?;
    if version(&v) != VERSION {
        return Err(PreparedError::Format {
            path: path.to_path_buf(),
            why: format!("version {} (this build reads {VERSION})", version(&v)),
        });
    }
    Ok(v)
}

fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, PreparedError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", path)(e)),
    }
}

/// The prepared claim `uid`, if any.
pub fn read_claim(dir: &Path, uid: &str) -> Result<Option<PreparedClaim>, PreparedError> {
    let path = claim_path(dir, uid)?;
    read_opt(&path)?.map(|b| parse(&path, &b, |c: &PreparedClaim| c.version)).transpose()
}

fn remove_file(path: &Path) -> Result<(), PreparedError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", path)(e)),
    }
}

/// Removes the claim `uid` and every attachment of it; already gone is fine.
pub fn remove_claim(dir: &Path, uid: &str) -> Result<(), PreparedError> {
    let path = claim_path(dir, uid)?;
    let prefix = format!("{uid}_");
    for name in file_names(dir)? {
        if name.starts_with(&prefix) && name.ends_with(ATTACH_SUFFIX) {
            remove_file(&dir.join(&name))?;
        }
    }
    remove_file(&path)
}

/// Writes (or replaces) an attachment; returns its path.
pub fn write_attachment(dir: &Path, a: &Attachment) -> Result<PathBuf, PreparedError> {
    let path = attachment_path(dir, &a.claim_uid, &a.device)?;
    write_unsynced(&path, &serde_json::to_vec_pretty(a).unwrap_or_default())?;
    Ok(path)
}

/// Removes an attachment; already gone is fine.
pub fn remove_attachment(dir: &Path, uid: &str, device: &str) -> Result<(), PreparedError> {
    remove_file(&attachment_path(dir, uid, device)?)
}

fn file_names(dir: &Path) -> Result<Vec<String>, PreparedError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io("list", dir)(e)),
    };
    let mut names: Vec<String> = rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    Ok(names)
}

/// Everything in `dir`.
#[derive(Debug, Default)]
pub struct Listing {
    /// Prepared claims, by file name order.
    pub claims: Vec<PreparedClaim>,
    /// Attachments, by file name order.
    pub attachments: Vec<Attachment>,
    /// Files that could not be read or parsed: one bad file never hides the others.
    pub errors: Vec<PreparedError>,
}

/// Reads every claim and attachment in `dir` (a missing dir is empty).
/// Temp files of an interrupted write (`.<name>.tmp…`) are not ours to read.
pub fn list(dir: &Path) -> Result<Listing, PreparedError> {
    read_dir(dir, true)
}

/// Reads only the attachments in `dir` (`claims` stays empty): what changes
/// when the CNI runs, without parsing every prepared claim of the node.
pub fn list_attachments(dir: &Path) -> Result<Listing, PreparedError> {
    read_dir(dir, false)
}

fn read_dir(dir: &Path, claims: bool) -> Result<Listing, PreparedError> {
    let mut out = Listing::default();
    for name in file_names(dir)? {
        let attachment = name.ends_with(ATTACH_SUFFIX);
        if name.starts_with('.') || !(claims || attachment) {
            continue;
        }
        let path = dir.join(&name);
        let bytes = match read_opt(&path) {
            Ok(Some(b)) => b,
            Ok(None) => continue, // removed while we looked
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        if attachment {
            match parse(&path, &bytes, |a: &Attachment| a.version) {
                Ok(a) => out.attachments.push(a),
                Err(e) => out.errors.push(e),
            }
        } else if name.ends_with(CLAIM_SUFFIX) {
            match parse(&path, &bytes, |c: &PreparedClaim| c.version) {
                Ok(c) => out.claims.push(c),
                Err(e) => out.errors.push(e),
            }
        }
    }
    Ok(out)
}

/// What the CNI asks for.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// `K8S_POD_UID`.
    pub pod_uid: &'a str,
    /// The claim, by the pod's name for it or the ResourceClaim's name; `None`: any.
    pub claim: Option<&'a str>,
    /// The request (`req` also matches its subrequests `req/x`); `None`: any.
    pub request: Option<&'a str>,
    /// `CNI_CONTAINERID`.
    pub container_id: &'a str,
    /// `CNI_IFNAME`.
    pub ifname: &'a str,
}

/// Why no device was selected. Messages name the pod and what was looked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No prepared claim is reserved for the pod.
    #[error("no ResourceClaim of driver rdma.kuberdma.io is prepared for pod {pod_uid} (is the claim allocated and the pod scheduled here?)")]
    NoClaim { pod_uid: String },
    /// Claims exist, but none matches the claim/request of the config.
    #[error("pod {pod_uid} has no prepared device for claim {claim} request {request}; prepared: {}", prepared.join(", "))]
    NoMatch {
        pod_uid: String,
        /// The claim asked for (`*` for any).
        claim: String,
        /// The request asked for (`*` for any).
        request: String,
        /// `claim/request: device` of what the pod has.
        prepared: Vec<String>,
    },
    /// Every matching device is already attached to another interface.
    #[error("every device of pod {pod_uid} matching claim {claim} request {request} is already attached: {}", attached.join(", "))]
    AllAttached {
        pod_uid: String,
        /// The claim asked for.
        claim: String,
        /// The request asked for.
        request: String,
        /// `device (ifname)` entries.
        attached: Vec<String>,
    },
}

fn request_matches(want: &str, have: &str) -> bool {
    have == want || have.split_once('/').is_some_and(|(parent, _)| parent == want)
}

/// The device for one CNI ADD: among the devices prepared for `w.pod_uid`
/// (and the claim/request asked for), the one already attached to this
/// sandbox and interface (a repeated ADD), else the first one no other
/// interface of the pod holds, in claim and allocation order — so a request
/// for two VFs attached as `net1` and `net2` gives each its own VF.
pub fn select<'c>(
    claims: &'c [PreparedClaim],
    attachments: &[Attachment],
    w: &Wanted,
) -> Result<(&'c PreparedClaim, &'c PreparedDevice), SelectError> {
    let star = |o: Option<&str>| o.unwrap_or("*").to_string();
    let mine: Vec<&PreparedClaim> = claims.iter().filter(|c| c.pods.iter().any(|p| p == w.pod_uid)).collect();
    if mine.is_empty() {
        return Err(SelectError::NoClaim { pod_uid: w.pod_uid.into() });
    }
    let cands: Vec<(&PreparedClaim, &PreparedDevice)> = mine
        .iter()
        .filter(|c| w.claim.is_none_or(|n| c.name == n || c.pod_claim_name.as_deref() == Some(n)))
        .flat_map(|c| c.devices.iter().map(move |d| (*c, d)))
        .filter(|(_, d)| w.request.is_none_or(|r| request_matches(r, &d.request)))
        .collect();
    if cands.is_empty() {
        let prepared = mine
            .iter()
            .flat_map(|c| {
                let name = c.pod_claim_name.clone().unwrap_or_else(|| c.name.clone());
                c.devices.iter().map(move |d| format!("{name}/{}: {}", d.request, d.device))
            })
            .collect();
        return Err(SelectError::NoMatch {
            pod_uid: w.pod_uid.into(),
            claim: star(w.claim),
            request: star(w.request),
            prepared,
        });
    }
    let of = |c: &PreparedClaim, d: &PreparedDevice| {
        attachments.iter().find(|a| a.claim_uid == c.uid && a.device == d.device && a.pod_uid == w.pod_uid)
    };
    if let Some(hit) = cands
        .iter()
        .find(|(c, d)| of(c, d).is_some_and(|a| a.container_id == w.container_id && a.ifname == w.ifname))
    {
        return Ok(*hit);
    }
    if let Some(free) = cands.iter().find(|(c, d)| of(c, d).is_none()) {
        return Ok(*free);
    }
    let attached: BTreeSet<String> =
        cands.iter().filter_map(|(c, d)| of(c, d).map(|a| format!("{} ({})", d.device, a.ifname))).collect();
    Err(SelectError::AllAttached {
        pod_uid: w.pod_uid.into(),
        claim: star(w.claim),
        request: star(w.request),
        attached: attached.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(request: &str, device: &str, pci: &str) -> PreparedDevice {
        PreparedDevice {
            request: request.into(),
            pool: "node-a".into(),
            device: device.into(),
            pci: pci.parse().unwrap(),
            pf: Some("0000:3d:00.0".parse().unwrap()),
            netdev: Some("ens1f0v0".into()),
            rdma_devices: vec!["mlx5_2".into()],
            port_state: Some("ACTIVE".into()),
            cdi_ids: vec![format!("kuberdma.io/claim=u1-{device}")],
            config: DeviceConfig::default(),
        }
    }

    fn claim(
        uid: &str,
        name: &str,
        pod_claim: Option<&str>,
        pods: &[&str],
        devices: Vec<PreparedDevice>,
    ) -> PreparedClaim {
        PreparedClaim {
            version: VERSION,
            uid: uid.into(),
            namespace: "ns".into(),
            name: name.into(),
            pod_claim_name: pod_claim.map(Into::into),
            pods: pods.iter().map(|p| p.to_string()).collect(),
            devices,
        }
    }

    fn want<'a>(
        pod: &'a str,
        claim: Option<&'a str>,
        request: Option<&'a str>,
        ifname: &'a str,
    ) -> Wanted<'a> {
        Wanted { pod_uid: pod, claim, request, container_id: "ctr1", ifname }
    }

    fn attach(c: &str, d: &str, pod: &str, ifname: &str) -> Attachment {
        Attachment {
            version: VERSION,
            claim_uid: c.into(),
            device: d.into(),
            pod_uid: pod.into(),
            container_id: "ctr1".into(),
            ifname: ifname.into(),
            mac: None,
            ips: vec![],
        }
    }

    #[test]
    fn files_round_trip_and_removal_takes_attachments_along() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("prepared");
        let c = claim(
            "u1",
            "pod-rdma-x7",
            Some("rdma"),
            &["p1"],
            vec![dev("vf", "pci-0000-3d-00-2", "0000:3d:00.2")],
        );
        write_claim(&dir, &c).unwrap();
        assert_eq!(read_claim(&dir, "u1").unwrap(), Some(c.clone()));
        write_attachment(&dir, &attach("u1", "pci-0000-3d-00-2", "p1", "net1")).unwrap();
        std::fs::write(dir.join("bad.json"), b"{").unwrap();
        let l = list(&dir).unwrap();
        assert_eq!(l.claims, vec![c]);
        assert_eq!(l.attachments.len(), 1);
        assert_eq!(l.errors.len(), 1, "one bad file is reported, the others read");
        assert!(l.errors[0].to_string().contains("bad.json"), "{}", l.errors[0]);
        remove_claim(&dir, "u1").unwrap();
        let l = list(&dir).unwrap();
        assert!(l.claims.is_empty() && l.attachments.is_empty());
        remove_claim(&dir, "u1").unwrap();
        assert_eq!(read_claim(&dir, "u1").unwrap(), None);
    }

    #[test]
    fn names_that_could_leave_the_directory_are_refused() {
        let t = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/b", "", "a_b", "a.b"] {
            let e = claim_path(t.path(), bad).unwrap_err();
            assert!(e.to_string().contains("claim UID"), "{e}");
        }
        let mut c = claim("u1", "n", None, &["p"], vec![dev("vf", "../../etc", "0000:3d:00.2")]);
        assert!(write_claim(t.path(), &c).is_err());
        c.devices.clear();
        write_claim(t.path(), &c).unwrap();
    }

    /// A file written before `portState` was recorded still loads (a
    /// plugin upgraded while claims are prepared reads its old checkpoint).
    #[test]
    fn a_claim_file_without_the_port_state_still_loads() {
        let t = tempfile::tempdir().unwrap();
        let old = r#"{"version": 1, "uid": "u1", "namespace": "ns", "name": "n", "pods": ["p1"],
            "devices": [{"request": "vf", "pool": "node-a", "device": "pci-0000-3d-00-2",
                         "pci": "0000:3d:00.2", "netdev": "ens1f0v0", "rdmaDevices": ["mlx5_2"],
                         "cdiIds": ["kuberdma.io/claim=pci-0000-3d-00-2_u1"], "config": {}}]}"#;
        std::fs::write(t.path().join("u1.json"), old).unwrap();
        let c = read_claim(t.path(), "u1").unwrap().unwrap();
        assert_eq!(c.devices[0].port_state, None);
        assert_eq!(c.devices[0].rdma_devices, ["mlx5_2"]);
        // Written again, it carries the state once known, under its JSON name.
        let mut c = c;
        c.devices[0].port_state = Some("ACTIVE".into());
        write_claim(t.path(), &c).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(t.path().join("u1.json")).unwrap()).unwrap();
        assert_eq!(v["devices"][0]["portState"], "ACTIVE");
        assert_eq!(read_claim(t.path(), "u1").unwrap(), Some(c));
    }

    #[test]
    fn another_version_is_refused_with_the_file_named() {
        let t = tempfile::tempdir().unwrap();
        let mut v = serde_json::to_value(claim("u1", "n", None, &[], vec![])).unwrap();
        v["version"] = 2.into();
        std::fs::write(t.path().join("u1.json"), v.to_string()).unwrap();
        let e = read_claim(t.path(), "u1").unwrap_err().to_string();
        assert!(e.contains("u1.json") && e.contains("version 2"), "{e}");
    }

    #[test]
    fn select_by_pod_then_claim_and_request() {
        let claims = vec![
            claim(
                "u1",
                "pod-a-gpu-nic-1",
                Some("nic"),
                &["p1"],
                vec![
                    dev("rail0", "pci-0000-3d-00-2", "0000:3d:00.2"),
                    dev("rail1/fast", "pci-0000-af-00-2", "0000:af:00.2"),
                ],
            ),
            claim("u2", "shared", None, &["p1", "p2"], vec![dev("vf", "pci-0000-3d-00-3", "0000:3d:00.3")]),
        ];
        let (c, d) = select(&claims, &[], &want("p1", None, None, "net1")).unwrap();
        assert_eq!((c.uid.as_str(), d.device.as_str()), ("u1", "pci-0000-3d-00-2"));
        let (_, d) = select(&claims, &[], &want("p1", Some("nic"), Some("rail1"), "net1")).unwrap();
        assert_eq!(d.device, "pci-0000-af-00-2", "a request matches its subrequests");
        let (_, d) = select(&claims, &[], &want("p2", Some("shared"), None, "net1")).unwrap();
        assert_eq!(d.device, "pci-0000-3d-00-3");
        let e = select(&claims, &[], &want("p3", None, None, "net1")).unwrap_err();
        assert!(matches!(e, SelectError::NoClaim { .. }));
        let e = select(&claims, &[], &want("p1", Some("nic"), Some("rail9"), "net1")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("rail9") && msg.contains("nic/rail0: pci-0000-3d-00-2"), "{msg}");
    }

    #[test]
    fn select_gives_each_interface_its_own_device_and_repeats_are_stable() {
        let claims = vec![claim(
            "u1",
            "c",
            None,
            &["p1"],
            vec![
                dev("vfs", "pci-0000-3d-00-2", "0000:3d:00.2"),
                dev("vfs", "pci-0000-3d-00-3", "0000:3d:00.3"),
            ],
        )];
        let a1 = attach("u1", "pci-0000-3d-00-2", "p1", "net1");
        let (_, d) = select(&claims, std::slice::from_ref(&a1), &want("p1", None, None, "net2")).unwrap();
        assert_eq!(d.device, "pci-0000-3d-00-3");
        let (_, d) = select(&claims, std::slice::from_ref(&a1), &want("p1", None, None, "net1")).unwrap();
        assert_eq!(d.device, "pci-0000-3d-00-2", "a repeated ADD finds its own device");
        let a2 = attach("u1", "pci-0000-3d-00-3", "p1", "net2");
        let e = select(&claims, &[a1, a2], &want("p1", None, None, "net3")).unwrap_err();
        assert!(e.to_string().contains("pci-0000-3d-00-2 (net1)"), "{e}");
    }
}
