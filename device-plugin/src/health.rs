//! Device health from the inventory: pure functions, so the rescan, `discover`
//! and the tests agree on what "healthy" means.
//!
//! A VF is Unhealthy when its PF link is not up, it has no driver, a pool that
//! needs RDMA finds no RDMA device, or a device node it needs (uverbs; for
//! vfio-pci the group and container devices) is not a character device under
//! the dev root. A VF in use by a pod is **not** unhealthy: its netdev and (in
//! exclusive RDMA netns mode) RDMA device are in the pod's namespace, so the
//! host's sysfs does not show them; discovery still finds its RDMA devices
//! through their char devices, and the kubelet's PodResources list is a second
//! witness. A shared HCA is Unhealthy when its link is not up or its verbs node
//! is missing. The kubelet stops scheduling onto Unhealthy devices; the reason
//! is logged and shown by `discover`.

use nic::{CharDev, Netdev, Pf, RdmaDev, Vf};

/// Health of one device, with the reason when unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Usable.
    Healthy,
    /// Not usable, and why.
    Unhealthy(String),
}

impl Health {
    /// The kubelet's spelling (`pluginapi.Healthy` / `pluginapi.Unhealthy`).
    pub fn as_kubelet(&self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy(_) => "Unhealthy",
        }
    }

    /// Whether it is healthy.
    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }
}

/// What a VF's health depends on besides the VF and its PF.
#[derive(Debug, Clone, Copy, Default)]
pub struct VfContext {
    /// The pool needs an RDMA device (pools that select `isRdma: true`, or a
    /// VF that had one before); a plain netdevice pool does not.
    pub require_rdma: bool,
    /// The kubelet lists the VF as assigned to a container (PodResources).
    pub allocated: bool,
    /// `/dev/vfio/vfio` is a character device on the node.
    pub vfio_container: bool,
}

/// The driver that hands a VF to userspace through VFIO.
pub const VFIO_PCI: &str = "vfio-pci";

/// Health of a VF on `pf`.
pub fn vf_health(pf: &Pf, vf: &Vf, cx: VfContext) -> Health {
    if let Some(h) = link_problem(&pf.netdevs, "PF") {
        return h;
    }
    let Some(driver) = vf.driver.as_deref() else {
        return Health::Unhealthy(format!("VF {} has no driver bound", vf.pci));
    };
    if driver == VFIO_PCI {
        return vfio_problem(vf, cx.vfio_container).unwrap_or(Health::Healthy);
    }
    if vf.rdma.is_empty() && cx.require_rdma {
        // In a pod on a node where discovery cannot see the RDMA device at all
        // (no uverbs sibling): the kubelet's word that it is in use suffices.
        if cx.allocated && vf.netdev.is_none() {
            return Health::Healthy;
        }
        return Health::Unhealthy(format!("VF {} has no RDMA device", vf.pci));
    }
    rdma_problem(&vf.rdma).unwrap_or(Health::Healthy)
}

/// Whether a VF is in use: a pod holds its netdev (and RDMA device), or the
/// kubelet says it assigned it.
pub fn vf_in_use(vf: &Vf, allocated: bool) -> bool {
    allocated || vf.moved_into_netns()
}

/// Health of an HCA (or a PF) shared as a whole.
pub fn hca_health(netdevs: &[Netdev], rdma: &RdmaDev) -> Health {
    link_problem(netdevs, "HCA")
        .or_else(|| rdma_problem(std::slice::from_ref(rdma)))
        .unwrap_or(Health::Healthy)
}

/// The link is down when no netdev of the function reports `up`
/// (`unknown` counts as up: some drivers never set operstate).
fn link_problem(netdevs: &[Netdev], what: &str) -> Option<Health> {
    if netdevs.is_empty() {
        return None;
    }
    let up = netdevs.iter().any(|n| matches!(n.operstate.as_deref(), Some("up") | Some("unknown") | None));
    if up {
        return None;
    }
    let names: Vec<String> =
        netdevs.iter().map(|n| format!("{} is {}", n.name, n.operstate.as_deref().unwrap_or("?"))).collect();
    Some(Health::Unhealthy(format!("{what} link down ({})", names.join(", "))))
}

fn missing(c: &CharDev) -> bool {
    !c.present
}

fn rdma_problem(rdma: &[RdmaDev]) -> Option<Health> {
    for r in rdma {
        match &r.uverbs {
            None => return Some(Health::Unhealthy(format!("RDMA device {} has no uverbs device", r.name))),
            Some(c) if missing(c) => {
                return Some(Health::Unhealthy(format!(
                    "RDMA device {}: {} is missing (or not a character device)",
                    r.name,
                    c.node_path.display()
                )))
            }
            Some(_) => {}
        }
    }
    None
}

fn vfio_problem(vf: &Vf, container: bool) -> Option<Health> {
    let Some(g) = &vf.vfio else {
        return Some(Health::Unhealthy(format!(
            "VF {} is bound to {VFIO_PCI} but has no IOMMU group",
            vf.pci
        )));
    };
    if missing(g) {
        return Some(Health::Unhealthy(format!(
            "VF {}: {} is missing (or not a character device)",
            vf.pci,
            g.node_path.display()
        )));
    }
    (!container).then(|| Health::Unhealthy("/dev/vfio/vfio is missing (or not a character device)".into()))
}
