//! Device-info files: the one writer of the format Multus hands between a
//! device plugin and a CNI (k8snetworkplumbingwg `device-info-spec.md`,
//! version 1.1.0). The device plugin writes one per allocated device under
//! `/var/run/k8s.cni.cncf.io/devinfo/dp/`; the CNI adds what it learned to the
//! file Multus names in `runtimeConfig.CNIDeviceInfoFile`.
//!
//! Every write is atomic (temp file in the same directory, then `rename`), so
//! a reader never sees half a file, and unflushed: these files live under
//! `/var/run` and are written inside Allocate, where an `fsync` would cost
//! more than the whole call ([`plumbing::atomic_file::write_unsynced`]).

use std::path::{Path, PathBuf};

use plumbing::atomic_file::{write_unsynced, FileError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::PciAddr;

/// The spec version we write.
pub const VERSION: &str = "1.1.0";

/// The `pci` object of a device-info file (spec 1.1.0, type `pci`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pci {
    /// The VF's PCI address.
    #[serde(rename = "pci-address", skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// Its PF's PCI address.
    #[serde(rename = "pf-pci-address", skip_serializing_if = "Option::is_none")]
    pub pf_pci_address: Option<String>,
    /// The RDMA device bound to the VF.
    #[serde(rename = "rdma-device", skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
}

/// What we know of one device, as the spec's `pci` type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The VF's PCI address.
    pub pci: Option<PciAddr>,
    pub pf: Option<PciAddr>,
    pub rdma_device: Option<String>,
}

impl DeviceInfo {
    fn pci_object(&self) -> Pci {
        Pci {
            pci_address: self.pci.map(|p| p.to_string()),
            pf_pci_address: self.pf.map(|p| p.to_string()),
            rdma_device: self.rdma_device.clone(),
        }
    }

    /// The file content: `{"type": "pci", "version": "1.1.0", "pci": {...}}`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({ "type": "pci", "version": VERSION, "pci": self.pci_object() })
    }

    /// Merges our fields into an existing file's content, keeping every key
    /// another writer put there (the spec lets both the device plugin and the
    /// CNI describe the same device).
    pub fn merge_into(&self, existing: Value) -> Value {
        let mut v = if existing.is_object() { existing } else { serde_json::json!({}) };
        v["type"] = "pci".into();
        v["version"] = VERSION.into();
        if !v["pci"].is_object() {
            v["pci"] = serde_json::json!({});
        }
        if let Value::Object(ours) = serde_json::to_value(self.pci_object()).unwrap_or_default() {
            for (k, val) in ours {
                v["pci"][k] = val;
            }
        }
        v
    }
}

/// File name stem for a resource (`kuberdma.io/rdma_vfs` → `kuberdma.io-rdma_vfs`).
fn resource_stem(resource: &str) -> String {
    resource.replace('/', "-")
}

/// `<dir>/<resource with / as ->-<id>-device.json`, the name Multus looks for.
pub fn path(dir: &Path, resource: &str, id: &str) -> PathBuf {
    dir.join(format!("{}-{}-device.json", resource_stem(resource), id))
}

/// Writes the device-info file of one device of `resource`; returns its path.
pub fn write(dir: &Path, resource: &str, id: &str, info: &DeviceInfo) -> Result<PathBuf, FileError> {
    let p = path(dir, resource, id);
    write_unsynced(&p, &serde_json::to_vec_pretty(&info.to_json()).unwrap_or_default())?;
    Ok(p)
}

/// Adds `info` to the file at `file` (created if absent, other keys kept).
pub fn merge_into_file(file: &Path, info: &DeviceInfo) -> Result<(), FileError> {
    let existing = match std::fs::read(file) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
        Err(source) => return Err(FileError::new("read", file, source)),
    };
    write_unsynced(file, &serde_json::to_vec(&info.merge_into(existing)).unwrap_or_default())
}

/// Removes one file; a file already gone is fine.
pub fn remove(file: &Path) -> Result<(), FileError> {
    match std::fs::remove_file(file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FileError { op: "remove", path: file.into(), source }),
    }
}

/// Removes every device-info file of `resource` in `dir` (on shutdown or pool
/// removal); returns how many were removed.
pub fn remove_all(dir: &Path, resource: &str) -> Result<usize, FileError> {
    let prefix = format!("{}-", resource_stem(resource));
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(FileError { op: "list", path: dir.into(), source }),
    };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with("-device.json") {
            match std::fs::remove_file(e.path()) {
                Ok(()) => n += 1,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(FileError { op: "remove", path: e.path(), source }),
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> PciAddr {
        s.parse().unwrap()
    }

    #[test]
    fn writes_the_spec_layout() {
        let info = DeviceInfo {
            pci: Some(addr("0000:3b:00.2")),
            pf: Some(addr("0000:3b:00.0")),
            rdma_device: Some("mlx5_2".into()),
        };
        assert_eq!(
            info.to_json(),
            serde_json::json!({"type": "pci", "version": "1.1.0",
                "pci": {"pci-address": "0000:3b:00.2", "pf-pci-address": "0000:3b:00.0", "rdma-device": "mlx5_2"}})
        );
    }

    #[test]
    fn merge_keeps_what_another_writer_put_there() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sub/net1.json");
        write_unsynced(&f, br#"{"type":"pci","version":"1.1.0","pci":{"pf-pci-address":"0000:3b:00.0","vhost-net":"/dev/vhost-net"},"x":1}"#)
            .unwrap();
        let ours =
            DeviceInfo { pci: Some(addr("0000:3b:00.2")), pf: None, rdma_device: Some("mlx5_2".into()) };
        merge_into_file(&f, &ours).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_eq!(v["x"], 1);
        assert_eq!(v["pci"]["vhost-net"], "/dev/vhost-net");
        assert_eq!(v["pci"]["pf-pci-address"], "0000:3b:00.0");
        assert_eq!(v["pci"]["pci-address"], "0000:3b:00.2");
        assert_eq!(v["pci"]["rdma-device"], "mlx5_2");
        remove(&f).unwrap();
        remove(&f).unwrap();
    }

    #[test]
    fn remove_all_takes_only_that_resource() {
        let dir = tempfile::tempdir().unwrap();
        let info = DeviceInfo::default();
        write(dir.path(), "kuberdma.io/a", "0000:3b:00.2", &info).unwrap();
        write(dir.path(), "kuberdma.io/a", "0000:3b:00.3", &info).unwrap();
        let keep = write(dir.path(), "kuberdma.io/ab", "0000:3b:00.4", &info).unwrap();
        assert_eq!(remove_all(dir.path(), "kuberdma.io/a").unwrap(), 2);
        assert!(keep.exists());
        assert_eq!(remove_all(&dir.path().join("missing"), "kuberdma.io/a").unwrap(), 0);
    }
}
