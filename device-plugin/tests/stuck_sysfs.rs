//! Reads of sysfs that block (issue 36, D5): the real binary on a simulated
//! node, a fake kubelet, rescans every 200 ms with a 1 s deadline.
//!
//! - A FIFO in place of an attribute file: old daemons blocked in `open` for
//!   good; now it is refused as not a regular file, and link changes keep
//!   reaching the kubelet.
//! - A read blocked in the kernel, as a driver that hangs: a directory of the
//!   tree is covered by a FUSE mount whose server never answers (every access
//!   waits in the kernel, killable only). The daemon runs in a mount namespace
//!   of its own, so the mount is seen by it alone, never by the host.
//!   The walk is abandoned at its deadline, `/healthz` turns 503 saying so, the
//!   pools keep serving, SIGTERM still ends the process within a second, and
//!   once the mount is gone a link change reaches the kubelet again.

mod common;

use std::time::Duration;

use common::stuck::{healthz_says, in_own_mount_ns, metric, mount_never_answering, pf0_netdev_dir, unmount};
use common::*;
use kube_rdma_device_plugin::api::{AllocateRequest, ContainerAllocateRequest};

const T: Duration = Duration::from_secs(10);
const RESOURCE: &str = "kuberdma.io/rdma_vfs";
/// The cx6dx-dual node: 8 VFs on each PF.
const ALL: usize = 16;

/// The real daemon, in a private mount namespace, with metrics on `metrics`.
struct Daemon {
    child: tokio::process::Child,
    metrics: String,
}

impl Daemon {
    fn start(dirs: &Dirs, sim: &nic::sim::Sim) -> Daemon {
        let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let roots = sim.roots();
        let mut c = dirs.daemon_command();
        c.arg("--sysfs-root")
            .arg(&roots.sysfs)
            .arg("--dev-root")
            .arg(&roots.dev)
            .args([
                "--rescan-interval",
                "0.2",
                "--rescan-deadline",
                "1",
                "--no-link-events",
                "--no-pod-resources",
            ])
            .arg("--metrics-addr")
            .arg(&metrics);
        in_own_mount_ns(&mut c);
        Daemon { child: c.spawn().expect("start the daemon"), metrics }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("daemon running")
    }

    /// SIGTERM; the daemon must exit 0 within a second.
    async fn sigterm_ends_it_within_a_second(mut self) {
        stuck::sigterm_ends_within_a_second(&mut self.child, String::new).await;
    }
}

/// Waits until the daemon serves the node: every VF allocatable, `/healthz` 200.
async fn serving(d: &Daemon, kubelet: &FakeKubelet) {
    kubelet.wait_allocatable(RESOURCE, ALL, T).await;
    let h = healthz_says(&d.metrics, 200, &["node rescan: ok"]).await;
    assert!(h.contains(&format!("{RESOURCE}: ok")), "{h}");
}

/// The pools answer while the node's reads are stuck: a new ListAndWatch
/// lists every device, and Allocate hands one out.
async fn still_serving(dirs: &Dirs) {
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    let first = tokio::time::timeout(T, s.message()).await.expect("a list").unwrap().unwrap();
    assert_eq!(first.devices.len(), ALL);
    let id = first.devices.iter().find(|d| d.health == "Healthy").expect("a healthy device").id.clone();
    let r = tokio::time::timeout(
        T,
        c.allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec![id] }],
        }),
    )
    .await
    .expect("Allocate answered");
    assert!(r.is_ok(), "{r:?}");
}

/// Waits until the stuck read shows: 503, the reason, the metrics.
async fn stale_shows(metrics: &str) -> String {
    let h = healthz_says(metrics, 503, &["node rescan: stale", "stuck past their deadline"]).await;
    assert!(metric(metrics, "kuberdma_rescan_overruns_total").await >= 1.0);
    assert!(metric(metrics, "kuberdma_rescans_stuck").await >= 1.0);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_place_of_a_sysfs_file_is_skipped_and_link_changes_still_reach_the_kubelet() {
    let mut sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let kubelet = FakeKubelet::start(&dirs.kubelet);
    let d = Daemon::start(&dirs, &sim);
    serving(&d, &kubelet).await;

    let operstate = pf0_netdev_dir(&sim).join("operstate");
    std::fs::remove_file(&operstate).unwrap();
    nix::unistd::mkfifo(&operstate, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    // Several rescans read it: none blocks, none overruns.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    healthz_says(&d.metrics, 200, &["node rescan: ok"]).await;
    assert_eq!(metric(&d.metrics, "kuberdma_rescan_overruns_total").await, 0.0);
    still_serving(&dirs).await;

    // The FIFO gone, the PF's link goes down, then up: the kubelet sees both.
    std::fs::remove_file(&operstate).unwrap();
    sim.set_operstate("ens1f0np0", "down").unwrap();
    kubelet.wait_allocatable(RESOURCE, ALL - 8, T).await;
    sim.set_operstate("ens1f0np0", "up").unwrap();
    kubelet.wait_allocatable(RESOURCE, ALL, T).await;
    d.sigterm_ends_it_within_a_second().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescan_stuck_in_the_kernel_turns_healthz_red_and_sigterm_still_ends_the_daemon_within_a_second() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let kubelet = FakeKubelet::start(&dirs.kubelet);
    let d = Daemon::start(&dirs, &sim);
    serving(&d, &kubelet).await;

    let _fuse = mount_never_answering(d.pid(), &pf0_netdev_dir(&sim));
    let h = stale_shows(&d.metrics).await;
    eprintln!("{h}");
    still_serving(&dirs).await;
    // The reads stay stuck (the FUSE connection is alive) while it stops.
    d.sigterm_ends_it_within_a_second().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stuck_rescan_returns_a_later_link_change_reaches_the_kubelet() {
    let mut sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let kubelet = FakeKubelet::start(&dirs.kubelet);
    let d = Daemon::start(&dirs, &sim);
    serving(&d, &kubelet).await;

    let dir = pf0_netdev_dir(&sim);
    let fuse = mount_never_answering(d.pid(), &dir);
    stale_shows(&d.metrics).await;
    // Stuck long enough that no new walk may start (the bound on stuck walks).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(kubelet.endpoint(RESOURCE).unwrap().allocatable(), ALL, "the pool keeps what was known");

    // The hung reads fail at last (connection aborted) and the tree is whole again.
    drop(fuse);
    unmount(d.pid(), &dir);
    healthz_says(&d.metrics, 200, &["node rescan: ok"]).await;
    assert_eq!(metric(&d.metrics, "kuberdma_rescans_stuck").await, 0.0);
    sim.set_operstate("ens1f0np0", "down").unwrap();
    kubelet.wait_allocatable(RESOURCE, ALL - 8, T).await;
    sim.set_operstate("ens1f0np0", "up").unwrap();
    kubelet.wait_allocatable(RESOURCE, ALL, T).await;
    d.sigterm_ends_it_within_a_second().await;
}
