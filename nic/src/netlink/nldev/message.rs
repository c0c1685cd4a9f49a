//! nldev messages: the command and its attributes, the requests we send, and
//! the device and port views of the kernel's replies.

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, NlasIterator, Parseable,
};

use super::*;
use crate::inventory::NetnsMode;

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
    pub index: u32,
    /// Device name (`mlx5_3`).
    pub name: String,
    pub ports: u32,
    /// Node GUID (host order).
    pub node_guid: Option<u64>,
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
    pub dev_index: u32,
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
