//! The DCB message body ([`DcbMsg`]: `struct dcbmsg` and its attributes),
//! its encoder and decoder, and the decoded view of a port ([`IeeeState`]).
//! Framing (`nlmsghdr`, ACKs, errors) is the crate's one transport's.

use netlink_packet_core::{
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkSerializable, NLA_TYPE_MASK,
};

use super::structs::{u16_at, DcbApp, DcbBuffer, IeeeEts, IeeeMaxrate, IeeePfc};
use super::*;
use crate::netlink::nla;
use crate::netlink::transport::{self, FrameError};

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

/// A DCB message body: `struct dcbmsg` and its attributes, with the
/// `nlmsg_type` it travels under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcbMsg {
    /// `nlmsg_type`: [`RTM_GETDCB`] or [`RTM_SETDCB`] (replies and
    /// notifications use the type of the command they answer).
    pub message_type: u16,
    /// `dcb_family` (AF_UNSPEC = 0 in everything the kernel sends).
    pub family: u8,
    /// `cmd` (`DCB_CMD_*`).
    pub cmd: u8,
    pub attrs: Vec<DcbAttr>,
}

/// A whole DCB netlink message: `nlmsghdr` and a [`DcbMsg`] (or a control message).
pub type DcbMessage = NetlinkMessage<DcbMsg>;

/// Why bytes are not a DCB netlink message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed DCB netlink message at byte {offset}: {what}")]
pub struct ParseError {
    /// Offset of the fault: in the buffer handed to [`parse_messages`], or in
    /// the body when [`DcbMsg`] is decoded on its own.
    pub offset: usize,
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

impl DcbMsg {
    /// The body's wire bytes (`struct dcbmsg` then the attributes, each padded).
    pub fn body(&self) -> Vec<u8> {
        let mut body = vec![self.family, self.cmd, 0, 0];
        self.attrs.iter().for_each(|a| emit_attr(&mut body, a));
        body
    }

    /// Decodes a body (everything after `nlmsghdr`) of a message of
    /// `message_type`; offsets in errors count from the start of `body`.
    pub fn parse(message_type: u16, body: &[u8]) -> Result<Self, ParseError> {
        if message_type != RTM_GETDCB && message_type != RTM_SETDCB {
            return Err(perr(0, format!("nlmsg_type {message_type} is not RTM_GETDCB or RTM_SETDCB")));
        }
        parse_dcb(message_type, body, 0)
    }

    fn new(message_type: u16, cmd: u8, attrs: Vec<DcbAttr>) -> Self {
        Self { message_type, family: libc::AF_UNSPEC as u8, cmd, attrs }
    }

    /// `dcb ets show dev X; dcb pfc show dev X; dcb app show dev X; dcb buffer show dev X`
    /// in one request: `RTM_GETDCB` `DCB_CMD_IEEE_GET` with `DCB_ATTR_IFNAME`.
    pub fn ieee_get(ifname: &str) -> Self {
        Self::new(RTM_GETDCB, cmd::DCB_CMD_IEEE_GET, vec![DcbAttr::IfName(ifname.into())])
    }

    /// `dcb dcbx show dev X`: `RTM_GETDCB` `DCB_CMD_GDCBX`.
    pub fn get_dcbx(ifname: &str) -> Self {
        Self::new(RTM_GETDCB, cmd::DCB_CMD_GDCBX, vec![DcbAttr::IfName(ifname.into())])
    }

    /// `dcb dcbx set dev X host ieee` (bits `DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE`):
    /// `RTM_SETDCB` `DCB_CMD_SDCBX` with `DCB_ATTR_DCBX`.
    pub fn set_dcbx(ifname: &str, bits: u8) -> Self {
        Self::new(RTM_SETDCB, cmd::DCB_CMD_SDCBX, vec![DcbAttr::IfName(ifname.into()), DcbAttr::Dcbx(bits)])
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
        Self::new(
            RTM_SETDCB,
            cmd::DCB_CMD_IEEE_DEL,
            vec![DcbAttr::IfName(ifname.into()), DcbAttr::Ieee(vec![IeeeAttr::AppTable(app_attrs(apps))])],
        )
    }

    /// Any `DCB_CMD_IEEE_SET` with the given IEEE attributes.
    pub fn ieee_set(ifname: &str, attrs: Vec<IeeeAttr>) -> Self {
        Self::new(
            RTM_SETDCB,
            cmd::DCB_CMD_IEEE_SET,
            vec![DcbAttr::IfName(ifname.into()), DcbAttr::Ieee(attrs)],
        )
    }
}

impl NetlinkSerializable for DcbMsg {
    fn message_type(&self) -> u16 {
        self.message_type
    }
    fn buffer_len(&self) -> usize {
        self.body().len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        let body = self.body();
        buffer[..body.len()].copy_from_slice(&body);
    }
}

impl NetlinkDeserializable for DcbMsg {
    type Error = ParseError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Self::parse(header.message_type, payload)
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

/// A uapi struct of exactly `want` bytes (`from_bytes` refuses any other
/// size): the same bound as [`nla::array`], worded as the size found first
/// (the agent's and operator's diagnostics quote this form).
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

fn parse_dcb(message_type: u16, body: &[u8], base: usize) -> Result<DcbMsg, ParseError> {
    if body.len() < DCBMSG_LEN {
        return Err(perr(base, format!("struct dcbmsg needs 4 bytes, got {}", body.len())));
    }
    let mut attrs = Vec::new();
    walk(&body[DCBMSG_LEN..], base + DCBMSG_LEN, |kind, v, at| {
        attrs.push(match kind & NLA_TYPE_MASK {
            attr::DCB_ATTR_IFNAME if kind == attr::DCB_ATTR_IFNAME => {
                DcbAttr::IfName(nla::string(v, "DCB_ATTR_IFNAME").map_err(|e| perr(at, e.to_string()))?)
            }
            attr::DCB_ATTR_IEEE if v.len() == 1 && kind == attr::DCB_ATTR_IEEE => DcbAttr::IeeeStatus(v[0]),
            attr::DCB_ATTR_IEEE => DcbAttr::Ieee(parse_ieee(v, at)?),
            attr::DCB_ATTR_DCBX if kind == attr::DCB_ATTR_DCBX => {
                DcbAttr::Dcbx(nla::u8(v, "DCB_ATTR_DCBX").map_err(|e| perr(at, e.to_string()))?)
            }
            _ => DcbAttr::Other(RawNla { kind, value: v.to_vec() }),
        });
        Ok(())
    })?;
    Ok(DcbMsg { message_type, family: body[0], cmd: body[1], attrs })
}

/// Parses every netlink message in `buf` (one `recv` may hold several).
///
/// Never panics; rejects truncated headers, lengths pointing past the buffer,
/// messages that are neither DCB nor netlink control messages, and known
/// attributes whose size differs from the uapi struct. Unknown attributes are
/// kept as [`RawNla`]. Offsets in errors count from the start of `buf`.
pub fn parse_messages(buf: &[u8]) -> Result<Vec<DcbMessage>, ParseError> {
    transport::parse_datagram::<DcbMsg>(buf).map_err(|e| match e {
        FrameError::Frame { offset, what } => perr(offset, what),
        FrameError::Body { offset, source } => perr(offset + source.offset, source.what),
    })
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
