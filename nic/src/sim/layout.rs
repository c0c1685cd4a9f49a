//! Layout rules: where every PCI function of a described node sits, what it
//! is called and numbered, as the kernel would lay it out (see the rules in
//! the [module docs](super)). Pure: a [`NodeDesc`] in, a plan of functions out.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use super::desc::{AdapterDesc, DescError, Model, NodeDesc, PfDesc, RdmaNaming, RoceDesc, SwitchDesc};
use crate::inventory::RdmaProtocol;
use crate::pci::PciAddr;

/// GID table length of every simulated RDMA port.
pub const GID_TBL_LEN: u32 = 8;
/// Major of the fixed uverbs/umad char device range (`IB_UVERBS_MAJOR`, `IB_UMAD_MAJOR`).
pub(super) const IB_MAJOR: u32 = 231;
/// `IB_UVERBS_BASE_MINOR`.
pub(super) const UVERBS_BASE_MINOR: u32 = 192;
/// `IB_UVERBS_NUM_FIXED_MINOR`.
pub(super) const UVERBS_FIXED: u32 = 32;
/// `IB_UMAD_NUM_FIXED_MINOR`.
pub(super) const UMAD_FIXED: u32 = 64;
/// `IB_UMAD_MAX_PORTS - IB_UMAD_NUM_FIXED_MINOR` (1024 - 64): issm offset in the dynamic range.
pub(super) const UMAD_DYNAMIC: u32 = 960;
/// Stand-ins for the dynamic majors the kernel would allocate.
pub(super) const UVERBS_DYN_MAJOR: u32 = 240;
pub(super) const UMAD_DYN_MAJOR: u32 = 241;
/// `MISC_MAJOR` and the minor the sim gives `rdma_cm` (dynamic on a real kernel).
pub(super) const RDMA_CM_DEV: (u32, u32) = (10, 58);
/// `/dev/vfio/vfio`: misc device `VFIO_MINOR` 196 (`include/linux/miscdevice.h`).
pub(super) const VFIO_CONTAINER_DEV: (u32, u32) = (10, 196);
/// Stand-in for the dynamic major of VFIO group devices (`/dev/vfio/<group>`).
pub(super) const VFIO_GROUP_MAJOR: u32 = 242;
/// The driver that hands a function to userspace.
pub(super) const VFIO_PCI: &str = "vfio-pci";

// ---------------------------------------------------------------------------------------------
// The plan: every PCI function of the node with what the tree shows for it.

#[derive(Debug, Clone)]
pub(super) struct Func {
    pub(super) bdf: PciAddr,
    /// Directory holding the device directory, relative to `sys/`.
    pub(super) parent: PathBuf,
    pub(super) vendor: u16,
    pub(super) device: u16,
    pub(super) class: u32,
    pub(super) driver: Option<String>,
    pub(super) numa: Option<u32>,
    pub(super) role: Role,
    pub(super) net: Option<NetPlan>,
    pub(super) rdma: Option<RdmaPlan>,
    /// Auxiliary devices without RDMA (`mlx5_core.eth.N`).
    pub(super) aux_dirs: Vec<String>,
    /// IOMMU group (`iommu_group` link); endpoints only.
    pub(super) iommu_group: Option<u32>,
}

#[derive(Debug, Clone)]
pub(super) enum Role {
    Bridge,
    Pf { model: Model, total: u32, num: u32, offset: u32, ordinal: u32 },
    Vf { pf: PciAddr, index: u32 },
    Hca,
    Gpu,
}

#[derive(Debug, Clone)]
pub(super) struct NetPlan {
    pub(super) name: String,
    pub(super) ifindex: u32,
    pub(super) mac: [u8; 6],
    pub(super) mtu: u32,
    pub(super) speed: u32,
    pub(super) operstate: String,
    ipv4: Option<Ipv4Addr>,
    /// On the host (false: moved into a pod).
    pub(super) present: bool,
    /// NVIDIA OFED ECN/QoS sysfs to write.
    pub(super) ofed: Option<RoceDesc>,
}

#[derive(Debug, Clone)]
pub(super) struct RdmaPlan {
    pub(super) name: String,
    pub(super) aux: Option<String>,
    pub(super) uverbs: u32,
    pub(super) mad: Option<u32>,
    pub(super) guid: String,
    pub(super) hw_counters: bool,
    /// rdma_cm configfs (`default_roce_mode`, `default_roce_tos`).
    pub(super) configfs: Option<(String, u8)>,
    /// RoCEv2 or iWARP (`node_type`, the GID table and rdma_cm's default follow).
    pub(super) protocol: RdmaProtocol,
    /// Moved into another network namespace with its netdev (exclusive RDMA
    /// netns mode, [`super::Sim::move_vf_into_pod`]): the `infiniband` class hides it.
    pub(super) in_other_netns: bool,
}

impl Func {
    pub(super) fn dir(&self) -> PathBuf {
        self.parent.join(self.bdf.to_string())
    }
    /// The function's RDMA auxiliary devices (with or without an RDMA device).
    pub(super) fn rdma_aux(&self) -> Vec<String> {
        let mut v: Vec<String> = self.rdma.iter().filter_map(|r| r.aux.clone()).collect();
        v.extend(self.aux_dirs.iter().filter(|a| is_rdma_aux_name(a)).cloned());
        v.sort();
        v
    }

    /// The protocol discovery must report for this function: ice's aux kind,
    /// else the RDMA device's, else none.
    pub(super) fn rdma_protocol(&self) -> RdmaProtocol {
        let aux = self.rdma_aux();
        let kind = |k: &str| aux.iter().any(|a| a.split('.').nth(1) == Some(k));
        if kind("iwarp") {
            RdmaProtocol::Iwarp
        } else if kind("roce") {
            RdmaProtocol::RoceV2
        } else {
            self.rdma.as_ref().map_or(RdmaProtocol::None, |r| r.protocol)
        }
    }

    /// The GID table of port 1: RoCE fills it from the netdev's addresses
    /// (`gid_entries`); iWARP has one entry, the MAC (`irdma_query_gid`, gid_tbl_len 1
    /// in irdma_query_port), of the default type IB and without a netdev.
    pub(super) fn gid_entries(&self) -> Vec<GidEntry> {
        let Some(n) = &self.net else { return vec![] };
        if self.rdma.as_ref().is_some_and(|r| r.protocol == RdmaProtocol::Iwarp) {
            let mut b = [0u8; 16];
            b[..6].copy_from_slice(&n.mac);
            let gid = Ipv6Addr::from(b);
            return vec![GidEntry {
                index: 0,
                gid,
                kind: "IB/RoCE v1",
                ndev: String::new(),
                ip: IpAddr::V6(gid),
            }];
        }
        gid_entries(n)
    }

    /// Where the RDMA device and its char devices hang: the function or its aux device.
    pub(super) fn rdma_base(&self) -> Option<PathBuf> {
        let r = self.rdma.as_ref()?;
        Some(match &r.aux {
            Some(a) => self.dir().join(a),
            None => self.dir(),
        })
    }
}

/// `<driver>.{rdma,roce,iwarp}.<id>`: an auxiliary device for RDMA.
pub(super) fn is_rdma_aux_name(a: &str) -> bool {
    matches!(a.split('.').nth(1), Some("rdma" | "roce" | "iwarp"))
}

/// The ida an auxiliary device's id comes from: ice numbers its `ice.roce.N`
/// and `ice.iwarp.N` from one (`ice_aux_ida` in ice_idc.c), others per name.
fn aux_pool(prefix: &str) -> &str {
    if prefix.starts_with("ice.") {
        "ice"
    } else {
        prefix
    }
}

pub(super) fn rid(a: PciAddr) -> u32 {
    (a.bus as u32) << 8 | (a.device as u32) << 3 | a.function as u32
}

pub(super) fn from_rid(domain: u32, r: u64) -> Option<PciAddr> {
    (r <= 0xffff).then(|| PciAddr::new(domain, (r >> 8) as u8, ((r >> 3) & 0x1f) as u8, (r & 7) as u8))
}

pub(super) fn default_speed(m: Model) -> u32 {
    match m {
        Model::E810Xxv => 25_000,
        _ => 100_000,
    }
}

pub(super) fn rocep(pf: PciAddr) -> String {
    format!("rocep{}s{}f{}", pf.bus, pf.device, pf.function)
}

pub(super) fn mac_for(bdf: PciAddr, oui: Option<[u8; 3]>) -> [u8; 6] {
    let devfn = bdf.device << 3 | bdf.function;
    match oui {
        Some(o) => [o[0], o[1], o[2], bdf.bus, devfn, bdf.domain as u8],
        None => [0x02, bdf.domain as u8, bdf.bus, devfn, 0x00, 0x01],
    }
}

pub(super) fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// EUI-64 interface id from a MAC (RFC 4291 appendix A: insert ff:fe, flip U/L).
pub(super) fn eui64(mac: &[u8; 6]) -> [u8; 8] {
    [mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

pub(super) fn guid_for(mac: &[u8; 6]) -> String {
    let e = eui64(mac);
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]
    )
}

/// How the kernel prints a GID (`%pI6`: eight groups of four hex digits).
pub(super) fn fmt_gid(ip: Ipv6Addr) -> String {
    ip.segments().iter().map(|s| format!("{s:04x}")).collect::<Vec<_>>().join(":")
}

pub(super) fn link_local(mac: &[u8; 6]) -> Ipv6Addr {
    let e = eui64(mac);
    let mut b = [0u8; 16];
    b[0] = 0xfe;
    b[1] = 0x80;
    b[8..].copy_from_slice(&e);
    Ipv6Addr::from(b)
}

/// One GID table entry the sim writes: (index, GID, type attribute, netdev, address).
pub(super) struct GidEntry {
    pub(super) index: u32,
    pub(super) gid: Ipv6Addr,
    pub(super) kind: &'static str,
    pub(super) ndev: String,
    pub(super) ip: IpAddr,
}

pub(super) fn gid_entries(net: &NetPlan) -> Vec<GidEntry> {
    let ll = link_local(&net.mac);
    let mut v = vec![
        GidEntry { index: 0, gid: ll, kind: "IB/RoCE v1", ndev: net.name.clone(), ip: IpAddr::V6(ll) },
        GidEntry { index: 1, gid: ll, kind: "RoCE v2", ndev: net.name.clone(), ip: IpAddr::V6(ll) },
    ];
    if let (true, Some(v4)) = (net.present, net.ipv4) {
        let mapped = v4.to_ipv6_mapped();
        v.push(GidEntry {
            index: 2,
            gid: mapped,
            kind: "IB/RoCE v1",
            ndev: net.name.clone(),
            ip: IpAddr::V4(v4),
        });
        v.push(GidEntry {
            index: 3,
            gid: mapped,
            kind: "RoCE v2",
            ndev: net.name.clone(),
            ip: IpAddr::V4(v4),
        });
    }
    v
}

pub(super) fn uverbs_dev(n: u32) -> (u32, u32) {
    if n < UVERBS_FIXED {
        (IB_MAJOR, UVERBS_BASE_MINOR + n)
    } else {
        (UVERBS_DYN_MAJOR, n - UVERBS_FIXED)
    }
}

pub(super) fn umad_dev(n: u32, issm: bool) -> (u32, u32) {
    match (n < UMAD_FIXED, issm) {
        (true, false) => (IB_MAJOR, n),
        (true, true) => (IB_MAJOR, UMAD_FIXED + n),
        (false, false) => (UMAD_DYN_MAJOR, n - UMAD_FIXED),
        (false, true) => (UMAD_DYN_MAJOR, n - UMAD_FIXED + UMAD_DYNAMIC),
    }
}

/// Lowest-free allocators, as the kernel's ida hands out numbers.
#[derive(Default)]
pub(super) struct Alloc {
    pub(super) names: BTreeSet<String>,
    pub(super) uverbs: BTreeSet<u32>,
    pub(super) umad: BTreeSet<u32>,
    pub(super) aux: BTreeMap<String, BTreeSet<u32>>,
    pub(super) ifindex_max: u32,
    pub(super) iommu: BTreeSet<u32>,
}

pub(super) fn lowest_free(set: &mut BTreeSet<u32>) -> u32 {
    let n = (0..).find(|n| !set.contains(n)).expect("u32 range not exhausted");
    set.insert(n);
    n
}

impl Alloc {
    pub(super) fn from_funcs<'a>(funcs: impl Iterator<Item = &'a Func>) -> Self {
        let mut a = Alloc { ifindex_max: 1, ..Default::default() };
        for f in funcs {
            if let Some(n) = &f.net {
                a.ifindex_max = a.ifindex_max.max(n.ifindex);
            }
            for aux in f.aux_dirs.iter().chain(f.rdma.as_ref().and_then(|r| r.aux.as_ref())) {
                if let Some((prefix, id)) = aux.rsplit_once('.') {
                    if let Ok(id) = id.parse() {
                        a.aux.entry(aux_pool(prefix).to_string()).or_default().insert(id);
                    }
                }
            }
            if let Some(g) = f.iommu_group {
                a.iommu.insert(g);
            }
            if let Some(r) = &f.rdma {
                a.names.insert(r.name.clone());
                a.uverbs.insert(r.uverbs);
                if let Some(m) = r.mad {
                    a.umad.insert(m);
                }
            }
        }
        a
    }
    pub(super) fn ifindex(&mut self) -> u32 {
        self.ifindex_max += 1;
        self.ifindex_max
    }
    pub(super) fn aux(&mut self, prefix: &str) -> String {
        let id = lowest_free(self.aux.entry(aux_pool(prefix).to_string()).or_default());
        format!("{prefix}.{id}")
    }
    pub(super) fn kernel_name(&mut self, prefix: &str) -> String {
        let name = (0..).map(|n| format!("{prefix}{n}")).find(|n| !self.names.contains(n)).expect("names");
        self.names.insert(name.clone());
        name
    }
}

pub(super) fn yaml_err(msg: String) -> DescError {
    DescError::Invalid { path: "<description>".into(), what: msg }
}

/// Checks a description for what YAML types cannot: duplicate addresses and
/// names, unknown switches, more VFs than `totalVfs`, indices out of range.
pub fn validate(desc: &NodeDesc) -> Result<(), String> {
    plan(desc).map(|_| ())
}

pub(super) fn check_netdev_name(n: &str, what: &str) -> Result<(), String> {
    // IFNAMSIZ is 16 including the NUL; the kernel refuses '/', ':' and whitespace (dev_valid_name).
    if n.is_empty() || n.len() > 15 || n.contains(['/', ':']) || n.chars().any(char::is_whitespace) {
        return Err(format!("{what}: {n:?} is not a valid interface name (1-15 chars, no '/', ':', spaces)"));
    }
    Ok(())
}

/// Lays out the whole node. Errors say which PF, switch or address is wrong.
pub(super) fn plan(desc: &NodeDesc) -> Result<BTreeMap<PciAddr, Func>, String> {
    let mut funcs: BTreeMap<PciAddr, Func> = BTreeMap::new();
    let mut buses = Buses::new(desc)?;
    for s in &desc.switches {
        for port in switch_ports(s)? {
            insert(&mut funcs, port)?;
        }
    }
    let pfs = pfs_in_pci_order(desc);
    let mut netdev_names = BTreeSet::new();
    let mut alloc = Alloc { ifindex_max: 1, ..Default::default() };
    reserve_pf_rdma_names(&pfs, &mut alloc)?;
    for (ordinal, (adapter, p)) in pfs.iter().enumerate() {
        let model = adapter.model;
        check_netdev_name(&p.netdev, &format!("PF {}", p.bdf))?;
        if !netdev_names.insert(p.netdev.clone()) {
            return Err(format!("duplicate netdev name {}", p.netdev));
        }
        check_pf(model, p)?;
        let protocol = pf_protocol(desc, model, p)?;
        let parent = buses.parent_of(p.bdf, &p.switch, &mut funcs)?;
        let offset = vf_offset(desc, model, p)?;
        let f = pf_func(p, model, ordinal, protocol, parent, offset, &mut alloc);
        insert(&mut funcs, f)?;
    }
    // VFs, PF by PF in PCI order.
    for (_, p) in &pfs {
        for i in 0..p.vfs {
            let vf = vf_func(&funcs[&p.bdf], p, i, &mut alloc)?;
            if !netdev_names.insert(vf.net.as_ref().map(|n| n.name.clone()).unwrap_or_default())
                && vf.net.is_some()
            {
                return Err(format!(
                    "duplicate netdev name {}",
                    vf.net.as_ref().map(|n| n.name.as_str()).unwrap_or("")
                ));
            }
            if let Some(n) = &vf.net {
                check_netdev_name(&n.name, &format!("VF {} of PF {}", i, p.bdf))?;
            }
            insert(&mut funcs, vf)?;
        }
    }
    for g in &desc.gpus {
        let parent = buses.parent_of(g.bdf, &g.switch, &mut funcs)?;
        let f = Func {
            bdf: g.bdf,
            parent,
            vendor: 0x10de,
            device: g.device.unwrap_or(0x2330),
            class: 0x030200,
            driver: Some("nvidia".into()),
            numa: g.numa,
            role: Role::Gpu,
            net: None,
            rdma: None,
            aux_dirs: vec![],
            iommu_group: Some(lowest_free(&mut alloc.iommu)),
        };
        insert(&mut funcs, f)?;
    }
    inherit_bridge_numa(&mut funcs);
    Ok(funcs)
}

fn insert(funcs: &mut BTreeMap<PciAddr, Func>, f: Func) -> Result<(), String> {
    let bdf = f.bdf;
    if funcs.insert(bdf, f).is_some() {
        return Err(format!("duplicate PCI address {bdf}"));
    }
    Ok(())
}

fn bridge(bdf: PciAddr, parent: PathBuf, vendor: u16, device: u16) -> Func {
    Func {
        bdf,
        parent,
        vendor,
        device,
        class: 0x060400,
        driver: Some("pcieport".into()),
        numa: None,
        role: Role::Bridge,
        net: None,
        rdma: None,
        aux_dirs: vec![],
        iommu_group: None,
    }
}

/// A switch's root port and upstream port.
fn switch_ports(s: &SwitchDesc) -> Result<[Func; 2], String> {
    let host = PathBuf::from(format!("devices/pci{:04x}:{:02x}", s.root_port.domain, s.root_port.bus));
    if s.upstream.domain != s.root_port.domain {
        return Err(format!("switch {}: upstream {} not in the root port's domain", s.name, s.upstream));
    }
    Ok([
        bridge(s.root_port, host.clone(), 0x8086, 0x347a),
        bridge(s.upstream, host.join(s.root_port.to_string()), 0x10b5, 0xc030),
    ])
}

/// The bridges endpoints hang below: a downstream port of their switch, or a
/// root port of their own, each made on first use.
struct Buses<'a> {
    switches: BTreeMap<&'a str, &'a SwitchDesc>,
    parents: BTreeMap<(Option<String>, u32, u8), PathBuf>,
    downstream_count: BTreeMap<String, u8>,
    root_count: BTreeMap<u32, u8>,
}

impl<'a> Buses<'a> {
    fn new(desc: &'a NodeDesc) -> Result<Self, String> {
        let switches: BTreeMap<&str, &SwitchDesc> =
            desc.switches.iter().map(|s| (s.name.as_str(), s)).collect();
        if switches.len() != desc.switches.len() {
            return Err("duplicate switch name".into());
        }
        Ok(Buses {
            switches,
            parents: BTreeMap::new(),
            downstream_count: BTreeMap::new(),
            root_count: BTreeMap::new(),
        })
    }

    /// Parent directory of an endpoint on `bdf`'s bus, creating bridges on first use.
    fn parent_of(
        &mut self,
        bdf: PciAddr,
        switch: &Option<String>,
        funcs: &mut BTreeMap<PciAddr, Func>,
    ) -> Result<PathBuf, String> {
        let key = (switch.clone(), bdf.domain, bdf.bus);
        if let Some(p) = self.parents.get(&key) {
            return Ok(p.clone());
        }
        let p = match switch {
            Some(name) => {
                let s = self
                    .switches
                    .get(name.as_str())
                    .ok_or_else(|| format!("{bdf}: unknown switch {name:?}"))?;
                if s.root_port.domain != bdf.domain {
                    return Err(format!("{bdf}: switch {name} is in another PCI domain"));
                }
                let k = self.downstream_count.entry(name.clone()).or_insert(0);
                if *k > 31 || s.upstream.bus == 0xff {
                    return Err(format!("switch {name}: too many downstream ports"));
                }
                let ds = PciAddr::new(bdf.domain, s.upstream.bus + 1, *k, 0);
                *k += 1;
                let up_dir =
                    PathBuf::from(format!("devices/pci{:04x}:{:02x}", s.root_port.domain, s.root_port.bus))
                        .join(s.root_port.to_string())
                        .join(s.upstream.to_string());
                insert(funcs, bridge(ds, up_dir.clone(), 0x10b5, 0xc030))?;
                up_dir.join(ds.to_string())
            }
            None if bdf.bus == 0 => PathBuf::from(format!("devices/pci{:04x}:00", bdf.domain)),
            None => {
                let k = self.root_count.entry(bdf.domain).or_insert(0);
                *k += 1;
                if *k > 31 {
                    return Err("too many switchless device buses for one PCI domain".into());
                }
                let rp = PciAddr::new(bdf.domain, 0, *k, 0);
                let host = PathBuf::from(format!("devices/pci{:04x}:00", bdf.domain));
                insert(funcs, bridge(rp, host.clone(), 0x8086, 0x347a))?;
                host.join(rp.to_string())
            }
        };
        self.parents.insert(key, p.clone());
        Ok(p)
    }
}

/// PFs in PCI order, with their adapter.
fn pfs_in_pci_order(desc: &NodeDesc) -> Vec<(&AdapterDesc, &PfDesc)> {
    let mut pfs: Vec<(&AdapterDesc, &PfDesc)> =
        desc.adapters.iter().flat_map(|a| a.pfs.iter().map(move |p| (a, p))).collect();
    pfs.sort_by_key(|(_, p)| p.bdf);
    pfs
}

/// The RDMA device names the description gives PFs, taken before any VF is named.
fn reserve_pf_rdma_names(pfs: &[(&AdapterDesc, &PfDesc)], alloc: &mut Alloc) -> Result<(), String> {
    for (_, p) in pfs {
        if let Some(r) = &p.rdma {
            if r.is_empty() || r.len() > 63 || r.contains('/') || r.chars().any(char::is_whitespace) {
                return Err(format!("PF {}: {r:?} is not a valid RDMA device name", p.bdf));
            }
            if !alloc.names.insert(r.clone()) {
                return Err(format!("duplicate RDMA device name {r}"));
            }
        }
    }
    Ok(())
}

/// The PF's VF counts, VF indices and RoCE priorities are in range.
fn check_pf(model: Model, p: &PfDesc) -> Result<(), String> {
    if model == Model::ConnectX6DxNoSriov && (p.vfs > 0 || p.total_vfs.unwrap_or(0) > 0) {
        return Err(format!("PF {}: model connectx-6dx-nosriov has no SR-IOV (vfs must be 0)", p.bdf));
    }
    let total = p.total_vfs.unwrap_or(model.default_total_vfs());
    if p.vfs > total {
        return Err(format!("PF {}: vfs {} > totalVfs {total}", p.bdf, p.vfs));
    }
    for &i in p.vfs_without_netdev.iter().chain(&p.vfs_vfio) {
        if i >= p.vfs {
            return Err(format!("PF {}: VF index {i} out of range (vfs: {})", p.bdf, p.vfs));
        }
    }
    for (what, prios) in [("pfc", &p.roce.pfc), ("ecn", &p.roce.ecn)] {
        if let Some(bad) = prios.iter().find(|x| **x > 7) {
            return Err(format!("PF {}: roce.{what}: priority {bad} > 7", p.bdf));
        }
    }
    if let Some((d, pr)) = p.roce.dscp_to_priority.iter().find(|(d, pr)| **d > 63 || **pr > 7) {
        return Err(format!(
            "PF {}: roce.dscpToPriority: {d} -> {pr} out of range (dscp 0-63, prio 0-7)",
            p.bdf
        ));
    }
    Ok(())
}

/// VF routing offset (see the module docs).
fn vf_offset(desc: &NodeDesc, model: Model, p: &PfDesc) -> Result<u32, String> {
    let mut slot: Vec<&PfDesc> = desc
        .adapters
        .iter()
        .flat_map(|a| a.pfs.iter())
        .filter(|q| q.bdf.domain == p.bdf.domain && q.bdf.bus == p.bdf.bus && q.bdf.device == p.bdf.device)
        .collect();
    slot.sort_by_key(|q| q.bdf.function);
    let j = slot.iter().position(|q| q.bdf == p.bdf).unwrap_or(0) as u32;
    // u64: descriptions may carry absurd totalVfs; an offset past 16 bits is refused below.
    let before: u64 =
        slot[..j as usize].iter().map(|q| q.total_vfs.unwrap_or(model.default_total_vfs()) as u64).sum();
    let offset =
        if model.is_mlx5() { slot.len() as u64 - j as u64 + before } else { 8 - j.min(7) as u64 + before };
    let Ok(offset) = u32::try_from(offset).map(|o| o.min(0x1_0000)) else {
        return Err(format!("PF {}: VF offset past the PCI routing-id space", p.bdf));
    };
    Ok(offset)
}

/// The PF (or SR-IOV-less HCA) `p`, allocating its names and numbers from `alloc`.
fn pf_func(
    p: &PfDesc,
    model: Model,
    ordinal: usize,
    protocol: RdmaProtocol,
    parent: PathBuf,
    offset: u32,
    alloc: &mut Alloc,
) -> Func {
    let is_mlx5 = model.is_mlx5();
    let total = p.total_vfs.unwrap_or(model.default_total_vfs());
    let mac = mac_for(p.bdf, Some(if is_mlx5 { [0xb8, 0xce, 0xf6] } else { [0xb4, 0x96, 0x91] }));
    let ofed = p.roce.ofed_sysfs.unwrap_or(is_mlx5).then(|| p.roce.clone());
    let net = NetPlan {
        name: p.netdev.clone(),
        ifindex: alloc.ifindex(),
        mac,
        mtu: p.mtu,
        speed: p.speed.unwrap_or(default_speed(model)),
        operstate: p.operstate.clone(),
        ipv4: Some(Ipv4Addr::new(192, 168, (ordinal as u8).wrapping_add(1), 1)),
        present: true,
        ofed,
    };
    let mut aux_dirs = vec![];
    // ice plugs `ice.roce.N` / `ice.iwarp.N` whenever RDMA is on, irdma loaded or not.
    let ice_aux = match (is_mlx5, protocol) {
        (false, RdmaProtocol::RoceV2) => Some(alloc.aux("ice.roce")),
        (false, RdmaProtocol::Iwarp) => Some(alloc.aux("ice.iwarp")),
        _ => None,
    };
    let rdma = p.rdma.as_ref().filter(|_| protocol != RdmaProtocol::None).map(|name| {
        let aux = if is_mlx5 {
            aux_dirs.push(alloc.aux("mlx5_core.eth"));
            alloc.aux("mlx5_core.rdma")
        } else {
            ice_aux.clone().unwrap_or_default()
        };
        // rdma_cm's default GID type on a port without RoCE is IB ("IB/RoCE v1":
        // cma_add_one takes the first type roce_gid_type_mask_support allows).
        let roce_mode =
            if protocol == RdmaProtocol::Iwarp { "IB/RoCE v1".into() } else { p.roce.roce_mode.clone() };
        RdmaPlan {
            name: name.clone(),
            aux: Some(aux),
            uverbs: lowest_free(&mut alloc.uverbs),
            mad: is_mlx5.then(|| lowest_free(&mut alloc.umad)),
            guid: guid_for(&mac),
            hw_counters: is_mlx5,
            configfs: Some((roce_mode, p.roce.tos)),
            protocol,
            in_other_netns: false,
        }
    });
    if rdma.is_none() && is_mlx5 {
        aux_dirs.push(alloc.aux("mlx5_core.eth"));
    }
    if rdma.is_none() {
        aux_dirs.extend(ice_aux);
    }
    let role = if model == Model::ConnectX6DxNoSriov {
        Role::Hca
    } else {
        Role::Pf { model, total, num: p.vfs, offset, ordinal: ordinal as u32 }
    };
    Func {
        bdf: p.bdf,
        parent,
        vendor: model.vendor(),
        device: model.pf_device(),
        class: 0x020000,
        driver: Some(model.pf_driver().into()),
        numa: p.numa,
        role,
        net: Some(net),
        rdma,
        aux_dirs,
        iommu_group: Some(lowest_free(&mut alloc.iommu)),
    }
}

/// Bridges report the NUMA node of the first endpoint below them.
fn inherit_bridge_numa(funcs: &mut BTreeMap<PciAddr, Func>) {
    let bridge_numa: Vec<(PciAddr, Option<u32>)> = funcs
        .values()
        .filter(|f| matches!(f.role, Role::Bridge))
        .map(|b| {
            let name = b.bdf.to_string();
            let numa = funcs
                .values()
                .find(|f| {
                    !matches!(f.role, Role::Bridge)
                        && f.parent.components().any(|c| c.as_os_str() == name.as_str())
                })
                .and_then(|f| f.numa);
            (b.bdf, numa)
        })
        .collect();
    for (bdf, numa) in bridge_numa {
        if let Some(f) = funcs.get_mut(&bdf) {
            f.numa = numa;
        }
    }
}

/// A PF's RDMA protocol from its description (see [`PfDesc::rdma_protocol`]).
fn pf_protocol(desc: &NodeDesc, model: Model, p: &PfDesc) -> Result<RdmaProtocol, String> {
    let wanted = p.rdma_protocol;
    if model.is_mlx5() {
        return match wanted {
            None | Some(RdmaProtocol::RoceV2) => {
                Ok(if p.rdma.is_some() { RdmaProtocol::RoceV2 } else { RdmaProtocol::None })
            }
            Some(RdmaProtocol::None) => Ok(RdmaProtocol::None),
            Some(other) => Err(format!("PF {}: {model:?} runs RoCE, not {other}", p.bdf)),
        };
    }
    let by_module = desc.irdma_roce_ena.map(|on| if on { RdmaProtocol::RoceV2 } else { RdmaProtocol::Iwarp });
    match (wanted, by_module) {
        (Some(RdmaProtocol::InfiniBand), _) => Err(format!("PF {}: an E810 port has no InfiniBand", p.bdf)),
        (Some(RdmaProtocol::None), _) => Ok(RdmaProtocol::None),
        (Some(w), Some(m)) if w != m => Err(format!(
            "PF {}: rdmaProtocol {w} but irdmaRoceEna says {m} (the older irdma picks one protocol for every port)",
            p.bdf
        )),
        (Some(w), _) => Ok(w),
        (None, Some(m)) => Ok(m),
        (None, None) => Ok(RdmaProtocol::RoceV2),
    }
}

/// The VF `index` of `pf` (already planned), allocating names and numbers from `alloc`.
pub(super) fn vf_func(pf: &Func, p: &PfDesc, index: u32, alloc: &mut Alloc) -> Result<Func, String> {
    let Role::Pf { model, offset, ordinal, .. } = pf.role else {
        return Err(format!("{} is not an SR-IOV PF", pf.bdf));
    };
    let bdf = from_rid(pf.bdf.domain, rid(pf.bdf) as u64 + offset as u64 + index as u64)
        .ok_or_else(|| format!("PF {}: VF {index} would be past bus ff", pf.bdf))?;
    let is_mlx5 = model.is_mlx5();
    let vfio = p.vfs_vfio.contains(&index);
    let mac = mac_for(bdf, None);
    let net = (!vfio).then(|| NetPlan {
        name: match &p.vf_netdev_prefix {
            Some(pre) => format!("{pre}{index}"),
            None => format!("{}v{index}", p.netdev),
        },
        ifindex: alloc.ifindex(),
        mac,
        mtu: 1500,
        speed: p.speed.unwrap_or(default_speed(model)),
        operstate: p.operstate.clone(),
        ipv4: (index <= 252)
            .then(|| Ipv4Addr::new(192, 168, (ordinal as u8).wrapping_add(1), (index + 2) as u8)),
        present: !p.vfs_without_netdev.contains(&index),
        ofed: None,
    });
    let vf_rdma = !vfio && p.vf_rdma.unwrap_or(is_mlx5);
    let rdma = vf_rdma.then(|| {
        let name = match (p.rdma_naming, is_mlx5) {
            (RdmaNaming::Rocep, _) => format!("{}v{index}", rocep(pf.bdf)),
            (RdmaNaming::Mlx5, true) => alloc.kernel_name("mlx5_"),
            (RdmaNaming::Mlx5, false) => alloc.kernel_name("irdma"),
        };
        alloc.names.insert(name.clone());
        RdmaPlan {
            name,
            aux: Some(if is_mlx5 { alloc.aux("mlx5_core.rdma") } else { alloc.aux("iavf.rdma") }),
            uverbs: lowest_free(&mut alloc.uverbs),
            mad: is_mlx5.then(|| lowest_free(&mut alloc.umad)),
            guid: guid_for(&mac),
            hw_counters: is_mlx5,
            configfs: None,
            // iavf's RDMA (out-of-tree irdma) and mlx5 VFs: RoCE.
            protocol: RdmaProtocol::RoceV2,
            in_other_netns: false,
        }
    });
    let mut aux_dirs = vec![];
    if is_mlx5 && !vfio {
        aux_dirs.push(alloc.aux("mlx5_core.eth"));
    }
    Ok(Func {
        bdf,
        parent: pf.parent.clone(),
        vendor: model.vendor(),
        device: model.vf_device(),
        class: 0x020000,
        driver: Some(if vfio { VFIO_PCI.into() } else { model.vf_driver().into() }),
        numa: pf.numa,
        role: Role::Vf { pf: pf.bdf, index },
        net,
        rdma,
        aux_dirs,
        iommu_group: Some(lowest_free(&mut alloc.iommu)),
    })
}
