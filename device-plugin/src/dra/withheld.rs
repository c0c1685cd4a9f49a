//! A VF of a pool that DRA does not offer, and why: the record a device view
//! carries ([`super::devices::View::withheld`]) and the metric and the refusal
//! to prepare name. The rule that decides it is [`super::withhold`].

use nic::PciAddr;

/// Why a VF is withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The kubelet lists it as assigned to a pod's container.
    DevicePlugin {
        /// The extended resource (`kuberdma.io/rdma_vfs`).
        resource: String,
        /// `namespace/name` of the pod.
        pod: String,
    },
    /// Its netdev or RDMA device is in another network namespace and no claim
    /// this driver prepared holds it.
    InNetns,
}

impl Reason {
    /// The `reason` label of the metric.
    pub fn label(&self) -> &'static str {
        match self {
            Reason::DevicePlugin { .. } => "device-plugin",
            Reason::InNetns => "netns",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::DevicePlugin { resource, pod } => {
                write!(f, "the kubelet assigned it to pod {pod} as {resource} (device plugin mode)")
            }
            Reason::InNetns => f.write_str(
                "its netdev or RDMA device is in another network namespace and no claim this driver \
                 prepared holds it",
            ),
        }
    }
}

/// A VF of a pool that is not offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// Its device name (`pci-0000-3b-00-2`).
    pub name: String,
    /// The VF.
    pub pci: PciAddr,
    /// Its pool's resource name, for the metric.
    pub resource: String,
    /// Why.
    pub reason: Reason,
}
