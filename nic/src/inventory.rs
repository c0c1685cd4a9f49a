//! The node model: what discovery found, as plain data.
//!
//! Every field that could not be read is `None` (or empty) **and** explained
//! by a [`Problem`] on the same device, so a reader can always say
//! "unknown, because …". Nothing here does I/O.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::pci::PciAddr;

/// Everything discovery found on one node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// SR-IOV physical functions (devices with `sriov_totalvfs`), by PCI address.
    pub pfs: Vec<Pf>,
    /// RDMA devices that are not on an SR-IOV PF or VF: PCI HCAs without
    /// SR-IOV (shared mode) and virtual devices such as `rxe0` (no PCI parent).
    pub hcas: Vec<Hca>,
    /// GPUs (PCI class 0x0302 / 0x0300 from vendor 10de), for GPU affinity.
    pub gpus: Vec<Gpu>,
    /// `/dev/infiniband/rdma_cm` exists under the dev root (as a character device).
    pub rdma_cm: bool,
    /// `/dev/vfio/vfio`, the VFIO container device, exists under the dev root
    /// (as a character device).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vfio_container: bool,
    /// Devices that were seen but could not be modelled at all, with the reason.
    pub skipped: Vec<Skipped>,
    /// GID tables were not read ([`crate::discover::Scope::gid_tables`]): every
    /// port's `gids` is empty by choice, not because the table is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gid_tables_skipped: bool,
    /// The `roce_ena` parameter of an older, out-of-tree irdma
    /// (`/sys/module/irdma/parameters/roce_ena`), which chose RoCEv2 (true) or
    /// iWARP (false, its default) for every E810 port before ice's devlink
    /// parameters `enable_roce`/`enable_iwarp` existed. `None`: no such
    /// parameter (upstream irdma, or irdma not loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irdma_roce_ena: Option<bool>,
}

/// A field that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// What is unknown, e.g. `numa_node`, `virtfn3`, `driver`.
    pub field: String,
    /// Why, with the path involved, e.g. `"/sys/.../numa_node": not a number: "abc"`.
    pub reason: String,
}

/// A device discovery gave up on, e.g. a `virtfn` link pointing nowhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The device as far as it is known: a PCI address, a link name, an RDMA device name.
    pub device: String,
    pub reason: String,
}

/// A network interface as sysfs shows it (`/sys/class/net/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Netdev {
    pub name: String,
    pub ifindex: Option<u32>,
    /// Link speed in Mb/s (`speed`; unknown when the link is down).
    pub speed_mbps: Option<u32>,
    /// `operstate`: up, down, lowerlayerdown, unknown, …
    pub operstate: Option<String>,
    pub mtu: Option<u32>,
    /// `address` (MAC), lower case.
    pub mac: Option<String>,
    /// Link layer from `type` (1 = Ethernet, 32 = InfiniBand).
    pub link_layer: Option<LinkLayer>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// Link layer of a netdev or an RDMA port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkLayer {
    /// Ethernet (RoCE).
    Ethernet,
    InfiniBand,
}

/// An SR-IOV physical function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pf {
    pub pci: PciAddr,
    /// PCI vendor id (`vendor`).
    pub vendor: Option<u16>,
    /// PCI device id (`device`).
    pub device: Option<u16>,
    /// Bound kernel driver (`driver` link target name).
    pub driver: Option<String>,
    /// `sriov_totalvfs`.
    pub total_vfs: Option<u32>,
    /// `sriov_numvfs`.
    pub num_vfs: Option<u32>,
    /// NUMA node (`numa_node`; -1 in sysfs means none and is `None` without a problem).
    pub numa_node: Option<u32>,
    /// Netdevs under `<pci>/net/`.
    pub netdevs: Vec<Netdev>,
    /// RDMA devices of the PF (direct `infiniband/` or via an auxiliary device).
    pub rdma: Vec<RdmaDev>,
    /// The PF's auxiliary devices for RDMA (`ice.roce.0`, `ice.iwarp.1`,
    /// `mlx5_core.rdma.0`), with or without an RDMA device registered under
    /// them: ice plugs `ice.<protocol>.N` whether or not irdma is loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma_aux: Vec<String>,
    /// The RDMA protocol the PF's RDMA function runs: ice's auxiliary device
    /// kind first (ice names it after the mode it plugged it in,
    /// `ice_plug_aux_dev`), else its RDMA device's ([`RdmaDev::protocol`]), else
    /// [`RdmaProtocol::None`]. `None` (the `Option`): not known, with a problem.
    #[serde(default)]
    pub rdma_protocol: Option<RdmaProtocol>,
    /// PCIe bridges between this function and the root complex, nearest first
    /// (the last one is the root port).
    pub upstream: Vec<PciAddr>,
    /// Virtual functions, by VF index.
    pub vfs: Vec<Vf>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// An SR-IOV virtual function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vf {
    /// VF index on its PF (the `N` of `virtfnN`).
    pub index: u32,
    pub pci: PciAddr,
    /// PCI address of the PF.
    pub pf: PciAddr,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    /// Bound driver; `None` when unbound. A userspace driver (vfio-pci) is a name here too.
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
    /// The VF netdev on the host; `None` when moved into a pod or bound to a userspace driver.
    pub netdev: Option<Netdev>,
    /// RDMA devices of the VF, including ones moved into another network
    /// namespace ([`RdmaDev::in_other_netns`]).
    pub rdma: Vec<RdmaDev>,
    /// For a VF bound to `vfio-pci`: its VFIO group device, `/dev/vfio/<N>` for
    /// the IOMMU group `N` its `iommu_group` link names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfio: Option<CharDev>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

impl Vf {
    /// The VF's netdev and RDMA devices are not on the host but its function,
    /// driver and RDMA char devices are: the CNI moved them into a pod's network
    /// namespace. (The `net` and `infiniband` sysfs classes are
    /// namespace-tagged; `infiniband_verbs` and `/dev/infiniband` are not.) In
    /// shared RDMA netns mode only the netdev moves; the RDMA device stays visible.
    pub fn moved_into_netns(&self) -> bool {
        self.netdev.is_none()
            && self.driver.is_some()
            && !self.rdma.is_empty()
            && self.rdma.iter().all(|r| r.uverbs.as_ref().is_some_and(|u| u.present))
    }
}

/// How an RDMA device hangs off its PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RdmaVia {
    /// `<pci>/infiniband/<dev>` directly.
    Direct,
    /// Through an auxiliary device: `<pci>/<aux>/infiniband/<dev>`, aux named like
    /// `mlx5_core.rdma.3`, `ice.roce.0`, `ice.iwarp.0`, `iavf.rdma.1`.
    Aux(String),
    /// No PCI parent at all (Soft-RoCE `rxe`, `siw`).
    Virtual,
}

/// An RDMA device (`/sys/class/infiniband/<name>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RdmaDev {
    /// Device name, e.g. `mlx5_3`, `rocep59s0f0v1`, `irdma0`.
    pub name: String,
    pub via: RdmaVia,
    /// Node GUID (`node_guid`).
    pub node_guid: Option<String>,
    /// The verbs char device (`uverbsN`).
    pub uverbs: Option<CharDev>,
    /// Management char devices (`umadN`), one per port.
    pub umad: Vec<CharDev>,
    /// Subnet management char devices (`issmN`), one per port.
    pub issm: Vec<CharDev>,
    /// Ports, by number (1-based).
    pub ports: Vec<RdmaPort>,
    /// The protocol it speaks, from `node_type` (`4: RNIC` is iWARP; a `1: CA`
    /// speaks RoCE on an Ethernet port, InfiniBand on an InfiniBand one).
    /// `None`: unreadable, with a problem.
    #[serde(default)]
    pub protocol: Option<RdmaProtocol>,
    /// The device is not in this network namespace: in exclusive RDMA netns
    /// mode it was moved into another one (a pod's), so the namespace-tagged
    /// `infiniband` class hides it. It is known only from its char devices
    /// (`infiniband_verbs/uverbsN/ibdev` names it): `node_guid` is `None` and
    /// `ports` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_other_netns: bool,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// The RDMA protocol of a port's RDMA function. An E810 port (irdma) runs
/// either RoCEv2 or iWARP, chosen per PF; ConnectX runs RoCE on Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RdmaProtocol {
    /// RoCE (v2 on routed fabrics; mlx5 and irdma RoCE devices also speak v1).
    #[serde(rename = "RoCEv2")]
    RoceV2,
    /// iWARP (RDMA over TCP).
    #[serde(rename = "iWARP")]
    Iwarp,
    /// InfiniBand (an HCA port in InfiniBand mode).
    #[serde(rename = "InfiniBand")]
    InfiniBand,
    /// No RDMA function at all (E810 with RDMA disabled, a PF without an RDMA device).
    #[serde(rename = "none")]
    None,
}

impl RdmaProtocol {
    /// `RoCEv2`, `iWARP`, `InfiniBand` or `none`, as status, metrics and docs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RdmaProtocol::RoceV2 => "RoCEv2",
            RdmaProtocol::Iwarp => "iWARP",
            RdmaProtocol::InfiniBand => "InfiniBand",
            RdmaProtocol::None => "none",
        }
    }
}

impl std::fmt::Display for RdmaProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RdmaProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [RdmaProtocol::RoceV2, RdmaProtocol::Iwarp, RdmaProtocol::InfiniBand, RdmaProtocol::None]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an RDMA protocol (RoCEv2, iWARP, InfiniBand, none)"))
    }
}

/// A character device of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharDev {
    /// Kernel name, e.g. `uverbs3`.
    pub name: String,
    /// The node's path, always under the real `/dev` (`/dev/infiniband/uverbs3`):
    /// this is what the kubelet and the container runtime are given.
    pub node_path: PathBuf,
    /// `major:minor` from sysfs `dev`, when readable.
    pub major_minor: Option<(u32, u32)>,
    /// The node exists under the dev root we were pointed at, as a character
    /// device (a regular file of that name does not count).
    pub present: bool,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// Port number (1-based).
    pub num: u32,
    /// Logical state name from `state` (`ACTIVE`, `DOWN`, `INIT`, …).
    pub state: Option<String>,
    /// Physical state name from `phys_state` (`LinkUp`, `Disabled`, …).
    pub phys_state: Option<String>,
    pub link_layer: Option<LinkLayer>,
    /// Active MTU in bytes, when known (`/sys/class/infiniband/<d>/ports/<p>/...` has no
    /// direct file; filled from netlink or derived from the netdev MTU).
    pub active_mtu: Option<u32>,
    /// Populated GID table entries (all-zero entries are left out).
    pub gids: Vec<Gid>,
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gid {
    /// Index in the table (what `NCCL_IB_GID_INDEX` takes).
    pub index: u32,
    /// The GID as the kernel prints it (`fe80:0000:...`).
    pub gid: String,
    /// The GID as an IP address when it is an IPv4-mapped or IPv6 one.
    pub ip: Option<std::net::IpAddr>,
    /// GID type from `gid_attrs/types/N`.
    pub kind: GidKind,
    /// Netdev from `gid_attrs/ndevs/N`.
    pub netdev: Option<String>,
}

/// GID type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GidKind {
    /// `IB/RoCE v1`.
    RoceV1,
    /// `RoCE v2`.
    RoceV2,
    /// Anything else, or unreadable.
    Other,
}

/// An RDMA HCA not on an SR-IOV function (shared mode), or a virtual RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hca {
    /// PCI address; `None` for a virtual device (rxe, siw).
    pub pci: Option<PciAddr>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
    /// Netdevs of the function (or the netdev a virtual device is bound to).
    pub netdevs: Vec<Netdev>,
    pub rdma: RdmaDev,
    /// PCIe bridges up to the root port, nearest first.
    pub upstream: Vec<PciAddr>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// A GPU, for GPU/NIC affinity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub pci: PciAddr,
    pub vendor: u16,
    pub device: Option<u16>,
    pub numa_node: Option<u32>,
    /// PCIe bridges up to the root port, nearest first.
    pub upstream: Vec<PciAddr>,
}

impl Inventory {
    /// All VFs of all PFs.
    pub fn vfs(&self) -> impl Iterator<Item = &Vf> {
        self.pfs.iter().flat_map(|pf| pf.vfs.iter())
    }

    /// The VF at `pci`, with its PF.
    pub fn vf(&self, pci: PciAddr) -> Option<(&Pf, &Vf)> {
        self.pfs.iter().find_map(|pf| pf.vfs.iter().find(|v| v.pci == pci).map(|v| (pf, v)))
    }

    /// The PF at `pci`.
    pub fn pf(&self, pci: PciAddr) -> Option<&Pf> {
        self.pfs.iter().find(|pf| pf.pci == pci)
    }

    /// The PF a netdev belongs to: its own netdev or one of its VFs'.
    pub fn pf_of_netdev(&self, name: &str) -> Option<PciAddr> {
        self.pfs
            .iter()
            .find(|pf| {
                pf.netdevs.iter().any(|n| n.name == name)
                    || pf.vfs.iter().any(|v| v.netdev.as_ref().is_some_and(|n| n.name == name))
            })
            .map(|pf| pf.pci)
    }

    /// The PF or VF whose netdev `name` is, as `(its PF, the function)`.
    pub fn function_of_netdev(&self, name: &str) -> Option<(PciAddr, PciAddr)> {
        self.pfs.iter().find_map(|pf| {
            if pf.netdevs.iter().any(|n| n.name == name) {
                return Some((pf.pci, pf.pci));
            }
            let vf = pf.vfs.iter().find(|v| v.netdev.as_ref().is_some_and(|n| n.name == name))?;
            Some((pf.pci, vf.pci))
        })
    }

    /// Replaces what this inventory says about PF `pci` with `part`, a walk of
    /// that PF alone ([`crate::discover::discover_pf`]): the PF (removed when
    /// `part` no longer has it), and the skipped entries of its functions.
    /// Everything else stays as it was.
    pub fn replace_pf(&mut self, pci: PciAddr, part: Inventory) {
        let old_vfs: Vec<String> =
            self.pf(pci).map(|p| p.vfs.iter().map(|v| v.pci.to_string()).collect()).unwrap_or_default();
        let new_pf = part.pfs.into_iter().find(|p| p.pci == pci);
        let mine = |d: &str| d == pci.to_string() || old_vfs.iter().any(|v| v == d);
        self.skipped.retain(|s| !mine(&s.device));
        self.skipped.extend(part.skipped);
        match (self.pfs.iter().position(|p| p.pci == pci), new_pf) {
            (Some(i), Some(p)) => self.pfs[i] = p,
            (Some(i), None) => {
                self.pfs.remove(i);
            }
            (None, Some(p)) => {
                let at = self.pfs.partition_point(|q| q.pci < p.pci);
                self.pfs.insert(at, p);
            }
            (None, None) => {}
        }
        self.rdma_cm = part.rdma_cm;
        self.vfio_container = part.vfio_container;
    }
}

impl RdmaDev {
    /// The first RoCE v2 GID index on port 1 bound to `netdev` with an IPv4
    /// address, else the first RoCE v2 one bound to it (what NCCL wants).
    pub fn roce_v2_gid_index(&self, netdev: &str) -> Option<u32> {
        let gids = self.ports.iter().flat_map(|p| p.gids.iter());
        let v2: Vec<&Gid> =
            gids.filter(|g| g.kind == GidKind::RoceV2 && g.netdev.as_deref() == Some(netdev)).collect();
        v2.iter().find(|g| matches!(g.ip, Some(std::net::IpAddr::V4(_)))).or(v2.first()).map(|g| g.index)
    }
}

/// RDMA subsystem network namespace mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetnsMode {
    /// RDMA devices are visible in every netns (kernel default, `ib_core netns_mode=1`).
    #[default]
    Shared,
    /// Each RDMA device belongs to one netns (`ib_core netns_mode=0`).
    Exclusive,
}

/// How to put a node's RDMA subsystem in exclusive netns mode for good: the
/// module option, read when ib_core loads at boot, and a reboot of the node
/// drained first ([`DRAIN`], its pods moved elsewhere, the node cordoned) and
/// uncordoned once it is back ([`UNCORDON`]). `NODE` is the node's name.
pub const NETNS_EXCLUSIVE_FIX: &str = "echo 'options ib_core netns_mode=0' > /etc/modprobe.d/ib_core.conf && kubectl drain NODE --ignore-daemonsets && reboot && kubectl uncordon NODE";

/// What every printed fix that reboots a node runs first (kubectl's own
/// advice for node maintenance): evict its pods and cordon it.
pub const DRAIN: &str = "kubectl drain NODE --ignore-daemonsets";

/// What every printed fix that reboots a node runs once it is Ready again.
pub const UNCORDON: &str = "kubectl uncordon NODE";

/// The same for the running kernel only, and only while no network namespace but
/// the host's exists: ib_core refuses with EBUSY otherwise (`rdma_compatdev_set`),
/// as on a node already running pods.
pub const NETNS_EXCLUSIVE_NOW: &str = "rdma system set netns exclusive";

/// Why the node's RDMA netns `mode` does not fit pods that are given `rdma_vfs`
/// VFs with their RDMA devices, or `None` when it does (or nothing is served).
/// Those VFs' RDMA devices must move into each pod's network namespace, which only
/// exclusive mode allows: in shared mode (the kernel default) the CNI cannot move
/// them and every pod sees every RDMA device of the node. `None` mode (ib_core
/// not loaded, or unreadable) is not a verdict either way.
pub fn netns_mode_problem(mode: Option<NetnsMode>, rdma_vfs: usize) -> Option<String> {
    (mode == Some(NetnsMode::Shared) && rdma_vfs > 0).then(|| {
        format!(
            "RDMA netns mode is shared (ib_core netns_mode=1, the kernel default), but {rdma_vfs} VF{s} with an RDMA device {are} to be given to pods, whose RDMA devices must move into each pod's network namespace: only exclusive mode allows that",
            s = if rdma_vfs == 1 { "" } else { "s" },
            are = if rdma_vfs == 1 { "is" } else { "are" },
        )
    })
}
