//! Subscriber to rtnetlink multicast groups: link up/down/add/del (and DCB
//! change notifications) as parsed events on a tokio channel.
//!
//! CLI equivalent: `ip monitor link` (group `RTNLGRP_LINK`) and, for DCB,
//! what `dcb` tools see after `dcbnl_ieee_notify()` (group `RTNLGRP_DCB`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), nic::netlink::events::EventsError> {
//! use nic::netlink::events::{subscribe, Group, RtnlEvent};
//! let mut rx = subscribe(&[Group::Link, Group::Dcb], 64)?;
//! while let Some(ev) = rx.recv().await {
//!     if let RtnlEvent::Link(l) = ev {
//!         println!("{} {:?} up={}", l.name.as_deref().unwrap_or("?"), l.kind, l.is_up());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! One datagram can carry several netlink messages; each becomes one event.
//! Messages that are not link or DCB messages become [`RtnlEvent::Other`] so a
//! caller that only wants "something changed" still sees them. When the
//! kernel drops notifications because the socket buffer overflowed (`ENOBUFS`),
//! [`RtnlEvent::Overrun`] is sent: the caller must rescan, since events were lost.

use netlink_packet_core::{NetlinkBuffer, NetlinkPayload};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage, State};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, AsyncSocket, AsyncSocketExt, TokioSocket};
use tokio::sync::mpsc;

use super::dcb::{self, DcbAttr, DcbMsg, RTM_GETDCB, RTM_SETDCB};
use super::transport::{decode, split_datagram, NLMSG_MIN_TYPE};

/// rtnetlink multicast groups (`enum rtnetlink_groups` in `include/uapi/linux/rtnetlink.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// `RTNLGRP_LINK` (1): RTM_NEWLINK / RTM_DELLINK.
    Link,
    /// `RTNLGRP_DCB` (23): RTM_GETDCB / RTM_SETDCB notifications from dcbnl.
    Dcb,
    /// Any other group by number.
    Raw(u32),
}

impl Group {
    /// The group number passed to `NETLINK_ADD_MEMBERSHIP`.
    pub fn number(self) -> u32 {
        match self {
            Group::Link => RTNLGRP_LINK,
            Group::Dcb => dcb::RTNLGRP_DCB,
            Group::Raw(n) => n,
        }
    }
}

/// `RTNLGRP_LINK` (`enum rtnetlink_groups`, include/uapi/linux/rtnetlink.h).
pub const RTNLGRP_LINK: u32 = 1;
/// `RTM_NEWLINK` from `include/uapi/linux/rtnetlink.h`.
pub const RTM_NEWLINK: u16 = 16;
pub const RTM_DELLINK: u16 = 17;

/// Whether a link appeared/changed or went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEventKind {
    /// `RTM_NEWLINK`: link added or changed (flags, operstate, name, …).
    New,
    /// `RTM_DELLINK`: link removed.
    Del,
}

/// A parsed link notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEvent {
    pub kind: LinkEventKind,
    /// `ifi_index`.
    pub ifindex: u32,
    /// `IFLA_IFNAME`, when present.
    pub name: Option<String>,
    /// `IFLA_OPERSTATE` in sysfs spelling (`up`, `down`, `lowerlayerdown`, …).
    pub operstate: Option<String>,
    /// `IFF_UP` (administratively up).
    pub admin_up: bool,
    /// `IFF_LOWER_UP` (carrier).
    pub lower_up: bool,
}

impl LinkEvent {
    /// The link is usable: administratively up with carrier, and not deleted.
    pub fn is_up(&self) -> bool {
        self.kind == LinkEventKind::New
            && self.admin_up
            && (self.lower_up || self.operstate.as_deref() == Some("up"))
    }
}

/// A parsed DCB notification (only the header and the interface name are decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcbEvent {
    /// `RTM_GETDCB` or `RTM_SETDCB`.
    pub msg_type: u16,
    /// `dcbmsg.cmd` (`DCB_CMD_IEEE_SET`, …).
    pub cmd: u8,
    /// `DCB_ATTR_IFNAME`.
    pub ifname: Option<String>,
}

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtnlEvent {
    /// Link added, changed or removed.
    Link(LinkEvent),
    /// DCB settings changed.
    Dcb(DcbEvent),
    /// The kernel dropped notifications (`ENOBUFS`): state must be re-read.
    Overrun,
    /// Another message type on a subscribed group.
    Other {
        /// `nlmsg_type`.
        msg_type: u16,
    },
}

/// Why the subscription could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// `socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)` failed.
    #[error("netlink: cannot open NETLINK_ROUTE socket")]
    Socket(#[source] std::io::Error),
    /// `bind` failed.
    #[error("netlink: cannot bind NETLINK_ROUTE socket")]
    Bind(#[source] std::io::Error),
    /// `setsockopt(NETLINK_ADD_MEMBERSHIP)` failed.
    #[error("netlink: cannot join rtnetlink group {group}")]
    Join {
        group: u32,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Joins `groups` and spawns a task that sends each notification to the
/// returned channel (capacity `capacity`). The task ends when the receiver is
/// dropped or the socket fails. Must be called inside a tokio runtime; the
/// socket lives in the network namespace of the calling thread.
pub fn subscribe(groups: &[Group], capacity: usize) -> Result<mpsc::Receiver<RtnlEvent>, EventsError> {
    let mut sock = TokioSocket::new(NETLINK_ROUTE).map_err(EventsError::Socket)?;
    sock.socket_mut().bind_auto().map_err(EventsError::Bind)?;
    for g in groups {
        let group = g.number();
        sock.socket_mut().add_membership(group).map_err(|source| EventsError::Join { group, source })?;
    }
    let (tx, rx) = mpsc::channel(capacity.max(1));
    tokio::spawn(async move {
        let mut buf = Vec::with_capacity(64 * 1024);
        loop {
            buf.clear();
            match sock.recv(&mut buf).await {
                Ok(()) => {
                    for ev in parse_datagram(&buf) {
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    if tx.send(RtnlEvent::Overrun).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "netlink event socket failed; link events stop");
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Splits one datagram into netlink messages (the transport's framing) and
/// parses each. A datagram whose framing breaks yields the messages before the
/// break; a message that does not decode is skipped; nothing panics.
pub fn parse_datagram(buf: &[u8]) -> Vec<RtnlEvent> {
    let mut out = Vec::new();
    for (_, msg) in split_datagram(buf).messages {
        let Ok(nb) = NetlinkBuffer::new_checked(msg) else { continue };
        match nb.message_type() {
            RTM_NEWLINK | RTM_DELLINK => {
                if let Some(ev) = parse_link(msg) {
                    out.push(RtnlEvent::Link(ev));
                }
            }
            RTM_GETDCB | RTM_SETDCB => {
                if let Some(ev) = parse_dcb(msg) {
                    out.push(RtnlEvent::Dcb(ev));
                }
            }
            // NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN: not notifications.
            t if t < NLMSG_MIN_TYPE => {}
            t => out.push(RtnlEvent::Other { msg_type: t }),
        }
    }
    out
}

fn parse_link(msg: &[u8]) -> Option<LinkEvent> {
    let parsed = decode::<RouteNetlinkMessage>(msg).ok()?;
    let (kind, link): (LinkEventKind, LinkMessage) = match parsed.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => (LinkEventKind::New, l),
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) => (LinkEventKind::Del, l),
        _ => return None,
    };
    let mut ev = LinkEvent {
        kind,
        ifindex: link.header.index,
        name: None,
        operstate: None,
        admin_up: link.header.flags.contains(LinkFlags::Up),
        lower_up: link.header.flags.contains(LinkFlags::LowerUp),
    };
    for attr in link.attributes {
        match attr {
            LinkAttribute::IfName(n) => ev.name = Some(n),
            LinkAttribute::OperState(s) => ev.operstate = Some(operstate_name(s).to_string()),
            _ => {}
        }
    }
    Some(ev)
}

/// The names `/sys/class/net/<if>/operstate` uses (RFC 2863, `net/core/net-sysfs.c`).
fn operstate_name(s: State) -> &'static str {
    match s {
        State::Up => "up",
        State::Down => "down",
        State::LowerLayerDown => "lowerlayerdown",
        State::Testing => "testing",
        State::Dormant => "dormant",
        State::NotPresent => "notpresent",
        _ => "unknown",
    }
}

/// A DCB notification through the DCB codec: its command and interface.
fn parse_dcb(msg: &[u8]) -> Option<DcbEvent> {
    let NetlinkPayload::InnerMessage(m) = decode::<DcbMsg>(msg).ok()?.payload else { return None };
    let DcbMsg { message_type, cmd, attrs, .. } = m;
    let ifname = attrs.into_iter().find_map(|a| match a {
        DcbAttr::IfName(n) => Some(n),
        _ => None,
    });
    Some(DcbEvent { msg_type: message_type, cmd, ifname })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Built from include/uapi/linux/rtnetlink.h: nlmsghdr (16 bytes) + ifinfomsg
    // (16 bytes) + IFLA_IFNAME ("ens1f0np0\0", padded) + IFLA_OPERSTATE (u8 6 = IF_OPER_UP).
    fn newlink(name: &str, flags: u32, oper: u8) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&[0u8, 0]); // ifi_family AF_UNSPEC, pad
        body.extend_from_slice(&1u16.to_ne_bytes()); // ifi_type ARPHRD_ETHER
        body.extend_from_slice(&7i32.to_ne_bytes()); // ifi_index
        body.extend_from_slice(&flags.to_ne_bytes()); // ifi_flags
        body.extend_from_slice(&0u32.to_ne_bytes()); // ifi_change
        let mut nm = name.as_bytes().to_vec();
        nm.push(0);
        let alen = 4 + nm.len();
        body.extend_from_slice(&(alen as u16).to_ne_bytes());
        body.extend_from_slice(&3u16.to_ne_bytes()); // IFLA_IFNAME
        body.extend_from_slice(&nm);
        while body.len() % 4 != 0 {
            body.push(0);
        }
        body.extend_from_slice(&5u16.to_ne_bytes());
        body.extend_from_slice(&16u16.to_ne_bytes()); // IFLA_OPERSTATE
        body.extend_from_slice(&[oper, 0, 0, 0]);
        let mut msg = Vec::new();
        msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn parses_newlink_name_operstate_and_flags() {
        // IFF_UP = 0x1, IFF_LOWER_UP = 0x10000 (include/uapi/linux/if.h)
        let raw = newlink("ens1f0np0", 0x1 | 0x10000, 6);
        let evs = parse_datagram(&raw);
        assert_eq!(
            evs,
            vec![RtnlEvent::Link(LinkEvent {
                kind: LinkEventKind::New,
                ifindex: 7,
                name: Some("ens1f0np0".into()),
                operstate: Some("up".into()),
                admin_up: true,
                lower_up: true,
            })]
        );
        let down = parse_datagram(&newlink("x", 0, 2));
        match &down[0] {
            RtnlEvent::Link(l) => assert!(!l.is_up() && l.operstate.as_deref() == Some("down")),
            e => panic!("unexpected {e:?}"),
        }
    }

    #[test]
    fn two_messages_in_one_datagram_and_truncation() {
        let mut raw = newlink("a", 1, 6);
        raw.extend(newlink("b", 1, 2));
        assert_eq!(parse_datagram(&raw).len(), 2);
        for cut in 0..raw.len() {
            let _ = parse_datagram(&raw[..cut]); // never panics
        }
        assert!(parse_datagram(&raw[..10]).is_empty());
    }

    #[test]
    fn parses_dcb_ifname() {
        // dcbmsg {family AF_UNSPEC, cmd DCB_CMD_IEEE_SET=21}, DCB_ATTR_IFNAME "eth0"
        let mut body = vec![0u8, 21, 0, 0];
        body.extend_from_slice(&9u16.to_ne_bytes());
        body.extend_from_slice(&1u16.to_ne_bytes());
        body.extend_from_slice(b"eth0\0\0\0\0");
        let mut msg = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        msg.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 10]);
        msg.extend_from_slice(&body);
        assert_eq!(
            parse_datagram(&msg),
            vec![RtnlEvent::Dcb(DcbEvent { msg_type: RTM_GETDCB, cmd: 21, ifname: Some("eth0".into()) })]
        );
    }

    /// Real kernel: a veth created and set up in a fresh netns produces
    /// RTM_NEWLINK events on RTNLGRP_LINK.
    #[test]
    fn real_kernel_sends_link_events_in_a_netns() {
        let ns = format!("nicev{}", std::process::id());
        let st = std::process::Command::new("ip").args(["netns", "add", &ns]).status().unwrap();
        assert!(st.success(), "ip netns add");
        struct Guard(String);
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
            }
        }
        let _g = Guard(ns.clone());
        let ns2 = ns.clone();
        // Subscribe from a thread that entered the netns: the socket belongs to it.
        let got = std::thread::spawn(move || {
            let f = std::fs::File::open(format!("/run/netns/{ns2}")).unwrap();
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let mut rx = subscribe(&[Group::Link], 16).unwrap();
                let st = std::process::Command::new("ip")
                    .args(["link", "add", "evtest0", "type", "veth", "peer", "name", "evtest1"])
                    .status()
                    .unwrap();
                assert!(st.success());
                let _ = std::process::Command::new("ip").args(["link", "set", "evtest0", "up"]).status();
                let mut seen = Vec::new();
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
                while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                    if let RtnlEvent::Link(l) = ev {
                        if l.name.as_deref() == Some("evtest0") {
                            seen.push(l.clone());
                            if l.admin_up {
                                break;
                            }
                        }
                    }
                }
                seen
            })
        })
        .join()
        .unwrap();
        assert!(got.iter().any(|l| l.kind == LinkEventKind::New), "no RTM_NEWLINK: {got:?}");
        assert!(got.iter().any(|l| l.admin_up), "no IFF_UP event: {got:?}");
    }
}
