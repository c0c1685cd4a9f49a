//! Which VF an attachment gets.

use nic::vfdev::VfDev;
use nic::Roots;

use crate::conf::{Env, NetConf};
use crate::error::{Error, Result};

/// The VF for an ADD: the configuration's `deviceID` (Multus fills it from
/// the device plugin's allocation). The one place that decides, so that a
/// device prepared for the pod by other means (e.g. a DRA claim keyed by
/// `K8S_POD_UID` in `CNI_ARGS`) is a change here only.
pub fn resolve(conf: &NetConf, _env: &Env, roots: &Roots) -> Result<VfDev> {
    let pci = conf.device.ok_or_else(|| Error::config("deviceID", "missing"))?;
    Ok(VfDev::lookup(roots, pci)?)
}
