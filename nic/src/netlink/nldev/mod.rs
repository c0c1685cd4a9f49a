//! RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`): list RDMA devices,
//! move one into a network namespace, read the subsystem's netns mode.
//!
//! Constants come from `include/uapi/rdma/rdma_netlink.h` (Linux 6.x; the
//! attribute enum is ABI: "don't change the order or add anything between").
//!
//! Message layout: a plain `nlmsghdr` whose type is
//! `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd) = (5 << 10) + cmd`, followed directly
//! by attributes (no family header). Integers are in host byte order, strings
//! NUL-terminated.
//!
//! ```text
//! +----------------------+----------------------+-------------------------+
//! | nlmsghdr (16 bytes)  | nla DEV_INDEX u32    | nla NET_NS_FD u32 | ... |
//! | type = 0x1400 | cmd  | len=8 type=1 value   | len=8 type=68 value     |
//! +----------------------+----------------------+-------------------------+
//! ```
//!
//! Requests, by their `rdma` (iproute2) equivalent, as messages and as
//! methods of the [`Nldev`] handle:
//! - [`get_device`] / [`dump_devices`], [`Nldev::devices`]: `rdma dev show [DEV]`
//! - [`dump_ports`], [`Nldev::ports`]: `rdma link show dev DEV` (one device per dump)
//! - [`set_netns`], [`Nldev::set_netns`]: `rdma dev set DEV netns NS`
//! - [`sys_get`], [`Nldev::netns_mode`]: `rdma system show netns`
//! - [`sys_set_netns_mode`], [`Nldev::set_netns_mode`]: `rdma system set netns shared|exclusive`
//!
//! Split by concern: `attr` (the attribute enum and its codec), `message`
//! (messages, requests, and the device/port views of replies), `client` (the
//! [`Nldev`] handle).

mod attr;
mod client;
mod message;

pub use attr::NldevAttr;
pub use client::Nldev;
pub use message::{
    dump_devices, dump_ports, get_device, netns_mode_of, set_netns, sys_get, sys_set_netns_mode,
    NldevMessage, RdmaDevice, RdmaPortInfo,
};

/// `RDMA_NL_NLDEV`: the nldev client number.
pub const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GET_TYPE(client, op)`.
pub const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_CLIENT(type)`.
pub const fn rdma_nl_get_client(ty: u16) -> u16 {
    (ty & (((1 << 6) - 1) << 10)) >> 10
}

/// `RDMA_NL_GET_OP(type)`.
pub const fn rdma_nl_get_op(ty: u16) -> u16 {
    ty & ((1 << 10) - 1)
}

/// `RDMA_NLDEV_CMD_GET`: get device info (can dump).
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SET`: set device properties (name, netns, DIM).
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
/// `RDMA_NLDEV_CMD_PORT_GET`: port info (can dump).
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
/// `RDMA_NLDEV_CMD_SYS_GET`: subsystem properties.
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_CMD_SYS_SET`: set subsystem properties.
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;

/// `RDMA_NLDEV_ATTR_PAD` (= UNSPEC): 64-bit alignment padding.
pub const RDMA_NLDEV_ATTR_PAD: u16 = 0;
/// `RDMA_NLDEV_ATTR_DEV_INDEX`, u32.
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME`, string.
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_PORT_INDEX`, u32 (in a device reply: the number of ports).
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// `RDMA_NLDEV_ATTR_CAP_FLAGS`, u64.
pub const RDMA_NLDEV_ATTR_CAP_FLAGS: u16 = 4;
/// `RDMA_NLDEV_ATTR_FW_VERSION`, string.
pub const RDMA_NLDEV_ATTR_FW_VERSION: u16 = 5;
/// `RDMA_NLDEV_ATTR_NODE_GUID`, u64 (host order).
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
/// `RDMA_NLDEV_ATTR_SYS_IMAGE_GUID`, u64.
pub const RDMA_NLDEV_ATTR_SYS_IMAGE_GUID: u16 = 7;
/// `RDMA_NLDEV_ATTR_PORT_STATE`, u8 (IB port state: 1 down … 4 active).
pub const RDMA_NLDEV_ATTR_PORT_STATE: u16 = 12;
/// `RDMA_NLDEV_ATTR_PORT_PHYS_STATE`, u8 (5 = LinkUp).
pub const RDMA_NLDEV_ATTR_PORT_PHYS_STATE: u16 = 13;
/// `RDMA_NLDEV_ATTR_DEV_NODE_TYPE`, u8.
pub const RDMA_NLDEV_ATTR_DEV_NODE_TYPE: u16 = 14;
/// `RDMA_NLDEV_ATTR_NDEV_INDEX`, u32: ifindex of the port's netdev.
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
/// `RDMA_NLDEV_ATTR_NDEV_NAME`, string: name of the port's netdev.
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE`, u8: 1 shared, 0 exclusive.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// `RDMA_NLDEV_ATTR_DEV_PROTOCOL`, string (`roce`, `ib`, `iw`, …).
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// `RDMA_NLDEV_NET_NS_FD`, u32: fd of the target netns in a SET.
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

/// `IB_DEVICE_NAME_MAX` (include/rdma/ib_verbs.h): names are shorter than this.
pub const IB_DEVICE_NAME_MAX: usize = 64;
