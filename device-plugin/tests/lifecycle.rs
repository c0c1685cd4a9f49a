//! Stopping and reloading with open ListAndWatch streams, socket names that
//! must fit `sun_path`, and config keys that change how the daemon runs
//! (`kubeletRootDir`, `periodicUpdateInterval`, shared pools on an
//! exclusive-mode node). Against the in-repo fake kubelet over real sockets.

mod common;

use std::time::Duration;

use common::*;
use kube_rdma_device_plugin::api::Empty;
use kube_rdma_device_plugin::{daemon, names};
use nic::NetnsMode;

const T: Duration = Duration::from_secs(5);

/// One pool per VF of `cx6dx-dual` (16 pools).
fn pool_per_vf(n: usize) -> String {
    let mut s = String::from("pools:\n");
    let vfs: Vec<String> = (1..=7)
        .map(|f| format!("0000:3d:00.{f}"))
        .chain(["0000:3d:01.0".to_string()])
        .chain((1..=7).map(|f| format!("0000:af:00.{f}")))
        .chain(["0000:af:01.0".to_string()])
        .collect();
    for (i, v) in vfs.iter().take(n).enumerate() {
        s.push_str(&format!("- name: p{i}\n  selectors: {{pciAddresses: [\"{v}\"]}}\n"));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_sixteen_pools_with_open_streams_ends_the_streams_removes_sockets_keeps_cdi_specs() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.write_config(&pool_per_vf(16));
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(node.roots(), Some(cfg), Duration::from_secs(3600)));
    let mut streams = vec![];
    for i in 0..16 {
        let _ = k.next_registration(T).await;
        let mut c = plugin(&dirs.kubelet, &format!("kuberdma-kuberdma.io-p{i}.sock")).await;
        let mut s = list_and_watch(&mut c).await;
        assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 1);
        streams.push((c, s));
    }
    // InProc::stop allows 5 s; one pool used to take 2 s when a stream was open.
    d.stop().await;
    for (_, s) in &mut streams {
        // The stream ends cleanly (or its connection goes): never hangs.
        let end = tokio::time::timeout(T, s.message()).await.expect("stream still open after stop");
        assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    }
    let left: Vec<String> = std::fs::read_dir(&dirs.kubelet)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "kubelet.sock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The CDI specs stay: containers that restart need them (see devinfo.rs).
    assert_eq!(std::fs::read_dir(&dirs.cdi).map(|r| r.count()).unwrap_or(0), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_stops_removed_pools_and_keeps_the_others_streams() {
    let node = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let cfg = dirs.write_config(&pool_per_vf(8));
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(node.roots(), Some(cfg.clone()), Duration::from_secs(3600)));
    let mut streams = vec![];
    for i in 0..8 {
        let _ = k.next_registration(T).await;
        let mut c = plugin(&dirs.kubelet, &format!("kuberdma-kuberdma.io-p{i}.sock")).await;
        let mut s = list_and_watch(&mut c).await;
        s.message().await.unwrap().unwrap();
        streams.push((c, s));
    }
    std::fs::write(&cfg, pool_per_vf(2)).unwrap();
    for (i, (_, s)) in streams.iter_mut().enumerate().skip(2) {
        let end = tokio::time::timeout(T, s.message()).await.unwrap_or_else(|_| panic!("p{i} still open"));
        assert!(matches!(end, Ok(None) | Err(_)), "p{i}: {end:?}");
    }
    // The sockets go once the servers have stopped, right after the streams end.
    let deadline = std::time::Instant::now() + T;
    for i in 2..8 {
        let sock = dirs.kubelet.join(format!("kuberdma-kuberdma.io-p{i}.sock"));
        while sock.exists() {
            assert!(std::time::Instant::now() < deadline, "{} still there", sock.display());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    for (c, s) in streams.iter_mut().take(2) {
        assert!(tokio::time::timeout(Duration::from_millis(200), s.message()).await.is_err(), "kept open");
        assert!(c.get_device_plugin_options(Empty {}).await.is_ok());
    }
    d.stop().await;
}

/// A kubelet directory deep enough that `kuberdma-<prefix>-<name>.sock` of a
/// long pool name would not fit `sun_path`: that pool is served on a hashed
/// name, the others keep theirs, and all are registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_socket_path_is_too_long_is_served_on_a_hashed_name() {
    let node = sim("cx6dx-dual.yaml");
    let mut dirs = Dirs::new();
    let base_len = dirs.tmp.path().as_os_str().len();
    dirs.kubelet = dirs.tmp.path().join("k".repeat(60usize.saturating_sub(base_len).max(1)));
    std::fs::create_dir_all(&dirs.kubelet).unwrap();
    let long = "rail_".to_string() + &"x".repeat(50);
    let cfg = dirs.write_config(&format!(
        "pools:\n- name: a\n  selectors: {{rootDevices: [\"0000:3d:00.0\"]}}\n- name: {long}\n  selectors: {{rootDevices: [\"0000:af:00.0\"]}}\n"
    ));
    let plain = dirs.kubelet.join(format!("kuberdma-kuberdma.io-{long}.sock"));
    assert!(plain.as_os_str().len() > names::SUN_PATH_MAX, "the test needs a path that does not fit");
    let hashed = names::socket_name(&dirs.kubelet, "kuberdma.io", &long).unwrap();
    assert!(hashed.len() < 40);
    let k = FakeKubelet::start(&dirs.kubelet);
    let d = InProc::spawn(dirs.options(node.roots(), Some(cfg), Duration::from_secs(3600)));
    let mut endpoints = vec![k.next_registration(T).await.endpoint, k.next_registration(T).await.endpoint];
    endpoints.sort();
    assert_eq!(endpoints, [hashed.clone(), "kuberdma-kuberdma.io-a.sock".to_string()]);
    let mut c = plugin(&dirs.kubelet, &hashed).await;
    let mut s = list_and_watch(&mut c).await;
    assert_eq!(s.message().await.unwrap().unwrap().devices.len(), 8);
    d.stop().await;
}

fn node_in(mode: NetnsMode) -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(examples().join("mixed.yaml")).unwrap();
    desc.rdma_netns_mode = mode;
    nic::sim::Sim::materialise(&desc).unwrap()
}

const RSDP: &str =
    r#"{"configList": [{"resourceName": "hca", "rdmaHcaMax": 4, "selectors": {"ifNames": ["ens5f0np0"]}}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_pools_are_refused_at_load_on_an_exclusive_mode_node() {
    let node = node_in(NetnsMode::Exclusive);
    let dirs = Dirs::new();
    let cfg = dirs.write_config(RSDP);
    let r = tokio::time::timeout(
        T,
        // No shutdown: a stop asked before the node's netns mode is read would end the run first.
        daemon::run(
            dirs.options(node.roots(), Some(cfg.clone()), Duration::from_secs(3600)),
            std::future::pending(),
        ),
    )
    .await
    .expect("refused at once");
    let e = r.expect_err("exclusive mode").to_string();
    assert!(e.contains("pool \"hca\": field `rdmaHcaMax`") && e.contains("exclusive netns mode"), "{e}");
    // The discover command says the same as a failing node check (exit 1), with the fix.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
        .args(["discover", "--sysfs-root"])
        .arg(&node.roots().sysfs)
        .arg("--dev-root")
        .arg(&node.roots().dev)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FAIL rdma-netns: ") && text.contains("exclusive netns mode"), "{text}");
    assert!(text.contains("fix: boot with ib_core netns_mode=1"), "{text}");
}

/// `kubeletRootDir` says where the kubelet lives; `periodicUpdateInterval: 0`
/// turns the periodic rescan off, as in k8s-rdma-shared-dev-plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsdp_kubelet_root_dir_and_update_interval_are_honoured() {
    let mut node = node_in(NetnsMode::Shared);
    let dirs = Dirs::new();
    let root = dirs.tmp.path().join("k0s-kubelet");
    let kdir = root.join("device-plugins");
    std::fs::create_dir_all(&kdir).unwrap();
    let text = format!(
        r#"{{"kubeletRootDir": "{}", "periodicUpdateInterval": 0, "configList": [{{"resourceName": "hca", "rdmaHcaMax": 4, "selectors": {{"ifNames": ["ens5f0np0"]}}}}]}}"#,
        root.display()
    );
    let cfg = dirs.write_config(&text);
    let k = FakeKubelet::start(&kdir);
    // The flag points elsewhere and asks for a rescan every 50 ms.
    let d = InProc::spawn(dirs.options(node.roots(), Some(cfg), Duration::from_millis(50)));
    let reg = k.next_registration(T).await;
    assert_eq!(reg.resource_name, "rdma/hca");
    let mut c = plugin(&kdir, &reg.endpoint).await;
    let mut s = list_and_watch(&mut c).await;
    let m = s.message().await.unwrap().unwrap();
    let got: Vec<&str> = m.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["0", "1", "2", "3"]);
    // No periodic rescan: a change the timer would have seen is not seen.
    node.set_operstate("ens5f0np0", "down").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), s.message()).await.is_err(),
        "periodicUpdateInterval 0: no rescan"
    );
    assert!(!dirs.kubelet.join(&reg.endpoint).exists(), "served in kubeletRootDir, not in --kubelet-dir");
    d.stop().await;
}
