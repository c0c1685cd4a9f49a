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

/// A simulated node and the source that reads it; the tree lives as long as
/// the returned [`nic::sim::Sim`].
///
/// `path` is a description (materialised in a temporary directory) or a
/// directory another process materialised (the e2e cluster's node, read and
/// changed in place). The simulated node's name stands in for `node_name`
/// (NODE_NAME) unless one is given.
pub fn simulated(
    path: &std::path::Path,
    opts: ObserveOpts,
) -> Result<(nic::sim::Sim, NodeSource), nic::sim::SimError> {
    let sim = if path.is_dir() { nic::sim::Sim::open(path) } else { nic::sim::Sim::from_file(path) }?;
    let opts = ObserveOpts { node_name: opts.node_name.or_else(|| Some(sim.desc().node.clone())), ..opts };
    let src = NodeSource { roots: sim.roots(), dcb: DcbSource::Recorded(sim.recording()), opts };
    Ok((sim, src))
}
