// Fixtures built by hand from include/uapi/linux/if_link.h (Linux 6.18:
// IFLA_VFINFO_LIST = 22, IFLA_VF_INFO = 1, IFLA_VF_MAC = 1, IFLA_VF_VLAN = 2,
// IFLA_VF_TX_RATE = 3, IFLA_VF_SPOOFCHK = 4, IFLA_VF_LINK_STATE = 5,
// IFLA_VF_RATE = 6, IFLA_VF_TRUST = 9, IFLA_VF_VLAN_LIST = 12,
// IFLA_VF_VLAN_INFO = 1, IFLA_EXT_MASK = 29, RTEXT_FILTER_VF = 1,
// RTEXT_FILTER_SKIP_STATS = 8; struct
// ifla_vf_mac {u32 vf; u8 mac[32]}, struct ifla_vf_vlan_info {u32 vf, vlan,
// qos; __be16 vlan_proto} (16 bytes with padding), struct ifla_vf_rate
// {u32 vf, min_tx_rate, max_tx_rate}) and include/uapi/linux/rtnetlink.h
// (RTM_NEWLINK 16, RTM_GETLINK 18, RTM_SETLINK 19, struct ifinfomsg).
// Host byte order except vlan_proto (big-endian); these fixtures are little-endian.
#![cfg(target_endian = "little")]

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use netlink_packet_route::RouteNetlinkMessage;
use nic::netlink::vf::*;

fn message(seq: u32, flags: u16, m: RouteNetlinkMessage) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(m));
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.finalize();
    msg
}

fn emit(m: &NetlinkMessage<RouteNetlinkMessage>) -> Vec<u8> {
    let mut b = vec![0; m.buffer_len()];
    m.serialize(&mut b);
    b
}

fn all_settings() -> VfSettings {
    VfSettings {
        mac: Some([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x03]),
        vlan: Some(VfVlanSetting { id: 100, qos: 3, ad: true }),
        spoofchk: Some(true),
        trust: Some(false),
        rate: Some((1000, 25000)),
        link_state: Some(VfLink::Enable),
    }
}

/// `ip link set <ifindex 5> vf 3 mac 02:aa:bb:cc:dd:03 vlan 100 qos 3 proto 802.1ad
///  spoofchk on trust off min_tx_rate 1000 max_tx_rate 25000 state enable`
#[rustfmt::skip]
fn set_all_raw() -> Vec<u8> {
    [
        &[0x9c, 0x00, 0x00, 0x00, 0x13, 0x00, 0x05, 0x00][..], // len 156, RTM_SETLINK (19), REQUEST|ACK
        &[0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],      // seq 1, pid 0
        &[0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00],      // ifinfomsg: family 0, pad, type 0, index 5
        &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],      //   flags 0, change 0
        &[0x7c, 0x00, 0x16, 0x00],                              // IFLA_VFINFO_LIST (22), len 124
        &[0x78, 0x00, 0x01, 0x00],                              //  IFLA_VF_INFO (1), len 120
        &[0x28, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00],      //   IFLA_VF_MAC len 40: vf 3
        &[0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], // mac[32]
        &[0; 16],
        &[0x18, 0x00, 0x0c, 0x00],                              //   IFLA_VF_VLAN_LIST (12), len 24
        &[0x14, 0x00, 0x01, 0x00],                              //    IFLA_VF_VLAN_INFO (1), len 20
        &[0x03, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00],      //     vf 3, vlan 100
        &[0x03, 0x00, 0x00, 0x00, 0x88, 0xa8, 0x00, 0x00],      //     qos 3, proto 0x88a8 (BE), pad
        &[0x0c, 0x00, 0x04, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00], // IFLA_VF_SPOOFCHK vf 3 on
        &[0x0c, 0x00, 0x09, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // IFLA_VF_TRUST vf 3 off
        &[0x10, 0x00, 0x06, 0x00, 0x03, 0x00, 0x00, 0x00],      //   IFLA_VF_RATE vf 3
        &[0xe8, 0x03, 0x00, 0x00, 0xa8, 0x61, 0x00, 0x00],      //     min 1000, max 25000
        &[0x0c, 0x00, 0x05, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00], // IFLA_VF_LINK_STATE vf 3 enable (1)
    ]
    .concat()
}

#[test]
fn set_request_with_every_attribute_is_byte_exact_both_ways() {
    let expected = message(
        1,
        NLM_F_REQUEST | NLM_F_ACK,
        RouteNetlinkMessage::SetLink(set_request(5, 3, &all_settings())),
    );
    assert_eq!(emit(&expected), set_all_raw());
    let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&set_all_raw()).unwrap();
    assert_eq!(parsed, expected);
}

/// `ip -d link show <ifindex 5>`: RTM_GETLINK with IFLA_EXT_MASK = RTEXT_FILTER_VF |
/// RTEXT_FILTER_SKIP_STATS.
#[rustfmt::skip]
const GET_RAW: [u8; 40] = [
    0x28, 0x00, 0x00, 0x00, 0x12, 0x00, 0x05, 0x00, // len 40, RTM_GETLINK (18), REQUEST|ACK
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // seq 1, pid 0
    0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, // ifinfomsg index 5
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x1d, 0x00, 0x09, 0x00, 0x00, 0x00, // IFLA_EXT_MASK (29) = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS (1 | 8)
];

#[test]
fn get_request_asks_for_the_vf_list() {
    let expected = message(1, NLM_F_REQUEST | NLM_F_ACK, RouteNetlinkMessage::GetLink(get_request(5)));
    assert_eq!(emit(&expected), GET_RAW);
    assert_eq!(NetlinkMessage::<RouteNetlinkMessage>::deserialize(&GET_RAW).unwrap(), expected);
}

/// A PF's RTM_NEWLINK reply carrying VF 0 as the kernel reports it: legacy
/// IFLA_VF_VLAN, IFLA_VF_VLAN_LIST, IFLA_VF_TX_RATE too.
#[rustfmt::skip]
fn newlink_reply_raw() -> Vec<u8> {
    [
        &[0xcc, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00][..], // len 204, RTM_NEWLINK (16)
        &[0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],      // seq 1
        &[0x00, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00],      // family 0, type ARPHRD_ETHER (1), index 5
        &[0x03, 0x10, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00],      // flags 0x11003 = UP|BROADCAST|MULTICAST|LOWER_UP, change 0
        &[0xac, 0x00, 0x16, 0x00],                              // IFLA_VFINFO_LIST len 172
        &[0xa8, 0x00, 0x01, 0x00],                              //  IFLA_VF_INFO len 168
        &[0x28, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00],      //   IFLA_VF_MAC vf 0
        &[0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[0; 16],
        &[0x10, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // IFLA_VF_VLAN vf 0 vlan 10 qos 0
        &[0x18, 0x00, 0x0c, 0x00, 0x14, 0x00, 0x01, 0x00],      //   IFLA_VF_VLAN_LIST / VLAN_INFO
        &[0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00], // vf 0 vlan 10 qos 0 proto 0x8100
        &[0x0c, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // IFLA_VF_TX_RATE vf 0 rate 0
        &[0x10, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x27, 0x00, 0x00], // IFLA_VF_RATE min 0 max 10000
        &[0x0c, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00], // SPOOFCHK on
        &[0x0c, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // LINK_STATE auto (0)
        &[0x0c, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00], // TRUST on
        &[0x0c, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // IFLA_VF_RSS_QUERY_EN off
        &[0x08, 0x00, 0x63, 0x00, 0x2a, 0x00, 0x00, 0x00],      //   unknown IFLA_VF_* 99: kept, ignored
    ]
    .concat()
}

#[test]
fn pf_reply_parses_into_vf_state() {
    let raw = newlink_reply_raw();
    assert_eq!(raw.len(), 204);
    let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw).unwrap();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) = &parsed.payload else {
        panic!("not NEWLINK")
    };
    let vfs = parse_vfs(l);
    assert_eq!(
        vfs,
        vec![VfState {
            vf: 0,
            mac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            vlan: VfVlanSetting { id: 10, qos: 0, ad: false },
            spoofchk: Some(true),
            trust: Some(true),
            min_tx_rate: 0,
            max_tx_rate: 10000,
            link_state: Some(VfLink::Auto),
        }]
    );
    assert_eq!(emit(&parsed), raw, "re-emitting the parsed reply gives the same bytes");
    // What undoing "vlan 100 trust off" must write back.
    let want = VfSettings {
        vlan: Some(VfVlanSetting { id: 100, qos: 0, ad: false }),
        trust: Some(false),
        ..Default::default()
    };
    let undo = want.undo_from(&vfs[0]);
    assert_eq!(
        undo,
        VfSettings {
            vlan: Some(VfVlanSetting { id: 10, qos: 0, ad: false }),
            trust: Some(true),
            ..Default::default()
        }
    );
    assert!(vfs[0].satisfies(&undo).is_ok());
    assert!(vfs[0].satisfies(&want).unwrap_err().contains("vlan, trust"));
}

#[test]
fn truncated_and_bad_length_vf_attributes_are_errors() {
    let raw = newlink_reply_raw();
    assert!(NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..100]).is_err());
    // IFLA_VF_MAC claiming 8 bytes (struct needs 36).
    let mut bad = raw.clone();
    bad[40] = 0x0c;
    let r = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bad);
    assert!(r.is_err(), "{r:?}");
    for n in 0..raw.len() {
        let _ = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..n]);
    }
}
