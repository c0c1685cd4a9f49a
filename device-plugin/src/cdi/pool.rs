//! Device plugin mode's CDI specs: one per pool, `<cdi-dir>/<prefix>-<pool>.json`,
//! kind [`crate::names::cdi_kind`] (valid under 0.3.0 rules for every pool
//! name), one CDI device per device with container edits, named by its ID.
//!
//! A CDI spec outlives the daemon: the kubelet keeps each container's Allocate
//! answer, CDI names included, in its checkpoint and hands it to the runtime
//! again when the container restarts, without calling Allocate
//! (devicemanager `podDevices.deviceRunContainerOptions`). So the daemon
//! leaves specs in place when it stops or a pool is removed from its config,
//! and drops a device from its spec only once the device is gone from the
//! node ([`crate::pools::OnNode`]). What it wrote is what it starts from
//! ([`read_ours`], [`kept`]): a device it cannot compute edits for any more
//! (a VF in a pod whose RDMA device the host cannot see) keeps its entry,
//! and a spec of a pool no longer configured is adopted and follows the
//! node as well.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nic::PciAddr;
use plumbing::atomic_file::FileError;
use serde::Deserialize;
use serde_json::Value;

use super::{file, put, CdiDevice, Edits};
use crate::allocate::{cdi_named, hands_out_rdma, node_paths};
use crate::names;
use crate::pools::{Device, OnNode, Pool};
use crate::RDMA_CM;

/// `<cdi-dir>/<resource with / as ->.json`.
pub fn cdi_path(dir: &Path, pool: &Pool) -> PathBuf {
    dir.join(format!("{}.json", pool.resource_name().replace('/', "-")))
}

/// The CDI spec of a pool: one CDI device per device that has container
/// edits ([`cdi_named`]: the nodes a container gets for it, plus `rdma_cm`
/// where it gets RDMA devices, and `KUBERDMA_RDMA_DEVICE_<ID>=<rdma device>`).
/// `None` when no device has any: the CDI library refuses a device without
/// edits and a spec without devices (container-device-interface
/// `pkg/cdi/device.go` "invalid device, empty device edits", `pkg/cdi/spec.go`
/// "invalid spec, no devices"), and one refused device takes the whole file
/// down with it.
pub fn cdi_spec(pool: &Pool) -> Option<Value> {
    cdi_spec_of(pool, |_| true)
}

/// [`cdi_spec`] of the devices of `pool` that `keep` keeps.
pub fn cdi_spec_of(pool: &Pool, keep: impl Fn(&Device) -> bool) -> Option<Value> {
    CdiSpec { kind: pool.config.cdi_kind(), devices: cdi_devices(pool, keep) }.to_value()
}

/// The CDI devices of the devices of `pool` that `keep` keeps and that have
/// container edits, by name (the device ID).
pub fn cdi_devices(pool: &Pool, keep: impl Fn(&Device) -> bool) -> BTreeMap<String, CdiDevice> {
    pool.devices
        .iter()
        .filter(|d| keep(d) && cdi_named(pool, d))
        .map(|d| {
            let mut nodes = node_paths(pool, d);
            let env = if hands_out_rdma(pool, d) {
                if pool.rdma_cm {
                    nodes.push(RDMA_CM.into());
                }
                d.rdma
                    .iter()
                    .map(|r| format!("{RDMA_DEVICE_ENV}{}={}", names::env_part(&d.id), r.name))
                    .collect()
            } else {
                vec![]
            };
            (d.id.clone(), CdiDevice { container_edits: Edits::of(nodes, env), name: d.id.clone() })
        })
        .collect()
}

/// Stem of the variable a CDI device sets to its RDMA device
/// (`KUBERDMA_RDMA_DEVICE_0000_3D_00_2=mlx5_3`).
const RDMA_DEVICE_ENV: &str = "KUBERDMA_RDMA_DEVICE_";

/// A pool's CDI spec as written: its kind and its CDI devices by name, each
/// the device's JSON object (`name`, `containerEdits`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiSpec {
    /// `vendor/class` ([`names::cdi_kind`]).
    pub kind: String,
    /// Devices by name.
    pub devices: BTreeMap<String, CdiDevice>,
}

impl CdiSpec {
    /// The spec document ([`CdiSpec::file`] read as JSON); `None` without devices.
    pub fn to_value(&self) -> Option<Value> {
        self.file().map(|f| serde_json::from_slice(&f).unwrap_or_default())
    }

    /// The file's bytes ([`super::file`]); `None`: no file.
    pub fn file(&self) -> Option<Vec<u8>> {
        file(&self.kind, None, self.devices.values().collect())
    }
}

/// The hardware a CDI device of ours stands for, read back from what we
/// wrote: the PCI function its name carries (a VF's address; a shared
/// device's `<function>-<slot>`) and the RDMA devices its
/// `KUBERDMA_RDMA_DEVICE_*` variables name (all a k8s-rdma-shared-dev-plugin
/// ID or a virtual HCA's slot has).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hardware {
    /// The PCI function.
    pub pci: Option<PciAddr>,
    /// RDMA device names.
    pub rdma: Vec<String>,
}

impl Hardware {
    /// Of the CDI device `device`.
    pub fn of(device: &CdiDevice) -> Self {
        let rdma = (device.container_edits.env.iter().flatten())
            .filter_map(|e| e.strip_prefix(RDMA_DEVICE_ENV)?.split_once('='))
            .map(|(_, r)| r.to_string())
            .collect();
        Hardware { pci: Self::function(&device.name), rdma }
    }

    /// The PCI function the CDI device called `name` stands for, if any.
    pub fn function(name: &str) -> Option<PciAddr> {
        name.parse().ok().or_else(|| name.rsplit_once('-').and_then(|(f, _)| f.parse().ok()))
    }

    /// Whether it is still on the node: its PCI function (a VF in a pod
    /// counts: the function stays on the host), or, without one, any of its
    /// RDMA devices. The rule [`OnNode::has`] applies to a pool's devices.
    pub fn on(&self, node: &OnNode) -> bool {
        match self.pci {
            Some(p) => node.has_function(p),
            None => self.rdma.iter().any(|r| node.has_rdma(r)),
        }
    }
}

/// The spec a pool keeps: `fresh`, the devices computed from the node now;
/// and each device of `before` (what is on disk) without a fresh one whose
/// hardware `on_node` still finds, as it was. A VF in a pod whose netdev and
/// RDMA device the host cannot see at all (exclusive RDMA netns mode) has
/// nothing to compute its edits from, yet a restarting container of that pod
/// names its CDI device (the kubelet's checkpoint): the entry written while
/// the host could see it is the one that stays true. `before` of another
/// kind is not ours to keep. Returns the spec and the devices it kept from
/// `before`.
pub fn kept(
    kind: String,
    mut fresh: BTreeMap<String, CdiDevice>,
    before: Option<&CdiSpec>,
    on_node: impl Fn(&Hardware) -> bool,
) -> (CdiSpec, BTreeMap<String, CdiDevice>) {
    let mut carried = BTreeMap::new();
    for (name, dev) in before.filter(|b| b.kind == kind).map(|b| &b.devices).into_iter().flatten() {
        if !fresh.contains_key(name) && on_node(&Hardware::of(dev)) {
            carried.insert(name.clone(), dev.clone());
        }
    }
    fresh.extend(carried.iter().map(|(n, d)| (n.clone(), d.clone())));
    (CdiSpec { kind, devices: fresh }, carried)
}

/// A hash of a spec file's bytes: enough to tell whether it must be written
/// again, for 8 bytes instead of a copy of a spec of a thousand devices.
pub type SpecHash = u64;

/// [`SpecHash`] of `bytes`.
pub fn spec_hash(bytes: &[u8]) -> SpecHash {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// What of a CDI spec file of ours is on disk, as last written or read.
/// Devices computed from the node are not held here (a thousand of them as
/// JSON values would be megabytes): the file has them, and is read back on
/// the rare sync that needs one it can no longer compute.
#[derive(Debug, Default)]
pub enum OnDisk {
    /// No file.
    #[default]
    Absent,
    /// A file written by us, or read back as ours.
    Ours {
        /// Hash of its bytes: whether it must be written again, and whether
        /// it is still what was written when it is read back.
        hash: SpecHash,
        /// Its devices' names.
        names: BTreeSet<String>,
        /// Its devices that were not computed from the node when it was
        /// written but kept from before ([`kept`]), as they are in it: few (VFs
        /// in pods the host cannot see; every device of a spec no pool
        /// computes). A spec with any follows the node on every rescan.
        kept: BTreeMap<String, CdiDevice>,
    },
    /// A file at the path that is not ours as it is (from an older version,
    /// say): written over, or removed, at the next sync.
    Foreign,
}

impl OnDisk {
    /// The devices `names` of a spec read back from a file of `bytes`: each stays until
    /// something computes it. Their entries stay in the file, not here: at a
    /// start nearly every one is computed again, and holding a thousand as
    /// JSON values cost the daemon 14 MiB of RSS (bench `daemon`); the next
    /// sync reads back the few it cannot compute ([`before`]).
    pub fn read(names: BTreeSet<String>, bytes: &[u8]) -> Self {
        OnDisk::Ours { hash: spec_hash(bytes), names, kept: BTreeMap::new() }
    }

    /// Whether it has devices not computed from the node.
    pub fn keeps(&self) -> bool {
        matches!(self, OnDisk::Ours { kept, .. } if !kept.is_empty())
    }
}

/// What a [`sync`] did to the file.
#[derive(Debug)]
pub enum Synced {
    /// Nothing: it was as it should be.
    Unchanged,
    /// Written.
    Written,
    /// Removed: no device is left.
    Removed,
    /// Writing or removing failed; what was there is still there.
    Failed(FileError),
}

/// Brings the CDI spec file at `path`, of kind `kind`, to `fresh` (the
/// devices computed from the node now) and what `last` defined that cannot
/// be computed now while its hardware is on `node` ([`kept`]); no file when
/// no device is left. Returns what is on disk now and what was done.
pub fn sync(
    path: &Path,
    kind: String,
    fresh: BTreeMap<String, CdiDevice>,
    last: OnDisk,
    node: &OnNode,
) -> (OnDisk, Synced) {
    let before = before(path, &kind, &fresh, &last, node);
    let (spec, kept_now) = kept(kind, fresh, before.as_ref(), |h| h.on(node));
    let file = spec.file();
    let hash = file.as_deref().map(spec_hash);
    let now = |hash| OnDisk::Ours { hash, names: spec.devices.keys().cloned().collect(), kept: kept_now };
    match (&last, hash) {
        (OnDisk::Ours { hash: was, .. }, Some(h)) if *was == h => return (now(h), Synced::Unchanged),
        (OnDisk::Absent, None) => return (OnDisk::Absent, Synced::Unchanged),
        _ => {}
    }
    if let Err(e) = put(path, file.as_deref()) {
        return (last, Synced::Failed(e));
    }
    match hash {
        Some(h) => (now(h), Synced::Written),
        None => (OnDisk::Absent, Synced::Removed),
    }
}

/// What of `last` [`kept`] may keep: its kept devices, and, when it defined
/// others that `fresh` lacks while their function may be on the node (a VF
/// whose RDMA device just left the host's view), the whole file read back,
/// if it is still what was written.
fn before(
    path: &Path,
    kind: &str,
    fresh: &BTreeMap<String, CdiDevice>,
    last: &OnDisk,
    node: &OnNode,
) -> Option<CdiSpec> {
    let OnDisk::Ours { hash, names, kept } = last else { return None };
    let kept_only = || Some(CdiSpec { kind: kind.to_string(), devices: kept.clone() });
    let may_stay = |n: &str| {
        !fresh.contains_key(n)
            && !kept.contains_key(n)
            && Hardware::function(n).is_none_or(|p| node.has_function(p))
    };
    if !names.iter().map(String::as_str).any(may_stay) {
        return kept_only();
    }
    match std::fs::read(path) {
        Ok(b) if spec_hash(&b) == *hash => parse_ours(&b, kind).ok().flatten().or_else(kept_only),
        _ => {
            tracing::warn!(path = %path.display(), "the CDI spec is not as it was written: a device whose edits cannot be computed now leaves it");
            kept_only()
        }
    }
}

/// Reads `bytes` as a CDI spec of kind `kind` in the shape this plugin
/// writes (top-level `cdiVersion`, `kind`, `devices` only; each device a
/// valid name and non-empty edits of `deviceNodes` paths under `/dev/` and
/// `KUBERDMA_RDMA_DEVICE_*` variables), so that a spec of anyone else, or
/// one the CDI library would refuse, is never taken for ours. `Ok(None)`: a
/// spec of another kind (someone else's, nothing wrong with it).
pub fn parse_ours(bytes: &[u8], kind: &str) -> Result<Option<CdiSpec>, String> {
    let Some(list) = parse_devices(bytes, kind)? else { return Ok(None) };
    let devices = list.into_iter().map(|d| (d.name.clone(), d)).collect();
    Ok(Some(CdiSpec { kind: kind.to_string(), devices }))
}

/// The names of the devices of `bytes` as [`parse_ours`] reads it, without
/// a JSON value of each: at a start the spec of a thousand devices is read
/// for their names only, and a tree of values would grow the daemon's heap
/// by megabytes for a moment (bench `daemon`, VmRSS after start).
pub fn parse_names(bytes: &[u8], kind: &str) -> Result<Option<BTreeSet<String>>, String> {
    Ok(parse_devices(bytes, kind)?.map(|l| l.into_iter().map(|d| d.name).collect()))
}

/// A spec file's `kind`, the rest skipped unread.
#[derive(Deserialize)]
struct KindOf {
    kind: Option<String>,
}

/// A spec file in the shape we write: any other key is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecIn {
    #[serde(rename = "cdiVersion")]
    _version: Option<serde::de::IgnoredAny>,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    devices: Vec<CdiDevice>,
}

/// The devices of `bytes` if it is a spec of `kind` in our shape ([`parse_ours`]).
fn parse_devices(bytes: &[u8], kind: &str) -> Result<Option<Vec<CdiDevice>>, String> {
    // serde reads a struct from a JSON array too: a spec is an object.
    let object = bytes.trim_ascii_start().first() == Some(&b'{');
    let of: KindOf = match serde_json::from_slice(bytes) {
        Ok(of) if object => of,
        // JSON, but not an object with a string `kind`: no spec of ours.
        Ok(_) => return Ok(None),
        Err(e) if e.is_data() => return Ok(None),
        Err(e) => return Err(format!("not JSON: {e}")),
    };
    if of.kind.as_deref() != Some(kind) {
        return Ok(None);
    }
    let spec: SpecIn = serde_json::from_slice(bytes).map_err(|e| format!("the spec: {e}"))?;
    if spec.devices.is_empty() {
        return Err("no devices".into());
    }
    let mut seen = BTreeSet::new();
    for d in &spec.devices {
        if !names::is_cdi_device(&d.name) {
            return Err(format!("device name {:?}", d.name));
        }
        let at = format!("device {}", d.name);
        let edits = &d.container_edits;
        let nodes = edits.device_nodes.iter().flatten();
        if let Some(n) = nodes.clone().find(|n| !n.path.starts_with("/dev/")) {
            return Err(format!("{at}: device node {:?}", n.path));
        }
        let env = edits.env.iter().flatten();
        if let Some(e) =
            env.clone().find(|e| !e.strip_prefix(RDMA_DEVICE_ENV).is_some_and(|e| e.contains('=')))
        {
            return Err(format!("{at}: variable {e:?}"));
        }
        if nodes.count() + env.count() == 0 {
            return Err(format!("{at}: no edits"));
        }
        if !seen.insert(d.name.as_str()) {
            return Err(format!("{at} defined twice"));
        }
    }
    Ok(Some(spec.devices))
}

/// A CDI spec of ours found in the CDI dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The pool's resource name (`kuberdma.io/rdma_vfs`).
    pub resource: String,
    /// The file.
    pub path: PathBuf,
    /// Its kind (`vendor/class`).
    pub kind: String,
    /// Its devices' names.
    pub names: BTreeSet<String>,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// The CDI specs of ours in `dir`: a file `<prefix>-<name>.json`, for a
/// prefix of `prefixes`, whose content [`parse_ours`] reads with kind
/// [`names::cdi_kind`]`(prefix, name)`. Everything else is left alone (the
/// DRA driver's `kuberdma.io-claim_<uid>.json` among it: its kind is
/// `kuberdma.io/claim`); a file of our name and kind that is not in our
/// shape comes back as a warning, as does a file that cannot be read or is
/// not JSON (the daemon leaves such a file alone unless a configured pool's
/// spec goes there).
pub fn read_ours(dir: &Path, prefixes: &BTreeSet<String>) -> (Vec<Found>, Vec<String>) {
    let (mut found, mut warnings) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (found, warnings),
        Err(e) => return (found, vec![format!("cannot list {}: {e}", dir.display())]),
    };
    let mut files: Vec<String> = entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    files.sort();
    for file in files {
        let Some(stem) = file.strip_suffix(".json").filter(|_| !file.starts_with('.')) else { continue };
        let path = dir.join(&file);
        let named: Vec<(&String, &str)> = prefixes
            .iter()
            .filter_map(|p| stem.strip_prefix(p.as_str())?.strip_prefix('-').map(|n| (p, n)))
            .collect();
        if named.is_empty() {
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                warnings.push(format!("cannot read {}: {e}", path.display()));
                continue;
            }
        };
        let mut why = Vec::new();
        let ours = named.into_iter().find_map(|(prefix, name)| {
            let kind = names::cdi_kind(prefix, name);
            match parse_names(&bytes, &kind) {
                Ok(found) => found.map(|n| (format!("{prefix}/{name}"), kind, n)),
                Err(e) => {
                    why.push(e);
                    None
                }
            }
        });
        match ours {
            Some((resource, kind, names)) => found.push(Found { resource, path, kind, names, bytes }),
            None if why.is_empty() => {}
            None => warnings.push(format!(
                "{}: not read as a CDI spec of this plugin ({})",
                path.display(),
                why.join("; ")
            )),
        }
    }
    (found, warnings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dev(name: &str, edits: Value) -> Value {
        json!({ "name": name, "containerEdits": edits })
    }

    fn uverbs(n: u32) -> Value {
        json!({ "deviceNodes": [{ "path": format!("/dev/infiniband/uverbs{n}") }] })
    }

    /// [`dev`] as the typed device.
    fn device(name: &str, edits: Value) -> CdiDevice {
        serde_json::from_value(dev(name, edits)).unwrap()
    }

    #[test]
    fn the_hardware_of_a_cdi_device_comes_from_its_name_and_variables() {
        let pci = |s: &str| Some(s.parse::<PciAddr>().unwrap());
        let h = Hardware::of(&device("0000:3d:00.2", uverbs(3)));
        assert_eq!(h, Hardware { pci: pci("0000:3d:00.2"), rdma: vec![] });
        let shared =
            device("0000:3d:00.0-0002", json!({"env": ["KUBERDMA_RDMA_DEVICE_0000_3D_00_0_0002=mlx5_0"]}));
        let h = Hardware::of(&shared);
        assert_eq!(h, Hardware { pci: pci("0000:3d:00.0"), rdma: vec!["mlx5_0".into()] });
        let rxe = device("rxe0-0001", json!({"env": ["KUBERDMA_RDMA_DEVICE_RXE0_0001=rxe0"]}));
        assert_eq!(Hardware::of(&rxe), Hardware { pci: None, rdma: vec!["rxe0".into()] });
        let rsdp =
            device("1", json!({"env": ["KUBERDMA_RDMA_DEVICE_1=mlx5_0", "KUBERDMA_RDMA_DEVICE_1=mlx5_1"]}));
        assert_eq!(Hardware::of(&rsdp).rdma, ["mlx5_0", "mlx5_1"]);
    }

    #[test]
    fn a_spec_keeps_what_cannot_be_computed_while_its_hardware_is_there() {
        let kind = "kuberdma.io/rdma_vfs".to_string();
        let before = CdiSpec {
            kind: kind.clone(),
            devices: [("0000:3d:00.1", 1), ("0000:3d:00.2", 2), ("0000:3d:00.3", 3)]
                .into_iter()
                .map(|(n, u)| (n.to_string(), device(n, uverbs(u))))
                .collect(),
        };
        // 00.1 computed anew (its uverbs number changed), 00.2 in a pod with no trace, 00.3 gone.
        let fresh: BTreeMap<String, CdiDevice> =
            [("0000:3d:00.1".to_string(), device("0000:3d:00.1", uverbs(7)))].into_iter().collect();
        let gone: PciAddr = "0000:3d:00.3".parse().unwrap();
        let (spec, carried) = kept(kind.clone(), fresh.clone(), Some(&before), |h| h.pci != Some(gone));
        assert_eq!(carried.keys().collect::<Vec<_>>(), ["0000:3d:00.2"]);
        assert_eq!(spec.devices.keys().collect::<Vec<_>>(), ["0000:3d:00.1", "0000:3d:00.2"]);
        assert_eq!(spec.devices["0000:3d:00.1"], device("0000:3d:00.1", uverbs(7)), "what is computed wins");
        assert_eq!(spec.devices["0000:3d:00.2"], before.devices["0000:3d:00.2"]);
        // Another kind's devices are not ours to keep.
        let other = CdiSpec { kind: "kuberdma.io/other".into(), ..before.clone() };
        assert!(kept(kind.clone(), fresh, Some(&other), |_| true).1.is_empty());
        // Nothing left: no file.
        let (spec, _) = kept(kind, BTreeMap::new(), Some(&before), |_| false);
        assert_eq!((spec.to_value(), spec.file()), (None, None));
    }

    /// The file is read back only when a device it has cannot be computed,
    /// and only if it is still what was written.
    #[test]
    fn sync_keeps_a_device_it_can_no_longer_compute_from_the_file_it_wrote() {
        let node = nic::sim::Sim::from_file(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes/cx6dx-dual.yaml"),
        )
        .unwrap();
        let inv = nic::discover(&node.roots());
        let on_node = OnNode::new(&inv);
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("kuberdma.io-rdma_vfs.json");
        let kind = "kuberdma.io/rdma_vfs".to_string();
        let both: BTreeMap<String, CdiDevice> = [("0000:3d:00.1", 1), ("0000:3d:00.2", 2)]
            .map(|(n, u)| (n.to_string(), device(n, uverbs(u))))
            .into();
        let (disk, done) = sync(&path, kind.clone(), both.clone(), OnDisk::Absent, &on_node);
        assert!(matches!(done, Synced::Written) && !disk.keeps(), "{done:?}");
        let written = std::fs::read(&path).unwrap();
        // 00.2's edits cannot be computed now: its entry is read back from the file.
        let one: BTreeMap<String, CdiDevice> =
            both.iter().take(1).map(|(k, v)| (k.clone(), v.clone())).collect();
        let (disk, done) = sync(&path, kind.clone(), one.clone(), disk, &on_node);
        assert!(matches!(done, Synced::Unchanged), "{done:?}");
        assert!(matches!(&disk, OnDisk::Ours { kept, .. } if kept.keys().eq(["0000:3d:00.2"])), "{disk:?}");
        assert_eq!(std::fs::read(&path).unwrap(), written);
        // A file changed behind our back is not read as what we wrote.
        let (disk, _) = sync(&path, kind.clone(), both, OnDisk::Absent, &on_node);
        std::fs::write(&path, b"{}").unwrap();
        let (disk, done) = sync(&path, kind, one, disk, &on_node);
        assert!(matches!(done, Synced::Written) && !disk.keeps(), "{done:?} {disk:?}");
        let back = parse_ours(&std::fs::read(&path).unwrap(), "kuberdma.io/rdma_vfs").unwrap().unwrap();
        assert!(back.devices.keys().eq(["0000:3d:00.1"]));
    }

    #[test]
    fn only_specs_in_the_shape_we_write_are_read_as_ours() {
        let kind = "kuberdma.io/rdma_vfs";
        let spec = |devices: Value| json!({"cdiVersion": "0.5.0", "kind": kind, "devices": devices});
        let read = |v: Value| parse_ours(v.to_string().as_bytes(), kind);
        let good = spec(json!([dev("0000:3d:00.2", uverbs(3))]));
        assert_eq!(read(good.clone()).unwrap().unwrap().devices.len(), 1);
        // What a start reads (names only) is the same read.
        let names = parse_names(good.to_string().as_bytes(), kind).unwrap().unwrap();
        assert!(names.iter().eq(["0000:3d:00.2"]));
        assert_eq!(
            read(good.clone()).unwrap().unwrap().to_value(),
            Some(good.clone()),
            "read back as written"
        );
        assert_eq!(read(json!({"kind": "nvidia.com/gpu", "devices": []})), Ok(None), "someone else's");
        assert_eq!(read(json!([kind])), Ok(None), "JSON, not a spec");
        assert_eq!(read(json!({"kind": 7})), Ok(None), "JSON, not a spec");
        let mut hook = good.clone();
        hook["containerEdits"] = json!({"hooks": []});
        for (bad, why) in [
            (hook, "unknown field `containerEdits`"),
            (spec(json!([])), "no devices"),
            (spec(json!([dev("0000:3d:00.2", json!({}))])), "no edits"),
            (spec(json!([dev("0000:3d:00.2", json!({"deviceNodes": []}))])), "no edits"),
            (spec(json!([dev("0000:3d:00.2", json!({"env": ["LD_PRELOAD=/x.so"]}))])), "variable"),
            (
                spec(json!([dev("0000:3d:00.2", json!({"deviceNodes": [{"path": "/etc/shadow"}]}))])),
                "device node",
            ),
            (spec(json!([dev("0000:3d:00.2", json!({"mounts": []}))])), "unknown field `mounts`"),
            (spec(json!([dev("-x", uverbs(3))])), "device name"),
            (spec(json!([dev("0000:3d:00.2", uverbs(3)), dev("0000:3d:00.2", uverbs(4))])), "twice"),
        ] {
            let e = read(bad.clone()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(parse_ours(b"{", kind).unwrap_err().contains("not JSON"));
    }
}
