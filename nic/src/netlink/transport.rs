//! The one netlink transport of this crate: framing, requests, ACKs, dumps
//! and kernel errors for every family we speak (rtnetlink links and DCB on
//! `NETLINK_ROUTE`, RDMA nldev on `NETLINK_RDMA`, generic netlink on
//! `NETLINK_GENERIC`). Message headers, `NLMSG_ERROR` and `NLMSG_DONE` are
//! netlink-packet-core's; each family only decodes its own body
//! ([`NetlinkDeserializable`]).
//!
//! Two implementations of [`Transport`]: [`SocketTransport`] (a real
//! `AF_NETLINK` socket, opened in the caller's netns or in another one through
//! [`crate::netns::Netns`]) and [`Recorded`] (recorded kernel answers, keeping
//! what was sent), so request/reply logic is testable without a kernel and a
//! simulated node can answer the way a kernel does.
//!
//! [`Client`] is the family-agnostic request/reply engine. Each family wraps
//! it in a typed handle whose type fixes the protocol and whose methods are
//! the family's requests: [`super::nldev::Nldev`] (`NETLINK_RDMA`),
//! [`super::dcb::Dcb`] (`NETLINK_ROUTE`), [`super::genl::Genl`] and
//! [`super::devlink::Devlink`] (`NETLINK_GENERIC`).
//!
//! Sync on purpose: the CNI is a short-lived process doing a handful of
//! requests, each a single round trip; an async runtime would only add start-up
//! time. Multicast notifications are the one async reader ([`super::events`]).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    Parseable, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};

use crate::netns::{Netns, NetnsError};

pub use netlink_sys::protocols::{NETLINK_GENERIC, NETLINK_RDMA, NETLINK_ROUTE};

/// `sizeof(struct nlmsghdr)` (include/uapi/linux/netlink.h).
pub const NLMSG_HDRLEN: usize = 16;
/// `NLMSG_MIN_TYPE` (include/uapi/linux/netlink.h): types below it are control messages.
pub const NLMSG_MIN_TYPE: u16 = 0x10;

/// How long a socket waits for the kernel's answer before the request fails:
/// a guard against a hang, not a latency target (DCB on mlx5 waits on firmware
/// commands of a few ms each).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// `NLMSG_ALIGN` (include/uapi/linux/netlink.h): messages start on 4-byte boundaries.
pub const fn nlmsg_align(len: usize) -> usize {
    (len + 3) & !3
}

/// Moves netlink datagrams.
pub trait Transport {
    /// Sends one datagram.
    fn send(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Receives one datagram (it may hold several messages).
    fn recv(&mut self) -> io::Result<Vec<u8>>;
}

/// A real netlink socket.
#[derive(Debug)]
pub struct SocketTransport {
    sock: netlink_sys::Socket,
}

impl SocketTransport {
    /// Opens a socket of `protocol` (e.g. [`NETLINK_ROUTE`], [`NETLINK_RDMA`])
    /// in the calling thread's netns, with a [`RECV_TIMEOUT`].
    pub fn open(protocol: isize) -> io::Result<Self> {
        let mut sock = netlink_sys::Socket::new(protocol)?;
        sock.bind_auto()?;
        sock.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        set_recv_timeout(&sock, RECV_TIMEOUT)?;
        // Ask for extended ACKs: the kernel then explains EINVALs in text.
        let _ = sock.set_ext_ack(true);
        Ok(Self { sock })
    }

    /// Opens a socket of `protocol` inside `ns`. The socket stays in `ns`
    /// for its whole life, whatever thread uses it later.
    pub fn open_in(ns: &Netns, protocol: isize) -> Result<Self, OpenInError> {
        ns.run(|| Self::open(protocol)).map_err(OpenInError::Netns)?.map_err(OpenInError::Socket)
    }
}

/// Why a socket could not be opened inside another network namespace: the
/// two steps fail apart, and callers tell them apart (a netns that cannot be
/// entered is not a missing netlink family).
#[derive(Debug, thiserror::Error)]
pub enum OpenInError {
    /// The namespace could not be entered.
    #[error("cannot enter the network namespace to open a netlink socket")]
    Netns(#[source] NetnsError),
    /// The namespace was entered; the socket could not be opened there.
    #[error("cannot open a netlink socket in another network namespace")]
    Socket(#[source] io::Error),
}

fn set_recv_timeout(sock: &netlink_sys::Socket, t: Duration) -> io::Result<()> {
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
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Transport for SocketTransport {
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let n = self.sock.send(buf, 0)?;
        if n != buf.len() {
            return Err(io::Error::other(format!("short netlink send: {n} of {} bytes", buf.len())));
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        let (buf, _addr) = self.sock.recv_from_full()?;
        Ok(buf)
    }
}

/// One recorded request and the datagrams the kernel answered it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// The request as sent (its `nlmsg_seq` and `nlmsg_pid` do not matter).
    pub request: Vec<u8>,
    /// The answer, datagram by datagram.
    pub replies: Vec<Vec<u8>>,
}

/// Recorded kernel answers. Every `send` is kept in [`Recorded::sent`].
///
/// Two ways to answer: [`Recorded::new`] pops canned datagrams in order
/// (a test scripting one conversation); [`Recorded::replaying`] answers each
/// request with the [`Exchange`] recorded for it, whatever the order, with the
/// `nlmsg_seq` of the request, as the kernel echoes it (a simulated node).
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Datagrams sent so far.
    pub sent: Vec<Vec<u8>>,
    replies: VecDeque<Vec<u8>>,
    /// `Some`: answer by request ([`Recorded::replaying`]).
    exchanges: Option<Vec<Exchange>>,
}

impl Recorded {
    /// A transport that will answer with `replies`, in order.
    pub fn new(replies: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self { sent: Vec::new(), replies: replies.into_iter().collect(), exchanges: None }
    }

    /// A transport that answers each request with its recorded exchange.
    pub fn replaying(exchanges: Vec<Exchange>) -> Self {
        Self { sent: Vec::new(), replies: VecDeque::new(), exchanges: Some(exchanges) }
    }
}

/// The request without `nlmsg_seq` and `nlmsg_pid`, which vary per socket.
fn same_request(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.len() >= NLMSG_HDRLEN
        && a[..8] == b[..8]
        && a[NLMSG_HDRLEN..] == b[NLMSG_HDRLEN..]
}

/// `reply` with every message's `nlmsg_seq` set to `seq`, and the request
/// header an `NLMSG_ERROR` echoes set to `request`'s.
fn answering(reply: &[u8], request: &[u8], seq: u32) -> Vec<u8> {
    let mut out = reply.to_vec();
    let mut at = 0;
    while at < out.len() {
        let Ok(mut nb) = NetlinkBuffer::new_checked(&mut out[at..]) else { break };
        let len = nb.length() as usize;
        nb.set_sequence_number(seq);
        let echo = NLMSG_HDRLEN + 4..NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
        if nb.message_type() == NLMSG_ERROR && len >= echo.end && request.len() >= NLMSG_HDRLEN {
            out[at + echo.start..at + echo.end].copy_from_slice(&request[..NLMSG_HDRLEN]);
        }
        at += nlmsg_align(len);
    }
    out
}

impl Transport for Recorded {
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sent.push(buf.to_vec());
        let Some(exchanges) = &self.exchanges else { return Ok(()) };
        let Some(x) = exchanges.iter().find(|x| same_request(&x.request, buf)) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("the recording has no answer to this request ({} bytes)", buf.len()),
            ));
        };
        let seq = NetlinkBuffer::new_checked(buf).map(|nb| nb.sequence_number()).unwrap_or(0);
        self.replies.extend(x.replies.iter().map(|r| answering(r, buf, seq)));
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.replies.pop_front().ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "recorded transport has no more replies")
        })
    }
}

/// Why a netlink exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum NlError {
    /// The socket failed.
    #[error("netlink {op}")]
    Io {
        /// The operation (e.g. `RTM_SETLINK eth0`).
        op: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered with an error code.
    #[error("netlink {op}: kernel said {}{}", io::Error::from_raw_os_error(*errno), ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        op: String,
        /// Positive errno.
        errno: i32,
        /// The extended-ACK message, when the kernel sent one.
        ext: Option<String>,
    },
    /// A reply could not be decoded.
    #[error("netlink {op}: cannot decode reply: {why}")]
    Decode { op: String, why: String },
}

impl NlError {
    /// The kernel errno, if the kernel refused the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NlError::Kernel { errno, .. } => Some(*errno),
            NlError::Io { source, .. } => source.raw_os_error(),
            NlError::Decode { .. } => None,
        }
    }
}

/// Why bytes are not a netlink message of the family asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError<E> {
    /// The `nlmsghdr` framing (or a control message: `NLMSG_ERROR`, `NLMSG_DONE`) is broken.
    #[error("malformed netlink message at byte {offset}: {what}")]
    Frame {
        /// Offset of the message in the datagram.
        offset: usize,
        what: String,
    },
    /// The family's body decoder refused the message.
    #[error("netlink message at byte {offset}")]
    Body {
        /// Offset of the body (just past `nlmsghdr`) in the datagram.
        offset: usize,
        /// The family decoder's error.
        #[source]
        source: E,
    },
}

/// A datagram split into its netlink messages: the whole messages before any
/// break in the framing, and the break. The one framing of this crate: the
/// request engine refuses a broken datagram ([`Framed::whole`]); the
/// notification reader ([`super::events`]) keeps the messages before the break.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    /// Each whole message with its offset in the datagram.
    pub messages: Vec<(usize, &'a [u8])>,
    /// Where the framing breaks, if it does.
    pub broken: Option<Break>,
}

/// Where a datagram's framing breaks: the offset and what is wrong.
pub type Break = (usize, String);

impl<'a> Framed<'a> {
    /// The messages with their offsets, or where the framing breaks.
    pub fn whole(self) -> Result<Vec<(usize, &'a [u8])>, Break> {
        match self.broken {
            None => Ok(self.messages),
            Some(b) => Err(b),
        }
    }
}

/// Splits a datagram into its netlink messages (by `nlmsg_len`, 4-aligned).
/// The last message may come without its padding.
pub fn split_datagram(mut buf: &[u8]) -> Framed<'_> {
    let mut messages = Vec::new();
    let mut at = 0;
    while !buf.is_empty() {
        let nb = match NetlinkBuffer::new_checked(buf) {
            Ok(nb) => nb,
            Err(e) => return Framed { messages, broken: Some((at, format!("nlmsghdr: {e}"))) },
        };
        let len = nb.length() as usize;
        messages.push((at, &buf[..len]));
        let aligned = nlmsg_align(len);
        buf = if aligned >= buf.len() { &[] } else { &buf[aligned..] };
        at += aligned;
    }
    Framed { messages, broken: None }
}

/// Decodes one netlink message (`raw` is exactly the message). Control messages
/// (`NLMSG_NOOP`, `NLMSG_ERROR`, `NLMSG_DONE`, `NLMSG_OVERRUN`) are
/// netlink-packet-core's; anything else is handed to `M`.
pub fn decode<M: NetlinkDeserializable>(raw: &[u8]) -> Result<NetlinkMessage<M>, FrameError<M::Error>> {
    let frame = |what: String| FrameError::Frame { offset: 0, what };
    let nb = NetlinkBuffer::new_checked(raw).map_err(|e| frame(format!("nlmsghdr: {e}")))?;
    let header = NetlinkHeader::parse(&nb).map_err(|e| frame(format!("nlmsghdr: {e}")))?;
    match header.message_type {
        NLMSG_NOOP | NLMSG_ERROR | NLMSG_DONE | NLMSG_OVERRUN => {
            NetlinkMessage::deserialize(raw).map_err(|e| frame(e.to_string()))
        }
        _ => M::deserialize(&header, nb.payload())
            .map(|m| NetlinkMessage::new(header, NetlinkPayload::InnerMessage(m)))
            .map_err(|source| FrameError::Body { offset: NLMSG_HDRLEN, source }),
    }
}

/// Decodes every message of a datagram (one `recv` may hold several). Never
/// panics; offsets in errors count from the start of `buf`.
pub fn parse_datagram<M: NetlinkDeserializable>(
    buf: &[u8],
) -> Result<Vec<NetlinkMessage<M>>, FrameError<M::Error>> {
    let parts = split_datagram(buf).whole().map_err(|(offset, what)| FrameError::Frame { offset, what })?;
    parts
        .into_iter()
        .map(|(at, raw)| {
            decode(raw).map_err(|e| match e {
                FrameError::Frame { offset, what } => FrameError::Frame { offset: at + offset, what },
                FrameError::Body { offset, source } => FrameError::Body { offset: at + offset, source },
            })
        })
        .collect()
}

/// A request message: `payload` with `flags` and `seq`, length and type filled in.
pub fn request_message<M: NetlinkSerializable>(flags: u16, seq: u32, payload: M) -> NetlinkMessage<M> {
    let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(payload));
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.finalize();
    msg
}

/// The wire bytes of `msg`, padded to [`nlmsg_align`]. `nlmsg_len` is set
/// from the payload, so a parsed message re-emits consistently.
pub fn emit<M: NetlinkSerializable>(msg: &mut NetlinkMessage<M>) -> Vec<u8> {
    let len = msg.buffer_len();
    msg.header.length = len as u32;
    let mut buf = vec![0u8; nlmsg_align(len)];
    msg.serialize(&mut buf[..len]);
    buf
}

/// `NLMSGERR_ATTR_MSG` (include/uapi/linux/netlink.h, `enum nlmsgerr_attrs`).
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Extracts the text of `NLMSGERR_ATTR_MSG` from a whole `NLMSG_ERROR`
/// message (header, error code, echoed request, then the extended-ACK TLVs).
fn ext_ack_msg(raw: &[u8]) -> Option<String> {
    // nlmsghdr(16) + error(4) + the echoed request header (16, capped) then TLVs.
    let nb = NetlinkBuffer::new_checked(raw).ok()?;
    if nb.flags() & netlink_packet_core::NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let capped = nb.flags() & netlink_packet_core::NLM_F_CAPPED != 0;
    let echoed = if capped {
        NLMSG_HDRLEN
    } else {
        let inner = raw.get(20..)?;
        NetlinkBuffer::new_checked(inner).ok()?.length() as usize
    };
    ext_ack_text(raw.get(20 + nlmsg_align(echoed)..)?)
}

/// The kernel's explanation (`NLMSGERR_ATTR_MSG`) among the extended-ACK
/// attributes `tlvs` that follow an error's echoed request; the one parser of
/// them, for this transport and for rtnetlink's errors
/// ([`super::link::nl_error`]). Stops at the first malformed attribute.
pub(crate) fn ext_ack_text(tlvs: &[u8]) -> Option<String> {
    netlink_packet_core::NlasIterator::new(tlvs).map_while(Result::ok).find_map(
        |nla: netlink_packet_core::NlaBuffer<&[u8]>| {
            (nla.kind() == NLMSGERR_ATTR_MSG).then(|| {
                let v = nla.value();
                let v = v.split(|b| *b == 0).next().unwrap_or(v);
                String::from_utf8_lossy(v).into_owned()
            })
        },
    )
}

/// The request/reply engine over any [`Transport`]: numbers requests, frames
/// them, and collects the replies of the same sequence number up to the ACK
/// or `NLMSG_DONE`, turning kernel error codes into [`NlError::Kernel`]. The
/// typed handles are built on it; on its own it carries any
/// [`NetlinkSerializable`] family (e.g. rtnetlink messages in tests).
#[derive(Debug)]
pub struct Client<T> {
    transport: T,
    seq: u32,
}

impl Client<SocketTransport> {
    /// A client on a new socket of `protocol` in the calling thread's netns.
    pub fn open(protocol: isize) -> io::Result<Self> {
        SocketTransport::open(protocol).map(Client::new)
    }
}

impl<T: Transport> Client<T> {
    /// Wraps a transport.
    pub fn new(transport: T) -> Self {
        Self { transport, seq: 0 }
    }

    /// The transport (e.g. to read [`Recorded::sent`]).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Sends `payload` as a request (`NLM_F_REQUEST|NLM_F_ACK`, plus
    /// `NLM_F_DUMP` when `dump`) and returns the replies' payloads. `op` names
    /// the request in errors.
    pub fn request<M>(
        &mut self,
        op: &str,
        payload: M,
        dump: bool,
        extra_flags: u16,
    ) -> Result<Vec<M>, NlError>
    where
        M: NetlinkSerializable + NetlinkDeserializable + Debug,
    {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let flags = NLM_F_REQUEST | NLM_F_ACK | extra_flags | if dump { NLM_F_DUMP } else { 0 };
        let buf = emit(&mut request_message(flags, seq, payload));
        let io = |source| NlError::Io { op: op.to_string(), source };
        self.transport.send(&buf).map_err(io)?;
        let mut out = Vec::new();
        loop {
            let dgram = self.transport.recv().map_err(io)?;
            let parts = split_datagram(&dgram).whole().map_err(|(at, what)| NlError::Decode {
                op: op.to_string(),
                why: format!("at byte {at}: {what}"),
            })?;
            for (at, raw) in parts {
                let m = decode::<M>(raw).map_err(|e| NlError::Decode {
                    op: op.to_string(),
                    why: match e {
                        FrameError::Frame { what, .. } => format!("message at byte {at}: {what}"),
                        FrameError::Body { source, .. } => format!("message at byte {at}: {source}"),
                    },
                })?;
                if m.header.sequence_number != seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => {
                            return Err(NlError::Kernel {
                                op: op.to_string(),
                                errno: code.get().saturating_abs(),
                                ext: ext_ack_msg(raw),
                            })
                        }
                    },
                    // A dump the kernel aborted ends with NLMSG_DONE carrying -errno
                    // (netlink_dump_done in net/netlink/af_netlink.c): an error, not an
                    // empty answer.
                    NetlinkPayload::Done(d) if d.code != 0 => {
                        return Err(NlError::Kernel {
                            op: op.to_string(),
                            errno: d.code.saturating_abs(),
                            ext: ext_ack_msg(raw),
                        })
                    }
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(seq: u32) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&20u32.to_ne_bytes());
        d.extend_from_slice(&3u16.to_ne_bytes());
        d.extend_from_slice(&2u16.to_ne_bytes());
        d.extend_from_slice(&seq.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&0i32.to_ne_bytes());
        d
    }

    #[test]
    fn splits_back_to_back_messages() {
        // Two NLMSG_DONE messages (len 20, type 3) in one datagram.
        let mut d = done(1);
        d.extend(done(2));
        assert_eq!(split_datagram(&d).whole().unwrap().len(), 2);
        let cut = split_datagram(&d[..30]);
        assert_eq!(cut.messages, vec![(0, &d[..20])], "the whole message before the break is kept");
        assert_eq!(cut.broken.as_ref().map(|b| b.0), Some(20));
        assert!(split_datagram(&d[..10]).whole().is_err());
    }

    #[test]
    fn replaying_answers_by_request_with_its_seq() {
        let mut req = done(0);
        req[4] = 0x30; // a request type of some family
        let mut other = req.clone();
        other[16] = 1;
        let mut t = Recorded::replaying(vec![Exchange { request: req.clone(), replies: vec![done(0)] }]);
        let mut sent = req.clone();
        sent[8..12].copy_from_slice(&7u32.to_ne_bytes());
        t.send(&sent).unwrap();
        let got = t.recv().unwrap();
        assert_eq!(u32::from_ne_bytes(got[8..12].try_into().unwrap()), 7);
        assert!(t.recv().is_err(), "one recorded datagram, one answer");
        let e = t.send(&other).unwrap_err();
        assert!(e.to_string().contains("no answer"), "{e}");
    }
}
