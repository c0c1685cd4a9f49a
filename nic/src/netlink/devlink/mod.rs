//! Devlink (generic netlink family `devlink`): device parameters, read and
//! set the way `devlink dev param show|set` does.
//!
//! Constants come from the uapi header `include/uapi/linux/devlink.h` (checked
//! against Debian's linux-libc-dev 6.1.192); the reply layout is the kernel's
//! `devlink_nl_param_fill` and `devlink_nl_param_value_fill_one`
//! (net/devlink/leftover.c in Linux 6.1, net/core/devlink.c before 6.1), the
//! request checks are `__devlink_nl_cmd_param_set_doit` and
//! `devlink_param_value_get_from_info`. Integers are host-endian.
//!
//! ```text
//! nlmsghdr (16)      | len u32 | type u16 = devlink family id | flags u16 | seq u32 | pid u32 |
//! genlmsghdr (4)     | cmd u8 = PARAM_GET (38) | version u8 = 1 | reserved u16 |
//! attributes         | BUS_NAME "pci\0" | DEV_NAME "0000:17:00.0\0"
//!                    | PARAM {                                   (a nest without NLA_F_NESTED)
//!                    |   PARAM_NAME "enable_roce\0" | [PARAM_GENERIC flag] | PARAM_TYPE u8 (NLA_FLAG = 6)
//!                    |   PARAM_VALUES_LIST {
//!                    |     PARAM_VALUE { PARAM_VALUE_CMODE u8 | [PARAM_VALUE_DATA] }   one per cmode
//!                    | } }
//! ```
//!
//! `PARAM_VALUE_DATA` is "dynamic": its layout is the one `PARAM_TYPE` names
//! (u8, u16, u32, a NUL-terminated string), and a boolean is the *presence* of
//! a zero-length attribute (`NLA_FLAG`): true is sent, false is left out, in
//! replies and in `PARAM_SET` requests alike.
//!
//! Every devlink attribute lives in one number space, nests included, so one
//! enum ([`DevlinkAttr`]) decodes every level. The codec is pure and plugs into
//! the crate's one transport as a [`GenlMessage`]; [`Devlink`] resolves the
//! family over a [`Genl`](super::genl::Genl) handle and sends the requests,
//! each named by its `devlink` (iproute2) form:
//! - [`param_get`], [`Devlink::param_get`]: `devlink dev param show BUS/DEV name NAME`
//! - [`param_dump`], [`Devlink::params`]: `devlink dev param show`
//! - [`param_set`], [`Devlink::param_set`]: `devlink dev param set BUS/DEV name NAME value V cmode C`
//!
//! Split by concern: `attr` (the attribute enum and its codec), `params`
//! (the parameter model: handles, cmodes, typed values, replies), `request`
//! (the request messages), `client` (the [`Devlink`] handle and its errors),
//! [`recorded`] (the kernel's answers, for simulated nodes and fixtures).

mod attr;
mod client;
mod params;
pub mod recorded;
mod request;

pub use attr::{DevlinkAttr, DevlinkMessage};
pub use client::{Devlink, DevlinkError};
pub use params::{Cmode, DevHandle, Param, ParamReply, ParamType, ParamValue};
pub use request::{param_dump, param_get, param_set, param_set_command};

/// An E810 PF's RDMA function to RoCEv2, as ice's runtime parameters: (name, value), written in
/// this order (ice refuses `enable_roce` while iWARP is on). [`Devlink::enable_roce`] writes them;
/// the printed remedy names the same two.
pub const ENABLE_ROCE_PARAMS: [(&str, bool); 2] = [("enable_iwarp", false), ("enable_roce", true)];

use super::genl::GenlMessage;

/// `DEVLINK_GENL_NAME`: the family name the controller resolves.
pub const DEVLINK_GENL_NAME: &str = "devlink";
pub const DEVLINK_GENL_VERSION: u8 = 1;

/// `DEVLINK_CMD_PARAM_GET` (`enum devlink_command`): one parameter, or a dump of all.
pub const DEVLINK_CMD_PARAM_GET: u8 = 38;
pub const DEVLINK_CMD_PARAM_SET: u8 = 39;
/// `DEVLINK_CMD_PARAM_NEW`: the notification a successful SET multicasts.
pub const DEVLINK_CMD_PARAM_NEW: u8 = 40;
pub const DEVLINK_CMD_PARAM_DEL: u8 = 41;

/// `DEVLINK_ATTR_BUS_NAME` (`enum devlink_attr`), string.
pub const DEVLINK_ATTR_BUS_NAME: u16 = 1;
/// `DEVLINK_ATTR_DEV_NAME`, string.
pub const DEVLINK_ATTR_DEV_NAME: u16 = 2;
/// `DEVLINK_ATTR_PORT_INDEX`, u32 (port parameters only).
pub const DEVLINK_ATTR_PORT_INDEX: u16 = 3;
/// `DEVLINK_ATTR_PARAM`, nested.
pub const DEVLINK_ATTR_PARAM: u16 = 80;
/// `DEVLINK_ATTR_PARAM_NAME`, string.
pub const DEVLINK_ATTR_PARAM_NAME: u16 = 81;
/// `DEVLINK_ATTR_PARAM_GENERIC`, flag: one of the kernel's generic parameters.
pub const DEVLINK_ATTR_PARAM_GENERIC: u16 = 82;
/// `DEVLINK_ATTR_PARAM_TYPE`, u8: an `NLA_*` type (see [`ParamType`]).
pub const DEVLINK_ATTR_PARAM_TYPE: u16 = 83;
/// `DEVLINK_ATTR_PARAM_VALUES_LIST`, nested.
pub const DEVLINK_ATTR_PARAM_VALUES_LIST: u16 = 84;
/// `DEVLINK_ATTR_PARAM_VALUE`, nested.
pub const DEVLINK_ATTR_PARAM_VALUE: u16 = 85;
/// `DEVLINK_ATTR_PARAM_VALUE_DATA`, dynamic (see the [module docs](self)).
pub const DEVLINK_ATTR_PARAM_VALUE_DATA: u16 = 86;
/// `DEVLINK_ATTR_PARAM_VALUE_CMODE`, u8 (`enum devlink_param_cmode`).
pub const DEVLINK_ATTR_PARAM_VALUE_CMODE: u16 = 87;

/// The attribute types the kernel puts in `DEVLINK_ATTR_PARAM_TYPE`
/// (`devlink_param_type_to_nla_type`): the `NLA_*` numbers of
/// include/net/netlink.h, which iproute2 reads as `MNL_TYPE_*` (Linux 6.16 names
/// them in uapi as `enum devlink_var_attr_type`).
pub mod nla_type {
    pub const NLA_U8: u8 = 1;
    pub const NLA_U16: u8 = 2;
    pub const NLA_U32: u8 = 3;
    pub const NLA_STRING: u8 = 5;
    /// `NLA_FLAG`: a boolean parameter.
    pub const NLA_FLAG: u8 = 6;
}

/// `__DEVLINK_PARAM_MAX_STRING_VALUE` (include/net/devlink.h): string values,
/// NUL included, are shorter than this.
pub const DEVLINK_PARAM_MAX_STRING_VALUE: usize = 32;
