//! Finding one VF by PCI address: a handful of sysfs reads under the sysfs
//! root (`KUBE_RDMA_SYSFS_ROOT`), not a full discovery walk (ADD is a hot path).
//!
//! ```text
//! <sysfs>/bus/pci/devices/<vf>/physfn        -> ../<pf>
//! <sysfs>/bus/pci/devices/<pf>/virtfnN       -> ../<vf>
//! <sysfs>/bus/pci/devices/<vf>/net/<netdev>/
//! <sysfs>/bus/pci/devices/<vf>/infiniband/<rdma>/
//! ```

use std::path::{Path, PathBuf};

use nic::{PciAddr, Roots};

use crate::error::{Error, Result};

/// One VF as sysfs shows it.
#[derive(Debug, Clone)]
pub struct VfDev {
    /// VF address.
    pub pci: PciAddr,
    /// Its sysfs directory.
    pub dir: PathBuf,
    /// The PF's address.
    pub pf: PciAddr,
    /// The PF's sysfs directory.
    pub pf_dir: PathBuf,
    /// VF index on the PF (`virtfnN`).
    pub index: u32,
    /// Its netdev name on the host, if it has one there.
    pub netdev: Option<String>,
    /// Its RDMA devices.
    pub rdma: Vec<String>,
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn link_target_pci(link: &Path) -> Option<PciAddr> {
    std::fs::read_link(link).ok()?.file_name()?.to_str()?.parse().ok()
}

impl VfDev {
    /// Reads VF `pci` under `roots`.
    pub fn lookup(roots: &Roots, pci: PciAddr) -> Result<Self> {
        let devices = roots.sys("bus/pci/devices");
        let dir = devices.join(pci.to_string());
        let err = |why: String| Error::Device { pci: pci.to_string(), why };
        if !dir.exists() {
            return Err(err(format!("no such PCI device under {}", devices.display())));
        }
        let pf = link_target_pci(&dir.join("physfn")).ok_or_else(|| {
            err("is not an SR-IOV VF (no physfn link); deviceID must name a VF, not a PF or another device".into())
        })?;
        let pf_dir = devices.join(pf.to_string());
        let index = entries(&pf_dir)
            .iter()
            .filter_map(|n| n.strip_prefix("virtfn").and_then(|i| i.parse::<u32>().ok()))
            .find(|i| link_target_pci(&pf_dir.join(format!("virtfn{i}"))) == Some(pci))
            .ok_or_else(|| err(format!("PF {pf} has no virtfn link to this VF")))?;
        let netdev = entries(&dir.join("net")).into_iter().next();
        // RDMA devices sit under the VF (`infiniband/`, older kernels) or under
        // its auxiliary RDMA device (`mlx5_core.rdma.N/infiniband/`,
        // `iavf.rdma.N/infiniband/`, kernels with the auxiliary bus, 5.11+).
        let mut rdma = entries(&dir.join("infiniband"));
        for e in entries(&dir) {
            if e.contains(".rdma.") {
                rdma.extend(entries(&dir.join(&e).join("infiniband")));
            }
        }
        Ok(Self { pci, dir, pf, pf_dir, index, netdev, rdma })
    }

    /// The PF's netdev name (needed only for PF-side VF attributes).
    pub fn pf_netdev(&self) -> Result<String> {
        entries(&self.pf_dir.join("net")).into_iter().next().ok_or_else(|| Error::Device {
            pci: self.pf.to_string(),
            why:
                "PF has no netdev; PF-side VF attributes (vlan, spoofchk, trust, rates, link_state) need one"
                    .into(),
        })
    }
}

/// Reads the RDMA netns mode the way the kernel exposes it without netlink:
/// `<sysfs>/module/ib_core/parameters/netns_mode` (`Y`: shared, `N`: exclusive).
pub fn netns_mode_from_sysfs(roots: &Roots) -> Option<nic::simdesc::NetnsMode> {
    let s = std::fs::read_to_string(roots.sys("module/ib_core/parameters/netns_mode")).ok()?;
    match s.trim() {
        "Y" | "y" | "1" => Some(nic::simdesc::NetnsMode::Shared),
        "N" | "n" | "0" => Some(nic::simdesc::NetnsMode::Exclusive),
        _ => None,
    }
}
