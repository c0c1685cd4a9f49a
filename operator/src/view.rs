//! Human tables of a node's state, shared by `agent --once --output table` and
//! `kubectl rdma status|check`.

use std::fmt::Write as _;

use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::agent::describe_interface;
use crate::crd::{CheckResult, RdmaNodeState, RdmaNodeStateStatus};

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
        "NODE {node}  profile {} ({:?})  READY {}  PASS/TOTAL {}  PFC {}  TRUST {}  ECN {}  MTU {}  ROCE {}",
        s.profile,
        s.mode,
        s.summary.ready,
        s.summary.pass_total,
        s.summary.pfc,
        s.summary.trust,
        s.summary.ecn,
        s.summary.mtu,
        s.summary.roce
    );
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
    } else if rows.is_empty() {
        let _ = writeln!(out, "  (no problems)");
    } else {
        out.push_str(&table(&["INTERFACE", "CHECK", "RESULT", "EXPECTED", "ACTUAL"], &rows));
    }
    let fails: Vec<_> =
        s.checks.iter().filter(|c| c.result == CheckResult::Fail && !c.remediation.is_empty()).collect();
    if !fails.is_empty() {
        let _ = writeln!(out, "REMEDIATION");
        for c in fails {
            let _ = writeln!(out, "  {} {}: {}", c.interface, c.name, c.remediation);
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

/// `kubectl rdma status [NODE]`: the tables of one node's (or every node's) `RdmaNodeState`.
pub async fn status(client: Client, node: Option<&str>, detail: Detail) -> Result<String, kube::Error> {
    let api: Api<RdmaNodeState> = Api::all(client);
    let mut states = match node {
        Some(n) => vec![api.get(n).await?],
        None => api.list(&ListParams::default()).await?.items,
    };
    states.sort_by_key(|s| s.name_any());
    let mut out = String::new();
    if states.is_empty() {
        out.push_str("No RdmaNodeState found: is the kube-rdma agent running?\n");
    }
    for s in &states {
        match &s.status {
            Some(st) => out.push_str(&node_table(&s.name_any(), st, detail)),
            None => {
                let _ = writeln!(out, "NODE {}  (no status yet)", s.name_any());
            }
        }
        out.push('\n');
    }
    Ok(out)
}
