//! Preparing and unpreparing claims with the real `kube-rdma-device-plugin
//! dra`: each claim answered on its own, `firstAvailable` subrequests, VFs
//! without RDMA, and the CDI specs written for them. Fake kubelet, real
//! control plane, simulated node, as in `dra_kubelet.rs`.

mod dra_fixtures;

use std::time::Duration;

// The CDI library's verdict on a spec.
use dra_fixtures::common::cdi as cdi_check;
use dra_fixtures::common::dra::*;
use dra_fixtures::*;
use kube_rdma_device_plugin::dra::api::v1beta1;
use serde_json::{json, Value};

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
