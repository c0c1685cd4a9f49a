//! Watch fan-out through the emulator with the real kube client over TLS:
//! start-up cost, opening 1000 watches, one update reaching all of them
//! (against the same update reaching one watch, measured in the same run),
//! and 1000 agents each watching their own Node while every Node changes.
//!
//! `cargo bench -p kube-rdma-apiemu --bench watch_fanout`
//! (`APIEMU_BENCH_WATCHES=N` changes the 1000.)

use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, WatchEvent, WatchParams,
};
use kube::config::Kubeconfig;
use kube_rdma_apiemu::Emulator;
use serde_json::json;

type Events<K> = BoxStream<'static, kube::Result<WatchEvent<K>>>;

fn raise_fd_limit(needed: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    if lim.rlim_cur < needed {
        eprintln!("warning: open-file limit {} < {needed}; expect failures", lim.rlim_cur);
    }
}

async fn client(emu: &Emulator) -> kube::Client {
    let kc = Kubeconfig::read_from(emu.kubeconfig_path()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Waits until every stream has yielded a MODIFIED event accepted by `ok`.
async fn all_modified<K: Clone + serde::de::DeserializeOwned + Send + 'static>(
    streams: Vec<Events<K>>,
    ok: impl Fn(&K) -> bool + Clone + Send + 'static,
) -> Vec<Events<K>> {
    let tasks = streams.into_iter().map(|mut s| {
        let ok = ok.clone();
        tokio::spawn(async move {
            loop {
                match s.next().await {
                    Some(Ok(WatchEvent::Modified(o))) if ok(&o) => return s,
                    Some(Ok(_)) => continue,
                    other => panic!("watch ended: {:?}", other.map(|r| r.map(|_| ()))),
                }
            }
        })
    });
    futures::future::join_all(tasks).await.into_iter().map(|r| r.expect("watch task")).collect()
}

async fn profile_round(
    api: &Api<DynamicObject>,
    streams: Vec<Events<DynamicObject>>,
    mtu: i64,
) -> (Duration, Vec<Events<DynamicObject>>) {
    let t = Instant::now();
    api.patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"mtu": mtu}})))
        .await
        .expect("patch");
    let streams = all_modified(streams, move |o: &DynamicObject| o.data["spec"]["mtu"] == mtu).await;
    (t.elapsed(), streams)
}

async fn open(api: &Api<DynamicObject>, n: usize, rv: &str) -> Vec<Events<DynamicObject>> {
    futures::future::join_all(
        (0..n).map(|_| async { api.watch(&WatchParams::default(), rv).await.expect("watch").boxed() }),
    )
    .await
}

async fn run(n: usize) {
    // Start-up: TLS (CA + server certificate + kubeconfig) against plain HTTP.
    let rounds = 20;
    let mut tls_start = Duration::ZERO;
    let mut plain_start = Duration::ZERO;
    for _ in 0..rounds {
        let t = Instant::now();
        drop(Emulator::builder().start().await.expect("start"));
        tls_start += t.elapsed();
        let t = Instant::now();
        drop(Emulator::builder().plain_http().start().await.expect("start"));
        plain_start += t.elapsed();
    }
    println!(
        "start an emulator: TLS {:.2} ms, plain HTTP {:.2} ms (mean of {rounds})",
        ms(tls_start) / rounds as f64,
        ms(plain_start) / rounds as f64
    );

    let emu = Emulator::builder().start().await.expect("start");
    emu.store()
        .create(json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": "p"}, "spec": {"mtu": 0}}))
        .expect("profile");
    let client = client(&emu).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kuberdma.io", "v1alpha1", "RoceProfile"),
        "roceprofiles",
    );
    let profiles: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let rv = profiles.get("p").await.expect("get").metadata.resource_version.expect("rv");

    // Baseline: one watcher.
    let mut one = open(&profiles, 1, &rv).await;
    let mut base = Duration::MAX;
    let mut mtu = 0;
    for _ in 0..10 {
        mtu += 1;
        let (d, s) = profile_round(&profiles, one, mtu).await;
        one = s;
        base = base.min(d);
    }
    drop(one);

    let t = Instant::now();
    let mut many = open(&profiles, n, &emu.store().resource_version().to_string()).await;
    let open_time = t.elapsed();
    println!(
        "open {n} watches over TLS (one connection each): {:.0} ms ({:.2} ms each)",
        ms(open_time),
        ms(open_time) / n as f64
    );
    let mut fan = Duration::MAX;
    for _ in 0..5 {
        mtu += 1;
        let (d, s) = profile_round(&profiles, many, mtu).await;
        many = s;
        fan = fan.min(d);
    }
    println!(
        "one RoceProfile update seen by {n} watches: {:.1} ms; by 1 watch: {:.2} ms (baseline); ratio {:.0}x, {:.1} µs per extra watch",
        ms(fan),
        ms(base),
        fan.as_secs_f64() / base.as_secs_f64(),
        (fan.as_secs_f64() - base.as_secs_f64()) * 1e6 / (n - 1).max(1) as f64
    );
    println!("open watches {}, events sent {}", emu.log().open_watches(), emu.log().events_sent());
    drop(many);

    // 1000 agents, each watching its own Node, and every Node changes once:
    // selected by name (routed to that object's watches only) against
    // selected by label (every change checked by every watch), same run.
    let nodes: Api<Node> = Api::all(client);
    for i in 0..n {
        let name = format!("node-{i}");
        emu.store()
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}))
            .expect("node");
    }
    let by_name = node_round(
        &emu,
        &nodes,
        n,
        |i| WatchParams::default().fields(&format!("metadata.name=node-{i}")),
        "a",
    )
    .await;
    let by_label = node_round(
        &emu,
        &nodes,
        n,
        |i| WatchParams::default().labels(&format!("kubernetes.io/hostname=node-{i}")),
        "b",
    )
    .await;
    println!(
        "{n} Node updates, each to its own agent's watch: by fieldSelector metadata.name {:.0} ms; by labelSelector (baseline, {n}x{n} checks) {:.0} ms; ratio {:.2}",
        ms(by_name),
        ms(by_label),
        by_name.as_secs_f64() / by_label.as_secs_f64()
    );
}

/// Opens one watch per node with `params(i)`, changes every node (label
/// `round=<tag>`) and returns the time until every watch saw its node change.
async fn node_round(
    emu: &Emulator,
    nodes: &Api<Node>,
    n: usize,
    params: impl Fn(usize) -> WatchParams,
    tag: &'static str,
) -> Duration {
    let rv = emu.store().resource_version().to_string();
    let agents: Vec<Events<Node>> = futures::future::join_all((0..n).map(|i| {
        let (nodes, rv, wp) = (nodes.clone(), rv.clone(), params(i));
        async move { nodes.watch(&wp, &rv).await.expect("watch").boxed() }
    }))
    .await;
    let t = Instant::now();
    for i in 0..n {
        emu.store().set_label("nodes", None, &format!("node-{i}"), "round", tag).expect("update");
    }
    all_modified(agents, move |n: &Node| {
        n.metadata.labels.as_ref().is_some_and(|l| l.get("round").map(String::as_str) == Some(tag))
    })
    .await;
    t.elapsed()
}

fn main() {
    let n: usize = std::env::var("APIEMU_BENCH_WATCHES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    raise_fd_limit(2 * n as u64 + 200);
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run(n));
}
