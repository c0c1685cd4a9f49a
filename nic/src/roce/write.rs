//! Writers for the RoCE settings that live in files under the node's sysfs root
//! (a simulated node is written the same way): the rdma_cm defaults in configfs,
//! the NVIDIA OFED `qos/trust` file and ECN/CNP attributes, the netdev MTU.
//!
//! DCB goes over the netlink handle ([`crate::netlink::dcb::Dcb`]: `set_pfc`,
//! `set_ets`, `replace_dscp`, ...), pause and private flags over
//! [`super::set_pause`] / [`super::set_priv_flag`].

use std::io;
use std::path::{Path, PathBuf};

use super::Trust;
use crate::Roots;

/// A write that failed, with the file it was for.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}")]
pub struct WriteError {
    /// `write`, `mkdir` or `stat`.
    pub op: &'static str,
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

fn write_file(path: &Path, value: &str) -> Result<(), WriteError> {
    std::fs::write(path, value).map_err(|source| WriteError { op: "write", path: path.to_path_buf(), source })
}

/// The rdma_cm attribute of a port to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaCmDefault {
    /// `default_roce_mode`: RoCE v2 (`true`) or `IB/RoCE v1`.
    RoceMode {
        /// RoCE v2.
        v2: bool,
    },
    /// `default_roce_tos`: the ToS byte of rdma_cm connections.
    Tos(u8),
}

/// `kernel/config/rdma_cm/<dev>`, the handle on one device's rdma_cm defaults.
/// The directory exists only after `mkdir` (drivers/infiniband/core/cma_configfs.c);
/// one we made is removed again on drop. The values belong to the device, not
/// to the directory, so they outlive it.
pub(crate) struct CmDir {
    pub path: PathBuf,
    created: bool,
}

/// Why [`CmDir::open`] found no directory.
pub(crate) enum CmDirMissing {
    /// No `kernel/config/rdma_cm` (configfs not mounted, or rdma_cm not loaded).
    NoConfigfs(PathBuf),
    /// The device's directory is absent and making it was not allowed.
    NotCreated(PathBuf),
    /// `mkdir` failed.
    Mkdir(PathBuf, io::Error),
}

impl CmDir {
    /// The device's directory under `roots`, made if absent and `may_create`.
    pub(crate) fn open(roots: &Roots, dev: &str, may_create: bool) -> Result<CmDir, CmDirMissing> {
        let base = roots.sys("kernel/config/rdma_cm");
        let path = base.join(dev);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Ok(CmDir { path, created: false });
        }
        if std::fs::symlink_metadata(&base).is_err() {
            return Err(CmDirMissing::NoConfigfs(base));
        }
        if !may_create {
            return Err(CmDirMissing::NotCreated(path));
        }
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(CmDir { path, created: true }),
            Err(e) => Err(CmDirMissing::Mkdir(path, e)),
        }
    }
}

impl Drop for CmDir {
    fn drop(&mut self) {
        if self.created {
            if let Err(e) = std::fs::remove_dir(&self.path) {
                tracing::warn!(dir = %self.path.display(), error = %e, "could not remove the rdma_cm configfs directory we created");
            }
        }
    }
}

/// Sets an rdma_cm default of `port` of RDMA device `dev`
/// (`kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_{mode,tos}`, what
/// `cma_roce_mode`/`cma_roce_tos` do), through a [`CmDir`].
pub fn set_rdma_cm_default(
    roots: &Roots,
    dev: &str,
    port: u32,
    what: RdmaCmDefault,
) -> Result<(), WriteError> {
    if dev.is_empty() || dev.contains('/') || dev == "." || dev == ".." {
        return Err(WriteError {
            op: "mkdir",
            path: roots.sys("kernel/config/rdma_cm").join(dev),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not an RDMA device name"),
        });
    }
    let dir = CmDir::open(roots, dev, true).map_err(|m| match m {
        CmDirMissing::NoConfigfs(path) => WriteError {
            op: "stat",
            path,
            source: io::Error::new(
                io::ErrorKind::NotFound,
                "no rdma_cm configfs (configfs not mounted or rdma_cm not loaded)",
            ),
        },
        CmDirMissing::NotCreated(path) => {
            WriteError { op: "mkdir", path, source: io::Error::from(io::ErrorKind::NotFound) }
        }
        CmDirMissing::Mkdir(path, source) => WriteError { op: "mkdir", path, source },
    })?;
    let (file, value) = match what {
        // The names ib_cache_gid_parse_type_str() accepts.
        RdmaCmDefault::RoceMode { v2 } => {
            ("default_roce_mode", if v2 { "RoCE v2" } else { "IB/RoCE v1" }.to_string())
        }
        RdmaCmDefault::Tos(t) => ("default_roce_tos", t.to_string()),
    };
    write_file(&dir.path.join("ports").join(port.to_string()).join(file), &value)
}

/// Writes the NVIDIA OFED trust file `class/net/<iface>/qos/trust`. `Ok(false)`:
/// the file does not exist (upstream drivers infer trust from the DCB APP table).
pub fn set_legacy_trust(roots: &Roots, iface: &str, trust: Trust) -> Result<bool, WriteError> {
    let path = roots.sys(format!("class/net/{iface}/qos/trust"));
    if !path.exists() {
        return Ok(false);
    }
    write_file(&path, trust.as_str()).map(|()| true)
}

/// Writes one sysfs attribute of netdev `iface` (`class/net/<iface>/<rel>`).
fn write_net(roots: &Roots, iface: &str, rel: &str, value: &str) -> Result<(), WriteError> {
    write_file(&roots.sys(format!("class/net/{iface}/{rel}")), value)
}

/// RoCE ECN of `priority` at both the notification and the reaction point (NVIDIA
/// OFED `ecn/roce_np/enable/<p>`, `ecn/roce_rp/enable/<p>`).
pub fn set_ecn(roots: &Roots, iface: &str, priority: u8, on: bool) -> Result<(), WriteError> {
    let v = u8::from(on).to_string();
    write_net(roots, iface, &format!("ecn/roce_np/enable/{priority}"), &v)?;
    write_net(roots, iface, &format!("ecn/roce_rp/enable/{priority}"), &v)
}

/// DSCP of CNPs (`ecn/roce_np/cnp_dscp`).
pub fn set_cnp_dscp(roots: &Roots, iface: &str, dscp: u8) -> Result<(), WriteError> {
    write_net(roots, iface, "ecn/roce_np/cnp_dscp", &dscp.to_string())
}

/// 802.1p priority of CNPs (`ecn/roce_np/cnp_802p_prio`).
pub fn set_cnp_priority(roots: &Roots, iface: &str, priority: u8) -> Result<(), WriteError> {
    write_net(roots, iface, "ecn/roce_np/cnp_802p_prio", &priority.to_string())
}

/// Netdev MTU (`class/net/<iface>/mtu`, what `ip link set dev X mtu N` changes).
pub fn set_mtu(roots: &Roots, iface: &str, mtu: u32) -> Result<(), WriteError> {
    write_net(roots, iface, "mtu", &mtu.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> (tempfile::TempDir, Roots) {
        let t = tempfile::tempdir().unwrap();
        let r = Roots { sysfs: t.path().join("sys"), dev: t.path().join("dev") };
        (t, r)
    }

    #[test]
    fn rdma_cm_default_in_an_existing_device_directory() {
        let (_t, r) = roots();
        let port = r.sys("kernel/config/rdma_cm/mlx5_0/ports/1");
        std::fs::create_dir_all(&port).unwrap();
        set_rdma_cm_default(&r, "mlx5_0", 1, RdmaCmDefault::RoceMode { v2: true }).unwrap();
        set_rdma_cm_default(&r, "mlx5_0", 1, RdmaCmDefault::Tos(106)).unwrap();
        assert_eq!(std::fs::read_to_string(port.join("default_roce_mode")).unwrap(), "RoCE v2");
        assert_eq!(std::fs::read_to_string(port.join("default_roce_tos")).unwrap(), "106");
        assert!(port.exists(), "a directory we did not create stays");
    }

    #[test]
    fn rdma_cm_default_errors_name_the_path() {
        let (_t, r) = roots();
        let e = set_rdma_cm_default(&r, "mlx5_0", 1, RdmaCmDefault::Tos(0)).unwrap_err();
        assert!(
            e.to_string().contains("kernel/config/rdma_cm") && e.source.to_string().contains("configfs"),
            "{e}"
        );
        std::fs::create_dir_all(r.sys("kernel/config/rdma_cm")).unwrap();
        let e = set_rdma_cm_default(&r, "../x", 1, RdmaCmDefault::Tos(0)).unwrap_err();
        assert!(e.source.to_string().contains("not an RDMA device name"), "{e}");
        // On a plain directory (not configfs) mkdir makes no ports/: the write
        // fails, names the file, and the directory we made is gone again.
        let e = set_rdma_cm_default(&r, "mlx5_0", 1, RdmaCmDefault::RoceMode { v2: false }).unwrap_err();
        assert!(e.to_string().contains("mlx5_0/ports/1/default_roce_mode"), "{e}");
        assert!(!r.sys("kernel/config/rdma_cm/mlx5_0").exists());
    }

    #[test]
    fn ecn_cnp_and_mtu_land_in_the_netdev_attributes() {
        let (_t, r) = roots();
        let net = r.sys("class/net/ens1f0np0");
        for d in ["ecn/roce_np/enable", "ecn/roce_rp/enable"] {
            std::fs::create_dir_all(net.join(d)).unwrap();
        }
        set_ecn(&r, "ens1f0np0", 3, true).unwrap();
        set_cnp_dscp(&r, "ens1f0np0", 48).unwrap();
        set_cnp_priority(&r, "ens1f0np0", 6).unwrap();
        set_mtu(&r, "ens1f0np0", 9000).unwrap();
        let read = |p: &str| std::fs::read_to_string(net.join(p)).unwrap();
        assert_eq!((read("ecn/roce_np/enable/3"), read("ecn/roce_rp/enable/3")), ("1".into(), "1".into()));
        assert_eq!(
            (read("ecn/roce_np/cnp_dscp"), read("ecn/roce_np/cnp_802p_prio")),
            ("48".into(), "6".into())
        );
        assert_eq!(read("mtu"), "9000");
        let e = set_ecn(&r, "nope0", 3, true).unwrap_err();
        assert!(e.to_string().contains("class/net/nope0/ecn/roce_np/enable/3"), "{e}");
    }

    #[test]
    fn legacy_trust_only_where_the_file_is() {
        let (_t, r) = roots();
        assert!(!set_legacy_trust(&r, "ens1f0np0", Trust::Dscp).unwrap());
        let qos = r.sys("class/net/ens1f0np0/qos");
        std::fs::create_dir_all(&qos).unwrap();
        std::fs::write(qos.join("trust"), "pcp\n").unwrap();
        assert!(set_legacy_trust(&r, "ens1f0np0", Trust::Dscp).unwrap());
        assert_eq!(std::fs::read_to_string(qos.join("trust")).unwrap(), "dscp");
    }
}
