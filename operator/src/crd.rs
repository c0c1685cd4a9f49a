//! The two custom resources, group `kuberdma.io`, version `v1alpha1`, both cluster-scoped.
//!
//! - [`RdmaNodeState`]: one per node, named after the node, written by the agent
//!   (server-side apply of its status). Observed RoCE settings per interface, the
//!   checks against the node's profile, a fingerprint and conditions.
//! - [`RoceProfile`]: the desired RoCE settings for the nodes its `nodeSelector`
//!   matches, in `Audit` or `Enforce` mode; the controller writes how many nodes
//!   match, comply and drifted.
//!
//! `kube-rdma-operator crds` prints [`crds_yaml`]; the committed copy lives at
//! `operator/crds/crds.yaml` and a test fails when it is stale.

// `#[kube(printcolumn(type_ = "string", ...))]` repeated per column trips this lint.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of both CRDs.
pub const GROUP: &str = "kuberdma.io";
/// Label the agent puts on its node.
pub const READY_LABEL: &str = "kuberdma.io/roce-ready";
/// Field manager of every write the operator makes.
pub const AGENT_MANAGER: &str = "kube-rdma-agent";
/// Field manager of the controller.
pub const CONTROLLER_MANAGER: &str = "kube-rdma-controller";

/// Desired RoCE settings for a set of nodes.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kuberdma.io",
    version = "v1alpha1",
    kind = "RoceProfile",
    plural = "roceprofiles",
    shortname = "rocep",
    status = "RoceProfileStatus",
    derive = "PartialEq",
    printcolumn(name = "MODE", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "NODES", type_ = "integer", json_path = ".status.nodesMatched"),
    printcolumn(name = "COMPLIANT", type_ = "integer", json_path = ".status.nodesCompliant"),
    printcolumn(name = "DRIFTED", type_ = "integer", json_path = ".status.nodesDrifted"),
    printcolumn(name = "STALE", type_ = "integer", json_path = ".status.nodesStale"),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": crate::validate::RULE_CNP_NOT_LOSSLESS.cel, "message": crate::validate::RULE_CNP_NOT_LOSSLESS.message},
    {"rule": crate::validate::RULE_DSCP_UNIQUE.cel, "message": crate::validate::RULE_DSCP_UNIQUE.message},
    {"rule": crate::validate::RULE_PCP_NO_DSCP_MAP.cel, "message": crate::validate::RULE_PCP_NO_DSCP_MAP.message},
]))]
pub struct RoceProfileSpec {
    /// Nodes this profile applies to: every label must match (empty: all nodes).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Interfaces (PF netdevs) checked on those nodes (absent: every RDMA-capable PF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_selector: Option<InterfaceSelector>,
    /// `Audit` reports only; `Enforce` also writes the missing settings.
    #[serde(default)]
    pub mode: Mode,
    /// What classifies packets into priorities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<TrustMode>,
    /// DSCP → priority entries that must be in the APP table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub dscp_to_priority: Vec<DscpMapping>,
    /// Priority flow control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc: Option<PfcSpec>,
    /// Link-level (802.3x) pause; must be off when PFC is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_pause: Option<bool>,
    /// ECN (DCQCN reaction/notification point) per priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<EcnSpec>,
    /// Congestion notification packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnp: Option<CnpSpec>,
    /// rdma_cm defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_cm: Option<RdmaCmSpec>,
    /// Minimum netdev MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 68, max = 65535))]
    pub min_mtu: Option<u32>,
    /// Minimum link speed in Mb/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_link_speed_mbps: Option<u32>,
    /// DCBX mode: `os` (the host's DCB settings count; what Enforce needs) or
    /// `firmware` (an LLDP agent in the NIC negotiates them). Absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcbx: Option<DcbxSpec>,
    /// ETS (bandwidth per traffic class). Absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ets: Option<EtsSpec>,
    /// Allow writes that bounce the link in `Enforce` mode: MTU, link-level pause,
    /// the E810 firmware LLDP agent, and PFC/ETS on E810 (ice resets the port for them).
    #[serde(default)]
    pub allow_link_flap: bool,
}

/// DCBX mode a profile asks for.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DcbxSpec {
    /// Host (OS) managed, IEEE: the settings the host writes are the ones used.
    Os,
    /// Managed by the NIC's firmware LLDP agent.
    Firmware,
}

impl DcbxSpec {
    /// The node model's mode.
    pub fn mode(self) -> nic::roce::DcbxMode {
        match self {
            DcbxSpec::Os => nic::roce::DcbxMode::Os,
            DcbxSpec::Firmware => nic::roce::DcbxMode::Firmware,
        }
    }

    /// As `InterfaceState.dcbx` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DcbxSpec::Os => "os",
            DcbxSpec::Firmware => "firmware",
        }
    }
}

/// ETS settings (`dcb ets`): every traffic class uses ETS with these shares.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": crate::validate::RULE_ETS_SUM.cel, "message": crate::validate::RULE_ETS_SUM.message},
]))]
pub struct EtsSpec {
    /// Transmit bandwidth of traffic classes 0..7, percent (eight values adding up to 100).
    #[schemars(length(min = 8, max = 8), inner(range(min = 0, max = 100)))]
    pub bandwidth: Vec<u8>,
    /// Traffic class of priorities 0..7 (eight values). Absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 8), inner(range(min = 0, max = 7)))]
    pub priority_to_tc: Option<Vec<u8>>,
}

/// Which PF netdevs a profile covers.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceSelector {
    /// Netdev names; a trailing `*` matches any suffix (`ens1f*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// PF drivers (`mlx5_core`, `ice`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drivers: Vec<String>,
}

/// Profile mode.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Mode {
    /// Report only.
    #[default]
    Audit,
    /// Report and fix what can be fixed without flapping the link.
    Enforce,
}

/// Trust mode.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TrustMode {
    /// 802.1p PCP bits.
    Pcp,
    /// DSCP bits (RoCE v2 fabrics).
    Dscp,
}

impl TrustMode {
    /// Lower-case name as `dcb`/`mlnx_qos` print it.
    pub fn as_str(self) -> &'static str {
        self.trust().as_str()
    }

    /// The node model's trust mode this asks for.
    pub fn trust(self) -> nic::roce::Trust {
        match self {
            TrustMode::Pcp => nic::roce::Trust::Pcp,
            TrustMode::Dscp => nic::roce::Trust::Dscp,
        }
    }
}

/// One DSCP → priority APP entry (`dcb app ... dscp-prio DSCP:PRIO`).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct DscpMapping {
    /// DSCP code point.
    #[schemars(range(min = 0, max = 63))]
    pub dscp: u8,
    /// 802.1p priority.
    #[schemars(range(min = 0, max = 7))]
    pub priority: u8,
}

/// PFC settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct PfcSpec {
    /// Priorities with PFC on; every other priority must be off.
    #[schemars(length(max = 8), inner(range(min = 0, max = 7)), extend("x-kubernetes-list-type" = "set"))]
    pub priorities: Vec<u8>,
}

/// ECN settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct EcnSpec {
    /// Priorities with ECN on (both reaction and notification point).
    #[schemars(length(max = 8), inner(range(min = 0, max = 7)), extend("x-kubernetes-list-type" = "set"))]
    pub priorities: Vec<u8>,
}

/// CNP settings.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub struct CnpSpec {
    /// DSCP of CNPs.
    #[schemars(range(min = 0, max = 63))]
    pub dscp: u8,
    /// 802.1p priority of CNPs; must not be a PFC (lossless) priority.
    #[schemars(range(min = 0, max = 7))]
    pub priority: u8,
}

/// rdma_cm defaults (configfs `rdma_cm/<dev>/ports/<p>/default_roce_{mode,tos}`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdmaCmSpec {
    /// Default RoCE mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roce_mode: Option<RoceMode>,
    /// Default ToS byte (DSCP << 2 | ECN bits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
}

/// RoCE version.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RoceMode {
    /// `IB/RoCE v1`.
    V1,
    /// `RoCE v2`.
    V2,
}

impl RoceMode {
    /// The configfs spelling.
    pub fn configfs(self) -> &'static str {
        match self {
            RoceMode::V1 => "IB/RoCE v1",
            RoceMode::V2 => "RoCE v2",
        }
    }
}

/// Written by the controller.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoceProfileStatus {
    /// Nodes the selector matches.
    pub nodes_matched: u32,
    /// Matched nodes whose checks all pass (or are not applicable/unsupported).
    pub nodes_compliant: u32,
    /// Matched nodes with at least one failing check.
    pub nodes_drifted: u32,
    /// Matched nodes without an `RdmaNodeState` yet.
    #[serde(default)]
    pub nodes_unreported: u32,
    /// Matched nodes whose agent stopped reporting (see the `Stale` condition of their state).
    #[serde(default)]
    pub nodes_stale: u32,
    /// Names of every drifted node counted in `nodesDrifted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<String>,
    /// `Valid`: whether this version of the operator can use the profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One node's observed RoCE settings and checks; the agent writes it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kuberdma.io",
    version = "v1alpha1",
    kind = "RdmaNodeState",
    plural = "rdmanodestates",
    shortname = "rns",
    status = "RdmaNodeStateStatus",
    derive = "PartialEq",
    printcolumn(name = "READY", type_ = "string", json_path = ".status.summary.ready"),
    printcolumn(
        name = "STALE",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Stale\")].status"
    ),
    printcolumn(name = "PASS/TOTAL", type_ = "string", json_path = ".status.summary.passTotal"),
    printcolumn(name = "PFC", type_ = "string", json_path = ".status.summary.pfc"),
    printcolumn(name = "TRUST", type_ = "string", json_path = ".status.summary.trust"),
    printcolumn(name = "ECN", type_ = "string", json_path = ".status.summary.ecn"),
    printcolumn(name = "MTU", type_ = "string", json_path = ".status.summary.mtu"),
    printcolumn(name = "ROCE", type_ = "string", json_path = ".status.summary.roce"),
    printcolumn(name = "NETNS", type_ = "string", json_path = ".status.netnsMode", priority = 1),
    printcolumn(name = "HEARTBEAT", type_ = "date", json_path = ".status.lastHeartbeatTime"),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct RdmaNodeStateSpec {
    /// The node this state describes (same as the object name).
    pub node_name: String,
}

/// What the agent observed and concluded.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdmaNodeStateStatus {
    /// When the checks last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<String>,
    /// When the agent last confirmed this status (RFC 3339): at every status write,
    /// and at least every 10 minutes without one. The controller marks the node
    /// `Stale` when it is older than 25 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<String>,
    /// RDMA subsystem network namespace mode (`rdma system show`): `exclusive`
    /// gives each pod its own RDMA device; `shared` shows every device everywhere.
    #[serde(default)]
    pub netns_mode: NetnsModeState,
    /// Hash of interfaces and checks (not of counters or time): changes only on real change.
    #[serde(default)]
    pub fingerprint: String,
    /// Profile the checks were made against (`default` when none matched).
    #[serde(default)]
    pub profile: String,
    /// Mode of that profile.
    #[serde(default)]
    pub mode: Mode,
    /// One-line summary for the printer columns.
    #[serde(default)]
    pub summary: Summary,
    /// PF interfaces.
    #[serde(default)]
    pub interfaces: Vec<InterfaceState>,
    /// Checks, in a stable order.
    #[serde(default)]
    pub checks: Vec<Check>,
    /// RoceReady, Drifted, Degraded (the agent's); Stale (the controller's).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// What `Enforce` mode wrote or refused, last run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enforcement: Vec<EnforceRecord>,
}

/// RDMA netns mode of a node.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetnsModeState {
    /// `ib_core netns_mode=0`: an RDMA device lives in one network namespace.
    Exclusive,
    /// `ib_core netns_mode=1` (kernel default): every namespace sees every RDMA device.
    Shared,
    /// Could not be read.
    #[default]
    Unknown,
}

impl NetnsModeState {
    /// As printed.
    pub fn as_str(self) -> &'static str {
        match self {
            NetnsModeState::Exclusive => "exclusive",
            NetnsModeState::Shared => "shared",
            NetnsModeState::Unknown => "unknown",
        }
    }
}

/// Printer-column summary; values of several interfaces are joined with `,`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `True` or `False`; `Unknown` when the controller found the agent stale.
    pub ready: String,
    /// `passed/total`.
    pub pass_total: String,
    /// PFC priorities, e.g. `3`.
    pub pfc: String,
    /// Trust mode.
    pub trust: String,
    /// ECN priorities.
    pub ecn: String,
    /// Netdev MTU.
    pub mtu: String,
    /// RoCE mode, `v2` or `v1`.
    pub roce: String,
}

/// Observed values of one PF netdev. `None` means not known; `unavailable` says why.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceState {
    /// Netdev name.
    pub name: String,
    /// PF PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    /// PF driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// RDMA device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    /// RDMA protocol of the function: `RoCEv2`, `iWARP`, `InfiniBand` or `none`
    /// (an E810 PF runs RoCEv2 or iWARP, chosen by the devlink parameters
    /// `enable_roce` / `enable_iwarp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_protocol: Option<String>,
    /// Link speed, Mb/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u32>,
    /// Active FEC mode (`ethtool --show-fec`: `rs`, `baser`, `llrs`, `off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fec: Option<String>,
    /// Netdev MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// RoCE active MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_mtu: Option<u32>,
    /// operstate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operstate: Option<String>,
    /// DCBX mode (`os` or `firmware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcbx: Option<String>,
    /// Trust mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<String>,
    /// DSCP → priority APP entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp_to_priority: Option<Vec<DscpMapping>>,
    /// Priorities with PFC on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc_priorities: Option<Vec<u8>>,
    /// ETS bandwidth per traffic class, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ets_bandwidth: Option<Vec<u8>>,
    /// ETS traffic class of each priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ets_priority_to_tc: Option<Vec<u8>>,
    /// Link-level pause on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_pause: Option<bool>,
    /// Priorities with ECN on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn_priorities: Option<Vec<u8>>,
    /// CNP DSCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnp_dscp: Option<u8>,
    /// CNP priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnp_priority: Option<u8>,
    /// rdma_cm default RoCE mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roce_mode: Option<String>,
    /// rdma_cm default ToS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// RoCE v2 GID index bound to this netdev.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_index: Option<u32>,
    /// RDMA port state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_state: Option<String>,
    /// `sriov_numvfs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_vfs: Option<u32>,
    /// `sriov_totalvfs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_vfs: Option<u32>,
    /// E810 firmware LLDP agent on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fw_lldp_agent: Option<bool>,
    /// Values that could not be read, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<Unavailable>,
}

/// A value the agent could not read.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct Unavailable {
    /// Field name as in [`InterfaceState`].
    pub field: String,
    /// `Unsupported` (the driver has no such knob) or `Unknown` (read failed).
    pub state: CheckResult,
    /// Why.
    pub reason: String,
}

/// Outcome of one check.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum CheckResult {
    /// As the profile wants.
    Pass,
    /// Not as the profile wants.
    Fail,
    /// Could not be read.
    Unknown,
    /// The driver has no such setting (e.g. ECN sysfs without NVIDIA OFED).
    Unsupported,
    /// Does not apply here (e.g. an E810 knob on mlx5, or not in the profile).
    NotApplicable,
}

impl CheckResult {
    /// Name as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckResult::Pass => "Pass",
            CheckResult::Fail => "Fail",
            CheckResult::Unknown => "Unknown",
            CheckResult::Unsupported => "Unsupported",
            CheckResult::NotApplicable => "NotApplicable",
        }
    }
}

/// One check of one interface.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// Check name, kebab-case (`pfc`, `dscp-map`, `chain-tos-pfc`, …).
    pub name: String,
    /// Netdev it is about.
    pub interface: String,
    /// Outcome.
    pub result: CheckResult,
    /// What the profile wants.
    pub expected: String,
    /// What was observed.
    pub actual: String,
    /// The exact command that fixes it (empty when passing or nothing can be done).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remediation: String,
}

/// A condition, as in `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `RoceReady`, `Drifted`, `Degraded`, `Stale` (node states); `Valid` (profiles).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// One enforce-mode write, planned or refused.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnforceRecord {
    /// Interface.
    pub interface: String,
    /// What was to be written (`pfc`, `dscp-map`, `mtu`, …).
    pub setting: String,
    /// `Applied`, `Refused` or `Failed`.
    pub outcome: String,
    /// The equivalent command, or why it was refused / failed.
    pub detail: String,
}

/// Both CRDs as one multi-document YAML (what `kube-rdma-operator crds` prints).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in [RdmaNodeState::crd(), RoceProfile::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}
