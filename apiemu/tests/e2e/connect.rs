//! Connecting: TLS with the kubeconfig's CA (the ring provider), plain
//! HTTP, contexts, tokens, discovery.

use std::time::Duration;

use http::Request;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::discovery::Discovery;
use kube_rdma_apiemu::Emulator;
use serde_json::json;

use crate::common::{self, api_err};

/// Issue 10: with `rustls-tls` and no provider, `Client::try_default`
/// panicked ("Could not automatically determine the process-level
/// CryptoProvider"). This builds it exactly as the binaries do, from
/// `KUBECONFIG`. (The only test that sets `KUBECONFIG`; the others pass the
/// path explicitly.)
#[tokio::test]
async fn client_try_default_connects_over_tls_from_kubeconfig_env() {
    let emu = common::tls().await;
    assert!(emu.url().starts_with("https://127.0.0.1:"));
    std::env::set_var("KUBECONFIG", emu.kubeconfig_path());
    let client = kube::Client::try_default().await.expect("client from KUBECONFIG");
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, ["default", "kube-node-lease", "kube-public", "kube-system", "other"]);
    assert_eq!(client.default_namespace(), "default");
}

#[tokio::test]
async fn plain_http_mode_writes_an_http_kubeconfig() {
    let emu = Emulator::builder().plain_http().start().await.unwrap();
    assert!(emu.url().starts_with("http://"));
    assert!(emu.ca_pem().is_none());
    assert!(!emu.kubeconfig_yaml().contains("certificate-authority-data"));
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    nodes
        .create(&PostParams::default(), &serde_json::from_value(common::node("n1", json!({}))).unwrap())
        .await
        .unwrap();
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn the_other_context_uses_its_own_user_and_namespace() {
    let emu = common::tls().await;
    let client = common::client_for(&emu, Some(kube_rdma_apiemu::OTHER_CONTEXT)).await;
    assert_eq!(client.default_namespace(), "other");
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap())
        .await
        .unwrap();
    assert!(emu.store().get("pods", Some("other"), "p").unwrap().is_some());
    let users: Vec<String> = emu.log().records().into_iter().map(|r| r.user).collect();
    assert_eq!(users, ["other"]);
}

#[tokio::test]
async fn a_wrong_token_gets_401_unauthorized() {
    let emu = common::tls().await;
    let text = emu.kubeconfig_yaml().replace(emu.token(), "not-the-token");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let s = api_err(Api::<Node>::all(client.clone()).list(&ListParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    // Even the public paths refuse a wrong token, as authentication runs first.
    let r = client.request_text(Request::get("/healthz").body(vec![]).unwrap()).await;
    assert_eq!(api_err(r).code, 401);
    assert_eq!(emu.log().records()[0].status, 401);
}

#[tokio::test]
async fn without_a_token_only_health_and_version_are_readable() {
    let emu = common::tls().await;
    let kubeconfig = kube::config::Kubeconfig::read_from(emu.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.auth_info.token = None;
    let client = kube::Client::try_from(config).unwrap();
    assert_eq!(client.request_text(Request::get("/healthz").body(vec![]).unwrap()).await.unwrap(), "ok");
    assert_eq!(client.apiserver_version().await.unwrap().minor, "34");
    let s = api_err(Api::<Node>::all(client).list(&ListParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn discovery_serves_the_resource_table() {
    let emu = common::tls().await;
    let client = common::client(&emu).await;
    let discovery = Discovery::new(client).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "rdmanodestates")
        .expect("rdmanodestates discovered");
    assert_eq!(
        (ar.group.as_str(), ar.version.as_str(), ar.kind.as_str()),
        ("kuberdma.io", "v1alpha1", "RdmaNodeState")
    );
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    for (group, plural) in [
        ("", "nodes"),
        ("", "pods"),
        ("events.k8s.io", "events"),
        ("coordination.k8s.io", "leases"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("kuberdma.io", "roceprofiles"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "deviceclasses"),
    ] {
        assert!(
            discovery
                .groups()
                .flat_map(|g| g.recommended_resources())
                .any(|(ar, _)| ar.group == group && ar.plural == plural),
            "{group}/{plural} discovered"
        );
    }
}

#[test]
fn a_background_emulator_serves_synchronous_tests() {
    let emu = Emulator::builder().start_background().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let nodes: Api<Node> = Api::all(common::client(&emu).await);
        nodes
            .create(&PostParams::default(), &serde_json::from_value(common::node("bg", json!({}))).unwrap())
            .await
            .unwrap();
    });
    let got =
        emu.store().wait_for_blocking("nodes", None, "bg", Duration::from_secs(5), |o| o.is_some()).unwrap();
    assert_eq!(got.unwrap()["metadata"]["name"], "bg");
    let path = emu.kubeconfig_path().to_path_buf();
    drop(emu);
    assert!(!path.exists(), "the temporary kubeconfig goes with the emulator");
}
