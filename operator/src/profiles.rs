//! Which `RoceProfile` applies to a node, and profiles read one by one so that
//! one object this version cannot decode (a bad object, an enum value from a newer
//! CRD) is skipped and reported by name instead of failing the whole list.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};

use crate::checks;
use crate::crd::{Mode, RoceProfile};

/// The API resource of `RoceProfile`, for dynamic (per-object decoded) watches.
pub fn profile_resource() -> ApiResource {
    ApiResource::erase::<RoceProfile>(&())
}

/// A profile that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadProfile {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`, for Events about it.
    pub uid: Option<String>,
    /// `metadata.generation` (a new generation is reported again).
    pub generation: Option<i64>,
    /// What is wrong, with the field path.
    pub error: String,
}

/// Decodes one profile (its spec; the status is left out), naming the field that failed.
pub fn decode(obj: &DynamicObject) -> Result<RoceProfile, BadProfile> {
    let bad = |error: String| BadProfile {
        name: obj.name_any(),
        uid: obj.uid(),
        generation: obj.meta().generation,
        error,
    };
    let mut v = serde_json::to_value(obj).map_err(|e| bad(e.to_string()))?;
    // The status is the controller's report (every drifted node's name): not what
    // the profile asks for, and rewritten often. Users of a decoded profile read the spec.
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    crate::validate::from_value(v).map_err(|e| bad(e.to_string()))
}

/// Every profile by name: decoded, or why not.
pub type ProfileSet = BTreeMap<String, Result<RoceProfile, BadProfile>>;

/// Which profile applies to a node, and which others select it too.
///
/// The winner rule (docs/architecture.md, "Which RoceProfile applies to a node"):
/// a profile whose `nodeSelector` contains every other matching profile's selector
/// and more (a strict superset: `{rack: a, gpu: yes}` over `{gpu: yes}` over `{}`)
/// is the most specific and applies, in its own mode. Otherwise the match is a tie
/// (`ambiguous`): the node is checked against the first (by name) of the most
/// specific ones, in `Audit` only, so no profile is enforced there. A name never
/// decides which policy writes to a node: two conflicting policies enforced by
/// accident are worse than none, and the controller reports the overlap on every
/// profile involved (condition `Overlapping`, an Event).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution<'a> {
    /// The profile the node is checked against (`None`: none matches, the built-in default).
    pub chosen: Option<&'a RoceProfile>,
    /// Every matching profile, by name (the chosen one included).
    pub matching: Vec<&'a RoceProfile>,
    /// Several match and none is more specific than all others.
    pub ambiguous: bool,
}

impl Resolution<'_> {
    /// Names of every matching profile, sorted.
    pub fn names(&self) -> Vec<String> {
        self.matching.iter().map(|p| p.name_any()).collect()
    }

    /// The profile to check the node against: the chosen one, in `Audit` mode when
    /// the match is ambiguous; [`checks::default_profile`] when none matches.
    pub fn profile(&self) -> RoceProfile {
        let mut p = self.chosen.map(|p| (*p).clone()).unwrap_or_else(checks::default_profile);
        if self.ambiguous {
            p.spec.mode = Mode::Audit;
        }
        p
    }
}

/// `a` is less specific than `b`: every label of `a` is in `b` with the same value
/// and `b` has more, so `b` selects some of `a`'s nodes and never one `a` does not.
fn less_specific(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    a.len() < b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// The winner rule of [`Resolution`] for a node with `labels`.
pub fn resolve<'a>(
    profiles: impl IntoIterator<Item = &'a RoceProfile>,
    labels: &BTreeMap<String, String>,
) -> Resolution<'a> {
    let mut matching: Vec<&RoceProfile> =
        profiles.into_iter().filter(|p| selector_matches(&p.spec.node_selector, labels)).collect();
    matching.sort_by_key(|p| p.name_any());
    // The most specific ones: no other matching selector contains theirs and more.
    let maximal: Vec<&RoceProfile> = matching
        .iter()
        .copied()
        .filter(|p| !matching.iter().any(|q| less_specific(&p.spec.node_selector, &q.spec.node_selector)))
        .collect();
    let ambiguous = maximal.len() > 1;
    Resolution { chosen: maximal.first().copied(), matching, ambiguous }
}

/// The profile a node is checked against ([`Resolution::profile`] of [`resolve`]).
pub fn select_profile<'a>(
    profiles: impl IntoIterator<Item = &'a RoceProfile>,
    labels: &BTreeMap<String, String>,
) -> RoceProfile {
    resolve(profiles, labels).profile()
}

/// Every selector label must be present with the same value.
pub fn selector_matches(sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RoceProfileSpec;

    fn profile(name: &str, sel: &[(&str, &str)], mode: Mode) -> RoceProfile {
        let node_selector = sel.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let spec: RoceProfileSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        RoceProfile::new(name, RoceProfileSpec { node_selector, mode, ..spec })
    }

    fn labels(l: &[(&str, &str)]) -> BTreeMap<String, String> {
        l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_more_specific_selector_wins_over_an_empty_one_named_to_sort_first() {
        let ps =
            [profile("aaa-takeover", &[], Mode::Enforce), profile("good", &[("gpu", "yes")], Mode::Enforce)];
        let r = resolve(&ps, &labels(&[("gpu", "yes"), ("rack", "a")]));
        assert_eq!(r.chosen.map(|p| p.name_any()).as_deref(), Some("good"));
        assert!(!r.ambiguous);
        assert_eq!(r.names(), ["aaa-takeover", "good"]);
        let p = r.profile();
        assert_eq!((p.name_any(), p.spec.mode), ("good".into(), Mode::Enforce), "enforced as written");
        // A node the specific one does not select: only the empty selector applies.
        let r = resolve(&ps, &labels(&[("rack", "a")]));
        assert_eq!((r.profile().name_any(), r.ambiguous), ("aaa-takeover".into(), false));
    }

    #[test]
    fn specificity_is_containment_of_selectors_not_their_size() {
        let ps = [
            profile("all", &[], Mode::Audit),
            profile("gpu", &[("gpu", "yes")], Mode::Audit),
            profile("gpu-rack", &[("gpu", "yes"), ("rack", "a")], Mode::Enforce),
            profile("zone", &[("zone", "1")], Mode::Audit),
        ];
        // gpu-rack contains gpu and all: it applies.
        let r = resolve(&ps[..3], &labels(&[("gpu", "yes"), ("rack", "a"), ("zone", "1")]));
        assert_eq!((r.profile().name_any(), r.ambiguous), ("gpu-rack".into(), false));
        // zone has fewer labels than gpu-rack but is not contained in it: a tie.
        let r = resolve(&ps, &labels(&[("gpu", "yes"), ("rack", "a"), ("zone", "1")]));
        assert!(r.ambiguous);
        assert_eq!(r.names(), ["all", "gpu", "gpu-rack", "zone"]);
    }

    #[test]
    fn a_tie_is_checked_in_audit_and_never_enforced_whatever_the_names() {
        for (first, second) in [("a-enforce", "b-audit"), ("z-enforce", "b-audit")] {
            let ps = [
                profile(first, &[("gpu", "yes")], Mode::Enforce),
                profile(second, &[("rack", "a")], Mode::Audit),
            ];
            let r = resolve(&ps, &labels(&[("gpu", "yes"), ("rack", "a")]));
            assert!(r.ambiguous);
            let p = r.profile();
            assert_eq!(p.spec.mode, Mode::Audit, "{first}/{second}: nothing enforced on a tie");
            assert_eq!(p.name_any(), first.min(second), "reported against the first by name");
        }
        // The same selector twice is a tie too.
        let ps =
            [profile("x", &[("gpu", "yes")], Mode::Enforce), profile("y", &[("gpu", "yes")], Mode::Enforce)];
        let r = resolve(&ps, &labels(&[("gpu", "yes")]));
        assert!(r.ambiguous);
        assert_eq!(r.profile().spec.mode, Mode::Audit);
    }

    #[test]
    fn no_matching_profile_gives_the_built_in_default_and_one_gives_itself() {
        let ps = [profile("gpu", &[("gpu", "yes")], Mode::Enforce)];
        let r = resolve(&ps, &labels(&[]));
        assert_eq!((r.chosen, r.ambiguous), (None, false));
        assert_eq!(r.profile(), checks::default_profile());
        let r = resolve(&ps, &labels(&[("gpu", "yes")]));
        assert_eq!(r.profile().spec.mode, Mode::Enforce);
    }
}
