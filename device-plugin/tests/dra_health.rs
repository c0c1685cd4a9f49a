//! Health and what the slices say as the node changes under the real
//! `kube-rdma-device-plugin dra`: PF links going down, pods starting and
//! stopping on prepared VFs, VFs the host cannot see, VFs already in pods DRA
//! did not prepare, and `roceReady` from the node's RdmaNodeState. Fake
//! kubelet, real control plane, simulated node, as in `dra_kubelet.rs`.

mod dra_fixtures;

use std::time::Duration;

use dra_fixtures::common::dra::*;
use dra_fixtures::*;
use kube_rdma_device_plugin::dra::api::health::HealthStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_stream_flips_when_a_pf_link_goes_down_and_slices_follow() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&["--rescan-interval", "0.2"]);
    let mut p = register(&env.reg_socket()).await;
    let mut s = p.watch_health().await;
    let first = wait_health(&mut s, "the full list", |m| m.devices.len() == 16).await;
    assert!(first.devices.iter().all(|d| d.health == HealthStatus::Healthy as i32));
    let id = first.devices[0].device.as_ref().unwrap();
    assert_eq!(id.pool_name, NODE);
    assert!(first.devices[0].last_updated_time > 1_600_000_000);
    let g0 = generation(&env.wait_slices("published", |s| device_count(s) == 16).await);

    sim.set_operstate("ens1f0np0", "down").unwrap();
    let down = wait_health(&mut s, "PF 0's VFs unhealthy", |m| {
        m.devices.iter().filter(|d| d.health == HealthStatus::Unhealthy as i32).count() == 8
    })
    .await;
    assert_eq!(down.devices.len(), 16, "always the full list");
    let sick: Vec<&str> = down
        .devices
        .iter()
        .filter(|d| d.health == HealthStatus::Unhealthy as i32)
        .map(|d| d.device.as_ref().unwrap().device_name.as_str())
        .collect();
    assert!(sick.iter().all(|n| n.starts_with("pci-0000-3d-")), "{sick:?}");
    let slices = env
        .wait_slices("healthy=false on PF 0's VFs", |s| {
            attrs(s, "pci-0000-3d-00-1")["kuberdma.io/healthy"] == json!({"bool": false})
        })
        .await;
    assert!(generation(&slices) > g0);
    assert_eq!(attrs(&slices, "pci-0000-af-00-1")["kuberdma.io/healthy"], json!({"bool": true}));

    sim.set_operstate("ens1f0np0", "up").unwrap();
    wait_health(&mut s, "healthy again", |m| {
        m.devices.iter().all(|d| d.health == HealthStatus::Healthy as i32)
    })
    .await;
    // Unchanged health is sent again before the kubelet's 30 s timeout.
    let t0 = std::time::Instant::now();
    let again = tokio::time::timeout(Duration::from_secs(15), s.message())
        .await
        .expect("refresh in time")
        .unwrap()
        .unwrap();
    assert_eq!(again.devices.len(), 16);
    assert!(t0.elapsed() < Duration::from_secs(12));
    driver.stop().await;
}

/// Regression (issue 25): while a VF's netdev is in a pod its device lost the
/// `netdev` and `portState` attributes, so every pod start and stop
/// republished the pool under a new generation. PF 1's link going down and
/// up is the marker that rescans ran meanwhile: the only generations are its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_starting_and_stopping_on_a_prepared_vf_leaves_the_slices_as_they_were() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&["--rescan-interval", "0.1"]);
    let mut p = register(&env.reg_socket()).await;
    let slices = env.wait_slices("published", |s| device_count(s) == 16).await;
    let g0 = generation(&slices);
    let before = attrs(&slices, "pci-0000-3d-00-1").clone();
    assert_eq!(before["kuberdma.io/netdev"], json!({"string": "ens1f0np0v0"}));
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-a").await;
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");

    // The CNI moves the VF's netdev into the pod.
    sim.move_vf_into_pod(pci("0000:3d:00.1")).unwrap();
    sim.set_operstate("ens1f1np1", "down").unwrap();
    let slices = env
        .wait_slices("PF 1's VFs unhealthy", |s| {
            attrs(s, "pci-0000-af-00-1")["kuberdma.io/healthy"] == json!({"bool": false})
        })
        .await;
    assert_eq!(attrs(&slices, "pci-0000-3d-00-1"), &before, "the VF in the pod keeps its attributes");
    assert_eq!(generation(&slices), g0 + 1, "only PF 1's change made a generation");

    // A restarted driver has no memory of the host's view; the prepared record names the
    // VF's netdev, so it publishes the same content (and writes nothing).
    driver.stop().await;
    let driver = env.spawn(&["--rescan-interval", "0.1"]);
    register(&env.reg_socket()).await;
    driver.wait_log("first ResourceSlices published").await;
    let slices = env.slices().await;
    assert_eq!(attrs(&slices, "pci-0000-3d-00-1"), &before);
    assert_eq!(generation(&slices), g0 + 1, "a restart with a pod running changed the slices");

    // The pod stops: the VF comes back to the host.
    sim.return_vf_from_pod(pci("0000:3d:00.1")).unwrap();
    sim.set_operstate("ens1f1np1", "up").unwrap();
    let slices = env
        .wait_slices("PF 1's VFs healthy again", |s| {
            attrs(s, "pci-0000-af-00-1")["kuberdma.io/healthy"] == json!({"bool": true})
        })
        .await;
    assert_eq!(attrs(&slices, "pci-0000-3d-00-1"), &before);
    assert_eq!(generation(&slices), g0 + 2);
    driver.stop().await;
}

/// Regression (issue 25): on a node where the host sees nothing of the RDMA
/// device of a VF in a pod (exclusive RDMA netns mode, no uverbs sibling), the
/// driver, planning without the device plugin's in-pod memory, published it
/// `healthy=false`. Prepared for a claim, it is in use, not broken (the
/// device plugin's rule, with the claim as the kubelet's word); a VF nobody
/// prepared that vanishes so is not ours to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_vf_the_host_cannot_see_in_its_pod_stays_healthy_with_its_attributes() {
    let mut sim = exclusive_sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&["--rescan-interval", "0.1"]);
    let mut p = register(&env.reg_socket()).await;
    let mut health = p.watch_health().await;
    let slices = env.wait_slices("published", |s| device_count(s) == 16).await;
    let g0 = generation(&slices);
    let before = attrs(&slices, "pci-0000-af-00-2").clone();
    assert_eq!(before["kuberdma.io/rdmaDevice"], json!({"string": "mlx5_11"}));
    assert_eq!(before["kuberdma.io/portState"], json!({"string": "ACTIVE"}));
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-af-00-2")], json!([]), "pod-a").await;
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");

    for vf in ["0000:af:00.2", "0000:af:00.3"] {
        sim.move_vf_into_pod(pci(vf)).unwrap();
    }
    sim.hide_rdma_trace(pci("0000:af:00.2")).unwrap();
    sim.hide_rdma_trace(pci("0000:af:00.3")).unwrap();
    // A VF in a pod that no claim of ours holds is not offered (issue 36, D11).
    let slices = env.wait_slices("the unprepared VF withheld", |s| device_count(s) == 15).await;
    assert!(slices[0]["spec"]["devices"].as_array().unwrap().iter().all(|d| d["name"] != "pci-0000-af-00-3"));
    assert_eq!(attrs(&slices, "pci-0000-af-00-2"), &before, "in use: healthy, and the attributes it had");
    assert_eq!(generation(&slices), g0 + 1, "only the unprepared VF changed");
    let m = wait_health(&mut health, "the list without the unprepared VF", |m| m.devices.len() == 15).await;
    let prepared =
        m.devices.iter().find(|d| d.device.as_ref().unwrap().device_name == "pci-0000-af-00-2").unwrap();
    assert_eq!(prepared.health, HealthStatus::Healthy as i32);
    // The claim is still answered (from the checkpoint) while its VF is in the pod.
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");

    // Regression (audit): a restarted driver has no view of the host from before, and
    // the host shows nothing of the VF's RDMA device; its prepared record (RDMA devices,
    // port state) gives the same attributes: `rdmaDevice` and `portState` were lost.
    let rec = nic::prepared::read_claim(&env.prepared, &a).unwrap().expect("checkpointed");
    assert_eq!(rec.devices[0].port_state.as_deref(), Some("ACTIVE"), "{rec:?}");
    driver.stop().await;
    let driver = env.spawn(&["--rescan-interval", "0.1"]);
    let mut p = register(&env.reg_socket()).await;
    driver.wait_log("first ResourceSlices published").await;
    let mut health = p.watch_health().await;
    // The unprepared VF is nobody's, as far as the restarted driver can tell (no RDMA
    // trace, no claim): it is no device of the pool any more, so not offered either.
    wait_health(&mut health, "the list without the unprepared VF", |m| m.devices.len() == 15).await;
    let slices = env.slices().await;
    assert_eq!(device_count(&slices), 15);
    assert_eq!(attrs(&slices, "pci-0000-af-00-2"), &before, "the prepared VF's attributes after a restart");
    assert_eq!(generation(&slices), g0 + 1, "a restart with the same content wrote nothing");
    // Rescans since (each plans with the prepared records) change nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = env.slices().await;
    assert_eq!((attrs(&again, "pci-0000-af-00-2"), generation(&again)), (&before, g0 + 1));
    driver.stop().await;
}

fn withheld_line(device: &str, reason: &str) -> String {
    format!("kuberdma_dra_device_withheld{{device=\"{device}\",resource=\"kuberdma.io/rdma_vfs\",reason=\"{reason}\"}} 1")
}

/// Regression (issue 36, D11): after a switch from device plugin mode with a pod
/// running, the driver published the pod's VFs and a claim was prepared with them.
/// The kubelet's PodResources (what device plugin pods hold, moved or not) and the
/// host (a VF in a netns that no prepared claim holds) each keep a VF out of the
/// slices from the very first one, a claim allocated one is refused at prepare,
/// and it comes back once its pod is gone. Without PodResources the driver is not
/// ready and keeps withholding what it last said and what is in a netns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vfs_already_in_pods_dra_did_not_prepare_are_never_offered_and_come_back_when_freed() {
    let mut sim = sim();
    let mut env = Env::new(NODE, sim.roots()).await;
    // The device plugin pod from before the switch: three VFs, two moved into it by the CNI
    // and one used without a network attachment; a fourth taken by something the kubelet
    // does not report.
    let held = ["0000:3d:00.1", "0000:3d:00.2", "0000:3d:00.3"];
    env.pod_resources.assign("dp-pod", "kuberdma.io/rdma_vfs", &held);
    for vf in ["0000:3d:00.1", "0000:3d:00.2", "0000:3d:00.4"] {
        sim.move_vf_into_pod(pci(vf)).unwrap();
    }
    let driver = env.spawn(&["--rescan-interval", "0.1", "--metrics-addr", "127.0.0.1:0"]);
    let metrics = driver.metrics_addr().await;
    let mut p = register(&env.reg_socket()).await;
    driver.wait_log("first ResourceSlices published").await;
    let slices = env.slices().await;
    let taken = ["pci-0000-3d-00-1", "pci-0000-3d-00-2", "pci-0000-3d-00-3", "pci-0000-3d-00-4"];
    assert_eq!(device_count(&slices), 12, "{:?}", names(&slices));
    assert!(taken.iter().all(|t| !names(&slices).contains(&t.to_string())), "{:?}", names(&slices));
    assert_eq!(generation(&slices), 1, "never published, not even in the first slice");
    for (dev, reason) in [
        ("pci-0000-3d-00-1", "device-plugin"),
        ("pci-0000-3d-00-3", "device-plugin"),
        ("pci-0000-3d-00-4", "netns"),
    ] {
        wait_metric(&metrics, &withheld_line(dev, reason)).await;
    }
    wait_metric(&metrics, "kuberdma_dra_pod_resources_up 1").await;
    let log = driver.log();
    assert!(
        log.contains("device withheld") && log.contains("the kubelet assigned it to pod default/dp-pod"),
        "{log}"
    );
    // A claim allocated one of them (a scheduler that raced the switch) is refused, naming why.
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-a").await;
    let e = p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error.clone();
    assert!(e.contains("withheld, not offered to claims") && e.contains("default/dp-pod"), "{e}");
    assert!(!env.cdi.join(format!("kuberdma.io-claim_{a}.json")).exists());
    // A VF prepared here and moved into its pod stays offered (its claim holds it).
    let b = env.create_claim("b", &[("vf", DRIVER, "pci-0000-3d-00-5")], json!([]), "pod-b").await;
    assert_eq!(p.prepare(vec![claim_ref("b", &b)]).await.claims[&b].error, "");
    sim.move_vf_into_pod(pci("0000:3d:00.5")).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(device_count(&env.slices().await), 12);

    // The device plugin pod is deleted: its VFs come back; the one something else holds does not.
    env.pod_resources.assign("dp-pod", "kuberdma.io/rdma_vfs", &[]);
    for vf in ["0000:3d:00.1", "0000:3d:00.2"] {
        sim.return_vf_from_pod(pci(vf)).unwrap();
    }
    let slices = env.wait_slices("three VFs back", |s| device_count(s) == 15).await;
    assert!(!names(&slices).contains(&"pci-0000-3d-00-4".to_string()));
    wait_metric(&metrics, &withheld_line("pci-0000-3d-00-4", "netns")).await;
    driver.wait_log("device no longer withheld").await;
    sim.return_vf_from_pod(pci("0000:3d:00.4")).unwrap();
    env.wait_slices("all back", |s| device_count(s) == 16).await;

    // PodResources goes away after naming a VF: not ready, and fail safe.
    env.pod_resources.assign("dp-pod-2", "kuberdma.io/rdma_vfs", &["0000:3d:00.6"]);
    env.wait_slices("the new pod's VF withheld", |s| device_count(s) == 15).await;
    env.pod_resources.stop();
    let (code, body) = wait_healthz(&metrics, "pod-resources: unreachable, retrying").await;
    assert_eq!(code, 503, "{body}");
    wait_metric(&metrics, "kuberdma_dra_pod_resources_up 0").await;
    driver.wait_log("the kubelet's PodResources is unreachable").await;
    sim.move_vf_into_pod(pci("0000:3d:00.7")).unwrap();
    let slices = env.wait_slices("the VF moved meanwhile withheld too", |s| device_count(s) == 14).await;
    for gone in ["pci-0000-3d-00-6", "pci-0000-3d-00-7"] {
        assert!(!names(&slices).contains(&gone.to_string()), "{gone}: {:?}", names(&slices));
    }
    assert!(p.unprepare(vec![claim_ref("b", &b)]).await.claims[&b].error.is_empty());
    driver.stop().await;
}

/// roceReady follows the node's RdmaNodeState, also across a kube-apiserver
/// restart after etcd was compacted: with the watch cache off (so the server
/// answers from etcd) the driver's watch resumes from a resourceVersion that
/// is gone, gets 410 Gone, and lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roce_ready_follows_the_nodes_rdmanodestate() {
    let sim = sim();
    let mut env = Env::with_args(NODE, sim.roots(), &["--watch-cache=false"]).await;
    tokio::task::block_in_place(|| env.apply_crds());
    let driver = env.spawn(&[]);
    register(&env.reg_socket()).await;
    env.wait_slices("published", |s| device_count(s) == 16).await;

    let check = |iface: &str, result: &str| json!({"name": "pfc", "interface": iface, "result": result, "expected": "3", "actual": "3"});
    let set_checks = |pf0: &'static str, pf1: &'static str| json!({"checks": [check("ens1f0np0", pf0), check("ens1f1np1", pf1)]});
    env.create(
        "rdmanodestates",
        json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState",
               "metadata": {"name": NODE}, "spec": {"nodeName": NODE}}),
    )
    .await;
    env.patch_status("rdmanodestates", None, NODE, set_checks("Pass", "Fail")).await;
    let slices = env
        .wait_slices("roceReady on both PFs", |s| {
            attrs(s, "pci-0000-af-00-1").get("kuberdma.io/roceReady").is_some()
        })
        .await;
    assert_eq!(attrs(&slices, "pci-0000-3d-00-1")["kuberdma.io/roceReady"], json!({"bool": true}));
    assert_eq!(attrs(&slices, "pci-0000-af-00-1")["kuberdma.io/roceReady"], json!({"bool": false}));

    env.patch_status("rdmanodestates", None, NODE, set_checks("Pass", "Pass")).await;
    env.wait_slices("PF 1 ready", |s| {
        attrs(s, "pci-0000-af-00-1")["kuberdma.io/roceReady"] == json!({"bool": true})
    })
    .await;

    // etcd moves on (two writes the driver does not watch) and is compacted; kube-apiserver
    // restarts, dropping every watch.
    for n in ["moves-etcd-on-1", "moves-etcd-on-2"] {
        env.create(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": n, "namespace": "default"}}),
        )
        .await;
    }
    let mark = env.audit().len();
    tokio::task::block_in_place(|| {
        env.api.compact().unwrap();
        env.api.restart().unwrap();
    });
    env.patch_status("rdmanodestates", None, NODE, set_checks("Fail", "Pass")).await;
    env.wait_slices("PF 0 not ready after the restart", |s| {
        attrs(s, "pci-0000-3d-00-1")["kuberdma.io/roceReady"] == json!({"bool": false})
    })
    .await;
    let relists: Vec<String> = Env::driver_requests(&env.audit()[mark..])
        .into_iter()
        .filter(|r| r.starts_with("list rdmanodestates"))
        .collect();
    assert!(!relists.is_empty(), "no list after 410: {:?}", Env::driver_requests(&env.audit()[mark..]));

    env.delete("rdmanodestates", None, NODE).await;
    env.wait_slices("no state, no roceReady", |s| {
        attrs(s, "pci-0000-3d-00-1").get("kuberdma.io/roceReady").is_none()
    })
    .await;
    driver.stop().await;
}
