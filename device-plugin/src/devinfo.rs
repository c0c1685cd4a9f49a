//! Files other components read: device-info files for Multus and the CNI
//! (written by [`nic::devinfo`], the one writer of that format) and the CDI
//! spec of each pool (CDI `SPEC.md`, cdiVersion 0.6.0). All writes are atomic
//! (temp file in the same dir, then `rename`), so a reader never sees half a
//! file.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::pools::{Device, Pool};
use crate::RDMA_CM;

pub use nic::devinfo::{write_atomic, FileError};

/// File name stem for a resource (`kuberdma.io/rdma_vfs` → `kuberdma.io-rdma_vfs`).
fn resource_stem(resource: &str) -> String {
    resource.replace('/', "-")
}

/// What the device-info file of `d` says.
pub fn device_info(d: &Device) -> nic::devinfo::DeviceInfo {
    nic::devinfo::DeviceInfo { pci: d.pci, pf: d.pf, rdma_device: d.rdma.first().map(|r| r.name.clone()) }
}

/// Writes the device-info file of each device; returns the paths written.
pub fn write_devinfo(dir: &Path, pool: &Pool, devs: &[&Device]) -> Result<Vec<PathBuf>, FileError> {
    let resource = pool.resource_name();
    devs.iter().map(|d| nic::devinfo::write(dir, &resource, &d.id, &device_info(d))).collect()
}

/// Removes every device-info file of `resource` in `dir` (on shutdown or pool removal).
pub fn remove_devinfo(dir: &Path, resource: &str) -> Result<usize, FileError> {
    nic::devinfo::remove_all(dir, resource)
}

/// `<cdi-dir>/<resource with / as ->.json`.
pub fn cdi_path(dir: &Path, pool: &Pool) -> PathBuf {
    dir.join(format!("{}.json", resource_stem(&pool.resource_name())))
}

/// The CDI spec of a pool: one CDI device per device ID with its char
/// devices; `rdma_cm` as a spec-wide edit.
pub fn cdi_spec(pool: &Pool) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = pool
        .devices
        .iter()
        .map(|d| {
            let nodes: Vec<serde_json::Value> = d
                .rdma
                .iter()
                .flat_map(|r| r.char_devs.iter())
                .map(|c| json!({ "path": c.node_path.to_string_lossy() }))
                .collect();
            let env: Vec<String> = d
                .rdma
                .iter()
                .map(|r| format!("KUBERDMA_RDMA_DEVICE_{}={}", cdi_env(&d.id), r.name))
                .collect();
            json!({ "name": d.id, "containerEdits": { "deviceNodes": nodes, "env": env } })
        })
        .collect();
    let mut spec =
        json!({ "cdiVersion": "0.6.0", "kind": crate::allocate::cdi_kind(pool), "devices": devices });
    if pool.rdma_cm {
        spec["containerEdits"] = json!({ "deviceNodes": [ { "path": RDMA_CM } ] });
    }
    spec
}

fn cdi_env(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// Writes the pool's CDI spec atomically; returns its path.
pub fn write_cdi(dir: &Path, pool: &Pool) -> Result<PathBuf, FileError> {
    let path = cdi_path(dir, pool);
    let body = serde_json::to_vec_pretty(&cdi_spec(pool)).unwrap_or_default();
    write_atomic(&path, &body)?;
    Ok(path)
}
