//! Netlink codecs over one transport ([`transport`]): rtnetlink links and VFs,
//! DCB, RDMA nldev, generic netlink (devlink), and the multicast event subscriber.
pub mod dcb;
pub mod devlink;
pub mod events;
pub mod genl;
pub mod link;
pub mod nldev;
pub mod transport;
pub mod vf;

use netlink_packet_core::{DefaultNla, NlaBuffer, NLA_F_NESTED, NLA_F_NET_BYTEORDER};

/// An attribute a codec does not decode, kept so that it re-emits as it was
/// read. netlink-packet-core cannot emit a type with both `NLA_F_NESTED` and
/// `NLA_F_NET_BYTEORDER` (its `set_nested_flag` re-reads the masked type and
/// drops the byte-order bit), so only one flag is kept, nested first.
pub(crate) fn kept_nla<T: AsRef<[u8]> + ?Sized>(buf: &NlaBuffer<&T>) -> DefaultNla {
    let flag = if buf.nested_flag() {
        NLA_F_NESTED
    } else if buf.network_byte_order_flag() {
        NLA_F_NET_BYTEORDER
    } else {
        0
    };
    DefaultNla::new(buf.kind() | flag, buf.value().to_vec())
}
