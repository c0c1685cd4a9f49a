//! Network data the CNI recorded for a prepared VF reaches the claim's status
//! through the real `kube-rdma-device-plugin dra`, and on Kubernetes 1.36
//! the chart's driver rule is what lets it write there. Fake kubelet, real
//! control plane, simulated node, as in `dra_kubelet.rs`.

mod dra_fixtures;

use dra_fixtures::common::dra::*;
use dra_fixtures::*;
use serde_json::{json, Value};

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
