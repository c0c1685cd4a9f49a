//! RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`): list RDMA devices,
//! move one into a network namespace, read the subsystem's netns mode.
//!
//! Constants come from `include/uapi/rdma/rdma_netlink.h` (Linux 6.x; the
//! attribute enum is ABI: "don't change the order or add anything between").
//!
//! Message layout: a plain `nlmsghdr` whose type is
//! `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd) = (5 << 10) + cmd`, followed directly
//! by attributes (no family header). Integers are in host byte order, strings
//! NUL-terminated.
//!
//! ```text
//! +----------------------+----------------------+-------------------------+
//! | nlmsghdr (16 bytes)  | nla DEV_INDEX u32    | nla NET_NS_FD u32 | ... |
//! | type = 0x1400 | cmd  | len=8 type=1 value   | len=8 type=68 value     |
//! +----------------------+----------------------+-------------------------+
//! ```
//!
//! Requests, by their `rdma` (iproute2) equivalent:
//! - [`get_device`] / [`dump_devices`]: `rdma dev show [DEV]`
//! - [`dump_ports`]: `rdma link show dev DEV` (one device per dump)
//! - [`set_netns`]: `rdma dev set DEV netns NS`
//! - [`sys_get`]: `rdma system show netns`
//! - [`sys_set_netns_mode`]: `rdma system set netns shared|exclusive`

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, Nla,
    NlaBuffer, NlasIterator, Parseable,
};

use super::transport::{Client, NlError, Transport};
use crate::inventory::NetnsMode;

/// `RDMA_NL_NLDEV`: the nldev client number.
pub const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GET_TYPE(client, op)`.
pub const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_CLIENT(type)`.
pub const fn rdma_nl_get_client(ty: u16) -> u16 {
    (ty & (((1 << 6) - 1) << 10)) >> 10
}

/// `RDMA_NL_GET_OP(type)`.
pub const fn rdma_nl_get_op(ty: u16) -> u16 {
    ty & ((1 << 10) - 1)
}

/// `RDMA_NLDEV_CMD_GET`: get device info (can dump).
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SET`: set device properties (name, netns, DIM).
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
/// `RDMA_NLDEV_CMD_PORT_GET`: port info (can dump).
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
/// `RDMA_NLDEV_CMD_SYS_GET`: subsystem properties.
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_CMD_SYS_SET`: set subsystem properties.
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;

/// `RDMA_NLDEV_ATTR_PAD` (= UNSPEC): 64-bit alignment padding.
pub const RDMA_NLDEV_ATTR_PAD: u16 = 0;
/// `RDMA_NLDEV_ATTR_DEV_INDEX`, u32.
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME`, string.
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_PORT_INDEX`, u32 (in a device reply: the number of ports).
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// `RDMA_NLDEV_ATTR_CAP_FLAGS`, u64.
pub const RDMA_NLDEV_ATTR_CAP_FLAGS: u16 = 4;
/// `RDMA_NLDEV_ATTR_FW_VERSION`, string.
pub const RDMA_NLDEV_ATTR_FW_VERSION: u16 = 5;
/// `RDMA_NLDEV_ATTR_NODE_GUID`, u64 (host order).
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
/// `RDMA_NLDEV_ATTR_SYS_IMAGE_GUID`, u64.
pub const RDMA_NLDEV_ATTR_SYS_IMAGE_GUID: u16 = 7;
/// `RDMA_NLDEV_ATTR_PORT_STATE`, u8 (IB port state: 1 down … 4 active).
pub const RDMA_NLDEV_ATTR_PORT_STATE: u16 = 12;
/// `RDMA_NLDEV_ATTR_PORT_PHYS_STATE`, u8 (5 = LinkUp).
pub const RDMA_NLDEV_ATTR_PORT_PHYS_STATE: u16 = 13;
/// `RDMA_NLDEV_ATTR_DEV_NODE_TYPE`, u8.
pub const RDMA_NLDEV_ATTR_DEV_NODE_TYPE: u16 = 14;
/// `RDMA_NLDEV_ATTR_NDEV_INDEX`, u32: ifindex of the port's netdev.
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
/// `RDMA_NLDEV_ATTR_NDEV_NAME`, string: name of the port's netdev.
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE`, u8: 1 shared, 0 exclusive.
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// `RDMA_NLDEV_ATTR_DEV_PROTOCOL`, string (`roce`, `ib`, `iw`, …).
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// `RDMA_NLDEV_NET_NS_FD`, u32: fd of the target netns in a SET.
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;

/// `IB_DEVICE_NAME_MAX` (include/rdma/ib_verbs.h): names are shorter than this.
pub const IB_DEVICE_NAME_MAX: usize = 64;

/// One nldev attribute. Unknown ones are kept verbatim in [`NldevAttr::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NldevAttr {
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`.
    DevIndex(u32),
    /// `RDMA_NLDEV_ATTR_DEV_NAME`.
    DevName(String),
    /// `RDMA_NLDEV_ATTR_PORT_INDEX`.
    PortIndex(u32),
    /// `RDMA_NLDEV_ATTR_CAP_FLAGS`.
    CapFlags(u64),
    /// `RDMA_NLDEV_ATTR_FW_VERSION`.
    FwVersion(String),
    /// `RDMA_NLDEV_ATTR_NODE_GUID`.
    NodeGuid(u64),
    /// `RDMA_NLDEV_ATTR_SYS_IMAGE_GUID`.
    SysImageGuid(u64),
    /// `RDMA_NLDEV_ATTR_PORT_STATE`.
    PortState(u8),
    /// `RDMA_NLDEV_ATTR_PORT_PHYS_STATE`.
    PortPhysState(u8),
    /// `RDMA_NLDEV_ATTR_DEV_NODE_TYPE`.
    DevNodeType(u8),
    /// `RDMA_NLDEV_ATTR_NDEV_INDEX`.
    NdevIndex(u32),
    /// `RDMA_NLDEV_ATTR_NDEV_NAME`.
    NdevName(String),
    /// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE`.
    SysNetnsMode(u8),
    /// `RDMA_NLDEV_ATTR_DEV_PROTOCOL`.
    DevProtocol(String),
    /// `RDMA_NLDEV_NET_NS_FD`.
    NetNsFd(u32),
    /// `RDMA_NLDEV_ATTR_PAD` (only ever received; carries no value we use).
    Pad(Vec<u8>),
    /// Anything else.
    Other(DefaultNla),
}

fn str_len(s: &str) -> usize {
    s.len() + 1
}

fn emit_str(buf: &mut [u8], s: &str) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

impl Nla for NldevAttr {
    fn value_len(&self) -> usize {
        use NldevAttr::*;
        match self {
            DevIndex(_) | PortIndex(_) | NdevIndex(_) | NetNsFd(_) => 4,
            CapFlags(_) | NodeGuid(_) | SysImageGuid(_) => 8,
            PortState(_) | PortPhysState(_) | DevNodeType(_) | SysNetnsMode(_) => 1,
            DevName(s) | FwVersion(s) | NdevName(s) | DevProtocol(s) => str_len(s),
            Pad(v) => v.len(),
            Other(n) => n.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        use NldevAttr::*;
        match self {
            DevIndex(_) => RDMA_NLDEV_ATTR_DEV_INDEX,
            DevName(_) => RDMA_NLDEV_ATTR_DEV_NAME,
            PortIndex(_) => RDMA_NLDEV_ATTR_PORT_INDEX,
            CapFlags(_) => RDMA_NLDEV_ATTR_CAP_FLAGS,
            FwVersion(_) => RDMA_NLDEV_ATTR_FW_VERSION,
            NodeGuid(_) => RDMA_NLDEV_ATTR_NODE_GUID,
            SysImageGuid(_) => RDMA_NLDEV_ATTR_SYS_IMAGE_GUID,
            PortState(_) => RDMA_NLDEV_ATTR_PORT_STATE,
            PortPhysState(_) => RDMA_NLDEV_ATTR_PORT_PHYS_STATE,
            DevNodeType(_) => RDMA_NLDEV_ATTR_DEV_NODE_TYPE,
            NdevIndex(_) => RDMA_NLDEV_ATTR_NDEV_INDEX,
            NdevName(_) => RDMA_NLDEV_ATTR_NDEV_NAME,
            SysNetnsMode(_) => RDMA_NLDEV_SYS_ATTR_NETNS_MODE,
            DevProtocol(_) => RDMA_NLDEV_ATTR_DEV_PROTOCOL,
            NetNsFd(_) => RDMA_NLDEV_NET_NS_FD,
            Pad(_) => RDMA_NLDEV_ATTR_PAD,
            Other(n) => n.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        use NldevAttr::*;
        match self {
            DevIndex(v) | PortIndex(v) | NdevIndex(v) | NetNsFd(v) => {
                buf[..4].copy_from_slice(&v.to_ne_bytes());
            }
            CapFlags(v) | NodeGuid(v) | SysImageGuid(v) => buf[..8].copy_from_slice(&v.to_ne_bytes()),
            PortState(v) | PortPhysState(v) | DevNodeType(v) | SysNetnsMode(v) => buf[0] = *v,
            DevName(s) | FwVersion(s) | NdevName(s) | DevProtocol(s) => emit_str(buf, s),
            Pad(v) => buf[..v.len()].copy_from_slice(v),
            Other(n) => n.emit_value(buf),
        }
    }
}

fn parse_u32(v: &[u8], what: &str) -> Result<u32, DecodeError> {
    <[u8; 4]>::try_from(v)
        .map(u32::from_ne_bytes)
        .map_err(|_| DecodeError::from(format!("{what}: expected 4 bytes, got {}", v.len())))
}

fn parse_u64(v: &[u8], what: &str) -> Result<u64, DecodeError> {
    <[u8; 8]>::try_from(v)
        .map(u64::from_ne_bytes)
        .map_err(|_| DecodeError::from(format!("{what}: expected 8 bytes, got {}", v.len())))
}

fn parse_u8(v: &[u8], what: &str) -> Result<u8, DecodeError> {
    match v {
        [b] => Ok(*b),
        _ => Err(DecodeError::from(format!("{what}: expected 1 byte, got {}", v.len()))),
    }
}

fn parse_string(v: &[u8], what: &str) -> Result<String, DecodeError> {
    // The kernel puts NUL-terminated strings (nla_put_string); accept a missing NUL.
    let s = match v.iter().position(|b| *b == 0) {
        Some(n) => &v[..n],
        None => v,
    };
    if s.len() >= IB_DEVICE_NAME_MAX.max(256) {
        return Err(DecodeError::from(format!("{what}: string of {} bytes is too long", s.len())));
    }
    String::from_utf8(s.to_vec()).map_err(|_| DecodeError::from(format!("{what}: not UTF-8")))
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for NldevAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        use NldevAttr::*;
        Ok(match buf.kind() {
            RDMA_NLDEV_ATTR_DEV_INDEX => DevIndex(parse_u32(v, "RDMA_NLDEV_ATTR_DEV_INDEX")?),
            RDMA_NLDEV_ATTR_DEV_NAME => DevName(parse_string(v, "RDMA_NLDEV_ATTR_DEV_NAME")?),
            RDMA_NLDEV_ATTR_PORT_INDEX => PortIndex(parse_u32(v, "RDMA_NLDEV_ATTR_PORT_INDEX")?),
            RDMA_NLDEV_ATTR_CAP_FLAGS => CapFlags(parse_u64(v, "RDMA_NLDEV_ATTR_CAP_FLAGS")?),
            RDMA_NLDEV_ATTR_FW_VERSION => FwVersion(parse_string(v, "RDMA_NLDEV_ATTR_FW_VERSION")?),
            RDMA_NLDEV_ATTR_NODE_GUID => NodeGuid(parse_u64(v, "RDMA_NLDEV_ATTR_NODE_GUID")?),
            RDMA_NLDEV_ATTR_SYS_IMAGE_GUID => SysImageGuid(parse_u64(v, "RDMA_NLDEV_ATTR_SYS_IMAGE_GUID")?),
            RDMA_NLDEV_ATTR_PORT_STATE => PortState(parse_u8(v, "RDMA_NLDEV_ATTR_PORT_STATE")?),
            RDMA_NLDEV_ATTR_PORT_PHYS_STATE => PortPhysState(parse_u8(v, "RDMA_NLDEV_ATTR_PORT_PHYS_STATE")?),
            RDMA_NLDEV_ATTR_DEV_NODE_TYPE => DevNodeType(parse_u8(v, "RDMA_NLDEV_ATTR_DEV_NODE_TYPE")?),
            RDMA_NLDEV_ATTR_NDEV_INDEX => NdevIndex(parse_u32(v, "RDMA_NLDEV_ATTR_NDEV_INDEX")?),
            RDMA_NLDEV_ATTR_NDEV_NAME => NdevName(parse_string(v, "RDMA_NLDEV_ATTR_NDEV_NAME")?),
            RDMA_NLDEV_SYS_ATTR_NETNS_MODE => SysNetnsMode(parse_u8(v, "RDMA_NLDEV_SYS_ATTR_NETNS_MODE")?),
            RDMA_NLDEV_ATTR_DEV_PROTOCOL => DevProtocol(parse_string(v, "RDMA_NLDEV_ATTR_DEV_PROTOCOL")?),
            RDMA_NLDEV_NET_NS_FD => NetNsFd(parse_u32(v, "RDMA_NLDEV_NET_NS_FD")?),
            RDMA_NLDEV_ATTR_PAD => Pad(v.to_vec()),
            _ => Other(super::kept_nla(buf)),
        })
    }
}

/// An nldev message: the command (low 10 bits of the netlink type) and its
/// attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NldevMessage {
    /// `RDMA_NLDEV_CMD_*`.
    pub cmd: u16,
    /// Attributes, in wire order.
    pub attrs: Vec<NldevAttr>,
}

impl NldevMessage {
    /// Parses the payload (everything after `nlmsghdr`) of a message of netlink
    /// type `ty`. Rejects types of another RDMA netlink client.
    pub fn parse(ty: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        if rdma_nl_get_client(ty) != RDMA_NL_NLDEV {
            return Err(DecodeError::from(format!(
                "netlink type {ty:#x} is RDMA client {}, not RDMA_NL_NLDEV",
                rdma_nl_get_client(ty)
            )));
        }
        let mut attrs = Vec::new();
        for nla in NlasIterator::new(payload) {
            let nla = nla?;
            attrs.push(NldevAttr::parse(&nla)?);
        }
        Ok(Self { cmd: rdma_nl_get_op(ty), attrs })
    }

    /// The payload bytes (attributes, each padded to 4 bytes).
    pub fn payload(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.attrs.as_slice().buffer_len()];
        self.attrs.as_slice().emit(&mut buf);
        buf
    }
}

impl NetlinkSerializable for NldevMessage {
    fn message_type(&self) -> u16 {
        rdma_nl_get_type(RDMA_NL_NLDEV, self.cmd)
    }
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer);
    }
}

impl NetlinkDeserializable for NldevMessage {
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        Self::parse(header.message_type, payload)
    }
}

/// `rdma dev show DEV`: one device by index.
pub fn get_device(dev_index: u32) -> NldevMessage {
    NldevMessage { cmd: RDMA_NLDEV_CMD_GET, attrs: vec![NldevAttr::DevIndex(dev_index)] }
}

/// `rdma dev show`: every device in the socket's netns (send as a dump).
pub fn dump_devices() -> NldevMessage {
    NldevMessage { cmd: RDMA_NLDEV_CMD_GET, attrs: vec![] }
}

/// `rdma link show`: every port of every device (send as a dump).
///
/// The kernel's port dump (`nldev_port_get_dumpit`) requires a device index and
/// fails with EINVAL without one, so a node-wide listing is one dump per device.
pub fn dump_ports(dev_index: u32) -> NldevMessage {
    NldevMessage { cmd: RDMA_NLDEV_CMD_PORT_GET, attrs: vec![NldevAttr::DevIndex(dev_index)] }
}

/// `rdma dev set DEV netns NS`: moves device `dev_index` into the netns whose
/// descriptor is `netns_fd` (valid in the sending process). Only allowed in
/// exclusive mode.
pub fn set_netns(dev_index: u32, netns_fd: u32) -> NldevMessage {
    NldevMessage {
        cmd: RDMA_NLDEV_CMD_SET,
        attrs: vec![NldevAttr::DevIndex(dev_index), NldevAttr::NetNsFd(netns_fd)],
    }
}

/// `rdma system show netns`.
pub fn sys_get() -> NldevMessage {
    NldevMessage { cmd: RDMA_NLDEV_CMD_SYS_GET, attrs: vec![] }
}

/// `rdma system set netns shared|exclusive`.
pub fn sys_set_netns_mode(mode: NetnsMode) -> NldevMessage {
    NldevMessage {
        cmd: RDMA_NLDEV_CMD_SYS_SET,
        attrs: vec![NldevAttr::SysNetnsMode(match mode {
            NetnsMode::Shared => 1,
            NetnsMode::Exclusive => 0,
        })],
    }
}

/// An RDMA device as the kernel reports it in a `RDMA_NLDEV_CMD_GET` reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaDevice {
    /// Kernel device index.
    pub index: u32,
    /// Device name (`mlx5_3`).
    pub name: String,
    /// Number of ports.
    pub ports: u32,
    /// Node GUID (host order).
    pub node_guid: Option<u64>,
    /// Firmware version.
    pub fw_version: Option<String>,
    /// Protocol (`roce`, `ib`, …).
    pub protocol: Option<String>,
}

impl RdmaDevice {
    /// Reads a device reply; `None` without DEV_INDEX or DEV_NAME.
    pub fn from_message(m: &NldevMessage) -> Option<Self> {
        let mut d = RdmaDevice::default();
        let (mut idx, mut name) = (false, false);
        for a in &m.attrs {
            match a {
                NldevAttr::DevIndex(i) => (d.index, idx) = (*i, true),
                NldevAttr::DevName(n) => (d.name, name) = (n.clone(), true),
                NldevAttr::PortIndex(p) => d.ports = *p,
                NldevAttr::NodeGuid(g) => d.node_guid = Some(*g),
                NldevAttr::FwVersion(f) => d.fw_version = Some(f.clone()),
                NldevAttr::DevProtocol(p) => d.protocol = Some(p.clone()),
                _ => {}
            }
        }
        (idx && name).then_some(d)
    }

    /// The message a kernel would send for this device (for fixtures).
    pub fn to_message(&self) -> NldevMessage {
        let mut attrs = vec![NldevAttr::DevIndex(self.index), NldevAttr::DevName(self.name.clone())];
        attrs.push(NldevAttr::PortIndex(self.ports));
        if let Some(g) = self.node_guid {
            attrs.push(NldevAttr::NodeGuid(g));
        }
        if let Some(f) = &self.fw_version {
            attrs.push(NldevAttr::FwVersion(f.clone()));
        }
        if let Some(p) = &self.protocol {
            attrs.push(NldevAttr::DevProtocol(p.clone()));
        }
        NldevMessage { cmd: RDMA_NLDEV_CMD_GET, attrs }
    }
}

/// A port as reported by `RDMA_NLDEV_CMD_PORT_GET`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdmaPortInfo {
    /// Device index.
    pub dev_index: u32,
    /// Device name.
    pub dev_name: String,
    /// Port number (from 1).
    pub port: u32,
    /// IB port state (4 = ACTIVE).
    pub state: Option<u8>,
    /// Physical state (5 = LinkUp).
    pub phys_state: Option<u8>,
    /// ifindex of the netdev on this port (RoCE).
    pub ndev_index: Option<u32>,
    /// Name of that netdev.
    pub ndev_name: Option<String>,
}

impl RdmaPortInfo {
    /// Reads a port reply; `None` without device index and port.
    pub fn from_message(m: &NldevMessage) -> Option<Self> {
        let mut p = RdmaPortInfo::default();
        let (mut idx, mut port) = (false, false);
        for a in &m.attrs {
            match a {
                NldevAttr::DevIndex(i) => (p.dev_index, idx) = (*i, true),
                NldevAttr::DevName(n) => p.dev_name = n.clone(),
                NldevAttr::PortIndex(i) => (p.port, port) = (*i, true),
                NldevAttr::PortState(s) => p.state = Some(*s),
                NldevAttr::PortPhysState(s) => p.phys_state = Some(*s),
                NldevAttr::NdevIndex(i) => p.ndev_index = Some(*i),
                NldevAttr::NdevName(n) => p.ndev_name = Some(n.clone()),
                _ => {}
            }
        }
        (idx && port).then_some(p)
    }
}

/// Reads `RDMA_NLDEV_SYS_ATTR_NETNS_MODE` from a SYS_GET reply.
pub fn netns_mode_of(m: &NldevMessage) -> Option<NetnsMode> {
    m.attrs.iter().find_map(|a| match a {
        NldevAttr::SysNetnsMode(0) => Some(NetnsMode::Exclusive),
        NldevAttr::SysNetnsMode(_) => Some(NetnsMode::Shared),
        _ => None,
    })
}

/// nldev requests (open the client on [`super::transport::NETLINK_RDMA`]).
impl<T: Transport> Client<T> {
    /// `rdma dev show`: every RDMA device visible in the socket's netns.
    pub fn rdma_devices(&mut self) -> Result<Vec<RdmaDevice>, NlError> {
        let r = self.request("RDMA_NLDEV_CMD_GET dump", dump_devices(), true, 0)?;
        Ok(r.iter().filter_map(RdmaDevice::from_message).collect())
    }

    /// `rdma link show`: every port, one dump per device.
    pub fn rdma_ports(&mut self) -> Result<Vec<RdmaPortInfo>, NlError> {
        let mut ports = Vec::new();
        for dev in self.rdma_devices()? {
            let op = format!("RDMA_NLDEV_CMD_PORT_GET dump {}", dev.name);
            let r = self.request(&op, dump_ports(dev.index), true, 0)?;
            ports.extend(r.iter().filter_map(RdmaPortInfo::from_message));
        }
        Ok(ports)
    }

    /// `rdma system show netns`: the subsystem netns mode.
    pub fn rdma_netns_mode(&mut self) -> Result<NetnsMode, NlError> {
        let op = "RDMA_NLDEV_CMD_SYS_GET";
        let r = self.request(op, sys_get(), false, 0)?;
        r.iter().find_map(netns_mode_of).ok_or_else(|| NlError::Decode {
            op: op.into(),
            why: "reply without RDMA_NLDEV_SYS_ATTR_NETNS_MODE".into(),
        })
    }

    /// `rdma system set netns shared|exclusive`. The kernel refuses (EBUSY)
    /// while a network namespace other than init_net exists.
    pub fn rdma_set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), NlError> {
        let op = format!("RDMA_NLDEV_CMD_SYS_SET netns {mode:?}");
        self.request(&op, sys_set_netns_mode(mode), false, 0).map(|_| ())
    }

    /// `rdma dev set DEV netns NS`: moves a device into the netns of `netns_fd`.
    pub fn rdma_set_netns(&mut self, dev: &RdmaDevice, netns_fd: u32) -> Result<(), NlError> {
        let op = format!("RDMA_NLDEV_CMD_SET {} netns fd {netns_fd}", dev.name);
        self.request(&op, set_netns(dev.index, netns_fd), false, 0).map(|_| ())
    }
}
