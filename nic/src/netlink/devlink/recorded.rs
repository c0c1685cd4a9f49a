//! The kernel's answers to devlink requests, as [`Exchange`]s a
//! [`Recorded`](crate::netlink::transport::Recorded) transport replays (a simulated
//! node's devlink, test fixtures). Each request is laid out exactly as
//! [`Devlink`] sends it; each answer as the kernel builds it.

use netlink_packet_core::{
    ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_MULTIPART, NLM_F_REQUEST,
};

use netlink_packet_core::DefaultNla;

use super::*;
use crate::netlink::genl::{get_family, CtrlAttr, CTRL_CMD_NEWFAMILY, GENL_ID_CTRL};
use crate::netlink::transport::{emit, request_message, Exchange};

fn request<M: NetlinkSerializable>(m: M, dump: bool) -> Vec<u8> {
    let flags = NLM_F_REQUEST | NLM_F_ACK | if dump { NLM_F_DUMP } else { 0 };
    emit(&mut request_message(flags, 0, m))
}

/// `netlink_ack` (net/netlink/af_netlink.c): the request's seq, `-errno`
/// (0 for an ACK) and the request echoed (whole on an error, its header on success, as the
/// kernel caps an ACK without extended-ACK TLVs).
pub fn ack(request: &[u8], errno: i32) -> Vec<u8> {
    let mut e = ErrorMessage::default();
    e.code = std::num::NonZeroI32::new(-errno);
    e.header = if errno == 0 { request[..request.len().min(16)].to_vec() } else { request.to_vec() };
    let mut m = NetlinkMessage::<DevlinkMessage>::new(NetlinkHeader::default(), NetlinkPayload::Error(e));
    // The ACK carries the request's seq (and the requester's port id, 0 here).
    if let Some(seq) = request.get(8..12) {
        m.header.sequence_number = u32::from_ne_bytes([seq[0], seq[1], seq[2], seq[3]]);
    }
    m.finalize();
    emit(&mut m)
}

/// `genl ctrl get name devlink` answered with `family` (`ctrl_fill_info`:
/// name, id, version, header size, max attribute; the op and multicast
/// group lists are left out, no reader needs them).
pub fn family(family: u16) -> Exchange {
    let request = request(get_family(DEVLINK_GENL_NAME), false);
    let reply = GenlMessage {
        family: GENL_ID_CTRL,
        cmd: CTRL_CMD_NEWFAMILY,
        version: 2,
        attrs: vec![
            CtrlAttr::FamilyName(DEVLINK_GENL_NAME.into()),
            CtrlAttr::FamilyId(family),
            CtrlAttr::Version(DEVLINK_GENL_VERSION.into()),
            CtrlAttr::Other(DefaultNla::new(4, 0u32.to_ne_bytes().to_vec())), // CTRL_ATTR_HDRSIZE
            // CTRL_ATTR_MAXATTR: DEVLINK_ATTR_MAX of Linux 6.1.
            CtrlAttr::Other(DefaultNla::new(5, 179u32.to_ne_bytes().to_vec())),
        ],
    };
    let reply = emit(&mut request_message(0, 0, reply));
    Exchange { replies: vec![reply, ack(&request, 0)], request }
}

/// A `PARAM_GET` of `r.param.name` on `r.handle`, answered with `r`.
pub fn param_get(family: u16, r: &ParamReply) -> Exchange {
    let request = request(super::param_get(family, &r.handle, &r.param.name), false);
    let reply = emit(&mut request_message(0, 0, r.to_message(family)));
    Exchange { replies: vec![reply, ack(&request, 0)], request }
}

/// A `PARAM_GET` of `name` on `h` the kernel refuses with `errno` (EINVAL:
/// no such parameter; ENODEV: no such instance).
pub fn param_get_refused(family: u16, h: &DevHandle, name: &str, errno: i32) -> Exchange {
    let request = request(super::param_get(family, h, name), false);
    Exchange { replies: vec![ack(&request, errno)], request }
}

/// A dump of every parameter in `all`: one message each (`NLM_F_MULTI`),
/// then `NLMSG_DONE`.
pub fn param_dump(family: u16, all: &[ParamReply]) -> Exchange {
    let request = request(super::param_dump(family), true);
    let mut replies: Vec<Vec<u8>> =
        all.iter().map(|r| emit(&mut request_message(NLM_F_MULTIPART, 0, r.to_message(family)))).collect();
    let mut done = NetlinkMessage::<DevlinkMessage>::new(
        NetlinkHeader::default(),
        NetlinkPayload::Done(Default::default()),
    );
    done.header.flags = NLM_F_MULTIPART;
    done.finalize();
    replies.push(emit(&mut done));
    Exchange { request, replies }
}

/// A `PARAM_SET` the kernel refuses with `errno` (EOPNOTSUPP from ice's
/// validate hook, EINVAL for a wrong type).
pub fn param_set_refused(
    family: u16,
    h: &DevHandle,
    name: &str,
    value: &ParamValue,
    cmode: Cmode,
    errno: i32,
) -> Exchange {
    let request = request(super::param_set(family, h, name, value, cmode), false);
    Exchange { replies: vec![ack(&request, errno)], request }
}

/// A `PARAM_SET` the kernel accepts (an ACK; the `PARAM_NEW`
/// notification goes to the multicast group, not to the requester).
pub fn param_set(family: u16, h: &DevHandle, name: &str, value: &ParamValue, cmode: Cmode) -> Exchange {
    let request = request(super::param_set(family, h, name, value, cmode), false);
    Exchange { replies: vec![ack(&request, 0)], request }
}
