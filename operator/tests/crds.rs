//! The CRDs: the committed YAML is current, validates against the Kubernetes
//! apiextensions/v1 schema (`kubernetes-validate --strict`, from PyPI), and sample
//! objects validate against the CRDs' own openAPIV3Schema (a structural check here,
//! since kubernetes-validate has no schema for custom resources).
use std::path::{Path, PathBuf};
use std::process::Command;

use kube::CustomResourceExt;
use kube_rdma_operator::check_once;
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::{crds_yaml, RdmaNodeState, RoceProfile};
use kube_rdma_operator::fixtures::{example, SimNode};
use serde_json::{json, Value};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn committed_crd_yaml_is_current() {
    let path = crate_dir().join("crds/crds.yaml");
    let committed = std::fs::read_to_string(&path).expect("operator/crds/crds.yaml exists");
    let now = crds_yaml().unwrap();
    assert!(
        committed == now,
        "{} is stale: run `cargo run -p kube-rdma-operator -- crds > operator/crds/crds.yaml`",
        path.display()
    );
}

#[test]
fn crds_have_the_documented_names_scope_and_columns() {
    let crd = serde_json::to_value(RdmaNodeState::crd()).unwrap();
    assert_eq!(crd["spec"]["group"], "kuberdma.io");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
    let cols = |c: &Value| -> Vec<String> {
        c["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(cols(&crd), ["READY", "PASS/TOTAL", "PFC", "TRUST", "ECN", "MTU", "ROCE", "AGE"]);
    assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
    let p = serde_json::to_value(RoceProfile::crd()).unwrap();
    assert_eq!(p["spec"]["scope"], "Cluster");
    assert_eq!(&cols(&p)[..4], ["MODE", "NODES", "COMPLIANT", "DRIFTED"]);
    let spec = &p["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["mode"]["enum"], json!(["Audit", "Enforce"]));
    assert_eq!(spec["pfc"]["properties"]["priorities"]["items"]["maximum"], json!(7.0));
    assert_eq!(spec["dscpToPriority"]["items"]["properties"]["dscp"]["maximum"], json!(63.0));
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn generated_crds_pass_kubernetes_validate_strict() {
    let dir = tempfile::tempdir().unwrap();
    let crds = write(dir.path(), "crds.yaml", &crds_yaml().unwrap());
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&crds)
        .output()
        .expect("kubernetes-validate runs (pip install kubernetes-validate)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("passed for resource customresourcedefinition/").count(), 2, "{text}");
    assert!(!text.contains("ERROR"), "{text}");
}

#[test]
fn an_invalid_crd_is_caught_by_kubernetes_validate() {
    // Proves the tool really checks: `versions` as a string is a type error it must reject.
    let dir = tempfile::tempdir().unwrap();
    let mut crd = serde_json::to_value(RoceProfile::crd()).unwrap();
    crd["spec"]["versions"] = json!("v1alpha1");
    let bad = write(dir.path(), "bad.yaml", &serde_yaml::to_string(&crd).unwrap());
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&bad)
        .output()
        .expect("kubernetes-validate runs");
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Validates `v` against an OpenAPI v3 structural schema as the API server would with
/// strict field validation: types, required, enum, min/max, item counts, unknown fields.
fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    if v.is_null() {
        if schema["nullable"] != json!(true) {
            errs.push(format!("{path}: null not allowed"));
        }
        return;
    }
    if let Some(e) = schema["enum"].as_array() {
        if !e.contains(v) {
            errs.push(format!("{path}: {v} not in {e:?}"));
        }
    }
    match schema["type"].as_str() {
        Some("object") => {
            let Some(o) = v.as_object() else { return errs.push(format!("{path}: not an object")) };
            let props = schema["properties"].as_object();
            for (k, x) in o {
                let p = format!("{path}.{k}");
                if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue;
                }
                match (props.and_then(|m| m.get(k)), schema.get("additionalProperties")) {
                    (Some(s), _) => validate(s, x, &p, errs),
                    (None, Some(s)) if s.is_object() => validate(s, x, &p, errs),
                    _ if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) => {}
                    _ => errs.push(format!("{p}: unknown field")),
                }
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap()) {
                    errs.push(format!("{path}: missing required {r}"));
                }
            }
        }
        Some("array") => {
            let Some(a) = v.as_array() else { return errs.push(format!("{path}: not an array")) };
            if let Some(m) = schema["maxItems"].as_u64() {
                if a.len() as u64 > m {
                    errs.push(format!("{path}: more than {m} items"));
                }
            }
            for (i, x) in a.iter().enumerate() {
                validate(&schema["items"], x, &format!("{path}[{i}]"), errs);
            }
        }
        Some("integer") => {
            let Some(n) = v.as_i64().map(|n| n as f64).or(v.as_u64().map(|n| n as f64)) else {
                return errs.push(format!("{path}: not an integer"));
            };
            if schema["minimum"].as_f64().is_some_and(|m| n < m)
                || schema["maximum"].as_f64().is_some_and(|m| n > m)
            {
                errs.push(format!("{path}: {n} out of range"));
            }
        }
        Some("string") if !v.is_string() => errs.push(format!("{path}: not a string")),
        Some("boolean") if !v.is_boolean() => errs.push(format!("{path}: not a boolean")),
        _ => {}
    }
}

fn schema_of(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    serde_json::to_value(crd).unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn errors(schema: &Value, obj: &Value) -> Vec<String> {
    let mut e = Vec::new();
    validate(schema, obj, "", &mut e);
    e
}

#[test]
fn sample_profiles_and_a_real_node_state_validate_against_the_crd_schemas() {
    let ps = schema_of(&RoceProfile::crd());
    let dir = crate_dir().join("crds/samples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let v: Value = serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(errors(&ps, &v), Vec::<String>::new(), "{}", p.display());
        // And the Rust type reads it.
        kube_rdma_operator::load_profile(&p).unwrap();
        n += 1;
    }
    assert!(n >= 2);
    assert_eq!(errors(&ps, &serde_json::to_value(default_profile()).unwrap()), Vec::<String>::new());

    // A node state as the agent writes it, from a simulated node with problems.
    let mut d = example("e810-xxv");
    d.adapters[0].pfs[0].mtu = 1500;
    let node = SimNode::new(&d);
    let state = check_once(&node.source, &default_profile());
    let ns = schema_of(&RdmaNodeState::crd());
    assert_eq!(errors(&ns, &serde_json::to_value(&state).unwrap()), Vec::<String>::new());
}

#[test]
fn out_of_range_and_unknown_values_are_rejected_by_the_schema() {
    let ps = schema_of(&RoceProfile::crd());
    let base = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": "x"}, "spec": {}});
    let bad = [
        (json!({"pfc": {"priorities": [8]}}), "priorities[0]: 8 out of range"),
        (json!({"dscpToPriority": [{"dscp": 64, "priority": 3}]}), "dscp: 64 out of range"),
        (json!({"cnp": {"dscp": 48, "priority": 9}}), "priority: 9 out of range"),
        (json!({"mode": "Sometimes"}), "not in"),
        (json!({"pfcPriorities": [3]}), "unknown field"),
        (json!({"rdmaCm": {"roceMode": "v3"}}), "not in"),
        (json!({"pfc": {"priorities": [0, 1, 2, 3, 4, 5, 6, 7, 0]}}), "more than 8 items"),
    ];
    for (spec, want) in bad {
        let mut o = base.clone();
        o["spec"] = spec.clone();
        let e = errors(&ps, &o);
        assert!(e.iter().any(|x| x.contains(want)), "{spec}: {e:?}");
    }
}
