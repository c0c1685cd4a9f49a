//! The agent's writer against a scripted API server (tower-test): the exact requests
//! that bring the server to what the agent wants (server-side apply of the object
//! and its status, label patch, drift Event, heartbeat), none when the watches show
//! it is already there, repairs when they show it is not (deleted state, removed
//! label, a state the controller marked stale), no rewrite on a watch event older
//! than the agent's own write, and retries with backoff on 409, 429 and 5xx.
mod common;

use std::time::Duration;

use common::{client, expect, expect_with, node, status_err};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_rdma_operator::api::Backoff;
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::{RdmaNodeState, RdmaNodeStateSpec, RdmaNodeStateStatus};
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::publish::{Publisher, Seen};
use kube_rdma_operator::status::evaluate;
use serde_json::{json, Value};
use tokio::time::Instant;

const NAME: &str = "cx6dx-dual";
const APPLY_OBJ: &str =
    "/apis/kuberdma.io/v1alpha1/rdmanodestates/cx6dx-dual?&force=true&fieldManager=kube-rdma-agent";
const APPLY_STATUS: &str =
    "/apis/kuberdma.io/v1alpha1/rdmanodestates/cx6dx-dual/status?&force=true&fieldManager=kube-rdma-agent";
const LABEL: &str = "/api/v1/nodes/cx6dx-dual?&fieldManager=kube-rdma-agent";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events?";

fn status_of(desc: &nic::simdesc::NodeDesc) -> RdmaNodeStateStatus {
    let n = SimNode::new(desc);
    evaluate(&default_profile(), &n.read())
}

fn backoff() -> Backoff {
    Backoff { initial: Duration::from_millis(500), max: Duration::from_secs(8), attempts: 5, jitter: 0.0 }
}

/// What the API server returns for a write of `body`: the object as sent, with
/// name, spec, owner and resourceVersion `rv`.
fn stored(rv: &'static str) -> impl FnOnce(&Value) -> Value {
    move |body: &Value| {
        let mut r = body.clone();
        r["apiVersion"] = json!("kuberdma.io/v1alpha1");
        r["kind"] = json!("RdmaNodeState");
        r["metadata"]["name"] = json!(NAME);
        r["metadata"]["resourceVersion"] = json!(rv);
        r["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-cx6dx-dual"}]);
        r["spec"] = json!({"nodeName": NAME});
        r
    }
}

fn labelled(rv: &str, ready: Option<&str>) -> Value {
    let mut n = node(NAME, ready.map_or(json!({}), |r| json!({"kuberdma.io/roce-ready": r})));
    n["metadata"]["resourceVersion"] = json!(rv);
    n
}

fn node_meta(rv: &str, ready: Option<&str>) -> ObjectMeta {
    serde_json::from_value(labelled(rv, ready)["metadata"].clone()).unwrap()
}

/// A publisher whose watches have listed: no state yet, the Node without label.
fn synced(client: kube::Client) -> Publisher {
    let mut p = Publisher::new(client, NAME, Default::default()).with_backoff(backoff());
    p.state_seen(Seen::Listed(None));
    p.node_seen(Seen::Listed(Some(node_meta("1", None))));
    p
}

fn state_obj(v: &Value) -> RdmaNodeState {
    serde_json::from_value(v.clone()).unwrap()
}

#[tokio::test]
async fn first_publish_applies_object_and_status_labels_the_node_and_an_unchanged_node_costs_nothing() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        let obj = expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        assert_eq!(obj.content_type, "application/apply-patch+yaml");
        assert_eq!(obj.body["apiVersion"], "kuberdma.io/v1alpha1");
        assert_eq!(obj.body["kind"], "RdmaNodeState");
        assert_eq!(obj.body["spec"], json!({"nodeName": NAME}));
        assert_eq!(
            obj.body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-cx6dx-dual"}])
        );
        let s = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        assert_eq!(s.content_type, "application/apply-patch+yaml");
        assert_eq!(s.body["kind"], "RdmaNodeState");
        assert!(s.body.get("spec").is_none(), "status apply carries only status");
        let b = &s.body["status"];
        assert_eq!(b["summary"]["ready"], "True");
        assert_eq!(b["profile"], "default");
        assert_eq!(b["observedAt"], "2026-11-30T01:00:00Z");
        assert_eq!(b["lastHeartbeatTime"], "2026-11-30T01:00:00Z");
        assert_eq!(b["netnsMode"], "exclusive");
        // The node-wide netns check is published with the interface checks.
        let netns = b["checks"].as_array().unwrap().iter().find(|c| c["name"] == "rdma-netns").unwrap();
        assert_eq!(
            (netns["interface"].as_str(), netns["expected"].as_str()),
            (Some("node"), Some("exclusive"))
        );
        assert_eq!(b["conditions"][0]["lastTransitionTime"], "2026-11-30T01:00:00Z");
        assert_eq!(b["fingerprint"].as_str().unwrap().len(), 16);
        let lbl = expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        assert_eq!(lbl.content_type, "application/merge-patch+json");
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "true"}}}));
        (h, s.body)
    });
    let r = p.publish(st.clone(), "2026-11-30T01:00:00Z").await.unwrap();
    assert!(r.object_applied && r.status_applied && r.label_patched && !r.event_posted, "{r:?}");
    let (mut h, written) = server.await.unwrap();
    // The watches echo the writes; the same status again costs nothing.
    let echo = stored("6")(&written);
    assert!(p.state_seen(Seen::Applied(state_obj(&echo))));
    p.node_seen(Seen::Applied(node_meta("2", Some("true"))));
    let r = p.publish(st, "2026-11-30T01:00:30Z").await.unwrap();
    assert_eq!(r, Default::default(), "nothing changed, nothing written");
    drop(p);
    assert!(h.next_request().await.is_none(), "no further requests");
}

#[tokio::test]
async fn drift_posts_one_warning_event_with_the_failing_checks_and_flips_the_label() {
    let good = status_of(&example(NAME));
    let bad = status_of(&with_roce(example(NAME), |r| r.pfc = vec![]));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME, Default::default()).with_backoff(backoff());
    p.node_seen(Seen::Listed(Some(node_meta("1", None))));
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        // Drift: status, label false, one Event.
        let st = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("7")).await;
        assert_eq!(st.body["status"]["summary"]["ready"], "False");
        assert_eq!(st.body["status"]["observedAt"], "2026-11-30T02:00:00Z");
        let cond = |t: &str| {
            st.body["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()
                .clone()
        };
        assert_eq!(cond("Drifted")["status"], "True");
        assert_eq!(cond("Drifted")["lastTransitionTime"], "2026-11-30T02:00:00Z");
        assert_eq!(
            cond("Degraded")["lastTransitionTime"],
            "2026-11-30T01:00:00Z",
            "unchanged condition keeps its time"
        );
        let lbl = expect(&mut h, "PATCH", LABEL, 200, labelled("3", Some("false"))).await;
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "false"}}}));
        let ev = expect_with(&mut h, "POST", EVENTS, 201, |b| b.clone()).await;
        assert_eq!(ev.content_type, "application/json");
        let b = &ev.body;
        assert_eq!(b["apiVersion"], "events.k8s.io/v1");
        assert_eq!(b["kind"], "Event");
        assert_eq!(b["metadata"]["generateName"], "cx6dx-dual.roce-drift-");
        assert_eq!(b["type"], "Warning");
        assert_eq!(b["reason"], "RoceDrift");
        assert_eq!(b["action"], "CheckRoce");
        assert_eq!(b["reportingController"], "kuberdma.io/agent");
        assert_eq!(b["eventTime"], "2026-11-30T02:00:00.000000Z");
        assert_eq!(
            b["regarding"],
            json!({"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "uid-cx6dx-dual"})
        );
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
async fn an_event_the_server_refuses_does_not_fail_the_pass_and_is_not_posted_again() {
    let good = status_of(&example(NAME));
    let bad = status_of(&with_roce(example(NAME), |r| r.pfc = vec![]));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME, Default::default()).with_backoff(backoff());
    p.node_seen(Seen::Listed(Some(node_meta("1", None))));
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("7")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("3", Some("false"))).await;
        // 422 (an Event the API server's validation refuses): answered at once, not retried.
        expect(&mut h, "POST", EVENTS, 422, status_err(422, "Invalid")).await;
        h
    });
    p.publish(good, "2026-11-30T01:00:00Z").await.unwrap();
    let r = p.publish(bad.clone(), "2026-11-30T02:00:00Z").await.unwrap();
    assert!(r.status_applied && r.label_patched && !r.event_posted, "{r:?}");
    let mut h = server.await.unwrap();
    assert_eq!(p.publish(bad, "2026-11-30T03:00:00Z").await.unwrap(), Default::default());
    drop(p);
    assert!(h.next_request().await.is_none(), "the refused Event is not posted again");
}

#[tokio::test]
async fn a_deleted_state_and_a_removed_label_are_written_again() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        let s = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        // After the deletion and the label removal:
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("9")).await;
        let again = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("10")).await;
        assert_eq!(again.body["status"]["fingerprint"], s.body["status"]["fingerprint"]);
        // Same checks: the observation time is kept, the heartbeat is new.
        assert_eq!(again.body["status"]["observedAt"], "2026-11-30T01:00:00Z");
        assert_eq!(again.body["status"]["lastHeartbeatTime"], "2026-11-30T01:05:00Z");
        let lbl = expect(&mut h, "PATCH", LABEL, 200, labelled("4", Some("true"))).await;
        assert_eq!(lbl.body, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "true"}}}));
        h
    });
    p.publish(st.clone(), "2026-11-30T01:00:00Z").await.unwrap();
    // The watches echo the writes, then someone deletes the state and removes the label.
    let echo = json!({"metadata": {"name": NAME, "resourceVersion": "6"}, "spec": {"nodeName": NAME}});
    assert!(p.state_seen(Seen::Applied(state_obj(&echo))));
    assert!(p.node_seen(Seen::Applied(node_meta("2", Some("true")))));
    assert!(p.state_seen(Seen::Deleted));
    assert!(p.node_seen(Seen::Applied(node_meta("3", None))));
    let r = p.publish(st, "2026-11-30T01:05:00Z").await.unwrap();
    assert!(r.object_applied && r.status_applied && r.label_patched && !r.event_posted, "{r:?}");
    let mut h = server.await.unwrap();
    drop(p);
    assert!(h.next_request().await.is_none());
}

#[tokio::test]
async fn an_event_older_than_our_write_does_not_cause_a_rewrite_but_the_controllers_stale_mark_does() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        // The controller's mark: the agent confirms at once, applying its own status again
        // (its conditions only: the Stale entry stays the controller's).
        let again = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("8")).await;
        assert_eq!(again.body["status"]["summary"]["ready"], "True");
        assert_eq!(again.body["status"]["lastHeartbeatTime"], "2026-11-30T01:00:20Z");
        let types: Vec<&str> = again.body["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["RoceReady", "Drifted", "Degraded"]);
        h
    });
    p.publish(st.clone(), "2026-11-30T01:00:00Z").await.unwrap();
    // The object as created (rv 5, no status yet) arrives after our status write
    // (rv 6): older than our write, so it is ignored and nothing is rewritten.
    let created = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState",
        "metadata": {"name": NAME, "resourceVersion": "5"}, "spec": {"nodeName": NAME}});
    assert!(!p.state_seen(Seen::Applied(state_obj(&created))), "older than our write");
    p.node_seen(Seen::Applied(node_meta("2", Some("true"))));
    assert_eq!(p.publish(st.clone(), "2026-11-30T01:00:10Z").await.unwrap(), Default::default());
    // Our own write comes back, then the controller marks the agent stale.
    let mut echo = stored("6")(&json!({"status": st}));
    echo["status"]["fingerprint"] = json!(st.fingerprint);
    assert!(p.state_seen(Seen::Applied(state_obj(&echo))));
    let mut marked = echo.clone();
    marked["metadata"]["resourceVersion"] = json!("7");
    marked["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Stale", "status": "True", "reason": "NoHeartbeat", "message": ""}));
    assert!(p.state_seen(Seen::Applied(state_obj(&marked))));
    let r = p.publish(st, "2026-11-30T01:00:20Z").await.unwrap();
    assert!(r.status_applied && !r.object_applied && !r.label_patched, "{r:?}");
    let mut h = server.await.unwrap();
    drop(p);
    assert!(h.next_request().await.is_none());
}

#[tokio::test]
async fn heartbeat_applies_the_last_status_again_with_only_the_time_changed() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        let first = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        // Same manager, same fields: an apply that left fields out would remove them.
        let hb = expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("11")).await;
        assert_eq!(hb.content_type, "application/apply-patch+yaml");
        assert_eq!(hb.body["status"]["lastHeartbeatTime"], "2026-11-30T01:10:00Z");
        let mut same = hb.body.clone();
        same["status"]["lastHeartbeatTime"] = first.body["status"]["lastHeartbeatTime"].clone();
        assert_eq!(same, first.body, "only lastHeartbeatTime differs");
        h
    });
    // Nothing applied yet by this process: nothing to confirm, a pass must publish.
    let (c2, _h2) = common::client();
    assert!(!synced(c2).heartbeat("2026-11-30T01:00:00Z").await.unwrap());
    p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    assert!(p.heartbeat("2026-11-30T01:10:00Z").await.unwrap());
    assert!(p.last_write().is_some());
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn conflict_on_status_apply_is_retried_after_the_initial_backoff() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        let t0 = Instant::now();
        expect(&mut h, "PATCH", APPLY_STATUS, 409, status_err(409, "Conflict")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        h
    });
    let r = p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    assert!(r.status_applied);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn throttling_waits_as_long_as_the_server_asks() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        let mut throttled = status_err(429, "TooManyRequests");
        throttled["details"] = json!({"retryAfterSeconds": 3});
        expect(&mut h, "PATCH", APPLY_OBJ, 429, throttled).await;
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3), "Retry-After, not the 0.5 s backoff");
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        h
    });
    p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn server_errors_back_off_exponentially_then_succeed() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        let mut at = Vec::new();
        for code in [503, 500, 504] {
            expect(&mut h, "PATCH", APPLY_OBJ, code, status_err(code, "ServiceUnavailable")).await;
            at.push(t0.elapsed());
        }
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        at.push(t0.elapsed());
        // 0, then +0.5 s, +1 s, +2 s.
        assert_eq!(at, [0, 500, 1500, 3500].map(Duration::from_millis));
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        h
    });
    p.publish(st, "2026-11-30T01:00:00Z").await.unwrap();
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn persistent_server_errors_give_up_count_each_failure_and_the_next_pass_retries() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let errors = kube_rdma_operator::api::ApiRecord::default();
    let mut p = Publisher::new(client, NAME, errors.clone()).with_backoff(backoff());
    p.state_seen(Seen::Listed(None));
    p.node_seen(Seen::Listed(Some(node_meta("1", None))));
    let server = tokio::spawn(async move {
        let t0 = Instant::now();
        for _ in 0..5 {
            expect(&mut h, "PATCH", APPLY_OBJ, 500, status_err(500, "InternalError")).await;
        }
        assert_eq!(t0.elapsed(), Duration::from_millis(500 + 1000 + 2000 + 4000));
        // Next pass: nothing was recorded as written, so it starts over.
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("6")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        h
    });
    let e = p.publish(st.clone(), "2026-11-30T01:00:00Z").await.unwrap_err();
    assert_eq!(e.op, "apply rdmanodestates/cx6dx-dual");
    assert_eq!(e.code(), Some(500));
    assert_eq!(errors.snapshot().get("server"), Some(&5));
    let r = p.publish(st, "2026-11-30T01:00:30Z").await.unwrap();
    assert!(r.status_applied && r.label_patched);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn forbidden_is_not_retried() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = synced(client);
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

#[tokio::test]
async fn a_status_write_to_a_deleted_object_recreates_it_next_time() {
    let st = status_of(&example(NAME));
    let (client, mut h) = client();
    let mut p = Publisher::new(client, NAME, Default::default()).with_backoff(backoff());
    let server = tokio::spawn(async move {
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("5")).await;
        expect(&mut h, "PATCH", APPLY_STATUS, 404, status_err(404, "NotFound")).await;
        expect_with(&mut h, "PATCH", APPLY_OBJ, 200, stored("7")).await;
        expect_with(&mut h, "PATCH", APPLY_STATUS, 200, stored("8")).await;
        expect(&mut h, "PATCH", LABEL, 200, labelled("2", Some("true"))).await;
        h
    });
    assert!(p.publish(st.clone(), "2026-11-30T01:00:00Z").await.is_err());
    assert!(p.publish(st, "2026-11-30T01:00:30Z").await.unwrap().status_applied);
    server.await.unwrap();
}

#[test]
fn a_state_object_with_the_controllers_stale_mark_decodes() {
    let mut s = RdmaNodeState::new(NAME, RdmaNodeStateSpec { node_name: NAME.into() });
    s.status = Some(status_of(&example(NAME)));
    let mut v = serde_json::to_value(&s).unwrap();
    v["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Stale", "status": "True", "reason": "NoHeartbeat"}));
    let back: RdmaNodeState = serde_json::from_value(v).unwrap();
    assert_eq!(back.status.unwrap().conditions.len(), 4);
}
