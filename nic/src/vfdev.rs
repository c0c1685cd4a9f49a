//! One VF by PCI address: a handful of sysfs reads under the sysfs root, not a
//! full [`crate::discover`] walk (the CNI's ADD is a hot path).
//!
//! ```text
//! <sysfs>/bus/pci/devices/<vf>/physfn        -> ../<pf>
//! <sysfs>/bus/pci/devices/<pf>/virtfnN       -> ../<vf>
//! <sysfs>/bus/pci/devices/<vf>/net/<netdev>/
//! <sysfs>/bus/pci/devices/<vf>/infiniband/<rdma>/
//! <sysfs>/bus/pci/devices/<vf>/<drv>.rdma.N/infiniband/<rdma>/
//! ```
//!
//! ```no_run
//! let vf = nic::vfdev::VfDev::lookup(&nic::Roots::from_env(), "0000:3b:00.2".parse()?)?;
//! println!("{} is VF {} of {}, netdev {:?}", vf.pci, vf.index, vf.pf, vf.netdev);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use crate::inventory::NetnsMode;
use crate::pci::PciAddr;
use crate::roots::Roots;
use crate::sysfs::{self, SysfsError};

/// Why a VF could not be looked up. Messages start with `device <pci>:`.
#[derive(Debug, thiserror::Error)]
pub enum VfDevError {
    /// There is no such PCI function.
    #[error("device {pci}: no such PCI device under {}", devices.display())]
    NoSuchDevice {
        pci: PciAddr,
        /// `<sysfs>/bus/pci/devices`.
        devices: PathBuf,
    },
    /// The function is not a VF.
    #[error("device {pci}: is not an SR-IOV VF (no physfn link at {}); deviceID must name a VF, not a PF or another device", path.display())]
    NotAVf {
        pci: PciAddr,
        /// `<vf>/physfn`.
        path: PathBuf,
    },
    /// The PF has no `virtfnN` link back to the VF, so its index is unknown.
    #[error("device {pci}: PF {pf} has no virtfn link to this VF (under {})", pf_dir.display())]
    NoVirtfn {
        pci: PciAddr,
        pf: PciAddr,
        /// The PF's sysfs directory.
        pf_dir: PathBuf,
    },
    /// The PF has no netdev.
    #[error("device {pf}: PF has no netdev ({} is empty or missing); PF-side VF attributes (vlan, spoofchk, trust, rates, link_state) need one", path.display())]
    NoPfNetdev {
        pf: PciAddr,
        /// `<pf>/net`.
        path: PathBuf,
    },
    /// A directory exists but could not be listed.
    #[error("device {pci}: cannot list {}", source.path().display())]
    Sysfs {
        /// The device whose directory it is.
        pci: PciAddr,
        /// The error (it carries the path).
        #[source]
        source: SysfsError,
    },
}

impl VfDevError {
    /// The PCI address the error is about.
    pub fn pci(&self) -> PciAddr {
        match self {
            VfDevError::NoSuchDevice { pci, .. }
            | VfDevError::NotAVf { pci, .. }
            | VfDevError::NoVirtfn { pci, .. }
            | VfDevError::Sysfs { pci, .. } => *pci,
            VfDevError::NoPfNetdev { pf, .. } => *pf,
        }
    }
}

/// One VF as sysfs shows it.
#[derive(Debug, Clone)]
pub struct VfDev {
    pub pci: PciAddr,
    pub dir: PathBuf,
    /// The PF's address.
    pub pf: PciAddr,
    /// The PF's sysfs directory.
    pub pf_dir: PathBuf,
    /// VF index on the PF (`virtfnN`).
    pub index: u32,
    /// Its netdev name on the host, if it has one there.
    pub netdev: Option<String>,
    pub rdma: Vec<String>,
    /// The driver it is bound to (`<vf>/driver`), if any.
    pub driver: Option<String>,
}

/// Userspace (DPDK) drivers a VF can be bound to instead of its netdev
/// driver: it then has no netdev and is used from the pod through
/// `/dev/vfio` or UIO (the list sriov-cni checks).
pub const USERSPACE_DRIVERS: &[&str] = &["vfio-pci", "igb_uio", "uio_pci_generic"];

/// Entry names of `path`, sorted; a missing directory has none (a VF without
/// a netdev has no `net/`).
fn names(pci: PciAddr, path: &Path) -> Result<Vec<String>, VfDevError> {
    match sysfs::list_dir(path) {
        Ok(v) => Ok(v),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(source) => Err(VfDevError::Sysfs { pci, source }),
    }
}

/// The PCI address a link such as `physfn` or `virtfnN` points at.
fn link_pci(link: &Path) -> Option<PciAddr> {
    sysfs::link_name(link).ok()?.parse().ok()
}

impl VfDev {
    /// Reads VF `pci` under `roots`: its PF, index, host netdev and RDMA devices.
    pub fn lookup(roots: &Roots, pci: PciAddr) -> Result<Self, VfDevError> {
        let devices = roots.sys("bus/pci/devices");
        let dir = devices.join(pci.to_string());
        let physfn = dir.join("physfn");
        // The physfn link first: for a VF (the usual case) this is the only
        // check; existence of the device is asked only when it is missing.
        let pf = match link_pci(&physfn) {
            Some(pf) => pf,
            None if !dir.exists() => return Err(VfDevError::NoSuchDevice { pci, devices }),
            None => return Err(VfDevError::NotAVf { pci, path: physfn }),
        };
        let pf_dir = devices.join(pf.to_string());
        let index = names(pci, &pf_dir)?
            .iter()
            .filter_map(|n| n.strip_prefix("virtfn").and_then(|i| i.parse::<u32>().ok()))
            .find(|i| link_pci(&pf_dir.join(format!("virtfn{i}"))) == Some(pci))
            .ok_or_else(|| VfDevError::NoVirtfn { pci, pf, pf_dir: pf_dir.clone() })?;
        let netdev = names(pci, &dir.join("net"))?.into_iter().next();
        // RDMA devices sit under the VF (`infiniband/`, older kernels) or under
        // its auxiliary RDMA device (`mlx5_core.rdma.N/infiniband/`,
        // `iavf.rdma.N/infiniband/`, kernels with the auxiliary bus, 5.11+).
        let mut rdma = names(pci, &dir.join("infiniband"))?;
        for e in names(pci, &dir)? {
            if e.contains(".rdma.") {
                rdma.extend(names(pci, &dir.join(&e).join("infiniband"))?);
            }
        }
        let driver = sysfs::link_name(&dir.join("driver")).ok();
        Ok(Self { pci, dir, pf, pf_dir, index, netdev, rdma, driver })
    }

    /// Whether it is bound to a userspace driver ([`USERSPACE_DRIVERS`]).
    pub fn userspace(&self) -> bool {
        self.driver.as_deref().is_some_and(|d| USERSPACE_DRIVERS.contains(&d))
    }

    /// The PF's netdev name (needed only for PF-side VF attributes).
    pub fn pf_netdev(&self) -> Result<String, VfDevError> {
        let path = self.pf_dir.join("net");
        names(self.pf, &path)?.into_iter().next().ok_or(VfDevError::NoPfNetdev { pf: self.pf, path })
    }
}

/// The RDMA netns mode as sysfs shows it, without netlink:
/// `<sysfs>/module/ib_core/parameters/netns_mode` (`Y`: shared, `N`:
/// exclusive). `None`: ib_core not loaded, or contents not understood.
pub fn netns_mode_from_sysfs(roots: &Roots) -> Option<NetnsMode> {
    match sysfs::read_string(&roots.sys("module/ib_core/parameters/netns_mode")).ok()?.as_str() {
        "Y" | "y" | "1" => Some(NetnsMode::Shared),
        "N" | "n" | "0" => Some(NetnsMode::Exclusive),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{big_node, Sim};

    fn node() -> Sim {
        Sim::materialise(&big_node(1, 4)).unwrap()
    }

    #[test]
    fn a_vf_is_found_with_its_pf_index_netdev_and_rdma_device() {
        let sim = node();
        let inv = crate::discover(&sim.roots());
        let want = &inv.pfs[0].vfs[2];
        let vf = VfDev::lookup(&sim.roots(), want.pci).unwrap();
        assert_eq!((vf.pf, vf.index), (inv.pfs[0].pci, 2));
        assert_eq!(vf.netdev, want.netdev.as_ref().map(|n| n.name.clone()));
        assert_eq!(vf.rdma, want.rdma.iter().map(|r| r.name.clone()).collect::<Vec<_>>());
        assert!(!vf.rdma.is_empty());
        assert_eq!(vf.pf_netdev().unwrap(), inv.pfs[0].netdevs[0].name);
    }

    #[test]
    fn a_pf_is_not_a_vf_and_a_missing_address_is_no_device() {
        let sim = node();
        let pf: PciAddr = "0000:10:00.0".parse().unwrap();
        let e = VfDev::lookup(&sim.roots(), pf).unwrap_err();
        assert!(matches!(e, VfDevError::NotAVf { .. }), "{e}");
        assert!(e.to_string().contains("not an SR-IOV VF"), "{e}");
        let none: PciAddr = "0000:ee:00.1".parse().unwrap();
        let e = VfDev::lookup(&sim.roots(), none).unwrap_err();
        assert!(e.to_string().starts_with("device 0000:ee:00.1: no such PCI device"), "{e}");
        assert_eq!(e.pci(), none);
    }

    #[test]
    fn a_vfio_vf_has_no_netdev_and_a_userspace_driver() {
        let mut desc = big_node(1, 4);
        desc.adapters[0].pfs[0].vfs_vfio = vec![1];
        let sim = Sim::materialise(&desc).unwrap();
        let inv = crate::discover(&sim.roots());
        let (vfio, kernel) = (&inv.pfs[0].vfs[1], &inv.pfs[0].vfs[2]);
        let v = VfDev::lookup(&sim.roots(), vfio.pci).unwrap();
        assert_eq!((v.netdev.as_deref(), v.driver.as_deref(), v.userspace()), (None, Some("vfio-pci"), true));
        let k = VfDev::lookup(&sim.roots(), kernel.pci).unwrap();
        assert!(!k.userspace() && k.driver.is_some(), "{:?}", k.driver);
    }

    #[test]
    fn a_vf_without_a_netdev_has_none() {
        let mut sim = node();
        let vf0 = crate::discover(&sim.roots()).pfs[0].vfs[0].clone();
        sim.remove_netdev(&vf0.netdev.as_ref().unwrap().name).unwrap();
        assert_eq!(VfDev::lookup(&sim.roots(), vf0.pci).unwrap().netdev, None);
    }

    #[test]
    fn netns_mode_is_read_from_the_ib_core_parameter() {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots { sysfs: dir.path().into(), dev: dir.path().into() };
        assert_eq!(netns_mode_from_sysfs(&roots), None);
        let p = roots.sys("module/ib_core/parameters");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("netns_mode"), "N\n").unwrap();
        assert_eq!(netns_mode_from_sysfs(&roots), Some(NetnsMode::Exclusive));
        std::fs::write(p.join("netns_mode"), "Y\n").unwrap();
        assert_eq!(netns_mode_from_sysfs(&roots), Some(NetnsMode::Shared));
    }
}
