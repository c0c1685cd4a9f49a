//! The validation a `RoceProfile` gets from the API server, for profiles that do
//! not come through one (`--profile FILE`) and for profiles from the cluster that
//! this version cannot take as they are (written against a newer CRD):
//!
//! 1. the CRD's own `openAPIV3Schema` (generated from the Rust types), checked the
//!    way the API server checks with strict field validation: types, enums,
//!    ranges, item counts, list sets, unknown fields, each error with its field path;
//! 2. the cross-field rules the CRD carries as CEL (`x-kubernetes-validations`),
//!    written once in [`RULES`] (beside the CRD types) and evaluated here by
//!    their Rust twins.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use kube::CustomResourceExt;
use serde_json::Value;

use crate::crd::{RoceProfile, RoceProfileSpec, TrustMode};

// The rules live with the CRD that carries them; their Rust twins are here.
pub use crate::crd::{
    Rule, RULES, RULE_CNP_NOT_LOSSLESS, RULE_DSCP_UNIQUE, RULE_ETS_SUM, RULE_GLOBAL_PAUSE_NOT_WITH_PFC,
    RULE_PCP_NO_DSCP_MAP,
};

/// Problems found in a profile, each `path: what`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct Invalid(pub Vec<String>);

/// `a; b; c`.
pub fn join(errs: &[String]) -> String {
    errs.join("; ")
}

/// The rules' Rust twins: the messages of the rules `spec` breaks, each prefixed with `spec`.
pub fn check_spec(spec: &RoceProfileSpec) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if let (Some(cnp), Some(pfc)) = (&spec.cnp, &spec.pfc) {
        if pfc.priorities.contains(&cnp.priority) {
            errs.push(format!("spec: {}", RULE_CNP_NOT_LOSSLESS.message));
        }
    }
    let mut seen = BTreeSet::new();
    if spec.dscp_to_priority.iter().any(|m| !seen.insert(m.dscp)) {
        errs.push(format!("spec: {}", RULE_DSCP_UNIQUE.message));
    }
    if spec.trust == Some(TrustMode::Pcp) && !spec.dscp_to_priority.is_empty() {
        errs.push(format!("spec: {}", RULE_PCP_NO_DSCP_MAP.message));
    }
    if spec.global_pause == Some(true) && spec.pfc.as_ref().is_some_and(|p| !p.priorities.is_empty()) {
        errs.push(format!("spec: {}", RULE_GLOBAL_PAUSE_NOT_WITH_PFC.message));
    }
    if let Some(ets) = &spec.ets {
        if ets.bandwidth.iter().map(|&b| u32::from(b)).sum::<u32>() != 100 {
            errs.push(format!("spec.ets: {}", RULE_ETS_SUM.message));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

static PROFILE_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    serde_json::to_value(RoceProfile::crd())
        .map(|c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
        .unwrap_or(Value::Null)
});

/// A `RoceProfile` from its JSON form, validated as the API server would (schema,
/// then the cross-field rules). `metadata` is left to the API server.
pub fn from_value(v: Value) -> Result<RoceProfile, Invalid> {
    let mut errs = Vec::new();
    let kind = (v.get("apiVersion").and_then(Value::as_str), v.get("kind").and_then(Value::as_str));
    if kind != (Some("kuberdma.io/v1alpha1"), Some("RoceProfile")) {
        errs.push(format!(
            "expected apiVersion kuberdma.io/v1alpha1 kind RoceProfile, found {} {}",
            kind.0.unwrap_or("(none)"),
            kind.1.unwrap_or("(none)")
        ));
        return Err(Invalid(errs));
    }
    schema_errors(&PROFILE_SCHEMA, &v, "", &mut errs);
    if !errs.is_empty() {
        errs.sort();
        return Err(Invalid(errs));
    }
    let p: RoceProfile = serde_json::from_value(v).map_err(|e| Invalid(vec![e.to_string()]))?;
    check_spec(&p.spec).map_err(Invalid)?;
    Ok(p)
}

fn num(v: &Value) -> Option<f64> {
    v.as_i64().map(|n| n as f64).or_else(|| v.as_u64().map(|n| n as f64)).or_else(|| v.as_f64())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks `v` against an OpenAPI v3 structural schema as the API server does with
/// strict field validation; appends `path: problem` for each problem.
pub fn schema_errors(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    let at = if path.is_empty() { "(root)" } else { path };
    if v.is_null() {
        if schema["nullable"] != Value::Bool(true) {
            errs.push(format!("{at}: must not be null"));
        }
        return;
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            let allowed: Vec<String> = e.iter().map(|x| x.to_string()).collect();
            errs.push(format!("{at}: {v} is not one of {}", allowed.join(", ")));
            return;
        }
    }
    match schema["type"].as_str() {
        Some("object") => {
            let Some(o) = v.as_object() else {
                return errs.push(format!("{at}: must be an object, not {}", json_type(v)));
            };
            let props = schema["properties"].as_object();
            for (k, x) in o {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue;
                }
                match (props.and_then(|m| m.get(k)), schema.get("additionalProperties")) {
                    (Some(s), _) => schema_errors(s, x, &p, errs),
                    (None, Some(s)) if s.is_object() => schema_errors(s, x, &p, errs),
                    _ if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) => {}
                    _ => errs.push(format!("{p}: unknown field")),
                }
            }
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !o.contains_key(r) {
                    let p = if path.is_empty() { r.to_string() } else { format!("{path}.{r}") };
                    errs.push(format!("{p}: required"));
                }
            }
        }
        Some("array") => {
            let Some(a) = v.as_array() else {
                return errs.push(format!("{at}: must be an array, not {}", json_type(v)));
            };
            if let Some(m) = schema["maxItems"].as_u64() {
                if a.len() as u64 > m {
                    errs.push(format!("{at}: {} items, at most {m} allowed", a.len()));
                }
            }
            if schema["x-kubernetes-list-type"] == "set" {
                for (i, x) in a.iter().enumerate() {
                    if a[..i].contains(x) {
                        errs.push(format!("{path}[{i}]: duplicate value {x}"));
                    }
                }
            }
            for (i, x) in a.iter().enumerate() {
                schema_errors(&schema["items"], x, &format!("{path}[{i}]"), errs);
            }
        }
        Some("integer") => {
            let Some(n) = num(v).filter(|n| n.fract() == 0.0) else {
                return errs.push(format!("{at}: must be an integer, not {v}"));
            };
            if let Some(m) = schema["minimum"].as_f64().filter(|&m| n < m) {
                errs.push(format!("{at}: {v} is below the minimum {m}"));
            }
            if let Some(m) = schema["maximum"].as_f64().filter(|&m| n > m) {
                errs.push(format!("{at}: {v} is above the maximum {m}"));
            }
        }
        Some("string") if !v.is_string() => {
            errs.push(format!("{at}: must be a string, not {}", json_type(v)));
        }
        Some("boolean") if !v.is_boolean() => {
            errs.push(format!("{at}: must be a boolean, not {}", json_type(v)));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn profile(spec: Value) -> Value {
        json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn ranges_and_unknown_fields_are_reported_with_their_path() {
        let e = from_value(profile(json!({"pfc": {"priorities": [3, 8]}, "dscpToPriority": [{"dscp": 64, "priority": 3}], "pfcPriorities": [3]}))).unwrap_err();
        assert_eq!(
            e.0,
            [
                "spec.dscpToPriority[0].dscp: 64 is above the maximum 63",
                "spec.pfc.priorities[1]: 8 is above the maximum 7",
                "spec.pfcPriorities: unknown field",
            ]
        );
    }

    #[test]
    fn cross_field_rules_give_the_cel_messages() {
        let e = from_value(profile(json!({"pfc": {"priorities": [3]}, "cnp": {"dscp": 48, "priority": 3}})))
            .unwrap_err();
        assert_eq!(e.0, [format!("spec: {}", RULE_CNP_NOT_LOSSLESS.message)]);
        let e = from_value(profile(
            json!({"dscpToPriority": [{"dscp": 26, "priority": 3}, {"dscp": 26, "priority": 4}]}),
        ))
        .unwrap_err();
        assert_eq!(e.0, [format!("spec: {}", RULE_DSCP_UNIQUE.message)]);
        let e = from_value(profile(json!({"trust": "pcp", "dscpToPriority": [{"dscp": 26, "priority": 3}]})))
            .unwrap_err();
        assert_eq!(e.0, [format!("spec: {}", RULE_PCP_NO_DSCP_MAP.message)]);
        let e = from_value(profile(json!({"globalPause": true, "pfc": {"priorities": [3]}}))).unwrap_err();
        assert_eq!(e.0, [format!("spec: {}", RULE_GLOBAL_PAUSE_NOT_WITH_PFC.message)]);
        assert!(from_value(profile(json!({"trust": "pcp", "pfc": {"priorities": [3]}}))).is_ok());
        // Pause without PFC, or PFC with pause off, is what the rule allows.
        for ok in [
            json!({"globalPause": true}),
            json!({"globalPause": true, "pfc": {"priorities": []}}),
            json!({"globalPause": false, "pfc": {"priorities": [3]}}),
        ] {
            assert!(from_value(profile(ok.clone())).is_ok(), "{ok}");
        }
    }
}
