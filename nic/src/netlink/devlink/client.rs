//! The [`Devlink`] handle: the devlink family's requests over a
//! [`Genl`] handle, and the errors they map the kernel's answers to.

use std::io;

use super::*;
use crate::netlink::genl::Genl;
use crate::netlink::transport::{NlError, SocketTransport, Transport};
use crate::pci::PciAddr;

/// A devlink request that failed.
#[derive(Debug, thiserror::Error)]
pub enum DevlinkError {
    /// The kernel has no devlink family (`CONFIG_NET_DEVLINK` off: the
    /// controller answers ENOENT).
    #[error("{op}: the kernel has no devlink generic netlink family")]
    NoFamily { op: String },
    /// No devlink instance with this handle (ENODEV): the driver registers none.
    #[error("{op}: no devlink instance {handle}")]
    NoDevice {
        op: String,
        /// The handle asked for.
        handle: DevHandle,
    },
    /// The instance has no parameter of this name (the kernel answers a GET of
    /// an unknown name with EINVAL).
    #[error("{op}: {handle} has no parameter {name}")]
    NoParam {
        op: String,
        handle: DevHandle,
        /// The parameter asked for.
        name: String,
    },
    /// The driver refused (EOPNOTSUPP: a cmode it lacks, or a validate hook).
    #[error("{op}: not supported{}", ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Unsupported {
        op: String,
        /// The kernel's extended-ACK message.
        ext: Option<String>,
    },
    /// Any other refusal.
    #[error("{op}: kernel answered {}{}", std::io::Error::from_raw_os_error(*errno), ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
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
    BadReply { op: String, what: String },
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

/// A devlink socket: a [`Genl`] handle and the id the controller gave the
/// devlink family, resolved once when the handle is made. Requests are the
/// `devlink dev param` commands; refusals become [`DevlinkError`]s that tell
/// "not here" (no family, instance or parameter) from failures.
#[derive(Debug)]
pub struct Devlink<T = SocketTransport> {
    genl: Genl<T>,
    family: u16,
}

impl Devlink<SocketTransport> {
    /// Opens a `NETLINK_GENERIC` socket in the calling thread's netns and
    /// resolves the family (`genl ctrl get name devlink`).
    pub fn open() -> Result<Self, DevlinkError> {
        let genl = Genl::open().map_err(|source: io::Error| {
            DevlinkError::Netlink(NlError::Io { op: "open NETLINK_GENERIC socket".into(), source })
        })?;
        Self::from_genl(genl)
    }
}

impl<T: Transport> Devlink<T> {
    /// Resolves the devlink family over `transport` (a [`SocketTransport`] on
    /// `NETLINK_GENERIC`, or recorded answers starting with the family lookup).
    pub fn new(transport: T) -> Result<Self, DevlinkError> {
        Self::from_genl(Genl::new(transport))
    }

    /// Resolves the devlink family over an open generic netlink handle.
    pub fn from_genl(mut genl: Genl<T>) -> Result<Self, DevlinkError> {
        let family = genl.family_id(DEVLINK_GENL_NAME).map_err(|e| match e {
            NlError::Kernel { errno, .. } if errno == libc::ENOENT => {
                DevlinkError::NoFamily { op: format!("CTRL_CMD_GETFAMILY {DEVLINK_GENL_NAME}") }
            }
            e => DevlinkError::Netlink(e),
        })?;
        Ok(Self { genl, family })
    }

    /// The family id the kernel gave devlink.
    pub fn family(&self) -> u16 {
        self.family
    }

    /// The transport (e.g. to read [`crate::netlink::transport::Recorded::sent`]).
    pub fn transport(&self) -> &T {
        self.genl.transport()
    }

    /// `devlink dev param show BUS/DEV name NAME`.
    pub fn param_get(&mut self, h: &DevHandle, name: &str) -> Result<Param, DevlinkError> {
        let op = format!("DEVLINK_CMD_PARAM_GET (devlink dev param show {h} name {name})");
        let replies = self
            .genl
            .request(&op, param_get(self.family, h, name), false)
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
        let replies = self.genl.request(op, param_dump(self.family), true).map_err(|e| match e {
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
        self.genl.request(&op, param_set(self.family, h, name, value, cmode), false).map(|_| ()).map_err(
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
    /// An E810 PF's RDMA function to RoCEv2 (`Remedy::EnableRoce`):
    /// `enable_iwarp` off, then `enable_roce` on, both runtime (ice refuses
    /// `enable_roce` while iWARP is on). When the second write is refused, the
    /// first is undone (`enable_iwarp` back to what it was), so a failure leaves
    /// the PF in the mode it had.
    pub fn enable_roce(&mut self, pci: PciAddr) -> Result<(), DevlinkError> {
        let h = DevHandle::pci(pci);
        let [(iwarp, iwarp_to), (roce, roce_to)] = super::ENABLE_ROCE_PARAMS;
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
