//! The RoCE readiness rule, in one place: when a node, and each of its PFs, is
//! RoCE-ready given the results of the operator agent's checks. The agent's
//! `summary.ready`, `RoceReady` condition, node label and
//! `kuberdma_node_roce_ready` metric, the controller's drifted/compliant counts
//! and the DRA driver's `roceReady` device attribute all come from here.
//!
//! - A **check** belongs to an interface (a PF netdev) or to the whole node
//!   (interface [`NODE`], such as `rdma-netns`).
//! - Only `Fail` blocks: `Unknown`, `Unsupported` and `NotApplicable` are
//!   reported (`Degraded`, the status table) but do not make a node unready, and
//!   a result this version does not know does not either. A check that could not
//!   be read (`Unknown`, `Unsupported`: ECN, CNP and trust on inbox mlx5 or E810)
//!   is not a pass either: a ready node names them as unverified (the agent's
//!   `summary.unverified` and `RoceReady` reason `ChecksUnverified`). Blocking on
//!   them would make every node without NVIDIA OFED/DOCA unready for good, for
//!   settings the driver does not let anyone read.
//! - A **node** is ready when at least one interface was checked and no check
//!   fails (node-wide checks alone do not count: no RoCE interface is not ready).
//! - A **PF** is ready when it has at least one check, none of its checks fails
//!   and no node-wide check fails: a node-wide setting (the RDMA netns mode) is a
//!   precondition of every PF on the node.
//! - A state its agent no longer confirms ([`STALE`] condition `True`) says
//!   nothing about readiness: callers report "unknown", never "not ready".
//!
//! ```
//! use nic::readiness::{node_ready, pf_readiness, Verdict, NODE};
//! let checks = [("ens1f0np0", Verdict::Pass), ("ens1f1np1", Verdict::Fail), (NODE, Verdict::Pass)];
//! assert!(!node_ready(checks));
//! let pfs = pf_readiness(checks);
//! assert_eq!(pfs.get("ens1f0np0"), Some(&true));
//! assert_eq!(pfs.get("ens1f1np1"), Some(&false));
//! ```

use std::collections::BTreeMap;

/// The interface name of node-wide checks (a check with an empty interface
/// name counts as node-wide too: it is tied to no PF).
pub const NODE: &str = "node";

/// The condition type the controller sets on a node state whose agent stopped
/// sending heartbeats.
pub const STALE: &str = "Stale";

/// What one check's result means for readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `Pass`: the setting is as the profile wants.
    Pass,
    /// `Fail`: the one result that blocks readiness.
    Fail,
    /// `Unknown`, `Unsupported`, `NotApplicable` or a result this version does
    /// not know: shown to the user, never blocking.
    Inconclusive,
}

impl Verdict {
    /// From a check result as the `RdmaNodeState` CRD spells it (`Pass`, `Fail`, …).
    pub fn of(result: &str) -> Self {
        match result {
            "Pass" => Verdict::Pass,
            "Fail" => Verdict::Fail,
            _ => Verdict::Inconclusive,
        }
    }
}

fn node_wide(interface: &str) -> bool {
    interface.is_empty() || interface == NODE
}

/// Whether the node is RoCE-ready: at least one interface check and no failing
/// check, node-wide ones included. Takes `(interface, verdict)` per check.
pub fn node_ready<'a>(checks: impl IntoIterator<Item = (&'a str, Verdict)>) -> bool {
    let mut checked_interface = false;
    for (interface, verdict) in checks {
        if verdict == Verdict::Fail {
            return false;
        }
        checked_interface |= !node_wide(interface);
    }
    checked_interface
}

/// Readiness of each PF netdev that has a check of its own: `true` when none of
/// its checks and no node-wide check fails. PFs without a check are absent
/// (unknown is not "not ready"). Takes `(interface, verdict)` per check.
pub fn pf_readiness<'a>(checks: impl IntoIterator<Item = (&'a str, Verdict)>) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    let mut node_ok = true;
    for (interface, verdict) in checks {
        let ok = verdict != Verdict::Fail;
        if node_wide(interface) {
            node_ok &= ok;
        } else {
            *out.entry(interface.to_string()).or_insert(true) &= ok;
        }
    }
    if !node_ok {
        out.values_mut().for_each(|r| *r = false);
    }
    out
}

/// Whether the conditions, as `(type, status)` pairs, mark the state [`STALE`].
pub fn marked_stale<'a>(conditions: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    conditions.into_iter().any(|(t, s)| t == STALE && s == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use Verdict::*;

    #[test]
    fn only_fail_blocks_and_results_unknown_to_this_version_do_not() {
        assert_eq!(Verdict::of("Pass"), Pass);
        assert_eq!(Verdict::of("Fail"), Fail);
        for r in ["Unknown", "Unsupported", "NotApplicable", "SomethingNew", ""] {
            assert_eq!(Verdict::of(r), Inconclusive, "{r}");
        }
        assert!(node_ready([("ens1f0np0", Pass), ("ens1f0np0", Inconclusive)]));
        assert!(node_ready([("ens1f0np0", Inconclusive)]));
        assert!(!node_ready([("ens1f0np0", Pass), ("ens1f1np1", Fail)]));
    }

    #[test]
    fn a_node_without_a_checked_interface_is_not_ready() {
        assert!(!node_ready([]));
        assert!(!node_ready([(NODE, Pass)]));
        assert!(!node_ready([("", Pass)]));
        assert!(node_ready([(NODE, Pass), ("ens1f0np0", Pass)]));
    }

    #[test]
    fn a_failing_node_wide_check_makes_the_node_and_every_pf_unready() {
        let checks = [("ens1f0np0", Pass), ("ens1f1np1", Pass), (NODE, Fail)];
        assert!(!node_ready(checks));
        let pfs = pf_readiness(checks);
        assert_eq!(pfs, BTreeMap::from([("ens1f0np0".into(), false), ("ens1f1np1".into(), false)]));
    }

    #[test]
    fn each_pf_is_judged_by_its_own_checks_and_pfs_without_checks_are_absent() {
        let pfs = pf_readiness([
            ("ens1f0np0", Pass),
            ("ens1f0np0", Inconclusive),
            ("ens1f1np1", Pass),
            ("ens1f1np1", Fail),
            ("ens1f1np1", Pass),
            (NODE, Pass),
        ]);
        assert_eq!(pfs, BTreeMap::from([("ens1f0np0".into(), true), ("ens1f1np1".into(), false)]));
        assert!(pf_readiness([(NODE, Pass)]).is_empty());
        assert!(pf_readiness([("", Fail)]).is_empty());
    }

    #[test]
    fn node_readiness_is_every_pf_ready_and_at_least_one() {
        let cases: [&[(&str, Verdict)]; 5] = [
            &[],
            &[(NODE, Fail)],
            &[("a", Pass), ("b", Fail)],
            &[("a", Pass), (NODE, Fail)],
            &[("a", Inconclusive), ("b", Pass), (NODE, Inconclusive)],
        ];
        for c in cases {
            let pfs = pf_readiness(c.iter().copied());
            let all = !pfs.is_empty() && pfs.values().all(|r| *r);
            assert_eq!(node_ready(c.iter().copied()), all, "{c:?}");
        }
    }

    #[test]
    fn only_a_true_stale_condition_marks_a_state_stale() {
        assert!(marked_stale([("RoceReady", "True"), ("Stale", "True")]));
        assert!(!marked_stale([("Stale", "False"), ("Stale", "Unknown")]));
        assert!(!marked_stale([("RoceReady", "True")]));
    }
}
