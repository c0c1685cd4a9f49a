//! The simulated node: a [`NodeDesc`] materialised as a sysfs + `/dev` tree
//! in a temporary directory, laid out the way a real kernel lays it out, so
//! that [`crate::discover`] (and every binary given `--sysfs-root`) reads it
//! exactly as it would read `/sys`.
//!
//! ```text
//! <tmp>/node.yaml                       the description (DCB settings for the operator)
//! <tmp>/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/0000:3c:00.0/0000:3d:00.0/
//!     vendor device class numa_node sriov_totalvfs sriov_numvfs virtfnN -> ../<vf>
//!     driver -> ../../../../../../bus/pci/drivers/mlx5_core
//!     net/ens1f0np0/{ifindex,speed,operstate,mtu,address,type,carrier,ecn/..,qos/trust}
//!     mlx5_core.eth.0/  mlx5_core.rdma.0/infiniband/mlx5_0/{node_guid,ports/1/..}
//!     mlx5_core.rdma.0/infiniband_verbs/uverbs0/{ibdev,dev}
//!     mlx5_core.rdma.0/infiniband_mad/{umad0,issm0}/{ibdev,port,dev}
//! <tmp>/sys/bus/pci/devices/<bdf> -> ../../../devices/pci…/<bdf>
//! <tmp>/sys/class/{net,infiniband,infiniband_verbs,infiniband_mad}/<name> -> ../../devices/…
//! <tmp>/sys/kernel/config/rdma_cm/<rdmadev>/ports/1/{default_roce_mode,default_roce_tos}
//! <tmp>/sys/module/ib_core/parameters/netns_mode      Y (shared) or N (exclusive)
//! <tmp>/dev/infiniband/{uverbsN,umadN,issmN,rdma_cm}
//! ```
//!
//! ## Deterministic rules (documented because tests and docs rely on them)
//! - **Bridges.** A device behind a switch sits under `<root port>/<switch upstream>/<downstream>`,
//!   one downstream port `DDDD:<up bus+1>:<k>.0` per distinct device bus behind that switch
//!   (k counts from 0 in order of appearance). A device on bus 00 sits directly under
//!   `pciDDDD:00` (integrated); any other switchless device bus gets its own root port
//!   `DDDD:00:<k>.0` (k from 1).
//! - **VF addresses** (SR-IOV `First VF Offset`/`VF Stride`, PCIe spec 9.3.3.9/10): VF `i` of a PF
//!   has routing id `PF + offset + i` (stride 1, carrying into the next device/bus). For the j-th
//!   PF of a slot (PFs sorted by function): mlx5 `offset = (PFs in slot - j) + Σ_{k<j} totalVfs_k`
//!   (VFs follow the last PF function, as ConnectX firmware does); E810 `offset = (8 - j) +
//!   Σ_{k<j} totalVfs_k` (VFs start on the next device number).
//! - **Numbering** (kernel ida: lowest free number) in PCI order, PFs first then VFs (PF by PF,
//!   VF by index): `mlx5_N` / `irdmaN` RDMA names (naming `mlx5`), `uverbsN`, `umadN`/`issmN`,
//!   aux ids `mlx5_core.{eth,rdma}.N`, `ice.roce.N`, `iavf.rdma.N`. `rocep` naming gives the PF
//!   `rocep<bus>s<dev>f<fn>` (decimal) and VF `i` `<that>v<i>`. Netdev ifindex: 2, 3, … in the same
//!   order. VF netdevs are `<pf netdev>v<i>` unless `vfNetdevPrefix`.
//! - **Addresses.** PF MACs use the vendor OUI, VF MACs are locally administered, both end in the
//!   PCI address. The n-th PF of the node (PCI order, from 0) has IPv4 `192.168.<n+1>.1`, its VF `i`
//!   `192.168.<n+1>.<i+2>` (none past .254); each RDMA port's GID table (8 entries here; 255 on
//!   mlx5 hardware) holds the link-local GID at 0 (RoCE v1) and 1 (RoCE v2) and, while the netdev
//!   is on the host with its IPv4, the IPv4-mapped GID at 2 and 3.
//! - **Char devices**: `uverbsN` 231:(192+N) for N < 32, `umadN` 231:N and `issmN` 231:(64+N) for
//!   N < 64 (`IB_UVERBS_MAJOR`, `IB_UVERBS_BASE_MINOR`, `IB_UMAD_MINOR_BASE`,
//!   `IB_UMAD_NUM_FIXED_MINOR` in drivers/infiniband/core/uverbs_main.c and user_mad.c); past the
//!   fixed ranges the kernel allocates a dynamic major, which the sim fixes at 240 (uverbs) and
//!   241 (umad; issm at minor +960). `rdma_cm` is a misc device (major 10, dynamic minor, 58 here).
//!   Real char devices when running as root, regular files otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use crate::inventory::{CharDev, GidKind, Inventory, LinkLayer, Netdev, RdmaDev, RdmaVia};
use crate::pci::PciAddr;
use crate::roots::Roots;
use crate::simdesc::{AdapterDesc, DescError, Model, NodeDesc, PfDesc, RdmaNaming, RoceDesc};

/// GID table length of every simulated RDMA port.
pub const GID_TBL_LEN: u32 = 8;
/// Major of the fixed uverbs/umad char device range (`IB_UVERBS_MAJOR`, `IB_UMAD_MAJOR`).
const IB_MAJOR: u32 = 231;
/// `IB_UVERBS_BASE_MINOR`.
const UVERBS_BASE_MINOR: u32 = 192;
/// `IB_UVERBS_NUM_FIXED_MINOR`.
const UVERBS_FIXED: u32 = 32;
/// `IB_UMAD_NUM_FIXED_MINOR`.
const UMAD_FIXED: u32 = 64;
/// `IB_UMAD_MAX_PORTS - IB_UMAD_NUM_FIXED_MINOR` (1024 - 64): issm offset in the dynamic range.
const UMAD_DYNAMIC: u32 = 960;
/// Stand-ins for the dynamic majors the kernel would allocate.
const UVERBS_DYN_MAJOR: u32 = 240;
const UMAD_DYN_MAJOR: u32 = 241;
/// `MISC_MAJOR` and the minor the sim gives `rdma_cm` (dynamic on a real kernel).
const RDMA_CM_DEV: (u32, u32) = (10, 58);

/// Why a simulated node could not be built or changed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The description is unusable.
    #[error(transparent)]
    Desc(#[from] DescError),
    /// Writing the tree failed.
    #[error("simulated node: cannot write {path:?}: {source}")]
    Io {
        /// The path being written.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A mutator named something the node does not have.
    #[error("simulated node has no {0}")]
    NotFound(String),
    /// A mutator asked for something the kernel would refuse.
    #[error("simulated node: {0}")]
    Refused(String),
}

/// Reads and validates a node description. Parse errors name the file, the
/// line and the field (`adapters[0].pfs[1].vfs: invalid type … at line 9 column 15`).
pub fn load_desc(path: impl AsRef<Path>) -> Result<NodeDesc, DescError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| DescError::Io { path: shown.clone(), source })?;
    let desc: NodeDesc =
        serde_yaml::from_str(&text).map_err(|source| DescError::Parse { path: shown.clone(), source })?;
    validate(&desc).map_err(|what| DescError::Invalid { path: shown, what })?;
    Ok(desc)
}

/// A generated node for benchmarks: `pfs` single-port ConnectX-6 Dx adapters,
/// each PF on its own bus with `vfs_per_pf` VFs, alternating NUMA nodes.
pub fn big_node(pfs: u32, vfs_per_pf: u32) -> NodeDesc {
    let adapters = (0..pfs)
        .map(|i| {
            let pf: PfDesc = serde_yaml::from_str(&format!(
                "{{bdf: \"0000:{:02x}:00.0\", netdev: \"ens{}f0np0\", vfs: {vfs_per_pf}, totalVfs: {}, \
                 numa: {}, mtu: 9000, rdma: mlx5_{i}}}",
                0x10 + i * 0x10,
                i + 1,
                vfs_per_pf.max(1),
                i % 2
            ))
            .expect("generated PF description is valid YAML");
            AdapterDesc { model: Model::ConnectX6Dx, pfs: vec![pf] }
        })
        .collect();
    NodeDesc {
        node: format!("big-{pfs}x{vfs_per_pf}"),
        switches: vec![],
        adapters,
        gpus: vec![],
        rdma_cm: true,
        rdma_netns_mode: Default::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// The plan: every PCI function of the node with what the tree shows for it.

#[derive(Debug, Clone)]
struct Func {
    bdf: PciAddr,
    /// Directory holding the device directory, relative to `sys/`.
    parent: PathBuf,
    vendor: u16,
    device: u16,
    class: u32,
    driver: Option<String>,
    numa: Option<u32>,
    role: Role,
    net: Option<NetPlan>,
    rdma: Option<RdmaPlan>,
    /// Auxiliary devices without RDMA (`mlx5_core.eth.N`).
    aux_dirs: Vec<String>,
}

#[derive(Debug, Clone)]
enum Role {
    Bridge,
    Pf { model: Model, total: u32, num: u32, offset: u32, ordinal: u32 },
    Vf { pf: PciAddr, index: u32 },
    Hca,
    Gpu,
}

#[derive(Debug, Clone)]
struct NetPlan {
    name: String,
    ifindex: u32,
    mac: [u8; 6],
    mtu: u32,
    speed: u32,
    operstate: String,
    ipv4: Option<Ipv4Addr>,
    /// On the host (false: moved into a pod).
    present: bool,
    /// NVIDIA OFED ECN/QoS sysfs to write.
    ofed: Option<RoceDesc>,
}

#[derive(Debug, Clone)]
struct RdmaPlan {
    name: String,
    aux: Option<String>,
    uverbs: u32,
    mad: Option<u32>,
    guid: String,
    hw_counters: bool,
    /// rdma_cm configfs (`default_roce_mode`, `default_roce_tos`).
    configfs: Option<(String, u8)>,
}

impl Func {
    fn dir(&self) -> PathBuf {
        self.parent.join(self.bdf.to_string())
    }
    /// Where the RDMA device and its char devices hang: the function or its aux device.
    fn rdma_base(&self) -> Option<PathBuf> {
        let r = self.rdma.as_ref()?;
        Some(match &r.aux {
            Some(a) => self.dir().join(a),
            None => self.dir(),
        })
    }
}

fn rid(a: PciAddr) -> u32 {
    (a.bus as u32) << 8 | (a.device as u32) << 3 | a.function as u32
}

fn from_rid(domain: u32, r: u64) -> Option<PciAddr> {
    (r <= 0xffff).then(|| PciAddr::new(domain, (r >> 8) as u8, ((r >> 3) & 0x1f) as u8, (r & 7) as u8))
}

fn default_speed(m: Model) -> u32 {
    match m {
        Model::E810Xxv => 25_000,
        _ => 100_000,
    }
}

fn rocep(pf: PciAddr) -> String {
    format!("rocep{}s{}f{}", pf.bus, pf.device, pf.function)
}

fn mac_for(bdf: PciAddr, oui: Option<[u8; 3]>) -> [u8; 6] {
    let devfn = bdf.device << 3 | bdf.function;
    match oui {
        Some(o) => [o[0], o[1], o[2], bdf.bus, devfn, bdf.domain as u8],
        None => [0x02, bdf.domain as u8, bdf.bus, devfn, 0x00, 0x01],
    }
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// EUI-64 interface id from a MAC (RFC 4291 appendix A: insert ff:fe, flip U/L).
fn eui64(mac: &[u8; 6]) -> [u8; 8] {
    [mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

fn guid_for(mac: &[u8; 6]) -> String {
    let e = eui64(mac);
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]
    )
}

/// How the kernel prints a GID (`%pI6`: eight groups of four hex digits).
fn fmt_gid(ip: Ipv6Addr) -> String {
    ip.segments().iter().map(|s| format!("{s:04x}")).collect::<Vec<_>>().join(":")
}

fn link_local(mac: &[u8; 6]) -> Ipv6Addr {
    let e = eui64(mac);
    let mut b = [0u8; 16];
    b[0] = 0xfe;
    b[1] = 0x80;
    b[8..].copy_from_slice(&e);
    Ipv6Addr::from(b)
}

/// One GID table entry the sim writes: (index, GID, type attribute, netdev, address).
struct GidEntry {
    index: u32,
    gid: Ipv6Addr,
    kind: &'static str,
    ndev: String,
    ip: IpAddr,
}

fn gid_entries(net: &NetPlan) -> Vec<GidEntry> {
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

fn uverbs_dev(n: u32) -> (u32, u32) {
    if n < UVERBS_FIXED {
        (IB_MAJOR, UVERBS_BASE_MINOR + n)
    } else {
        (UVERBS_DYN_MAJOR, n - UVERBS_FIXED)
    }
}

fn umad_dev(n: u32, issm: bool) -> (u32, u32) {
    match (n < UMAD_FIXED, issm) {
        (true, false) => (IB_MAJOR, n),
        (true, true) => (IB_MAJOR, UMAD_FIXED + n),
        (false, false) => (UMAD_DYN_MAJOR, n - UMAD_FIXED),
        (false, true) => (UMAD_DYN_MAJOR, n - UMAD_FIXED + UMAD_DYNAMIC),
    }
}

/// The RoCE path MTU the kernel derives from a netdev MTU (`iboe_get_mtu` in
/// include/rdma/ib_addr.h: subtract GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4,
/// then round down to an IB MTU), in bytes. `None` below 256.
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room)
}

/// Lowest-free allocators, as the kernel's ida hands out numbers.
#[derive(Default)]
struct Alloc {
    names: BTreeSet<String>,
    uverbs: BTreeSet<u32>,
    umad: BTreeSet<u32>,
    aux: BTreeMap<String, BTreeSet<u32>>,
    ifindex_max: u32,
}

fn lowest_free(set: &mut BTreeSet<u32>) -> u32 {
    let n = (0..).find(|n| !set.contains(n)).expect("u32 range not exhausted");
    set.insert(n);
    n
}

impl Alloc {
    fn from_funcs<'a>(funcs: impl Iterator<Item = &'a Func>) -> Self {
        let mut a = Alloc { ifindex_max: 1, ..Default::default() };
        for f in funcs {
            if let Some(n) = &f.net {
                a.ifindex_max = a.ifindex_max.max(n.ifindex);
            }
            for aux in f.aux_dirs.iter().chain(f.rdma.as_ref().and_then(|r| r.aux.as_ref())) {
                if let Some((prefix, id)) = aux.rsplit_once('.') {
                    if let Ok(id) = id.parse() {
                        a.aux.entry(prefix.to_string()).or_default().insert(id);
                    }
                }
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
    fn ifindex(&mut self) -> u32 {
        self.ifindex_max += 1;
        self.ifindex_max
    }
    fn aux(&mut self, prefix: &str) -> String {
        let id = lowest_free(self.aux.entry(prefix.to_string()).or_default());
        format!("{prefix}.{id}")
    }
    fn kernel_name(&mut self, prefix: &str) -> String {
        let name = (0..).map(|n| format!("{prefix}{n}")).find(|n| !self.names.contains(n)).expect("names");
        self.names.insert(name.clone());
        name
    }
}

fn yaml_err(msg: String) -> DescError {
    DescError::Invalid { path: "<description>".into(), what: msg }
}

/// Checks a description for what YAML types cannot: duplicate addresses and
/// names, unknown switches, more VFs than `totalVfs`, indices out of range.
pub fn validate(desc: &NodeDesc) -> Result<(), String> {
    plan(desc).map(|_| ())
}

fn check_netdev_name(n: &str, what: &str) -> Result<(), String> {
    // IFNAMSIZ is 16 including the NUL; the kernel refuses '/', ':' and whitespace (dev_valid_name).
    if n.is_empty() || n.len() > 15 || n.contains(['/', ':']) || n.chars().any(char::is_whitespace) {
        return Err(format!("{what}: {n:?} is not a valid interface name (1-15 chars, no '/', ':', spaces)"));
    }
    Ok(())
}

/// Lays out the whole node. Errors say which PF, switch or address is wrong.
fn plan(desc: &NodeDesc) -> Result<BTreeMap<PciAddr, Func>, String> {
    let mut funcs: BTreeMap<PciAddr, Func> = BTreeMap::new();
    let switches: BTreeMap<&str, &crate::simdesc::SwitchDesc> =
        desc.switches.iter().map(|s| (s.name.as_str(), s)).collect();
    if switches.len() != desc.switches.len() {
        return Err("duplicate switch name".into());
    }
    let add = |f: Func, funcs: &mut BTreeMap<PciAddr, Func>| -> Result<(), String> {
        let bdf = f.bdf;
        if funcs.insert(bdf, f).is_some() {
            return Err(format!("duplicate PCI address {bdf}"));
        }
        Ok(())
    };
    let bridge = |bdf: PciAddr, parent: PathBuf, vendor: u16, device: u16| Func {
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
    };
    // Switches: root port + upstream port.
    for s in &desc.switches {
        let host = PathBuf::from(format!("devices/pci{:04x}:{:02x}", s.root_port.domain, s.root_port.bus));
        if s.upstream.domain != s.root_port.domain {
            return Err(format!("switch {}: upstream {} not in the root port's domain", s.name, s.upstream));
        }
        add(bridge(s.root_port, host.clone(), 0x8086, 0x347a), &mut funcs)?;
        add(bridge(s.upstream, host.join(s.root_port.to_string()), 0x10b5, 0xc030), &mut funcs)?;
    }
    // Parent directory of an endpoint on `bus`, creating bridges on first use.
    let mut parents: BTreeMap<(Option<String>, u32, u8), PathBuf> = BTreeMap::new();
    let mut downstream_count: BTreeMap<String, u8> = BTreeMap::new();
    let mut root_count: BTreeMap<u32, u8> = BTreeMap::new();
    let mut parent_of = |bdf: PciAddr,
                         switch: &Option<String>,
                         funcs: &mut BTreeMap<PciAddr, Func>|
     -> Result<PathBuf, String> {
        let key = (switch.clone(), bdf.domain, bdf.bus);
        if let Some(p) = parents.get(&key) {
            return Ok(p.clone());
        }
        let p = match switch {
            Some(name) => {
                let s =
                    switches.get(name.as_str()).ok_or_else(|| format!("{bdf}: unknown switch {name:?}"))?;
                if s.root_port.domain != bdf.domain {
                    return Err(format!("{bdf}: switch {name} is in another PCI domain"));
                }
                let k = downstream_count.entry(name.clone()).or_insert(0);
                if *k > 31 || s.upstream.bus == 0xff {
                    return Err(format!("switch {name}: too many downstream ports"));
                }
                let ds = PciAddr::new(bdf.domain, s.upstream.bus + 1, *k, 0);
                *k += 1;
                let up_dir =
                    PathBuf::from(format!("devices/pci{:04x}:{:02x}", s.root_port.domain, s.root_port.bus))
                        .join(s.root_port.to_string())
                        .join(s.upstream.to_string());
                add(bridge(ds, up_dir.clone(), 0x10b5, 0xc030), funcs)?;
                up_dir.join(ds.to_string())
            }
            None if bdf.bus == 0 => PathBuf::from(format!("devices/pci{:04x}:00", bdf.domain)),
            None => {
                let k = root_count.entry(bdf.domain).or_insert(0);
                *k += 1;
                if *k > 31 {
                    return Err("too many switchless device buses for one PCI domain".into());
                }
                let rp = PciAddr::new(bdf.domain, 0, *k, 0);
                let host = PathBuf::from(format!("devices/pci{:04x}:00", bdf.domain));
                add(bridge(rp, host.clone(), 0x8086, 0x347a), funcs)?;
                host.join(rp.to_string())
            }
        };
        parents.insert(key, p.clone());
        Ok(p)
    };

    // PFs in PCI order, with their adapter.
    let mut pfs: Vec<(&AdapterDesc, &PfDesc)> =
        desc.adapters.iter().flat_map(|a| a.pfs.iter().map(move |p| (a, p))).collect();
    pfs.sort_by_key(|(_, p)| p.bdf);
    let mut netdev_names = BTreeSet::new();
    let mut alloc = Alloc { ifindex_max: 1, ..Default::default() };
    for (_, p) in &pfs {
        if let Some(r) = &p.rdma {
            if r.is_empty() || r.len() > 63 || r.contains('/') || r.chars().any(char::is_whitespace) {
                return Err(format!("PF {}: {r:?} is not a valid RDMA device name", p.bdf));
            }
            if !alloc.names.insert(r.clone()) {
                return Err(format!("duplicate RDMA device name {r}"));
            }
        }
    }
    for (ordinal, (adapter, p)) in pfs.iter().enumerate() {
        let model = adapter.model;
        check_netdev_name(&p.netdev, &format!("PF {}", p.bdf))?;
        if !netdev_names.insert(p.netdev.clone()) {
            return Err(format!("duplicate netdev name {}", p.netdev));
        }
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
        let parent = parent_of(p.bdf, &p.switch, &mut funcs)?;
        let is_mlx5 = model.is_mlx5();
        // VF routing offset (see the module docs).
        let mut slot: Vec<&PfDesc> = desc
            .adapters
            .iter()
            .flat_map(|a| a.pfs.iter())
            .filter(|q| {
                q.bdf.domain == p.bdf.domain && q.bdf.bus == p.bdf.bus && q.bdf.device == p.bdf.device
            })
            .collect();
        slot.sort_by_key(|q| q.bdf.function);
        let j = slot.iter().position(|q| q.bdf == p.bdf).unwrap_or(0) as u32;
        // u64: descriptions may carry absurd totalVfs; an offset past 16 bits is refused below.
        let before: u64 =
            slot[..j as usize].iter().map(|q| q.total_vfs.unwrap_or(model.default_total_vfs()) as u64).sum();
        let offset =
            if is_mlx5 { slot.len() as u64 - j as u64 + before } else { 8 - j.min(7) as u64 + before };
        let Ok(offset) = u32::try_from(offset).map(|o| o.min(0x1_0000)) else {
            return Err(format!("PF {}: VF offset past the PCI routing-id space", p.bdf));
        };
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
        let rdma = p.rdma.as_ref().map(|name| {
            let aux = if is_mlx5 {
                aux_dirs.push(alloc.aux("mlx5_core.eth"));
                alloc.aux("mlx5_core.rdma")
            } else {
                alloc.aux("ice.roce")
            };
            RdmaPlan {
                name: name.clone(),
                aux: Some(aux),
                uverbs: lowest_free(&mut alloc.uverbs),
                mad: is_mlx5.then(|| lowest_free(&mut alloc.umad)),
                guid: guid_for(&mac),
                hw_counters: is_mlx5,
                configfs: Some((p.roce.roce_mode.clone(), p.roce.tos)),
            }
        });
        if rdma.is_none() && is_mlx5 {
            aux_dirs.push(alloc.aux("mlx5_core.eth"));
        }
        let role = if model == Model::ConnectX6DxNoSriov {
            Role::Hca
        } else {
            Role::Pf { model, total, num: p.vfs, offset, ordinal: ordinal as u32 }
        };
        let f = Func {
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
        };
        add(f, &mut funcs)?;
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
            add(vf, &mut funcs)?;
        }
    }
    for g in &desc.gpus {
        let parent = parent_of(g.bdf, &g.switch, &mut funcs)?;
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
        };
        add(f, &mut funcs)?;
    }
    // Bridges report the NUMA node of the first endpoint below them.
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
    Ok(funcs)
}

/// The VF `index` of `pf` (already planned), allocating names and numbers from `alloc`.
fn vf_func(pf: &Func, p: &PfDesc, index: u32, alloc: &mut Alloc) -> Result<Func, String> {
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
        driver: Some(if vfio { "vfio-pci".into() } else { model.vf_driver().into() }),
        numa: pf.numa,
        role: Role::Vf { pf: pf.bdf, index },
        net,
        rdma,
        aux_dirs,
    })
}

// ---------------------------------------------------------------------------------------------
// Writing the tree.

struct Writer {
    sys: PathBuf,
    dev: PathBuf,
    mknod: bool,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
    move |source| SimError::Io { path: path.to_path_buf(), source }
}

/// `n` times `../`: from a directory `n` levels below `sys/` back to `sys/`.
fn ups(n: usize) -> String {
    "../".repeat(n)
}

fn depth(rel: &Path) -> usize {
    rel.components().count()
}

impl Writer {
    fn mkdir(&self, rel: &Path) -> Result<(), SimError> {
        let p = self.sys.join(rel);
        std::fs::create_dir_all(&p).map_err(io_err(&p))
    }
    fn file(&self, rel: &Path, contents: impl AsRef<str>) -> Result<(), SimError> {
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
    fn link(&self, rel: &Path, target: impl AsRef<Path>) -> Result<(), SimError> {
        let p = self.sys.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p).map_err(io_err(&p))
    }
    /// A link at `sys/<link_rel>` pointing at `sys/<to_rel>`, written relative.
    fn link_to(&self, link_rel: &Path, to_rel: &Path) -> Result<(), SimError> {
        let up = depth(link_rel) - 1;
        self.link(link_rel, format!("{}{}", ups(up), to_rel.display()))
    }
    fn remove(&self, rel: &Path) {
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
    fn char_dev(&self, name: &str, (major, minor): (u32, u32)) -> Result<(), SimError> {
        let dir = self.dev.join("infiniband");
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

    fn write_func(&self, f: &Func) -> Result<(), SimError> {
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

    fn write_net(&self, f: &Func) -> Result<(), SimError> {
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
    fn write_link_state(&self, f: &Func) -> Result<(), SimError> {
        let Some(n) = f.net.as_ref().filter(|n| n.present) else { return Ok(()) };
        let nd = f.dir().join("net").join(&n.name);
        let up = n.operstate == "up";
        self.file(&nd.join("operstate"), &n.operstate)?;
        self.file(&nd.join("carrier"), if up { "1" } else { "0" })?;
        self.file(&nd.join("speed"), if up { n.speed.to_string() } else { "-1".into() })
    }

    fn write_rdma(&self, f: &Func) -> Result<(), SimError> {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return Ok(()) };
        if let Some(aux) = &r.aux {
            self.mkdir(&base)?;
            self.link_to(&PathBuf::from("bus/auxiliary/devices").join(aux), &base)?;
        }
        let ib = base.join("infiniband").join(&r.name);
        self.mkdir(&ib)?;
        self.file(&ib.join("node_guid"), &r.guid)?;
        self.file(&ib.join("node_type"), "1: CA")?;
        self.link(&ib.join("device"), "../../")?;
        self.link_to(&PathBuf::from("class/infiniband").join(&r.name), &ib)?;
        self.write_port(f)?;
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

    /// Port 1 of the function's RDMA device: state follows the netdev, GIDs follow its addresses.
    fn write_port(&self, f: &Func) -> Result<(), SimError> {
        let (Some(r), Some(base)) = (&f.rdma, f.rdma_base()) else { return Ok(()) };
        let port = base.join("infiniband").join(&r.name).join("ports/1");
        let up = f.net.as_ref().is_some_and(|n| n.operstate == "up");
        self.file(&port.join("state"), if up { "4: ACTIVE" } else { "1: DOWN" })?;
        self.file(&port.join("phys_state"), if up { "5: LinkUp" } else { "3: Disabled" })?;
        self.file(&port.join("link_layer"), "Ethernet")?;
        let gbps = f.net.as_ref().map(|n| n.speed / 1000).unwrap_or(0);
        self.file(&port.join("rate"), format!("{gbps} Gb/sec ({}X EDR)", if gbps >= 100 { 4 } else { 1 }))?;
        let entries = f.net.as_ref().map(gid_entries).unwrap_or_default();
        for i in 0..GID_TBL_LEN {
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
        }
        Ok(())
    }

    /// Removes a function and everything pointing at it, except its PF's
    /// `virtfnN` link (the kernel leaves that dangling when a VF is removed alone).
    fn remove_func(&self, f: &Func) {
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
        self.remove(&PathBuf::from("bus/pci/devices").join(f.bdf.to_string()));
        self.remove(&f.dir());
    }

    fn remove_rdma_links(&self, r: &RdmaPlan) {
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

// ---------------------------------------------------------------------------------------------
// The simulated node.

// fsblkcnt_t / c_ulong are u32 on some targets: the casts are not always no-ops.
#[allow(clippy::unnecessary_cast)]
fn default_parent() -> PathBuf {
    if std::env::var_os("TMPDIR").is_some_and(|v| !v.is_empty()) {
        return std::env::temp_dir();
    }
    let shm = Path::new("/dev/shm");
    let roomy = nix::sys::statvfs::statvfs(shm)
        .map(|s| (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64) >= 512 << 20)
        .unwrap_or(false);
    if roomy && nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A materialised simulated node. The tree lives as long as this value.
pub struct Sim {
    dir: tempfile::TempDir,
    desc: NodeDesc,
    funcs: BTreeMap<PciAddr, Func>,
    removed_char_devs: BTreeSet<String>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("path", &self.dir.path()).field("node", &self.desc.node).finish()
    }
}

impl Sim {
    /// Writes `desc` as a sysfs + `/dev` tree in a new temporary directory.
    ///
    /// The directory goes under `$TMPDIR` when that is set, else under `/dev/shm`
    /// when it is a writable tmpfs with at least 512 MiB free (in memory, like
    /// sysfs, and tens of times faster to fill than a disk), else under `/tmp`.
    pub fn materialise(desc: &NodeDesc) -> Result<Sim, SimError> {
        Sim::materialise_in(desc, &default_parent())
    }

    /// [`Sim::materialise`] in a new temporary directory under `parent`.
    pub fn materialise_in(desc: &NodeDesc, parent: &Path) -> Result<Sim, SimError> {
        let funcs = plan(desc).map_err(yaml_err)?;
        let dir = tempfile::Builder::new()
            .prefix("kube-rdma-sim-")
            .tempdir_in(parent)
            .map_err(|source| SimError::Io { path: parent.to_path_buf(), source })?;
        let sim = Sim { dir, desc: desc.clone(), funcs, removed_char_devs: BTreeSet::new() };
        let w = sim.writer();
        for d in [
            "bus/pci/devices",
            "bus/pci/drivers",
            "bus/auxiliary/devices",
            "class/net",
            "class/infiniband",
            "class/infiniband_mad",
            "devices/virtual/net",
        ] {
            w.mkdir(Path::new(d))?;
        }
        w.file(Path::new("class/infiniband_verbs/abi_version"), "6")?;
        // ib_core's bool module parameter `netns_mode` (drivers/infiniband/core/device.c):
        // Y = shared (the boot default), N = exclusive.
        let shared = desc.rdma_netns_mode == crate::simdesc::NetnsMode::Shared;
        w.file(Path::new("module/ib_core/parameters/netns_mode"), if shared { "Y" } else { "N" })?;
        std::fs::create_dir_all(&w.dev).map_err(io_err(&w.dev))?;
        // Bridges first (parents), then functions in PCI order; PF directories exist before VF links.
        let order = |f: &&Func| match f.role {
            Role::Bridge => 0,
            Role::Pf { .. } | Role::Hca | Role::Gpu => 1,
            Role::Vf { .. } => 2,
        };
        let mut all: Vec<&Func> = sim.funcs.values().collect();
        all.sort_by_key(|f| (order(f), f.parent.as_os_str().len(), f.bdf));
        for f in all {
            w.write_func(f)?;
        }
        if desc.rdma_cm {
            w.char_dev("rdma_cm", RDMA_CM_DEV)?;
        }
        sim.save_desc()?;
        Ok(sim)
    }

    /// Loads a description file ([`load_desc`]) and materialises it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Sim, SimError> {
        Sim::materialise(&load_desc(path)?)
    }

    /// The roots to read the node from (`<dir>/sys`, `<dir>/dev`).
    pub fn roots(&self) -> Roots {
        Roots { sysfs: self.dir.path().join("sys"), dev: self.dir.path().join("dev") }
    }

    /// The description (kept in step with [`Sim::set_num_vfs`] and [`Sim::set_operstate`]).
    pub fn desc(&self) -> &NodeDesc {
        &self.desc
    }

    /// The temporary directory holding `sys/`, `dev/` and `node.yaml`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/node.yaml`, the serialized description.
    pub fn desc_path(&self) -> PathBuf {
        self.dir.path().join("node.yaml")
    }

    fn writer(&self) -> Writer {
        Writer {
            sys: self.dir.path().join("sys"),
            dev: self.dir.path().join("dev"),
            mknod: nix::unistd::geteuid().is_root(),
        }
    }

    fn save_desc(&self) -> Result<(), SimError> {
        let p = self.desc_path();
        let yaml =
            serde_yaml::to_string(&self.desc).map_err(|e| SimError::Refused(format!("serialize: {e}")))?;
        std::fs::write(&p, yaml).map_err(io_err(&p))
    }

    fn func_by_netdev(&mut self, netdev: &str) -> Result<&mut Func, SimError> {
        self.funcs
            .values_mut()
            .find(|f| f.net.as_ref().is_some_and(|n| n.name == netdev))
            .ok_or_else(|| SimError::NotFound(format!("netdev {netdev}")))
    }

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

    /// What discovery must find on this node right now, one line per fact, in the
    /// format of [`describe`].
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        let upstream = |f: &Func| -> Vec<PciAddr> {
            let mut v: Vec<PciAddr> =
                f.parent.components().filter_map(|c| c.as_os_str().to_str()?.parse().ok()).collect();
            v.reverse();
            v
        };
        let numa = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or("-".into());
        let hex = |v: u16| format!("{v:04x}");
        let rank = |f: &&Func| match f.role {
            Role::Pf { .. } => 0,
            Role::Hca => 1,
            Role::Gpu => 2,
            Role::Bridge | Role::Vf { .. } => 3,
        };
        let mut ordered: Vec<&Func> = self.funcs.values().collect();
        ordered.sort_by_key(|f| (rank(f), f.bdf));
        for f in ordered {
            match &f.role {
                Role::Pf { total, num, .. } => {
                    out.push(pf_line(
                        f.bdf,
                        Some(f.vendor),
                        Some(f.device),
                        f.driver.as_deref(),
                        Some(*num),
                        Some(*total),
                        f.numa,
                        &upstream(f),
                    ));
                    self.func_lines(f, "  ", &mut out);
                    let mut vfs: Vec<(&u32, &Func)> = self
                        .funcs
                        .values()
                        .filter_map(|v| match v.role {
                            Role::Vf { pf, ref index } if pf == f.bdf => Some((index, v)),
                            _ => None,
                        })
                        .collect();
                    vfs.sort_by_key(|(i, _)| **i);
                    for (i, v) in vfs {
                        out.push(format!(
                            "  vf{i} {} {}:{} driver={} numa={}",
                            v.bdf,
                            hex(v.vendor),
                            hex(v.device),
                            v.driver.as_deref().unwrap_or("-"),
                            numa(v.numa)
                        ));
                        if v.net.as_ref().is_none_or(|n| !n.present) {
                            out.push("    netdev -".into());
                        }
                        self.func_lines(v, "    ", &mut out);
                    }
                }
                // A NIC without SR-IOV and without RDMA is not in the inventory.
                Role::Hca if f.rdma.is_some() => {
                    let up: Vec<String> = upstream(f).iter().map(|a| a.to_string()).collect();
                    out.push(format!(
                        "hca {} {}:{} driver={} numa={} upstream={}",
                        f.bdf,
                        hex(f.vendor),
                        hex(f.device),
                        f.driver.as_deref().unwrap_or("-"),
                        numa(f.numa),
                        up.join(",")
                    ));
                    self.func_lines(f, "  ", &mut out);
                }
                Role::Gpu => {
                    let up: Vec<String> = upstream(f).iter().map(|a| a.to_string()).collect();
                    out.push(format!(
                        "gpu {} {}:{} numa={} upstream={}",
                        f.bdf,
                        hex(f.vendor),
                        hex(f.device),
                        numa(f.numa),
                        up.join(",")
                    ));
                }
                Role::Hca | Role::Bridge | Role::Vf { .. } => {}
            }
        }
        out.push(format!("rdma_cm {}", self.desc.rdma_cm && !self.removed_char_devs.contains("rdma_cm")));
        out
    }

    fn func_lines(&self, f: &Func, ind: &str, out: &mut Vec<String>) {
        let net = f.net.as_ref().filter(|n| n.present);
        if let Some(n) = net {
            let up = n.operstate == "up";
            out.push(netdev_line(
                ind,
                &n.name,
                Some(n.ifindex),
                if up { Some(n.speed) } else { None },
                Some(&n.operstate),
                Some(n.mtu),
                Some(&fmt_mac(&n.mac)),
                Some(LinkLayer::Ethernet),
            ));
        }
        let Some(r) = &f.rdma else { return };
        let chardev = |name: String, mm: (u32, u32)| CharDev {
            node_path: PathBuf::from("/dev/infiniband").join(&name),
            present: !self.removed_char_devs.contains(&name),
            name,
            major_minor: Some(mm),
        };
        let umad: Vec<CharDev> =
            r.mad.iter().map(|m| chardev(format!("umad{m}"), umad_dev(*m, false))).collect();
        let issm: Vec<CharDev> =
            r.mad.iter().map(|m| chardev(format!("issm{m}"), umad_dev(*m, true))).collect();
        let via = match &r.aux {
            Some(a) => RdmaVia::Aux(a.clone()),
            None => RdmaVia::Direct,
        };
        out.push(rdma_line(
            ind,
            &r.name,
            &via,
            Some(&r.guid),
            Some(&chardev(format!("uverbs{}", r.uverbs), uverbs_dev(r.uverbs))),
            &umad,
            &issm,
        ));
        let up = f.net.as_ref().is_some_and(|n| n.operstate == "up");
        let mtu = net.and_then(|n| roce_active_mtu(n.mtu));
        out.push(format!(
            "{ind}  port1 {}/{} {:?} mtu={}",
            if up { "ACTIVE" } else { "DOWN" },
            if up { "LinkUp" } else { "Disabled" },
            LinkLayer::Ethernet,
            opt(mtu)
        ));
        for e in f.net.as_ref().map(gid_entries).unwrap_or_default() {
            let kind = if e.kind == "RoCE v2" { GidKind::RoceV2 } else { GidKind::RoceV1 };
            out.push(format!("{ind}    gid{} {} {kind:?} {} {}", e.index, fmt_gid(e.gid), e.ip, e.ndev));
        }
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or("-".into())
}

#[allow(clippy::too_many_arguments)]
fn pf_line(
    bdf: PciAddr,
    vendor: Option<u16>,
    device: Option<u16>,
    driver: Option<&str>,
    num: Option<u32>,
    total: Option<u32>,
    numa: Option<u32>,
    upstream: &[PciAddr],
) -> String {
    let up: Vec<String> = upstream.iter().map(|a| a.to_string()).collect();
    format!(
        "pf {bdf} {}:{} driver={} vfs={}/{} numa={} upstream={}",
        vendor.map(|v| format!("{v:04x}")).unwrap_or("-".into()),
        device.map(|v| format!("{v:04x}")).unwrap_or("-".into()),
        driver.unwrap_or("-"),
        opt(num),
        opt(total),
        opt(numa),
        up.join(",")
    )
}

#[allow(clippy::too_many_arguments)]
fn netdev_line(
    ind: &str,
    name: &str,
    ifindex: Option<u32>,
    speed: Option<u32>,
    operstate: Option<&str>,
    mtu: Option<u32>,
    mac: Option<&str>,
    ll: Option<LinkLayer>,
) -> String {
    format!(
        "{ind}netdev {name} ifindex={} speed={} {} mtu={} mac={} {}",
        opt(ifindex),
        opt(speed),
        operstate.unwrap_or("-"),
        opt(mtu),
        mac.unwrap_or("-"),
        ll.map(|l| format!("{l:?}")).unwrap_or("-".into())
    )
}

fn chardev_str(c: &CharDev) -> String {
    let mm = c.major_minor.map(|(a, b)| format!("{a}:{b}")).unwrap_or("-".into());
    format!("{}({mm}{})", c.name, if c.present { "" } else { ",absent" })
}

fn rdma_line(
    ind: &str,
    name: &str,
    via: &RdmaVia,
    guid: Option<&str>,
    uverbs: Option<&CharDev>,
    umad: &[CharDev],
    issm: &[CharDev],
) -> String {
    let via = match via {
        RdmaVia::Direct => "direct".to_string(),
        RdmaVia::Aux(a) => format!("aux:{a}"),
        RdmaVia::Virtual => "virtual".to_string(),
    };
    let list = |v: &[CharDev]| {
        if v.is_empty() {
            "-".into()
        } else {
            v.iter().map(chardev_str).collect::<Vec<_>>().join(",")
        }
    };
    format!(
        "{ind}rdma {name} via={via} guid={} uverbs={} umad={} issm={}",
        guid.unwrap_or("-"),
        uverbs.map(chardev_str).unwrap_or("-".into()),
        list(umad),
        list(issm)
    )
}

fn netdev_lines(ind: &str, n: &Netdev, out: &mut Vec<String>) {
    out.push(netdev_line(
        ind,
        &n.name,
        n.ifindex,
        n.speed_mbps,
        n.operstate.as_deref(),
        n.mtu,
        n.mac.as_deref(),
        n.link_layer,
    ));
    problem_lines(&format!("{ind}  "), &n.problems, out);
}

fn problem_lines(ind: &str, problems: &[crate::inventory::Problem], out: &mut Vec<String>) {
    for p in problems {
        out.push(format!("{ind}problem {}: {}", p.field, p.reason));
    }
}

fn rdma_lines(ind: &str, r: &RdmaDev, out: &mut Vec<String>) {
    out.push(rdma_line(ind, &r.name, &r.via, r.node_guid.as_deref(), r.uverbs.as_ref(), &r.umad, &r.issm));
    problem_lines(&format!("{ind}  "), &r.problems, out);
    for p in &r.ports {
        out.push(format!(
            "{ind}  port{} {}/{} {} mtu={}",
            p.num,
            p.state.as_deref().unwrap_or("-"),
            p.phys_state.as_deref().unwrap_or("-"),
            p.link_layer.map(|l| format!("{l:?}")).unwrap_or("-".into()),
            opt(p.active_mtu)
        ));
        for g in &p.gids {
            out.push(format!(
                "{ind}    gid{} {} {:?} {} {}",
                g.index,
                g.gid,
                g.kind,
                opt(g.ip),
                g.netdev.as_deref().unwrap_or("-")
            ));
        }
    }
}

/// The inventory as lines of text, one fact per line, in the format of
/// [`Sim::summary`], so that a test can `assert_eq!` the two and read a diff.
/// Problems and skipped devices appear as `problem …` / `skipped …` lines.
pub fn describe(inv: &Inventory) -> Vec<String> {
    let mut out = Vec::new();
    for pf in &inv.pfs {
        out.push(pf_line(
            pf.pci,
            pf.vendor,
            pf.device,
            pf.driver.as_deref(),
            pf.num_vfs,
            pf.total_vfs,
            pf.numa_node,
            &pf.upstream,
        ));
        problem_lines("  ", &pf.problems, &mut out);
        for n in &pf.netdevs {
            netdev_lines("  ", n, &mut out);
        }
        for r in &pf.rdma {
            rdma_lines("  ", r, &mut out);
        }
        for v in &pf.vfs {
            let mut line = String::new();
            let _ = write!(
                line,
                "  vf{} {} {}:{} driver={} numa={}",
                v.index,
                v.pci,
                v.vendor.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
                v.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
                v.driver.as_deref().unwrap_or("-"),
                opt(v.numa_node)
            );
            out.push(line);
            problem_lines("    ", &v.problems, &mut out);
            match &v.netdev {
                Some(n) => netdev_lines("    ", n, &mut out),
                None => out.push("    netdev -".into()),
            }
            for r in &v.rdma {
                rdma_lines("    ", r, &mut out);
            }
        }
    }
    for h in &inv.hcas {
        let up: Vec<String> = h.upstream.iter().map(|a| a.to_string()).collect();
        out.push(format!(
            "hca {} {}:{} driver={} numa={} upstream={}",
            h.pci.map(|p| p.to_string()).unwrap_or("-".into()),
            h.vendor.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            h.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            h.driver.as_deref().unwrap_or("-"),
            opt(h.numa_node),
            up.join(",")
        ));
        problem_lines("  ", &h.problems, &mut out);
        for n in &h.netdevs {
            netdev_lines("  ", n, &mut out);
        }
        rdma_lines("  ", &h.rdma, &mut out);
    }
    for g in &inv.gpus {
        let up: Vec<String> = g.upstream.iter().map(|a| a.to_string()).collect();
        out.push(format!(
            "gpu {} {:04x}:{} numa={} upstream={}",
            g.pci,
            g.vendor,
            g.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            opt(g.numa_node),
            up.join(",")
        ));
    }
    out.push(format!("rdma_cm {}", inv.rdma_cm));
    for s in &inv.skipped {
        out.push(format!("skipped {}: {}", s.device, s.reason));
    }
    out
}
