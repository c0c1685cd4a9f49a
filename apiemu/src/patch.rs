//! Patch strategies and server-side apply's field sets. Pure.
//!
//! - JSON merge patch (RFC 7386): maps merge, `null` deletes, anything else
//!   (lists included) replaces.
//! - Strategic merge patch: as merge patch, lists replaced wholesale (the real
//!   server merges some lists by a per-field key; not modelled), with the
//!   `$patch: replace|delete` directive on maps honoured and other `$`
//!   directives (`$setElementOrder/…`, `$retainKeys`, `$deleteFromPrimitiveList/…`)
//!   dropped.
//! - JSON patch (RFC 6902) through `json-patch`.
//! - Server-side apply: the applied configuration is merged like a merge
//!   patch; the set of fields each manager applied is kept in
//!   `metadata.managedFields` (`FieldsV1`, lists atomic), and a field the same
//!   manager applied before but omits now is removed. Ownership conflicts
//!   between managers are not modelled (every apply behaves as `force=true`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// How a PATCH body is to be applied, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/json-patch+json`.
    Json,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// The patch kind of a `Content-Type` value (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// Applies a JSON merge patch.
pub(crate) fn merge(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

/// Applies a strategic merge patch (see the module docs for what is modelled).
pub(crate) fn strategic(doc: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *doc = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => {
            *doc = Value::Null;
            return;
        }
        Some("replace") => {
            *doc = Value::Object(strip_directives(p));
            return;
        }
        _ => {}
    }
    if !doc.is_object() {
        *doc = json!({});
    }
    let Value::Object(d) = doc else { unreachable!("made an object above") };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            d.remove(k);
            continue;
        }
        if v.is_object() {
            let slot = d.entry(k.clone()).or_insert(Value::Null);
            strategic(slot, v);
            if slot.is_null() {
                d.remove(k);
            }
        } else {
            d.insert(k.clone(), v.clone());
        }
    }
}

fn strip_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| {
            let v = match v {
                Value::Object(inner) => Value::Object(strip_directives(inner)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Applies a JSON patch (`Err` carries the failing operation's message).
pub(crate) fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| JsonPatchError::Decode(e.to_string()))?;
    json_patch::patch(doc, &ops).map_err(|e| JsonPatchError::Apply(e.to_string()))
}

/// Why a JSON patch failed: undecodable (400) or not applicable (422).
#[derive(Debug)]
pub(crate) enum JsonPatchError {
    Decode(String),
    Apply(String),
}

/// A set of field paths (`FieldsV1` without list keys): each key is a map
/// field; a leaf is a field owned as a whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSet(BTreeMap<String, FieldSet>);

/// Metadata fields the server sets or that identify the object; apply does
/// not track them (`metadata.name` etc. are not in real `managedFields` either).
const UNTRACKED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

impl FieldSet {
    /// The fields an applied configuration sets (non-empty maps are
    /// descended into; everything else, lists included, is a leaf; `null`s
    /// are not owned).
    pub(crate) fn of_config(config: &Value) -> Self {
        let mut set = BTreeMap::new();
        if let Value::Object(m) = config {
            for (k, v) in m {
                if k == "apiVersion" || k == "kind" || v.is_null() {
                    continue;
                }
                let child = if k == "metadata" {
                    let mut meta = v.clone();
                    if let Value::Object(mm) = &mut meta {
                        for key in UNTRACKED_META {
                            mm.remove(*key);
                        }
                    }
                    if meta.as_object().is_some_and(Map::is_empty) {
                        continue;
                    }
                    FieldSet::of_value(&meta)
                } else {
                    FieldSet::of_value(v)
                };
                set.insert(k.clone(), child);
            }
        }
        FieldSet(set)
    }

    fn of_value(v: &Value) -> Self {
        match v {
            Value::Object(m) if !m.is_empty() => FieldSet(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), FieldSet::of_value(v)))
                    .collect(),
            ),
            _ => FieldSet::default(),
        }
    }

    /// `FieldsV1` JSON: `{"f:spec": {"f:x": {}}}`.
    pub(crate) fn to_fields_v1(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (format!("f:{k}"), v.to_fields_v1())).collect())
    }

    /// Reads back `FieldsV1` written by [`to_fields_v1`](Self::to_fields_v1)
    /// (other key kinds, `k:`/`v:`/`i:`/`.`, are skipped).
    pub(crate) fn from_fields_v1(v: &Value) -> Self {
        let Value::Object(m) = v else { return FieldSet::default() };
        FieldSet(
            m.iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix("f:").map(|k| (k.to_string(), FieldSet::from_fields_v1(v)))
                })
                .collect(),
        )
    }

    /// Removes from `obj` every field in `self` (the manager's previous set)
    /// that `next` (its new set) no longer has, down to leaves, pruning maps
    /// that become empty.
    pub(crate) fn remove_dropped(&self, obj: &mut Value, next: &FieldSet) {
        let Value::Object(map) = obj else { return };
        for (k, old_child) in &self.0 {
            match next.0.get(k) {
                Some(new_child) => {
                    if !old_child.0.is_empty() && !new_child.0.is_empty() {
                        if let Some(v) = map.get_mut(k) {
                            old_child.remove_dropped(v, new_child);
                        }
                    }
                }
                None => {
                    if old_child.0.is_empty() {
                        map.remove(k);
                    } else if let Some(v) = map.get_mut(k) {
                        old_child.remove_dropped(v, &FieldSet::default());
                        if v.as_object().is_some_and(Map::is_empty) {
                            map.remove(k);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_select_the_strategy() {
        assert_eq!(PatchKind::from_content_type("application/merge-patch+json"), Some(PatchKind::Merge));
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml; charset=utf-8"),
            Some(PatchKind::Apply)
        );
        assert_eq!(PatchKind::from_content_type("application/json"), None);
    }

    #[test]
    fn strategic_merge_replaces_lists_and_honours_patch_directives() {
        let mut doc = json!({"spec": {"a": [1, 2], "m": {"x": 1, "y": 2}, "gone": {"z": 1}}});
        let patch = json!({"spec": {"a": [3], "m": {"$patch": "replace", "y": 5},
                                    "gone": {"$patch": "delete"}, "$setElementOrder/a": [3], "n": null}});
        strategic(&mut doc, &patch);
        assert_eq!(doc, json!({"spec": {"a": [3], "m": {"y": 5}}}));
    }

    #[test]
    fn json_patch_reports_decode_and_apply_errors_apart() {
        let mut doc = json!({"a": 1});
        json_patch(&mut doc, &json!([{"op": "replace", "path": "/a", "value": 2}])).unwrap();
        assert_eq!(doc, json!({"a": 2}));
        assert!(matches!(json_patch(&mut doc, &json!({"op": "x"})), Err(JsonPatchError::Decode(_))));
        assert!(matches!(
            json_patch(&mut doc, &json!([{"op": "test", "path": "/a", "value": 3}])),
            Err(JsonPatchError::Apply(_))
        ));
    }

    #[test]
    fn field_sets_round_trip_through_fields_v1() {
        let cfg = json!({"apiVersion": "v1", "kind": "X",
            "metadata": {"name": "n", "labels": {"a": "1"}},
            "spec": {"list": [1], "m": {"k": "v"}, "empty": {}, "null": null}});
        let set = FieldSet::of_config(&cfg);
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}},
            "f:spec": {"f:list": {}, "f:m": {"f:k": {}}, "f:empty": {}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }

    #[test]
    fn dropped_fields_are_removed_but_others_kept() {
        let old = FieldSet::of_config(
            &json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1, "y": {"z": 1}}}),
        );
        let new = FieldSet::of_config(&json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}}));
        let mut obj = json!({"metadata": {"name": "n", "labels": {"a": "1", "b": "2", "other": "3"}},
                             "spec": {"x": 1, "y": {"z": 1}, "w": 0}});
        old.remove_dropped(&mut obj, &new);
        assert_eq!(
            obj,
            json!({"metadata": {"name": "n", "labels": {"a": "1", "other": "3"}}, "spec": {"x": 1, "w": 0}})
        );
    }
}
