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

use std::collections::{BTreeMap, BTreeSet};
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

/// The instance whose prefix `name` (a link, a netns, or its mount under /run/netns)
/// carries: `kube-rdma-e2e[-N][-REST]` (network namespaces, cgroups) or `kre2e[N]-REST`
/// (host links), N a digit 1-9 and none for instance 0 ([`suffixed_for`], [`link_for`]).
/// Any REST counts (the wire, or one namespace per node and a switch once there are
/// several), so a namespace's REST must not start with a lone digit: `kube-rdma-e2e-1-wire`
/// is instance 1's wire, never instance 0's "1-wire". `None`: not a kube-rdma-e2e name.
pub fn instance_of(name: &str) -> Option<u8> {
    let name = name.strip_prefix("/run/netns/").unwrap_or(name);
    let digit = |s: &str| match s.as_bytes() {
        [d @ b'1'..=b'9'] => Some(d - b'0'),
        _ => None,
    };
    if let Some(rest) = name.strip_prefix("kube-rdma-e2e") {
        if rest.is_empty() {
            return Some(0);
        }
        let rest = rest.strip_prefix('-').filter(|r| !r.is_empty())?;
        return Some(digit(rest.split('-').next().unwrap_or_default()).unwrap_or(0));
    }
    let (n, end) = name.strip_prefix("kre2e")?.split_once('-')?;
    if end.is_empty() {
        return None;
    }
    if n.is_empty() {
        Some(0)
    } else {
        digit(n)
    }
}

/// Host devices and mount points under `/dev` that the node shadows (the simulated
/// node's RDMA and VFIO character devices).
pub const SHADOWED_DEVICES: &[&str] = &["/dev/infiniband", "/dev/vfio"];

/// What one instance's `up` could have made on the host, from what it recorded
/// ([`Created`]), its instance number and its base directory. `down` compares only
/// these before and after, so a leftover of ours is named and a stranger's namespace,
/// link or mount coming or going meanwhile (another tool, a CI lane, another
/// instance, whose own `down` answers for its names) is not seen at all.
#[derive(Debug, Clone)]
pub struct Ours {
    instance: u8,
    base: PathBuf,
    netns: Vec<String>,
    links: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Ours {
    /// The rule for instance `instance` whose `up` recorded `created` and used `base`.
    pub fn new(created: &Created, instance: u8, base: &Path) -> Ours {
        Ours {
            instance,
            base: base.to_path_buf(),
            netns: created.netns.clone(),
            links: created.links.clone(),
            dirs: created.dirs.clone(),
        }
    }

    /// A network namespace recorded by `up` or carrying this instance's prefix.
    pub fn netns(&self, name: &str) -> bool {
        self.netns.iter().any(|n| n == name) || instance_of(name) == Some(self.instance)
    }

    /// A host link recorded by `up` or carrying this instance's prefix.
    pub fn link(&self, name: &str) -> bool {
        self.links.iter().any(|n| n == name) || instance_of(name) == Some(self.instance)
    }

    /// A mount point of ours: under the base directory, at a path the node shadows, or
    /// one of our namespaces' mounts under /run/netns. (`/run/netns` itself is judged by
    /// [`diff`], from the snapshots.)
    pub fn mount(&self, point: &str) -> bool {
        if let Some(ns) = point.strip_prefix("/run/netns/") {
            return self.netns(ns);
        }
        Path::new(point).starts_with(&self.base)
            || SHADOWED.iter().chain(SHADOWED_DEVICES).any(|p| *p == point)
    }

    /// A path (a shadowed path's mount point, a device entry) in a directory `up` created.
    pub fn made(&self, path: &str) -> bool {
        self.dirs.iter().any(|d| Path::new(path).starts_with(d))
    }
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
    // kube-rdma-cni's only `logFile` directory (cni/src/logging.rs).
    "/var/log/kube-rdma-cni",
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
    /// Inodes of the node's network and mount namespaces (the holder's), in that order.
    #[serde(default)]
    pub ns_inodes: Vec<u64>,
    /// The kernel's boot ID when `up` ran ([`boot_id`]): pids and namespace inodes
    /// mean nothing in another boot (the state file is on persistent storage).
    #[serde(default)]
    pub boot_id: Option<String>,
    /// Start time ([`start_time`]) of each recorded pid (holder and daemons): a pid
    /// whose process started at another time is someone else's now.
    #[serde(default)]
    pub started: BTreeMap<i32, u64>,
}

impl Created {
    /// Notes `pid` (a process `up` started) with its start time.
    pub fn note_pid(&mut self, pid: i32) {
        if let Some(t) = start_time(pid) {
            self.started.insert(pid, t);
        }
    }

    /// The recorded pids (holder and daemons) it is safe to kill now: same boot,
    /// same start time, still alive. The others, with why, in the second list.
    pub fn killable_pids(&self) -> (Vec<i32>, Vec<(i32, Skip)>) {
        let mut kill = vec![];
        let mut skip = vec![];
        for pid in self.daemons.iter().map(|(_, p)| *p).chain(self.holder) {
            match self.check_pid(pid) {
                Ok(()) => kill.push(pid),
                Err(Skip::Gone) => {}
                Err(why) => skip.push((pid, why)),
            }
        }
        (kill, skip)
    }

    /// Whether recorded `pid` is still the process `up` started ([`may_kill`]).
    pub fn check_pid(&self, pid: i32) -> Result<(), Skip> {
        may_kill(
            self.boot_id.as_deref(),
            boot_id().as_deref(),
            self.started.get(&pid).copied(),
            start_time(pid),
        )
    }

    /// The recorded namespace inodes that still name the node's namespaces: none in
    /// another boot; the network namespace's only while `/run/netns/<node netns>` is
    /// that inode, the mount namespace's only while the holder (same start time) is in
    /// it. An inode number is reused once its namespace is gone, so a bare match of a
    /// number could name anyone's namespace.
    pub fn confirmed_ns_inodes(&self) -> (Vec<u64>, Vec<String>) {
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &str| std::fs::metadata(p).map(|m| m.ino()).ok();
        let mut ok = vec![];
        let mut skipped = vec![];
        let same_boot = self.boot_id.is_some() && self.boot_id == boot_id();
        let holder_ok = self.holder.is_some_and(|h| self.killable_pids().0.contains(&h));
        for (i, recorded) in self.ns_inodes.iter().enumerate() {
            let (kind, now) = match i {
                0 => ("network", self.netns.first().and_then(|n| ino(&format!("/run/netns/{n}")))),
                _ => (
                    "mount",
                    self.holder.filter(|_| holder_ok).and_then(|h| ino(&format!("/proc/{h}/ns/mnt"))),
                ),
            };
            if !same_boot {
                skipped.push(format!(
                    "{kind} namespace inode {recorded}: recorded in boot {}, this is boot {}",
                    self.boot_id.as_deref().unwrap_or("(not recorded)"),
                    boot_id().as_deref().unwrap_or("(unknown)")
                ));
            } else if now == Some(*recorded) {
                ok.push(*recorded);
            } else {
                skipped.push(format!("{kind} namespace inode {recorded}: no longer the node's"));
            }
        }
        (ok, skipped)
    }
}

/// Why a recorded pid is not killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The state was written in another boot (or records none): every pid is another process now.
    OtherBoot { recorded: Option<String>, now: Option<String> },
    /// The pid's process started at another time than the one `up` started (or none was recorded).
    Reused { recorded: Option<u64>, now: u64 },
    /// No such process.
    Gone,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &Option<String>| s.clone().unwrap_or_else(|| "(not recorded)".into());
        match self {
            Skip::OtherBoot { recorded, now } => {
                write!(f, "the state is of boot {}, this is boot {}", or(recorded), or(now))
            }
            Skip::Reused { recorded: Some(r), now } => {
                write!(f, "started at tick {now}, not at {r} as the recorded process did: another process")
            }
            Skip::Reused { recorded: None, now } => {
                write!(f, "no start time recorded for it (it started at tick {now}): not known to be ours")
            }
            Skip::Gone => write!(f, "not running"),
        }
    }
}

/// Whether a pid from the state file may be killed: only in the boot that wrote
/// the state and only while its process is the one that was recorded (same start
/// time). Anything unknown is a no.
pub fn may_kill(
    recorded_boot: Option<&str>,
    boot_now: Option<&str>,
    recorded_start: Option<u64>,
    start_now: Option<u64>,
) -> Result<(), Skip> {
    if recorded_boot.is_none() || recorded_boot != boot_now {
        return Err(Skip::OtherBoot {
            recorded: recorded_boot.map(String::from),
            now: boot_now.map(String::from),
        });
    }
    let Some(now) = start_now else { return Err(Skip::Gone) };
    if recorded_start != Some(now) {
        return Err(Skip::Reused { recorded: recorded_start, now });
    }
    Ok(())
}

/// `/proc/sys/kernel/random/boot_id`: changes at every boot.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// When `pid` started, in clock ticks after boot (`/proc/PID/stat` field 22,
/// `starttime`, proc(5)); `None` when there is no such live process.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_start_time(&stat)
}

/// Field 22 of a `/proc/PID/stat` line. The command (field 2) is in parentheses and
/// may hold spaces and parentheses itself, so fields are counted after the last `)`.
fn stat_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts with field 3 (state): field 22 is the 20th of rest.
    rest.split_whitespace().nth(19)?.parse().ok()
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
    c.note_pid(pid);
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
/// until they are gone. A recorded pid or namespace is only killed while it is
/// provably the one `up` made ([`Created::killable_pids`],
/// [`Created::confirmed_ns_inodes`]): after a reboot the state file outlives
/// them and their numbers are reused. What is left alone is said on stderr.
pub fn kill_all(c: &Created) {
    let freezer =
        cgroup_hierarchies().into_iter().find(|h| h.join("freezer.state").exists() || h.ends_with("freezer"));
    let me = std::process::id() as i32;
    let own = |ns: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/ns/{ns}")).map(|m| m.ino()).unwrap_or(0)
    };
    let (_, skipped) = c.killable_pids();
    for (pid, why) in &skipped {
        eprintln!("cluster down: not killing recorded pid {pid}: {why}");
    }
    let (confirmed, not_ours) = c.confirmed_ns_inodes();
    for why in &not_ours {
        eprintln!("cluster down: not killing the processes in {why}");
    }
    let node_only: Vec<u64> =
        confirmed.into_iter().filter(|i| *i != own("net") && *i != own("mnt")).collect();
    for round in 0..50 {
        let mut pids = cgroup_pids();
        // Checked again every round: a pid killed meanwhile may be reused at once.
        pids.extend(c.killable_pids().0);
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
    /// Processes in our cgroups, and those in the node's network or mount namespace
    /// (whatever their cgroup; named by command and command line).
    pub processes: BTreeSet<String>,
    /// Host paths the node shadows (which exist).
    pub paths: BTreeSet<String>,
}

/// Reads a [`Snapshot`] of the host. Processes left in the node's namespaces are read by
/// [`processes_in_namespaces`] while those namespaces are pinned, and added by the caller.
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
    for d in SHADOWED_DEVICES {
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
    for p in SHADOWED.iter().chain(SHADOWED_DEVICES) {
        if Path::new(p).exists() {
            s.paths.insert(p.to_string());
        }
    }
    s
}

/// Processes in `ns_inodes` (the node's namespaces, see [`Created::confirmed_ns_inodes`]),
/// named so a leftover says what it is (it may be gone by the time one looks). Only
/// meaningful while each namespace is provably still the node's (mounted at
/// `/run/netns/<node>`, or held open): a freed namespace's inode number is reused at once,
/// and another lane's next pod sandbox then reads as ours.
pub fn processes_in_namespaces(ns_inodes: &[u64]) -> BTreeSet<String> {
    pids_in_namespaces(ns_inodes)
        .into_iter()
        .map(|(pid, ns)| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: String = String::from_utf8_lossy(&args).replace('\0', " ").chars().take(160).collect();
            format!("{pid} ({}: {}) in the node's {ns} namespace", comm.trim(), args.trim())
        })
        .collect()
}

/// Lines saying how `after` differs from `before` in what is `ours` (empty: the same).
/// Processes and cgroups are read only for this instance ([`snapshot`]) and compared
/// whole; the rest by [`Ours`]. `/run/netns` is a mount point `ip netns add` may make:
/// ours to have left only where `down` would have unmounted it (not one before `up`,
/// and no namespace, anyone's, left in it).
pub fn diff(ours: &Ours, before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let run_netns_ours = !before.mounts.contains("/run/netns") && after.netns.is_empty();
    let mount = |m: &str| if m == "/run/netns" { run_netns_ours } else { ours.mount(m) };
    let mut out = vec![];
    let mut cmp = |what: &str, a: &BTreeSet<String>, b: &BTreeSet<String>, keep: &dyn Fn(&str) -> bool| {
        for x in b.difference(a).filter(|x| keep(x)) {
            out.push(format!("{what} added: {x}"));
        }
        for x in a.difference(b).filter(|x| keep(x)) {
            out.push(format!("{what} removed: {x}"));
        }
    };
    cmp("link", &before.links, &after.links, &|x| ours.link(x));
    cmp("netns", &before.netns, &after.netns, &|x| ours.netns(x));
    cmp("mount", &before.mounts, &after.mounts, &mount);
    cmp("device", &before.devices, &after.devices, &|x| ours.made(x));
    cmp("cgroup", &before.cgroups, &after.cgroups, &|_| true);
    cmp("process", &before.processes, &after.processes, &|_| true);
    cmp("path", &before.paths, &after.paths, &|x| ours.made(x));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `up` of instance `n` records, as `lay_out_node` makes it: `dirs` are the
    /// mount points it had to create on the host.
    fn ours_of(n: u8, dirs: &[&str]) -> Ours {
        let ns = suffixed_for("kube-rdma-e2e", n);
        let created = Created {
            netns: vec![ns.clone(), format!("{ns}-wire")],
            links: vec![link_for("host", n)],
            dirs: dirs.iter().map(PathBuf::from).collect(),
            ..Created::default()
        };
        Ours::new(&created, n, Path::new(&suffixed_for("/var/lib/kube-rdma-e2e", n)))
    }

    fn set(xs: &[&str]) -> BTreeSet<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_instance_of_a_name_is_read_from_its_prefix_whatever_follows() {
        assert_eq!(instance_of("kube-rdma-e2e"), Some(0));
        assert_eq!(instance_of("kube-rdma-e2e-wire"), Some(0));
        assert_eq!(instance_of("/run/netns/kube-rdma-e2e-wire"), Some(0));
        assert_eq!(instance_of("kube-rdma-e2e-node2"), Some(0));
        assert_eq!(instance_of("kube-rdma-e2e-10-x"), Some(0), "only a lone digit is an instance");
        assert_eq!(instance_of("kube-rdma-e2e-1"), Some(1));
        assert_eq!(instance_of("kube-rdma-e2e-1-wire"), Some(1));
        assert_eq!(instance_of("/run/netns/kube-rdma-e2e-9-switch"), Some(9));
        assert_eq!(instance_of("kre2e-host"), Some(0));
        assert_eq!(instance_of("kre2e-sw0"), Some(0));
        assert_eq!(instance_of("kre2e4-host"), Some(4));
        for stranger in ["kube-rdma-e2ex", "kube-rdma-e2e-", "kre2e", "kre2e-", "kre2e12-host", "kre2ehost"] {
            assert_eq!(instance_of(stranger), None, "{stranger}");
        }
        for stranger in ["eth0", "cni-0a1b", "kr-lab-3", "/run/netns/netns-0a1b", "kube-rdma"] {
            assert_eq!(instance_of(stranger), None, "{stranger}");
        }
        for n in 0..=9 {
            for name in
                [suffixed_for("kube-rdma-e2e", n), format!("{}-wire", suffixed_for("kube-rdma-e2e", n))]
            {
                assert_eq!(instance_of(&name), Some(n), "{name}");
            }
            assert_eq!(instance_of(&link_for("host", n)), Some(n));
            assert_eq!(instance_of(&link_for("node", n)), Some(n));
        }
    }

    #[test]
    fn strangers_namespaces_links_and_mounts_coming_and_going_are_not_in_the_down_diff() {
        let ours = ours_of(0, &["/run/k8s.cni.cncf.io", "/dev/vfio"]);
        let before = Snapshot {
            links: set(&["lo", "eth0", "veth0a1b"]),
            netns: set(&["cni-0a1b"]),
            mounts: set(&["/", "/run/netns", "/run/netns/cni-0a1b", "/mnt/usb"]),
            devices: set(&["/dev/infiniband", "/dev/infiniband/uverbs0"]),
            paths: set(&["/var/lib/kubelet", "/dev/infiniband"]),
            ..Snapshot::default()
        };
        // Another tool's namespace made meanwhile (seen in CI), a CNI suite's, podman's
        // containers, a host containerd's tasks, a kubelet's volumes under a shadowed path,
        // podman's CNI config directory, an RDMA device of the host's own.
        let after = Snapshot {
            links: set(&["lo", "eth0", "vethc2d3", "cni-podman0"]),
            netns: set(&["netns-c2d3", "kr-lab-3"]),
            mounts: set(&[
                "/",
                "/run/netns",
                "/run/netns/netns-c2d3",
                "/run/netns/kr-lab-3",
                "/var/lib/containers/storage/overlay/0123abcd/merged",
                "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0123abcd/rootfs",
                "/var/lib/kubelet/pods/0123abcd/volumes/kubernetes.io~secret/token",
            ]),
            devices: set(&["/dev/infiniband", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]),
            paths: set(&["/var/lib/kubelet", "/etc/cni/net.d", "/dev/infiniband"]),
            ..Snapshot::default()
        };
        assert_eq!(diff(&ours, &before, &after), Vec::<String>::new());
        assert_eq!(diff(&ours, &after, &before), Vec::<String>::new(), "the other way round");
    }

    #[test]
    fn each_kind_of_leftover_of_ours_is_named_in_the_down_diff() {
        let ours = ours_of(0, &["/run/k8s.cni.cncf.io", "/dev/vfio"]);
        let before = Snapshot { links: set(&["lo", "eth0"]), mounts: set(&["/"]), ..Snapshot::default() };
        let mut after = before.clone();
        // Whatever a stranger does meanwhile does not hide them.
        after.links.insert("vethc2d3".into());
        after.netns.insert("netns-c2d3".into());
        after.links.extend(set(&["kre2e-host", "kre2e-sw0"]));
        after.netns.extend(set(&["kube-rdma-e2e-wire", "kube-rdma-e2e-node2", "kube-rdma-e2e-switch"]));
        after.mounts.extend(set(&[
            "/run/netns/kube-rdma-e2e-wire",
            "/var/lib/kube-rdma-e2e/containerd/state/netns/cni-0a1b",
            "/var/lib/kubelet",
            "/dev/infiniband",
        ]));
        after.devices.extend(set(&["/dev/vfio", "/dev/vfio/vfio"]));
        after.paths.extend(set(&["/run/k8s.cni.cncf.io", "/dev/vfio"]));
        after.cgroups.insert("/sys/fs/cgroup/memory/kube-rdma-e2e".into());
        after.processes.insert("4242 in cgroup kube-rdma-e2e".into());
        assert_eq!(
            diff(&ours, &before, &after),
            vec![
                "link added: kre2e-host",
                "link added: kre2e-sw0",
                "netns added: kube-rdma-e2e-node2",
                "netns added: kube-rdma-e2e-switch",
                "netns added: kube-rdma-e2e-wire",
                "mount added: /dev/infiniband",
                "mount added: /run/netns/kube-rdma-e2e-wire",
                "mount added: /var/lib/kube-rdma-e2e/containerd/state/netns/cni-0a1b",
                "mount added: /var/lib/kubelet",
                "device added: /dev/vfio",
                "device added: /dev/vfio/vfio",
                "cgroup added: /sys/fs/cgroup/memory/kube-rdma-e2e",
                "process added: 4242 in cgroup kube-rdma-e2e",
                "path added: /dev/vfio",
                "path added: /run/k8s.cni.cncf.io",
            ]
        );
        // A name `up` recorded is ours whatever its prefix.
        let created = Created { links: vec!["rdma-sw".into()], ..Created::default() };
        let ours = Ours::new(&created, 0, Path::new("/var/lib/kube-rdma-e2e"));
        let after = Snapshot { links: set(&["lo", "eth0", "rdma-sw"]), ..before.clone() };
        assert_eq!(diff(&ours, &before, &after), vec!["link added: rdma-sw"]);
    }

    #[test]
    fn run_netns_is_a_leftover_only_where_down_would_have_unmounted_it() {
        let ours = ours_of(0, &[]);
        let before = Snapshot { mounts: set(&["/"]), ..Snapshot::default() };
        let left = Snapshot { mounts: set(&["/", "/run/netns"]), ..Snapshot::default() };
        assert_eq!(diff(&ours, &before, &left), vec!["mount added: /run/netns"]);
        // A stranger's namespace holds it: `down` rightly left it.
        let held = Snapshot { netns: set(&["netns-c2d3"]), ..left.clone() };
        assert_eq!(diff(&ours, &before, &held), Vec::<String>::new());
        // A mount point before `up`: never ours, whoever unmounted it since.
        assert_eq!(diff(&ours, &left, &before), Vec::<String>::new());
    }

    #[test]
    fn another_instances_leftovers_are_not_in_this_instances_down_diff() {
        let leftovers_of = |n: u8| {
            let ns = suffixed_for("kube-rdma-e2e", n);
            let base = suffixed_for("/var/lib/kube-rdma-e2e", n);
            Snapshot {
                links: set(&[&link_for("host", n), &link_for("sw0", n)]),
                netns: set(&[&ns, &format!("{ns}-wire"), &format!("{ns}-node2")]),
                mounts: set(&[
                    &format!("/run/netns/{ns}"),
                    &format!("{base}/containerd/state/netns/cni-0a1b"),
                ]),
                ..Snapshot::default()
            }
        };
        for (me, other) in [(0, 3), (3, 0), (1, 2)] {
            let ours = ours_of(me, &[]);
            let (empty, theirs) = (Snapshot::default(), leftovers_of(other));
            assert_eq!(diff(&ours, &empty, &theirs), Vec::<String>::new(), "{me} sees {other}'s");
            assert_eq!(diff(&ours, &theirs, &empty), Vec::<String>::new(), "{other} gone since {me}'s `up`");
            assert_eq!(diff(&ours, &empty, &leftovers_of(me)).len(), 7, "{me} sees its own");
        }
    }

    #[test]
    fn a_podman_container_running_beside_the_cluster_is_not_in_the_down_diff() {
        let ours = ours_of(0, &[]);
        let a = Snapshot::default();
        let mut b = a.clone();
        b.mounts.insert("/var/lib/containers/storage/overlay/0123abcd/merged".into());
        b.mounts.insert("/var/lib/containers/storage/overlay-containers/0123abcd/userdata/shm".into());
        assert!(diff(&ours, &a, &b).is_empty());
        b.mounts.insert("/var/lib/kubelet".into());
        assert_eq!(diff(&ours, &a, &b), vec!["mount added: /var/lib/kubelet".to_string()]);
    }

    #[test]
    fn a_recorded_pid_is_killed_only_in_its_boot_and_with_its_start_time() {
        let b = Some("b1");
        assert_eq!(may_kill(b, b, Some(7), Some(7)), Ok(()));
        // After a reboot every number in the state file is someone else's.
        assert_eq!(
            may_kill(b, Some("b2"), Some(7), Some(7)),
            Err(Skip::OtherBoot { recorded: Some("b1".into()), now: Some("b2".into()) })
        );
        // A state file from before boot IDs were recorded: not known, not killed.
        assert!(matches!(may_kill(None, b, Some(7), Some(7)), Err(Skip::OtherBoot { .. })));
        assert!(matches!(may_kill(b, None, Some(7), Some(7)), Err(Skip::OtherBoot { .. })));
        // Same boot, the pid reused by a process started later.
        assert_eq!(may_kill(b, b, Some(7), Some(9)), Err(Skip::Reused { recorded: Some(7), now: 9 }));
        assert_eq!(may_kill(b, b, None, Some(9)), Err(Skip::Reused { recorded: None, now: 9 }));
        assert_eq!(may_kill(b, b, Some(7), None), Err(Skip::Gone));
        assert!(Skip::Reused { recorded: Some(7), now: 9 }.to_string().contains("another process"));
    }

    #[test]
    fn the_start_time_is_field_22_of_proc_stat_whatever_the_command_name() {
        // proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
        // cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(stat_start_time(line), Some(123456));
        assert_eq!(stat_start_time("42 (x) S 1"), None);
        let me = std::process::id() as i32;
        assert!(start_time(me).is_some_and(|t| t > 0));
        assert_eq!(start_time(me), start_time(me));
    }

    #[test]
    fn only_the_recorded_processes_of_this_boot_are_killable() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
        let pid = child.id() as i32;
        let mut c =
            Created { boot_id: boot_id(), daemons: vec![("sleep".into(), pid)], ..Created::default() };
        c.note_pid(pid);
        assert_eq!(c.killable_pids().0, vec![pid]);
        // Recorded in another boot.
        let other_boot = Created { boot_id: Some("0-other-boot".into()), ..c.clone() };
        let (kill, skip) = other_boot.killable_pids();
        assert!(kill.is_empty() && matches!(skip[..], [(p, Skip::OtherBoot { .. })] if p == pid), "{skip:?}");
        // The same number, a process that started at another time.
        let mut reused = c.clone();
        reused.started.insert(pid, start_time(pid).unwrap() + 1);
        let (kill, skip) = reused.killable_pids();
        assert!(kill.is_empty() && matches!(skip[..], [(p, Skip::Reused { .. })] if p == pid), "{skip:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        // Gone: nothing to kill, nothing to say.
        assert_eq!(c.killable_pids(), (vec![], vec![]));
    }

    #[test]
    fn namespace_inodes_of_another_boot_or_gone_namespaces_are_not_swept() {
        use std::os::unix::fs::MetadataExt;
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
        let pid = child.id() as i32;
        let mnt = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).unwrap().ino();
        // No netns of that name: its recorded inode is not the node's any more.
        let mut c = Created {
            boot_id: boot_id(),
            netns: vec!["kube-rdma-e2e-no-such-netns".into()],
            holder: Some(pid),
            ns_inodes: vec![4026531840, mnt],
            ..Created::default()
        };
        c.note_pid(pid);
        let (ok, skipped) = c.confirmed_ns_inodes();
        assert_eq!(ok, vec![mnt], "{skipped:?}");
        assert!(skipped[0].contains("network namespace inode 4026531840"), "{skipped:?}");
        let other_boot = Created { boot_id: Some("0-other-boot".into()), ..c.clone() };
        let (ok, skipped) = other_boot.confirmed_ns_inodes();
        assert!(ok.is_empty() && skipped.len() == 2, "{ok:?} {skipped:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        // The holder gone: its mount namespace's number may be anyone's next.
        assert!(c.confirmed_ns_inodes().0.is_empty());
    }
}
