//! One DRA device per VF of a VF-mode pool, with the facts ResourceSlices,
//! prepare and health need. Pure: the plan already holds health and RDMA
//! devices (the device plugin's rules), the inventory adds PF facts.
//!
//! In use is not broken, as in device plugin mode ([`crate::inuse`]): a VF
//! prepared for a claim is the kubelet's assignment here ([`allocations`]
//! feeds [`crate::pools::plan_with`]), so a VF in a pod whose RDMA device the
//! host cannot see at all stays in its pool and healthy; and a VF whose
//! netdev (and RDMA device) is in a pod keeps the attributes it had on the
//! host ([`History`]), so a pod starting or stopping does not change the
//! slices (nor their generation).
//!
//! Pool keys mean what they mean in device plugin mode, or the config is
//! refused ([`check_config`]): what a VF hands a container follows the pool's
//! RDMA rule and vfio-pci binding ([`DraDevice::hands_out_rdma`],
//! [`DraDevice::vfio`]), and `excludeTopology` leaves the NUMA node out.

use std::collections::BTreeMap;
use std::sync::Arc;

use nic::{CharDev, Inventory, LinkLayer, PciAddr};

use crate::config::{Config, Mode, Policy};
use crate::health::Health;
use crate::inuse::Allocations;
use crate::pools::{Plan, RdmaInfo};

/// A VF as a DRA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraDevice {
    /// Device name in the slice: a DNS label from the PCI address ([`device_name`]).
    pub name: String,
    /// Pool name from the config (`rdma_vfs`).
    pub pool: String,
    /// The pool's resource name (`kuberdma.io/rdma_vfs`), for metrics.
    pub resource: String,
    /// The VF's PCI address.
    pub pci: PciAddr,
    pub pf: PciAddr,
    /// The PF's netdev.
    pub pf_netdev: Option<String>,
    /// VF index on the PF.
    pub vf_index: Option<u32>,
    /// PCI vendor id.
    pub vendor: Option<u16>,
    /// PCI device id.
    pub device_id: Option<u16>,
    /// The VF's netdev on the host.
    pub netdev: Option<String>,
    /// NUMA node; `None` also when the pool says `excludeTopology`.
    pub numa: Option<u32>,
    /// PCIe root complex, `pci<domain>:<bus>` ([`pcie_root`]).
    pub pcie_root: Option<String>,
    /// PF link speed, Mb/s.
    pub link_speed_mbps: Option<u32>,
    /// Link layer of the PF.
    pub link_layer: Option<LinkLayer>,
    /// RDMA devices with their char devices (node paths).
    pub rdma: Vec<RdmaInfo>,
    /// The pool hands out the RDMA char devices (and `rdma_cm`): always in
    /// our format, only with `isRdma: true` in sriov-network-device-plugin's,
    /// as in device plugin mode ([`crate::allocate::hands_out_rdma`]).
    pub hands_out_rdma: bool,
    /// VFIO group device of a VF bound to vfio-pci (`/dev/vfio/<group>`).
    pub vfio: Option<CharDev>,
    /// State of port 1 of the first RDMA device (`ACTIVE`, `DOWN`, …).
    pub port_state: Option<String>,
    /// Health, by the device plugin's rules.
    pub health: Health,
}

/// Everything DRA mode publishes and prepares from, at one point in time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Devices, sorted by name.
    pub devices: Vec<DraDevice>,
    /// `/dev/infiniband/rdma_cm` exists on the node.
    pub rdma_cm: bool,
    /// VFs of the pools not offered, and why ([`super::withhold`] decides): in no
    /// slice, no health report, never prepared.
    pub withheld: Vec<super::withheld::Withheld>,
}

/// A shared, immutable view.
pub type SharedView = Arc<View>;

impl View {
    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&DraDevice> {
        self.devices.binary_search_by(|d| d.name.as_str().cmp(name)).ok().map(|i| &self.devices[i])
    }

    /// The device called `name` when it is withheld.
    pub fn withheld(&self, name: &str) -> Option<&super::withheld::Withheld> {
        self.withheld.iter().find(|w| w.name == name)
    }
}

/// What the checkpoint says of one prepared device ([`nic::prepared::PreparedDevice`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The VF.
    pub pci: PciAddr,
    /// The VF's netdev on the host when it was prepared.
    pub netdev: Option<String>,
    /// Its RDMA devices.
    pub rdma: Vec<String>,
    /// State of port 1 of its first RDMA device when it was prepared.
    pub port_state: Option<String>,
}

/// Devices prepared for claims, by device name.
pub type PreparedDevices = BTreeMap<String, Recorded>;

/// The prepared VFs as the kubelet's assignments are in device plugin mode:
/// under every VF-mode pool's resource (a claim names a device, not a pool;
/// a VF goes to one pool only, so listing it under each is the same as
/// listing it under its own).
pub fn allocations(cfg: &Config, prepared: &PreparedDevices) -> Allocations {
    let mut out = Allocations::default();
    for pool in cfg.pools.iter().filter(|p| p.mode == Mode::Vf) {
        let ids = out.by_resource.entry(pool.resource_name()).or_default();
        ids.extend(prepared.values().map(|r| r.pci.to_string()));
    }
    out
}

/// What is known of the devices beyond one walk of sysfs.
#[derive(Debug, Clone, Copy)]
pub struct History<'a> {
    /// The view built from the previous walk.
    pub last: &'a View,
    /// What is prepared (a restarted driver has no previous view, but the
    /// prepared records name each VF's netdev, RDMA devices and port state).
    pub prepared: &'a PreparedDevices,
}

/// `0000:3b:00.2` → `pci-0000-3b-00-2`: lower-case hex and `-`, at most 19
/// characters, so always a DNS label (a device name must be one).
pub fn device_name(pci: PciAddr) -> String {
    format!("pci-{:04x}-{:02x}-{:02x}-{:x}", pci.domain, pci.bus, pci.device, pci.function)
}

/// The PCIe root complex of a function whose bridges up to the root port are
/// `upstream` (nearest first), as `resource.kubernetes.io/pcieRoot` spells it:
/// `pci<domain>:<root bus>`, the `/sys/devices/` directory the device sits
/// under (k8s.io/dynamic-resource-allocation/deviceattribute `pci_linux.go`).
/// The root port sits on the root bus; a device without bridges is on it itself.
pub fn pcie_root(function: PciAddr, upstream: &[PciAddr]) -> String {
    let root = upstream.last().copied().unwrap_or(function);
    format!("pci{:04x}:{:02x}", root.domain, root.bus)
}

/// Why a config cannot be used in DRA mode: every pool key either means
/// here what it means in device plugin mode or is refused, naming the pool
/// and the key (docs/dra.md, "Pool keys in DRA mode").
pub fn check_config(cfg: &Config) -> Result<(), String> {
    let mut problems = Vec::new();
    // Both shared kinds: ours (`mode: shared`) and every `configList` pool of
    // k8s-rdma-shared-dev-plugin; neither is a VF, so neither would publish a device.
    let shared: Vec<String> = cfg.pools.iter().filter(|p| p.is_shared()).map(|p| p.resource_name()).collect();
    if !shared.is_empty() {
        problems.push(format!(
            "pool(s) {} are in shared mode (`mode: shared`, or a k8s-rdma-shared-dev-plugin `configList` \
             pool), which DRA mode does not serve (a VF is one DRA device; shared HCAs stay with the \
             device plugin mode); remove them from the config used with `dra`",
            shared.join(", ")
        ));
    }
    for p in cfg.pools.iter().filter(|p| !p.is_shared()) {
        let mut refuse = |key: &str, why: &str| {
            problems.push(format!("pool {}: `{key}` is not served in DRA mode: {why}", p.resource_name()));
        };
        // `pack` is the default (and what the chart writes): the scheduler takes
        // the first devices that fit, in slice order (PCI address order, so one
        // PF's VFs before the next); `spread` has no such counterpart.
        if p.policy == Policy::Spread {
            refuse(
                "policy: spread",
                "the scheduler picks a claim's devices and a DRA driver has no preferred allocation; \
                 remove it (to spread a claim over PFs, use one request per PF)",
            );
        }
        if p.gpu_affinity {
            refuse(
                "gpuAffinity: true",
                "the scheduler picks a claim's devices and a DRA driver has no preferred allocation; \
                 remove it and put the GPU and the VF in one claim with the constraint \
                 `matchAttribute: resource.kubernetes.io/pcieRoot`",
            );
        }
        if p.additional_info.is_some() {
            refuse(
                "additionalInfo",
                "it goes into PCIDEVICE_<RESOURCE>_INFO, which DRA mode does not set; remove it and give \
                 containers extra variables with `env` in the RdmaDeviceConfig of the DeviceClass or claim",
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The devices of every VF-mode pool in `plan`, sorted by name. A device in
/// use (its netdev in a pod, or prepared) keeps from `history` what the host
/// no longer shows: its netdev, its RDMA devices and its port state, from
/// the previous view, else (a restarted driver) from its prepared record.
pub fn from_plan(plan: &Plan, inv: &Inventory, history: History) -> View {
    let mut devices = Vec::new();
    for pool in plan.pools.iter().filter(|p| p.config.mode == Mode::Vf) {
        for d in &pool.devices {
            let (Some(pci), Some(pf_pci)) = (d.pci, d.pf) else { continue };
            let pf = inv.pf(pf_pci);
            let vf = inv.vf(pci).map(|(_, v)| v);
            let pf_netdev = pf.and_then(|p| p.netdevs.first());
            let name = device_name(pci);
            let last = history.last.device(&name).filter(|_| d.in_use);
            let recorded = history.prepared.get(&name).filter(|_| d.in_use);
            let port_state = vf
                .and_then(|v| v.rdma.first())
                .and_then(|r| r.ports.iter().find(|p| p.num == 1).or(r.ports.first()))
                .and_then(|p| p.state.clone());
            let netdev = d
                .netdev
                .clone()
                .or_else(|| last.and_then(|l| l.netdev.clone()))
                .or_else(|| recorded.and_then(|r| r.netdev.clone()));
            let link_layer = pf_netdev.and_then(|n| n.link_layer);
            let rdma = match (last, recorded) {
                _ if !d.rdma.is_empty() => d.rdma.clone(),
                (Some(l), _) if !l.rdma.is_empty() => l.rdma.clone(),
                (_, Some(r)) => r.rdma.iter().map(|n| in_pod(n, link_layer)).collect(),
                _ => vec![],
            };
            let port_state = port_state
                .or_else(|| last.and_then(|l| l.port_state.clone()))
                .or_else(|| recorded.and_then(|r| r.port_state.clone()));
            devices.push(DraDevice {
                name,
                pool: pool.config.name.clone(),
                resource: pool.resource_name(),
                pci,
                pf: pf_pci,
                pf_netdev: pf_netdev.map(|n| n.name.clone()),
                vf_index: d.vf_index,
                vendor: vf.and_then(|v| v.vendor),
                device_id: vf.and_then(|v| v.device),
                netdev,
                // `excludeTopology`: device plugin mode then tells the kubelet no
                // NUMA node; the slice's numaNode is DRA mode's only such report.
                numa: d.numa.filter(|_| !pool.config.exclude_topology),
                pcie_root: pf.map(|p| pcie_root(pci, &p.upstream)),
                link_speed_mbps: pf_netdev.and_then(|n| n.speed_mbps),
                link_layer,
                port_state,
                rdma,
                hands_out_rdma: pool.config.rdma_devices,
                vfio: d.vfio.clone(),
                health: d.health.clone(),
            });
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices.dedup_by(|a, b| a.name == b.name);
    View { devices, rdma_cm: plan.pools.first().is_some_and(|p| p.rdma_cm) || inv.rdma_cm, withheld: vec![] }
}

/// An RDMA device known only by name from a prepared record: in the pod
/// with its VF, its char devices unknown to the host (the kernel re-creates
/// them on the move; the pod's CDI spec was written while they were seen).
fn in_pod(name: &str, link_layer: Option<LinkLayer>) -> RdmaInfo {
    RdmaInfo { name: name.to_string(), char_devs: vec![], link_layer, in_other_netns: true }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("c.yaml")).unwrap()
    }

    fn configs() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs")
    }

    /// Regression (audit): only `mode: shared` was refused, so a
    /// k8s-rdma-shared-dev-plugin config passed and served nothing.
    #[test]
    fn every_shared_kind_is_refused_by_name() {
        let rsdp = Config::load(&configs().join("rsdp-config.json")).unwrap();
        let e = check_config(&rsdp).unwrap_err();
        assert!(
            e.contains("rdma/hca_shared_devices_a, rdma/hca_shared_devices_b") && e.contains("shared mode"),
            "{e}"
        );
        let ours = parse(
            "pools: [{name: hca, mode: shared, rdmaHcaMax: 4, selectors: {}}, {name: v, selectors: {}}]",
        );
        let e = check_config(&ours).unwrap_err();
        assert!(e.contains("kuberdma.io/hca") && !e.contains("kuberdma.io/v"), "{e}");
        assert_eq!(check_config(&Config::default_pools()), Ok(()));
    }

    #[test]
    fn keys_without_a_dra_meaning_are_refused_naming_pool_and_key() {
        let cfg = parse(
            "pools:\n\
             - {name: a, policy: spread, selectors: {}}\n\
             - {name: b, gpuAffinity: true, selectors: {}}\n",
        );
        let e = check_config(&cfg).unwrap_err();
        assert!(e.contains("pool kuberdma.io/a: `policy: spread`"), "{e}");
        assert!(e.contains("pool kuberdma.io/b: `gpuAffinity: true`") && e.contains("pcieRoot"), "{e}");
        let sndp = Config::parse(
            r#"{"resourceList": [{"resourceName": "x", "additionalInfo": {"*": {"k": "v"}}}]}"#,
            Path::new("c.json"),
        )
        .unwrap();
        let e = check_config(&sndp).unwrap_err();
        assert!(e.contains("pool intel.com/x: `additionalInfo`") && e.contains("PCIDEVICE_"), "{e}");
        // The defaults, written out, mean here what they mean there.
        let cfg = parse(
            "pools: [{name: a, policy: pack, gpuAffinity: false, excludeTopology: true, selectors: {}}]",
        );
        assert_eq!(check_config(&cfg), Ok(()));
        assert_eq!(check_config(&Config::load(&configs().join("sndp-config.json")).unwrap()), Ok(()));
    }

    /// What a pool says about RDMA, vfio-pci and topology reaches the devices.
    #[test]
    fn devices_follow_the_pools_rdma_vfio_and_topology_keys() {
        let mut desc = nic::sim::load_desc(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes/cx6dx-dual.yaml"),
        )
        .unwrap();
        desc.adapters[0].pfs[1].vfs_vfio = vec![7];
        let sim = nic::sim::Sim::materialise(&desc).unwrap();
        let inv = nic::discover::discover(&sim.roots());
        let cfg = Config::parse(
            r#"{"resourceList": [
                {"resourceName": "rdma", "selectors": {"pfNames": ["ens1f0np0"], "isRdma": true}},
                {"resourceName": "plain", "excludeTopology": true, "selectors": {"pfNames": ["ens1f1np1#0-3"]}},
                {"resourceName": "vfio", "selectors": {"drivers": ["vfio-pci"]}}]}"#,
            Path::new("c.json"),
        )
        .unwrap();
        let plan = crate::pools::plan(&inv, &cfg);
        let view =
            from_plan(&plan, &inv, History { last: &View::default(), prepared: &PreparedDevices::new() });
        let rdma = view.device("pci-0000-3d-00-1").unwrap();
        assert!(rdma.hands_out_rdma && !rdma.rdma.is_empty() && rdma.numa == Some(0));
        let plain = view.device("pci-0000-af-00-1").unwrap();
        assert_eq!(plain.pool, "plain");
        assert!(!plain.hands_out_rdma && !plain.rdma.is_empty(), "the VF has RDMA, the pool hands none out");
        assert_eq!(plain.numa, None, "excludeTopology");
        let vfio = view.devices.iter().find(|d| d.pool == "vfio").unwrap();
        assert!(vfio.vfio.as_ref().is_some_and(|g| g.node_path.starts_with("/dev/vfio/")), "{vfio:?}");
        assert!(vfio.rdma.is_empty() && vfio.numa == Some(1));
    }

    #[test]
    fn device_names_are_dns_labels() {
        let n = device_name("0000:3b:00.2".parse().unwrap());
        assert_eq!(n, "pci-0000-3b-00-2");
        let n = device_name("10000:e1:1f.7".parse().unwrap());
        assert_eq!(n, "pci-10000-e1-1f-7");
        assert!(
            n.len() <= 63 && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
    }

    #[test]
    fn pcie_root_is_the_root_bus() {
        let up: Vec<PciAddr> = vec!["0000:3c:00.0".parse().unwrap(), "0000:3a:00.0".parse().unwrap()];
        assert_eq!(pcie_root("0000:3d:00.2".parse().unwrap(), &up), "pci0000:3a");
        assert_eq!(pcie_root("0000:00:05.0".parse().unwrap(), &[]), "pci0000:00");
    }
}
