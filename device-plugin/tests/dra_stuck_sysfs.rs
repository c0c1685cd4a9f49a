//! A read of sysfs that blocks in the kernel, in DRA mode (issue 36, D5):
//! the real `kube-rdma-device-plugin dra` against a real kube-apiserver and
//! the fake kubelet ([`dra_fixtures::Env`]), on a simulated node, rescanning
//! every 200 ms with a 1 s deadline.
//!
//! A directory of the node's tree is covered by a FUSE mount whose server
//! never answers (every access waits in the kernel, killable only), as a read
//! from a hung driver does. The driver runs in a mount namespace of its own,
//! so the mount is seen by it alone, never by the host. The rescan is
//! abandoned at its deadline, `/healthz` turns 503 with device plugin mode's
//! reason and metrics, the published slices keep what was known, and SIGTERM
//! still ends the process within a second.

mod dra_fixtures;

use std::time::{Duration, Instant};

use dra_fixtures::common::stuck::{
    healthz_says, in_own_mount_ns, metric, mount_never_answering, pf0_netdev_dir,
    sigterm_ends_within_a_second,
};
use dra_fixtures::*;
use serde_json::Value;

const NODE: &str = "cx6dx-dual";
/// The example node: 8 VFs on each PF.
const ALL: usize = 16;
/// The driver's `--rescan-interval` and `--rescan-deadline`.
const INTERVAL: Duration = Duration::from_millis(200);
const DEADLINE: Duration = Duration::from_secs(1);

fn device_count(slices: &[Value]) -> usize {
    slices.iter().map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len)).sum()
}

/// The real driver in a private mount namespace, with metrics on an ephemeral port.
fn spawn_in_own_mount_ns(env: &Env) -> Driver {
    let mut c = env.command();
    c.args(["--rescan-interval", "0.2", "--rescan-deadline", "1", "--metrics-addr", "127.0.0.1:0"]);
    in_own_mount_ns(&mut c);
    Driver::spawn(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescan_stuck_in_the_kernel_turns_the_drivers_healthz_red_and_sigterm_still_ends_it_within_a_second(
) {
    let sim = nic::sim::Sim::materialise(&nic::sim::load_desc(example("cx6dx-dual.yaml")).unwrap()).unwrap();
    let env = Env::new(NODE, sim.roots()).await;
    let mut driver = spawn_in_own_mount_ns(&env);
    let metrics = driver.metrics_addr().await;
    let _kubelet = register(&env.reg_socket()).await;
    env.wait_slices("every VF", |s| device_count(s) == ALL).await;
    healthz_says(&metrics, 200, &["node rescan: ok"]).await;
    assert_eq!(metric(&metrics, "kuberdma_rescan_overruns_total").await, 0.0);
    let generation = env.slices().await[0]["spec"]["pool"]["generation"].clone();

    let pid = driver.child.id().expect("the driver runs");
    let _fuse = mount_never_answering(pid, &pf0_netdev_dir(&sim));
    let stuck_at = Instant::now();
    let h = healthz_says(&metrics, 503, &["node rescan: stale", "stuck past their deadline"]).await;
    let took = stuck_at.elapsed();
    eprintln!("503 after {took:?}:\n{h}");
    // The next rescan starts within an interval and is abandoned at its
    // deadline; the rest is slack for two busy cores.
    assert!(took < INTERVAL + DEADLINE + Duration::from_millis(1500), "503 only after {took:?}");
    assert!(metric(&metrics, "kuberdma_rescan_overruns_total").await >= 1.0);
    assert!(metric(&metrics, "kuberdma_rescans_stuck").await >= 1.0);
    assert!(metric(&metrics, "kuberdma_rescan_last_success_timestamp_seconds").await > 0.0);
    // The slices keep what was known: nothing was republished from a half read.
    let slices = env.slices().await;
    assert_eq!(device_count(&slices), ALL);
    assert_eq!(slices[0]["spec"]["pool"]["generation"], generation);

    // The reads stay stuck (the FUSE connection is alive) while it stops.
    let log = driver.log.clone();
    sigterm_ends_within_a_second(&mut driver.child, move || log.lock().unwrap().clone()).await;
}
