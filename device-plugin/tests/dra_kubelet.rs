//! `kube-rdma-device-plugin dra`, the real binary, against a fake kubelet
//! (registration, DRAPlugin v1/v1beta1, health) over real unix sockets and a
//! real kube-apiserver (a control plane per test) with the chart's
//! ServiceAccount token and RBAC, on simulated nodes. Each test is one
//! scenario with timeouts.

mod dra_fixtures;

use std::time::Duration;

// The CDI library's verdict on a spec.
use dra_fixtures::common::cdi as cdi_check;
use dra_fixtures::faults::{FaultProxy, Frozen, MutatingHold, ONE_MUTATING_REQUEST};
use dra_fixtures::*;
use kube_rdma_device_plugin::dra::api::health::HealthStatus;
use kube_rdma_device_plugin::dra::api::v1beta1;
use serde_json::{json, Value};

const NODE: &str = "cx6dx-dual";

/// The example node in shared RDMA netns mode (the example itself is exclusive):
/// a VF's RDMA device stays in the host's `infiniband` class when its netdev moves.
fn sim() -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Shared;
    nic::sim::Sim::materialise(&desc).expect("materialise the example node")
}

/// The example node in exclusive RDMA netns mode: a VF's RDMA device leaves
/// the host's `infiniband` class with its netdev.
fn exclusive_sim() -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Exclusive;
    nic::sim::Sim::materialise(&desc).unwrap()
}

fn pci(s: &str) -> nic::PciAddr {
    s.parse().unwrap()
}

fn attrs<'a>(slices: &'a [Value], device: &str) -> &'a Value {
    slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
        .find(|d| d["name"] == device)
        .map(|d| &d["attributes"])
        .unwrap_or_else(|| panic!("device {device} not published"))
}

fn device_count(slices: &[Value]) -> usize {
    slices.iter().map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len)).sum()
}

fn generation(slices: &[Value]) -> i64 {
    slices[0]["spec"]["pool"]["generation"].as_i64().unwrap()
}

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

/// kube-apiserver's in-flight limit answers the driver's slice writes 429
/// (Retry-After) while another request holds the only mutating slot; the
/// driver says so, keeps trying, and publishes once the slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_survives_api_errors() {
    let sim = sim();
    let env = Env::with_args(NODE, sim.roots(), &ONE_MUTATING_REQUEST).await;
    let hold = MutatingHold::take(&env.api, &env.driver_kubeconfig).await;
    let driver = env.spawn(&[]);
    // kube's client retries a 429 as Retry-After says until the driver's 10 s bound.
    driver.wait_log_within("cannot publish ResourceSlices", Duration::from_secs(30)).await;
    let throttled = |events: &[Value]| {
        Env::driver_requests(events)
            .into_iter()
            .filter(|r| r.starts_with("patch resourceslices") && r.ends_with(" 429"))
            .count()
    };
    assert!(throttled(&env.audit()) >= 1, "{:?}", Env::driver_requests(&env.audit()));
    assert!(env.slices().await.is_empty(), "published while every write was refused");
    drop(hold);
    env.wait_slices("published once the slot is free", |s| device_count(s) == 16).await;
    driver.stop().await;
}

/// Regression (issue 25): the driver loop awaited every API call, unbounded,
/// one after another, so an API server that stops answering stalled
/// rescans (and so health) and could outlast the kubelet's 45 s
/// NodePrepareResources timeout. Here kube-apiserver is stopped (SIGSTOP:
/// connections are accepted, nothing answers) from the start: the driver
/// still serves the kubelet, follows the node, and answers a prepare with an
/// error well within 45 s; once the server runs again it publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_api_server_stalls_neither_rescans_nor_prepare() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let frozen = Frozen::new(&env.api);
    let driver = env.spawn(&["--rescan-interval", "0.2", "--metrics-addr", "127.0.0.1:0"]);
    let metrics = driver.metrics_addr().await;
    let mut p = register(&env.reg_socket()).await;
    let mut s = p.watch_health().await;
    wait_health(&mut s, "the full list", |m| m.devices.len() == 16).await;

    // Rescans go on: a PF link going down reaches the kubelet at once.
    sim.set_operstate("ens1f0np0", "down").unwrap();
    wait_health(&mut s, "PF 0's VFs unhealthy", |m| {
        m.devices.iter().filter(|d| d.health == HealthStatus::Unhealthy as i32).count() == 8
    })
    .await;

    // A prepare cannot read its claim: it fails, in time, saying why (the kubelet asks again).
    let t0 = std::time::Instant::now();
    let r = p.prepare(vec![claim_ref("a", "0f0f0f0f-0000-0000-0000-00000000000a")]).await;
    let took = t0.elapsed();
    let e = &r.claims["0f0f0f0f-0000-0000-0000-00000000000a"].error;
    assert!(e.contains("default/a") && e.contains("did not answer in 10s"), "{e}");
    assert!(
        took < Duration::from_secs(20),
        "NodePrepareResources took {took:?}; the kubelet gives up at 45 s"
    );

    // Publishing fails and says so (the Node read, then the list, 10 s each), holding nothing else up.
    driver.wait_log_within("cannot publish ResourceSlices", Duration::from_secs(40)).await;
    assert!(
        driver.log().contains("cannot list ResourceSlices: the API server did not answer"),
        "{}",
        driver.log()
    );
    let (code, body) = http_get(&metrics, "/healthz").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(http_get(&metrics, "/livez").await.0, 200);
    sim.set_operstate("ens1f0np0", "up").unwrap();
    wait_health(&mut s, "healthy again", |m| {
        m.devices.iter().all(|d| d.health == HealthStatus::Healthy as i32)
    })
    .await;

    // kube-apiserver runs again: the driver publishes without being restarted.
    drop(frozen);
    env.wait_slices("published once kube-apiserver answers", |s| device_count(s) == 16).await;
    let status = driver.stop().await;
    assert!(status.success(), "{status}");
}

/// The same with an API server that answers some requests and hangs on
/// others (kube-apiserver cannot be told to: the test's proxy in front of it
/// hangs them): the stale-holder reads of a prepare are bounded (the holder
/// then stays, and the claim fails in time), and slice writes that hang
/// delay only the slices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_hang_delay_only_themselves() {
    let mut sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let proxy = FaultProxy::start(&env.api).await;
    let kubeconfig = proxy.kubeconfig(&env.driver_kubeconfig, &env.tmp.path().join("proxied-kubeconfig"));
    let mut c = env.command();
    c.env("KUBECONFIG", &kubeconfig).args(["--rescan-interval", "0.2"]);
    let driver = Driver::spawn(c);
    let mut p = register(&env.reg_socket()).await;
    let mut s = p.watch_health().await;
    let g0 = generation(&env.wait_slices("published", |s| device_count(s) == 16).await);

    let d = env.create_claim("d", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-d").await;
    assert_eq!(p.prepare(vec![claim_ref("d", &d)]).await.claims[&d].error, "");
    // `d`'s reads hang from now on; `e` is allocated its device (as after a reboot).
    let reads = proxy.hang(http::Method::GET, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/d");
    let e = env.create_claim("e", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-e").await;
    let t0 = std::time::Instant::now();
    let r = p.prepare(vec![claim_ref("e", &e)]).await;
    let took = t0.elapsed();
    assert!(r.claims[&e].error.contains(&format!("already prepared for claim {d}")), "{:?}", r.claims[&e]);
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(20), "took {took:?}");
    driver.wait_log("cannot tell whether a prepared claim still exists").await;
    assert!(proxy.fired(reads) >= 1);
    assert!(
        nic::prepared::read_claim(&env.prepared, &d).unwrap().is_some(),
        "a holder that cannot be asked stays"
    );

    // Slice writes hang: health still follows the node at once; the slices catch up after.
    let writes = proxy.hang_prefix(http::Method::PATCH, "/apis/resource.k8s.io/v1/resourceslices/");
    sim.set_operstate("ens1f0np0", "down").unwrap();
    let t0 = std::time::Instant::now();
    wait_health(&mut s, "PF 0's VFs unhealthy", |m| {
        m.devices.iter().filter(|d| d.health == HealthStatus::Unhealthy as i32).count() == 8
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(5), "health took {:?}", t0.elapsed());
    // A sync waits 10 s for its write, after the rescan saw the change.
    driver
        .wait_log_within(
            "cannot apply a ResourceSlice: the API server did not answer",
            Duration::from_secs(25),
        )
        .await;
    assert_eq!(generation(&env.slices().await), g0, "the hung write changed nothing");
    assert!(proxy.fired(writes) >= 1);
    proxy.remove(writes);
    let slices = env
        .wait_slices("healthy=false after the API recovered", |s| {
            attrs(s, "pci-0000-3d-00-1")["kuberdma.io/healthy"] == json!({"bool": false})
        })
        .await;
    assert!(generation(&slices) > g0);
    driver.stop().await;
}

fn our_config(params: Value) -> Value {
    json!([{"source": "FromClaim", "requests": ["vf"], "opaque": {"driver": DRIVER, "parameters": params}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepares_and_unprepares_claims_each_answered_on_its_own() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&["--metrics-addr", "127.0.0.1:0"]);
    let metrics = driver.metrics_addr().await;
    let (code, body) = http_get(&metrics, "/healthz").await;
    if code == 503 {
        assert!(body.contains("kubelet registration: not yet"), "{body}");
    }
    assert_eq!(http_get(&metrics, "/livez").await.0, 200);
    let mut p = register(&env.reg_socket()).await;
    env.wait_slices("published", |s| device_count(s) == 16).await;
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (code, body) = http_get(&metrics, "/healthz").await;
        if code == 200 {
            assert!(body.contains("kubelet registration: ok") && body.contains("generation 1"), "{body}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not healthy in time: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let a = env
        .create_claim(
            "a",
            &[("vf", DRIVER, "pci-0000-3d-00-1"), ("gpu", "gpu.nvidia.com", "gpu-0")],
            our_config(json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig",
                          "env": {"NCCL_IB_TC": "106"}, "umad": false})),
            "pod-a",
        )
        .await;
    let b = env
        .create_claim(
            "b",
            &[("vf", DRIVER, "pci-0000-af-00-1"), ("vf", DRIVER, "pci-0000-af-00-2")],
            json!([]),
            "pod-b",
        )
        .await;
    // Allocated the device `a` holds: the scheduler would never, a stale API might.
    let c = env.create_claim("c", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-c").await;
    let bad = env
        .create_claim(
            "bad",
            &[("vf", DRIVER, "pci-0000-3d-00-2")],
            our_config(
                json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig", "mtu": 9000}),
            ),
            "pod-d",
        )
        .await;
    let r = p
        .prepare(vec![
            claim_ref("a", &a),
            claim_ref("b", &b),
            claim_ref("ghost", "0f0f0f0f-0000-0000-0000-000000000000"),
            claim_ref("bad", &bad),
        ])
        .await;
    assert_eq!(r.claims.len(), 4, "every claim is answered: {r:?}");
    let ra = &r.claims[&a];
    assert_eq!(ra.error, "");
    assert_eq!(ra.devices.len(), 1, "only our driver's devices");
    assert_eq!(ra.devices[0].request_names, ["vf"]);
    assert_eq!(ra.devices[0].pool_name, NODE);
    assert_eq!(ra.devices[0].device_name, "pci-0000-3d-00-1");
    assert_eq!(ra.devices[0].cdi_device_ids, [format!("kuberdma.io/claim=pci-0000-3d-00-1_{a}")]);
    let rb = &r.claims[&b];
    assert_eq!(rb.error, "");
    assert_eq!(
        rb.devices.iter().map(|d| d.device_name.as_str()).collect::<Vec<_>>(),
        ["pci-0000-af-00-1", "pci-0000-af-00-2"]
    );
    let ghost = &r.claims["0f0f0f0f-0000-0000-0000-000000000000"];
    assert!(ghost.error.contains("default/ghost") && ghost.error.contains("not found"), "{}", ghost.error);
    let rbad = &r.claims[&bad];
    assert!(rbad.error.contains("unknown field `mtu`"), "{}", rbad.error);
    assert!(
        !env.cdi.join(format!("kuberdma.io-claim_{bad}.json")).exists(),
        "a refused claim leaves nothing behind"
    );

    // The CDI spec of `a`: its VF's uverbs only (umad: false), rdma_cm, env.
    let spec: Value =
        serde_json::from_slice(&std::fs::read(env.cdi.join(format!("kuberdma.io-claim_{a}.json"))).unwrap())
            .unwrap();
    assert_eq!(spec["kind"], "kuberdma.io/claim");
    assert_eq!(spec["devices"][0]["name"], format!("pci-0000-3d-00-1_{a}"));
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"],
        json!([{"path": "/dev/infiniband/uverbs2"}])
    );
    assert_eq!(spec["devices"][0]["containerEdits"]["env"], json!(["NCCL_IB_TC=106"]));
    assert_eq!(spec["containerEdits"]["deviceNodes"], json!([{"path": "/dev/infiniband/rdma_cm"}]));
    assert!(spec["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .contains(&json!("KUBERDMA_VF_RDMA_DEVICES=mlx5_2")));
    // What the CNI will read.
    let rec = nic::prepared::read_claim(&env.prepared, &a).unwrap().expect("checkpointed");
    assert_eq!(rec.pods, ["pod-a"]);
    assert_eq!(rec.pod_claim_name.as_deref(), Some("rdma"));
    assert_eq!(rec.devices[0].pci.to_string(), "0000:3d:00.1");

    let (_, m) = http_get(&metrics, "/metrics").await;
    assert!(m.contains("kuberdma_pool_capacity{resource=\"kuberdma.io/rdma_vfs\"} 16"), "{m}");
    assert!(m.contains("kuberdma_pool_allocated{resource=\"kuberdma.io/rdma_vfs\"} 3"), "{m}");
    assert!(m.contains("kuberdma_dra_prepare_duration_seconds_count 4"), "{m}");
    assert!(m.contains("kuberdma_dra_prepare_failures_total 2"), "{m}");

    // Repeats are answered from the checkpoint, without reading the claim again.
    let reads = env.claim_reads("a").await;
    let again = p.prepare(vec![claim_ref("a", &a)]).await;
    assert_eq!(again.claims[&a], *ra);
    assert_eq!(env.claim_reads("a").await, reads, "a repeated prepare read the claim again");
    // Through v1beta1 (kubelets 1.32-1.33) too.
    let beta = p
        .v1beta1
        .node_prepare_resources(v1beta1::NodePrepareResourcesRequest {
            claims: vec![v1beta1::Claim { namespace: "default".into(), uid: b.clone(), name: "b".into() }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(beta.claims[&b].devices.len(), 2);

    // Two claims never get the same VF.
    let rc = p.prepare(vec![claim_ref("c", &c)]).await;
    assert!(
        rc.claims[&c].error.contains(&format!("already prepared for claim {a}")),
        "{}",
        rc.claims[&c].error
    );
    // A claim whose name now has another UID (deleted and recreated).
    let wrong = p.prepare(vec![claim_ref("c", "11111111-2222-3333-4444-555555555555")]).await;
    assert!(wrong.claims["11111111-2222-3333-4444-555555555555"].error.contains("recreated"));

    // A holder deleted while the kubelet was away (reboot) gives its VF up.
    let d = env.create_claim("d", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-d").await;
    assert_eq!(p.prepare(vec![claim_ref("d", &d)]).await.claims[&d].error, "");
    env.delete("resourceclaims", Some("default"), "d").await;
    let e = env.create_claim("e", &[("vf", DRIVER, "pci-0000-3d-00-3")], json!([]), "pod-e").await;
    assert_eq!(p.prepare(vec![claim_ref("e", &e)]).await.claims[&e].error, "");
    assert!(nic::prepared::read_claim(&env.prepared, &d).unwrap().is_none(), "the stale record is gone");
    driver.wait_log("no longer holds its device").await;

    // Unprepare: known and unknown claims all succeed; files go.
    let u = p
        .unprepare(vec![claim_ref("a", &a), claim_ref("ghost", "0f0f0f0f-0000-0000-0000-000000000000")])
        .await;
    assert_eq!(u.claims.len(), 2);
    assert!(u.claims.values().all(|e| e.error.is_empty()), "{u:?}");
    assert!(!env.cdi.join(format!("kuberdma.io-claim_{a}.json")).exists());
    assert!(nic::prepared::read_claim(&env.prepared, &a).unwrap().is_none());
    // Unprepare again: still fine. And `c` can now have the VF.
    assert!(p.unprepare(vec![claim_ref("a", &a)]).await.claims[&a].error.is_empty());
    assert_eq!(p.prepare(vec![claim_ref("c", &c)]).await.claims[&c].error, "");

    // The checkpoint survives a restart: `b` is still prepared, answered without a read.
    driver.stop().await;
    let driver = env.spawn(&[]);
    let mut p = register(&env.reg_socket()).await;
    let reads = env.claim_reads("b").await;
    let rb2 = p.prepare(vec![claim_ref("b", &b)]).await;
    assert_eq!(rb2.claims[&b], *rb);
    assert_eq!(env.claim_reads("b").await, reads);
    // A CDI spec lost with /var/run (reboot) is written again at start.
    std::fs::remove_file(env.cdi.join(format!("kuberdma.io-claim_{c}.json"))).unwrap();
    driver.stop().await;
    let driver = env.spawn(&[]);
    register(&env.reg_socket()).await;
    driver.wait_log("CDI specs of prepared claims written again").await;
    assert!(env.cdi.join(format!("kuberdma.io-claim_{c}.json")).exists());
    driver.stop().await;
}

/// Regression (issue 25): a `firstAvailable` request is allocated as
/// `vf/fast`; we answered that in `request_names`, the kubelet matches the
/// container's `request: vf` against it, and the container got none of our
/// CDI devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_available_subrequest_is_answered_by_its_top_level_request() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&[]);
    let mut p = register(&env.reg_socket()).await;
    env.wait_slices("published", |s| device_count(s) == 16).await;

    // The claim as the API holds it after the scheduler chose the first alternative.
    let requests = json!([{"name": "vf", "firstAvailable": [
        {"name": "fast", "deviceClassName": "rdma.kuberdma.io",
         "selectors": [{"cel": {"expression": "has(device.attributes[\"kuberdma.io\"].linkSpeedMbps) && device.attributes[\"kuberdma.io\"].linkSpeedMbps >= 100000"}}]},
        {"name": "any", "deviceClassName": "rdma.kuberdma.io"}]}]);
    let uid = env
        .create_claim_with_requests(
            "fa",
            requests,
            &[("vf/fast", DRIVER, "pci-0000-3d-00-1")],
            our_config(
                json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig", "umad": false}),
            ),
            "pod-fa",
        )
        .await;
    // What the kubelet sends: the claim's namespace, name and UID, nothing of its requests.
    let r = p.prepare(vec![claim_ref("fa", &uid)]).await;
    let answer = &r.claims[&uid];
    assert_eq!(answer.error, "");
    assert_eq!(answer.devices.len(), 1);
    assert_eq!(answer.devices[0].request_names, ["vf"], "the top-level request, which containers name");
    let cdi = vec![format!("kuberdma.io/claim=pci-0000-3d-00-1_{uid}")];
    // A container with `resources.claims: [{name: rdma, request: vf}]`, and one naming the whole claim.
    assert_eq!(kubelet_cdi_devices(answer, "vf"), cdi);
    assert_eq!(kubelet_cdi_devices(answer, ""), cdi);
    assert!(kubelet_cdi_devices(answer, "other").is_empty());
    // Answered again from the checkpoint, the same way.
    assert_eq!(p.prepare(vec![claim_ref("fa", &uid)]).await.claims[&uid], *answer);

    // The record keeps the subrequest (the CNI's `request` and the driver config match on it);
    // the config for `vf` applied to it, and the variables carry the name the container uses.
    let rec = nic::prepared::read_claim(&env.prepared, &uid).unwrap().expect("checkpointed");
    assert_eq!(rec.devices[0].request, "vf/fast");
    let spec: Value = serde_json::from_slice(
        &std::fs::read(env.cdi.join(format!("kuberdma.io-claim_{uid}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"],
        json!([{"path": "/dev/infiniband/uverbs2"}])
    );
    let env_vars = spec["containerEdits"]["env"].as_array().unwrap();
    assert!(env_vars.contains(&json!("KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.1")), "{env_vars:?}");
    driver.stop().await;
}

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

fn names(slices: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().unwrap())
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// `GET /metrics` until it has the line `line`.
async fn wait_metric(metrics: &str, line: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let page = http_get(metrics, "/metrics").await.1;
        if page.lines().any(|l| l == line) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no `{line}` in\n{page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

/// `GET /healthz` until its body contains `needle`.
async fn wait_healthz(metrics: &str, needle: &str) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http_get(metrics, "/healthz").await;
        if body.contains(needle) {
            return (code, body);
        }
        assert!(tokio::time::Instant::now() < deadline, "no {needle:?} in /healthz: {code} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// What kube-rdma-cni writes after it moved the VF of claim `uid` (device
/// `pci-0000-3d-00-1`, pod `pod-a`) into the pod as `net1`.
fn cni_attached(env: &Env, uid: &str) {
    nic::prepared::write_attachment(
        &env.prepared,
        &nic::prepared::Attachment {
            version: nic::prepared::VERSION,
            claim_uid: uid.to_string(),
            device: "pci-0000-3d-00-1".into(),
            pod_uid: "pod-a".into(),
            container_id: "sandbox-1".into(),
            ifname: "net1".into(),
            mac: Some("02:00:00:3d:00:01".into()),
            ips: vec!["192.168.1.2/24".into()],
        },
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_data_the_cni_recorded_reaches_the_claim_status() {
    let sim = sim();
    let env = Env::new(NODE, sim.roots()).await;
    let driver = env.spawn(&[]);
    let mut p = register(&env.reg_socket()).await;
    env.wait_slices("published", |s| device_count(s) == 16).await;
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-a").await;
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");

    cni_attached(&env, &a);
    let claim = env
        .wait_for("resourceclaims", Some("default"), "a", "the claim's device status", |c| {
            c.is_some_and(|c| c["status"]["devices"].is_array())
        })
        .await
        .unwrap();
    // kube-apiserver answers a device status without conditions with `conditions: null`.
    let mut devices = claim["status"]["devices"].clone();
    for d in devices.as_array_mut().unwrap() {
        if d["conditions"].is_null() {
            d.as_object_mut().unwrap().remove("conditions");
        }
    }
    assert_eq!(
        devices,
        json!([{"driver": DRIVER, "pool": NODE, "device": "pci-0000-3d-00-1",
                "networkData": {"interfaceName": "net1", "ips": ["192.168.1.2/24"], "hardwareAddress": "02:00:00:3d:00:01"}}])
    );
    assert!(claim["status"]["allocation"].is_object(), "the allocation is untouched");

    // Unprepared: our entries are released.
    assert!(p.unprepare(vec![claim_ref("a", &a)]).await.claims[&a].error.is_empty());
    env.wait_for("resourceclaims", Some("default"), "a", "our device status released", |c| {
        c.is_some_and(|c| c["status"]["devices"].as_array().is_none_or(|d| d.is_empty()))
    })
    .await;
    driver.stop().await;
}

/// Kubernetes 1.36 (DRAResourceClaimGranularStatusAuthorization, beta, on by
/// default): changing a claim's `status.devices` also needs `resourceclaims/driver`
/// named after the driver, verb `associated-node:patch` for a token bound to the
/// claim's node (pkg/registry/resource/utils.go `AuthorizedForDeviceStatus`). On a
/// real kube-apiserver v1.36.3, the driver's token bound to a pod on the node:
/// with the chart's RBAC rendered for 1.35 the network data is refused, naming
/// that permission; the chart rendered for 1.36 adds exactly that rule, and the
/// driver's next try writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_1_36_network_data_needs_the_charts_driver_rule_and_it_is_enough() {
    let sim = sim();
    let env = Env::on_kubernetes_1_36(NODE, sim.roots(), chart_rbac_for("1.35.0")).await;
    let driver = env.spawn(&[]);
    let mut p = register(&env.reg_socket()).await;
    env.wait_slices("published", |s| device_count(s) == 16).await;
    let a = env.create_claim("a", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-a").await;
    assert_eq!(p.prepare(vec![claim_ref("a", &a)]).await.claims[&a].error, "");
    cni_attached(&env, &a);

    // The chart for 1.35 has no resourceclaims/driver rule: refused, by name.
    driver.wait_log_within("cannot write claim status", WAIT).await;
    let log = driver.log();
    assert!(
        log.contains("resourceclaims/driver") && log.contains("associated-node:patch"),
        "the refusal names the permission: {log}"
    );
    assert!(env.claim("a").await["status"]["devices"].is_null(), "nothing written without the rule");

    // The chart rendered for 1.36: the one rule more, and the retried write goes through.
    let added: Vec<Value> = chart_rbac_for("1.36.0");
    let rules = |objs: &[Value]| -> Vec<Value> {
        objs.iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .flat_map(|o| o["rules"].as_array().unwrap().clone())
            .collect()
    };
    let (old, new) = (rules(&chart_rbac_for("1.35.0")), rules(&added));
    let extra: Vec<&Value> = new.iter().filter(|r| !old.contains(r)).collect();
    assert_eq!(
        extra,
        [&json!({"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
                 "resourceNames": [DRIVER], "verbs": ["associated-node:patch"]})],
        "1.36 adds exactly the driver rule"
    );
    tokio::task::block_in_place(|| kubectl_apply(&env.api, env.tmp.path(), &added));
    let claim = env
        .wait_for("resourceclaims", Some("default"), "a", "the claim's device status", |c| {
            c.is_some_and(|c| c["status"]["devices"].is_array())
        })
        .await
        .unwrap();
    assert_eq!(claim["status"]["devices"][0]["networkData"]["interfaceName"], "net1", "{claim}");
    assert!(p.unprepare(vec![claim_ref("a", &a)]).await.claims[&a].error.is_empty());
    driver.stop().await;
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

/// Pools whose VFs hand out no RDMA device mean what they mean in device
/// plugin mode: an sriov-network-device-plugin pool without `isRdma: true`
/// hands out none of the VF's RDMA char devices (nor `rdma_cm`), a VF bound
/// to vfio-pci gets `/dev/vfio/vfio` and its group, every prepared VF its
/// PCI address in the container (the `PCIDEVICE_*` of device plugin mode);
/// `excludeTopology` leaves the NUMA node out of the slice. Regression
/// (audit): such VFs got no CDI spec at all, and `isRdma` was ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vfs_without_rdma_get_what_device_plugin_mode_gives_them() {
    let mut desc = nic::sim::load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Shared;
    // VF 7 of the second PF (0000:af:01.0) bound to vfio-pci.
    desc.adapters[0].pfs[1].vfs_vfio = vec![7];
    let sim = nic::sim::Sim::materialise(&desc).unwrap();
    let env = Env::new(NODE, sim.roots()).await;
    let cfg = env.tmp.path().join("config.json");
    let pools = json!({"resourceList": [
        {"resourceName": "rdma", "selectors": {"pfNames": ["ens1f0np0"], "isRdma": true}},
        {"resourceName": "plain", "excludeTopology": true, "selectors": {"pfNames": ["ens1f1np1#0-3"]}},
        {"resourceName": "vfio", "selectors": {"drivers": ["vfio-pci"]}}]});
    std::fs::write(&cfg, pools.to_string()).unwrap();
    let driver = env.spawn(&["--config", cfg.to_str().unwrap()]);
    let mut p = register(&env.reg_socket()).await;
    let slices = env.wait_slices("8 + 4 + 1 devices", |s| device_count(s) == 13).await;
    let rdma = attrs(&slices, "pci-0000-3d-00-1");
    assert_eq!(rdma["resource.kubernetes.io/numaNode"], json!({"int": 0}));
    let plain = attrs(&slices, "pci-0000-af-00-1");
    assert_eq!(plain["kuberdma.io/pool"], json!({"string": "plain"}));
    assert!(plain.get("resource.kubernetes.io/numaNode").is_none(), "excludeTopology: {plain}");
    let vfio = attrs(&slices, "pci-0000-af-01-0");
    assert_eq!(vfio["kuberdma.io/pool"], json!({"string": "vfio"}));
    assert_eq!(vfio["kuberdma.io/healthy"], json!({"bool": true}));
    assert_eq!(vfio["resource.kubernetes.io/numaNode"], json!({"int": 1}));

    let a = env.create_claim("plain", &[("vf", DRIVER, "pci-0000-af-00-1")], json!([]), "pod-a").await;
    let b = env.create_claim("dpdk", &[("vf", DRIVER, "pci-0000-af-01-0")], json!([]), "pod-b").await;
    let c = env.create_claim("rdma", &[("vf", DRIVER, "pci-0000-3d-00-1")], json!([]), "pod-c").await;
    let r = p.prepare(vec![claim_ref("plain", &a), claim_ref("dpdk", &b), claim_ref("rdma", &c)]).await;
    let spec_of = |uid: &str| -> Value {
        let path = env.cdi.join(format!("kuberdma.io-claim_{uid}.json"));
        let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cdi_check::validate(&v).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        v
    };
    for (uid, dev) in [(&a, "pci-0000-af-00-1"), (&b, "pci-0000-af-01-0"), (&c, "pci-0000-3d-00-1")] {
        let got = &r.claims[uid];
        assert_eq!(got.error, "", "{dev}");
        assert_eq!(got.devices[0].cdi_device_ids, [format!("kuberdma.io/claim={dev}_{uid}")], "{dev}");
    }
    // No isRdma: the VF's RDMA device (it has one) is not handed out, as in device plugin mode.
    let s = spec_of(&a);
    assert_eq!(s["devices"][0]["containerEdits"], json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:af:00.1"]}));
    assert_eq!(s["containerEdits"], json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:af:00.1"]}));
    // vfio-pci: the container device and the VF's group.
    let s = spec_of(&b);
    let nodes = s["devices"][0]["containerEdits"]["deviceNodes"].as_array().unwrap().clone();
    assert_eq!(nodes[0], json!({"path": "/dev/vfio/vfio"}));
    assert!(nodes.len() == 2 && nodes[1]["path"].as_str().unwrap().starts_with("/dev/vfio/"), "{nodes:?}");
    assert!(s["containerEdits"].get("deviceNodes").is_none(), "no rdma_cm: {s}");
    // isRdma: true: as before.
    let s = spec_of(&c);
    assert_eq!(s["containerEdits"]["deviceNodes"], json!([{"path": "/dev/infiniband/rdma_cm"}]));
    assert!(s["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .contains(&json!("KUBERDMA_VF_RDMA_DEVICES=mlx5_2")));
    // What the CNI reads still names the VF's RDMA device: it moves with the
    // netdev, as device-info files tell the CNI in device plugin mode.
    let rec = nic::prepared::read_claim(&env.prepared, &a).unwrap().expect("checkpointed");
    assert_eq!(rec.devices[0].rdma_devices.len(), 1, "{rec:?}");
    driver.stop().await;
}
