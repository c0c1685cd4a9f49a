//! One agent pass as a pure function: an observed [`NodeRoce`] and a profile →
//! the `RdmaNodeState` status (interfaces, checks, summary, conditions and the
//! fingerprint that tells whether anything changed).

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nic::roce::{InterfaceRoce, NodeRoce, Observed};

use crate::checks::{check_node, interface_selected, map_str, prio_str};
use crate::crd::{
    Check, CheckResult, Condition, DscpMapping, InterfaceState, NetnsModeState, RdmaNodeStateStatus,
    RoceProfile, Summary, Unavailable,
};

/// One agent pass, without the API server: checks of `node` against `profile`, the
/// summary, conditions and the fingerprint. `observedAt` and condition times are left
/// for the caller, so equal inputs give equal outputs.
pub fn evaluate(profile: &RoceProfile, node: &NodeRoce) -> RdmaNodeStateStatus {
    let spec = &profile.spec;
    let checks = check_node(spec, node);
    let interfaces: Vec<InterfaceState> = node
        .interfaces
        .iter()
        .filter(|i| interface_selected(spec.interface_selector.as_ref(), i))
        .map(interface_state)
        .collect();
    let summary = summarize(&interfaces, &checks);
    let conditions = conditions(&checks);
    let mut status = RdmaNodeStateStatus {
        observed_at: None,
        last_heartbeat_time: None,
        netns_mode: netns_mode(&node.rdma_netns_mode),
        fingerprint: String::new(),
        profile: profile.name_any(),
        mode: spec.mode,
        summary,
        interfaces,
        checks,
        conditions,
        enforcement: Vec::new(),
    };
    status.fingerprint = fingerprint(&status);
    status
}

/// The RDMA subsystem's netns mode as the status reports it.
pub fn netns_mode(m: &Observed<nic::roce::NetnsMode>) -> NetnsModeState {
    match m {
        Observed::Value(nic::roce::NetnsMode::Exclusive) => NetnsModeState::Exclusive,
        Observed::Value(nic::roce::NetnsMode::Shared) => NetnsModeState::Shared,
        _ => NetnsModeState::Unknown,
    }
}

/// FNV-1a 64 of everything but time and the fingerprint itself: stable across
/// processes and Rust versions (unlike `DefaultHasher`).
pub fn fingerprint(status: &RdmaNodeStateStatus) -> String {
    let mut s = status.clone();
    s.observed_at = None;
    s.last_heartbeat_time = None;
    s.fingerprint.clear();
    for c in &mut s.conditions {
        c.last_transition_time = None;
    }
    format!("{:016x}", fnv1a(&serde_json::to_vec(&s).unwrap_or_default()))
}

/// FNV-1a, 64 bits: a stable hash for names and fingerprints.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The CRD view of one observed interface (counters stay in metrics, so the status
/// changes only when a setting does).
pub fn interface_state(i: &InterfaceRoce) -> InterfaceState {
    let mut un = Vec::new();
    fn take<T: Clone>(un: &mut Vec<Unavailable>, field: &str, o: &Observed<T>) -> Option<T> {
        match o {
            Observed::Value(v) => Some(v.clone()),
            Observed::Unsupported(r) => {
                un.push(Unavailable {
                    field: field.into(),
                    state: CheckResult::Unsupported,
                    reason: r.clone(),
                });
                None
            }
            Observed::Unknown(r) => {
                un.push(Unavailable { field: field.into(), state: CheckResult::Unknown, reason: r.clone() });
                None
            }
        }
    }
    let dcbx = take(&mut un, "dcbx", &i.dcbx).map(|d| match d {
        nic::roce::DcbxMode::Os => "os".to_string(),
        nic::roce::DcbxMode::Firmware => "firmware".to_string(),
    });
    let dscp = take(&mut un, "dscpToPriority", &i.dscp_to_priority)
        .map(|m| m.into_iter().map(|(dscp, priority)| DscpMapping { dscp, priority }).collect());
    let cnp = take(&mut un, "cnp", &i.cnp);
    let ets = take(&mut un, "ets", &i.ets);
    InterfaceState {
        name: i.netdev.clone(),
        pci: i.pci.map(|p| p.to_string()),
        driver: i.driver.clone(),
        rdma_device: i.rdma_dev.clone(),
        rdma_protocol: take(&mut un, "rdmaProtocol", &i.rdma_protocol).map(|p| p.as_str().to_string()),
        speed_mbps: take(&mut un, "speedMbps", &i.speed_mbps),
        fec: take(&mut un, "fec", &i.fec),
        mtu: take(&mut un, "mtu", &i.mtu),
        active_mtu: take(&mut un, "activeMtu", &i.active_mtu),
        operstate: take(&mut un, "operstate", &i.operstate),
        dcbx,
        trust: take(&mut un, "trust", &i.trust).map(|t| t.as_str().to_string()),
        dscp_to_priority: dscp,
        pfc_priorities: take(&mut un, "pfcPriorities", &i.pfc).map(|p| p.enabled_priorities()),
        ets_bandwidth: ets.as_ref().map(|e| e.tc_tx_bw.to_vec()),
        ets_priority_to_tc: ets.as_ref().map(|e| e.prio_tc.to_vec()),
        global_pause: take(&mut un, "globalPause", &i.global_pause),
        ecn_priorities: take(&mut un, "ecnPriorities", &i.ecn),
        cnp_dscp: cnp.map(|c| c.dscp),
        cnp_priority: cnp.map(|c| c.priority),
        roce_mode: take(&mut un, "roceMode", &i.roce_mode),
        tos: take(&mut un, "tos", &i.tos),
        gid_index: take(&mut un, "gidIndex", &i.gid_index),
        port_state: take(&mut un, "portState", &i.port_state),
        num_vfs: take(&mut un, "numVfs", &i.num_vfs),
        total_vfs: take(&mut un, "totalVfs", &i.total_vfs),
        fw_lldp_agent: match &i.fw_lldp_agent {
            // Not an E810: nothing to report, and not a problem.
            Observed::Unsupported(_) => None,
            o => take(&mut un, "fwLldpAgent", o),
        },
        unavailable: un,
    }
}

fn joined<T>(
    ifs: &[InterfaceState],
    f: impl Fn(&InterfaceState) -> Option<T>,
    show: impl Fn(T) -> String,
) -> String {
    let vals: BTreeSet<String> = ifs.iter().map(|i| f(i).map(&show).unwrap_or_else(|| "?".into())).collect();
    if vals.is_empty() {
        return "-".into();
    }
    vals.into_iter().collect::<Vec<_>>().join(",")
}

/// Printer-column summary.
pub fn summarize(ifs: &[InterfaceState], checks: &[Check]) -> Summary {
    let pass = checks.iter().filter(|c| c.result == CheckResult::Pass).count();
    let counted = checks.iter().filter(|c| c.result != CheckResult::NotApplicable).count();
    let unverified = unverified(checks);
    Summary {
        ready: if node_ready(checks) { "True" } else { "False" }.into(),
        pass_total: format!("{pass}/{counted}"),
        unverified: u32::try_from(unverified.len()).unwrap_or(u32::MAX),
        unverified_checks: unverified,
        pfc: joined(ifs, |i| i.pfc_priorities.clone(), |v| prio_str(&v)),
        trust: joined(ifs, |i| i.trust.clone(), |t| t),
        ecn: joined(ifs, |i| i.ecn_priorities.clone(), |v| prio_str(&v)),
        mtu: joined(ifs, |i| i.mtu, |m| m.to_string()),
        roce: joined(
            ifs,
            |i| i.roce_mode.clone(),
            |m| {
                if m.contains("v2") {
                    "v2".into()
                } else if m.contains("v1") {
                    "v1".into()
                } else {
                    m
                }
            },
        ),
    }
}

/// The checks that could not be read (`Unsupported`, `Unknown`), each
/// `interface/check`: a node is ready without them, but they were not verified.
pub fn unverified(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c.result.is_unverified())
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect()
}

/// Whether the node is RoCE-ready by these checks ([`nic::readiness::node_ready`]).
pub fn node_ready(checks: &[Check]) -> bool {
    nic::readiness::node_ready(checks.iter().map(|c| (c.interface.as_str(), c.result.verdict())))
}

/// RoceReady, Drifted, Degraded.
pub fn conditions(checks: &[Check]) -> Vec<Condition> {
    let failing: Vec<String> = checks
        .iter()
        .filter(|c| c.result == CheckResult::Fail)
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect();
    let unknown: Vec<String> = checks
        .iter()
        .filter(|c| c.result == CheckResult::Unknown)
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect();
    let ready = node_ready(checks);
    let unverified = unverified(checks);
    let cond = |t: &str, on: bool, reason: &str, message: String| Condition {
        type_: t.into(),
        status: if on { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: None,
    };
    vec![
        cond(
            "RoceReady",
            ready,
            if ready && unverified.is_empty() {
                "AllChecksPass"
            } else if ready {
                "ChecksUnverified"
            } else if checks.is_empty() {
                "NoRoceInterfaces"
            } else {
                "ChecksFailing"
            },
            if !ready {
                failing.join(", ")
            } else if unverified.is_empty() {
                String::new()
            } else {
                // Ready by what could be read; say what could not, so "ready" is not read as
                // "ECN verified" (docs/install.md: which driver stack enables which check).
                format!(
                    "{} check(s) unverified, not readable here: {}",
                    unverified.len(),
                    unverified.join(", ")
                )
            },
        ),
        cond(
            "Drifted",
            !failing.is_empty(),
            if failing.is_empty() { "InProfile" } else { "SettingsDrifted" },
            failing.join(", "),
        ),
        cond(
            "Degraded",
            !unknown.is_empty(),
            if unknown.is_empty() { "AllReadable" } else { "UnreadableSettings" },
            unknown.join(", "),
        ),
    ]
}

/// Keeps `lastTransitionTime` of conditions whose status did not change; stamps `now` on the others.
pub fn carry_transition_times(new: &mut [Condition], old: &[Condition], now: &str) {
    for c in new.iter_mut() {
        let prev = old.iter().find(|o| o.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status => p.last_transition_time.clone().or_else(|| Some(now.into())),
            _ => Some(now.into()),
        };
    }
}

/// Current time, RFC 3339 with seconds.
pub fn now_rfc3339() -> String {
    Timestamp::now().round(jiff_unit_second()).unwrap_or_else(|_| Timestamp::now()).to_string()
}

fn jiff_unit_second() -> k8s_openapi::jiff::Unit {
    k8s_openapi::jiff::Unit::Second
}

/// The one-line-per-interface view of observed settings (for `--once` tables).
pub fn describe_interface(i: &InterfaceState) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    format!(
        "{} ({}{}{}): speed {}{} mtu {} (active {}) trust {} map {} pfc {} ecn {} cnp {} roce {} tos {} gid {}",
        i.name,
        opt(i.driver.clone()),
        i.rdma_device.as_ref().map(|d| format!(", {d}")).unwrap_or_default(),
        i.rdma_protocol.as_ref().map(|p| format!(" {p}")).unwrap_or_default(),
        opt(i.speed_mbps.map(|s| format!("{s}Mb/s"))),
        i.fec.as_ref().map(|f| format!(" fec {f}")).unwrap_or_default(),
        opt(i.mtu.map(|m| m.to_string())),
        opt(i.active_mtu.map(|m| m.to_string())),
        opt(i.trust.clone()),
        opt(i.dscp_to_priority.as_ref().map(|m| map_str(&m.iter().map(|e| (e.dscp, e.priority)).collect()))),
        opt(i.pfc_priorities.as_ref().map(|p| prio_str(p))),
        opt(i.ecn_priorities.as_ref().map(|p| prio_str(p))),
        match (i.cnp_dscp, i.cnp_priority) {
            (Some(d), Some(p)) => format!("{d}/{p}"),
            _ => "?".into(),
        },
        opt(i.roce_mode.clone()),
        opt(i.tos.map(|t| t.to_string())),
        opt(i.gid_index.map(|g| g.to_string())),
    )
}
