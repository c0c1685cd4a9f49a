//! The [`Genl`] handle: the crate's one transport on `NETLINK_GENERIC`, the
//! controller's family lookup, and requests of any generic netlink family.

use std::fmt::Debug;
use std::io;

use netlink_packet_core::{Nla, NlaBuffer, Parseable};

use super::{CtrlAttr, GenlMessage, CTRL_CMD_GETFAMILY, GENL_ID_CTRL, GENL_NAMSIZ};
use crate::netlink::transport::{Client, NlError, SocketTransport, Transport, NETLINK_GENERIC};

/// `genl ctrl get name NAME`: `CTRL_CMD_GETFAMILY` with `CTRL_ATTR_FAMILY_NAME`.
pub fn get_family(name: &str) -> GenlMessage<CtrlAttr> {
    GenlMessage {
        family: GENL_ID_CTRL,
        cmd: CTRL_CMD_GETFAMILY,
        version: 1,
        attrs: vec![CtrlAttr::FamilyName(name.to_string())],
    }
}

/// A generic netlink socket (`NETLINK_GENERIC`): resolves family names to the
/// ids the kernel gave them and carries any family's [`GenlMessage`]s. A
/// family's own handle ([`crate::netlink::devlink::Devlink`]) is built on one.
#[derive(Debug)]
pub struct Genl<T = SocketTransport> {
    client: Client<T>,
}

impl Genl<SocketTransport> {
    /// Opens a `NETLINK_GENERIC` socket in the calling thread's netns.
    pub fn open() -> io::Result<Self> {
        SocketTransport::open(NETLINK_GENERIC).map(Self::new)
    }
}

impl<T: Transport> Genl<T> {
    /// Generic netlink over `transport` (a [`SocketTransport`] on
    /// `NETLINK_GENERIC`, or recorded answers).
    pub fn new(transport: T) -> Self {
        Self { client: Client::new(transport) }
    }

    /// The transport (e.g. to read [`crate::netlink::transport::Recorded::sent`]).
    pub fn transport(&self) -> &T {
        self.client.transport()
    }

    /// Sends `msg` (as a dump when `dump`) and returns the replies of the
    /// same family up to the ACK or `NLMSG_DONE`. `op` names the request in errors.
    pub fn request<A>(
        &mut self,
        op: &str,
        msg: GenlMessage<A>,
        dump: bool,
    ) -> Result<Vec<GenlMessage<A>>, NlError>
    where
        A: Nla + Debug + for<'a> Parseable<NlaBuffer<&'a [u8]>>,
    {
        self.client.request(op, msg, dump, 0)
    }

    /// `genl ctrl get name NAME`: the id the kernel gave family `name`. A family
    /// that is not registered (module not loaded) is the kernel's `ENOENT`.
    pub fn family_id(&mut self, name: &str) -> Result<u16, NlError> {
        let op = format!("CTRL_CMD_GETFAMILY {name}");
        if name.is_empty() || name.len() >= GENL_NAMSIZ || name.contains('\0') {
            return Err(NlError::Decode {
                op,
                why: format!("{name:?} is not a generic netlink family name"),
            });
        }
        let replies = self.request(&op, get_family(name), false)?;
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
    use crate::netlink::transport::{emit, Recorded};

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
        let mut c = Genl::new(Recorded::new([new_family(1), ack(1)]));
        assert_eq!(c.family_id("devlink").unwrap(), 0x15);
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
        let mut c = Genl::new(Recorded::new([]));
        assert!(c.family_id("a-name-much-too-long").is_err());
        assert!(c.transport().sent.is_empty(), "nothing sent for a name the kernel cannot hold");
        let mut short = new_family(1);
        short[32] = 0x05; // FAMILY_ID of 1 byte
        let mut c = Genl::new(Recorded::new([short]));
        let e = c.family_id("devlink").unwrap_err();
        assert!(e.to_string().contains("CTRL_ATTR_FAMILY_ID"), "{e}");
        for n in 0..new_family(1).len() {
            let _ = crate::netlink::transport::parse_datagram::<GenlMessage<CtrlAttr>>(&new_family(1)[..n]);
        }
    }

    /// The real kernel's controller: it knows itself under its fixed id, and
    /// answers ENOENT for a family nobody registered.
    #[test]
    fn real_kernel_resolves_the_controller_and_refuses_unknown_families() {
        let mut c = Genl::open().expect("NETLINK_GENERIC socket");
        assert_eq!(c.family_id("nlctrl").unwrap(), GENL_ID_CTRL);
        let e = c.family_id("krdma-nosuch").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    }
}
