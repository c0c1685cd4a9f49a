//! The devlink attribute enum (`enum devlink_attr`, include/uapi/linux/devlink.h)
//! and its codec: one enum for every nesting level, unknown attributes kept
//! verbatim.

use netlink_packet_core::{DecodeError, DefaultNla, Emitable, Nla, NlaBuffer, NlasIterator, Parseable};

use super::*;
use crate::netlink::nla;

/// How deep devlink parameter attributes nest: PARAM → VALUES_LIST → VALUE.
const MAX_DEPTH: usize = 3;

/// One devlink attribute. Unknown ones are kept verbatim in [`DevlinkAttr::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DevlinkAttr {
    /// `DEVLINK_ATTR_BUS_NAME` (`pci`, `netdevsim`, `auxiliary`).
    BusName(String),
    /// `DEVLINK_ATTR_DEV_NAME` (`0000:17:00.0`, `netdevsim10`).
    DevName(String),
    /// `DEVLINK_ATTR_PORT_INDEX`.
    PortIndex(u32),
    /// `DEVLINK_ATTR_PARAM`: a parameter's attributes.
    Param(Vec<DevlinkAttr>),
    /// `DEVLINK_ATTR_PARAM_NAME`.
    ParamName(String),
    /// `DEVLINK_ATTR_PARAM_GENERIC` (present: a generic parameter).
    ParamGeneric,
    /// `DEVLINK_ATTR_PARAM_TYPE`: an `NLA_*` number ([`nla_type`]).
    ParamType(u8),
    /// `DEVLINK_ATTR_PARAM_VALUES_LIST`: [`DevlinkAttr::ParamValue`]s.
    ParamValuesList(Vec<DevlinkAttr>),
    /// `DEVLINK_ATTR_PARAM_VALUE`: a cmode and its value.
    ParamValue(Vec<DevlinkAttr>),
    /// `DEVLINK_ATTR_PARAM_VALUE_DATA`, raw: its layout depends on the
    /// parameter's type (empty: a true boolean).
    ParamValueData(Vec<u8>),
    /// `DEVLINK_ATTR_PARAM_VALUE_CMODE`.
    ParamValueCmode(u8),
    /// Anything else.
    Other(DefaultNla),
}

fn nest_len(v: &[DevlinkAttr]) -> usize {
    v.buffer_len()
}

impl Nla for DevlinkAttr {
    fn value_len(&self) -> usize {
        use DevlinkAttr::*;
        match self {
            BusName(s) | DevName(s) | ParamName(s) => nla::string_len(s),
            PortIndex(_) => 4,
            Param(v) | ParamValuesList(v) | ParamValue(v) => nest_len(v),
            ParamGeneric => 0,
            ParamType(_) | ParamValueCmode(_) => 1,
            ParamValueData(d) => d.len(),
            Other(n) => n.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        use DevlinkAttr::*;
        match self {
            BusName(_) => DEVLINK_ATTR_BUS_NAME,
            DevName(_) => DEVLINK_ATTR_DEV_NAME,
            PortIndex(_) => DEVLINK_ATTR_PORT_INDEX,
            // The kernel starts these nests with nla_nest_start_noflag: no NLA_F_NESTED.
            Param(_) => DEVLINK_ATTR_PARAM,
            ParamName(_) => DEVLINK_ATTR_PARAM_NAME,
            ParamGeneric => DEVLINK_ATTR_PARAM_GENERIC,
            ParamType(_) => DEVLINK_ATTR_PARAM_TYPE,
            ParamValuesList(_) => DEVLINK_ATTR_PARAM_VALUES_LIST,
            ParamValue(_) => DEVLINK_ATTR_PARAM_VALUE,
            ParamValueData(_) => DEVLINK_ATTR_PARAM_VALUE_DATA,
            ParamValueCmode(_) => DEVLINK_ATTR_PARAM_VALUE_CMODE,
            Other(n) => n.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        use DevlinkAttr::*;
        match self {
            BusName(s) | DevName(s) | ParamName(s) => nla::emit_string(buf, s),
            PortIndex(v) => buf[..4].copy_from_slice(&v.to_ne_bytes()),
            Param(v) | ParamValuesList(v) | ParamValue(v) => v.as_slice().emit(buf),
            ParamGeneric => {}
            ParamType(v) | ParamValueCmode(v) => buf[0] = *v,
            ParamValueData(d) => buf[..d.len()].copy_from_slice(d),
            Other(n) => n.emit_value(buf),
        }
    }
}

fn parse_nest(v: &[u8], what: &str, depth: usize) -> Result<Vec<DevlinkAttr>, DecodeError> {
    if depth >= MAX_DEPTH {
        return Err(DecodeError::from(format!("{what}: nested deeper than devlink parameters nest")));
    }
    let mut out = Vec::new();
    for nla in NlasIterator::new(v) {
        let nla = nla.map_err(|e| DecodeError::from(format!("{what}: {e}")))?;
        out.push(parse_attr(&nla, depth + 1)?);
    }
    // Re-emitting pads the last attribute; the nest's u16 length must still hold it.
    if nest_len(&out) > u16::MAX as usize - 4 {
        return Err(DecodeError::from(format!("{what}: nest too long to re-emit")));
    }
    Ok(out)
}

fn parse_attr<T: AsRef<[u8]> + ?Sized>(
    buf: &NlaBuffer<&T>,
    depth: usize,
) -> Result<DevlinkAttr, DecodeError> {
    let v = buf.value();
    use DevlinkAttr::*;
    Ok(match buf.kind() {
        DEVLINK_ATTR_BUS_NAME => BusName(nla::string(v, "DEVLINK_ATTR_BUS_NAME")?),
        DEVLINK_ATTR_DEV_NAME => DevName(nla::string(v, "DEVLINK_ATTR_DEV_NAME")?),
        DEVLINK_ATTR_PORT_INDEX => PortIndex(nla::u32(v, "DEVLINK_ATTR_PORT_INDEX")?),
        DEVLINK_ATTR_PARAM => Param(parse_nest(v, "DEVLINK_ATTR_PARAM", depth)?),
        DEVLINK_ATTR_PARAM_NAME => ParamName(nla::string(v, "DEVLINK_ATTR_PARAM_NAME")?),
        DEVLINK_ATTR_PARAM_GENERIC => {
            nla::flag(v, "DEVLINK_ATTR_PARAM_GENERIC")?;
            ParamGeneric
        }
        DEVLINK_ATTR_PARAM_TYPE => ParamType(nla::u8(v, "DEVLINK_ATTR_PARAM_TYPE")?),
        DEVLINK_ATTR_PARAM_VALUES_LIST => {
            ParamValuesList(parse_nest(v, "DEVLINK_ATTR_PARAM_VALUES_LIST", depth)?)
        }
        DEVLINK_ATTR_PARAM_VALUE => ParamValue(parse_nest(v, "DEVLINK_ATTR_PARAM_VALUE", depth)?),
        DEVLINK_ATTR_PARAM_VALUE_DATA => ParamValueData(v.to_vec()),
        DEVLINK_ATTR_PARAM_VALUE_CMODE => ParamValueCmode(nla::u8(v, "DEVLINK_ATTR_PARAM_VALUE_CMODE")?),
        _ => Other(nla::kept(buf)),
    })
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for DevlinkAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        parse_attr(buf, 0)
    }
}

/// A devlink message: `genlmsghdr` and [`DevlinkAttr`]s, under the family id
/// the controller gave devlink.
pub type DevlinkMessage = GenlMessage<DevlinkAttr>;
