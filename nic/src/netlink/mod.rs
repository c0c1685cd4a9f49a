//! Netlink codecs over one transport ([`transport`]): rtnetlink links and VFs,
//! the multicast event subscriber, and one typed handle per family, rtnetlink
//! style (the protocol is the handle's, requests are its methods):
//!
//! | handle                 | socket            | family                         |
//! |------------------------|-------------------|--------------------------------|
//! | [`nldev::Nldev`]       | `NETLINK_RDMA`    | RDMA nldev (`rdma dev/link/system`) |
//! | [`dcb::Dcb`]           | `NETLINK_ROUTE`   | DCB (`dcb pfc/ets/app/dcbx`)   |
//! | [`genl::Genl`]         | `NETLINK_GENERIC` | the generic netlink controller |
//! | [`devlink::Devlink`]   | `NETLINK_GENERIC` | devlink parameters             |
//!
//! Every codec decodes attribute values with the same bounds ([`nla`]).
pub mod dcb;
pub mod devlink;
pub mod events;
pub mod genl;
pub mod link;
pub mod nla;
pub mod nldev;
pub mod transport;
pub mod vf;
pub mod vf_stats;
