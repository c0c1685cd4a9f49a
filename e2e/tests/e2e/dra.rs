//! DRA mode on the real node (issue 25): the chart switched to
//! `dra.enabled: true` as docs/dra.md's walk-through does it (`scripts/cluster up
//! --values e2e/demo/dra-values.yaml`: a `helm upgrade`), the real scheduler
//! allocating from our ResourceSlices, the real kubelet preparing claims through
//! our driver, containerd injecting the CDI devices, Multus and kube-rdma-cni
//! attaching the prepared VF. The cases switch the chart on their own (any one
//! can run alone); they run after the device plugin mode cases, and the last one
//! switches the chart back.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NAMESPACE, NODE_NAME};
use kube_rdma_e2e::node;
use serde_json::Value;

use crate::ctx::{busybox_pod, doc_block, eventually, run_doc_block, Ctx};
use crate::device_plugin;
use crate::Case;

const DRIVER: &str = "rdma.kuberdma.io";
const NS: &str = "default";
/// The DRA network the chart renders in these cases (no resourceName).
const NET: &str = "rdma-dra-net";
/// The simulated ConnectX-6 Dx PF (e2e/node.yaml) whose 4 VFs form the default pool.
const PF: &str = "ens1f0np0";
const VFS: usize = 4;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "dra_a_switch_with_a_device_plugin_pod_running_never_gives_its_vfs_to_a_claim",
            run: dra_a_switch_with_a_device_plugin_pod_running_never_gives_its_vfs_to_a_claim,
        },
        Case {
            name: "dra_slices_and_device_classes_are_accepted_by_the_api_server",
            run: dra_slices_and_device_classes_are_accepted_by_the_api_server,
        },
        Case {
            name: "dra_a_claim_pod_gets_the_vfs_uverbs_rdma_cm_and_our_env",
            run: dra_a_claim_pod_gets_the_vfs_uverbs_rdma_cm_and_our_env,
        },
        Case {
            name: "dra_with_multus_net1_is_the_prepared_vf_and_the_claim_shows_it",
            run: dra_with_multus_net1_is_the_prepared_vf_and_the_claim_shows_it,
        },
        Case {
            name: "dra_a_cel_selector_on_pf_name_allocates_only_that_pfs_vfs",
            run: dra_a_cel_selector_on_pf_name_allocates_only_that_pfs_vfs,
        },
        Case {
            name: "dra_roce_ready_class_allocates_only_while_the_node_state_is_ready",
            run: dra_roce_ready_class_allocates_only_while_the_node_state_is_ready,
        },
        Case {
            name: "dra_first_available_subrequest_reaches_the_container_naming_the_request",
            run: dra_first_available_subrequest_reaches_the_container_naming_the_request,
        },
        Case {
            name: "dra_a_restarted_kubelet_leaves_running_pods_their_devices",
            run: dra_a_restarted_kubelet_leaves_running_pods_their_devices,
        },
        Case {
            name: "dra_a_replaced_driver_pod_serves_and_unprepares_its_predecessors_claims",
            run: dra_a_replaced_driver_pod_serves_and_unprepares_its_predecessors_claims,
        },
        Case {
            name: "dra_a_deleted_pod_is_unprepared_and_its_claim_deallocated",
            run: dra_a_deleted_pod_is_unprepared_and_its_claim_deallocated,
        },
        Case {
            name: "dra_pf_link_down_marks_its_vfs_unhealthy_in_the_slice_within_5_s",
            run: dra_pf_link_down_marks_its_vfs_unhealthy_in_the_slice_within_5_s,
        },
        Case {
            name: "dra_device_health_reaches_the_pods_allocated_resources_status",
            run: dra_device_health_reaches_the_pods_allocated_resources_status,
        },
        Case {
            name: "dra_a_vf_and_another_drivers_gpu_are_aligned_by_pcie_root",
            run: dra_a_vf_and_another_drivers_gpu_are_aligned_by_pcie_root,
        },
        Case {
            name: "dra_two_vfs_matching_numa_node_are_allocated_and_prepared",
            run: dra_two_vfs_matching_numa_node_are_allocated_and_prepared,
        },
        Case {
            name: "dra_promtool_check_metrics_is_clean_on_the_drivers_live_metrics",
            run: dra_promtool_check_metrics_is_clean_on_the_drivers_live_metrics,
        },
        Case {
            name: "dra_bench_claim_pod_start_against_a_plain_pod",
            run: dra_bench_claim_pod_start_against_a_plain_pod,
        },
        Case {
            name: "dra_bench_driver_start_to_1024_vf_slices_accepted",
            run: dra_bench_driver_start_to_1024_vf_slices_accepted,
        },
        Case {
            name: "dra_the_local_cluster_walkthrough_of_docs_dra_md_runs",
            run: dra_the_local_cluster_walkthrough_of_docs_dra_md_runs,
        },
        Case {
            name: "dra_switched_back_to_device_plugin_mode",
            run: dra_switched_back_to_device_plugin_mode,
        },
    ]
}

// ------------------------------------------------------------------ mode switch

/// Whether the device plugin DaemonSet runs `dra` now.
fn runs_dra(ctx: &Ctx) -> Result<bool> {
    let ds = ctx.json(&["-n", NAMESPACE, "get", "daemonset", "kube-rdma-device-plugin"])?;
    Ok(ds["spec"]["template"]["spec"]["containers"][0]["args"][0] == "dra")
}

/// The chart values that switch the local cluster to DRA mode, as docs/dra.md's
/// walk-through does (`scripts/cluster up --values e2e/demo/dra-values.yaml`).
const DRA_VALUES: &str = "e2e/demo/dra-values.yaml";
/// And back to device plugin mode.
const DEVICE_PLUGIN_VALUES: &str = "e2e/demo/device-plugin-values.yaml";

/// `scripts/cluster up --values FILE` (the binary that script runs) on the running
/// cluster: the chart upgraded to the cluster's values plus FILE, rolled out.
fn cluster_up_with(values: &str) -> Result<()> {
    let path = kube_rdma_e2e::peers::repo_root().join(values);
    let out = Command::new(env!("CARGO_BIN_EXE_kube-rdma-cluster"))
        .arg("up")
        .arg("--values")
        .arg(&path)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "kube-rdma-cluster up --values {values} failed ({}):\n{err}", out.status);
    ensure!(
        err.contains("upgrading kube-rdma's chart"),
        "up --values {values} did not upgrade the chart:\n{err}"
    );
    Ok(())
}

/// Switches the chart to DRA mode (with the DRA network) unless it is there,
/// and waits for the node's pool to be published.
pub(crate) fn dra_mode(ctx: &Ctx) -> Result<Vec<Value>> {
    if !runs_dra(ctx)? {
        cluster_up_with(DRA_VALUES)?;
    }
    eventually("our ResourceSlices with the node's VFs", Duration::from_secs(90), || {
        let s = our_slices(ctx)?;
        Ok((complete(&s).is_ok() && devices(&s).len() == VFS).then_some(s))
    })
}

/// The DRA driver's page (the device plugin DaemonSet running `dra`) passes Prometheus' own
/// linter, as the device plugin's does in the other mode, after the claims above were prepared.
fn dra_promtool_check_metrics_is_clean_on_the_drivers_live_metrics(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    crate::install::promtool_checks_every_live_metrics_page(
        ctx,
        &[
            ("device-plugin", "kuberdma_dra_pool_generation"),
            ("device-plugin", "kuberdma_dra_prepare_duration_seconds"),
        ],
    )
}

fn dra_switched_back_to_device_plugin_mode(ctx: &Ctx) -> Result<()> {
    if runs_dra(ctx)? {
        cluster_up_with(DEVICE_PLUGIN_VALUES)?;
    }
    ensure!(!runs_dra(ctx)?, "still in DRA mode");
    ensure!(ctx
        .kubectl(&["-n", NS, "get", "network-attachment-definitions", NET, "--ignore-not-found"])?
        .is_empty());
    eventually("kuberdma.io/rdma_vfs allocatable again", Duration::from_secs(90), || {
        let n = ctx.json(&["get", "node", NODE_NAME])?;
        let n =
            n["status"]["allocatable"]["kuberdma.io/rdma_vfs"].as_str().and_then(|s| s.parse::<usize>().ok());
        Ok((n == Some(VFS)).then_some(()))
    })
}

/// Back in device plugin mode, with the pool's VFs allocatable.
fn device_plugin_mode(ctx: &Ctx) -> Result<()> {
    if runs_dra(ctx)? {
        cluster_up_with(DEVICE_PLUGIN_VALUES)?;
    }
    eventually("kuberdma.io/rdma_vfs allocatable", Duration::from_secs(90), || {
        let n = ctx.json(&["get", "node", NODE_NAME])?;
        Ok((n["status"]["allocatable"]["kuberdma.io/rdma_vfs"] == VFS.to_string().as_str()).then_some(()))
    })
}

/// Regression (issue 36, D11): a pod holding 3 VFs in device plugin mode, the chart
/// switched to DRA mode as docs/dra.md's walk-through does (no drain), and a claim
/// for all 4 VFs was allocated and prepared with the running pod's VFs. Now the
/// driver withholds them (the kubelet's PodResources; the one attached through
/// Multus is also in the pod's netns): the slices list only the free VF, the claim
/// stays pending, and once the pod is deleted the VFs come back and the claim's pod
/// runs. Device plugin mode is restored at the end, so the case runs alone too.
fn dra_a_switch_with_a_device_plugin_pod_running_never_gives_its_vfs_to_a_claim(ctx: &Ctx) -> Result<()> {
    const HOLDER: &str = "dp-holder";
    const CLAIMER: &str = "dra-all-vfs";
    device_plugin_mode(ctx)?;
    // The holder's network (the chart's NAD of the e2e pools), whatever ran before.
    crate::pools::ensure(ctx, false)?;
    let limits = "      resources:\n        limits:\n          kuberdma.io/rdma_vfs: \"3\"\n";
    let nets = format!("k8s.v1.cni.cncf.io/networks: {}", crate::pools::NET);
    ctx.apply(&busybox_pod(NS, HOLDER, limits, &nets))?;
    let all_vfs = [
        "apiVersion: resource.k8s.io/v1",
        "kind: ResourceClaim",
        &format!("metadata: {{name: {CLAIMER}, namespace: {NS}}}"),
        "spec:",
        "  devices:",
        "    requests:",
        "      - name: vf",
        &format!("        exactly: {{deviceClassName: {DRIVER}, allocationMode: ExactCount, count: {VFS}}}"),
        "",
    ]
    .join("\n");
    let r = (|| {
        let held_pod = ctx.wait_running(NS, HOLDER, Duration::from_secs(90))?;
        let env = ctx.exec(NS, HOLDER, &["sh", "-c", "echo $PCIDEVICE_KUBERDMA_IO_RDMA_VFS"])?;
        let held: BTreeSet<String> =
            env.trim().split(',').filter(|s| !s.is_empty()).map(String::from).collect();
        ensure!(held.len() == 3, "the device plugin pod holds {held:?}");

        cluster_up_with(DRA_VALUES)?;
        let pci_of = |s: &[Value]| -> BTreeSet<String> {
            devices(s)
                .values()
                .filter_map(|d| attr(d, "resource.kubernetes.io/pciBusID").as_str().map(String::from))
                .collect()
        };
        let slices = eventually("our slices, with only the free VF", Duration::from_secs(90), || {
            let s = our_slices(ctx)?;
            Ok((complete(&s).is_ok()).then_some(s))
        })?;
        let offered = pci_of(&slices);
        ensure!(
            offered.len() == VFS - 3 && offered.is_disjoint(&held),
            "offered {offered:?}, the pod holds {held:?}"
        );
        let still = ctx.json(&["-n", NS, "get", "pod", HOLDER])?;
        ensure!(
            still["metadata"]["uid"] == held_pod["metadata"]["uid"] && still["status"]["phase"] == "Running",
            "the device plugin pod did not run on through the switch: {}",
            still["status"]
        );

        ctx.apply(&format!(
            "{all_vfs}---\n{}",
            claim_pod(CLAIMER, &format!("resourceClaimName: {CLAIMER}"), None, "")
        ))?;
        std::thread::sleep(Duration::from_secs(20));
        let c = ctx.json(&["-n", NS, "get", "resourceclaim", CLAIMER])?;
        ensure!(c["status"]["allocation"].is_null(), "a claim for {VFS} VFs was allocated: {}", c["status"]);
        let p = ctx.json(&["-n", NS, "get", "pod", CLAIMER])?;
        ensure!(p["status"]["phase"] == "Pending", "the claim's pod is {}", p["status"]["phase"]);
        ensure!(pci_of(&our_slices(ctx)?).is_disjoint(&held), "the held VFs were published meanwhile");

        ctx.delete(NS, "pod", HOLDER)?;
        eventually("the freed VFs back in the slices", Duration::from_secs(120), || {
            let s = our_slices(ctx)?;
            Ok((complete(&s).is_ok() && pci_of(&s).len() == VFS).then_some(()))
        })?;
        ctx.wait_running(NS, CLAIMER, Duration::from_secs(120))?;
        let c = ctx.json(&["-n", NS, "get", "resourceclaim", CLAIMER])?;
        ensure!(results(&c).len() == VFS, "allocation {}", c["status"]["allocation"]);
        Ok(())
    })();
    let clean = (|| {
        ctx.delete(NS, "pod", HOLDER)?;
        ctx.delete(NS, "pod", CLAIMER)?;
        ctx.delete(NS, "resourceclaim", CLAIMER)?;
        device_plugin_mode(ctx)
    })();
    r.and(clean)
}

// ------------------------------------------------------------------ slices

fn our_slices(ctx: &Ctx) -> Result<Vec<Value>> {
    let all = ctx.json(&["get", "resourceslices"])?;
    Ok(all["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter(|s| s["spec"]["driver"] == DRIVER && s["spec"]["nodeName"] == NODE_NAME)
        .cloned()
        .collect())
}

/// The pool is complete: every slice of its newest generation is there.
fn complete(slices: &[Value]) -> Result<()> {
    let generation = slices.iter().filter_map(|s| s["spec"]["pool"]["generation"].as_i64()).max();
    let Some(g) = generation else { bail!("no slice") };
    let newest: Vec<&Value> = slices.iter().filter(|s| s["spec"]["pool"]["generation"] == g).collect();
    let count = newest[0]["spec"]["pool"]["resourceSliceCount"].as_u64().unwrap_or(0);
    ensure!(newest.len() as u64 == count, "{} of {count} slices of generation {g}", newest.len());
    ensure!(newest.iter().all(|s| s["spec"]["pool"]["name"] == newest[0]["spec"]["pool"]["name"]));
    Ok(())
}

/// Device name → device of the newest generation.
fn devices(slices: &[Value]) -> BTreeMap<String, Value> {
    let g = slices.iter().filter_map(|s| s["spec"]["pool"]["generation"].as_i64()).max();
    slices
        .iter()
        .filter(|s| s["spec"]["pool"]["generation"].as_i64() == g)
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .map(|d| (d["name"].as_str().unwrap_or("").to_string(), d))
        .collect()
}

fn attr<'a>(d: &'a Value, name: &str) -> &'a Value {
    let a = &d["attributes"][name];
    ["string", "int", "bool", "version"].iter().map(|k| &a[*k]).find(|v| !v.is_null()).unwrap_or(&Value::Null)
}

/// The pool's generation, from every one of our slices: one value, or an error
/// naming the generations found (a slice of an older generation left behind).
fn generation(slices: &[Value]) -> Result<i64> {
    let gens: BTreeSet<i64> =
        slices.iter().filter_map(|s| s["spec"]["pool"]["generation"].as_i64()).collect();
    ensure!(gens.len() == 1, "our slices have generations {gens:?}, want one");
    Ok(*gens.first().expect("one"))
}

fn uids(slices: &[Value]) -> BTreeSet<String> {
    slices.iter().filter_map(|s| s["metadata"]["uid"].as_str().map(String::from)).collect()
}

fn dra_slices_and_device_classes_are_accepted_by_the_api_server(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    complete(&slices)?;
    // Every slice of the pool is of its one generation (none of an older one left), as many
    // as the pool says; nothing changes on the node, so the driver rewrites nothing: the same
    // generation and the same objects a while later (docs/dra.md: the generation changes only
    // when the pool's content does).
    let g = generation(&slices)?;
    let count = slices[0]["spec"]["pool"]["resourceSliceCount"].as_u64().unwrap_or(0);
    ensure!(slices.len() as u64 == count, "{} slices, the pool says {count}", slices.len());
    let versions = |s: &[Value]| -> BTreeMap<String, String> {
        s.iter()
            .map(|s| {
                let m = &s["metadata"];
                (m["uid"].as_str().unwrap_or("").into(), m["resourceVersion"].as_str().unwrap_or("").into())
            })
            .collect()
    };
    std::thread::sleep(Duration::from_secs(10));
    let later = our_slices(ctx)?;
    ensure!(generation(&later)? == g, "generation {g} became {} with nothing changed", generation(&later)?);
    ensure!(versions(&later) == versions(&slices), "slices rewritten with nothing changed: {later:?}");
    println!("     pool generation {g}, {count} slice(s), unchanged after 10 s");
    let devs = devices(&slices);
    for (name, d) in &devs {
        ensure!(attr(d, "kuberdma.io/healthy") == true, "{name} not healthy: {d}");
        ensure!(attr(d, "kuberdma.io/pfName") == PF, "{name}: pfName {}", attr(d, "kuberdma.io/pfName"));
        ensure!(attr(d, "resource.kubernetes.io/pciBusID").is_string(), "{name}: no pciBusID");
    }
    for class in [DRIVER, "roce-ready.rdma.kuberdma.io"] {
        let c = ctx.json(&["get", "deviceclass", class])?;
        let sel = c["spec"]["selectors"][0]["cel"]["expression"].as_str().unwrap_or("");
        ensure!(sel.contains(DRIVER), "class {class} selector {sel:?}");
    }
    Ok(())
}

// ------------------------------------------------------------------ claims

/// A ResourceClaimTemplate `name` for one VF of `class`, with a request `vf`
/// (its `exactly` or `firstAvailable` body given) and the driver config.
fn template(name: &str, request_body: &str) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: {name}
  namespace: {NS}
spec:
  spec:
    devices:
      requests:
        - name: vf
{request_body}
      config:
        - requests: [vf]
          opaque:
            driver: {DRIVER}
            parameters:
              apiVersion: kuberdma.io/v1alpha1
              kind: RdmaDeviceConfig
              env:
                NCCL_IB_TC: "106"
"#
    )
}

const ONE_VF: &str = "          exactly:\n            deviceClassName: rdma.kuberdma.io";

/// A busybox pod with the pod claim `rdma` from `template` (or, with
/// `claim_name`, the ResourceClaim of that name) used by its container
/// (`request` naming one request of it, if given).
fn claim_pod(name: &str, source: &str, request: Option<&str>, annotations: &str) -> String {
    let req = request.map(|r| format!(", request: {r}")).unwrap_or_default();
    let extra = format!(
        "      resources:\n        claims: [{{name: rdma{req}}}]\n  resourceClaims:\n    - name: rdma\n      {source}\n"
    );
    busybox_pod(NS, name, &extra, annotations)
}

/// A ResourceClaim `name` of its own (not from a template) for one VF; its
/// requests sit one level shallower than a template's.
fn own_claim(name: &str) -> String {
    let one_vf: Vec<&str> = ONE_VF.lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  devices:\n    requests:\n      - name: vf\n{}\n",
        one_vf.join("\n")
    )
}

fn from_template(t: &str) -> String {
    format!("resourceClaimTemplateName: {t}")
}

/// The ResourceClaim of the pod's claim `rdma`.
fn pods_claim(ctx: &Ctx, pod: &str) -> Result<Value> {
    let name = eventually("the pod's ResourceClaim", Duration::from_secs(30), || {
        let p = ctx.json(&["-n", NS, "get", "pod", pod])?;
        Ok(p["status"]["resourceClaimStatuses"]
            .as_array()
            .and_then(|s| s.iter().find(|c| c["name"] == "rdma"))
            .and_then(|c| c["resourceClaimName"].as_str())
            .map(str::to_string))
    })?;
    ctx.json(&["-n", NS, "get", "resourceclaim", &name])
}

/// The results of our driver in the claim's allocation.
fn results(claim: &Value) -> Vec<Value> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .map(|r| r.iter().filter(|r| r["driver"] == DRIVER).cloned().collect())
        .unwrap_or_default()
}

fn cdi_spec_path(ctx: &Ctx, uid: &str) -> std::path::PathBuf {
    ctx.layout.root("/run/cdi").join(format!("kuberdma.io-claim_{uid}.json"))
}

fn prepared_path(ctx: &Ctx, uid: &str) -> std::path::PathBuf {
    ctx.layout.root("/var/lib/kubelet/plugins").join(DRIVER).join("prepared").join(format!("{uid}.json"))
}

/// What the container must see for the allocated device `dev`: its uverbs
/// node and rdma_cm, and our variables for request `vf`.
fn check_container_has(ctx: &Ctx, pod: &str, dev: &Value) -> Result<()> {
    let rdma = attr(dev, "kuberdma.io/rdmaDevice").as_str().context("the device has no rdmaDevice")?;
    let pci = attr(dev, "resource.kubernetes.io/pciBusID").as_str().context("pciBusID")?;
    let out = ctx.exec(NS, pod, &["sh", "-c", "ls /dev/infiniband; echo ---; env"])?;
    let (nodes, env) = out.split_once("---").context("exec output")?;
    let nodes: Vec<&str> = nodes.split_whitespace().collect();
    let uverbs = uverbs_of(ctx, rdma)?;
    ensure!(nodes.contains(&uverbs.as_str()), "{uverbs} of {rdma} missing in the container: {nodes:?}");
    ensure!(nodes.contains(&"rdma_cm"), "rdma_cm missing in the container: {nodes:?}");
    ensure!(nodes.iter().filter(|n| n.starts_with("uverbs")).count() == 1, "other VFs' uverbs: {nodes:?}");
    for want in [
        format!("KUBERDMA_VF_PCI_ADDRESSES={pci}"),
        format!("KUBERDMA_VF_RDMA_DEVICES={rdma}"),
        "NCCL_IB_TC=106".to_string(),
    ] {
        ensure!(env.lines().any(|l| l == want), "{want} not in the container's env:\n{env}");
    }
    Ok(())
}

/// The uverbs node of RDMA device `rdma` on the simulated node (its `ibdev`).
fn uverbs_of(ctx: &Ctx, rdma: &str) -> Result<String> {
    let dir = ctx.layout.sim().join("sys/class/infiniband_verbs");
    let e = std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
    e.flatten()
        .find(|e| std::fs::read_to_string(e.path().join("ibdev")).is_ok_and(|d| d.trim() == rdma))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .with_context(|| format!("no uverbs of {rdma} in {}", dir.display()))
}

fn cleanup(ctx: &Ctx, pod: &str, template: &str) -> Result<()> {
    ctx.delete(NS, "pod", pod)?;
    if !template.is_empty() {
        ctx.delete(NS, "resourceclaimtemplate", template)?;
    }
    Ok(())
}

fn dra_a_claim_pod_gets_the_vfs_uverbs_rdma_cm_and_our_env(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let t = "dra-one-vf";
    ctx.apply(&format!("{}---\n{}", template(t, ONE_VF), claim_pod("dra-one", &from_template(t), None, "")))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-one", Duration::from_secs(90))?;
        let claim = pods_claim(ctx, "dra-one")?;
        let res = results(&claim);
        ensure!(res.len() == 1, "allocation {}", claim["status"]["allocation"]);
        let name = res[0]["device"].as_str().unwrap_or("");
        let dev = devices(&slices).remove(name).with_context(|| format!("{name} is not in our slices"))?;
        check_container_has(ctx, "dra-one", &dev)?;
        let uid = claim["metadata"]["uid"].as_str().unwrap_or("");
        ensure!(cdi_spec_path(ctx, uid).exists(), "no CDI spec for claim {uid}");
        Ok(())
    })();
    cleanup(ctx, "dra-one", t)?;
    r
}

/// Interfaces of the node's network namespace: name → MAC.
fn node_links() -> Result<BTreeMap<String, String>> {
    let out = node::ip_in(&node::netns(), &["-j", "link", "show"])?;
    let v: Value = serde_json::from_str(&out)?;
    Ok(v.as_array()
        .context("ip -j")?
        .iter()
        .map(|l| {
            (l["ifname"].as_str().unwrap_or("").to_string(), l["address"].as_str().unwrap_or("").to_string())
        })
        .collect())
}

fn dra_with_multus_net1_is_the_prepared_vf_and_the_claim_shows_it(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let before = node_links()?;
    let t = "dra-net";
    let annotations = format!("k8s.v1.cni.cncf.io/networks: {NET}");
    ctx.apply(&format!(
        "{}---\n{}",
        template(t, ONE_VF),
        claim_pod("dra-net", &from_template(t), None, &annotations)
    ))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-net", Duration::from_secs(90))?;
        let claim = pods_claim(ctx, "dra-net")?;
        let res = results(&claim);
        ensure!(res.len() == 1, "allocation {}", claim["status"]["allocation"]);
        let name = res[0]["device"].as_str().unwrap_or("").to_string();
        let dev = devices(&slices).remove(&name).context("allocated device not in our slices")?;
        let netdev = attr(&dev, "kuberdma.io/netdev").as_str().context("no netdev attribute")?.to_string();
        let mac = before.get(&netdev).with_context(|| format!("{netdev} was not on the node"))?.clone();
        let out = ctx.exec(NS, "dra-net", &["sh", "-c", "ip -o link show net1; ip -4 -o addr show net1"])?;
        ensure!(out.contains(&mac), "net1 is not {netdev} ({mac}):\n{out}");
        ensure!(!node_links()?.contains_key(&netdev), "{netdev} is still on the node");
        let ip = out
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .context("net1 has no IPv4 address")?
            .to_string();
        ensure!(ip.starts_with("192.168.150."), "net1 address {ip}");
        check_container_has(ctx, "dra-net", &dev)?;
        // The driver publishes the CNI's attachment in the claim.
        let uid = claim["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let cname = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
        let nd = eventually("status.devices[].networkData of the claim", Duration::from_secs(30), || {
            let c = ctx.json(&["-n", NS, "get", "resourceclaim", &cname])?;
            Ok(c["status"]["devices"]
                .as_array()
                .and_then(|ds| {
                    ds.iter()
                        .find(|d| d["driver"] == DRIVER && d["device"] == name.as_str())
                        .map(|d| d["networkData"].clone())
                })
                .filter(|n| !n.is_null()))
        })?;
        ensure!(nd["interfaceName"] == "net1", "networkData {nd}");
        ensure!(
            nd["hardwareAddress"].as_str().is_some_and(|m| m.eq_ignore_ascii_case(&mac)),
            "networkData {nd}"
        );
        ensure!(
            nd["ips"].as_array().is_some_and(|i| i.iter().any(|a| a == ip.as_str())),
            "networkData {nd}, net1 {ip}"
        );
        ensure!(prepared_path(ctx, &uid).exists(), "no prepared record");
        Ok(netdev)
    })();
    cleanup(ctx, "dra-net", t)?;
    let netdev = r?;
    eventually("the VF netdev back on the node", Duration::from_secs(30), || {
        Ok(node_links()?.contains_key(&netdev).then_some(()))
    })
}

fn dra_a_cel_selector_on_pf_name_allocates_only_that_pfs_vfs(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    let sel = |pf: &str| {
        format!(
            "          exactly:\n            deviceClassName: rdma.kuberdma.io\n            selectors:\n              - cel:\n                  expression: 'has(device.attributes[\"kuberdma.io\"].pfName) && device.attributes[\"kuberdma.io\"].pfName == \"{pf}\"'"
        )
    };
    ctx.apply(&format!(
        "{}---\n{}---\n{}---\n{}",
        template("dra-pf", &sel(PF)),
        claim_pod("dra-pf", &from_template("dra-pf"), None, ""),
        template("dra-nopf", &sel("ens9f9np9")),
        claim_pod("dra-nopf", &from_template("dra-nopf"), None, "")
    ))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-pf", Duration::from_secs(90))?;
        let res = results(&pods_claim(ctx, "dra-pf")?);
        ensure!(res.len() == 1, "{res:?}");
        // No VF of that PF: unschedulable, said by the scheduler.
        eventually("dra-nopf unschedulable", Duration::from_secs(60), || {
            let p = ctx.json(&["-n", NS, "get", "pod", "dra-nopf"])?;
            let cond = p["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter().find(|c| c["type"] == "PodScheduled" && c["status"] == "False").cloned()
            });
            Ok(cond.filter(|c| c["reason"] == "Unschedulable"))
        })?;
        ensure!(results(&pods_claim(ctx, "dra-nopf")?).is_empty(), "allocated without a matching PF");
        Ok(())
    })();
    cleanup(ctx, "dra-pf", "dra-pf")?;
    cleanup(ctx, "dra-nopf", "dra-nopf")?;
    r
}

/// The RoCE port of e2e/node.yaml the agent checks (the PF of the pool's VFs).
const PROFILE: &str = "e2e-dra-not-ready";

/// Whether every VF of our pool has `roceReady` = `want`.
fn roce_ready_is(ctx: &Ctx, want: bool) -> Result<Option<Vec<Value>>> {
    let s = our_slices(ctx)?;
    let d = devices(&s);
    let ok = complete(&s).is_ok()
        && d.len() == VFS
        && d.values().all(|d| attr(d, "kuberdma.io/roceReady") == &Value::Bool(want));
    Ok(ok.then_some(s))
}

/// `roce-ready.rdma.kuberdma.io` (the chart's DeviceClass: healthy and `roceReady`) with
/// the node's RdmaNodeState ready and not: the agent's checks fail against a RoceProfile
/// wanting PFC on priority 4 (the simulated port has it on 3, as the operator's Audit case
/// shows), the driver publishes `roceReady: false` from that state, and a claim of the class
/// stays unallocated, its pod unschedulable; the profile gone, the node is ready on the
/// default profile again, `roceReady: true`, and the scheduler allocates the same pending
/// claim from our slice.
fn dra_roce_ready_class_allocates_only_while_the_node_state_is_ready(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    eventually(
        "roceReady=true on every VF (the node ready on the default profile)",
        Duration::from_secs(90),
        || roce_ready_is(ctx, true),
    )?;
    let (t, pod) = ("dra-roce", "dra-roce");
    let body = "          exactly:\n            deviceClassName: roce-ready.rdma.kuberdma.io";
    let r = (|| {
        ctx.apply(&format!(
            "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata:\n  name: {PROFILE}\nspec:\n  \
             nodeSelector: {{kubernetes.io/hostname: {NODE_NAME}}}\n  interfaceSelector: {{names: [{PF}]}}\n  \
             pfc: {{priorities: [4]}}\n"
        ))?;
        eventually("the node state not ready: roceReady=false on every VF", Duration::from_secs(90), || {
            roce_ready_is(ctx, false)
        })?;
        ctx.apply(&format!("{}---\n{}", template(t, body), claim_pod(pod, &from_template(t), None, "")))?;
        eventually("the roce-ready claim's pod unschedulable", Duration::from_secs(60), || {
            let p = ctx.json(&["-n", NS, "get", "pod", pod])?;
            let cond = p["status"]["conditions"].as_array().and_then(|cs| {
                cs.iter().find(|c| c["type"] == "PodScheduled" && c["status"] == "False").cloned()
            });
            Ok(cond.filter(|c| c["reason"] == "Unschedulable"))
        })?;
        ensure!(results(&pods_claim(ctx, pod)?).is_empty(), "allocated while the node is not RoCE-ready");

        ctx.kubectl(&["delete", "roceprofile", PROFILE, "--wait=true", "--timeout=60s"])?;
        let slices = eventually("roceReady=true again without the profile", Duration::from_secs(90), || {
            roce_ready_is(ctx, true)
        })?;
        ctx.wait_running(NS, pod, Duration::from_secs(90))?;
        let res = results(&pods_claim(ctx, pod)?);
        ensure!(res.len() == 1, "{res:?}");
        let name = res[0]["device"].as_str().unwrap_or("");
        let dev = devices(&slices).remove(name).context("allocated device not in our slices")?;
        ensure!(attr(&dev, "kuberdma.io/roceReady") == &Value::Bool(true), "{name} allocated: {dev}");
        Ok(())
    })();
    cleanup(ctx, pod, t)?;
    ctx.kubectl(&["delete", "roceprofile", PROFILE, "--ignore-not-found", "--wait=true", "--timeout=60s"])?;
    r
}

fn dra_first_available_subrequest_reaches_the_container_naming_the_request(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    // No simulated VF has 400G: the scheduler takes the second alternative.
    let body = "          firstAvailable:\n            - name: fast\n              deviceClassName: rdma.kuberdma.io\n              selectors:\n                - cel:\n                    expression: 'has(device.attributes[\"kuberdma.io\"].linkSpeedMbps) && device.attributes[\"kuberdma.io\"].linkSpeedMbps >= 400000'\n            - name: any\n              deviceClassName: rdma.kuberdma.io";
    let t = "dra-first";
    ctx.apply(&format!(
        "{}---\n{}",
        template(t, body),
        claim_pod("dra-first", &from_template(t), Some("vf"), "")
    ))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-first", Duration::from_secs(90))?;
        let res = results(&pods_claim(ctx, "dra-first")?);
        ensure!(res.len() == 1 && res[0]["request"] == "vf/any", "{res:?}");
        let name = res[0]["device"].as_str().unwrap_or("");
        let dev = devices(&slices).remove(name).context("allocated device not in our slices")?;
        check_container_has(ctx, "dra-first", &dev)
    })();
    cleanup(ctx, "dra-first", t)?;
    r
}

fn dra_a_restarted_kubelet_leaves_running_pods_their_devices(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let t = "dra-kubelet";
    ctx.apply(&format!(
        "{}---\n{}",
        template(t, ONE_VF),
        claim_pod("dra-kubelet", &from_template(t), None, "")
    ))?;
    let r = (|| {
        let p0 = ctx.wait_running(NS, "dra-kubelet", Duration::from_secs(90))?;
        let claim = pods_claim(ctx, "dra-kubelet")?;
        let name = results(&claim)
            .first()
            .and_then(|r| r["device"].as_str().map(str::to_string))
            .context("allocated")?;
        let dev = devices(&slices).remove(&name).context("allocated device not in our slices")?;
        let (before, g0) = (uids(&slices), generation(&slices)?);
        let t0 = Instant::now();
        cluster::restart_daemon("kubelet", Duration::from_secs(10))?;
        // The kubelet deletes the node's slices when it starts (dra_plugin_manager.go
        // NewDRAPluginManager: wipeResourceSlices of all drivers); the driver publishes the
        // pool again. The old slices still there would pass for it: only new objects count.
        let after = eventually(
            "the node Ready and our pool published again, as new slices",
            Duration::from_secs(90),
            || {
                let ready = ctx.node_ready()?;
                let s = our_slices(ctx)?;
                let fresh = !s.is_empty() && uids(&s).is_disjoint(&before);
                Ok((ready && fresh && complete(&s).is_ok() && devices(&s).len() == VFS).then_some(s))
            },
        )?;
        println!(
            "     slices wiped and republished {:.1} s after the kubelet restart (generation {g0} -> {})",
            t0.elapsed().as_secs_f64(),
            generation(&after)?
        );
        ensure!(devices(&after) == devices(&slices), "the republished pool differs from before the restart");
        let p1 = ctx.wait_running(NS, "dra-kubelet", Duration::from_secs(60))?;
        let restarts = |p: &Value| p["status"]["containerStatuses"][0]["restartCount"].as_i64();
        ensure!(restarts(&p0) == restarts(&p1), "the container restarted: {}", p1["status"]);
        ensure!(
            p0["status"]["containerStatuses"][0]["containerID"]
                == p1["status"]["containerStatuses"][0]["containerID"],
            "a new container"
        );
        // The API says Running from before the restart; the new kubelet
        // answers exec for the pod once it has synced it again.
        eventually("exec into the pod after the kubelet restart", Duration::from_secs(30), || {
            Ok(check_container_has(ctx, "dra-kubelet", &dev).ok())
        })?;
        check_container_has(ctx, "dra-kubelet", &dev)?;
        let after =
            ctx.json(&["-n", NS, "get", "resourceclaim", claim["metadata"]["name"].as_str().unwrap_or("")])?;
        ensure!(results(&after) == results(&claim), "allocation changed: {}", after["status"]);
        Ok(())
    })();
    cleanup(ctx, "dra-kubelet", t)?;
    r
}

/// The driver's pod replaced (an upgrade, an eviction, a crash loop's end):
/// the DaemonSet's new pod registers with the kubelet again and publishes the
/// same devices; the pod running on a claim keeps its container and devices;
/// a new claim is prepared; and the claim the old pod prepared is unprepared
/// by the new one when its pod goes (the prepared records outlive the pod).
fn dra_a_replaced_driver_pod_serves_and_unprepares_its_predecessors_claims(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let (t, first, second) = ("dra-replaced", "dra-before", "dra-after");
    ctx.apply(&format!("{}---\n{}", template(t, ONE_VF), claim_pod(first, &from_template(t), None, "")))?;
    let r = (|| {
        let p0 = ctx.wait_running(NS, first, Duration::from_secs(90))?;
        let claim = pods_claim(ctx, first)?;
        let uid = claim["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let name = results(&claim)
            .first()
            .and_then(|r| r["device"].as_str().map(str::to_string))
            .context("allocated")?;
        let dev = devices(&slices).remove(&name).context("allocated device not in our slices")?;

        let old = device_plugin::plugin_pod(ctx)?;
        ctx.delete(NAMESPACE, "pod", &old)?;
        ensure!(cdi_spec_path(ctx, &uid).exists(), "the claim's CDI spec went with the driver pod");
        ensure!(prepared_path(ctx, &uid).exists(), "the claim's prepared record went with the driver pod");
        eventually("a new driver pod", Duration::from_secs(90), || {
            Ok(device_plugin::plugin_pod(ctx).ok().filter(|p| *p != old))
        })?;
        eventually("our pool published by the new pod", Duration::from_secs(90), || {
            let s = our_slices(ctx)?;
            Ok((complete(&s).is_ok() && devices(&s).len() == VFS).then_some(()))
        })?;

        let p1 = ctx.wait_running(NS, first, Duration::from_secs(30))?;
        let container = |p: &Value| p["status"]["containerStatuses"][0]["containerID"].clone();
        ensure!(container(&p0) == container(&p1), "the workload got a new container: {}", p1["status"]);
        check_container_has(ctx, first, &dev)?;

        // Prepared by the new pod: it is registered with the kubelet.
        ctx.apply(&claim_pod(second, &from_template(t), None, ""))?;
        ctx.wait_running(NS, second, Duration::from_secs(90))?;
        let other = pods_claim(ctx, second)?;
        let other_name = results(&other)
            .first()
            .and_then(|r| r["device"].as_str().map(str::to_string))
            .context("allocated")?;
        ensure!(other_name != name, "one VF allocated twice: {name}");
        let other_dev = devices(&slices).remove(&other_name).context("allocated device not in our slices")?;
        check_container_has(ctx, second, &other_dev)?;

        // Unprepared by the new pod, from the old pod's records.
        ctx.delete(NS, "pod", first)?;
        ensure!(!cdi_spec_path(ctx, &uid).exists(), "CDI spec of the old pod's claim left after its pod");
        ensure!(
            !prepared_path(ctx, &uid).exists(),
            "prepared record of the old pod's claim left after its pod"
        );
        Ok(())
    })();
    ctx.delete(NS, "pod", second)?;
    cleanup(ctx, first, t)?;
    r
}

fn dra_a_deleted_pod_is_unprepared_and_its_claim_deallocated(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    // A claim of its own (not from a template), so it outlives the pod.
    let claim = own_claim("dra-own");
    ctx.apply(&format!("{claim}---\n{}", claim_pod("dra-own", "resourceClaimName: dra-own", None, "")))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-own", Duration::from_secs(90))?;
        let c = ctx.json(&["-n", NS, "get", "resourceclaim", "dra-own"])?;
        let uid = c["metadata"]["uid"].as_str().unwrap_or("").to_string();
        ensure!(results(&c).len() == 1, "{}", c["status"]);
        ensure!(cdi_spec_path(ctx, &uid).exists() && prepared_path(ctx, &uid).exists(), "not prepared");
        ctx.delete(NS, "pod", "dra-own")?;
        ensure!(!cdi_spec_path(ctx, &uid).exists(), "CDI spec left after the pod");
        ensure!(!prepared_path(ctx, &uid).exists(), "prepared record left after the pod");
        eventually("the claim deallocated", Duration::from_secs(60), || {
            let c = ctx.json(&["-n", NS, "get", "resourceclaim", "dra-own"])?;
            let reserved = c["status"]["reservedFor"].as_array().is_some_and(|r| !r.is_empty());
            Ok((!reserved && c["status"]["allocation"].is_null()).then_some(()))
        })
    })();
    ctx.delete(NS, "pod", "dra-own")?;
    ctx.delete(NS, "resourceclaim", "dra-own")?;
    r
}

fn dra_pf_link_down_marks_its_vfs_unhealthy_in_the_slice_within_5_s(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    let ns = node::netns();
    let healthy = |want: bool| -> Result<Option<()>> {
        let s = our_slices(ctx)?;
        let d = devices(&s);
        Ok((d.len() == VFS && d.values().all(|d| attr(d, "kuberdma.io/healthy") == want)).then_some(()))
    };
    let t0 = Instant::now();
    node::ip_in(&ns, &["link", "set", PF, "down"])?;
    let r = eventually("healthy=false on every VF of the PF", Duration::from_secs(5), || healthy(false));
    let took = t0.elapsed();
    node::ip_in(&ns, &["link", "set", PF, "up"])?;
    r?;
    println!("     PF link down -> healthy=false in the slice: {:.2} s", took.as_secs_f64());
    eventually("healthy=true again after link up", Duration::from_secs(30), || healthy(true))
}

/// The health of the pod's claim `rdma` as the kubelet reports it in the
/// container's `allocatedResourcesStatus` (kubelet `cm/dra/manager.go`
/// `UpdateAllocatedResourcesStatus`: `claim:<name>`, one entry per device).
fn reported_health(ctx: &Ctx, pod: &str) -> Result<Vec<(String, String)>> {
    let p = ctx.json(&["-n", NS, "get", "pod", pod])?;
    let statuses = p["status"]["containerStatuses"][0]["allocatedResourcesStatus"].as_array().cloned();
    Ok(statuses
        .unwrap_or_default()
        .iter()
        .filter(|s| s["name"] == "claim:rdma")
        .flat_map(|s| s["resources"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (s("resourceID"), s("health"))
        })
        .collect())
}

/// Our `NodeWatchResources` stream reaches the pod: the kubelet (with the
/// ResourceHealthStatus gate, [`cluster::RESOURCE_HEALTH_GATE`]) shows the
/// claim's VF Healthy, Unhealthy while its PF's link is down, Healthy again.
fn dra_device_health_reaches_the_pods_allocated_resources_status(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    // The kubelet matches a container's claim to the ResourceClaim by name
    // (manager.go compares `cClaim.Name` with the claim object's name), so the
    // pod's claim and the object are both `rdma`.
    let claim = own_claim("rdma");
    let pod = "dra-health";
    ctx.apply(&format!("{claim}---\n{}", claim_pod(pod, "resourceClaimName: rdma", None, "")))?;
    let ns = node::netns();
    let r = (|| {
        ctx.wait_running(NS, pod, Duration::from_secs(90))?;
        let health = |want: &'static str| {
            move || -> Result<Option<Vec<(String, String)>>> {
                let h = reported_health(ctx, pod)?;
                Ok((h.len() == 1 && h[0].1 == want).then_some(h))
            }
        };
        let h = eventually("the claim's VF reported Healthy", Duration::from_secs(60), health("Healthy"))?;
        ensure!(h[0].0.starts_with("kuberdma.io/claim="), "resource ID is not our CDI device: {h:?}");
        // Issue 25: within 5 s. No floor in the kubelet's path: a health change of a device
        // of a prepared claim sends its pods to the sync loop at once (cm/dra/manager.go
        // HandleWatchResourcesStream -> `m.update`, kubelet syncLoopIteration).
        let t0 = Instant::now();
        node::ip_in(&ns, &["link", "set", PF, "down"])?;
        let down = eventually(
            "Unhealthy within 5 s of the PF link down",
            Duration::from_secs(5),
            health("Unhealthy"),
        );
        let took = t0.elapsed();
        node::ip_in(&ns, &["link", "set", PF, "up"])?;
        let t1 = Instant::now();
        down?;
        eventually("Healthy within 5 s of the link up", Duration::from_secs(5), health("Healthy"))?;
        println!(
            "     PF link down -> pod's allocatedResourcesStatus Unhealthy: {:.1} s; link up -> Healthy: {:.1} s",
            took.as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        Ok(())
    })();
    ctx.delete(NS, "pod", pod)?;
    ctx.delete(NS, "resourceclaim", "rdma")?;
    r
}

fn dra_a_vf_and_another_drivers_gpu_are_aligned_by_pcie_root(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let roots: Vec<String> = devices(&slices)
        .values()
        .filter_map(|d| attr(d, "resource.kubernetes.io/pcieRoot").as_str().map(str::to_string))
        .collect();
    ensure!(roots.len() == VFS, "not every VF has a pcieRoot: {roots:?}");
    let root = &roots[0];
    // gpu-0 comes first and sits elsewhere: only the constraint makes the
    // scheduler take gpu-1. That driver cannot prepare, so the allocation is
    // what is checked.
    let gpu = format!(
        r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
    - cel:
        expression: device.driver == "gpu.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: e2e-node-gpu.example.com
spec:
  driver: gpu.example.com
  nodeName: {NODE_NAME}
  pool: {{name: {NODE_NAME}, generation: 1, resourceSliceCount: 1}}
  devices:
    - name: gpu-0
      attributes:
        resource.kubernetes.io/pcieRoot: {{string: pci0000:f0}}
    - name: gpu-1
      attributes:
        resource.kubernetes.io/pcieRoot: {{string: "{root}"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: dra-aligned
  namespace: {NS}
spec:
  devices:
    requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.example.com}}
      - name: vf
        exactly: {{deviceClassName: rdma.kuberdma.io}}
    constraints:
      - requests: [gpu, vf]
        matchAttribute: resource.kubernetes.io/pcieRoot
"#
    );
    ctx.apply(&format!(
        "{gpu}---\n{}",
        claim_pod("dra-aligned", "resourceClaimName: dra-aligned", None, "")
    ))?;
    let r = eventually("the aligned claim allocated", Duration::from_secs(60), || {
        let c = ctx.json(&["-n", NS, "get", "resourceclaim", "dra-aligned"])?;
        let all = c["status"]["allocation"]["devices"]["results"].as_array().cloned().unwrap_or_default();
        if all.is_empty() {
            return Ok(None);
        }
        let by: BTreeMap<String, String> = all
            .iter()
            .map(|r| (r["request"].as_str().unwrap_or("").into(), r["device"].as_str().unwrap_or("").into()))
            .collect();
        Ok(Some(by))
    });
    ctx.delete(NS, "pod", "dra-aligned")?;
    ctx.delete(NS, "resourceclaim", "dra-aligned")?;
    ctx.kubectl(&["delete", "resourceslice", "e2e-node-gpu.example.com", "--ignore-not-found"])?;
    ctx.kubectl(&["delete", "deviceclass", "gpu.example.com", "--ignore-not-found"])?;
    let by = r?;
    ensure!(by.get("gpu").map(String::as_str) == Some("gpu-1"), "GPU not on the VF's root {root}: {by:?}");
    let vf = by.get("vf").context("no VF allocated")?;
    let dev = devices(&slices).remove(vf).context("the VF is not ours")?;
    ensure!(attr(&dev, "resource.kubernetes.io/pcieRoot") == root.as_str(), "{vf} on another root");
    Ok(())
}

/// The standard NUMA attribute our slices publish (`device-plugin/src/dra/slices.rs`).
const NUMA: &str = "resource.kubernetes.io/numaNode";

/// Two VFs in one request with `matchAttribute` on the NUMA node: the
/// scheduler allocates them only if each has the attribute with one value
/// (a device without it fails the constraint), and the kubelet prepares both.
/// All 4 VFs of e2e/node.yaml are on NUMA node 0 (the PF's `numa: 0`).
fn dra_two_vfs_matching_numa_node_are_allocated_and_prepared(ctx: &Ctx) -> Result<()> {
    let slices = dra_mode(ctx)?;
    let devs = devices(&slices);
    for (name, d) in &devs {
        ensure!(attr(d, NUMA) == 0, "{name}: {NUMA} {} (e2e/node.yaml puts every VF on 0)", attr(d, NUMA));
    }
    let claim = format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: dra-numa
  namespace: {NS}
spec:
  devices:
    requests:
      - name: vf
        exactly:
          deviceClassName: {DRIVER}
          allocationMode: ExactCount
          count: 2
    constraints:
      - requests: [vf]
        matchAttribute: {NUMA}
"#
    );
    ctx.apply(&format!("{claim}---\n{}", claim_pod("dra-numa", "resourceClaimName: dra-numa", None, "")))?;
    let r = (|| {
        ctx.wait_running(NS, "dra-numa", Duration::from_secs(90))?;
        let c = ctx.json(&["-n", NS, "get", "resourceclaim", "dra-numa"])?;
        let res = results(&c);
        let names: Vec<&str> = res.iter().filter_map(|r| r["device"].as_str()).collect();
        ensure!(names.len() == 2 && names[0] != names[1], "allocation {}", c["status"]["allocation"]);
        let mut pcis = vec![];
        for n in &names {
            let d = devs.get(*n).with_context(|| format!("{n} is not in our slices"))?;
            ensure!(attr(d, NUMA) == 0, "{n}: {NUMA} {}", attr(d, NUMA));
            pcis.push(attr(d, "resource.kubernetes.io/pciBusID").as_str().context("pciBusID")?.to_string());
        }
        // Prepared: both VFs' uverbs nodes and PCI addresses (`KUBERDMA_<request>_...`) reach the container.
        let out = ctx.exec(NS, "dra-numa", &["sh", "-c", "ls /dev/infiniband; echo ---; env"])?;
        let (nodes, env) = out.split_once("---").context("exec output")?;
        let uverbs = nodes.split_whitespace().filter(|n| n.starts_with("uverbs")).count();
        ensure!(uverbs == 2, "{uverbs} uverbs nodes in the container, want 2: {nodes:?}");
        let listed: Vec<&str> = env
            .lines()
            .find_map(|l| l.strip_prefix("KUBERDMA_VF_PCI_ADDRESSES="))
            .context("no KUBERDMA_VF_PCI_ADDRESSES in the container's env")?
            .split(',')
            .collect();
        for p in &pcis {
            ensure!(listed.contains(&p.as_str()), "{p} not in KUBERDMA_VF_PCI_ADDRESSES {listed:?}");
        }
        Ok(())
    })();
    ctx.delete(NS, "pod", "dra-numa")?;
    ctx.delete(NS, "resourceclaim", "dra-numa")?;
    r
}

// ------------------------------------------------------------------ docs/dra.md

/// docs/dra.md's "Try it on the local cluster" block, run as written on this lane's
/// cluster ([`run_doc_block`]): it switches the chart to DRA mode, starts a claim pod, shows
/// what it got, deletes it and switches back; what it prints is checked against what the
/// docs say it shows.
fn dra_the_local_cluster_walkthrough_of_docs_dra_md_runs(ctx: &Ctx) -> Result<()> {
    let block = doc_block("docs/dra.md", "dra_the_local_cluster_walkthrough_of_docs_dra_md_runs")?;
    for must in
        [&format!("scripts/cluster up --values {DRA_VALUES}"), "kubectl apply -f e2e/demo/dra-pod.yaml"]
    {
        ensure!(block.contains(must), "the walk-through does not run `{must}`:\n{block}");
    }
    let r = run_doc_block(&block).and_then(|(stdout, stderr)| {
        for want in [
            // kubectl get resourceslices: our pool of the node.
            DRIVER,
            NODE_NAME,
            // kubectl get resourceclaims: the pod's claim, allocated and reserved for it.
            "dra-demo-rdma-",
            "allocated,reserved",
            // kubectl exec: the prepared VF's devices and variables, and its netdev as net1.
            "rdma_cm",
            "uverbs",
            "KUBERDMA_VF_PCI_ADDRESSES=",
            "NCCL_IB_TC=106",
            "net1",
            "inet 192.168.150.",
        ] {
            ensure!(stdout.contains(want), "the walk-through printed no {want:?}:\n{stdout}\n{stderr}");
        }
        ensure!(!runs_dra(ctx)?, "the walk-through's last command left the chart in DRA mode");
        Ok(())
    });
    if r.is_err() {
        let pod = kube_rdma_e2e::peers::repo_root().join("e2e/demo/dra-pod.yaml");
        ctx.kubectl(&["delete", "-f", &pod.display().to_string(), "--ignore-not-found", "--wait=true"])?;
    }
    r
}

// ------------------------------------------------------------------ benchmarks

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Applies `yaml` and times until pod `name` is Running and ready (polled
/// every 50 ms; each kubectl call adds its own ~tens of ms to both kinds alike).
fn time_to_running(ctx: &Ctx, yaml: &str, name: &str) -> Result<Duration> {
    let t0 = Instant::now();
    ctx.apply(yaml)?;
    loop {
        let p = ctx.json(&["-n", NS, "get", "pod", name])?;
        let ready = p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["ready"] == true));
        if p["status"]["phase"] == "Running" && ready {
            return Ok(t0.elapsed());
        }
        ensure!(t0.elapsed() < Duration::from_secs(120), "{name} not running: {}", p["status"]);
        std::thread::sleep(Duration::from_millis(50));
    }
}

const STARTS: usize = 10;
/// Issue 25's target for a pod with a ResourceClaimTemplate of one VF against
/// the same pod without one.
const CLAIM_POD_TARGET: f64 = 1.3;

fn dra_bench_claim_pod_start_against_a_plain_pod(ctx: &Ctx) -> Result<()> {
    dra_mode(ctx)?;
    let t = "dra-bench";
    ctx.apply(&template(t, ONE_VF))?;
    let (mut plain, mut claim) = (Vec::new(), Vec::new());
    let r = (|| -> Result<()> {
        // Interleaved, so both kinds see the same machine.
        for i in 0..STARTS {
            let p = format!("bench-plain-{i}");
            plain.push(time_to_running(ctx, &busybox_pod(NS, &p, "", ""), &p)?);
            ctx.delete(NS, "pod", &p)?;
            let c = format!("bench-claim-{i}");
            claim.push(time_to_running(ctx, &claim_pod(&c, &from_template(t), None, ""), &c)?);
            ctx.delete(NS, "pod", &c)?;
        }
        Ok(())
    })();
    for i in 0..STARTS {
        ctx.delete(NS, "pod", &format!("bench-plain-{i}"))?;
        ctx.delete(NS, "pod", &format!("bench-claim-{i}"))?;
    }
    ctx.delete(NS, "resourceclaimtemplate", t)?;
    r?;
    let ms = |d: &Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
    let (p, c) = (median(plain.clone()), median(claim.clone()));
    let ratio = c.as_secs_f64() / p.as_secs_f64();
    println!(
        "     pod start to Running (median of {STARTS}): plain {} ms, one-VF claim {} ms, ratio {ratio:.2} (target <= {CLAIM_POD_TARGET})\n     plain {:?} ms\n     claim {:?} ms",
        ms(&p),
        ms(&c),
        plain.iter().map(ms).collect::<Vec<_>>(),
        claim.iter().map(ms).collect::<Vec<_>>()
    );
    // Printed, not asserted (CONTRIBUTING: performance is measured in benches, a loaded
    // machine must not fail the suite); the closing figures quote this line.
    Ok(())
}

/// The driver binary the cluster's image was built from (build-dist --debug
/// in KUBE_RDMA_STATIC_TARGET_DIR), else the shared dist copy.
fn driver_binary() -> std::path::PathBuf {
    let name = "kube-rdma-device-plugin";
    std::env::var_os("KUBE_RDMA_STATIC_TARGET_DIR")
        .map(|d| std::path::PathBuf::from(d).join("x86_64-unknown-linux-gnu/debug").join(name))
        .filter(|p| p.exists())
        .unwrap_or_else(|| kube_rdma_e2e::peers::cache_dir().join("dist").join(name))
}

fn dra_bench_driver_start_to_1024_vf_slices_accepted(ctx: &Ctx) -> Result<()> {
    // A second, simulated node of 8 PFs x 128 VFs whose driver runs on the
    // host against the cluster's API server; no kubelet there, so its slices
    // are published without a Node owner.
    let mut desc = nic::sim::big_node(8, 128);
    desc.node = "kr-bench-1024".into();
    let sim = nic::sim::Sim::materialise(&desc).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    let roots = sim.roots();
    let dirs = tempfile::tempdir()?;
    let count = |ctx: &Ctx| -> Result<usize> {
        let all = ctx.json(&[
            "get",
            "resourceslices",
            "--field-selector",
            &format!("spec.nodeName={}", desc.node),
        ])?;
        let s: Vec<Value> = all["items"].as_array().cloned().unwrap_or_default();
        if complete(&s).is_err() {
            return Ok(0);
        }
        Ok(devices(&s).len())
    };
    let bin = driver_binary();
    let mut runs = Vec::new();
    let mut result = Ok(());
    for _ in 0..3 {
        ctx.kubectl(&[
            "delete",
            "resourceslices",
            "--field-selector",
            &format!("spec.nodeName={}", desc.node),
        ])?;
        let t0 = Instant::now();
        let mut child = std::process::Command::new(&bin)
            .arg("dra")
            .args(["--node-name", &desc.node, "--no-link-events"])
            .arg("--plugins-registry-dir")
            .arg(dirs.path().join("registry"))
            .arg("--plugins-dir")
            .arg(dirs.path().join("plugins"))
            .arg("--cdi-dir")
            .arg(dirs.path().join("cdi"))
            .arg("--sysfs-root")
            .arg(&roots.sysfs)
            .arg("--dev-root")
            .arg(&roots.dev)
            .env("KUBECONFIG", ctx.layout.kubeconfig())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let r = eventually("1024 devices in a complete pool", Duration::from_secs(60), || {
            Ok((count(ctx)? == 1024).then_some(()))
        });
        let took = t0.elapsed();
        let _ = child.kill();
        let _ = child.wait();
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        runs.push(took);
    }
    ctx.kubectl(&["delete", "resourceslices", "--field-selector", &format!("spec.nodeName={}", desc.node)])?;
    result?;
    println!(
        "     driver start -> complete pool of 1024 VFs accepted by the API server (debug build, {}): median {:.0} ms, runs {:?} ms",
        bin.display(),
        median(runs.clone()).as_secs_f64() * 1e3,
        runs.iter().map(|d| (d.as_secs_f64() * 1e3).round()).collect::<Vec<_>>()
    );
    Ok(())
}
