//! Pure pool planning: inventory × config (× the kubelet's allocations) →
//! pools, plus one decision per device saying which pool took it, or which
//! selector rejected it and why.
//!
//! Rules: a device two pools select goes to the first pool in the file;
//! VF-mode pools consider every VF; our shared mode considers every RDMA device
//! of a PF or of a non-SR-IOV HCA and exposes it `rdmaHcaMax` times;
//! k8s-rdma-shared-dev-plugin's pools consider every PCI function with an RDMA
//! device (PFs, VFs, HCAs) and expose `rdmaHcaMax` IDs that each hand out all of
//! the selected devices.

use std::collections::{BTreeSet, HashSet};

use nic::{CharDev, Inventory, LinkLayer, Netdev, PciAddr, Pf, RdmaDev, Vf};

use crate::config::{Config, Mode, PoolConfig, Selector};
use crate::health::{self, Health, VfContext};
use crate::inuse::Allocations;

/// One RDMA device of an allocatable device, as Allocate needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaInfo {
    /// RDMA device name (`mlx5_3`).
    pub name: String,
    /// Char devices: uverbs first, then umad and issm; node paths are the node's `/dev/...`.
    pub char_devs: Vec<CharDev>,
    /// Link layer of its port 1 (of the PF when the device is in a pod and was
    /// never seen on the host).
    pub link_layer: Option<LinkLayer>,
    /// In a pod's network namespace right now.
    pub in_other_netns: bool,
}

/// One allocatable device of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Device ID given to the kubelet (VF PCI address; shared: `<pci>-<slot>`;
    /// k8s-rdma-shared-dev-plugin pools: `0` … `N-1`).
    pub id: String,
    /// PCI address of the function behind the device (VF, PF or HCA).
    pub pci: Option<PciAddr>,
    /// PF of a VF (device-info `pf-pci-address`).
    pub pf: Option<PciAddr>,
    /// What packing groups by: the PF of a VF, the HCA itself in shared mode.
    pub group: String,
    /// VF index on its PF.
    pub vf_index: Option<u32>,
    /// NUMA node.
    pub numa: Option<u32>,
    /// The device's own netdev (VF netdev; shared: the PF/HCA netdev).
    pub netdev: Option<String>,
    /// RDMA devices.
    pub rdma: Vec<RdmaInfo>,
    /// VFIO group device of a VF bound to vfio-pci (`/dev/vfio/<group>`).
    pub vfio: Option<CharDev>,
    /// Behind a PCIe switch that also hosts a GPU.
    pub near_gpu: bool,
    pub health: Health,
    /// A pod holds it now (its netdev is in a pod's namespace, or the kubelet
    /// says it assigned it).
    pub in_use: bool,
}

/// A pool with its devices, sorted by ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// The pool's config.
    pub config: PoolConfig,
    /// Devices, sorted by ID.
    pub devices: Vec<Device>,
    /// `/dev/infiniband/rdma_cm` is a character device on the node.
    pub rdma_cm: bool,
    /// `/dev/vfio/vfio` is a character device on the node.
    pub vfio_container: bool,
}

impl Pool {
    /// `prefix/name`.
    pub fn resource_name(&self) -> String {
        self.config.resource_name()
    }

    /// The device with `id` (binary search: devices are sorted).
    pub fn device(&self, id: &str) -> Option<&Device> {
        self.devices.binary_search_by(|d| d.id.as_str().cmp(id)).ok().map(|i| &self.devices[i])
    }
}

/// What a [`Decision`] is about, shown and serialized as `VF`, `PF` or `HCA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionKind {
    /// A VF: a candidate of VF-mode pools (and, with its RDMA device, of
    /// k8s-rdma-shared-dev-plugin's pools).
    Vf,
    /// A PF's RDMA device: a candidate of shared pools only.
    Pf,
    /// An RDMA device without SR-IOV (or a virtual one): shared pools only.
    Hca,
}

impl DecisionKind {
    /// `VF`, `PF`, `HCA`: the one spelling of the table and the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Vf => "VF",
            DecisionKind::Pf => "PF",
            DecisionKind::Hca => "HCA",
        }
    }
}

impl std::fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for DecisionKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What happened to one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    /// PCI address (or RDMA device name for a virtual HCA).
    pub device: String,
    /// A VF, a PF (shared candidate) or an HCA.
    pub kind: DecisionKind,
    /// Pool resource name that took it.
    pub pool: Option<String>,
    /// Why: the selector that rejected it, or that a later pool also selected it.
    pub notes: Vec<String>,
}

/// Pools and decisions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Pools in config order.
    pub pools: Vec<Pool>,
    /// One per candidate device, in inventory order.
    pub decisions: Vec<Decision>,
}

/// What selectors look at, for VFs and for shared candidates alike.
struct Facts<'a> {
    pci: Option<PciAddr>,
    vendor: Option<u16>,
    device: Option<u16>,
    driver: Option<&'a str>,
    /// Netdevs of the PF (of the function itself for PFs and HCAs).
    pf_netdevs: &'a [Netdev],
    vf_index: Option<u32>,
    root: Option<PciAddr>,
    link_layer: Option<LinkLayer>,
    is_rdma: bool,
    /// The function's own netdevs.
    if_names: &'a [Netdev],
    speed: Option<u32>,
    numa: Option<u32>,
}

fn hex_list(v: &[u16]) -> String {
    v.iter().map(|x| format!("{x:04x}")).collect::<Vec<_>>().join(",")
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "unknown".into())
}

/// Why a selector rejected a device: the first field that failed and why.
/// `at` is that field's place in the order [`check`] tries them, so of two
/// devices a selector rejects, the one with the higher `at` passed more of it.
#[derive(Debug, Clone)]
struct Reject {
    at: u8,
    why: String,
}

fn reject(at: u8, why: String) -> Result<(), Reject> {
    Err(Reject { at, why })
}

/// `Ok` when `f` satisfies `s`, else the first failing field and why.
fn check(s: &Selector, f: &Facts) -> Result<(), Reject> {
    if !s.vendors.is_empty() && !f.vendor.is_some_and(|v| s.vendors.contains(&v)) {
        return reject(
            0,
            format!(
                "vendors [{}]: vendor is {}",
                hex_list(&s.vendors),
                opt(f.vendor.map(|v| format!("{v:04x}")))
            ),
        );
    }
    if !s.devices.is_empty() && !f.device.is_some_and(|v| s.devices.contains(&v)) {
        return reject(
            1,
            format!(
                "devices [{}]: device is {}",
                hex_list(&s.devices),
                opt(f.device.map(|v| format!("{v:04x}")))
            ),
        );
    }
    if !s.drivers.is_empty() && !f.driver.is_some_and(|d| s.drivers.iter().any(|x| x == d)) {
        return reject(
            2,
            format!("drivers [{}]: driver is {}", s.drivers.join(","), f.driver.unwrap_or("none")),
        );
    }
    if !s.pci_addresses.is_empty() && !f.pci.is_some_and(|p| s.pci_addresses.contains(&p)) {
        return reject(3, format!("pciAddresses: {} is not listed", opt(f.pci)));
    }
    let vf_ok = |covers: &dyn Fn(u32) -> bool| f.vf_index.is_none_or(covers);
    if !s.pf_names.is_empty() {
        let hit = s
            .pf_names
            .iter()
            .any(|p| f.pf_netdevs.iter().any(|n| n.name == p.name) && vf_ok(&|i| p.covers(i)));
        if !hit {
            let names: Vec<String> = s.pf_names.iter().map(|p| p.to_string()).collect();
            return reject(
                4,
                format!(
                    "pfNames [{}]: PF is {}{}",
                    names.join(","),
                    if f.pf_netdevs.is_empty() {
                        "without netdev".to_string()
                    } else {
                        netdev_names(f.pf_netdevs)
                    },
                    f.vf_index.map(|i| format!(", VF index {i}")).unwrap_or_default()
                ),
            );
        }
    }
    if !s.root_devices.is_empty() {
        let hit = s.root_devices.iter().any(|r| f.root == Some(r.pci) && vf_ok(&|i| r.covers(i)));
        if !hit {
            let roots: Vec<String> = s.root_devices.iter().map(|r| r.to_string()).collect();
            return reject(
                5,
                format!(
                    "rootDevices [{}]: PF is {}{}",
                    roots.join(","),
                    opt(f.root),
                    f.vf_index.map(|i| format!(", VF index {i}")).unwrap_or_default()
                ),
            );
        }
    }
    if !s.link_types.is_empty() && !f.link_layer.is_some_and(|l| s.link_types.contains(&l)) {
        return reject(
            6,
            format!("linkTypes: link layer is {}", opt(f.link_layer.map(|l| format!("{l:?}")))),
        );
    }
    if let Some(want) = s.is_rdma {
        if want != f.is_rdma {
            return reject(
                7,
                if want {
                    "isRdma: no RDMA device".into()
                } else {
                    "isRdma false: has an RDMA device".into()
                },
            );
        }
    }
    if !s.if_names.is_empty() && !f.if_names.iter().any(|n| s.if_names.contains(&n.name)) {
        return reject(
            8,
            format!(
                "ifNames [{}]: netdev is {}",
                s.if_names.join(","),
                if f.if_names.is_empty() { "none".to_string() } else { netdev_names(f.if_names) }
            ),
        );
    }
    if !s.link_speeds.is_empty() && !f.speed.is_some_and(|v| s.link_speeds.contains(&v)) {
        return reject(9, format!("linkSpeeds: link speed is {}", opt(f.speed.map(|v| format!("{v} Mb/s")))));
    }
    if !s.numa_nodes.is_empty() && !f.numa.is_some_and(|v| s.numa_nodes.contains(&v)) {
        return reject(10, format!("numaNodes: NUMA node is {}", opt(f.numa)));
    }
    Ok(())
}

/// How a pool's selector is named in messages: `selectors` when it has one,
/// else `selectors[i]`.
fn selector_name(p: &PoolConfig, i: usize) -> String {
    if p.selectors.len() > 1 {
        format!("selectors[{i}]")
    } else {
        "selectors".into()
    }
}

/// `Ok` when any selector of the pool matches, else each one's rejection, in order.
fn selector_rejects(p: &PoolConfig, f: &Facts) -> Result<(), Vec<Reject>> {
    let mut rejects = Vec::new();
    for s in &p.selectors {
        match check(s, f) {
            Ok(()) => return Ok(()),
            Err(r) => rejects.push(r),
        }
    }
    Err(rejects)
}

/// `Ok` when any selector of the pool matches, else why each one did not.
fn pool_matches(p: &PoolConfig, f: &Facts) -> Result<(), String> {
    selector_rejects(p, f).map_err(|rs| {
        let whys: Vec<String> =
            rs.iter().enumerate().map(|(i, r)| format!("{}.{}", selector_name(p, i), r.why)).collect();
        whys.join("; ")
    })
}

fn link_layer<'a>(mut n: impl Iterator<Item = &'a Netdev>) -> Option<LinkLayer> {
    n.find_map(|n| n.link_layer)
}

fn netdev_names(n: &[Netdev]) -> String {
    n.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join("/")
}

fn speed(n: &[Netdev]) -> Option<u32> {
    n.iter().find_map(|n| n.speed_mbps)
}

/// Non-root-port bridges above `upstream` (the last entry is the root port).
fn switch_bridges(upstream: &[PciAddr]) -> &[PciAddr] {
    &upstream[..upstream.len().saturating_sub(1)]
}

fn near_gpu(inv: &Inventory, upstream: &[PciAddr]) -> bool {
    let mine: BTreeSet<&PciAddr> = switch_bridges(upstream).iter().collect();
    !mine.is_empty() && inv.gpus.iter().any(|g| switch_bridges(&g.upstream).iter().any(|b| mine.contains(b)))
}

/// `fallback`: the link layer of the function's (or its PF's) netdevs, for a
/// device whose ports are unknown (in a pod since before this daemon started).
fn rdma_info(r: &RdmaDev, fallback: Option<LinkLayer>) -> RdmaInfo {
    let mut char_devs = Vec::new();
    char_devs.extend(r.uverbs.iter().cloned());
    char_devs.extend(r.umad.iter().cloned());
    char_devs.extend(r.issm.iter().cloned());
    RdmaInfo {
        name: r.name.clone(),
        char_devs,
        link_layer: r.ports.iter().find_map(|p| p.link_layer).or(fallback),
        in_other_netns: r.in_other_netns,
    }
}

fn vf_facts<'a>(pf: &'a Pf, vf: &'a Vf) -> Facts<'a> {
    Facts {
        pci: Some(vf.pci),
        vendor: vf.vendor,
        device: vf.device,
        driver: vf.driver.as_deref(),
        pf_netdevs: &pf.netdevs,
        vf_index: Some(vf.index),
        root: Some(pf.pci),
        link_layer: link_layer(vf.netdev.iter().chain(&pf.netdevs)),
        is_rdma: !vf.rdma.is_empty(),
        if_names: vf.netdev.as_slice(),
        speed: speed(&pf.netdevs),
        numa: vf.numa_node.or(pf.numa_node),
    }
}

/// Whether every selector of the pool asks for RDMA.
fn requires_rdma(c: &PoolConfig) -> bool {
    !c.selectors.is_empty() && c.selectors.iter().all(|s| s.is_rdma == Some(true))
}

/// What the VFs of one PF share, worked out once per PF.
struct PfFacts {
    group: String,
    near_gpu: bool,
    link_layer: Option<LinkLayer>,
}

/// What the devices of one pool share, worked out once per pool.
struct PoolFacts {
    resource: String,
    require_rdma: bool,
}

fn vf_device(
    inv: &Inventory,
    pf: &Pf,
    p: &PfFacts,
    vf: &Vf,
    pool: &PoolFacts,
    alloc: &Allocations,
) -> Device {
    let netdev = vf.netdev.as_ref().map(|n| n.name.clone());
    let id = vf.pci.to_string();
    let allocated = alloc.contains(&pool.resource, &id);
    let cx = VfContext { require_rdma: pool.require_rdma, allocated, vfio_container: inv.vfio_container };
    Device {
        pci: Some(vf.pci),
        pf: Some(pf.pci),
        group: p.group.clone(),
        vf_index: Some(vf.index),
        numa: vf.numa_node.or(pf.numa_node),
        rdma: vf.rdma.iter().map(|r| rdma_info(r, p.link_layer)).collect(),
        vfio: vf.vfio.clone(),
        netdev,
        near_gpu: p.near_gpu,
        health: health::vf_health(pf, vf, cx),
        in_use: health::vf_in_use(vf, allocated),
        id,
    }
}

/// A shared-mode candidate: an RDMA device of a PF, a VF or an HCA.
struct SharedCand<'a> {
    facts: Facts<'a>,
    label: String,
    kind: DecisionKind,
    netdevs: &'a [Netdev],
    rdma: &'a RdmaDev,
    upstream: &'a [PciAddr],
}

fn shared_candidates(inv: &Inventory, with_vfs: bool) -> Vec<SharedCand<'_>> {
    let mut out = Vec::new();
    for pf in &inv.pfs {
        for r in &pf.rdma {
            out.push(SharedCand {
                facts: Facts {
                    pci: Some(pf.pci),
                    vendor: pf.vendor,
                    device: pf.device,
                    driver: pf.driver.as_deref(),
                    pf_netdevs: &pf.netdevs,
                    vf_index: None,
                    root: Some(pf.pci),
                    link_layer: link_layer(pf.netdevs.iter()),
                    is_rdma: true,
                    if_names: &pf.netdevs,
                    speed: speed(&pf.netdevs),
                    numa: pf.numa_node,
                },
                label: format!("{} ({})", pf.pci, r.name),
                kind: DecisionKind::Pf,
                netdevs: &pf.netdevs,
                rdma: r,
                upstream: &pf.upstream,
            });
        }
        if !with_vfs {
            continue;
        }
        for vf in &pf.vfs {
            for r in &vf.rdma {
                let mut facts = vf_facts(pf, vf);
                // k8s-rdma-shared-dev-plugin reads a function's own netdev only.
                facts.link_layer = vf.netdev.as_ref().and_then(|n| n.link_layer);
                facts.vf_index = None;
                out.push(SharedCand {
                    facts,
                    label: format!("{} ({})", vf.pci, r.name),
                    kind: DecisionKind::Vf,
                    netdevs: vf.netdev.as_slice(),
                    rdma: r,
                    upstream: &pf.upstream,
                });
            }
        }
    }
    for h in &inv.hcas {
        // k8s-rdma-shared-dev-plugin sees PCI functions only: no Soft-RoCE.
        if with_vfs && h.pci.is_none() {
            continue;
        }
        out.push(SharedCand {
            facts: Facts {
                pci: h.pci,
                vendor: h.vendor,
                device: h.device,
                driver: h.driver.as_deref(),
                pf_netdevs: &h.netdevs,
                vf_index: None,
                root: h.pci,
                link_layer: link_layer(h.netdevs.iter()),
                is_rdma: true,
                if_names: &h.netdevs,
                speed: speed(&h.netdevs),
                numa: h.numa_node,
            },
            label: match h.pci {
                Some(p) => format!("{p} ({})", h.rdma.name),
                None => h.rdma.name.clone(),
            },
            kind: DecisionKind::Hca,
            netdevs: &h.netdevs,
            rdma: &h.rdma,
            upstream: &h.upstream,
        });
    }
    out
}

/// Assigns `facts` to the first matching pool among those `eligible` (to
/// every matching one for k8s-rdma-shared-dev-plugin's pools, which share a
/// device between all resources that select it); returns the pool indexes and
/// the decision.
fn decide(
    cfg: &Config,
    names: &[String],
    eligible: impl Fn(&PoolConfig) -> bool,
    device: String,
    kind: DecisionKind,
    f: &Facts,
) -> (Vec<usize>, Decision) {
    let mut d = Decision { device, kind, pool: None, notes: Vec::new() };
    let mut taken = vec![];
    for (i, p) in cfg.pools.iter().enumerate() {
        if !eligible(p) {
            continue;
        }
        let shares = p.mode == Mode::SharedResource;
        match (pool_matches(p, f), taken.is_empty()) {
            (Ok(()), true) => {
                taken.push(i);
                d.pool = Some(names[i].clone());
            }
            (Ok(()), false) if shares => {
                taken.push(i);
                d.notes.push(format!(
                    "also in {} (a shared device is in every resource that selects it)",
                    p.resource_name()
                ));
            }
            (Ok(()), false) => d
                .notes
                .push(format!("also selected by {}; the first pool in the config wins", p.resource_name())),
            (Err(why), true) => d.notes.push(format!("{}: rejected by {why}", p.resource_name())),
            (Err(_), false) => {}
        }
    }
    if taken.is_empty() && !cfg.pools.iter().any(eligible) {
        d.notes.push(match kind {
            DecisionKind::Vf => "no pool in vf mode".into(),
            DecisionKind::Pf | DecisionKind::Hca => "no pool in shared mode".into(),
        });
    }
    (taken, d)
}

/// Builds the pools and the decisions, without the kubelet's allocations.
pub fn plan(inv: &Inventory, cfg: &Config) -> Plan {
    plan_with(inv, cfg, &Allocations::default())
}

/// Builds the pools and the decisions; `alloc` is what the kubelet has assigned.
pub fn plan_with(inv: &Inventory, cfg: &Config, alloc: &Allocations) -> Plan {
    let mut pools: Vec<Pool> = cfg
        .pools
        .iter()
        .map(|c| Pool {
            config: c.clone(),
            devices: Vec::new(),
            rdma_cm: inv.rdma_cm,
            vfio_container: inv.vfio_container,
        })
        .collect();
    let mut decisions = Vec::new();
    let any = |m: Mode| cfg.pools.iter().any(|p| p.mode == m);
    let pool_facts: Vec<PoolFacts> = cfg
        .pools
        .iter()
        .map(|c| PoolFacts { resource: c.resource_name(), require_rdma: requires_rdma(c) })
        .collect();
    let resources: Vec<String> = pool_facts.iter().map(|p| p.resource.clone()).collect();
    if any(Mode::Vf) || !any(Mode::SharedResource) {
        for pf in &inv.pfs {
            let pf_facts = PfFacts {
                group: pf.pci.to_string(),
                near_gpu: near_gpu(inv, &pf.upstream),
                link_layer: pf.netdevs.iter().find_map(|n| n.link_layer),
            };
            for vf in &pf.vfs {
                let mut facts = vf_facts(pf, vf);
                // A VF in a pod whose RDMA device left no trace on the host: the
                // kubelet's word that it is assigned to a pool that wants RDMA keeps it
                // there. Only that: a vfio-pci VF (never a netdev) or a netdevice VF in a
                // pod assigned to a pool without RDMA is no RDMA device, and claiming one
                // as such would move it into the first `isRdma` pool while the pod runs
                // (and leave it there as an Unhealthy extra once the pod is gone).
                let id = vf.pci.to_string();
                if vf.netdev.is_none()
                    && pool_facts.iter().any(|p| p.require_rdma && alloc.contains(&p.resource, &id))
                {
                    facts.is_rdma = true;
                }
                let (taken, d) = decide(
                    cfg,
                    &resources,
                    |p| p.mode == Mode::Vf,
                    vf.pci.to_string(),
                    DecisionKind::Vf,
                    &facts,
                );
                if let Some(&i) = taken.first() {
                    let dev = vf_device(inv, pf, &pf_facts, vf, &pool_facts[i], alloc);
                    pools[i].devices.push(dev);
                }
                decisions.push(d);
            }
        }
    }
    let resource_mode = any(Mode::SharedResource);
    let eligible = |p: &PoolConfig| p.is_shared();
    // Per-resource pools: every ID hands out every selected device.
    let mut selected: Vec<Vec<RdmaInfo>> = vec![vec![]; pools.len()];
    for c in shared_candidates(inv, resource_mode) {
        if !any(Mode::Shared) && !resource_mode && c.kind == DecisionKind::Pf {
            continue; // PFs are only candidates of shared pools; VFs carry the story otherwise.
        }
        let (taken, d) = decide(cfg, &resources, eligible, c.label.clone(), c.kind, &c.facts);
        for i in taken {
            let netdev = c.netdevs.first().map(|n| n.name.clone());
            let info = rdma_info(c.rdma, c.facts.link_layer);
            let pool = &mut pools[i];
            if pool.config.mode == Mode::SharedResource {
                selected[i].push(info);
            } else {
                let health = health::hca_health(c.netdevs, c.rdma);
                let base = c.facts.pci.map(|p| p.to_string()).unwrap_or_else(|| c.rdma.name.clone());
                let near = near_gpu(inv, c.upstream);
                for slot in 0..pool.config.rdma_hca_max {
                    pool.devices.push(Device {
                        id: format!("{base}-{slot:04}"),
                        pci: c.facts.pci,
                        pf: None,
                        group: base.clone(),
                        vf_index: None,
                        numa: c.facts.numa,
                        netdev: netdev.clone(),
                        rdma: vec![info.clone()],
                        vfio: None,
                        near_gpu: near,
                        health: health.clone(),
                        in_use: false,
                    });
                }
            }
        }
        decisions.push(d);
    }
    for (pool, devs) in pools.iter_mut().zip(selected) {
        add_resource_ids(pool, devs, alloc);
    }
    for p in &mut pools {
        p.devices.sort_by(|a, b| a.id.cmp(&b.id));
        p.devices.dedup_by(|a, b| a.id == b.id);
    }
    Plan { pools, decisions }
}

/// The IDs of a k8s-rdma-shared-dev-plugin pool (`mode: SharedResource`), each
/// handing out every selected RDMA device `devs`. As there: no RDMA device
/// selected, no IDs; every ID is Healthy. Other pools are left as they are.
fn add_resource_ids(pool: &mut Pool, devs: Vec<RdmaInfo>, alloc: &Allocations) {
    if pool.config.mode != Mode::SharedResource || devs.is_empty() {
        return;
    }
    let resource = pool.resource_name();
    for slot in 0..pool.config.rdma_hca_max {
        let id = slot.to_string();
        pool.devices.push(Device {
            in_use: alloc.contains(&resource, &id),
            id,
            pci: None,
            pf: None,
            group: resource.clone(),
            vf_index: None,
            numa: None,
            netdev: None,
            rdma: devs.clone(),
            vfio: None,
            near_gpu: false,
            health: Health::Healthy,
        });
    }
}

/// The device one selector of an empty pool came nearest to taking.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Miss {
    /// `selectors`, or `selectors[i]` in a pool with several.
    pub selector: String,
    /// The device, as its decision names it.
    pub device: String,
    /// The field that rejected it and why (`pfNames [ens1f0np0#0-7]: PF is ens3np0, VF index 0`).
    pub why: String,
}

/// Why a configured pool got no device on this node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Empty {
    /// There was nothing to try its selectors on: no VF (a vf pool), no PF,
    /// VF or HCA with an RDMA device (a shared pool).
    NoCandidate,
    /// Its selectors select devices, but earlier pools in the config took
    /// each of them (the first pool wins).
    TakenBy(Vec<String>),
    /// Its selectors reject every device: per selector, the device that
    /// passed most of its fields, and the field that failed.
    Rejected(Vec<Miss>),
}

/// Each pool of `plan` that serves no device, with why ([`Empty`]), in config
/// order. Reruns the selectors over the candidates of those pools only, so the
/// daemon's [`plan`] stays as it is; `discover` asks.
pub fn empty_pools(inv: &Inventory, cfg: &Config, plan: &Plan) -> Vec<(String, Empty)> {
    let resource_mode = cfg.pools.iter().any(|p| p.mode == Mode::SharedResource);
    let mut out = Vec::new();
    for (c, pool) in cfg.pools.iter().zip(&plan.pools) {
        if !pool.devices.is_empty() {
            continue;
        }
        let candidates: Vec<(String, Facts)> = if c.mode == Mode::Vf {
            let vfs = inv.pfs.iter().flat_map(|pf| pf.vfs.iter().map(move |vf| (pf, vf)));
            vfs.map(|(pf, vf)| (vf.pci.to_string(), vf_facts(pf, vf))).collect()
        } else {
            shared_candidates(inv, resource_mode).into_iter().map(|s| (s.label, s.facts)).collect()
        };
        let mut taken_by: Vec<String> = Vec::new();
        let mut nearest: Vec<Option<(Reject, &str)>> = vec![None; c.selectors.len()];
        for (device, f) in &candidates {
            match selector_rejects(c, f) {
                Ok(()) => {
                    let by = plan.decisions.iter().find(|d| &d.device == device).and_then(|d| d.pool.clone());
                    if let Some(by) = by.filter(|b| !taken_by.contains(b)) {
                        taken_by.push(by);
                    }
                }
                Err(rejects) => {
                    for (slot, r) in nearest.iter_mut().zip(rejects) {
                        if slot.as_ref().is_none_or(|(best, _)| r.at > best.at) {
                            *slot = Some((r, device.as_str()));
                        }
                    }
                }
            }
        }
        let why = if candidates.is_empty() {
            Empty::NoCandidate
        } else if !taken_by.is_empty() {
            Empty::TakenBy(taken_by)
        } else {
            let misses = nearest.into_iter().enumerate().filter_map(|(i, m)| {
                let (r, device) = m?;
                Some(Miss { selector: selector_name(c, i), device: device.to_string(), why: r.why })
            });
            Empty::Rejected(misses.collect())
        };
        out.push((c.resource_name(), why));
    }
    out
}

/// Keeps devices of `prev` that vanished from `next` but whose PF still says
/// they exist (VF index below `sriov_numvfs`) as Unhealthy: a VF that loses
/// its driver or its RDMA device, or whose sysfs entry disappears, must be
/// reported Unhealthy, not silently dropped. A lowered `sriov_numvfs` or a
/// removed PF drops them. Call only when the pool's config is unchanged.
pub fn carry_missing(prev: &Pool, next: &mut Pool, inv: &Inventory) {
    if prev.config.mode != Mode::Vf {
        return;
    }
    let mut gone_list = Vec::new();
    for d in &prev.devices {
        if next.device(&d.id).is_some() {
            continue;
        }
        let (Some(pf_pci), Some(index)) = (d.pf, d.vf_index) else { continue };
        let Some(pf) = inv.pf(pf_pci) else { continue };
        if index >= pf.num_vfs.unwrap_or(0) {
            continue;
        }
        let why = match d.pci.and_then(|p| inv.vf(p)) {
            Some((pf, vf)) => {
                let cx = VfContext {
                    require_rdma: !d.rdma.is_empty(),
                    allocated: false,
                    vfio_container: inv.vfio_container,
                };
                match health::vf_health(pf, vf, cx) {
                    Health::Unhealthy(w) => w,
                    Health::Healthy => format!("VF {} no longer matches the pool's selectors", d.id),
                }
            }
            None => format!("VF {} (index {index} of PF {pf_pci}) is gone from sysfs", d.id),
        };
        let mut gone = d.clone();
        gone.health = Health::Unhealthy(why);
        gone.in_use = false;
        // Collected first: `next.device` needs `next.devices` sorted while we look.
        gone_list.push(gone);
    }
    if !gone_list.is_empty() {
        next.devices.extend(gone_list);
        next.devices.sort_by(|a, b| a.id.cmp(&b.id));
    }
}

/// What of the node's hardware is there now, read once from an inventory
/// ([`OnNode::has`]).
pub struct OnNode<'a> {
    functions: HashSet<PciAddr>,
    rdma: HashSet<&'a str>,
}

impl<'a> OnNode<'a> {
    /// The functions (PFs, VFs, HCAs) and RDMA devices of `inv`.
    pub fn new(inv: &'a Inventory) -> Self {
        let mut functions = HashSet::new();
        let mut rdma = HashSet::new();
        for pf in &inv.pfs {
            functions.insert(pf.pci);
            rdma.extend(pf.rdma.iter().map(|r| r.name.as_str()));
            for vf in &pf.vfs {
                functions.insert(vf.pci);
                rdma.extend(vf.rdma.iter().map(|r| r.name.as_str()));
            }
        }
        for h in &inv.hcas {
            functions.extend(h.pci);
            rdma.insert(h.rdma.name.as_str());
        }
        OnNode { functions, rdma }
    }

    /// Whether the hardware behind `d` is still on the node: its PCI function
    /// (a VF, a PF or an HCA; a VF in a pod counts, since the PCI function
    /// stays on the host), or, for IDs without a function of their own
    /// (k8s-rdma-shared-dev-plugin's, virtual HCAs), one of its RDMA devices.
    /// What the CDI spec keeps ([`crate::devinfo`]); health is another matter
    /// (a device may be on the node and Unhealthy).
    pub fn has(&self, d: &Device) -> bool {
        match d.pci {
            Some(p) => self.has_function(p),
            None => d.rdma.iter().any(|r| self.has_rdma(&r.name)),
        }
    }

    /// Whether the PCI function `p` is on the node.
    pub fn has_function(&self, p: PciAddr) -> bool {
        self.functions.contains(&p)
    }

    /// Whether the host shows the RDMA device `name`.
    pub fn has_rdma(&self, name: &str) -> bool {
        self.rdma.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::DecisionKind;

    /// Issue 38: the kinds were strings compared with `"PF"`; as an enum they
    /// still print and serialize as before (the table and the JSON unchanged).
    #[test]
    fn decision_kinds_print_and_serialize_as_the_strings_they_replaced() {
        for (k, s) in [(DecisionKind::Vf, "VF"), (DecisionKind::Pf, "PF"), (DecisionKind::Hca, "HCA")] {
            assert_eq!(k.to_string(), s);
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(s));
        }
    }
}
