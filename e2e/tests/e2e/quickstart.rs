//! The README's quick start on the local cluster: the chart upgraded with the
//! quick start's own files (`examples/pools.yaml`, `examples/my-values.yaml`),
//! then step 7's block as the README shows it, its pods from
//! `manifests/examples/pod-rdma.yaml`. What it pins (issue 39, item 3): two pods
//! on `rdma-net` get the `net1` addresses they name, whatever node each lands
//! on, through Multus's `ips` capability, kube-rdma-cni and the static IPAM
//! plugin (host-local allocated per node, so two nodes gave out the same one).
//!
//! One node until the two-node cluster of issue 37 exists: the pods are the
//! manifest's with what one simulated node cannot give them changed, and
//! nothing else: both on e2e-node (the client's anti-affinity for the server's
//! node dropped), the e2e busybox image for the perftest one, no CPU and
//! memory requests (two full cores do not fit beside the cluster on these
//! machines), and the network's `rdma` set to `disabled` (this kernel has no
//! RDMA subsystem to move a device with, as in cni.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NODE_NAME};
use kube_rdma_e2e::images::BUSYBOX;
use kube_rdma_e2e::peers::repo_root;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::ctx::{doc_block, merge, run_doc_block, Ctx};
use crate::pools;
use crate::Case;

/// The case, and the name step 7's block carries in its info string.
const CASE: &str = "quickstart_two_pods_on_rdma_net_get_the_addresses_they_name";
/// The manifest step 7 applies.
const PODS: &str = "manifests/examples/pod-rdma.yaml";

pub fn cases() -> Vec<Case> {
    vec![Case { name: CASE, run: two_pods_on_rdma_net_get_the_addresses_they_name }]
}

fn read(path: &str) -> Result<String> {
    let p = repo_root().join(path);
    std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
}

/// The cluster's own values, then the quick start's two files as `helm install -f
/// examples/pools.yaml -f examples/my-values.yaml` merges them, `rdma` disabled.
fn quickstart_values() -> Result<Value> {
    let mut values = cluster::e2e_values(&cluster::state()?.image);
    merge(&mut values, serde_yaml::from_str(&read("examples/pools.yaml")?)?);
    let mut mine: Value = serde_yaml::from_str(&read("examples/my-values.yaml")?)?;
    let net = &mut mine["networks"][0];
    ensure!(net["name"] == "rdma-net", "examples/my-values.yaml's first network is not rdma-net: {net}");
    net["config"]["rdma"] = json!("disabled");
    merge(&mut values, mine);
    Ok(values)
}

/// The manifest's pods for one simulated node (see the module's doc).
fn one_node_pods(manifest: &str) -> Result<String> {
    let mut out = String::new();
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let mut pod = Value::deserialize(doc)?;
        ensure!(pod["kind"] == "Pod", "{PODS} holds a {} besides pods", pod["kind"]);
        if let Some(spec) = pod["spec"].as_object_mut() {
            spec.remove("affinity");
        }
        for c in pod["spec"]["containers"].as_array_mut().context("a pod without containers")? {
            c["image"] = json!(BUSYBOX);
            c["imagePullPolicy"] = json!("Never");
            c["command"] = json!(["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]);
            for kind in ["requests", "limits"] {
                if let Some(r) = c["resources"][kind].as_object_mut() {
                    r.retain(|k, _| k.starts_with("kuberdma.io/"));
                }
            }
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&pod)?);
    }
    Ok(out)
}

/// The `net1` addresses Multus reports for `pod` in step 7's output: the JSON
/// printed after the `POD on NODE` line.
fn net1_ips(stdout: &str, pod: &str) -> Result<Vec<String>> {
    let head = format!("{pod} on {NODE_NAME}\n");
    let at = stdout.find(&head).with_context(|| format!("no {head:?} in:\n{stdout}"))? + head.len();
    let status: Vec<Value> = serde_json::Deserializer::from_str(&stdout[at..])
        .into_iter()
        .next()
        .context("no network status")?
        .with_context(|| format!("the network status of {pod} is no JSON:\n{stdout}"))?;
    let net1 = status.iter().find(|n| n["interface"] == "net1").with_context(|| format!("{pod}: no net1"))?;
    Ok(net1["ips"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect())
}

/// Step 7 of the README's quick start, as written, on the chart installed with
/// the quick start's files: each pod's `net1` has the address its annotation names.
fn two_pods_on_rdma_net_get_the_addresses_they_name(ctx: &Ctx) -> Result<()> {
    let values = cluster::base_dir().join("values-quickstart.yaml");
    std::fs::write(&values, serde_yaml::to_string(&quickstart_values()?)?)?;
    cluster::helm_upgrade(&ctx.layout, &values)?;
    let r = (|| -> Result<()> {
        cluster::wait_rollout(&ctx.layout)?;
        // examples/pools.yaml's `ens1f0np0#0-7` takes the 4 VFs of e2e/node.yaml's ConnectX-6 Dx.
        let counts: BTreeMap<String, u32> = [(pools::res(pools::RDMA), 4)].into_iter().collect();
        pools::wait_allocatable(ctx, &counts, Duration::from_secs(90))?;
        let pods = cluster::base_dir().join("pod-rdma-one-node.yaml");
        std::fs::write(&pods, one_node_pods(&read(PODS)?)?)?;
        let block = doc_block("README.md", CASE)?;
        ensure!(block.contains(PODS), "step 7 no longer applies {PODS}:\n{block}");
        let script = format!(
            "export KUBECONFIG={}\n{}",
            ctx.layout.kubeconfig().display(),
            block.replace(PODS, &pods.display().to_string())
        );
        let (stdout, _) = run_doc_block(&script)?;
        for (pod, want) in [("rdma-server", "192.168.100.11"), ("rdma-client", "192.168.100.12")] {
            let ips = net1_ips(&stdout, pod)?;
            ensure!(ips == [want], "{pod}'s net1 has {ips:?}, its annotation names {want}:\n{stdout}");
        }
        Ok(())
    })();
    let cleanup = ["rdma-server", "rdma-client"]
        .iter()
        .map(|p| ctx.delete("default", "pod", p))
        .collect::<Result<Vec<()>>>()
        .and_then(|_| pools::restore_defaults(ctx));
    match (r, cleanup) {
        (Err(e), _) => Err(e),
        (Ok(()), c) => c.context("putting the pods and the chart's values back"),
    }
}
