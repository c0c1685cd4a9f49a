//! The controller family's attributes (`CTRL_ATTR_*`, include/uapi/linux/genetlink.h).

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use super::{CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_VERSION, GENL_NAMSIZ};
use crate::netlink::nla;

/// An attribute of the controller family (`CTRL_ATTR_*`); the ones not
/// needed to resolve a family are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtrlAttr {
    /// `CTRL_ATTR_FAMILY_ID`.
    FamilyId(u16),
    /// `CTRL_ATTR_FAMILY_NAME`.
    FamilyName(String),
    /// `CTRL_ATTR_VERSION`.
    Version(u32),
    /// Anything else (`HDRSIZE`, `MAXATTR`, `OPS`, `MCAST_GROUPS`, …).
    Other(DefaultNla),
}

impl Nla for CtrlAttr {
    fn value_len(&self) -> usize {
        match self {
            CtrlAttr::FamilyId(_) => 2,
            CtrlAttr::FamilyName(s) => nla::string_len(s),
            CtrlAttr::Version(_) => 4,
            CtrlAttr::Other(n) => n.value_len(),
        }
    }
    fn kind(&self) -> u16 {
        match self {
            CtrlAttr::FamilyId(_) => CTRL_ATTR_FAMILY_ID,
            CtrlAttr::FamilyName(_) => CTRL_ATTR_FAMILY_NAME,
            CtrlAttr::Version(_) => CTRL_ATTR_VERSION,
            CtrlAttr::Other(n) => n.kind(),
        }
    }
    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            CtrlAttr::FamilyId(v) => buf[..2].copy_from_slice(&v.to_ne_bytes()),
            CtrlAttr::FamilyName(s) => nla::emit_string(buf, s),
            CtrlAttr::Version(v) => buf[..4].copy_from_slice(&v.to_ne_bytes()),
            CtrlAttr::Other(n) => n.emit_value(buf),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for CtrlAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            CTRL_ATTR_FAMILY_ID => CtrlAttr::FamilyId(nla::u16(v, "CTRL_ATTR_FAMILY_ID")?),
            CTRL_ATTR_FAMILY_NAME => {
                CtrlAttr::FamilyName(nla::string_below(v, "CTRL_ATTR_FAMILY_NAME", GENL_NAMSIZ)?)
            }
            CTRL_ATTR_VERSION => CtrlAttr::Version(nla::u32(v, "CTRL_ATTR_VERSION")?),
            _ => CtrlAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}
