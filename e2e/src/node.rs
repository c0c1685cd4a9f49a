//! The machine side of the local node: everything `cluster up` changes on
//! the host, recorded in [`Created`] before it is made so `cluster down` (and
//! a failed `up`) undo exactly that.
//!
//! - **Network namespace** `kube-rdma-e2e`: the node's own network (its
//!   links, iptables rules, ports), joined to the host by a veth pair
//!   (`kre2e-host` 10.213.0.1/30 on the host, `kre2e-node` 10.213.0.2/30
//!   in the node; other instances: [`instance`]) so `kubectl` on the host reaches the API server. The
//!   simulated VFs' netdevs are real veth links there; their peers ("the
//!   cable to the switch") sit in `kube-rdma-e2e-wire`.
//! - **Mount namespace**: a holder process (`unshare --mount
//!   --propagation=slave nsenter --net=… sleep infinity`) whose mount and
//!   network namespaces every daemon joins. Paths a real node has
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

/// Which local cluster this is (`KUBE_RDMA_E2E_INSTANCE`, 0-9, default 0).
/// Several run side by side: each has its own network and mount namespaces,
/// cgroup, base directory and host link, so only the host-side names below
/// and the host link's subnet (10.213.<instance>.0/30) differ.
pub fn instance() -> u8 {
    std::env::var("KUBE_RDMA_E2E_INSTANCE").ok().and_then(|v| v.parse().ok()).filter(|n| *n <= 9).unwrap_or(0)
}

fn suffixed(base: &str) -> String {
    suffixed_for(base, instance())
}

fn suffixed_for(base: &str, n: u8) -> String {
    match n {
        0 => base.to_string(),
        n => format!("{base}-{n}"),
    }
}

/// `kre2e<N>-<end>`: the host-node veth's ends (no number for instance 0).
fn link_for(end: &str, n: u8) -> String {
    format!("kre2e{}-{end}", if n == 0 { String::new() } else { n.to_string() })
}

/// The host-side names instance `n` makes: its two namespaces and its host link.
fn host_names(n: u8) -> [String; 3] {
    let ns = suffixed_for("kube-rdma-e2e", n);
    [format!("{ns}-wire"), ns, link_for("host", n)]
}

/// Whether `x` (a link, a netns, or its mount under /run/netns) is another
/// instance's: that instance's `down` answers for it, not this one's.
fn of_other_instance(x: &str) -> bool {
    let x = x.strip_prefix("/run/netns/").unwrap_or(x);
    (0..=9).filter(|n| *n != instance()).any(|n| host_names(n).iter().any(|name| name == x))
}

/// The node's network namespace.
pub fn netns() -> String {
    suffixed("kube-rdma-e2e")
}
/// Where the simulated VFs' cables end.
pub fn wire_netns() -> String {
    format!("{}-wire", netns())
}
/// Host end of the host-node veth.
pub fn host_link() -> String {
    link_for("host", instance())
}
/// Node end of the host-node veth.
pub fn node_link() -> String {
    link_for("node", instance())
}
/// Host address on the host-node link.
pub fn host_ip() -> String {
    format!("10.213.{}.1", instance())
}
/// The node's IP (InternalIP; the API server binds here).
pub fn node_ip() -> String {
    format!("10.213.{}.2", instance())
}
/// cgroup under every hierarchy.
pub fn cgroup() -> String {
    suffixed("kube-rdma-e2e")
}
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
    // containerd's shim sockets (/run/containerd/s) and ctr's FIFOs are fixed paths there.
    "/run/containerd",
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
    /// Inodes of the node's network and mount namespaces (the holder's).
    #[serde(default)]
    pub ns_inodes: Vec<u64>,
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
    let (host, node, ns) = (host_link(), node_link(), netns());
    if Path::new("/sys/class/net").join(&host).exists() {
        bail!("link {host} already exists on the host (scripts/cluster down removes it)");
    }
    ip(&["link", "add", &host, "type", "veth", "peer", "name", &node, "netns", &ns])?;
    c.links.push(host.clone());
    ip(&["addr", "add", &format!("{}/30", host_ip()), "dev", &host])?;
    ip(&["link", "set", &host, "up"])?;
    ip_in(&ns, &["addr", "add", &format!("{}/30", node_ip()), "dev", &node])?;
    ip_in(&ns, &["link", "set", &node, "up"])?;
    ip_in(&ns, &["route", "add", "default", "via", &host_ip()])?;
    Ok(())
}

/// Starts the mount-namespace holder (recorded): a new mount namespace with
/// slave propagation (host mounts show inside, ours never leak out) joined to
/// the node's network namespace. Not `ip netns exec`: it remounts /sys, which
/// detaches the cgroup hierarchies under /sys/fs/cgroup that the kubelet and
/// runc need. So /sys is the host's; what reads links uses netlink or
/// /proc/net (per network namespace) instead.
pub fn start_holder(c: &mut Created, log: &Path) -> Result<i32> {
    let spec = daemon::Spec::new("holder", "/usr/bin/unshare", log).args([
        "--mount".to_string(),
        "--propagation=slave".into(),
        "--".into(),
        "nsenter".into(),
        format!("--net=/run/netns/{}", netns()),
        "--".into(),
        "sleep".into(),
        "infinity".into(),
    ]);
    let d = daemon::spawn(&spec)?;
    let (_, pid) = d.detach();
    c.holder = Some(pid);
    // unshare and nsenter exec in turn; the holder is ready once sleep runs.
    daemon::wait_for("the mount-namespace holder", Duration::from_secs(10), || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "sleep").then_some(())
    })?;
    use std::os::unix::fs::MetadataExt;
    for ns in ["net", "mnt"] {
        c.ns_inodes.push(std::fs::metadata(format!("/proc/{pid}/ns/{ns}"))?.ino());
    }
    Ok(pid)
}

/// Runs a command inside the holder's network and mount namespaces.
pub fn in_node(holder: i32, prog: &str, args: &[&str]) -> Result<String> {
    run(Command::new("nsenter")
        .arg(format!("--target={holder}"))
        .args(["--net", "--mount", "--", prog])
        .args(args))
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
        std::fs::create_dir_all(target)
            .with_context(|| format!("creating mount point {}", target.display()))?;
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
        let top = h.join(cgroup());
        if !top.exists() {
            std::fs::create_dir(&top).with_context(|| format!("creating cgroup {}", top.display()))?;
            c.cgroups.push(top.clone());
        }
        let daemons = top.join("daemons");
        std::fs::create_dir_all(&daemons)
            .with_context(|| format!("creating cgroup {}", daemons.display()))?;
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

/// Moves `pid` into `<cgroup>/daemons` of every hierarchy (a daemon restarted
/// by a process that is not in them itself).
pub fn join_cgroups(pid: i32) {
    for h in cgroup_hierarchies() {
        let _ = std::fs::write(h.join(cgroup()).join("daemons/cgroup.procs"), pid.to_string());
    }
}

/// Every pid in `kube-rdma-e2e` of any hierarchy.
pub fn cgroup_pids() -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for h in cgroup_hierarchies() {
        walk_procs(&h.join(cgroup()), &mut out);
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

/// Processes in any of `ns_inodes` (namespaces identified by inode, as
/// recorded at `up`), with the kind of namespace (`net`, `mnt`) they share.
pub fn pids_in_namespaces(ns_inodes: &[u64]) -> Vec<(i32, &'static str)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = vec![];
    if ns_inodes.is_empty() {
        return out;
    }
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        for ns in ["net", "mnt"] {
            let ino = std::fs::metadata(format!("/proc/{pid}/ns/{ns}")).map(|m| m.ino()).unwrap_or(0);
            if ns_inodes.contains(&ino) {
                out.push((pid, ns));
            }
        }
    }
    out
}

/// Kills every process in our cgroups (frozen first, so none forks meanwhile),
/// the recorded pids and whatever else is in the node's namespaces; waits
/// until they are gone.
pub fn kill_all(c: &Created) {
    let freezer =
        cgroup_hierarchies().into_iter().find(|h| h.join("freezer.state").exists() || h.ends_with("freezer"));
    let me = std::process::id() as i32;
    let own = |ns: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/ns/{ns}")).map(|m| m.ino()).unwrap_or(0)
    };
    let node_only: Vec<u64> =
        c.ns_inodes.iter().copied().filter(|i| *i != own("net") && *i != own("mnt")).collect();
    for round in 0..50 {
        let mut pids = cgroup_pids();
        pids.extend(c.daemons.iter().map(|(_, p)| *p));
        pids.extend(c.holder);
        // Outside our cgroups yet in the node's namespaces: children of a daemon
        // killed above (simsync's `ip`), a test's `ip netns exec`. Never the
        // host's own namespaces, whatever a state file says.
        pids.extend(pids_in_namespaces(&node_only).into_iter().map(|(p, _)| p));
        pids.retain(|p| *p != me && *p > 1 && daemon::alive(*p));
        if pids.is_empty() {
            return;
        }
        let top_freezer = freezer.as_ref().map(|h| h.join(cgroup()).join("freezer.state"));
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
/// in them or in the node's namespaces.
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

/// Reads a [`Snapshot`] of the host; `ns_inodes` are the node's namespaces
/// (see [`Created::ns_inodes`]).
pub fn snapshot(ns_inodes: &[u64]) -> Snapshot {
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
        let p = h.join(cgroup());
        if p.exists() {
            s.cgroups.insert(p.display().to_string());
        }
    }
    for pid in cgroup_pids() {
        s.processes.insert(format!("{pid} in cgroup {}", cgroup()));
    }
    // Anything still in the node's network or mount namespace, wherever its cgroup.
    for (pid, ns) in pids_in_namespaces(ns_inodes) {
        // Named, so a leftover says what it is (it may be gone by the time one looks).
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: String = String::from_utf8_lossy(&args).replace('\0', " ").chars().take(160).collect();
        s.processes.insert(format!("{pid} ({}: {}) in the node's {ns} namespace", comm.trim(), args.trim()));
    }
    for p in SHADOWED.iter().chain(["/dev/infiniband", "/dev/vfio"].iter()) {
        if Path::new(p).exists() {
            s.paths.insert(p.to_string());
        }
    }
    s
}

/// Root podman's graph and run roots (containers-storage.conf defaults).
const PODMAN_STORAGE: &[&str] = &["/var/lib/containers/storage/", "/run/containers/storage/"];

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
    // The CNI and lab suites make namespaces named kr-* while they run, another instance
    // up beside this one (or gone since) has its own, and podman mounts each container's root
    // and /dev/shm under its storage while it runs (the delivery checks beside this tier, the
    // image build): they are not ours.
    let foreign = |x: &String| {
        x.starts_with("kr-")
            || x.starts_with("/run/netns/kr-")
            || PODMAN_STORAGE.iter().any(|d| x.starts_with(d))
            || of_other_instance(x)
    };
    let strip =
        |v: &BTreeSet<String>| v.iter().filter(|x| !foreign(x)).cloned().collect::<BTreeSet<String>>();
    cmp("link", &strip(&before.links), &strip(&after.links));
    cmp("netns", &strip(&before.netns), &strip(&after.netns));
    cmp("mount", &strip(&before.mounts), &strip(&after.mounts));
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
        b.links.insert(host_link());
        b.links.remove("eth0");
        assert_eq!(
            diff(&a, &b),
            vec![format!("link added: {}", host_link()), "link removed: eth0".to_string()]
        );
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn a_podman_container_running_beside_the_cluster_is_not_in_the_down_diff() {
        let a = Snapshot::default();
        let mut b = a.clone();
        b.mounts.insert("/var/lib/containers/storage/overlay/0123abcd/merged".into());
        b.mounts.insert("/var/lib/containers/storage/overlay-containers/0123abcd/userdata/shm".into());
        assert!(diff(&a, &b).is_empty());
        b.mounts.insert("/var/lib/kubelet".into());
        assert_eq!(diff(&a, &b), vec!["mount added: /var/lib/kubelet".to_string()]);
    }

    #[test]
    fn another_instances_namespaces_mounts_and_link_are_not_in_the_diff() {
        let other = if instance() == 0 { 1 } else { 0 };
        let (a, mut b) = (Snapshot::default(), Snapshot::default());
        for name in host_names(other) {
            b.mounts.insert(format!("/run/netns/{name}"));
            b.netns.insert(name.clone());
            b.links.insert(name);
        }
        assert!(diff(&a, &b).is_empty(), "{:?}", diff(&a, &b));
        assert!(diff(&b, &a).is_empty(), "an instance gone since `up`: {:?}", diff(&b, &a));
        b.netns.insert(netns());
        b.mounts.insert(format!("/run/netns/{}", wire_netns()));
        assert_eq!(
            diff(&a, &b),
            vec![format!("netns added: {}", netns()), format!("mount added: /run/netns/{}", wire_netns())]
        );
    }
}
