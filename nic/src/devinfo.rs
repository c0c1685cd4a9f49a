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

/// Where Multus names the device-info file it hands a CNI
/// (`runtimeConfig.CNIDeviceInfoFile`): network-attachment-definition-client
/// `GetCNIDeviceInfoPath`, `/var/run/k8s.cni.cncf.io/devinfo/cni/` and a
/// plain name (`<network>-<containerID>_<ifname>`, `/` made `-`).
pub const CNI_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/cni";

/// Largest device-info file we read back (they are a few hundred bytes).
const READ_LIMIT: u64 = 64 * 1024;

/// The name of `file` when it is a plain file directly inside `dir`
/// (compared component by component, `..` and `.` refused), else why not.
/// A leading `.` is refused too: those are the writers' temp files.
pub fn confined_name(dir: &Path, file: &Path) -> Result<String, String> {
    use std::path::Component;
    let allowed = || format!("only a file directly inside {} is allowed", dir.display());
    if !file.is_absolute() || !dir.is_absolute() {
        return Err(format!("{} is not an absolute path; {}", file.display(), allowed()));
    }
    if file.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        return Err(format!("{} has . or .. in it; {}", file.display(), allowed()));
    }
    let (Some(parent), Some(name)) = (file.parent(), file.file_name().and_then(|n| n.to_str())) else {
        return Err(format!("{} names no file; {}", file.display(), allowed()));
    };
    if !parent.components().eq(dir.components()) {
        return Err(format!("{} is outside {}; {}", file.display(), dir.display(), allowed()));
    }
    if name.starts_with('.') || name.bytes().any(|b| b == 0) {
        return Err(format!("{name:?} is not a plain file name; {}", allowed()));
    }
    Ok(name.to_string())
}

/// An open directory whose entries are reached by name only (`openat`,
/// `renameat`, `unlinkat`), never by a path that could lead out of it.
struct DirFd {
    fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl DirFd {
    fn open(dir: &Path) -> Result<Self, FileError> {
        use nix::fcntl::{open, OFlag};
        let fd =
            open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
                .map_err(|e| FileError::new("open", dir, e.into()))?;
        Ok(DirFd { fd, path: dir.to_path_buf() })
    }

    fn at(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` without following a symlink or waiting on a FIFO; only a
    /// regular file is returned (`None`: there is none).
    fn open_regular(&self, name: &str, flags: nix::fcntl::OFlag) -> Result<Option<std::fs::File>, FileError> {
        use nix::fcntl::OFlag;
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::openat(
            &self.fd,
            name,
            flags,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(nix::errno::Errno::ELOOP) => {
                return Err(FileError::new("open", self.at(name), std::io::Error::other("is a symlink")))
            }
            Err(e) => return Err(FileError::new("open", self.at(name), e.into())),
        };
        let f = std::fs::File::from(fd);
        let meta = f.metadata().map_err(|e| FileError::new("stat", self.at(name), e))?;
        if !meta.file_type().is_file() {
            return Err(FileError::new(
                "open",
                self.at(name),
                std::io::Error::other("is not a regular file"),
            ));
        }
        Ok(Some(f))
    }

    fn unlink(&self, name: &str) -> Result<bool, FileError> {
        match nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ENOENT) => Ok(false),
            Err(e) => Err(FileError::new("remove", self.at(name), e.into())),
        }
    }

    /// Removes the temp files a killed writer left for `name`
    /// ([`plumbing::atomic_file::is_temp_of`]); how many.
    fn remove_temps(&self, name: &str) -> Result<usize, FileError> {
        let rd = std::fs::read_dir(&self.path).map_err(|e| FileError::new("list", &self.path, e))?;
        let mut n = 0;
        for e in rd.flatten() {
            let Some(cand) = e.file_name().to_str().map(str::to_string) else { continue };
            if plumbing::atomic_file::is_temp_of(&cand, name) && self.unlink(&cand)? {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// Adds `info` to the file `name` directly inside `dir` (created if absent,
/// other keys kept), the way [`merge_into_file`] does, but confined to `dir`:
/// the file is reached from the open directory with `O_NOFOLLOW`, so a
/// symlink there (or a FIFO, a device) is refused, never followed or waited
/// on, and nothing is created outside `dir` (only `dir` itself, if missing).
/// Temp files a killed writer left for `name` are removed first.
pub fn merge_into_confined(dir: &Path, name: &str, info: &DeviceInfo) -> Result<(), FileError> {
    use std::io::{Read as _, Write as _};

    use nix::fcntl::OFlag;
    std::fs::create_dir_all(dir).map_err(|e| FileError::new("create dir", dir, e))?;
    let d = DirFd::open(dir)?;
    d.remove_temps(name)?;
    let existing = match d.open_regular(name, OFlag::O_RDONLY)? {
        None => Value::Null,
        Some(f) => {
            let mut b = Vec::new();
            f.take(READ_LIMIT).read_to_end(&mut b).map_err(|e| FileError::new("read", d.at(name), e))?;
            serde_json::from_slice(&b).unwrap_or(Value::Null)
        }
    };
    let body = serde_json::to_vec(&info.merge_into(existing)).unwrap_or_default();
    let tmp = plumbing::atomic_file::temp_name(name);
    let res = (|| {
        let mut f = d
            .open_regular(&tmp, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL)?
            .ok_or_else(|| FileError::new("create", d.at(&tmp), std::io::ErrorKind::NotFound.into()))?;
        f.write_all(&body).map_err(|e| FileError::new("write", d.at(&tmp), e))?;
        nix::fcntl::renameat(&d.fd, tmp.as_str(), &d.fd, name)
            .map_err(|e| FileError::new("rename into", d.at(name), e.into()))
    })();
    if res.is_err() {
        let _ = d.unlink(&tmp);
    }
    res
}

/// Removes the file `name` directly inside `dir` and the temp files a killed
/// writer left for it, without following a symlink out of `dir` (a symlink
/// is removed itself); gone already is fine.
pub fn remove_confined(dir: &Path, name: &str) -> Result<(), FileError> {
    let d = match DirFd::open(dir) {
        Err(e) if e.source.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    d.remove_temps(name)?;
    d.unlink(name).map(|_| ())
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
    fn only_a_plain_name_directly_inside_the_dir_is_confined() {
        let dir = Path::new(CNI_DIR);
        assert_eq!(confined_name(dir, &dir.join("net-c1_net1")).unwrap(), "net-c1_net1");
        let slash = Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/");
        assert_eq!(confined_name(slash, &dir.join("x")).unwrap(), "x");
        // `a/./b` is `a/b` (std drops inner `.`): the same file.
        assert_eq!(confined_name(dir, Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/./x")).unwrap(), "x");
        for bad in [
            "/tmp/x",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/../dp/x",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/sub/x",
            "/var/run/k8s.cni.cncf.io/devinfo/cni/.x.1.2.tmp",
            "/var/run/k8s.cni.cncf.io/devinfo/cni",
            "/var/run/k8s.cni.cncf.io/devinfo/x",
            "net-c1_net1",
            "/",
        ] {
            let e = confined_name(dir, Path::new(bad)).unwrap_err();
            assert!(e.contains(CNI_DIR), "{bad}: {e}");
        }
    }

    #[test]
    fn a_confined_merge_never_follows_a_symlink_and_cleans_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("cni");
        let outside = d.path().join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        let info = DeviceInfo { pci: Some(addr("0000:3b:00.2")), ..DeviceInfo::default() };
        let e = merge_into_confined(&dir, "link", &info).unwrap_err();
        assert!(e.to_string().contains("link") && nic_chain(&e).contains("symlink"), "{}", nic_chain(&e));
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        remove_confined(&dir, "link").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep", "the symlink went, not its target");
        std::fs::write(dir.join(".f.77.0.tmp"), b"{").unwrap();
        merge_into_confined(&dir, "f", &info).unwrap();
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["f"]);
        std::fs::write(dir.join(".f.78.3.tmp"), b"{").unwrap();
        remove_confined(&dir, "f").unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        remove_confined(&d.path().join("missing"), "f").unwrap();
    }

    fn nic_chain(e: &FileError) -> String {
        crate::error_chain(e)
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
