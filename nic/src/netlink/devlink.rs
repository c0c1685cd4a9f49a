//! Devlink (generic netlink family `devlink`): device parameters, read and
//! set the way `devlink dev param show|set` does.
//!
//! Constants come from the uapi header `include/uapi/linux/devlink.h` (checked
//! against Debian's linux-libc-dev 6.1.192); the reply layout is the kernel's
//! `devlink_nl_param_fill` and `devlink_nl_param_value_fill_one`
//! (net/devlink/leftover.c in Linux 6.1, net/core/devlink.c before 6.1), the
//! request checks are `__devlink_nl_cmd_param_set_doit` and
//! `devlink_param_value_get_from_info`. Integers are host-endian.
//!
//! ```text
//! nlmsghdr (16)      | len u32 | type u16 = devlink family id | flags u16 | seq u32 | pid u32 |
//! genlmsghdr (4)     | cmd u8 = PARAM_GET (38) | version u8 = 1 | reserved u16 |
//! attributes         | BUS_NAME "pci\0" | DEV_NAME "0000:17:00.0\0"
//!                    | PARAM {                                   (a nest without NLA_F_NESTED)
//!                    |   PARAM_NAME "enable_roce\0" | [PARAM_GENERIC flag] | PARAM_TYPE u8 (NLA_FLAG = 6)
//!                    |   PARAM_VALUES_LIST {
//!                    |     PARAM_VALUE { PARAM_VALUE_CMODE u8 | [PARAM_VALUE_DATA] }   one per cmode
//!                    | } }
//! ```
//!
//! `PARAM_VALUE_DATA` is "dynamic": its layout is the one `PARAM_TYPE` names
//! (u8, u16, u32, a NUL-terminated string), and a boolean is the *presence* of
//! a zero-length attribute (`NLA_FLAG`): true is sent, false is left out, in
//! replies and in `PARAM_SET` requests alike.
//!
//! Every devlink attribute lives in one number space, nests included, so one
//! enum ([`DevlinkAttr`]) decodes every level. The codec is pure and plugs into
//! the crate's one transport as a [`GenlMessage`]; [`Devlink`] resolves the
//! family and sends the requests, each named by its `devlink` (iproute2) form:
//! - [`param_get`]: `devlink dev param show BUS/DEV name NAME`
//! - [`param_dump`]: `devlink dev param show`
//! - [`param_set`]: `devlink dev param set BUS/DEV name NAME value V cmode C`

use netlink_packet_core::{DecodeError, DefaultNla, Emitable, Nla, NlaBuffer, NlasIterator, Parseable};

use super::genl::GenlMessage;
use super::transport::{Client, NlError, SocketTransport, Transport, NETLINK_GENERIC};
use crate::pci::PciAddr;

/// `DEVLINK_GENL_NAME`: the family name the controller resolves.
pub const DEVLINK_GENL_NAME: &str = "devlink";
/// `DEVLINK_GENL_VERSION`.
pub const DEVLINK_GENL_VERSION: u8 = 1;

/// `DEVLINK_CMD_PARAM_GET` (`enum devlink_command`): one parameter, or a dump of all.
pub const DEVLINK_CMD_PARAM_GET: u8 = 38;
/// `DEVLINK_CMD_PARAM_SET`.
pub const DEVLINK_CMD_PARAM_SET: u8 = 39;
/// `DEVLINK_CMD_PARAM_NEW`: the notification a successful SET multicasts.
pub const DEVLINK_CMD_PARAM_NEW: u8 = 40;
/// `DEVLINK_CMD_PARAM_DEL`.
pub const DEVLINK_CMD_PARAM_DEL: u8 = 41;

/// `DEVLINK_ATTR_BUS_NAME` (`enum devlink_attr`), string.
pub const DEVLINK_ATTR_BUS_NAME: u16 = 1;
/// `DEVLINK_ATTR_DEV_NAME`, string.
pub const DEVLINK_ATTR_DEV_NAME: u16 = 2;
/// `DEVLINK_ATTR_PORT_INDEX`, u32 (port parameters only).
pub const DEVLINK_ATTR_PORT_INDEX: u16 = 3;
/// `DEVLINK_ATTR_PARAM`, nested.
pub const DEVLINK_ATTR_PARAM: u16 = 80;
/// `DEVLINK_ATTR_PARAM_NAME`, string.
pub const DEVLINK_ATTR_PARAM_NAME: u16 = 81;
/// `DEVLINK_ATTR_PARAM_GENERIC`, flag: one of the kernel's generic parameters.
pub const DEVLINK_ATTR_PARAM_GENERIC: u16 = 82;
/// `DEVLINK_ATTR_PARAM_TYPE`, u8: an `NLA_*` type (see [`ParamType`]).
pub const DEVLINK_ATTR_PARAM_TYPE: u16 = 83;
/// `DEVLINK_ATTR_PARAM_VALUES_LIST`, nested.
pub const DEVLINK_ATTR_PARAM_VALUES_LIST: u16 = 84;
/// `DEVLINK_ATTR_PARAM_VALUE`, nested.
pub const DEVLINK_ATTR_PARAM_VALUE: u16 = 85;
/// `DEVLINK_ATTR_PARAM_VALUE_DATA`, dynamic (see the [module docs](self)).
pub const DEVLINK_ATTR_PARAM_VALUE_DATA: u16 = 86;
/// `DEVLINK_ATTR_PARAM_VALUE_CMODE`, u8 (`enum devlink_param_cmode`).
pub const DEVLINK_ATTR_PARAM_VALUE_CMODE: u16 = 87;

/// The attribute types the kernel puts in `DEVLINK_ATTR_PARAM_TYPE`
/// (`devlink_param_type_to_nla_type`): the `NLA_*` numbers of
/// include/net/netlink.h, which iproute2 reads as `MNL_TYPE_*` (Linux 6.16 names
/// them in uapi as `enum devlink_var_attr_type`).
pub mod nla_type {
    /// `NLA_U8`.
    pub const NLA_U8: u8 = 1;
    /// `NLA_U16`.
    pub const NLA_U16: u8 = 2;
    /// `NLA_U32`.
    pub const NLA_U32: u8 = 3;
    /// `NLA_STRING`.
    pub const NLA_STRING: u8 = 5;
    /// `NLA_FLAG`: a boolean parameter.
    pub const NLA_FLAG: u8 = 6;
}

/// `__DEVLINK_PARAM_MAX_STRING_VALUE` (include/net/devlink.h): string values,
/// NUL included, are shorter than this.
pub const DEVLINK_PARAM_MAX_STRING_VALUE: usize = 32;

/// How deep devlink parameter attributes nest: PARAM → VALUES_LIST → VALUE.
const MAX_DEPTH: usize = 3;

// ---------------------------------------------------------------- attributes

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

fn str_len(s: &str) -> usize {
    s.len() + 1
}

fn emit_str(buf: &mut [u8], s: &str) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

fn nest_len(v: &[DevlinkAttr]) -> usize {
    v.buffer_len()
}

impl Nla for DevlinkAttr {
    fn value_len(&self) -> usize {
        use DevlinkAttr::*;
        match self {
            BusName(s) | DevName(s) | ParamName(s) => str_len(s),
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
            BusName(s) | DevName(s) | ParamName(s) => emit_str(buf, s),
            PortIndex(v) => buf[..4].copy_from_slice(&v.to_ne_bytes()),
            Param(v) | ParamValuesList(v) | ParamValue(v) => v.as_slice().emit(buf),
            ParamGeneric => {}
            ParamType(v) | ParamValueCmode(v) => buf[0] = *v,
            ParamValueData(d) => buf[..d.len()].copy_from_slice(d),
            Other(n) => n.emit_value(buf),
        }
    }
}

fn parse_u8(v: &[u8], what: &str) -> Result<u8, DecodeError> {
    match v {
        [b] => Ok(*b),
        _ => Err(DecodeError::from(format!("{what}: expected 1 byte, got {}", v.len()))),
    }
}

fn parse_u32(v: &[u8], what: &str) -> Result<u32, DecodeError> {
    <[u8; 4]>::try_from(v)
        .map(u32::from_ne_bytes)
        .map_err(|_| DecodeError::from(format!("{what}: expected 4 bytes, got {}", v.len())))
}

/// A NUL-terminated string (nla_put_string); a missing NUL is accepted.
fn parse_string(v: &[u8], what: &str) -> Result<String, DecodeError> {
    let s = v.split(|b| *b == 0).next().unwrap_or(v);
    String::from_utf8(s.to_vec()).map_err(|_| DecodeError::from(format!("{what}: not UTF-8")))
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
        DEVLINK_ATTR_BUS_NAME => BusName(parse_string(v, "DEVLINK_ATTR_BUS_NAME")?),
        DEVLINK_ATTR_DEV_NAME => DevName(parse_string(v, "DEVLINK_ATTR_DEV_NAME")?),
        DEVLINK_ATTR_PORT_INDEX => PortIndex(parse_u32(v, "DEVLINK_ATTR_PORT_INDEX")?),
        DEVLINK_ATTR_PARAM => Param(parse_nest(v, "DEVLINK_ATTR_PARAM", depth)?),
        DEVLINK_ATTR_PARAM_NAME => ParamName(parse_string(v, "DEVLINK_ATTR_PARAM_NAME")?),
        DEVLINK_ATTR_PARAM_GENERIC if v.is_empty() => ParamGeneric,
        DEVLINK_ATTR_PARAM_GENERIC => {
            return Err(DecodeError::from(format!(
                "DEVLINK_ATTR_PARAM_GENERIC: a flag has no payload, got {} bytes",
                v.len()
            )))
        }
        DEVLINK_ATTR_PARAM_TYPE => ParamType(parse_u8(v, "DEVLINK_ATTR_PARAM_TYPE")?),
        DEVLINK_ATTR_PARAM_VALUES_LIST => {
            ParamValuesList(parse_nest(v, "DEVLINK_ATTR_PARAM_VALUES_LIST", depth)?)
        }
        DEVLINK_ATTR_PARAM_VALUE => ParamValue(parse_nest(v, "DEVLINK_ATTR_PARAM_VALUE", depth)?),
        DEVLINK_ATTR_PARAM_VALUE_DATA => ParamValueData(v.to_vec()),
        DEVLINK_ATTR_PARAM_VALUE_CMODE => ParamValueCmode(parse_u8(v, "DEVLINK_ATTR_PARAM_VALUE_CMODE")?),
        _ => Other(super::kept_nla(buf)),
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

// ---------------------------------------------------------------- the model

/// A devlink instance: bus and device name, written `bus/dev` (`pci/0000:17:00.0`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevHandle {
    /// Bus name (`pci`).
    pub bus: String,
    /// Device name on that bus (`0000:17:00.0`).
    pub dev: String,
}

impl DevHandle {
    /// The devlink instance of a PCI function (`pci/<bdf>`).
    pub fn pci(addr: PciAddr) -> Self {
        Self { bus: "pci".into(), dev: addr.to_string() }
    }

    /// The handle a message names (`BUS_NAME` and `DEV_NAME` at the top level).
    pub fn of(attrs: &[DevlinkAttr]) -> Option<Self> {
        let bus = attrs.iter().find_map(|a| match a {
            DevlinkAttr::BusName(b) => Some(b.clone()),
            _ => None,
        })?;
        let dev = attrs.iter().find_map(|a| match a {
            DevlinkAttr::DevName(d) => Some(d.clone()),
            _ => None,
        })?;
        Some(Self { bus, dev })
    }
}

impl std::fmt::Display for DevHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.bus, self.dev)
    }
}

impl std::str::FromStr for DevHandle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((bus, dev)) if !bus.is_empty() && !dev.is_empty() && !dev.contains('/') => {
                Ok(Self { bus: bus.into(), dev: dev.into() })
            }
            _ => Err(format!("{s:?} is not a devlink handle (BUS/DEV, e.g. pci/0000:17:00.0)")),
        }
    }
}

/// A parameter's configuration mode (`enum devlink_param_cmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cmode {
    /// `DEVLINK_PARAM_CMODE_RUNTIME` (0): applied at once.
    Runtime,
    /// `DEVLINK_PARAM_CMODE_DRIVERINIT` (1): applied on `devlink dev reload`.
    Driverinit,
    /// `DEVLINK_PARAM_CMODE_PERMANENT` (2): stored in the device's flash.
    Permanent,
}

impl Cmode {
    /// The wire value.
    pub fn raw(self) -> u8 {
        match self {
            Cmode::Runtime => 0,
            Cmode::Driverinit => 1,
            Cmode::Permanent => 2,
        }
    }

    /// From the wire value; `None` for a mode this kernel header does not know.
    pub fn from_raw(v: u8) -> Option<Self> {
        match v {
            0 => Some(Cmode::Runtime),
            1 => Some(Cmode::Driverinit),
            2 => Some(Cmode::Permanent),
            _ => None,
        }
    }

    /// The name `devlink` prints and takes (`runtime`, `driverinit`, `permanent`).
    pub fn as_str(self) -> &'static str {
        match self {
            Cmode::Runtime => "runtime",
            Cmode::Driverinit => "driverinit",
            Cmode::Permanent => "permanent",
        }
    }
}

/// A parameter's type (`enum devlink_param_type`, sent as its `NLA_*` number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// `NLA_U8`.
    U8,
    /// `NLA_U16`.
    U16,
    /// `NLA_U32`.
    U32,
    /// `NLA_STRING`.
    String,
    /// `NLA_FLAG`.
    Bool,
}

impl ParamType {
    /// The `NLA_*` number in `DEVLINK_ATTR_PARAM_TYPE`.
    pub fn nla_type(self) -> u8 {
        match self {
            ParamType::U8 => nla_type::NLA_U8,
            ParamType::U16 => nla_type::NLA_U16,
            ParamType::U32 => nla_type::NLA_U32,
            ParamType::String => nla_type::NLA_STRING,
            ParamType::Bool => nla_type::NLA_FLAG,
        }
    }

    /// From `DEVLINK_ATTR_PARAM_TYPE`; `None` for a type devlink does not use.
    pub fn from_nla_type(v: u8) -> Option<Self> {
        match v {
            nla_type::NLA_U8 => Some(ParamType::U8),
            nla_type::NLA_U16 => Some(ParamType::U16),
            nla_type::NLA_U32 => Some(ParamType::U32),
            nla_type::NLA_STRING => Some(ParamType::String),
            nla_type::NLA_FLAG => Some(ParamType::Bool),
            _ => None,
        }
    }
}

/// A parameter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamValue {
    /// `u8`.
    U8(u8),
    /// `u16`.
    U16(u16),
    /// `u32`.
    U32(u32),
    /// A string (shorter than [`DEVLINK_PARAM_MAX_STRING_VALUE`]).
    String(String),
    /// A boolean (`NLA_FLAG` presence).
    Bool(bool),
}

impl ParamValue {
    /// The type of this value.
    pub fn kind(&self) -> ParamType {
        match self {
            ParamValue::U8(_) => ParamType::U8,
            ParamValue::U16(_) => ParamType::U16,
            ParamValue::U32(_) => ParamType::U32,
            ParamValue::String(_) => ParamType::String,
            ParamValue::Bool(_) => ParamType::Bool,
        }
    }

    /// `PARAM_VALUE_DATA` for this value: `None` for false (the attribute is left out).
    pub fn data(&self) -> Option<DevlinkAttr> {
        let bytes = match self {
            ParamValue::U8(v) => vec![*v],
            ParamValue::U16(v) => v.to_ne_bytes().to_vec(),
            ParamValue::U32(v) => v.to_ne_bytes().to_vec(),
            ParamValue::String(s) => {
                let mut b = s.as_bytes().to_vec();
                b.push(0);
                b
            }
            ParamValue::Bool(true) => vec![],
            ParamValue::Bool(false) => return None,
        };
        Some(DevlinkAttr::ParamValueData(bytes))
    }

    /// Decodes `PARAM_VALUE_DATA` (`None`: absent) as a value of type `kind`,
    /// with the kernel's own rules (`devlink_param_value_get_from_info`).
    pub fn decode(kind: ParamType, data: Option<&[u8]>) -> Result<Self, String> {
        let need = |n: usize| -> Result<&[u8], String> {
            match data {
                None => Err("no DEVLINK_ATTR_PARAM_VALUE_DATA".into()),
                Some(d) if d.len() == n => Ok(d),
                Some(d) => Err(format!("DEVLINK_ATTR_PARAM_VALUE_DATA: expected {n} bytes, got {}", d.len())),
            }
        };
        Ok(match kind {
            ParamType::U8 => ParamValue::U8(need(1)?[0]),
            ParamType::U16 => ParamValue::U16(u16::from_ne_bytes([need(2)?[0], need(2)?[1]])),
            ParamType::U32 => {
                let d = need(4)?;
                ParamValue::U32(u32::from_ne_bytes([d[0], d[1], d[2], d[3]]))
            }
            ParamType::String => {
                let d = data.ok_or("no DEVLINK_ATTR_PARAM_VALUE_DATA")?;
                let Some(end) = d.iter().position(|b| *b == 0) else {
                    return Err("DEVLINK_ATTR_PARAM_VALUE_DATA: string without NUL".into());
                };
                if end >= DEVLINK_PARAM_MAX_STRING_VALUE {
                    return Err(format!("DEVLINK_ATTR_PARAM_VALUE_DATA: string of {end} bytes is too long"));
                }
                ParamValue::String(
                    String::from_utf8(d[..end].to_vec())
                        .map_err(|_| "DEVLINK_ATTR_PARAM_VALUE_DATA: not UTF-8".to_string())?,
                )
            }
            ParamType::Bool => match data {
                None => ParamValue::Bool(false),
                Some([]) => ParamValue::Bool(true),
                Some(d) => {
                    return Err(format!(
                        "DEVLINK_ATTR_PARAM_VALUE_DATA: a boolean is a flag without payload, got {} bytes",
                        d.len()
                    ))
                }
            },
        })
    }
}

impl std::fmt::Display for ParamValue {
    /// As `devlink dev param set … value V` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::U8(v) => write!(f, "{v}"),
            ParamValue::U16(v) => write!(f, "{v}"),
            ParamValue::U32(v) => write!(f, "{v}"),
            ParamValue::String(s) => write!(f, "{s}"),
            ParamValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A parameter as a `PARAM_GET` reply describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// `enable_roce`, `max_macs`, `test1`, …
    pub name: String,
    /// One of the kernel's generic parameters (`DEVLINK_ATTR_PARAM_GENERIC`).
    pub generic: bool,
    /// Its type.
    pub kind: ParamType,
    /// The value in each cmode the driver supports, in the kernel's order
    /// (runtime, driverinit, permanent).
    pub values: Vec<(Cmode, ParamValue)>,
}

impl Param {
    /// The value in `cmode`, if the driver supports that mode.
    pub fn value(&self, cmode: Cmode) -> Option<&ParamValue> {
        self.values.iter().find(|(c, _)| *c == cmode).map(|(_, v)| v)
    }

    /// Reads the contents of a `DEVLINK_ATTR_PARAM` nest.
    pub fn from_attrs(attrs: &[DevlinkAttr]) -> Result<Self, String> {
        let mut name = None;
        let mut generic = false;
        let mut kind = None;
        let mut list = None;
        for a in attrs {
            match a {
                DevlinkAttr::ParamName(n) => name = Some(n.clone()),
                DevlinkAttr::ParamGeneric => generic = true,
                DevlinkAttr::ParamType(t) => kind = Some(*t),
                DevlinkAttr::ParamValuesList(l) => list = Some(l),
                _ => {}
            }
        }
        let name = name.ok_or("DEVLINK_ATTR_PARAM without DEVLINK_ATTR_PARAM_NAME")?;
        let raw = kind.ok_or_else(|| format!("parameter {name}: no DEVLINK_ATTR_PARAM_TYPE"))?;
        let kind = ParamType::from_nla_type(raw).ok_or_else(|| {
            format!("parameter {name}: DEVLINK_ATTR_PARAM_TYPE {raw} is not a devlink type")
        })?;
        let list = list.ok_or_else(|| format!("parameter {name}: no DEVLINK_ATTR_PARAM_VALUES_LIST"))?;
        let mut values = Vec::new();
        for v in list {
            let DevlinkAttr::ParamValue(v) = v else { continue };
            let cmode = v.iter().find_map(|a| match a {
                DevlinkAttr::ParamValueCmode(c) => Some(*c),
                _ => None,
            });
            let raw = cmode
                .ok_or_else(|| format!("parameter {name}: a value without DEVLINK_ATTR_PARAM_VALUE_CMODE"))?;
            let cmode =
                Cmode::from_raw(raw).ok_or_else(|| format!("parameter {name}: unknown cmode {raw}"))?;
            let data = v.iter().find_map(|a| match a {
                DevlinkAttr::ParamValueData(d) => Some(d.as_slice()),
                _ => None,
            });
            let value = ParamValue::decode(kind, data)
                .map_err(|e| format!("parameter {name} ({}): {e}", cmode.as_str()))?;
            values.push((cmode, value));
        }
        Ok(Param { name, generic, kind, values })
    }

    /// The contents of a `DEVLINK_ATTR_PARAM` nest, laid out as
    /// `devlink_nl_param_fill` lays them out (for fixtures and simulated nodes).
    pub fn to_attrs(&self) -> Vec<DevlinkAttr> {
        let mut attrs = vec![DevlinkAttr::ParamName(self.name.clone())];
        if self.generic {
            attrs.push(DevlinkAttr::ParamGeneric);
        }
        attrs.push(DevlinkAttr::ParamType(self.kind.nla_type()));
        let values = self
            .values
            .iter()
            .map(|(c, v)| {
                let mut one = vec![DevlinkAttr::ParamValueCmode(c.raw())];
                one.extend(v.data());
                DevlinkAttr::ParamValue(one)
            })
            .collect();
        attrs.push(DevlinkAttr::ParamValuesList(values));
        attrs
    }
}

/// A `PARAM_GET` reply (or `PARAM_NEW` notification): whose parameter, and the parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamReply {
    /// The devlink instance.
    pub handle: DevHandle,
    /// The parameter.
    pub param: Param,
}

impl ParamReply {
    /// Reads a reply message.
    pub fn from_message(m: &DevlinkMessage) -> Result<Self, String> {
        let handle = DevHandle::of(&m.attrs).ok_or("reply without DEVLINK_ATTR_BUS_NAME/DEV_NAME")?;
        let nest = m
            .attrs
            .iter()
            .find_map(|a| match a {
                DevlinkAttr::Param(p) => Some(p),
                _ => None,
            })
            .ok_or_else(|| format!("{handle}: reply without DEVLINK_ATTR_PARAM"))?;
        let param = Param::from_attrs(nest).map_err(|e| format!("{handle}: {e}"))?;
        Ok(Self { handle, param })
    }

    /// The message the kernel sends for this parameter (`devlink_nl_param_fill`).
    pub fn to_message(&self, family: u16) -> DevlinkMessage {
        GenlMessage {
            family,
            cmd: DEVLINK_CMD_PARAM_GET,
            version: DEVLINK_GENL_VERSION,
            attrs: vec![
                DevlinkAttr::BusName(self.handle.bus.clone()),
                DevlinkAttr::DevName(self.handle.dev.clone()),
                DevlinkAttr::Param(self.param.to_attrs()),
            ],
        }
    }
}

// ---------------------------------------------------------------- requests

fn handle_attrs(h: &DevHandle) -> Vec<DevlinkAttr> {
    vec![DevlinkAttr::BusName(h.bus.clone()), DevlinkAttr::DevName(h.dev.clone())]
}

/// `devlink dev param show BUS/DEV name NAME`: `PARAM_GET` with the handle and
/// `PARAM_NAME` at the top level.
pub fn param_get(family: u16, h: &DevHandle, name: &str) -> DevlinkMessage {
    let mut attrs = handle_attrs(h);
    attrs.push(DevlinkAttr::ParamName(name.into()));
    GenlMessage { family, cmd: DEVLINK_CMD_PARAM_GET, version: DEVLINK_GENL_VERSION, attrs }
}

/// `devlink dev param show`: every parameter of every instance (send as a dump).
pub fn param_dump(family: u16) -> DevlinkMessage {
    GenlMessage { family, cmd: DEVLINK_CMD_PARAM_GET, version: DEVLINK_GENL_VERSION, attrs: vec![] }
}

/// `devlink dev param set BUS/DEV name NAME value V cmode C`, with the
/// attributes in the order iproute2's devlink puts them (handle, name, cmode,
/// type, data); a false boolean carries no `PARAM_VALUE_DATA`.
pub fn param_set(family: u16, h: &DevHandle, name: &str, value: &ParamValue, cmode: Cmode) -> DevlinkMessage {
    let mut attrs = handle_attrs(h);
    attrs.push(DevlinkAttr::ParamName(name.into()));
    attrs.push(DevlinkAttr::ParamValueCmode(cmode.raw()));
    attrs.push(DevlinkAttr::ParamType(value.kind().nla_type()));
    attrs.extend(value.data());
    GenlMessage { family, cmd: DEVLINK_CMD_PARAM_SET, version: DEVLINK_GENL_VERSION, attrs }
}

/// The `devlink` command line of a SET (what a human would type; also the
/// operation name in errors).
pub fn param_set_command(h: &DevHandle, name: &str, value: &ParamValue, cmode: Cmode) -> String {
    format!("devlink dev param set {h} name {name} value {value} cmode {}", cmode.as_str())
}

// ---------------------------------------------------------------- the client

/// A devlink request that failed.
#[derive(Debug, thiserror::Error)]
pub enum DevlinkError {
    /// The kernel has no devlink family (`CONFIG_NET_DEVLINK` off: the
    /// controller answers ENOENT).
    #[error("{op}: the kernel has no devlink generic netlink family")]
    NoFamily {
        /// The request.
        op: String,
    },
    /// No devlink instance with this handle (ENODEV): the driver registers none.
    #[error("{op}: no devlink instance {handle}")]
    NoDevice {
        /// The request.
        op: String,
        /// The handle asked for.
        handle: DevHandle,
    },
    /// The instance has no parameter of this name (the kernel answers a GET of
    /// an unknown name with EINVAL).
    #[error("{op}: {handle} has no parameter {name}")]
    NoParam {
        /// The request.
        op: String,
        /// The instance.
        handle: DevHandle,
        /// The parameter asked for.
        name: String,
    },
    /// The driver refused (EOPNOTSUPP: a cmode it lacks, or a validate hook).
    #[error("{op}: not supported{}", ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Unsupported {
        /// The request.
        op: String,
        /// The kernel's extended-ACK message.
        ext: Option<String>,
    },
    /// Any other refusal.
    #[error("{op}: kernel answered {}{}", std::io::Error::from_raw_os_error(*errno), ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        /// The request.
        op: String,
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ACK message.
        ext: Option<String>,
    },
    /// The socket failed or a reply did not decode (the source names the request).
    #[error(transparent)]
    Netlink(NlError),
    /// The reply lacked what the request asks for.
    #[error("{op}: {what}")]
    BadReply {
        /// The request.
        op: String,
        /// What was wrong.
        what: String,
    },
}

impl DevlinkError {
    /// Whether this means "devlink, this instance or this parameter is not
    /// here" rather than a failure: a check then says Unsupported.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            DevlinkError::NoFamily { .. }
                | DevlinkError::NoDevice { .. }
                | DevlinkError::NoParam { .. }
                | DevlinkError::Unsupported { .. }
        )
    }

    fn of(op: &str, h: &DevHandle, name: Option<&str>, e: NlError) -> Self {
        let op = op.to_string();
        match e {
            NlError::Kernel { errno, .. } if errno == libc::ENODEV => {
                DevlinkError::NoDevice { op, handle: h.clone() }
            }
            NlError::Kernel { errno, .. } if errno == libc::EINVAL && name.is_some() => {
                DevlinkError::NoParam { op, handle: h.clone(), name: name.unwrap_or_default().into() }
            }
            NlError::Kernel { errno, ext, .. } if errno == libc::EOPNOTSUPP => {
                DevlinkError::Unsupported { op, ext }
            }
            NlError::Kernel { errno, ext, .. } => DevlinkError::Kernel { op, errno, ext },
            e => DevlinkError::Netlink(e),
        }
    }
}

/// A devlink client: the crate's netlink [`Client`] on `NETLINK_GENERIC` and
/// the id the controller gave the devlink family.
#[derive(Debug)]
pub struct Devlink<T> {
    client: Client<T>,
    family: u16,
}

impl Devlink<SocketTransport> {
    /// Opens a `NETLINK_GENERIC` socket in the calling thread's netns and
    /// resolves the family (`genl ctrl get name devlink`).
    pub fn open() -> Result<Self, DevlinkError> {
        let client = Client::open(NETLINK_GENERIC).map_err(|source| {
            DevlinkError::Netlink(NlError::Io { op: "open NETLINK_GENERIC socket".into(), source })
        })?;
        Self::new(client)
    }
}

impl<T: Transport> Devlink<T> {
    /// Resolves the devlink family over `client`.
    pub fn new(mut client: Client<T>) -> Result<Self, DevlinkError> {
        let family = client.genl_family_id(DEVLINK_GENL_NAME).map_err(|e| match e {
            NlError::Kernel { errno, .. } if errno == libc::ENOENT => {
                DevlinkError::NoFamily { op: format!("CTRL_CMD_GETFAMILY {DEVLINK_GENL_NAME}") }
            }
            e => DevlinkError::Netlink(e),
        })?;
        Ok(Self { client, family })
    }

    /// The family id the kernel gave devlink.
    pub fn family(&self) -> u16 {
        self.family
    }

    /// The transport (e.g. to read [`super::transport::Recorded::sent`]).
    pub fn transport(&self) -> &T {
        self.client.transport()
    }

    /// `devlink dev param show BUS/DEV name NAME`.
    pub fn param_get(&mut self, h: &DevHandle, name: &str) -> Result<Param, DevlinkError> {
        let op = format!("DEVLINK_CMD_PARAM_GET (devlink dev param show {h} name {name})");
        let replies = self
            .client
            .request(&op, param_get(self.family, h, name), false, 0)
            .map_err(|e| DevlinkError::of(&op, h, Some(name), e))?;
        let m = replies.iter().find(|m| m.cmd == DEVLINK_CMD_PARAM_GET).ok_or_else(|| {
            DevlinkError::BadReply { op: op.clone(), what: "no DEVLINK_CMD_PARAM_GET reply".into() }
        })?;
        let r =
            ParamReply::from_message(m).map_err(|what| DevlinkError::BadReply { op: op.clone(), what })?;
        if r.handle != *h || r.param.name != name {
            return Err(DevlinkError::BadReply {
                op,
                what: format!("the reply is about {} {}", r.handle, r.param.name),
            });
        }
        Ok(r.param)
    }

    /// `devlink dev param show`: every parameter of every instance in the
    /// socket's netns (parameters whose driver cannot report a value are left
    /// out by the kernel).
    pub fn params(&mut self) -> Result<Vec<ParamReply>, DevlinkError> {
        let op = "DEVLINK_CMD_PARAM_GET dump (devlink dev param show)";
        let replies = self.client.request(op, param_dump(self.family), true, 0).map_err(|e| match e {
            NlError::Kernel { errno, ext, .. } => DevlinkError::Kernel { op: op.into(), errno, ext },
            e => DevlinkError::Netlink(e),
        })?;
        replies
            .iter()
            .filter(|m| m.cmd == DEVLINK_CMD_PARAM_GET)
            .map(|m| {
                ParamReply::from_message(m).map_err(|what| DevlinkError::BadReply { op: op.into(), what })
            })
            .collect()
    }

    /// `devlink dev param set BUS/DEV name NAME value V cmode C`. The kernel
    /// checks the type against the parameter's and the driver may refuse
    /// (EOPNOTSUPP with a reason, e.g. ice's "iWARP is currently enabled").
    pub fn param_set(
        &mut self,
        h: &DevHandle,
        name: &str,
        value: &ParamValue,
        cmode: Cmode,
    ) -> Result<(), DevlinkError> {
        let op = format!("DEVLINK_CMD_PARAM_SET ({})", param_set_command(h, name, value, cmode));
        if value.kind() == ParamType::String {
            // The kernel refuses (EINVAL) a string that does not fit; say why here.
            if let ParamValue::String(s) = value {
                if s.len() >= DEVLINK_PARAM_MAX_STRING_VALUE || s.contains('\0') {
                    return Err(DevlinkError::BadReply {
                        op,
                        what: format!(
                            "string value {s:?} does not fit a devlink parameter (< 32 bytes, no NUL)"
                        ),
                    });
                }
            }
        }
        self.client.request(&op, param_set(self.family, h, name, value, cmode), false, 0).map(|_| ()).map_err(
            |e| match e {
                // A SET of a known name with a type the parameter does not have is also EINVAL.
                NlError::Kernel { errno, ext, .. } if errno == libc::EINVAL => {
                    DevlinkError::Kernel { op: op.clone(), errno, ext }
                }
                e => DevlinkError::of(&op, h, None, e),
            },
        )
    }
}

impl<T: Transport> Devlink<T> {
    /// An E810 PF's RDMA function to RoCEv2 ([`crate::roce::Remedy::EnableRoce`]):
    /// `enable_iwarp` off, then `enable_roce` on, both runtime (ice refuses
    /// `enable_roce` while iWARP is on). When the second write is refused, the
    /// first is undone (`enable_iwarp` back to what it was), so a failure leaves
    /// the PF in the mode it had.
    pub fn enable_roce(&mut self, pci: PciAddr) -> Result<(), DevlinkError> {
        let h = DevHandle::pci(pci);
        let [(iwarp, iwarp_to), (roce, roce_to)] = crate::roce::remedy::ENABLE_ROCE_PARAMS;
        let was = self.param_get(&h, iwarp)?.value(Cmode::Runtime).cloned();
        self.param_set(&h, iwarp, &ParamValue::Bool(iwarp_to), Cmode::Runtime)?;
        if let Err(e) = self.param_set(&h, roce, &ParamValue::Bool(roce_to), Cmode::Runtime) {
            if let Some(v) = was.filter(|v| *v != ParamValue::Bool(iwarp_to)) {
                if let Err(undo) = self.param_set(&h, iwarp, &v, Cmode::Runtime) {
                    tracing::warn!(error = %undo, "devlink: could not restore {iwarp} on {h}");
                }
            }
            return Err(e);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- recorded answers

/// The kernel's answers to devlink requests, as [`Exchange`]s a
/// [`Recorded`](super::transport::Recorded) transport replays (a simulated
/// node's devlink, test fixtures). Each request is laid out exactly as
/// [`Devlink`] sends it; each answer as the kernel builds it.
pub mod recorded {
    use netlink_packet_core::{
        ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NLM_F_ACK,
        NLM_F_DUMP, NLM_F_MULTIPART, NLM_F_REQUEST,
    };

    use super::*;
    use crate::netlink::genl::{get_family, CtrlAttr, CTRL_CMD_NEWFAMILY, GENL_ID_CTRL};
    use crate::netlink::transport::{emit, request_message, Exchange};

    fn request<M: NetlinkSerializable>(m: M, dump: bool) -> Vec<u8> {
        let flags = NLM_F_REQUEST | NLM_F_ACK | if dump { NLM_F_DUMP } else { 0 };
        emit(&mut request_message(flags, 0, m))
    }

    /// `netlink_ack` (net/netlink/af_netlink.c): the request's seq, `-errno`
    /// (0 for an ACK) and the request echoed (whole on an error, its header on success, as the
    /// kernel caps an ACK without extended-ACK TLVs).
    pub fn ack(request: &[u8], errno: i32) -> Vec<u8> {
        let mut e = ErrorMessage::default();
        e.code = std::num::NonZeroI32::new(-errno);
        e.header = if errno == 0 { request[..request.len().min(16)].to_vec() } else { request.to_vec() };
        let mut m = NetlinkMessage::<DevlinkMessage>::new(NetlinkHeader::default(), NetlinkPayload::Error(e));
        // The ACK carries the request's seq (and the requester's port id, 0 here).
        if let Some(seq) = request.get(8..12) {
            m.header.sequence_number = u32::from_ne_bytes([seq[0], seq[1], seq[2], seq[3]]);
        }
        m.finalize();
        emit(&mut m)
    }

    /// `genl ctrl get name devlink` answered with `family` (`ctrl_fill_info`:
    /// name, id, version, header size, max attribute; the op and multicast
    /// group lists are left out, no reader needs them).
    pub fn family(family: u16) -> Exchange {
        let request = request(get_family(DEVLINK_GENL_NAME), false);
        let reply = GenlMessage {
            family: GENL_ID_CTRL,
            cmd: CTRL_CMD_NEWFAMILY,
            version: 2,
            attrs: vec![
                CtrlAttr::FamilyName(DEVLINK_GENL_NAME.into()),
                CtrlAttr::FamilyId(family),
                CtrlAttr::Version(DEVLINK_GENL_VERSION.into()),
                CtrlAttr::Other(DefaultNla::new(4, 0u32.to_ne_bytes().to_vec())), // CTRL_ATTR_HDRSIZE
                // CTRL_ATTR_MAXATTR: DEVLINK_ATTR_MAX of Linux 6.1.
                CtrlAttr::Other(DefaultNla::new(5, 179u32.to_ne_bytes().to_vec())),
            ],
        };
        let reply = emit(&mut request_message(0, 0, reply));
        Exchange { replies: vec![reply, ack(&request, 0)], request }
    }

    /// A `PARAM_GET` of `r.param.name` on `r.handle`, answered with `r`.
    pub fn param_get(family: u16, r: &ParamReply) -> Exchange {
        let request = request(super::param_get(family, &r.handle, &r.param.name), false);
        let reply = emit(&mut request_message(0, 0, r.to_message(family)));
        Exchange { replies: vec![reply, ack(&request, 0)], request }
    }

    /// A `PARAM_GET` of `name` on `h` the kernel refuses with `errno` (EINVAL:
    /// no such parameter; ENODEV: no such instance).
    pub fn param_get_refused(family: u16, h: &DevHandle, name: &str, errno: i32) -> Exchange {
        let request = request(super::param_get(family, h, name), false);
        Exchange { replies: vec![ack(&request, errno)], request }
    }

    /// A dump of every parameter in `all`: one message each (`NLM_F_MULTI`),
    /// then `NLMSG_DONE`.
    pub fn param_dump(family: u16, all: &[ParamReply]) -> Exchange {
        let request = request(super::param_dump(family), true);
        let mut replies: Vec<Vec<u8>> = all
            .iter()
            .map(|r| emit(&mut request_message(NLM_F_MULTIPART, 0, r.to_message(family))))
            .collect();
        let mut done = NetlinkMessage::<DevlinkMessage>::new(
            NetlinkHeader::default(),
            NetlinkPayload::Done(Default::default()),
        );
        done.header.flags = NLM_F_MULTIPART;
        done.finalize();
        replies.push(emit(&mut done));
        Exchange { request, replies }
    }

    /// A `PARAM_SET` the kernel refuses with `errno` (EOPNOTSUPP from ice's
    /// validate hook, EINVAL for a wrong type).
    pub fn param_set_refused(
        family: u16,
        h: &DevHandle,
        name: &str,
        value: &ParamValue,
        cmode: Cmode,
        errno: i32,
    ) -> Exchange {
        let request = request(super::param_set(family, h, name, value, cmode), false);
        Exchange { replies: vec![ack(&request, errno)], request }
    }

    /// A `PARAM_SET` the kernel accepts (an ACK; the `PARAM_NEW`
    /// notification goes to the multicast group, not to the requester).
    pub fn param_set(family: u16, h: &DevHandle, name: &str, value: &ParamValue, cmode: Cmode) -> Exchange {
        let request = request(super::param_set(family, h, name, value, cmode), false);
        Exchange { replies: vec![ack(&request, 0)], request }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel this runs on: either it has no devlink family (CI's VM
    /// kernels are built without `CONFIG_NET_DEVLINK`) or it has one and no
    /// instance of this name. Both are "not here", never a failure.
    #[test]
    fn real_kernel_says_devlink_or_the_instance_is_not_here() {
        let h = DevHandle { bus: "pci".into(), dev: "ffff:ff:1f.7".into() };
        let e = match Devlink::open() {
            Ok(mut d) => d.param_get(&h, "enable_roce").unwrap_err(),
            Err(e) => e,
        };
        assert!(
            matches!(e, DevlinkError::NoFamily { .. } | DevlinkError::NoDevice { .. }),
            "expected NoFamily or NoDevice, got {e:?}"
        );
        assert!(e.is_unsupported());
    }
}
