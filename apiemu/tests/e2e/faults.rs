//! Fault injection, each kind seen through the kube client.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use http::{Method, Request};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube_rdma_apiemu::{Emulator, Fault};
use serde_json::json;
use tokio::time::timeout;

use crate::common::{self, api_err, node};

const T: Duration = Duration::from_secs(10);

/// A client like `common::client` but without kube's default retry layer,
/// which retries 429, 503 and 504 (up to 15 times, honouring `Retry-After`).
async fn client_without_retries(emu: &Emulator) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(emu.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn status_faults_answer_with_the_real_reasons_then_retire() {
    let emu = common::tls().await;
    emu.store().create(node("n1", json!({}))).unwrap();
    let nodes: Api<Node> = Api::all(client_without_retries(&emu).await);
    let merge = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    for (fault, code, reason) in [
        (Fault::conflict(), 409, "Conflict"),
        (Fault::internal_error(), 500, "InternalError"),
        (Fault::unavailable(), 503, "ServiceUnavailable"),
        (Fault::status(504), 504, "Timeout"),
    ] {
        let id = emu.faults().add(fault.method(Method::PATCH).path("/api/v1/nodes/n1").times(1));
        let s = api_err(nodes.patch("n1", &PatchParams::default(), &merge).await);
        assert_eq!((s.code, s.reason.as_str()), (code, reason));
        assert_eq!(emu.faults().fired(id), 1);
        nodes.patch("n1", &PatchParams::default(), &merge).await.expect("the fault retired after one use");
    }
    // The matchers: a GET does not match a PATCH rule.
    emu.faults().add(Fault::internal_error().method(Method::PATCH));
    nodes.get("n1").await.unwrap();
    emu.faults().clear();
    nodes.patch("n1", &PatchParams::default(), &merge).await.unwrap();
}

#[tokio::test]
async fn too_many_requests_carries_retry_after() {
    let emu = common::tls().await;
    let client = client_without_retries(&emu).await;
    let id = emu.faults().add(Fault::too_many_requests(7).path_prefix("/api/v1/nodes"));
    let s = api_err(Api::<Node>::all(client.clone()).list(&ListParams::default()).await);
    assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(s.details.map(|d| d.retry_after_seconds), Some(7));
    let resp = client
        .send(Request::get("/api/v1/nodes").body(kube::client::Body::from(Vec::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    emu.faults().remove(id);
    assert_eq!(emu.faults().fired(id), 2);
    Api::<Node>::all(client).list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn the_default_client_waits_retry_after_and_retries() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.faults().add(Fault::too_many_requests(1).times(1));
    let t = Instant::now();
    nodes.list(&ListParams::default()).await.expect("kube retries a 429");
    assert!(t.elapsed() >= Duration::from_secs(1), "Retry-After honoured: {:?}", t.elapsed());
    let statuses: Vec<u16> = emu.log().records().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 200]);
}

#[tokio::test]
async fn a_dropped_connection_is_a_transport_error_and_the_next_request_reconnects() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.faults().add(Fault::drop_connection().not_watches().times(1));
    match nodes.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => panic!("expected a transport error, got API status {s:?}"),
        Err(_) => {}
        Ok(l) => panic!("expected a dropped connection, got {l:?}"),
    }
    nodes.list(&ListParams::default()).await.unwrap();
    let statuses: Vec<u16> = emu.log().records().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [0, 200], "the dropped request is logged without an answer");
}

#[tokio::test]
async fn a_watch_is_dropped_after_k_events() {
    let emu = common::tls().await;
    for n in ["a", "b", "c"] {
        emu.store().create(node(n, json!({}))).unwrap();
    }
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.faults().add(Fault::drop_watch_after(2).times(1));
    let s = nodes.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap();
    // kube ends a watch stream cut mid-body like a finished one (it logs
    // "eof in poll" and lets the caller resume); `cut_watches_lack_the_last_chunk`
    // shows the cut on the wire.
    let events: Vec<_> = timeout(T, s.collect::<Vec<_>>()).await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| matches!(e, Ok(WatchEvent::Added(_)))));
    assert_eq!(emu.log().open_watches(), 0);
}

/// Raw HTTP/1.1 on a plain-HTTP emulator: a cut watch stops without the
/// chunked body's terminating `0` chunk; a watch that times out ends with it.
#[tokio::test]
async fn cut_watches_lack_the_last_chunk() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let emu = Emulator::builder().plain_http().start().await.unwrap();
    emu.store().create(node("a", json!({}))).unwrap();
    let raw = |query: &str| {
        let (addr, token, query) = (emu.addr(), emu.token().to_string(), query.to_string());
        async move {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!("GET /api/v1/nodes?{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
            tcp.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            timeout(T, tcp.read_to_end(&mut out)).await.unwrap().unwrap();
            String::from_utf8(out).unwrap()
        }
    };
    emu.faults().add(Fault::drop_watch_after(1).times(1));
    let cut = raw("watch=true&resourceVersion=0").await;
    assert!(cut.starts_with("HTTP/1.1 200 OK\r\n") && cut.contains("transfer-encoding: chunked"), "{cut}");
    assert!(cut.contains("\"type\":\"ADDED\""), "{cut}");
    assert!(!cut.ends_with("\r\n0\r\n\r\n"), "cut without the last chunk: {cut:?}");
    let timed_out = raw("watch=true&resourceVersion=0&timeoutSeconds=1").await;
    assert!(timed_out.ends_with("\r\n0\r\n\r\n"), "clean end: {timed_out:?}");
}

#[tokio::test]
async fn a_watch_can_end_with_410_gone() {
    let emu = common::tls().await;
    emu.store().create(node("a", json!({}))).unwrap();
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.faults().add(Fault::expire_watch_after(1).times(1));
    let events: Vec<_> = timeout(
        T,
        nodes.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap().collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert!(matches!(events[0], Ok(WatchEvent::Added(_))));
    match &events[1] {
        Ok(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn latency_delays_matching_requests() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    nodes.list(&ListParams::default()).await.unwrap();
    emu.faults().add(Fault::latency(Duration::from_millis(300)).method(Method::GET).times(1));
    let t = Instant::now();
    nodes.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300), "took {:?}", t.elapsed());
    assert_eq!(emu.log().stats().faults_fired, 1);
}

#[tokio::test]
async fn the_watcher_survives_repeated_watch_failures() {
    let emu = Emulator::builder().bookmark_interval(Duration::from_millis(100)).start().await.unwrap();
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let mut w = watcher::watcher(nodes, watcher::Config::default()).boxed();
    loop {
        if let Ok(watcher::Event::InitDone) = timeout(T, w.try_next()).await.unwrap().transpose().unwrap() {
            break;
        }
    }
    // 500 on watch start (kube does not retry it) twice, then two watches
    // cut right after their response head.
    let failing = emu.faults().add(Fault::internal_error().watches().times(2));
    let cut = emu.faults().add(Fault::drop_watch_after(0).times(2));
    emu.disconnect_watches();
    emu.store().create(node("late", json!({}))).unwrap();
    // Only the two 500s surface as errors: kube reads the cut streams as ends
    // and re-watches.
    let mut errors = 0;
    let got = loop {
        match timeout(T, w.try_next()).await.expect("in time") {
            Ok(Some(watcher::Event::Apply(n))) => break n,
            Ok(Some(other)) => panic!("unexpected {other:?}"),
            Ok(None) => panic!("watcher ended"),
            Err(_) => errors += 1,
        }
    };
    assert_eq!(got.metadata.name.as_deref(), Some("late"));
    assert_eq!((emu.faults().fired(failing), emu.faults().fired(cut)), (2, 2));
    assert_eq!(errors, 2);
}
