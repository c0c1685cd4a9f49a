//! The local single-node cluster: `up`, `down`, `env`, `status`.
//!
//! `up` builds what is missing (peers, images; cached), lays out the node
//! ([`crate::node`]), materialises the simulated RDMA node from
//! `e2e/node.yaml` with real veth links as its VF and PF netdevs, starts
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//! containerd, kube-proxy and the kubelet (Multus as the CNI entry point,
//! bridge + host-local as the pods' primary network), imports the images and
//! installs kube-rdma with its chart. Everything it makes is recorded in
//! `<base>/state.json` first, so `down` removes exactly that, also after a
//! failed `up`.
//!
//! Base directory: `$KUBE_RDMA_E2E_DIR`, default `/var/lib/kube-rdma-e2e`, with `-N`
//! appended for instance N > 0 ([`node::instance`], [`base_dir_for`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::apiserver::{self, ApiServer, Client, ADMIN};
use crate::daemon::{self, run, Daemon, Spec};
use crate::hostdirs;
use crate::images;
use crate::locks;
use crate::node::{self, Created, Snapshot};
use crate::peers;

/// The node's name.
pub const NODE_NAME: &str = "e2e-node";
/// Namespace kube-rdma is installed in.
pub const NAMESPACE: &str = "kube-rdma";
/// Helm release name.
pub const RELEASE: &str = "kube-rdma";
/// The pods' primary network (bridge `cni0`, host-local).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The cluster CIDR kube-proxy masquerades for.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Label Node Feature Discovery puts on RDMA nodes (the chart's default `rdmaNodeLabel`).
pub const RDMA_LABEL: &str = "feature.node.kubernetes.io/rdma.capable=true";

const CONTROLLER_MANAGER: Client =
    Client { stem: "controller-manager", user: "system:kube-controller-manager", group: None };
const SCHEDULER: Client = Client { stem: "scheduler", user: "system:kube-scheduler", group: None };
const PROXY: Client = Client { stem: "kube-proxy", user: "system:kube-proxy", group: None };
const KUBELET: Client = Client { stem: "kubelet", user: "system:node:e2e-node", group: Some("system:nodes") };

/// The base directory of this instance.
pub fn base_dir() -> PathBuf {
    base_dir_for(std::env::var_os("KUBE_RDMA_E2E_DIR").as_deref(), node::instance())
}

/// The base directory of instance `n` given `$KUBE_RDMA_E2E_DIR` (`dir`, empty or
/// unset: `/var/lib/kube-rdma-e2e`): `dir` itself for instance 0, `dir-N` for
/// instance N, so instances never share a state file, whichever base is chosen.
pub fn base_dir_for(dir: Option<&std::ffi::OsStr>, n: u8) -> PathBuf {
    let mut base = dir.filter(|v| !v.is_empty()).unwrap_or("/var/lib/kube-rdma-e2e".as_ref()).to_os_string();
    if n > 0 {
        base.push(format!("-{n}"));
    }
    PathBuf::from(base)
}

/// Paths under the base directory.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The base directory.
    pub base: PathBuf,
}

impl Layout {
    /// The layout under [`base_dir`].
    pub fn new() -> Layout {
        Layout { base: base_dir() }
    }
    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.base.join("state.json")
    }
    /// The control plane's directory (pki, etcd, kubeconfigs).
    pub fn control(&self) -> PathBuf {
        self.base.join("control")
    }
    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.control().join(format!("{}.kubeconfig", ADMIN.stem))
    }
    /// Daemon logs.
    pub fn logs(&self) -> PathBuf {
        self.base.join("logs")
    }
    /// What a shadowed node path shows (`/var/lib/kubelet` → `<base>/root/var/lib/kubelet`).
    pub fn root(&self, p: &str) -> PathBuf {
        self.base.join("root").join(p.trim_start_matches('/'))
    }
    /// The simulated node's tree.
    pub fn sim(&self) -> PathBuf {
        self.base.join("sim")
    }
    /// containerd's socket.
    pub fn containerd_sock(&self) -> PathBuf {
        self.base.join("containerd/containerd.sock")
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::new()
    }
}

/// `state.json`: what exists because of `up`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct State {
    /// Host changes.
    pub created: Created,
    /// The host before `up`.
    pub before: Snapshot,
    /// The image kube-rdma runs.
    pub image: String,
    /// Seconds per phase of the last `up`.
    pub timings: Vec<(String, f64)>,
    /// How each daemon was started (to restart it: [`restart_daemon`]).
    #[serde(default)]
    pub specs: std::collections::BTreeMap<String, Spec>,
    /// Whether kube-rdma's chart is installed (`up` without `--no-chart`).
    #[serde(default)]
    pub chart: bool,
}

impl State {
    fn load(l: &Layout) -> Option<State> {
        serde_json::from_str(&std::fs::read_to_string(l.state()).ok()?).ok()
    }
    /// Unsynced: the processes it lists do not outlive a power loss either.
    fn save(&self, l: &Layout) -> Result<()> {
        plumbing::atomic_file::write_unsynced(&l.state(), &serde_json::to_vec_pretty(self)?)?;
        Ok(())
    }
}

/// What `up` is asked for beyond a running cluster.
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// More chart values (a YAML mapping), merged over the e2e's own ([`load_values`]).
    pub values: Option<PathBuf>,
    /// Skip the chart (a bare node).
    pub no_chart: bool,
}

/// A `--values` file: a YAML mapping (an empty file is an empty one), read before
/// anything starts so a typo costs no cluster start.
pub fn load_values(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_yaml::from_str(&text).with_context(|| format!("{} is not YAML", path.display()))?;
    match v {
        serde_json::Value::Null => Ok(json!({})),
        v @ serde_json::Value::Object(_) => Ok(v),
        other => bail!("{}: chart values must be a YAML mapping, not {other}", path.display()),
    }
}

/// Refuses to go on without root, before anything (a lock, a directory) is touched.
fn need_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "the e2e cluster needs root: it makes network namespaces, cgroups, mounts and device nodes (run it as root, e.g. with sudo)"
        );
    }
    Ok(())
}

/// Whether the cluster is up (its state exists and kube-apiserver answers).
pub fn is_up() -> bool {
    let l = Layout::new();
    State::load(&l).is_some()
        && apiserver::kubectl(&l.kubeconfig())
            .args(["get", "--raw=/readyz", "--request-timeout=5s"])
            .output()
            .is_ok_and(|o| o.status.success())
}

struct Phases {
    t0: Instant,
    last: Instant,
    out: Vec<(String, f64)>,
}

impl Phases {
    fn new() -> Phases {
        Phases { t0: Instant::now(), last: Instant::now(), out: vec![] }
    }
    fn done(&mut self, what: &str) {
        let s = self.last.elapsed().as_secs_f64();
        eprintln!("cluster: {what} ({s:.1} s)");
        self.out.push((what.into(), s));
        self.last = Instant::now();
    }
}

/// Brings the cluster up (see the module docs). Idempotent: on a running
/// cluster it starts nothing; given `--values` there, it upgrades the chart to
/// the e2e values plus those (as `helm upgrade -f FILE` would: the values of an
/// earlier `--values` are not kept); `--no-chart` there is refused while the
/// chart is installed (it would be ignored otherwise).
pub fn up(opts: &UpOptions) -> Result<State> {
    need_root()?;
    let values = opts.values.as_deref().map(load_values).transpose()?;
    let _lock = lock()?;
    let l = Layout::new();
    if is_up() {
        let mut st = State::load(&l).context("reading state.json")?;
        reconfigure(&l, &mut st, opts, values)?;
        return Ok(st);
    }
    if l.state().exists() {
        eprintln!("cluster: a previous cluster is not fully up; taking it down first");
        down_locked()?;
    }
    let mut ph = Phases::new();
    let imgs = build_with(&mut ph)?;

    let mut st = State { before: node::snapshot(), image: imgs[2].name.clone(), ..State::default() };
    st.created.boot_id = node::boot_id();
    std::fs::create_dir_all(&l.base)?;
    st.save(&l)?;
    hostdirs::join(&l.state())?;
    let r = bring_up(&l, &mut st, &imgs, opts, values, &mut ph);
    st.timings = ph.out.clone();
    st.save(&l)?;
    if let Err(e) = r {
        return Err(e.context(format!(
            "cluster up failed; logs in {}; `scripts/cluster down` cleans up",
            l.logs().display()
        )));
    }
    eprintln!("cluster: up in {:.0} s", ph.t0.elapsed().as_secs_f64());
    Ok(st)
}

/// `up` on a running cluster: the options honoured or refused, never ignored.
fn reconfigure(
    l: &Layout,
    st: &mut State,
    opts: &UpOptions,
    values: Option<serde_json::Value>,
) -> Result<()> {
    if opts.no_chart {
        if st.chart {
            bail!(
                "the cluster in {} is up with kube-rdma installed; --no-chart only applies when `up` starts a cluster (scripts/cluster down first)",
                l.base.display()
            );
        }
        eprintln!("cluster: already up without the chart ({})", l.base.display());
        return Ok(());
    }
    let Some(values) = values else {
        eprintln!("cluster: already up ({})", l.base.display());
        return Ok(());
    };
    let file = opts.values.as_deref().unwrap_or(Path::new("")).display();
    eprintln!("cluster: already up; upgrading kube-rdma's chart to the e2e values plus {file}");
    let t0 = Instant::now();
    install_chart(l, &st.image, Some(values))?;
    st.chart = true;
    st.timings = vec![(format!("kube-rdma upgraded with {file} and running"), t0.elapsed().as_secs_f64())];
    st.save(l)
}

/// Builds what `up` needs and starts nothing: the peers and the images (cached). Lets a
/// caller (scripts/test-all) pay for the builds before the suite, not inside its clusters' `up`.
pub fn build() -> Result<()> {
    need_root()?;
    build_with(&mut Phases::new()).map(drop)
}

fn build_with(ph: &mut Phases) -> Result<Vec<images::Image>> {
    peers::check_host_tools()?;
    peers::ensure_built()?;
    ph.done("peers built");
    let imgs = build_images()?;
    ph.done("images built");
    Ok(imgs)
}

fn build_images() -> Result<Vec<images::Image>> {
    // Instances share the image cache (and podman's store).
    let _lock = locks::exclusive(".images.lock")?;
    Ok(vec![images::pause()?, images::busybox()?, images::kube_rdma()?])
}

fn bring_up(
    l: &Layout,
    st: &mut State,
    imgs: &[images::Image],
    opts: &UpOptions,
    values: Option<serde_json::Value>,
    ph: &mut Phases,
) -> Result<()> {
    let (holder, sim) = lay_out_node(l, st)?;
    ph.done("node laid out (netns, mounts, cgroups, simulated RDMA node)");

    start_apiserver(l, st, holder)?;
    ph.done("etcd and kube-apiserver ready");
    start_controllers(l, st, holder)?;

    // Runtime.
    let (spec, ctrd) = start_containerd(l, holder, &sim)?;
    record(st, &spec, ctrd);
    st.save(l)?;
    for img in imgs {
        images::import(&l.containerd_sock(), img)?;
    }
    ph.done("containerd ready, images imported");

    start_networking(l, st, holder)?;

    // The kubelet.
    let kubelet = kubelet_spec(l, holder)?;
    let d = daemon::spawn(&kubelet)?;
    record(st, &kubelet, d);
    st.save(l)?;
    wait_node_ready(l)?;
    ph.done("kubelet registered, node Ready");

    if !opts.no_chart {
        install_chart(l, &st.image, values)?;
        st.chart = true;
        st.save(l)?;
        ph.done("kube-rdma installed by its chart and running");
    }
    Ok(())
}

/// The host side: cgroups, namespaces, the holder process, shadow mounts, the
/// simulated RDMA node and its links, the CNI plugins. Returns the holder's
/// pid, in whose namespaces every daemon runs.
fn lay_out_node(l: &Layout, st: &mut State) -> Result<(i32, nic::sim::Sim)> {
    let c = &mut st.created;
    // Host side: cgroups first, so every process started below is in them.
    node::enter_cgroups(c)?;
    node::add_netns(c, &node::netns())?;
    node::add_netns(c, &node::wire_netns())?;
    node::link_host_to_node(c)?;
    let holder = node::start_holder(c, &l.logs().join("holder.log"))?;
    for p in node::SHADOWED {
        node::shadow(c, holder, &l.root(p), Path::new(p))?;
    }
    let sim = make_sim(l)?;
    node::shadow(c, holder, &sim.roots().dev.join("infiniband"), Path::new("/dev/infiniband"))?;
    std::fs::create_dir_all(sim.roots().dev.join("vfio"))?;
    node::shadow(c, holder, &sim.roots().dev.join("vfio"), Path::new("/dev/vfio"))?;
    wire_sim_links(&sim)?;
    let sync = Spec::new("simsync", std::env::current_exe()?, l.logs().join("simsync.log"))
        .args(["simsync".to_string(), l.sim().display().to_string()])
        .in_ns_of(Some(holder));
    record(st, &sync, daemon::spawn(&sync)?);
    install_cni_plugins(l)?;
    Ok((holder, sim))
}

/// etcd and kube-apiserver.
fn start_apiserver(l: &Layout, st: &mut State, holder: i32) -> Result<()> {
    let api = ApiServer::start_with(apiserver::Options {
        dir: Some(l.control()),
        bind: "0.0.0.0".into(),
        advertise: node::node_ip(),
        port: 6443,
        etcd_ports: (2379, 2380),
        sans: vec![node::node_ip(), NODE_NAME.into()],
        clients: vec![CONTROLLER_MANAGER, SCHEDULER, PROXY, KUBELET],
        // Alpha in 1.34: without it the API server drops the pod status field
        // (allocatedResourcesStatus) the kubelet reports device health in.
        extra_args: vec![format!("--feature-gates={RESOURCE_HEALTH_GATE}=true")],
        ns_of: Some(holder),
        ready_timeout: Duration::from_secs(180),
        apiserver_bin: None,
    })?;
    for (name, pid, spec) in api.detach() {
        st.created.daemons.push((name.clone(), pid));
        st.created.note_pid(pid);
        st.specs.insert(name, spec);
    }
    st.save(l)?;
    Ok(())
}

/// kube-controller-manager and kube-scheduler.
fn start_controllers(l: &Layout, st: &mut State, holder: i32) -> Result<()> {
    let ctl = l.control();
    let pki = ctl.join("pki");
    let kc = |cl: &Client| kubeconfig(l, cl);
    let cm = Spec::new(
        "kube-controller-manager",
        peers::bin("kube"),
        l.logs().join("kube-controller-manager.log"),
    )
    .args([
        "controller-manager".to_string(),
        format!("--kubeconfig={}", kc(&CONTROLLER_MANAGER)),
        format!("--authentication-kubeconfig={}", kc(&CONTROLLER_MANAGER)),
        format!("--authorization-kubeconfig={}", kc(&CONTROLLER_MANAGER)),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=10257".into(),
        "--controllers=*".into(),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", pki.join("sa.key").display()),
        format!("--root-ca-file={}", pki.join("ca.crt").display()),
        format!("--cluster-signing-cert-file={}", pki.join("ca.crt").display()),
        format!("--cluster-signing-key-file={}", pki.join("ca.key").display()),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        "--v=1".into(),
    ])
    .in_ns_of(Some(holder));
    let sched = Spec::new("kube-scheduler", peers::bin("kube"), l.logs().join("kube-scheduler.log"))
        .args([
            "scheduler".to_string(),
            format!("--kubeconfig={}", kc(&SCHEDULER)),
            format!("--authentication-kubeconfig={}", kc(&SCHEDULER)),
            format!("--authorization-kubeconfig={}", kc(&SCHEDULER)),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=10259".into(),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ])
        .in_ns_of(Some(holder));
    for s in [cm, sched] {
        let d = daemon::spawn(&s)?;
        record(st, &s, d);
    }
    st.save(l)?;
    Ok(())
}

/// The kubeconfig file of control-plane client `cl`.
fn kubeconfig(l: &Layout, cl: &Client) -> String {
    l.control().join(format!("{}.kubeconfig", cl.stem)).display().to_string()
}

/// Cluster networking: Multus' RBAC and config, kube-proxy.
fn start_networking(l: &Layout, st: &mut State, holder: i32) -> Result<()> {
    multus_setup(l)?;
    crate::whereabouts::install(&crate::whereabouts::Node {
        admin_kubeconfig: l.kubeconfig(),
        cni_bin: l.root("/opt/cni/bin"),
        cni_conf: l.root("/etc/cni/net.d"),
        server: format!("https://{}:6443", node::node_ip()),
        ca_file: l.control().join("pki/ca.crt"),
        log_file: l.logs().join("whereabouts.log"),
        work_dir: l.base.clone(),
    })?;
    let proxy_cfg = l.base.join("kube-proxy.yaml");
    std::fs::write(&proxy_cfg, kube_proxy_config(&kubeconfig(l, &PROXY)))?;
    let proxy = Spec::new("kube-proxy", peers::bin("kube"), l.logs().join("kube-proxy.log"))
        .args(["proxy".to_string(), format!("--config={}", proxy_cfg.display()), "--v=1".into()])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .in_ns_of(Some(holder));
    let d = daemon::spawn(&proxy)?;
    record(st, &proxy, d);
    st.save(l)?;
    Ok(())
}

/// The simulated RDMA node, materialised under the base directory.
fn make_sim(l: &Layout) -> Result<nic::sim::Sim> {
    let desc_path = peers::repo_root().join("e2e/node.yaml");
    let desc = nic::sim::load_desc(&desc_path).with_context(|| format!("loading {}", desc_path.display()))?;
    nic::sim::Sim::materialise_at(&desc, &l.sim()).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))
}

/// Real veth links in the node for every netdev the simulated tree names
/// (PFs and VFs, with the tree's MAC and MTU), their peers in the wire netns.
fn wire_sim_links(sim: &nic::sim::Sim) -> Result<()> {
    let inv = nic::discover::discover(&sim.roots());
    let mut batch_node = String::new();
    let mut batch_wire = String::new();
    let mut n = 0;
    let mut add = |nd: &nic::inventory::Netdev| {
        let (name, mac, mtu) = (&nd.name, nd.mac.as_deref().unwrap_or(""), nd.mtu.unwrap_or(1500));
        let peer = format!("w{n}");
        n += 1;
        batch_node
            .push_str(&format!("link add {name} type veth peer name {peer} netns {}\n", node::wire_netns()));
        if !mac.is_empty() {
            batch_node.push_str(&format!("link set {name} address {mac}\n"));
        }
        batch_node.push_str(&format!("link set {name} mtu {mtu}\nlink set {name} up\n"));
        batch_wire.push_str(&format!("link set {peer} mtu {mtu}\nlink set {peer} up\n"));
    };
    for pf in &inv.pfs {
        pf.netdevs.iter().for_each(&mut add);
        for vf in &pf.vfs {
            vf.netdev.iter().for_each(&mut add);
        }
    }
    batch(&node::netns(), &batch_node)?;
    batch(&node::wire_netns(), &batch_wire)?;
    Ok(())
}

fn batch(ns: &str, cmds: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running ip -batch")?;
    child.stdin.take().context("ip stdin")?.write_all(cmds.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("ip -n {ns} -batch failed: {}\n{cmds}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// `/opt/cni/bin` of the node: Debian's reference plugins and Multus (the
/// chart's installer adds kube-rdma-cni).
fn install_cni_plugins(l: &Layout) -> Result<()> {
    let dir = l.root("/opt/cni/bin");
    std::fs::create_dir_all(&dir)?;
    for e in std::fs::read_dir(peers::DEBIAN_CNI_DIR)? {
        let e = e?;
        std::fs::copy(e.path(), dir.join(e.file_name()))?;
    }
    std::fs::copy(peers::bin("multus"), dir.join("multus"))?;
    Ok(())
}

/// Notes a started daemon in the state (pid, and its spec for restarts).
fn record(st: &mut State, spec: &Spec, d: Daemon) {
    let (name, pid) = d.detach();
    let old: Vec<i32> = st.created.daemons.iter().filter(|(n, _)| *n == name).map(|(_, p)| *p).collect();
    st.created.started.retain(|p, _| !old.contains(p));
    st.created.daemons.retain(|(n, _)| *n != name);
    st.created.daemons.push((name.clone(), pid));
    st.created.note_pid(pid);
    st.specs.insert(name, spec.clone());
}

fn start_containerd(l: &Layout, holder: i32, sim: &nic::sim::Sim) -> Result<(Spec, Daemon)> {
    let cfg = l.base.join("containerd/config.toml");
    std::fs::create_dir_all(cfg.parent().expect("has a parent"))?;
    std::fs::write(&cfg, containerd_config(l))?;
    let bin_dir = peers::cache_dir().join("bin");
    let spec = Spec::new("containerd", peers::bin("containerd"), l.logs().join("containerd.log"))
        .args([format!("--config={}", cfg.display())])
        // The shim and runc come from PATH. The CNI plugins inherit this environment (go-cni
        // execs them with containerd's own plus CNI_*): kube-rdma-cni reads the simulated node.
        .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin_dir.display()))
        .env(nic::roots::SYSFS_ROOT_ENV, sim.roots().sysfs.display().to_string())
        .env(nic::roots::DEV_ROOT_ENV, sim.roots().dev.display().to_string())
        .in_ns_of(Some(holder));
    let mut d = daemon::spawn(&spec)?;
    let sock = l.containerd_sock();
    daemon::wait_ready(&mut d, "serving its socket", Duration::from_secs(60), || {
        run(Command::new(peers::bin("ctr")).arg(format!("--address={}", sock.display())).arg("version"))
            .is_ok()
    })?;
    Ok((spec, d))
}

/// containerd 2.x configuration (version 3): CDI on, our pause image
/// pinned, runc with cgroupfs, Multus' config dir, network namespaces under
/// the state dir (never in the host's /run/netns).
fn containerd_config(l: &Layout) -> String {
    let b = l.base.join("containerd");
    format!(
        r#"version = 3
root = "{root}"
state = "{state}"

[grpc]
  address = "{sock}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"

[plugins.'io.containerd.cri.v1.runtime']
  # This machine may not lower oom_score_adj (runc's write of -998 for the sandbox fails with
  # EACCES): keep it at containerd's own, as the option's docs say for such hosts.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
        # runc's state under ours, not the host's /run/containerd.
        Root = "{runc_root}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
"#,
        root = b.join("root").display(),
        state = b.join("state").display(),
        sock = l.containerd_sock().display(),
        pause = images::PAUSE,
        runc_root = b.join("runc").display(),
    )
}

fn kube_proxy_config(kubeconfig: &str) -> String {
    // Conntrack sysctls are global (not per netns) and read-only in the node's namespace:
    // zero leaves them alone.
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
mode: iptables
clusterCIDR: {CLUSTER_CIDR}
hostnameOverride: {NODE_NAME}
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
"#
    )
}

/// The Multus ServiceAccount's token for the node's kubeconfig: a long-lived
/// ServiceAccount token Secret, filled by kube-controller-manager's token
/// controller, that does not expire. On a real node the Multus DaemonSet's
/// entrypoint rewrites this kubeconfig from the pod's projected token as the
/// kubelet rotates it; here the thin plugin runs from the node's files with no
/// such pod, so a TokenRequest token (`kubectl create token`, at most its
/// `--duration`) would leave a cluster kept up longer without Multus API access
/// (no pod with a secondary network could start), and refreshing it on `up` or
/// `status` would still fail a cluster nobody touches. The legacy-token cleaner
/// (kube-controller-manager, 1 year unused) only removes the Secrets the old
/// token controller generated itself, never one created like this (the
/// Kubernetes docs' "Manually create a long-lived API token for a ServiceAccount").
const MULTUS_TOKEN_SECRET: &str = "---
apiVersion: v1
kind: Secret
metadata:
  name: multus-token
  namespace: kube-system
  annotations:
    kubernetes.io/service-account.name: multus
type: kubernetes.io/service-account-token
";

/// Multus as the node's CNI: its RBAC objects from its own deployment
/// manifest (the module cache's copy; not the DaemonSet), a kubeconfig with
/// its ServiceAccount's long-lived token ([`MULTUS_TOKEN_SECRET`]), and the thin
/// plugin's config delegating the primary network to bridge + host-local.
fn multus_setup(l: &Layout) -> Result<()> {
    let dir = multus_module_dir()?;
    let manifest = std::fs::read_to_string(dir.join("deployments/multus-daemonset.yml"))?;
    let mut keep = String::new();
    for doc in serde_yaml::Deserializer::from_str(&manifest) {
        let v = serde_yaml::Value::deserialize(doc)?;
        let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if matches!(
            kind,
            "CustomResourceDefinition" | "ClusterRole" | "ClusterRoleBinding" | "ServiceAccount"
        ) {
            keep.push_str("---\n");
            keep.push_str(&serde_yaml::to_string(&v)?);
        }
    }
    keep.push_str(MULTUS_TOKEN_SECRET);
    let f = l.base.join("multus-rbac.yaml");
    std::fs::write(&f, keep)?;
    run(kubectl(l).args(["apply", "--server-side", "-f"]).arg(&f))?;
    let token = daemon::wait_for(
        "the token controller to fill kube-system/multus-token",
        Duration::from_secs(60),
        || {
            let out = run(kubectl(l).args([
                "-n",
                "kube-system",
                "get",
                "secret",
                "multus-token",
                "-o",
                "jsonpath={.data.token}",
            ]))
            .ok()?;
            let token = base64::engine::general_purpose::STANDARD.decode(out.trim()).ok()?;
            String::from_utf8(token).ok().filter(|t| !t.is_empty())
        },
    )?;
    let netd = l.root("/etc/cni/net.d");
    std::fs::create_dir_all(netd.join("multus.d"))?;
    let server = format!("https://{}:6443", node::node_ip());
    let kcfg = crate::pki::kubeconfig(
        &server,
        &l.control().join("pki/ca.crt"),
        "multus",
        crate::pki::Credentials::Token(token.trim()),
        "multus",
    );
    crate::pki::write_private(&netd.join("multus.d"), "multus.kubeconfig", &kcfg)?;
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "multus-cni-network",
        "type": "multus",
        "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
        "binDir": "/opt/cni/bin",
        "cniDir": "/var/lib/cni/multus",
        "logFile": l.logs().join("multus.log"),
        "logLevel": "verbose",
        "delegates": [{
            "cniVersion": "1.0.0",
            "name": "e2e-pods",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        }]
    });
    std::fs::write(netd.join("00-multus.conf"), serde_json::to_vec_pretty(&conf)?)?;
    Ok(())
}

fn multus_module_dir() -> Result<PathBuf> {
    let out = run(Command::new("go").current_dir(peers::repo_root().join("e2e/peers/multus")).args([
        "list",
        "-m",
        "-f",
        "{{.Dir}}",
        "gopkg.in/k8snetworkplumbingwg/multus-cni.v4",
    ]))?;
    Ok(PathBuf::from(out.trim()))
}

fn kubelet_spec(l: &Layout, holder: i32) -> Result<Spec> {
    let cfg = l.base.join("kubelet.yaml");
    std::fs::write(&cfg, kubelet_config(l))?;
    let ctl = l.control();
    let spec = Spec::new("kubelet", peers::bin("kube"), l.logs().join("kubelet.log"))
        .args([
            "kubelet".to_string(),
            format!("--config={}", cfg.display()),
            format!("--kubeconfig={}", ctl.join("kubelet.kubeconfig").display()),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={}", node::node_ip()),
            format!("--node-labels={RDMA_LABEL}"),
            "--v=2".into(),
        ])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .in_ns_of(Some(holder));
    Ok(spec)
}

/// The feature gate (alpha in 1.34, off by default) under which the kubelet
/// watches device health (device plugins' ListAndWatch, DRA drivers'
/// `NodeWatchResources`) into pods' `allocatedResourcesStatus`; on in the
/// API server and the kubelet, so the e2e suite sees what our health reports do.
pub const RESOURCE_HEALTH_GATE: &str = "ResourceHealthStatus";

/// KubeletConfiguration as `hack/local-up-cluster.sh` would write it for this
/// machine: cgroupfs under our own cgroup root, swap allowed, low eviction
/// thresholds, image GC off (offline images cannot be pulled again), and
/// [`RESOURCE_HEALTH_GATE`] on.
///
/// The node status is computed every second (`nodeStatusUpdateFrequency`, default
/// 10 s), so a change of allocatable (a device plugin's Unhealthy device) is on the
/// Node within a second, as the device plugin's health cases assert. It costs no
/// API writes: each round reads the Node from the kubelet's informer and patches it
/// only when the status changed or `nodeStatusReportFrequency` passed
/// (kubelet_node_status.go `tryUpdateNodeStatus`). That one is set to its default
/// of 5 m explicitly: left out, it would default to the update frequency once that
/// is set (v1beta1 defaults.go, "for backward compatibility"), a patch a second.
fn kubelet_config(l: &Layout) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
clusterDomain: cluster.local
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
resolvConf: /etc/resolv.conf
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 5m
featureGates:
  {RESOURCE_HEALTH_GATE}: true
"#,
        cgroup = node::cgroup(),
        sock = l.containerd_sock().display(),
        ca = l.control().join("pki/ca.crt").display(),
    )
}

fn wait_node_ready(l: &Layout) -> Result<()> {
    daemon::wait_for("node e2e-node Ready", Duration::from_secs(240), || {
        let out = run(kubectl(l).args([
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]))
        .ok()?;
        (out.trim() == "True").then_some(())
    })
}

/// The chart's values for the local node: defaults, except the image (built
/// here, never pulled) and the simulated node's tree.
pub fn e2e_values(image: &str) -> serde_json::Value {
    let (repo, tag) = image.rsplit_once(':').expect("image name has a tag");
    json!({
        "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
        "simulatedNode": {"path": base_dir().join("sim")},
    })
}

/// Installs or upgrades the chart with the e2e values plus `extra`; `<base>/values.yaml`
/// keeps what was applied (the cases' way back to the cluster's values).
fn install_chart(l: &Layout, image: &str, extra: Option<serde_json::Value>) -> Result<()> {
    let mut values = e2e_values(image);
    if let Some(more) = extra {
        merge(&mut values, more);
    }
    let f = l.base.join("values.yaml");
    std::fs::write(&f, serde_yaml::to_string(&values)?)?;
    helm_upgrade(l, &f)?;
    wait_rollout(l)
}

/// `helm upgrade --install` of the chart with `values` (Helm v4's engine).
pub fn helm_upgrade(l: &Layout, values: &Path) -> Result<()> {
    let out = run(Command::new("python3")
        .arg(peers::repo_root().join("e2e/helm.py"))
        .args(["upgrade", "--namespace", NAMESPACE, "--release", RELEASE])
        .arg(format!("--kubeconfig={}", l.kubeconfig().display()))
        .arg(format!("--values={}", values.display())))?;
    eprintln!("cluster: {}", out.trim());
    Ok(())
}

/// Waits for kube-rdma's DaemonSets and Deployment to be rolled out.
pub fn wait_rollout(l: &Layout) -> Result<()> {
    let t0 = Instant::now();
    for kind in ["daemonset", "deployment"] {
        let names = run(kubectl(l).args(["-n", NAMESPACE, "get", kind, "-o", "name"]))?;
        for n in names.lines().filter(|n| !n.is_empty()) {
            let left = Duration::from_secs(240).saturating_sub(t0.elapsed()).as_secs().max(10);
            run(kubectl(l).args(["-n", NAMESPACE, "rollout", "status", n, &format!("--timeout={left}s")]))
                .with_context(|| format!("{n} did not roll out; pods:\n{}", pods_summary(l)))?;
        }
    }
    Ok(())
}

fn pods_summary(l: &Layout) -> String {
    run(kubectl(l).args(["get", "pods", "-A", "-o", "wide"])).unwrap_or_default()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// kubectl (pinned) with the admin kubeconfig.
pub fn kubectl(l: &Layout) -> Command {
    apiserver::kubectl(&l.kubeconfig())
}

/// Stops everything `up` started and removes what it created; returns how
/// the host now differs from before `up` (empty: as it was).
pub fn down() -> Result<Vec<String>> {
    need_root()?;
    let _lock = lock()?;
    down_locked()
}

/// One `up` or `down` at a time per instance (a second waits): they read and write state.json.
fn lock() -> Result<nix::fcntl::Flock<std::fs::File>> {
    locks::exclusive(&format!(".cluster-{}.lock", node::instance()))
}

fn down_locked() -> Result<Vec<String>> {
    let l = Layout::new();
    let Some(st) = State::load(&l) else {
        eprintln!("cluster: not up (no {})", l.state().display());
        return Ok(vec![]);
    };
    let c = &st.created;
    // Before the kill: the holder keeps the mount namespace that proves the inode ours.
    let (node_ns, _) = c.confirmed_ns_inodes();
    // Held open until the leftovers are read, so the inode cannot name anyone else's
    // namespace meanwhile (the network namespace is held by its /run/netns mount until then).
    let _mnt_pin = c.holder.and_then(|h| std::fs::File::open(format!("/proc/{h}/ns/mnt")).ok());
    node::kill_all(c);
    let leftovers = node::processes_in_namespaces(&node_ns);
    for ns in c.netns.iter().rev() {
        let _ = node::ip(&["netns", "del", ns]);
    }
    for link in &c.links {
        if Path::new("/sys/class/net").join(link).exists() {
            let _ = node::ip(&["link", "del", link]);
        }
    }
    // `ip netns add` makes /run/netns a mount point; undo that if it was not one before
    // and no namespace is left in it.
    let netns_empty = std::fs::read_dir("/run/netns").map(|mut d| d.next().is_none()).unwrap_or(true);
    if !st.before.mounts.contains("/run/netns")
        && netns_empty
        && node::snapshot().mounts.contains("/run/netns")
    {
        let _ = run(Command::new("umount").arg("/run/netns"));
    }
    for cg in c.cgroups.iter().rev() {
        node::remove_cgroup(cg);
    }
    let _ = std::fs::remove_dir_all(&l.base);
    // After the state is gone, so that a concurrent `down` of another instance sees this one gone.
    let dirs = hostdirs::leave(&c.dirs)?;
    let mut after = node::snapshot();
    after.processes.extend(leftovers);
    // Only what this instance could have made: strangers' names come and go meanwhile.
    let ours = node::Ours::new(c, node::instance(), &l.base);
    let diff = dirs.explain(node::diff(&ours, &st.before, &after));
    for d in &diff {
        eprintln!("cluster down: host differs: {d}");
    }
    eprintln!("cluster: down");
    Ok(diff)
}

/// Stops daemon `name` of the running cluster (kubelet, containerd,
/// kube-apiserver, ...): SIGTERM, then SIGKILL after `grace`.
pub fn stop_daemon(name: &str, grace: Duration) -> Result<()> {
    need_root()?;
    let _lock = lock()?;
    let l = Layout::new();
    let st = State::load(&l).context("the cluster is not up")?;
    let (_, pid) =
        st.created.daemons.iter().find(|(n, _)| n == name).with_context(|| format!("no daemon {name}"))?;
    st.created.check_pid(*pid).map_err(|why| anyhow::anyhow!("not stopping {name} (pid {pid}): {why}"))?;
    Daemon::from_pid(name, *pid, &l.logs()).stop(grace);
    Ok(())
}

/// Starts daemon `name` again with its recorded command line (stopping it
/// first if it runs) and records its new pid; returns it. The new process
/// joins the cluster's cgroups, so `down` still finds it.
pub fn restart_daemon(name: &str, grace: Duration) -> Result<i32> {
    need_root()?;
    let _lock = lock()?;
    let l = Layout::new();
    let mut st = State::load(&l).context("the cluster is not up")?;
    let spec = st.specs.get(name).cloned().with_context(|| format!("no daemon {name} to restart"))?;
    if let Some((_, pid)) = st.created.daemons.iter().find(|(n, _)| n == name) {
        match st.created.check_pid(*pid) {
            Ok(()) => Daemon::from_pid(name, *pid, &spec.log).stop(grace),
            Err(node::Skip::Gone) => {}
            Err(why) => bail!("not stopping {name} (pid {pid}) to restart it: {why}"),
        }
    }
    let d = daemon::spawn(&spec)?;
    node::join_cgroups(d.pid);
    let pid = d.pid;
    record(&mut st, &spec, d);
    st.save(&l)?;
    Ok(pid)
}

/// The state of the running cluster.
pub fn state() -> Result<State> {
    State::load(&Layout::new()).context("the cluster is not up (scripts/cluster up)")
}

/// `export KUBECONFIG=...` for the shell.
pub fn env() -> Result<String> {
    let l = Layout::new();
    if State::load(&l).is_none() {
        bail!("the cluster is not up (scripts/cluster up)");
    }
    Ok(format!("export KUBECONFIG={}", l.kubeconfig().display()))
}

/// A human summary of the running cluster.
pub fn status() -> Result<String> {
    let l = Layout::new();
    let st = State::load(&l).context("the cluster is not up (scripts/cluster up)")?;
    let mut out = String::new();
    for (name, pid) in &st.created.daemons {
        let how = match st.created.check_pid(*pid) {
            Ok(()) => "running".to_string(),
            Err(node::Skip::Gone) => "DEAD".to_string(),
            Err(why) => format!("DEAD ({why})"),
        };
        out.push_str(&format!("{name:<24} pid {pid:<8} {how}\n"));
    }
    out.push_str(
        &run(kubectl(&l).args(["get", "nodes", "-o", "wide"])).unwrap_or_else(|e| format!("{e:#}\n")),
    );
    out.push_str(&pods_summary(&l));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn each_instance_has_its_own_base_dir_with_or_without_kube_rdma_e2e_dir() {
        assert_eq!(base_dir_for(None, 0), PathBuf::from("/var/lib/kube-rdma-e2e"));
        assert_eq!(base_dir_for(None, 3), PathBuf::from("/var/lib/kube-rdma-e2e-3"));
        assert_eq!(base_dir_for(Some(OsStr::new("")), 2), PathBuf::from("/var/lib/kube-rdma-e2e-2"));
        assert_eq!(base_dir_for(Some(OsStr::new("/srv/e2e")), 0), PathBuf::from("/srv/e2e"));
        assert_eq!(base_dir_for(Some(OsStr::new("/srv/e2e")), 1), PathBuf::from("/srv/e2e-1"));
        let all: std::collections::BTreeSet<PathBuf> =
            (0..=9).map(|n| base_dir_for(Some(OsStr::new("/srv/e2e")), n)).collect();
        assert_eq!(all.len(), 10, "two instances share a base dir: {all:?}");
    }
}
