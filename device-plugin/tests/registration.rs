//! Registration with a kubelet modelled on the real device manager
//! (`common::FakeKubelet`: dials back, watches, one client per resource,
//! disconnects the current client when a stream ends): once per kubelet
//! instance across restarts, again when the kubelet does not watch or stops
//! watching, and retried with backoff, without end, when it refuses.
//! Regressions of issue 20, defects 2 and 3.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kube_rdma_device_plugin::registration::Timing;

const T: Duration = Duration::from_secs(10);

const TWO_POOLS: &str = "pools:\n- name: a\n  selectors: {rootDevices: [\"0000:3d:00.0\"]}\n- name: b\n  selectors: {rootDevices: [\"0000:af:00.0\"]}\n";

async fn get(port: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The in-process daemon may not listen yet.
    let deadline = Instant::now() + T;
    let mut s = loop {
        match tokio::net::TcpStream::connect(port).await {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("metrics at {port}: {e}"),
        }
    };
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The value of `name{resource="…"}` in a /metrics text.
fn sample(metrics: &str, name: &str, resource: &str) -> u64 {
    let key = format!("{name}{{resource=\"{resource}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {metrics}"))
}

/// Polls `/healthz` until its body holds every one of `want`.
async fn healthz_says(port: std::net::SocketAddr, want: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let h = get(port, "/healthz").await;
        if want.iter().all(|w| h.contains(w)) {
            return h;
        }
        assert!(Instant::now() < deadline, "/healthz never said {want:?}: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Regression (issue 20, defect 2): a kubelet restart made every pool
/// register twice (socket deleted → re-served → Register, then kubelet.sock
/// created → Register); the kubelet keeps one client per resource and drops
/// the current one when an old stream ends, so the fresh registration could
/// be lost and allocatable fall to 0. The real binary, three restarts in a
/// row: each new kubelet gets exactly one Register per pool, watches both,
/// and the endpoints stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarting_kubelet_gets_one_registration_per_pool_and_keeps_allocatable() {
    let dirs = Dirs::new();
    let cfg = dirs.write_config(TWO_POOLS);
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let _child = dirs
        .daemon_command()
        .arg("--sim")
        .arg(examples().join("cx6dx-dual.yaml"))
        .arg("--config")
        .arg(&cfg)
        .arg("--no-link-events")
        .spawn()
        .unwrap();
    let mut first: Vec<String> = vec![];
    for _ in 0..2 {
        first.push(k.next_registration(T).await.resource_name);
    }
    first.sort();
    assert_eq!(first, ["kuberdma.io/a", "kuberdma.io/b"]);
    for r in ["kuberdma.io/a", "kuberdma.io/b"] {
        k.wait_allocatable(r, 8, T).await;
    }
    for round in 0..3 {
        k.stop_and_wipe().await;
        k = FakeKubelet::start(&dirs.kubelet);
        for r in ["kuberdma.io/a", "kuberdma.io/b"] {
            k.wait_allocatable(r, 8, T).await;
        }
        // Longer than the plugin's ListAndWatch check (5 s by default) would
        // need to decide on a second Register: none comes.
        let regs = k.registrations_within(Duration::from_secs(6)).await;
        let mut names: Vec<&str> = regs.iter().map(|r| r.resource_name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            ["kuberdma.io/a", "kuberdma.io/b"],
            "restart {round}: one Register per pool, not {} in all",
            k.attempts.load(std::sync::atomic::Ordering::SeqCst)
        );
        for r in ["kuberdma.io/a", "kuberdma.io/b"] {
            let e = k.endpoint(r).unwrap();
            assert!(!e.stopped && e.allocatable() == 8, "restart {round}: {r}: {e:?}");
        }
    }
}

/// Regression (issue 20, defect 2): a Register the kubelet accepts without
/// opening ListAndWatch leaves the pool unwatched; the plugin registers again
/// after the check window, with a growing wait, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_never_opens_list_and_watch_is_registered_again_with_backoff() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let k =
        FakeKubelet::start_with(&dirs.kubelet, Behaviour { list_and_watch: false, ..Behaviour::default() });
    let port = kube_rdma_e2e::daemon::free_loopback_addr().unwrap();
    let mut opts = dirs.options(node.roots(), None, Duration::from_secs(3600));
    opts.metrics_addr = Some(port);
    let timing = Timing {
        verify: Duration::from_millis(300),
        backoff_first: Duration::from_millis(200),
        backoff_max: Duration::from_millis(800),
    };
    opts.registration = timing;
    let d = InProc::spawn(opts);
    let mut at = vec![];
    for _ in 0..5 {
        k.next_registration(T).await;
        at.push(Instant::now());
    }
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    for (i, g) in gaps.iter().enumerate() {
        // Each gap: the check window, then the backoff after i + 1 failures but
        // never less than the check window again (a late watch may still come).
        let least = timing.verify + timing.backoff(i as u32 + 1).max(timing.verify);
        assert!(*g + Duration::from_millis(30) >= least, "gap {i}: {g:?} < {least:?} ({gaps:?})");
    }
    // Capped: the fourth wait is no longer than the third by a doubling.
    assert!(gaps[3] < gaps[2] * 2, "{gaps:?}");
    let h = healthz_says(
        port,
        &[
            "kuberdma.io/rdma_vfs: not ready served=true registered=false streams=0 registration=retrying",
            "opened no ListAndWatch within 300ms",
        ],
        T,
    )
    .await;
    assert!(h.starts_with("HTTP/1.1 503"), "{h}");
    let m = get(port, "/metrics").await;
    assert_eq!(sample(&m, "kuberdma_pool_registered", "kuberdma.io/rdma_vfs"), 0);
    assert!(sample(&m, "kuberdma_pool_registration_failures_total", "kuberdma.io/rdma_vfs") >= 4, "{m}");
    assert!(sample(&m, "kuberdma_pool_registrations_total", "kuberdma.io/rdma_vfs") >= 5, "{m}");
    d.stop().await;
}

/// A loaded kubelet opens ListAndWatch late, after the plugin's check window:
/// the watch counts for the Register it follows, and the pool is not
/// registered a second time (which would leave the kubelet two clients for
/// the resource, the older of which drops the newer when its stream ends;
/// the real-cluster tier saw a second registration under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_opens_list_and_watch_late_is_registered_once() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let late = Duration::from_millis(700);
    let k = FakeKubelet::start_with(&dirs.kubelet, Behaviour { watch_after: late, ..Behaviour::default() });
    let port = kube_rdma_e2e::daemon::free_loopback_addr().unwrap();
    let mut opts = dirs.options(node.roots(), None, Duration::from_secs(3600));
    opts.metrics_addr = Some(port);
    // The check window ends before the watch comes; a plain backoff would have
    // registered again at 300 + 50 ms.
    opts.registration = Timing {
        verify: Duration::from_millis(500),
        backoff_first: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
    };
    let d = InProc::spawn(opts);
    k.next_registration(T).await;
    let h = healthz_says(port, &["kuberdma.io/rdma_vfs: ok served=true registered=true streams=1"], T).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    // Well past the window and its backoff: still the one Register.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(k.attempts.load(std::sync::atomic::Ordering::SeqCst), 1, "registered again");
    let m = get(port, "/metrics").await;
    assert_eq!(sample(&m, "kuberdma_pool_registered", "kuberdma.io/rdma_vfs"), 1);
    let e = k.endpoint("kuberdma.io/rdma_vfs").unwrap();
    assert!(!e.stopped && e.allocatable() == 16, "{e:?}");
    d.stop().await;
}

/// Regression (issue 20, defect 3): registration gave up after 5 tries and
/// waited for a directory event that might never come. A kubelet that refuses
/// 8 times in a row is retried, with backoff, until it accepts; meanwhile
/// `/healthz` and the metrics say what is going on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_refuses_for_a_while_is_retried_until_it_accepts() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let k = FakeKubelet::start_with(&dirs.kubelet, Behaviour { refuse_first: 8, ..Behaviour::default() });
    let port = kube_rdma_e2e::daemon::free_loopback_addr().unwrap();
    let mut opts = dirs.options(node.roots(), None, Duration::from_secs(3600));
    opts.metrics_addr = Some(port);
    opts.registration = Timing {
        verify: Duration::from_secs(5),
        backoff_first: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
    };
    let d = InProc::spawn(opts);
    let h =
        healthz_says(port, &["registration=retrying failures=", "refusing registrations for now"], T).await;
    assert!(h.starts_with("HTTP/1.1 503"), "{h}");
    let reg = k.next_registration(T).await;
    assert_eq!(reg.resource_name, "kuberdma.io/rdma_vfs");
    assert_eq!(k.attempts.load(std::sync::atomic::Ordering::SeqCst), 9, "8 refused, then accepted");
    k.wait_allocatable("kuberdma.io/rdma_vfs", 16, T).await;
    let h = healthz_says(
        port,
        &["kuberdma.io/rdma_vfs: ok served=true registered=true streams=1 registration=registered"],
        T,
    )
    .await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    let m = get(port, "/metrics").await;
    assert_eq!(sample(&m, "kuberdma_pool_registered", "kuberdma.io/rdma_vfs"), 1);
    assert_eq!(sample(&m, "kuberdma_pool_registration_failures_total", "kuberdma.io/rdma_vfs"), 8);
    assert_eq!(sample(&m, "kuberdma_pool_registrations_total", "kuberdma.io/rdma_vfs"), 1);
    d.stop().await;
}

/// The kubelet ends the current client when an older stream of the resource
/// ends (`handler.go` `runClient`): the pool's watch goes while the same
/// kubelet runs. The plugin registers again and the resource comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_kubelet_drops_is_registered_again() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(node.roots(), None, Duration::from_secs(3600)));
    k.next_registration(T).await;
    k.wait_allocatable("kuberdma.io/rdma_vfs", 16, T).await;
    k.disconnect("kuberdma.io/rdma_vfs");
    assert_eq!(k.endpoint("kuberdma.io/rdma_vfs").unwrap().allocatable(), 0, "the kubelet dropped it");
    let again = k.next_registration(T).await;
    assert_eq!(again.resource_name, "kuberdma.io/rdma_vfs");
    k.wait_allocatable("kuberdma.io/rdma_vfs", 16, T).await;
    // Once: the new watch holds.
    assert!(k.registrations_within(Duration::from_secs(1)).await.is_empty());
    d.stop().await;
}
