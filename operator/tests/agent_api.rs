//! The agent against a scripted API server (tower-test): the exact requests of a pass
//! (server-side apply of the object and its status, label patch, drift Event), no
//! requests when nothing changed, and retries with backoff on 409 and 5xx.
mod common;

use std::time::Duration;

use common::{applied, client, expect, expect_with, list, node, status_err};
use kube_rdma_operator::agent::{evaluate, Agent, AgentConfig, AgentError, Backoff, Publisher};
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::RdmaNodeStateStatus;
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use serde_json::json;
use tokio::time::Instant;

const NAME: &str = "cx6dx-dual";
const APPLY_OBJ: &str =
    "/apis/kuberdma.io/v1alpha1/rdmanodestates/cx6dx-dual?&force=true&fieldManager=kube-rdma-agent";
const APPLY_STATUS: &str =
    "/apis/kuberdma.io/v1alpha1/rdmanodestates/cx6dx-dual/status?&force=true&fieldManager=kube-rdma-agent";
const NODE: &str = "/api/v1/nodes/cx6dx-dual";
const LABEL: &str = "/api/v1/nodes/cx6dx-dual?";
const PROFILES: &str = "/apis/kuberdma.io/v1alpha1/roceprofiles?";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events?";

fn spec() -> serde_json::Value {
    json!({"nodeName": NAME})
}

fn status_of(desc: &nic::simdesc::NodeDesc) -> RdmaNodeStateStatus {
    let n = SimNode::new(desc);
    evaluate(&default_profile(), &n.read())
}

fn backoff() -> Backoff {
    Backoff { initial: Duration::from_millis(500), max: Duration::from_secs(8), attempts: 5 }
}

#[tokio::test]
async fn first_pass_applies_object_and_status_labels_the_node_and_a_second_pass_is_silent() {
    let sim = SimNode::new(&example(NAME));
    let (client, mut h) = client();
    let cfg = AgentConfig {
        node_name: NAME.into(),
        source: sim.source.clone(),
        poll: Duration::from_secs(30),
        profile: None,
        debounce: Duration::from_millis(10),
    };
    let mut agent = Agent::new(cfg, client).with_backoff(backoff());
    let server = tokio::spawn(async move {
        expect(&mut h, "GET", NODE, 200, node(NAME, json!({"gpu": "yes"}))).await;
        expect(&mut h, "GET", PROFILES, 200, list("kuberdma.io/v1alpha1", "RoceProfile", vec![])).await;
        let obj = expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        assert_eq!(obj.content_type, "application/apply-patch+yaml");
        assert_eq!(obj.body["apiVersion"], "kuberdma.io/v1alpha1");
        assert_eq!(obj.body["kind"], "RdmaNodeState");
        assert_eq!(obj.body["spec"], spec());
        assert_eq!(
            obj.body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-cx6dx-dual"}])
        );
        let st = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        assert_eq!(st.content_type, "application/apply-patch+yaml");
        assert_eq!(st.body["kind"], "RdmaNodeState");
        assert!(st.body.get("spec").is_none(), "status apply carries only status");
        assert_eq!(st.body["status"]["summary"]["ready"], "True");
        assert_eq!(st.body["status"]["profile"], "default");
        assert!(st.body["status"]["observedAt"].is_string());
        assert!(st.body["status"]["conditions"][0]["lastTransitionTime"].is_string());
        assert_eq!(st.body["status"]["fingerprint"].as_str().unwrap().len(), 16);
        let lbl = expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        assert_eq!(lbl.content_type, "application/merge-patch+json");
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "true"}}}));
        // Second pass: the same node, so only the two reads.
        expect(&mut h, "GET", NODE, 200, node(NAME, json!({"gpu": "yes"}))).await;
        expect(&mut h, "GET", PROFILES, 200, list("kuberdma.io/v1alpha1", "RoceProfile", vec![])).await;
        h
    });
    let (status, p) = agent.tick().await.unwrap();
    assert!(p.status_applied && p.label_patched && !p.event_posted, "{p:?}");
    assert_eq!(status.summary.ready, "True");
    let (_, p2) = agent.tick().await.unwrap();
    assert_eq!(p2, Default::default(), "nothing changed, nothing written");
    let mut h = server.await.unwrap();
    assert!(agent.metrics().read().unwrap().lines().any(|l| l == "kuberdma_node_roce_ready 1"));
    drop(agent);
    assert!(h.next_request().await.is_none(), "no further requests");
}

#[tokio::test]
async fn a_matching_profile_from_the_cluster_is_used() {
    let sim = SimNode::new(&example(NAME));
    let (client, mut h) = client();
    let cfg = AgentConfig {
        node_name: NAME.into(),
        source: sim.source.clone(),
        poll: Duration::from_secs(30),
        profile: None,
        debounce: Duration::ZERO,
    };
    let mut agent = Agent::new(cfg, client);
    let server = tokio::spawn(async move {
        expect(&mut h, "GET", NODE, 200, node(NAME, json!({"pool": "a"}))).await;
        let profile = |name: &str, sel: serde_json::Value, pfc: Vec<u8>| {
            json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": name},
                   "spec": {"nodeSelector": sel, "pfc": {"priorities": pfc}}})
        };
        let items = vec![
            profile("other", json!({"pool": "b"}), vec![3]),
            profile("pool-a", json!({"pool": "a"}), vec![4]),
        ];
        expect(&mut h, "GET", PROFILES, 200, list("kuberdma.io/v1alpha1", "RoceProfile", items)).await;
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        let st = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        assert_eq!(st.body["status"]["profile"], "pool-a");
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        let ev = expect_with(&mut h, "POST", EVENTS, 201, |b| b.clone()).await;
        assert_eq!(ev.body["reason"], "RoceDrift");
        h
    });
    let (status, p) = agent.tick().await.unwrap();
    assert_eq!(status.profile, "pool-a");
    assert_eq!(status.summary.ready, "False");
    assert!(p.event_posted);
    server.await.unwrap();
}

#[tokio::test]
async fn drift_posts_one_warning_event_with_the_failing_checks_and_flips_the_label() {
    let good = status_of(&example(NAME));
    let bad = status_of(&with_roce(example(NAME), |r| r.pfc = vec![]));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    p.set_node_uid(Some("uid-1".into()));
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        // Drift: status, label false, one Event.
        let st = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        assert_eq!(st.body["status"]["summary"]["ready"], "False");
        let drifted = st.body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Drifted")
            .unwrap()
            .clone();
        assert_eq!(drifted["status"], "True");
        assert_eq!(drifted["lastTransitionTime"], "2026-11-30T02:00:00Z");
        let ready = st.body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Degraded")
            .unwrap()
            .clone();
        assert_eq!(ready["lastTransitionTime"], "2026-11-30T01:00:00Z", "unchanged condition keeps its time");
        let lbl = expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "false"}}}));
        let ev = expect_with(&mut h, "POST", EVENTS, 201, |b| b.clone()).await;
        assert_eq!(ev.content_type, "application/json");
        let b = &ev.body;
        assert_eq!(b["apiVersion"], "events.k8s.io/v1");
        assert_eq!(b["kind"], "Event");
        assert_eq!(b["metadata"]["generateName"], "cx6dx-dual.roce-drift.");
        assert_eq!(b["type"], "Warning");
        assert_eq!(b["reason"], "RoceDrift");
        assert_eq!(b["action"], "CheckRoce");
        assert_eq!(b["reportingController"], "kuberdma.io/agent");
        assert_eq!(b["eventTime"], "2026-11-30T02:00:00.000000Z");
        assert_eq!(b["regarding"], json!({"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-1"}));
        let note = b["note"].as_str().unwrap();
        assert!(note.contains("ens1f0np0/pfc: want 3, have none"), "{note}");
        assert!(note.contains("ens1f1np1/chain-tos-pfc"), "{note}");
        h
    });
    let p1 = p.publish(good, "2026-11-30T01:00:00Z").await.unwrap();
    assert!(p1.status_applied && p1.label_patched && !p1.event_posted);
    let p2 = p.publish(bad.clone(), "2026-11-30T02:00:00Z").await.unwrap();
    assert!(p2.status_applied && p2.label_patched && p2.event_posted);
    let mut h = server.await.unwrap();
    // The same drift again: no new Event, no status, no label.
    let p3 = p.publish(bad, "2026-11-30T03:00:00Z").await.unwrap();
    assert_eq!(p3, Default::default());
    drop(p);
    assert!(h.next_request().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn conflict_on_status_apply_is_retried_after_the_initial_backoff() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        let t0 = Instant::now();
        expect(&mut h, "PATCH", APPLY_STATUS, 409, status_err(409, "Conflict")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        h
    });
    let r = p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    assert!(r.status_applied);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn server_errors_back_off_exponentially_then_succeed() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        let mut at = Vec::new();
        for code in [503, 500, 504] {
            expect(&mut h, "PATCH", APPLY_OBJ, code, status_err(code, "ServiceUnavailable")).await;
            at.push(t0.elapsed());
        }
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        at.push(t0.elapsed());
        // 0, then +0.5 s, +1 s, +2 s.
        assert_eq!(at, [0, 500, 1500, 3500].map(Duration::from_millis));
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        h
    });
    p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn persistent_server_errors_give_up_and_the_next_pass_retries_the_write() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        for _ in 0..5 {
            expect(&mut h, "PATCH", APPLY_OBJ, 500, status_err(500, "InternalError")).await;
        }
        assert_eq!(t0.elapsed(), Duration::from_millis(500 + 1000 + 2000 + 4000));
        // Next pass: nothing was recorded as written, so it starts over.
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        h
    });
    let e = p.publish(st.clone(), "2026-11-30T01:00:00Z").await.unwrap_err();
    match &e {
        AgentError::Api { op, source: kube::Error::Api(s) } => {
            assert_eq!(op, "apply rdmanodestates/cx6dx-dual");
            assert_eq!(s.code, 500);
        }
        other => panic!("{other:?}"),
    }
    let r = p.publish(st, "2026-11-30T01:00:30Z").await.unwrap();
    assert!(r.status_applied && r.label_patched);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn forbidden_is_not_retried() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        expect(&mut h, "PATCH", APPLY_OBJ, 403, status_err(403, "Forbidden")).await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
        h
    });
    let e = p.publish(st, "2026-11-30T01:00:00Z").await.unwrap_err();
    assert!(e.to_string().contains("apply rdmanodestates/cx6dx-dual"), "{e}");
    let mut h = server.await.unwrap();
    drop(p);
    assert!(h.next_request().await.is_none(), "403 is final");
}

#[tokio::test(start_paused = true)]
async fn a_kernel_event_triggers_a_pass_after_the_debounce_not_the_poll() {
    let sim = SimNode::new(&example(NAME));
    let (client, mut h) = client();
    let cfg = AgentConfig {
        node_name: NAME.into(),
        source: sim.source.clone(),
        poll: Duration::from_secs(30),
        profile: Some(default_profile()),
        debounce: Duration::from_millis(500),
    };
    let agent = Agent::new(cfg, client).with_backoff(backoff());
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(agent.run(Some(rx), async move {
        let _ = stop_rx.await;
    }));
    // First pass at start (a fixed profile: no profile list).
    expect(&mut h, "GET", NODE, 200, node(NAME, json!({}))).await;
    expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
    expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
    expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
    // A burst of three events costs one pass, 500 ms later.
    let t0 = Instant::now();
    for _ in 0..3 {
        tx.send(()).await.unwrap();
    }
    expect(&mut h, "GET", NODE, 200, node(NAME, json!({}))).await;
    assert_eq!(t0.elapsed(), Duration::from_millis(500));
    // Then the poll: 30 s after that pass.
    let t1 = Instant::now();
    expect(&mut h, "GET", NODE, 200, node(NAME, json!({}))).await;
    assert_eq!(t1.elapsed(), Duration::from_secs(30));
    stop_tx.send(()).unwrap();
    run.await.unwrap();
}

#[tokio::test]
async fn a_deleted_node_state_is_recreated_on_the_next_pass() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME).with_backoff(backoff());
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        expect(&mut h, "PATCH", APPLY_STATUS, 404, status_err(404, "NotFound")).await;
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, applied(NAME, spec())).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, applied(NAME, spec())).await;
        expect(&mut h, "PATCH", LABEL, 200, node(NAME, json!({}))).await;
        h
    });
    assert!(p.publish(st.clone(), "2026-11-30T01:00:00Z").await.is_err());
    assert!(p.publish(st, "2026-11-30T01:00:30Z").await.unwrap().status_applied);
    server.await.unwrap();
}
