//! The two custom resources, group `kuberdma.io`, version `v1alpha1`, both cluster-scoped.
//!
//! - [`RdmaNodeState`]: one per node, named after the node, written by the agent
//!   (server-side apply of its status). Observed RoCE settings per interface, the
//!   checks against the node's profile, a fingerprint and conditions.
//! - [`RoceProfile`]: the desired RoCE settings for the nodes its `nodeSelector`
//!   matches, in `Audit` or `Enforce` mode; the controller writes how many nodes
//!   match, comply and drifted.
//!
//! `kube-rdma-operator crds` prints [`crds_yaml`]; its one committed copy is the
//! chart's `charts/kube-rdma/crds/crds.yaml` (`manifests/crds.yaml` is rendered from
//! it) and a test fails when it is stale.
//!
//! # Field ownership of an `RdmaNodeState` (server-side apply)
//!
//! Two field managers write a node's state. The API server records, per manager,
//! the fields its last apply set; a field one manager stops applying is removed
//! only when no other manager owns it, and an apply that changes a field another
//! manager owns is refused with 409 unless forced, which takes the field away
//! (sigs.k8s.io/structured-merge-diff v6.3.0 `merge/update.go`: `prune`,
//! `addBackOwnedItems`, the conflict set of `update`). `status.conditions` is a
//! list-map keyed by `type`, so each entry has its own owner. The decision:
//!
//! | field | owner | how |
//! |---|---|---|
//! | `metadata` (owner reference to the Node), `spec` | agent ([`AGENT_MANAGER`]) | apply of the object |
//! | all of `status` (interfaces, checks, summary incl. `summary.ready`, `observedAt`, `lastHeartbeatTime`, the `RoceReady`, `Drifted`, `Degraded` conditions) | agent | apply of the status subresource, always the whole of it ([`crate::publish::status_apply_body`]); the heartbeat applies the same configuration with a new `lastHeartbeatTime` |
//! | `status.conditions[type=Stale]` | controller ([`CONTROLLER_MANAGER`]) | apply of that one entry ([`crate::controller::stale_apply_body`]) |
//! | Node label `kuberdma.io/roce-ready` | both, on purpose | merge patch (an update, which never conflicts): the agent sets `true`/`false`, the controller `unknown` for a stale agent, the agent its value again once it reports |
//!
//! So the two managers' fields are disjoint: the controller no longer writes
//! `summary.ready` (a stale node keeps its agent's last READY and shows `STALE
//! True`; `kubectl rdma status` prints READY `Unknown` for it and the node label
//! says `unknown`), and neither apply can remove or take over the other's fields.
//! Both still apply with `force`: the status is their report, and a field someone
//! else changed by hand (`kubectl edit`) must not stop them with a 409 for ever;
//! between the two of them force never takes anything, since nothing is shared.

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

/// One cross-field rule of `RoceProfile.spec`: the CEL the API server evaluates
/// and the message both it and [`crate::validate::check_spec`] give.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// CEL expression over `self` = `spec`.
    pub cel: &'static str,
    /// Message when it is false.
    pub message: &'static str,
}

/// CNPs must not ride a lossless priority: a paused CNP cannot slow the sender.
pub const RULE_CNP_NOT_LOSSLESS: Rule = Rule {
    cel: "!has(self.cnp) || !has(self.pfc) || !(self.cnp.priority in self.pfc.priorities)",
    message: "cnp.priority must not be one of pfc.priorities: a CNP paused by PFC cannot slow the sender",
};
/// One priority per DSCP: the APP table cannot map a DSCP twice.
pub const RULE_DSCP_UNIQUE: Rule = Rule {
    cel: "!has(self.dscpToPriority) || self.dscpToPriority.all(m, self.dscpToPriority.exists_one(n, n.dscp == m.dscp))",
    message: "dscpToPriority maps the same dscp more than once",
};
/// PCP trust ignores DSCP, so a DSCP map would never be used.
pub const RULE_PCP_NO_DSCP_MAP: Rule = Rule {
    cel: "!has(self.trust) || self.trust != 'pcp' || !has(self.dscpToPriority) || size(self.dscpToPriority) == 0",
    message: "trust pcp ignores DSCP: remove dscpToPriority or use trust dscp",
};

/// Link-level (802.3x) pause stops every priority at once, so PFC's per-priority
/// pause (lossless for some classes, lossy for the rest) means nothing while it is
/// on; the field's own documentation has always said so.
pub const RULE_GLOBAL_PAUSE_NOT_WITH_PFC: Rule = Rule {
    cel: "!has(self.globalPause) || !self.globalPause || !has(self.pfc) || size(self.pfc.priorities) == 0",
    message:
        "globalPause must be false when pfc.priorities is set: link-level pause and PFC exclude each other",
};

/// ETS shares are of the whole link (rule on `spec.ets`).
pub const RULE_ETS_SUM: Rule = Rule {
    cel: "self.bandwidth.sum() == 100",
    message: "bandwidth must add up to 100 (percent of the link)",
};

/// Every cross-field rule of `spec`, in the order the CRD lists them.
pub const RULES: [Rule; 4] =
    [RULE_CNP_NOT_LOSSLESS, RULE_DSCP_UNIQUE, RULE_PCP_NO_DSCP_MAP, RULE_GLOBAL_PAUSE_NOT_WITH_PFC];

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
    {"rule": RULE_CNP_NOT_LOSSLESS.cel, "message": RULE_CNP_NOT_LOSSLESS.message},
    {"rule": RULE_DSCP_UNIQUE.cel, "message": RULE_DSCP_UNIQUE.message},
    {"rule": RULE_PCP_NO_DSCP_MAP.cel, "message": RULE_PCP_NO_DSCP_MAP.message},
    {"rule": RULE_GLOBAL_PAUSE_NOT_WITH_PFC.cel, "message": RULE_GLOBAL_PAUSE_NOT_WITH_PFC.message},
]))]
pub struct RoceProfileSpec {
    /// Nodes this profile applies to: every label must match (empty: all nodes).
    /// Where several profiles select a node, the one whose selector contains all
    /// the others' (and more) applies; on a tie, none is enforced there.
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
    /// Link-level (802.3x) pause; must be off when PFC is on (`pfc.priorities` not
    /// empty): the API server refuses `true` with PFC.
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
    {"rule": RULE_ETS_SUM.cel, "message": RULE_ETS_SUM.message},
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
    /// `Valid`: whether this version of the operator can use the profile;
    /// `Overlapping`: whether other profiles select some of its nodes, which
    /// profile applies there, and where none is enforced (a tie of selectors).
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
    /// RoceReady, Drifted, Degraded (the agent's); Stale (the controller's). A
    /// list-map keyed by `type`: each entry has its own field manager.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// What `Enforce` mode last wrote or refused under the current profile.
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
    /// `True` or `False`, the agent's verdict (see the `Stale` condition for
    /// whether the agent still reports).
    pub ready: String,
    /// `passed/total`.
    pub pass_total: String,
    /// How many checks could not be read here (`Unsupported` or `Unknown`; ECN and CNP
    /// on inbox mlx5 and on E810). They do not make the node unready, so `ready` says
    /// only that nothing read fails; these were not verified.
    #[serde(default)]
    pub unverified: u32,
    /// The checks behind `unverified`, each `interface/check`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified_checks: Vec<String>,
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
    /// Why it could not be read (the driver's error, or the file or attribute missing).
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

    /// What the result means for readiness ([`nic::readiness`]).
    pub fn verdict(self) -> nic::readiness::Verdict {
        nic::readiness::Verdict::of(self.as_str())
    }

    /// The setting could not be read, so the check says nothing either way: not a
    /// pass (`summary.unverified` counts these), and not a failure.
    pub fn is_unverified(self) -> bool {
        matches!(self, CheckResult::Unknown | CheckResult::Unsupported)
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
    /// `Pass`, `Fail`, `Unknown`, `Unsupported` or `NotApplicable`.
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
    /// `RoceReady`, `Drifted`, `Degraded`, `Stale` (node states); `Valid`, `Overlapping` (profiles).
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

/// Whether the controller marks the state `Stale` ([`nic::readiness::marked_stale`]).
pub fn marked_stale(conditions: &[Condition]) -> bool {
    nic::readiness::marked_stale(conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())))
}

/// One enforce-mode write, planned or refused.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnforceRecord {
    /// Netdev written to.
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

#[cfg(test)]
mod ownership_tests {
    //! The apply bodies of the two managers, as field sets the way the API server
    //! computes them from the CRD schema (list-maps by key, other lists atomic).
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;
    use crate::checks::default_profile;
    use crate::controller::stale_apply_body;
    use crate::fixtures::{example, SimNode};
    use crate::publish::{heartbeat_status, status_apply_body};
    use crate::status::{carry_transition_times, evaluate};

    /// Fields of `v` under `path`, following `schema` (an OpenAPI v3 schema): object
    /// properties, `x-kubernetes-list-type: map` items by their keys (`[type=Stale]`,
    /// the item itself included), any other list as one field. `apiVersion`, `kind`
    /// and `metadata.name` are not managed (k8s.io/apiserver
    /// pkg/util/managedfields/internal/stripmeta.go).
    fn field_set(v: &Value, schema: &Value, path: &str, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    if ["apiVersion", "kind", "metadata.name"].contains(&p.as_str()) {
                        continue;
                    }
                    let sub = &schema["properties"][k];
                    let sub = if sub.is_null() { &schema["additionalProperties"] } else { sub };
                    field_set(child, sub, &p, out);
                }
            }
            Value::Array(items) if schema["x-kubernetes-list-type"] == "map" => {
                let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|k| k.as_str())
                    .collect();
                for item in items {
                    let id: Vec<String> =
                        keys.iter().map(|k| format!("{k}={}", item[k].as_str().unwrap())).collect();
                    let p = format!("{path}[{}]", id.join(","));
                    out.insert(p.clone());
                    field_set(item, &schema["items"], &p, out);
                }
            }
            _ => {
                out.insert(path.to_string());
            }
        }
    }

    fn fields(body: &Value) -> BTreeSet<String> {
        let crd = serde_json::to_value(RdmaNodeState::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut out = BTreeSet::new();
        field_set(body, schema, "", &mut out);
        out
    }

    fn agent_status() -> RdmaNodeStateStatus {
        let node = SimNode::new(&example("cx6dx-dual"));
        let mut st = evaluate(&default_profile(), &node.read());
        st.observed_at = Some("2026-11-30T01:00:00Z".into());
        st.last_heartbeat_time = Some("2026-11-30T01:00:00Z".into());
        carry_transition_times(&mut st.conditions, &[], "2026-11-30T01:00:00Z");
        st
    }

    #[test]
    fn the_agent_and_the_controller_apply_disjoint_fields_of_a_node_state() {
        let agent = fields(&status_apply_body("n1", &agent_status()));
        let stale = std::time::Duration::from_secs(1500);
        for marked in [true, false] {
            let ctl = fields(&stale_apply_body("n1", marked, stale, "2026-11-30T01:30:00Z"));
            assert!(agent.is_disjoint(&ctl), "shared: {:?}", agent.intersection(&ctl).collect::<Vec<_>>());
            // The controller owns the Stale entry of the list-map and nothing else.
            assert!(ctl.iter().all(|f| f.starts_with("status.conditions[type=Stale]")), "{ctl:?}");
            assert!(
                ctl.contains("status.conditions[type=Stale]")
                    && ctl.contains("status.conditions[type=Stale].status")
            );
        }
        for f in [
            "status.summary.ready",
            "status.lastHeartbeatTime",
            "status.conditions[type=RoceReady]",
            "status.conditions[type=Drifted].status",
            "status.conditions[type=Degraded].reason",
        ] {
            assert!(agent.contains(f), "the agent owns {f}: {agent:?}");
        }
    }

    #[test]
    fn the_agent_never_applies_the_stale_condition_even_when_its_status_carries_one() {
        let mut st = agent_status();
        st.conditions.push(Condition {
            type_: "Stale".into(),
            status: "True".into(),
            reason: "NoHeartbeat".into(),
            message: String::new(),
            last_transition_time: None,
        });
        let body = status_apply_body("n1", &st);
        let types: Vec<&str> = body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["RoceReady", "Drifted", "Degraded"]);
        assert_eq!(body["metadata"]["name"], "n1");
    }

    #[test]
    fn a_heartbeat_applies_the_same_fields_as_the_last_status_apply_so_it_removes_none() {
        let last = agent_status();
        let before = status_apply_body("n1", &last);
        let after = status_apply_body("n1", &heartbeat_status(&last, "2026-11-30T01:10:00Z"));
        assert_eq!(fields(&before), fields(&after));
        let mut changed = after.clone();
        assert_eq!(changed["status"]["lastHeartbeatTime"], "2026-11-30T01:10:00Z");
        changed["status"]["lastHeartbeatTime"] = before["status"]["lastHeartbeatTime"].clone();
        assert_eq!(changed, before, "only lastHeartbeatTime differs");
    }
}
