//! Many watches on one emulator: every one of 1100 open watches (over TLS,
//! one connection each, as 1000+ agents hold them) receives an update.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, WatchEvent, WatchParams};
use kube::discovery::ApiResource;
use serde_json::json;
use tokio::time::timeout;

use crate::common;

const WATCHES: usize = 1100;

/// 1100 watches need 2200+ descriptors when client and server share a process.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    assert!(
        lim.rlim_cur >= 2 * WATCHES as u64 + 200,
        "open-file limit {} is too low for {WATCHES} watches",
        lim.rlim_cur
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eleven_hundred_watches_all_receive_an_update() {
    raise_fd_limit();
    let emu = common::tls().await;
    emu.store()
        .create(json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": "p"}, "spec": {"mtu": 4200}}))
        .unwrap();
    let client = common::client(&emu).await;
    let ar = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kuberdma.io", "v1alpha1", "RoceProfile"),
        "roceprofiles",
    );
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let rv = api.get("p").await.unwrap().metadata.resource_version.unwrap();
    let streams = futures::future::join_all((0..WATCHES).map(|_| {
        let api = api.clone();
        let rv = rv.clone();
        async move { api.watch(&WatchParams::default(), &rv).await.expect("watch opens").boxed() }
    }))
    .await;
    assert_eq!(emu.log().open_watches(), WATCHES as u64);

    api.patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"mtu": 9000}}))).await.unwrap();
    let received = futures::future::join_all(streams.into_iter().map(|mut s| async move {
        loop {
            match timeout(Duration::from_secs(60), s.next()).await {
                Ok(Some(Ok(WatchEvent::Modified(o)))) => return o.data["spec"]["mtu"] == 9000,
                Ok(Some(Ok(WatchEvent::Bookmark(_)))) => continue,
                _ => return false,
            }
        }
    }))
    .await;
    assert_eq!(received.iter().filter(|ok| **ok).count(), WATCHES);
    assert_eq!(emu.log().events_sent(), WATCHES as u64);
}
