//! How long a CDI spec lives, with the real binary on a simulated node.
//!
//! The kubelet keeps each container's Allocate answer, CDI device names
//! included, in its checkpoint and hands it to the runtime again when the
//! container restarts, without calling Allocate
//! (`pkg/kubelet/cm/devicemanager`: `podDevices.insert` of
//! `resp.ContainerResponses[0]`, `GetDeviceRunContainerOptions`). Regression
//! (issue 20, defect 5): the daemon removed its specs on SIGTERM, so a
//! container restarting during a plugin upgrade failed to start. Specs now
//! stay while their devices are on the node, and a device leaves its spec
//! only when it is gone.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use kube_rdma_device_plugin::api::{AllocateRequest, ContainerAllocateRequest};
use nic::PciAddr;

const T: Duration = Duration::from_secs(10);

const TWO_POOLS: &str = "pools:\n- name: a\n  selectors: {rootDevices: [\"0000:3d:00.0\"]}\n- name: b\n  selectors: {rootDevices: [\"0000:af:00.0\"]}\n";
const ONLY_B: &str = "pools:\n- name: b\n  selectors: {rootDevices: [\"0000:af:00.0\"]}\n";

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

/// The devices a spec file defines (it must pass the CDI library's rules);
/// `None` when there is no file.
fn defined(path: &Path) -> Option<Vec<String>> {
    let bytes = std::fs::read(path).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    Some(common::cdi::validate(&v).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

async fn wait_defined(path: &Path, what: &str, pred: impl Fn(Option<&Vec<String>>) -> bool) {
    let deadline = Instant::now() + T;
    loop {
        let d = defined(path);
        if pred(d.as_ref()) {
            return;
        }
        assert!(Instant::now() < deadline, "{}: never {what}: {d:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sigterm(child: &tokio::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_specs_outlive_the_daemon_and_leave_with_their_devices() {
    let mut node = sim("cx6dx-dual.yaml");
    let roots = node.roots();
    let dirs = Dirs::new();
    let cfg = dirs.write_config(TWO_POOLS);
    let spawn = || {
        dirs.daemon_command()
            .arg("--sysfs-root")
            .arg(&roots.sysfs)
            .arg("--dev-root")
            .arg(&roots.dev)
            .arg("--config")
            .arg(&cfg)
            .arg("--rescan-interval")
            .arg("0.1")
            .arg("--no-link-events")
            .spawn()
            .unwrap()
    };
    let (spec_a, spec_b) = (dirs.cdi.join("kuberdma.io-a.json"), dirs.cdi.join("kuberdma.io-b.json"));
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/a", 8, T).await;
    k.wait_allocatable("kuberdma.io/b", 8, T).await;
    let mut c = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-b.sock").await;
    let r = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:af:00.3".into()] }],
        })
        .await
        .unwrap()
        .into_inner();
    // What the kubelet checkpoints and hands the runtime on every restart of the container.
    let checkpointed: Vec<String> =
        r.container_responses[0].cdi_devices.iter().map(|d| d.name.clone()).collect();
    assert_eq!(checkpointed, ["kuberdma.io/b=0000:af:00.3"]);
    let before = (std::fs::read(&spec_a).unwrap(), std::fs::read(&spec_b).unwrap());
    assert!(defined(&spec_b).unwrap().contains(&"0000:af:00.3".to_string()));

    // A plugin upgrade: the daemon stops. The specs stay, as they were, valid.
    sigterm(&child);
    drop(c);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
    assert_eq!((std::fs::read(&spec_a).unwrap(), std::fs::read(&spec_b).unwrap()), before);
    assert_eq!(defined(&spec_a).unwrap().len(), 8);
    assert!(
        defined(&spec_b).unwrap().contains(&"0000:af:00.3".to_string()),
        "the checkpointed name resolves"
    );

    // The next daemon: same specs.
    k.stop_and_wipe().await;
    k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/b", 8, T).await;
    assert_eq!((std::fs::read(&spec_a).unwrap(), std::fs::read(&spec_b).unwrap()), before);

    // The VF goes (echo 1 > remove): still listed, Unhealthy, but gone from its spec.
    node.remove_vf(pci("0000:af:00.3")).unwrap();
    wait_defined(&spec_b, "without 0000:af:00.3", |d| {
        d.is_some_and(|d| d.len() == 7 && !d.contains(&"0000:af:00.3".into()))
    })
    .await;
    k.wait_allocatable("kuberdma.io/b", 7, T).await;
    assert_eq!(k.endpoint("kuberdma.io/b").unwrap().devices.len(), 8, "listed Unhealthy, not dropped");
    assert_eq!(std::fs::read(&spec_a).unwrap(), before.0, "the other pool's spec is untouched");

    // Pool a leaves the config: its devices are still there, so is its spec.
    std::fs::write(&cfg, ONLY_B).unwrap();
    let sock_a = dirs.kubelet.join("kuberdma-kuberdma.io-a.sock");
    let deadline = Instant::now() + T;
    while sock_a.exists() {
        assert!(Instant::now() < deadline, "pool a still served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(defined(&spec_a).unwrap().len(), 8, "the retired pool's devices are on the node");
    // ... until they are gone.
    node.set_num_vfs(pci("0000:3d:00.0"), 0).unwrap();
    wait_defined(&spec_a, "removed", |d| d.is_none()).await;
    // The served pool loses all its VFs: no device left, no spec.
    node.set_num_vfs(pci("0000:af:00.0"), 0).unwrap();
    wait_defined(&spec_b, "removed", |d| d.is_none()).await;

    sigterm(&child);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
}
