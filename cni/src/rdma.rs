//! The VF's RDMA device: whether it can follow the netdev into the pod (the
//! RDMA subsystem's netns mode) and the nldev requests that move it.

use nic::netlink::nldev::{Nldev, RdmaDevice};
use nic::netlink::transport::{NlError, OpenInError};
use nic::netns::Netns;
use nic::vfdev::{self, VfDev};
use nic::NetnsMode;
use nic::Roots;

use crate::conf::RdmaMode;
use crate::error::{Error, Result};

/// The RDMA subsystem's netns mode: sysfs first (works on the simulated node
/// too), then nldev SYS_GET. `None`: no RDMA subsystem.
pub fn netns_mode(roots: &Roots) -> Option<NetnsMode> {
    if let Some(m) = vfdev::netns_mode_from_sysfs(roots) {
        return Some(m);
    }
    Nldev::open().ok()?.netns_mode().ok()
}

/// The RDMA devices to move for `mode`; an error when `required` cannot be met.
pub fn plan(mode: RdmaMode, vf: &VfDev, roots: &Roots) -> Result<Vec<String>> {
    if mode == RdmaMode::Disabled {
        return Ok(vec![]);
    }
    let required = mode == RdmaMode::Required;
    if vf.rdma.is_empty() {
        if required {
            return Err(Error::Rdma(format!(
                "VF {} has no RDMA device ({} is empty or missing) but rdma is \"required\"; enable RDMA on the VF driver, or set rdma to \"auto\" or \"disabled\"",
                vf.pci,
                vf.dir.join("infiniband").display()
            )));
        }
        tracing::debug!(pci = %vf.pci, "VF has no RDMA device; rdma=auto: skipping the RDMA move");
        return Ok(vec![]);
    }
    match netns_mode(roots) {
        Some(NetnsMode::Exclusive) => Ok(vf.rdma.clone()),
        Some(NetnsMode::Shared) if required => Err(Error::Rdma(format!(
            "the RDMA subsystem is in shared netns mode, so {} cannot be moved into the pod; boot with ib_core netns_mode=0 (e.g. `options ib_core netns_mode=0` in /etc/modprobe.d) or run `rdma system set netns exclusive` before pods start",
            vf.rdma.join(", ")
        ))),
        Some(NetnsMode::Shared) => {
            tracing::info!(rdma = ?vf.rdma, "RDMA netns mode is shared (ib_core netns_mode=1): devices stay visible in every netns; skipping the move");
            Ok(vec![])
        }
        None if required => Err(Error::Rdma("no RDMA subsystem (NETLINK_RDMA unavailable; is ib_core loaded?)".into())),
        None => {
            tracing::info!("no RDMA subsystem; skipping the RDMA move");
            Ok(vec![])
        }
    }
}

/// An nldev client in our netns or in `from`; `None` when the kernel has no
/// RDMA netlink family (`EPROTONOSUPPORT`: ib_core is not loaded).
fn client(from: Option<&Netns>) -> Result<Option<Nldev>> {
    let opened = match from {
        None => Nldev::open(),
        Some(ns) => match Nldev::open_in(ns) {
            Ok(c) => Ok(c),
            Err(OpenInError::Netns(e)) => return Err(Error::Netns(e)),
            Err(OpenInError::Socket(e)) => Err(e),
        },
    };
    match opened {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => Ok(None),
        Err(e) => Err(Error::Rdma(format!("cannot open a NETLINK_RDMA socket: {e}"))),
    }
}

const NO_FAMILY: &str = "no RDMA subsystem: the kernel has no NETLINK_RDMA family (is ib_core loaded?)";

/// `rdma dev set NAME netns TO` for each of `names`, seen from our netns
/// (ADD: `from` = None) or from `from` (DEL, back to us). Devices already
/// gone from `from` are skipped; so are all of them when the RDMA subsystem
/// is gone (ib_core unloaded destroyed them, nothing is left to move back).
pub fn move_devices(names: &[String], to: &Netns, from: Option<&Netns>) -> Result<()> {
    let mut c = match client(from)? {
        Some(c) => c,
        None if from.is_some() => {
            tracing::warn!(rdma = ?names, "{NO_FAMILY}; its devices went with it, nothing to move back");
            return Ok(());
        }
        None => return Err(Error::Rdma(NO_FAMILY.into())),
    };
    let devs = c.devices().map_err(rdma_err)?;
    for n in names {
        let d: &RdmaDevice = match devs.iter().find(|d| &d.name == n) {
            Some(d) => d,
            None if from.is_some() => continue,
            None => return Err(Error::Rdma(format!("RDMA device {n} is not visible in the plugin's netns"))),
        };
        c.set_netns(d, to.raw_fd() as u32).map_err(rdma_err)?;
    }
    Ok(())
}

/// The RDMA devices visible in `ns`, by name.
pub fn devices_in(ns: &Netns) -> Result<Vec<String>> {
    let mut c = client(Some(ns))?.ok_or_else(|| Error::Rdma(NO_FAMILY.into()))?;
    Ok(c.devices().map_err(rdma_err)?.into_iter().map(|d| d.name).collect())
}

/// An nldev failure as [`Error::Rdma`], keeping its whole cause chain (the
/// OS error of a socket failure lives in the source, not the message).
fn rdma_err(e: NlError) -> Error {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    Error::Rdma(msg)
}
