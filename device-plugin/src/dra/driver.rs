//! The DRA driver daemon: one event loop owning the node view, the slices
//! and the kubelet-facing sockets.
//!
//! Inputs: netlink link events and a periodic rescan (devices and health,
//! with what is prepared: a VF in a pod is in use, not broken); the kubelet's
//! PodResources, asked on the rescan cadence (a VF a device plugin resource
//! holds, or one in a pod that no claim of ours holds, is withheld:
//! [`super::withhold`]); the config
//! file (reload); the node's `RdmaNodeState` (roceReady); the registry and
//! plugin directories (serve a socket again when it is deleted; a socket
//! that cannot be bound is tried again with capped backoff, never given up);
//! the shutdown signal (sockets removed; slices, prepared claims and CDI specs
//! stay, since pods still use them and the kubelet wipes slices itself when
//! the driver stays away). Output: the wanted pool content, which the
//! publisher task ([`publish::run`]) keeps in the API (and puts back when the
//! kubelet wipes the node's slices), so a slow or hung API server never holds
//! up a rescan or the kubelet.
//!
//! Every read of the node runs off the loop with a deadline, as in device
//! plugin mode ([`crate::walks`]): a read that blocks in the kernel is
//! abandoned, the slices keep what was known, `/healthz` says the node's
//! view is stale, and shutdown never waits for it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use nic::{Inventory, Roots};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::api::health::dra_resource_health_server::DraResourceHealthServer;
use super::api::registration::registration_server::RegistrationServer;
use super::api::{v1, v1beta1};
use super::authority;
use super::checkpoint::Checkpoint;
use super::devices::{self, History, PreparedDevices, SharedView, View};
use super::health::HealthService;
use super::metrics::{DraMetrics, Socket};
use super::publish;
use super::registration::{Registered, RegistrationService};
use super::service::{Claims, ClaimsParts, DraService};
use super::slices::{self, Content, RoceReadiness};
use super::withhold::{self, KubeletWitness};
use super::{nodestate, status, DRA_SOCKET, DRIVER};
use crate::config::{Config, ConfigError};
use crate::inuse::Memory;
use crate::kubelet::{self, DirEvent};
use crate::nodewatch::{self, ConfigFile, NodeWatch};
use crate::podresources;
use crate::pools::{self, Plan};
use crate::registration::Timing;
use crate::server;
use crate::walks::{stale_after, Walked, Walker};

/// Command-line flags of `kube-rdma-device-plugin dra`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// This node's name (the pool name and `spec.nodeName` of the slices).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The kubelet's plugin registration directory.
    #[arg(long, default_value = super::DEFAULT_REGISTRY_DIR)]
    pub plugins_registry_dir: PathBuf,
    /// The kubelet's plugins directory (the DRA socket goes in `<dir>/rdma.kuberdma.io/`).
    #[arg(long, default_value = super::DEFAULT_PLUGINS_DIR)]
    pub plugins_dir: PathBuf,
    /// Where prepared claims are recorded (default `<plugins-dir>/rdma.kuberdma.io/prepared`;
    /// the CNI's `preparedDir` must name the same directory).
    #[arg(long)]
    pub prepared_dir: Option<PathBuf>,
    /// Where per-claim CDI specs are written.
    #[arg(long, default_value = "/var/run/cdi")]
    pub cdi_dir: PathBuf,
    /// Periodic rescan, seconds (netlink link events trigger rescans in between).
    #[arg(long, default_value_t = 30.0)]
    pub rescan_interval: f64,
    /// How long one read of the node may take, seconds, before it is abandoned
    /// (a sysfs read blocked in the kernel) and /healthz reports the node's view stale.
    #[arg(long, default_value_t = 10.0)]
    pub rescan_deadline: f64,
    /// Do not subscribe to netlink link events.
    #[arg(long)]
    pub no_link_events: bool,
    /// Serve /metrics, /healthz and /livez here (e.g. 0.0.0.0:9410).
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// The kubelet's PodResources socket: VFs the kubelet assigned to pods
    /// (device plugin mode) are not offered to claims. Asked every rescan.
    #[arg(long, default_value = crate::POD_RESOURCES_SOCKET)]
    pub pod_resources_socket: PathBuf,
}

/// Everything the driver needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Pool config (`None`: the default pool).
    pub config: Option<PathBuf>,
    /// Where to read the node from.
    pub roots: Roots,
    /// Node name.
    pub node_name: String,
    /// Plugin registration dir.
    pub registry_dir: PathBuf,
    /// Plugins dir.
    pub plugins_dir: PathBuf,
    /// Prepared-claims dir.
    pub prepared_dir: PathBuf,
    /// CDI spec dir.
    pub cdi_dir: PathBuf,
    /// Periodic rescan.
    pub rescan_interval: Duration,
    /// How long one read of the node may take before it is abandoned
    /// ([`crate::walks`]).
    pub rescan_deadline: Duration,
    /// Rescan on netlink link events.
    pub link_events: bool,
    /// Metrics listen address.
    pub metrics_addr: Option<SocketAddr>,
    /// The kubelet's PodResources socket.
    pub pod_resources: PathBuf,
}

impl Args {
    /// Options from the flags and the global ones.
    pub fn options(self, config: Option<PathBuf>, roots: Roots) -> Result<Options, DriverError> {
        for (flag, v) in
            [("--rescan-interval", self.rescan_interval), ("--rescan-deadline", self.rescan_deadline)]
        {
            if !(v > 0.0 && v.is_finite()) {
                return Err(DriverError::Flag(format!(
                    "{flag} must be a positive number of seconds, not {v}"
                )));
            }
        }
        if let Some(problem) = plumbing::node_name_problem(&self.node_name) {
            return Err(DriverError::Flag(problem));
        }
        let prepared_dir =
            self.prepared_dir.unwrap_or_else(|| self.plugins_dir.join(DRIVER).join("prepared"));
        Ok(Options {
            config,
            roots,
            node_name: self.node_name,
            registry_dir: self.plugins_registry_dir,
            plugins_dir: self.plugins_dir,
            prepared_dir,
            cdi_dir: self.cdi_dir,
            rescan_interval: Duration::from_secs_f64(self.rescan_interval),
            rescan_deadline: Duration::from_secs_f64(self.rescan_deadline),
            link_events: !self.no_link_events,
            metrics_addr: self.metrics_addr,
            pod_resources: self.pod_resources_socket,
        })
    }
}

/// Why the driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A bad flag.
    #[error("{0}")]
    Flag(String),
    /// The config file is bad.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The config asks for something DRA mode does not do.
    #[error("{path}: {why}")]
    Unsupported {
        /// Config file.
        path: String,
        /// What.
        why: String,
    },
    /// No Kubernetes client config (kubeconfig or in-cluster service account).
    #[error(
        "cannot configure a Kubernetes client (KUBECONFIG, ~/.kube/config or in-cluster service account)"
    )]
    ClientConfig(#[source] kube::config::InferConfigError),
    /// The client cannot be built from its config.
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
    /// The checkpoint dir cannot be read.
    #[error(transparent)]
    Checkpoint(#[from] nic::prepared::PreparedError),
    /// A socket could not be served.
    #[error("cannot serve {path}")]
    Bind {
        /// Socket path.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics address cannot be bound.
    #[error("cannot listen for metrics on {addr}")]
    Metrics {
        /// Address.
        addr: SocketAddr,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// A directory cannot be watched.
    #[error("cannot watch {path}")]
    Watch {
        /// Directory.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Socket paths of a driver.
pub fn registration_socket(registry_dir: &Path) -> PathBuf {
    registry_dir.join(super::registration_socket_name())
}

/// `<plugins dir>/rdma.kuberdma.io/dra.sock`.
pub fn dra_socket(plugins_dir: &Path) -> PathBuf {
    plugins_dir.join(DRIVER).join(DRA_SOCKET)
}

struct Served {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Served {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if tokio::time::timeout(Duration::from_secs(1), &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

fn serve_dra(path: &Path, claims: Arc<Claims>, health: HealthService) -> Result<Served, DriverError> {
    let listener = server::bind(path).map_err(|source| DriverError::Bind { path: path.into(), source })?;
    let (stop, rx) = oneshot::channel::<()>();
    let svc = DraService(claims);
    let task = tokio::spawn(async move {
        let res = tonic::transport::Server::builder()
            .add_service(v1::dra_plugin_server::DraPluginServer::new(svc.clone()))
            .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(svc))
            .add_service(DraResourceHealthServer::new(health))
            .serve_with_incoming_shutdown(authority::incoming(listener), async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = res {
            tracing::error!(error = %e, "DRA gRPC server ended with an error");
        }
    });
    Ok(Served { stop: Some(stop), task })
}

fn serve_registration(path: &Path, svc: RegistrationService) -> Result<Served, DriverError> {
    let listener = server::bind(path).map_err(|source| DriverError::Bind { path: path.into(), source })?;
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let res = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(svc))
            .serve_with_incoming_shutdown(authority::incoming(listener), async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = res {
            tracing::error!(error = %e, "registration gRPC server ended with an error");
        }
    });
    Ok(Served { stop: Some(stop), task })
}

/// The config file, parsed and checked for what DRA mode does.
fn checked(loaded: Result<(ConfigFile, Config), ConfigError>) -> Result<(ConfigFile, Config), DriverError> {
    let (file, cfg) = loaded?;
    devices::check_config(&cfg).map_err(|why| DriverError::Unsupported {
        path: file.path().map(|p| p.display().to_string()).unwrap_or_else(|| "default config".into()),
        why,
    })?;
    Ok((file, cfg))
}

/// A new plan, with prepared VFs and those the kubelet assigned counted as
/// assigned (in use is not broken), keeping VFs that vanished while their PF
/// still has them as Unhealthy (the device plugin's rule) for pools whose
/// config is unchanged.
fn replan(
    prev: Option<&Plan>,
    inv: &Inventory,
    cfg: &Config,
    prepared: &PreparedDevices,
    kubelet: &withhold::Holders,
) -> Plan {
    let mut alloc = devices::allocations(cfg, prepared);
    for (id, h) in kubelet {
        alloc.by_resource.entry(h.resource.clone()).or_default().insert(id.clone());
    }
    let mut plan = pools::plan_with(inv, cfg, &alloc);
    if let Some(prev) = prev {
        for pool in &mut plan.pools {
            if let Some(old) = prev.pools.iter().find(|p| p.config == pool.config) {
                pools::carry_missing(old, pool, inv);
            }
        }
    }
    plan
}

/// The view of `plan`: its devices, less the VFs already in a pod that DRA did not prepare.
fn view_of(plan: &Plan, inv: &Inventory, history: History, kubelet: &KubeletWitness) -> View {
    let view = devices::from_plan(plan, inv, history);
    withhold::apply(view, inv, history.prepared, &kubelet.holders)
}

/// Logs the VFs withheld in `next` and not (or for another reason) in `prev`, and those released.
fn log_withheld(prev: &View, next: &View) {
    for w in &next.withheld {
        if prev.withheld(&w.name).map(|p| &p.reason) != Some(&w.reason) {
            tracing::warn!(device = %w.name, pci = %w.pci, reason = %w.reason, "device withheld: not offered to claims");
        }
    }
    for w in &prev.withheld {
        if next.withheld(&w.name).is_none() {
            tracing::info!(device = %w.name, pci = %w.pci, "device no longer withheld");
        }
    }
}

fn log_changes(prev: &View, next: &View) {
    log_withheld(prev, next);
    for d in &next.devices {
        match (prev.device(&d.name).map(|p| &p.health), &d.health) {
            (None, _) => tracing::info!(device = %d.name, pci = %d.pci, "device added"),
            (Some(a), b) if a != b => tracing::info!(device = %d.name, health = ?b, "device health changed"),
            _ => {}
        }
    }
    for d in &prev.devices {
        if next.device(&d.name).is_none() && next.withheld(&d.name).is_none() {
            tracing::info!(device = %d.name, "device removed");
        }
    }
}

/// The pool content of `view` and `roce`, with what had to be left out logged.
fn content(view: &View, roce: &RoceReadiness) -> Content {
    let (content, warnings) = slices::content(view, roce);
    for w in warnings {
        tracing::warn!("{w}");
    }
    content
}

/// How long one PodResources `List` may take (the kubelet answers from memory).
const POD_RESOURCES_TIMEOUT: Duration = Duration::from_secs(5);

/// One PodResources `List`: its holders, or `last` with the error.
async fn ask_kubelet(socket: &Path, last: &KubeletWitness) -> KubeletWitness {
    match podresources::list_pods(socket, POD_RESOURCES_TIMEOUT).await {
        Ok(resp) => KubeletWitness::answer(withhold::holders(&resp)),
        Err(e) => last.failed(nic::error_chain(&e)),
    }
}

/// Logs a change in whether the kubelet answers, and shows it in the metrics.
fn kubelet_state(prev: Option<&KubeletWitness>, now: &KubeletWitness, metrics: &DraMetrics) {
    metrics.set_pod_resources(now.error.clone());
    match (prev.and_then(|p| p.error.as_ref()), &now.error) {
        (None, Some(error)) => tracing::error!(
            %error,
            "the kubelet's PodResources is unreachable: withholding every VF in another network \
             namespace that no prepared claim holds, and those its last answer named; retrying"
        ),
        (Some(_), None) => tracing::info!("the kubelet's PodResources answers again"),
        _ => {}
    }
}

/// Asks the kubelet's PodResources every `every` (the rescan cadence) after
/// `first`; what changes goes to the driver's loop, which rescans. A task of
/// its own, so a kubelet that does not answer holds up nothing else.
fn watch_kubelet(socket: PathBuf, every: Duration, first: KubeletWitness) -> watch::Receiver<KubeletWitness> {
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let last = tx.borrow().clone();
            let next = ask_kubelet(&socket, &last).await;
            if next != last && tx.send(next).is_err() {
                return;
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// The API client: from KUBECONFIG or the pod's service account, with a read
/// timeout as a backstop for requests the watchers make on their own.
async fn client() -> Result<kube::Client, DriverError> {
    let mut config = kube::Config::infer().await.map_err(DriverError::ClientConfig)?;
    config.read_timeout = Some(super::CLIENT_READ_TIMEOUT);
    // Count from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    kube::Client::try_from(config).map_err(DriverError::Client)
}

/// One kubelet-facing socket: its server, and whether binding it fails.
struct Slot {
    path: PathBuf,
    /// The server; after a failed re-bind, the previous one still answers
    /// the connections the kubelet has open.
    served: Option<Served>,
    /// Failed binds in a row.
    failures: u32,
    /// When to bind again (`None`: served).
    retry_at: Option<tokio::time::Instant>,
}

impl Slot {
    fn new(path: PathBuf) -> Self {
        Slot { path, served: None, failures: 0, retry_at: None }
    }
}

/// Whether `path` is a unix socket (the one we serve, unless someone replaced it).
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The driver's state between wake-ups: the node as last planned, what the
/// kubelet-facing sockets serve, and the content handed to the publisher.
struct Driver {
    opts: Options,
    cfg: Config,
    file: ConfigFile,
    memory: Memory,
    plan: Plan,
    metrics: Arc<DraMetrics>,
    claims: Arc<Claims>,
    health: HealthService,
    view_tx: watch::Sender<SharedView>,
    /// What the kubelet's PodResources says, as the poller last sent it; and
    /// the one the view was planned with.
    kubelet: watch::Receiver<KubeletWitness>,
    witness: KubeletWitness,
    roce: watch::Receiver<RoceReadiness>,
    content_tx: watch::Sender<Content>,
    reg_svc: RegistrationService,
    reg: Slot,
    dra: Slot,
    /// Runs the reads of the node.
    walker: Walker,
}

/// Walks the node with `walker` until `stop`, and fills in VFs whose netdev
/// or RDMA device is in a pod with what `memory` learned of them on the host.
async fn walk_node(
    walker: &Walker,
    roots: &Roots,
    memory: &mut Memory,
    stop: impl Future<Output = ()>,
) -> Walked<Inventory> {
    let roots = roots.clone();
    let job = move || nic::discover::discover_scoped(&roots, nodewatch::scope());
    let mut walked = walker.run("node walk", job, stop).await;
    if let Walked::Done(inv) = &mut walked {
        memory.observe(inv);
    }
    walked
}

/// Runs until `shutdown` resolves. Nothing here waits for the API server:
/// slices are published by their own task ([`publish::run`]), claim status
/// by another ([`status::run`]), the watches feed channels, and a prepare's
/// reads are bounded. The reads of the node wait on `shutdown` too, so one
/// stuck in the kernel never delays the stop.
pub async fn run(opts: Options, shutdown: impl Future<Output = ()>) -> Result<(), DriverError> {
    let stop = shutdown.shared();
    let Some((mut d, mut w)) = Driver::start(opts, stop.clone()).await? else {
        tracing::info!("stopped during the first read of the node");
        return Ok(());
    };
    loop {
        let retry = d.next_retry();
        tokio::select! {
            _ = stop.clone() => break,
            // Any wake-up of the node side rescans: a link event, the timer, a config reload.
            wake = w.node.next() => {
                let wake = w.node.settle(wake).await;
                if !matches!(wake, crate::nodewatch::Wake::ConfigDir) || d.reload() {
                    d.rescan(stop.clone()).await;
                }
            }
            Ok(()) = d.kubelet.changed() => {
                let now = d.kubelet.borrow_and_update().clone();
                kubelet_state(Some(&d.witness), &now, &d.metrics);
                d.witness = now;
                d.rescan(stop.clone()).await;
            }
            Ok(()) = d.roce.changed() => {
                tracing::info!(readiness = ?*d.roce.borrow(), "RdmaNodeState changed");
                d.republish();
            }
            Ok(()) = w.registered.changed() => {
                let r = w.registered.borrow().clone();
                if let Registered::No(why) = &r {
                    tracing::error!(%why, "not registered with the kubelet");
                }
                d.metrics.set_registered(r);
            }
            Some(ev) = w.reg_events.recv() => d.on_socket_dir(Socket::Registration, ev).await,
            Some(ev) = w.dra_events.recv() => d.on_socket_dir(Socket::Plugin, ev).await,
            () = sleep_until(retry) => d.retry_due().await,
        }
    }
    d.stop().await;
    Ok(())
}

/// What wakes the driver besides the shutdown and the `RdmaNodeState`.
struct Wakeups {
    node: NodeWatch,
    registered: watch::Receiver<Registered>,
    reg_events: mpsc::Receiver<DirEvent>,
    dra_events: mpsc::Receiver<DirEvent>,
}

/// Serves `/metrics` on `addr` on a task of its own.
async fn serve_metrics(addr: SocketAddr, metrics: &Arc<DraMetrics>) -> Result<(), DriverError> {
    let (local, fut) = plumbing::http::bind(addr, metrics.routes())
        .await
        .map_err(|source| DriverError::Metrics { addr, source })?;
    tracing::info!(%local, "metrics listening");
    tokio::spawn(fut);
    Ok(())
}

/// The prepared claims recorded in `dir`; unreadable files are logged and left alone.
fn load_checkpoint(dir: &Path) -> Result<Checkpoint, DriverError> {
    let (checkpoint, bad) = Checkpoint::load(dir)?;
    for e in bad {
        tracing::error!(error = %e, "a prepared-claim file cannot be read; it is left as it is");
    }
    Ok(checkpoint)
}

/// Inotify events of `dir`, created if missing.
fn watch_socket_dir(dir: &Path) -> Result<mpsc::Receiver<DirEvent>, DriverError> {
    std::fs::create_dir_all(dir).map_err(|source| DriverError::Watch { path: dir.into(), source })?;
    kubelet::watch_dir(dir).map_err(|source| DriverError::Watch { path: dir.into(), source })
}

impl Driver {
    /// Discovers the node, serves the kubelet-facing sockets and starts the
    /// API-side tasks; `None` when `stop` came during the first read of the
    /// node (nothing is served or published yet). A first read that does not
    /// complete otherwise leaves the node empty until a rescan completes.
    async fn start(
        opts: Options,
        stop: impl Future<Output = ()>,
    ) -> Result<Option<(Driver, Wakeups)>, DriverError> {
        let started = Instant::now();
        let (file, cfg) = checked(ConfigFile::load(opts.config.as_deref()))?;
        let metrics = Arc::new(DraMetrics::default());
        let walker = Walker::new(opts.rescan_deadline);
        let stale = stale_after(opts.rescan_interval, walker.deadline());
        metrics.watch_walks(walker.walks(), stale);
        if let Some(addr) = opts.metrics_addr {
            serve_metrics(addr, &metrics).await?;
        }
        let client = client().await?;
        let checkpoint = load_checkpoint(&opts.prepared_dir)?;

        let mut memory = Memory::default();
        let prepared = checkpoint.devices();
        // The kubelet's word before the first slice: a VF a device plugin pod holds is never offered.
        let witness = ask_kubelet(&opts.pod_resources, &KubeletWitness::default()).await;
        kubelet_state(None, &witness, &metrics);
        let kubelet = watch_kubelet(opts.pod_resources.clone(), opts.rescan_interval, witness.clone());
        let inv = match walk_node(&walker, &opts.roots, &mut memory, stop).await {
            Walked::Done(inv) => inv,
            Walked::Stopped => return Ok(None),
            Walked::Overran | Walked::Refused => Inventory::default(),
        };
        let plan = replan(None, &inv, &cfg, &prepared, &witness.holders);
        let history = History { last: &View::default(), prepared: &prepared };
        let first = view_of(&plan, &inv, history, &witness);
        let (view_tx, view_rx) = watch::channel::<SharedView>(Arc::new(first));
        tracing::info!(devices = view_rx.borrow().devices.len(), elapsed = ?started.elapsed(), "node discovered");
        metrics.set_view(&view_rx.borrow());
        log_withheld(&View::default(), &view_rx.borrow());

        // Kubelet-facing sockets: the DRA service first, so it is there when the
        // kubelet, told by the registration socket, dials it.
        let (changed_tx, changed_rx) = mpsc::unbounded_channel();
        let claims = Claims::new(ClaimsParts {
            driver: DRIVER.into(),
            pool: opts.node_name.clone(),
            cdi_dir: opts.cdi_dir.clone(),
            client: client.clone(),
            view: view_rx.clone(),
            checkpoint,
            changed: changed_tx,
            metrics: metrics.clone(),
        });
        let restored = claims.restore_cdi_specs().await;
        if restored > 0 {
            tracing::info!(specs = restored, "CDI specs of prepared claims written again");
        }
        let health = HealthService::new(&opts.node_name, view_rx.clone());
        let dra_path = dra_socket(&opts.plugins_dir);
        let reg_path = registration_socket(&opts.registry_dir);
        let (reg_svc, registered) = RegistrationService::new(DRIVER, &dra_path.to_string_lossy());
        let reg_events = watch_socket_dir(&opts.registry_dir)?;
        let dra_events = watch_socket_dir(dra_path.parent().unwrap_or(Path::new("/")))?;
        let node = NodeWatch::start(
            opts.link_events,
            256,
            opts.config.as_deref(),
            opts.rescan_interval.max(Duration::from_millis(50)),
        );

        tokio::spawn(status::run(client.clone(), DRIVER.into(), opts.prepared_dir.clone(), changed_rx));
        let mut roce = nodestate::watch_node(client.clone(), &opts.node_name);
        let (content_tx, content_rx) = watch::channel(content(&view_rx.borrow(), &roce.borrow_and_update()));
        tokio::spawn(publish::run(
            client.clone(),
            opts.node_name.clone(),
            DRIVER.into(),
            content_rx,
            metrics.clone(),
            started,
        ));
        let mut d = Driver {
            opts,
            cfg,
            file,
            memory,
            plan,
            metrics,
            claims,
            health,
            view_tx,
            kubelet,
            witness,
            roce,
            content_tx,
            reg_svc,
            reg: Slot::new(reg_path),
            dra: Slot::new(dra_path),
            walker,
        };
        // The DRA service first, so it is there when the kubelet, told by the
        // registration socket, dials it.
        d.serve(Socket::Plugin).await;
        d.serve(Socket::Registration).await;
        tracing::info!(registration = %d.reg.path.display(), endpoint = %d.dra.path.display(), "serving the kubelet");
        Ok(Some((d, Wakeups { node, registered, reg_events, dra_events })))
    }
}

impl Driver {
    /// Takes a changed config file when DRA mode can use it; true when it did.
    fn reload(&mut self) -> bool {
        let Some(loaded) = self.file.changed() else { return false };
        match checked(loaded) {
            Ok((file, cfg)) => {
                tracing::info!("config changed: reloading pools");
                self.cfg = cfg;
                self.file.accept(file);
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "config changed but cannot be used; keeping the running one");
                false
            }
        }
    }

    /// Walks the node again, with what is prepared (in use, not broken); a
    /// changed view goes to the sockets and the publisher. A walk that does
    /// not complete (or `stop`) changes nothing: the slices keep what was known.
    async fn rescan(&mut self, stop: impl Future<Output = ()>) {
        let prepared = self.claims.prepared_devices().await;
        let walked = walk_node(&self.walker, &self.opts.roots, &mut self.memory, stop).await;
        let Walked::Done(inv) = walked else { return };
        let plan = replan(Some(&self.plan), &inv, &self.cfg, &prepared, &self.witness.holders);
        let next = {
            let last = self.view_tx.borrow();
            view_of(&plan, &inv, History { last: &last, prepared: &prepared }, &self.witness)
        };
        self.plan = plan;
        if **self.view_tx.borrow() == next {
            return;
        }
        log_changes(&self.view_tx.borrow(), &next);
        self.metrics.set_view(&next);
        self.view_tx.send_replace(Arc::new(next));
        self.republish();
    }

    /// Hands the publisher the content of the current view and readiness.
    fn republish(&self) {
        let c = content(&self.view_tx.borrow(), &self.roce.borrow());
        self.content_tx.send_if_modified(|cur| std::mem::replace(cur, c) != *cur);
    }

    fn slot(&mut self, which: Socket) -> &mut Slot {
        match which {
            Socket::Registration => &mut self.reg,
            Socket::Plugin => &mut self.dra,
        }
    }

    /// Serves `which` on a fresh socket (the previous server stops once the
    /// new one is bound). A bind that fails is logged, shown in `/healthz`
    /// and the metrics, and tried again with capped backoff
    /// ([`Self::retry_due`]), as device plugin mode does with a pool's
    /// socket: the driver never ends over it.
    async fn serve(&mut self, which: Socket) {
        let path = self.slot(which).path.clone();
        let bound = match which {
            Socket::Registration => serve_registration(&path, self.reg_svc.clone()),
            Socket::Plugin => serve_dra(&path, self.claims.clone(), self.health.clone()),
        };
        let metrics = self.metrics.clone();
        let slot = self.slot(which);
        match bound {
            Ok(next) => {
                if slot.failures > 0 {
                    tracing::info!(socket = %path.display(), failures = slot.failures, "serving again");
                }
                slot.failures = 0;
                slot.retry_at = None;
                metrics.socket_served(which);
                if let Some(old) = slot.served.replace(next) {
                    old.stop().await;
                }
            }
            Err(e) => {
                slot.failures = slot.failures.saturating_add(1);
                let wait = Timing::default().backoff(slot.failures);
                slot.retry_at = Some(tokio::time::Instant::now() + wait);
                let error = nic::error_chain(&e);
                tracing::error!(socket = %path.display(), %error, failures = slot.failures, retry_in = ?wait, "cannot serve the socket; retrying");
                metrics.socket_failed(which, error);
            }
        }
    }

    /// When the next failed socket is due to be bound again.
    fn next_retry(&self) -> Option<tokio::time::Instant> {
        [self.reg.retry_at, self.dra.retry_at].into_iter().flatten().min()
    }

    /// Binds again the sockets whose retry is due.
    async fn retry_due(&mut self) {
        let now = tokio::time::Instant::now();
        for which in [Socket::Plugin, Socket::Registration] {
            if self.slot(which).retry_at.is_some_and(|t| t <= now) {
                self.serve(which).await;
            }
        }
    }

    /// A change in the directory of socket `which`: a deleted socket (a
    /// kubelet restart, a cleanup) is served again, and one that could not
    /// be bound is tried at once (what was in the way may be gone).
    async fn on_socket_dir(&mut self, which: Socket, ev: DirEvent) {
        let slot = self.slot(which);
        if !matches!(&ev, DirEvent::Deleted(_) | DirEvent::Rescan) {
            return;
        }
        if slot.retry_at.is_none() && is_socket(&slot.path) {
            return;
        }
        if slot.retry_at.is_none() {
            tracing::info!(socket = %slot.path.display(), "{} socket deleted: serving it again", which.label());
        }
        self.serve(which).await;
    }

    /// Shutdown: the sockets go (the kubelet deregisters us when the
    /// registration socket does); slices, prepared claims and CDI specs stay.
    async fn stop(self) {
        for slot in [self.reg, self.dra] {
            if let Some(s) = slot.served {
                s.stop().await;
                if is_socket(&slot.path) {
                    let _ = std::fs::remove_file(&slot.path);
                }
            }
        }
        tracing::info!("stopped");
    }
}

/// [`run`] until SIGTERM or SIGINT (handlers installed before anything is
/// served, so a signal during startup still means a clean stop).
pub async fn run_until_signal(opts: Options) -> Result<(), DriverError> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k| signal(k).map_err(|e| DriverError::Flag(format!("cannot install a signal handler: {e}")));
    let mut term = sig(SignalKind::terminate())?;
    let mut int = sig(SignalKind::interrupt())?;
    run(opts, async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
    .await
}
