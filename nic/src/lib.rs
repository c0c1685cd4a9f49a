//! `nic`: the node model shared by every kube-rdma binary.
//!
//! Data flows one way: **sysfs / netlink → [`Inventory`] → pools / checks →
//! gRPC / CNI result / CRD status**. This crate owns the first two steps:
//! reading a node (real `/sys` and `/dev`, or a simulated tree from
//! [`sim`]) into plain data, and the netlink codecs that the other crates use
//! to act on it.
// No `missing_docs` lint: it demanded docs that only repeated a name (`/// NUMA node.`).
// Public items carry a doc where it says what the name and type do not.

pub mod devinfo;
pub mod discover;
pub mod inventory;
pub mod netlink;
pub mod netns;
pub mod pci;
pub mod prepared;
pub mod readiness;
pub mod roce;
pub mod roots;
pub mod sim;
pub mod sysfs;
pub mod vfdev;

pub use discover::discover;
pub use inventory::*;
pub use pci::{PciAddr, PciAddrError};
pub use roots::Roots;
/// The simulated node's description, by its older path (callers in the other
/// crates and the tests name it so).
pub use sim::desc as simdesc;

/// An error and its sources on one line (`a: b: c`), as the binaries print
/// errors (`{:#}`) and as logs carry them. A source whose text the message
/// already holds is not repeated (some libraries, kube's among them, embed it).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
