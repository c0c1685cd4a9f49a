//! Every verb through the kube client, with the real server's semantics.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use serde_json::json;

use crate::common::{self, api_err, node, rns, rns_api};

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn create_get_replace_delete_with_conflicts_and_not_found() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let pp = PostParams::default();
    let n = nodes.create(&pp, &typed(node("n1", json!({"a": "1"})))).await.unwrap();
    let meta = &n.metadata;
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.uid.as_ref().map(String::len), Some(36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_ref().unwrap().parse().unwrap();

    let s = api_err(nodes.create(&pp, &typed(node("n1", json!({})))).await);
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (409, "AlreadyExists", "nodes \"n1\" already exists")
    );
    assert_eq!(s.details.as_ref().map(|d| (d.name.as_str(), d.kind.as_str())), Some(("n1", "nodes")));

    let mut got = nodes.get("n1").await.unwrap();
    got.metadata.labels.get_or_insert_default().insert("b".into(), "2".into());
    let replaced = nodes.replace("n1", &pp, &got).await.unwrap();
    let rv2: u64 = replaced.metadata.resource_version.as_ref().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    assert_eq!(replaced.metadata.uid, n.metadata.uid);

    // `got` still carries rv1: optimistic concurrency refuses it.
    let s = api_err(nodes.replace("n1", &pp, &got).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    let mut unconditional = got.clone();
    unconditional.metadata.resource_version = None;
    nodes.replace("n1", &pp, &unconditional).await.expect("nodes allow unconditional updates");
    assert!(s.message.contains("the object has been modified"), "{}", s.message);

    let s = api_err(nodes.get("nope").await);
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (404, "NotFound", "nodes \"nope\" not found")
    );
    assert!(nodes.get_opt("nope").await.unwrap().is_none());

    let deleted = nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().and_then(|n| n.metadata.name).as_deref(), Some("n1"));
    assert_eq!(api_err(nodes.delete("n1", &DeleteParams::default()).await).code, 404);
}

#[tokio::test]
async fn delete_preconditions_and_finalizers() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let mut n: serde_json::Value = node("n1", json!({}));
    n["metadata"]["finalizers"] = json!(["kuberdma.io/cleanup"]);
    nodes.create(&PostParams::default(), &typed(n)).await.unwrap();
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions { uid: Some("wrong".into()), resource_version: None }),
        ..Default::default()
    };
    assert_eq!(api_err(nodes.delete("n1", &dp).await).code, 409);
    let marked = nodes.delete("n1", &DeleteParams::default()).await.unwrap().left().unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some(), "a finalizer keeps the object");
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert!(nodes.get_opt("n1").await.unwrap().is_none(), "removing the last finalizer deletes it");
}

#[tokio::test]
async fn server_side_apply_creates_updates_and_drops_fields_it_no_longer_applies() {
    let emu = common::tls().await;
    let api = rns_api(common::client(&emu).await);
    let pp = PatchParams::apply("kube-rdma-agent").force();
    let first = rns("n1", json!({"nodeName": "n1", "pfc": [3], "extra": {"a": 1}}));
    let created = api.patch("n1", &pp, &Patch::Apply(&first)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["extra"]["a"], 1);
    let mf = created.metadata.managed_fields.as_ref().unwrap();
    assert_eq!(
        (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
        (Some("kube-rdma-agent"), Some("Apply"))
    );

    // Another client adds a field the agent never applied; it must survive.
    api.patch("n1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"note": "ops"}}))).await.unwrap();

    let second = rns("n1", json!({"nodeName": "n1", "pfc": [3, 4]}));
    let updated = api.patch("n1", &pp, &Patch::Apply(&second)).await.unwrap();
    assert_eq!(updated.data["spec"], json!({"nodeName": "n1", "pfc": [3, 4], "note": "ops"}));
    assert_eq!(updated.metadata.generation, Some(3));

    // The same configuration again is a no-op: no new resourceVersion.
    let again = api.patch("n1", &pp, &Patch::Apply(&second)).await.unwrap();
    assert_eq!(again.metadata.resource_version, updated.metadata.resource_version);

    // Apply without a field manager is refused, as the real server does.
    let s = api_err(api.patch("n1", &PatchParams::default(), &Patch::Apply(&second)).await);
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn status_subresource_separates_spec_and_status_writes() {
    let emu = common::tls().await;
    let api = rns_api(common::client(&emu).await);
    let pp = PatchParams::apply("agent").force();
    let mut with_status = rns("n1", json!({"nodeName": "n1"}));
    with_status["status"] = json!({"ready": true});
    let created = api.patch("n1", &pp, &Patch::Apply(&with_status)).await.unwrap();
    assert!(created.data.get("status").is_none(), "status in a main-resource apply is ignored");

    let status_cfg = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": "n1"},
        "spec": {"nodeName": "ignored"}, "status": {"ready": true, "checks": [{"name": "pfc", "result": "Pass"}]}});
    let after = api.patch_status("n1", &pp, &Patch::Apply(&status_cfg)).await.unwrap();
    assert_eq!(after.data["status"]["ready"], true);
    assert_eq!(after.data["spec"]["nodeName"], "n1", "a /status write changes only status");
    assert_eq!(after.metadata.generation, Some(1), "status changes do not bump generation");

    let merged = api
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(json!({"status": {"ready": false}})))
        .await
        .unwrap();
    assert_eq!(merged.data["status"]["ready"], false);
    assert_eq!(merged.data["status"]["checks"][0]["name"], "pfc");

    // The status manager stops applying `checks`: it is removed.
    let fewer = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": "n1"}, "status": {"ready": true}});
    let after = api.patch_status("n1", &pp, &Patch::Apply(&fewer)).await.unwrap();
    assert_eq!(after.data["status"], json!({"ready": true}));

    let got = api.get_status("n1").await.unwrap();
    assert_eq!(got.data["status"]["ready"], true);

    // PUT on /status with the current object, then a merge patch on the main resource that tries status.
    let mut obj = got.clone();
    obj.data["status"]["ready"] = json!(false);
    obj.data["spec"]["nodeName"] = json!("changed-by-status-put");
    let put = api.replace_status("n1", &PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        (put.data["status"]["ready"].clone(), put.data["spec"]["nodeName"].clone()),
        (json!(false), json!("n1"))
    );
    // Custom resources refuse a PUT without resourceVersion (422); nodes take it.
    let mut unconditional = put.clone();
    unconditional.metadata.resource_version = None;
    let s = api_err(api.replace_status("n1", &PostParams::default(), &unconditional).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    let main = api
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"x": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(main.data["status"]["ready"], false, "a main-resource write ignores status");
    assert_eq!(main.metadata.generation, Some(2));
    assert_eq!(api_err(api.get_status("nope").await).code, 404);
}

#[tokio::test]
async fn merge_strategic_and_json_patches() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let mut n = node("n1", json!({"a": "1", "b": "2"}));
    n["spec"] = json!({"taints": [{"key": "k", "effect": "NoSchedule"}]});
    nodes.create(&PostParams::default(), &typed(n)).await.unwrap();
    let pp = PatchParams::default();

    let m = nodes
        .patch("n1", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": null, "c": "3"}}})))
        .await
        .unwrap();
    let labels = m.metadata.labels.unwrap();
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["b", "c"]);

    let s = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"taints": [{"key": "x", "effect": "NoExecute"}], "unschedulable": true}}),
            ),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.taints.unwrap().iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), ["x"]);
    assert_eq!(spec.unschedulable, Some(true));

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/unschedulable", "value": true},
        {"op": "replace", "path": "/spec/unschedulable", "value": false},
    ]))
    .unwrap();
    let j = nodes.patch("n1", &pp, &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(j.spec.unwrap().unschedulable, Some(false));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/unschedulable", "value": true}]))
            .unwrap();
    assert_eq!(api_err(nodes.patch("n1", &pp, &Patch::Json::<()>(failing)).await).code, 422);
    assert_eq!(api_err(nodes.patch("nope", &pp, &Patch::Merge(json!({}))).await).code, 404);
}

#[tokio::test]
async fn generation_moves_with_spec_only() {
    let emu = common::tls().await;
    let api = rns_api(common::client(&emu).await);
    let pp = PatchParams::apply("t").force();
    api.patch("g", &pp, &Patch::Apply(rns("g", json!({"x": 1})))).await.unwrap();
    let pp_merge = PatchParams::default();
    let labels = api
        .patch(
            "g",
            &pp_merge,
            &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}, "annotations": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labels.metadata.generation, Some(1));
    let status = api.patch_status("g", &pp_merge, &Patch::Merge(json!({"status": {"s": 1}}))).await.unwrap();
    assert_eq!(status.metadata.generation, Some(1));
    let spec = api.patch("g", &pp_merge, &Patch::Merge(json!({"spec": {"x": 2}}))).await.unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
    let same = api.patch("g", &pp_merge, &Patch::Merge(json!({"spec": {"x": 2}}))).await.unwrap();
    assert_eq!(
        (same.metadata.generation, same.metadata.resource_version),
        (Some(2), spec.metadata.resource_version)
    );
}

#[tokio::test]
async fn metadata_only_get_and_list() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    for i in 0..3 {
        let mut n = node(&format!("n{i}"), json!({"i": i.to_string()}));
        n["spec"] = json!({"podCIDR": "10.0.0.0/24"});
        nodes.create(&PostParams::default(), &typed(n)).await.unwrap();
    }
    let m = nodes.get_metadata("n1").await.unwrap();
    assert_eq!(m.metadata.labels.unwrap()["i"], "1");
    let list = nodes.list_metadata(&ListParams::default().labels("i!=0")).await.unwrap();
    assert_eq!(list.items.iter().filter_map(|m| m.metadata.name.clone()).collect::<Vec<_>>(), ["n1", "n2"]);
    // The wire format really is metadata-only.
    let r = emu.log().records();
    assert!(r.iter().all(|r| r.status < 300));
    let raw = common::client(&emu)
        .await
        .request_text(
            http::Request::get("/api/v1/nodes/n1")
                .header("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
                .body(vec![])
                .unwrap(),
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!((v["kind"].as_str(), v.get("spec")), (Some("PartialObjectMetadata"), None));
}

#[tokio::test]
async fn label_and_field_selectors_and_paging() {
    let emu = common::tls().await;
    let client = common::client(&emu).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, pool) in [("a", "x"), ("b", "y"), ("c", "x"), ("d", "z"), ("e", "")] {
        let labels = if pool.is_empty() { json!({}) } else { json!({"pool": pool}) };
        nodes.create(&PostParams::default(), &typed(node(name, labels))).await.unwrap();
    }
    let names = |l: kube::api::ObjectList<Node>| {
        l.items.into_iter().filter_map(|n| n.metadata.name).collect::<Vec<_>>()
    };
    let cases = [
        ("pool=x", vec!["a", "c"]),
        ("pool!=x", vec!["b", "d", "e"]),
        ("pool in (y,z)", vec!["b", "d"]),
        ("pool notin (x)", vec!["b", "d", "e"]),
        ("pool", vec!["a", "b", "c", "d"]),
        ("!pool", vec!["e"]),
    ];
    for (sel, want) in cases {
        assert_eq!(names(nodes.list(&ListParams::default().labels(sel)).await.unwrap()), want, "{sel}");
    }
    assert_eq!(names(nodes.list(&ListParams::default().fields("metadata.name=c")).await.unwrap()), ["c"]);
    assert_eq!(api_err(nodes.list(&ListParams::default().labels("pool in x")).await).code, 400);
    assert_eq!(api_err(nodes.list(&ListParams::default().fields("spec.bogus=1")).await).code, 400);

    // Pages of 2: the client follows `continue` to the end.
    let page1 = nodes.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page1.metadata.remaining_item_count, Some(3));
    let token = page1.metadata.continue_.clone().unwrap();
    let page2 = nodes.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(names(page2), ["c", "d"]);

    // Namespaced lists, all-namespace lists and field selectors on pods.
    let pods_default: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pods_other: Api<Pod> = Api::namespaced(client.clone(), "other");
    pods_default
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "p1"}, "spec": {"nodeName": "a", "containers": []}})),
        )
        .await
        .unwrap();
    pods_other
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "p2"}, "spec": {"nodeName": "b", "containers": []}})),
        )
        .await
        .unwrap();
    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 2);
    assert_eq!(pods_other.list(&ListParams::default()).await.unwrap().items.len(), 1);
    let on_b = all.list(&ListParams::default().fields("spec.nodeName=b")).await.unwrap();
    assert_eq!(on_b.items[0].metadata.name.as_deref(), Some("p2"));
    let s = api_err(
        Api::<Pod>::namespaced(client, "nope")
            .create(&PostParams::default(), &typed(json!({"metadata": {"name": "p"}})))
            .await,
    );
    assert_eq!((s.code, s.message.as_str()), (404, "namespaces \"nope\" not found"));
}

#[tokio::test]
async fn delete_collection_by_label() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    for (name, l) in [("a", "x"), ("b", "y"), ("c", "x")] {
        nodes.create(&PostParams::default(), &typed(node(name, json!({"l": l})))).await.unwrap();
    }
    let gone = nodes
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("l=x"))
        .await
        .unwrap();
    assert_eq!(gone.left().unwrap().items.len(), 2);
    assert_eq!(emu.store().list("nodes", None).unwrap().len(), 1);
}

#[tokio::test]
async fn events_are_recorded_through_events_k8s_io() {
    let emu = common::tls().await;
    let client = common::client(&emu).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.create(&PostParams::default(), &typed(node("n1", json!({})))).await.unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter { controller: "kube-rdma-agent".into(), instance: Some("n1".into()) },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Drift".into(),
        note: Some("pfc differs".into()),
        action: "Check".into(),
        secondary: None,
    };
    recorder.publish(&ev, &n.object_ref(&())).await.unwrap();
    recorder.publish(&ev, &n.object_ref(&())).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(
        (e.reason.as_deref(), e.regarding.as_ref().and_then(|r| r.name.as_deref())),
        (Some("Drift"), Some("n1"))
    );
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2), "the repeat is a merge patch adding a series");
}

#[tokio::test]
async fn leases_and_test_side_writes() {
    let emu = common::tls().await;
    let leases: Api<Lease> = Api::namespaced(common::client(&emu).await, "kube-node-lease");
    let l = leases
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}})),
        )
        .await
        .unwrap();
    // A test changes the object as another client would; the client sees it.
    emu.store()
        .update("leases", Some("kube-node-lease"), "n1", |o| o["spec"]["holderIdentity"] = json!("thief"))
        .unwrap();
    let got = leases.get("n1").await.unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("thief"));
    assert_ne!(got.metadata.resource_version, l.metadata.resource_version);
    emu.store().delete("leases", Some("kube-node-lease"), "n1").unwrap();
    assert!(leases.get_opt("n1").await.unwrap().is_none());
    let raw = emu.store().put(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n2", "namespace": "kube-node-lease"}})).unwrap();
    assert_eq!(raw["metadata"]["generation"], 1);
    let w = emu
        .store()
        .wait_for("leases", Some("kube-node-lease"), "n2", Duration::from_millis(50), |o| o.is_none())
        .await;
    assert!(w.is_err(), "wait_for times out when the condition never holds");
}
