//! The CRDs: the committed YAML (the chart's `crds/`) is current, validates against the Kubernetes
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
    // The one committed copy of the generated CRDs is the chart's (a chart ships only files
    // inside it); manifests/crds.yaml is rendered from it by scripts/render-manifests, whose
    // `--check` fails when that one is stale.
    let path = crate_dir().join("../charts/kube-rdma/crds/crds.yaml");
    let committed = std::fs::read_to_string(&path).expect("charts/kube-rdma/crds/crds.yaml exists");
    let now = crds_yaml().unwrap();
    assert!(
        committed == now,
        "{} is stale: run `cargo run -p kube-rdma-operator -- crds > charts/kube-rdma/crds/crds.yaml` \
         then `scripts/render-manifests`",
        path.display()
    );
}

#[test]
fn the_generated_crds_are_committed_once() {
    // operator/crds/ keeps the samples only: a second committed copy would drift.
    assert!(
        !crate_dir().join("crds/crds.yaml").exists(),
        "operator/crds/crds.yaml is a second copy: delete it"
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
    assert_eq!(
        cols(&crd),
        ["READY", "STALE", "PASS/TOTAL", "PFC", "TRUST", "ECN", "MTU", "ROCE", "NETNS", "HEARTBEAT", "AGE"]
    );
    let col = |name: &str| {
        crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(col("STALE")["jsonPath"], ".status.conditions[?(@.type==\"Stale\")].status");
    assert_eq!(
        (col("HEARTBEAT")["type"].as_str(), col("HEARTBEAT")["jsonPath"].as_str()),
        (Some("date"), Some(".status.lastHeartbeatTime"))
    );
    assert_eq!(col("NETNS")["priority"], 1, "wide output only");
    let status =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(
        status["conditions"]["x-kubernetes-list-type"], "map",
        "agent and controller own different conditions"
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-map-keys"], json!(["type"]));
    assert_eq!(status["netnsMode"]["enum"], json!(["exclusive", "shared", "unknown"]));
    assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
    let p = serde_json::to_value(RoceProfile::crd()).unwrap();
    assert_eq!(p["spec"]["scope"], "Cluster");
    assert_eq!(&cols(&p)[..5], ["MODE", "NODES", "COMPLIANT", "DRIFTED", "STALE"]);
    let spec = &p["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["mode"]["enum"], json!(["Audit", "Enforce"]));
    assert_eq!(spec["pfc"]["properties"]["priorities"]["items"]["maximum"], json!(7.0));
    assert_eq!(spec["dscpToPriority"]["items"]["properties"]["dscp"]["maximum"], json!(63.0));
    // The cross-field rules the API server evaluates are the ones `--profile FILE` gets.
    let rules = &p["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["x-kubernetes-validations"];
    let want: Vec<Value> = kube_rdma_operator::validate::RULES
        .iter()
        .map(|r| json!({"rule": r.cel, "message": r.message}))
        .collect();
    assert_eq!(rules, &json!(want));
    let ets = &spec["ets"]["x-kubernetes-validations"][0];
    assert_eq!(ets["rule"], kube_rdma_operator::validate::RULE_ETS_SUM.cel);
    assert_eq!(spec["pfc"]["properties"]["priorities"]["x-kubernetes-list-type"], "set");
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

/// Evaluates each CEL rule of the RoceProfile CRD on `specs` with cel-python (the
/// Kubernetes list library's `sum()` added as its documentation defines it); per
/// spec, the messages of the rules that are false.
fn cel_failures(specs: &[Value]) -> Vec<Vec<String>> {
    let crd = serde_json::to_value(RoceProfile::crd()).unwrap();
    let spec_schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut rules: Vec<(String, Value)> = spec_schema["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| ("".to_string(), r.clone()))
        .collect();
    rules.push(("ets".into(), spec_schema["properties"]["ets"]["x-kubernetes-validations"][0].clone()));
    let input = json!({"rules": rules, "specs": specs});
    let script = r#"
import json, sys, celpy
from celpy import celtypes
def k8s_sum(xs):
    return celtypes.IntType(sum(int(x) for x in xs))
data = json.load(sys.stdin)
env = celpy.Environment()
progs = [(field, r["message"], env.program(env.compile(r["rule"]), functions={"sum": k8s_sum})) for field, r in data["rules"]]
out = []
for spec in data["specs"]:
    failed = []
    for field, msg, prog in progs:
        target = spec.get(field) if field else spec
        if field and target is None:
            continue  # rules of an absent object do not run
        if not bool(prog.evaluate({"self": celpy.json_to_cel(target)})):
            failed.append(msg)
    out.append(failed)
print(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with cel-python (scripts/setup-deps)");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_crds_cel_rules_and_the_file_validation_agree() {
    let specs = [
        json!({"pfc": {"priorities": [3]}, "cnp": {"dscp": 48, "priority": 6}}),
        json!({"pfc": {"priorities": [3]}, "cnp": {"dscp": 48, "priority": 3}}),
        json!({"dscpToPriority": [{"dscp": 26, "priority": 3}, {"dscp": 48, "priority": 6}]}),
        json!({"dscpToPriority": [{"dscp": 26, "priority": 3}, {"dscp": 26, "priority": 4}]}),
        json!({"trust": "pcp", "dscpToPriority": [{"dscp": 26, "priority": 3}]}),
        json!({"trust": "pcp", "pfc": {"priorities": [3]}}),
        json!({"trust": "dscp", "dscpToPriority": [{"dscp": 26, "priority": 3}]}),
        json!({"ets": {"bandwidth": [50, 0, 0, 50, 0, 0, 0, 0]}}),
        json!({"ets": {"bandwidth": [50, 0, 0, 40, 0, 0, 0, 0]}}),
        json!({"globalPause": true, "pfc": {"priorities": [3]}}),
        json!({"globalPause": true, "pfc": {"priorities": []}}),
        json!({"globalPause": true}),
        json!({"globalPause": false, "pfc": {"priorities": [3]}}),
        json!({}),
    ];
    let cel = cel_failures(&specs);
    for (spec, cel) in specs.iter().zip(&cel) {
        let obj = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": "p"}, "spec": spec});
        let rust: Vec<String> = match kube_rdma_operator::validate::from_value(obj) {
            Ok(_) => vec![],
            Err(e) => {
                e.0.iter()
                    .map(|m| m.split_once(": ").map(|(_, m)| m.to_string()).unwrap_or(m.clone()))
                    .collect()
            }
        };
        assert_eq!(&rust, cel, "{spec}");
    }
    // Each rule fails somewhere above: none is vacuous.
    let all: std::collections::BTreeSet<&String> = cel.iter().flatten().collect();
    assert_eq!(all.len(), 5, "{all:?}");
}
