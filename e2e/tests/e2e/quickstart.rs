//! The README's quick start on the local cluster: the chart upgraded with the
//! quick start's own files (`examples/pools.yaml`, `examples/my-values.yaml`),
//! then step 7's block as the README shows it, its pods from
//! `manifests/examples/pod-rdma.yaml`. What it pins (issue 37, item 3): the
//! network's IPAM is whereabouts, which allocates cluster-wide, so the two pods
//! on `rdma-net` get two different addresses of the range, whatever node each
//! lands on (host-local allocates per node, so two nodes gave out the same one);
//! the range's IPPool lists both pods' allocations (kube-rdma-cni ran the
//! plugin, which wrote them there), and holds none once the pods are deleted
//! (the CNI DEL reached whereabouts and released them).
//!
//! One node until the two-node cluster of issue 37 exists: the pods are the
//! manifest's with what one simulated node cannot give them changed, and
//! nothing else: both on e2e-node (the client's anti-affinity for the server's
//! node dropped), the e2e busybox image for the perftest one, no CPU and
//! memory requests (two full cores do not fit beside the cluster on these
//! machines), and the network's `rdma` set to `disabled` (this kernel has no
//! RDMA subsystem to move a device with, as in cni.rs).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NODE_NAME};
use kube_rdma_e2e::images::BUSYBOX;
use kube_rdma_e2e::peers::repo_root;
use kube_rdma_e2e::whereabouts;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::ctx::{doc_block, eventually, merge, run_doc_block, Ctx};
use crate::pools;
use crate::Case;

/// The case, and the name step 7's block carries in its info string.
const CASE: &str = "quickstart_two_pods_on_rdma_net_get_distinct_whereabouts_addresses_freed_at_delete";
/// The manifest step 7 applies.
const PODS: &str = "manifests/examples/pod-rdma.yaml";
/// Its pods.
const POD_NAMES: [&str; 2] = ["rdma-server", "rdma-client"];

pub fn cases() -> Vec<Case> {
    vec![Case { name: CASE, run: two_pods_on_rdma_net_get_distinct_whereabouts_addresses_freed_at_delete }]
}

fn read(path: &str) -> Result<String> {
    let p = repo_root().join(path);
    std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
}

/// The cluster's own values, then the quick start's two files as `helm install -f
/// examples/pools.yaml -f examples/my-values.yaml` merges them, `rdma` disabled; and the
/// whereabouts range of `rdma-net`.
fn quickstart_values() -> Result<(Value, String)> {
    let mut values = cluster::e2e_values(&cluster::state()?.image);
    merge(&mut values, serde_yaml::from_str(&read("examples/pools.yaml")?)?);
    let mut mine: Value = serde_yaml::from_str(&read("examples/my-values.yaml")?)?;
    let net = &mut mine["networks"][0];
    ensure!(net["name"] == "rdma-net", "examples/my-values.yaml's first network is not rdma-net: {net}");
    ensure!(net["ipam"]["type"] == "whereabouts", "rdma-net's IPAM is not whereabouts: {}", net["ipam"]);
    let range =
        net["ipam"]["range"].as_str().context("rdma-net's whereabouts IPAM has no range")?.to_string();
    net["config"]["rdma"] = json!("disabled");
    merge(&mut values, mine);
    Ok((values, range))
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

/// An IPv4 range `A.B.C.D/N`: its network address and prefix length.
fn parse_range(range: &str) -> Result<(Ipv4Addr, u32)> {
    let (addr, len) = range.split_once('/').with_context(|| format!("{range:?} is not ADDRESS/PREFIX"))?;
    let addr: Ipv4Addr = addr.parse().with_context(|| format!("{range:?}: not an IPv4 address"))?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32).with_context(|| format!("{range:?}: bad prefix"))?;
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    Ok((Ipv4Addr::from(u32::from(addr) & mask), len))
}

/// Whether `ip` lies in `range`.
fn in_range(ip: Ipv4Addr, range: &str) -> Result<bool> {
    let (net, len) = parse_range(range)?;
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    Ok(u32::from(ip) & mask == u32::from(net))
}

/// The allocations of whereabouts' IPPool for `range` (in [`whereabouts::NAMESPACE`]), as
/// (pod `namespace/name`, address): the pool's `spec.allocations` maps an address's offset
/// from the range's network address to its owner (whereabouts' `toIPReservationList`).
/// None while whereabouts has made no pool for the range.
fn ippool_allocations(ctx: &Ctx, range: &str) -> Result<Option<BTreeMap<String, Ipv4Addr>>> {
    let pools = ctx.json(&["-n", whereabouts::NAMESPACE, "get", "ippools.whereabouts.cni.cncf.io"])?;
    let Some(pool) = pools["items"].as_array().into_iter().flatten().find(|p| p["spec"]["range"] == range)
    else {
        return Ok(None);
    };
    let (net, _) = parse_range(range)?;
    let mut out = BTreeMap::new();
    for (offset, a) in pool["spec"]["allocations"].as_object().into_iter().flatten() {
        let off: u32 = offset.parse().with_context(|| format!("IPPool offset {offset:?}"))?;
        let ip = Ipv4Addr::from(u32::from(net).checked_add(off).context("offset past the range")?);
        let podref =
            a["podref"].as_str().with_context(|| format!("allocation {offset} without a podref: {a}"))?;
        if out.insert(podref.to_string(), ip).is_some() {
            bail!("IPPool {range} gives {podref} two addresses: {}", pool["spec"]);
        }
    }
    Ok(Some(out))
}

/// Step 7 of the README's quick start, as written, on the chart installed with the quick
/// start's files: the pods' `net1` addresses are two different ones of the range, the range's
/// IPPool holds them for those pods, and releases them when the pods are deleted.
fn two_pods_on_rdma_net_get_distinct_whereabouts_addresses_freed_at_delete(ctx: &Ctx) -> Result<()> {
    let values = cluster::base_dir().join("values-quickstart.yaml");
    let (v, range) = quickstart_values()?;
    std::fs::write(&values, serde_yaml::to_string(&v)?)?;
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
        let mut got = BTreeMap::new();
        for pod in POD_NAMES {
            let ips = net1_ips(&stdout, pod)?;
            let [ip] = ips.as_slice() else { bail!("{pod}'s net1 has {ips:?}, not one address:\n{stdout}") };
            let ip: Ipv4Addr = ip.parse().with_context(|| format!("{pod}'s net1 address {ip:?}"))?;
            ensure!(in_range(ip, &range)?, "{pod}'s net1 has {ip}, outside rdma-net's range {range}");
            got.insert(format!("default/{pod}"), ip);
        }
        ensure!(
            got.values().collect::<std::collections::BTreeSet<_>>().len() == 2,
            "one address for both pods: {got:?}"
        );
        let pool = ippool_allocations(ctx, &range)?
            .with_context(|| format!("whereabouts made no IPPool for {range}"))?;
        ensure!(pool == got, "the IPPool of {range} holds {pool:?}; the pods' net1 have {got:?}");
        for pod in POD_NAMES {
            ctx.delete("default", "pod", pod)?;
        }
        eventually(&format!("the IPPool of {range} without allocations"), Duration::from_secs(30), || {
            Ok(ippool_allocations(ctx, &range)?.filter(|a| a.is_empty()))
        })?;
        Ok(())
    })();
    let cleanup = POD_NAMES
        .iter()
        .map(|p| ctx.delete("default", "pod", p))
        .collect::<Result<Vec<()>>>()
        .and_then(|_| pools::restore_defaults(ctx));
    match (r, cleanup) {
        (Err(e), _) => Err(e),
        (Ok(()), c) => c.context("putting the pods and the chart's values back"),
    }
}
