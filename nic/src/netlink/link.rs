//! The rtnetlink link, address and route requests the CNI makes, through
//! `rtnetlink`'s [`Handle`] (VF attributes of a PF: [`super::vf`]).
//!
//! A [`RouteSocket`] is one `NETLINK_ROUTE` connection bound to the network
//! namespace it was opened in, with its own current-thread tokio runtime: the
//! CNI is a short-lived, sequential process, so each request is driven to
//! completion with `block_on` (building such a runtime costs microseconds, see
//! `cni/benches/add_del.rs`). The kernel handles a route request inside the
//! `sendmsg` call, so a long request (a netns move) blocks the calling thread
//! whatever the runtime; overlap comes from threads, not from async.
//!
//! Each request is documented by its `ip` equivalent. Every failure is a
//! [`LinkError`] naming what was asked and of which link; the kernel's own
//! answer (errno, extended ACK text) is its source.
//!
//! ```no_run
//! use nic::netlink::link::{LinkChange, RouteSocket};
//! let mut c = RouteSocket::open_here()?;
//! if let Some(l) = c.link_by_name("eth0")? {
//!     c.set_link(l.index, &LinkChange { mtu: Some(9000), up: Some(true), ..LinkChange::default() })?;
//! }
//! # Ok::<(), nic::netlink::link::LinkError>(())
//! ```

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;

use futures::{StreamExt, TryStreamExt};
use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkHeader, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{AsyncSocket, TokioSocket};
use rtnetlink::Handle;

use crate::netlink::transport::{NlError, NETLINK_ROUTE, NLMSG_HDRLEN};
use crate::netns::{Netns, NetnsError};

/// Why a link request failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The route socket could not be opened.
    #[error("cannot open a NETLINK_ROUTE socket{}", if *in_other_netns { " in another network namespace" } else { "" })]
    Socket {
        /// The socket was to be opened in another netns ([`RouteSocket::open_in`]).
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
        /// The netlink error (its op is the request, e.g. `RTM_SETLINK ifindex 7 netns/name`).
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

/// The netlink error of one request `op` from rtnetlink's error.
///
/// With `NETLINK_CAP_ACK` set on the socket (see [`RouteSocket`]) the payload
/// after the error code is the 16-byte echoed request header followed by the
/// extended-ACK attributes, whose `NLMSGERR_ATTR_MSG` is the kernel's
/// explanation (include/uapi/linux/netlink.h, `struct nlmsgerr`).
pub fn nl_error(op: &str, e: rtnetlink::Error) -> NlError {
    match e {
        rtnetlink::Error::NetlinkError(m) => {
            let ext = m.header.get(NLMSG_HDRLEN..).and_then(super::transport::ext_ack_text);
            NlError::Kernel { op: op.to_string(), errno: m.raw_code().abs(), ext }
        }
        rtnetlink::Error::RequestFailed => NlError::Io {
            op: op.to_string(),
            source: io::Error::new(io::ErrorKind::BrokenPipe, "the netlink connection is gone"),
        },
        other => NlError::Decode { op: op.to_string(), why: other.to_string() },
    }
}

/// One `NETLINK_ROUTE` connection (rtnetlink [`Handle`]) in the network
/// namespace it was opened in, and the runtime that drives it.
#[derive(Debug)]
pub struct RouteSocket {
    rt: tokio::runtime::Runtime,
    handle: Handle,
}

/// Opens the socket on the calling thread (so in its netns) and registers it
/// with `rt`'s reactor: extended ACKs on (the kernel explains refusals in
/// text), ACKs capped to the request header (so [`nl_error`] finds that text).
fn connect(rt: &tokio::runtime::Runtime) -> io::Result<Handle> {
    let _guard = rt.enter();
    let mut sock = TokioSocket::new(NETLINK_ROUTE)?;
    let s = sock.socket_mut();
    s.set_ext_ack(true)?;
    s.set_cap_ack(true)?;
    let (conn, handle, _unsolicited) = rtnetlink::from_socket(sock);
    rt.spawn(conn);
    Ok(handle)
}

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_io().build()
}

impl RouteSocket {
    /// Opens a route socket in the calling thread's netns.
    pub fn open_here() -> Result<Self, LinkError> {
        let socket = |source| LinkError::Socket { in_other_netns: false, source };
        let rt = runtime().map_err(socket)?;
        let handle = connect(&rt).map_err(socket)?;
        Ok(Self { rt, handle })
    }

    /// Opens a route socket inside `ns` (on a short-lived thread that enters
    /// it); the socket stays there whatever thread uses it later.
    pub fn open_in(ns: &Netns) -> Result<Self, LinkError> {
        let socket = |source| LinkError::Socket { in_other_netns: true, source };
        let rt = runtime().map_err(socket)?;
        let handle = ns.run(|| connect(&rt)).map_err(LinkError::Netns)?.map_err(socket)?;
        Ok(Self { rt, handle })
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// One RTM_GETLINK for one link; `ENODEV` (no such link) is `None`.
    fn get_link(&self, req: rtnetlink::LinkGetRequest, link: String) -> Result<Option<Link>, LinkError> {
        match self.block_on(req.execute().try_next()) {
            Ok(m) => Ok(m.as_ref().map(Link::of)),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code().abs() == libc::ENODEV => Ok(None),
            Err(e) => {
                Err(LinkError::request("look up", link.clone())(nl_error(&format!("RTM_GETLINK {link}"), e)))
            }
        }
    }

    /// `ip link show dev NAME`; `None` if there is no such link.
    pub fn link_by_name(&mut self, name: &str) -> Result<Option<Link>, LinkError> {
        let req = self.handle.link().get().match_name(name);
        self.get_link(req, name.to_string())
    }

    /// `ip link show` of the link with ifindex `index`; `None` if there is none.
    pub fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, LinkError> {
        let req = self.handle.link().get().match_index(index);
        self.get_link(req, ifindex(index))
    }

    /// `ip link show`: every link of the namespace (one dump).
    pub fn links(&mut self) -> Result<Vec<Link>, LinkError> {
        let req = self.handle.link().get().execute();
        self.block_on(req.try_collect::<Vec<_>>())
            .map(|v| v.iter().map(Link::of).collect())
            .map_err(|e| LinkError::request("list", "(all)")(nl_error("RTM_GETLINK dump", e)))
    }

    /// Applies `change` to the link with ifindex `index` in one RTM_SETLINK
    /// (see [`LinkChange`] for what the kernel does in which order).
    pub fn set_link(&mut self, index: u32, change: &LinkChange) -> Result<(), LinkError> {
        let op = format!("RTM_SETLINK ifindex {index} {}", change.describe());
        let req = self.handle.link().set(change.message(index)).execute();
        self.block_on(req).map_err(|e| LinkError::request(change.verb(), ifindex(index))(nl_error(&op, e)))
    }

    /// Sends a ready RTM_SETLINK message (e.g. [`super::vf::set_request`]);
    /// `op` names it in errors.
    pub(crate) fn set_link_message(&self, op: &str, m: LinkMessage) -> Result<(), NlError> {
        let req = self.handle.link().set(m).execute();
        self.block_on(req).map_err(|e| nl_error(op, e))
    }

    /// One RTM_GETLINK with a prepared message (e.g. [`super::vf::get_request`]).
    pub(crate) fn get_link_message(&self, op: &str, m: LinkMessage) -> Result<Option<LinkMessage>, NlError> {
        let index = m.header.index;
        let mut req = self.handle.link().get().match_index(index);
        *req.message_mut() = m;
        self.block_on(req.execute().try_next()).map_err(|e| nl_error(op, e))
    }

    /// `ip addr add ADDR/PREFIX dev IDX` (IPv6 with `nodad`, so the address is
    /// usable at once); an existing address is `EEXIST`.
    pub fn add_address(&mut self, index: u32, addr: IpAddr, prefix: u8) -> Result<(), LinkError> {
        let mut req = self.handle.address().add(index, addr, prefix);
        if addr.is_ipv6() {
            req.message_mut().header.flags = AddressHeaderFlags::Nodad;
        }
        let op = format!("RTM_NEWADDR {addr}/{prefix} ifindex {index}");
        self.block_on(req.execute())
            .map_err(|e| LinkError::request("add an address to", ifindex(index))(nl_error(&op, e)))
    }

    /// `ip addr show dev IDX`: the link's addresses as `(addr, prefix)`
    /// (`IFA_LOCAL`, else `IFA_ADDRESS`).
    pub fn addresses(&mut self, index: u32) -> Result<Vec<(IpAddr, u8)>, LinkError> {
        let req = self.handle.address().get().set_link_index_filter(index).execute();
        let msgs = self.block_on(req.try_collect::<Vec<_>>()).map_err(|e| {
            LinkError::request("list the addresses of", ifindex(index))(nl_error("RTM_GETADDR dump", e))
        })?;
        Ok(msgs.iter().filter(|a| a.header.index == index).filter_map(address_of).collect())
    }

    /// `DST/PREFIX [via GW] dev IDX proto boot` added to the main table (scope
    /// link without a gateway) as the reference CNI plugins add routes
    /// (containernetworking/plugins `pkg/ipam` `ConfigureIface`, through
    /// vishvananda/netlink `RouteAddEcmp`): RTM_NEWROUTE with `NLM_F_CREATE`
    /// and without `NLM_F_EXCL`. A route to the same destination and metric
    /// out of another link or through another gateway is then added beside the
    /// existing one (IPv4: another alias, placed first; IPv6: an ECMP sibling;
    /// net/ipv4/fib_trie.c `fib_table_insert`, net/ipv6/ip6_fib.c
    /// `fib6_add_rt2node`); only an identical route is `EEXIST`. `ip route add`
    /// sends `NLM_F_EXCL` and refuses any route to the same destination.
    pub fn add_route(&mut self, index: u32, route: &Route) -> Result<(), LinkError> {
        let op = format!("RTM_NEWROUTE {}/{} via {:?} ifindex {index}", route.dst, route.prefix, route.gw);
        let req = route.add_request(index);
        let mut handle = self.handle.clone();
        let exchange = async move {
            let mut replies = handle.request(req)?;
            while let Some(m) = replies.next().await {
                if let NetlinkPayload::Error(e) = m.payload {
                    return Err(rtnetlink::Error::NetlinkError(e));
                }
            }
            Ok(())
        };
        self.block_on(exchange)
            .map_err(|e| LinkError::request("add a route through", ifindex(index))(nl_error(&op, e)))
    }

    /// `ip route show [dev IDX]` (main table, both families): the routes, or
    /// those out of link `oif`, as [`Route`]s.
    pub fn routes(&mut self, oif: Option<u32>) -> Result<Vec<Route>, LinkError> {
        let link = oif.map(ifindex).unwrap_or_else(|| "(all)".into());
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut m = RouteMessage::default();
            m.header.address_family = family;
            let req = self.handle.route().get(m).execute();
            let msgs = self.block_on(req.try_collect::<Vec<_>>()).map_err(|e| {
                LinkError::request("list the routes through", link.clone())(nl_error("RTM_GETROUTE dump", e))
            })?;
            out.extend(msgs.iter().filter_map(|m| Route::of(m, oif)));
        }
        Ok(out)
    }
}

fn address_of(a: &AddressMessage) -> Option<(IpAddr, u8)> {
    let local = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let addr = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    });
    local.or(addr).map(|ip| (ip, a.header.prefix_len))
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
    /// The bus device under the netdev, e.g. the VF's PCI address
    /// (`IFLA_PARENT_DEV_NAME`, Linux 5.13+); virtual links have none.
    pub parent: Option<String>,
}

impl Link {
    fn of(m: &LinkMessage) -> Self {
        let mut l = Link {
            index: m.header.index,
            name: String::new(),
            mac: None,
            mtu: None,
            up: m.header.flags.contains(LinkFlags::Up),
            parent: None,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => l.name = n.clone(),
                LinkAttribute::Address(a) => l.mac = Some(a.clone()),
                LinkAttribute::Mtu(m) => l.mtu = Some(*m),
                LinkAttribute::ParentDevName(p) => l.parent = Some(p.clone()),
                _ => {}
            }
        }
        l
    }
}

/// Changes to one link, sent as one RTM_SETLINK:
/// `ip link set dev IDX [netns NS] [name NAME] [address MAC] [mtu MTU] [up|down]`.
///
/// The kernel's `do_setlink` (net/core/rtnetlink.c) moves the link first
/// (`IFLA_NET_NS_FD`, renaming it to `IFLA_IFNAME` as part of the move, so it
/// never appears in the target netns under its old name and cannot clash
/// there), then sets the MAC, the MTU and the flags in the link's new netns.
/// A request that fails after the move leaves the link moved: callers treat
/// the whole change as "maybe done".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkChange {
    /// Move into the netns of this descriptor.
    pub netns_fd: Option<RawFd>,
    /// New name (IFNAMSIZ rules; the kernel checks it).
    pub name: Option<String>,
    /// New MAC.
    pub mac: Option<Vec<u8>>,
    /// New MTU.
    pub mtu: Option<u32>,
    /// Administrative state; only `IFF_UP` changes (`ifi_change`).
    pub up: Option<bool>,
}

impl LinkChange {
    /// The RTM_SETLINK payload for the link with ifindex `index`.
    pub fn message(&self, index: u32) -> LinkMessage {
        let mut m = LinkMessage::default();
        m.header = LinkHeader { index, ..LinkHeader::default() };
        if let Some(up) = self.up {
            m.header.change_mask = LinkFlags::Up;
            if up {
                m.header.flags = LinkFlags::Up;
            }
        }
        if let Some(fd) = self.netns_fd {
            m.attributes.push(LinkAttribute::NetNsFd(fd));
        }
        if let Some(n) = &self.name {
            m.attributes.push(LinkAttribute::IfName(n.clone()));
        }
        if let Some(mac) = &self.mac {
            m.attributes.push(LinkAttribute::Address(mac.clone()));
        }
        if let Some(mtu) = self.mtu {
            m.attributes.push(LinkAttribute::Mtu(mtu));
        }
        m
    }

    /// Whether nothing would change.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn verb(&self) -> &'static str {
        match (self.netns_fd.is_some(), self.name.is_some()) {
            (true, _) => "move",
            (false, true) => "rename",
            (false, false) => "configure",
        }
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(fd) = self.netns_fd {
            parts.push(format!("netns fd {fd}"));
        }
        if let Some(n) = &self.name {
            parts.push(format!("name {n}"));
        }
        if self.mac.is_some() {
            parts.push("address".to_string());
        }
        if let Some(m) = self.mtu {
            parts.push(format!("mtu {m}"));
        }
        if let Some(up) = self.up {
            parts.push(if up { "up" } else { "down" }.to_string());
        }
        parts.join(" ")
    }
}

/// A route out of a link: `DST/PREFIX [via GW]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination.
    pub dst: IpAddr,
    /// Prefix length.
    pub prefix: u8,
    /// Gateway.
    pub gw: Option<IpAddr>,
}

fn route_addr(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

impl Route {
    /// The RTM_NEWROUTE payload: main table, `proto boot`, scope link without
    /// a gateway (as `ip route add` does), out of ifindex `index`.
    pub fn message(&self, index: u32) -> RouteMessage {
        let mut m = RouteMessage::default();
        m.header = RouteHeader {
            address_family: if self.dst.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 },
            destination_prefix_length: self.prefix,
            table: RouteHeader::RT_TABLE_MAIN,
            protocol: RouteProtocol::Boot,
            scope: if self.gw.is_some() { RouteScope::Universe } else { RouteScope::Link },
            kind: RouteType::Unicast,
            ..RouteHeader::default()
        };
        if self.prefix > 0 {
            m.attributes.push(RouteAttribute::Destination(route_addr(self.dst)));
        }
        if let Some(g) = self.gw {
            m.attributes.push(RouteAttribute::Gateway(route_addr(g)));
        }
        m.attributes.push(RouteAttribute::Oif(index));
        m
    }

    /// The RTM_NEWROUTE request [`RouteSocket::add_route`] sends: `NLM_F_CREATE`
    /// without `NLM_F_EXCL` (or `NLM_F_REPLACE`, `NLM_F_APPEND`), as `RouteAddEcmp`.
    pub fn add_request(&self, index: u32) -> NetlinkMessage<RouteNetlinkMessage> {
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::NewRoute(self.message(index)));
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
        req
    }

    /// A main-table route (out of `oif`, if given) from an RTM_NEWROUTE message.
    fn of(m: &RouteMessage, oif_wanted: Option<u32>) -> Option<Route> {
        if m.header.table != RouteHeader::RT_TABLE_MAIN {
            return None;
        }
        let mut oif = None;
        let (mut dst, mut gw) = (None, None);
        for a in &m.attributes {
            match a {
                RouteAttribute::Oif(i) => oif = Some(*i),
                RouteAttribute::Destination(d) => dst = ip_of(d),
                RouteAttribute::Gateway(g) => gw = ip_of(g),
                _ => {}
            }
        }
        if oif_wanted.is_some() && oif != oif_wanted {
            return None;
        }
        let unspecified = match m.header.address_family {
            AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        };
        Some(Route { dst: dst.unwrap_or(unspecified), prefix: m.header.destination_prefix_length, gw })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emit(m: LinkMessage) -> Vec<u8> {
        let mut msg = NetlinkMessage::from(RouteNetlinkMessage::SetLink(m));
        msg.finalize();
        let mut b = vec![0; msg.buffer_len()];
        msg.serialize(&mut b);
        b
    }

    // Bytes from include/uapi/linux/rtnetlink.h (RTM_SETLINK 19, struct
    // ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32)
    // and include/uapi/linux/if_link.h (IFLA_ADDRESS 1, IFLA_IFNAME 3,
    // IFLA_MTU 4, IFLA_NET_NS_FD 28); little-endian host order.
    #[cfg(target_endian = "little")]
    #[test]
    fn move_rename_mac_mtu_and_up_are_one_setlink_request() {
        let change = LinkChange {
            netns_fd: Some(42),
            name: Some("net1".into()),
            mac: Some(vec![2, 0, 0, 0, 0, 1]),
            mtu: Some(1400),
            up: Some(true),
        };
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[0x48, 0, 0, 0, 0x13, 0, 0, 0][..],        // len 72, RTM_SETLINK, flags (set by the handle)
            &[0, 0, 0, 0, 0, 0, 0, 0],                  // seq, pid
            &[0, 0, 0, 0, 7, 0, 0, 0],                  // family 0, pad, type 0, index 7
            &[1, 0, 0, 0, 1, 0, 0, 0],                  // flags IFF_UP, change IFF_UP
            &[8, 0, 28, 0, 42, 0, 0, 0],                // IFLA_NET_NS_FD 42
            &[9, 0, 3, 0, b'n', b'e', b't', b'1', 0, 0, 0, 0], // IFLA_IFNAME "net1\0" + pad
            &[10, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 0],     // IFLA_ADDRESS + pad
            &[8, 0, 4, 0, 0x78, 0x05, 0, 0],            // IFLA_MTU 1400
        ]
        .concat();
        assert_eq!(emit(change.message(7)), want);
        let back = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&want).unwrap().payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(m)) => m,
            other => panic!("not RTM_SETLINK: {other:?}"),
        };
        assert_eq!(back, change.message(7));
    }

    #[test]
    fn bringing_a_link_down_changes_only_iff_up() {
        let m = LinkChange { up: Some(false), ..LinkChange::default() }.message(3);
        assert_eq!((m.header.flags, m.header.change_mask), (LinkFlags::empty(), LinkFlags::Up));
        assert!(m.attributes.is_empty());
        let m = LinkChange::default().message(3);
        assert_eq!(m.header.change_mask, LinkFlags::empty(), "no state change asked: none sent");
    }

    #[test]
    fn a_refusal_carries_the_errno_and_the_extended_ack_text() {
        // struct nlmsgerr with NETLINK_CAP_ACK: the echoed nlmsghdr (16 bytes),
        // then NLMSGERR_ATTR_MSG (1) "bad vf\0" padded to 4.
        let mut payload = vec![0u8; 16];
        payload.extend_from_slice(&[11, 0, 1, 0]);
        payload.extend_from_slice(b"bad vf\0\0");
        let mut m = netlink_packet_core::ErrorMessage::default();
        m.code = std::num::NonZeroI32::new(-libc::EINVAL);
        m.header = payload;
        let e = nl_error("RTM_SETLINK ifindex 9", rtnetlink::Error::NetlinkError(m));
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(e.to_string().contains("(bad vf)"), "{e}");
        let e = LinkError::request("rename", ifindex(9))(e);
        assert_eq!(e.to_string(), "rename link ifindex 9");
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }

    #[test]
    fn routes_are_read_back_only_for_their_link_and_the_main_table() {
        let r =
            Route { dst: "10.250.0.0".parse().unwrap(), prefix: 16, gw: Some("10.1.0.1".parse().unwrap()) };
        assert_eq!(Route::of(&r.message(4), Some(4)), Some(r));
        assert_eq!(Route::of(&r.message(4), Some(5)), None);
        assert_eq!(Route::of(&r.message(4), None), Some(r));
        let default = Route { dst: "0.0.0.0".parse().unwrap(), prefix: 0, gw: None };
        let m = default.message(4);
        assert!(!m.attributes.iter().any(|a| matches!(a, RouteAttribute::Destination(_))));
        assert_eq!(m.header.scope, RouteScope::Link);
        assert_eq!(Route::of(&m, Some(4)), Some(default));
    }

    #[test]
    fn routes_are_added_as_the_reference_plugins_add_them_create_without_excl() {
        // include/uapi/linux/netlink.h: NLM_F_REQUEST 0x1, NLM_F_ACK 0x4,
        // NLM_F_EXCL 0x200, NLM_F_CREATE 0x400 (vishvananda/netlink RouteAddEcmp:
        // NLM_F_CREATE|NLM_F_ACK; `ip route add` adds NLM_F_EXCL).
        let r = Route { dst: "0.0.0.0".parse().unwrap(), prefix: 0, gw: Some("10.1.0.1".parse().unwrap()) };
        let req = r.add_request(4);
        assert_eq!(req.header.flags, 0x1 | 0x4 | 0x400);
        assert!(
            matches!(&req.payload, NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(m)) if *m == r.message(4))
        );
    }
}
