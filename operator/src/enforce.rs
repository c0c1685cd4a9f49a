//! `Enforce` mode: the smallest set of writes that brings an interface to its
//! profile, in the order they must run, refusing writes that bounce the link
//! unless the profile sets `allowLinkFlap`; then a re-read, so the status records
//! what the node really has afterwards.
//!
//! Order ([`Remedy::rank`], the same order `kubectl rdma` prints remediations in):
//! an E810 PF in iWARP mode to RoCEv2 first (devlink `enable_iwarp` off, then
//! `enable_roce` on: ice replugs the RDMA function, so it is behind
//! `allowLinkFlap` and comes before the rdma_cm defaults it would reset); the
//! E810 firmware LLDP agent off (ice refuses host DCB changes while it
//! runs, and overwrites them); DCBX; link-level pause off before PFC (802.3x pause
//! and PFC are exclusive); PFC and ETS on the lossless priority *before* steering
//! DSCP to it (never send RoCE to a priority that drops); then the APP table,
//! trust, ECN, CNP, rdma_cm defaults; MTU last (it flaps the link).
//!
//! Files go through [`nic::roce::write`], DCB through the netlink handle of
//! [`nic::netlink::dcb`], devlink parameters through [`nic::netlink::devlink`];
//! this module touches no files itself.

use std::collections::BTreeMap;

use nic::netlink::dcb::{Dcb, DcbError, IeeeEts, IeeePfc, Priorities};
use nic::netlink::devlink::{Devlink, DevlinkError};
use nic::roce::write::{self as w, RdmaCmDefault};
use nic::roce::{remediation, DcbSource, InterfaceRoce, NodeRoce, Observed, RdmaProtocol, Remedy, Trust};

use crate::checks::interface_selected;
use crate::crd::{EnforceRecord, RoceMode, RoceProfileSpec};
use crate::source::NodeSource;

/// One write to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub interface: String,
    /// The change.
    pub remedy: Remedy,
    /// Why it will not be made (link flap not allowed, or a write before it
    /// that it depends on is refused), if so.
    pub refused: Option<String>,
}

/// Whether a remedy is a DCB netlink write (which ice refuses while its firmware
/// LLDP agent runs).
fn is_dcb(r: &Remedy) -> bool {
    matches!(
        r,
        Remedy::Pfc { .. }
            | Remedy::PfcDelay(_)
            | Remedy::Ets { .. }
            | Remedy::DscpAdd(_)
            | Remedy::DscpDel(_)
            | Remedy::Dcbx(_)
            | Remedy::Trust(_)
    )
}

/// The minimal, ordered writes for one interface. Settings that cannot be read are
/// left alone (no blind writes).
pub fn plan(p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Write> {
    let mut wanted: Vec<Remedy> = Vec::new();
    if let Some(fix) = crate::checks::protocol_fix(i) {
        wanted.push(fix);
    }
    want_link(p, i, &mut wanted);
    want_qos(p, i, &mut wanted);
    want_congestion(p, i, &mut wanted);
    want_rdma_cm_and_mtu(p, i, &mut wanted);
    wanted.sort_by_key(|r| r.rank(&i.netdev));
    guard(p, i, wanted)
}

/// Link-level flow control: the firmware LLDP agent off, the DCBX mode, and
/// global pause (off by default when the profile wants PFC).
fn want_link(p: &RoceProfileSpec, i: &InterfaceRoce, wanted: &mut Vec<Remedy>) {
    if let Observed::Value(true) = i.fw_lldp_agent {
        wanted.push(Remedy::FwLldpAgent(false));
    }
    if let (Some(d), Observed::Value(have)) = (p.dcbx, &i.dcbx) {
        if *have != d.mode() {
            wanted.push(Remedy::Dcbx(d.mode()));
        }
    }
    let pfc_wanted = p.pfc.as_ref().is_some_and(|x| !x.priorities.is_empty());
    if let Observed::Value(gp) = i.global_pause {
        let want = p.global_pause.unwrap_or(gp && !pfc_wanted);
        if gp != want {
            wanted.push(Remedy::GlobalPause(want));
        }
    }
}

/// Lossless QoS: PFC priorities, ETS, the DSCP APP entries and trust.
fn want_qos(p: &RoceProfileSpec, i: &InterfaceRoce, wanted: &mut Vec<Remedy>) {
    if let (Some(pfc), Observed::Value(have)) = (&p.pfc, &i.pfc) {
        let mut want = pfc.priorities.clone();
        want.sort_unstable();
        want.dedup();
        if have.enabled_priorities() != want {
            wanted.push(Remedy::Pfc { priorities: want });
        }
    }
    if let (Some(ets), Observed::Value(have)) = (&p.ets, &i.ets) {
        let bw: [u8; 8] = std::array::from_fn(|k| ets.bandwidth.get(k).copied().unwrap_or(0));
        let map: Option<[u8; 8]> =
            ets.priority_to_tc.as_ref().map(|m| std::array::from_fn(|k| m.get(k).copied().unwrap_or(0)));
        // IEEE_8021QAZ_TSA_ETS = 2 (include/uapi/linux/dcbnl.h).
        let ok = have.tc_tx_bw == bw
            && have.tc_tsa.iter().all(|&t| t == 2)
            && map.is_none_or(|m| have.prio_tc == m);
        if !ok {
            wanted.push(Remedy::Ets { bandwidth: bw, priority_to_tc: map });
        }
    }
    if let Observed::Value(have) = &i.dscp_to_priority {
        let add: BTreeMap<u8, u8> = p
            .dscp_to_priority
            .iter()
            .filter(|m| have.get(&m.dscp) != Some(&m.priority))
            .map(|m| (m.dscp, m.priority))
            .collect();
        if !add.is_empty() {
            wanted.push(Remedy::DscpAdd(add));
        }
    }
    // Trust: upstream drivers trust DSCP exactly while the APP table has DSCP
    // entries, so a DSCP profile with a map gets trust from the entries above. With
    // NVIDIA OFED's qos/trust file, mlx5 ignores the entries for trust: write it.
    if let (Some(t), Observed::Value(have)) = (p.trust, &i.trust) {
        let want = t.trust();
        let by_map = want == Trust::Dscp && !p.dscp_to_priority.is_empty() && !i.trust_file;
        if *have != want && !by_map {
            wanted.push(Remedy::Trust(want));
        }
    }
}

/// Congestion control: ECN per priority and the CNP's DSCP and priority.
fn want_congestion(p: &RoceProfileSpec, i: &InterfaceRoce, wanted: &mut Vec<Remedy>) {
    if let (Some(ecn), Observed::Value(have)) = (&p.ecn, &i.ecn) {
        for &prio in &ecn.priorities {
            if !have.contains(&prio) {
                wanted.push(Remedy::Ecn { priority: prio, on: true });
            }
        }
    }
    if let (Some(cnp), Observed::Value(have)) = (p.cnp, &i.cnp) {
        if have.dscp != cnp.dscp {
            wanted.push(Remedy::CnpDscp(cnp.dscp));
        }
        if have.priority != cnp.priority {
            wanted.push(Remedy::CnpPriority(cnp.priority));
        }
    }
}

/// The rdma_cm defaults (RoCE mode, ToS) and the minimum MTU.
fn want_rdma_cm_and_mtu(p: &RoceProfileSpec, i: &InterfaceRoce, wanted: &mut Vec<Remedy>) {
    if let (Some(cm), Some(dev)) = (&p.rdma_cm, &i.rdma_dev) {
        // Not on a port without RoCE (rdma_cm refuses a RoCE mode there): irdma
        // re-creates the device when the protocol switches, and the next pass
        // sets the mode on the new one.
        let roce = i.rdma_protocol.value().is_none_or(|&p| p == RdmaProtocol::RoceV2);
        if let (Some(mode), Observed::Value(have), true) = (cm.roce_mode, &i.roce_mode, roce) {
            if have != mode.configfs() {
                wanted.push(Remedy::RoceMode { rdma_dev: dev.clone(), port: 1, v2: mode == RoceMode::V2 });
            }
        }
        if let (Some(tos), Observed::Value(have)) = (cm.tos, &i.tos) {
            if *have != tos {
                wanted.push(Remedy::Tos { rdma_dev: dev.clone(), port: 1, tos });
            }
        }
    }
    if let (Some(min), Observed::Value(mtu)) = (p.min_mtu, &i.mtu) {
        if *mtu < min {
            wanted.push(Remedy::Mtu(min));
        }
    }
}

/// The ordered remedies as writes, each with why it is refused: a link flap
/// the profile does not allow, or a DCB change while the firmware LLDP agent
/// (which the driver defers DCB to) stays on.
fn guard(p: &RoceProfileSpec, i: &InterfaceRoce, wanted: Vec<Remedy>) -> Vec<Write> {
    let driver = i.driver.as_deref();
    let mut lldp_stays_on = false;
    let mut out = Vec::new();
    for remedy in wanted {
        let mut refused = (remedy.flaps_link(driver) && !p.allow_link_flap).then(|| {
            let what = match remedy {
                Remedy::EnableRoce { .. } => {
                    "would reload the PF's RDMA function (its RDMA device and every connection on it go away)"
                }
                _ => "would bounce the link",
            };
            format!("{what}; set allowLinkFlap or run: {}", remediation(&i.netdev, &remedy))
        });
        if matches!(remedy, Remedy::FwLldpAgent(false)) && refused.is_some() {
            lldp_stays_on = true;
        } else if lldp_stays_on && refused.is_none() && is_dcb(&remedy) {
            refused = Some(format!(
                "the firmware LLDP agent is on, so the driver refuses DCB changes; turn it off first (allowLinkFlap), then: {}",
                remediation(&i.netdev, &remedy)
            ));
        }
        out.push(Write { interface: i.netdev.clone(), remedy, refused });
    }
    out
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    /// A DCB netlink request failed.
    #[error("{op} on {iface}")]
    Dcb {
        /// What was being set, as the `dcb` command says it.
        op: &'static str,
        /// Interface.
        iface: String,
        /// The netlink error.
        #[source]
        source: DcbError,
    },
    /// A configfs or sysfs write failed.
    #[error(transparent)]
    File(#[from] w::WriteError),
    /// An ethtool ioctl failed (the error names the request and interface).
    #[error("{0}")]
    Ethtool(std::io::Error),
    /// A devlink request failed (the error names the request).
    #[error(transparent)]
    Devlink(#[from] DevlinkError),
    /// No writer exists for this setting here.
    #[error("{0}")]
    Manual(String),
}

/// Makes one write. DCB and ethtool go to this host's kernel (a simulated node's
/// come from its description, so those are reported, not faked); files go under
/// the node's sysfs root, so a simulated node is written too.
pub fn apply(src: &NodeSource, i: &InterfaceRoce, r: &Remedy) -> Result<(), EnforceError> {
    let roots = &src.roots;
    let iface = i.netdev.as_str();
    let simulated = |what: &str| {
        EnforceError::Manual(format!(
            "simulated node: {what} come from its description; run: {}",
            remediation(iface, r)
        ))
    };
    let dcb = |op: &'static str, f: &dyn Fn(&mut Dcb) -> Result<(), DcbError>| {
        if let DcbSource::Recorded(_) = src.dcb {
            return Err(simulated("DCB settings"));
        }
        let err = |op, source| EnforceError::Dcb { op, iface: iface.to_string(), source };
        let mut dcb = Dcb::open().map_err(|e| err("open NETLINK_ROUTE", e))?;
        f(&mut dcb).map_err(|e| err(op, e))
    };
    let ethtool = |f: &dyn Fn() -> std::io::Result<()>| {
        if let DcbSource::Recorded(_) = src.dcb {
            return Err(simulated("ethtool settings"));
        }
        f().map_err(EnforceError::Ethtool)
    };
    let pfc = i.pfc.value().cloned().unwrap_or_default();
    let map = i.dscp_to_priority.value().cloned().unwrap_or_default();
    match r {
        Remedy::Pfc { priorities } => {
            // The kernel takes the whole struct: what is not changed is written back as it was.
            let on: Vec<u8> = priorities.iter().copied().filter(|&p| p < 8).collect();
            let pfc = IeeePfc { pfc_en: Priorities::from_list(&on).unwrap_or_default(), ..pfc };
            dcb("dcb pfc set prio-pfc", &|c| c.set_pfc(iface, &pfc))
        }
        Remedy::PfcDelay(delay) => {
            let pfc = IeeePfc { delay: *delay, ..pfc };
            dcb("dcb pfc set delay", &|c| c.set_pfc(iface, &pfc))
        }
        Remedy::Ets { bandwidth, priority_to_tc } => {
            let have = i.ets.value().cloned().unwrap_or_default();
            // IEEE_8021QAZ_TSA_ETS = 2 on every TC (include/uapi/linux/dcbnl.h).
            let ets = IeeeEts {
                tc_tx_bw: *bandwidth,
                tc_tsa: [2; 8],
                prio_tc: priority_to_tc.unwrap_or(have.prio_tc),
                ..have
            };
            dcb("dcb ets set", &|c| c.set_ets(iface, &ets))
        }
        Remedy::DscpAdd(want) => dcb("dcb app replace dscp-prio", &|c| c.replace_dscp(iface, &map, want)),
        Remedy::DscpDel(del) => dcb("dcb app del dscp-prio", &|c| c.del_dscp(iface, del)),
        Remedy::Dcbx(mode) => dcb("dcb dcbx set", &|c| c.set_dcbx(iface, *mode)),
        Remedy::Ecn { priority, on } => Ok(w::set_ecn(roots, iface, *priority, *on)?),
        Remedy::CnpDscp(d) => Ok(w::set_cnp_dscp(roots, iface, *d)?),
        Remedy::CnpPriority(p) => Ok(w::set_cnp_priority(roots, iface, *p)?),
        Remedy::Mtu(m) => Ok(w::set_mtu(roots, iface, *m)?),
        Remedy::GlobalPause(on) => ethtool(&|| nic::roce::set_pause(iface, *on)),
        Remedy::FwLldpAgent(on) => ethtool(&|| nic::roce::set_priv_flag(iface, "fw-lldp-agent", *on)),
        Remedy::Trust(t) => {
            if w::set_legacy_trust(roots, iface, *t)? {
                return Ok(());
            }
            // Upstream drivers trust DSCP exactly while the APP table has DSCP entries.
            match t {
                Trust::Pcp if !map.is_empty() => dcb("dcb app del dscp-prio", &|c| c.del_dscp(iface, &map)),
                Trust::Pcp => Ok(()),
                Trust::Dscp => Err(EnforceError::Manual(format!(
                    "DSCP trust on this driver comes from DSCP APP entries: give the profile a dscpToPriority map, or run: {}",
                    remediation(iface, r)
                ))),
            }
        }
        Remedy::RoceMode { rdma_dev, port, v2 } => {
            Ok(w::set_rdma_cm_default(roots, rdma_dev, *port, RdmaCmDefault::RoceMode { v2: *v2 })?)
        }
        Remedy::Tos { rdma_dev, port, tos } => {
            Ok(w::set_rdma_cm_default(roots, rdma_dev, *port, RdmaCmDefault::Tos(*tos))?)
        }
        Remedy::EnableRoce { pci } => {
            // A simulated node's protocol comes from its description, like its DCB settings.
            if let DcbSource::Recorded(_) = src.dcb {
                return Err(simulated("devlink parameters"));
            }
            let mut d = Devlink::open()?;
            Ok(d.enable_roce(*pci)?)
        }
    }
}

/// Plans, writes and re-reads; returns the node as it is afterwards and what was done.
pub fn enforce(src: &NodeSource, p: &RoceProfileSpec, node: NodeRoce) -> (NodeRoce, Vec<EnforceRecord>) {
    let mut records = Vec::new();
    let mut wrote = false;
    for i in node.interfaces.iter().filter(|i| interface_selected(p.interface_selector.as_ref(), i)) {
        for w in plan(p, i) {
            let setting = setting_name(&w.remedy);
            let detail = remediation(&w.interface, &w.remedy);
            let rec = |outcome: &str, detail: String| EnforceRecord {
                interface: w.interface.clone(),
                setting: setting.into(),
                outcome: outcome.into(),
                detail,
            };
            if let Some(why) = &w.refused {
                tracing::warn!(iface = %w.interface, setting, "enforce: refused: {why}");
                records.push(rec("Refused", why.clone()));
                continue;
            }
            match apply(src, i, &w.remedy) {
                Ok(()) => {
                    tracing::info!(iface = %w.interface, setting, "enforce: applied `{detail}`");
                    wrote = true;
                    records.push(rec("Applied", detail));
                }
                Err(e) => {
                    tracing::warn!(iface = %w.interface, setting, error = %crate::api::chain(&e), "enforce: write failed");
                    records.push(rec("Failed", crate::api::chain(&e)));
                }
            }
        }
    }
    let node = if wrote { src.read() } else { node };
    (node, records)
}

fn setting_name(r: &Remedy) -> &'static str {
    match r {
        Remedy::Pfc { .. } => "pfc",
        Remedy::PfcDelay(_) => "pfc-delay",
        Remedy::DscpAdd(_) | Remedy::DscpDel(_) => "dscp-map",
        Remedy::Trust(_) => "trust",
        Remedy::Ecn { .. } => "ecn",
        Remedy::CnpDscp(_) | Remedy::CnpPriority(_) => "cnp",
        Remedy::Mtu(_) => "mtu",
        Remedy::RoceMode { .. } => "roce-mode",
        Remedy::Tos { .. } => "tos",
        Remedy::GlobalPause(_) => "global-pause",
        Remedy::FwLldpAgent(_) => "fw-lldp-agent",
        Remedy::Dcbx(_) => "dcbx",
        Remedy::Ets { .. } => "ets",
        Remedy::EnableRoce { .. } => "rdma-protocol",
    }
}
