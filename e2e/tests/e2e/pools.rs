//! The device plugin's pools on the simulated node, installed by the chart as
//! a user would (`helm upgrade` with `pools` and `networks`): one pool of each
//! kind the chart serves in device plugin mode, and the Multus network of the
//! RDMA VF pool. Shared by the device plugin cases and the pod start benchmark.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use kube_rdma_e2e::cluster::{self, NAMESPACE, NODE_NAME};
use serde_json::{json, Value};

use crate::ctx::{eventually, merge, Ctx};

/// The RDMA VF pool (every VF with an RDMA device: the ConnectX-6 Dx's 4).
pub const RDMA: &str = "rdma_vfs";
/// A netdevice pool without RDMA: the E810's VFs on iavf (VFs 0 and 1).
pub const NETDEV: &str = "e810_netdev";
/// A vfio pool: the E810's VFs bound to vfio-pci (VFs 2 and 3).
pub const VFIO: &str = "e810_vfio";
/// A shared-HCA pool: the ConnectX-6 Dx PF's own RDMA device, 3 pods at a time.
pub const SHARED: &str = "mlx5_shared";
/// How many pods share the HCA of [`SHARED`].
pub const SHARED_MAX: u32 = 3;
/// The NetworkAttachmentDefinition of the RDMA VF pool (namespace `default`).
pub const NET: &str = "rdma-net";
/// Its host-local subnet.
pub const NET_SUBNET: &str = "192.168.213.0/24";
/// The MTU it sets on `net1` (the VFs' own is 9000, so a 4000 shows the CNI set it).
pub const NET_MTU: u32 = 4000;

/// The base pools and their device counts on the simulated node.
pub fn base_counts() -> BTreeMap<String, u32> {
    [(RDMA, 4), (NETDEV, 2), (VFIO, 2)].into_iter().map(|(p, n)| (res(p), n)).collect()
}

/// `kuberdma.io/<pool>`.
pub fn res(pool: &str) -> String {
    format!("kuberdma.io/{pool}")
}

fn pool_values(shared: bool) -> Value {
    let mut pools = vec![
        json!({"name": RDMA, "mode": "vf", "selectors": {"isRdma": true}}),
        json!({"name": NETDEV, "selectors": {"drivers": ["iavf"]}}),
        json!({"name": VFIO, "selectors": {"drivers": ["vfio-pci"]}}),
    ];
    if shared {
        pools.push(json!({"name": SHARED, "mode": "shared", "rdmaHcaMax": SHARED_MAX,
                          "selectors": {"pfNames": ["ens1f0np0"]}}));
    }
    json!({
        "pools": pools,
        "networks": [{
            "name": NET,
            "namespace": "default",
            "pool": RDMA,
            "ipam": {"type": "host-local", "subnet": NET_SUBNET},
            // The kernel here has no RDMA subsystem: nothing can move an RDMA device
            // (simsync's docs); the netdev moves and gets the MTU.
            "config": {"mtu": NET_MTU, "rdma": "disabled"},
        }],
    })
}

/// Installs the pools (with the shared pool when `shared`) unless the chart
/// already runs exactly them, and waits until the node advertises each one
/// with its count. Idempotent, so any selection of cases can start with it.
pub fn ensure(ctx: &Ctx, shared: bool) -> Result<()> {
    let want = pool_values(shared);
    let cm = ctx
        .json(&["-n", NAMESPACE, "get", "configmap", "kube-rdma-device-plugin"])
        .ok()
        .and_then(|c| c["data"]["config.yaml"].as_str().map(String::from))
        .unwrap_or_default();
    let has_shared = cm.contains(SHARED);
    let current = cm.contains(VFIO) && has_shared == shared;
    let nad = ctx.json(&["-n", "default", "get", "network-attachment-definitions", NET]).is_ok();
    if !(current && nad) {
        let st = cluster::state()?;
        let mut values = cluster::e2e_values(&st.image);
        merge(&mut values, want);
        let f = values_file(shared);
        std::fs::write(&f, serde_yaml::to_string(&values)?)?;
        cluster::helm_upgrade(&ctx.layout, &f)?;
        cluster::wait_rollout(&ctx.layout)?;
    }
    let mut counts = base_counts();
    if shared {
        counts.insert(res(SHARED), SHARED_MAX);
    }
    wait_allocatable(ctx, &counts, Duration::from_secs(90))
}

/// Puts the chart back on its defaults (the e2e's own values), as `up` installed it.
pub fn restore_defaults(ctx: &Ctx) -> Result<()> {
    let st = cluster::state()?;
    let f = ctx.layout.base.join("values.yaml");
    if !f.exists() {
        std::fs::write(&f, serde_yaml::to_string(&cluster::e2e_values(&st.image))?)?;
    }
    cluster::helm_upgrade(&ctx.layout, &f)?;
    cluster::wait_rollout(&ctx.layout)
}

fn values_file(shared: bool) -> PathBuf {
    cluster::base_dir().join(if shared { "values-dp-shared.yaml" } else { "values-dp.yaml" })
}

/// The node's `status.capacity` and `status.allocatable` of our resources.
pub fn node_resources(ctx: &Ctx) -> Result<(BTreeMap<String, u32>, BTreeMap<String, u32>)> {
    let n = ctx.json(&["get", "node", NODE_NAME])?;
    let pick = |v: &Value| -> BTreeMap<String, u32> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.starts_with("kuberdma.io/"))
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.parse().ok()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok((pick(&n["status"]["capacity"]), pick(&n["status"]["allocatable"])))
}

/// Waits until allocatable and capacity show `counts` (other resources may be there too).
pub fn wait_allocatable(ctx: &Ctx, counts: &BTreeMap<String, u32>, timeout: Duration) -> Result<()> {
    let mut last = String::new();
    eventually("the pools allocatable with their counts", timeout, || {
        let (cap, alloc) = node_resources(ctx)?;
        last = format!("capacity {cap:?}, allocatable {alloc:?}");
        let ok = counts.iter().all(|(r, n)| cap.get(r) == Some(n) && alloc.get(r) == Some(n));
        Ok(ok.then_some(()))
    })
    .with_context(|| format!("want {counts:?}; node has {last}"))
}
