//! The [`Dcb`] handle: DCB requests over the crate's one transport on
//! `NETLINK_ROUTE`, each documented by its `dcb` (iproute2) equivalent. Reads return the decoded
//! view ([`IeeeState`]); writes take the model types ([`IeeePfc`],
//! [`IeeeEts`], DSCP maps, [`DcbxMode`]) and check the driver's status byte.

use std::collections::BTreeMap;

use super::DcbxMode;
use super::*;
use crate::netlink::transport::{Client, NlError, OpenInError, SocketTransport, Transport, NETLINK_ROUTE};
use crate::netns::{Netns, NetnsError};

/// A DCB request that failed.
#[derive(Debug, thiserror::Error)]
pub enum DcbError {
    /// The device has no DCB support (`EOPNOTSUPP`), does not exist (`ENODEV`),
    /// or the kernel has no DCB netlink (`CONFIG_DCB` off).
    #[error("{op} on {ifname}: DCB not supported by this device or kernel (errno {errno})")]
    Unsupported {
        /// The request, as its `dcb` CLI equivalent.
        op: String,
        ifname: String,
        /// Positive errno.
        errno: i32,
    },
    /// The kernel refused the request.
    #[error("{op} on {ifname}: kernel answered {}{}", std::io::Error::from_raw_os_error(*errno), ext.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        op: String,
        ifname: String,
        /// Positive errno.
        errno: i32,
        /// The extended-ACK message, when the kernel sent one.
        ext: Option<String>,
    },
    /// The driver's SET handler returned a non-zero status in the reply.
    #[error("{op} on {ifname}: driver returned status {status}")]
    Driver {
        op: String,
        ifname: String,
        /// `DCB_ATTR_IEEE`/`DCB_ATTR_DCBX` status byte.
        status: u8,
    },
    /// The socket could not be opened, or the exchange failed (socket error,
    /// timeout, a reply that does not decode). The source names the request.
    #[error(transparent)]
    Netlink(NlError),
    /// The socket could not be opened in the network namespace.
    #[error("cannot enter the network namespace to open a NETLINK_ROUTE socket")]
    Netns(#[source] NetnsError),
    /// The kernel's answer lacked what the request asks for.
    #[error("{op} on {ifname}: {what}")]
    BadReply { op: String, ifname: String, what: String },
}

impl DcbError {
    /// Whether this means "no DCB here" rather than a failure.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, DcbError::Unsupported { .. })
    }

    fn of(op: &str, ifname: &str, e: NlError) -> Self {
        let (op, ifname) = (op.to_owned(), ifname.to_owned());
        match e {
            NlError::Kernel { errno, .. } if errno == libc::EOPNOTSUPP || errno == libc::ENODEV => {
                DcbError::Unsupported { op, ifname, errno }
            }
            NlError::Kernel { errno, ext, .. } => DcbError::Kernel { op, ifname, errno, ext },
            e => DcbError::Netlink(e),
        }
    }
}

fn open_err(source: std::io::Error) -> DcbError {
    DcbError::Netlink(NlError::Io { op: "open NETLINK_ROUTE socket".into(), source })
}

/// A DCB socket (`RTM_GETDCB`/`RTM_SETDCB` on `NETLINK_ROUTE`) for the
/// interfaces of its netns: reads the IEEE 802.1Qaz view and the DCBX mode,
/// writes PFC, ETS, APP entries and the DCBX mode, and checks the status byte
/// the driver answers a write with.
#[derive(Debug)]
pub struct Dcb<T = SocketTransport> {
    client: Client<T>,
}

impl Dcb<SocketTransport> {
    /// Opens a `NETLINK_ROUTE` socket in the calling thread's netns.
    pub fn open() -> Result<Self, DcbError> {
        SocketTransport::open(NETLINK_ROUTE).map(Self::new).map_err(open_err)
    }

    /// Opens a `NETLINK_ROUTE` socket inside `ns` (for the interfaces of `ns`).
    pub fn open_in(ns: &Netns) -> Result<Self, DcbError> {
        SocketTransport::open_in(ns, NETLINK_ROUTE).map(Self::new).map_err(|e| match e {
            OpenInError::Netns(e) => DcbError::Netns(e),
            OpenInError::Socket(e) => open_err(e),
        })
    }
}

impl<T: Transport> Dcb<T> {
    /// DCB over `transport` (a [`SocketTransport`] on `NETLINK_ROUTE`, or
    /// recorded answers).
    pub fn new(transport: T) -> Self {
        Self { client: Client::new(transport) }
    }

    /// The transport (e.g. to read [`crate::netlink::transport::Recorded::sent`]).
    pub fn transport(&self) -> &T {
        self.client.transport()
    }

    /// Sends `req` about `ifname` and collects the DCB replies up to the ACK.
    /// `op` names the request for errors (its `dcb` CLI form).
    pub fn request(&mut self, op: &str, ifname: &str, req: DcbMsg) -> Result<Vec<DcbMsg>, DcbError> {
        self.client
            .request(&format!("{op} dev {ifname}"), req, false, 0)
            .map_err(|e| DcbError::of(op, ifname, e))
    }

    /// `dcb pfc/ets/app/buffer show dev <ifname>`: the IEEE view, with the DCBX
    /// bits when the driver reports them.
    pub fn get_ieee(&mut self, ifname: &str) -> Result<IeeeState, DcbError> {
        let op = "RTM_GETDCB DCB_CMD_IEEE_GET (dcb pfc/ets/app/buffer show)";
        let replies = self.request(op, ifname, DcbMsg::ieee_get(ifname))?;
        let m =
            replies.iter().find(|m| m.cmd == cmd::DCB_CMD_IEEE_GET).ok_or_else(|| DcbError::BadReply {
                op: op.into(),
                ifname: ifname.into(),
                what: "no DCB_CMD_IEEE_GET reply".into(),
            })?;
        Ok(IeeeState::from_msg(m))
    }

    /// `dcb dcbx show dev <ifname>`: the `DCB_CAP_DCBX_*` bits.
    pub fn get_dcbx(&mut self, ifname: &str) -> Result<u8, DcbError> {
        let op = "RTM_GETDCB DCB_CMD_GDCBX (dcb dcbx show)";
        let replies = self.request(op, ifname, DcbMsg::get_dcbx(ifname))?;
        replies
            .iter()
            .flat_map(|m| m.attrs.iter())
            .find_map(|a| match a {
                DcbAttr::Dcbx(d) => Some(*d),
                _ => None,
            })
            .ok_or_else(|| DcbError::BadReply {
                op: op.into(),
                ifname: ifname.into(),
                what: "no DCB_ATTR_DCBX".into(),
            })
    }

    /// Sends a SET/DEL request and checks the driver's status byte.
    pub fn set(&mut self, op: &str, ifname: &str, req: DcbMsg) -> Result<(), DcbError> {
        let replies = self.request(op, ifname, req)?;
        for a in replies.iter().flat_map(|m| m.attrs.iter()) {
            match a {
                DcbAttr::IeeeStatus(s) | DcbAttr::Dcbx(s) if *s != 0 => {
                    return Err(DcbError::Driver { op: op.into(), ifname: ifname.into(), status: *s })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `dcb pfc set dev <ifname> prio-pfc all:off <p>:on … delay D`: the driver
    /// takes `pfc_en`, `delay` and `mbc`, so start from the current [`IeeePfc`]
    /// (`IeeePfc { pfc_en, ..current }`) to keep what is not being changed.
    pub fn set_pfc(&mut self, ifname: &str, pfc: &IeeePfc) -> Result<(), DcbError> {
        let op =
            format!("RTM_SETDCB DCB_CMD_IEEE_SET (dcb pfc set prio-pfc {} delay {})", pfc.pfc_en, pfc.delay);
        self.set(&op, ifname, DcbMsg::set_pfc(ifname, *pfc))
    }

    /// `dcb ets set dev <ifname> …`: TC bandwidths, TSAs and the priority → TC map.
    pub fn set_ets(&mut self, ifname: &str, ets: &IeeeEts) -> Result<(), DcbError> {
        let op = "RTM_SETDCB DCB_CMD_IEEE_SET (dcb ets set)";
        self.set(op, ifname, DcbMsg::set_ets(ifname, *ets))
    }

    /// `dcb app add dev <ifname> …`: any APP entries.
    pub fn add_apps(&mut self, ifname: &str, apps: &[DcbApp]) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_IEEE_SET {} APP entries (dcb app add)", apps.len());
        self.set(&op, ifname, DcbMsg::add_apps(ifname, apps))
    }

    /// `dcb app del dev <ifname> …`: any APP entries.
    pub fn del_apps(&mut self, ifname: &str, apps: &[DcbApp]) -> Result<(), DcbError> {
        let op = format!("RTM_SETDCB DCB_CMD_IEEE_DEL {} APP entries (dcb app del)", apps.len());
        self.set(&op, ifname, DcbMsg::del_apps(ifname, apps))
    }

    /// `dcb app add dev <ifname> dscp-prio D:P …` from a DSCP → priority map.
    pub fn add_dscp(&mut self, ifname: &str, map: &BTreeMap<u8, u8>) -> Result<(), DcbError> {
        self.add_apps(ifname, &dscp_apps(map))
    }

    /// `dcb app del dev <ifname> dscp-prio D:P …` from a DSCP → priority map.
    pub fn del_dscp(&mut self, ifname: &str, map: &BTreeMap<u8, u8>) -> Result<(), DcbError> {
        self.del_apps(ifname, &dscp_apps(map))
    }

    /// `dcb app replace dev <ifname> dscp-prio D:P …`: the entries of `want`, after
    /// deleting the entries of `have` that give a DSCP of `want` another
    /// priority (the APP table may hold several priorities per DSCP).
    pub fn replace_dscp(
        &mut self,
        ifname: &str,
        have: &BTreeMap<u8, u8>,
        want: &BTreeMap<u8, u8>,
    ) -> Result<(), DcbError> {
        let stale: BTreeMap<u8, u8> =
            want.iter().filter_map(|(d, p)| have.get(d).filter(|h| *h != p).map(|h| (*d, *h))).collect();
        if !stale.is_empty() {
            self.del_dscp(ifname, &stale)?;
        }
        self.add_dscp(ifname, want)
    }

    /// `dcb dcbx set dev <ifname> host|lld-managed ieee` ([`DcbxMode::bits`]).
    pub fn set_dcbx(&mut self, ifname: &str, mode: DcbxMode) -> Result<(), DcbError> {
        let bits = mode.bits();
        let op = format!("RTM_SETDCB DCB_CMD_SDCBX {bits:#04x} (dcb dcbx set)");
        self.set(&op, ifname, DcbMsg::set_dcbx(ifname, bits))
    }
}

fn dscp_apps(map: &BTreeMap<u8, u8>) -> Vec<DcbApp> {
    map.iter().map(|(d, p)| DcbApp::dscp(*d, *p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::transport::{emit, request_message, Recorded};
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};

    /// A kernel ACK for the request with seq `seq`.
    fn ack(seq: u32, errno: i32) -> Vec<u8> {
        let mut e = netlink_packet_core::ErrorMessage::default();
        e.code = std::num::NonZeroI32::new(-errno);
        e.header = vec![0; 16];
        let mut m = NetlinkMessage::<DcbMsg>::new(Default::default(), NetlinkPayload::Error(e));
        m.header.sequence_number = seq;
        m.finalize();
        emit(&mut m)
    }

    fn status_reply(seq: u32, cmd: u8, status: u8) -> Vec<u8> {
        let msg =
            DcbMsg { message_type: RTM_SETDCB, family: 0, cmd, attrs: vec![DcbAttr::IeeeStatus(status)] };
        emit(&mut request_message(0, seq, msg))
    }

    fn sent_msg(raw: &[u8]) -> DcbMsg {
        let mut m = parse_messages(raw).unwrap();
        let NetlinkPayload::InnerMessage(d) = m.remove(0).payload else { panic!("not a DCB message") };
        d
    }

    #[test]
    fn replace_dscp_deletes_stale_priorities_first() {
        let have = BTreeMap::from([(26, 4), (48, 6)]);
        let want = BTreeMap::from([(26, 3), (48, 6)]);
        let mut c = Dcb::new(Recorded::new([
            status_reply(1, cmd::DCB_CMD_IEEE_DEL, 0),
            ack(1, 0),
            status_reply(2, cmd::DCB_CMD_IEEE_SET, 0),
            ack(2, 0),
        ]));
        c.replace_dscp("eth0", &have, &want).unwrap();
        let sent = &c.transport().sent;
        assert_eq!(sent.len(), 2);
        assert_eq!(sent_msg(&sent[0]), DcbMsg::del_apps("eth0", &[DcbApp::dscp(26, 4)]));
        assert_eq!(sent_msg(&sent[1]), DcbMsg::add_apps("eth0", &[DcbApp::dscp(26, 3), DcbApp::dscp(48, 6)]));
        assert_eq!(
            sent[1],
            emit(&mut request_message(
                NLM_F_REQUEST | NLM_F_ACK,
                2,
                DcbMsg::add_apps("eth0", &[DcbApp::dscp(26, 3), DcbApp::dscp(48, 6)])
            ))
        );
    }

    #[test]
    fn writers_report_driver_status_and_kernel_refusals() {
        let pfc =
            IeeePfc { pfc_cap: 8, pfc_en: Priorities::from_bits(0x08), delay: 32, ..Default::default() };
        let mut c = Dcb::new(Recorded::new([status_reply(1, cmd::DCB_CMD_IEEE_SET, 1), ack(1, 0)]));
        let e = c.set_pfc("eth0", &pfc).unwrap_err();
        assert!(matches!(e, DcbError::Driver { status: 1, .. }), "{e}");
        assert!(e.to_string().contains("prio-pfc all:off 3:on delay 32"), "{e}");
        assert_eq!(sent_msg(&c.transport().sent[0]), DcbMsg::set_pfc("eth0", pfc));

        let mut c = Dcb::new(Recorded::new([ack(1, libc::EPERM)]));
        let e = c.set_dcbx("eth0", DcbxMode::Os).unwrap_err();
        assert!(matches!(e, DcbError::Kernel { errno: libc::EPERM, .. }), "{e}");
        assert_eq!(sent_msg(&c.transport().sent[0]), DcbMsg::set_dcbx("eth0", 0x09));

        let mut c = Dcb::new(Recorded::new([ack(1, libc::EOPNOTSUPP)]));
        assert!(c.set_ets("eth0", &IeeeEts::default()).unwrap_err().is_unsupported());
    }
}
