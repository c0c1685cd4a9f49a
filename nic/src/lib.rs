//! `nic`: the node model shared by every kube-rdma binary.
//!
//! Data flows one way: **sysfs / netlink → [`Inventory`] → pools / checks →
//! gRPC / CNI result / CRD status**. This crate owns the first two steps:
//! reading a node (real `/sys` and `/dev`, or a simulated tree from
//! [`sim`]) into plain data, and the netlink codecs that the other crates use
//! to act on it.
#![deny(missing_docs)]

pub mod devinfo;
pub mod discover;
pub mod inventory;
pub mod netlink;
pub mod netns;
pub mod pci;
pub mod prepared;
pub mod roce;
pub mod roots;
pub mod sim;
pub mod simdesc;
pub mod sysfs;
pub mod vfdev;

pub use discover::discover;
pub use inventory::*;
pub use pci::{PciAddr, PciAddrError};
pub use roots::Roots;
