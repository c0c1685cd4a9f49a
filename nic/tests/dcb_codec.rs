// Fixtures built from the kernel uapi header include/uapi/linux/dcbnl.h
// (Linux 6.x: struct dcbmsg, struct ieee_ets, struct ieee_pfc, struct ieee_maxrate,
// struct dcbnl_buffer, struct dcb_app; enum dcbnl_commands / dcbnl_attrs / ieee_attrs /
// ieee_attrs_app; DCB_CAP_DCBX_*), include/uapi/linux/netlink.h (nlmsghdr, nlattr,
// NLMSG_ERROR) and include/uapi/linux/rtnetlink.h (RTM_GETDCB 78, RTM_SETDCB 79), with the
// reply shape of net/dcb/dcbnl.c:dcbnl_ieee_fill(). Host byte order; the literals below are
// little-endian (x86_64, arm64). REPLY_HEX was produced independently with Python's
// struct.pack in native-alignment mode ('@BBBH8Q8Q' for ieee_pfc = 136 bytes,
// '@8B8II' for dcbnl_buffer = 44 bytes) to cross-check the hand-annotated bytes.
#![cfg(target_endian = "little")]

use std::num::NonZeroI32;

use netlink_packet_core::{
    ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use nic::netlink::dcb::*;
use nic::netlink::transport::{emit, request_message};

/// A message as the kernel frames it: `nlmsghdr` fields, then the payload
/// (`nlmsg_len` and `nlmsg_type` follow from the payload).
fn message(flags: u16, seq: u32, pid: u32, payload: NetlinkPayload<DcbMsg>) -> DcbMessage {
    let mut h = NetlinkHeader::default();
    h.flags = flags;
    h.sequence_number = seq;
    h.port_number = pid;
    let mut m = NetlinkMessage::new(h, payload);
    m.finalize();
    m
}

/// `NLMSG_ERROR` with `error` (negative errno, 0 = ACK) and the echoed bytes.
fn error(code: i32, echo: Vec<u8>) -> NetlinkPayload<DcbMsg> {
    let mut e = ErrorMessage::default();
    e.code = NonZeroI32::new(code);
    e.header = echo;
    NetlinkPayload::Error(e)
}

/// A request as the transport's client sends it (`NLM_F_REQUEST | NLM_F_ACK`).
fn request(seq: u32, m: DcbMsg) -> DcbMessage {
    request_message(NLM_F_REQUEST | NLM_F_ACK, seq, m)
}

fn u64s(v: [u64; 8]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn u32s(v: [u32; 8]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `dcb pfc show dev eth0` and friends: RTM_GETDCB DCB_CMD_IEEE_GET.
fn ieee_get_request() -> Vec<u8> {
    vec![
        0x20, 0x00, 0x00, 0x00, // nlmsg_len = 32
        0x4e, 0x00, // nlmsg_type = RTM_GETDCB (78)
        0x05, 0x00, // nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK
        0x01, 0x00, 0x00, 0x00, // nlmsg_seq = 1
        0x00, 0x00, 0x00, 0x00, // nlmsg_pid = 0 (kernel assigns)
        0x00, // dcbmsg.dcb_family = AF_UNSPEC
        0x15, // dcbmsg.cmd = DCB_CMD_IEEE_GET (21)
        0x00, 0x00, // dcbmsg.dcb_pad
        0x09, 0x00, 0x01, 0x00, // nla_len 9, DCB_ATTR_IFNAME (1)
        b'e', b't', b'h', b'0', 0x00, // "eth0\0"
        0x00, 0x00, 0x00, // padding to 4
    ]
}

const REPLY_HEX: &str = "a00100004e0000000700000092100000001500000e000100656e733166306e70300000006c010d003f0001000008000d0d0d0d0c0c0c0c000000000000000002020202020202020001020304050607000000000000000000000000000000000000000000000000008c0002000808000002010000000000000000000000000000000000000000000000000000e8030000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000d00700000000000000000000000000000000000000000000000000000000000000000000000000004400070000000000000000000000000000000000000000000000000040787d0100000000000000000000000000000000000000000000000000000000000000000000000030000a0000000001000000000000020000000200000000000000000000000000000000000000000000000000000008001c0003000800010005031a00080001000506300008000200ff0303000c000b00050001000500000005000e000900000006006300abcd0000";

/// A mlx5-like reply to the request above: ETS, PFC on priority 3 with
/// counters, maxrate, buffers, an APP table with two DSCP entries and a PCP
/// entry, a trust table this codec keeps raw, DCBX host+IEEE, and an unknown
/// top-level attribute.
fn ieee_get_reply() -> Vec<u8> {
    let mut b = vec![
        0xa0, 0x01, 0x00, 0x00, // nlmsg_len = 416
        0x4e, 0x00, // RTM_GETDCB
        0x00, 0x00, // flags: none (a unicast reply)
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x92, 0x10, 0x00, 0x00, // pid 4242
        0x00, 0x15, 0x00, 0x00, // dcbmsg: AF_UNSPEC, DCB_CMD_IEEE_GET, pad
        0x0e, 0x00, 0x01, 0x00, // nla_len 14, DCB_ATTR_IFNAME
    ];
    b.extend_from_slice(b"ens1f0np0\0"); // 10 bytes
    b.extend_from_slice(&[0, 0]); // padding
    b.extend_from_slice(&[0x6c, 0x01, 0x0d, 0x00]); // nla_len 364, DCB_ATTR_IEEE (13) nest
                                                    // -- DCB_ATTR_IEEE_ETS: struct ieee_ets, 59 bytes
    b.extend_from_slice(&[0x3f, 0x00, 0x01, 0x00]); // nla_len 63, DCB_ATTR_IEEE_ETS (1)
    b.extend_from_slice(&[0x00, 0x08, 0x00]); // willing 0, ets_cap 8, cbs 0
    b.extend_from_slice(&[13, 13, 13, 13, 12, 12, 12, 12]); // tc_tx_bw
    b.extend_from_slice(&[0; 8]); // tc_rx_bw
    b.extend_from_slice(&[2; 8]); // tc_tsa = IEEE_8021QAZ_TSA_ETS
    b.extend_from_slice(&[0, 1, 2, 3, 4, 5, 6, 7]); // prio_tc
    b.extend_from_slice(&[0; 24]); // tc_reco_bw, tc_reco_tsa, reco_prio_tc
    b.push(0); // padding 63 -> 64
               // -- DCB_ATTR_IEEE_PFC: struct ieee_pfc, 136 bytes
    b.extend_from_slice(&[0x8c, 0x00, 0x02, 0x00]); // nla_len 140, DCB_ATTR_IEEE_PFC (2)
    b.extend_from_slice(&[0x08, 0x08, 0x00]); // pfc_cap 8, pfc_en 0b1000 (prio 3), mbc 0
    b.push(0); // alignment hole before u16 delay
    b.extend_from_slice(&[0x02, 0x01]); // delay 0x0102
    b.extend_from_slice(&[0, 0]); // alignment hole before u64 requests
    b.extend(u64s([0, 0, 0, 1000, 0, 0, 0, 0])); // requests (PFC frames sent)
    b.extend(u64s([0, 0, 0, 2000, 0, 0, 0, 0])); // indications (received)
                                                 // -- DCB_ATTR_IEEE_MAXRATE: struct ieee_maxrate, 64 bytes
    b.extend_from_slice(&[0x44, 0x00, 0x07, 0x00]); // nla_len 68, DCB_ATTR_IEEE_MAXRATE (7)
    b.extend(u64s([0, 0, 0, 25_000_000, 0, 0, 0, 0])); // tc_maxrate kbit/s
                                                       // -- DCB_ATTR_DCB_BUFFER: struct dcbnl_buffer, 44 bytes
    b.extend_from_slice(&[0x30, 0x00, 0x0a, 0x00]); // nla_len 48, DCB_ATTR_DCB_BUFFER (10)
    b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]); // prio2buffer
    b.extend(u32s([131072, 131072, 0, 0, 0, 0, 0, 0])); // buffer_size
    b.extend_from_slice(&524288u32.to_le_bytes()); // total_size
                                                   // -- DCB_ATTR_IEEE_APP_TABLE nest
    b.extend_from_slice(&[0x1c, 0x00, 0x03, 0x00]); // nla_len 28, DCB_ATTR_IEEE_APP_TABLE (3)
    b.extend_from_slice(&[0x08, 0x00, 0x01, 0x00]); // nla_len 8, DCB_ATTR_IEEE_APP (1)
    b.extend_from_slice(&[0x05, 0x03, 0x1a, 0x00]); // selector 5 (DSCP), priority 3, protocol 26
    b.extend_from_slice(&[0x08, 0x00, 0x01, 0x00]); // DCB_ATTR_IEEE_APP
    b.extend_from_slice(&[0x05, 0x06, 0x30, 0x00]); // DSCP 48 -> priority 6
    b.extend_from_slice(&[0x08, 0x00, 0x02, 0x00]); // nla_len 8, DCB_ATTR_DCB_APP (2)
    b.extend_from_slice(&[0xff, 0x03, 0x03, 0x00]); // selector 255 (DCB_APP_SEL_PCP), prio 3, PCP 3
                                                    // -- DCB_ATTR_DCB_APP_TRUST_TABLE (11): not decoded, kept raw
    b.extend_from_slice(&[0x0c, 0x00, 0x0b, 0x00]); // nla_len 12, type 11
    b.extend_from_slice(&[0x05, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00]); // inner u8 attr: 5 (DSCP)
                                                                            // -- DCB_ATTR_DCBX u8
    b.extend_from_slice(&[0x05, 0x00, 0x0e, 0x00, 0x09, 0, 0, 0]); // DCB_CAP_DCBX_HOST | VER_IEEE
                                                                   // -- unknown top-level attribute 99
    b.extend_from_slice(&[0x06, 0x00, 0x63, 0x00, 0xab, 0xcd, 0, 0]);
    b
}

fn expected_reply() -> DcbMessage {
    message(
        0,
        7,
        4242,
        NetlinkPayload::InnerMessage(DcbMsg {
            message_type: RTM_GETDCB,
            family: 0,
            cmd: cmd::DCB_CMD_IEEE_GET,
            attrs: vec![
                DcbAttr::IfName("ens1f0np0".into()),
                DcbAttr::Ieee(vec![
                    IeeeAttr::Ets(IeeeEts {
                        willing: 0,
                        ets_cap: 8,
                        cbs: 0,
                        tc_tx_bw: [13, 13, 13, 13, 12, 12, 12, 12],
                        tc_tsa: [2; 8],
                        prio_tc: [0, 1, 2, 3, 4, 5, 6, 7],
                        ..Default::default()
                    }),
                    IeeeAttr::Pfc(IeeePfc {
                        pfc_cap: 8,
                        pfc_en: Priorities::from_bits(0x08),
                        mbc: 0,
                        delay: 0x0102,
                        requests: [0, 0, 0, 1000, 0, 0, 0, 0],
                        indications: [0, 0, 0, 2000, 0, 0, 0, 0],
                    }),
                    IeeeAttr::Maxrate(IeeeMaxrate { tc_maxrate: [0, 0, 0, 25_000_000, 0, 0, 0, 0] }),
                    IeeeAttr::Buffer(DcbBuffer {
                        prio2buffer: [0, 0, 0, 1, 0, 0, 0, 0],
                        buffer_size: [131072, 131072, 0, 0, 0, 0, 0, 0],
                        total_size: 524288,
                    }),
                    IeeeAttr::AppTable(vec![
                        AppAttr::Ieee(DcbApp::dscp(26, 3)),
                        AppAttr::Ieee(DcbApp::dscp(48, 6)),
                        AppAttr::Dcb(DcbApp { selector: DCB_APP_SEL_PCP, priority: 3, protocol: 3 }),
                    ]),
                    IeeeAttr::Other(RawNla { kind: 11, value: vec![5, 0, 1, 0, 5, 0, 0, 0] }),
                ]),
                DcbAttr::Dcbx(0x09),
                DcbAttr::Other(RawNla { kind: 99, value: vec![0xab, 0xcd] }),
            ],
        }),
    )
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn hand_annotated_reply_matches_the_independently_packed_bytes() {
    assert_eq!(ieee_get_reply(), hex(REPLY_HEX));
    assert_eq!(ieee_get_reply().len(), 416);
}

#[test]
fn ieee_get_request_is_byte_exact() {
    let mut req = request(1, DcbMsg::ieee_get("eth0"));
    assert_eq!(emit(&mut req), ieee_get_request());
    assert_eq!(parse_messages(&ieee_get_request()).unwrap(), vec![req]);
}

#[test]
fn ieee_get_reply_parses_and_emits_byte_exact() {
    let raw = ieee_get_reply();
    assert_eq!(parse_messages(&raw).unwrap(), vec![expected_reply()]);
    assert_eq!(emit(&mut expected_reply()), raw);
}

#[test]
fn reply_reads_as_the_port_state() {
    let msgs = parse_messages(&ieee_get_reply()).unwrap();
    let NetlinkPayload::InnerMessage(m) = &msgs[0].payload else { panic!("not a DCB message") };
    let s = IeeeState::from_msg(m);
    assert_eq!(s.ifname.as_deref(), Some("ens1f0np0"));
    assert_eq!(s.pfc.unwrap().pfc_en, Priorities::from_list(&[3]).unwrap());
    assert_eq!(s.pfc.unwrap().requests[3], 1000);
    assert_eq!(s.dcbx, Some(dcbx::DCB_CAP_DCBX_HOST | dcbx::DCB_CAP_DCBX_VER_IEEE));
    assert_eq!(s.dscp_map(), [(26, 3), (48, 6)].into_iter().collect());
    assert_eq!(s.apps.len(), 3);
    assert_eq!(s.buffer.unwrap().total_size, 524288);
}

#[test]
fn eopnotsupp_error_reply_is_byte_exact() {
    // What this kernel answers for a netdev without dcbnl_ops (veth): NLMSG_ERROR
    // with -EOPNOTSUPP, NLM_F_CAPPED (0x100) and the request's header echoed.
    let mut raw = vec![
        0x24, 0x00, 0x00, 0x00, // nlmsg_len = 36
        0x02, 0x00, // NLMSG_ERROR
        0x00, 0x01, // NLM_F_CAPPED: payload not echoed
        0x01, 0x00, 0x00, 0x00, // seq 1
        0x92, 0x10, 0x00, 0x00, // pid 4242
        0xa1, 0xff, 0xff, 0xff, // error = -95 (EOPNOTSUPP)
    ];
    raw.extend_from_slice(&ieee_get_request()[..16]); // the request's nlmsghdr
    let mut expected = message(0x100, 1, 4242, error(-95, ieee_get_request()[..16].to_vec()));
    assert_eq!(parse_messages(&raw).unwrap(), vec![expected.clone()]);
    assert_eq!(emit(&mut expected), raw);
}

#[test]
fn set_pfc_request_is_byte_exact() {
    // `dcb pfc set dev eth0 prio-pfc all:off 3:on delay 0`
    let pfc = IeeePfc { pfc_cap: 8, pfc_en: "all:off 3:on".parse().unwrap(), ..Default::default() };
    let mut raw = vec![
        0xb0, 0x00, 0x00, 0x00, // nlmsg_len = 16 + 4 + 12 + 4 + 140 = 176
        0x4f, 0x00, // RTM_SETDCB (79)
        0x05, 0x00, // NLM_F_REQUEST | NLM_F_ACK
        0x02, 0x00, 0x00, 0x00, // seq 2
        0x00, 0x00, 0x00, 0x00, // pid
        0x00, 0x14, 0x00, 0x00, // AF_UNSPEC, DCB_CMD_IEEE_SET (20)
        0x09, 0x00, 0x01, 0x00, b'e', b't', b'h', b'0', 0, 0, 0, 0, // DCB_ATTR_IFNAME "eth0"
        0x90, 0x00, 0x0d, 0x00, // nla_len 144, DCB_ATTR_IEEE
        0x8c, 0x00, 0x02, 0x00, // nla_len 140, DCB_ATTR_IEEE_PFC
        0x08, 0x08, 0x00, 0x00, // pfc_cap 8, pfc_en 0x08, mbc 0, hole
        0x00, 0x00, 0x00, 0x00, // delay 0, hole
    ];
    raw.extend(u64s([0; 8])); // requests
    raw.extend(u64s([0; 8])); // indications
    let mut msg = request(2, DcbMsg::set_pfc("eth0", pfc));
    assert_eq!(emit(&mut msg), raw);
    assert_eq!(parse_messages(&raw).unwrap(), vec![msg]);
}

#[test]
fn app_add_and_del_requests_are_byte_exact() {
    // `dcb app add dev eth0 dscp-prio 26:3` / `dcb app del dev eth0 dscp-prio 26:3`
    for (cmd, msg) in [
        (cmd::DCB_CMD_IEEE_SET, DcbMsg::add_apps("eth0", &[DcbApp::dscp(26, 3)])),
        (cmd::DCB_CMD_IEEE_DEL, DcbMsg::del_apps("eth0", &[DcbApp::dscp(26, 3)])),
    ] {
        let raw = vec![
            0x30, 0x00, 0x00, 0x00, // nlmsg_len 48
            0x4f, 0x00, 0x05, 0x00, // RTM_SETDCB, REQUEST|ACK
            0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 3, pid 0
            0x00, cmd, 0x00, 0x00, // dcbmsg
            0x09, 0x00, 0x01, 0x00, b'e', b't', b'h', b'0', 0, 0, 0, 0, // IFNAME
            0x10, 0x00, 0x0d, 0x00, // nla_len 16, DCB_ATTR_IEEE
            0x0c, 0x00, 0x03, 0x00, // nla_len 12, DCB_ATTR_IEEE_APP_TABLE
            0x08, 0x00, 0x01, 0x00, // nla_len 8, DCB_ATTR_IEEE_APP
            0x05, 0x03, 0x1a, 0x00, // DSCP 26 -> priority 3
        ];
        let mut msg = request(3, msg);
        assert_eq!(emit(&mut msg), raw);
        assert_eq!(parse_messages(&raw).unwrap(), vec![msg]);
    }
}

#[test]
fn pcp_app_entries_use_dcb_attr_dcb_app() {
    let d = DcbMsg::add_apps("x", &[DcbApp { selector: DCB_APP_SEL_PCP, priority: 3, protocol: 3 }]);
    let DcbAttr::Ieee(i) = &d.attrs[1] else { panic!() };
    assert_eq!(
        i[0],
        IeeeAttr::AppTable(vec![AppAttr::Dcb(DcbApp { selector: 255, priority: 3, protocol: 3 })])
    );
}

#[test]
fn set_dcbx_request_and_status_reply_are_byte_exact() {
    // `dcb dcbx set dev eth0 host ieee`
    let raw = vec![
        0x28, 0x00, 0x00, 0x00, // nlmsg_len 40
        0x4f, 0x00, 0x05, 0x00, // RTM_SETDCB, REQUEST|ACK
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 4
        0x00, 0x17, 0x00, 0x00, // DCB_CMD_SDCBX (23)
        0x09, 0x00, 0x01, 0x00, b'e', b't', b'h', b'0', 0, 0, 0, 0, // IFNAME
        0x05, 0x00, 0x0e, 0x00, 0x09, 0x00, 0x00, 0x00, // DCB_ATTR_DCBX = HOST|VER_IEEE
    ];
    let mut msg = request(4, DcbMsg::set_dcbx("eth0", 0x09));
    assert_eq!(emit(&mut msg), raw);
    assert_eq!(parse_messages(&raw).unwrap(), vec![msg]);

    // The kernel's answer to an IEEE_SET: DCB_ATTR_IEEE as a u8 status (dcbnl_ieee_set).
    let reply = vec![
        0x1c, 0x00, 0x00, 0x00, // nlmsg_len 28
        0x4f, 0x00, 0x00, 0x00, // RTM_SETDCB, no flags
        0x02, 0x00, 0x00, 0x00, 0x92, 0x10, 0x00, 0x00, // seq 2, pid 4242
        0x00, 0x14, 0x00, 0x00, // DCB_CMD_IEEE_SET
        0x05, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, // DCB_ATTR_IEEE u8 = 0 (ok)
    ];
    let mut expected = message(
        0,
        2,
        4242,
        NetlinkPayload::InnerMessage(DcbMsg {
            message_type: RTM_SETDCB,
            family: 0,
            cmd: cmd::DCB_CMD_IEEE_SET,
            attrs: vec![DcbAttr::IeeeStatus(0)],
        }),
    );
    assert_eq!(parse_messages(&reply).unwrap(), vec![expected.clone()]);
    assert_eq!(emit(&mut expected), reply);
}

#[test]
fn two_messages_in_one_datagram() {
    let mut raw = ieee_get_reply();
    raw.extend(emit(&mut message(0, 7, 4242, error(0, ieee_get_request()[..16].to_vec()))));
    let msgs = parse_messages(&raw).unwrap();
    assert_eq!(msgs.len(), 2);
    assert!(matches!(&msgs[1].payload, NetlinkPayload::Error(e) if e.code.is_none()));
}

#[test]
fn truncated_messages_are_errors_not_panics() {
    let raw = ieee_get_reply();
    for cut in [1, 15, 16, 19, 20, 23, 30, 40, 100, 300, 415] {
        let e = parse_messages(&raw[..cut]).unwrap_err();
        assert!(e.what.contains("nlmsg") || e.what.contains("short"), "cut {cut}: {e}");
    }
    // A message whose nlmsg_len agrees with a cut inside an attribute.
    let mut short = raw[..100].to_vec();
    short[..4].copy_from_slice(&100u32.to_le_bytes());
    let e = parse_messages(&short).unwrap_err();
    assert!(e.to_string().contains("bad length"), "{e}");
}

#[test]
fn wrong_struct_sizes_are_rejected_with_the_attribute_name() {
    // PFC of 135 bytes: shrink the nla_len of DCB_ATTR_IEEE_PFC by one.
    let mut raw = ieee_get_reply();
    let pfc_at = raw.windows(4).position(|w| w == [0x8c, 0x00, 0x02, 0x00]).unwrap();
    raw[pfc_at] = 0x8b;
    let e = parse_messages(&raw).unwrap_err();
    assert!(e.what.contains("DCB_ATTR_IEEE_PFC") && e.what.contains("135"), "{e}");
    assert_eq!(e.offset, pfc_at + 4);

    // An nla_len below the 4-byte header.
    let mut raw = ieee_get_reply();
    raw[20] = 2;
    assert!(parse_messages(&raw).unwrap_err().what.contains("bad length"));

    // DCBX with two bytes.
    let mut raw = ieee_get_reply();
    let at = raw.windows(4).position(|w| w == [0x05, 0x00, 0x0e, 0x00]).unwrap();
    raw[at] = 6;
    assert!(parse_messages(&raw).unwrap_err().what.contains("DCB_ATTR_DCBX"));
}

#[test]
fn unknown_attributes_survive_a_round_trip() {
    let msgs = parse_messages(&ieee_get_reply()).unwrap();
    let NetlinkPayload::InnerMessage(m) = &msgs[0].payload else { panic!() };
    assert!(m.attrs.contains(&DcbAttr::Other(RawNla { kind: 99, value: vec![0xab, 0xcd] })));
    assert_eq!(parse_messages(&emit(&mut msgs[0].clone())).unwrap(), msgs);
}

// ---- property test: random and mutated bytes into the reply parser

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        // xorshift64* (Vigna 2016)
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `nlmsg_len` is derived data: `emit` recomputes it (a last attribute that came
/// without its padding is re-emitted padded), so compare messages without it.
fn without_len(mut msgs: Vec<DcbMessage>) -> Vec<DcbMessage> {
    msgs.iter_mut().for_each(|m| m.header.length = 0);
    msgs
}

fn check(bytes: &[u8]) -> bool {
    match parse_messages(bytes) {
        Ok(msgs) => {
            let again: Vec<u8> = msgs.iter().flat_map(|m| emit(&mut m.clone())).collect();
            assert_eq!(
                parse_messages(&again).map(without_len),
                Ok(without_len(msgs)),
                "re-parse differs for input {bytes:02x?}"
            );
            true
        }
        Err(_) => false,
    }
}

#[test]
fn parser_never_panics_and_round_trips_what_it_accepts() {
    let seeds = [
        ieee_get_reply(),
        ieee_get_request(),
        emit(&mut request(1, DcbMsg::set_pfc("eth0", IeeePfc::default()))),
    ];
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, iterations) = (0usize, 20_000);
    for i in 0..iterations {
        let mut b = seeds[i % seeds.len()].clone();
        match rng.below(5) {
            0 => {
                // Random bytes, sometimes with a plausible header.
                let n = rng.below(200);
                b = (0..n).map(|_| rng.next() as u8).collect();
                if n >= 16 && rng.below(2) == 0 {
                    b[..4].copy_from_slice(&(n as u32).to_le_bytes());
                    b[4] = 78;
                    b[5] = 0;
                }
            }
            1 => {
                // Flip a few bytes.
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(b.len());
                    b[at] ^= 1 << rng.below(8);
                }
            }
            2 => {
                // Truncate, keeping nlmsg_len consistent half the time.
                let n = rng.below(b.len() + 1);
                b.truncate(n);
                if n >= 4 && rng.below(2) == 0 {
                    b[..4].copy_from_slice(&(n as u32).to_le_bytes());
                }
            }
            3 => {
                // Corrupt a 16-bit length field at a 4-aligned offset.
                let at = rng.below(b.len() / 4) * 4;
                if at + 2 <= b.len() {
                    b[at..at + 2].copy_from_slice(&(rng.below(600) as u16).to_le_bytes());
                }
            }
            _ => {
                // Change an attribute type.
                let at = rng.below(b.len() / 4) * 4 + 2;
                if at + 2 <= b.len() {
                    b[at..at + 2].copy_from_slice(
                        &(rng.below(20) as u16 | if rng.below(4) == 0 { 0x8000 } else { 0 }).to_le_bytes(),
                    );
                }
            }
        }
        accepted += check(&b) as usize;
    }
    // The mutations must leave some inputs valid, or the round-trip half tests nothing.
    assert!(accepted > iterations / 20, "only {accepted} of {iterations} inputs parsed");
}
