//! Device plugin mode on the real kubelet (issue 20): the chart serves a pool
//! of each kind on the simulated node, pods get their devices through the
//! kubelet's device manager and containerd's CDI, Multus attaches the VF, and
//! registration survives kubelet and plugin restarts.
//!
//! Every case name starts with `device_plugin_`, so `scripts/test-e2e device`
//! runs them all. Order matters for one pair: the kubelet restart case starts
//! a watcher of the node's resources that runs while the later cases do, and
//! `device_plugin_kubelet_restart_..._6_minutes_later` joins it once 6 minutes
//! have passed since the restart (the kubelet drops a resource whose plugin
//! has been gone for 5, devicemanager `endpointStopGracePeriod`). No case on
//! that cluster re-registers a pool meanwhile (the plugin restart, shared pool
//! and removed VF cases, [`disruptive_cases`], run on the suite's second
//! cluster at the same time), so a lost registration cannot be hidden by a
//! fresh one. The cases in between are [`watched_cases`] and the other
//! modules' quiet ones, so the 6 minutes are spent testing (`main.rs`).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use base64::Engine;
use kube_rdma_e2e::cluster::{self, NAMESPACE, NODE_NAME};
use kube_rdma_e2e::node;
use serde_json::{json, Value};

use crate::ctx::{busybox_pod, eventually, Ctx};
use crate::links::{add_vf_link, node_link, peer_of};
use crate::pools::{self, res, NET, NETDEV, RDMA, SHARED, VFIO};
use crate::Case;

/// The kubelet restart, which leaves its watcher running on this lane's cluster.
pub fn watch_start() -> Vec<Case> {
    vec![Case {
        name: "device_plugin_kubelet_restart_under_load_registers_once_and_keeps_pods_devices",
        run: kubelet_restart_under_load_registers_once,
    }]
}

/// Quiet cases of this mode that run while the watcher does (with the other
/// modules' quiet cases): none restarts the plugin or changes its pools, and
/// each leaves a VF of the RDMA pool free for them (the restart case's `dp-keep`
/// holds one until the watcher's end).
pub fn watched_cases() -> Vec<Case> {
    vec![
        Case {
            name: "device_plugin_pools_of_each_kind_are_allocatable_with_their_counts",
            run: pools_of_each_kind_are_allocatable_with_their_counts,
        },
        Case {
            name: "device_plugin_kubectl_describe_node_shows_each_pool_in_capacity_and_allocatable",
            run: kubectl_describe_node_shows_each_pool,
        },
        Case {
            name: "device_plugin_rdma_vf_pod_gets_its_uverbs_rdma_cm_env_and_cdi_device",
            run: rdma_vf_pod_gets_its_devices_env_and_cdi_device,
        },
        Case {
            name: "device_plugin_netdevice_pod_gets_its_env_and_no_device_node_or_cdi_device",
            run: netdevice_pod_gets_its_env_and_nothing_else,
        },
        Case {
            name: "device_plugin_vfio_pod_gets_its_vfio_group_and_container_devices",
            run: vfio_pod_gets_its_group_and_container,
        },
        Case {
            name: "device_plugin_multus_net1_is_the_allocated_vf_and_comes_back_on_delete",
            run: multus_net1_is_the_allocated_vf,
        },
        Case {
            name: "device_plugin_pf_link_down_makes_its_vfs_unhealthy_at_the_kubelet_within_5_s",
            run: pf_link_down_makes_its_vfs_unhealthy,
        },
        Case {
            name: "device_plugin_bench_vf_pod_start_against_a_plain_pod",
            run: bench_vf_pod_start_against_a_plain_pod,
        },
    ]
}

/// Issue 20's pod start benchmark, printed (`pod_start.rs`, the same measurement as `cargo
/// bench -p kube-rdma-e2e --bench pod_start`): 10 VF + Multus pods and 10 plain ones, one at
/// a time, so one VF at most is taken beside the restart case's.
fn bench_vf_pod_start_against_a_plain_pod(ctx: &Ctx) -> Result<()> {
    let lat = crate::pod_start::measure(ctx, crate::pod_start::STARTS)?;
    for l in lat.summary().lines() {
        println!("     {}", l.trim_start());
    }
    Ok(())
}

/// The watcher's end, 6 minutes after the restart.
pub fn watch_end() -> Vec<Case> {
    vec![Case {
        name: "device_plugin_kubelet_restart_allocatable_still_right_6_minutes_later",
        run: kubelet_restart_allocatable_still_right_6_minutes_later,
    }]
}

/// The cases that re-register a pool (a chart change, a plugin restart) or
/// remove a VF, then the chart back on its default pool: they run on the
/// other cluster, where no watch is going on.
pub fn disruptive_cases() -> Vec<Case> {
    vec![
        Case {
            name: "device_plugin_shared_pool_in_shared_netns_mode_hands_out_the_pf_hca",
            run: shared_pool_hands_out_the_pf_hca,
        },
        Case {
            name: "device_plugin_deleted_or_crashed_plugin_reregisters_and_a_crashed_container_keeps_its_devices",
            run: deleted_or_crashed_plugin_reregisters,
        },
        Case {
            name: "device_plugin_a_removed_vf_is_unhealthy_at_the_kubelet_within_5_s",
            run: a_removed_vf_is_unhealthy_at_the_kubelet,
        },
        Case { name: "device_plugin_chart_back_on_its_default_pool", run: chart_back_on_its_default_pool },
    ]
}

// ---------------------------------------------------------------------------
// Pools on the node

fn pools_of_each_kind_are_allocatable_with_their_counts(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    let (cap, alloc) = pools::node_resources(ctx)?;
    for (r, n) in pools::base_counts() {
        ensure!(cap.get(&r) == Some(&n), "capacity of {r}: {:?}, want {n}", cap.get(&r));
        ensure!(alloc.get(&r) == Some(&n), "allocatable of {r}: {:?}, want {n}", alloc.get(&r));
    }
    Ok(())
}

fn kubectl_describe_node_shows_each_pool(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    let out = ctx.kubectl(&["describe", "node", NODE_NAME])?;
    for section in ["Capacity:", "Allocatable:"] {
        let lines: Vec<&str> = out
            .lines()
            .skip_while(|l| l.trim_end() != section)
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .collect();
        ensure!(!lines.is_empty(), "no {section} section in kubectl describe node:\n{out}");
        for (r, n) in pools::base_counts() {
            let shown = lines.iter().find_map(|l| {
                let (k, v) = l.trim().split_once(':')?;
                (k == r).then(|| v.trim().to_string())
            });
            ensure!(shown.as_deref() == Some(&n.to_string()), "{section} {r}: {shown:?}, want {n}\n{out}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// What a container gets

/// A busybox pod requesting one device of `pool`, with optional annotations.
fn pool_pod(name: &str, pool: &str, annotations: &str) -> String {
    let extra = format!("      resources:\n        limits:\n          {}: 1\n", res(pool));
    busybox_pod("default", name, &extra, annotations)
}

/// The container's environment.
fn env_of(ctx: &Ctx, pod: &str) -> Result<BTreeMap<String, String>> {
    let out = ctx.exec("default", pod, &["env"])?;
    Ok(out.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

/// Our variables (and the ones we set for NCCL/UCX) in `env`.
fn ours(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| ["PCIDEVICE_", "KUBERDMA_", "NCCL_", "UCX_"].iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What the kubelet checkpointed for the pod's container and `resource`:
/// the device IDs and the Allocate answer (protobuf bytes).
fn checkpointed(ctx: &Ctx, pod_uid: &str, resource: &str) -> Result<(Vec<String>, Vec<u8>)> {
    let f = ctx.layout.root("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&f).with_context(|| f.display().to_string())?)?;
    let entries = v["Data"]["PodDeviceEntries"].as_array().context("checkpoint has no PodDeviceEntries")?;
    let e = entries
        .iter()
        .find(|e| e["PodUID"] == pod_uid && e["ResourceName"] == resource)
        .with_context(|| format!("no checkpoint entry for pod {pod_uid} and {resource}"))?;
    let mut ids: Vec<String> = e["DeviceIDs"]
        .as_object()
        .map(|m| m.values().flat_map(|l| l.as_array().cloned().unwrap_or_default()))
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(String::from))
        .collect();
    ids.sort();
    let resp = base64::engine::general_purpose::STANDARD
        .decode(e["AllocResp"].as_str().unwrap_or(""))
        .context("AllocResp is not base64")?;
    Ok((ids, resp))
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The simulated node as sysfs shows it now.
fn inventory(ctx: &Ctx) -> Result<(nic::Inventory, nic::Roots)> {
    let sim =
        nic::sim::Sim::open(&ctx.layout.sim()).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    let roots = sim.roots();
    Ok((nic::discover::discover(&roots), roots))
}

fn find_vf<'a>(inv: &'a nic::Inventory, pci: &str) -> Result<&'a nic::Vf> {
    inv.pfs
        .iter()
        .flat_map(|p| &p.vfs)
        .find(|v| v.pci.to_string() == pci)
        .with_context(|| format!("no VF {pci}"))
}

/// Char devices of an RDMA device: uverbs, umad, issm.
fn char_devs(r: &nic::RdmaDev) -> Vec<&nic::CharDev> {
    r.uverbs.iter().chain(&r.umad).chain(&r.issm).collect()
}

/// `major:minor` (hex, as `stat -c %t:%T` prints) of a node on the host.
fn host_rdev(roots: &nic::Roots, node_path: &str) -> Result<String> {
    let p = roots.dev.join(node_path.trim_start_matches("/dev/"));
    let dev = std::fs::metadata(&p).with_context(|| format!("{} on the node", p.display()))?.rdev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    Ok(format!("{major:x}:{minor:x}"))
}

/// The char devices in the container's `dir` (name → `major:minor`); empty
/// when the directory does not exist. Fails on anything that is not a char device.
fn container_devs(ctx: &Ctx, pod: &str, dir: &str) -> Result<BTreeMap<String, String>> {
    let out = ctx.exec(
        "default",
        pod,
        &["sh", "-c", &format!("[ -d {dir} ] || exit 0; for f in {dir}/*; do [ -e \"$f\" ] && stat -c '%n|%F|%t:%T' \"$f\"; done; true")],
    )?;
    let mut m = BTreeMap::new();
    for l in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = l.split('|').collect();
        ensure!(f.len() == 3 && f[1] == "character special file", "{dir} in the container holds {l}");
        m.insert(f[0].to_string(), f[2].to_string());
    }
    Ok(m)
}

/// Expected `path → major:minor` for a list of node paths.
fn expected_devs(roots: &nic::Roots, paths: &[String]) -> Result<BTreeMap<String, String>> {
    paths.iter().map(|p| Ok((p.clone(), host_rdev(roots, p)?))).collect()
}

struct Started {
    ids: Vec<String>,
    resp: Vec<u8>,
}

/// Starts `name` with one device of `pool`; its checkpointed allocation.
fn start_pool_pod(ctx: &Ctx, name: &str, pool: &str, annotations: &str) -> Result<Started> {
    ctx.delete("default", "pod", name)?;
    ctx.apply(&pool_pod(name, pool, annotations))?;
    let p = ctx.wait_running("default", name, Duration::from_secs(120))?;
    let uid = p["metadata"]["uid"].as_str().context("pod uid")?.to_string();
    let (ids, resp) = checkpointed(ctx, &uid, &res(pool))?;
    ensure!(ids.len() == 1, "{name} holds {ids:?} of {pool}, want one device");
    Ok(Started { ids, resp })
}

/// Runs `f` with pod `name` holding one device of `pool`, then deletes the pod whatever happened.
fn with_pod(ctx: &Ctx, name: &str, pool: &str, f: impl FnOnce(&Started) -> Result<()>) -> Result<()> {
    let r = start_pool_pod(ctx, name, pool, "").and_then(|s| f(&s));
    let d = ctx.delete("default", "pod", name);
    r.and(d)
}

/// What a container of the RDMA VF pool must have for VF `id`: its RDMA char
/// devices and rdma_cm, and exactly the variables of the README's table (plus
/// the CDI spec's, which only containerd's CDI injection puts there).
fn check_rdma_vf_container(ctx: &Ctx, pod: &str, id: &str) -> Result<()> {
    let (inv, roots) = inventory(ctx)?;
    let vf = find_vf(&inv, id)?;
    let r = vf.rdma.first().with_context(|| format!("VF {id} has no RDMA device on the node"))?;
    let mut paths: Vec<String> = char_devs(r).iter().map(|c| c.node_path.display().to_string()).collect();
    paths.push("/dev/infiniband/rdma_cm".into());
    let want = expected_devs(&roots, &paths)?;
    let got = container_devs(ctx, pod, "/dev/infiniband")?;
    ensure!(got == want, "/dev/infiniband in {pod}: {got:?}, want exactly {want:?}");
    ensure!(container_devs(ctx, pod, "/dev/vfio")?.is_empty(), "{pod} has /dev/vfio devices");

    let env = env_of(ctx, pod)?;
    let mut rdma_info = serde_json::Map::new();
    for c in char_devs(r) {
        let key = ["uverbs", "umad", "issm"].into_iter().find(|k| c.name.starts_with(k)).unwrap_or("");
        rdma_info.insert(key.into(), c.node_path.display().to_string().into());
    }
    rdma_info.insert("rdma_cm".into(), "/dev/infiniband/rdma_cm".into());
    rdma_info.insert("rdma_dev".into(), r.name.clone().into());
    let info = json!({ id: {"generic": {"deviceID": id}, "rdma": rdma_info} });
    let want: BTreeMap<String, String> = [
        ("PCIDEVICE_KUBERDMA_IO_RDMA_VFS".to_string(), id.to_string()),
        ("KUBERDMA_RDMA_VFS_RDMA_DEVICES".into(), r.name.clone()),
        ("KUBERDMA_RDMA_VFS_UCX_NET_DEVICES".into(), format!("{}:1", r.name)),
        ("NCCL_IB_ROCE_VERSION_NUM".into(), "2".into()),
        (format!("KUBERDMA_RDMA_DEVICE_{}", env_part(id)), r.name.clone()),
    ]
    .into_iter()
    .collect();
    let mut got = ours(&env);
    let got_info = got.remove("PCIDEVICE_KUBERDMA_IO_RDMA_VFS_INFO").context("no PCIDEVICE_..._INFO")?;
    ensure!(got == want, "our variables in {pod}: {got:?}, want exactly {want:?}");
    let got_info: Value =
        serde_json::from_str(&got_info).with_context(|| format!("_INFO is not JSON: {got_info}"))?;
    ensure!(got_info == info, "PCIDEVICE_KUBERDMA_IO_RDMA_VFS_INFO: {got_info}, want {info}");
    Ok(())
}

fn env_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// The pool's CDI spec on the node.
fn cdi_spec(ctx: &Ctx, pool: &str) -> Option<Value> {
    let f = ctx.layout.root("/run/cdi").join(format!("kuberdma.io-{pool}.json"));
    serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok()
}

fn cdi_spec_names(ctx: &Ctx, pool: &str, id: &str) -> bool {
    cdi_spec(ctx, pool)
        .is_some_and(|s| s["devices"].as_array().is_some_and(|d| d.iter().any(|d| d["name"] == id)))
}

fn rdma_vf_pod_gets_its_devices_env_and_cdi_device(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    with_pod(ctx, "dp-rdma", RDMA, |s| {
        let id = &s.ids[0];
        check_rdma_vf_container(ctx, "dp-rdma", id)?;
        let cdi = format!("{}={id}", res(RDMA));
        ensure!(contains(&s.resp, &cdi), "the checkpointed Allocate answer does not name CDI device {cdi}");
        ensure!(cdi_spec_names(ctx, RDMA, id), "the CDI spec of {RDMA} on the node does not define {id}");
        Ok(())
    })
}

fn netdevice_pod_gets_its_env_and_nothing_else(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    with_pod(ctx, "dp-netdev", NETDEV, |s| {
        let id = &s.ids[0];
        ensure!(
            container_devs(ctx, "dp-netdev", "/dev/infiniband")?.is_empty(),
            "/dev/infiniband devices in a netdevice pod"
        );
        ensure!(
            container_devs(ctx, "dp-netdev", "/dev/vfio")?.is_empty(),
            "/dev/vfio devices in a netdevice pod"
        );
        let mut got = ours(&env_of(ctx, "dp-netdev")?);
        let info = got.remove("PCIDEVICE_KUBERDMA_IO_E810_NETDEV_INFO").context("no _INFO")?;
        let want: BTreeMap<String, String> =
            [("PCIDEVICE_KUBERDMA_IO_E810_NETDEV".to_string(), id.clone())].into_iter().collect();
        ensure!(got == want, "our variables: {got:?}, want exactly {want:?}");
        let info: Value = serde_json::from_str(&info)?;
        ensure!(info == json!({ id: {"generic": {"deviceID": id}} }), "_INFO: {info}");
        // A device without container edits is no CDI device (the CDI library refuses the spec).
        ensure!(!contains(&s.resp, &format!("{}=", res(NETDEV))), "the Allocate answer names a CDI device");
        ensure!(
            cdi_spec(ctx, NETDEV).is_none(),
            "a CDI spec exists for {NETDEV}: {:?}",
            cdi_spec(ctx, NETDEV)
        );
        Ok(())
    })
}

fn vfio_pod_gets_its_group_and_container(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    with_pod(ctx, "dp-vfio", VFIO, |s| {
        let id = &s.ids[0];
        let (inv, roots) = inventory(ctx)?;
        let vf = find_vf(&inv, id)?;
        let group = vf.vfio.as_ref().with_context(|| format!("VF {id} has no VFIO group on the node"))?;
        let group_path = group.node_path.display().to_string();
        let want = expected_devs(&roots, &["/dev/vfio/vfio".to_string(), group_path.clone()])?;
        let got = container_devs(ctx, "dp-vfio", "/dev/vfio")?;
        ensure!(got == want, "/dev/vfio: {got:?}, want exactly {want:?}");
        ensure!(
            container_devs(ctx, "dp-vfio", "/dev/infiniband")?.is_empty(),
            "/dev/infiniband devices in a vfio pod"
        );
        let mut got = ours(&env_of(ctx, "dp-vfio")?);
        let info = got.remove("PCIDEVICE_KUBERDMA_IO_E810_VFIO_INFO").context("no _INFO")?;
        let want: BTreeMap<String, String> =
            [("PCIDEVICE_KUBERDMA_IO_E810_VFIO".to_string(), id.clone())].into_iter().collect();
        ensure!(got == want, "our variables: {got:?}, want exactly {want:?}");
        let info: Value = serde_json::from_str(&info)?;
        let want_info = json!({ id: {"generic": {"deviceID": id},
                                     "vfio": {"mount": "/dev/vfio/vfio", "dev-mount": group_path}} });
        ensure!(info == want_info, "_INFO: {info}, want {want_info}");
        let cdi = format!("{}={id}", res(VFIO));
        ensure!(contains(&s.resp, &cdi), "the Allocate answer does not name CDI device {cdi}");
        ensure!(cdi_spec_names(ctx, VFIO, id), "the CDI spec of {VFIO} does not define {id}");
        Ok(())
    })
}

/// `<sim>/sys/module/ib_core/parameters/netns_mode`, what the plugin reads.
fn netns_mode_file(ctx: &Ctx) -> std::path::PathBuf {
    ctx.layout.sim().join("sys/module/ib_core/parameters/netns_mode")
}

fn shared_pool_hands_out_the_pf_hca(ctx: &Ctx) -> Result<()> {
    // A shared pool is refused in exclusive mode (as k8s-rdma-shared-dev-plugin refuses to
    // start): the node flips to shared mode first, as booting with netns_mode=1 would.
    let mode = netns_mode_file(ctx);
    let before = std::fs::read_to_string(&mode).with_context(|| mode.display().to_string())?;
    std::fs::write(&mode, "Y\n")?;
    let r = shared_pool_body(ctx);
    let back = pools::ensure(ctx, false);
    std::fs::write(&mode, &before)?;
    r.and(back)
}

fn shared_pool_body(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, true)?;
    with_pod(ctx, "dp-shared", SHARED, |s| {
        let id = &s.ids[0];
        let (inv, roots) = inventory(ctx)?;
        let pf = inv
            .pfs
            .iter()
            .find(|p| p.netdevs.iter().any(|n| n.name == "ens1f0np0"))
            .context("no PF ens1f0np0")?;
        let r = pf.rdma.first().context("the PF has no RDMA device")?;
        let mut paths: Vec<String> = char_devs(r).iter().map(|c| c.node_path.display().to_string()).collect();
        paths.push("/dev/infiniband/rdma_cm".into());
        let want = expected_devs(&roots, &paths)?;
        let got = container_devs(ctx, "dp-shared", "/dev/infiniband")?;
        ensure!(got == want, "/dev/infiniband: {got:?}, want exactly {want:?}");
        let got = ours(&env_of(ctx, "dp-shared")?);
        // No PCIDEVICE_* in shared mode (the README: VF pools).
        let want: BTreeMap<String, String> = [
            ("KUBERDMA_MLX5_SHARED_RDMA_DEVICES".to_string(), r.name.clone()),
            ("KUBERDMA_MLX5_SHARED_UCX_NET_DEVICES".into(), format!("{}:1", r.name)),
            ("NCCL_IB_ROCE_VERSION_NUM".into(), "2".into()),
            (format!("KUBERDMA_RDMA_DEVICE_{}", env_part(id)), r.name.clone()),
        ]
        .into_iter()
        .collect();
        ensure!(got == want, "our variables: {got:?}, want exactly {want:?}");
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// Restarts

/// The kubelet's log (appended across restarts).
pub fn kubelet_log(ctx: &Ctx) -> std::path::PathBuf {
    ctx.layout.logs().join("kubelet.log")
}

pub fn log_len(ctx: &Ctx) -> u64 {
    std::fs::metadata(kubelet_log(ctx)).map(|m| m.len()).unwrap_or(0)
}

/// The kubelet's log after byte `from`.
fn log_since(ctx: &Ctx, from: u64) -> Result<String> {
    let all = std::fs::read(kubelet_log(ctx))?;
    Ok(String::from_utf8_lossy(&all[(from as usize).min(all.len())..]).into_owned())
}

/// Lines of the kubelet's log after byte `from` containing every one of `words`.
fn logged(ctx: &Ctx, from: u64, words: &[&str]) -> Result<usize> {
    Ok(log_since(ctx, from)?.lines().filter(|l| words.iter().all(|w| l.contains(w))).count())
}

/// Whether the kubelet logged a line containing every one of `words` after byte `from` of its log.
pub fn kubelet_logged(ctx: &Ctx, from: u64, words: &[&str]) -> Result<bool> {
    Ok(logged(ctx, from, words)? > 0)
}

/// Registrations of `resource` the kubelet logged after byte `from` of its log
/// (`server.go` `Register`: "Got registration request from device plugin with resource").
pub fn registrations(ctx: &Ctx, from: u64, resource: &str) -> Result<usize> {
    let key = format!("resourceName=\"{resource}\"");
    logged(ctx, from, &["Got registration request from device plugin with resource", &key])
}

/// Waits until every base pool registered once after `from`, then a little
/// longer, and checks none registered twice.
fn registered_once_since(ctx: &Ctx, from: u64) -> Result<()> {
    for r in pools::base_counts().keys() {
        eventually(&format!("{r} registered with the kubelet"), Duration::from_secs(60), || {
            Ok((registrations(ctx, from, r)? >= 1).then_some(()))
        })?;
    }
    // The plugin re-registers a pool whose ListAndWatch the kubelet did not open within a few
    // seconds: a double registration would show by then.
    std::thread::sleep(Duration::from_secs(8));
    for r in pools::base_counts().keys() {
        let n = registrations(ctx, from, r)?;
        ensure!(n == 1, "{r} registered {n} times with the kubelet (want once); {}", why_registered(ctx, r));
    }
    Ok(())
}

/// What the device plugin and the kubelet logged about `resource`'s registrations, for a
/// failure message (the logs are gone once the cluster is down).
fn why_registered(ctx: &Ctx, resource: &str) -> String {
    let plugin = plugin_pod(ctx)
        .and_then(|p| ctx.kubectl(&["-n", NAMESPACE, "logs", &p, "-c", "device-plugin"]))
        .map(|l| {
            let lines: Vec<&str> =
                l.lines().filter(|l| l.contains(resource) && l.contains("regist")).collect();
            lines[lines.len().saturating_sub(12)..].join("\n  ")
        })
        .unwrap_or_else(|e| format!("(no plugin log: {e:#})"));
    let kubelet = log_since(ctx, 0)
        .map(|l| {
            let lines: Vec<&str> = l
                .lines()
                .filter(|l| l.contains(resource) && (l.contains("egist") || l.contains("ListAndWatch")))
                .collect();
            lines[lines.len().saturating_sub(12)..].join("\n  ")
        })
        .unwrap_or_else(|e| format!("(no kubelet log: {e:#})"));
    format!("the plugin logged:\n  {plugin}\nthe kubelet logged:\n  {kubelet}")
}

/// containerd's task pid of the pod's first container.
fn container_pid(ctx: &Ctx, ns: &str, pod: &str) -> Result<i32> {
    let p = ctx.json(&["-n", ns, "get", "pod", pod])?;
    let cid = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .with_context(|| format!("{ns}/{pod} has no containerd container"))?
        .to_string();
    let out = kube_rdma_e2e::daemon::run(
        std::process::Command::new(kube_rdma_e2e::peers::bin("ctr"))
            .arg(format!("--address={}", ctx.layout.containerd_sock().display()))
            .args(["-n", "k8s.io", "task", "ls"]),
    )?;
    out.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 2 && f[0] == cid).then(|| f[1].parse().ok()).flatten()
        })
        .with_context(|| format!("no task {cid} in ctr task ls:\n{out}"))
}

fn restart_count(ctx: &Ctx, ns: &str, pod: &str) -> Result<i64> {
    let p = ctx.json(&["-n", ns, "get", "pod", pod])?;
    Ok(p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0))
}

/// SIGKILLs the pod's container from the host (PID 1 of its namespace ignores it from inside).
fn crash_container(ctx: &Ctx, ns: &str, pod: &str) -> Result<()> {
    let pid = container_pid(ctx, ns, pod)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .with_context(|| format!("killing {pid} of {ns}/{pod}"))?;
    Ok(())
}

fn wait_restarted(ctx: &Ctx, ns: &str, pod: &str, more_than: i64) -> Result<()> {
    eventually(&format!("{ns}/{pod} restarted and ready"), Duration::from_secs(90), || {
        let p = ctx.json(&["-n", ns, "get", "pod", pod])?;
        let c = &p["status"]["containerStatuses"][0];
        Ok((c["restartCount"].as_i64().unwrap_or(0) > more_than && c["ready"] == true).then_some(()))
    })
}

/// The running pod of the device plugin DaemonSet (in DRA mode, the driver's).
pub fn plugin_pod(ctx: &Ctx) -> Result<String> {
    let pods =
        ctx.json(&["-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=device-plugin"])?;
    pods["items"]
        .as_array()
        .and_then(|i| {
            i.iter()
                .find(|p| p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running")
        })
        .and_then(|p| p["metadata"]["name"].as_str().map(String::from))
        .context("no running device plugin pod")
}

fn deleted_or_crashed_plugin_reregisters(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    with_pod(ctx, "dp-crash", RDMA, |s| {
        let id = s.ids[0].clone();

        // 1. The DaemonSet's pod deleted; while it is gone, the workload's container crashes:
        // the kubelet restarts it from its checkpointed Allocate answer, CDI names included.
        let from = log_len(ctx);
        let old = plugin_pod(ctx)?;
        ctx.delete(NAMESPACE, "pod", &old)?;
        ensure!(cdi_spec_names(ctx, RDMA, &id), "the CDI spec of {id} went with the plugin pod");
        crash_container(ctx, "default", "dp-crash")?;
        wait_restarted(ctx, "default", "dp-crash", 0)?;
        check_rdma_vf_container(ctx, "dp-crash", &id)?;
        eventually("a new device plugin pod", Duration::from_secs(90), || {
            Ok(plugin_pod(ctx).ok().filter(|p| *p != old))
        })?;
        registered_once_since(ctx, from)?;
        pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(30))?;

        // 2. The plugin's own container crashes (no cleanup of its sockets): the kubelet restarts
        // it and it registers again; the workload keeps its devices and does not restart.
        let from = log_len(ctx);
        let plugin = plugin_pod(ctx)?;
        let before = restart_count(ctx, NAMESPACE, &plugin)?;
        let workload_restarts = restart_count(ctx, "default", "dp-crash")?;
        crash_container(ctx, NAMESPACE, &plugin)?;
        wait_restarted(ctx, NAMESPACE, &plugin, before)?;
        registered_once_since(ctx, from)?;
        pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(30))?;
        ensure!(restart_count(ctx, "default", "dp-crash")? == workload_restarts, "the workload restarted");
        check_rdma_vf_container(ctx, "dp-crash", &id)?;
        Ok(())
    })
}

/// The watcher the kubelet restart case leaves running: the node's resources
/// every few seconds until 6 minutes after the restart.
struct Watch {
    restarted: Instant,
    log_from: u64,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<String>>,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// How long capacity and allocatable are watched after the kubelet restart:
/// past the kubelet's 5-minute endpoint grace.
pub const WATCH_FOR: Duration = Duration::from_secs(6 * 60);

/// How long the end of the watch slept: the part of [`WATCH_FOR`] no quiet case
/// filled (`main.rs` prints it beside the suite's floor).
pub static WAITED: Mutex<Option<Duration>> = Mutex::new(None);

/// Each base pool's `status.capacity` and `status.allocatable` as the watcher
/// samples them, every 5 s from the restart's end (the node Ready, one
/// registration, the counts back, a new pod served) to [`WATCH_FOR`]: both
/// must stay at the pool's count. Allocatable is the one to watch: a plugin
/// registered twice per kubelet restart leaves the kubelet an old endpoint,
/// and when its grace ends the kubelet marks the pool's devices Unhealthy,
/// allocatable 0 under an unchanged capacity (kubernetes/kubernetes #121994,
/// #127803). A sample's allocatable of a pool is left out while a case makes
/// that pool's devices Unhealthy on purpose ([`excuse_allocatable`]).
#[derive(Default)]
struct Lows {
    samples: usize,
    /// (field, resource) → its samples below the count.
    low: BTreeMap<(&'static str, String), Low>,
}

/// The samples of one field of one pool below the pool's count.
struct Low {
    want: u32,
    /// Seconds after the restart, the value (None: the resource missing) and the other field's value.
    first: (f64, Option<u32>, Option<u32>),
    last: f64,
    lowest: Option<u32>,
    count: usize,
}

fn shown(n: Option<u32>) -> String {
    n.map_or_else(|| "missing".to_string(), |n| n.to_string())
}

impl Lows {
    /// One reading of the node, made between `before` and `after`.
    fn sample(
        &mut self,
        before: Instant,
        after: Instant,
        restarted: Instant,
        cap: &BTreeMap<String, u32>,
        alloc: &BTreeMap<String, u32>,
    ) {
        self.samples += 1;
        let at = before.duration_since(restarted).as_secs_f64();
        for (r, want) in pools::base_counts() {
            let (c, a) = (cap.get(&r).copied(), alloc.get(&r).copied());
            for (field, got, other) in [("capacity", c, a), ("allocatable", a, c)] {
                if got.is_some_and(|n| n >= want) || (field == "allocatable" && excused(&r, before, after)) {
                    continue;
                }
                let l = self.low.entry((field, r.clone())).or_insert(Low {
                    want,
                    first: (at, got, other),
                    last: at,
                    lowest: got,
                    count: 0,
                });
                l.count += 1;
                l.last = at;
                l.lowest = l.lowest.min(got);
            }
        }
    }

    /// One line per field and pool that dropped, naming the field.
    fn problems(&self) -> Vec<String> {
        self.low
            .iter()
            .map(|((field, r), l)| {
                let other = if *field == "capacity" { "allocatable" } else { "capacity" };
                let (at, got, beside) = l.first;
                format!(
                    "{field} of {r} dropped to {} (want {}) {at:.0} s after the kubelet restart ({other} then {}); \
                     below {} in {} of {} samples, the last {:.0} s after it, lowest {}",
                    shown(got),
                    l.want,
                    shown(beside),
                    l.want,
                    l.count,
                    self.samples,
                    l.last,
                    shown(l.lowest)
                )
            })
            .collect()
    }
}

/// A time a case made a pool's devices Unhealthy on purpose (the PF link down case).
struct Excuse {
    resource: String,
    from: Instant,
    to: Option<Instant>,
}

static EXCUSES: Mutex<Vec<Excuse>> = Mutex::new(Vec::new());

/// Held while a case makes a pool's devices Unhealthy on purpose ([`excuse_allocatable`]).
struct Excused(usize);

impl Drop for Excused {
    fn drop(&mut self) {
        if let Some(e) = EXCUSES.lock().expect("lock").get_mut(self.0) {
            e.to = Some(Instant::now());
        }
    }
}

/// While the returned guard lives, a drop of `resource`'s allocatable is the
/// case's own doing and the watcher leaves it out (its capacity is still
/// watched). Drop the guard only once allocatable is back.
fn excuse_allocatable(resource: String) -> Excused {
    let mut all = EXCUSES.lock().expect("lock");
    all.push(Excuse { resource, from: Instant::now(), to: None });
    Excused(all.len() - 1)
}

/// Whether a reading of the node between `before` and `after` may show
/// `resource`'s allocatable dropped by a case on purpose.
fn excused(resource: &str, before: Instant, after: Instant) -> bool {
    EXCUSES
        .lock()
        .expect("lock")
        .iter()
        .any(|e| e.resource == resource && e.from <= after && e.to.is_none_or(|t| t >= before))
}

/// Busy threads on every core until `stop` is set.
fn load(stop: Arc<AtomicBool>) -> Vec<JoinHandle<()>> {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x: u64 = 1;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..100_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                }
            })
        })
        .collect()
}

fn kubelet_restart_under_load_registers_once(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    if let Some(w) = WATCH.lock().expect("lock").take() {
        w.stop.store(true, Ordering::Relaxed);
        let _ = w.handle.join();
    }
    let s = start_pool_pod(ctx, "dp-keep", RDMA, "")?;
    let id = s.ids[0].clone();
    let from = log_len(ctx);
    let stop_load = Arc::new(AtomicBool::new(false));
    let loaders = load(stop_load.clone());
    let r = (|| {
        cluster::restart_daemon("kubelet", Duration::from_secs(10))?;
        let restarted = Instant::now();
        eventually("the node Ready after the kubelet restart", Duration::from_secs(90), || {
            let ready = ctx.node_ready()?;
            Ok(ready.then_some(()))
        })?;
        registered_once_since(ctx, from)?;
        pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(60))?;
        Ok::<Instant, anyhow::Error>(restarted)
    })();
    stop_load.store(true, Ordering::Relaxed);
    for l in loaders {
        let _ = l.join();
    }
    let restarted = r?;

    // The running pod kept its VF and devices; a new pod still gets one.
    ensure!(restart_count(ctx, "default", "dp-keep")? == 0, "dp-keep restarted with the kubelet");
    check_rdma_vf_container(ctx, "dp-keep", &id)?;
    let n = start_pool_pod(ctx, "dp-new", RDMA, "")?;
    ensure!(n.ids[0] != id, "dp-new got {id}, the VF dp-keep holds");
    check_rdma_vf_container(ctx, "dp-new", &n.ids[0])?;
    ctx.delete("default", "pod", "dp-new")?;

    let stop = Arc::new(AtomicBool::new(false));
    let watcher_ctx = Ctx { layout: ctx.layout.clone() };
    let stop_w = stop.clone();
    let handle = std::thread::spawn(move || {
        let mut low = Lows::default();
        let mut problems = vec![];
        while restarted.elapsed() < WATCH_FOR && !stop_w.load(Ordering::Relaxed) {
            let before = Instant::now();
            match pools::node_resources(&watcher_ctx) {
                Ok((cap, alloc)) => low.sample(before, Instant::now(), restarted, &cap, &alloc),
                Err(e) => problems.push(format!("reading the node: {e:#}")),
            }
            std::thread::sleep(Duration::from_secs(5));
        }
        problems.extend(low.problems());
        problems
    });
    *WATCH.lock().expect("lock") = Some(Watch { restarted, log_from: from, stop, handle });
    println!("     (watching the node's capacity and allocatable until 6 minutes after the kubelet restart)");
    Ok(())
}

fn kubelet_restart_allocatable_still_right_6_minutes_later(ctx: &Ctx) -> Result<()> {
    let Some(w) = WATCH.lock().expect("lock").take() else {
        bail!("no kubelet restart is being watched: run device_plugin_kubelet_restart_under_load_... first (the word `kubelet_restart` selects both)");
    };
    let left = WATCH_FOR.saturating_sub(w.restarted.elapsed());
    println!("     (waiting {:.0} s more)", left.as_secs_f64());
    std::thread::sleep(left);
    *WAITED.lock().expect("lock") = Some(left);
    // The watcher ends within one poll (5 s) of the 6 minutes.
    let problems = w.handle.join().map_err(|_| anyhow::anyhow!("the watcher panicked"))?;
    ensure!(problems.is_empty(), "while watching:\n{}", problems.join("\n"));
    let (cap, alloc) = pools::node_resources(ctx)?;
    for (r, n) in pools::base_counts() {
        ensure!(
            cap.get(&r) == Some(&n) && alloc.get(&r) == Some(&n),
            "{:.0} s after the kubelet restart {r}: capacity {:?}, allocatable {:?}, want {n}",
            w.restarted.elapsed().as_secs_f64(),
            cap.get(&r),
            alloc.get(&r)
        );
        let regs = registrations(ctx, w.log_from, &r)?;
        ensure!(
            regs == 1,
            "{r} registered {regs} times since the kubelet restart (want once); {}",
            why_registered(ctx, &r)
        );
    }
    let p = ctx.json(&["-n", "default", "get", "pod", "dp-keep"])?;
    ensure!(p["status"]["phase"] == "Running", "dp-keep: {}", p["status"]["phase"]);
    let s = start_pool_pod(ctx, "dp-late", RDMA, "")?;
    check_rdma_vf_container(ctx, "dp-late", &s.ids[0])?;
    ctx.delete("default", "pod", "dp-late")?;
    ctx.delete("default", "pod", "dp-keep")
}

// ---------------------------------------------------------------------------
// Multus

fn multus_net1_is_the_allocated_vf(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    // The VFs' netdevs as the node has them before the pod (name, MAC, MTU by PCI address).
    let (inv, _) = inventory(ctx)?;
    let netdevs: BTreeMap<String, Value> = inv
        .pfs
        .iter()
        .flat_map(|p| &p.vfs)
        .filter_map(|v| {
            let n = v.netdev.as_ref()?;
            Some((v.pci.to_string(), node_link(&n.name)?))
        })
        .collect();
    let s = start_pool_pod(ctx, "dp-net", RDMA, &format!("k8s.v1.cni.cncf.io/networks: {NET}"))?;
    let id = s.ids[0].clone();
    let r = (|| {
        let before = netdevs.get(&id).with_context(|| format!("VF {id} had no netdev on the node"))?;
        let vf_name = before["ifname"].as_str().context("ifname")?.to_string();
        // The VF's netdev left the node; the pod has it as net1 with the NAD's MTU and an address.
        ensure!(node_link(&vf_name).is_none(), "{vf_name} (the allocated VF) is still on the node");
        let out = ctx.exec(
            "default",
            "dp-net",
            &["sh", "-c", "cat /sys/class/net/net1/mtu /sys/class/net/net1/address; ip -4 -o addr show net1"],
        )?;
        let mut lines = out.lines();
        let mtu = lines.next().unwrap_or("").trim();
        ensure!(mtu == pools::NET_MTU.to_string(), "net1 MTU {mtu}, want {}", pools::NET_MTU);
        let mac = lines.next().unwrap_or("").trim();
        ensure!(Some(mac) == before["address"].as_str(), "net1 MAC {mac}, the VF's is {}", before["address"]);
        let addr = out
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .with_context(|| format!("net1 has no IPv4 address: {out}"))?
            .to_string();
        ensure!(addr.starts_with("192.168.213.") && addr.ends_with("/24"), "net1 has {addr}");
        let ip = addr.trim_end_matches("/24").to_string();
        let lease = ctx.layout.root("/var/lib/cni/networks").join(NET).join(&ip);
        ensure!(lease.exists(), "host-local has no lease {}", lease.display());
        // Multus names the device it attached: the one the kubelet allocated.
        let p = ctx.json(&["-n", "default", "get", "pod", "dp-net"])?;
        let status: Value = serde_json::from_str(
            p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str().unwrap_or("[]"),
        )?;
        let net1 = status
            .as_array()
            .and_then(|a| a.iter().find(|n| n["interface"] == "net1"))
            .with_context(|| format!("network-status has no net1: {status}"))?;
        ensure!(
            net1["device-info"]["pci"]["pci-address"] == id.as_str(),
            "network-status net1 device-info {} is not the allocated {id}",
            net1["device-info"]
        );
        ensure!(
            net1["ips"].as_array().is_some_and(|a| a.iter().any(|x| x == ip.as_str())),
            "network-status ips {}",
            net1["ips"]
        );
        Ok((vf_name, before.clone(), ip))
    })();
    ctx.delete("default", "pod", "dp-net")?;
    let (vf_name, before, ip) = r?;
    // Back under its name, with its MAC and MTU; the address freed.
    let link = eventually(&format!("{vf_name} back on the node"), Duration::from_secs(30), || {
        Ok(node_link(&vf_name))
    })?;
    ensure!(
        link["mtu"] == before["mtu"],
        "{vf_name} MTU {} after the pod, was {}",
        link["mtu"],
        before["mtu"]
    );
    ensure!(
        link["address"] == before["address"],
        "{vf_name} MAC {} after the pod, was {}",
        link["address"],
        before["address"]
    );
    let lease = ctx.layout.root("/var/lib/cni/networks").join(NET).join(&ip);
    ensure!(!lease.exists(), "the address {ip} is still leased after the pod");
    Ok(())
}

// ---------------------------------------------------------------------------
// Health

fn set_pf_link(ctx: &Ctx, pf: &str, up: bool) -> Result<()> {
    let mut sim =
        nic::sim::Sim::open(&ctx.layout.sim()).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    // sysfs first (what the plugin reads), then the link itself (its netlink event is what
    // makes the plugin read sysfs again at once).
    sim.set_operstate(pf, if up { "up" } else { "down" })
        .map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    node::ip_in(&node::netns(), &["link", "set", pf, if up { "up" } else { "down" }])?;
    Ok(())
}

/// Issue 20: a VF that disappears or a PF link down shows in allocatable within 5 s. The
/// kubelet has the plugin's update at once and puts it on the Node at its next status round:
/// every second in the e2e cluster (`nodeStatusUpdateFrequency`, e2e/src/cluster.rs).
const UNHEALTHY_WITHIN: Duration = Duration::from_secs(5);

/// "State pushed for device plugin" lines of `resource` after byte `from` (`client.go`: the
/// kubelet received a ListAndWatch update).
pub fn state_pushes(ctx: &Ctx, from: u64, resource: &str) -> Result<usize> {
    let key = format!("resource=\"{resource}\"");
    logged(ctx, from, &["State pushed for device plugin", &key])
}

/// Sets the PF link `up` or down; within 5 s of it the kubelet has the plugin's update
/// and allocatable shows it. Returns (seconds to the kubelet's update, seconds to allocatable).
fn link_change_reaches_the_node(ctx: &Ctx, up: bool, want_alloc: u32) -> Result<(f64, f64)> {
    change_reaches_the_node(ctx, want_alloc, || set_pf_link(ctx, "ens1f0np0", up))
}

/// Makes `change` to the node; within [`UNHEALTHY_WITHIN`] of it the kubelet has the
/// plugin's update of the RDMA pool and allocatable is `want_alloc` of 4.
/// Returns (seconds to the kubelet's update, seconds to allocatable).
fn change_reaches_the_node(
    ctx: &Ctx,
    want_alloc: u32,
    change: impl FnOnce() -> Result<()>,
) -> Result<(f64, f64)> {
    let rdma = res(RDMA);
    let from = log_len(ctx);
    change()?;
    let t0 = Instant::now();
    eventually("the kubelet receiving the plugin's update", UNHEALTHY_WITHIN, || {
        Ok((state_pushes(ctx, from, &rdma)? >= 1).then_some(()))
    })?;
    let pushed = t0.elapsed().as_secs_f64();
    eventually(
        &format!("allocatable {rdma} {want_alloc} (capacity 4) within {UNHEALTHY_WITHIN:?} of the change"),
        UNHEALTHY_WITHIN.saturating_sub(t0.elapsed()),
        || {
            let (cap, alloc) = pools::node_resources(ctx)?;
            Ok((cap.get(&rdma) == Some(&4) && alloc.get(&rdma) == Some(&want_alloc)).then_some(()))
        },
    )?;
    Ok((pushed, t0.elapsed().as_secs_f64()))
}

/// The health of `id` in the pod's `allocatedResourcesStatus` for `resource`
/// (kubelet `cm/devicemanager` under the ResourceHealthStatus gate,
/// [`kube_rdma_e2e::cluster::RESOURCE_HEALTH_GATE`]): resource ID = device ID.
fn pod_device_health(ctx: &Ctx, pod: &str, resource: &str, id: &str) -> Result<Option<String>> {
    let p = ctx.json(&["-n", "default", "get", "pod", pod])?;
    Ok(p["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["name"] == resource)
        .flat_map(|s| s["resources"].as_array().cloned().unwrap_or_default())
        .find(|r| r["resourceID"] == id)
        .and_then(|r| r["health"].as_str().map(str::to_string)))
}

fn pf_link_down_makes_its_vfs_unhealthy(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    // The RDMA pool's allocatable goes to 0 and back here on purpose; the
    // kubelet restart's watcher, if it runs, leaves that out (not its capacity).
    let _excused = excuse_allocatable(res(RDMA));
    // A pod holds one of the PF's VFs: the health reaches its status too.
    with_pod(ctx, "dp-health", RDMA, |s| {
        let rdma = res(RDMA);
        let id = s.ids[0].clone();
        let pod_says = |want: &'static str| {
            let (rdma, id) = (rdma.clone(), id.clone());
            move || -> Result<Option<()>> {
                Ok((pod_device_health(ctx, "dp-health", &rdma, &id)?.as_deref() == Some(want)).then_some(()))
            }
        };
        eventually("the pod's device reported Healthy", Duration::from_secs(30), pod_says("Healthy"))?;
        let r = (|| {
            let t0 = Instant::now();
            let (pushed, node) = link_change_reaches_the_node(ctx, false, 0)?;
            println!("     (PF down: the kubelet had the Unhealthy VFs after {pushed:.1} s, allocatable after {node:.1} s)");
            let (_, alloc) = pools::node_resources(ctx)?;
            ensure!(alloc.get(&res(NETDEV)) == Some(&2), "the E810's pool changed: {alloc:?}");
            // The kubelet resyncs the pod on the device manager's update at once (devicemanager
            // `m.update`, kubelet `syncLoopIteration`): the same 5 s.
            eventually(
                "the pod's device reported Unhealthy within 5 s of the link down",
                UNHEALTHY_WITHIN.saturating_sub(t0.elapsed()),
                pod_says("Unhealthy"),
            )?;
            println!(
                "     (PF down: the pod's status had it Unhealthy after {:.1} s)",
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        })();
        if r.is_err() {
            set_pf_link(ctx, "ens1f0np0", true)?;
            // Still excused while allocatable comes back: the watcher reports only what this case did not.
            let _ = pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(30));
            return r;
        }
        let t0 = Instant::now();
        let (pushed, node) =
            link_change_reaches_the_node(ctx, true, 4).context("Healthy again after link up")?;
        println!(
            "     (PF up: the kubelet had the Healthy VFs after {pushed:.1} s, allocatable after {node:.1} s)"
        );
        eventually(
            "the pod's device Healthy again within 5 s of the link up",
            UNHEALTHY_WITHIN.saturating_sub(t0.elapsed()),
            pod_says("Healthy"),
        )?;
        pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(5))
    })
}

/// `echo 1 > /sys/bus/pci/devices/<vf>/remove` on a VF of the RDMA pool: the device
/// goes from sysfs while its PF still counts it (`sriov_numvfs` 4), and the kernel
/// unregisters its netdev (the link event). The plugin must report it Unhealthy,
/// not drop it: allocatable 3 of capacity 4. `echo 4 > sriov_numvfs` brings it back.
fn a_removed_vf_is_unhealthy_at_the_kubelet(ctx: &Ctx) -> Result<()> {
    pools::ensure(ctx, false)?;
    let (inv, _) = inventory(ctx)?;
    let pf = inv.pfs.iter().find(|p| p.pci.to_string() == "0000:3d:00.0").context("no ConnectX PF")?;
    let vf = pf.vfs.last().context("the PF has no VF")?;
    let name = vf.netdev.as_ref().map(|n| n.name.clone()).context("the VF has no netdev")?;
    let link = node_link(&name).with_context(|| format!("{name} is not on the node"))?;
    let (peer, mac) = (peer_of(&link)?, link["address"].as_str().unwrap_or_default().to_string());
    let mtu = link["mtu"].as_u64().unwrap_or(1500);
    let (pf_pci, vf_pci) = (pf.pci, vf.pci);
    let sim_dir = ctx.layout.sim();
    let sim_err = |e: nic::sim::SimError| anyhow::anyhow!("{}", nic::error_chain(&e));

    let r = change_reaches_the_node(ctx, 3, || {
        let mut sim = nic::sim::Sim::open(&sim_dir).map_err(sim_err)?;
        sim.remove_vf(vf_pci).map_err(sim_err)?;
        node::ip_in(&node::netns(), &["link", "del", &name])?;
        Ok(())
    })
    .map(|(pushed, node)| {
        println!(
            "     (VF {vf_pci} removed: the kubelet had it Unhealthy after {pushed:.1} s, allocatable after {node:.1} s)"
        );
    });
    // Back: the PF's VFs made again, the removed one's netdev wired as before.
    let restored = (|| -> Result<()> {
        let mut sim = nic::sim::Sim::open(&sim_dir).map_err(sim_err)?;
        sim.set_num_vfs(pf_pci, 4).map_err(sim_err)?;
        if node_link(&name).is_none() {
            add_vf_link(&name, &peer, &mac, mtu)?;
        }
        pools::wait_allocatable(ctx, &pools::base_counts(), Duration::from_secs(30))
    })();
    match (r, restored) {
        (Err(e), _) => Err(e),
        (Ok(()), r) => r.context("bringing the VF back"),
    }
}

fn chart_back_on_its_default_pool(ctx: &Ctx) -> Result<()> {
    pools::restore_defaults(ctx)?;
    let want: BTreeMap<String, u32> = [(res(RDMA), 4)].into_iter().collect();
    pools::wait_allocatable(ctx, &want, Duration::from_secs(90))?;
    let nad = ctx.json(&["-n", "default", "get", "network-attachment-definitions", NET]);
    ensure!(nad.is_err(), "the chart left NetworkAttachmentDefinition {NET}");
    // Pods a failed case left behind (each case deletes its own when it passes).
    for p in ["dp-keep", "dp-new", "dp-late", "dp-net"] {
        ctx.delete("default", "pod", p)?;
    }
    Ok(())
}
