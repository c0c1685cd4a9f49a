//! kube-rdma-cni as the node runs it: the kubelet asks containerd for a
//! sandbox, containerd runs Multus (go-cni), Multus runs kube-rdma-cni (put
//! in /opt/cni/bin by the chart's init container) with the VF the kubelet
//! allocated from the device plugin's pool, and kube-rdma-cni runs Debian's
//! host-local for addresses. The VFs are the simulated node's (e2e/node.yaml):
//! real veth links in the node's netns, kept in step with the simulated sysfs
//! by simsync. The node's kernel has no RDMA subsystem, so the networks say
//! `rdma: disabled`, and its PFs are veths without a VF table, so PF-side
//! settings (mac, vlan, spoofchk) cannot be made here (cni/tests pin them).
//!
//! Every case checks what a deleted pod must leave: each VF netdev home in
//! the node's netns as it was (name, MAC, MTU, up), no journal or other
//! file in the CNI's state dir (`/var/lib/cni/kube-rdma/attachments`), no
//! host-local lease.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NODE_NAME};
use kube_rdma_e2e::{daemon, node, peers};
use serde_json::{json, Value};

use crate::ctx::{busybox_pod, eventually, Ctx};
use crate::device_plugin;
use crate::links::{add_vf_link, peer_of};
use crate::Case;

const NS: &str = "default";
/// The chart's default pool: the ConnectX-6 Dx VFs (4).
const POOL: &str = "kuberdma.io/rdma_vfs";
/// The pool's PF, the ConnectX-6 Dx port of e2e/node.yaml.
const POOL_PF: &str = "0000:3d:00.0";
/// The route every network's IPAM adds besides the default route.
const ROUTE: &str = "10.77.0.0/16";

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "cni_pods_with_2_and_4_vfs_of_one_network_run_and_give_everything_back",
            run: pods_with_2_and_4_vfs_of_one_network_run_and_give_everything_back,
        },
        Case {
            name: "cni_add_timeouts_forced_by_the_runtime_leave_nothing_behind",
            run: add_timeouts_forced_by_the_runtime_leave_nothing_behind,
        },
        Case {
            name: "cni_vfs_removed_while_a_pod_runs_let_it_terminate_and_leave_nothing",
            run: vfs_removed_while_a_pod_runs_let_it_terminate_and_leave_nothing,
        },
        Case {
            name: "cni_after_a_node_reboot_the_late_dels_leave_the_new_pods_vfs_alone",
            run: after_a_node_reboot_the_late_dels_leave_the_new_pods_vfs_alone,
        },
        Case {
            name: "cni_a_tenant_nad_cannot_touch_a_node_file_outside_the_cnis_directories",
            run: a_tenant_nad_cannot_touch_a_node_file_outside_the_cnis_directories,
        },
    ]
}

// ---------------------------------------------------------------- the node

/// A link of the node's netns as `ip -j link` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LinkState {
    mac: String,
    mtu: u64,
    up: bool,
}

fn node_links() -> Result<BTreeMap<String, (LinkState, Value)>> {
    let v: Value = serde_json::from_str(&node::ip_in(&node::netns(), &["-j", "link", "show"])?)?;
    let mut out = BTreeMap::new();
    for l in v.as_array().context("ip -j link")? {
        let flags = l["flags"].as_array().cloned().unwrap_or_default();
        let st = LinkState {
            mac: l["address"].as_str().unwrap_or("").to_string(),
            mtu: l["mtu"].as_u64().unwrap_or(0),
            up: flags.iter().any(|f| f == "UP"),
        };
        out.insert(l["ifname"].as_str().unwrap_or("").to_string(), (st, l.clone()));
    }
    Ok(out)
}

/// The simulated node's VF netdevs as its sysfs shows them now: name → (VF, PF).
fn sim_vf_netdevs(ctx: &Ctx) -> BTreeMap<String, (String, String)> {
    let sim = ctx.layout.sim();
    let roots = nic::Roots { sysfs: sim.join("sys"), dev: sim.join("dev") };
    let inv = nic::discover::discover(&roots);
    let mut out = BTreeMap::new();
    for pf in &inv.pfs {
        for vf in &pf.vfs {
            if let Some(nd) = &vf.netdev {
                out.insert(nd.name.clone(), (vf.pci.to_string(), pf.pci.to_string()));
            }
        }
    }
    out
}

/// The VF netdevs at home, as a case found them (every case starts with all
/// of them home and ends so).
struct Home {
    links: BTreeMap<String, LinkState>,
    /// The pool's VFs' PF (the ConnectX-6 Dx port).
    pool_pf: String,
}

impl Home {
    fn now(ctx: &Ctx) -> Result<Home> {
        let sim = sim_vf_netdevs(ctx);
        ensure!(sim.len() == 6, "expected the node's 6 VF netdevs home at the start, sysfs shows {sim:?}");
        let links = node_links()?;
        let mut home = BTreeMap::new();
        for name in sim.keys() {
            let (st, _) =
                links.get(name).with_context(|| format!("VF netdev {name} not in the node's netns"))?;
            home.insert(name.clone(), st.clone());
        }
        ensure!(sim.values().any(|(_, pf)| pf == POOL_PF), "no VF of the pool's PF {POOL_PF}: {sim:?}");
        Ok(Home { links: home, pool_pf: POOL_PF.to_string() })
    }

    /// Waits until every VF netdev is home as it was, and sysfs says so.
    fn wait_back(&self, ctx: &Ctx) -> Result<()> {
        eventually("every VF netdev home as it was", Duration::from_secs(60), || {
            let links = node_links()?;
            let mut wrong = vec![];
            for (name, want) in &self.links {
                match links.get(name) {
                    Some((have, _)) if have == want => {}
                    Some((have, _)) => wrong.push(format!("{name} is {have:?}, was {want:?}")),
                    None => wrong.push(format!("{name} not home")),
                }
            }
            let sim = sim_vf_netdevs(ctx);
            if let Some(n) = self.links.keys().find(|n| !sim.contains_key(*n)) {
                wrong.push(format!("sysfs does not show {n} home"));
            }
            if wrong.is_empty() {
                Ok(Some(()))
            } else {
                bail!("{}", wrong.join("; "))
            }
        })
    }
}

/// The CNI's attachments dir (the chart leaves `stateDir` at its default).
fn attachments(ctx: &Ctx) -> PathBuf {
    ctx.layout.root("/var/lib/cni/kube-rdma/attachments")
}

/// Every file of the attachments dir: journals, temp files, `.corrupt` copies.
fn state_files(ctx: &Ctx) -> Vec<String> {
    std::fs::read_dir(attachments(ctx))
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// The journals of the attachments dir, parsed.
fn journals(ctx: &Ctx) -> Result<Vec<Value>> {
    let mut out = vec![];
    for f in state_files(ctx).iter().filter(|f| f.ends_with(".json") && !f.starts_with('.')) {
        let p = attachments(ctx).join(f);
        out.push(serde_json::from_slice(&std::fs::read(&p)?).with_context(|| format!("{}", p.display()))?);
    }
    Ok(out)
}

/// host-local's leases of `network` (files named by the address).
fn leases(ctx: &Ctx, network: &str) -> Vec<String> {
    std::fs::read_dir(ctx.layout.root("/var/lib/cni/networks").join(network))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until no journal, temp or `.corrupt` file and no lease of `networks` is left.
fn wait_nothing_left(ctx: &Ctx, networks: &[&str]) -> Result<()> {
    eventually("no journal, state file or lease left", Duration::from_secs(90), || {
        let files = state_files(ctx);
        let leased: Vec<String> = networks.iter().flat_map(|n| leases(ctx, n)).collect();
        if files.is_empty() && leased.is_empty() {
            Ok(Some(()))
        } else {
            bail!("state files {files:?}, leases {leased:?}")
        }
    })
}

fn pool_allocatable(ctx: &Ctx, want: &str) -> Result<()> {
    eventually(&format!("{POOL} allocatable {want}"), Duration::from_secs(90), || {
        let n = ctx.json(&["get", "node", NODE_NAME])?;
        Ok((n["status"]["allocatable"][POOL] == want).then_some(()))
    })
}

// ------------------------------------------------------------ the objects

/// A NetworkAttachmentDefinition of the pool with host-local (through
/// `ipam_type`, a wrapper of it in some cases) giving a route and a default route.
fn nad(name: &str, subnet: &str, ipam_type: &str, extra: Value) -> String {
    let mut conf = json!({
        "cniVersion": "1.1.0",
        "name": name,
        "type": "kube-rdma-cni",
        "rdma": "disabled",
        "ipam": {
            "type": ipam_type,
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": ROUTE}, {"dst": "0.0.0.0/0"}]
        }
    });
    if let (Some(c), Some(e)) = (conf.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    format!(
        r#"apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: {name}
  namespace: {NS}
  annotations:
    k8s.v1.cni.cncf.io/resourceName: {POOL}
spec:
  config: '{conf}'
"#
    )
}

/// A busybox pod with `n` VFs of the pool, each attached by `network` (netN).
fn vf_pod(name: &str, network: &str, n: usize) -> String {
    let nets = vec![network; n].join(",");
    busybox_pod(
        NS,
        name,
        &format!("      resources:\n        limits:\n          {POOL}: \"{n}\"\n"),
        &format!("k8s.v1.cni.cncf.io/networks: \"{nets}\""),
    )
}

/// Runs `f`, then `cleanup` whatever `f` did; `f`'s error first.
fn with_cleanup(f: impl FnOnce() -> Result<()>, cleanup: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = f();
    let c = cleanup();
    match (r, c) {
        (Err(e), Err(c)) => Err(e.context(format!("(and cleaning up failed too: {c:#})"))),
        (Err(e), _) => Err(e),
        (Ok(()), c) => c.context("cleaning up"),
    }
}

/// The pod's IPv4 routes as `(dst, gateway, dev)`, a multipath route once
/// per nexthop: `ip -j route` in its netns, run from the node (busybox's
/// `ip` has no JSON).
fn pod_routes(ctx: &Ctx, pod: &str) -> Result<Vec<(String, String, String)>> {
    let text = ip_in_pid(container_pid(ctx, pod)?, &["-j", "route", "show"])?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("ip -j route: {text}"))?;
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = vec![];
    for r in v.as_array().context("ip -j route")? {
        match r["nexthops"].as_array() {
            Some(hops) => out.extend(hops.iter().map(|h| (s(&r["dst"]), s(&h["gateway"]), s(&h["dev"])))),
            None => out.push((s(&r["dst"]), s(&r["gateway"]), s(&r["dev"]))),
        }
    }
    Ok(out)
}

/// Checks from inside pod `pod` that `net1`..`netN` are up with the
/// addresses Multus reports for them (network-status), `mtu` if given, and
/// the IPAM's routes out of each: [`ROUTE`] and a default route through the
/// range's gateway (host-local's default, the first address of the /24
/// every case's range is), beside eth0's default route.
fn check_interfaces(ctx: &Ctx, pod: &str, n: usize, mtu: Option<u64>) -> Result<Vec<String>> {
    let p = ctx.json(&["-n", NS, "get", "pod", pod])?;
    let status = p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
        .as_str()
        .context("no network-status annotation (Multus writes it)")?;
    let status: Vec<Value> = serde_json::from_str(status)?;
    let addrs = ctx.exec(NS, pod, &["ip", "-o", "-4", "addr", "show"])?;
    let links = ctx.exec(NS, pod, &["ip", "-o", "link", "show"])?;
    let routes = pod_routes(ctx, pod)?;
    let has = |dst: &str, gw: &str, dev: &str| {
        routes.iter().any(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str()) == (dst, gw, dev))
    };
    ensure!(
        routes.iter().any(|r| r.0 == "default" && r.2 == "eth0" && !r.1.is_empty()),
        "eth0's default route is gone: {routes:?}"
    );
    let mut ips = vec![];
    for i in 1..=n {
        let ifn = format!("net{i}");
        let st = status
            .iter()
            .find(|s| s["interface"] == ifn.as_str())
            .with_context(|| format!("network-status has no {ifn}: {status:?}"))?;
        let ip = st["ips"][0].as_str().with_context(|| format!("{ifn} has no address: {st}"))?;
        ensure!(
            addrs.lines().any(|l| l.contains(&format!(" {ifn} ")) && l.contains(&format!("inet {ip}/"))),
            "{ifn} lacks {ip}:\n{addrs}"
        );
        let link = links
            .lines()
            .find(|l| l.contains(&format!(": {ifn}:")) || l.contains(&format!(": {ifn}@")))
            .with_context(|| format!("no link {ifn}:\n{links}"))?;
        ensure!(link.contains(",UP") || link.contains("<UP"), "{ifn} is not up: {link}");
        if let Some(m) = mtu {
            ensure!(link.contains(&format!("mtu {m} ")), "{ifn} has not MTU {m}: {link}");
        }
        let a: std::net::Ipv4Addr = ip.parse().with_context(|| format!("{ifn}'s address {ip}"))?;
        let gw = std::net::Ipv4Addr::from(u32::from(a) & 0xffff_ff00 | 1).to_string();
        for dst in [ROUTE, "default"] {
            ensure!(has(dst, &gw, &ifn), "no route {dst} via {gw} dev {ifn}: {routes:?}");
        }
        ips.push(ip.to_string());
    }
    Ok(ips)
}

/// `ctr` against the node's containerd (the kubelet's namespace).
fn ctr(ctx: &Ctx, args: &[&str]) -> Result<String> {
    daemon::run(
        Command::new(peers::bin("ctr"))
            .arg(format!("--address={}", ctx.layout.containerd_sock().display()))
            .args(["--namespace", "k8s.io"])
            .args(args),
    )
}

/// PIDs of the running tasks of containerd: container (or sandbox) ID → pid.
fn task_pids(ctx: &Ctx) -> Result<BTreeMap<String, i32>> {
    let out = ctr(ctx, &["task", "ls"])?;
    Ok(out
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[2] == "RUNNING")
                .then(|| Some((f[0].to_string(), f[1].parse().ok()?)))
                .flatten()
        })
        .collect())
}

/// The pid of the main container of `pod` (its netns is the pod's).
fn container_pid(ctx: &Ctx, pod: &str) -> Result<i32> {
    let p = ctx.json(&["-n", NS, "get", "pod", pod])?;
    let id = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|s| s.strip_prefix("containerd://"))
        .context("no containerd container ID")?
        .to_string();
    task_pids(ctx)?.get(&id).copied().with_context(|| format!("no running task {id}"))
}

/// `ip` in the netns of process `pid`.
fn ip_in_pid(pid: i32, args: &[&str]) -> Result<String> {
    daemon::run(Command::new("nsenter").arg(format!("--target={pid}")).args(["--net", "--", "ip"]).args(args))
}

fn holder() -> Result<i32> {
    cluster::state()?.created.holder.context("no mount-namespace holder")
}

// ------------------------------------------------------------------ cases

fn pods_with_2_and_4_vfs_of_one_network_run_and_give_everything_back(ctx: &Ctx) -> Result<()> {
    let home = Home::now(ctx)?;
    let net = "e2e-rail";
    ctx.apply(&nad(net, "10.56.0.0/24", "host-local", json!({"mtu": 1500})))?;
    with_cleanup(
        || {
            for (pod, n) in [("rail2", 2), ("rail4", 4)] {
                ctx.apply(&vf_pod(pod, net, n))?;
                ctx.wait_running(NS, pod, Duration::from_secs(120))?;
                let ips = check_interfaces(ctx, pod, n, Some(1500))?;
                ensure!(leases(ctx, net).len() == n, "{n} leases expected, {:?}", leases(ctx, net));
                let js = journals(ctx)?;
                ensure!(js.len() == n, "{n} journals expected, {js:?}");
                eventually("sysfs to show the pod's VFs gone from the host", Duration::from_secs(5), || {
                    Ok((sim_vf_netdevs(ctx).len() == 6 - n).then_some(()))
                })?;
                let distinct: std::collections::BTreeSet<String> =
                    js.iter().map(|j| j["pci"].to_string()).collect();
                ensure!(distinct.len() == n, "the pod's interfaces share VFs: {js:?}");
                eprintln!("     {pod}: {n} VFs, {ips:?}");
                ctx.delete(NS, "pod", pod)?;
                home.wait_back(ctx)?;
                wait_nothing_left(ctx, &[net])?;
            }
            Ok(())
        },
        || {
            ctx.delete(NS, "pod", "rail2")?;
            ctx.delete(NS, "pod", "rail4")?;
            ctx.delete(NS, "network-attachment-definitions.k8s.cni.cncf.io", net)
        },
    )
}

/// A host-local that takes 14 s to allocate: the kubelet's RunPodSandbox
/// deadline (2 × runtimeRequestTimeout, 10 s here) passes first, so
/// containerd's context ends, go-cni kills Multus, and containerd tears the
/// network down (DEL) while our ADD still runs.
const SLOW_IPAM: &str = r#"#!/bin/sh
# e2e: host-local, slow to allocate (the runtime's request deadline passes first).
if [ "$CNI_COMMAND" = ADD ]; then sleep 14; fi
exec /opt/cni/bin/host-local "$@"
"#;

fn add_timeouts_forced_by_the_runtime_leave_nothing_behind(ctx: &Ctx) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::now(ctx)?;
    let net = "e2e-slow";
    let wrapper = ctx.layout.root("/opt/cni/bin/e2e-slow-host-local");
    std::fs::write(&wrapper, SLOW_IPAM)?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    ctx.apply(&nad(net, "10.57.0.0/24", "e2e-slow-host-local", json!({})))?;
    let cfg = ctx.layout.base.join("kubelet.yaml");
    let orig = std::fs::read_to_string(&cfg)?;
    with_cleanup(
        || {
            std::fs::write(&cfg, format!("{orig}runtimeRequestTimeout: 5s\n"))?;
            restart_kubelet(ctx)?;
            ctx.apply(&vf_pod("slow", net, 2))?;
            eventually("a RunPodSandbox past its deadline", Duration::from_secs(120), || {
                let ev = ctx.kubectl(&[
                    "-n",
                    NS,
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=slow,reason=FailedCreatePodSandBox",
                    "-o",
                    "jsonpath={.items[*].message}",
                ])?;
                Ok(ev.contains("DeadlineExceeded").then_some(()))
            })
            .with_context(|| pod_story(ctx, "slow"))?;
            // Deleted while the kubelet's next attempt may be in flight.
            ctx.delete(NS, "pod", "slow")?;
            home.wait_back(ctx)?;
            wait_nothing_left(ctx, &[net])
        },
        || {
            ctx.delete(NS, "pod", "slow")?;
            std::fs::write(&cfg, &orig)?;
            restart_kubelet(ctx)?;
            ctx.delete(NS, "network-attachment-definitions.k8s.cni.cncf.io", net)?;
            // Only after every teardown that may still run it.
            home.wait_back(ctx)?;
            wait_nothing_left(ctx, &[net])?;
            std::fs::remove_file(&wrapper)?;
            Ok(())
        },
    )
}

/// What happened to `pod`, for a failure message: its phase and conditions, and its Events.
fn pod_story(ctx: &Ctx, pod: &str) -> String {
    let status = ctx
        .kubectl(&["-n", NS, "get", "pod", pod, "-o", "jsonpath={.status.phase} {.status.conditions}"])
        .unwrap_or_else(|e| format!("{e:#}"));
    let events = ctx
        .kubectl(&[
            "-n",
            NS,
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "custom-columns=REASON:.reason,COUNT:.count,MESSAGE:.message",
        ])
        .unwrap_or_else(|e| format!("{e:#}"));
    format!("pod {pod}: {status}\n{events}")
}

fn restart_kubelet(ctx: &Ctx) -> Result<()> {
    let from = device_plugin::log_len(ctx);
    cluster::restart_daemon("kubelet", Duration::from_secs(10))?;
    // The node's Ready and allocatable are what the old kubelet last posted: the new one is
    // up once it has its pods from the API server. A pod it finds in that first list is
    // admitted before it forgets the devices of pods deleted before the restart (its
    // checkpoint still holds them: "requested number of devices unavailable"), so a case's
    // pod must come after it.
    eventually("the new kubelet syncing its pods from the API server", Duration::from_secs(90), || {
        Ok(device_plugin::kubelet_logged(ctx, from, &["SyncLoop ADD", "source=\"api\""])?.then_some(()))
    })?;
    eventually("the node Ready after the kubelet restart", Duration::from_secs(90), || {
        let ready = ctx.node_ready()?;
        Ok(ready.then_some(()))
    })?;
    // The device plugin registers again with the new kubelet and sends it its devices. Until
    // then the kubelet admits no pod of the pool ("UnexpectedAdmissionError"), while the node's
    // allocatable may still show what the old kubelet posted.
    eventually(
        "the pool registered with the new kubelet and its devices sent",
        Duration::from_secs(60),
        || {
            Ok((device_plugin::registrations(ctx, from, POOL)? >= 1
                && device_plugin::state_pushes(ctx, from, POOL)? >= 1)
                .then_some(()))
        },
    )?;
    pool_allocatable(ctx, "4")
}

fn vfs_removed_while_a_pod_runs_let_it_terminate_and_leave_nothing(ctx: &Ctx) -> Result<()> {
    let home = Home::now(ctx)?;
    let net = "e2e-lowered";
    let sim_dir = ctx.layout.sim();
    let pf: nic::PciAddr = home.pool_pf.parse()?;
    let pool_vfs: Vec<String> =
        sim_vf_netdevs(ctx).into_iter().filter(|(_, (_, p))| *p == home.pool_pf).map(|(n, _)| n).collect();
    ensure!(pool_vfs.len() == 4, "the pool PF's VF netdevs: {pool_vfs:?}");
    let links = node_links()?;
    let mut peers = BTreeMap::new();
    for n in &pool_vfs {
        peers.insert(n.clone(), peer_of(&links[n].1)?);
    }
    ctx.apply(&nad(net, "10.58.0.0/24", "host-local", json!({})))?;
    let mut lowered = false;
    let r = with_cleanup(
        || {
            ctx.apply(&vf_pod("lowered", net, 2))?;
            ctx.wait_running(NS, "lowered", Duration::from_secs(120))?;
            check_interfaces(ctx, "lowered", 2, None)?;
            // `echo 0 > sriov_numvfs` while the pod runs: the driver
            // unregisters every VF netdev, those in the pod and those home.
            let pid = container_pid(ctx, "lowered")?;
            for i in 1..=2 {
                ip_in_pid(pid, &["link", "del", &format!("net{i}")])?;
            }
            let on_host: Vec<&String> =
                pool_vfs.iter().filter(|n| node_links().is_ok_and(|l| l.contains_key(*n))).collect();
            ensure!(on_host.len() == 2, "2 of the pool's VFs home while the pod runs, found {on_host:?}");
            for n in &on_host {
                node::ip_in(&node::netns(), &["link", "del", n])?;
            }
            lowered = true;
            eventually("simsync to see the VF netdevs go", Duration::from_secs(10), || {
                let sim = sim_vf_netdevs(ctx);
                Ok(pool_vfs.iter().all(|n| !sim.contains_key(n)).then_some(()))
            })?;
            let mut sim =
                nic::sim::Sim::open(&sim_dir).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
            sim.set_num_vfs(pf, 0).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
            pool_allocatable(ctx, "0")?;
            ctx.delete(NS, "pod", "lowered")?;
            wait_nothing_left(ctx, &[net])
        },
        || {
            ctx.delete(NS, "pod", "lowered")?;
            ctx.delete(NS, "network-attachment-definitions.k8s.cni.cncf.io", net)
        },
    );
    // Back to 4 VFs (`echo 4 > sriov_numvfs`), their netdevs wired as `up` did.
    let restored = (|| -> Result<()> {
        if !lowered {
            return Ok(());
        }
        let mut sim =
            nic::sim::Sim::open(&sim_dir).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
        sim.set_num_vfs(pf, 4).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
        let now = node_links()?;
        for n in &pool_vfs {
            if now.contains_key(n) {
                node::ip_in(&node::netns(), &["link", "del", n])?;
            }
            let st = &home.links[n];
            add_vf_link(n, &peers[n], &st.mac, st.mtu)?;
        }
        home.wait_back(ctx)?;
        pool_allocatable(ctx, "4")
    })();
    match (r, restored) {
        (Err(e), _) => Err(e),
        (Ok(()), r) => r.context("restoring the VFs"),
    }
}

/// kube-rdma-cni whose DELs wait (90 s at most) until a file says go: the
/// old sandbox's teardown after the reboot comes late. Left to itself the
/// kubelet stops the old sandbox (DEL) before the new pod's sandbox is made
/// (ADD), and no late DEL meets a VF given to another attachment.
fn late_del_plugin(go: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\n# e2e: kube-rdma-cni, its DELs held until {go} exists.\n\
         if [ \"$CNI_COMMAND\" = DEL ]; then\n  i=0\n  while [ ! -e {go} ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done\nfi\n\
         exec /opt/cni/bin/kube-rdma-cni \"$@\"\n",
        go = go.display()
    )
}

/// The node "reboots" under a pod with 2 VFs; a new pod gets all 4 VFs of the
/// pool before the old sandbox's DELs come (held until then by
/// [`late_del_plugin`], the network's `type`). Those must leave the new
/// pod's VFs alone, and say why in the CNI's log (`logFile` of the network,
/// on the node): each old attachment's DEL found its VF given to another
/// attachment since (journal ownership, cni/src/journal.rs `later_owner`).
/// Without that rule nothing else here would show it (the VFs are out of the
/// old DEL's sight in the new pod, and the node's PFs take no PF-side
/// settings), so the log is what can fail.
fn after_a_node_reboot_the_late_dels_leave_the_new_pods_vfs_alone(ctx: &Ctx) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::now(ctx)?;
    let net = "e2e-reboot";
    // logFile names a file in the CNI's log directory, the only place it may.
    let log = ctx.layout.root("/var/log/kube-rdma-cni/e2e-reboot.log");
    let _ = std::fs::remove_file(&log);
    let (plugin, go) = ("e2e-late-del-kube-rdma-cni", "/opt/cni/bin/.e2e-late-del-go");
    let wrapper = ctx.layout.root(&format!("/opt/cni/bin/{plugin}"));
    let go_here = ctx.layout.root(go);
    let _ = std::fs::remove_file(&go_here);
    std::fs::write(&wrapper, late_del_plugin(std::path::Path::new(go)))?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    let extra = json!({"type": plugin, "mtu": 1400, "logFile": "e2e-reboot.log"});
    ctx.apply(&nad(net, "10.59.0.0/24", "host-local", extra))?;
    let kubelet = cluster::state()?
        .created
        .daemons
        .iter()
        .find(|(n, _)| n == "kubelet")
        .map(|(_, p)| *p)
        .context("no kubelet")?;
    let cont = |pid: i32| {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT);
    };
    with_cleanup(
        || {
            ctx.apply(&vf_pod("before", net, 2))?;
            ctx.wait_running(NS, "before", Duration::from_secs(120))?;
            check_interfaces(ctx, "before", 2, Some(1400))?;
            let old = journals(ctx)?;
            ensure!(old.len() == 2, "2 journals expected: {old:?}");
            let old_cids: Vec<String> =
                old.iter().map(|j| j["containerId"].as_str().unwrap_or("").to_string()).collect();
            let old_leases = leases(ctx, net);

            // The reboot, with the kubelet held still meanwhile (SIGSTOP) so
            // that it sees the aftermath at once, as a kubelet starting after
            // a reboot does, without losing the device plugin's registration.
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(kubelet), nix::sys::signal::Signal::SIGSTOP)?;
            let rebooted = (|| -> Result<()> {
                let pids = task_pids(ctx)?;
                let main = container_pid(ctx, "before")?;
                let sandbox = pids.get(&old_cids[0]).copied().context("the sandbox's task")?;
                // The VFs come back recreated under their own names, fresh (the kernel
                // returns a physical netdev on netns exit; the PF's VFs are made anew on boot).
                for j in &old {
                    let mv = j["steps"]
                        .as_array()
                        .and_then(|s| s.iter().find_map(|s| s.get("moveNetdev")))
                        .context("journal without moveNetdev")?;
                    let (pod_name, host_name) =
                        (mv["podName"].as_str().unwrap_or(""), mv["hostName"].as_str().unwrap_or(""));
                    let st = home.links.get(host_name).with_context(|| format!("{host_name} is no VF"))?;
                    ip_in_pid(
                        sandbox,
                        &["link", "set", pod_name, "netns", &holder()?.to_string(), "name", host_name],
                    )?;
                    node::ip_in(
                        &node::netns(),
                        &["link", "set", host_name, "address", &st.mac, "mtu", &st.mtu.to_string(), "up"],
                    )?;
                }
                for pid in [main, sandbox] {
                    nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    )?;
                }
                let netns = old[0]["netns"].as_str().context("journal netns")?.to_string();
                daemon::wait_for("the pod's processes to die", Duration::from_secs(10), || {
                    (!daemon::alive(main) && !daemon::alive(sandbox)).then_some(())
                })?;
                node::in_node(holder()?, "umount", &[&netns])?;
                node::in_node(holder()?, "rm", &["-f", &netns])?;
                // While the node was down the pod was deleted and a new one came.
                ctx.kubectl(&[
                    "-n",
                    NS,
                    "delete",
                    "pod",
                    "before",
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ])?;
                ctx.apply(&vf_pod("after", net, 4))?;
                Ok(())
            })();
            cont(kubelet);
            rebooted?;
            ctx.wait_running(NS, "after", Duration::from_secs(180))?;
            let ips = check_interfaces(ctx, "after", 4, Some(1400))?;
            // The old sandbox's DELs (containerd sends them with an empty
            // CNI_NETNS now) go on, finish and take exactly its own with them.
            std::fs::write(&go_here, "")?;
            eventually("the old attachments' DELs", Duration::from_secs(90), || {
                let left: Vec<Value> = journals(ctx)?
                    .into_iter()
                    .filter(|j| old_cids.iter().any(|c| j["containerId"] == c.as_str()))
                    .collect();
                let stale: Vec<String> = leases(ctx, net).into_iter().filter(|l| !ips.contains(l)).collect();
                Ok((left.is_empty() && stale.is_empty()).then_some(()))
            })
            .with_context(|| format!("old leases were {old_leases:?}"))?;
            let text =
                std::fs::read_to_string(&log).with_context(|| format!("the CNI's log {}", log.display()))?;
            late_dels_found_their_vfs_given(&text, &old)?;
            ensure!(journals(ctx)?.len() == 4, "the new pod's 4 journals: {:?}", state_files(ctx));
            ensure!(state_files(ctx).len() == 4, "only the new pod's journals: {:?}", state_files(ctx));
            let again = check_interfaces(ctx, "after", 4, Some(1400))?;
            ensure!(again == ips, "the new pod's addresses changed: {ips:?} → {again:?}");
            ctx.delete(NS, "pod", "after")?;
            home.wait_back(ctx)?;
            wait_nothing_left(ctx, &[net])
        },
        || {
            cont(kubelet);
            std::fs::write(&go_here, "")?;
            ctx.delete(NS, "pod", "before")?;
            ctx.delete(NS, "pod", "after")?;
            ctx.delete(NS, "network-attachment-definitions.k8s.cni.cncf.io", net)?;
            // Only after every teardown that may still run it.
            home.wait_back(ctx)?;
            wait_nothing_left(ctx, &[net])?;
            std::fs::remove_file(&wrapper)?;
            std::fs::remove_file(&go_here)?;
            Ok(())
        },
    )
}

/// From the CNI's log of the reboot case: each old attachment (`old`, its
/// journals) was torn down by a DEL that ran after the new pod's ADD of its
/// VF (else the case did not set up what it tests), and that DEL found the
/// VF given to another attachment and left it (journal ownership).
fn late_dels_found_their_vfs_given(text: &str, old: &[Value]) -> Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    let olds: Vec<&str> = old.iter().filter_map(|j| j["containerId"].as_str()).collect();
    for j in old {
        let (cid, ifn, pci) = (
            j["containerId"].as_str().unwrap_or(""),
            j["ifname"].as_str().unwrap_or(""),
            j["pci"].as_str().unwrap_or(""),
        );
        let span = format!("command=\"DEL\" container={cid} ifname={ifn}}}");
        let mine: Vec<usize> = (0..lines.len()).filter(|i| lines[*i].contains(&span)).collect();
        let torn = mine
            .iter()
            .copied()
            .find(|i| lines[*i].contains("detached") && lines[*i].contains("journal=true"))
            .with_context(|| format!("no DEL of {cid}/{ifn} with its journal in the CNI's log"))?;
        let given = lines.iter().position(|l| {
            l.contains("command=\"ADD\"")
                && l.contains(&format!("pci={pci} "))
                && l.contains("attached")
                && !olds.iter().any(|c| l.contains(&format!("container={c} ")))
        });
        ensure!(
            given.is_some_and(|g| g < torn),
            "the DEL of {cid}/{ifn} tore it down before the new pod's ADD of VF {pci} (at line {given:?}): journal ownership was not exercised"
        );
        ensure!(
            mine.iter().any(|i| *i <= torn && lines[*i].contains("given to another attachment")),
            "the late DEL of {cid}/{ifn} did not find VF {pci} given to the new pod; its lines:\n{}",
            mine.iter().map(|i| lines[*i]).collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// Issue 36, D1: a tenant's NetworkAttachmentDefinition (no device plugin
/// resource: Multus then passes its own `runtimeConfig` through unchanged)
/// names a node file as `runtimeConfig.CNIDeviceInfoFile`, which ADD would
/// replace and DEL remove as root, and another node path as `logFile`,
/// where root would append lines. kube-rdma-cni refuses the ADD (code 7,
/// naming the key and Multus's directory) before touching anything; the
/// pod's DELs remove nothing; the file keeps its content and mtime, the log
/// path is never created, and every VF stays home.
fn a_tenant_nad_cannot_touch_a_node_file_outside_the_cnis_directories(ctx: &Ctx) -> Result<()> {
    let home = Home::now(ctx)?;
    let net = "e2e-tenant";
    let sentinel = ctx.layout.base.join("e2e-tenant-sentinel");
    let injected = ctx.layout.base.join("e2e-tenant-injected.log");
    let _ = std::fs::remove_file(&injected);
    std::fs::write(&sentinel, "root-owned, not the tenant's\n")?;
    let fingerprint = |p: &std::path::Path| -> Result<(Vec<u8>, std::time::SystemTime)> {
        Ok((std::fs::read(p)?, std::fs::metadata(p)?.modified()?))
    };
    let before = fingerprint(&sentinel)?;
    // A VF of the pool: were the file accepted, ADD would attach it and write there.
    let vf = sim_vf_netdevs(ctx)
        .into_values()
        .find(|(_, pf)| pf == POOL_PF)
        .map(|(vf, _)| vf)
        .context("no VF of the pool")?;
    let conf = json!({
        "cniVersion": "1.1.0", "name": net, "type": "kube-rdma-cni", "rdma": "disabled",
        "deviceID": vf,
        "runtimeConfig": {"CNIDeviceInfoFile": sentinel},
        "logFile": injected,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.61.0.0/24"}]]}
    });
    ctx.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: {net}\n  namespace: {NS}\nspec:\n  config: '{conf}'\n"
    ))?;
    with_cleanup(
        || {
            ctx.apply(&busybox_pod(NS, "tenant", "", &format!("k8s.v1.cni.cncf.io/networks: \"{net}\"")))?;
            eventually(
                "the tenant pod's ADD refused for its CNIDeviceInfoFile",
                Duration::from_secs(120),
                || {
                    let ev = ctx.kubectl(&[
                        "-n",
                        NS,
                        "get",
                        "events",
                        "--field-selector",
                        "involvedObject.name=tenant,reason=FailedCreatePodSandBox",
                        "-o",
                        "jsonpath={.items[*].message}",
                    ])?;
                    Ok((ev.contains("CNIDeviceInfoFile") && ev.contains(nic::devinfo::CNI_DIR)).then_some(()))
                },
            )
            .with_context(|| pod_story(ctx, "tenant"))?;
            ensure!(
                ctx.json(&["-n", NS, "get", "pod", "tenant"])?["status"]["phase"] == "Pending",
                "the tenant pod started: {}",
                pod_story(ctx, "tenant")
            );
            // Its sandboxes' DELs name the file too.
            ctx.delete(NS, "pod", "tenant")?;
            home.wait_back(ctx)?;
            wait_nothing_left(ctx, &[net])?;
            ensure!(fingerprint(&sentinel)? == before, "the node file named by the NAD changed or went");
            ensure!(!injected.exists(), "the NAD's logFile {} was created on the node", injected.display());
            Ok(())
        },
        || {
            ctx.delete(NS, "pod", "tenant")?;
            ctx.delete(NS, "network-attachment-definitions.k8s.cni.cncf.io", net)?;
            home.wait_back(ctx)?;
            let _ = std::fs::remove_file(&sentinel);
            let _ = std::fs::remove_file(&injected);
            Ok(())
        },
    )
}
