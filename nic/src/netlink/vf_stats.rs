//! Per-VF netdev counters as the PF's driver counts them (`ip -s link show
//! PF`, the `RX: bytes packets ...` lines under each `vf N`), wherever the
//! VF's netdev is: the PF answers for a VF whose netdev (and RDMA device)
//! moved into a pod's namespace and left the host's sysfs.
//!
//! Layout, from `include/uapi/linux/if_link.h` and `rtnl_fill_vf` /
//! `rtnl_fill_vfinfo` (net/core/rtnetlink.c); integers host-endian:
//!
//! ```text
//! RTM_NEWLINK  struct ifinfomsg (16) { u8 family, pad; u16 type; i32 index; u32 flags, change }
//! ├─ IFLA_NUM_VF       (21) u32
//! └─ IFLA_VFINFO_LIST  (22, nested)
//!    └─ IFLA_VF_INFO   (1, nested), one per VF 0..num_vfs
//!       ├─ IFLA_VF_MAC   (1) struct ifla_vf_mac { u32 vf; u8 mac[32]; }
//!       ├─ ... broadcast, vlan, rates, spoofchk, link state, trust, VLAN list
//!       └─ IFLA_VF_STATS (8, nested; left out with RTEXT_FILTER_SKIP_STATS)
//!          ├─ IFLA_VF_STATS_RX_PACKETS (0) u64   ├─ IFLA_VF_STATS_MULTICAST  (5) u64
//!          ├─ IFLA_VF_STATS_TX_PACKETS (1) u64   ├─ IFLA_VF_STATS_PAD        (6)
//!          ├─ IFLA_VF_STATS_RX_BYTES   (2) u64   ├─ IFLA_VF_STATS_RX_DROPPED (7) u64
//!          ├─ IFLA_VF_STATS_TX_BYTES   (3) u64   └─ IFLA_VF_STATS_TX_DROPPED (8) u64
//!          └─ IFLA_VF_STATS_BROADCAST  (4) u64
//! ```
//!
//! The kernel fills `IFLA_VF_STATS` through the driver's `ndo_get_vf_stats`
//! (mlx5, ice); for a driver without it (netdevsim) it still sends the nest,
//! all zeros.
//!
//! Why a decoder of our own rather than netlink-packet-route's `VfInfo::Stats`:
//! with stats a VF takes about 300 bytes, so a PF with more than ~220 VFs has
//! an `IFLA_VFINFO_LIST` over 64 KiB, and `nla_nest_end` (include/net/netlink.h)
//! stores its length in the 16-bit `nla_len` without a check: the length
//! wraps. netlink-packet-route then refuses the whole message; this decoder
//! recognises the wrap (the VF entries run on past the stated end, and their
//! true length equals the stated one modulo 2^16) and reads every VF. It also
//! skips one bad VF entry instead of losing the PF's other VFs.
//!
//! The reply is one netlink message, bigger than 64 KiB in that case: the
//! socket transport receives whole datagrams whatever their size
//! ([`super::transport::SocketTransport`] peeks with `MSG_PEEK|MSG_TRUNC`), where
//! rtnetlink's connection ([`super::link::RouteSocket`]) has a 64 KiB buffer.
//!
//! Request, by its `ip` equivalent: [`stats_request`]: `ip -s link show PF`
//! (the `vf N` lines).

use netlink_packet_core::{DecodeError, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable};
use serde::{Deserialize, Serialize};

use super::nla;
use super::transport::{Client, NlError, Transport};

/// `RTM_NEWLINK`, `RTM_GETLINK` (include/uapi/linux/rtnetlink.h).
pub const RTM_NEWLINK: u16 = 16;
pub const RTM_GETLINK: u16 = 18;
/// `sizeof(struct ifinfomsg)`.
pub const IFINFOMSG_LEN: usize = 16;
/// `IFLA_NUM_VF`, `IFLA_VFINFO_LIST`, `IFLA_EXT_MASK` (if_link.h).
pub const IFLA_NUM_VF: u16 = 21;
pub const IFLA_VFINFO_LIST: u16 = 22;
pub const IFLA_EXT_MASK: u16 = 29;
/// `RTEXT_FILTER_VF` (rtnetlink.h): include the VF list. Without
/// `RTEXT_FILTER_SKIP_STATS` (1 << 3) each VF carries its counters.
pub const RTEXT_FILTER_VF: u32 = 1;
/// `IFLA_VF_INFO` (inside `IFLA_VFINFO_LIST`).
pub const IFLA_VF_INFO: u16 = 1;
/// `IFLA_VF_MAC`, `IFLA_VF_STATS` (inside `IFLA_VF_INFO`).
pub const IFLA_VF_MAC: u16 = 1;
pub const IFLA_VF_STATS: u16 = 8;
/// `sizeof(struct ifla_vf_mac)`.
pub const IFLA_VF_MAC_LEN: usize = 36;

/// The other `IFLA_VF_*` the kernel puts in each `IFLA_VF_INFO` (if_link.h),
/// which [`new_link_reply`] writes and the decoder passes over.
pub mod vf_attr {
    pub const VLAN: u16 = 2;
    pub const TX_RATE: u16 = 3;
    pub const SPOOFCHK: u16 = 4;
    pub const LINK_STATE: u16 = 5;
    pub const RATE: u16 = 6;
    pub const RSS_QUERY_EN: u16 = 7;
    pub const TRUST: u16 = 9;
    pub const VLAN_LIST: u16 = 12;
    pub const BROADCAST: u16 = 13;
    /// `IFLA_VF_VLAN_INFO` (inside `IFLA_VF_VLAN_LIST`): `struct ifla_vf_vlan_info
    /// { u32 vf, vlan, qos; __be16 vlan_proto; }`, 16 bytes with its padding.
    pub const VLAN_INFO: u16 = 1;
}

/// `IFLA_VF_STATS_*` (if_link.h), in their order.
pub mod stat {
    pub const RX_PACKETS: u16 = 0;
    pub const TX_PACKETS: u16 = 1;
    pub const RX_BYTES: u16 = 2;
    pub const TX_BYTES: u16 = 3;
    pub const BROADCAST: u16 = 4;
    pub const MULTICAST: u16 = 5;
    /// Alignment padding of `nla_put_u64_64bit`; no value.
    pub const PAD: u16 = 6;
    pub const RX_DROPPED: u16 = 7;
    pub const TX_DROPPED: u16 = 8;
}

/// `struct ifla_vf_stats` (include/linux/if_link.h): one VF's netdev counters
/// as its PF's driver counts them (receive from the VF's point of view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub broadcast: u64,
    pub multicast: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

impl VfStats {
    /// `(IFLA_VF_STATS_*, value)` in the order the kernel emits them.
    pub fn fields(&self) -> [(u16, u64); 8] {
        [
            (stat::RX_PACKETS, self.rx_packets),
            (stat::TX_PACKETS, self.tx_packets),
            (stat::RX_BYTES, self.rx_bytes),
            (stat::TX_BYTES, self.tx_bytes),
            (stat::BROADCAST, self.broadcast),
            (stat::MULTICAST, self.multicast),
            (stat::RX_DROPPED, self.rx_dropped),
            (stat::TX_DROPPED, self.tx_dropped),
        ]
    }

    fn set(&mut self, kind: u16, v: u64) {
        let slot = match kind {
            stat::RX_PACKETS => &mut self.rx_packets,
            stat::TX_PACKETS => &mut self.tx_packets,
            stat::RX_BYTES => &mut self.rx_bytes,
            stat::TX_BYTES => &mut self.tx_bytes,
            stat::BROADCAST => &mut self.broadcast,
            stat::MULTICAST => &mut self.multicast,
            stat::RX_DROPPED => &mut self.rx_dropped,
            stat::TX_DROPPED => &mut self.tx_dropped,
            _ => return,
        };
        *slot = v;
    }
}

/// An rtnetlink link message kept as bytes: the body after `nlmsghdr`
/// (`struct ifinfomsg` and the attributes). Decoding is [`parse_vf_stats`]'s,
/// so that one bad attribute costs one VF, not the exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkBody {
    /// `RTM_GETLINK` in a request, `RTM_NEWLINK` in a reply.
    pub message_type: u16,
    pub body: Vec<u8>,
}

impl NetlinkSerializable for LinkBody {
    fn message_type(&self) -> u16 {
        self.message_type
    }
    fn buffer_len(&self) -> usize {
        self.body.len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        buffer[..self.body.len()].copy_from_slice(&self.body);
    }
}

impl NetlinkDeserializable for LinkBody {
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Ok(Self { message_type: header.message_type, body: payload.to_vec() })
    }
}

/// `struct ifinfomsg` with only the index set.
fn ifinfomsg(index: u32) -> Vec<u8> {
    let mut b = vec![0u8; IFINFOMSG_LEN];
    b[4..8].copy_from_slice(&index.to_ne_bytes());
    b
}

/// Appends one attribute (`struct nlattr` + value, padded to 4). The length is
/// stored as the kernel stores it: truncated to 16 bits.
fn put(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    put_header(buf, kind, 4 + value.len());
    buf.extend_from_slice(value);
    buf.resize(nla_align(buf.len()), 0);
}

fn put_header(buf: &mut Vec<u8>, kind: u16, len: usize) {
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
}

/// `NLA_ALIGN` (include/uapi/linux/netlink.h).
const fn nla_align(n: usize) -> usize {
    (n + 3) & !3
}

/// The RTM_GETLINK body reading the PF with ifindex `pf_index` with its VF
/// list and per-VF counters (`IFLA_EXT_MASK = RTEXT_FILTER_VF`, without
/// `RTEXT_FILTER_SKIP_STATS`): `ip -s link show PF`.
pub fn stats_request(pf_index: u32) -> LinkBody {
    let mut body = ifinfomsg(pf_index);
    put(&mut body, IFLA_EXT_MASK, &RTEXT_FILTER_VF.to_ne_bytes());
    LinkBody { message_type: RTM_GETLINK, body }
}

/// One VF of a PF's reply, as [`new_link_reply`] lays it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfEntry {
    pub vf: u32,
    pub mac: [u8; 6],
    /// `None`: no `IFLA_VF_STATS` (a request with `RTEXT_FILTER_SKIP_STATS`).
    pub stats: Option<VfStats>,
}

/// `struct ifla_vf_*` of `u32` fields, the first being the VF index.
fn u32s(vals: &[u32]) -> Vec<u8> {
    vals.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// The RTM_NEWLINK body a PF answers [`stats_request`] with, its VF part laid
/// out as `rtnl_fill_vf` / `rtnl_fill_vfinfo` lay it out, so that a PF with
/// many VFs has the kernel's size: `IFLA_NUM_VF`, then `IFLA_VFINFO_LIST`
/// with, per VF, `IFLA_VF_MAC`, `IFLA_VF_BROADCAST` (ff:ff:ff:ff:ff:ff),
/// `IFLA_VF_VLAN` (none), `IFLA_VF_RATE` and `IFLA_VF_TX_RATE` (no limit),
/// `IFLA_VF_SPOOFCHK` (off), `IFLA_VF_LINK_STATE` (auto),
/// `IFLA_VF_RSS_QUERY_EN` and `IFLA_VF_TRUST` (-1: the driver reports none),
/// `IFLA_VF_VLAN_LIST` (one 802.1Q entry, VLAN 0), then `IFLA_VF_STATS`.
/// The PF's own top-level attributes (name, MTU, stats, ...) are left out.
/// Nest lengths over 64 KiB wrap as the kernel's do. For the simulated node
/// and tests.
pub fn new_link_reply(pf_index: u32, vfs: &[VfEntry]) -> LinkBody {
    let mut body = ifinfomsg(pf_index);
    put(&mut body, IFLA_NUM_VF, &(vfs.len() as u32).to_ne_bytes());
    let list = body.len();
    put_header(&mut body, IFLA_VFINFO_LIST, 0);
    for v in vfs {
        let info = body.len();
        put_header(&mut body, IFLA_VF_INFO, 0);
        let mut mac = [0u8; IFLA_VF_MAC_LEN];
        mac[..4].copy_from_slice(&v.vf.to_ne_bytes());
        mac[4..10].copy_from_slice(&v.mac);
        put(&mut body, IFLA_VF_MAC, &mac);
        let mut broadcast = [0u8; 32];
        broadcast[..6].fill(0xff);
        put(&mut body, vf_attr::BROADCAST, &broadcast);
        put(&mut body, vf_attr::VLAN, &u32s(&[v.vf, 0, 0]));
        put(&mut body, vf_attr::RATE, &u32s(&[v.vf, 0, 0]));
        put(&mut body, vf_attr::TX_RATE, &u32s(&[v.vf, 0]));
        put(&mut body, vf_attr::SPOOFCHK, &u32s(&[v.vf, 0]));
        put(&mut body, vf_attr::LINK_STATE, &u32s(&[v.vf, 0]));
        put(&mut body, vf_attr::RSS_QUERY_EN, &u32s(&[v.vf, u32::MAX]));
        put(&mut body, vf_attr::TRUST, &u32s(&[v.vf, u32::MAX]));
        let vlans = body.len();
        put_header(&mut body, vf_attr::VLAN_LIST, 0);
        let mut info_vlan = u32s(&[v.vf, 0, 0]);
        // vlan_proto ETH_P_8021Q, then the struct's tail padding (sizeof 16).
        info_vlan.extend_from_slice(&[0x81, 0x00, 0, 0]);
        put(&mut body, vf_attr::VLAN_INFO, &info_vlan);
        end_nest(&mut body, vlans);
        if let Some(s) = v.stats {
            let nest = body.len();
            put_header(&mut body, IFLA_VF_STATS, 0);
            for (kind, value) in s.fields() {
                put(&mut body, kind, &value.to_ne_bytes());
            }
            end_nest(&mut body, nest);
        }
        end_nest(&mut body, info);
    }
    end_nest(&mut body, list);
    LinkBody { message_type: RTM_NEWLINK, body }
}

/// `nla_nest_end`: the nest's length, truncated to the 16-bit `nla_len`.
fn end_nest(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u16;
    buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
}

/// Why a reply could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VfStatsError {
    /// The reply is not an `RTM_NEWLINK`.
    #[error("expected RTM_NEWLINK (16), got message type {0}")]
    NotNewLink(u16),
    /// The framing of the message breaks outside any one VF entry.
    #[error("RTM_NEWLINK at byte {at}: {what}")]
    Malformed {
        /// Offset in the body (after `nlmsghdr`).
        at: usize,
        what: String,
    },
}

/// The per-VF counters of one PF's reply, and the VF entries that could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PfVfStats {
    /// `IFLA_NUM_VF`, when present.
    pub num_vfs: Option<u32>,
    /// `(VF index, counters)` of every VF entry carrying `IFLA_VF_STATS`, in reply order.
    pub vfs: Vec<(u32, VfStats)>,
    /// One line per VF entry skipped, saying why.
    pub skipped: Vec<String>,
}

/// One attribute: type (flags masked off), value, and where its header starts.
struct Attr<'a> {
    kind: u16,
    value: &'a [u8],
    at: usize,
    /// The `nla_len` as stored.
    len: usize,
}

/// The attribute header at `at` of `buf` (offsets count from `base`), or why
/// there is none. `end` bounds the value.
fn attr_at(buf: &[u8], at: usize, end: usize, base: usize) -> Result<Attr<'_>, String> {
    let Some(h) = buf.get(at..at + 4).filter(|_| at + 4 <= end) else {
        return Err(format!("{} bytes left, an attribute header takes 4", end.saturating_sub(at)));
    };
    let len = usize::from(u16::from_ne_bytes([h[0], h[1]]));
    let kind = u16::from_ne_bytes([h[2], h[3]]) & netlink_packet_core::NLA_TYPE_MASK;
    if len < 4 || at + len > end {
        return Err(format!(
            "attribute type {kind} at byte {} states length {len}, {} bytes left",
            base + at,
            end - at
        ));
    }
    Ok(Attr { kind, value: &buf[at + 4..at + len], at, len })
}

/// Every attribute of `buf` (offsets from `base`), or the first break.
fn attrs(buf: &[u8], base: usize) -> Result<Vec<Attr<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let a = attr_at(buf, at, buf.len(), base)?;
        at += nla_align(a.len);
        out.push(a);
    }
    Ok(out)
}

/// How far the VF list starting at `list` really reaches. The stated length
/// is `nla_len`, 16 bits; when the `IFLA_VF_INFO` entries run on past it and
/// their true length equals it modulo 2^16, `nla_nest_end` wrapped it.
fn vf_list_end(buf: &[u8], list: usize, stated: usize) -> usize {
    let mut at = list + 4;
    while let Ok(a) = attr_at(buf, at, buf.len(), 0) {
        if a.kind != IFLA_VF_INFO {
            break;
        }
        at += nla_align(a.len);
    }
    let walked = at.min(buf.len()) - list;
    if walked > stated && walked % 0x1_0000 == stated {
        list + walked
    } else {
        list + stated
    }
}

/// The counters of each VF in a PF's RTM_NEWLINK reply (`msg`, the body after
/// `nlmsghdr`). A VF entry without `IFLA_VF_STATS` gives none; a VF entry that
/// does not decode is skipped with the reason in [`PfVfStats::skipped`].
/// Never panics.
pub fn parse_vf_stats(msg: &LinkBody) -> Result<PfVfStats, VfStatsError> {
    if msg.message_type != RTM_NEWLINK {
        return Err(VfStatsError::NotNewLink(msg.message_type));
    }
    let b = &msg.body;
    if b.len() < IFINFOMSG_LEN {
        return Err(VfStatsError::Malformed {
            at: 0,
            what: format!("{} bytes, struct ifinfomsg takes {IFINFOMSG_LEN}", b.len()),
        });
    }
    let mut out = PfVfStats::default();
    let mut at = IFINFOMSG_LEN;
    while at < b.len() {
        let a = attr_at(b, at, b.len(), 0).map_err(|what| VfStatsError::Malformed { at, what })?;
        let mut next = a.at + nla_align(a.len);
        match a.kind {
            IFLA_NUM_VF => {
                out.num_vfs = Some(
                    nla::u32(a.value, "IFLA_NUM_VF")
                        .map_err(|e| VfStatsError::Malformed { at, what: e.to_string() })?,
                );
            }
            IFLA_VFINFO_LIST => {
                let end = vf_list_end(b, at, a.len);
                vf_entries(&b[at + 4..end], at + 4, &mut out);
                next = nla_align(end);
            }
            _ => {}
        }
        at = next;
    }
    Ok(out)
}

/// The `IFLA_VF_INFO` entries of a VF list (`list` starts at `base` in the body).
fn vf_entries(list: &[u8], base: usize, out: &mut PfVfStats) {
    let mut at = 0;
    let mut position = 0u32;
    while at < list.len() {
        let a = match attr_at(list, at, list.len(), base) {
            Ok(a) => a,
            Err(why) => {
                out.skipped.push(format!("IFLA_VF_INFO #{position} and after: {why}"));
                return;
            }
        };
        at += nla_align(a.len);
        if a.kind != IFLA_VF_INFO {
            continue;
        }
        match vf_entry(a.value, base + a.at + 4, position) {
            Ok(Some(v)) => out.vfs.push(v),
            Ok(None) => {}
            Err(why) => out.skipped.push(format!("IFLA_VF_INFO #{position} at byte {}: {why}", base + a.at)),
        }
        position += 1;
    }
}

/// One VF: its index (`IFLA_VF_MAC`'s `vf`, else its position) and counters.
fn vf_entry(info: &[u8], base: usize, position: u32) -> Result<Option<(u32, VfStats)>, String> {
    let mut vf = position;
    let mut stats = None;
    for a in attrs(info, base)? {
        match a.kind {
            IFLA_VF_MAC => {
                let mac = nla::array::<IFLA_VF_MAC_LEN>(a.value, "IFLA_VF_MAC").map_err(|e| e.to_string())?;
                vf = u32::from_ne_bytes([mac[0], mac[1], mac[2], mac[3]]);
            }
            IFLA_VF_STATS => {
                let mut s = VfStats::default();
                for c in attrs(a.value, base + a.at + 4)? {
                    if c.kind != stat::PAD && c.kind <= stat::TX_DROPPED {
                        let v = nla::u64(c.value, stat_name(c.kind)).map_err(|e| e.to_string())?;
                        s.set(c.kind, v);
                    }
                }
                stats = Some(s);
            }
            _ => {}
        }
    }
    Ok(stats.map(|s| (vf, s)))
}

fn stat_name(kind: u16) -> &'static str {
    match kind {
        stat::RX_PACKETS => "IFLA_VF_STATS_RX_PACKETS",
        stat::TX_PACKETS => "IFLA_VF_STATS_TX_PACKETS",
        stat::RX_BYTES => "IFLA_VF_STATS_RX_BYTES",
        stat::TX_BYTES => "IFLA_VF_STATS_TX_BYTES",
        stat::BROADCAST => "IFLA_VF_STATS_BROADCAST",
        stat::MULTICAST => "IFLA_VF_STATS_MULTICAST",
        stat::RX_DROPPED => "IFLA_VF_STATS_RX_DROPPED",
        _ => "IFLA_VF_STATS_TX_DROPPED",
    }
}

/// Why reading a PF's VF counters failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The exchange failed or the kernel refused (no such link: `ENODEV`).
    #[error("RTM_GETLINK ifindex {pf_index} (VF counters)")]
    Netlink {
        pf_index: u32,
        #[source]
        source: NlError,
    },
    /// The reply did not decode.
    #[error("RTM_GETLINK ifindex {pf_index} (VF counters): bad reply")]
    Reply {
        pf_index: u32,
        #[source]
        source: VfStatsError,
    },
    /// The kernel answered without a link message.
    #[error("RTM_GETLINK ifindex {pf_index} (VF counters): no RTM_NEWLINK in the reply")]
    NoReply { pf_index: u32 },
}

/// `ip -s link show PF` over `c` (a `NETLINK_ROUTE` client): the counters of
/// every VF of the PF with ifindex `pf_index`, one request for all its VFs.
pub fn read<T: Transport>(c: &mut Client<T>, pf_index: u32) -> Result<PfVfStats, ReadError> {
    let op = format!("RTM_GETLINK ifindex {pf_index} (VF counters)");
    let replies = c
        .request(&op, stats_request(pf_index), false, 0)
        .map_err(|source| ReadError::Netlink { pf_index, source })?;
    let m = replies.iter().find(|m| m.message_type == RTM_NEWLINK).ok_or(ReadError::NoReply { pf_index })?;
    parse_vf_stats(m).map_err(|source| ReadError::Reply { pf_index, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(n: u64) -> VfStats {
        VfStats {
            rx_packets: n,
            tx_packets: n + 1,
            rx_bytes: n + 2,
            tx_bytes: n + 3,
            broadcast: n + 4,
            multicast: n + 5,
            rx_dropped: n + 6,
            tx_dropped: n + 7,
        }
    }

    #[test]
    fn a_pf_with_256_vfs_and_stats_wraps_the_list_length_and_every_vf_is_still_read() {
        let vfs: Vec<VfEntry> = (0..256)
            .map(|vf| VfEntry { vf, mac: [2, 0, 0, 0, 0, vf as u8], stats: Some(stats(vf.into())) })
            .collect();
        let m = new_link_reply(7, &vfs);
        assert!(m.body.len() > 65_536, "{} bytes", m.body.len());
        // The stated list length is the true one modulo 2^16, as nla_nest_end leaves it.
        let stated = u16::from_ne_bytes([m.body[24], m.body[25]]) as usize;
        assert_eq!(stated, (m.body.len() - 24) % 0x1_0000);
        // netlink-packet-route refuses the whole message: the 35th VF runs past the stated end.
        let raw =
            crate::netlink::transport::emit(&mut crate::netlink::transport::request_message(0, 1, m.clone()));
        assert!(
            netlink_packet_core::NetlinkMessage::<netlink_packet_route::RouteNetlinkMessage>::deserialize(
                &raw
            )
            .is_err()
        );
        let got = parse_vf_stats(&m).unwrap();
        assert_eq!(got.num_vfs, Some(256));
        assert!(got.skipped.is_empty(), "{:?}", got.skipped);
        assert_eq!(got.vfs.len(), 256);
        assert_eq!(got.vfs[255], (255, stats(255)));
    }

    #[test]
    fn a_cut_message_is_an_error_and_never_a_panic() {
        let m = new_link_reply(7, &[VfEntry { vf: 0, mac: [0; 6], stats: Some(stats(1)) }]);
        for n in 0..m.body.len() {
            let cut = LinkBody { message_type: RTM_NEWLINK, body: m.body[..n].to_vec() };
            let _ = parse_vf_stats(&cut);
        }
        let cut = LinkBody { message_type: RTM_NEWLINK, body: m.body[..10].to_vec() };
        assert!(parse_vf_stats(&cut).unwrap_err().to_string().contains("struct ifinfomsg takes 16"));
        assert_eq!(parse_vf_stats(&stats_request(1)).unwrap_err(), VfStatsError::NotNewLink(RTM_GETLINK));
    }
}
