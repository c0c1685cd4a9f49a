//! The daemon against an in-repo fake kubelet, over real unix sockets, on
//! simulated nodes. Each test is one scenario with timeouts.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kube_rdma_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Empty,
    PreferredAllocationRequest,
};
use nic::PciAddr;

const T: Duration = Duration::from_secs(5);

/// A config with one pool, `a`, on the first PF of `cx6dx-dual`.
const POOL_A: &str = "pools:\n- name: a\n  selectors: {rootDevices: [\"0000:3d:00.0\"]}\n";

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_v1beta1_and_first_list_is_full_with_numa() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let kubelet = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(60)));

    let reg = kubelet.next_registration(T).await;
    assert_eq!(reg.version, "v1beta1");
    assert_eq!(reg.endpoint, SOCK);
    assert_eq!(reg.resource_name, "kuberdma.io/rdma_vfs");
    let opts = reg.options.expect("options");
    assert!(opts.get_preferred_allocation_available);
    assert!(!opts.pre_start_required);
    // The socket is served before registration: it exists now.
    assert!(dirs.kubelet.join(SOCK).exists());

    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let o = c.get_device_plugin_options(Empty {}).await.unwrap().into_inner();
    assert!(o.get_preferred_allocation_available);
    let mut s = list_and_watch(&mut c).await;
    let first = s.message().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 16, "the first response is the full list");
    let numa: BTreeMap<&str, i64> =
        first.devices.iter().map(|d| (d.id.as_str(), d.topology.as_ref().unwrap().nodes[0].id)).collect();
    assert_eq!(numa["0000:3d:00.1"], 0);
    assert_eq!(numa["0000:af:01.0"], 1);
    assert!(first.devices.iter().all(|d| d.health == "Healthy"));
    // CDI spec written for the pool.
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dirs.cdi.join("kuberdma.io-rdma_vfs.json")).unwrap()).unwrap();
    assert_eq!(spec["kind"], "kuberdma.io/rdma_vfs");
    assert_eq!(spec["devices"].as_array().unwrap().len(), 16);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_gives_device_specs_env_cdi_and_device_info() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(60)));
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let ids = vec!["0000:3d:00.1".to_string(), "0000:3d:00.2".to_string()];
    let r = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: ids.clone() }],
        })
        .await
        .unwrap()
        .into_inner();
    let cr = &r.container_responses[0];
    let paths: Vec<(&str, &str, &str)> = cr
        .devices
        .iter()
        .map(|d| (d.host_path.as_str(), d.container_path.as_str(), d.permissions.as_str()))
        .collect();
    assert_eq!(
        paths,
        vec![
            ("/dev/infiniband/uverbs2", "/dev/infiniband/uverbs2", "rw"),
            ("/dev/infiniband/umad2", "/dev/infiniband/umad2", "rw"),
            ("/dev/infiniband/issm2", "/dev/infiniband/issm2", "rw"),
            ("/dev/infiniband/uverbs3", "/dev/infiniband/uverbs3", "rw"),
            ("/dev/infiniband/umad3", "/dev/infiniband/umad3", "rw"),
            ("/dev/infiniband/issm3", "/dev/infiniband/issm3", "rw"),
            ("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
        ],
        "node paths, never the sim root"
    );
    assert_eq!(cr.envs["PCIDEVICE_KUBERDMA_IO_RDMA_VFS"], "0000:3d:00.1,0000:3d:00.2");
    let info: serde_json::Value =
        serde_json::from_str(&cr.envs["PCIDEVICE_KUBERDMA_IO_RDMA_VFS_INFO"]).unwrap();
    // As sriov-network-device-plugin's info providers write it.
    assert_eq!(
        info["0000:3d:00.1"],
        serde_json::json!({"generic": {"deviceID": "0000:3d:00.1"}, "rdma": {
            "uverbs": "/dev/infiniband/uverbs2", "umad": "/dev/infiniband/umad2",
            "issm": "/dev/infiniband/issm2", "rdma_cm": "/dev/infiniband/rdma_cm",
            "rdma_dev": "mlx5_2"}})
    );
    // Per-pool hints, nothing global that a second pool would overwrite, no GID index.
    assert_eq!(cr.envs["KUBERDMA_RDMA_VFS_RDMA_DEVICES"], "mlx5_2,mlx5_3");
    assert_eq!(cr.envs["KUBERDMA_RDMA_VFS_UCX_NET_DEVICES"], "mlx5_2:1,mlx5_3:1");
    assert_eq!(cr.envs["NCCL_IB_ROCE_VERSION_NUM"], "2");
    for gone in ["NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_IB_GID_INDEX"] {
        assert!(!cr.envs.contains_key(gone), "{gone} set: {:?}", cr.envs);
    }
    let cdi: Vec<&str> = cr.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(cdi, vec!["kuberdma.io/rdma_vfs=0000:3d:00.1", "kuberdma.io/rdma_vfs=0000:3d:00.2"]);
    // The CDI spec on disk defines those names.
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dirs.cdi.join("kuberdma.io-rdma_vfs.json")).unwrap()).unwrap();
    let dev = spec["devices"].as_array().unwrap().iter().find(|d| d["name"] == "0000:3d:00.1").unwrap();
    let nodes: Vec<&str> = dev["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "/dev/infiniband/uverbs2",
            "/dev/infiniband/umad2",
            "/dev/infiniband/issm2",
            "/dev/infiniband/rdma_cm"
        ]
    );
    // Device names are PCI addresses, which start with a digit: CDI 0.5.0, not newer.
    assert_eq!(spec["cdiVersion"], "0.5.0");
    // Device-info file for Multus.
    let di: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dirs.devinfo.join("kuberdma.io-rdma_vfs-0000:3d:00.1-device.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        di,
        serde_json::json!({"type": "pci", "version": "1.1.0", "pci": {
            "pci-address": "0000:3d:00.1", "pf-pci-address": "0000:3d:00.0", "rdma-device": "mlx5_2"}})
    );

    // Unknown IDs are an error naming them, never a silent skip.
    let e = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["0000:3d:00.1".into(), "0000:99:00.1".into()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("0000:99:00.1"), "{}", e.message());
    d.stop().await;
    // Device-info files are removed on shutdown, and so is the socket; the CDI
    // spec stays for containers that restart with their checkpointed answer.
    assert!(!dirs.devinfo.join("kuberdma.io-rdma_vfs-0000:3d:00.1-device.json").exists());
    assert!(!dirs.kubelet.join(SOCK).exists());
    assert!(dirs.cdi.join("kuberdma.io-rdma_vfs.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_another_pool_and_unhealthy_ids_are_refused_by_name() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.tmp.path().join("pools.yaml");
    std::fs::write(
        &cfg,
        "pools:\n- name: numa0\n  selectors: {numaNodes: [0]}\n- name: numa1\n  selectors: {numaNodes: [1]}\n",
    )
    .unwrap();
    let mut sim = sim;
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), Some(cfg), Duration::from_millis(100)));
    let mut c0 = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-numa0.sock").await;
    let e = c0
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:af:00.1".into()] }],
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("unknown device IDs: 0000:af:00.1"), "{}", e.message());
    assert!(e.message().contains("kuberdma.io/numa0"), "{}", e.message());

    sim.set_operstate("ens1f0np0", "down").unwrap();
    let mut s = list_and_watch(&mut c0).await;
    wait_list(&mut s, T, "NUMA 0 VFs unhealthy", |m| health_of(m, "0000:3d:00.1") == Some("Unhealthy")).await;
    let e = c0
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:3d:00.1".into()] }],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("0000:3d:00.1") && e.message().contains("link down"), "{}", e.message());
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_pf_link_vf_removal_and_uverbs_removal() {
    let mut sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_millis(100)));
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    wait_list(&mut s, T, "all healthy", |m| m.devices.iter().all(|d| d.health == "Healthy")).await;

    // PF link down: every VF of that PF goes Unhealthy, the other PF's stay Healthy.
    sim.set_operstate("ens1f0np0", "down").unwrap();
    let m = wait_list(&mut s, T, "PF0 VFs unhealthy", |m| health_of(m, "0000:3d:00.1") == Some("Unhealthy"))
        .await;
    assert!(m.devices.iter().filter(|d| d.id.starts_with("0000:3d")).all(|d| d.health == "Unhealthy"));
    assert!(m.devices.iter().filter(|d| d.id.starts_with("0000:af")).all(|d| d.health == "Healthy"));
    // ... and back up.
    sim.set_operstate("ens1f0np0", "up").unwrap();
    wait_list(&mut s, T, "PF0 VFs healthy again", |m| m.devices.iter().all(|d| d.health == "Healthy")).await;

    // VF removed (echo 1 > remove): still listed, Unhealthy.
    sim.remove_vf(pci("0000:af:00.3")).unwrap();
    let m =
        wait_list(&mut s, T, "removed VF unhealthy", |m| health_of(m, "0000:af:00.3") == Some("Unhealthy"))
            .await;
    let ids: Vec<(&str, &str)> = m.devices.iter().map(|d| (d.id.as_str(), d.health.as_str())).collect();
    assert_eq!(m.devices.len(), 16, "{ids:?}");

    // uverbs node removed: that VF Unhealthy.
    sim.remove_char_dev("uverbs4").unwrap(); // mlx5_4 = VF 0000:3d:00.3
    wait_list(&mut s, T, "VF without uverbs unhealthy", |m| {
        health_of(m, "0000:3d:00.3") == Some("Unhealthy")
    })
    .await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescan_picks_up_numvfs_change_without_restart() {
    let mut sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_millis(100)));
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    wait_list(&mut s, T, "16 VFs", |m| m.devices.len() == 16).await;
    sim.set_num_vfs(pci("0000:af:00.0"), 2).unwrap();
    let m = wait_list(&mut s, T, "10 VFs", |m| m.devices.len() == 10).await;
    assert!(m.devices.iter().all(|d| d.health == "Healthy"));
    sim.set_num_vfs(pci("0000:af:00.0"), 12).unwrap();
    wait_list(&mut s, T, "20 VFs", |m| m.devices.len() == 20).await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_restart_is_followed_by_reregistration_within_a_second() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(3600)));
    k.next_registration(T).await;
    // The wipe removes every socket (the daemon may re-create its own at
    // once, so there is no gap to look for); what must follow is a new
    // registration and a served socket.
    k.stop_and_wipe().await;
    let started = Instant::now();
    let k2 = FakeKubelet::start(&dirs.kubelet);
    let reg = k2.next_registration(Duration::from_secs(1)).await;
    let took = started.elapsed();
    assert_eq!(reg.resource_name, "kuberdma.io/rdma_vfs");
    assert!(took < Duration::from_secs(1), "re-registration took {took:?}");
    // The socket is served again and answers.
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 16);
    d.stop().await;
}

/// A kubelet reinstall or host cleanup removes the whole device-plugins
/// directory: the daemon waits for it, serves its socket in the new one, and
/// registers with the kubelet that comes up there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_dir_removed_and_recreated_is_served_and_registered_again() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let mut k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(3600)));
    k.next_registration(T).await;
    k.stop_and_wipe().await;
    // The daemon re-serves a deleted socket at once, so removing the directory
    // may race with it (ENOTEMPTY): retry as a cleanup script would.
    let removed = Instant::now();
    while std::fs::remove_dir_all(&dirs.kubelet).is_err() || dirs.kubelet.exists() {
        assert!(removed.elapsed() < T, "could not remove {}", dirs.kubelet.display());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The daemon may have made the directory again to serve its socket; the
    // kubelet does the same (mkdir -p) when it starts.
    std::fs::create_dir_all(&dirs.kubelet).unwrap();
    let k2 = FakeKubelet::start(&dirs.kubelet);
    let reg = k2.next_registration(T).await;
    assert_eq!(reg.resource_name, "kuberdma.io/rdma_vfs");
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 16);
    d.stop().await;
}

/// A pool whose socket cannot be bound is kept, not dropped: it is served and
/// registered as soon as the kubelet directory lets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_cannot_bind_is_served_once_the_path_is_free() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.write_config(POOL_A);
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), Some(cfg.clone()), Duration::from_secs(3600)));
    assert_eq!(k.next_registration(T).await.resource_name, "kuberdma.io/a");
    // Pool b's socket path is taken by a directory: binding fails.
    let blocked = dirs.kubelet.join("kuberdma-kuberdma.io-b.sock");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(&cfg, format!("{POOL_A}- name: b\n  selectors: {{rootDevices: [\"0000:af:00.0\"]}}\n"))
        .unwrap();
    let regs = k.registrations.clone();
    let early =
        tokio::time::timeout(Duration::from_millis(500), async { regs.lock().await.recv().await }).await;
    assert!(early.is_err(), "pool b cannot be registered before it is served: {early:?}");
    std::fs::remove_dir(&blocked).unwrap();
    assert_eq!(k.next_registration(T).await.resource_name, "kuberdma.io/b");
    let mut c = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-b.sock").await;
    let mut s = list_and_watch(&mut c).await;
    assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 8);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_leaves_the_server_serving() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(3600)));
    for _ in 0..3 {
        let mut c = plugin(&dirs.kubelet, SOCK).await;
        let mut s = list_and_watch(&mut c).await;
        assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 16);
        drop(s);
        drop(c);
    }
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    assert!(c.get_device_plugin_options(Empty {}).await.is_ok());
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_reloads_pools_and_unchanged_pools_keep_serving() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.write_config(POOL_A);
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), Some(cfg.clone()), Duration::from_secs(3600)));
    assert_eq!(k.next_registration(T).await.resource_name, "kuberdma.io/a");
    let mut ca = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-a.sock").await;
    let mut sa = list_and_watch(&mut ca).await;
    assert_eq!(sa.message().await.unwrap().unwrap().devices.len(), 8);

    std::fs::write(
        &cfg,
        format!("{POOL_A}- name: b\n  policy: spread\n  selectors: {{rootDevices: [\"0000:af:00.0\"]}}\n"),
    )
    .unwrap();
    let reg = k.next_registration(T).await;
    assert_eq!(reg.resource_name, "kuberdma.io/b");
    let mut cb = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-b.sock").await;
    let mut sb = list_and_watch(&mut cb).await;
    assert_eq!(sb.message().await.unwrap().unwrap().devices.len(), 8);
    // Pool a was not restarted: its open stream is still alive and its server answers.
    assert!(ca.get_device_plugin_options(Empty {}).await.is_ok());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sa.message()).await.is_err(),
        "pool a's stream should be idle, not ended"
    );
    // An invalid config keeps the running pools.
    std::fs::write(&cfg, "pools: [{name: a, selectors: {vendors: [zzzz]}}]\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cb.get_device_plugin_options(Empty {}).await.is_ok());
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_mode_exposes_n_ids_per_hca() {
    let sim = sim("mixed.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.tmp.path().join("shared.yaml");
    std::fs::write(
        &cfg,
        "pools:\n- name: hca\n  mode: shared\n  rdmaHcaMax: 4\n  selectors: {ifNames: [ens5f0np0]}\n",
    )
    .unwrap();
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), Some(cfg), Duration::from_secs(3600)));
    assert_eq!(k.next_registration(T).await.resource_name, "kuberdma.io/hca");
    let mut c = plugin(&dirs.kubelet, "kuberdma-kuberdma.io-hca.sock").await;
    let mut s = list_and_watch(&mut c).await;
    let m = s.message().await.unwrap().unwrap();
    let ids: Vec<&str> = m.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, vec!["0000:86:00.0-0000", "0000:86:00.0-0001", "0000:86:00.0-0002", "0000:86:00.0-0003"]);
    assert!(m.devices.iter().all(|d| d.topology.as_ref().unwrap().nodes[0].id == 1));
    let r = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["0000:86:00.0-0002".into()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let cr = &r.container_responses[0];
    assert_eq!(cr.devices[0].host_path, "/dev/infiniband/uverbs2");
    assert_eq!(cr.envs["KUBERDMA_HCA_RDMA_DEVICES"], "mlx5_1");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_allocation_over_grpc_packs_on_one_pf() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(sim.roots(), None, Duration::from_secs(3600)));
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let avail: Vec<String> =
        vec!["0000:af:00.2", "0000:3d:00.3", "0000:af:00.1", "0000:3d:00.4", "0000:af:00.3"]
            .into_iter()
            .map(String::from)
            .collect();
    let r = c
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: avail,
                must_include_device_i_ds: vec![],
                allocation_size: 3,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    // PF 0000:3d has only 2 available: the 3 come from PF 0000:af (NUMA 1), which fits them.
    assert_eq!(r.container_responses[0].device_i_ds, vec!["0000:af:00.1", "0000:af:00.2", "0000:af:00.3"]);
    d.stop().await;
}

/// The real binary: SIGTERM removes sockets and device-info files, keeps the
/// CDI specs, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_removes_sockets_and_device_info_keeps_cdi_specs_and_exits_zero() {
    let dirs = Dirs::new();
    let k = FakeKubelet::start(&dirs.kubelet);
    let mut child = dirs
        .daemon_command()
        .arg("--sim")
        .arg(examples().join("cx6dx-dual.yaml"))
        .arg("--metrics-addr")
        .arg("127.0.0.1:0")
        .spawn()
        .unwrap();
    k.next_registration(T).await;
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    c.allocate(AllocateRequest {
        container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:3d:00.1".into()] }],
    })
    .await
    .unwrap();
    assert!(dirs.devinfo.join("kuberdma.io-rdma_vfs-0000:3d:00.1-device.json").exists());
    assert!(dirs.cdi.join("kuberdma.io-rdma_vfs.json").exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = tokio::time::timeout(T, child.wait()).await.unwrap().unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(!dirs.kubelet.join(SOCK).exists());
    assert!(dirs.cdi.join("kuberdma.io-rdma_vfs.json").exists());
    assert!(std::fs::read_dir(&dirs.devinfo).unwrap().next().is_none(), "device-info files left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_healthz_are_served() {
    let sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    // A kubelet that accepts Register and never watches first: the plugin is
    // not ready, and says why.
    let mut k =
        FakeKubelet::start_with(&dirs.kubelet, Behaviour { list_and_watch: false, ..Behaviour::default() });
    // Pick a free port, then hand it to the daemon.
    let port = kube_rdma_e2e::daemon::free_loopback_addr().unwrap();
    let mut opts = dirs.options(sim.roots(), None, Duration::from_secs(3600));
    opts.metrics_addr = Some(port);
    opts.registration.verify = Duration::from_millis(300);
    let d = InProc::spawn(opts);
    k.next_registration(T).await;
    let get = |path: &'static str| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(port).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let deadline = Instant::now() + T;
    loop {
        let h = get("/healthz").await;
        assert!(h.starts_with("HTTP/1.1 503"), "{h}");
        if h.contains("kuberdma.io/rdma_vfs: not ready served=true registered=false streams=0 registration=retrying failures=")
            && h.contains("opened no ListAndWatch within 300ms")
        {
            break;
        }
        assert!(Instant::now() < deadline, "never said why: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(get("/livez").await.starts_with("HTTP/1.1 200"));
    let m = get("/metrics").await;
    assert!(m.contains("kuberdma_pool_registered{resource=\"kuberdma.io/rdma_vfs\"} 0"), "{m}");
    // A kubelet that watches (restarted): ready.
    k.stop_and_wipe().await;
    let _k = FakeKubelet::start(&dirs.kubelet);
    let deadline = Instant::now() + T;
    loop {
        let h = get("/healthz").await;
        if h.starts_with("HTTP/1.1 200") {
            assert!(
                h.contains(
                    "kuberdma.io/rdma_vfs: ok served=true registered=true streams=1 registration=registered"
                ),
                "{h}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never healthy: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = plugin(&dirs.kubelet, SOCK).await;
    c.allocate(AllocateRequest {
        container_requests: vec![ContainerAllocateRequest { devices_ids: vec!["0000:3d:00.1".into()] }],
    })
    .await
    .unwrap();
    let m = get("/metrics").await;
    assert!(m.contains("kuberdma_pool_capacity{resource=\"kuberdma.io/rdma_vfs\"} 16"), "{m}");
    // A query string (Prometheus `params:`, a cache buster) names the same route,
    // as on the operator's endpoints; an unknown path is still 404.
    let q = get("/metrics?x=1").await;
    assert!(q.starts_with("HTTP/1.1 200"), "{q}");
    let body = |r: &str| {
        r[r.find("\r\n\r\n").unwrap()..]
            .lines()
            .filter(|l| !l.contains("_seconds"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(body(&q), body(&m), "/metrics?x=1 answers as /metrics");
    assert!(get("/healthz?verbose").await.starts_with("HTTP/1.1 200"));
    assert!(get("/nope?x=1").await.starts_with("HTTP/1.1 404"));
    assert!(m.contains("kuberdma_pool_healthy{resource=\"kuberdma.io/rdma_vfs\"} 16"), "{m}");
    // In use now, not "ever allocated": no pod holds the VF yet (no PodResources here).
    assert!(m.contains("kuberdma_pool_allocated{resource=\"kuberdma.io/rdma_vfs\"} 0"), "{m}");
    assert!(
        m.contains("kuberdma_allocate_duration_seconds_count{resource=\"kuberdma.io/rdma_vfs\"} 1"),
        "{m}"
    );
    assert!(m.contains("kuberdma_pool_registered{resource=\"kuberdma.io/rdma_vfs\"} 1"), "{m}");
    let count = |name: &str| -> u64 {
        let key = format!("{name}{{resource=\"kuberdma.io/rdma_vfs\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {m}"))
    };
    // At least the one the deaf kubelet accepted and the one the watching kubelet did.
    assert!(count("kuberdma_pool_registrations_total") >= 2, "{m}");
    assert!(count("kuberdma_pool_registration_failures_total") >= 1, "{m}");
    d.stop().await;
}
