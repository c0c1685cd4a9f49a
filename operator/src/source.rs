//! Where a node's RoCE settings are read from: this host (sysfs, DCB netlink,
//! ethtool) or a simulated node. Shared by the agent, Enforce and `kubectl rdma check`.

use nic::roce::{observe, DcbSource, NodeRoce, ObserveOpts};
use nic::Roots;

/// Where the node is read from.
#[derive(Debug, Clone)]
pub struct NodeSource {
    /// sysfs and dev roots.
    pub roots: Roots,
    /// DCB netlink, or the simulated node's description.
    pub dcb: DcbSource,
    /// Reader options.
    pub opts: ObserveOpts,
}

impl NodeSource {
    /// Discover and observe the node (blocking sysfs / netlink I/O).
    pub fn read(&self) -> NodeRoce {
        let inv = nic::discover(&self.roots);
        observe(&self.roots, &inv, &self.dcb, &self.opts)
    }
}
