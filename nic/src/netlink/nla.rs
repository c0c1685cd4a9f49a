//! Attribute value helpers every codec of [`super`] decodes and encodes with,
//! so that every family has the same bounds: fixed-size values must have
//! exactly their size, strings stop at the first NUL, must be UTF-8 and are
//! capped at [`MAX_STRING`] bytes, flags carry no payload. Every error names
//! the attribute (`RDMA_NLDEV_ATTR_DEV_INDEX: expected 4 bytes, got 2`).
//!
//! netlink-packet-core's `parse_u32`/`parse_string` do not fit: their errors
//! do not name the attribute, `parse_string` neither caps the length nor stops
//! at an inner NUL.

use netlink_packet_core::{DecodeError, DefaultNla, NlaBuffer, NLA_F_NESTED, NLA_F_NET_BYTEORDER};

/// The longest string attribute accepted, NUL excluded. Every string the
/// kernel sends us is a name or a version (`IFNAMSIZ` 16, `IB_DEVICE_NAME_MAX`
/// 64, `GENL_NAMSIZ` 16, PCI names); 256 leaves room without letting a
/// corrupt reply allocate the whole datagram as a string.
pub const MAX_STRING: usize = 256;

/// Exactly `N` bytes.
pub fn array<const N: usize>(v: &[u8], what: &str) -> Result<[u8; N], DecodeError> {
    <[u8; N]>::try_from(v).map_err(|_| {
        let unit = if N == 1 { "byte" } else { "bytes" };
        DecodeError::from(format!("{what}: expected {N} {unit}, got {}", v.len()))
    })
}

pub fn u8(v: &[u8], what: &str) -> Result<u8, DecodeError> {
    array::<1>(v, what).map(|[b]| b)
}

/// A host-endian u16.
pub fn u16(v: &[u8], what: &str) -> Result<u16, DecodeError> {
    array(v, what).map(u16::from_ne_bytes)
}

/// A host-endian u32.
pub fn u32(v: &[u8], what: &str) -> Result<u32, DecodeError> {
    array(v, what).map(u32::from_ne_bytes)
}

/// A host-endian u64.
pub fn u64(v: &[u8], what: &str) -> Result<u64, DecodeError> {
    array(v, what).map(u64::from_ne_bytes)
}

/// An `NLA_FLAG`: present, with no payload.
pub fn flag(v: &[u8], what: &str) -> Result<(), DecodeError> {
    if v.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::from(format!("{what}: a flag has no payload, got {} bytes", v.len())))
    }
}

/// A NUL-terminated string (`nla_put_string`; a missing NUL is accepted),
/// shorter than `limit` bytes (the family's own bound, e.g. `GENL_NAMSIZ`)
/// and never longer than [`MAX_STRING`].
pub fn string_below(v: &[u8], what: &str, limit: usize) -> Result<String, DecodeError> {
    let s = v.split(|b| *b == 0).next().unwrap_or(v);
    let limit = limit.min(MAX_STRING + 1);
    if s.len() >= limit {
        return Err(DecodeError::from(format!(
            "{what}: string of {} bytes is too long (at most {})",
            s.len(),
            limit - 1
        )));
    }
    String::from_utf8(s.to_vec()).map_err(|_| DecodeError::from(format!("{what}: not UTF-8")))
}

/// A NUL-terminated string of at most [`MAX_STRING`] bytes.
pub fn string(v: &[u8], what: &str) -> Result<String, DecodeError> {
    string_below(v, what, MAX_STRING + 1)
}

/// The encoded length of `s` as a string attribute value (its NUL included).
pub fn string_len(s: &str) -> usize {
    s.len() + 1
}

/// Writes `s` and its NUL into `buf` (at least [`string_len`] bytes).
pub fn emit_string(buf: &mut [u8], s: &str) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

/// An attribute a codec does not decode, kept so that it re-emits as it was
/// read. netlink-packet-core cannot emit a type with both `NLA_F_NESTED` and
/// `NLA_F_NET_BYTEORDER` (its `set_nested_flag` re-reads the masked type and
/// drops the byte-order bit), so only one flag is kept, nested first.
pub fn kept<T: AsRef<[u8]> + ?Sized>(buf: &NlaBuffer<&T>) -> DefaultNla {
    let flag = if buf.nested_flag() {
        NLA_F_NESTED
    } else if buf.network_byte_order_flag() {
        NLA_F_NET_BYTEORDER
    } else {
        0
    };
    DefaultNla::new(buf.kind() | flag, buf.value().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sizes_are_exact_and_errors_name_the_attribute() {
        assert_eq!(u32(&7u32.to_ne_bytes(), "A").unwrap(), 7);
        let e = u32(&[1, 2], "RDMA_NLDEV_ATTR_DEV_INDEX").unwrap_err().to_string();
        assert_eq!(e, "RDMA_NLDEV_ATTR_DEV_INDEX: expected 4 bytes, got 2");
        let e = u8(&[1, 2], "X_CMODE").unwrap_err().to_string();
        assert_eq!(e, "X_CMODE: expected 1 byte, got 2");
        assert!(u64(&[0; 9], "G").is_err());
        assert!(u16(&[0; 1], "G").is_err());
        assert!(flag(&[], "F").is_ok());
        assert!(flag(&[0], "F").unwrap_err().to_string().contains("F: a flag has no payload, got 1 bytes"));
    }

    #[test]
    fn strings_stop_at_nul_and_are_capped() {
        assert_eq!(string(b"mlx5_0\0junk", "N").unwrap(), "mlx5_0");
        assert_eq!(string(b"no-nul", "N").unwrap(), "no-nul");
        assert_eq!(string(&[b'a'; MAX_STRING], "N").unwrap().len(), MAX_STRING);
        let e = string(&[b'a'; MAX_STRING + 1], "DEV_NAME").unwrap_err().to_string();
        assert!(e.starts_with("DEV_NAME: string of 257 bytes is too long"), "{e}");
        assert!(string(&[0xff, 0], "N").unwrap_err().to_string().contains("N: not UTF-8"));
        assert!(string_below(b"0123456789abcdef\0", "FAMILY", 16).is_err());
        assert!(string_below(b"0123456789abcde\0", "FAMILY", 16).is_ok());
        let mut buf = [0xaa; 4];
        emit_string(&mut buf, "abc");
        assert_eq!(buf, *b"abc\0");
        assert_eq!(string_len("abc"), 4);
    }
}
