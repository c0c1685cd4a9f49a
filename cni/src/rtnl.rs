//! The few rtnetlink requests the CNI makes, over `nic`'s sync transport.
//!
//! Each function states its `ip` equivalent.

use std::net::IpAddr;

use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkHeader, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nic::netlink::transport::{Client, NlError, SocketTransport, Transport, NETLINK_ROUTE};
use nic::netns::Netns;

use crate::error::{Error, Result};

/// `NLM_F_CREATE | NLM_F_EXCL` (include/uapi/linux/netlink.h).
const CREATE_EXCL: u16 = 0x400 | 0x200;

/// A route socket.
pub type Rtnl = Client<SocketTransport>;

/// Opens a route socket in the calling thread's netns.
pub fn open_here() -> Result<Rtnl> {
    SocketTransport::open(NETLINK_ROUTE).map(Client::new).map_err(|e| {
        Error::netlink("open NETLINK_ROUTE socket", NlError::Io { op: "socket".into(), source: e })
    })
}

/// Opens a route socket inside `ns`.
pub fn open_in(ns: &Netns) -> Result<Rtnl> {
    SocketTransport::open_in(ns, NETLINK_ROUTE).map_err(Error::Netns)?.map(Client::new).map_err(|e| {
        Error::netlink(
            "open NETLINK_ROUTE socket in pod netns",
            NlError::Io { op: "socket".into(), source: e },
        )
    })
}

/// What we read back about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// Name.
    pub name: String,
    /// MAC.
    pub mac: Option<Vec<u8>>,
    /// MTU.
    pub mtu: Option<u32>,
    /// Administratively up.
    pub up: bool,
}

fn to_link(m: &LinkMessage) -> Link {
    let mut l = Link {
        index: m.header.index,
        name: String::new(),
        mac: None,
        mtu: None,
        up: m.header.flags.contains(LinkFlags::Up),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => l.name = n.clone(),
            LinkAttribute::Address(a) => l.mac = Some(a.clone()),
            LinkAttribute::Mtu(m) => l.mtu = Some(*m),
            _ => {}
        }
    }
    l
}

/// `ip link show NAME`; `None` if there is no such link.
pub fn link_by_name<T: Transport>(c: &mut Client<T>, name: &str) -> Result<Option<Link>> {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    match c.request(&format!("RTM_GETLINK {name}"), RouteNetlinkMessage::GetLink(m), false, 0) {
        Ok(r) => Ok(r.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(to_link(l)),
            _ => None,
        })),
        Err(e) if e.errno() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(Error::netlink(format!("look up link {name}"), e)),
    }
}

fn setlink<T: Transport>(c: &mut Client<T>, op: String, m: LinkMessage) -> std::result::Result<(), NlError> {
    c.request(&op, RouteNetlinkMessage::SetLink(m), false, 0).map(|_| ())
}

/// `ip link set dev IDX netns NS name NEW` in one RTM_SETLINK: the move and
/// the rename happen together, so the VF is never visible in the pod under its
/// host name (a clash with an existing pod interface is impossible).
pub fn move_to_netns<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    ns_fd: i32,
    new_name: Option<&str>,
) -> std::result::Result<(), NlError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::NetNsFd(ns_fd));
    if let Some(n) = new_name {
        m.attributes.push(LinkAttribute::IfName(n.to_string()));
    }
    setlink(c, format!("RTM_SETLINK ifindex {index} netns fd {ns_fd} name {new_name:?}"), m)
}

/// `ip link set dev IDX name NEW` (the link must be down).
pub fn rename<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    new_name: &str,
) -> std::result::Result<(), NlError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::IfName(new_name.to_string()));
    setlink(c, format!("RTM_SETLINK ifindex {index} name {new_name}"), m)
}

/// `ip link set dev IDX [address MAC] [mtu MTU] up|down` in one request.
pub fn configure<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    mac: Option<&[u8]>,
    mtu: Option<u32>,
    up: Option<bool>,
) -> std::result::Result<(), NlError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    if let Some(up) = up {
        m.header.change_mask = LinkFlags::Up;
        if up {
            m.header.flags = LinkFlags::Up;
        }
    }
    if let Some(mac) = mac {
        m.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    if let Some(mtu) = mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    setlink(c, format!("RTM_SETLINK ifindex {index} mac/mtu/state"), m)
}

/// `ip addr add ADDR/PREFIX dev IDX` (IPv6: `nodad`, so it is usable at once).
pub fn add_address<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    addr: IpAddr,
    prefix: u8,
) -> std::result::Result<(), NlError> {
    let mut m = AddressMessage::default();
    m.header.index = index;
    m.header.prefix_len = prefix;
    m.header.family = match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    if addr.is_ipv6() {
        m.header.flags = AddressHeaderFlags::Nodad;
    }
    m.attributes.push(AddressAttribute::Local(addr));
    m.attributes.push(AddressAttribute::Address(addr));
    c.request(
        &format!("RTM_NEWADDR {addr}/{prefix} ifindex {index}"),
        RouteNetlinkMessage::NewAddress(m),
        false,
        CREATE_EXCL,
    )
    .map(|_| ())
}

/// Addresses on link `index` (`ip addr show dev IDX`), as `(addr, prefix)`.
pub fn addresses<T: Transport>(
    c: &mut Client<T>,
    index: u32,
) -> std::result::Result<Vec<(IpAddr, u8)>, NlError> {
    let r =
        c.request("RTM_GETADDR dump", RouteNetlinkMessage::GetAddress(AddressMessage::default()), true, 0)?;
    Ok(r.iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) if a.header.index == index => a
                .attributes
                .iter()
                .find_map(|x| match x {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                })
                .or_else(|| {
                    a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                })
                .map(|ip| (ip, a.header.prefix_len)),
            _ => None,
        })
        .collect())
}

fn route_addr(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

/// `ip route add DST/PREFIX [via GW] dev IDX`.
pub fn add_route<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    dst: IpAddr,
    prefix: u8,
    gw: Option<IpAddr>,
) -> std::result::Result<(), NlError> {
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: if dst.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 },
        destination_prefix_length: prefix,
        table: RouteHeader::RT_TABLE_MAIN,
        protocol: RouteProtocol::Boot,
        scope: if gw.is_some() { RouteScope::Universe } else { RouteScope::Link },
        kind: RouteType::Unicast,
        ..RouteHeader::default()
    };
    if prefix > 0 {
        m.attributes.push(RouteAttribute::Destination(route_addr(dst)));
    }
    if let Some(g) = gw {
        m.attributes.push(RouteAttribute::Gateway(route_addr(g)));
    }
    m.attributes.push(RouteAttribute::Oif(index));
    c.request(
        &format!("RTM_NEWROUTE {dst}/{prefix} via {gw:?} ifindex {index}"),
        RouteNetlinkMessage::NewRoute(m),
        false,
        CREATE_EXCL,
    )
    .map(|_| ())
}

/// The name of link `index`, if it exists.
pub fn link_by_index_name<T: Transport>(c: &mut Client<T>, index: u32) -> Option<String> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    let r =
        c.request(&format!("RTM_GETLINK ifindex {index}"), RouteNetlinkMessage::GetLink(m), false, 0).ok()?;
    r.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewLink(l) => Some(to_link(l).name),
        _ => None,
    })
}
