//! `kubectl rdma status` against a scripted API server: the table shows failing
//! checks with their remediation, per node and interface.
mod common;

use common::{client, expect, list};
use kube_rdma_operator::agent::evaluate;
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::{RdmaNodeState, RdmaNodeStateSpec};
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::view::{status, Detail};
use serde_json::json;

fn state(desc: &nic::simdesc::NodeDesc) -> serde_json::Value {
    let n = SimNode::new(desc);
    let mut s = RdmaNodeState::new(&desc.node, RdmaNodeStateSpec { node_name: desc.node.clone() });
    s.status = Some(evaluate(&default_profile(), &n.read()));
    serde_json::to_value(s).unwrap()
}

#[tokio::test]
async fn status_of_all_nodes_lists_problems_and_remediation() {
    let (client, mut h) = client();
    let bad = state(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![]));
    let good = state(&example("e810-xxv"));
    let server = tokio::spawn(async move {
        let items = vec![
            good,
            bad,
            json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": "new"}, "spec": {"nodeName": "new"}}),
        ];
        expect(
            &mut h,
            "GET",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates?",
            200,
            list("kuberdma.io/v1alpha1", "RdmaNodeState", items),
        )
        .await;
    });
    let out = status(client, None, Detail::Problems).await.unwrap();
    server.await.unwrap();
    let cx = out.find("NODE cx6dx-dual").unwrap();
    let e8 = out.find("NODE e810-xxv").unwrap();
    assert!(cx < e8, "sorted by node name:\n{out}");
    assert!(out.contains("NODE cx6dx-dual  profile default (Audit)  READY False"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("ens1f0np0  pfc ") && l.contains("Fail")), "{out}");
    assert!(out.contains("  ens1f0np0 pfc: dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on"), "{out}");
    // Problems only: passing checks are not listed; Unsupported ones are.
    assert!(!out.lines().any(|l| l.starts_with("ens1f0np0  mtu ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("ens2f0     ecn ") && l.contains("Unsupported")), "{out}");
    assert!(out.contains("NODE new  (no status yet)"), "{out}");
}

#[tokio::test]
async fn status_of_one_missing_node_is_a_not_found_error() {
    let (client, mut h) = client();
    let server = tokio::spawn(async move {
        expect(
            &mut h,
            "GET",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates/nope",
            404,
            common::status_err(404, "NotFound"),
        )
        .await;
    });
    let e = status(client, Some("nope"), Detail::All).await.unwrap_err();
    server.await.unwrap();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e:?}");
}
