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
//! over the crate's one transport to the id [`Client::genl_family_id`]
//! resolves (`genl ctrl get name devlink`).

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, Nla,
    NlaBuffer, NlasIterator, Parseable,
};

use super::transport::{Client, NlError, Transport, NLMSG_MIN_TYPE};

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
    /// Attributes in wire order.
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

/// An attribute of the controller family (`CTRL_ATTR_*`); the ones not
/// needed to resolve a family are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtrlAttr {
    /// `CTRL_ATTR_FAMILY_ID`.
    FamilyId(u16),
    /// `CTRL_ATTR_FAMILY_NAME`.
    FamilyName(String),
    /// `CTRL_ATTR_VERSION`.
    Version(u32),
    /// Anything else (`HDRSIZE`, `MAXATTR`, `OPS`, `MCAST_GROUPS`, …).
    Other(DefaultNla),
}

impl Nla for CtrlAttr {
    fn value_len(&self) -> usize {
        match self {
            CtrlAttr::FamilyId(_) => 2,
            CtrlAttr::FamilyName(s) => s.len() + 1,
            CtrlAttr::Version(_) => 4,
            CtrlAttr::Other(n) => n.value_len(),
        }
    }
    fn kind(&self) -> u16 {
        match self {
            CtrlAttr::FamilyId(_) => CTRL_ATTR_FAMILY_ID,
            CtrlAttr::FamilyName(_) => CTRL_ATTR_FAMILY_NAME,
            CtrlAttr::Version(_) => CTRL_ATTR_VERSION,
            CtrlAttr::Other(n) => n.kind(),
        }
    }
    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            CtrlAttr::FamilyId(v) => buf[..2].copy_from_slice(&v.to_ne_bytes()),
            CtrlAttr::FamilyName(s) => {
                buf[..s.len()].copy_from_slice(s.as_bytes());
                buf[s.len()] = 0;
            }
            CtrlAttr::Version(v) => buf[..4].copy_from_slice(&v.to_ne_bytes()),
            CtrlAttr::Other(n) => n.emit_value(buf),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for CtrlAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            CTRL_ATTR_FAMILY_ID => {
                CtrlAttr::FamilyId(<[u8; 2]>::try_from(v).map(u16::from_ne_bytes).map_err(|_| {
                    DecodeError::from(format!("CTRL_ATTR_FAMILY_ID: expected 2 bytes, got {}", v.len()))
                })?)
            }
            CTRL_ATTR_FAMILY_NAME => {
                let s = v.split(|b| *b == 0).next().unwrap_or(v);
                if s.len() >= GENL_NAMSIZ {
                    return Err(DecodeError::from(format!(
                        "CTRL_ATTR_FAMILY_NAME: {} bytes is too long",
                        s.len()
                    )));
                }
                CtrlAttr::FamilyName(
                    String::from_utf8(s.to_vec())
                        .map_err(|_| DecodeError::from("CTRL_ATTR_FAMILY_NAME: not UTF-8"))?,
                )
            }
            CTRL_ATTR_VERSION => {
                CtrlAttr::Version(<[u8; 4]>::try_from(v).map(u32::from_ne_bytes).map_err(|_| {
                    DecodeError::from(format!("CTRL_ATTR_VERSION: expected 4 bytes, got {}", v.len()))
                })?)
            }
            _ => CtrlAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// `genl ctrl get name NAME`: `CTRL_CMD_GETFAMILY` with `CTRL_ATTR_FAMILY_NAME`.
pub fn get_family(name: &str) -> GenlMessage<CtrlAttr> {
    GenlMessage {
        family: GENL_ID_CTRL,
        cmd: CTRL_CMD_GETFAMILY,
        version: 1,
        attrs: vec![CtrlAttr::FamilyName(name.to_string())],
    }
}

/// Generic netlink requests (open the client on [`super::transport::NETLINK_GENERIC`]).
impl<T: Transport> Client<T> {
    /// `genl ctrl get name NAME`: the id the kernel gave family `name`. A family
    /// that is not registered (module not loaded) is the kernel's `ENOENT`.
    pub fn genl_family_id(&mut self, name: &str) -> Result<u16, NlError> {
        let op = format!("CTRL_CMD_GETFAMILY {name}");
        if name.is_empty() || name.len() >= GENL_NAMSIZ || name.contains('\0') {
            return Err(NlError::Decode {
                op,
                why: format!("{name:?} is not a generic netlink family name"),
            });
        }
        let replies = self.request(&op, get_family(name), false, 0)?;
        replies
            .iter()
            .flat_map(|m| m.attrs.iter())
            .find_map(|a| match a {
                CtrlAttr::FamilyId(id) => Some(*id),
                _ => None,
            })
            .ok_or_else(|| NlError::Decode { op, why: "reply without CTRL_ATTR_FAMILY_ID".into() })
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::netlink::transport::{emit, Recorded, NETLINK_GENERIC};

    /// `genl ctrl get name devlink`, seq 1 (genetlink.h: GENL_ID_CTRL 0x10,
    /// CTRL_CMD_GETFAMILY 3, CTRL_ATTR_FAMILY_NAME 2).
    #[rustfmt::skip]
    const GET_DEVLINK: [u8; 32] = [
        0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
        0x10, 0x00,             // nlmsg_type GENL_ID_CTRL
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 1, pid 0
        0x03, 0x01, 0x00, 0x00, // genlmsghdr: CTRL_CMD_GETFAMILY, version 1
        0x0c, 0x00, 0x02, 0x00, b'd', b'e', b'v', b'l', b'i', b'n', b'k', 0x00, // FAMILY_NAME "devlink\0"
    ];

    /// The controller's answer (trimmed to the attributes a lookup reads, plus one it keeps raw).
    #[rustfmt::skip]
    fn new_family(seq: u8) -> Vec<u8> {
        vec![
            0x38, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, seq, 0, 0, 0, 0, 0, 0, 0, // len 56, GENL_ID_CTRL
            0x01, 0x02, 0x00, 0x00, // CTRL_CMD_NEWFAMILY, version 2
            0x0c, 0x00, 0x02, 0x00, b'd', b'e', b'v', b'l', b'i', b'n', b'k', 0x00, // FAMILY_NAME
            0x06, 0x00, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, // FAMILY_ID 0x15 + 2 pad
            0x08, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, // VERSION 1
            0x08, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, // HDRSIZE 0 -> Other
        ]
    }

    fn ack(seq: u8) -> Vec<u8> {
        let mut a = vec![0x24, 0, 0, 0, 0x02, 0, 0, 0x01, seq, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        a.extend_from_slice(&GET_DEVLINK[..16]);
        a
    }

    #[test]
    fn family_lookup_is_byte_exact_and_reads_the_id() {
        let mut req = crate::netlink::transport::request_message(0x05, 1, get_family("devlink"));
        assert_eq!(emit(&mut req), GET_DEVLINK);
        let mut c = Client::new(Recorded::new([new_family(1), ack(1)]));
        assert_eq!(c.genl_family_id("devlink").unwrap(), 0x15);
        assert_eq!(c.transport().sent, vec![GET_DEVLINK.to_vec()]);
        let parsed =
            crate::netlink::transport::parse_datagram::<GenlMessage<CtrlAttr>>(&new_family(1)).unwrap();
        let netlink_packet_core::NetlinkPayload::InnerMessage(m) = &parsed[0].payload else { panic!() };
        assert_eq!(
            m.attrs[..3],
            [CtrlAttr::FamilyName("devlink".into()), CtrlAttr::FamilyId(0x15), CtrlAttr::Version(1)]
        );
        assert!(matches!(m.attrs[3], CtrlAttr::Other(_)));
        assert_eq!(emit(&mut parsed[0].clone()), new_family(1));
    }

    #[test]
    fn bad_names_and_replies_are_errors() {
        let mut c = Client::new(Recorded::new([]));
        assert!(c.genl_family_id("a-name-much-too-long").is_err());
        assert!(c.transport().sent.is_empty(), "nothing sent for a name the kernel cannot hold");
        let mut short = new_family(1);
        short[32] = 0x05; // FAMILY_ID of 1 byte
        let mut c = Client::new(Recorded::new([short]));
        let e = c.genl_family_id("devlink").unwrap_err();
        assert!(e.to_string().contains("CTRL_ATTR_FAMILY_ID"), "{e}");
        for n in 0..new_family(1).len() {
            let _ = crate::netlink::transport::parse_datagram::<GenlMessage<CtrlAttr>>(&new_family(1)[..n]);
        }
    }

    /// The real kernel's controller: it knows itself under its fixed id, and
    /// answers ENOENT for a family nobody registered.
    #[test]
    fn real_kernel_resolves_the_controller_and_refuses_unknown_families() {
        let mut c = Client::open(NETLINK_GENERIC).expect("NETLINK_GENERIC socket");
        assert_eq!(c.genl_family_id("nlctrl").unwrap(), GENL_ID_CTRL);
        let e = c.genl_family_id("krdma-nosuch").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    }
}
