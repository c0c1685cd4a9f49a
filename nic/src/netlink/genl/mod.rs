//! Generic netlink (`NETLINK_GENERIC`): the shape every generic netlink family
//! shares and the controller's family lookup.
//!
//! Constants from include/uapi/linux/genetlink.h (Linux 6.x). A message is
//! `nlmsghdr` whose type is the family's id (given out at runtime, except the
//! controller's fixed [`GENL_ID_CTRL`]), then `struct genlmsghdr`, then
//! attributes:
//!
//! ```text
//! | nlmsghdr (16) type = family id | cmd u8 | version u8 | reserved u16 | nla … |
//! ```
//!
//! A family (devlink, ethtool-netlink, …) defines its attribute enum (an
//! [`Nla`] that parses from an [`NlaBuffer`]) and sends [`GenlMessage`]s of it
//! through a [`Genl`] handle (the crate's one transport on `NETLINK_GENERIC`)
//! to the id [`Genl::family_id`] resolves (`genl ctrl get name devlink`).
//!
//! - `attr`: the controller's attributes ([`CtrlAttr`]);
//! - `client`: the [`Genl`] handle and its requests.

mod attr;
mod client;

pub use attr::CtrlAttr;
pub use client::{get_family, Genl};

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, Nla, NlaBuffer,
    NlasIterator, Parseable,
};

use super::transport::NLMSG_MIN_TYPE;

/// `GENL_ID_CTRL`: the controller family's fixed id (= `NLMSG_MIN_TYPE`).
pub const GENL_ID_CTRL: u16 = NLMSG_MIN_TYPE;
/// `GENL_HDRLEN`: `sizeof(struct genlmsghdr)`.
pub const GENL_HDRLEN: usize = 4;
/// `CTRL_CMD_NEWFAMILY`: the controller's answer about a family.
pub const CTRL_CMD_NEWFAMILY: u8 = 1;
/// `CTRL_CMD_GETFAMILY`: ask about a family (by name or id).
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_FAMILY_ID`, u16.
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME`, string.
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `CTRL_ATTR_VERSION`, u32.
pub const CTRL_ATTR_VERSION: u16 = 3;
/// `GENL_NAMSIZ`: family names are shorter than this.
pub const GENL_NAMSIZ: usize = 16;

/// A generic netlink message of a family with attribute type `A`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenlMessage<A> {
    /// The family id (`nlmsg_type`).
    pub family: u16,
    /// `genlmsghdr.cmd`.
    pub cmd: u8,
    /// `genlmsghdr.version`.
    pub version: u8,
    pub attrs: Vec<A>,
}

impl<A: Nla> NetlinkSerializable for GenlMessage<A> {
    fn message_type(&self) -> u16 {
        self.family
    }
    fn buffer_len(&self) -> usize {
        GENL_HDRLEN + self.attrs.as_slice().buffer_len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        buffer[..GENL_HDRLEN].copy_from_slice(&[self.cmd, self.version, 0, 0]);
        self.attrs.as_slice().emit(&mut buffer[GENL_HDRLEN..]);
    }
}

impl<A> NetlinkDeserializable for GenlMessage<A>
where
    A: for<'a> Parseable<NlaBuffer<&'a [u8]>>,
{
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        let Some((hdr, rest)) = payload.split_first_chunk::<GENL_HDRLEN>() else {
            return Err(DecodeError::from(format!(
                "struct genlmsghdr needs {GENL_HDRLEN} bytes, got {}",
                payload.len()
            )));
        };
        let mut attrs = Vec::new();
        for nla in NlasIterator::new(rest) {
            attrs.push(A::parse(&nla?)?);
        }
        Ok(Self { family: header.message_type, cmd: hdr[0], version: hdr[1], attrs })
    }
}
