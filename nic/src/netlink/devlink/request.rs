//! The devlink request messages, laid out as iproute2's `devlink` sends them.

use super::*;

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
