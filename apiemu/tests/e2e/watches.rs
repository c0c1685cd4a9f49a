//! Watches: raw `Api::watch` semantics and `kube::runtime::watcher`
//! recovering from expiry and dropped connections.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube_rdma_apiemu::Emulator;
use serde_json::json;
use tokio::time::timeout;

use crate::common::{self, node};

const T: Duration = Duration::from_secs(10);

async fn emu_with_fast_bookmarks() -> Emulator {
    Emulator::builder().bookmark_interval(Duration::from_millis(100)).start().await.unwrap()
}

fn typed(v: serde_json::Value) -> Node {
    serde_json::from_value(v).unwrap()
}

/// Next non-bookmark event of a raw watch.
async fn next_event<S>(s: &mut S) -> WatchEvent<Node>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<Node>>> + Unpin,
{
    loop {
        match timeout(T, s.next()).await.expect("event in time").expect("stream open").expect("event decodes")
        {
            WatchEvent::Bookmark(_) => continue,
            e => return e,
        }
    }
}

fn name_of(e: &WatchEvent<Node>) -> (&'static str, String) {
    match e {
        WatchEvent::Added(n) => ("ADDED", n.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(n) => ("MODIFIED", n.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Deleted(n) => ("DELETED", n.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(_) => ("BOOKMARK", String::new()),
        WatchEvent::Error(e) => ("ERROR", e.reason.clone()),
    }
}

#[tokio::test]
async fn resource_version_zero_starts_with_the_current_objects() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    for n in ["a", "b"] {
        nodes.create(&PostParams::default(), &typed(node(n, json!({})))).await.unwrap();
    }
    let mut s = nodes.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "a".into()));
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "b".into()));
    nodes
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})))
        .await
        .unwrap();
    assert_eq!(name_of(&next_event(&mut s).await), ("MODIFIED", "a".into()));
    nodes.delete("b", &Default::default()).await.unwrap();
    assert_eq!(name_of(&next_event(&mut s).await), ("DELETED", "b".into()));
    assert_eq!(emu.log().open_watches(), 1);
}

#[tokio::test]
async fn a_resource_version_resumes_from_history_and_an_expired_one_gets_410() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let list_rv = nodes.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    nodes.create(&PostParams::default(), &typed(node("a", json!({})))).await.unwrap();
    nodes.create(&PostParams::default(), &typed(node("b", json!({})))).await.unwrap();
    let mut s = nodes.watch(&WatchParams::default(), &list_rv).await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "a".into()));
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "b".into()));

    emu.compact();
    let mut s = nodes.watch(&WatchParams::default(), &list_rv).await.unwrap().boxed();
    match next_event(&mut s).await {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(timeout(T, s.next()).await.unwrap().is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn selectors_apply_to_events_and_an_object_leaving_the_selection_is_deleted() {
    let emu = common::tls().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    nodes.create(&PostParams::default(), &typed(node("a", json!({"roce": "true"})))).await.unwrap();
    nodes.create(&PostParams::default(), &typed(node("b", json!({})))).await.unwrap();
    let mut s = nodes.watch(&WatchParams::default().labels("roce=true"), "0").await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "a".into()));
    let merge = |v| Patch::Merge(v);
    nodes
        .patch("b", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"roce": "true"}}})))
        .await
        .unwrap();
    assert_eq!(name_of(&next_event(&mut s).await), ("ADDED", "b".into()));
    nodes
        .patch("a", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"roce": null}}})))
        .await
        .unwrap();
    match next_event(&mut s).await {
        WatchEvent::Deleted(n) => {
            assert_eq!(n.metadata.name.as_deref(), Some("a"));
            assert_eq!(n.metadata.labels.unwrap()["roce"], "true", "the previous content");
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    let mut by_name =
        nodes.watch(&WatchParams::default().fields("metadata.name=b"), "0").await.unwrap().boxed();
    assert_eq!(name_of(&next_event(&mut by_name).await), ("ADDED", "b".into()));
    nodes
        .patch("a", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"z": "1"}}})))
        .await
        .unwrap();
    nodes
        .patch("b", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"z": "1"}}})))
        .await
        .unwrap();
    assert_eq!(name_of(&next_event(&mut by_name).await), ("MODIFIED", "b".into()));
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version_and_timeouts_end_streams() {
    let emu = emu_with_fast_bookmarks().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    let mut s = nodes.watch(&WatchParams::default().timeout(1), "0").await.unwrap().boxed();
    // Something else changes: the bookmark's resourceVersion moves past it.
    emu.store()
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}}))
        .unwrap();
    let want = emu.store().resource_version().to_string();
    let mut saw = false;
    while let Some(e) = timeout(T, s.next()).await.unwrap() {
        if let WatchEvent::Bookmark(b) = e.unwrap() {
            saw |= b.metadata.resource_version == want;
        }
    }
    assert!(saw, "a bookmark with resourceVersion {want}");
    // The stream ended by itself (timeoutSeconds=1), and the log says so.
    let rec = emu.log().records().into_iter().find(|r| r.watch).unwrap();
    assert!(rec.ended.is_some() && rec.query.contains("timeoutSeconds=1"));
    assert!(emu.log().stats().bookmarks_sent >= 1);
}

#[tokio::test]
async fn watcher_gets_init_done_then_updates() {
    let emu = emu_with_fast_bookmarks().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    nodes.create(&PostParams::default(), &typed(node("a", json!({})))).await.unwrap();
    let mut w = watcher::watcher(nodes.clone(), watcher::Config::default()).boxed();
    let mut init = Vec::new();
    loop {
        match timeout(T, w.try_next()).await.unwrap().unwrap().unwrap() {
            Event::Init => {}
            Event::InitApply(n) => init.push(n.metadata.name.unwrap()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(init, ["a"]);
    emu.store().create(node("b", json!({}))).unwrap();
    match timeout(T, w.try_next()).await.unwrap().unwrap().unwrap() {
        Event::Apply(n) => assert_eq!(n.metadata.name.as_deref(), Some("b")),
        other => panic!("unexpected {other:?}"),
    }

    // Another resource moves the resourceVersion on; the watcher learns it
    // from bookmarks (which it consumes silently) and resumes from it after
    // a dropped connection.
    let later = emu
        .store()
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}}))
        .unwrap();
    let later_rv = later["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let before = emu.log().stats().bookmarks_sent;
    let poll = timeout(Duration::from_millis(400), w.try_next()).await;
    assert!(poll.is_err(), "bookmarks are not surfaced as events: {poll:?}");
    assert!(emu.log().stats().bookmarks_sent > before);
    emu.disconnect_watches();
    emu.store().create(node("c", json!({}))).unwrap();
    loop {
        match timeout(T, w.try_next()).await.unwrap() {
            Ok(Some(Event::Apply(n))) => {
                assert_eq!(n.metadata.name.as_deref(), Some("c"));
                break;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => {}
        }
    }
    let resumed = emu.log().records().into_iter().rfind(|r| r.watch).unwrap();
    assert!(resumed.query.contains(&format!("resourceVersion={later_rv}")), "{}", resumed.query);
}

#[tokio::test]
async fn watcher_relists_after_expired_history_and_resumes_after_a_dropped_connection() {
    let emu = emu_with_fast_bookmarks().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.store().create(node("a", json!({}))).unwrap();
    let mut w = watcher::watcher(nodes, watcher::Config::default()).boxed();
    let mut next = async || {
        timeout(T, w.try_next()).await.expect("watcher event in time").map(|o| o.expect("stream open"))
    };
    // Initial list.
    loop {
        if let Ok(Event::InitDone) = next().await {
            break;
        }
    }
    let lists =
        |emu: &Emulator| emu.log().records().iter().filter(|r| !r.watch && r.path == "/api/v1/nodes").count();
    assert_eq!(lists(&emu), 1);

    // A dropped connection: the watcher re-watches from its resourceVersion, no relist.
    emu.disconnect_watches();
    emu.store().create(node("b", json!({}))).unwrap();
    loop {
        match next().await {
            Ok(Event::Apply(n)) => {
                assert_eq!(n.metadata.name.as_deref(), Some("b"));
                break;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => {} // the aborted stream surfaces as one error
        }
    }
    assert_eq!(lists(&emu), 1, "resumed without a relist");

    // The connection drops, a change happens and the history is compacted
    // while the watcher is away (it is not polled meanwhile): resuming gets
    // 410 Expired, and the watcher relists.
    emu.disconnect_watches();
    emu.store().create(node("c", json!({}))).unwrap();
    emu.compact();
    let mut saw_410 = false;
    let mut relisted = Vec::new();
    loop {
        match next().await {
            Err(watcher::Error::WatchError(s)) => saw_410 |= s.code == 410,
            Err(_) => {}
            Ok(Event::Init) => {}
            Ok(Event::InitApply(n)) => relisted.push(n.metadata.name.unwrap()),
            Ok(Event::InitDone) => break,
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_410, "the watch resumed from an expired resourceVersion got 410");
    assert_eq!(relisted, ["a", "b", "c"]);
    assert_eq!(lists(&emu), 2);
}

#[tokio::test]
async fn metadata_watcher_sees_partial_objects() {
    let emu = emu_with_fast_bookmarks().await;
    // kube 5's metadata watcher: an `Api<PartialObjectMeta<K>>` sends the
    // `as=PartialObjectMetadata` Accept header on its list and watch.
    let nodes: Api<PartialObjectMeta<Node>> = Api::all(common::client(&emu).await);
    let mut w = watcher::watcher(nodes, watcher::Config::default()).applied_objects().boxed();
    emu.store().create(node("a", json!({"k": "v"}))).unwrap();
    let m = timeout(T, w.try_next()).await.unwrap().unwrap().unwrap();
    assert_eq!(m.metadata.labels.unwrap()["k"], "v");
    assert!(m.metadata.resource_version.is_some());
}

#[tokio::test]
async fn streaming_lists_end_initial_events_with_a_bookmark() {
    let emu = emu_with_fast_bookmarks().await;
    let nodes: Api<Node> = Api::all(common::client(&emu).await);
    emu.store().create(node("a", json!({}))).unwrap();
    let mut w = watcher::watcher(nodes, watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    loop {
        match timeout(T, w.try_next()).await.unwrap().unwrap().unwrap() {
            Event::Init => seen.push("init".to_string()),
            Event::InitApply(n) => seen.push(n.metadata.name.unwrap()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["init", "a"]);
    let rec = emu.log().records().into_iter().find(|r| r.watch).unwrap();
    assert!(rec.query.contains("sendInitialEvents=true"));
    assert_eq!(emu.log().records().iter().filter(|r| !r.watch).count(), 0, "no list request");
}
