//! Files other components read: device-info files for Multus and the CNI
//! (written by [`nic::devinfo`], the one writer of that format) and the CDI
//! spec of each pool (CDI `SPEC.md`). All writes are atomic (temp file in the
//! same dir, then `rename`), so a reader never sees half a file.
//!
//! The CDI spec carries the lowest `cdiVersion` its content needs, by the
//! version rules of the CDI spec (container-device-interface
//! `specs-go/version.go`): runtimes refuse a version newer than they know, so
//! podman 4.3 refuses 0.6.0 even for content 0.5.0 covers. The kind comes from
//! [`crate::names::cdi_kind`], valid under 0.3.0 rules for every pool name.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::allocate::{hands_out_rdma, node_paths};
use crate::names;
use crate::pools::{Device, Pool};
use crate::RDMA_CM;

pub use nic::devinfo::{write_atomic, FileError};

/// File name stem for a resource (`kuberdma.io/rdma_vfs` → `kuberdma.io-rdma_vfs`).
fn resource_stem(resource: &str) -> String {
    resource.replace('/', "-")
}

/// What the device-info file of `d` says; `None` for devices that are no PCI
/// function of their own (k8s-rdma-shared-dev-plugin's per-resource IDs).
pub fn device_info(d: &Device) -> Option<nic::devinfo::DeviceInfo> {
    let pci = d.pci?;
    Some(nic::devinfo::DeviceInfo {
        pci: Some(pci),
        pf: d.pf,
        rdma_device: d.rdma.first().map(|r| r.name.clone()),
    })
}

/// Writes the device-info file of each device that has one; returns the paths written.
pub fn write_devinfo(dir: &Path, pool: &Pool, devs: &[&Device]) -> Result<Vec<PathBuf>, FileError> {
    let resource = pool.resource_name();
    devs.iter()
        .filter_map(|d| device_info(d).map(|i| (d, i)))
        .map(|(d, i)| nic::devinfo::write(dir, &resource, &d.id, &i))
        .collect()
}

/// Removes every device-info file of `resource` in `dir` (on shutdown or pool removal).
pub fn remove_devinfo(dir: &Path, resource: &str) -> Result<usize, FileError> {
    nic::devinfo::remove_all(dir, resource)
}

/// `<cdi-dir>/<resource with / as ->.json`.
pub fn cdi_path(dir: &Path, pool: &Pool) -> PathBuf {
    dir.join(format!("{}.json", resource_stem(&pool.resource_name())))
}

/// The lowest CDI spec version that covers a spec of `kind` whose devices are
/// named `devices`, with device nodes given by `path` only, no mounts with a
/// type and no annotations (what we write):
/// - 0.6.0 if the class (after `/`) holds a `.` (never, by [`names::cdi_kind`]);
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

/// The CDI spec of a pool: one CDI device per device ID with the nodes a
/// container gets for it (plus `rdma_cm` where it gets RDMA devices) and
/// `KUBERDMA_RDMA_DEVICE_<ID>=<rdma device>`.
pub fn cdi_spec(pool: &Pool) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = pool
        .devices
        .iter()
        .map(|d| {
            let mut nodes: Vec<serde_json::Value> =
                node_paths(pool, d).into_iter().map(|p| json!({ "path": p })).collect();
            if pool.rdma_cm && hands_out_rdma(pool, d) {
                nodes.push(json!({ "path": RDMA_CM }));
            }
            let env: Vec<String> = if hands_out_rdma(pool, d) {
                d.rdma
                    .iter()
                    .map(|r| format!("KUBERDMA_RDMA_DEVICE_{}={}", names::env_part(&d.id), r.name))
                    .collect()
            } else {
                vec![]
            };
            let mut edits = json!({ "deviceNodes": nodes });
            if !env.is_empty() {
                edits["env"] = json!(env);
            }
            json!({ "name": d.id, "containerEdits": edits })
        })
        .collect();
    let kind = pool.config.cdi_kind();
    let version = cdi_version(&kind, pool.devices.iter().map(|d| d.id.as_str()));
    json!({ "cdiVersion": version, "kind": kind, "devices": devices })
}

/// Whether the CDI specs of two states of a pool differ: only IDs, the
/// devices' nodes and RDMA device names go into a spec, so health and in-use
/// changes never rewrite it.
pub fn cdi_differs(a: &Pool, b: &Pool) -> bool {
    fn paths(d: &Device) -> impl Iterator<Item = &PathBuf> {
        d.rdma.iter().flat_map(|r| &r.char_devs).map(|c| &c.node_path)
    }
    let same = |x: &Device, y: &Device| {
        x.id == y.id
            && x.vfio == y.vfio
            && x.rdma.iter().map(|r| &r.name).eq(y.rdma.iter().map(|r| &r.name))
            && paths(x).eq(paths(y))
    };
    a.config != b.config
        || a.rdma_cm != b.rdma_cm
        || a.devices.len() != b.devices.len()
        || !a.devices.iter().zip(&b.devices).all(|(x, y)| same(x, y))
}

/// Writes the pool's CDI spec atomically; returns its path.
pub fn write_cdi(dir: &Path, pool: &Pool) -> Result<PathBuf, FileError> {
    let path = cdi_path(dir, pool);
    let body = serde_json::to_vec_pretty(&cdi_spec(pool)).unwrap_or_default();
    write_atomic(&path, &body)?;
    Ok(path)
}
