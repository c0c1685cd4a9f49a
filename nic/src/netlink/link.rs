//! The rtnetlink link, address and route requests the CNI makes, over the
//! sync [`Client`] (one round trip each).
//!
//! Each function is documented by its `ip` equivalent. Every failure is a
//! [`LinkError`] naming what was asked and of which link; the kernel's own
//! answer (errno, extended ACK) is its source.
//!
//! ```no_run
//! use nic::netlink::link;
//! let mut c = link::open_here()?;
//! if let Some(l) = link::link_by_name(&mut c, "eth0")? {
//!     link::configure(&mut c, l.index, None, Some(9000), Some(true))?;
//! }
//! # Ok::<(), nic::netlink::link::LinkError>(())
//! ```

use std::io;
use std::net::IpAddr;

use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkHeader, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::transport::{Client, NlError, SocketTransport, Transport, NETLINK_ROUTE};
use crate::netns::{Netns, NetnsError};

/// `NLM_F_CREATE | NLM_F_EXCL` (include/uapi/linux/netlink.h).
const CREATE_EXCL: u16 = 0x400 | 0x200;

/// A route (`NETLINK_ROUTE`) socket.
pub type RouteSocket = Client<SocketTransport>;

/// Why a link request failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The route socket could not be opened.
    #[error("cannot open a NETLINK_ROUTE socket{}", if *in_other_netns { " in another network namespace" } else { "" })]
    Socket {
        /// The socket was to be opened in another netns ([`open_in`]).
        in_other_netns: bool,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The network namespace could not be entered to open the socket.
    #[error("cannot enter the network namespace to open a NETLINK_ROUTE socket")]
    Netns(#[source] NetnsError),
    /// The kernel refused a request, or the exchange failed.
    #[error("{op} link {link}")]
    Request {
        /// What was asked, e.g. `look up`, `move`, `add an address to`.
        op: &'static str,
        /// The link: its name, or `ifindex N`.
        link: String,
        /// The netlink error (its op is the request, e.g. `RTM_SETLINK ifindex 7 name net1`).
        #[source]
        source: NlError,
    },
}

impl LinkError {
    /// The kernel (or socket) errno, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            LinkError::Socket { source, .. } => source.raw_os_error(),
            LinkError::Netns(_) => None,
            LinkError::Request { source, .. } => source.errno(),
        }
    }

    fn request(op: &'static str, link: impl Into<String>) -> impl FnOnce(NlError) -> Self {
        let link = link.into();
        move |source| LinkError::Request { op, link, source }
    }
}

fn ifindex(index: u32) -> String {
    format!("ifindex {index}")
}

/// Opens a route socket in the calling thread's netns.
pub fn open_here() -> Result<RouteSocket, LinkError> {
    SocketTransport::open(NETLINK_ROUTE)
        .map(Client::new)
        .map_err(|source| LinkError::Socket { in_other_netns: false, source })
}

/// Opens a route socket inside `ns`; it stays there whatever thread uses it.
pub fn open_in(ns: &Netns) -> Result<RouteSocket, LinkError> {
    SocketTransport::open_in(ns, NETLINK_ROUTE)
        .map_err(LinkError::Netns)?
        .map(Client::new)
        .map_err(|source| LinkError::Socket { in_other_netns: true, source })
}

/// What we read back about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// ifindex.
    pub index: u32,
    /// Name (`IFLA_IFNAME`).
    pub name: String,
    /// MAC (`IFLA_ADDRESS`).
    pub mac: Option<Vec<u8>>,
    /// MTU (`IFLA_MTU`).
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
}

impl Link {
    fn of(m: &LinkMessage) -> Self {
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
}

/// One RTM_GETLINK; `ENODEV` (no such link) is `None`.
fn get_link<T: Transport>(
    c: &mut Client<T>,
    op: String,
    m: LinkMessage,
    link: String,
) -> Result<Option<Link>, LinkError> {
    match c.request(&op, RouteNetlinkMessage::GetLink(m), false, 0) {
        Ok(r) => Ok(r.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(Link::of(l)),
            _ => None,
        })),
        Err(e) if e.errno() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(LinkError::request("look up", link)(e)),
    }
}

/// `ip link show dev NAME`; `None` if there is no such link.
pub fn link_by_name<T: Transport>(c: &mut Client<T>, name: &str) -> Result<Option<Link>, LinkError> {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    get_link(c, format!("RTM_GETLINK {name}"), m, name.to_string())
}

/// `ip link show` of the link with ifindex `index`; `None` if there is none.
pub fn link_by_index<T: Transport>(c: &mut Client<T>, index: u32) -> Result<Option<Link>, LinkError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    get_link(c, format!("RTM_GETLINK ifindex {index}"), m, ifindex(index))
}

fn set_link<T: Transport>(
    c: &mut Client<T>,
    what: &'static str,
    op: String,
    m: LinkMessage,
) -> Result<(), LinkError> {
    let index = m.header.index;
    c.request(&op, RouteNetlinkMessage::SetLink(m), false, 0)
        .map(|_| ())
        .map_err(LinkError::request(what, ifindex(index)))
}

/// `ip link set dev IDX netns NS [name NEW]` in one RTM_SETLINK
/// (`IFLA_NET_NS_FD` + `IFLA_IFNAME`): the move and the rename happen
/// together, so the link never shows up in `ns_fd`'s netns under its old name
/// (a clash with an existing interface there is impossible).
pub fn move_to_netns<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    ns_fd: i32,
    new_name: Option<&str>,
) -> Result<(), LinkError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::NetNsFd(ns_fd));
    if let Some(n) = new_name {
        m.attributes.push(LinkAttribute::IfName(n.to_string()));
    }
    set_link(c, "move", format!("RTM_SETLINK ifindex {index} netns fd {ns_fd} name {new_name:?}"), m)
}

/// `ip link set dev IDX name NEW` (the kernel wants the link down).
pub fn rename<T: Transport>(c: &mut Client<T>, index: u32, new_name: &str) -> Result<(), LinkError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    m.attributes.push(LinkAttribute::IfName(new_name.to_string()));
    set_link(c, "rename", format!("RTM_SETLINK ifindex {index} name {new_name}"), m)
}

/// `ip link set dev IDX [address MAC] [mtu MTU] [up|down]` in one
/// RTM_SETLINK; `None` leaves that setting alone.
pub fn configure<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    mac: Option<&[u8]>,
    mtu: Option<u32>,
    up: Option<bool>,
) -> Result<(), LinkError> {
    let mut m = LinkMessage::default();
    m.header = LinkHeader { index, ..LinkHeader::default() };
    if let Some(up) = up {
        // Only IFF_UP changes (ifi_change); the other flags stay as they are.
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
    set_link(c, "configure", format!("RTM_SETLINK ifindex {index} mac/mtu/state"), m)
}

/// `ip addr add ADDR/PREFIX dev IDX` (IPv6 with `nodad`, so the address is
/// usable at once); an existing address is `EEXIST`.
pub fn add_address<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    addr: IpAddr,
    prefix: u8,
) -> Result<(), LinkError> {
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
    .map_err(LinkError::request("add an address to", ifindex(index)))
}

/// `ip addr show dev IDX`: the link's addresses as `(addr, prefix)`
/// (`IFA_LOCAL`, else `IFA_ADDRESS`).
pub fn addresses<T: Transport>(c: &mut Client<T>, index: u32) -> Result<Vec<(IpAddr, u8)>, LinkError> {
    let r = c
        .request("RTM_GETADDR dump", RouteNetlinkMessage::GetAddress(AddressMessage::default()), true, 0)
        .map_err(LinkError::request("list the addresses of", ifindex(index)))?;
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

/// `ip route add DST/PREFIX [via GW] dev IDX proto boot` in the main table
/// (scope link without a gateway); an existing route is `EEXIST`.
pub fn add_route<T: Transport>(
    c: &mut Client<T>,
    index: u32,
    dst: IpAddr,
    prefix: u8,
    gw: Option<IpAddr>,
) -> Result<(), LinkError> {
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
    .map_err(LinkError::request("add a route through", ifindex(index)))
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};

    use super::*;
    use crate::netlink::transport::Recorded;

    /// An NLMSG_ERROR answering request `seq` with `-errno` (0: an ACK), the
    /// echoed request header capped (include/uapi/linux/netlink.h,
    /// `struct nlmsgerr`, `NLM_F_CAPPED`).
    fn answer(seq: u8, errno: i32) -> Vec<u8> {
        #[rustfmt::skip]
        let mut v = vec![
            0x24, 0, 0, 0, 0x02, 0, 0x00, 0x01, seq, 0, 0, 0, 0, 0, 0, 0, // len 36, NLMSG_ERROR, NLM_F_CAPPED
            0, 0, 0, 0, // error
            0x10, 0, 0, 0, 0x13, 0, 0x05, 0, seq, 0, 0, 0, 0, 0, 0, 0, // echoed header
        ];
        v[16..20].copy_from_slice(&(-errno).to_ne_bytes());
        v
    }

    fn sent_link(raw: &[u8]) -> LinkMessage {
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw).unwrap().payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(m)) => m,
            other => panic!("not RTM_SETLINK: {other:?}"),
        }
    }

    #[test]
    fn move_and_rename_go_in_one_setlink_request() {
        let mut c = Client::new(Recorded::new([answer(1, 0)]));
        move_to_netns(&mut c, 7, 42, Some("net1")).unwrap();
        assert_eq!(c.transport().sent.len(), 1);
        let m = sent_link(&c.transport().sent[0]);
        assert_eq!(m.header.index, 7);
        assert_eq!(m.attributes, vec![LinkAttribute::NetNsFd(42), LinkAttribute::IfName("net1".into())]);
    }

    #[test]
    fn a_missing_link_is_none_not_an_error() {
        let mut c = Client::new(Recorded::new([answer(1, libc::ENODEV)]));
        assert_eq!(link_by_name(&mut c, "nosuch0").unwrap(), None);
    }

    #[test]
    fn a_refused_request_names_the_op_the_link_and_the_errno() {
        let mut c = Client::new(Recorded::new([answer(1, libc::EEXIST)]));
        let e = rename(&mut c, 9, "net1").unwrap_err();
        assert_eq!(e.errno(), Some(libc::EEXIST));
        assert_eq!(e.to_string(), "rename link ifindex 9");
        let src = std::error::Error::source(&e).unwrap().to_string();
        assert!(src.contains("RTM_SETLINK ifindex 9 name net1"), "{src}");
    }

    #[test]
    fn bringing_a_link_up_changes_only_iff_up() {
        let mut c = Client::new(Recorded::new([answer(1, 0)]));
        configure(&mut c, 3, None, Some(1500), Some(true)).unwrap();
        let m = sent_link(&c.transport().sent[0]);
        assert_eq!((m.header.flags, m.header.change_mask), (LinkFlags::Up, LinkFlags::Up));
        assert_eq!(m.attributes, vec![LinkAttribute::Mtu(1500)]);
    }
}
