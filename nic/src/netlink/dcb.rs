//! DCB netlink (`RTM_GETDCB` / `RTM_SETDCB` over `NETLINK_ROUTE`): the IEEE
//! 802.1Qaz view of a port (ETS, PFC with its pause counters, the APP table
//! with DSCP entries, maxrate, buffers) and the DCBX mode.
//!
//! Constants and layouts come from the kernel uapi header
//! `include/uapi/linux/dcbnl.h` (Linux 6.x; `DCB_ATTR_DCB_BUFFER` since 4.17,
//! selector 5 = DSCP since 4.13) and the reply shapes from `net/dcb/dcbnl.c`
//! (`dcbnl_ieee_fill`, `dcb_doit`). Integers are host-endian, as in every
//! rtnetlink family.
//!
//! ```text
//! nlmsghdr (16)          | len u32 | type u16 = 78/79 | flags u16 | seq u32 | pid u32 |
//! struct dcbmsg (4)      | dcb_family u8 = AF_UNSPEC | cmd u8 | dcb_pad u16 |
//! attributes             | DCB_ATTR_IFNAME "ens1f0np0\0"
//!                        | DCB_ATTR_IEEE { ETS | PFC | APP_TABLE { APP… } | MAXRATE | DCB_BUFFER | PEER_* }
//!                        | DCB_ATTR_DCBX u8
//! ```
//!
//! The codec is pure ([`DcbMessage::emit`], [`parse_messages`]); [`DcbSocket`]
//! is the synchronous transport. Kernel notifications of DCB changes go to the
//! rtnetlink multicast group [`RTNLGRP_DCB`] and have the same shape as an
//! `DCB_CMD_IEEE_GET` reply, so [`parse_messages`] reads them too.

use std::time::Duration;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// `RTM_GETDCB` (include/uapi/linux/rtnetlink.h).
pub const RTM_GETDCB: u16 = 78;
/// `RTM_SETDCB`.
pub const RTM_SETDCB: u16 = 79;
/// rtnetlink multicast group of DCB change notifications (`RTNLGRP_DCB`,
/// include/uapi/linux/rtnetlink.h; 0x17 also in the libc crate). Join it with
/// `Socket::add_membership(RTNLGRP_DCB)` (or see [`subscribe`]).
pub const RTNLGRP_DCB: u32 = 23;

/// `NLMSG_NOOP` (include/uapi/linux/netlink.h).
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: errno (0 = ack) and the request's header.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;

/// `enum dcbnl_commands` values used here (dcbnl.h).
pub mod cmd {
    /// Set the IEEE 802.1Qaz configuration.
    pub const DCB_CMD_IEEE_SET: u8 = 20;
    /// Get the IEEE 802.1Qaz configuration.
    pub const DCB_CMD_IEEE_GET: u8 = 21;
    /// Get the DCBX mode.
    pub const DCB_CMD_GDCBX: u8 = 22;
    /// Set the DCBX mode.
    pub const DCB_CMD_SDCBX: u8 = 23;
    /// Get the CEE configuration (notifications from CEE-mode drivers).
    pub const DCB_CMD_CEE_GET: u8 = 26;
    /// Delete IEEE 802.1Qaz configuration (APP entries).
    pub const DCB_CMD_IEEE_DEL: u8 = 27;
}

/// `enum dcbnl_attrs` values (top level).
pub mod attr {
    /// Interface name, NUL-terminated string.
    pub const DCB_ATTR_IFNAME: u16 = 1;
    /// IEEE 802.1Qaz nest (a u8 status in SET/DEL replies).
    pub const DCB_ATTR_IEEE: u16 = 13;
    /// DCBX mode, u8 of `DCB_CAP_DCBX_*` bits (a u8 status in SDCBX replies).
    pub const DCB_ATTR_DCBX: u16 = 14;
}

/// `enum ieee_attrs` values (inside `DCB_ATTR_IEEE`).
pub mod ieee {
    /// `struct ieee_ets`.
    pub const DCB_ATTR_IEEE_ETS: u16 = 1;
    /// `struct ieee_pfc`.
    pub const DCB_ATTR_IEEE_PFC: u16 = 2;
    /// Nest of `DCB_ATTR_IEEE_APP` / `DCB_ATTR_DCB_APP`.
    pub const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
    /// Peer's `struct ieee_ets` (get only).
    pub const DCB_ATTR_IEEE_PEER_ETS: u16 = 4;
    /// Peer's `struct ieee_pfc` (get only).
    pub const DCB_ATTR_IEEE_PEER_PFC: u16 = 5;
    /// Peer's APP TLV (get only), kept raw.
    pub const DCB_ATTR_IEEE_PEER_APP: u16 = 6;
    /// `struct ieee_maxrate`.
    pub const DCB_ATTR_IEEE_MAXRATE: u16 = 7;
    /// `struct dcbnl_buffer`.
    pub const DCB_ATTR_DCB_BUFFER: u16 = 10;
    /// `struct dcb_app` with an IEEE selector (inside the APP table).
    pub const DCB_ATTR_IEEE_APP: u16 = 1;
    /// `struct dcb_app` with a non-IEEE selector such as PCP (255).
    pub const DCB_ATTR_DCB_APP: u16 = 2;
}

/// DCBX capability bits (`DCB_CAP_DCBX_*`, dcbnl.h).
pub mod dcbx {
    /// The host LLDP agent negotiates (lldpad, or none: static host config).
    pub const DCB_CAP_DCBX_HOST: u8 = 0x01;
    /// Firmware (or another entity) negotiates.
    pub const DCB_CAP_DCBX_LLD_MANAGED: u8 = 0x02;
    /// CEE flavour.
    pub const DCB_CAP_DCBX_VER_CEE: u8 = 0x04;
    /// IEEE flavour.
    pub const DCB_CAP_DCBX_VER_IEEE: u8 = 0x08;
    /// Static configuration, no negotiation.
    pub const DCB_CAP_DCBX_STATIC: u8 = 0x10;
}

/// APP selector: DSCP (`IEEE_8021QAZ_APP_SEL_DSCP`).
pub const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;
/// APP selector: EtherType.
pub const IEEE_8021QAZ_APP_SEL_ETHERTYPE: u8 = 1;
/// Non-standard APP selector: PCP (`DCB_APP_SEL_PCP`).
pub const DCB_APP_SEL_PCP: u8 = 255;

const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
const DCBMSG_LEN: usize = 4;

/// `sizeof(struct ieee_ets)`: 3 + 7 × 8 bytes, no padding.
pub const IEEE_ETS_LEN: usize = 59;
/// `sizeof(struct ieee_pfc)`: u8 ×3, pad, u16 delay, pad to 8, u64 × 16.
pub const IEEE_PFC_LEN: usize = 136;
/// `sizeof(struct ieee_maxrate)`.
pub const IEEE_MAXRATE_LEN: usize = 64;
/// `sizeof(struct dcbnl_buffer)`: u8 × 8, u32 × 8, u32.
pub const DCBNL_BUFFER_LEN: usize = 44;
/// `sizeof(struct dcb_app)`.
pub const DCB_APP_LEN: usize = 4;

/// `struct ieee_ets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IeeeEts {
    /// Willing bit.
    pub willing: u8,
    /// TCs that support ETS.
    pub ets_cap: u8,
    /// Credit-based shaper supported.
    pub cbs: u8,
    /// TX bandwidth per TC (percent).
    pub tc_tx_bw: [u8; 8],
    /// RX bandwidth per TC.
    pub tc_rx_bw: [u8; 8],
    /// TSA per TC (0 strict, 1 CBS, 2 ETS, 255 vendor).
    pub tc_tsa: [u8; 8],
    /// Priority → TC.
    pub prio_tc: [u8; 8],
    /// Recommended bandwidth per TC.
    pub tc_reco_bw: [u8; 8],
    /// Recommended TSA per TC.
    pub tc_reco_tsa: [u8; 8],
    /// Recommended priority → TC.
    pub reco_prio_tc: [u8; 8],
}

/// `struct ieee_pfc`.
///
/// ```text
/// 0 pfc_cap u8 | 1 pfc_en u8 | 2 mbc u8 | 3 pad | 4 delay u16 | 6 pad[2]
/// 8 requests u64[8] | 72 indications u64[8] | 136
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IeeePfc {
    /// TCs that can have PFC at once.
    pub pfc_cap: u8,
    /// Enabled bitmap (bit N = priority N).
    pub pfc_en: u8,
    /// MACsec bypass capability.
    pub mbc: u8,
    /// Cable delay allowance in bits.
    pub delay: u16,
    /// PFC frames sent per priority.
    pub requests: [u64; 8],
    /// PFC frames received per priority.
    pub indications: [u64; 8],
}

/// `struct ieee_maxrate`: per-TC TX rate limit in kbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IeeeMaxrate {
    /// Rate per TC (0 = unlimited).
    pub tc_maxrate: [u64; 8],
}

/// `struct dcbnl_buffer`: receive buffer split (mlx5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DcbBuffer {
    /// Priority → buffer.
    pub prio2buffer: [u8; 8],
    /// Buffer sizes in bytes.
    pub buffer_size: [u32; 8],
    /// Total port buffer in bytes.
    pub total_size: u32,
}

/// `struct dcb_app`: one APP table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DcbApp {
    /// Selector (5 = DSCP, 1 = EtherType, 255 = PCP …).
    pub selector: u8,
    /// Priority (0..7).
    pub priority: u8,
    /// Protocol: the DSCP value for selector 5.
    pub protocol: u16,
}

impl DcbApp {
    /// A DSCP → priority entry.
    pub fn dscp(dscp: u8, priority: u8) -> Self {
        Self { selector: IEEE_8021QAZ_APP_SEL_DSCP, priority, protocol: dscp as u16 }
    }
}

/// An attribute this codec keeps as bytes: unknown types, or known types it
/// does not decode (QCN, trust and rewrite tables, peer APP). `kind` holds the
/// full `nla_type`, flags included, so it is emitted back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawNla {
    /// `nla_type` as received.
    pub kind: u16,
    /// Payload without padding.
    pub value: Vec<u8>,
}

/// An entry of `DCB_ATTR_IEEE_APP_TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppAttr {
    /// `DCB_ATTR_IEEE_APP`: IEEE selectors (1..5).
    Ieee(DcbApp),
    /// `DCB_ATTR_DCB_APP`: non-IEEE selectors (PCP 255).
    Dcb(DcbApp),
    /// Anything else.
    Other(RawNla),
}

/// An attribute inside `DCB_ATTR_IEEE`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IeeeAttr {
    /// `DCB_ATTR_IEEE_ETS`.
    Ets(IeeeEts),
    /// `DCB_ATTR_IEEE_PFC`.
    Pfc(IeeePfc),
    /// `DCB_ATTR_IEEE_APP_TABLE`.
    AppTable(Vec<AppAttr>),
    /// `DCB_ATTR_IEEE_PEER_ETS`.
    PeerEts(IeeeEts),
    /// `DCB_ATTR_IEEE_PEER_PFC`.
    PeerPfc(IeeePfc),
    /// `DCB_ATTR_IEEE_MAXRATE`.
    Maxrate(IeeeMaxrate),
    /// `DCB_ATTR_DCB_BUFFER`.
    Buffer(DcbBuffer),
    /// Anything else (peer APP, QCN, trust/rewrite tables, future attributes).
    Other(RawNla),
}

/// A top-level DCB attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcbAttr {
    /// `DCB_ATTR_IFNAME`.
    IfName(String),
    /// `DCB_ATTR_IEEE` as a nest (GET replies, SET/DEL requests, notifications).
    Ieee(Vec<IeeeAttr>),
    /// `DCB_ATTR_IEEE` as a u8: the driver's status in SET/DEL replies (0 = ok).
    IeeeStatus(u8),
    /// `DCB_ATTR_DCBX`: `DCB_CAP_DCBX_*` bits (GDCBX/SDCBX, IEEE_GET), or the
    /// driver's status in SDCBX replies.
    Dcbx(u8),
    /// Anything else.
    Other(RawNla),
}

/// A DCB message body: `struct dcbmsg` and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcbMsg {
    /// `dcb_family` (AF_UNSPEC = 0 in everything the kernel sends).
    pub family: u8,
    /// `cmd` (`DCB_CMD_*`).
    pub cmd: u8,
    /// Attributes in wire order.
    pub attrs: Vec<DcbAttr>,
}

/// The `nlmsghdr` fields other than the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NlHeader {
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`.
    pub pid: u32,
}

/// What a netlink message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `RTM_GETDCB` / `RTM_SETDCB`.
    Dcb(DcbMsg),
    /// `NLMSG_ERROR`: `error` is a negative errno, 0 for an ack; `echo` holds the
    /// rest (the request's header, maybe its payload and extended-ack TLVs), raw.
    Error {
        /// Negative errno, or 0 (ack).
        error: i32,
        /// Everything after the errno.
        echo: Vec<u8>,
    },
    /// `NLMSG_DONE` (raw payload).
    Done(Vec<u8>),
    /// Any other message type (raw payload).
    Other(Vec<u8>),
}

/// One netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcbMessage {
    /// Header (type, flags, seq, pid).
    pub header: NlHeader,
    /// Body.
    pub payload: Payload,
}

/// Why bytes are not a DCB netlink message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed DCB netlink message at byte {offset}: {what}")]
pub struct ParseError {
    /// Offset in the buffer handed to [`parse_messages`].
    pub offset: usize,
    /// What is wrong.
    pub what: String,
}

fn perr(offset: usize, what: impl Into<String>) -> ParseError {
    ParseError { offset, what: what.into() }
}

// ---------------------------------------------------------------- emit

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn put_nla(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    // Attribute lengths are u16 on the wire; nothing we build comes near it.
    out.extend_from_slice(&(len.min(u16::MAX as usize) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len() + (align4(len) - len), 0);
}

fn put_nest(out: &mut Vec<u8>, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    put_nla(out, kind, &inner);
}

impl IeeeEts {
    /// The 59 wire bytes.
    pub fn to_bytes(&self) -> [u8; IEEE_ETS_LEN] {
        let mut b = [0u8; IEEE_ETS_LEN];
        b[0] = self.willing;
        b[1] = self.ets_cap;
        b[2] = self.cbs;
        let arrays = [
            &self.tc_tx_bw,
            &self.tc_rx_bw,
            &self.tc_tsa,
            &self.prio_tc,
            &self.tc_reco_bw,
            &self.tc_reco_tsa,
            &self.reco_prio_tc,
        ];
        for (i, a) in arrays.iter().enumerate() {
            b[3 + 8 * i..11 + 8 * i].copy_from_slice(&a[..]);
        }
        b
    }

    /// From exactly 59 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != IEEE_ETS_LEN {
            return None;
        }
        let arr = |i: usize| -> [u8; 8] { std::array::from_fn(|k| b[3 + 8 * i + k]) };
        Some(Self {
            willing: b[0],
            ets_cap: b[1],
            cbs: b[2],
            tc_tx_bw: arr(0),
            tc_rx_bw: arr(1),
            tc_tsa: arr(2),
            prio_tc: arr(3),
            tc_reco_bw: arr(4),
            tc_reco_tsa: arr(5),
            reco_prio_tc: arr(6),
        })
    }
}

impl IeeePfc {
    /// The 136 wire bytes (padding zeroed).
    pub fn to_bytes(&self) -> [u8; IEEE_PFC_LEN] {
        let mut b = [0u8; IEEE_PFC_LEN];
        b[0] = self.pfc_cap;
        b[1] = self.pfc_en;
        b[2] = self.mbc;
        b[4..6].copy_from_slice(&self.delay.to_ne_bytes());
        for i in 0..8 {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&self.requests[i].to_ne_bytes());
            b[72 + 8 * i..80 + 8 * i].copy_from_slice(&self.indications[i].to_ne_bytes());
        }
        b
    }

    /// From exactly 136 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != IEEE_PFC_LEN {
            return None;
        }
        Some(Self {
            pfc_cap: b[0],
            pfc_en: b[1],
            mbc: b[2],
            delay: u16::from_ne_bytes([b[4], b[5]]),
            requests: std::array::from_fn(|i| u64_at(b, 8 + 8 * i)),
            indications: std::array::from_fn(|i| u64_at(b, 72 + 8 * i)),
        })
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

impl IeeeMaxrate {
    /// The 64 wire bytes.
    pub fn to_bytes(&self) -> [u8; IEEE_MAXRATE_LEN] {
        let mut b = [0u8; IEEE_MAXRATE_LEN];
        for i in 0..8 {
            b[8 * i..8 * i + 8].copy_from_slice(&self.tc_maxrate[i].to_ne_bytes());
        }
        b
    }

    /// From exactly 64 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == IEEE_MAXRATE_LEN).then(|| Self { tc_maxrate: std::array::from_fn(|i| u64_at(b, 8 * i)) })
    }
}

impl DcbBuffer {
    /// The 44 wire bytes.
    pub fn to_bytes(&self) -> [u8; DCBNL_BUFFER_LEN] {
        let mut b = [0u8; DCBNL_BUFFER_LEN];
        b[..8].copy_from_slice(&self.prio2buffer);
        for i in 0..8 {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&self.buffer_size[i].to_ne_bytes());
        }
        b[40..44].copy_from_slice(&self.total_size.to_ne_bytes());
        b
    }

    /// From exactly 44 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == DCBNL_BUFFER_LEN).then(|| Self {
            prio2buffer: std::array::from_fn(|i| b[i]),
            buffer_size: std::array::from_fn(|i| u32_at(b, 8 + 4 * i)),
            total_size: u32_at(b, 40),
        })
    }
}

impl DcbApp {
    /// The 4 wire bytes.
    pub fn to_bytes(&self) -> [u8; DCB_APP_LEN] {
        let p = self.protocol.to_ne_bytes();
        [self.selector, self.priority, p[0], p[1]]
    }

    /// From exactly 4 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        (b.len() == DCB_APP_LEN).then(|| Self { selector: b[0], priority: b[1], protocol: u16_at(b, 2) })
    }
}

fn emit_app(out: &mut Vec<u8>, a: &AppAttr) {
    match a {
        AppAttr::Ieee(app) => put_nla(out, ieee::DCB_ATTR_IEEE_APP, &app.to_bytes()),
        AppAttr::Dcb(app) => put_nla(out, ieee::DCB_ATTR_DCB_APP, &app.to_bytes()),
        AppAttr::Other(r) => put_nla(out, r.kind, &r.value),
    }
}

fn emit_ieee(out: &mut Vec<u8>, a: &IeeeAttr) {
    match a {
        IeeeAttr::Ets(e) => put_nla(out, ieee::DCB_ATTR_IEEE_ETS, &e.to_bytes()),
        IeeeAttr::Pfc(p) => put_nla(out, ieee::DCB_ATTR_IEEE_PFC, &p.to_bytes()),
        IeeeAttr::AppTable(apps) => {
            put_nest(out, ieee::DCB_ATTR_IEEE_APP_TABLE, |o| apps.iter().for_each(|a| emit_app(o, a)));
        }
        IeeeAttr::PeerEts(e) => put_nla(out, ieee::DCB_ATTR_IEEE_PEER_ETS, &e.to_bytes()),
        IeeeAttr::PeerPfc(p) => put_nla(out, ieee::DCB_ATTR_IEEE_PEER_PFC, &p.to_bytes()),
        IeeeAttr::Maxrate(m) => put_nla(out, ieee::DCB_ATTR_IEEE_MAXRATE, &m.to_bytes()),
        IeeeAttr::Buffer(b) => put_nla(out, ieee::DCB_ATTR_DCB_BUFFER, &b.to_bytes()),
        IeeeAttr::Other(r) => put_nla(out, r.kind, &r.value),
    }
}

fn emit_attr(out: &mut Vec<u8>, a: &DcbAttr) {
    match a {
        DcbAttr::IfName(n) => {
            let mut v = n.as_bytes().to_vec();
            v.push(0);
            put_nla(out, attr::DCB_ATTR_IFNAME, &v);
        }
        DcbAttr::Ieee(list) => {
            put_nest(out, attr::DCB_ATTR_IEEE, |o| list.iter().for_each(|a| emit_ieee(o, a)));
        }
        DcbAttr::IeeeStatus(s) => put_nla(out, attr::DCB_ATTR_IEEE, &[*s]),
        DcbAttr::Dcbx(d) => put_nla(out, attr::DCB_ATTR_DCBX, &[*d]),
        DcbAttr::Other(r) => put_nla(out, r.kind, &r.value),
    }
}

impl DcbMessage {
    /// The wire bytes of this message (`nlmsg_len` computed).
    pub fn emit(&self) -> Vec<u8> {
        let mut body = Vec::new();
        match &self.payload {
            Payload::Dcb(m) => {
                body.extend_from_slice(&[m.family, m.cmd, 0, 0]);
                m.attrs.iter().for_each(|a| emit_attr(&mut body, a));
            }
            Payload::Error { error, echo } => {
                body.extend_from_slice(&error.to_ne_bytes());
                body.extend_from_slice(echo);
            }
            Payload::Done(raw) | Payload::Other(raw) => body.extend_from_slice(raw),
        }
        let len = NLMSG_HDRLEN + body.len();
        let mut out = Vec::with_capacity(align4(len));
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&self.header.kind.to_ne_bytes());
        out.extend_from_slice(&self.header.flags.to_ne_bytes());
        out.extend_from_slice(&self.header.seq.to_ne_bytes());
        out.extend_from_slice(&self.header.pid.to_ne_bytes());
        out.extend_from_slice(&body);
        out.resize(align4(len), 0);
        out
    }

    fn request(kind: u16, flags: u16, cmd: u8, attrs: Vec<DcbAttr>) -> Self {
        Self {
            header: NlHeader { kind, flags, seq: 0, pid: 0 },
            payload: Payload::Dcb(DcbMsg { family: libc::AF_UNSPEC as u8, cmd, attrs }),
        }
    }

    /// `dcb ets show dev X; dcb pfc show dev X; dcb app show dev X; dcb buffer show dev X`
    /// in one request: `RTM_GETDCB` `DCB_CMD_IEEE_GET` with `DCB_ATTR_IFNAME`.
    pub fn ieee_get(ifname: &str) -> Self {
        Self::request(
            RTM_GETDCB,
            NLM_F_REQUEST | NLM_F_ACK,
            cmd::DCB_CMD_IEEE_GET,
            vec![DcbAttr::IfName(ifname.into())],
        )
    }

    /// `dcb dcbx show dev X`: `RTM_GETDCB` `DCB_CMD_GDCBX`.
    pub fn get_dcbx(ifname: &str) -> Self {
        Self::request(
            RTM_GETDCB,
            NLM_F_REQUEST | NLM_F_ACK,
            cmd::DCB_CMD_GDCBX,
            vec![DcbAttr::IfName(ifname.into())],
        )
    }

    /// `dcb dcbx set dev X host ieee` (bits `DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE`):
    /// `RTM_SETDCB` `DCB_CMD_SDCBX` with `DCB_ATTR_DCBX`.
    pub fn set_dcbx(ifname: &str, bits: u8) -> Self {
        Self::request(
            RTM_SETDCB,
            NLM_F_REQUEST | NLM_F_ACK,
            cmd::DCB_CMD_SDCBX,
            vec![DcbAttr::IfName(ifname.into()), DcbAttr::Dcbx(bits)],
        )
    }

    /// `dcb pfc set dev X prio-pfc …`: `RTM_SETDCB` `DCB_CMD_IEEE_SET` with
    /// `DCB_ATTR_IEEE { DCB_ATTR_IEEE_PFC }`. The driver takes `pfc_en`, `delay`
    /// and `mbc`; pass the current counters back unchanged (they are ignored).
    pub fn set_pfc(ifname: &str, pfc: IeeePfc) -> Self {
        Self::ieee_set(ifname, vec![IeeeAttr::Pfc(pfc)])
    }

    /// `dcb ets set dev X …`: `DCB_CMD_IEEE_SET` with `DCB_ATTR_IEEE_ETS`.
    pub fn set_ets(ifname: &str, ets: IeeeEts) -> Self {
        Self::ieee_set(ifname, vec![IeeeAttr::Ets(ets)])
    }

    /// `dcb app add dev X dscp-prio 26:3 …`: `DCB_CMD_IEEE_SET` with an APP table.
    pub fn add_apps(ifname: &str, apps: &[DcbApp]) -> Self {
        Self::ieee_set(ifname, vec![IeeeAttr::AppTable(app_attrs(apps))])
    }

    /// `dcb app del dev X dscp-prio 26:3 …`: `RTM_SETDCB` `DCB_CMD_IEEE_DEL` with an APP table.
    pub fn del_apps(ifname: &str, apps: &[DcbApp]) -> Self {
        Self::request(
            RTM_SETDCB,
            NLM_F_REQUEST | NLM_F_ACK,
            cmd::DCB_CMD_IEEE_DEL,
            vec![DcbAttr::IfName(ifname.into()), DcbAttr::Ieee(vec![IeeeAttr::AppTable(app_attrs(apps))])],
        )
    }

    /// Any `DCB_CMD_IEEE_SET` with the given IEEE attributes.
    pub fn ieee_set(ifname: &str, attrs: Vec<IeeeAttr>) -> Self {
        Self::request(
            RTM_SETDCB,
            NLM_F_REQUEST | NLM_F_ACK,
            cmd::DCB_CMD_IEEE_SET,
            vec![DcbAttr::IfName(ifname.into()), DcbAttr::Ieee(attrs)],
        )
    }

    /// Sets the sequence number.
    pub fn with_seq(mut self, seq: u32) -> Self {
        self.header.seq = seq;
        self
    }
}

fn app_attrs(apps: &[DcbApp]) -> Vec<AppAttr> {
    // Selectors up to DSCP go in DCB_ATTR_IEEE_APP; others (PCP 255) need
    // DCB_ATTR_DCB_APP, as net/dcb/dcbnl.c:dcbnl_app_table_setdel() checks.
    apps.iter()
        .map(|a| if a.selector <= IEEE_8021QAZ_APP_SEL_DSCP { AppAttr::Ieee(*a) } else { AppAttr::Dcb(*a) })
        .collect()
}

// ---------------------------------------------------------------- parse

/// Walks the attributes in `buf` (whose first byte is at `base` in the
/// message), handing each `(type, payload, offset)` to `f`.
fn walk(
    buf: &[u8],
    base: usize,
    mut f: impl FnMut(u16, &[u8], usize) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let mut at = 0;
    while at < buf.len() {
        if buf.len() - at < 4 {
            return Err(perr(
                base + at,
                format!("{} trailing bytes, too short for an attribute header", buf.len() - at),
            ));
        }
        let len = u16_at(buf, at) as usize;
        let kind = u16_at(buf, at + 2);
        if len < 4 || at + len > buf.len() {
            return Err(perr(base + at, format!("attribute type {kind} has bad length {len}")));
        }
        f(kind, &buf[at + 4..at + len], base + at + 4)?;
        // The last attribute may come without its padding.
        at = (at + align4(len)).min(buf.len());
    }
    Ok(())
}

fn fixed<T>(v: Option<T>, name: &str, want: usize, got: usize, at: usize) -> Result<T, ParseError> {
    v.ok_or_else(|| perr(at, format!("{name}: {got} bytes, expected {want}")))
}

fn parse_apps(buf: &[u8], base: usize) -> Result<Vec<AppAttr>, ParseError> {
    let mut out = Vec::new();
    walk(buf, base, |kind, v, at| {
        let app = |name| fixed(DcbApp::from_bytes(v), name, DCB_APP_LEN, v.len(), at);
        out.push(match kind {
            ieee::DCB_ATTR_IEEE_APP => AppAttr::Ieee(app("DCB_ATTR_IEEE_APP")?),
            ieee::DCB_ATTR_DCB_APP => AppAttr::Dcb(app("DCB_ATTR_DCB_APP")?),
            _ => AppAttr::Other(RawNla { kind, value: v.to_vec() }),
        });
        Ok(())
    })?;
    Ok(out)
}

fn parse_ieee(buf: &[u8], base: usize) -> Result<Vec<IeeeAttr>, ParseError> {
    let mut out = Vec::new();
    walk(buf, base, |kind, v, at| {
        let ets = |n| fixed(IeeeEts::from_bytes(v), n, IEEE_ETS_LEN, v.len(), at);
        let pfc = |n| fixed(IeeePfc::from_bytes(v), n, IEEE_PFC_LEN, v.len(), at);
        out.push(match kind {
            ieee::DCB_ATTR_IEEE_ETS => IeeeAttr::Ets(ets("DCB_ATTR_IEEE_ETS")?),
            ieee::DCB_ATTR_IEEE_PFC => IeeeAttr::Pfc(pfc("DCB_ATTR_IEEE_PFC")?),
            ieee::DCB_ATTR_IEEE_APP_TABLE => IeeeAttr::AppTable(parse_apps(v, at)?),
            ieee::DCB_ATTR_IEEE_PEER_ETS => IeeeAttr::PeerEts(ets("DCB_ATTR_IEEE_PEER_ETS")?),
            ieee::DCB_ATTR_IEEE_PEER_PFC => IeeeAttr::PeerPfc(pfc("DCB_ATTR_IEEE_PEER_PFC")?),
            ieee::DCB_ATTR_IEEE_MAXRATE => IeeeAttr::Maxrate(fixed(
                IeeeMaxrate::from_bytes(v),
                "DCB_ATTR_IEEE_MAXRATE",
                IEEE_MAXRATE_LEN,
                v.len(),
                at,
            )?),
            ieee::DCB_ATTR_DCB_BUFFER => IeeeAttr::Buffer(fixed(
                DcbBuffer::from_bytes(v),
                "DCB_ATTR_DCB_BUFFER",
                DCBNL_BUFFER_LEN,
                v.len(),
                at,
            )?),
            _ => IeeeAttr::Other(RawNla { kind, value: v.to_vec() }),
        });
        Ok(())
    })?;
    Ok(out)
}

fn parse_dcb(body: &[u8], base: usize) -> Result<DcbMsg, ParseError> {
    if body.len() < DCBMSG_LEN {
        return Err(perr(base, format!("struct dcbmsg needs 4 bytes, got {}", body.len())));
    }
    let mut attrs = Vec::new();
    walk(&body[DCBMSG_LEN..], base + DCBMSG_LEN, |kind, v, at| {
        attrs.push(match kind & NLA_TYPE_MASK {
            attr::DCB_ATTR_IFNAME if kind == attr::DCB_ATTR_IFNAME => {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                let name =
                    std::str::from_utf8(&v[..end]).map_err(|_| perr(at, "DCB_ATTR_IFNAME is not UTF-8"))?;
                DcbAttr::IfName(name.to_owned())
            }
            attr::DCB_ATTR_IEEE if v.len() == 1 && kind == attr::DCB_ATTR_IEEE => DcbAttr::IeeeStatus(v[0]),
            attr::DCB_ATTR_IEEE => DcbAttr::Ieee(parse_ieee(v, at)?),
            attr::DCB_ATTR_DCBX if kind == attr::DCB_ATTR_DCBX => {
                if v.len() != 1 {
                    return Err(perr(at, format!("DCB_ATTR_DCBX: {} bytes, expected 1", v.len())));
                }
                DcbAttr::Dcbx(v[0])
            }
            _ => DcbAttr::Other(RawNla { kind, value: v.to_vec() }),
        });
        Ok(())
    })?;
    Ok(DcbMsg { family: body[0], cmd: body[1], attrs })
}

/// Parses every netlink message in `buf` (one `recv` may hold several).
///
/// Never panics; rejects truncated headers, lengths pointing past the buffer,
/// and known attributes whose size differs from the uapi struct. Unknown
/// attributes are kept as [`RawNla`].
pub fn parse_messages(buf: &[u8]) -> Result<Vec<DcbMessage>, ParseError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        if buf.len() - at < NLMSG_HDRLEN {
            return Err(perr(at, format!("{} bytes left, too short for nlmsghdr", buf.len() - at)));
        }
        let len = u32_at(buf, at) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() - at {
            return Err(perr(at, format!("nlmsg_len {len} does not fit the {} bytes left", buf.len() - at)));
        }
        let header = NlHeader {
            kind: u16_at(buf, at + 4),
            flags: u16_at(buf, at + 6),
            seq: u32_at(buf, at + 8),
            pid: u32_at(buf, at + 12),
        };
        let body = &buf[at + NLMSG_HDRLEN..at + len];
        let base = at + NLMSG_HDRLEN;
        let payload = match header.kind {
            RTM_GETDCB | RTM_SETDCB => Payload::Dcb(parse_dcb(body, base)?),
            NLMSG_ERROR => {
                if body.len() < 4 {
                    return Err(perr(base, "NLMSG_ERROR without an errno"));
                }
                Payload::Error { error: u32_at(body, 0) as i32, echo: body[4..].to_vec() }
            }
            NLMSG_DONE => Payload::Done(body.to_vec()),
            _ => Payload::Other(body.to_vec()),
        };
        out.push(DcbMessage { header, payload });
        at = (at + align4(len)).min(buf.len());
    }
    Ok(out)
}

// ---------------------------------------------------------------- views

/// The decoded IEEE view of a port (from a `DCB_CMD_IEEE_GET` reply or notification).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IeeeState {
    /// Interface the reply names.
    pub ifname: Option<String>,
    /// Local ETS.
    pub ets: Option<IeeeEts>,
    /// Local PFC.
    pub pfc: Option<IeeePfc>,
    /// APP table (IEEE and non-IEEE selectors).
    pub apps: Vec<DcbApp>,
    /// Per-TC rate limits.
    pub maxrate: Option<IeeeMaxrate>,
    /// Receive buffer split.
    pub buffer: Option<DcbBuffer>,
    /// Peer's ETS.
    pub peer_ets: Option<IeeeEts>,
    /// Peer's PFC.
    pub peer_pfc: Option<IeeePfc>,
    /// DCBX mode bits, when the driver has `getdcbx`.
    pub dcbx: Option<u8>,
}

impl IeeeState {
    /// Collects the attributes of a DCB message.
    pub fn from_msg(m: &DcbMsg) -> Self {
        let mut s = Self::default();
        for a in &m.attrs {
            match a {
                DcbAttr::IfName(n) => s.ifname = Some(n.clone()),
                DcbAttr::Dcbx(d) => s.dcbx = Some(*d),
                DcbAttr::Ieee(list) => {
                    for i in list {
                        match i {
                            IeeeAttr::Ets(e) => s.ets = Some(*e),
                            IeeeAttr::Pfc(p) => s.pfc = Some(*p),
                            IeeeAttr::AppTable(apps) => s.apps.extend(apps.iter().filter_map(|a| match a {
                                AppAttr::Ieee(x) | AppAttr::Dcb(x) => Some(*x),
                                AppAttr::Other(_) => None,
                            })),
                            IeeeAttr::PeerEts(e) => s.peer_ets = Some(*e),
                            IeeeAttr::PeerPfc(p) => s.peer_pfc = Some(*p),
                            IeeeAttr::Maxrate(m) => s.maxrate = Some(*m),
                            IeeeAttr::Buffer(b) => s.buffer = Some(*b),
                            IeeeAttr::Other(_) => {}
                        }
                    }
                }
                DcbAttr::IeeeStatus(_) | DcbAttr::Other(_) => {}
            }
        }
        s
    }

    /// DSCP → priority entries of the APP table (selector 5).
    pub fn dscp_map(&self) -> std::collections::BTreeMap<u8, u8> {
        self.apps
            .iter()
            .filter(|a| a.selector == IEEE_8021QAZ_APP_SEL_DSCP && a.protocol < 64)
            .map(|a| (a.protocol as u8, a.priority))
            .collect()
    }
}

// ---------------------------------------------------------------- transport

/// A DCB request that failed.
#[derive(Debug, thiserror::Error)]
pub enum DcbError {
    /// The device has no DCB support (`EOPNOTSUPP`), does not exist (`ENODEV`),
    /// or the kernel has no DCB netlink (`CONFIG_DCB` off).
    #[error("{op} on {ifname}: DCB not supported by this device or kernel (errno {errno})")]
    Unsupported {
        /// The request, as its `dcb` CLI equivalent.
        op: String,
        /// Interface.
        ifname: String,
        /// Positive errno.
        errno: i32,
    },
    /// The kernel refused the request.
    #[error("{op} on {ifname}: kernel answered {}", std::io::Error::from_raw_os_error(*errno))]
    Kernel {
        /// The request.
        op: String,
        /// Interface.
        ifname: String,
        /// Positive errno.
        errno: i32,
    },
    /// The driver's SET handler returned a non-zero status in the reply.
    #[error("{op} on {ifname}: driver returned status {status}")]
    Driver {
        /// The request.
        op: String,
        /// Interface.
        ifname: String,
        /// `DCB_ATTR_IEEE`/`DCB_ATTR_DCBX` status byte.
        status: u8,
    },
    /// Socket error (open, send, receive, timeout).
    #[error("{op}: netlink socket: {source}")]
    Io {
        /// The request or socket step.
        op: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The reply did not parse.
    #[error("{op}: {source}")]
    Parse {
        /// The request.
        op: String,
        /// The parse error.
        #[source]
        source: ParseError,
    },
    /// The kernel's answer lacked what the request asks for.
    #[error("{op} on {ifname}: {what}")]
    BadReply {
        /// The request.
        op: String,
        /// Interface.
        ifname: String,
        /// What was missing.
        what: String,
    },
}

impl DcbError {
    /// Whether this means "no DCB here" rather than a failure.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, DcbError::Unsupported { .. })
    }
}

/// A synchronous `NETLINK_ROUTE` socket speaking DCB. It belongs to the netns of
/// the thread that opened it.
pub struct DcbSocket {
    sock: Socket,
    seq: u32,
}

impl std::fmt::Debug for DcbSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcbSocket").field("seq", &self.seq).finish()
    }
}

fn io_err(op: &str) -> impl FnOnce(std::io::Error) -> DcbError + '_ {
    move |source| DcbError::Io { op: op.to_owned(), source }
}

fn set_rcv_timeout(sock: &Socket, t: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: valid fd owned by `sock`, a properly sized timeval that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn recv_datagram(sock: &Socket) -> std::io::Result<Vec<u8>> {
    // DCB replies are a few hundred bytes; 64 KiB holds any netlink datagram
    // the kernel sends without MSG_TRUNC games.
    let mut buf: Vec<u8> = Vec::with_capacity(65536);
    sock.recv_from(&mut buf, 0)?;
    Ok(buf)
}

impl DcbSocket {
    /// Opens and binds a `NETLINK_ROUTE` socket with a 2 s receive timeout.
    pub fn open() -> Result<Self, DcbError> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(io_err("open NETLINK_ROUTE"))?;
        sock.bind_auto().map_err(io_err("bind NETLINK_ROUTE"))?;
        set_rcv_timeout(&sock, Duration::from_secs(2)).map_err(io_err("set SO_RCVTIMEO"))?;
        Ok(Self { sock, seq: 1 })
    }

    /// Sends `req` (seq assigned here) and collects the replies up to the ack.
    /// `op` names the request for errors (its `dcb` CLI form).
    pub fn request(&mut self, op: &str, ifname: &str, req: DcbMessage) -> Result<Vec<DcbMsg>, DcbError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let bytes = req.with_seq(seq).emit();
        let kernel = SocketAddr::new(0, 0);
        self.sock.send_to(&bytes, &kernel, 0).map_err(io_err(op))?;
        let mut replies = Vec::new();
        loop {
            let buf = recv_datagram(&self.sock).map_err(io_err(op))?;
            let msgs =
                parse_messages(&buf).map_err(|source| DcbError::Parse { op: op.to_owned(), source })?;
            for m in msgs {
                if m.header.seq != seq {
                    continue;
                }
                match m.payload {
                    Payload::Dcb(d) => replies.push(d),
                    Payload::Error { error: 0, .. } | Payload::Done(_) => return Ok(replies),
                    Payload::Error { error, .. } => {
                        let errno = error.saturating_neg();
                        let (op, ifname) = (op.to_owned(), ifname.to_owned());
                        return Err(if errno == libc::EOPNOTSUPP || errno == libc::ENODEV {
                            DcbError::Unsupported { op, ifname, errno }
                        } else {
                            DcbError::Kernel { op, ifname, errno }
                        });
                    }
                    Payload::Other(_) => {}
                }
            }
        }
    }

    /// `dcb pfc/ets/app/buffer show dev <ifname>`: the IEEE view, with the DCBX
    /// bits when the driver reports them.
    pub fn ieee_get(&mut self, ifname: &str) -> Result<IeeeState, DcbError> {
        let op = "RTM_GETDCB DCB_CMD_IEEE_GET (dcb pfc/ets/app/buffer show)".to_string();
        let replies = self.request(&op, ifname, DcbMessage::ieee_get(ifname))?;
        let m =
            replies.iter().find(|m| m.cmd == cmd::DCB_CMD_IEEE_GET).ok_or_else(|| DcbError::BadReply {
                op: op.clone(),
                ifname: ifname.into(),
                what: "no DCB_CMD_IEEE_GET reply".into(),
            })?;
        Ok(IeeeState::from_msg(m))
    }

    /// `dcb dcbx show dev <ifname>`: the `DCB_CAP_DCBX_*` bits.
    pub fn get_dcbx(&mut self, ifname: &str) -> Result<u8, DcbError> {
        let op = "RTM_GETDCB DCB_CMD_GDCBX (dcb dcbx show)".to_string();
        let replies = self.request(&op, ifname, DcbMessage::get_dcbx(ifname))?;
        replies
            .iter()
            .flat_map(|m| m.attrs.iter())
            .find_map(|a| match a {
                DcbAttr::Dcbx(d) => Some(*d),
                _ => None,
            })
            .ok_or_else(|| DcbError::BadReply { op, ifname: ifname.into(), what: "no DCB_ATTR_DCBX".into() })
    }

    /// Sends a SET/DEL request and checks the driver's status byte.
    pub fn set(&mut self, op: &str, ifname: &str, req: DcbMessage) -> Result<(), DcbError> {
        let replies = self.request(op, ifname, req)?;
        for a in replies.iter().flat_map(|m| m.attrs.iter()) {
            match a {
                DcbAttr::IeeeStatus(s) | DcbAttr::Dcbx(s) if *s != 0 => {
                    return Err(DcbError::Driver { op: op.into(), ifname: ifname.into(), status: *s })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `dcb pfc set dev <ifname> prio-pfc all:off <p>:on …`: the driver takes `pfc_en`,
    /// `delay` and `mbc`, so start from the current [`IeeePfc`] to keep the delay.
    pub fn set_pfc(&mut self, ifname: &str, pfc: IeeePfc) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_IEEE_SET pfc_en {:#04x} (dcb pfc set)", pfc.pfc_en);
        self.set(&op, ifname, DcbMessage::set_pfc(ifname, pfc))
    }

    /// `dcb app add dev <ifname> dscp-prio D:P …`.
    pub fn add_apps(&mut self, ifname: &str, apps: &[DcbApp]) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_IEEE_SET {} APP entries (dcb app add)", apps.len());
        self.set(&op, ifname, DcbMessage::add_apps(ifname, apps))
    }

    /// `dcb app del dev <ifname> dscp-prio D:P …`.
    pub fn del_apps(&mut self, ifname: &str, apps: &[DcbApp]) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_IEEE_DEL {} APP entries (dcb app del)", apps.len());
        self.set(&op, ifname, DcbMessage::del_apps(ifname, apps))
    }

    /// `dcb dcbx set dev <ifname> …` with raw `DCB_CAP_DCBX_*` bits.
    pub fn set_dcbx(&mut self, ifname: &str, bits: u8) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_SDCBX {bits:#04x} (dcb dcbx set)");
        self.set(&op, ifname, DcbMessage::set_dcbx(ifname, bits))
    }
}

/// Opens a `NETLINK_ROUTE` socket joined to [`RTNLGRP_DCB`]. Each datagram it
/// receives parses with [`parse_messages`]; a `DCB_CMD_IEEE_GET` (or
/// `DCB_CMD_CEE_GET`) message names the interface whose DCB settings changed.
/// The generic multicast subscriber in `netlink::events` can join the same group.
pub fn subscribe() -> Result<Socket, DcbError> {
    let mut sock = Socket::new(NETLINK_ROUTE).map_err(io_err("open NETLINK_ROUTE"))?;
    sock.bind_auto().map_err(io_err("bind NETLINK_ROUTE"))?;
    sock.add_membership(RTNLGRP_DCB).map_err(io_err("join RTNLGRP_DCB"))?;
    Ok(sock)
}

/// Reads one datagram from a [`subscribe`]d socket and returns the names of
/// interfaces whose DCB settings changed.
pub fn recv_changes(sock: &Socket) -> Result<Vec<String>, DcbError> {
    let buf = recv_datagram(sock).map_err(io_err("recv RTNLGRP_DCB"))?;
    let msgs = parse_messages(&buf)
        .map_err(|source| DcbError::Parse { op: "RTNLGRP_DCB notification".into(), source })?;
    Ok(msgs
        .iter()
        .filter_map(|m| match &m.payload {
            Payload::Dcb(d) => d.attrs.iter().find_map(|a| match a {
                DcbAttr::IfName(n) => Some(n.clone()),
                _ => None,
            }),
            _ => None,
        })
        .collect())
}
