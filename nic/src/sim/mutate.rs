//! Live mutations of a materialised node, each changing the tree the way the
//! kernel would (a link change, `sriov_numvfs`, a VF removal, a netdev moved
//! into a pod's netns).

use std::path::PathBuf;

use super::layout::{vf_func, Alloc, Func, Role};
use super::tree::io_err;
use super::{Sim, SimError};
use crate::pci::PciAddr;

impl Sim {
    /// Sets a netdev's `operstate` as a link change would: `carrier`, `speed`
    /// (-1 without link) and the RDMA port `state`/`phys_state` follow.
    pub fn set_operstate(&mut self, netdev: &str, state: &str) -> Result<(), SimError> {
        let w = self.writer();
        let f = self.func_by_netdev(netdev)?;
        if let Some(n) = f.net.as_mut() {
            n.operstate = state.to_string();
        }
        let f = f.clone();
        w.write_link_state(&f)?;
        w.write_port(&f)?;
        for p in self.desc.adapters.iter_mut().flat_map(|a| a.pfs.iter_mut()) {
            if p.netdev == netdev {
                p.operstate = state.to_string();
            }
        }
        self.save_desc()
    }

    /// Writes `sriov_numvfs` as `echo 0; echo n` would: all VFs of the PF go
    /// (devices, `virtfn` links, netdevs, RDMA devices, char devices), then `n`
    /// new ones come, numbered lowest-free like the kernel.
    pub fn set_num_vfs(&mut self, pf_bdf: PciAddr, n: u32) -> Result<(), SimError> {
        let w = self.writer();
        let pf = self.funcs.get(&pf_bdf).ok_or_else(|| SimError::NotFound(format!("PF {pf_bdf}")))?.clone();
        let Role::Pf { total, .. } = pf.role else {
            return Err(SimError::Refused(format!("{pf_bdf} has no sriov_numvfs (not an SR-IOV PF)")));
        };
        if n > total {
            // The kernel answers ERANGE (sriov_numvfs_store).
            return Err(SimError::Refused(format!("{pf_bdf}: {n} VFs > sriov_totalvfs {total}")));
        }
        let old: Vec<PciAddr> = self
            .funcs
            .values()
            .filter(|f| matches!(f.role, Role::Vf { pf, .. } if pf == pf_bdf))
            .map(|f| f.bdf)
            .collect();
        for bdf in old {
            if let Some(f) = self.funcs.remove(&bdf) {
                w.remove_func(&f);
            }
        }
        let pf_dir = w.sys.join(pf.dir());
        for name in crate::sysfs::list_dir(&pf_dir).unwrap_or_default() {
            if name.starts_with("virtfn") {
                let _ = std::fs::remove_file(pf_dir.join(name));
            }
        }
        let pdesc = self
            .desc
            .adapters
            .iter_mut()
            .flat_map(|a| a.pfs.iter_mut())
            .find(|p| p.bdf == pf_bdf)
            .ok_or_else(|| SimError::NotFound(format!("PF {pf_bdf} in the description")))?;
        pdesc.vfs = n;
        pdesc.vfs_without_netdev.retain(|i| *i < n);
        pdesc.vfs_vfio.retain(|i| *i < n);
        let pdesc = pdesc.clone();
        if let Some(Func { role: Role::Pf { num, .. }, .. }) = self.funcs.get_mut(&pf_bdf) {
            *num = n;
        }
        let pf = self.funcs[&pf_bdf].clone();
        let mut alloc = Alloc::from_funcs(self.funcs.values());
        for i in 0..n {
            let vf = vf_func(&pf, &pdesc, i, &mut alloc).map_err(SimError::Refused)?;
            if let Some(other) = self.funcs.get(&vf.bdf) {
                return Err(SimError::Refused(format!("VF {i} of {pf_bdf} would reuse {}", other.bdf)));
            }
            w.write_func(&vf)?;
            self.funcs.insert(vf.bdf, vf);
        }
        w.file(&pf.dir().join("sriov_numvfs"), n.to_string())?;
        self.save_desc()
    }

    /// Removes a VF device as `echo 1 > …/remove` does: the device, its
    /// netdev, RDMA and char devices go; the PF's `virtfnN` link stays, dangling.
    pub fn remove_vf(&mut self, bdf: PciAddr) -> Result<(), SimError> {
        match self.funcs.get(&bdf) {
            Some(Func { role: Role::Vf { .. }, .. }) => {}
            _ => return Err(SimError::NotFound(format!("VF {bdf}"))),
        }
        let f = self.funcs.remove(&bdf).expect("checked above");
        self.writer().remove_func(&f);
        Ok(())
    }

    /// Removes `/dev/infiniband/<name>` (sysfs still shows the device).
    pub fn remove_char_dev(&mut self, name: &str) -> Result<(), SimError> {
        let p = self.roots().dev.join("infiniband").join(name);
        if name.contains('/') || std::fs::symlink_metadata(&p).is_err() {
            return Err(SimError::NotFound(format!("/dev/infiniband/{name}")));
        }
        std::fs::remove_file(&p).map_err(io_err(&p))?;
        self.removed_char_devs.insert(name.to_string());
        Ok(())
    }

    /// Takes a netdev off the host as a move into a pod's netns does: its
    /// `net/<if>` directory and `/sys/class/net` link go, its IPv4 GIDs go
    /// (addresses do not follow a netns move); the RDMA device stays (shared mode).
    pub fn remove_netdev(&mut self, name: &str) -> Result<(), SimError> {
        let w = self.writer();
        let f = self.func_by_netdev(name)?;
        let n = f.net.as_mut().expect("found by netdev");
        if !n.present {
            return Err(SimError::NotFound(format!("netdev {name} on the host (already moved)")));
        }
        n.present = false;
        let f = f.clone();
        w.remove(&PathBuf::from("class/net").join(name));
        w.remove(&f.dir().join("net").join(name));
        w.write_port(&f)
    }

    /// Brings a netdev removed by [`Sim::remove_netdev`] (or absent from the
    /// start via `vfsWithoutNetdev`) back onto the host, with its address.
    pub fn add_netdev_back(&mut self, name: &str) -> Result<(), SimError> {
        let w = self.writer();
        let f = self.func_by_netdev(name)?;
        let n = f.net.as_mut().expect("found by netdev");
        if n.present {
            return Err(SimError::Refused(format!("netdev {name} is already on the host")));
        }
        n.present = true;
        let f = f.clone();
        w.write_net(&f)?;
        w.write_port(&f)
    }

    /// Moves VF `bdf` into a pod as the CNI does: its netdev leaves the host
    /// (`net/<if>` and `/sys/class/net/<if>` go; the `net` directory stays,
    /// empty) and, in exclusive RDMA netns mode, so does its RDMA device
    /// (`infiniband/<dev>` and `/sys/class/infiniband/<dev>` go). Both classes
    /// are namespace-tagged; the PCI function, its driver,
    /// `infiniband_verbs/uverbsN` and `/dev/infiniband/*` are not, and stay.
    /// In shared mode the RDMA device stays visible.
    pub fn move_vf_into_pod(&mut self, bdf: PciAddr) -> Result<(), SimError> {
        let exclusive = self.desc.rdma_netns_mode == crate::inventory::NetnsMode::Exclusive;
        let w = self.writer();
        let f = self.vf_mut(bdf)?;
        let Some(n) = f.net.as_mut().filter(|n| n.present) else {
            return Err(SimError::Refused(format!("VF {bdf} has no netdev on the host to move")));
        };
        n.present = false;
        let name = n.name.clone();
        let hide = exclusive && f.rdma.as_ref().is_some_and(|r| !r.in_other_netns);
        if hide {
            w.hide_ib_dev(f);
            if let Some(r) = f.rdma.as_mut() {
                r.in_other_netns = true;
            }
        }
        let f = f.clone();
        w.remove(&PathBuf::from("class/net").join(&name));
        w.remove(&f.dir().join("net").join(&name));
        w.write_port(&f)
    }

    /// Brings VF `bdf` back from a pod (its netns deleted, or the CNI's DEL):
    /// netdev and RDMA device are on the host again.
    pub fn return_vf_from_pod(&mut self, bdf: PciAddr) -> Result<(), SimError> {
        let w = self.writer();
        let f = self.vf_mut(bdf)?;
        let Some(n) = f.net.as_mut().filter(|n| !n.present) else {
            return Err(SimError::Refused(format!("VF {bdf} is not in a pod (its netdev is on the host)")));
        };
        n.present = true;
        if let Some(r) = f.rdma.as_mut() {
            r.in_other_netns = false;
        }
        let f = f.clone();
        w.write_net(&f)?;
        w.write_ib_dev(&f)
    }

    /// Makes VF `bdf`'s RDMA device leave no trace on the host once the device
    /// is in a pod, as some driver layouts do: its auxiliary device loses the
    /// `infiniband_verbs`/`infiniband_mad` siblings (which stay on a default
    /// mlx5 layout, [`Sim::move_vf_into_pod`]), and the `infiniband_verbs` class
    /// goes. Discovery then cannot tell the VF has an RDMA device at all.
    pub fn hide_rdma_trace(&mut self, bdf: PciAddr) -> Result<(), SimError> {
        let roots = self.roots();
        let dir = roots.sys(format!("bus/pci/devices/{bdf}"));
        let aux = std::fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().contains(".rdma."))
            .ok_or_else(|| SimError::Refused(format!("VF {bdf} has no RDMA auxiliary device")))?
            .path();
        for sub in ["infiniband_verbs", "infiniband_mad"] {
            let p = aux.join(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
            }
        }
        let class = roots.sys("class/infiniband_verbs");
        match std::fs::remove_dir_all(&class) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(&class)(e)),
            _ => Ok(()),
        }
    }

    fn vf_mut(&mut self, bdf: PciAddr) -> Result<&mut Func, SimError> {
        match self.funcs.get_mut(&bdf) {
            Some(f) if matches!(f.role, Role::Vf { .. }) => Ok(f),
            _ => Err(SimError::NotFound(format!("VF {bdf}"))),
        }
    }
}
