//! Files other components read: device-info files for Multus and the CNI
//! (written by [`nic::devinfo`], the one writer of that format) and the CDI
//! spec of each pool (CDI `SPEC.md`). All writes are atomic (temp file in the
//! same dir, then `rename`), so a reader never sees half a file, and not
//! flushed: they are on Allocate's path, under `/var/run`
//! ([`plumbing::atomic_file`] says why that is the right trade).
//!
//! The CDI spec carries the lowest `cdiVersion` its content needs, by the
//! version rules of the CDI spec (container-device-interface
//! `specs-go/version.go`): runtimes refuse a version newer than they know, so
//! podman 4.3 refuses 0.6.0 even for content 0.5.0 covers. The kind comes from
//! [`crate::names::cdi_kind`], valid under 0.3.0 rules for every pool name.
//!
//! A CDI spec outlives the daemon: the kubelet keeps each container's Allocate
//! answer, CDI names included, in its checkpoint and hands it to the runtime
//! again when the container restarts, without calling Allocate
//! (devicemanager `podDevices.deviceRunContainerOptions`). So the daemon
//! leaves specs in place when it stops or a pool is removed from its config,
//! and drops a device from its spec only once the device is gone from the
//! node ([`crate::pools::OnNode`]).

use std::path::{Path, PathBuf};

use plumbing::atomic_file::{write_unsynced, FileError};
use serde_json::json;

use crate::allocate::{cdi_named, hands_out_rdma, node_paths};
use crate::names;
use crate::pools::{Device, Pool};
use crate::RDMA_CM;

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

/// The CDI spec of a pool: one CDI device per device that has container
/// edits ([`cdi_named`]: the nodes a container gets for it, plus `rdma_cm`
/// where it gets RDMA devices, and `KUBERDMA_RDMA_DEVICE_<ID>=<rdma device>`).
/// `None` when no device has any: the CDI library refuses a device without
/// edits and a spec without devices (container-device-interface
/// `pkg/cdi/device.go` "invalid device, empty device edits", `pkg/cdi/spec.go`
/// "invalid spec, no devices"), and one refused device takes the whole file
/// down with it.
pub fn cdi_spec(pool: &Pool) -> Option<serde_json::Value> {
    cdi_spec_of(pool, |_| true)
}

/// [`cdi_spec`] of the devices of `pool` that `keep` keeps.
pub fn cdi_spec_of(pool: &Pool, keep: impl Fn(&Device) -> bool) -> Option<serde_json::Value> {
    let named: Vec<&Device> = pool.devices.iter().filter(|d| keep(d) && cdi_named(pool, d)).collect();
    if named.is_empty() {
        return None;
    }
    let devices: Vec<serde_json::Value> = named
        .iter()
        .map(|d| {
            let mut nodes: Vec<serde_json::Value> =
                node_paths(pool, d).into_iter().map(|p| json!({ "path": p })).collect();
            if pool.rdma_cm && hands_out_rdma(pool, d) {
                nodes.push(json!({ "path": RDMA_CM }));
            }
            let mut edits = serde_json::Map::new();
            if !nodes.is_empty() {
                edits.insert("deviceNodes".into(), nodes.into());
            }
            if hands_out_rdma(pool, d) {
                let env: Vec<String> = d
                    .rdma
                    .iter()
                    .map(|r| format!("KUBERDMA_RDMA_DEVICE_{}={}", names::env_part(&d.id), r.name))
                    .collect();
                edits.insert("env".into(), env.into());
            }
            json!({ "name": d.id, "containerEdits": edits })
        })
        .collect();
    let kind = pool.config.cdi_kind();
    let version = cdi_version(&kind, named.iter().map(|d| d.id.as_str()));
    Some(json!({ "cdiVersion": version, "kind": kind, "devices": devices }))
}

/// The bytes of a spec file.
pub fn cdi_file(spec: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec_pretty(spec).unwrap_or_default()
}

/// Writes `file` ([`cdi_file`]) as the pool's CDI spec atomically, or removes
/// the spec when there is none; returns its path.
pub fn put_cdi(dir: &Path, pool: &Pool, file: Option<&[u8]>) -> Result<PathBuf, FileError> {
    let path = cdi_path(dir, pool);
    match file {
        Some(bytes) => write_unsynced(&path, bytes)?,
        None => nic::devinfo::remove(&path)?,
    }
    Ok(path)
}
