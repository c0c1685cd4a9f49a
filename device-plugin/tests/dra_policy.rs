//! The chart's DRA admission policies (charts/kube-rdma/templates/dra-policy.yaml)
//! on a real kube-apiserver (v1.34.4, and 1.36's), with the driver's real token
//! bound to a pod on its node, as the DaemonSet's projected token is: the real
//! `kube-rdma-device-plugin dra` publishes its node's slices and writes the
//! status of a claim allocated on its node through them, and the same token is
//! refused, with the policy's message, a slice of another node or another
//! driver (create, take-over, delete) and the status of a claim allocated
//! elsewhere. RBAC alone (dra-rbac.yaml) allows every one of those writes.

mod dra_fixtures;

use std::time::{Duration, Instant};

use dra_fixtures::*;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const NODE: &str = "cx6dx-dual";
const OTHER: &str = "other-node";

/// The driver's ServiceAccount, RBAC and admission policies as the chart renders
/// them with `dra.enabled` for `kube_version` (with the policy API, as a live
/// cluster of that version lists it).
fn chart_access_for(kube_version: &str) -> Vec<Value> {
    let access = chart_device_plugin_objects(
        kube_version,
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
    );
    let policies = access.iter().filter(|o| o["kind"] == "ValidatingAdmissionPolicy").count();
    assert_eq!(policies, 2, "the slice and claim status policies: {access:?}");
    access
}

fn sim() -> nic::sim::Sim {
    let mut desc = nic::sim::load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = nic::NetnsMode::Shared;
    nic::sim::Sim::materialise(&desc).expect("materialise the example node")
}

fn device_count(slices: &[Value]) -> usize {
    slices.iter().map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len)).sum()
}

/// A ResourceSlice of `driver` for `node`, with one device.
fn slice(name: &str, node: &str, driver: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "forged-0"}]},
    })
}

fn api(client: &kube::Client, res: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = resource(res);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The 403 message of a refused write; panics when it was admitted.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message,
        other => panic!("{what}: expected a 403 from the policy, got {other:?}"),
    }
}

/// Waits until the API server enforces the policies (it loads them a moment
/// after they are created): a forged slice for another node is refused.
async fn policies_enforced(driver: &kube::Client, admin: &kube::Client) {
    let start = Instant::now();
    let slices = api(driver, "resourceslices", None);
    loop {
        let obj: DynamicObject = serde_json::from_value(slice("probe", OTHER, DRIVER)).unwrap();
        match slices.create(&PostParams::default(), &obj).await {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("ValidatingAdmissionPolicy") => {
                return
            }
            Ok(_) => {
                // Admitted before the policies were loaded: the admin takes it away.
                let _ = api(admin, "resourceslices", None).delete("probe", &DeleteParams::default()).await;
                assert!(start.elapsed() < WAIT, "policies not enforced after {:?}", start.elapsed());
            }
            Err(e) => assert!(start.elapsed() < WAIT, "waiting for the policies: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A claim in `ns` allocated (as the scheduler writes it) on `node`.
async fn claim_allocated_on(env: &Env, ns: &str, name: &str, node: &str) {
    let _ = tokio::task::block_in_place(|| env.api.kubectl().args(["create", "namespace", ns]).output());
    let claims = api(&env.client, "resourceclaims", Some(ns));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [
            {"name": "vf", "exactly": {"deviceClassName": "rdma.kuberdma.io", "allocationMode": "ExactCount", "count": 1}},
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &obj).await.unwrap();
    // One of our VFs and another vendor's device, both on `node`.
    let status = json!({"status": {
        "allocation": {"devices": {"results": [
                           {"request": "vf", "driver": DRIVER, "pool": node, "device": "pci-0000-3d-00-1"},
                           {"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": "gpu-0"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}]}});
    claims.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

/// The driver's server-side apply of one status.devices entry (as dra/status.rs sends it).
async fn apply_device_status(
    driver: &kube::Client,
    ns: &str,
    name: &str,
    entry: Value,
) -> Result<DynamicObject, kube::Error> {
    let body = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": name, "namespace": ns},
                      "status": {"devices": [entry]}});
    api(driver, "resourceclaims", Some(ns))
        .patch_status(name, &PatchParams::apply(DRIVER).force(), &Patch::Apply(body))
        .await
}

/// Our status entry for the VF allocated from `pool` (a node-local pool is named after its node).
fn our_entry(pool: &str) -> Value {
    json!({"driver": DRIVER, "pool": pool, "device": "pci-0000-3d-00-1",
           "networkData": {"interfaceName": "net1", "ips": ["192.168.1.2/24"]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_writes_only_its_own_nodes_slices_and_claims_as_the_charts_policies_say() {
    let sim = sim();
    let plane =
        Plane { apiserver_bin: None, rbac: chart_access_for("1.34.0"), token_of_a_pod_on_the_node: true };
    let env = Env::with_plane(NODE, sim.roots(), &[], plane).await;
    let driver_client = client_for(&env.driver_kubeconfig).await;
    policies_enforced(&driver_client, &env.client).await;

    // Allowed: the real driver publishes its node's slices (server-side apply: create) ...
    let driver = env.spawn(&[]);
    let _kubelet = register(&env.reg_socket()).await;
    let published = env.wait_slices("published under the policies", |s| device_count(s) == 16).await;
    let ours = published[0]["metadata"]["name"].as_str().unwrap().to_string();
    // ... deletes one (the same token, as the driver's clean-up does) and puts it back.
    let slices = api(&driver_client, "resourceslices", None);
    slices.delete(&ours, &DeleteParams::default()).await.expect("its own slice may be deleted");
    env.wait_slices("put back after a delete", |s| device_count(s) == 16).await;
    // ... and writes the status of a claim allocated on its node.
    claim_allocated_on(&env, "tenant-a", "here", NODE).await;
    apply_device_status(&driver_client, "tenant-a", "here", our_entry(NODE))
        .await
        .expect("the status of a claim on its node");

    // Refused, each with the policy's message: a slice for another node ...
    let create = |v: Value| {
        let slices = slices.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(v).unwrap();
            slices.create(&PostParams::default(), &obj).await
        }
    };
    let msg = refused("a slice for another node", create(slice("forged", OTHER, DRIVER)).await);
    assert!(
        msg.contains(&format!(
            "the kube-rdma DRA driver may write only ResourceSlices of the node its pod runs on ({NODE}), not one of node {OTHER}"
        )),
        "{msg}"
    );
    // ... of another vendor's driver, on its own node ...
    let msg = refused("another driver's slice", create(slice("forged", NODE, "gpu.example.com")).await);
    assert!(
        msg.contains("may write only ResourceSlices of driver rdma.kuberdma.io, not of gpu.example.com"),
        "{msg}"
    );
    // ... for all nodes (no nodeName) ...
    let mut all = slice("forged", NODE, DRIVER);
    all["spec"].as_object_mut().unwrap().remove("nodeName");
    all["spec"]["allNodes"] = json!(true);
    let msg = refused("a slice for all nodes", create(all).await);
    assert!(msg.contains("not one without spec.nodeName"), "{msg}");
    // ... deleting or changing another node's slice, or another driver's on its node (the
    // node, driver and pool of a slice are immutable: its devices are what a writer changes).
    for (name, node, drv) in [("theirs", OTHER, DRIVER), ("gpu", NODE, "gpu.example.com")] {
        env.create("resourceslices", slice(name, node, drv)).await;
        let msg =
            refused("deleting a slice not its own", slices.delete(name, &DeleteParams::default()).await);
        assert!(msg.contains("may write only ResourceSlices of"), "{msg}");
        let tamper = json!({"spec": {"devices": [{"name": "tampered"}]}});
        let msg = refused(
            "changing a slice not its own",
            slices.patch(name, &PatchParams::default(), &Patch::Merge(tamper)).await,
        );
        assert!(msg.contains("may write only ResourceSlices of"), "{msg}");
        let kept = env.get("resourceslices", None, name).await.expect("still there");
        assert_eq!(kept["spec"]["devices"][0]["name"], "forged-0", "{kept}");
    }
    // The status of a claim allocated on another node, in any namespace.
    claim_allocated_on(&env, "tenant-b", "elsewhere", OTHER).await;
    let msg = refused(
        "the status of a claim on another node",
        apply_device_status(&driver_client, "tenant-b", "elsewhere", our_entry(OTHER)).await,
    );
    assert!(
        msg.contains(&format!(
            "may write the status only of ResourceClaims allocated on the node its pod runs on ({NODE}) (ResourceClaim tenant-b/elsewhere)"
        )),
        "{msg}"
    );
    assert!(env.get("resourceclaims", Some("tenant-b"), "elsewhere").await.unwrap()["status"]["devices"]
        .is_null());
    // On its own node: another driver's entry, or a changed allocation, are refused too.
    let gpu = json!({"driver": "gpu.example.com", "pool": NODE, "device": "gpu-0",
                     "networkData": {"interfaceName": "gpu0"}});
    let msg = refused(
        "another driver's status entry",
        apply_device_status(&driver_client, "tenant-a", "here", gpu).await,
    );
    assert!(msg.contains("only the status.devices entries of driver rdma.kuberdma.io"), "{msg}");
    let release = json!({"status": {"reservedFor": null}});
    let msg = refused(
        "releasing a claim",
        api(&driver_client, "resourceclaims", Some("tenant-a"))
            .patch_status("here", &PatchParams::default(), &Patch::Merge(release))
            .await,
    );
    assert!(msg.contains("may not change the allocation or reservedFor"), "{msg}");

    // The driver itself never hit a policy.
    let log = driver.log();
    assert!(!log.contains("ValidatingAdmissionPolicy"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_token_without_a_node_claim_may_write_no_slice() {
    let sim = sim();
    let plane =
        Plane { apiserver_bin: None, rbac: chart_access_for("1.34.0"), token_of_a_pod_on_the_node: false };
    let env = Env::with_plane(NODE, sim.roots(), &[], plane).await;
    let driver_client = client_for(&env.driver_kubeconfig).await;
    policies_enforced(&driver_client, &env.client).await;
    let obj: DynamicObject = serde_json::from_value(slice("mine", NODE, DRIVER)).unwrap();
    let msg = refused(
        "a slice written with a token not bound to a pod",
        api(&driver_client, "resourceslices", None).create(&PostParams::default(), &obj).await,
    );
    assert!(msg.contains("(its token carries no node claim), not one of node cx6dx-dual"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_1_36_the_policies_hold_the_driver_to_its_node_too() {
    let sim = sim();
    let env = Env::on_kubernetes_1_36(NODE, sim.roots(), chart_access_for("1.36.0")).await;
    let driver_client = client_for(&env.driver_kubeconfig).await;
    policies_enforced(&driver_client, &env.client).await;
    let _driver = env.spawn(&[]);
    let _kubelet = register(&env.reg_socket()).await;
    env.wait_slices("published under the policies", |s| device_count(s) == 16).await;
    let obj: DynamicObject = serde_json::from_value(slice("forged", NODE, "gpu.example.com")).unwrap();
    let msg = refused(
        "another driver's slice",
        api(&driver_client, "resourceslices", None).create(&PostParams::default(), &obj).await,
    );
    assert!(
        msg.contains("may write only ResourceSlices of driver rdma.kuberdma.io, not of gpu.example.com"),
        "{msg}"
    );
    // The status of a claim: 1.36 checks it itself, before admission (422): network data on a
    // claim of another node needs `arbitrary-node:patch`
    // (DRAResourceClaimGranularStatusAuthorization), the reservation `resourceclaims/binding`,
    // neither of which the chart grants; the policy holds the same on 1.34 and 1.35 (above).
    claim_allocated_on(&env, "tenant-b", "elsewhere", OTHER).await;
    let e = apply_device_status(&driver_client, "tenant-b", "elsewhere", our_entry(OTHER)).await.unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 422 && s.message.contains("arbitrary-node:patch")),
        "{e}"
    );
    claim_allocated_on(&env, "tenant-a", "here", NODE).await;
    let release = json!({"status": {"reservedFor": null}});
    let e = api(&driver_client, "resourceclaims", Some("tenant-a"))
        .patch_status("here", &PatchParams::default(), &Patch::Merge(release))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 422 && s.message.contains("resourceclaims/binding")),
        "{e}"
    );
    // Its own network data on a claim of its node passes both.
    apply_device_status(&driver_client, "tenant-a", "here", our_entry(NODE))
        .await
        .expect("the status of a claim on its node, on 1.36");
}
