//! VFs in use by pods stay listed and Healthy, on a simulated node in
//! exclusive RDMA netns mode where the CNI's move hides the VF's netdev and
//! RDMA device from the host; the kubelet's PodResources API (a fake one over a
//! real unix socket) says what is in use now, and the daemon works without it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kube_rdma_device_plugin::allocate::preferred;
use kube_rdma_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    PreferredAllocationRequest,
};
use kube_rdma_device_plugin::config::Config;
use kube_rdma_device_plugin::inuse::{Allocations, Memory};
use kube_rdma_device_plugin::pools;
use nic::sim::Sim;
use nic::{NetnsMode, PciAddr};

const T: Duration = Duration::from_secs(5);

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

fn exclusive() -> Sim {
    let mut desc = nic::sim::load_desc(examples().join("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = NetnsMode::Exclusive;
    Sim::materialise(&desc).unwrap()
}

#[test]
fn a_vf_in_a_pod_is_healthy_and_keeps_what_was_learned_of_it() {
    let mut sim = exclusive();
    let vf = pci("0000:3d:00.2");
    let mut mem = Memory::default();
    let mut inv = nic::discover(&sim.roots());
    mem.observe(&mut inv);
    let before = pools::plan(&inv, &Config::default_pools()).pools.remove(0);
    let was = before.device("0000:3d:00.2").unwrap().clone();
    assert!(!was.in_use);

    sim.move_vf_into_pod(vf).unwrap();
    // With the memory of the earlier walk: ports and link layer as learned.
    let mut inv = nic::discover(&sim.roots());
    mem.observe(&mut inv);
    let (_, v) = inv.vf(vf).unwrap();
    assert!(v.rdma[0].in_other_netns && !v.rdma[0].ports.is_empty() && v.rdma[0].node_guid.is_some());
    let pool = pools::plan(&inv, &Config::default_pools()).pools.remove(0);
    let d = pool.device("0000:3d:00.2").unwrap();
    assert!(d.health.is_healthy(), "{:?}", d.health);
    assert!(d.in_use);
    assert_eq!(d.rdma[0].char_devs, was.rdma[0].char_devs);
    assert!(d.rdma[0].in_other_netns);
    assert_eq!(pool.devices.len(), 16);

    // A restarted daemon has no memory: the uverbs sibling still names the device.
    let inv = nic::discover(&sim.roots());
    let pool = pools::plan(&inv, &Config::default_pools()).pools.remove(0);
    let d = pool.device("0000:3d:00.2").unwrap();
    assert!(d.health.is_healthy() && d.in_use, "{d:?}");
    assert_eq!(d.rdma[0].name, "mlx5_3");
    assert_eq!(d.rdma[0].link_layer, Some(nic::LinkLayer::Ethernet), "from the PF");
    let r = kube_rdma_device_plugin::allocate::container_response(&pool, &["0000:3d:00.2".into()]).unwrap();
    assert!(r.devices.iter().any(|s| s.host_path == "/dev/infiniband/uverbs3"));

    // In a pod, its uverbs node gone: that is broken, not in use.
    sim.remove_char_dev("uverbs3").unwrap();
    let inv = nic::discover(&sim.roots());
    let pool = pools::plan(&inv, &Config::default_pools()).pools.remove(0);
    assert!(!pool.device("0000:3d:00.2").unwrap().health.is_healthy());
}

#[test]
fn the_kubelet_is_a_second_witness_of_use() {
    let mut sim = exclusive();
    sim.move_vf_into_pod(pci("0000:af:00.2")).unwrap();
    // A driver layout where discovery finds no RDMA trace of the VF in the pod.
    sim.hide_rdma_trace(pci("0000:af:00.2")).unwrap();
    let roots = sim.roots();
    let inv = nic::discover(&roots);
    let cfg = Config::default_pools();
    let alone = pools::plan(&inv, &cfg).pools.remove(0);
    assert!(alone.device("0000:af:00.2").is_none(), "no RDMA device seen: not selected by isRdma");
    let mut alloc = Allocations::default();
    alloc.by_resource.entry("kuberdma.io/rdma_vfs".into()).or_default().insert("0000:af:00.2".into());
    let with = pools::plan_with(&inv, &cfg, &alloc).pools.remove(0);
    let d = with.device("0000:af:00.2").unwrap();
    assert!(d.health.is_healthy() && d.in_use, "{d:?}");
}

#[test]
fn a_vf_the_kubelet_assigned_to_a_pool_without_rdma_stays_in_that_pool() {
    // The e2e node: an RDMA VF pool first, then a netdevice and a vfio pool on the E810.
    let desc = nic::sim::load_desc(examples().join("../../e2e/node.yaml")).unwrap();
    let mut sim = Sim::materialise(&desc).unwrap();
    let text = "pools:\n  - {name: rdma_vfs, selectors: {isRdma: true}}\n  \
                - {name: e810_netdev, selectors: {drivers: [iavf]}}\n  \
                - {name: e810_vfio, selectors: {drivers: [vfio-pci]}}\n";
    let cfg = Config::parse(text, std::path::Path::new("pools.yaml")).unwrap();
    // A vfio pod holds VF 2 (no netdev, ever); a Multus pod holds VF 0's netdev.
    sim.remove_netdev("ens2f0v0").unwrap();
    let inv = nic::discover(&sim.roots());
    let mut alloc = Allocations::default();
    alloc.by_resource.entry("kuberdma.io/e810_vfio".into()).or_default().insert("0000:5e:01.2".into());
    alloc.by_resource.entry("kuberdma.io/e810_netdev".into()).or_default().insert("0000:5e:01.0".into());
    let plan = pools::plan_with(&inv, &cfg, &alloc);
    let ids = |i: usize| plan.pools[i].devices.iter().map(|d| d.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(0), ["0000:3d:00.1", "0000:3d:00.2", "0000:3d:00.3", "0000:3d:00.4"]);
    assert_eq!(ids(1), ["0000:5e:01.0", "0000:5e:01.1"]);
    assert_eq!(ids(2), ["0000:5e:01.2", "0000:5e:01.3"]);
    for id in ["0000:5e:01.0", "0000:5e:01.2"] {
        let d = plan.pools.iter().find_map(|p| p.device(id)).unwrap();
        assert!(d.health.is_healthy() && d.in_use, "{d:?}");
    }
}

#[test]
fn preferred_allocation_leaves_devices_a_pod_still_holds_for_last() {
    let mut sim = exclusive();
    // The kubelet freed these (pod deleted) but the CNI has not taken them back yet.
    for v in ["0000:3d:00.1", "0000:3d:00.2"] {
        sim.move_vf_into_pod(pci(v)).unwrap();
    }
    let inv = nic::discover(&sim.roots());
    let pool = pools::plan(&inv, &Config::default_pools()).pools.remove(0);
    let avail: Vec<String> =
        ["0000:3d:00.1", "0000:3d:00.2", "0000:3d:00.3", "0000:3d:00.4"].map(String::from).to_vec();
    assert_eq!(preferred(&pool, &avail, &[], 2), ["0000:3d:00.3", "0000:3d:00.4"]);
    // Only when nothing else is left are they chosen.
    assert_eq!(preferred(&pool, &avail, &[], 3), ["0000:3d:00.3", "0000:3d:00.4", "0000:3d:00.1"]);
}

/// The daemon on a node where the CNI moves VFs into pods: no device ever
/// turns Unhealthy, and `kuberdma_pool_allocated` follows the kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_pods_vfs_healthy_and_counts_what_the_kubelet_assigned() {
    let mut sim = exclusive();
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let pr_sock = dirs.tmp.path().join("pod-resources/kubelet.sock");
    let pr = FakePodResources::start(&pr_sock);
    let port = kube_rdma_e2e::daemon::free_loopback_addr().unwrap();
    let mut opts = dirs.options(sim.roots(), None, Duration::from_millis(100));
    opts.metrics_addr = Some(port);
    opts.pod_resources = Some(pr_sock.clone());
    let d = InProc::spawn(opts);
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    wait_list(&mut s, T, "all healthy", |m| {
        m.devices.len() == 16 && m.devices.iter().all(|d| d.health == "Healthy")
    })
    .await;

    // Allocate, then the CNI moves four VFs into pods and the kubelet lists them.
    let ids = ["0000:3d:00.1", "0000:3d:00.2", "0000:af:00.1", "0000:af:00.2"];
    c.allocate(AllocateRequest {
        container_requests: vec![ContainerAllocateRequest { devices_ids: ids.map(String::from).to_vec() }],
    })
    .await
    .unwrap();
    for v in ids {
        sim.move_vf_into_pod(pci(v)).unwrap();
    }
    pr.assign("trainer-0", "kuberdma.io/rdma_vfs", &ids);
    let metric = |n: usize| format!("kuberdma_pool_allocated{{resource=\"kuberdma.io/rdma_vfs\"}} {n}");
    wait_metric(port, &metric(4)).await;
    // Several rescans later: still 16 devices, all Healthy (the bug was Unhealthy within a second).
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(600) {
        match tokio::time::timeout(Duration::from_millis(100), s.message()).await {
            Ok(Ok(Some(m))) => {
                assert_eq!(m.devices.len(), 16);
                assert!(m.devices.iter().all(|d| d.health == "Healthy"), "{m:?}");
            }
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => {}
        }
    }
    // Preferred allocation over gRPC picks free VFs before held ones.
    let avail: Vec<String> = ["0000:3d:00.1", "0000:3d:00.3"].map(String::from).to_vec();
    let r = c
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: avail,
                must_include_device_i_ds: vec![],
                allocation_size: 1,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.container_responses[0].device_i_ds, ["0000:3d:00.3"]);

    // One pod ends: the kubelet frees two, the CNI returns them.
    pr.assign("trainer-0", "kuberdma.io/rdma_vfs", &ids[2..]);
    for v in &ids[..2] {
        sim.return_vf_from_pod(pci(v)).unwrap();
    }
    wait_metric(port, &metric(2)).await;

    // The kubelet's PodResources socket goes away: the daemon keeps serving and
    // counts what the host shows (the two VFs still in a pod).
    let mut pr = pr;
    pr.stop();
    wait_metric(port, &metric(2)).await;
    sim.return_vf_from_pod(pci(ids[2])).unwrap();
    wait_metric(port, &metric(1)).await;
    assert!(c.get_device_plugin_options(kube_rdma_device_plugin::api::Empty {}).await.is_ok());
    d.stop().await;
}

async fn http_get(port: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(port).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn wait_metric(port: std::net::SocketAddr, line: &str) {
    let deadline = Instant::now() + T;
    loop {
        let m = http_get(port, "/metrics").await;
        if m.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in time:\n{m}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `discover` on such a node says the VF is in use, not broken.
#[test]
fn discover_shows_a_vf_in_a_pod_as_healthy_and_in_use() {
    let mut sim = exclusive();
    sim.move_vf_into_pod(pci("0000:af:00.4")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
        .arg("discover")
        .arg("--sysfs-root")
        .arg(&sim.roots().sysfs)
        .arg("--dev-root")
        .arg(&sim.roots().dev)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text.lines().find(|l| l.starts_with("0000:af:00.4")).unwrap();
    assert!(row.contains("[Healthy, in use by a pod]") && row.contains("mlx5_13"), "{row}");
}
