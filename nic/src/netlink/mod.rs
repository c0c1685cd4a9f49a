//! Netlink codecs over one transport ([`transport`]): rtnetlink links and VFs,
//! DCB, RDMA nldev, generic netlink (devlink), and the multicast event subscriber.
pub mod dcb;
pub mod devlink;
pub mod events;
pub mod genl;
pub mod link;
pub mod nldev;
pub mod transport;
pub mod vf;
