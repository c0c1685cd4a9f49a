//! Which `RoceProfile` applies to a node, and profiles read one by one so that
//! one object this version cannot decode (a bad object, an enum value from a newer
//! CRD) is skipped and reported by name instead of failing the whole list.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};

use crate::checks;
use crate::crd::RoceProfile;

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

/// The profile for a node: the first (by name) whose `nodeSelector` matches the
/// node's labels, else [`checks::default_profile`].
pub fn select_profile<'a>(
    profiles: impl IntoIterator<Item = &'a RoceProfile>,
    labels: &BTreeMap<String, String>,
) -> RoceProfile {
    let mut matching: Vec<&RoceProfile> =
        profiles.into_iter().filter(|p| selector_matches(&p.spec.node_selector, labels)).collect();
    matching.sort_by_key(|p| p.name_any());
    if matching.len() > 1 {
        tracing::debug!(
            chosen = %matching[0].name_any(),
            others = ?matching[1..].iter().map(|p| p.name_any()).collect::<Vec<_>>(),
            "several RoceProfiles match this node; using the first by name"
        );
    }
    matching.first().map(|p| (*p).clone()).unwrap_or_else(checks::default_profile)
}

/// Every selector label must be present with the same value.
pub fn selector_matches(sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}
