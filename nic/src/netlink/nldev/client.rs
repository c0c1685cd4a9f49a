//! The [`Nldev`] handle: RDMA netlink requests over the crate's one transport.

use std::io;

use super::*;
use crate::inventory::NetnsMode;
use crate::netlink::transport::{Client, NlError, OpenInError, SocketTransport, Transport, NETLINK_RDMA};
use crate::netns::Netns;

/// An RDMA netlink socket (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`): lists the
/// RDMA devices and ports of its netns, moves devices between namespaces and
/// reads or sets the subsystem's netns mode. Each method is one `rdma`
/// (iproute2) command.
#[derive(Debug)]
pub struct Nldev<T = SocketTransport> {
    client: Client<T>,
}

impl Nldev<SocketTransport> {
    /// Opens a `NETLINK_RDMA` socket in the calling thread's netns. Fails with
    /// `EPROTONOSUPPORT` when the kernel has no RDMA netlink (ib_core not loaded).
    pub fn open() -> io::Result<Self> {
        SocketTransport::open(NETLINK_RDMA).map(Self::new)
    }

    /// Opens a `NETLINK_RDMA` socket inside `ns`; it lists and moves the
    /// devices of `ns`, whatever thread uses it later.
    pub fn open_in(ns: &Netns) -> Result<Self, OpenInError> {
        SocketTransport::open_in(ns, NETLINK_RDMA).map(Self::new)
    }
}

impl<T: Transport> Nldev<T> {
    /// nldev over `transport` (a [`SocketTransport`] on `NETLINK_RDMA`, or
    /// recorded answers).
    pub fn new(transport: T) -> Self {
        Self { client: Client::new(transport) }
    }

    /// The transport (e.g. to read [`crate::netlink::transport::Recorded::sent`]).
    pub fn transport(&self) -> &T {
        self.client.transport()
    }

    /// Sends any nldev message (as a dump when `dump`) and returns the
    /// replies up to the ACK or `NLMSG_DONE`; `op` names it in errors. The
    /// methods below are this with the request built and the reply read.
    pub fn request(&mut self, op: &str, msg: NldevMessage, dump: bool) -> Result<Vec<NldevMessage>, NlError> {
        self.client.request(op, msg, dump, 0)
    }

    /// `rdma dev show`: every RDMA device visible in the socket's netns.
    pub fn devices(&mut self) -> Result<Vec<RdmaDevice>, NlError> {
        let r = self.request("RDMA_NLDEV_CMD_GET dump", dump_devices(), true)?;
        Ok(r.iter().filter_map(RdmaDevice::from_message).collect())
    }

    /// `rdma link show`: every port, one dump per device.
    pub fn ports(&mut self) -> Result<Vec<RdmaPortInfo>, NlError> {
        let mut ports = Vec::new();
        for dev in self.devices()? {
            let op = format!("RDMA_NLDEV_CMD_PORT_GET dump {}", dev.name);
            let r = self.request(&op, dump_ports(dev.index), true)?;
            ports.extend(r.iter().filter_map(RdmaPortInfo::from_message));
        }
        Ok(ports)
    }

    /// `rdma system show netns`: the subsystem netns mode.
    pub fn netns_mode(&mut self) -> Result<NetnsMode, NlError> {
        let op = "RDMA_NLDEV_CMD_SYS_GET";
        let r = self.request(op, sys_get(), false)?;
        r.iter().find_map(netns_mode_of).ok_or_else(|| NlError::Decode {
            op: op.into(),
            why: "reply without RDMA_NLDEV_SYS_ATTR_NETNS_MODE".into(),
        })
    }

    /// `rdma system set netns shared|exclusive`. The kernel refuses (EBUSY)
    /// while a network namespace other than init_net exists.
    pub fn set_netns_mode(&mut self, mode: NetnsMode) -> Result<(), NlError> {
        let op = format!("RDMA_NLDEV_CMD_SYS_SET netns {mode:?}");
        self.request(&op, sys_set_netns_mode(mode), false).map(|_| ())
    }

    /// `rdma dev set DEV netns NS`: moves a device into the netns of `netns_fd`.
    pub fn set_netns(&mut self, dev: &RdmaDevice, netns_fd: u32) -> Result<(), NlError> {
        let op = format!("RDMA_NLDEV_CMD_SET {} netns fd {netns_fd}", dev.name);
        self.request(&op, set_netns(dev.index, netns_fd), false).map(|_| ())
    }
}
