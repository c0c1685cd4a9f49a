//! Human tables of nodes' states, shared by `agent --once --output table` and
//! `kubectl rdma status|check`: one node in detail ([`node_table`]), many nodes
//! one line each ([`summary_table`]), remediation commands in the order they must run.

use std::fmt::Write as _;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::crd::{CheckResult, RdmaNodeState, RdmaNodeStateStatus};
use crate::status::describe_interface;

/// What to look at on a node where no interface was found to check (an SR-IOV
/// PF netdev or a shared-mode HCA netdev), as `discover`'s `no-devices` check says.
const NO_INTERFACE_HINTS: [&str; 4] = [
    "looked for SR-IOV physical functions and RDMA devices (infiniband/) under <sysfs>/bus/pci/devices; check that:",
    "the NIC is there and its driver bound: `lspci -nnk | grep -A3 -i -e mellanox -e E810` (mlx5_core, ice)",
    "the RDMA modules are loaded: `lsmod | grep -e mlx5_ib -e irdma -e ib_uverbs`, and `rdma link` lists devices",
    "in a container, /sys is the host's; elsewhere, KUBE_RDMA_SYSFS_ROOT names the sysfs to read (agent: --sysfs-root)",
];

/// How much of the check list to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every check.
    All,
    /// Only checks that are not `Pass` / `NotApplicable`.
    Problems,
}

/// A table of one node: header, interfaces, checks, then the remediation of failing checks.
pub fn node_table(node: &str, s: &RdmaNodeStateStatus, detail: Detail) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NODE {node}  profile {} ({:?})  READY {}  PASS/TOTAL {}  PFC {}  TRUST {}  ECN {}  MTU {}  ROCE {}  NETNS {}",
        s.profile,
        s.mode,
        shown_ready(s),
        s.summary.pass_total,
        s.summary.pfc,
        s.summary.trust,
        s.summary.ecn,
        s.summary.mtu,
        s.summary.roce,
        s.netns_mode.as_str()
    );
    if let Some(hb) = &s.last_heartbeat_time {
        let _ = write!(out, "  heartbeat {} ago", age(hb, Timestamp::now()));
        if is_marked_stale(s) {
            let _ = write!(out, "  STALE: the agent stopped reporting; this state may be out of date");
        }
        out.push('\n');
    }
    if s.summary.unverified > 0 {
        // Not a pass: the setting could not be read with this driver stack (docs/install.md).
        let _ = writeln!(
            out,
            "  UNVERIFIED {}: {} (not readable here: neither pass nor fail)",
            s.summary.unverified,
            s.summary.unverified_checks.join(", ")
        );
    }
    for i in &s.interfaces {
        let _ = writeln!(out, "  {}", describe_interface(i));
        for u in &i.unavailable {
            let _ = writeln!(out, "    {} {}: {}", u.field, u.state.as_str(), u.reason);
        }
    }
    let rows: Vec<[String; 5]> = s
        .checks
        .iter()
        .filter(|c| {
            detail == Detail::All || !matches!(c.result, CheckResult::Pass | CheckResult::NotApplicable)
        })
        .map(|c| {
            [
                c.interface.clone(),
                c.name.clone(),
                c.result.as_str().to_string(),
                c.expected.clone(),
                c.actual.clone(),
            ]
        })
        .collect();
    if s.checks.is_empty() {
        let _ = writeln!(out, "  no RDMA-capable interface found: nothing to check (RoceReady is False)");
        for hint in NO_INTERFACE_HINTS {
            let _ = writeln!(out, "    {hint}");
        }
    } else if rows.is_empty() {
        let _ = writeln!(out, "  (no problems)");
    } else {
        out.push_str(&table(&["INTERFACE", "CHECK", "RESULT", "EXPECTED", "ACTUAL"], &rows));
    }
    let fixes = remediation_order(s);
    if !fixes.is_empty() {
        let _ = writeln!(out, "REMEDIATION (in this order)");
        for (cmd, why) in fixes {
            let _ = writeln!(out, "  {cmd}    # {}", why.join(", "));
        }
    }
    if !s.enforcement.is_empty() {
        let _ = writeln!(out, "ENFORCEMENT");
        for e in &s.enforcement {
            let _ = writeln!(out, "  {} {} {}: {}", e.interface, e.setting, e.outcome, e.detail);
        }
    }
    out
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table<const N: usize>(head: &[&str; N], rows: &[[String; N]]) -> String {
    let mut w = [0usize; N];
    for (i, h) in head.iter().enumerate() {
        w[i] = h.chars().count();
    }
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == N {
                l.push_str(c);
            } else {
                let pad = w[i] - c.chars().count();
                l.push_str(c);
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(head.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// The remediation commands of failing checks in the order they must run
/// ([`nic::roce::in_execution_order`]), each once, with the checks that want it
/// (`interface/check`).
pub fn remediation_order(s: &RdmaNodeStateStatus) -> Vec<(String, Vec<String>)> {
    let fails: Vec<_> =
        s.checks.iter().filter(|c| c.result == CheckResult::Fail && !c.remediation.is_empty()).collect();
    nic::roce::in_execution_order(fails.iter().map(|c| c.remediation.as_str()))
        .into_iter()
        .map(|cmd| {
            let why = fails
                .iter()
                .filter(|c| c.remediation.split(" && ").any(|x| x.trim() == cmd))
                .map(|c| format!("{}/{}", c.interface, c.name))
                .collect();
            (cmd, why)
        })
        .collect()
}

fn is_marked_stale(s: &RdmaNodeStateStatus) -> bool {
    crate::crd::marked_stale(&s.conditions)
}

/// READY as shown: the agent's `summary.ready`, or `Unknown` while the controller
/// marks the agent stale (the controller never writes `summary.ready`, see
/// [`crate::crd`]).
pub fn shown_ready(s: &RdmaNodeStateStatus) -> &str {
    if is_marked_stale(s) {
        "Unknown"
    } else {
        &s.summary.ready
    }
}

/// `42s`, `5m`, `3h`, `2d` since the RFC 3339 time `since`; `?` when unreadable.
pub fn age(since: &str, now: Timestamp) -> String {
    let Ok(t) = since.parse::<Timestamp>() else { return "?".into() };
    let secs = now.duration_since(t).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// One node asked about: its state, or none.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReport {
    /// Node name.
    pub name: String,
    /// Its `RdmaNodeState`, if the agent published one.
    pub state: Option<RdmaNodeState>,
}

impl NodeReport {
    /// Ready: a state whose checks pass, whose agent is not stale.
    pub fn ready(&self) -> bool {
        self.state
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some_and(|st| st.summary.ready == "True" && !is_marked_stale(st))
    }
}

/// Which nodes `kubectl rdma status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every node with an `RdmaNodeState`.
    All,
    /// These nodes, by name.
    Named(Vec<String>),
    /// The Nodes whose labels match this selector (`-l`, as `kubectl get nodes -l`).
    Labels(String),
}

/// What [`fetch`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fetched {
    /// The nodes shown, sorted by name; with [`Selection::Labels`], also those
    /// without a state (`state: None`).
    pub reports: Vec<NodeReport>,
    /// Named nodes without an `RdmaNodeState` (kubectl's "not found").
    pub not_found: Vec<String>,
}

/// Why [`fetch`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The API server refused or failed a request.
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
    /// No answer within `--request-timeout`.
    #[error("{op}: no answer within {}s (--request-timeout)", after.as_secs_f64())]
    Timeout {
        /// The request.
        op: String,
        /// The timeout.
        after: std::time::Duration,
    },
}

pub(crate) async fn call<T>(
    op: String,
    timeout: Option<std::time::Duration>,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, FetchError> {
    let r = match timeout {
        Some(after) => {
            tokio::time::timeout(after, f).await.map_err(|_| FetchError::Timeout { op: op.clone(), after })?
        }
        None => f.await,
    };
    r.map_err(|source| FetchError::Api(crate::api::ApiError { op, source }))
}

/// The states `sel` asks for, each request bounded by `timeout`, sorted by name.
pub async fn fetch(
    client: Client,
    sel: &Selection,
    timeout: Option<std::time::Duration>,
) -> Result<Fetched, FetchError> {
    let api: Api<RdmaNodeState> = Api::all(client.clone());
    let mut out = Fetched::default();
    match sel {
        Selection::All => {
            let list = call("list rdmanodestates".into(), timeout, api.list(&ListParams::default())).await?;
            out.reports =
                list.items.into_iter().map(|s| NodeReport { name: s.name_any(), state: Some(s) }).collect();
        }
        Selection::Named(names) => {
            for n in names {
                match call(format!("get rdmanodestates/{n}"), timeout, api.get_opt(n)).await? {
                    Some(s) => out.reports.push(NodeReport { name: n.clone(), state: Some(s) }),
                    None => out.not_found.push(n.clone()),
                }
            }
        }
        Selection::Labels(selector) => {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
            let lp = ListParams::default().labels(selector);
            let op = format!("list nodes -l {selector}");
            let names: Vec<String> = call(op, timeout, nodes.list_metadata(&lp))
                .await?
                .items
                .iter()
                .map(|n| n.name_any())
                .collect();
            let mut states: std::collections::BTreeMap<String, RdmaNodeState> =
                call("list rdmanodestates".into(), timeout, api.list(&ListParams::default()))
                    .await?
                    .items
                    .into_iter()
                    .map(|s| (s.name_any(), s))
                    .collect();
            out.reports =
                names.into_iter().map(|n| NodeReport { state: states.remove(&n), name: n }).collect();
        }
    }
    out.reports.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One line per node: `NODE READY STALE PROFILE PASS/TOTAL FAILING HEARTBEAT`
/// (`wide` adds PFC, TRUST, ECN, MTU, ROCE, NETNS).
pub fn summary_table(reports: &[NodeReport], wide: bool, now: Timestamp) -> String {
    let mut rows: Vec<[String; 13]> = Vec::new();
    for r in reports {
        let st = r.state.as_ref().and_then(|s| s.status.as_ref());
        let dash = || "-".to_string();
        let row = match st {
            None => {
                let why = if r.state.is_some() { "no status yet" } else { "no RdmaNodeState" };
                [
                    r.name.clone(),
                    "Unknown".into(),
                    dash(),
                    dash(),
                    dash(),
                    why.into(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ]
            }
            Some(s) => {
                let failing: Vec<String> = s
                    .checks
                    .iter()
                    .filter(|c| c.result == CheckResult::Fail)
                    .map(|c| format!("{}/{}", c.interface, c.name))
                    .collect();
                [
                    r.name.clone(),
                    shown_ready(s).to_string(),
                    if is_marked_stale(s) { "True".into() } else { "False".into() },
                    s.profile.clone(),
                    s.summary.pass_total.clone(),
                    if failing.is_empty() { "-".into() } else { failing.join(",") },
                    s.last_heartbeat_time.as_deref().map(|t| age(t, now)).unwrap_or_else(dash),
                    s.summary.pfc.clone(),
                    s.summary.trust.clone(),
                    s.summary.ecn.clone(),
                    s.summary.mtu.clone(),
                    s.summary.roce.clone(),
                    s.netns_mode.as_str().into(),
                ]
            }
        };
        rows.push(row);
    }
    let head = [
        "NODE",
        "READY",
        "STALE",
        "PROFILE",
        "PASS/TOTAL",
        "FAILING",
        "HEARTBEAT",
        "PFC",
        "TRUST",
        "ECN",
        "MTU",
        "ROCE",
        "NETNS",
    ];
    if wide {
        return table(&head, &rows);
    }
    let narrow: Vec<[String; 7]> = rows.iter().map(|r| std::array::from_fn(|i| r[i].clone())).collect();
    table(&std::array::from_fn::<&str, 7, _>(|i| head[i]), &narrow)
}

/// Details of each reported node: [`node_table`], or a sentence for a node without state.
pub fn details(reports: &[NodeReport], detail: Detail) -> String {
    let mut out = String::new();
    for r in reports {
        match r.state.as_ref().map(|s| s.status.as_ref()) {
            None => {
                let _ = writeln!(
                    out,
                    "NODE {}  no RdmaNodeState: the kube-rdma agent has not reported this node (is it running there, and is the node name right?)",
                    r.name
                );
            }
            Some(None) => {
                let _ = writeln!(
                    out,
                    "NODE {}  (no status yet: the agent has not finished its first check)",
                    r.name
                );
            }
            Some(Some(st)) => out.push_str(&node_table(&r.name, st, detail)),
        }
        out.push('\n');
    }
    out
}
