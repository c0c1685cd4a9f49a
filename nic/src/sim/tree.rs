//! The tree writer: files, symlinks and char devices of planned functions
//! under `<dir>/sys` and `<dir>/dev`.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use super::layout::{
    fmt_gid, fmt_mac, umad_dev, uverbs_dev, Func, RdmaPlan, Role, GID_TBL_LEN, VFIO_CONTAINER_DEV,
    VFIO_GROUP_MAJOR, VFIO_PCI,
};
use super::SimError;
use crate::inventory::RdmaProtocol;

/// The port counters ib_core exposes under `ports/<p>/counters/` (drivers/infiniband/core/sysfs.c,
/// `pma_table`) that the agent exports; a real port has a few more (`port_xmit_wait`, …).
const PORT_COUNTERS: [&str; 9] = [
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "symbol_error",
    "link_downed",
    "port_rcv_errors",
    "port_xmit_discards",
    "link_error_recovery",
];

// ---------------------------------------------------------------------------------------------
// Writing the tree.

pub(super) struct Writer {
    pub(super) sys: PathBuf,
    pub(super) dev: PathBuf,
    pub(super) mknod: bool,
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
    move |source| SimError::Io { path: path.to_path_buf(), source }
}

/// `n` times `../`: from a directory `n` levels below `sys/` back to `sys/`.
pub(super) fn ups(n: usize) -> String {
    "../".repeat(n)
}

pub(super) fn depth(rel: &Path) -> usize {
    rel.components().count()
}

impl Writer {
    pub(super) fn mkdir(&self, rel: &Path) -> Result<(), SimError> {
        let p = self.sys.join(rel);
        std::fs::create_dir_all(&p).map_err(io_err(&p))
    }
    pub(super) fn file(&self, rel: &Path, contents: impl AsRef<str>) -> Result<(), SimError> {
        let p = self.sys.join(rel);
        let mut s = contents.as_ref().to_string();
        s.push('\n');
        match std::fs::write(&p, &s) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
                }
                std::fs::write(&p, &s).map_err(io_err(&p))
            }
            r => r.map_err(io_err(&p)),
        }
    }
    /// A symlink at `rel` whose target is relative to the link's directory.
    pub(super) fn link(&self, rel: &Path, target: impl AsRef<Path>) -> Result<(), SimError> {
        let p = self.sys.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p).map_err(io_err(&p))
    }
    /// A link at `sys/<link_rel>` pointing at `sys/<to_rel>`, written relative.
    pub(super) fn link_to(&self, link_rel: &Path, to_rel: &Path) -> Result<(), SimError> {
        let up = depth(link_rel) - 1;
        self.link(link_rel, format!("{}{}", ups(up), to_rel.display()))
    }
    pub(super) fn remove(&self, rel: &Path) {
        let p = self.sys.join(rel);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&p);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&p);
            }
            Err(_) => {}
        }
    }
    pub(super) fn char_dev(&self, name: &str, mm: (u32, u32)) -> Result<(), SimError> {
        self.char_dev_in("infiniband", name, mm)
    }
    /// A character device `<dev>/<sub>/<name>`.
    pub(super) fn char_dev_in(
        &self,
        sub: &str,
        name: &str,
        (major, minor): (u32, u32),
    ) -> Result<(), SimError> {
        let dir = self.dev.join(sub);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let p = dir.join(name);
        let _ = std::fs::remove_file(&p);
        if self.mknod {
            let dev = nix::sys::stat::makedev(major as u64, minor as u64);
            let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
            if nix::sys::stat::mknod(&p, nix::sys::stat::SFlag::S_IFCHR, mode, dev).is_ok() {
                return Ok(());
            }
        }
        // Not root (or mknod refused, e.g. in a user namespace): a regular file stands in.
        std::fs::write(&p, format!("{major}:{minor}\n")).map_err(io_err(&p))
    }

    pub(super) fn write_func(&self, f: &Func) -> Result<(), SimError> {
        let dir = f.dir();
        self.mkdir(&dir)?;
        self.file(&dir.join("vendor"), format!("0x{:04x}", f.vendor))?;
        self.file(&dir.join("device"), format!("0x{:04x}", f.device))?;
        self.file(&dir.join("class"), format!("0x{:06x}", f.class))?;
        self.file(&dir.join("numa_node"), f.numa.map(|n| n.to_string()).unwrap_or("-1".into()))?;
        if let Some(drv) = &f.driver {
            let drv_dir = PathBuf::from("bus/pci/drivers").join(drv);
            self.mkdir(&drv_dir)?;
            self.link_to(&dir.join("driver"), &drv_dir)?;
            self.link_to(&drv_dir.join(f.bdf.to_string()), &dir)?;
        }
        self.link_to(&PathBuf::from("bus/pci/devices").join(f.bdf.to_string()), &dir)?;
        if let Some(g) = f.iommu_group {
            let group = PathBuf::from("kernel/iommu_groups").join(g.to_string());
            self.file(&group.join("type"), "DMA")?;
            self.link_to(&dir.join("iommu_group"), &group)?;
            self.link_to(&group.join("devices").join(f.bdf.to_string()), &dir)?;
            if f.driver.as_deref() == Some(VFIO_PCI) {
                self.char_dev_in("vfio", &g.to_string(), (VFIO_GROUP_MAJOR, g))?;
                self.char_dev_in("vfio", "vfio", VFIO_CONTAINER_DEV)?;
            }
        }
        match &f.role {
            Role::Pf { total, num, offset, .. } => {
                self.file(&dir.join("sriov_totalvfs"), total.to_string())?;
                self.file(&dir.join("sriov_numvfs"), num.to_string())?;
                self.file(&dir.join("sriov_offset"), offset.to_string())?;
                self.file(&dir.join("sriov_stride"), "1")?;
                self.file(&dir.join("sriov_drivers_autoprobe"), "1")?;
            }
            Role::Vf { pf, index } => {
                self.link(&dir.join("physfn"), format!("../{pf}"))?;
                self.link(
                    &f.parent.join(pf.to_string()).join(format!("virtfn{index}")),
                    format!("../{}", f.bdf),
                )?;
            }
            _ => {}
        }
        for aux in &f.aux_dirs {
            self.mkdir(&dir.join(aux))?;
            self.link_to(&PathBuf::from("bus/auxiliary/devices").join(aux), &dir.join(aux))?;
        }
        self.write_net(f)?;
        self.write_rdma(f)?;
        Ok(())
    }

    pub(super) fn write_net(&self, f: &Func) -> Result<(), SimError> {
        let Some(n) = f.net.as_ref().filter(|n| n.present) else { return Ok(()) };
        let nd = f.dir().join("net").join(&n.name);
        self.mkdir(&nd)?;
        self.file(&nd.join("ifindex"), n.ifindex.to_string())?;
        self.file(&nd.join("mtu"), n.mtu.to_string())?;
        self.file(&nd.join("address"), fmt_mac(&n.mac))?;
        self.file(&nd.join("type"), "1")?; // ARPHRD_ETHER
        self.write_link_state(f)?;
        self.link(&nd.join("device"), format!("../../../{}", f.bdf))?;
        self.link_to(&PathBuf::from("class/net").join(&n.name), &nd)?;
        if let Some(r) = &n.ofed {
            for p in 0..8u8 {
                let on = if r.ecn.contains(&p) { "1" } else { "0" };
                self.file(&nd.join(format!("ecn/roce_np/enable/{p}")), on)?;
                self.file(&nd.join(format!("ecn/roce_rp/enable/{p}")), on)?;
            }
            self.file(&nd.join("ecn/roce_np/cnp_dscp"), r.cnp_dscp.to_string())?;
            self.file(&nd.join("ecn/roce_np/cnp_802p_prio"), r.cnp_priority.to_string())?;
            self.file(&nd.join("qos/trust"), r.trust.as_str())?;
        }
        Ok(())
    }

    /// operstate, carrier and speed: speed reads -1 (SPEED_UNKNOWN) without carrier.
    pub(super) fn write_link_state(&self, f: &Func) -> Result<(), SimError> {
        let Some(n) = f.net.as_ref().filter(|n| n.present) else { return Ok(()) };
        let nd = f.dir().join("net").join(&n.name);
        let up = n.operstate == "up";
        self.file(&nd.join("operstate"), &n.operstate)?;
        self.file(&nd.join("carrier"), if up { "1" } else { "0" })?;
        self.file(&nd.join("speed"), if up { n.speed.to_string() } else { "-1".into() })
    }

    pub(super) fn write_rdma(&self, f: &Func) -> Result<(), SimError> {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return Ok(()) };
        if let Some(aux) = &r.aux {
            self.mkdir(&base)?;
            self.link_to(&PathBuf::from("bus/auxiliary/devices").join(aux), &base)?;
        }
        self.write_ib_dev(f)?;
        let uv = format!("uverbs{}", r.uverbs);
        let uvd = base.join("infiniband_verbs").join(&uv);
        let (ma, mi) = uverbs_dev(r.uverbs);
        self.file(&uvd.join("ibdev"), &r.name)?;
        self.file(&uvd.join("dev"), format!("{ma}:{mi}"))?;
        self.file(&uvd.join("abi_version"), "1")?;
        self.link_to(&PathBuf::from("class/infiniband_verbs").join(&uv), &uvd)?;
        self.char_dev(&uv, (ma, mi))?;
        if let Some(m) = r.mad {
            for (kind, issm) in [("umad", false), ("issm", true)] {
                let name = format!("{kind}{m}");
                let d = base.join("infiniband_mad").join(&name);
                let (ma, mi) = umad_dev(m, issm);
                self.file(&d.join("ibdev"), &r.name)?;
                self.file(&d.join("port"), "1")?;
                self.file(&d.join("dev"), format!("{ma}:{mi}"))?;
                self.link_to(&PathBuf::from("class/infiniband_mad").join(&name), &d)?;
                self.char_dev(&name, (ma, mi))?;
            }
        }
        if let Some((mode, tos)) = &r.configfs {
            let c = PathBuf::from("kernel/config/rdma_cm").join(&r.name).join("ports/1");
            self.file(&c.join("default_roce_mode"), mode)?;
            self.file(&c.join("default_roce_tos"), tos.to_string())?;
        }
        Ok(())
    }

    /// The RDMA device in the namespace-tagged `infiniband` class: its directory
    /// under the function (or aux device) and its `/sys/class/infiniband` link.
    /// A device in another netns shows neither; the `infiniband` directory
    /// itself (the class's glue directory) stays, empty.
    pub(super) fn write_ib_dev(&self, f: &Func) -> Result<(), SimError> {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return Ok(()) };
        if r.in_other_netns {
            return self.mkdir(&base.join("infiniband"));
        }
        let ib = base.join("infiniband").join(&r.name);
        self.mkdir(&ib)?;
        self.file(&ib.join("node_guid"), &r.guid)?;
        self.file(&ib.join("node_type"), node_type(r.protocol))?;
        self.link(&ib.join("device"), "../../")?;
        self.link_to(&PathBuf::from("class/infiniband").join(&r.name), &ib)?;
        self.write_port(f)
    }

    /// Takes the RDMA device out of the host's `infiniband` class (moved into
    /// another netns); its char devices and `infiniband_verbs` entry stay.
    pub(super) fn hide_ib_dev(&self, f: &Func) {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return };
        self.remove(&PathBuf::from("class/infiniband").join(&r.name));
        self.remove(&base.join("infiniband").join(&r.name));
    }

    /// Port 1 of the function's RDMA device: state follows the netdev, GIDs follow its addresses.
    pub(super) fn write_port(&self, f: &Func) -> Result<(), SimError> {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return Ok(()) };
        if r.in_other_netns {
            return Ok(());
        }
        let port = base.join("infiniband").join(&r.name).join("ports/1");
        let up = f.net.as_ref().is_some_and(|n| n.operstate == "up");
        self.file(&port.join("state"), if up { "4: ACTIVE" } else { "1: DOWN" })?;
        self.file(&port.join("phys_state"), if up { "5: LinkUp" } else { "3: Disabled" })?;
        self.file(&port.join("link_layer"), "Ethernet")?;
        let gbps = f.net.as_ref().map(|n| n.speed / 1000).unwrap_or(0);
        self.file(&port.join("rate"), format!("{gbps} Gb/sec ({}X EDR)", if gbps >= 100 { 4 } else { 1 }))?;
        let entries = f.gid_entries();
        let len = if r.protocol == RdmaProtocol::Iwarp { 1 } else { GID_TBL_LEN };
        for i in 0..len {
            let e = entries.iter().find(|e| e.index == i);
            self.file(
                &port.join(format!("gids/{i}")),
                fmt_gid(e.map(|e| e.gid).unwrap_or(Ipv6Addr::UNSPECIFIED)),
            )?;
            // Empty entries: the kernel answers EINVAL; an empty file is the closest a plain file gets.
            self.file(&port.join(format!("gid_attrs/types/{i}")), e.map(|e| e.kind).unwrap_or(""))?;
            self.file(&port.join(format!("gid_attrs/ndevs/{i}")), e.map(|e| e.ndev.as_str()).unwrap_or(""))?;
        }
        if r.hw_counters {
            for c in [
                "np_cnp_sent",
                "rp_cnp_handled",
                "np_ecn_marked_roce_packets",
                "out_of_sequence",
                "packet_seq_err",
            ] {
                self.file(&port.join("hw_counters").join(c), "0")?;
            }
            // mlx5's `lifespan`: how long (ms) the driver caches the counters, a setting.
            self.file(&port.join("hw_counters/lifespan"), "10")?;
            // ib_core's port counters (`counters/`), present where the driver answers
            // performance MADs (mlx5's process_mad; irdma and rxe have none).
            for c in PORT_COUNTERS {
                self.file(&port.join("counters").join(c), "0")?;
            }
        }
        Ok(())
    }

    /// Removes a function and everything pointing at it, except its PF's
    /// `virtfnN` link (the kernel leaves that dangling when a VF is removed alone).
    pub(super) fn remove_func(&self, f: &Func) {
        if let Some(n) = &f.net {
            self.remove(&PathBuf::from("class/net").join(&n.name));
        }
        if let Some(r) = &f.rdma {
            self.remove_rdma_links(r);
        }
        for aux in &f.aux_dirs {
            self.remove(&PathBuf::from("bus/auxiliary/devices").join(aux));
        }
        if let Some(drv) = &f.driver {
            self.remove(&PathBuf::from("bus/pci/drivers").join(drv).join(f.bdf.to_string()));
        }
        if let Some(g) = f.iommu_group {
            self.remove(&PathBuf::from("kernel/iommu_groups").join(g.to_string()));
            let _ = std::fs::remove_file(self.dev.join("vfio").join(g.to_string()));
        }
        self.remove(&PathBuf::from("bus/pci/devices").join(f.bdf.to_string()));
        self.remove(&f.dir());
    }

    pub(super) fn remove_rdma_links(&self, r: &RdmaPlan) {
        self.remove(&PathBuf::from("class/infiniband").join(&r.name));
        let uv = format!("uverbs{}", r.uverbs);
        self.remove(&PathBuf::from("class/infiniband_verbs").join(&uv));
        let _ = std::fs::remove_file(self.dev.join("infiniband").join(&uv));
        if let Some(m) = r.mad {
            for kind in ["umad", "issm"] {
                self.remove(&PathBuf::from("class/infiniband_mad").join(format!("{kind}{m}")));
                let _ = std::fs::remove_file(self.dev.join("infiniband").join(format!("{kind}{m}")));
            }
        }
        if let Some(aux) = &r.aux {
            self.remove(&PathBuf::from("bus/auxiliary/devices").join(aux));
        }
        self.remove(&PathBuf::from("kernel/config/rdma_cm").join(&r.name));
    }
}

/// `node_type` as ib core prints it (`node_type_show`): RDMA_NODE_IB_CA or RDMA_NODE_RNIC.
fn node_type(p: RdmaProtocol) -> &'static str {
    if p == RdmaProtocol::Iwarp {
        "4: RNIC"
    } else {
        "1: CA"
    }
}
