//! The controller against a scripted API server (tower-test): profile status by
//! server-side apply, deletion of node states whose node is gone, silence when
//! nothing changed, and retry on conflict.
mod common;

use std::time::Duration;

use common::{client, expect, expect_with, list, node, status_err};
use kube_rdma_operator::agent::Backoff;
use kube_rdma_operator::controller::{orphans, profile_status, Controller};
use kube_rdma_operator::crd::{RdmaNodeState, RoceProfile, RoceProfileStatus};
use serde_json::{json, Value};
use tokio::time::Instant;

const NODES: &str = "/api/v1/nodes?";
const PROFILES: &str = "/apis/kuberdma.io/v1alpha1/roceprofiles?";
const STATES: &str = "/apis/kuberdma.io/v1alpha1/rdmanodestates?";
const P1_STATUS: &str =
    "/apis/kuberdma.io/v1alpha1/roceprofiles/gpu/status?&force=true&fieldManager=kube-rdma-controller";
const DEL_GONE: &str = "/apis/kuberdma.io/v1alpha1/rdmanodestates/gone?";

fn profile(status: Option<Value>) -> Value {
    let mut p = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile",
        "metadata": {"name": "gpu", "resourceVersion": "3"},
        "spec": {"nodeSelector": {"gpu": "yes"}, "mode": "Audit", "pfc": {"priorities": [3]}}});
    if let Some(s) = status {
        p["status"] = s;
    }
    p
}

fn state(name: &str, results: &[&str]) -> Value {
    let checks: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("c{i}"), "interface": "ens1", "result": r, "expected": "x", "actual": "y"}))
        .collect();
    json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": name},
           "spec": {"nodeName": name}, "status": {"checks": checks}})
}

fn nodes() -> Value {
    list(
        "v1",
        "Node",
        vec![
            node("a", json!({"gpu": "yes"})),
            node("b", json!({"gpu": "yes"})),
            node("c", json!({"gpu": "yes"})),
            node("cpu", json!({})),
        ],
    )
}

fn states() -> Value {
    list(
        "kuberdma.io/v1alpha1",
        "RdmaNodeState",
        vec![
            state("a", &["Pass", "Unsupported"]),
            state("b", &["Pass", "Fail"]),
            state("cpu", &["Fail"]),
            state("gone", &["Pass"]),
        ],
    )
}

fn want() -> Value {
    json!({"nodesMatched": 3, "nodesCompliant": 1, "nodesDrifted": 1, "nodesUnreported": 1, "drifted": ["b"]})
}

#[test]
fn profile_status_counts_matched_compliant_drifted_and_unreported() {
    let p: RoceProfile = serde_json::from_value(profile(None)).unwrap();
    let n: Vec<k8s_openapi::api::core::v1::Node> = serde_json::from_value(nodes()["items"].clone()).unwrap();
    let s: Vec<RdmaNodeState> = serde_json::from_value(states()["items"].clone()).unwrap();
    let st = profile_status(&p, &n, &s);
    assert_eq!(serde_json::to_value(&st).unwrap(), want());
    assert_eq!(orphans(&n, &s), ["gone"]);
    let _: RoceProfileStatus = st;
}

#[tokio::test]
async fn a_pass_applies_profile_status_and_deletes_states_of_deleted_nodes() {
    let (client, mut h) = client();
    let ctl = Controller::new(client);
    let server = tokio::spawn(async move {
        expect(&mut h, "GET", NODES, 200, nodes()).await;
        expect(
            &mut h,
            "GET",
            PROFILES,
            200,
            list("kuberdma.io/v1alpha1", "RoceProfile", vec![profile(None)]),
        )
        .await;
        expect(&mut h, "GET", STATES, 200, states()).await;
        let st = expect_with(&mut h, "PATCH", P1_STATUS, 200, |_| profile(Some(want()))).await;
        assert_eq!(st.content_type, "application/apply-patch+yaml");
        assert_eq!(
            st.body,
            json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "status": want()})
        );
        let del = expect(
            &mut h,
            "DELETE",
            DEL_GONE,
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}),
        )
        .await;
        assert_eq!(del.method, "DELETE");
        // Second pass: the profile already has this status and `gone` is gone.
        expect(&mut h, "GET", NODES, 200, nodes()).await;
        expect(
            &mut h,
            "GET",
            PROFILES,
            200,
            list("kuberdma.io/v1alpha1", "RoceProfile", vec![profile(Some(want()))]),
        )
        .await;
        let mut s = states();
        s["items"].as_array_mut().unwrap().pop();
        expect(&mut h, "GET", STATES, 200, s).await;
        h
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.statuses_written, ["gpu"]);
    assert_eq!(p.deleted, ["gone"]);
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p, Default::default());
    let mut h = server.await.unwrap();
    drop(ctl);
    assert!(h.next_request().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn conflict_is_retried_and_a_state_already_gone_counts_as_deleted() {
    let (client, mut h) = client();
    let ctl = Controller::new(client).with_backoff(Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(4),
        attempts: 3,
    });
    let server = tokio::spawn(async move {
        expect(&mut h, "GET", NODES, 503, status_err(503, "ServiceUnavailable")).await;
        let t0 = Instant::now();
        expect(&mut h, "GET", NODES, 200, nodes()).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        expect(
            &mut h,
            "GET",
            PROFILES,
            200,
            list("kuberdma.io/v1alpha1", "RoceProfile", vec![profile(None)]),
        )
        .await;
        expect(&mut h, "GET", STATES, 200, states()).await;
        expect(&mut h, "PATCH", P1_STATUS, 409, status_err(409, "Conflict")).await;
        let t1 = Instant::now();
        expect_with(&mut h, "PATCH", P1_STATUS, 200, |_| profile(Some(want()))).await;
        assert_eq!(t1.elapsed(), Duration::from_secs(1));
        expect(&mut h, "DELETE", DEL_GONE, 404, status_err(404, "NotFound")).await;
        h
    });
    let p = ctl.reconcile().await.unwrap();
    assert_eq!(p.deleted, ["gone"]);
    server.await.unwrap();
}
