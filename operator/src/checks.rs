//! Checks as pure functions: a [`RoceProfileSpec`] × an observed
//! [`NodeRoce`] → a list of [`Check`]s, each with the exact command that fixes it.
//!
//! Two kinds of checks:
//! - **settings**: one observed value against the profile (`pfc`, `dscp-map`, `ecn`, …).
//!   A value the driver lacks (e.g. ECN sysfs on upstream mlx5 without NVIDIA OFED)
//!   is `Unsupported`, never `Fail`.
//! - **chain coherence** (`chain-*`): whether the settings that are there work
//!   together: the rdma_cm ToS → DSCP → priority must land on a priority with PFC
//!   and ECN on; CNPs must not ride the lossless priority; link-level pause must be
//!   off when PFC is on; the netdev MTU must leave room for a 4096-byte RoCE MTU.

use std::collections::{BTreeMap, BTreeSet};

use nic::roce::{
    min_netdev_mtu_for, remediation, roce_active_mtu, InterfaceRoce, NodeRoce, Observed, RdmaProtocol,
    Remedy, Trust,
};

use crate::crd::{
    Check, CheckResult, CnpSpec, DscpMapping, EcnSpec, EtsSpec, InterfaceSelector, Mode, PfcSpec, RdmaCmSpec,
    RoceMode, RoceProfile, RoceProfileSpec, TrustMode,
};

/// Name of the built-in profile used when none applies.
pub const DEFAULT_PROFILE: &str = "default";

/// The RoCE active MTU a lossless RoCE v2 fabric wants.
pub const WANTED_ACTIVE_MTU: u32 = 4096;

/// What a RoCE v2 lossless fabric wants (the NVIDIA/industry "DSCP 26, priority 3"
/// recipe): trust DSCP, DSCP 26 → priority 3 with PFC and ECN on priority 3, CNPs
/// on DSCP 48 / priority 6, netdev MTU ≥ 4200, rdma_cm RoCE v2 with ToS 106
/// (DSCP 26 << 2 | ECT(0)), link-level pause off.
pub fn default_profile_spec() -> RoceProfileSpec {
    RoceProfileSpec {
        node_selector: BTreeMap::new(),
        interface_selector: None,
        mode: Mode::Audit,
        trust: Some(TrustMode::Dscp),
        dscp_to_priority: vec![DscpMapping { dscp: 26, priority: 3 }, DscpMapping { dscp: 48, priority: 6 }],
        pfc: Some(PfcSpec { priorities: vec![3] }),
        global_pause: Some(false),
        ecn: Some(EcnSpec { priorities: vec![3] }),
        cnp: Some(CnpSpec { dscp: 48, priority: 6 }),
        rdma_cm: Some(RdmaCmSpec { roce_mode: Some(RoceMode::V2), tos: Some(106) }),
        min_mtu: Some(4200),
        min_link_speed_mbps: None,
        dcbx: None,
        ets: None,
        allow_link_flap: false,
    }
}

/// [`default_profile_spec`] as a named object.
pub fn default_profile() -> RoceProfile {
    RoceProfile::new(DEFAULT_PROFILE, default_profile_spec())
}

/// Whether a profile's `interfaceSelector` takes this interface. Without a selector,
/// every interface with an RDMA device is checked.
pub fn interface_selected(sel: Option<&InterfaceSelector>, iface: &InterfaceRoce) -> bool {
    let Some(sel) = sel else {
        return iface.rdma_dev.is_some();
    };
    let name_ok = sel.names.is_empty() || sel.names.iter().any(|p| glob_match(p, &iface.netdev));
    let driver_ok =
        sel.drivers.is_empty() || iface.driver.as_deref().is_some_and(|d| sel.drivers.iter().any(|s| s == d));
    name_ok && driver_ok
}

/// `pattern` with an optional trailing `*`.
fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// All checks of a node, interface by interface, in a stable order.
pub fn check_node(profile: &RoceProfileSpec, node: &NodeRoce) -> Vec<Check> {
    let mut checks: Vec<Check> = node
        .interfaces
        .iter()
        .filter(|i| interface_selected(profile.interface_selector.as_ref(), i))
        .flat_map(|i| check_interface(profile, i))
        .collect();
    // Node-wide, and only beside interface checks: alone it must not make a node
    // without a checked interface look ready.
    if !checks.is_empty() {
        checks.push(netns_check(node));
    }
    checks
}

/// Interface name of the node-wide checks.
pub const NODE: &str = nic::readiness::NODE;

/// `rdma-netns`: a node whose VFs with RDMA devices are given to pods needs the
/// RDMA subsystem in exclusive netns mode ([`nic::netns_mode_problem`]); without
/// such VFs (shared-mode HCAs only) the mode is not checked.
pub fn netns_check(node: &NodeRoce) -> Check {
    let expected = "exclusive".to_string();
    let check = |result, actual: String, remediation: &str| Check {
        name: "rdma-netns".into(),
        interface: NODE.into(),
        result,
        expected: expected.clone(),
        actual,
        remediation: remediation.into(),
    };
    let mode = node.rdma_netns_mode.value().copied();
    let shown = node.rdma_netns_mode.label(|m| match m {
        nic::NetnsMode::Shared => "shared".into(),
        nic::NetnsMode::Exclusive => "exclusive".into(),
    });
    if node.rdma_vfs == 0 {
        return check(CheckResult::NotApplicable, format!("{shown} (no VF with an RDMA device)"), "");
    }
    match mode {
        Some(nic::NetnsMode::Exclusive) => check(CheckResult::Pass, shown, ""),
        Some(nic::NetnsMode::Shared) => check(
            CheckResult::Fail,
            format!("shared: {} VFs with RDMA devices cannot move into pods", node.rdma_vfs),
            nic::NETNS_EXCLUSIVE_FIX,
        ),
        None => check(
            CheckResult::Unknown,
            format!("{shown}: {}", node.rdma_netns_mode.reason().unwrap_or("not read")),
            "",
        ),
    }
}

/// All checks of one interface.
pub fn check_interface(p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let c = Ctx { iface: &i.netdev };
    let mut out = link_checks(&c, p, i);
    out.extend(dcb_checks(&c, p, i));
    out.extend(congestion_checks(&c, p, i));
    if let Some(cm) = &p.rdma_cm {
        out.extend(rdma_cm_checks(&c, cm, i));
    }
    if i.rdma_dev.is_some() {
        out.extend(rdma_port_checks(&c, i));
    }
    out.push(protocol_check(&c, i));
    out.push(fw_lldp_check(&c, i));
    out.extend(chain_checks(p, i));
    out
}

/// `link-up`, `link-speed`, `mtu`.
fn link_checks(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(c.observed(
        "link-up",
        "up",
        &i.operstate,
        |s| s.clone(),
        |s| s == "up",
        || format!("ip link set dev {} up", i.netdev),
    ));
    if let Some(min) = p.min_link_speed_mbps {
        out.push(c.observed(
            "link-speed",
            &format!(">= {min} Mb/s"),
            &i.speed_mbps,
            |s| format!("{s} Mb/s"),
            |&s| s >= min,
            String::new,
        ));
    }
    if let Some(min) = p.min_mtu {
        out.push(c.observed(
            "mtu",
            &format!(">= {min}"),
            &i.mtu,
            u32::to_string,
            |&m| m >= min,
            || remediation(&i.netdev, &Remedy::Mtu(min)),
        ));
    }
    out
}

/// Classification and flow control: `trust`, `dscp-map`, `pfc`, `dcbx`, `ets`, `global-pause`.
fn dcb_checks(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(t) = p.trust {
        out.push(c.observed(
            "trust",
            t.as_str(),
            &i.trust,
            |t| t.as_str().into(),
            |o| *o == t.trust(),
            || trust_fix(i, t, &p.dscp_to_priority),
        ));
    }
    if !p.dscp_to_priority.is_empty() {
        let want: BTreeMap<u8, u8> = p.dscp_to_priority.iter().map(|m| (m.dscp, m.priority)).collect();
        out.push(c.observed(
            "dscp-map",
            &map_str(&want),
            &i.dscp_to_priority,
            map_str,
            |have| want.iter().all(|(d, pr)| have.get(d) == Some(pr)),
            || {
                let have = i.dscp_to_priority.value().cloned().unwrap_or_default();
                let missing: BTreeMap<u8, u8> =
                    want.iter().filter(|(d, pr)| have.get(d) != Some(pr)).map(|(d, p)| (*d, *p)).collect();
                remediation(&i.netdev, &Remedy::DscpAdd(missing))
            },
        ));
    }
    if let Some(pfc) = &p.pfc {
        let want = sorted(&pfc.priorities);
        out.push(c.observed(
            "pfc",
            &prio_str(&want),
            &i.pfc,
            |o| prio_str(&o.enabled_priorities()),
            |o| o.enabled_priorities() == want,
            || remediation(&i.netdev, &Remedy::Pfc { priorities: want.clone() }),
        ));
    }
    if let Some(d) = p.dcbx {
        out.push(c.observed(
            "dcbx",
            d.as_str(),
            &i.dcbx,
            |m| dcbx_str(*m).into(),
            |m| *m == d.mode(),
            || remediation(&i.netdev, &Remedy::Dcbx(d.mode())),
        ));
    }
    if let Some(ets) = &p.ets {
        out.push(ets_check(c, i, ets));
    }
    if let Some(gp) = p.global_pause {
        out.push(c.observed(
            "global-pause",
            onoff(gp),
            &i.global_pause,
            |b| onoff(*b).into(),
            |&b| b == gp,
            || remediation(&i.netdev, &Remedy::GlobalPause(gp)),
        ));
    }
    out
}

/// Congestion control: `ecn`, `cnp`.
fn congestion_checks(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(ecn) = &p.ecn {
        let want = sorted(&ecn.priorities);
        out.push(c.observed(
            "ecn",
            &prio_str(&want),
            &i.ecn,
            |o| prio_str(o),
            |o| want.iter().all(|w| o.contains(w)),
            || {
                let have = i.ecn.value().cloned().unwrap_or_default();
                want.iter()
                    .filter(|w| !have.contains(w))
                    .map(|&priority| remediation(&i.netdev, &Remedy::Ecn { priority, on: true }))
                    .collect::<Vec<_>>()
                    .join(" && ")
            },
        ));
    }
    if let Some(cnp) = p.cnp {
        out.push(c.observed(
            "cnp",
            &format!("dscp {} prio {}", cnp.dscp, cnp.priority),
            &i.cnp,
            |o| format!("dscp {} prio {}", o.dscp, o.priority),
            |o| o.dscp == cnp.dscp && o.priority == cnp.priority,
            || {
                let have = i.cnp.value().copied();
                let mut fixes = Vec::new();
                if have.map(|h| h.dscp) != Some(cnp.dscp) {
                    fixes.push(remediation(&i.netdev, &Remedy::CnpDscp(cnp.dscp)));
                }
                if have.map(|h| h.priority) != Some(cnp.priority) {
                    fixes.push(remediation(&i.netdev, &Remedy::CnpPriority(cnp.priority)));
                }
                fixes.join(" && ")
            },
        ));
    }
    out
}

/// rdma_cm's defaults: `roce-mode`, `tos`.
fn rdma_cm_checks(c: &Ctx, cm: &RdmaCmSpec, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    let dev = i.rdma_dev.clone().unwrap_or_else(|| "<rdma-dev>".into());
    let not_roce = i.rdma_protocol.value().filter(|&&p| p != RdmaProtocol::RoceV2);
    if let (Some(mode), Some(proto)) = (cm.roce_mode, not_roce) {
        // rdma_cm gives a port without RoCE the IB GID type (cma_add_one):
        // there is no RoCE mode to set until the protocol is fixed.
        out.push(c.make(
            "roce-mode",
            mode.configfs(),
            &format!("{proto}: no RoCE mode (see rdma-protocol)"),
            CheckResult::NotApplicable,
            String::new(),
        ));
    } else if let Some(mode) = cm.roce_mode {
        out.push(c.observed(
            "roce-mode",
            mode.configfs(),
            &i.roce_mode,
            |m| m.clone(),
            |m| m == mode.configfs(),
            || {
                remediation(
                    &i.netdev,
                    &Remedy::RoceMode { rdma_dev: dev.clone(), port: 1, v2: mode == RoceMode::V2 },
                )
            },
        ));
    }
    if let Some(tos) = cm.tos {
        out.push(c.observed(
            "tos",
            &tos.to_string(),
            &i.tos,
            u8::to_string,
            |&t| t == tos,
            || remediation(&i.netdev, &Remedy::Tos { rdma_dev: dev.clone(), port: 1, tos }),
        ));
    }
    out
}

/// Of an interface with an RDMA device: `rdma-port`, `gid-index`.
fn rdma_port_checks(c: &Ctx, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(c.observed(
        "rdma-port",
        "ACTIVE",
        &i.port_state,
        |s| s.clone(),
        |s| s == "ACTIVE",
        || format!("ip link set dev {} up", i.netdev),
    ));
    let not_roce = i.rdma_protocol.value().filter(|&&p| p != RdmaProtocol::RoceV2);
    out.push(match not_roce {
        // An RNIC has one GID, its MAC, and no RoCE v2 entry (irdma_query_gid).
        Some(proto) => c.make(
            "gid-index",
            "a RoCE v2 GID",
            &format!("{proto}: no RoCE GIDs (see rdma-protocol)"),
            CheckResult::NotApplicable,
            String::new(),
        ),
        None => c.observed(
            "gid-index",
            "a RoCE v2 GID",
            &i.gid_index,
            |g| format!("index {g}"),
            |_| true,
            || format!("ip addr add <address>/<prefix> dev {}", i.netdev),
        ),
    });
    out
}

/// A RoCE profile needs the function to speak RoCE. An E810 PF runs RoCEv2 or
/// iWARP (or no RDMA), chosen by ice's devlink parameters; in iWARP mode every
/// other check can pass while RoCE traffic cannot flow.
fn protocol_check(c: &Ctx, i: &InterfaceRoce) -> Check {
    c.observed(
        "rdma-protocol",
        RdmaProtocol::RoceV2.as_str(),
        &i.rdma_protocol,
        |p| p.as_str().into(),
        |&p| p == RdmaProtocol::RoceV2,
        || protocol_fix(i).map(|f| remediation(&i.netdev, &f)).unwrap_or_default(),
    )
}

/// The fix for a function that does not run RoCE, where one exists: an ice PF
/// (E810) in iWARP mode or with RDMA off goes to RoCEv2 through devlink. Other
/// drivers have no such switch (an iWARP-only adapter cannot run RoCE).
pub fn protocol_fix(i: &InterfaceRoce) -> Option<Remedy> {
    match (&i.rdma_protocol, i.driver.as_deref(), i.pci) {
        (Observed::Value(RdmaProtocol::Iwarp | RdmaProtocol::None), Some("ice"), Some(pci)) => {
            Some(Remedy::EnableRoce { pci })
        }
        _ => None,
    }
}

/// E810 firmware LLDP agent: while on, the firmware owns DCB and overwrites what the
/// host sets (Intel ice driver README, "FW-LLDP"). Not an mlx5 knob.
fn fw_lldp_check(c: &Ctx, i: &InterfaceRoce) -> Check {
    match &i.fw_lldp_agent {
        Observed::Unsupported(r) => {
            c.make("fw-lldp-agent", "off", &format!("n/a: {r}"), CheckResult::NotApplicable, String::new())
        }
        o => c.observed(
            "fw-lldp-agent",
            "off",
            o,
            |b| onoff(*b).into(),
            |&b| !b,
            || remediation(c.iface, &Remedy::FwLldpAgent(false)),
        ),
    }
}

/// Whether the settings that exist work together.
pub fn chain_checks(p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let c = Ctx { iface: &i.netdev };
    let mut out = chain_tos_checks(&c, p, i);
    out.push(chain_cnp_check(&c, p, i));
    out.push(chain_pause_check(&c, i));
    out.push(chain_mtu_check(&c, p, i));
    out
}

/// `chain-tos-pfc`, `chain-tos-ecn`.
fn chain_tos_checks(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Vec<Check> {
    let mut out = Vec::new();
    // ToS → DSCP → priority: prefer the node's rdma_cm ToS; fall back to the profile's.
    let tos = i.tos.value().copied().or(p.rdma_cm.as_ref().and_then(|cm| cm.tos));
    match tos {
        // A PCP fabric classifies by the VLAN priority: the ToS carries nothing.
        _ if p.trust == Some(TrustMode::Pcp) => {
            for (name, what) in
                [("chain-tos-pfc", "ToS priority lossless"), ("chain-tos-ecn", "ToS priority has ECN")]
            {
                out.push(c.make(
                    name,
                    what,
                    "trust pcp: priority from the VLAN PCP",
                    CheckResult::NotApplicable,
                    String::new(),
                ));
            }
        }
        None => {
            out.push(c.make(
                "chain-tos-pfc",
                "ToS priority lossless",
                "no ToS known",
                CheckResult::NotApplicable,
                String::new(),
            ));
            out.push(c.make(
                "chain-tos-ecn",
                "ToS priority has ECN",
                "no ToS known",
                CheckResult::NotApplicable,
                String::new(),
            ));
        }
        Some(tos) => {
            let dscp = tos >> 2;
            match tos_priority(i, dscp) {
                Err(result) => {
                    let (r, why) = result;
                    out.push(c.make("chain-tos-pfc", "ToS priority lossless", &why, r, String::new()));
                    out.push(c.make("chain-tos-ecn", "ToS priority has ECN", &why, r, String::new()));
                }
                Ok((prio, via)) => {
                    let path = format!("tos {tos} → dscp {dscp} → prio {prio}{via}");
                    let chain = Chain { p, i, dscp, prio };
                    out.push(chain_check(c, &chain, &path, ChainSetting::pfc(i)));
                    out.push(chain_check(c, &chain, &path, ChainSetting::ecn(i)));
                }
            }
        }
    }
    out
}

/// `chain-cnp-not-lossless`.
fn chain_cnp_check(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Check {
    // CNPs must not use the lossless priority: a paused CNP cannot slow the sender.
    let cnp_prio = match &i.cnp {
        Observed::Value(v) => Some(v.priority),
        _ => None,
    };
    match (cnp_prio, &i.pfc) {
        (Some(cp), Observed::Value(pfc)) => {
            let lossless = pfc.enabled_priorities();
            let ok = !lossless.contains(&cp);
            let fix = if ok {
                String::new()
            } else {
                let free = p
                    .cnp
                    .map(|c| c.priority)
                    .filter(|x| !lossless.contains(x))
                    .or_else(|| (0..8).rev().find(|x| !lossless.contains(x)));
                free.map(|f| remediation(&i.netdev, &Remedy::CnpPriority(f))).unwrap_or_default()
            };
            c.make(
                "chain-cnp-not-lossless",
                &format!("cnp prio not in pfc {}", prio_str(&lossless)),
                &format!("cnp prio {cp}"),
                if ok { CheckResult::Pass } else { CheckResult::Fail },
                fix,
            )
        }
        (_, Observed::Value(_)) => {
            let r = if i.cnp.is_unsupported() { CheckResult::Unsupported } else { CheckResult::Unknown };
            c.make("chain-cnp-not-lossless", "cnp prio not lossless", &reason_label(&i.cnp), r, String::new())
        }
        _ => {
            let r = if i.pfc.is_unsupported() { CheckResult::Unsupported } else { CheckResult::Unknown };
            c.make("chain-cnp-not-lossless", "cnp prio not lossless", &reason_label(&i.pfc), r, String::new())
        }
    }
}

/// `chain-global-pause-pfc`.
fn chain_pause_check(c: &Ctx, i: &InterfaceRoce) -> Check {
    // 802.3x pause pauses every priority and defeats PFC; the two must not be on together.
    match (&i.pfc, &i.global_pause) {
        (Observed::Value(pfc), Observed::Value(gp)) => {
            let pfc_on = !pfc.enabled_priorities().is_empty();
            let bad = pfc_on && *gp;
            c.make(
                "chain-global-pause-pfc",
                "global pause off when pfc on",
                &format!("pfc {}, global pause {}", prio_str(&pfc.enabled_priorities()), onoff(*gp)),
                if bad { CheckResult::Fail } else { CheckResult::Pass },
                if bad { remediation(&i.netdev, &Remedy::GlobalPause(false)) } else { String::new() },
            )
        }
        (a, b) => {
            let unsupported = a.is_unsupported() || b.is_unsupported();
            let r = if unsupported { CheckResult::Unsupported } else { CheckResult::Unknown };
            let why = if a.is_value() { reason_label(b) } else { reason_label(a) };
            c.make("chain-global-pause-pfc", "global pause off when pfc on", &why, r, String::new())
        }
    }
}

/// `chain-active-mtu`.
fn chain_mtu_check(c: &Ctx, p: &RoceProfileSpec, i: &InterfaceRoce) -> Check {
    // RoCE active MTU 4096 needs netdev MTU ≥ 4096 + 96 (iboe_get_mtu(), include/rdma/ib_addr.h).
    let need = min_netdev_mtu_for(WANTED_ACTIVE_MTU);
    let fix_mtu = p.min_mtu.unwrap_or(need).max(need);
    c.observed(
        "chain-active-mtu",
        &format!("active mtu {WANTED_ACTIVE_MTU} (netdev mtu >= {need})"),
        &i.mtu,
        |&m| match roce_active_mtu(m) {
            Some(a) => format!("netdev mtu {m} → active mtu {a}"),
            None => format!("netdev mtu {m} → no RoCE MTU"),
        },
        |&m| roce_active_mtu(m) == Some(WANTED_ACTIVE_MTU),
        || remediation(&i.netdev, &Remedy::Mtu(fix_mtu)),
    )
}

/// Priority a DSCP lands on under the observed trust and APP table, with a note on how.
#[allow(clippy::type_complexity)]
fn tos_priority(i: &InterfaceRoce, dscp: u8) -> Result<(u8, String), (CheckResult, String)> {
    match &i.trust {
        Observed::Value(Trust::Pcp) => {
            return Err((
                CheckResult::Fail,
                format!("trust pcp: dscp {dscp} ignored, RoCE traffic uses the VLAN PCP or priority 0"),
            ))
        }
        Observed::Value(Trust::Dscp) => {}
        o => return Err((result_of(o), format!("trust {}", reason_label(o)))),
    }
    match &i.dscp_to_priority {
        Observed::Value(m) => match m.get(&dscp) {
            Some(&p) => Ok((p, String::new())),
            // Unmapped DSCP values go to priority 0 (dcbnl: no APP entry → default priority).
            None => Ok((0, format!(" (dscp {dscp} unmapped → default prio 0)"))),
        },
        o => Err((result_of(o), format!("dscp map {}", reason_label(o)))),
    }
}

/// Where RoCE traffic lands: DSCP `dscp` (from the rdma_cm ToS) on priority `prio`.
struct Chain<'a> {
    p: &'a RoceProfileSpec,
    i: &'a InterfaceRoce,
    dscp: u8,
    prio: u8,
}

impl Chain<'_> {
    /// The priority this DSCP should land on: the profile's own map entry for it,
    /// else the profile's (or the port's) first lossless priority.
    fn intended(&self) -> Option<u8> {
        let mapped = self.p.dscp_to_priority.iter().find(|m| m.dscp == self.dscp).map(|m| m.priority);
        let lossless = self.p.pfc.as_ref().and_then(|x| sorted(&x.priorities).first().copied());
        let observed = self.i.pfc.value().and_then(|x| x.enabled_priorities().first().copied());
        mapped.or(lossless).or(observed)
    }

    /// The fixes for traffic that lands on the wrong priority, or `None` when it
    /// lands where it should (then the priority itself needs PFC/ECN).
    ///
    /// DSCP 0 is what unmarked traffic carries: making it lossless would pause
    /// every flow on the port, so the fix is the ToS (and RoCE v2, since RoCE v1
    /// frames carry no IP header and so no DSCP), never the map.
    fn steering_fix(&self) -> Option<String> {
        let iface = &self.i.netdev;
        let dev = self.i.rdma_dev.clone().unwrap_or_else(|| "<rdma-dev>".into());
        let v1 = self.i.roce_mode.value().is_some_and(|m| m == RoceMode::V1.configfs());
        let mut fixes = Vec::new();
        if v1 {
            fixes.push(remediation(iface, &Remedy::RoceMode { rdma_dev: dev.clone(), port: 1, v2: true }));
        }
        if self.dscp == 0 {
            if let Some(tos) = self.lossless_tos() {
                fixes.push(remediation(iface, &Remedy::Tos { rdma_dev: dev, port: 1, tos }));
            }
            return Some(fixes.join(" && "));
        }
        match self.intended() {
            Some(want) if want != self.prio => {
                fixes.push(remediation(iface, &Remedy::DscpAdd(BTreeMap::from([(self.dscp, want)]))));
                Some(fixes.join(" && "))
            }
            // Unmapped traffic falls to priority 0 with all unmarked traffic; with
            // no lossless priority known there is no safe target.
            None if self.prio == 0 => Some(fixes.join(" && ")),
            _ if v1 => Some(fixes.join(" && ")),
            _ => None,
        }
    }

    /// A ToS whose DSCP lands on a lossless priority: the profile's, else the first
    /// DSCP the map (profile's, else the port's) sends to the intended lossless
    /// priority, with ECT(0) set as RoCE senders do (`tos = dscp << 2 | 2`).
    fn lossless_tos(&self) -> Option<u8> {
        if let Some(t) = self.p.rdma_cm.as_ref().and_then(|cm| cm.tos).filter(|t| t >> 2 != 0) {
            return Some(t);
        }
        let lossless = self
            .p
            .pfc
            .as_ref()
            .and_then(|x| sorted(&x.priorities).first().copied())
            .or_else(|| self.i.pfc.value().and_then(|x| x.enabled_priorities().first().copied()))?;
        let profile_map = self.p.dscp_to_priority.iter().map(|m| (m.dscp, m.priority));
        let port_map = self.i.dscp_to_priority.value().into_iter().flatten().map(|(d, p)| (*d, *p));
        profile_map.chain(port_map).find(|&(d, p)| d != 0 && p == lossless).map(|(d, _)| d << 2 | 2)
    }
}

/// What `chain-tos-pfc` and `chain-tos-ecn` differ in: the per-priority setting
/// the traffic's priority needs, and how to turn it on there. Both pass when
/// the setting is on for that priority (and the DSCP is not 0); both fix
/// traffic on the wrong priority by its steering first.
struct ChainSetting {
    name: &'static str,
    expected: &'static str,
    /// Names the setting in `actual` (`…, pfc 3,4`).
    word: &'static str,
    /// The priorities the setting is on for, as read.
    on: Observed<Vec<u8>>,
    /// The fix when the traffic lands where it should: `(chain, priorities on now)`.
    enable: fn(&Chain, &[u8]) -> String,
}

impl ChainSetting {
    fn pfc(i: &InterfaceRoce) -> Self {
        ChainSetting {
            name: "chain-tos-pfc",
            expected: "ToS priority lossless",
            word: "pfc",
            on: i.pfc.as_ref().map(|p| p.enabled_priorities()),
            // The same command as the `pfc` check when the profile names the set.
            enable: |ch, on| {
                let want = match &ch.p.pfc {
                    Some(x) if x.priorities.contains(&ch.prio) => sorted(&x.priorities),
                    _ => sorted(&[on, &[ch.prio]].concat()),
                };
                remediation(&ch.i.netdev, &Remedy::Pfc { priorities: want })
            },
        }
    }

    fn ecn(i: &InterfaceRoce) -> Self {
        ChainSetting {
            name: "chain-tos-ecn",
            expected: "ToS priority has ECN",
            word: "ecn",
            on: i.ecn.clone(),
            enable: |ch, _| remediation(&ch.i.netdev, &Remedy::Ecn { priority: ch.prio, on: true }),
        }
    }
}

/// `chain-tos-pfc` or `chain-tos-ecn` (per `set`) for traffic along `path`.
fn chain_check(c: &Ctx, ch: &Chain, path: &str, set: ChainSetting) -> Check {
    match &set.on {
        Observed::Value(on) => {
            let ok = on.contains(&ch.prio) && ch.dscp != 0;
            // Traffic on the wrong priority: fix the steering, not the setting there.
            let fix =
                if ok { String::new() } else { ch.steering_fix().unwrap_or_else(|| (set.enable)(ch, on)) };
            let actual = format!("{path}, {} {}", set.word, prio_str(on));
            c.make(
                set.name,
                set.expected,
                &actual,
                if ok { CheckResult::Pass } else { CheckResult::Fail },
                fix,
            )
        }
        o => {
            let actual = format!("{path}, {} {}", set.word, reason_label(o));
            c.make(set.name, set.expected, &actual, result_of(o), String::new())
        }
    }
}

/// ETS: every traffic class ETS with the profile's shares, and its priority map.
fn ets_check(c: &Ctx, i: &InterfaceRoce, want: &EtsSpec) -> Check {
    let bw: [u8; 8] = std::array::from_fn(|k| want.bandwidth.get(k).copied().unwrap_or(0));
    let map: Option<[u8; 8]> =
        want.priority_to_tc.as_ref().map(|m| std::array::from_fn(|k| m.get(k).copied().unwrap_or(0)));
    let show = |bw: &[u8; 8], tsa_ets: bool, map: Option<&[u8; 8]>| {
        let mut s = format!("tc-bw {}", bw.iter().map(u8::to_string).collect::<Vec<_>>().join(","));
        if !tsa_ets {
            s.push_str(" (not all ets)");
        }
        if let Some(m) = map {
            s.push_str(&format!(" prio-tc {}", m.iter().map(u8::to_string).collect::<Vec<_>>().join(",")));
        }
        s
    };
    // IEEE_8021QAZ_TSA_ETS = 2 (include/uapi/linux/dcbnl.h).
    c.observed(
        "ets",
        &show(&bw, true, map.as_ref()),
        &i.ets,
        |e| show(&e.tc_tx_bw, e.tc_tsa.iter().all(|&t| t == 2), map.map(|_| &e.prio_tc)),
        |e| e.tc_tx_bw == bw && e.tc_tsa.iter().all(|&t| t == 2) && map.is_none_or(|m| e.prio_tc == m),
        || remediation(&i.netdev, &Remedy::Ets { bandwidth: bw, priority_to_tc: map }),
    )
}

fn dcbx_str(m: nic::roce::DcbxMode) -> &'static str {
    match m {
        nic::roce::DcbxMode::Os => "os",
        nic::roce::DcbxMode::Firmware => "firmware",
    }
}

struct Ctx<'a> {
    iface: &'a str,
}

impl Ctx<'_> {
    fn make(
        &self,
        name: &str,
        expected: &str,
        actual: &str,
        result: CheckResult,
        remediation: String,
    ) -> Check {
        Check {
            name: name.into(),
            interface: self.iface.into(),
            result,
            expected: expected.into(),
            actual: actual.into(),
            remediation: if result == CheckResult::Fail { remediation } else { String::new() },
        }
    }

    /// A check of one observed value: `Pass`/`Fail` on a value, `Unsupported`/`Unknown` otherwise.
    fn observed<T>(
        &self,
        name: &str,
        expected: &str,
        obs: &Observed<T>,
        render: impl FnOnce(&T) -> String,
        ok: impl FnOnce(&T) -> bool,
        fix: impl FnOnce() -> String,
    ) -> Check {
        match obs {
            Observed::Value(v) => {
                let pass = ok(v);
                let actual = render(v);
                if pass {
                    self.make(name, expected, &actual, CheckResult::Pass, String::new())
                } else {
                    self.make(name, expected, &actual, CheckResult::Fail, fix())
                }
            }
            o => self.make(name, expected, &reason_label(o), result_of(o), String::new()),
        }
    }
}

fn result_of<T>(o: &Observed<T>) -> CheckResult {
    match o {
        Observed::Value(_) => CheckResult::Pass,
        Observed::Unsupported(_) => CheckResult::Unsupported,
        Observed::Unknown(_) => CheckResult::Unknown,
    }
}

fn reason_label<T>(o: &Observed<T>) -> String {
    match o {
        Observed::Value(_) => "read".into(),
        Observed::Unsupported(r) => format!("unsupported: {r}"),
        Observed::Unknown(r) => format!("unknown: {r}"),
    }
}

/// The trust fix. With NVIDIA OFED's `qos/trust` file, mlx5 takes trust from that
/// file only and ignores DSCP APP entries for it: `mlnx_qos --trust`. Upstream mlx5
/// and ice trust DSCP exactly while the APP table holds DSCP entries (dcb-app(8)):
/// add the profile's map for DSCP, delete the DSCP entries for PCP.
fn trust_fix(i: &InterfaceRoce, t: TrustMode, map: &[DscpMapping]) -> String {
    let iface = &i.netdev;
    if i.trust_file {
        return remediation(iface, &Remedy::Trust(t.trust()));
    }
    match t {
        TrustMode::Dscp if !map.is_empty() => {
            remediation(iface, &Remedy::DscpAdd(map.iter().map(|m| (m.dscp, m.priority)).collect()))
        }
        TrustMode::Pcp => match i.dscp_to_priority.value().filter(|m| !m.is_empty()) {
            Some(have) => remediation(iface, &Remedy::DscpDel(have.clone())),
            None => String::new(),
        },
        t => remediation(iface, &Remedy::Trust(t.trust())),
    }
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn sorted(v: &[u8]) -> Vec<u8> {
    let s: BTreeSet<u8> = v.iter().copied().collect();
    s.into_iter().collect()
}

/// `3` or `3,4`; `none` when empty.
pub fn prio_str(v: &[u8]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

/// `26:3 48:6`; `none` when empty.
pub fn map_str(m: &BTreeMap<u8, u8>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter().map(|(d, p)| format!("{d}:{p}")).collect::<Vec<_>>().join(" ")
}

/// Counts of each result.
pub fn tally(checks: &[Check]) -> BTreeMap<CheckResult, usize> {
    let mut m = BTreeMap::new();
    for c in checks {
        *m.entry(c.result).or_insert(0) += 1;
    }
    m
}
