//! `discover`: what would be advertised and why, as an aligned table or JSON.

use std::fmt::Write as _;
use std::path::Path;

use nic::{Inventory, LinkLayer, Netdev, NetnsMode, Pf, RdmaDev, RdmaProtocol, Roots, Vf};
use serde_json::json;

use crate::config::{Config, Format, Mode, Policy};
use crate::names;
use crate::pools::{Decision, DecisionKind, Empty, Plan};

/// Renders rows under headers with columns padded to the widest cell; the
/// last column is not padded (it holds free text).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: Vec<&str>| {
        let n = cells.len();
        for (i, c) in cells.into_iter().enumerate() {
            if i + 1 == n {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<width$}  ", width = w[i]);
            }
        }
        s.push('\n');
    };
    line(&mut s, headers.to_vec());
    for r in rows {
        line(&mut s, r.iter().map(String::as_str).collect());
    }
    s
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn ids(v: Option<u16>, d: Option<u16>) -> String {
    format!(
        "{}:{}",
        v.map(|v| format!("{v:04x}")).unwrap_or("?".into()),
        d.map(|v| format!("{v:04x}")).unwrap_or("?".into())
    )
}

fn speed(n: Option<&Netdev>) -> String {
    match n.and_then(|n| n.speed_mbps) {
        Some(s) if s % 1000 == 0 => format!("{}G", s / 1000),
        Some(s) => format!("{s}M"),
        None => "-".into(),
    }
}

fn link(n: Option<&Netdev>) -> String {
    match n {
        None => "-".into(),
        Some(n) => {
            let ll = match n.link_layer {
                Some(LinkLayer::InfiniBand) => "/ib",
                _ => "",
            };
            format!("{}{ll}", n.operstate.as_deref().unwrap_or("?"))
        }
    }
}

/// Why an E810 (ice) VF has no RDMA device, or `None` when it has one or its
/// PF is not an E810. VF RDMA on E810 takes an `iavf.rdma.N` auxiliary device,
/// which only Intel's out-of-tree iavf creates (upstream iavf has no RDMA), on
/// a PF whose own RDMA function is on.
pub fn e810_vf_no_rdma_why(pf: &Pf, vf: &Vf) -> Option<String> {
    if !vf.rdma.is_empty() || pf.driver.as_deref() != Some("ice") {
        return None;
    }
    Some(match (vf.driver.as_deref(), pf.rdma_protocol) {
        (Some("vfio-pci"), _) => "bound to vfio-pci: the function belongs to userspace, no kernel RDMA device".into(),
        (None, _) => "no driver bound".into(),
        (_, Some(RdmaProtocol::None)) => format!(
            "PF {} has RDMA off (devlink enable_roce and enable_iwarp both false): its VFs cannot have RDMA either",
            pf.pci
        ),
        (Some("iavf"), p) => format!(
            "iavf created no iavf.rdma.N auxiliary device: upstream iavf has no VF RDMA, Intel's out-of-tree \
             ice/iavf/irdma drivers add it (the PF runs {})",
            p.map_or("an unknown protocol".to_string(), |p| p.to_string())
        ),
        (Some(d), _) => format!("driver {d} registered no RDMA device"),
    })
}

fn protocol(p: Option<RdmaProtocol>) -> String {
    p.map_or("?".into(), |p| p.to_string())
}

fn rdma_names(r: &[RdmaDev]) -> String {
    if r.is_empty() {
        "-".into()
    } else {
        r.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(",")
    }
}

fn char_names(r: &[RdmaDev]) -> String {
    let v: Vec<String> = r
        .iter()
        .filter_map(|r| r.uverbs.as_ref())
        .map(|c| if c.present { c.name.clone() } else { format!("{} (missing)", c.name) })
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

fn decision_text(d: Option<&Decision>) -> String {
    match d {
        None => "-".into(),
        Some(d) => {
            let mut parts = Vec::new();
            if let Some(p) = &d.pool {
                parts.push(format!("→ {p}"));
            } else {
                parts.push("not served".into());
            }
            parts.extend(d.notes.iter().cloned());
            parts.join("; ")
        }
    }
}

fn describe_config(cfg: &Config) -> String {
    let src = match (&cfg.source, cfg.format) {
        (_, Format::Default) => {
            "none: default pool kuberdma.io/rdma_vfs = every VF with an RDMA device (isRdma: true)"
                .to_string()
        }
        (Some(p), f) => format!(
            "{} ({})",
            p.display(),
            match f {
                Format::Native => "kube-rdma format",
                Format::Sndp => "sriov-network-device-plugin resourceList",
                Format::Rsdp => "k8s-rdma-shared-dev-plugin configList",
                Format::Default => "default",
            }
        ),
        (None, _) => "inline".into(),
    };
    format!("config: {src}")
}

/// The socket file a pool is served on in `kubelet_dir`.
fn socket(kubelet_dir: &Path, p: &crate::pools::Pool) -> String {
    names::socket_name(kubelet_dir, &p.config.prefix, &p.config.name)
        .unwrap_or_else(|| "(kubelet dir too long for a socket)".into())
}

fn mode(p: &crate::pools::Pool) -> String {
    match p.config.mode {
        Mode::Vf => "vf".into(),
        Mode::Shared => format!("shared x{} per HCA", p.config.rdma_hca_max),
        Mode::SharedResource => format!("shared x{} per resource", p.config.rdma_hca_max),
    }
}

/// A node-wide check of `discover` that fails: the node cannot serve what the
/// pools ask for, or there is nothing to serve. Any makes `discover` exit 1.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// Kebab-case name (`rdma-netns`, `no-devices`), as the operator names its checks.
    pub check: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do or look at, in order.
    pub fix: Vec<String>,
}

/// Every failing node check: the RDMA netns mode against the pools (shared pools
/// need shared mode; VFs with RDMA devices given to pods need exclusive mode, as
/// `kubectl rdma check` and the agent's `rdma-netns` check say, unless the config
/// also has shared pools: the agent does not see the config), a node with no
/// SR-IOV VF and no RDMA device at all, and each pool in `empty`
/// ([`crate::pools::empty_pools`]; `discover --allow-empty-pools` passes none) unless
/// the node has nothing at all, which the no-devices check already says.
pub fn node_checks(
    inv: &Inventory,
    cfg: &Config,
    plan: &Plan,
    netns: Option<NetnsMode>,
    roots: &Roots,
    empty: &[(String, Empty)],
) -> Vec<Failure> {
    let mut out = Vec::new();
    if let Err(e) = cfg.check_netns(netns) {
        out.push(Failure {
            check: "rdma-netns",
            message: e.to_string(),
            fix: rebooted("boot with ib_core netns_mode=1 (the kernel default): remove `options ib_core netns_mode=0` from /etc/modprobe.d"),
        });
    }
    // VF pools need exclusive mode unless the config also shares HCAs, which need
    // shared mode: then shared is the config's choice, and its VF pools work without
    // moving RDMA devices (each pod sees all of them).
    let shares = cfg.pools.iter().any(|p| p.is_shared());
    let rdma_vfs = plan
        .pools
        .iter()
        .filter(|p| p.config.mode == Mode::Vf && !shares)
        .flat_map(|p| &p.devices)
        .filter(|d| !d.rdma.is_empty())
        .count();
    if let Some(why) = nic::netns_mode_problem(netns, rdma_vfs) {
        out.push(Failure {
            check: "rdma-netns",
            message: why,
            fix: nic::NETNS_EXCLUSIVE_FIX
                .split(" && ")
                .map(String::from)
                .chain([format!("or, for the running kernel only and before any pod or other network namespace exists: {}", nic::NETNS_EXCLUSIVE_NOW)])
                .collect(),
        });
    }
    let vfs = inv.pfs.iter().map(|p| p.vfs.len()).sum::<usize>();
    if vfs == 0 && inv.hcas.is_empty() && plan.pools.iter().all(|p| p.devices.is_empty()) {
        let sys = roots.sysfs.display();
        let message = if inv.pfs.is_empty() {
            format!("no SR-IOV physical function and no RDMA device found: looked for PCI functions with sriov_totalvfs and for RDMA devices (infiniband/) under {sys}/bus/pci/devices")
        } else {
            format!("{} SR-IOV physical function(s) but no VF: sriov_numvfs is 0 on every one, and no RDMA device without SR-IOV", inv.pfs.len())
        };
        out.push(Failure {
            check: "no-devices",
            message,
            fix: vec![
                "the NIC is there and its driver bound: `lspci -nnk | grep -A3 -i -e mellanox -e E810` (mlx5_core, ice)".into(),
                "VFs are created: `cat /sys/class/net/<pf>/device/sriov_totalvfs`, then `echo N > /sys/class/net/<pf>/device/sriov_numvfs`".into(),
                "the RDMA modules are loaded: `lsmod | grep -e mlx5_ib -e irdma -e ib_uverbs`, and `rdma link` lists devices".into(),
                "in a container: /sys is the host's (or pass --sysfs-root)".into(),
            ],
        });
    } else {
        out.extend(empty.iter().map(|(resource, why)| empty_pool(resource, why)));
    }
    out
}

/// `change` as a fix that reboots the node, one step a line, in the order of
/// [`nic::NETNS_EXCLUSIVE_FIX`]: the change, the node drained, the reboot, the
/// node uncordoned once it is back (`NODE` is its name).
fn rebooted(change: &str) -> Vec<String> {
    vec![change.into(), nic::DRAIN.into(), "reboot".into(), nic::UNCORDON.into()]
}

/// The failing check of a configured pool that would serve no device here.
fn empty_pool(resource: &str, why: &Empty) -> Failure {
    let (message, mut fix) = match why {
        Empty::NoCandidate => (
            format!("pool {resource} serves no device: this node has no device of its mode to try its selectors on"),
            vec!["its mode: `vf` pools take VFs (sriov_numvfs), `shared` pools PFs or HCAs with an RDMA device".to_string()],
        ),
        Empty::TakenBy(by) => (
            format!(
                "pool {resource} serves no device: every device it selects is taken by an earlier pool ({}; the first pool in the config that selects a device wins)",
                by.join(", ")
            ),
            vec!["narrow the earlier pool's selectors, or move this pool above it".to_string()],
        ),
        Empty::Rejected(misses) => {
            let nearest: Vec<String> =
                misses.iter().map(|m| format!("{} rejected {} by {}", m.selector, m.device, m.why)).collect();
            (
                format!(
                    "pool {resource} serves no device: its selectors reject every device; nearest miss: {}",
                    nearest.join("; ")
                ),
                vec!["compare its selectors with the devices above (POOL / WHY NOT names the field that rejected each one)".to_string()],
            )
        }
    };
    fix.push(
        "a config meant for other kinds of nodes too (one config for a fleet): discover --allow-empty-pools"
            .into(),
    );
    Failure { check: "empty-pool", message, fix }
}

fn netns_text(m: Option<NetnsMode>) -> &'static str {
    match m {
        Some(NetnsMode::Exclusive) => {
            "exclusive (ib_core netns_mode=0: each RDMA device in one network namespace)"
        }
        Some(NetnsMode::Shared) => {
            "shared (ib_core netns_mode=1, the kernel default: every RDMA device in every network namespace)"
        }
        None => "unknown (ib_core not loaded: no module/ib_core/parameters/netns_mode)",
    }
}

/// What the table's columns mean, printed under it.
pub const LEGEND: &str = "\
Columns:
  VFS            VFs created / possible (sriov_numvfs / sriov_totalvfs)
  UPSTREAM       the PCIe bridges above the PF, nearest first, root port last (a GPU behind the same switch is a GPUDirect RDMA peer)
  RDMA           the function's RDMA device (rdma link, ibv_devices)
  UVERBS         its /dev/infiniband char device, which a pod is given
  GID            the RoCE v2 GID index of the VF's netdev (IPv4 first): NCCL_IB_GID_INDEX, ib_write_bw -x
  POOL / WHY NOT → the pool that serves the device, or \"not served\" and the selector or rule that rejected it
  SOCKET         the pool's gRPC socket in the kubelet's device plugin directory (--kubelet-dir), where the kubelet connects
";

/// The human-readable report; sockets are named as in `kubelet_dir`.
pub fn render_table(
    inv: &Inventory,
    cfg: &Config,
    plan: &Plan,
    origin: &str,
    kubelet_dir: &Path,
    netns: Option<NetnsMode>,
    failures: &[Failure],
) -> String {
    let mut s = node_header(inv, cfg, origin, netns);
    s.push_str(&pf_table(inv, plan));
    s.push_str(&vf_table(inv, plan));
    s.push_str(&e810_no_rdma_table(inv));
    s.push_str(&hca_table(inv, plan));
    s.push_str(&shared_pf_table(plan));
    s.push_str(&gpu_table(inv));
    s.push_str(&pool_table(plan, kubelet_dir));
    s.push_str(&problem_table(inv));
    s.push('\n');
    s.push_str(LEGEND);
    s.push_str(&node_checks_text(failures));
    s
}

fn node_header(inv: &Inventory, cfg: &Config, origin: &str, netns: Option<NetnsMode>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "node: {origin}");
    let _ = writeln!(s, "{}", describe_config(cfg));
    let _ =
        writeln!(s, "rdma_cm: {}", if inv.rdma_cm { "/dev/infiniband/rdma_cm present" } else { "absent" });
    let _ = writeln!(s, "rdma netns: {}", netns_text(netns));
    s
}

/// A titled table: a blank line, its title, its rows under their headers.
fn section(title: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    format!("\n{title}\n{}", table(headers, rows))
}

/// [`section`], or nothing when there are no rows.
fn section_if_any(title: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        String::new()
    } else {
        section(title, headers, rows)
    }
}

fn pf_table(inv: &Inventory, plan: &Plan) -> String {
    let rows: Vec<Vec<String>> = inv
        .pfs
        .iter()
        .map(|pf| {
            let n = pf.netdevs.first();
            vec![
                pf.pci.to_string(),
                ids(pf.vendor, pf.device),
                dash(pf.driver.clone()),
                n.map(|n| n.name.clone()).unwrap_or("-".into()),
                link(n),
                speed(n),
                dash(n.and_then(|n| n.mtu)),
                dash(pf.numa_node),
                rdma_names(&pf.rdma),
                protocol(pf.rdma_protocol),
                format!("{}/{}", dash(pf.num_vfs), dash(pf.total_vfs)),
                pf.upstream.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(" > "),
                pf_decision(pf, plan),
            ]
        })
        .collect();
    section(
        &format!("Physical functions ({})", inv.pfs.len()),
        &[
            "PCI",
            "VENDOR:DEV",
            "DRIVER",
            "NETDEV",
            "LINK",
            "SPEED",
            "MTU",
            "NUMA",
            "RDMA",
            "PROTOCOL",
            "VFS",
            "UPSTREAM",
            "POOL / WHY NOT",
        ],
        &rows,
    )
}

/// The decision on `dev`: a VF is its own candidate (`0000:3d:00.2`), or with its
/// RDMA device in the shared pools of k8s-rdma-shared-dev-plugin (`0000:3d:00.2 (mlx5_3)`).
fn decision_for<'a>(plan: &'a Plan, dev: &str) -> Option<&'a Decision> {
    let labelled = format!("{dev} (");
    plan.decisions.iter().find(|d| d.device == dev || d.device.starts_with(&labelled))
}

/// The health of pool device `id`, as the VF table shows it.
fn health_of(plan: &Plan, id: &str) -> Option<String> {
    plan.pools.iter().find_map(|p| p.device(id)).map(|d| match (&d.health, d.in_use) {
        (crate::health::Health::Healthy, false) => "Healthy".to_string(),
        (crate::health::Health::Healthy, true) => "Healthy, in use by a pod".to_string(),
        (crate::health::Health::Unhealthy(w), _) => format!("Unhealthy: {w}"),
    })
}

fn vf_table(inv: &Inventory, plan: &Plan) -> String {
    let mut rows = Vec::new();
    for pf in &inv.pfs {
        for vf in &pf.vfs {
            let gid =
                vf.netdev.as_ref().and_then(|n| vf.rdma.iter().find_map(|r| r.roce_v2_gid_index(&n.name)));
            let id = vf.pci.to_string();
            let mut why = decision_text(decision_for(plan, &id));
            if let Some(h) = health_of(plan, &id) {
                why = format!("{why} [{h}]");
            }
            rows.push(vec![
                id,
                pf.pci.to_string(),
                vf.index.to_string(),
                ids(vf.vendor, vf.device),
                dash(vf.driver.clone()),
                vf.netdev.as_ref().map(|n| n.name.clone()).unwrap_or("-".into()),
                rdma_names(&vf.rdma),
                char_names(&vf.rdma),
                dash(vf.numa_node.or(pf.numa_node)),
                speed(pf.netdevs.first()),
                dash(gid),
                why,
            ]);
        }
    }
    section(
        &format!("Virtual functions ({})", rows.len()),
        &[
            "PCI",
            "PF",
            "VF",
            "VENDOR:DEV",
            "DRIVER",
            "NETDEV",
            "RDMA",
            "UVERBS",
            "NUMA",
            "SPEED",
            "GID",
            "POOL / WHY NOT",
        ],
        &rows,
    )
}

fn e810_no_rdma_table(inv: &Inventory) -> String {
    let rows: Vec<Vec<String>> = inv
        .pfs
        .iter()
        .flat_map(|pf| {
            pf.vfs.iter().filter_map(move |vf| Some(vec![vf.pci.to_string(), e810_vf_no_rdma_why(pf, vf)?]))
        })
        .collect();
    section_if_any(&format!("E810 VFs without an RDMA device ({})", rows.len()), &["PCI", "WHY"], &rows)
}

fn hca_table(inv: &Inventory, plan: &Plan) -> String {
    let rows: Vec<Vec<String>> = inv
        .hcas
        .iter()
        .map(|h| {
            let n = h.netdevs.first();
            let label = match h.pci {
                Some(p) => format!("{p} ({})", h.rdma.name),
                None => h.rdma.name.clone(),
            };
            vec![
                dash(h.pci),
                ids(h.vendor, h.device),
                dash(h.driver.clone()),
                n.map(|n| n.name.clone()).unwrap_or("-".into()),
                link(n),
                speed(n),
                dash(h.numa_node),
                h.rdma.name.clone(),
                char_names(std::slice::from_ref(&h.rdma)),
                decision_text(decision_for(plan, &label)),
            ]
        })
        .collect();
    section_if_any(
        &format!("RDMA HCAs without SR-IOV ({})", rows.len()),
        &[
            "PCI",
            "VENDOR:DEV",
            "DRIVER",
            "NETDEV",
            "LINK",
            "SPEED",
            "NUMA",
            "RDMA",
            "UVERBS",
            "POOL / WHY NOT",
        ],
        &rows,
    )
}

fn shared_pf_table(plan: &Plan) -> String {
    let rows: Vec<Vec<String>> = plan
        .decisions
        .iter()
        .filter(|d| d.kind == DecisionKind::Pf)
        .map(|d| vec![d.device.clone(), decision_text(Some(d))])
        .collect();
    section_if_any("PFs as shared-mode candidates", &["PF (RDMA)", "POOL / WHY NOT"], &rows)
}

fn gpu_table(inv: &Inventory) -> String {
    let rows: Vec<Vec<String>> = inv
        .gpus
        .iter()
        .map(|g| {
            vec![
                g.pci.to_string(),
                ids(Some(g.vendor), g.device),
                dash(g.numa_node),
                g.upstream.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(" > "),
            ]
        })
        .collect();
    section_if_any(&format!("GPUs ({})", rows.len()), &["PCI", "VENDOR:DEV", "NUMA", "UPSTREAM"], &rows)
}

fn pool_table(plan: &Plan, kubelet_dir: &Path) -> String {
    let rows: Vec<Vec<String>> = plan
        .pools
        .iter()
        .map(|p| {
            let healthy = p.devices.iter().filter(|d| d.health.is_healthy()).count();
            let near = p.devices.iter().filter(|d| d.near_gpu).count();
            vec![
                p.resource_name(),
                mode(p),
                match p.config.policy {
                    Policy::Pack => "pack".into(),
                    Policy::Spread => "spread".into(),
                },
                if p.config.gpu_affinity { "yes".into() } else { "no".into() },
                p.devices.len().to_string(),
                healthy.to_string(),
                near.to_string(),
                socket(kubelet_dir, p),
            ]
        })
        .collect();
    section(
        &format!("Pools ({})", rows.len()),
        &["RESOURCE", "MODE", "POLICY", "GPU-AFFINITY", "DEVICES", "HEALTHY", "NEAR-GPU", "SOCKET"],
        &rows,
    )
}

fn problem_table(inv: &Inventory) -> String {
    let mut rows = Vec::new();
    for pf in &inv.pfs {
        for p in &pf.problems {
            rows.push(vec![pf.pci.to_string(), p.field.clone(), p.reason.clone()]);
        }
        for vf in &pf.vfs {
            for p in &vf.problems {
                rows.push(vec![vf.pci.to_string(), p.field.clone(), p.reason.clone()]);
            }
        }
    }
    for sk in &inv.skipped {
        rows.push(vec![sk.device.clone(), "skipped".into(), sk.reason.clone()]);
    }
    section_if_any(&format!("Problems ({})", rows.len()), &["DEVICE", "FIELD", "REASON"], &rows)
}

fn node_checks_text(failures: &[Failure]) -> String {
    let mut s = String::new();
    if failures.is_empty() {
        let _ = writeln!(s, "\nNode checks: all pass");
    } else {
        let _ = writeln!(s, "\nNode checks: {} failing", failures.len());
        for f in failures {
            let _ = writeln!(s, "  FAIL {}: {}", f.check, f.message);
            for fix in &f.fix {
                let _ = writeln!(s, "    fix: {fix}");
            }
        }
    }
    s
}

/// A PF's row: its shared-mode decision, else why VF pools do not serve it.
fn pf_decision(pf: &Pf, plan: &Plan) -> String {
    let bdf = pf.pci.to_string();
    let labelled = format!("{bdf} (");
    if let Some(d) = plan
        .decisions
        .iter()
        .find(|d| d.kind == DecisionKind::Pf && (d.device == bdf || d.device.starts_with(&labelled)))
    {
        return decision_text(Some(d));
    }
    let mut why = "not served: a PF stays with the host, VF pools serve its VFs (a PF's RDMA device is served only by a shared-mode pool)".to_string();
    if pf.vfs.is_empty() {
        why.push_str("; it has no VF (sriov_numvfs 0)");
    }
    why
}

/// The machine-readable report; sockets are named as in `kubelet_dir`.
pub fn render_json(
    inv: &Inventory,
    cfg: &Config,
    plan: &Plan,
    kubelet_dir: &Path,
    netns: Option<NetnsMode>,
    failures: &[Failure],
) -> serde_json::Value {
    let pools: Vec<serde_json::Value> = plan
        .pools
        .iter()
        .map(|p| {
            json!({
                "resource": p.resource_name(),
                "mode": match p.config.mode { Mode::Vf => "vf", Mode::Shared => "shared", Mode::SharedResource => "shared-resource" },
                "policy": match p.config.policy { Policy::Pack => "pack", Policy::Spread => "spread" },
                "gpuAffinity": p.config.gpu_affinity,
                "socket": socket(kubelet_dir, p),
                "devices": p.devices.iter().map(|d| json!({
                    "id": d.id,
                    "health": d.health.as_kubelet(),
                    "reason": match &d.health { crate::health::Health::Unhealthy(w) => Some(w.clone()), _ => None },
                    "numa": d.numa,
                    "pf": d.pf.map(|p| p.to_string()),
                    "rdma": d.rdma.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
                    "nearGpu": d.near_gpu,
                    "inUse": d.in_use,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let no_rdma: Vec<serde_json::Value> = inv
        .pfs
        .iter()
        .flat_map(|pf| {
            pf.vfs.iter().filter_map(move |vf| {
                Some(json!({"vf": vf.pci.to_string(), "why": e810_vf_no_rdma_why(pf, vf)?}))
            })
        })
        .collect();
    let mut v = json!({
        "config": describe_config(cfg),
        "inventory": inv,
        "rdmaNetnsMode": netns,
        "pools": pools,
        "decisions": plan.decisions,
        "failures": failures,
    });
    if !no_rdma.is_empty() {
        v["vfsWithoutRdma"] = serde_json::Value::Array(no_rdma);
    }
    v
}

#[cfg(test)]
mod tests {
    /// Issue 39, item 7: every printed fix that reboots a node drains it first and
    /// uncordons it after, the netns fix of `nic` (which the agent prints too) as
    /// the ones written here.
    #[test]
    fn every_reboot_fix_drains_the_node_first_and_uncordons_it_after() {
        let netns: Vec<&str> = nic::NETNS_EXCLUSIVE_FIX.split(" && ").collect();
        assert_eq!(netns[1..], [nic::DRAIN, "reboot", nic::UNCORDON]);
        assert_eq!(super::rebooted("change")[1..], [nic::DRAIN, "reboot", nic::UNCORDON]);
    }
}
