//! Device health from the inventory: pure functions, so the rescan and the
//! tests agree on what "healthy" means.
//!
//! A VF is Unhealthy when its PF link is not up, it has no driver, it has no
//! RDMA device, or an RDMA device has no verbs char device under the dev root.
//! A shared HCA is Unhealthy when its link is not up or its verbs node is
//! missing. The kubelet stops scheduling onto Unhealthy devices; the reason is
//! logged and shown by `discover`.

use nic::{Netdev, Pf, RdmaDev, Vf};

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

/// Health of a VF on `pf`. `require_rdma`: a VF without an RDMA device is
/// Unhealthy (pools that select `isRdma: true`, or a VF that had one before);
/// a plain netdevice pool (SNDP without `isRdma`) does not require one.
pub fn vf_health(pf: &Pf, vf: &Vf, require_rdma: bool) -> Health {
    if let Some(h) = link_problem(&pf.netdevs, "PF") {
        return h;
    }
    if vf.driver.is_none() {
        return Health::Unhealthy(format!("VF {} has no driver bound", vf.pci));
    }
    if vf.rdma.is_empty() && require_rdma {
        return Health::Unhealthy(format!("VF {} has no RDMA device", vf.pci));
    }
    rdma_problem(&vf.rdma).unwrap_or(Health::Healthy)
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

fn rdma_problem(rdma: &[RdmaDev]) -> Option<Health> {
    for r in rdma {
        match &r.uverbs {
            None => return Some(Health::Unhealthy(format!("RDMA device {} has no uverbs device", r.name))),
            Some(c) if !c.present => {
                return Some(Health::Unhealthy(format!(
                    "RDMA device {}: {} is missing",
                    r.name,
                    c.node_path.display()
                )))
            }
            Some(_) => {}
        }
    }
    None
}
