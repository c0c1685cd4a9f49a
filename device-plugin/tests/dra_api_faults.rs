//! The real `kube-rdma-device-plugin dra` when the kube-apiserver fails
//! (errors, a hung server, requests that hang one by one): publishing comes
//! back, and neither rescans nor prepare wait on it. Fake kubelet, real
//! control plane, simulated node, as in `dra_kubelet.rs`.

mod dra_fixtures;

use std::time::Duration;

use dra_fixtures::common::dra::*;
use dra_fixtures::faults::{FaultProxy, Frozen, MutatingHold, ONE_MUTATING_REQUEST};
use dra_fixtures::*;
use kube_rdma_device_plugin::dra::api::health::HealthStatus;
use serde_json::{json, Value};

/// kube-apiserver's in-flight limit answers the driver's slice writes 429
/// (Retry-After) while another request holds the only mutating slot; the
/// driver says so, keeps trying, and publishes once the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_survives_api_errors() {
    let sim = sim();
    let env = Env::with_args(NODE, sim.roots(), &ONE_MUTATING_REQUEST).await;
    let hold = MutatingHold::take(&env.api, &env.driver_kubeconfig).await;
    let driver = env.spawn(&[]);
    // kube's client retries a 429 as Retry-After says until the driver's 10 s bound.
    driver.wait_log_within("cannot publish ResourceSlices", Duration::from_secs(30)).await;
    let throttled = |events: &[Value]| {
        Env::driver_requests(events)
            .into_iter()
            .filter(|r| r.starts_with("patch resourceslices") && r.ends_with(" 429"))
            .count()
    };
    assert!(throttled(&env.audit()) >= 1, "{:?}", Env::driver_requests(&env.audit()));
    assert!(env.slices().await.is_empty(), "published while every write was refused");
    drop(hold);
    env.wait_slices("published once the slot is free", |s| device_count(s) == 16).await;
    driver.stop().await;
}

/// Regression (issue 25): the driver loop awaited every API call, unbounded,
/// one after another, so an API server that stops answering stalled
/// rescans (and so health) and could outlast the kubelet's 45 s
/// NodePrepareResources timeout. Here kube-apiserver is stopped (SIGSTOP:
/// connections are accepted, nothing answers) from the start: the driver
/// still serves the kubelet, follows the node, and answers a prepare with an
/// error well within 45 s; once the server runs again it publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_api_server_stalls_neither_rescans_nor_prepare() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let frozen = Frozen::new(&env.api);
    let driver = env.spawn(&["--rescan-interval", "0.2", "--metrics-addr", "127.0.0.1:0"]);
    let metrics = driver.metrics_addr().await;
    let mut p = register(&env.reg_socket()).await;
    let mut s = p.watch_health().await;
    wait_health(&mut s, "the full list", |m| m.devices.len() == 16).await;

    // Rescans go on: a PF link going down reaches the kubelet at once.
    sim.set_operstate("ens1f0np0", "down").unwrap();
    wait_health(&mut s, "PF 0's VFs unhealthy", |m| {
        m.devices.iter().filter(|d| d.health == HealthStatus::Unhealthy as i32).count() == 8
    })
    .await;

    // A prepare cannot read its claim: it fails, in time, saying why (the kubelet asks again).
    let t0 = std::time::Instant::now();
    let r = p.prepare(vec![claim_ref("a", "0f0f0f0f-0000-0000-0000-00000000000a")]).await;
    let took = t0.elapsed();
    let e = &r.claims["0f0f0f0f-0000-0000-0000-00000000000a"].error;
    assert!(e.contains("default/a") && e.contains("did not answer in 10s"), "{e}");
    assert!(
        took < Duration::from_secs(20),
        "NodePrepareResources took {took:?}; the kubelet gives up at 45 s"
    );

    // Publishing fails and says so (the Node read, then the list, 10 s each), holding nothing else up.
    driver.wait_log_within("cannot publish ResourceSlices", Duration::from_secs(40)).await;
    assert!(
        driver.log().contains("cannot list ResourceSlices: the API server did not answer"),
        "{}",
        driver.log()
    );
    let (code, body) = http_get(&metrics, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(http_get(&metrics, "/livez").await.0, 200);
    sim.set_operstate("ens1f0np0", "up").unwrap();
    wait_health(&mut s, "healthy again", |m| {
        m.devices.iter().all(|d| d.health == HealthStatus::Healthy as i32)
    })
    .await;

    // kube-apiserver runs again: the driver publishes without being restarted.
    drop(frozen);
    env.wait_slices("published once kube-apiserver answers", |s| device_count(s) == 16).await;
    let status = driver.stop().await;
    assert!(status.success(), "{status}");
}

/// The same with an API server that answers some requests and hangs on
/// others (kube-apiserver cannot be told to: the test's proxy in front of it
/// hangs them): the stale-holder reads of a prepare are bounded (the holder
/// then stays, and the claim fails in time), and slice writes that hang
/// delay only the slices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_hang_delay_only_themselves() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let proxy = FaultProxy::start(&env.api).await;
    let kubeconfig = proxy.kubeconfig(&env.driver_kubeconfig, &env.tmp.path().join("proxied-kubeconfig"));
    let mut c = env.command();
    c.env("KUBECONFIG", &kubeconfig).args(["--rescan-interval", "0.2"]);
    let driver = Driver::spawn(c);
    let mut p = register(&env.reg_socket()).await;
    let mut s = p.watch_health().await;
    let g0 = generation(&env.wait_slices("published", |s| device_count(s) == 16).await);

    let d = env.create_claim("d", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-d").await;
    assert_eq!(p.prepare(vec![claim_ref("d", &d)]).await.claims[&d].error, "");
    // `d`'s reads hang from now on; `e` is allocated its device (as after a reboot).
    let reads = proxy.hang(http::Method::GET, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/d");
    let e = env.create_claim("e", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-e").await;
    let t0 = std::time::Instant::now();
    let r = p.prepare(vec![claim_ref("e", &e)]).await;
    let took = t0.elapsed();
    assert!(r.claims[&e].error.contains(&format!("already prepared for claim {d}")), "{:?}", r.claims[&e]);
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(20), "took {took:?}");
    driver.wait_log("cannot tell whether a prepared claim still exists").await;
    assert!(proxy.fired(reads) >= 1);
    assert!(
        nic::prepared::read_claim(&env.prepared, &d).unwrap().is_some(),
        "a holder that cannot be asked stays"
    );

    // Slice writes hang: health still follows the node at once; the slices catch up after.
    let writes = proxy.hang_prefix(http::Method::PATCH, "/apis/resource.k8s.io/v1/resourceslices/");
    sim.set_operstate("ens1f0np0", "down").unwrap();
    let t0 = std::time::Instant::now();
    wait_health(&mut s, "PF 0's VFs unhealthy", |m| {
        m.devices.iter().filter(|d| d.health == HealthStatus::Unhealthy as i32).count() == 8
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(5), "health took {:?}", t0.elapsed());
    // A sync waits 10 s for its write, after the rescan saw the change.
    driver
        .wait_log_within(
            "cannot apply a ResourceSlice: the API server did not answer",
            Duration::from_secs(25),
        )
        .await;
    assert_eq!(generation(&env.slices().await), g0, "the hung write changed nothing");
    assert!(proxy.fired(writes) >= 1);
    proxy.remove(writes);
    let slices = env
        .wait_slices("healthy=false after the API recovered", |s| {
            attrs(s, "pci-0000-3d-00-1")["kuberdma.io/healthy"] == json!({"bool": false})
        })
        .await;
    assert!(generation(&slices) > g0);
    driver.stop().await;
}
