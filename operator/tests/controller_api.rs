//! The controller against a scripted API server (tower-test): from what its watches
//! hold, the exact writes of a pass (profile status by server-side apply, Stale
//! marks, deletion of node states whose node is gone, an Event about a profile it
//! cannot decode), silence when nothing changed, and retry on conflict.
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{client, expect, expect_with, status_err};
use kube::api::DynamicObject;
use kube_rdma_operator::api::Backoff;
use kube_rdma_operator::controller::{plan, Controller, NodeInfo, StateInfo};
use kube_rdma_operator::crd::{RdmaNodeState, RoceProfileStatus};
use kube_rdma_operator::profiles::decode;
use serde_json::{json, Value};
use tokio::time::Instant;

const P1_STATUS: &str =
    "/apis/kuberdma.io/v1alpha1/roceprofiles/gpu/status?&force=true&fieldManager=kube-rdma-controller";
const DEL_GONE: &str = "/apis/kuberdma.io/v1alpha1/rdmanodestates/gone?";

fn profile(name: &str, sel: Value, status: Option<Value>) -> Value {
    let mut p = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile",
        "metadata": {"name": name, "resourceVersion": "3"},
        "spec": {"nodeSelector": sel, "mode": "Audit", "pfc": {"priorities": [3]}}});
    if let Some(s) = status {
        p["status"] = s;
    }
    p
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn now() -> String {
    kube_rdma_operator::status::now_rfc3339()
}

fn state(name: &str, profile: &str, results: &[&str]) -> RdmaNodeState {
    let checks: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("c{i}"), "interface": "ens1", "result": r, "expected": "x", "actual": "y"}))
        .collect();
    serde_json::from_value(json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": name},
           "spec": {"nodeName": name}, "status": {"checks": checks, "profile": profile, "lastHeartbeatTime": now()}}))
    .unwrap()
}

fn node(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

fn nodes() -> Vec<NodeInfo> {
    vec![
        node("a", &[("gpu", "yes")]),
        node("b", &[("gpu", "yes")]),
        node("c", &[("gpu", "yes")]),
        node("cpu", &[]),
    ]
}

fn states() -> Vec<RdmaNodeState> {
    vec![
        state("a", "gpu", &["Pass", "Unsupported"]),
        state("b", "gpu", &["Pass", "Fail"]),
        state("cpu", "default", &["Fail"]),
        state("gone", "gpu", &["Pass"]),
    ]
}

fn want() -> Value {
    json!({"nodesMatched": 3, "nodesCompliant": 1, "nodesDrifted": 1, "nodesUnreported": 1, "nodesStale": 0,
           "drifted": ["b"]})
}

fn infos(states: Vec<RdmaNodeState>) -> BTreeMap<String, StateInfo> {
    states.iter().map(|s| (s.metadata.name.clone().unwrap(), StateInfo::of(s))).collect()
}

fn without_conditions(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("conditions");
    v
}

#[test]
fn profile_status_counts_matched_compliant_drifted_and_unreported_and_finds_orphans() {
    let profiles =
        [("gpu".to_string(), decode(&dynamic(profile("gpu", json!({"gpu": "yes"}), None))))].into();
    let states = infos(states());
    let p = plan(
        &profiles,
        &BTreeMap::new(),
        &nodes(),
        &states,
        &BTreeMap::new(),
        k8s_openapi::jiff::Timestamp::now(),
        Duration::from_secs(1500),
    );
    let st = serde_json::to_value(&p.statuses["gpu"]).unwrap();
    assert_eq!(without_conditions(st.clone()), want());
    assert_eq!(st["conditions"][0]["type"], "Valid");
    assert_eq!(st["conditions"][0]["status"], "True");
    assert_eq!(p.orphans, ["gone"]);
    assert!(p.stale.is_empty());
}

#[test]
fn overlapping_profiles_count_each_node_once_for_the_profile_its_agent_used() {
    // `all` (empty selector) and `gpu` both match a and b; the agents used `gpu` on a
    // and `all` on b (status.profile); c has no state yet and goes to `gpu`, the more
    // specific selector, though `all` sorts first by name.
    let profiles = [
        ("all".to_string(), decode(&dynamic(profile("all", json!({}), None)))),
        ("gpu".to_string(), decode(&dynamic(profile("gpu", json!({"gpu": "yes"}), None)))),
    ]
    .into();
    let states = infos(vec![state("a", "gpu", &["Pass"]), state("b", "all", &["Fail"])]);
    let ns = vec![node("a", &[("gpu", "yes")]), node("b", &[("gpu", "yes")]), node("c", &[("gpu", "yes")])];
    let p = plan(
        &profiles,
        &BTreeMap::new(),
        &ns,
        &states,
        &BTreeMap::new(),
        k8s_openapi::jiff::Timestamp::now(),
        Duration::from_secs(1500),
    );
    let all = &p.statuses["all"];
    let gpu = &p.statuses["gpu"];
    assert_eq!((all.nodes_matched, all.nodes_drifted, all.nodes_unreported), (1, 1, 0));
    assert_eq!(all.drifted, ["b"]);
    assert_eq!((gpu.nodes_matched, gpu.nodes_compliant, gpu.nodes_unreported), (2, 1, 1));
    assert_eq!(all.nodes_matched + gpu.nodes_matched, 3, "three nodes, counted once each");
    // Both carry the overlap, naming the nodes, the other profile and the winner.
    let overlapping =
        |st: &RoceProfileStatus| st.conditions.iter().find(|c| c.type_ == "Overlapping").cloned().unwrap();
    let (ca, cg) = (overlapping(all), overlapping(gpu));
    assert_eq!((ca.status.as_str(), ca.reason.as_str()), ("True", "MoreSpecificApplies"));
    assert_eq!(
        ca.message,
        "a, b, c also selected by gpu: gpu applies there (its nodeSelector is more specific)"
    );
    assert_eq!(cg.status, "True");
    assert!(
        cg.message.starts_with("a, b, c also selected by all: this profile applies there"),
        "{}",
        cg.message
    );
    assert_eq!(p.overlaps.keys().collect::<Vec<_>>(), ["all", "gpu"]);
}

#[test]
fn every_drifted_node_is_listed() {
    let profiles = [("gpu".to_string(), decode(&dynamic(profile("gpu", json!({}), None))))].into();
    let ns: Vec<NodeInfo> = (0..120).map(|i| node(&format!("n{i:03}"), &[])).collect();
    let states = infos(ns.iter().map(|n| state(&n.name, "gpu", &["Fail"])).collect());
    let p = plan(
        &profiles,
        &BTreeMap::new(),
        &ns,
        &states,
        &BTreeMap::new(),
        k8s_openapi::jiff::Timestamp::now(),
        Duration::from_secs(1500),
    );
    assert_eq!(p.statuses["gpu"].nodes_drifted, 120);
    assert_eq!(p.statuses["gpu"].drifted.len(), 120);
}

#[test]
fn an_agent_without_heartbeat_for_the_threshold_is_stale_and_counted_so() {
    let profiles = [("gpu".to_string(), decode(&dynamic(profile("gpu", json!({}), None))))].into();
    let mut old = state("a", "gpu", &["Pass"]);
    old.status.as_mut().unwrap().last_heartbeat_time = Some("2026-11-30T01:00:00Z".into());
    let fresh = state("b", "gpu", &["Pass"]);
    let states = infos(vec![old, fresh]);
    let t = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    let ns = vec![node("a", &[]), node("b", &[])];
    let at = |now: &str| {
        plan(&profiles, &BTreeMap::new(), &ns, &states, &BTreeMap::new(), t(now), Duration::from_secs(1500))
    };
    // 24 min 59 s: not yet.
    assert!(!at("2026-11-30T01:24:59Z").stale.contains_key("a"));
    let p = at("2026-11-30T01:25:00Z");
    assert_eq!(p.stale.get("a"), Some(&true));
    assert_eq!(p.statuses["gpu"].nodes_stale, 1);
    assert!(kube_rdma_operator::controller::render_metrics(&p).contains("kuberdma_node_stale{node=\"a\"} 1"));
}

#[tokio::test]
async fn a_pass_applies_profile_status_and_deletes_states_of_deleted_nodes_then_stays_silent() {
    let (client, mut h) = client();
    let mut ctl = Controller::new(client);
    ctl.load(vec![dynamic(profile("gpu", json!({"gpu": "yes"}), None))], states(), nodes());
    let server = tokio::spawn(async move {
        let st = expect_with(&mut h, "PATCH", P1_STATUS, 200, |b| {
            let mut p = profile("gpu", json!({"gpu": "yes"}), None);
            p["status"] = b["status"].clone();
            p
        })
        .await;
        assert_eq!(st.content_type, "application/apply-patch+yaml");
        assert_eq!(st.body["apiVersion"], "kuberdma.io/v1alpha1");
        assert_eq!(st.body["kind"], "RoceProfile");
        assert_eq!(without_conditions(st.body["status"].clone()), want());
        let del = expect(
            &mut h,
            "DELETE",
            DEL_GONE,
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}),
        )
        .await;
        assert_eq!(del.method, "DELETE");
        (h, st.body["status"].clone())
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.statuses_written, ["gpu"]);
    assert_eq!(p.deleted, ["gone"]);
    let (mut h, written) = server.await.unwrap();
    // The watches show the written status and the deletion: nothing more to do.
    let mut s = states();
    s.pop();
    ctl.load(vec![dynamic(profile("gpu", json!({"gpu": "yes"}), Some(written)))], s, nodes());
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p, Default::default());
    drop(ctl);
    assert!(h.next_request().await.is_none());
}

#[tokio::test]
async fn a_stale_agent_is_marked_and_its_ready_label_set_to_unknown() {
    let (client, mut h) = client();
    let mut ctl = Controller::new(client);
    let mut old = state("a", "gpu", &["Pass"]);
    old.status.as_mut().unwrap().last_heartbeat_time = Some("2026-11-30T01:00:00Z".into());
    let mut n = node("a", &[("gpu", "yes"), ("kuberdma.io/roce-ready", "true")]);
    n.labels.insert("x".into(), "y".into());
    let want_status = json!({"nodesMatched": 1, "nodesCompliant": 0, "nodesDrifted": 0, "nodesUnreported": 0, "nodesStale": 1});
    ctl.load(vec![dynamic(profile("gpu", json!({"gpu": "yes"}), None))], vec![old], vec![n]);
    let server = tokio::spawn(async move {
        let st = expect_with(&mut h, "PATCH", P1_STATUS, 200, |b| b.clone()).await;
        assert_eq!(without_conditions(st.body["status"].clone()), want_status);
        let mark = expect_with(
            &mut h,
            "PATCH",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates/a/status?&force=true&fieldManager=kube-rdma-controller",
            200,
            |b| b.clone(),
        )
        .await;
        assert_eq!(mark.content_type, "application/apply-patch+yaml");
        let c = &mark.body["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["status"].as_str(), c["reason"].as_str()),
            (Some("Stale"), Some("True"), Some("NoHeartbeat"))
        );
        // The Stale entry of the conditions list-map and nothing else: summary.ready is the agent's.
        assert_eq!(mark.body["status"].as_object().unwrap().keys().collect::<Vec<_>>(), ["conditions"]);
        assert_eq!(mark.body["status"]["conditions"].as_array().unwrap().len(), 1);
        let lbl = expect(
            &mut h,
            "PATCH",
            "/api/v1/nodes/a?&fieldManager=kube-rdma-controller",
            200,
            common::node("a", json!({})),
        )
        .await;
        assert_eq!(lbl.content_type, "application/merge-patch+json");
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "unknown"}}}));
        h
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.stale_marked, [("a".to_string(), true)]);
    server.await.unwrap();
}

#[tokio::test]
async fn a_profile_that_cannot_be_decoded_gets_a_condition_and_one_event_and_the_others_are_counted() {
    let (client, mut h) = client();
    let mut ctl = Controller::new(client);
    let mut bad = profile("newer", json!({}), None);
    bad["spec"]["mode"] = json!("Remediate");
    bad["metadata"]["uid"] = json!("uid-newer");
    ctl.load(
        vec![dynamic(profile("gpu", json!({"gpu": "yes"}), None)), dynamic(bad)],
        vec![state("a", "gpu", &["Pass"])],
        vec![node("a", &[("gpu", "yes")])],
    );
    let server = tokio::spawn(async move {
        let gpu = expect_with(&mut h, "PATCH", P1_STATUS, 200, |b| b.clone()).await;
        assert_eq!(gpu.body["status"]["nodesCompliant"], 1);
        let newer = expect_with(
            &mut h,
            "PATCH",
            "/apis/kuberdma.io/v1alpha1/roceprofiles/newer/status?&force=true&fieldManager=kube-rdma-controller",
            200,
            |b| b.clone(),
        )
        .await;
        let c = &newer.body["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["status"].as_str(), c["reason"].as_str()),
            (Some("Valid"), Some("False"), Some("CannotDecode"))
        );
        assert!(c["message"].as_str().unwrap().contains("Remediate"), "{c}");
        let ev = expect_with(&mut h, "POST", "/apis/events.k8s.io/v1/namespaces/default/events?", 201, |b| {
            b.clone()
        })
        .await;
        assert_eq!(ev.body["reason"], "InvalidProfile");
        assert_eq!(
            ev.body["regarding"],
            json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "name": "newer", "uid": "uid-newer"})
        );
        assert!(ev.body["note"]
            .as_str()
            .unwrap()
            .starts_with("RoceProfile newer cannot be used and is skipped: "));
        h
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.events, ["newer"]);
    let mut h = server.await.unwrap();
    // Reported once per generation.
    let p = ctl.reconcile().await.unwrap();
    assert!(p.events.is_empty(), "{p:?}");
    drop(ctl);
    assert!(h.next_request().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn conflict_is_retried_and_a_state_already_gone_counts_as_deleted() {
    let (client, mut h) = client();
    let mut ctl = Controller::new(client).with_backoff(Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(4),
        attempts: 3,
        jitter: 0.0,
    });
    ctl.load(vec![dynamic(profile("gpu", json!({"gpu": "yes"}), None))], states(), nodes());
    let server = tokio::spawn(async move {
        expect(&mut h, "PATCH", P1_STATUS, 409, status_err(409, "Conflict")).await;
        let t1 = Instant::now();
        expect_with(&mut h, "PATCH", P1_STATUS, 200, |b| b.clone()).await;
        assert_eq!(t1.elapsed(), Duration::from_secs(1));
        expect(&mut h, "DELETE", DEL_GONE, 404, status_err(404, "NotFound")).await;
        h
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.deleted, ["gone"]);
    server.await.unwrap();
    let _: Option<RoceProfileStatus> = None;
}
