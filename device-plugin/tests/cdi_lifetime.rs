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

use std::ffi::OsStr;
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

/// The daemon on the simulated node at `roots`, rescanning every 0.1 s with no
/// link events (the tests change the node and wait for a rescan), plus `args`.
fn daemon(dirs: &Dirs, roots: &nic::Roots, args: &[&OsStr]) -> tokio::process::Child {
    dirs.daemon_command()
        .arg("--sysfs-root")
        .arg(&roots.sysfs)
        .arg("--dev-root")
        .arg(&roots.dev)
        .args(["--rescan-interval", "0.1", "--no-link-events"])
        .args(args)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_specs_outlive_the_daemon_and_leave_with_their_devices() {
    let mut node = sim("cx6dx-dual.yaml");
    let roots = node.roots();
    let dirs = Dirs::new();
    let cfg = dirs.write_config(TWO_POOLS);
    let spawn = || daemon(&dirs, &roots, &["--config".as_ref(), cfg.as_os_str()]);
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

/// The CDI device `name` of the spec at `path`.
fn cdi_device(path: &Path, name: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).unwrap();
    v["devices"].as_array().unwrap().iter().find(|d| d["name"] == name).cloned()
}

/// Rescans have run since now: PF `pf` goes down (its 8 VFs Unhealthy) and
/// up again, and the kubelet saw both.
async fn rescans_ran(node: &mut nic::sim::Sim, k: &FakeKubelet, pf: &str, total: usize) {
    node.set_operstate(pf, "down").unwrap();
    k.wait_allocatable("kuberdma.io/rdma_vfs", total - 8, T).await;
    node.set_operstate(pf, "up").unwrap();
    k.wait_allocatable("kuberdma.io/rdma_vfs", total, T).await;
}

/// Regression (issue 20, defect 5; audit): on a node in exclusive RDMA netns
/// mode whose driver leaves nothing of a VF's RDMA device on the host once
/// the VF is in a pod, the daemon had nothing to compute the VF's edits from
/// and dropped it from the spec: when the VF moved, and, after a restart
/// (PodResources not asked yet, then asked), at start. A crash of that
/// container then failed to resolve its checkpointed CDI name. The entry
/// written while the host saw the device stays while the VF is on the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vf_in_a_pod_the_host_cannot_see_keeps_its_cdi_device_across_restarts() {
    let mut node = sim("cx6dx-dual.yaml");
    let roots = node.roots();
    let dirs = Dirs::new();
    let pr = FakePodResources::start(&dirs.tmp.path().join("pod-resources/kubelet.sock"));
    let spawn = || daemon(&dirs, &roots, &["--pod-resources-interval".as_ref(), "0.1".as_ref()]);
    let spec = dirs.cdi.join("kuberdma.io-rdma_vfs.json");
    const VF: &str = "0000:af:00.2";
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/rdma_vfs", 16, T).await;
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let r = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec![VF.into()] }],
        })
        .await
        .unwrap()
        .into_inner();
    let checkpointed = r.container_responses[0].cdi_devices[0].name.clone();
    assert_eq!(checkpointed, format!("kuberdma.io/rdma_vfs={VF}"));
    let entry = cdi_device(&spec, VF).expect("the VF's CDI device");
    let nodes = entry["containerEdits"]["deviceNodes"].as_array().unwrap().clone();
    assert!(nodes.iter().any(|n| n["path"] == "/dev/infiniband/uverbs11"), "{entry}");

    // The kubelet records the assignment at Allocate; then the CNI moves the VF into
    // the pod, and the host keeps no trace of its RDMA device.
    pr.assign("trainer-0", "kuberdma.io/rdma_vfs", &[VF]);
    rescans_ran(&mut node, &k, "ens1f0np0", 16).await;
    node.move_vf_into_pod(pci(VF)).unwrap();
    node.hide_rdma_trace(pci(VF)).unwrap();
    rescans_ran(&mut node, &k, "ens1f0np0", 16).await;
    assert_eq!(cdi_device(&spec, VF).as_ref(), Some(&entry), "dropped while the VF moved");

    // A plugin upgrade: the next daemon starts before PodResources is asked.
    sigterm(&child);
    drop(c);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
    k.stop_and_wipe().await;
    k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/rdma_vfs", 16, T).await;
    rescans_ran(&mut node, &k, "ens1f0np0", 16).await;
    assert_eq!(cdi_device(&spec, VF).as_ref(), Some(&entry), "dropped by the restarted daemon");
    let defined = defined(&spec).unwrap();
    assert_eq!(defined.len(), 16, "{defined:?}");

    // Gone from the node: gone from the spec.
    node.remove_vf(pci(VF)).unwrap();
    wait_defined(&spec, "without the VF", |d| d.is_some_and(|d| d.len() == 15 && !d.contains(&VF.into())))
        .await;
    sigterm(&child);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
}

/// Regression (audit): the spec of a pool removed from the config while the
/// daemon was down stayed forever (retired specs lived in the daemon's
/// memory only). At start the daemon adopts its own specs no configured pool
/// owns, and each follows the node as one a reload retired does; what is not
/// ours (the DRA driver's claim specs, another vendor's, a file that is not a
/// spec we write) is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn specs_of_pools_removed_while_the_daemon_was_down_follow_the_node() {
    let mut node = sim("cx6dx-dual.yaml");
    let roots = node.roots();
    let dirs = Dirs::new();
    let cfg = dirs.write_config(TWO_POOLS);
    let spawn = || daemon(&dirs, &roots, &["--config".as_ref(), cfg.as_os_str()]);
    let (spec_a, spec_b) = (dirs.cdi.join("kuberdma.io-a.json"), dirs.cdi.join("kuberdma.io-b.json"));
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/a", 8, T).await;
    k.wait_allocatable("kuberdma.io/b", 8, T).await;
    sigterm(&child);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
    assert_eq!(defined(&spec_a).unwrap().len(), 8);

    // While it is down: pool a leaves the config; others put files beside ours.
    std::fs::write(&cfg, ONLY_B).unwrap();
    let vf_spec = |kind: &str, name: &str| {
        serde_json::json!({"cdiVersion": "0.5.0", "kind": kind,
            "devices": [{"name": name, "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs2"}]}}]})
        .to_string()
    };
    let others = [
        // The DRA driver's spec of a claim on a VF of PF 0.
        ("kuberdma.io-claim_6f1c.json", vf_spec("kuberdma.io/claim", "pci-0000-3d-00-1_6f1c")),
        // Another vendor's, named like ours would be with its prefix.
        ("example.com-gpu.json", vf_spec("example.com/gpu", "0000:3d:00.1")),
        // Named like ours, not one we write (a hook as well).
        ("kuberdma.io-old.json", {
            let mut v: serde_json::Value =
                serde_json::from_str(&vf_spec("kuberdma.io/old", "0000:3d:00.1")).unwrap();
            v["containerEdits"] =
                serde_json::json!({"hooks": [{"hookName": "createContainer", "path": "/bin/true"}]});
            v.to_string()
        }),
    ];
    for (f, text) in &others {
        std::fs::write(dirs.cdi.join(f), text).unwrap();
    }

    k.stop_and_wipe().await;
    k = FakeKubelet::start(&dirs.kubelet);
    let child = spawn();
    k.wait_allocatable("kuberdma.io/b", 8, T).await;
    assert!(!dirs.kubelet.join("kuberdma-kuberdma.io-a.sock").exists(), "pool a is not served");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(defined(&spec_a).unwrap().len(), 8, "pool a's devices are on the node: its spec stays");
    // Its devices leave the node one by one: so do their CDI devices, then the spec.
    node.set_num_vfs(pci("0000:3d:00.0"), 3).unwrap();
    wait_defined(&spec_a, "with 3 devices", |d| d.is_some_and(|d| d.len() == 3)).await;
    node.set_num_vfs(pci("0000:3d:00.0"), 0).unwrap();
    wait_defined(&spec_a, "removed", |d| d.is_none()).await;
    assert_eq!(defined(&spec_b).unwrap().len(), 8);
    for (f, text) in &others {
        assert_eq!(&std::fs::read_to_string(dirs.cdi.join(f)).unwrap(), text, "{f} was touched");
    }
    sigterm(&child);
    let mut child = child;
    assert_eq!(tokio::time::timeout(T, child.wait()).await.unwrap().unwrap().code(), Some(0));
}
