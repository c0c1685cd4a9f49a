//! `Enforce` mode: the smallest set of writes that brings an interface to its
//! profile, in a safe order, refusing writes that bounce the link unless the
//! profile sets `allowLinkFlap`; then a re-read, so the status records what the
//! node really has afterwards.
//!
//! Order (why): the firmware LLDP agent off first (on E810 it overwrites host DCB);
//! link-level pause off before PFC (802.3x pause and PFC are exclusive); PFC on the
//! lossless priority *before* steering DSCP to it (never send RoCE to a priority
//! that drops); then the APP table, ECN, CNP; MTU last (it flaps the link).

use std::collections::BTreeMap;
use std::path::PathBuf;

use nic::netlink::dcb::{DcbApp, IeeePfc, Priorities};
use nic::netlink::transport::{Client, SocketTransport};
use nic::roce::write::RdmaCmDefault;
use nic::roce::{remediation, DcbSource, InterfaceRoce, NodeRoce, Observed, Remedy, Trust};

use crate::agent::NodeSource;
use crate::checks::interface_selected;
use crate::crd::{EnforceRecord, RoceMode, RoceProfileSpec};

/// One write to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Interface.
    pub interface: String,
    /// The change.
    pub remedy: Remedy,
    /// Why it will not be made (link flap not allowed), if so.
    pub refused: Option<String>,
}

fn rank(r: &Remedy) -> u8 {
    match r {
        Remedy::FwLldpAgent(_) => 0,
        Remedy::Dcbx(_) => 1,
        Remedy::GlobalPause(_) => 2,
        Remedy::Pfc { .. } | Remedy::PfcDelay(_) => 3,
        Remedy::Trust(_) => 4,
        Remedy::DscpDel(_) => 5,
        Remedy::DscpAdd(_) => 6,
        Remedy::Ecn { .. } => 7,
        Remedy::CnpDscp(_) | Remedy::CnpPriority(_) => 8,
        Remedy::RoceMode { .. } | Remedy::Tos { .. } => 9,
        Remedy::Mtu(_) => 10,
    }
}

/// The minimal, ordered writes for one interface. Settings that cannot be read are
/// left alone (no blind writes).
pub fn plan(p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Write> {
    let mut out = Vec::new();
    let mut push = |remedy: Remedy| {
        let refused = (remedy.flaps_link() && !p.allow_link_flap).then(|| {
            format!("would bounce the link; set allowLinkFlap or run: {}", remediation(&i.netdev, &remedy))
        });
        out.push(Write { interface: i.netdev.clone(), remedy, refused });
    };
    if let Observed::Value(true) = i.fw_lldp_agent {
        push(Remedy::FwLldpAgent(false));
    }
    let pfc_wanted = p.pfc.as_ref().is_some_and(|x| !x.priorities.is_empty());
    if let Observed::Value(gp) = i.global_pause {
        let want = p.global_pause.unwrap_or(gp && !pfc_wanted);
        if gp != want {
            push(Remedy::GlobalPause(want));
        }
    }
    if let (Some(pfc), Observed::Value(have)) = (&p.pfc, &i.pfc) {
        let mut want = pfc.priorities.clone();
        want.sort_unstable();
        want.dedup();
        if have.enabled_priorities() != want {
            push(Remedy::Pfc { priorities: want });
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
            push(Remedy::DscpAdd(add));
        }
    }
    // Trust: DSCP trust with a map comes from the APP entries above; the rest
    // (PCP, or DSCP without a map) is a trust write of its own.
    if let (Some(t), Observed::Value(have)) = (p.trust, &i.trust) {
        let want = t.trust();
        let by_map = want == Trust::Dscp && !p.dscp_to_priority.is_empty();
        if *have != want && !by_map {
            push(Remedy::Trust(want));
        }
    }
    if let (Some(ecn), Observed::Value(have)) = (&p.ecn, &i.ecn) {
        for &prio in &ecn.priorities {
            if !have.contains(&prio) {
                push(Remedy::Ecn { priority: prio, on: true });
            }
        }
    }
    if let (Some(cnp), Observed::Value(have)) = (p.cnp, &i.cnp) {
        if have.dscp != cnp.dscp {
            push(Remedy::CnpDscp(cnp.dscp));
        }
        if have.priority != cnp.priority {
            push(Remedy::CnpPriority(cnp.priority));
        }
    }
    if let (Some(cm), Some(dev)) = (&p.rdma_cm, &i.rdma_dev) {
        if let (Some(mode), Observed::Value(have)) = (cm.roce_mode, &i.roce_mode) {
            if have != mode.configfs() {
                push(Remedy::RoceMode { rdma_dev: dev.clone(), port: 1, v2: mode == RoceMode::V2 });
            }
        }
        if let (Some(tos), Observed::Value(have)) = (cm.tos, &i.tos) {
            if *have != tos {
                push(Remedy::Tos { rdma_dev: dev.clone(), port: 1, tos });
            }
        }
    }
    if let (Some(min), Observed::Value(mtu)) = (p.min_mtu, &i.mtu) {
        if *mtu < min {
            push(Remedy::Mtu(min));
        }
    }
    out.sort_by_key(|w| rank(&w.remedy));
    out
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    /// A DCB netlink request failed.
    #[error("{op} on {iface}: {source}")]
    Dcb {
        /// Operation.
        op: &'static str,
        /// Interface.
        iface: String,
        /// The netlink error.
        #[source]
        source: nic::netlink::dcb::DcbError,
    },
    /// A sysfs write failed.
    #[error("write {path}: {source}")]
    Sysfs {
        /// File.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A configfs or sysfs write through [`nic::roce::write`] failed.
    #[error(transparent)]
    File(#[from] nic::roce::write::WriteError),
    /// An ethtool ioctl failed (the error names the request and interface).
    #[error("{0}")]
    Ethtool(std::io::Error),
    /// No writer exists for this setting here.
    #[error("{0}")]
    Manual(String),
}

/// Makes one write. DCB goes over netlink (only on a real node), ECN/CNP/MTU through
/// sysfs under the node's sysfs root (so a simulated node can be enforced too).
pub fn apply(src: &NodeSource, i: &InterfaceRoce, r: &Remedy) -> Result<(), EnforceError> {
    let net = src.roots.sys(format!("class/net/{}", i.netdev));
    let write = |rel: String, v: String| {
        let path = net.join(rel);
        std::fs::write(&path, v).map_err(|source| EnforceError::Sysfs { path, source })
    };
    let dcb =
        |op: &'static str,
         f: &dyn Fn(&mut Client<SocketTransport>) -> Result<(), nic::netlink::dcb::DcbError>| {
            if let DcbSource::Recorded(_) = src.dcb {
                return Err(EnforceError::Manual(format!(
                    "simulated node: DCB comes from its description; run: {}",
                    remediation(&i.netdev, r)
                )));
            }
            let mut s = nic::netlink::dcb::open().map_err(|source| EnforceError::Dcb {
                op: "open",
                iface: i.netdev.clone(),
                source,
            })?;
            f(&mut s).map_err(|source| EnforceError::Dcb { op, iface: i.netdev.clone(), source })
        };
    // Pause and private flags of a simulated node come from its description too.
    let ethtool = |f: &dyn Fn() -> std::io::Result<()>| {
        if let DcbSource::Recorded(_) = src.dcb {
            return Err(EnforceError::Manual(format!(
                "simulated node: ethtool settings come from its description; run: {}",
                remediation(&i.netdev, r)
            )));
        }
        f().map_err(EnforceError::Ethtool)
    };
    match r {
        Remedy::Pfc { priorities } => {
            let have = i.pfc.value().cloned().unwrap_or_default();
            let pfc_en =
                Priorities::from_list(&priorities.iter().copied().filter(|&p| p < 8).collect::<Vec<_>>())
                    .unwrap_or_default();
            let pfc = IeeePfc { pfc_en, ..have };
            dcb("DCB_ATTR_IEEE_PFC set", &|s| s.dcb_set_pfc(&i.netdev, &pfc))
        }
        Remedy::DscpAdd(m) => {
            let have = i.dscp_to_priority.value().cloned().unwrap_or_default();
            // Drop the old priority of each DSCP first: the APP table may hold several.
            let stale: Vec<DcbApp> =
                m.keys().filter_map(|d| have.get(d).map(|p| DcbApp::dscp(*d, *p))).collect();
            let add: Vec<DcbApp> = m.iter().map(|(d, p)| DcbApp::dscp(*d, *p)).collect();
            dcb("DCB_ATTR_IEEE_APP_TABLE set", &|s| {
                if !stale.is_empty() {
                    s.dcb_del_apps(&i.netdev, &stale)?;
                }
                s.dcb_add_apps(&i.netdev, &add)
            })
        }
        Remedy::DscpDel(m) => {
            let del: Vec<DcbApp> = m.iter().map(|(d, p)| DcbApp::dscp(*d, *p)).collect();
            dcb("DCB_ATTR_IEEE_APP_TABLE del", &|s| s.dcb_del_apps(&i.netdev, &del))
        }
        Remedy::Ecn { priority, on } => {
            let v = u8::from(*on).to_string();
            write(format!("ecn/roce_np/enable/{priority}"), v.clone())?;
            write(format!("ecn/roce_rp/enable/{priority}"), v)
        }
        Remedy::CnpDscp(d) => write("ecn/roce_np/cnp_dscp".into(), d.to_string()),
        Remedy::CnpPriority(p) => write("ecn/roce_np/cnp_802p_prio".into(), p.to_string()),
        Remedy::Mtu(m) => write("mtu".into(), m.to_string()),
        Remedy::PfcDelay(delay) => {
            let have = i.pfc.value().cloned().unwrap_or_default();
            let pfc = IeeePfc { delay: *delay, ..have };
            dcb("DCB_ATTR_IEEE_PFC set", &|s| s.dcb_set_pfc(&i.netdev, &pfc))
        }
        Remedy::Dcbx(mode) => dcb("DCB_CMD_SDCBX", &|s| s.dcb_set_dcbx(&i.netdev, *mode)),
        Remedy::GlobalPause(on) => ethtool(&|| nic::roce::set_pause(&i.netdev, *on)),
        Remedy::FwLldpAgent(on) => ethtool(&|| nic::roce::set_priv_flag(&i.netdev, "fw-lldp-agent", *on)),
        Remedy::Trust(t) => {
            if nic::roce::write::set_legacy_trust(&src.roots, &i.netdev, *t)? {
                return Ok(());
            }
            // Upstream drivers trust DSCP exactly while the APP table has DSCP entries.
            let have = i.dscp_to_priority.value().cloned().unwrap_or_default();
            match t {
                Trust::Pcp if !have.is_empty() => {
                    let del: Vec<DcbApp> = have.iter().map(|(d, p)| DcbApp::dscp(*d, *p)).collect();
                    dcb("DCB_ATTR_IEEE_APP_TABLE del", &|s| s.dcb_del_apps(&i.netdev, &del))
                }
                Trust::Pcp => Ok(()),
                Trust::Dscp => Err(EnforceError::Manual(format!(
                    "DSCP trust on this driver comes from DSCP APP entries: give the profile a dscpToPriority map, or run: {}",
                    remediation(&i.netdev, r)
                ))),
            }
        }
        Remedy::RoceMode { rdma_dev, port, v2 } => Ok(nic::roce::write::set_rdma_cm_default(
            &src.roots,
            rdma_dev,
            *port,
            RdmaCmDefault::RoceMode { v2: *v2 },
        )?),
        Remedy::Tos { rdma_dev, port, tos } => {
            Ok(nic::roce::write::set_rdma_cm_default(&src.roots, rdma_dev, *port, RdmaCmDefault::Tos(*tos))?)
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
                    tracing::warn!(iface = %w.interface, setting, error = %e, "enforce: write failed");
                    records.push(rec("Failed", e.to_string()));
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
    }
}
