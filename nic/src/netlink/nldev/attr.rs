//! The nldev attribute enum (`enum rdma_nldev_attr`, include/uapi/rdma/rdma_netlink.h)
//! and its codec. Unknown attributes are kept verbatim.

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use super::*;
use crate::netlink::nla;

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

impl Nla for NldevAttr {
    fn value_len(&self) -> usize {
        use NldevAttr::*;
        match self {
            DevIndex(_) | PortIndex(_) | NdevIndex(_) | NetNsFd(_) => 4,
            CapFlags(_) | NodeGuid(_) | SysImageGuid(_) => 8,
            PortState(_) | PortPhysState(_) | DevNodeType(_) | SysNetnsMode(_) => 1,
            DevName(s) | FwVersion(s) | NdevName(s) | DevProtocol(s) => nla::string_len(s),
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
            DevName(s) | FwVersion(s) | NdevName(s) | DevProtocol(s) => nla::emit_string(buf, s),
            Pad(v) => buf[..v.len()].copy_from_slice(v),
            Other(n) => n.emit_value(buf),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for NldevAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        use NldevAttr::*;
        Ok(match buf.kind() {
            RDMA_NLDEV_ATTR_DEV_INDEX => DevIndex(nla::u32(v, "RDMA_NLDEV_ATTR_DEV_INDEX")?),
            RDMA_NLDEV_ATTR_DEV_NAME => DevName(nla::string(v, "RDMA_NLDEV_ATTR_DEV_NAME")?),
            RDMA_NLDEV_ATTR_PORT_INDEX => PortIndex(nla::u32(v, "RDMA_NLDEV_ATTR_PORT_INDEX")?),
            RDMA_NLDEV_ATTR_CAP_FLAGS => CapFlags(nla::u64(v, "RDMA_NLDEV_ATTR_CAP_FLAGS")?),
            RDMA_NLDEV_ATTR_FW_VERSION => FwVersion(nla::string(v, "RDMA_NLDEV_ATTR_FW_VERSION")?),
            RDMA_NLDEV_ATTR_NODE_GUID => NodeGuid(nla::u64(v, "RDMA_NLDEV_ATTR_NODE_GUID")?),
            RDMA_NLDEV_ATTR_SYS_IMAGE_GUID => SysImageGuid(nla::u64(v, "RDMA_NLDEV_ATTR_SYS_IMAGE_GUID")?),
            RDMA_NLDEV_ATTR_PORT_STATE => PortState(nla::u8(v, "RDMA_NLDEV_ATTR_PORT_STATE")?),
            RDMA_NLDEV_ATTR_PORT_PHYS_STATE => PortPhysState(nla::u8(v, "RDMA_NLDEV_ATTR_PORT_PHYS_STATE")?),
            RDMA_NLDEV_ATTR_DEV_NODE_TYPE => DevNodeType(nla::u8(v, "RDMA_NLDEV_ATTR_DEV_NODE_TYPE")?),
            RDMA_NLDEV_ATTR_NDEV_INDEX => NdevIndex(nla::u32(v, "RDMA_NLDEV_ATTR_NDEV_INDEX")?),
            RDMA_NLDEV_ATTR_NDEV_NAME => NdevName(nla::string(v, "RDMA_NLDEV_ATTR_NDEV_NAME")?),
            RDMA_NLDEV_SYS_ATTR_NETNS_MODE => SysNetnsMode(nla::u8(v, "RDMA_NLDEV_SYS_ATTR_NETNS_MODE")?),
            RDMA_NLDEV_ATTR_DEV_PROTOCOL => DevProtocol(nla::string(v, "RDMA_NLDEV_ATTR_DEV_PROTOCOL")?),
            RDMA_NLDEV_NET_NS_FD => NetNsFd(nla::u32(v, "RDMA_NLDEV_NET_NS_FD")?),
            RDMA_NLDEV_ATTR_PAD => Pad(v.to_vec()),
            _ => Other(nla::kept(buf)),
        })
    }
}
