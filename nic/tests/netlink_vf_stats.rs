// Fixtures built by hand from include/uapi/linux/rtnetlink.h (RTM_NEWLINK 16,
// RTM_GETLINK 18, struct ifinfomsg, RTEXT_FILTER_VF 1), include/uapi/linux/if_link.h
// (IFLA_NUM_VF 21, IFLA_VFINFO_LIST 22, IFLA_EXT_MASK 29; IFLA_VF_INFO 1; in it
// IFLA_VF_MAC 1 = struct ifla_vf_mac { __u32 vf; __u8 mac[32]; }, IFLA_VF_VLAN 2,
// IFLA_VF_TX_RATE 3, IFLA_VF_SPOOFCHK 4, IFLA_VF_LINK_STATE 5, IFLA_VF_RATE 6,
// IFLA_VF_RSS_QUERY_EN 7, IFLA_VF_STATS 8, IFLA_VF_TRUST 9, IFLA_VF_VLAN_LIST 12,
// IFLA_VF_BROADCAST 13; IFLA_VF_STATS_RX_PACKETS 0 .. TX_DROPPED 8, PAD 6) and
// include/uapi/linux/netlink.h (struct nlmsghdr, struct nlattr, NLA_ALIGNTO 4),
// in the order rtnl_fill_vf / rtnl_fill_vfinfo (net/core/rtnetlink.c, Linux 6.x)
// emit them; integers in host byte order (these fixtures are little-endian).
// On x86_64 nla_put_u64_64bit adds no IFLA_VF_STATS_PAD (efficient unaligned access).
#![cfg(target_endian = "little")]

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use nic::netlink::transport::{emit, request_message, Client, Recorded};
use nic::netlink::vf_stats::*;

/// `ip -s link show` of ifindex 4: the request as sent (seq 1).
#[rustfmt::skip]
const REQUEST: [u8; 40] = [
    0x28, 0x00, 0x00, 0x00, // nlmsg_len 40
    0x12, 0x00,             // RTM_GETLINK (18)
    0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
    0x01, 0x00, 0x00, 0x00, // seq 1
    0x00, 0x00, 0x00, 0x00, // pid 0
    0x00, 0x00, 0x00, 0x00, // ifinfomsg: family AF_UNSPEC, pad, type 0
    0x04, 0x00, 0x00, 0x00, //   index 4
    0x00, 0x00, 0x00, 0x00, //   flags
    0x00, 0x00, 0x00, 0x00, //   change
    0x08, 0x00, 0x1d, 0x00, // nla len 8, IFLA_EXT_MASK (29)
    0x01, 0x00, 0x00, 0x00, //   RTEXT_FILTER_VF, and not RTEXT_FILTER_SKIP_STATS (8)
];

fn u64s(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

/// One `IFLA_VF_INFO` (296 bytes, the size that makes a 222-VF list overflow
/// 64 KiB): the VF's MAC, the settings a fresh VF reports, and its counters,
/// which are `base`, `base + 1`, ... in `struct ifla_vf_stats` order.
#[rustfmt::skip]
fn vf_info(vf: u8, base: u64) -> Vec<u8> {
    let mut v: Vec<u8> = [
        &[0x28, 0x01, 0x01, 0x00][..],          // nla len 296, IFLA_VF_INFO (1)
        &[0x28, 0x00, 0x01, 0x00],              //   nla len 40, IFLA_VF_MAC (1)
        &[vf, 0x00, 0x00, 0x00],                //     vf
        &[0x02, 0x00, 0x00, 0x00, 0x00, vf],    //     mac 02:00:00:00:00:vf
        &[0; 26],                               //     rest of mac[32]
        &[0x24, 0x00, 0x0d, 0x00],              //   nla len 36, IFLA_VF_BROADCAST (13)
        &[0xff; 6], &[0; 26],                   //     broadcast[32]: the PF's ff:ff:ff:ff:ff:ff
        &[0x10, 0x00, 0x02, 0x00],              //   nla len 16, IFLA_VF_VLAN (2)
        &[vf, 0, 0, 0], &[0; 8],                //     vf, vlan 0, qos 0
        &[0x10, 0x00, 0x06, 0x00],              //   nla len 16, IFLA_VF_RATE (6)
        &[vf, 0, 0, 0], &[0; 8],                //     vf, min_tx_rate 0, max_tx_rate 0
        &[0x0c, 0x00, 0x03, 0x00],              //   nla len 12, IFLA_VF_TX_RATE (3)
        &[vf, 0, 0, 0], &[0; 4],                //     vf, rate 0
        &[0x0c, 0x00, 0x04, 0x00],              //   nla len 12, IFLA_VF_SPOOFCHK (4)
        &[vf, 0, 0, 0], &[0; 4],                //     vf, setting 0
        &[0x0c, 0x00, 0x05, 0x00],              //   nla len 12, IFLA_VF_LINK_STATE (5)
        &[vf, 0, 0, 0], &[0; 4],                //     vf, IFLA_VF_LINK_STATE_AUTO
        &[0x0c, 0x00, 0x07, 0x00],              //   nla len 12, IFLA_VF_RSS_QUERY_EN (7)
        &[vf, 0, 0, 0], &[0xff; 4],             //     vf, setting -1 (not reported)
        &[0x0c, 0x00, 0x09, 0x00],              //   nla len 12, IFLA_VF_TRUST (9)
        &[vf, 0, 0, 0], &[0xff; 4],             //     vf, setting -1 (not reported)
        &[0x18, 0x00, 0x0c, 0x00],              //   nla len 24, IFLA_VF_VLAN_LIST (12)
        &[0x14, 0x00, 0x01, 0x00],              //     nla len 20, IFLA_VF_VLAN_INFO (1)
        &[vf, 0, 0, 0], &[0; 8],                //       vf, vlan 0, qos 0
        &[0x81, 0x00, 0x00, 0x00],              //       vlan_proto ETH_P_8021Q (be16), struct padding
        &[0x64, 0x00, 0x08, 0x00],              //   nla len 100, IFLA_VF_STATS (8)
    ]
    .concat();
    for kind in [0u8, 1, 2, 3, 4, 5, 7, 8] {
        v.extend_from_slice(&[0x0c, 0x00, kind, 0x00]); // nla len 12, IFLA_VF_STATS_<kind>
        let n = if kind > 6 { kind - 1 } else { kind };
        v.extend_from_slice(&u64s(base + u64::from(n))); //   u64
    }
    v
}

/// Where the counters of VF `i` start in [`reply_body`]: after ifinfomsg, IFLA_NUM_VF,
/// the list header, the earlier VFs, this VF's 196 bytes before IFLA_VF_STATS and its header.
fn stats_at(i: usize) -> usize {
    16 + 8 + 4 + 296 * i + 196 + 4
}

/// A PF (ifindex 4) with 2 VFs answering [`REQUEST`] (body after nlmsghdr: 620 bytes).
#[rustfmt::skip]
fn reply_body() -> Vec<u8> {
    [
        &[0x00, 0x00, 0x01, 0x00][..],          // ifinfomsg: AF_UNSPEC, pad, ARPHRD_ETHER (1)
        &[0x04, 0x00, 0x00, 0x00],              //   index 4
        &[0x43, 0x10, 0x01, 0x00],              //   flags UP|BROADCAST|RUNNING|MULTICAST|LOWER_UP
        &[0x00, 0x00, 0x00, 0x00],              //   change
        &[0x08, 0x00, 0x15, 0x00],              // nla len 8, IFLA_NUM_VF (21)
        &[0x02, 0x00, 0x00, 0x00],              //   2
        &[0x54, 0x02, 0x16, 0x00],              // nla len 596, IFLA_VFINFO_LIST (22)
        &vf_info(0, 100),
        &vf_info(1, 200),
    ]
    .concat()
}

fn expected(vf: u32, base: u64) -> (u32, VfStats) {
    let stats = VfStats {
        rx_packets: base,
        tx_packets: base + 1,
        rx_bytes: base + 2,
        tx_bytes: base + 3,
        broadcast: base + 4,
        multicast: base + 5,
        rx_dropped: base + 6,
        tx_dropped: base + 7,
    };
    (vf, stats)
}

fn newlink(body: Vec<u8>) -> LinkBody {
    LinkBody { message_type: RTM_NEWLINK, body }
}

#[test]
fn the_request_asks_for_the_vf_list_with_stats_byte_exact() {
    let mut m = request_message(NLM_F_REQUEST | NLM_F_ACK, 1, stats_request(4));
    assert_eq!(emit(&mut m), REQUEST);
}

#[test]
fn a_pf_reply_gives_each_vfs_counters_and_is_emitted_byte_exact() {
    let body = reply_body();
    assert_eq!(body.len(), 620);
    let got = parse_vf_stats(&newlink(body.clone())).unwrap();
    assert_eq!(got.num_vfs, Some(2));
    assert_eq!(got.vfs, vec![expected(0, 100), expected(1, 200)]);
    assert!(got.skipped.is_empty());
    let entries: Vec<VfEntry> = got
        .vfs
        .iter()
        .map(|(vf, s)| VfEntry { vf: *vf, mac: [2, 0, 0, 0, 0, *vf as u8], stats: Some(*s) })
        .collect();
    let mut back = new_link_reply(4, &entries);
    // new_link_reply leaves ifi_type and ifi_flags 0: only the attributes are compared.
    back.body[..16].copy_from_slice(&body[..16]);
    assert_eq!(back.body, body);
}

#[test]
fn netlink_packet_route_reads_the_fixture_the_same_way() {
    // A second decoder over the same bytes: the fixture is shaped as the kernel's.
    use netlink_packet_route::link::{LinkAttribute, VfInfo, VfStats as Nl};
    use netlink_packet_route::RouteNetlinkMessage;
    let raw = emit(&mut request_message(0, 1, newlink(reply_body())));
    let m = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw).unwrap().payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => m,
        other => panic!("not RTM_NEWLINK: {other:?}"),
    };
    let list = m.attributes.iter().find_map(|a| match a {
        LinkAttribute::VfInfoList(l) => Some(l),
        _ => None,
    });
    let rx: Vec<u64> = list
        .unwrap()
        .iter()
        .flat_map(|i| &i.0)
        .filter_map(|a| match a {
            VfInfo::Stats(s) => s.iter().find_map(|x| match x {
                Nl::RxBytes(v) => Some(*v),
                _ => None,
            }),
            _ => None,
        })
        .collect();
    assert_eq!(rx, vec![102, 202]);
}

#[test]
fn vfs_without_stats_give_no_counters_and_no_error() {
    // A request with RTEXT_FILTER_SKIP_STATS (or a kernel before 4.6) gets VF entries
    // without IFLA_VF_STATS: here the MAC and IFLA_VF_TRUST (struct ifla_vf_trust).
    #[rustfmt::skip]
    let body: Vec<u8> = [
        &[0x00, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00][..], // ifinfomsg, index 9
        &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x08, 0x00, 0x15, 0x00, 0x01, 0x00, 0x00, 0x00],     // IFLA_NUM_VF 1
        &[0x3c, 0x00, 0x16, 0x00],                             // nla len 60, IFLA_VFINFO_LIST
        &[0x38, 0x00, 0x01, 0x00],                             //   nla len 56, IFLA_VF_INFO
        &[0x28, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00],     //     IFLA_VF_MAC, vf 0
        &[0; 32],                                              //       mac
        &[0x0c, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00],     //     IFLA_VF_TRUST (9), vf 0
        &[0x00, 0x00, 0x00, 0x00],                             //       setting off
    ]
    .concat();
    let got = parse_vf_stats(&newlink(body)).unwrap();
    assert_eq!(got.num_vfs, Some(1));
    assert!(got.vfs.is_empty() && got.skipped.is_empty(), "{got:?}");
    // A PF without VFs (or a link without a parent device) has neither attribute.
    let got = parse_vf_stats(&newlink(vec![0; 16])).unwrap();
    assert_eq!(got, PfVfStats::default());
}

#[test]
fn a_garbled_counter_skips_that_vf_with_the_reason_and_keeps_the_others() {
    let mut body = reply_body();
    // VF 1's IFLA_VF_STATS_RX_BYTES (third counter): nla len 12 -> 10, a 6-byte u64.
    let at = stats_at(1) + 2 * 12;
    assert_eq!(body[at..at + 4], [0x0c, 0x00, 0x02, 0x00]);
    body[at] = 10;
    let got = parse_vf_stats(&newlink(body)).unwrap();
    assert_eq!(got.vfs, vec![expected(0, 100)]);
    assert_eq!(got.skipped.len(), 1);
    assert!(got.skipped[0].contains("IFLA_VF_STATS_RX_BYTES: expected 8 bytes, got 6"), "{:?}", got.skipped);
}

#[test]
fn a_truncated_reply_is_an_error_naming_the_byte() {
    let body = reply_body();
    let e = parse_vf_stats(&newlink(body[..200].to_vec())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RTM_NEWLINK at byte 24: attribute type 22 at byte 24 states length 596, 176 bytes left"
    );
    // An attribute header cut short.
    let e = parse_vf_stats(&newlink(body[..26].to_vec())).unwrap_err();
    assert!(e.to_string().contains("2 bytes left, an attribute header takes 4"), "{e}");
    // Unknown counters (a later kernel's) and IFLA_VF_STATS_PAD are passed over.
    let mut body = reply_body();
    body[stats_at(0) + 2] = 6;
    body[stats_at(0) + 12 + 2] = 30;
    let got = parse_vf_stats(&newlink(body)).unwrap();
    let (_, s) = got.vfs[0];
    assert_eq!((s.rx_packets, s.tx_packets, s.rx_bytes), (0, 0, 102));
}

#[test]
fn read_sends_one_request_per_pf_and_decodes_the_reply_after_its_ack() {
    let reply = emit(&mut request_message(0, 1, newlink(reply_body())));
    let mut ack = netlink_packet_core::ErrorMessage::default();
    ack.header = REQUEST.to_vec();
    let mut ack = NetlinkMessage::<LinkBody>::new(NetlinkHeader::default(), NetlinkPayload::Error(ack));
    ack.header.sequence_number = 1;
    ack.finalize();
    let mut c = Client::new(Recorded::new([reply.clone(), emit(&mut ack)]));
    let got = read(&mut c, 4).unwrap();
    assert_eq!(got.vfs, vec![expected(0, 100), expected(1, 200)]);
    assert_eq!(c.transport().sent, vec![REQUEST.to_vec()]);
    // Without the ACK that ends the exchange the read fails; it never hangs or panics.
    let mut c = Client::new(Recorded::new([reply]));
    let e = read(&mut c, 4).unwrap_err();
    assert!(e.to_string().starts_with("RTM_GETLINK ifindex 4 (VF counters)"), "{e}");
}

#[test]
fn the_real_kernel_answers_for_a_link_without_vfs_with_no_counters_and_no_error() {
    // Loopback (ifindex 1 in every namespace) has no parent device: the kernel leaves
    // out IFLA_NUM_VF and the VF list (rtnl_fill_vf), and ACKs.
    let mut c = Client::open(nic::netlink::transport::NETLINK_ROUTE).unwrap();
    let got = read(&mut c, 1).unwrap();
    assert_eq!(got, PfVfStats::default());
}

mod properties {
    //! Any bytes decode or fail with an error, never a panic; any reply the encoder can
    //! express decodes to what it was built from; one byte changed or the message cut
    //! still never panics.
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn entry() -> impl Strategy<Value = VfEntry> {
        (any::<u32>(), any::<[u8; 6]>(), any::<Option<[u64; 8]>>()).prop_map(|(vf, mac, s)| VfEntry {
            vf,
            mac,
            stats: s.map(|a| VfStats {
                rx_packets: a[0],
                tx_packets: a[1],
                rx_bytes: a[2],
                tx_bytes: a[3],
                broadcast: a[4],
                multicast: a[5],
                rx_dropped: a[6],
                tx_dropped: a[7],
            }),
        })
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(body in vec(any::<u8>(), 0..400)) {
            let _ = parse_vf_stats(&newlink(body));
        }

        #[test]
        fn what_is_encoded_decodes_back(vfs in vec(entry(), 0..40)) {
            let got = parse_vf_stats(&new_link_reply(3, &vfs)).unwrap();
            let want: Vec<(u32, VfStats)> = vfs.iter().filter_map(|v| v.stats.map(|s| (v.vf, s))).collect();
            prop_assert_eq!(got.num_vfs, Some(vfs.len() as u32));
            prop_assert_eq!(got.vfs, want);
            prop_assert!(got.skipped.is_empty());
        }

        #[test]
        fn a_changed_or_cut_reply_never_panics(at in 0usize..620, byte in any::<u8>(), cut in 0usize..620) {
            let mut body = reply_body();
            body[at] = byte;
            let _ = parse_vf_stats(&newlink(body.clone()));
            body.truncate(cut);
            let _ = parse_vf_stats(&newlink(body));
        }
    }
}
