// Fixtures built by hand from include/uapi/rdma/rdma_netlink.h (Linux 6.18:
// RDMA_NL_NLDEV = 5, RDMA_NL_GET_TYPE(client, op) = (client << 10) + op,
// enum rdma_nldev_command, enum rdma_nldev_attr) and include/uapi/linux/netlink.h
// (struct nlmsghdr, struct nlattr, NLA_ALIGNTO = 4), as nldev.c in
// drivers/infiniband/core emits them: integers in host byte order (these
// fixtures are little-endian), strings NUL-terminated by nla_put_string.
#![cfg(target_endian = "little")]

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use nic::netlink::nldev::*;
use nic::netlink::transport::{NlError, Recorded};
use nic::NetnsMode;

fn message(seq: u32, flags: u16, m: NldevMessage) -> NetlinkMessage<NldevMessage> {
    let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(m));
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.finalize();
    msg
}

fn emit(m: &NetlinkMessage<NldevMessage>) -> Vec<u8> {
    let mut b = vec![0; m.buffer_len()];
    m.serialize(&mut b);
    b
}

/// `rdma dev set mlx5_3 netns <fd 7>` for device index 3.
#[rustfmt::skip]
const SET_NETNS: [u8; 32] = [
    0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
    0x02, 0x14,             // nlmsg_type 0x1402 = (RDMA_NL_NLDEV 5 << 10) + RDMA_NLDEV_CMD_SET 2
    0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
    0x01, 0x00, 0x00, 0x00, // seq 1
    0x00, 0x00, 0x00, 0x00, // pid 0
    0x08, 0x00, 0x01, 0x00, // nla len 8, RDMA_NLDEV_ATTR_DEV_INDEX (1)
    0x03, 0x00, 0x00, 0x00, //   u32 3
    0x08, 0x00, 0x44, 0x00, // nla len 8, RDMA_NLDEV_NET_NS_FD (68)
    0x07, 0x00, 0x00, 0x00, //   u32 7
];

#[test]
fn set_netns_request_is_byte_exact_both_ways() {
    let expected = message(1, NLM_F_REQUEST | NLM_F_ACK, set_netns(3, 7));
    assert_eq!(emit(&expected), SET_NETNS);
    let parsed = NetlinkMessage::<NldevMessage>::deserialize(&SET_NETNS).unwrap();
    assert_eq!(parsed, expected);
}

/// A `RDMA_NLDEV_CMD_GET` reply for mlx5_0 (fields as `rdma dev show` prints).
#[rustfmt::skip]
const GET_REPLY: [u8; 100] = [
    0x64, 0x00, 0x00, 0x00, // nlmsg_len 100
    0x01, 0x14,             // type 0x1401: NLDEV, RDMA_NLDEV_CMD_GET
    0x00, 0x00,             // flags 0
    0x09, 0x00, 0x00, 0x00, // seq 9
    0x2a, 0x00, 0x00, 0x00, // pid 42
    0x08, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00,             // DEV_INDEX (1) = 1
    0x0b, 0x00, 0x02, 0x00, b'm', b'l', b'x', b'5', b'_', b'0', 0x00, 0x00, // DEV_NAME (2) "mlx5_0\0", len 11 + 1 pad
    0x08, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,             // PORT_INDEX (3) = 1 port
    0x0c, 0x00, 0x06, 0x00, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // NODE_GUID (6) u64 0x1122334455667788
    0x0f, 0x00, 0x05, 0x00, b'2', b'2', b'.', b'3', b'9', b'.', b'1', b'0', b'0', b'2', 0x00, 0x00, // FW_VERSION (5) "22.39.1002\0" + 1 pad
    0x05, 0x00, 0x0e, 0x00, 0x01, 0x00, 0x00, 0x00,             // DEV_NODE_TYPE (14) u8 1 (CA) + 3 pad
    0x09, 0x00, 0x43, 0x00, b'r', b'o', b'c', b'e', 0x00, 0x00, 0x00, 0x00, // DEV_PROTOCOL (67) "roce\0" + 3 pad
    0x08, 0x00, 0x49, 0x00, 0x01, 0x00, 0x00, 0x00,             // UVERBS_DRIVER_ID (73): not modelled -> Other
];

fn get_reply_expected() -> NldevMessage {
    NldevMessage {
        cmd: RDMA_NLDEV_CMD_GET,
        attrs: vec![
            NldevAttr::DevIndex(1),
            NldevAttr::DevName("mlx5_0".into()),
            NldevAttr::PortIndex(1),
            NldevAttr::NodeGuid(0x1122_3344_5566_7788),
            NldevAttr::FwVersion("22.39.1002".into()),
            NldevAttr::DevNodeType(1),
            NldevAttr::DevProtocol("roce".into()),
            NldevAttr::Other(netlink_packet_core::DefaultNla::new(73, vec![1, 0, 0, 0])),
        ],
    }
}

#[test]
fn device_reply_parses_and_emits_byte_exact() {
    let parsed = NetlinkMessage::<NldevMessage>::deserialize(&GET_REPLY).unwrap();
    let mut expected = message(9, 0, get_reply_expected());
    expected.header.port_number = 42;
    assert_eq!(parsed, expected);
    assert_eq!(emit(&expected), GET_REPLY);
    let NetlinkPayload::InnerMessage(m) = parsed.payload else { panic!("not an nldev message") };
    let d = RdmaDevice::from_message(&m).unwrap();
    assert_eq!(
        d,
        RdmaDevice {
            index: 1,
            name: "mlx5_0".into(),
            ports: 1,
            node_guid: Some(0x1122_3344_5566_7788),
            fw_version: Some("22.39.1002".into()),
            protocol: Some("roce".into()),
        }
    );
}

/// `rdma system show netns` reply in exclusive mode; the kernel adds
/// RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK (93) since 5.12.
#[rustfmt::skip]
const SYS_GET_EXCLUSIVE: [u8; 32] = [
    0x20, 0x00, 0x00, 0x00, // len 32
    0x06, 0x14,             // type 0x1406: NLDEV, RDMA_NLDEV_CMD_SYS_GET
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // flags 0, seq 1, pid 0
    0x05, 0x00, 0x42, 0x00, 0x00, 0x00, 0x00, 0x00, // SYS_ATTR_NETNS_MODE (66) u8 0 = exclusive
    0x05, 0x00, 0x5d, 0x00, 0x01, 0x00, 0x00, 0x00, // COPY_ON_FORK (93) u8 1 -> Other
];

/// The ACK for seq 1 (struct nlmsgerr, error 0, request header echoed).
#[rustfmt::skip]
fn ack(seq: u8) -> Vec<u8> {
    vec![
        0x24, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x01, seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // NLMSG_ERROR, NLM_F_CAPPED
        0x00, 0x00, 0x00, 0x00, // error 0 = ACK
        0x10, 0x00, 0x00, 0x00, 0x06, 0x14, 0x05, 0x00, seq, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // echoed header
    ]
}

#[test]
fn sys_get_reply_reads_exclusive_mode_and_keeps_unknown_attributes() {
    let parsed = NetlinkMessage::<NldevMessage>::deserialize(&SYS_GET_EXCLUSIVE).unwrap();
    let NetlinkPayload::InnerMessage(m) = &parsed.payload else { panic!() };
    assert_eq!(m.cmd, RDMA_NLDEV_CMD_SYS_GET);
    assert_eq!(m.attrs[0], NldevAttr::SysNetnsMode(0));
    assert!(matches!(&m.attrs[1], NldevAttr::Other(n) if netlink_packet_core::Nla::kind(n) == 93));
    assert_eq!(netns_mode_of(m), Some(NetnsMode::Exclusive));
    assert_eq!(emit(&parsed), SYS_GET_EXCLUSIVE);
}

#[test]
fn client_asks_sys_get_and_reads_the_mode_from_a_recorded_kernel() {
    let mut c = Nldev::new(Recorded::new([SYS_GET_EXCLUSIVE.to_vec(), ack(1)]));
    assert_eq!(c.netns_mode().unwrap(), NetnsMode::Exclusive);
    #[rustfmt::skip]
    let sent: [u8; 16] = [0x10, 0, 0, 0, 0x06, 0x14, 0x05, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(c.transport().sent, vec![sent.to_vec()]);
}

#[test]
fn client_sends_set_netns_and_reports_kernel_refusal() {
    let dev = RdmaDevice { index: 3, name: "mlx5_3".into(), ..Default::default() };
    let mut c = Nldev::new(Recorded::new([ack(1)]));
    c.set_netns(&dev, 7).unwrap();
    assert_eq!(c.transport().sent[0], SET_NETNS);
    // Shared mode: nldev_set_doit answers -EOPNOTSUPP.
    let mut nack = ack(1);
    nack[16..20].copy_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
    let mut c = Nldev::new(Recorded::new([nack]));
    let e = c.set_netns(&dev, 7).unwrap_err();
    assert!(matches!(e, NlError::Kernel { errno, .. } if errno == libc::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("mlx5_3"), "{e}");
}

/// `rdma link show` reply: rxe0 port 1 ACTIVE/LinkUp on eth0 (ifindex 3).
#[rustfmt::skip]
const PORT_REPLY: [u8; 68] = [
    0x44, 0x00, 0x00, 0x00, 0x05, 0x14, 0x02, 0x00, // len 68, type 0x1405 PORT_GET, NLM_F_MULTI
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 2, pid 0
    0x08, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, // DEV_INDEX = 2
    0x09, 0x00, 0x02, 0x00, b'r', b'x', b'e', b'0', 0x00, 0x00, 0x00, 0x00, // DEV_NAME "rxe0"
    0x08, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, // PORT_INDEX = 1
    0x05, 0x00, 0x0c, 0x00, 0x04, 0x00, 0x00, 0x00, // PORT_STATE = 4 (ACTIVE)
    0x05, 0x00, 0x0d, 0x00, 0x05, 0x00, 0x00, 0x00, // PORT_PHYS_STATE = 5 (LinkUp)
    0x08, 0x00, 0x32, 0x00, 0x03, 0x00, 0x00, 0x00, // NDEV_INDEX (50) = 3
];

#[test]
fn port_reply_gives_state_and_netdev() {
    let parsed = NetlinkMessage::<NldevMessage>::deserialize(&PORT_REPLY).unwrap();
    let NetlinkPayload::InnerMessage(m) = &parsed.payload else { panic!() };
    let p = RdmaPortInfo::from_message(m).unwrap();
    assert_eq!(
        (p.dev_index, p.dev_name.as_str(), p.port, p.state, p.phys_state, p.ndev_index),
        (2, "rxe0", 1, Some(4), Some(5), Some(3))
    );
    assert_eq!(emit(&parsed), PORT_REPLY);
}

#[test]
fn truncated_bad_length_and_foreign_messages_are_errors_not_panics() {
    // Truncated: nlmsg_len says 100, only 60 bytes there.
    assert!(NetlinkMessage::<NldevMessage>::deserialize(&GET_REPLY[..60]).is_err());
    // An attribute whose length runs past the payload.
    let mut bad = SET_NETNS;
    bad[24] = 0x40;
    assert!(NetlinkMessage::<NldevMessage>::deserialize(&bad).is_err());
    // DEV_INDEX with a 2-byte value (len 6): bad length for a u32.
    #[rustfmt::skip]
    let short: [u8; 24] = [0x18, 0, 0, 0, 0x01, 0x14, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x06, 0x00, 0x01, 0x00, 0x03, 0x00, 0, 0];
    let e = NetlinkMessage::<NldevMessage>::deserialize(&short).unwrap_err();
    assert!(e.to_string().contains("RDMA_NLDEV_ATTR_DEV_INDEX"), "{e}");
    // NETNS_MODE with 4 bytes instead of 1.
    assert!(NldevMessage::parse(0x1406, &[0x08, 0x00, 0x42, 0x00, 0, 0, 0, 0]).is_err());
    // A type of another RDMA netlink client (RDMA_NL_LS = 4).
    assert!(NldevMessage::parse(rdma_nl_get_type(4, 1), &[]).is_err());
    // nla_len below the header size.
    assert!(NldevMessage::parse(0x1401, &[0x02, 0x00, 0x01, 0x00]).is_err());
    // Fuzz-ish: every prefix of every fixture parses or errors, never panics.
    for f in [&SET_NETNS[..], &GET_REPLY[..], &SYS_GET_EXCLUSIVE[..], &PORT_REPLY[..]] {
        for n in 0..f.len() {
            let _ = NetlinkMessage::<NldevMessage>::deserialize(&f[..n]);
            let _ = NldevMessage::parse(0x1401, &f[16.min(n)..n]);
        }
    }
}

#[test]
fn requests_match_their_cli_equivalents() {
    assert_eq!(rdma_nl_get_type(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET), 0x1401);
    assert_eq!(dump_devices().payload(), Vec::<u8>::new());
    assert_eq!(get_device(5).payload(), vec![0x08, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00]);
    assert_eq!(
        sys_set_netns_mode(NetnsMode::Exclusive).payload(),
        vec![0x05, 0x00, 0x42, 0x00, 0x00, 0x00, 0x00, 0x00]
    );
    assert_eq!(
        sys_set_netns_mode(NetnsMode::Shared).payload(),
        vec![0x05, 0x00, 0x42, 0x00, 0x01, 0x00, 0x00, 0x00]
    );
    assert_eq!(rdma_nl_get_op(0x1407), RDMA_NLDEV_CMD_SYS_SET);
}
