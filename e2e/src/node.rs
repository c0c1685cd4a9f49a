//! The machine side of the local node: everything `cluster up` changes on
//! the host, recorded in [`Created`] before it is made so `cluster down` (and
//! a failed `up`) undo exactly that.
//!
//! - **Network namespace** `kube-rdma-e2e`: the node's own network (its
//!   links, iptables rules, ports), joined to the host by a veth pair
//!   (`kre2e-host` 10.213.0.1/30 on the host, `kre2e-node` 10.213.0.2/30
//!   in the node) so `kubectl` on the host reaches the API server. The
//!   simulated VFs' netdevs are real veth links there; their peers ("the
//!   cable to the switch") sit in `kube-rdma-e2e-wire`.
//! - **Mount namespace**: a holder process (`ip netns exec kube-rdma-e2e
//!   sleep infinity`: slave mount propagation from the host, `/sys` showing
//!   the node's netns) that every daemon joins. Paths a real node has
//!   (`/var/lib/kubelet`, `/opt/cni/bin`, `/etc/cni/net.d`, `/var/run/cdi`,
//!   `/dev/infiniband`, ...) are bind mounts of directories under the base
//!   directory there, so the chart's default values work and the host's own
//!   paths are never written. Only an empty mount point is created on the
//!   host where a path does not exist.
//! - **cgroups** `kube-rdma-e2e` in every v1 hierarchy: the kubelet's
//!   `cgroupRoot` and the daemons' own; `down` kills every process in them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::daemon::{self, run};

/// The node's network namespace.
pub const NETNS: &str = "kube-rdma-e2e";
/// Where the simulated VFs' cables end.
pub const WIRE_NETNS: &str = "kube-rdma-e2e-wire";
/// Host end of the host-node veth.
pub const HOST_LINK: &str = "kre2e-host";
/// Node end of the host-node veth.
pub const NODE_LINK: &str = "kre2e-node";
/// Host address on the host-node link.
pub const HOST_IP: &str = "10.213.0.1";
/// The node's IP (InternalIP; the API server binds here).
pub const NODE_IP: &str = "10.213.0.2";
/// cgroup under every hierarchy.
pub const CGROUP: &str = "kube-rdma-e2e";
/// Paths of a real node that live under the base directory inside the node's mount namespace.
pub const SHADOWED: &[&str] = &[
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/etc/cni/net.d",
    "/opt/cni/bin",
    "/var/lib/cni",
    "/run/cdi",
    "/etc/cdi",
    "/run/k8s.cni.cncf.io",
];

/// What `up` created on the host, in creation order.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Created {
    /// Network namespaces (`ip netns add`).
    pub netns: Vec<String>,
    /// Host links.
    pub links: Vec<String>,
    /// Directories (mount points) made on the host, outermost first.
    pub dirs: Vec<PathBuf>,
    /// cgroup directories (each hierarchy's `kube-rdma-e2e`).
    pub cgroups: Vec<PathBuf>,
    /// The mount-namespace holder.
    pub holder: Option<i32>,
    /// Daemons: (name, pid).
    pub daemons: Vec<(String, i32)>,
}

/// `ip` in the host namespace.
pub fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}

/// `ip -n NS ...`.
pub fn ip_in(ns: &str, args: &[&str]) -> Result<String> {
    run(Command::new("ip").arg("-n").arg(ns).args(args))
}

/// Whether a network namespace named `ns` exists.
pub fn netns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

/// Creates a network namespace (recorded), with `lo` up.
pub fn add_netns(c: &mut Created, ns: &str) -> Result<()> {
    if netns_exists(ns) {
        bail!("network namespace {ns} already exists: a cluster is up or was not taken down (scripts/cluster down)");
    }
    ip(&["netns", "add", ns])?;
    c.netns.push(ns.into());
    ip_in(ns, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// The veth between the host and the node, addressed, with a default route in the node.
pub fn link_host_to_node(c: &mut Created) -> Result<()> {
    if Path::new("/sys/class/net").join(HOST_LINK).exists() {
        bail!("link {HOST_LINK} already exists on the host (scripts/cluster down removes it)");
    }
    ip(&["link", "add", HOST_LINK, "type", "veth", "peer", "name", NODE_LINK, "netns", NETNS])?;
    c.links.push(HOST_LINK.into());
    ip(&["addr", "add", &format!("{HOST_IP}/30"), "dev", HOST_LINK])?;
    ip(&["link", "set", HOST_LINK, "up"])?;
    ip_in(NETNS, &["addr", "add", &format!("{NODE_IP}/30"), "dev", NODE_LINK])?;
    ip_in(NETNS, &["link", "set", NODE_LINK, "up"])?;
    ip_in(NETNS, &["route", "add", "default", "via", HOST_IP])?;
    Ok(())
}

/// Starts the mount-namespace holder (recorded).
pub fn start_holder(c: &mut Created, log: &Path) -> Result<i32> {
    let spec = daemon::Spec::new("holder", "/usr/sbin/ip", log).args(["netns", "exec", NETNS, "sleep", "infinity"]);
    let spec = if Path::new("/usr/sbin/ip").exists() { spec } else { daemon::Spec { program: "/sbin/ip".into(), ..spec } };
    let d = daemon::spawn(&spec)?;
    let (_, pid) = d.detach();
    c.holder = Some(pid);
    // `ip netns exec` execs sleep once it has unshared the mount namespace and remounted /sys.
    daemon::wait_for("the mount-namespace holder", Duration::from_secs(10), || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "sleep").then_some(())
    })?;
    Ok(pid)
}

/// Runs a command inside the holder's network and mount namespaces.
pub fn in_node(holder: i32, prog: &str, args: &[&str]) -> Result<String> {
    run(Command::new("nsenter").arg(format!("--target={holder}")).args(["--net", "--mount", "--", prog]).args(args))
}

/// Makes `target` (a path of a real node) show `source` inside the node's mount
/// namespace; creates an empty mount point on the host if `target` is missing.
pub fn shadow(c: &mut Created, holder: i32, source: &Path, target: &Path) -> Result<()> {
    std::fs::create_dir_all(source).with_context(|| format!("creating {}", source.display()))?;
    if !target.exists() {
        // Record the outermost directory we create, so `down` removes exactly that.
        let mut first_missing = target.to_path_buf();
        while let Some(parent) = first_missing.parent() {
            if parent.exists() {
                break;
            }
            first_missing = parent.to_path_buf();
        }
        std::fs::create_dir_all(target).with_context(|| format!("creating mount point {}", target.display()))?;
        c.dirs.push(first_missing);
    }
    let (s, t) = (source.display().to_string(), target.display().to_string());
    in_node(holder, "mount", &["--bind", &s, &t])?;
    Ok(())
}

/// The v1 cgroup hierarchies mounted under /sys/fs/cgroup.
pub fn cgroup_hierarchies() -> Vec<PathBuf> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return vec![] };
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup").then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Creates `kube-rdma-e2e` in every hierarchy (cpuset initialised from its
/// parent, as cgroup v1 requires before a task can join) and moves this
/// process into `kube-rdma-e2e/daemons`, so every daemon it starts is there.
pub fn enter_cgroups(c: &mut Created) -> Result<()> {
    for h in cgroup_hierarchies() {
        let top = h.join(CGROUP);
        if !top.exists() {
            std::fs::create_dir(&top).with_context(|| format!("creating cgroup {}", top.display()))?;
            c.cgroups.push(top.clone());
        }
        let daemons = top.join("daemons");
        std::fs::create_dir_all(&daemons).with_context(|| format!("creating cgroup {}", daemons.display()))?;
        if h.join("cpuset.cpus").exists() {
            for d in [&top, &daemons] {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(h.join(f)).unwrap_or_default();
                    let _ = std::fs::write(d.join(f), v.trim());
                }
            }
        }
        std::fs::write(daemons.join("cgroup.procs"), std::process::id().to_string())
            .with_context(|| format!("joining cgroup {}", daemons.display()))?;
    }
    Ok(())
}

/// Every pid in `kube-rdma-e2e` of any hierarchy.
pub fn cgroup_pids() -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for h in cgroup_hierarchies() {
        walk_procs(&h.join(CGROUP), &mut out);
    }
    out
}

fn walk_procs(dir: &Path, out: &mut BTreeSet<i32>) {
    if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk_procs(&e.path(), out);
            }
        }
    }
}

/// Kills every process in our cgroups (frozen first, so none forks meanwhile)
/// and the recorded pids; waits until they are gone.
pub fn kill_all(c: &Created) {
    let freezer = cgroup_hierarchies().into_iter().find(|h| h.join("freezer.state").exists() || h.ends_with("freezer"));
    let me = std::process::id() as i32;
    for round in 0..50 {
        let mut pids = cgroup_pids();
        pids.extend(c.daemons.iter().map(|(_, p)| *p));
        pids.extend(c.holder);
        pids.retain(|p| *p != me && *p > 1 && daemon::alive(*p));
        if pids.is_empty() {
            return;
        }
        let top_freezer = freezer.as_ref().map(|h| h.join(CGROUP).join("freezer.state"));
        if let Some(f) = top_freezer.as_ref().filter(|f| f.exists()) {
            let _ = std::fs::write(f, "FROZEN");
        }
        for p in &pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL);
        }
        if let Some(f) = top_freezer.as_ref().filter(|f| f.exists()) {
            let _ = std::fs::write(f, "THAWED");
        }
        std::thread::sleep(Duration::from_millis(if round < 10 { 100 } else { 300 }));
    }
}

/// Removes a cgroup tree bottom-up (each must be empty of tasks).
pub fn remove_cgroup(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&e.path());
            }
        }
    }
    for _ in 0..20 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// What the host looks like, for "down leaves it as it was": links and
/// network namespaces, mounts of the host's mount namespace, device nodes
/// under /dev/infiniband and /dev/vfio, cgroups named ours, and processes
/// in them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    /// Host link names.
    pub links: BTreeSet<String>,
    /// `ip netns list`.
    pub netns: BTreeSet<String>,
    /// Mount points of this (the host's) mount namespace.
    pub mounts: BTreeSet<String>,
    /// Entries of /dev/infiniband and /dev/vfio (and whether those exist).
    pub devices: BTreeSet<String>,
    /// Our cgroup directories.
    pub cgroups: BTreeSet<String>,
    /// Processes in our cgroups or running our peers' binaries.
    pub processes: BTreeSet<String>,
    /// Host paths the node shadows (which exist).
    pub paths: BTreeSet<String>,
}

/// Reads a [`Snapshot`] of the host.
pub fn snapshot() -> Snapshot {
    let mut s = Snapshot::default();
    if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
        s.links = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    }
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        s.netns = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    }
    if let Ok(m) = std::fs::read_to_string("/proc/self/mountinfo") {
        s.mounts = m.lines().filter_map(|l| l.split_whitespace().nth(4)).map(String::from).collect();
    }
    for d in ["/dev/infiniband", "/dev/vfio"] {
        if let Ok(rd) = std::fs::read_dir(d) {
            s.devices.insert(d.to_string());
            s.devices.extend(rd.flatten().map(|e| format!("{d}/{}", e.file_name().to_string_lossy())));
        }
    }
    for h in cgroup_hierarchies() {
        let p = h.join(CGROUP);
        if p.exists() {
            s.cgroups.insert(p.display().to_string());
        }
    }
    let bin = crate::peers::cache_dir().join("bin");
    for pid in cgroup_pids() {
        s.processes.insert(format!("{pid} in cgroup {CGROUP}"));
    }
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                if exe.starts_with(&bin) {
                    s.processes.insert(format!("{pid} {}", exe.display()));
                }
            }
        }
    }
    for p in SHADOWED.iter().chain(["/dev/infiniband", "/dev/vfio"].iter()) {
        if Path::new(p).exists() {
            s.paths.insert(p.to_string());
        }
    }
    s
}

/// Lines saying how `after` differs from `before` (empty: the same).
pub fn diff(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out = vec![];
    let mut cmp = |what: &str, a: &BTreeSet<String>, b: &BTreeSet<String>| {
        for x in b.difference(a) {
            out.push(format!("{what} added: {x}"));
        }
        for x in a.difference(b) {
            out.push(format!("{what} removed: {x}"));
        }
    };
    cmp("link", &before.links, &after.links);
    cmp("netns", &before.netns, &after.netns);
    cmp("mount", &before.mounts, &after.mounts);
    cmp("device", &before.devices, &after.devices);
    cmp("cgroup", &before.cgroups, &after.cgroups);
    cmp("process", &before.processes, &after.processes);
    cmp("path", &before.paths, &after.paths);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_diff_names_what_was_added_and_removed() {
        let mut a = Snapshot::default();
        a.links.insert("eth0".into());
        let mut b = a.clone();
        b.links.insert(HOST_LINK.into());
        b.links.remove("eth0");
        assert_eq!(diff(&a, &b), vec![format!("link added: {HOST_LINK}"), "link removed: eth0".to_string()]);
        assert!(diff(&a, &a).is_empty());
    }
}
