//! `kube-rdma-device-plugin dra`, the real binary, against a fake kubelet
//! (registration, DRAPlugin v1/v1beta1, health) over real unix sockets and a
//! real kube-apiserver (a control plane per test) with the chart's
//! ServiceAccount token and RBAC, on simulated nodes: registration and what
//! is published, a restarting kubelet, sockets that cannot be bound, and the
//! configs DRA mode refuses. Each test is one scenario with timeouts; the
//! other DRA scenarios are `dra_api_faults.rs`, `dra_prepare.rs`,
//! `dra_health.rs` and `dra_network_data.rs`, their helpers
//! `common/dra.rs`.

mod dra_fixtures;

use std::time::Duration;

use dra_fixtures::common::dra::*;
use dra_fixtures::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_with_the_kubelet_and_publishes_the_nodes_vfs() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&[]);

    let p = register(&env.reg_socket()).await;
    assert_eq!(p.info.r#type, "DRAPlugin");
    assert_eq!(p.info.name, DRIVER);
    assert_eq!(p.info.endpoint, env.dra_socket().to_string_lossy());
    assert_eq!(p.info.supported_versions, ["v1.DRAPlugin", "v1beta1.DRAPlugin"]);
    driver.wait_log("registered with the kubelet").await;

    let slices = env.wait_slices("16 devices", |s| device_count(s) == 16).await;
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s["metadata"]["name"], format!("{NODE}-{DRIVER}-0"));
    assert_eq!(s["spec"]["pool"], json!({"name": NODE, "generation": 1, "resourceSliceCount": 1}));
    let node_uid = env.get("nodes", None, NODE).await.unwrap()["metadata"]["uid"].clone();
    assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], node_uid, "the Node owns the slices");
    assert_eq!(s["metadata"]["managedFields"][0]["manager"], DRIVER, "server-side apply, our field manager");
    let a = attrs(&slices, "pci-0000-3d-00-1");
    assert_eq!(a["resource.kubernetes.io/pciBusID"], json!({"string": "0000:3d:00.1"}));
    assert_eq!(a["resource.kubernetes.io/pcieRoot"], json!({"string": "pci0000:3a"}));
    assert_eq!(a["resource.kubernetes.io/numaNode"], json!({"int": 0}));
    assert_eq!(a["kuberdma.io/pfName"], json!({"string": "ens1f0np0"}));
    assert_eq!(a["kuberdma.io/pfPciAddress"], json!({"string": "0000:3d:00.0"}));
    assert_eq!(a["kuberdma.io/vfIndex"], json!({"int": 0}));
    assert_eq!(a["kuberdma.io/rdmaDevice"], json!({"string": "mlx5_2"}));
    assert_eq!(a["kuberdma.io/linkSpeedMbps"], json!({"int": 100000}));
    assert_eq!(a["kuberdma.io/linkLayer"], json!({"string": "Ethernet"}));
    assert_eq!(a["kuberdma.io/vendorID"], json!({"string": "15b3"}));
    assert_eq!(a["kuberdma.io/deviceID"], json!({"string": "101e"}));
    assert_eq!(a["kuberdma.io/portState"], json!({"string": "ACTIVE"}));
    assert_eq!(a["kuberdma.io/healthy"], json!({"bool": true}));
    assert!(a.get("kuberdma.io/roceReady").is_none(), "no RdmaNodeState: roceReady is unknown, not false");
    let b = attrs(&slices, "pci-0000-af-01-0");
    assert_eq!(b["resource.kubernetes.io/pcieRoot"], json!({"string": "pci0000:00"}));
    assert_eq!(b["resource.kubernetes.io/numaNode"], json!({"int": 1}));

    // The kubelet's plugin watcher asks again (a re-validation) and may refuse: the
    // driver keeps serving and says why in its log.
    let mut reg =
        kube_rdma_device_plugin::dra::api::registration::registration_client::RegistrationClient::new(
            dial(&env.reg_socket()).await,
        );
    let again = reg.get_info(kube_rdma_device_plugin::dra::api::registration::InfoRequest {}).await.unwrap();
    assert_eq!(again.into_inner(), p.info);
    reg.notify_registration_status(kube_rdma_device_plugin::dra::api::registration::RegistrationStatus {
        plugin_registered: false,
        error: "endpoint already registered for DRA driver plugin".into(),
    })
    .await
    .unwrap();
    driver.wait_log("the kubelet refused the registration").await;
    assert!(driver.log().contains("endpoint already registered"));
    register(&env.reg_socket()).await;

    // A restart with nothing changed writes nothing: same generation, no apply.
    let status = driver.stop().await;
    assert!(status.success(), "{status}");
    assert!(!env.reg_socket().exists() && !env.dra_socket().exists(), "sockets removed at shutdown");
    let before = env.audit().len();
    let driver = env.spawn(&[]);
    register(&env.reg_socket()).await;
    driver.wait_log("first ResourceSlices published").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = Env::driver_requests(&env.audit()[before..]);
    assert!(requests.iter().any(|r| r.starts_with("list resourceslices")), "{requests:?}");
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| r.contains("resourceslices") && !r.starts_with("list") && !r.starts_with("watch"))
        .collect();
    assert!(writes.is_empty(), "a restart without change wrote {writes:?}");
    assert_eq!(generation(&env.slices().await), 1);
    driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_wiped_by_a_restarting_kubelet_come_back_with_a_new_generation() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&[]);
    register(&env.reg_socket()).await;
    env.wait_slices("first publish", |s| device_count(s) == 16).await;

    // The kubelet deletes every slice of its node when it starts, then finds
    // the plugin's registration socket again.
    assert_eq!(env.wipe_slices().await, 1);
    let slices = env.wait_slices("republished", |s| device_count(s) == 16).await;
    assert_eq!(generation(&slices), 2, "content came back under a new generation");
    register(&env.reg_socket()).await;

    // A slice changed by someone else (a replace, retried on 409 while the driver writes) is
    // put back as well.
    let name = format!("{NODE}-{DRIVER}-0");
    env.update("resourceslices", None, &name, |s| {
        s["spec"]["devices"].as_array_mut().unwrap().truncate(3);
    })
    .await;
    let slices = env.wait_slices("repaired", |s| device_count(s) == 16).await;
    assert!(generation(&slices) >= 3);
    driver.stop().await;
}

/// Regression (audit): a kubelet-facing socket that could not be bound ended
/// the driver (at start, or when serving a deleted socket again), where
/// device plugin mode keeps trying. Now a failed bind is logged, shown in
/// `/healthz` and the metrics, tried again with capped backoff, and served as
/// soon as what was in the way is gone; the rest of the driver runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_cannot_be_bound_is_tried_again_not_fatal() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    // A directory where the registration socket goes, from the start.
    std::fs::create_dir_all(env.reg_socket()).unwrap();
    let driver = env.spawn(&["--metrics-addr", "127.0.0.1:0"]);
    let metrics = driver.metrics_addr().await;
    driver.wait_log("cannot serve the socket; retrying").await;
    let (code, body) = wait_healthz(&metrics, "registration socket: not served").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("plugin socket: served"), "{body}");
    let page = http_get(&metrics, "/metrics").await.1;
    assert!(page.lines().any(|l| l == "kuberdma_dra_socket_served{socket=\"registration\"} 0"), "{page}");
    env.wait_slices("published all the same", |s| device_count(s) == 16).await;

    std::fs::remove_dir(env.reg_socket()).unwrap();
    let mut p = register(&env.reg_socket()).await;
    wait_healthz(&metrics, "registration socket: served").await;
    let page = http_get(&metrics, "/metrics").await.1;
    assert!(page.lines().any(|l| l == "kuberdma_dra_socket_served{socket=\"registration\"} 1"), "{page}");
    let failed = page
        .lines()
        .find_map(|l| l.strip_prefix("kuberdma_dra_socket_bind_failures_total{socket=\"registration\"} "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(failed.is_some_and(|n| n >= 1), "{page}");

    // Serving again a socket that went away: a directory takes the DRA socket's
    // place in one step (RENAME_EXCHANGE), so the driver finds it in the way.
    let aside = env.dra_socket().with_file_name("in-the-way");
    std::fs::create_dir(&aside).unwrap();
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &aside,
        nix::fcntl::AT_FDCWD,
        &env.dra_socket(),
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
    std::fs::remove_file(&aside).unwrap();
    let (code, body) = wait_healthz(&metrics, "plugin socket: not served").await;
    assert_eq!(code, 503, "{body}");
    // The kubelet's connection to the server from before still answers meanwhile.
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-a").await;
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");
    std::fs::remove_dir(env.dra_socket()).unwrap();
    wait_healthz(&metrics, "plugin socket: served").await;
    let mut p = register(&env.reg_socket()).await;
    assert!(p.unprepare(vec![claim_ref("a", &a)]).await.claims[&a].error.is_empty());
    let status = driver.stop().await;
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_shared_pools_and_misplaced_flags_with_a_message() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let cfg = env.tmp.path().join("config.yaml");
    // The driver's stderr when it refuses to start with `config`.
    let refused = |config: &std::path::Path| {
        let mut c = env.command();
        c.arg("--config").arg(config);
        async move {
            let out = c.output().await.unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(!out.status.success(), "{err}");
            err
        }
    };
    std::fs::write(
        &cfg,
        "pools:\n- name: hca\n  mode: shared\n  rdmaHcaMax: 4\n  selectors: {vendors: [\"15b3\"]}\n",
    )
    .unwrap();
    let err = refused(&cfg).await;
    assert!(err.contains("kuberdma.io/hca") && err.contains("shared mode"), "{err}");

    // Regression (audit): a k8s-rdma-shared-dev-plugin config passed the check
    // and the driver served nothing. Refused before it talks to the API.
    let rsdp = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/rsdp-config.json");
    let before = env.audit().len();
    let err = refused(&rsdp).await;
    assert!(
        err.contains("rsdp-config.json")
            && err.contains("rdma/hca_shared_devices_a, rdma/hca_shared_devices_b")
            && err.contains("shared mode"),
        "{err}"
    );
    assert!(Env::driver_requests(&env.audit()[before..]).is_empty(), "refused, yet it asked the API");
    assert!(!env.reg_socket().exists(), "refused, yet it registered");

    // Keys device plugin mode honours and DRA mode cannot: refused by pool and key.
    std::fs::write(
        &cfg,
        "pools:\n- {name: a, policy: spread, selectors: {}}\n- {name: b, gpuAffinity: true, selectors: {}}\n",
    )
    .unwrap();
    let err = refused(&cfg).await;
    assert!(
        err.contains("pool kuberdma.io/a: `policy: spread`")
            && err.contains("pool kuberdma.io/b: `gpuAffinity: true`"),
        "{err}"
    );
    let sndp = env.tmp.path().join("config.json");
    std::fs::write(
        &sndp,
        r#"{"resourceList": [{"resourceName": "x", "additionalInfo": {"*": {"k": "v"}}}]}"#,
    )
    .unwrap();
    let err = refused(&sndp).await;
    assert!(err.contains("pool intel.com/x: `additionalInfo`"), "{err}");

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
        .args(["--cdi-dir", "/tmp/x", "dra", "--node-name", NODE])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--cdi-dir set before `dra`"), "{err}");

    // A node name no Node can have: refused at start, not as API errors on every slice.
    for name in ["", "Node_1"] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
            .args(["dra", "--node-name", name])
            .env_remove("NODE_NAME")
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("{name:?} is not a Node name")), "{err}");
    }
}
