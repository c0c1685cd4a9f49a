//! Nodes that more than one `RoceProfile` selects, as the controller reports them:
//! the condition `Overlapping` on every profile involved (`True` while they
//! overlap, `False` once they do not) and one Warning Event per profile each time
//! the overlap changes (other profiles or outcome; not for every node that joins),
//! naming the nodes and the other profiles. Which profile applies there is
//! [`crate::profiles::resolve`]'s rule; this module only describes the outcome.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::crd::{Condition, RoceProfile};
use crate::profiles::resolve;

/// The condition type on a profile.
pub const CONDITION: &str = "Overlapping";
/// Reason when a more specific profile decides every overlapped node.
pub const REASON_RESOLVED: &str = "MoreSpecificApplies";
/// Reason when at least one overlapped node is a tie (nothing enforced there).
pub const REASON_TIE: &str = "SelectorTie";
/// Reason when no other profile selects this profile's nodes.
pub const REASON_NONE: &str = "NoOverlap";
/// Nodes named per group in a message; the rest are counted.
const NODES_NAMED: usize = 20;

/// One node several profiles select, and the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOverlap {
    /// The node.
    pub node: String,
    /// Every profile that selects it, by name.
    pub profiles: Vec<String>,
    /// The most specific profile, which applies in its own mode; `None` on a tie.
    pub applies: Option<String>,
    /// The profile the node is checked against (on a tie: in `Audit`).
    pub checked: String,
}

/// What one profile's `Overlapping` condition says while it overlaps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProfileOverlap {
    /// [`REASON_RESOLVED`] or [`REASON_TIE`].
    pub reason: String,
    /// The other profiles and outcomes, per group of nodes, with the nodes.
    pub message: String,
    /// The same without the nodes: an Event is posted when this changes.
    pub key: String,
}

/// Every node (name, labels) that more than one of `profiles` selects.
pub fn find<'a, 'n>(
    profiles: &[&'a RoceProfile],
    nodes: impl IntoIterator<Item = (&'n str, &'n BTreeMap<String, String>)>,
) -> Vec<NodeOverlap> {
    let mut out = Vec::new();
    for (node, labels) in nodes {
        let r = resolve(profiles.iter().copied(), labels);
        if r.matching.len() < 2 {
            continue;
        }
        let chosen = r.chosen.map(|p| p.name_any()).unwrap_or_default();
        out.push(NodeOverlap {
            node: node.to_string(),
            profiles: r.names(),
            applies: (!r.ambiguous).then(|| chosen.clone()),
            checked: chosen,
        });
    }
    out
}

/// What the nodes of one group share, seen from one profile.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    others: Vec<String>,
    applies: Option<String>,
    checked: String,
}

impl Group {
    fn outcome(&self, me: &str) -> String {
        match &self.applies {
            Some(p) if p == me => "this profile applies there (its nodeSelector is the most specific)".into(),
            Some(p) => format!("{p} applies there (its nodeSelector is more specific)"),
            None => format!(
                "no nodeSelector is more specific than the others: checked against {} in Audit, \
                 no profile enforced there",
                self.checked
            ),
        }
    }
}

fn node_list(nodes: &[&str]) -> String {
    let mut s = nodes.iter().take(NODES_NAMED).copied().collect::<Vec<_>>().join(", ");
    if nodes.len() > NODES_NAMED {
        s.push_str(&format!(" and {} more", nodes.len() - NODES_NAMED));
    }
    s
}

/// Per profile that overlaps: its condition's reason and message.
pub fn per_profile(overlaps: &[NodeOverlap]) -> BTreeMap<String, ProfileOverlap> {
    let mut groups: BTreeMap<&str, BTreeMap<Group, Vec<&str>>> = BTreeMap::new();
    for o in overlaps {
        for me in &o.profiles {
            let g = Group {
                others: o.profiles.iter().filter(|p| *p != me).cloned().collect(),
                applies: o.applies.clone(),
                checked: o.checked.clone(),
            };
            groups.entry(me).or_default().entry(g).or_default().push(&o.node);
        }
    }
    groups
        .into_iter()
        .map(|(me, gs)| {
            let tie = gs.keys().any(|g| g.applies.is_none());
            let part = |g: &Group| format!("also selected by {}: {}", g.others.join(", "), g.outcome(me));
            let message = gs
                .iter()
                .map(|(g, nodes)| format!("{} {}", node_list(nodes), part(g)))
                .collect::<Vec<_>>()
                .join("; ");
            let key = gs.keys().map(part).collect::<Vec<_>>().join("; ");
            let reason = if tie { REASON_TIE } else { REASON_RESOLVED };
            (me.to_string(), ProfileOverlap { reason: reason.into(), message, key })
        })
        .collect()
}

/// The `Overlapping` condition of a profile; its transition time moves only when
/// the status does.
pub fn condition(o: Option<&ProfileOverlap>, previous: &[Condition], now: &str) -> Condition {
    let (status, reason, message) = match o {
        Some(o) => ("True", o.reason.clone(), o.message.clone()),
        None => ("False", REASON_NONE.to_string(), String::new()),
    };
    let since = previous
        .iter()
        .find(|c| c.type_ == CONDITION && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason,
        message,
        last_transition_time: Some(since),
    }
}

/// Profiles whose overlap should be announced by an Event now: those that overlap
/// with a [`ProfileOverlap::key`] other than the one last announced (`noted`). A
/// profile this process has not announced yet whose condition on the server
/// already says the same (`server`: its `Overlapping` condition there) was
/// announced before a restart and is not announced again.
pub fn to_announce(
    overlaps: &BTreeMap<String, ProfileOverlap>,
    noted: &BTreeMap<String, String>,
    server: &BTreeMap<String, Option<Condition>>,
) -> Vec<String> {
    overlaps
        .iter()
        .filter(|(name, o)| match noted.get(*name) {
            Some(k) => *k != o.key,
            None => !server
                .get(*name)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.status == "True" && c.message == o.message),
        })
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Mode, RoceProfileSpec};

    fn profile(name: &str, sel: &[(&str, &str)]) -> RoceProfile {
        let node_selector = sel.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let spec: RoceProfileSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        RoceProfile::new(name, RoceProfileSpec { node_selector, mode: Mode::Enforce, ..spec })
    }

    fn labels(l: &[(&str, &str)]) -> BTreeMap<String, String> {
        l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn nodes() -> Vec<(String, BTreeMap<String, String>)> {
        vec![
            ("n1".into(), labels(&[("gpu", "yes")])),
            ("n2".into(), labels(&[("gpu", "yes"), ("rack", "a")])),
            ("n3".into(), labels(&[])),
        ]
    }

    fn overlaps(ps: &[RoceProfile]) -> BTreeMap<String, ProfileOverlap> {
        let refs: Vec<&RoceProfile> = ps.iter().collect();
        let ns = nodes();
        per_profile(&find(&refs, ns.iter().map(|(n, l)| (n.as_str(), l))))
    }

    #[test]
    fn both_profiles_of_an_overlap_name_the_nodes_the_other_profile_and_the_winner() {
        let o = overlaps(&[profile("all", &[]), profile("gpu", &[("gpu", "yes")])]);
        assert_eq!(o.keys().collect::<Vec<_>>(), ["all", "gpu"]);
        assert_eq!(o["all"].reason, REASON_RESOLVED);
        assert_eq!(
            o["all"].message,
            "n1, n2 also selected by gpu: gpu applies there (its nodeSelector is more specific)"
        );
        assert_eq!(
            o["gpu"].message,
            "n1, n2 also selected by all: this profile applies there (its nodeSelector is the most specific)"
        );
    }

    #[test]
    fn a_tie_on_one_node_makes_the_reason_a_tie_and_says_nothing_is_enforced_there() {
        let o = overlaps(&[
            profile("all", &[]),
            profile("gpu", &[("gpu", "yes")]),
            profile("rack", &[("rack", "a")]),
        ]);
        assert_eq!(o["gpu"].reason, REASON_TIE);
        assert_eq!(
            o["gpu"].message,
            "n1 also selected by all: this profile applies there (its nodeSelector is the most specific); \
             n2 also selected by all, rack: no nodeSelector is more specific than the others: checked \
             against gpu in Audit, no profile enforced there"
        );
        assert_eq!(o["rack"].reason, REASON_TIE);
        assert!(o["all"].message.contains("gpu applies there"), "{}", o["all"].message);
    }

    #[test]
    fn profiles_that_select_disjoint_nodes_do_not_overlap() {
        let o = overlaps(&[profile("gpu", &[("gpu", "yes")]), profile("cpu", &[("gpu", "no")])]);
        assert!(o.is_empty(), "{o:?}");
        let c = condition(None, &[], "2026-12-01T00:00:00Z");
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (CONDITION, "False", REASON_NONE)
        );
    }

    #[test]
    fn a_long_node_list_names_twenty_and_counts_the_rest() {
        let refs = [profile("a", &[]), profile("b", &[])];
        let refs: Vec<&RoceProfile> = refs.iter().collect();
        let empty = BTreeMap::new();
        let names: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
        let o = per_profile(&find(&refs, names.iter().map(|n| (n.as_str(), &empty))));
        assert!(o["a"].message.starts_with("n00, n01, "), "{}", o["a"].message);
        assert!(o["a"].message.contains(", n19 and 5 more also selected by b: "), "{}", o["a"].message);
        assert_eq!(o["a"].reason, REASON_TIE);
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_holds() {
        let o = overlaps(&[profile("all", &[]), profile("gpu", &[("gpu", "yes")])]);
        let first = condition(o.get("gpu"), &[], "2026-12-01T00:00:00Z");
        assert_eq!(first.status, "True");
        let again = condition(o.get("gpu"), std::slice::from_ref(&first), "2026-12-01T00:05:00Z");
        assert_eq!(again, first);
        let gone = condition(None, &[again], "2026-12-01T00:09:00Z");
        assert_eq!(gone.last_transition_time.as_deref(), Some("2026-12-01T00:09:00Z"));
    }

    #[test]
    fn an_overlap_is_announced_once_per_change_of_profiles_not_per_node_and_not_after_a_restart() {
        let ps = [profile("all", &[]), profile("gpu", &[("gpu", "yes")])];
        let o = overlaps(&ps);
        let none = BTreeMap::new();
        assert_eq!(to_announce(&o, &BTreeMap::new(), &none), ["all", "gpu"]);
        let noted: BTreeMap<String, String> = o.iter().map(|(k, v)| (k.clone(), v.key.clone())).collect();
        assert!(to_announce(&o, &noted, &none).is_empty(), "nothing changed");
        // One more node in the same overlap: same key, no Event.
        let refs: Vec<&RoceProfile> = ps.iter().collect();
        let mut ns = nodes();
        ns.push(("n4".into(), labels(&[("gpu", "yes")])));
        let more = per_profile(&find(&refs, ns.iter().map(|(n, l)| (n.as_str(), l))));
        assert_ne!(more["gpu"].message, o["gpu"].message);
        assert!(to_announce(&more, &noted, &none).is_empty());
        // A third profile joins: both change.
        let third = overlaps(&[profile("all", &[]), profile("gpu", &[("gpu", "yes")]), profile("x", &[])]);
        assert_eq!(to_announce(&third, &noted, &none), ["all", "gpu", "x"]);
        // After a restart, a condition the server already shows is not announced again.
        let server: BTreeMap<String, Option<Condition>> =
            o.iter().map(|(k, v)| (k.clone(), Some(condition(Some(v), &[], "t")))).collect();
        assert!(to_announce(&o, &BTreeMap::new(), &server).is_empty());
    }
}
