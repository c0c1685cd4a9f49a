//! Files other components read: device-info files for Multus and the CNI
//! (device-info-spec 1.1.0, k8snetworkplumbingwg `device-info-spec.md`) and the
//! CDI spec of each pool (CDI `SPEC.md`, cdiVersion 0.6.0). All writes are
//! atomic (temp file in the same dir, then `rename`), so a reader never sees
//! half a file.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::pools::{Device, Pool};
use crate::RDMA_CM;

/// A file could not be written or removed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}")]
pub struct FileError {
    /// What was attempted.
    pub op: &'static str,
    /// The file.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Writes `data` to `path` atomically, creating the directory if needed.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), FileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|source| FileError {
        op: "create dir",
        path: dir.into(),
        source,
    })?;
    // A unique temp name in the same directory, so `rename` is atomic.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    let res = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(data))
        .map_err(|source| FileError { op: "write", path: tmp.clone(), source })
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|source| FileError {
                op: "rename into",
                path: path.into(),
                source,
            })
        });
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// File name stem for a resource (`kuberdma.io/rdma_vfs` → `kuberdma.io-rdma_vfs`).
fn resource_stem(resource: &str) -> String {
    resource.replace('/', "-")
}

/// `<dir>/<resource with / as ->-<id>-device.json`, the name Multus looks for.
pub fn devinfo_path(dir: &Path, resource: &str, id: &str) -> PathBuf {
    dir.join(format!("{}-{}-device.json", resource_stem(resource), id))
}

/// Device-info 1.1.0 content for one device.
pub fn devinfo_json(d: &Device) -> serde_json::Value {
    let mut pci = serde_json::Map::new();
    if let Some(p) = d.pci {
        pci.insert("pci-address".into(), p.to_string().into());
    }
    if let Some(pf) = d.pf {
        pci.insert("pf-pci-address".into(), pf.to_string().into());
    }
    if let Some(r) = d.rdma.first() {
        pci.insert("rdma-device".into(), r.name.clone().into());
    }
    json!({ "type": "pci", "version": "1.1.0", "pci": pci })
}

/// Writes the device-info file of each device; returns the paths written.
pub fn write_devinfo(dir: &Path, pool: &Pool, devs: &[&Device]) -> Result<Vec<PathBuf>, FileError> {
    let mut out = Vec::with_capacity(devs.len());
    for d in devs {
        let path = devinfo_path(dir, &pool.resource_name(), &d.id);
        let body = serde_json::to_vec_pretty(&devinfo_json(d)).unwrap_or_default();
        write_atomic(&path, &body)?;
        out.push(path);
    }
    Ok(out)
}

/// Removes every device-info file of `resource` in `dir` (on shutdown or pool removal).
pub fn remove_devinfo(dir: &Path, resource: &str) -> Result<usize, FileError> {
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
