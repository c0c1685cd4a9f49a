//! CDI specs (CDI `SPEC.md`): the one writer of the format, for both modes.
//! Device plugin mode keeps one spec per pool that follows the node
//! ([`pool`]); DRA mode writes one per prepared claim
//! ([`crate::dra::cdi`]). Both build their devices as [`CdiDevice`] and
//! their file with [`file`]; writes are atomic (temp file in the same dir,
//! then `rename`), so a reader never sees half a file, and not flushed: they
//! are on Allocate's and prepare's path, under `/var/run`
//! ([`plumbing::atomic_file`] says why that is the right trade).
//!
//! A spec carries the lowest `cdiVersion` its content needs, by the version
//! rules of the CDI spec (container-device-interface `specs-go/version.go`):
//! runtimes refuse a version newer than they know, so podman 4.3 refuses
//! 0.6.0 even for content 0.5.0 covers.
//!
//! The bytes are those earlier versions wrote from JSON values (keys sorted,
//! pretty-printed), so an upgrade rewrites no spec whose devices are
//! unchanged (`tests/cdi_bytes.rs` pins them).

pub mod pool;

use std::path::Path;

use plumbing::atomic_file::{write_unsynced, FileError};
use serde::{Deserialize, Serialize};

/// A CDI device of ours, as written and as read back: only what we write, so
/// that reading refuses any other key (`deny_unknown_fields`). Fields in
/// sorted order: the file's bytes are those of the same device as a JSON
/// value (sorted keys), as earlier versions wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CdiDevice {
    /// Its edits: device nodes and variables.
    #[serde(default)]
    pub container_edits: Edits,
    /// The device's name (after `kind=`).
    pub name: String,
}

/// `containerEdits` (of a device, or of a whole spec) as we write them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Edits {
    /// `deviceNodes`; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_nodes: Option<Vec<DeviceNode>>,
    /// `env` (`NAME=value`); absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
}

impl Edits {
    /// Edits of `nodes` and `env`, each left out when empty (an empty list
    /// is no edit, and the CDI library refuses a device with no edits).
    pub fn of(nodes: Vec<String>, env: Vec<String>) -> Self {
        let nodes: Vec<DeviceNode> = nodes.into_iter().map(|path| DeviceNode { path }).collect();
        Edits { device_nodes: (!nodes.is_empty()).then_some(nodes), env: (!env.is_empty()).then_some(env) }
    }
}

/// A `deviceNodes` entry: the path alone (the runtime reads type and numbers from it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceNode {
    /// Under `/dev/`.
    pub path: String,
}

/// The lowest CDI spec version that covers a spec of `kind` whose devices are
/// named `devices`, with device nodes given by `path` only, no mounts with a
/// type and no annotations (what we write):
/// - 0.6.0 if the class (after `/`) holds a `.` (never, by [`crate::names::cdi_kind`]);
/// - 0.5.0 if a device name starts with something other than a letter (PCI
///   addresses, `0`…`N-1`);
/// - else 0.3.0.
pub fn cdi_version<'a>(kind: &str, devices: impl IntoIterator<Item = &'a str>) -> &'static str {
    if kind.split_once('/').is_some_and(|(_, class)| class.contains('.')) {
        return "0.6.0";
    }
    if devices.into_iter().any(|n| !n.starts_with(|c: char| c.is_ascii_alphabetic())) {
        return "0.5.0";
    }
    "0.3.0"
}

/// The bytes of the spec of `kind` with spec-wide `edits` (applied whenever
/// any of its devices is used) and `devices` in the order given, in the
/// lowest `cdiVersion` it needs; `None` without devices: the CDI library
/// refuses such a spec (container-device-interface `pkg/cdi/spec.go`
/// "invalid spec, no devices"). Serialised from the devices as they are,
/// without a second copy of them as one JSON value: a spec of a thousand
/// devices is megabytes of small allocations, which stay in the daemon's RSS
/// once made.
pub fn file(kind: &str, edits: Option<&Edits>, devices: Vec<&CdiDevice>) -> Option<Vec<u8>> {
    if devices.is_empty() {
        return None;
    }
    let cdi_version = cdi_version(kind, devices.iter().map(|d| d.name.as_str()));
    let doc = Document { cdi_version, container_edits: edits, devices, kind };
    Some(serde_json::to_vec_pretty(&doc).unwrap_or_default())
}

/// A spec document borrowing its devices, its keys in sorted order (see the
/// module doc).
#[derive(Serialize)]
struct Document<'a> {
    #[serde(rename = "cdiVersion")]
    cdi_version: &'static str,
    #[serde(rename = "containerEdits", skip_serializing_if = "Option::is_none")]
    container_edits: Option<&'a Edits>,
    devices: Vec<&'a CdiDevice>,
    kind: &'a str,
}

/// Writes `file` at `path` atomically, or removes the file when there is none.
pub fn put(path: &Path, file: Option<&[u8]>) -> Result<(), FileError> {
    match file {
        Some(bytes) => write_unsynced(path, bytes),
        None => nic::devinfo::remove(path),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// Specs written by a version that built devices as JSON values are not
    /// rewritten for their bytes alone after an upgrade.
    #[test]
    fn a_typed_spec_serialises_to_the_bytes_of_the_same_json_value() {
        let d = json!({"name": "0000:3d:00.2", "containerEdits": {
            "deviceNodes": [{"path": "/dev/infiniband/uverbs3"}],
            "env": ["KUBERDMA_RDMA_DEVICE_0000_3D_00_2=mlx5_3"]}});
        let typed: CdiDevice = serde_json::from_value(d.clone()).unwrap();
        assert_eq!(serde_json::to_vec_pretty(&typed).unwrap(), serde_json::to_vec_pretty(&d).unwrap());
        let edits = Edits::of(vec!["/dev/infiniband/rdma_cm".into()], vec!["A=1".into()]);
        let as_value = |edits: Option<Value>| {
            let mut v =
                json!({"cdiVersion": "0.5.0", "kind": "kuberdma.io/rdma_vfs", "devices": [d.clone()]});
            if let Some(e) = edits {
                v["containerEdits"] = e;
            }
            serde_json::to_vec_pretty(&v).unwrap()
        };
        assert_eq!(file("kuberdma.io/rdma_vfs", None, vec![&typed]), Some(as_value(None)));
        let with = file("kuberdma.io/rdma_vfs", Some(&edits), vec![&typed]);
        assert_eq!(with, Some(as_value(Some(serde_json::to_value(&edits).unwrap()))));
        assert_eq!(file("kuberdma.io/rdma_vfs", Some(&edits), vec![]), None, "no devices, no spec");
    }

    #[test]
    fn empty_lists_are_left_out_of_edits() {
        assert_eq!(Edits::of(vec![], vec![]), Edits::default());
        assert_eq!(
            serde_json::to_string(&Edits::of(vec![], vec!["A=1".into()])).unwrap(),
            r#"{"env":["A=1"]}"#
        );
    }

    #[test]
    fn the_version_is_the_lowest_the_names_need() {
        assert_eq!(cdi_version("kuberdma.io/claim", ["pci-0000-3d-00-2_u"]), "0.3.0");
        assert_eq!(cdi_version("kuberdma.io/rdma_vfs", ["0000:3d:00.2"]), "0.5.0");
        assert_eq!(cdi_version("kuberdma.io/a.b", ["x"]), "0.6.0");
    }
}
