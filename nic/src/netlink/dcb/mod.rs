//! DCB netlink (`RTM_GETDCB` / `RTM_SETDCB` over `NETLINK_ROUTE`): the IEEE
//! 802.1Qaz view of a port (ETS, PFC with its pause counters, the APP table
//! with DSCP entries, maxrate, buffers) and the DCBX mode.
//!
//! Constants and layouts come from the kernel uapi header
//! `include/uapi/linux/dcbnl.h` (Linux 6.x; `DCB_ATTR_DCB_BUFFER` since 4.17,
//! selector 5 = DSCP since 4.13) and the reply shapes from `net/dcb/dcbnl.c`
//! (`dcbnl_ieee_fill`, `dcb_doit`). Integers are host-endian, as in every
//! rtnetlink family.
//!
//! ```text
//! nlmsghdr (16)          | len u32 | type u16 = 78/79 | flags u16 | seq u32 | pid u32 |
//! struct dcbmsg (4)      | dcb_family u8 = AF_UNSPEC | cmd u8 | dcb_pad u16 |
//! attributes             | DCB_ATTR_IFNAME "ens1f0np0\0"
//!                        | DCB_ATTR_IEEE { ETS | PFC | APP_TABLE { APP… } | MAXRATE | DCB_BUFFER | PEER_* }
//!                        | DCB_ATTR_DCBX u8
//! ```
//!
//! The codec is pure: [`DcbMsg`] is the body after `nlmsghdr` and plugs into
//! the crate's one netlink transport ([`crate::netlink::transport`]), which
//! frames it, handles ACKs and kernel errors; [`parse_messages`] decodes a
//! whole datagram. Requests are methods of the [`Dcb`] handle
//! ([`Dcb::open`], [`Dcb::open_in`]). Kernel
//! notifications of DCB changes go to the rtnetlink multicast group
//! [`RTNLGRP_DCB`] (subscribe with [`crate::netlink::events`]) and have the
//! same shape as a `DCB_CMD_IEEE_GET` reply.

mod client;
mod message;
mod structs;

pub use client::{Dcb, DcbError};
pub use message::{
    parse_messages, AppAttr, DcbAttr, DcbMessage, DcbMsg, IeeeAttr, IeeeState, ParseError, RawNla,
};
pub use structs::{
    DcbApp, DcbBuffer, DcbxMode, IeeeEts, IeeeMaxrate, IeeePfc, Priorities, PrioritiesError,
    DCBNL_BUFFER_LEN, DCB_APP_LEN, IEEE_ETS_LEN, IEEE_MAXRATE_LEN, IEEE_PFC_LEN,
};

/// `RTM_GETDCB` (include/uapi/linux/rtnetlink.h).
pub const RTM_GETDCB: u16 = 78;
pub const RTM_SETDCB: u16 = 79;
/// rtnetlink multicast group of DCB change notifications (`RTNLGRP_DCB`,
/// include/uapi/linux/rtnetlink.h; 0x17 also in the libc crate). Join it with
/// [`crate::netlink::events::subscribe`] and [`crate::netlink::events::Group::Dcb`].
pub const RTNLGRP_DCB: u32 = 23;

/// `enum dcbnl_commands` values used here (dcbnl.h).
pub mod cmd {
    /// Set the IEEE 802.1Qaz configuration.
    pub const DCB_CMD_IEEE_SET: u8 = 20;
    /// Get the IEEE 802.1Qaz configuration.
    pub const DCB_CMD_IEEE_GET: u8 = 21;
    /// Get the DCBX mode.
    pub const DCB_CMD_GDCBX: u8 = 22;
    /// Set the DCBX mode.
    pub const DCB_CMD_SDCBX: u8 = 23;
    /// Get the CEE configuration (notifications from CEE-mode drivers).
    pub const DCB_CMD_CEE_GET: u8 = 26;
    /// Delete IEEE 802.1Qaz configuration (APP entries).
    pub const DCB_CMD_IEEE_DEL: u8 = 27;
}

/// `enum dcbnl_attrs` values (top level).
pub mod attr {
    /// Interface name, NUL-terminated string.
    pub const DCB_ATTR_IFNAME: u16 = 1;
    /// IEEE 802.1Qaz nest (a u8 status in SET/DEL replies).
    pub const DCB_ATTR_IEEE: u16 = 13;
    /// DCBX mode, u8 of `DCB_CAP_DCBX_*` bits (a u8 status in SDCBX replies).
    pub const DCB_ATTR_DCBX: u16 = 14;
}

/// `enum ieee_attrs` values (inside `DCB_ATTR_IEEE`).
pub mod ieee {
    /// `struct ieee_ets`.
    pub const DCB_ATTR_IEEE_ETS: u16 = 1;
    /// `struct ieee_pfc`.
    pub const DCB_ATTR_IEEE_PFC: u16 = 2;
    /// Nest of `DCB_ATTR_IEEE_APP` / `DCB_ATTR_DCB_APP`.
    pub const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
    /// Peer's `struct ieee_ets` (get only).
    pub const DCB_ATTR_IEEE_PEER_ETS: u16 = 4;
    /// Peer's `struct ieee_pfc` (get only).
    pub const DCB_ATTR_IEEE_PEER_PFC: u16 = 5;
    /// Peer's APP TLV (get only), kept raw.
    pub const DCB_ATTR_IEEE_PEER_APP: u16 = 6;
    /// `struct ieee_maxrate`.
    pub const DCB_ATTR_IEEE_MAXRATE: u16 = 7;
    /// `struct dcbnl_buffer`.
    pub const DCB_ATTR_DCB_BUFFER: u16 = 10;
    /// `struct dcb_app` with an IEEE selector (inside the APP table).
    pub const DCB_ATTR_IEEE_APP: u16 = 1;
    /// `struct dcb_app` with a non-IEEE selector such as PCP (255).
    pub const DCB_ATTR_DCB_APP: u16 = 2;
}

/// DCBX capability bits (`DCB_CAP_DCBX_*`, dcbnl.h).
pub mod dcbx {
    /// The host LLDP agent negotiates (lldpad, or none: static host config).
    pub const DCB_CAP_DCBX_HOST: u8 = 0x01;
    /// Firmware (or another entity) negotiates.
    pub const DCB_CAP_DCBX_LLD_MANAGED: u8 = 0x02;
    /// CEE flavour.
    pub const DCB_CAP_DCBX_VER_CEE: u8 = 0x04;
    /// IEEE flavour.
    pub const DCB_CAP_DCBX_VER_IEEE: u8 = 0x08;
    /// Static configuration, no negotiation.
    pub const DCB_CAP_DCBX_STATIC: u8 = 0x10;
}

/// APP selector: DSCP (`IEEE_8021QAZ_APP_SEL_DSCP`).
pub const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;
/// APP selector: EtherType.
pub const IEEE_8021QAZ_APP_SEL_ETHERTYPE: u8 = 1;
/// Non-standard APP selector: PCP (`DCB_APP_SEL_PCP`).
pub const DCB_APP_SEL_PCP: u8 = 255;

/// `sizeof(struct dcbmsg)`.
pub const DCBMSG_LEN: usize = 4;
