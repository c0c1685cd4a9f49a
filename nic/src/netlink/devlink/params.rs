//! The parameter model: which instance ([`DevHandle`]), in which mode
//! ([`Cmode`]), of which type ([`ParamType`]), with which value
//! ([`ParamValue`]), and a whole `PARAM_GET` reply ([`ParamReply`]).

use super::*;
use crate::pci::PciAddr;

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
    U8(u8),
    U16(u16),
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
        const WHAT: &str = "DEVLINK_ATTR_PARAM_VALUE_DATA";
        let need = || data.ok_or_else(|| format!("no {WHAT}"));
        let fixed = |e: netlink_packet_core::DecodeError| e.to_string();
        Ok(match kind {
            ParamType::U8 => ParamValue::U8(crate::netlink::nla::u8(need()?, WHAT).map_err(fixed)?),
            ParamType::U16 => ParamValue::U16(crate::netlink::nla::u16(need()?, WHAT).map_err(fixed)?),
            ParamType::U32 => ParamValue::U32(crate::netlink::nla::u32(need()?, WHAT).map_err(fixed)?),
            ParamType::String => {
                // Stricter than `nla::string`, as the kernel is for this value
                // (`devlink_param_value_get_from_info`): the NUL must be there, within
                // `DEVLINK_PARAM_MAX_STRING_VALUE` bytes.
                let d = need()?;
                let Some(end) = d.iter().position(|b| *b == 0) else {
                    return Err(format!("{WHAT}: string without NUL"));
                };
                if end >= DEVLINK_PARAM_MAX_STRING_VALUE {
                    return Err(format!("{WHAT}: string of {end} bytes is too long"));
                }
                ParamValue::String(
                    String::from_utf8(d[..end].to_vec()).map_err(|_| format!("{WHAT}: not UTF-8"))?,
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
    pub handle: DevHandle,
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
