//! A small synchronous netlink transport: send one request, collect the
//! replies up to the ACK (or `NLMSG_DONE` for dumps).
//!
//! Two implementations of [`Transport`]: [`SocketTransport`] (a real
//! `AF_NETLINK` socket, opened in the caller's netns or in another one through
//! [`crate::netns::Netns`]) and [`Recorded`] (canned reply datagrams, recording
//! what was sent), so request/reply logic is testable without a kernel.
//!
//! Sync on purpose: the CNI is a short-lived process doing a handful of
//! requests, each a single round trip; an async runtime would only add start-up
//! time.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};

use crate::netns::{Netns, NetnsError};

pub use netlink_sys::protocols::{NETLINK_RDMA, NETLINK_ROUTE};

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
    /// in the calling thread's netns.
    pub fn open(protocol: isize) -> io::Result<Self> {
        let mut sock = netlink_sys::Socket::new(protocol)?;
        sock.bind_auto()?;
        sock.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        // Ask for extended ACKs: the kernel then explains EINVALs in text.
        let _ = sock.set_ext_ack(true);
        Ok(Self { sock })
    }

    /// Opens a socket of `protocol` inside `ns`. The socket stays in `ns`
    /// for its whole life, whatever thread uses it later.
    pub fn open_in(ns: &Netns, protocol: isize) -> Result<io::Result<Self>, NetnsError> {
        ns.run(|| Self::open(protocol))
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

/// Canned replies for tests: each `recv` pops the next datagram; every `send`
/// is kept in [`Recorded::sent`].
#[derive(Debug, Default)]
pub struct Recorded {
    /// Datagrams sent so far.
    pub sent: Vec<Vec<u8>>,
    replies: VecDeque<Vec<u8>>,
}

impl Recorded {
    /// A transport that will answer with `replies`, in order.
    pub fn new(replies: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self { sent: Vec::new(), replies: replies.into_iter().collect() }
    }
}

impl Transport for Recorded {
    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sent.push(buf.to_vec());
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
    #[error("netlink {op}: {source}")]
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
        /// The operation.
        op: String,
        /// Positive errno.
        errno: i32,
        /// The extended-ACK message, when the kernel sent one.
        ext: Option<String>,
    },
    /// A reply could not be decoded.
    #[error("netlink {op}: cannot decode reply: {why}")]
    Decode {
        /// The operation.
        op: String,
        /// What was wrong.
        why: String,
    },
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

/// Splits a datagram into its netlink messages (by `nlmsg_len`, 4-aligned).
pub fn split_datagram(mut buf: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let nb = NetlinkBuffer::new_checked(buf).map_err(|e| e.to_string())?;
        let len = nb.length() as usize;
        out.push(&buf[..len]);
        let aligned = (len + 3) & !3;
        buf = if aligned >= buf.len() { &[] } else { &buf[aligned..] };
    }
    Ok(out)
}

/// Extracts the text of `NLMSGERR_ATTR_MSG` (1) from an error message's
/// trailing TLVs (include/uapi/linux/netlink.h, `enum nlmsgerr_attrs`).
fn ext_ack_msg(raw: &[u8]) -> Option<String> {
    // nlmsghdr(16) + error(4) + the echoed request header (16, capped) then TLVs.
    let nb = NetlinkBuffer::new_checked(raw).ok()?;
    if nb.flags() & 0x200 == 0 {
        // NLM_F_ACK_TLVS not set
        return None;
    }
    let capped = nb.flags() & 0x100 != 0;
    let echoed = if capped {
        16
    } else {
        let inner = raw.get(20..)?;
        NetlinkBuffer::new_checked(inner).ok()?.length() as usize
    };
    let mut tlvs = raw.get(20 + ((echoed + 3) & !3)..)?;
    while tlvs.len() >= 4 {
        let len = u16::from_ne_bytes([tlvs[0], tlvs[1]]) as usize;
        let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]) & 0x3fff;
        if len < 4 || len > tlvs.len() {
            return None;
        }
        if kind == 1 {
            let s = &tlvs[4..len];
            let s = s.split(|b| *b == 0).next().unwrap_or(s);
            return Some(String::from_utf8_lossy(s).into_owned());
        }
        tlvs = tlvs.get(((len + 3) & !3)..).unwrap_or(&[]);
    }
    None
}

/// A request/reply client over any [`Transport`].
#[derive(Debug)]
pub struct Client<T> {
    transport: T,
    seq: u32,
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
    /// `NLM_F_DUMP` when `dump`) and returns the replies' payloads.
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
        let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(payload));
        msg.header.flags = NLM_F_REQUEST | NLM_F_ACK | extra_flags | if dump { NLM_F_DUMP } else { 0 };
        msg.header.sequence_number = seq;
        msg.finalize();
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        let io = |source| NlError::Io { op: op.to_string(), source };
        self.transport.send(&buf).map_err(io)?;
        let mut out = Vec::new();
        loop {
            let dgram = self.transport.recv().map_err(io)?;
            let parts = split_datagram(&dgram).map_err(|why| NlError::Decode { op: op.to_string(), why })?;
            for raw in parts {
                let m = NetlinkMessage::<M>::deserialize(raw)
                    .map_err(|e| NlError::Decode { op: op.to_string(), why: e.to_string() })?;
                if m.header.sequence_number != seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => {
                            return Err(NlError::Kernel {
                                op: op.to_string(),
                                errno: code.get().abs(),
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
                            errno: d.code.abs(),
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

    #[test]
    fn splits_back_to_back_messages() {
        // Two NLMSG_DONE messages (len 20, type 3) in one datagram.
        let mut d = Vec::new();
        for seq in [1u32, 2] {
            d.extend_from_slice(&20u32.to_ne_bytes());
            d.extend_from_slice(&3u16.to_ne_bytes());
            d.extend_from_slice(&2u16.to_ne_bytes());
            d.extend_from_slice(&seq.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&0i32.to_ne_bytes());
        }
        assert_eq!(split_datagram(&d).unwrap().len(), 2);
        assert!(split_datagram(&d[..10]).is_err());
    }
}
