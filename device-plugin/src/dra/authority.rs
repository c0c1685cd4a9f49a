//! The kubelet's plugin watcher dials a registration socket the way gRPC-Go
//! dials any target without a scheme: the socket path becomes the HTTP/2
//! `:authority` (k8s.io/kubernetes v1.34.4,
//! pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go `dial`:
//! `grpc.DialContext(ctx, unixSocketPath, ...WithContextDialer(unix))`, no
//! `WithAuthority`). h2, under tonic, parses `:authority` as a URI authority
//! and answers a path with RST_STREAM(PROTOCOL_ERROR) ("malformed
//! authority"), so `GetInfo` never reaches the registration service and the
//! kubelet never registers the driver.
//!
//! [`AuthorityFix`] wraps an accepted connection and rewrites, in the
//! client-to-server byte stream only, an `:authority` value that is not a
//! valid authority (by the same parser h2 uses) to `localhost`; every other
//! byte passes through unchanged. The server never looks at the authority:
//! a unix socket has no host.
//!
//! Scope of the parse: the connection preface (RFC 7540 §3.5), frames
//! (§4.1), HEADERS (§6.2) and CONTINUATION (§6.10) reassembled into one
//! header block, which is walked representation by representation (RFC 7541
//! §6) without keeping a dynamic table. A rewritten `:authority` keeps its
//! representation (indexed or not), so the server's HPACK decoder inserts
//! the same entries in the same order as the client's encoder; each one it
//! gets is no larger than the client's (`localhost` is shorter than any value
//! we rewrite), so under the same table size limit it evicts no sooner and
//! its table holds every entry the client's still holds at the same index
//! (RFC 7541 §2.3.3: indices count from the newest entry). Later references
//! to the rewritten entry decode as `localhost`, which is what we want.
//!
//! Input we cannot follow (a bad preface, a malformed frame or header
//! block, a block over [`MAX_BLOCK`]) makes the adapter pass everything from
//! there on through as it is, for h2 to refuse with its own error.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// RFC 7540 §3.5.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// RFC 7540 §4.1.
const FRAME_HEADER: usize = 9;
/// RFC 7540 §6.2, §6.10: frame types.
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
/// RFC 7540 §6.2: HEADERS flags.
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest header block (all its frames) the adapter reassembles; a
/// gRPC request's is a few hundred bytes.
pub const MAX_BLOCK: usize = 64 * 1024;
/// Frames we emit stay within the initial SETTINGS_MAX_FRAME_SIZE (RFC 7540
/// §6.5.2), which every server accepts.
const MAX_FRAME: usize = 16384;
/// RFC 7541 Appendix A: static table index 1 is `:authority`.
const AUTHORITY_INDEX: u64 = 1;
const AUTHORITY: &[u8] = b":authority";
const REPLACEMENT: &[u8] = b"localhost";

/// A connection whose reads have a path-like `:authority` replaced (see the
/// module docs); writes go straight to the inner stream.
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to the reader.
    out: Vec<u8>,
    pos: usize,
    scratch: Vec<u8>,
}

impl<S> AuthorityFix<S> {
    /// Wraps a connection accepted by a server.
    pub fn new(inner: S) -> Self {
        AuthorityFix { inner, rewriter: Rewriter::default(), out: Vec::new(), pos: 0, scratch: vec![0; 8192] }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.pos);
                buf.put_slice(&this.out[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.out.len() {
                    this.out.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                // EOF: whatever part of a header block is held goes on as
                // it came, then the reader sees EOF.
                this.rewriter.finish(&mut this.out);
                if this.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.rewriter.feed(rb.filled(), &mut this.out);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The accepted connections of `listener`, each wrapped in [`AuthorityFix`],
/// for `serve_with_incoming*`.
pub fn incoming(
    listener: tokio::net::UnixListener,
) -> impl tokio_stream::Stream<Item = io::Result<AuthorityFix<tokio::net::UnixStream>>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|c| c.map(AuthorityFix::new))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes of the client preface seen so far.
    Preface(usize),
    /// Collecting a frame header into `Rewriter::hdr`.
    FrameHeader,
    /// Passing through the rest of a frame's payload.
    Payload(usize),
    /// Collecting the rest of a HEADERS/CONTINUATION frame into `raw`.
    Block(usize),
    /// Given up: everything passes through.
    Passthrough,
}

/// The client-to-server byte stream rewriter, without IO: bytes in, bytes
/// out, any split of the input.
#[derive(Debug)]
pub struct Rewriter {
    state: State,
    hdr: [u8; FRAME_HEADER],
    hdr_len: usize,
    /// The frames of the header block being collected, as they came.
    raw: Vec<u8>,
    /// Where the frame being collected starts in `raw`.
    frame_start: usize,
    /// The header block fragments so far.
    block: Vec<u8>,
    /// Of the block's HEADERS frame: stream, END_STREAM, priority fields.
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
}

impl Default for Rewriter {
    fn default() -> Self {
        Rewriter {
            state: State::Preface(0),
            hdr: [0; FRAME_HEADER],
            hdr_len: 0,
            raw: Vec::new(),
            frame_start: 0,
            block: Vec::new(),
            stream: 0,
            end_stream: false,
            priority: None,
        }
    }
}

impl Rewriter {
    /// Takes the next bytes from the client, appends what the server is to
    /// read to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            match self.state {
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return;
                }
                State::Preface(seen) => {
                    let n = input.len().min(PREFACE.len() - seen);
                    if input[..n] != PREFACE[seen..seen + n] {
                        self.state = State::Passthrough;
                        continue;
                    }
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state =
                        if seen + n == PREFACE.len() { State::FrameHeader } else { State::Preface(seen + n) };
                }
                State::Payload(left) => {
                    let n = input.len().min(left);
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == left { State::FrameHeader } else { State::Payload(left - n) };
                }
                State::FrameHeader => {
                    let n = input.len().min(FRAME_HEADER - self.hdr_len);
                    self.hdr[self.hdr_len..self.hdr_len + n].copy_from_slice(&input[..n]);
                    self.hdr_len += n;
                    input = &input[n..];
                    if self.hdr_len == FRAME_HEADER {
                        self.hdr_len = 0;
                        self.frame_header(out);
                    }
                }
                State::Block(left) => {
                    let n = input.len().min(left);
                    self.raw.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if n == left {
                        self.state = State::FrameHeader;
                        self.block_frame(out);
                    } else {
                        self.state = State::Block(left - n);
                    }
                }
            }
        }
    }

    /// The client closed: bytes held back go on unchanged.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.raw);
        out.extend_from_slice(&self.hdr[..self.hdr_len]);
        self.raw.clear();
        self.hdr_len = 0;
        self.state = State::Passthrough;
    }

    fn give_up(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.raw);
        self.raw.clear();
        self.block.clear();
        self.state = State::Passthrough;
    }

    /// A complete frame header (RFC 7540 §4.1) is in `hdr`.
    fn frame_header(&mut self, out: &mut Vec<u8>) {
        let h = self.hdr;
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let (kind, stream) = (h[3], u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff);
        let in_block = !self.raw.is_empty();
        if in_block {
            // RFC 7540 §6.10: nothing but CONTINUATION of the same stream
            // may follow a block without END_HEADERS; h2 refuses the rest.
            if kind != CONTINUATION || stream != self.stream {
                self.give_up(out);
                out.extend_from_slice(&h);
                return;
            }
        } else if kind != HEADERS {
            out.extend_from_slice(&h);
            self.state = if len == 0 { State::FrameHeader } else { State::Payload(len) };
            return;
        }
        if self.raw.len() + FRAME_HEADER + len > MAX_BLOCK + FRAME_HEADER * 8 {
            self.give_up(out);
            out.extend_from_slice(&h);
            return;
        }
        self.frame_start = self.raw.len();
        self.raw.extend_from_slice(&h);
        if len == 0 {
            self.block_frame(out);
        } else {
            self.state = State::Block(len);
        }
    }

    /// A complete HEADERS or CONTINUATION frame ends `raw`.
    fn block_frame(&mut self, out: &mut Vec<u8>) {
        let frame = &self.raw[self.frame_start..];
        let (kind, flags) = (frame[3], frame[4]);
        let payload = &frame[FRAME_HEADER..];
        let fragment = if kind == HEADERS {
            self.stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
            self.end_stream = flags & END_STREAM != 0;
            match headers_fragment(flags, payload) {
                Some((priority, fragment)) => {
                    self.priority = priority;
                    fragment
                }
                None => return self.give_up(out),
            }
        } else {
            payload
        };
        if self.block.len() + fragment.len() > MAX_BLOCK {
            return self.give_up(out);
        }
        self.block.extend_from_slice(fragment);
        if flags & END_HEADERS == 0 {
            return;
        }
        match rewrite_block(&self.block) {
            Ok(Some(block)) => {
                frame_block(&block, self.stream, self.end_stream, self.priority, out);
                self.raw.clear();
                self.block.clear();
            }
            Ok(None) => {
                out.extend_from_slice(&self.raw);
                self.raw.clear();
                self.block.clear();
            }
            Err(_) => self.give_up(out),
        }
    }
}

/// Of a HEADERS payload (RFC 7540 §6.2): the priority fields and the
/// header block fragment, without padding; `None` when the lengths do not
/// fit (a PROTOCOL_ERROR for h2 to report).
fn headers_fragment(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(*rest.first()?);
        rest = &rest[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(<[u8; 5]>::try_from(rest.get(..5)?).ok()?);
        rest = &rest[5..];
    }
    let end = rest.len().checked_sub(pad)?;
    Some((priority, &rest[..end]))
}

/// Frames a header block as HEADERS then CONTINUATION frames (RFC 7540
/// §6.2, §6.10), END_HEADERS on the last; padding is dropped, END_STREAM
/// and the priority fields are kept.
fn frame_block(block: &[u8], stream: u32, end_stream: bool, priority: Option<[u8; 5]>, out: &mut Vec<u8>) {
    let first_room = MAX_FRAME - if priority.is_some() { 5 } else { 0 };
    let first = block.len().min(first_room);
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if priority.is_some() {
        flags |= PRIORITY;
    }
    if first == block.len() {
        flags |= END_HEADERS;
    }
    let len = first + if priority.is_some() { 5 } else { 0 };
    push_frame_header(out, len, HEADERS, flags, stream);
    if let Some(p) = priority {
        out.extend_from_slice(&p);
    }
    out.extend_from_slice(&block[..first]);
    let mut rest = &block[first..];
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME);
        let flags = if n == rest.len() { END_HEADERS } else { 0 };
        push_frame_header(out, n, CONTINUATION, flags, stream);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

fn push_frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// A header block the adapter cannot walk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    /// The block ends inside a representation.
    #[error("header block truncated at byte {0}")]
    Truncated(usize),
    /// An integer over 2^32 (RFC 7541 §5.1 leaves the limit to us).
    #[error("integer overflow at byte {0}")]
    Overflow(usize),
    /// A Huffman string that does not decode (RFC 7541 §5.2: EOS, or
    /// padding longer than 7 bits or not all ones).
    #[error("invalid Huffman string at byte {0}")]
    Huffman(usize),
}

/// RFC 7541 §5.1: an integer with an `n`-bit prefix at `*at`.
fn integer(block: &[u8], at: &mut usize, n: u32) -> Result<u64, HpackError> {
    let start = *at;
    let first = *block.get(*at).ok_or(HpackError::Truncated(start))?;
    *at += 1;
    let max = (1u64 << n) - 1;
    let mut value = u64::from(first) & max;
    if value < max {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(HpackError::Truncated(start))?;
        *at += 1;
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(HpackError::Overflow(start));
        }
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError::Overflow(start));
        }
    }
}

/// RFC 7541 §5.2: a string literal at `*at`, decoded.
fn string<'a>(block: &'a [u8], at: &mut usize) -> Result<std::borrow::Cow<'a, [u8]>, HpackError> {
    let start = *at;
    let huffman = block.get(*at).ok_or(HpackError::Truncated(start))? & 0x80 != 0;
    let len = integer(block, at, 7)?;
    let len = usize::try_from(len).map_err(|_| HpackError::Overflow(start))?;
    let end = at.checked_add(len).filter(|&e| e <= block.len()).ok_or(HpackError::Truncated(start))?;
    let raw = &block[*at..end];
    *at = end;
    if huffman {
        huffman_decode(raw).map(std::borrow::Cow::Owned).ok_or(HpackError::Huffman(start))
    } else {
        Ok(std::borrow::Cow::Borrowed(raw))
    }
}

/// Walks a header block (RFC 7541 §6) and returns it with every
/// `:authority` that h2 would refuse replaced by `localhost`, or `None`
/// when there is none (the block then goes on byte-exact).
pub fn rewrite_block(block: &[u8]) -> Result<Option<Vec<u8>>, HpackError> {
    walk(block, &mut |_| {})
}

/// One representation of a header block (RFC 7541 §6), as [`walk`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rep {
    Indexed(u64),
    SizeUpdate(u64),
    /// `index` 0: the name is literal.
    Literal {
        index: u64,
        name: Option<Vec<u8>>,
        value: Vec<u8>,
    },
}

/// [`rewrite_block`], telling `seen` each representation it reads.
fn walk(block: &[u8], seen: &mut dyn FnMut(Rep)) -> Result<Option<Vec<u8>>, HpackError> {
    let mut out = Vec::with_capacity(block.len());
    let mut changed = false;
    let mut at = 0;
    while at < block.len() {
        let start = at;
        let b = block[at];
        let prefix = if b & 0x80 != 0 {
            // §6.1 indexed header field: nothing literal to look at.
            seen(Rep::Indexed(integer(block, &mut at, 7)?));
            None
        } else if b & 0xc0 == 0x40 {
            // §6.2.1 literal with incremental indexing.
            Some(6)
        } else if b & 0xe0 == 0x20 {
            // §6.3 dynamic table size update.
            seen(Rep::SizeUpdate(integer(block, &mut at, 5)?));
            None
        } else {
            // §6.2.2 without indexing (0000), §6.2.3 never indexed (0001).
            Some(4)
        };
        if let Some(n) = prefix {
            let index = integer(block, &mut at, n)?;
            let name = if index == 0 { Some(string(block, &mut at)?) } else { None };
            let authority = name.as_deref().map_or(index == AUTHORITY_INDEX, |n| n == AUTHORITY);
            let value_at = at;
            let value = string(block, &mut at)?;
            seen(Rep::Literal { index, name: name.map(|n| n.into_owned()), value: value.to_vec() });
            if authority && http::uri::Authority::try_from(&*value).is_err() {
                // Same representation and name, a plain (not Huffman) value.
                out.extend_from_slice(&block[start..value_at]);
                out.push(REPLACEMENT.len() as u8);
                out.extend_from_slice(REPLACEMENT);
                changed = true;
                continue;
            }
        }
        out.extend_from_slice(&block[start..at]);
    }
    Ok(changed.then_some(out))
}

/// RFC 7541 Appendix B, the codes of symbols 0-255 (EOS is never valid in
/// a string).
const HUFFMAN_CODES: [u32; 256] = [
    0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7, 0xfffffe8, 0xffffea,
    0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec, 0xfffffed, 0xfffffee, 0xfffffef,
    0xffffff0, 0xffffff1, 0xffffff2, 0x3ffffffe, 0xffffff3, 0xffffff4, 0xffffff5, 0xffffff6, 0xffffff7,
    0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb, 0x14, 0x3f8, 0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa, 0x3fa,
    0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18, 0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    0x5c, 0xfb, 0x7ffc, 0x20, 0xffb, 0x3fc, 0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64,
    0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0xfc, 0x73, 0xfd,
    0x1ffb, 0x7fff0, 0x1ffc, 0x3ffc, 0x22, 0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26, 0x27, 0x6, 0x74,
    0x75, 0x28, 0x29, 0x2a, 0x7, 0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7ffe,
    0x7fc, 0x3ffd, 0x1ffd, 0xffffffc, 0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4, 0x3fffd5,
    0x7fffd9, 0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb, 0x7fffdf, 0xffffec,
    0xffffed, 0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3, 0x7fffe4, 0x1fffdc, 0x3fffd8,
    0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef, 0x3fffda, 0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc,
    0x7fffe8, 0x7fffe9, 0x1fffde, 0x7fffea, 0x3fffdd, 0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb,
    0x7fffec, 0x1fffe0, 0x1fffe1, 0x3fffe0, 0x1fffe2, 0x7fffed, 0x3fffe1, 0x7fffee, 0x7fffef, 0xfffea,
    0x3fffe2, 0x3fffe3, 0x3fffe4, 0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1, 0x3ffffe0, 0x3ffffe1, 0xfffeb,
    0x7fff1, 0x3fffe7, 0x7ffff2, 0x3fffe8, 0x1ffffec, 0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde, 0x7ffffdf,
    0x3ffffe5, 0xfffff1, 0x1ffffed, 0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7, 0x7ffffe2,
    0xfffff2, 0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4, 0x7ffffe5, 0xfffec,
    0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3, 0x3fffea, 0x3fffeb, 0x1ffffee,
    0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4, 0x3ffffeb, 0x7ffffe6, 0x3ffffec, 0x3ffffed,
    0x7ffffe7, 0x7ffffe8, 0x7ffffe9, 0x7ffffea, 0x7ffffeb, 0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee,
    0x7ffffef, 0x7fffff0, 0x3ffffee,
];

const HUFFMAN_LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28,
    28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6,
    6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7,
    8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7,
    15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24,
    23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23,
    23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26,
    26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20,
    21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27,
    27, 27, 26,
];

fn huffman_table() -> &'static HashMap<(u8, u32), u8> {
    static TABLE: OnceLock<HashMap<(u8, u32), u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=255u8).map(|s| ((HUFFMAN_LENGTHS[usize::from(s)], HUFFMAN_CODES[usize::from(s)]), s)).collect()
    })
}

/// RFC 7541 §5.2 / Appendix B; `None` for an invalid string.
fn huffman_decode(raw: &[u8]) -> Option<Vec<u8>> {
    let table = huffman_table();
    let mut out = Vec::with_capacity(raw.len() * 8 / 5);
    let (mut code, mut bits) = (0u32, 0u8);
    for byte in raw {
        for i in (0..8).rev() {
            code = code << 1 | u32::from(byte >> i & 1);
            bits += 1;
            if let Some(&s) = table.get(&(bits, code)) {
                out.push(s);
                (code, bits) = (0, 0);
            } else if bits >= 30 {
                return None;
            }
        }
    }
    // Padding: the most significant bits of EOS (all ones), at most 7.
    (bits <= 7 && code == (1u32 << bits) - 1).then_some(out)
}

/// RFC 7541 §5.2, for tests and callers that write header blocks.
pub fn huffman_encode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u64, 0u32);
    for &c in s {
        acc = acc << HUFFMAN_LENGTHS[usize::from(c)] | u64::from(HUFFMAN_CODES[usize::from(c)]);
        bits += u32::from(HUFFMAN_LENGTHS[usize::from(c)]);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        out.push((acc << (8 - bits) | ((1u64 << (8 - bits)) - 1)) as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCKET: &str = "/var/lib/kubelet/plugins_registry/x-reg.sock";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn reps(block: &[u8]) -> Vec<Rep> {
        let mut seen = Vec::new();
        assert_eq!(walk(block, &mut |r| seen.push(r)), Ok(None), "nothing to rewrite");
        seen
    }

    fn lit(index: u64, name: Option<&str>, value: &str) -> Rep {
        Rep::Literal { index, name: name.map(|n| n.as_bytes().to_vec()), value: value.as_bytes().to_vec() }
    }

    /// RFC 7541 §5.2 string, plain or Huffman.
    fn string_lit(s: &str, huffman: bool) -> Vec<u8> {
        let body = if huffman { huffman_encode(s.as_bytes()) } else { s.as_bytes().to_vec() };
        let mut out = int(if huffman { 0x80 } else { 0 }, 7, body.len() as u64);
        out.extend(body);
        out
    }

    /// RFC 7541 §5.1 integer with the representation bits in `first`.
    fn int(first: u8, n: u32, mut v: u64) -> Vec<u8> {
        let max = (1u64 << n) - 1;
        if v < max {
            return vec![first | v as u8];
        }
        let mut out = vec![first | max as u8];
        v -= max;
        while v >= 128 {
            out.push((v % 128) as u8 | 0x80);
            v /= 128;
        }
        out.push(v as u8);
        out
    }

    /// A request header block the way grpc-go's hpack encoder writes one
    /// for `GetInfo` (static name indices, incremental indexing), with
    /// `authority` and its representation (`kind`: 0x40, 0x00 or 0x10).
    fn grpc_block(authority: &str, kind: u8, huffman: bool) -> Vec<u8> {
        let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
        b.extend(int(0x40, 6, 4));
        b.extend(string_lit("/pluginregistration.Registration/GetInfo", huffman));
        b.extend(int(kind, if kind == 0x40 { 6 } else { 4 }, 1));
        b.extend(string_lit(authority, huffman));
        b.extend(int(0x40, 6, 31));
        b.extend(string_lit("application/grpc", huffman));
        b.extend(int(0x40, 6, 58));
        b.extend(string_lit("grpc-go/1.72.0", huffman));
        b.push(0x40);
        b.extend(string_lit("te", huffman));
        b.extend(string_lit("trailers", huffman));
        b
    }

    /// `grpc_block` with its authority value, plain, replaced by localhost.
    fn expected(kind: u8, huffman: bool) -> Vec<u8> {
        let got = grpc_block(SOCKET, kind, huffman);
        let mut prefix = vec![0x83, 0x86];
        prefix.extend(int(0x40, 6, 4));
        prefix.extend(string_lit("/pluginregistration.Registration/GetInfo", huffman));
        prefix.extend(int(kind, if kind == 0x40 { 6 } else { 4 }, 1));
        let suffix_at = prefix.len() + string_lit(SOCKET, huffman).len();
        let mut want = prefix;
        want.extend(string_lit("localhost", false));
        want.extend_from_slice(&got[suffix_at..]);
        want
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_frame_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    const SETTINGS: &[u8] = &[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0];

    fn run(input: &[u8], chunk: usize) -> Vec<u8> {
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            r.feed(c, &mut out);
        }
        r.finish(&mut out);
        out
    }

    #[test]
    fn rfc7541_c3_requests_without_huffman_walk() {
        assert_eq!(
            reps(&hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d")),
            [Rep::Indexed(2), Rep::Indexed(6), Rep::Indexed(4), lit(1, None, "www.example.com")]
        );
        assert_eq!(
            reps(&hex("8286 84be 5808 6e6f 2d63 6163 6865")),
            [Rep::Indexed(2), Rep::Indexed(6), Rep::Indexed(4), Rep::Indexed(62), lit(24, None, "no-cache")]
        );
        assert_eq!(
            reps(&hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65")),
            [
                Rep::Indexed(2),
                Rep::Indexed(7),
                Rep::Indexed(5),
                Rep::Indexed(63),
                lit(0, Some("custom-key"), "custom-value")
            ]
        );
    }

    #[test]
    fn rfc7541_c4_requests_with_huffman_walk() {
        assert_eq!(
            reps(&hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")),
            [Rep::Indexed(2), Rep::Indexed(6), Rep::Indexed(4), lit(1, None, "www.example.com")]
        );
        assert_eq!(
            reps(&hex("8286 84be 5886 a8eb 1064 9cbf")),
            [Rep::Indexed(2), Rep::Indexed(6), Rep::Indexed(4), Rep::Indexed(62), lit(24, None, "no-cache")]
        );
        assert_eq!(
            reps(&hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf")),
            [
                Rep::Indexed(2),
                Rep::Indexed(7),
                Rep::Indexed(5),
                Rep::Indexed(63),
                lit(0, Some("custom-key"), "custom-value")
            ]
        );
        assert_eq!(huffman_encode(b"www.example.com"), hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"));
    }

    #[test]
    fn rfc7541_c1_integers_and_size_updates() {
        // C.1.2: 1337 with a 5-bit prefix.
        let mut at = 0;
        assert_eq!(integer(&[0x1f, 0x9a, 0x0a], &mut at, 5), Ok(1337));
        assert_eq!(at, 3);
        assert_eq!(reps(&[0x3f, 0xe1, 0x1f, 0x82]), [Rep::SizeUpdate(4096), Rep::Indexed(2)]);
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_nothing_else_changes() {
        for huffman in [false, true] {
            for kind in [0x40, 0x00, 0x10] {
                let block = grpc_block(SOCKET, kind, huffman);
                let got = rewrite_block(&block).unwrap().expect("rewritten");
                assert_eq!(got, expected(kind, huffman), "kind {kind:#x} huffman {huffman}");
                let mut seen = Vec::new();
                assert_eq!(walk(&got, &mut |r| seen.push(r)), Ok(None), "the result is valid");
                assert_eq!(seen[3], lit(1, None, "localhost"));
            }
        }
    }

    #[test]
    fn a_literal_authority_name_is_recognised_too() {
        let mut block = vec![0x00];
        block.extend(string_lit(":authority", true));
        block.extend(string_lit(SOCKET, false));
        let mut want = vec![0x00];
        want.extend(string_lit(":authority", true));
        want.extend(string_lit("localhost", false));
        assert_eq!(rewrite_block(&block), Ok(Some(want)));
    }

    #[test]
    fn valid_authorities_are_left_alone() {
        for a in ["localhost", "127.0.0.1:10250", "[::1]:80", "rdma.kuberdma.io"] {
            for huffman in [false, true] {
                assert_eq!(rewrite_block(&grpc_block(a, 0x40, huffman)), Ok(None), "{a}");
            }
        }
        for a in ["%2Fvar%2Flib%2Fsock", "unix:///run/x.sock", "a b"] {
            assert!(rewrite_block(&grpc_block(a, 0x40, false)).unwrap().is_some(), "{a}");
        }
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        assert_eq!(rewrite_block(&[0x41]), Err(HpackError::Truncated(1)));
        assert_eq!(rewrite_block(&[0x41, 0x05, b'a']), Err(HpackError::Truncated(1)));
        assert_eq!(rewrite_block(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), Err(HpackError::Overflow(0)));
        // A Huffman string with 8 bits of padding, then one that is EOS.
        assert_eq!(rewrite_block(&[0x41, 0x81, 0xff]), Err(HpackError::Huffman(1)));
        assert_eq!(rewrite_block(&[0x41, 0x84, 0xff, 0xff, 0xff, 0xff]), Err(HpackError::Huffman(1)));
    }

    /// preface, SETTINGS, HEADERS (`flags`, `payload`), DATA on stream 1.
    fn stream(headers: &[u8]) -> Vec<u8> {
        let mut s = PREFACE.to_vec();
        s.extend_from_slice(SETTINGS);
        s.extend_from_slice(headers);
        s.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        s
    }

    #[test]
    fn a_padded_prioritised_headers_frame_is_rewritten_with_its_priority_split_over_reads() {
        let block = grpc_block(SOCKET, 0x40, true);
        let mut payload = vec![3]; // pad length
        payload.extend([0x80, 0, 0, 0, 16]); // exclusive, depends on 0, weight 16
        payload.extend(&block);
        payload.extend([0, 0, 0]);
        let input = stream(&frame(HEADERS, END_HEADERS | PADDED | PRIORITY, 1, &payload));
        let mut want_payload = vec![0x80, 0, 0, 0, 16];
        want_payload.extend(expected(0x40, true));
        let want = stream(&frame(HEADERS, END_HEADERS | PRIORITY, 1, &want_payload));
        for chunk in [1, 2, 7, 9, 100, input.len()] {
            assert_eq!(run(&input, chunk), want, "read {chunk} bytes at a time");
        }
    }

    #[test]
    fn a_block_over_continuation_frames_comes_out_as_one_headers_frame() {
        let block = grpc_block(SOCKET, 0x40, false);
        let (a, b) = block.split_at(20);
        let (b, c) = b.split_at(30);
        let mut frames = frame(HEADERS, END_STREAM, 3, a);
        frames.extend(frame(CONTINUATION, 0, 3, b));
        frames.extend(frame(CONTINUATION, END_HEADERS, 3, c));
        let want = stream(&frame(HEADERS, END_STREAM | END_HEADERS, 3, &expected(0x40, false)));
        assert_eq!(run(&stream(&frames), 1), want);
    }

    #[test]
    fn a_rewritten_block_over_16384_bytes_is_framed_in_continuations() {
        let mut block = grpc_block(SOCKET, 0x40, false);
        block.push(0x00);
        block.extend(string_lit("x-big", false));
        block.extend(string_lit(&"v".repeat(40_000), false));
        let got = run(&stream(&frame(HEADERS, END_HEADERS, 1, &block)), 4096);
        let mut want_block = expected(0x40, false);
        want_block.extend_from_slice(&block[grpc_block(SOCKET, 0x40, false).len()..]);
        let mut want = PREFACE.to_vec();
        want.extend_from_slice(SETTINGS);
        want.extend(frame(HEADERS, 0, 1, &want_block[..16384]));
        want.extend(frame(CONTINUATION, 0, 1, &want_block[16384..32768]));
        want.extend(frame(CONTINUATION, END_HEADERS, 1, &want_block[32768..]));
        want.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        assert_eq!(got, want);
    }

    #[test]
    fn anything_it_cannot_follow_passes_through_byte_exact() {
        // A valid authority: untouched, padding and all.
        let mut payload = vec![2];
        payload.extend(grpc_block("localhost", 0x40, true));
        payload.extend([0, 0]);
        let input = stream(&frame(HEADERS, END_HEADERS | PADDED, 1, &payload));
        assert_eq!(run(&input, 1), input);
        // Not HTTP/2.
        let input = b"GET / HTTP/1.1\r\nHost: /x\r\n\r\n".to_vec();
        assert_eq!(run(&input, 3), input);
        // Padding longer than the frame; a truncated block; CONTINUATION
        // missing; a block over the cap; the client leaving mid-block.
        let bad = [
            stream(&frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82])),
            stream(&frame(HEADERS, END_HEADERS, 1, &[0x41, 0x20, b'/'])),
            stream(&frame(HEADERS, 0, 1, &grpc_block(SOCKET, 0x40, false))),
        ];
        for input in bad {
            assert_eq!(run(&input, 5), input);
        }
        let mut big = PREFACE.to_vec();
        for _ in 0..5 {
            big.extend(frame(if big.len() == 24 { HEADERS } else { CONTINUATION }, 0, 1, &[0x82; 16000]));
        }
        assert_eq!(run(&big, 1000), big);
        let mut cut = stream(&frame(HEADERS, END_HEADERS, 1, &grpc_block(SOCKET, 0x40, false)));
        cut.truncate(cut.len() - 30);
        assert_eq!(run(&cut, 1), cut);
    }

    #[tokio::test]
    async fn the_adapter_rewrites_what_the_server_reads_and_passes_writes_through() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = AuthorityFix::new(server);
        let input = stream(&frame(HEADERS, END_HEADERS, 1, &grpc_block(SOCKET, 0x40, true)));
        let want = stream(&frame(HEADERS, END_HEADERS, 1, &expected(0x40, true)));
        let writer = tokio::spawn(async move {
            for c in input.chunks(3) {
                client.write_all(c).await.unwrap();
            }
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, want);
        server.write_all(b"answer").await.unwrap();
        server.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"answer");
    }
}
