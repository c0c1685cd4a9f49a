//! The daemon: one event loop owning every pool.
//!
//! Inputs: netlink link events (`RTNLGRP_LINK`: the function whose netdev
//! changed is read again, not the node) and a periodic full rescan as the safety net; inotify
//! on the kubelet dir (a deleted pool socket is served again; `kubelet.sock`
//! is looked at on every event and published to the pools' registration
//! tasks, [`crate::registration`], which register once per kubelet
//! instance); inotify on the config file's directory (reload; unchanged pools
//! keep serving); the kubelet's PodResources list, polled by its own task; a
//! server task that dies (restarted); the shutdown signal (open streams ended,
//! every pool stopped at once; sockets and device-info files removed).
//!
//! CDI specs stay when a pool stops, the daemon included: the kubelet hands a
//! restarting container the CDI names of its checkpointed Allocate answer
//! ([`crate::cdi::pool`]). A spec follows the node instead: a device gone from
//! the node leaves its pool's spec (pools removed from the config included),
//! and a spec with no device left is removed. The daemon starts from the
//! specs on disk: a device whose edits cannot be computed now (a VF in a pod
//! whose RDMA device the host cannot see) keeps the entry written while they
//! could, and the spec of a pool removed from the config while the daemon
//! was down is adopted like one removed by a reload.
//!
//! Discovery never reads GID tables: nothing the plugin hands out depends on
//! them (a GID index cannot be known before the CNI addresses the VF).
//!
//! Every read of the node runs off the loop with a deadline ([`crate::walks`]):
//! a read that blocks in the kernel is abandoned, the pools keep what was
//! known, `/healthz` says the node's view is stale, and shutdown never waits
//! for it (the process exits without joining a stuck thread).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use nic::netlink::events::RtnlEvent;
use nic::{Inventory, PciAddr, Roots};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::cdi::pool::{OnDisk, Synced};
use crate::config::{Config, ConfigError, PoolConfig};
use crate::inuse::{Allocations, Memory};
use crate::kubelet::{self, DirEvent};
use crate::metrics::Metrics;
use crate::nodewatch::{self, ConfigFile, NodeWatch, Wake};
use crate::pools::{self, Pool};
use crate::registration::{self, Instance, Registrar};
use crate::server::{self, PoolService};
use crate::walks::{stale_after, Walked, Walker};
use crate::{cdi, devinfo, names, podresources};

/// Everything the daemon needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    /// Config file; `None`: the default pool.
    pub config: Option<PathBuf>,
    /// Where to read the node from.
    pub roots: Roots,
    /// Kubelet device plugin dir.
    pub kubelet_dir: PathBuf,
    /// Periodic full rescan (a config's `periodicUpdateInterval` overrides it).
    pub rescan_interval: Duration,
    /// How long one read of the node may take before it is abandoned
    /// ([`crate::walks`]).
    pub rescan_deadline: Duration,
    /// CDI spec dir.
    pub cdi_dir: PathBuf,
    /// Device-info dir.
    pub devinfo_dir: PathBuf,
    /// Metrics listen address.
    pub metrics_addr: Option<SocketAddr>,
    /// Subscribe to netlink link events (rescan on link changes).
    pub link_events: bool,
    /// The kubelet's PodResources socket; `None`: do not ask.
    pub pod_resources: Option<PathBuf>,
    /// How often PodResources is asked.
    pub pod_resources_interval: Duration,
    /// How registration with the kubelet waits and backs off.
    pub registration: registration::Timing,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The config file is bad at startup.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The kubelet dir cannot be watched.
    #[error("cannot watch {path}")]
    Watch {
        /// Directory.
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
}

/// Why a pool could not be served.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("socket path for {resource} in {dir} exceeds sun_path (107 bytes) even with a hashed name")]
    PathTooLong { resource: String, dir: PathBuf },
    #[error("cannot serve {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How long stopping all pools may take before the rest are aborted.
const STOP_DEADLINE: Duration = Duration::from_secs(1);

/// The shutdown signal, awaited by the loop and by every read of the node,
/// so that a read stuck in the kernel never delays shutdown.
struct Stop<F> {
    fut: Pin<Box<F>>,
    fired: bool,
}

impl<F: Future<Output = ()>> Stop<F> {
    fn new(fut: F) -> Self {
        Stop { fut: Box::pin(fut), fired: false }
    }

    /// Resolves when shutdown is asked for (at once once it was); cancel-safe.
    async fn wait(&mut self) {
        if !self.fired {
            self.fut.as_mut().await;
            self.fired = true;
        }
    }
}

struct Running {
    config: PoolConfig,
    tx: watch::Sender<Arc<Pool>>,
    closing: watch::Sender<bool>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// Keeps the pool registered with the kubelet ([`registration::run`]).
    registrar: JoinHandle<()>,
    socket: PathBuf,
    generation: u64,
    /// The pool's CDI spec on disk.
    cdi: OnDisk,
}

/// A pool not served whose CDI spec stays while its devices are on the
/// node: a config reload removed or changed it, it was configured no more
/// when the daemon started, or it is between two servers.
struct Retired {
    path: PathBuf,
    kind: String,
    disk: OnDisk,
}

struct Daemon {
    opts: Options,
    metrics: Arc<Metrics>,
    cfg: Config,
    file: ConfigFile,
    /// The node as last read, with what [`Memory`] knows filled in.
    inv: Inventory,
    memory: Memory,
    /// What the kubelet has assigned (`None`: PodResources not answering).
    alloc: Option<Allocations>,
    running: BTreeMap<String, Running>,
    /// Pools whose socket could not be bound (the kubelet dir was gone, say):
    /// served again on the next kubelet-dir event or rescan, never dropped.
    unserved: BTreeMap<String, Pool>,
    /// CDI specs of pools no longer served, kept while their devices exist.
    retired: BTreeMap<String, Retired>,
    died_tx: mpsc::UnboundedSender<(String, u64)>,
    generation: u64,
    /// The kubelet instance of `kubelet.sock` as last seen, for the
    /// registration tasks.
    kubelet_tx: watch::Sender<Option<Instance>>,
    /// Runs the reads of the node.
    walker: Walker,
    /// A read of the node did not complete: the next link event walks the
    /// whole node, since what it missed is unknown.
    missed: bool,
}

/// What a rescan reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scan {
    /// Every function.
    Node,
    /// These functions (a PF's own directory, or a VF), as `(PF, function)`;
    /// a PF whose VFs changed in number is walked whole.
    Functions(BTreeSet<(PciAddr, PciAddr)>),
}

/// Re-reads `fns` in `inv` (their PF whole when a function cannot be re-read
/// alone); returns the inventory and the PFs that changed. Blocking: run by
/// the [`Walker`].
fn rescan_functions(
    roots: &Roots,
    mut inv: Inventory,
    fns: BTreeSet<(PciAddr, PciAddr)>,
) -> (Inventory, BTreeSet<PciAddr>) {
    let mut touched = BTreeSet::new();
    let mut whole = BTreeSet::new();
    for (pf, f) in fns {
        touched.insert(pf);
        if !nic::discover::rescan_function(roots, nodewatch::scope(), &mut inv, f) {
            whole.insert(pf);
        }
    }
    for pf in whole {
        let part = nic::discover::discover_pf(roots, nodewatch::scope(), pf);
        inv.replace_pf(pf, part);
    }
    (inv, touched)
}

/// The config file, parsed and checked against the node's RDMA netns mode
/// (read from the `ib_core` module parameter by `walker`; unknown when that
/// read does not complete, which refuses nothing).
async fn checked<F: Future<Output = ()>>(
    loaded: Result<(ConfigFile, Config), ConfigError>,
    roots: &Roots,
    walker: &Walker,
    stop: &mut Stop<F>,
) -> Result<(ConfigFile, Config), ConfigError> {
    let (file, cfg) = loaded?;
    let roots = roots.clone();
    let mode = match walker
        .run("netns mode", move || nic::vfdev::netns_mode_from_sysfs(&roots), stop.wait())
        .await
    {
        Walked::Done(m) => m,
        _ => None,
    };
    cfg.check_netns(mode)?;
    Ok((file, cfg))
}

/// Runs until `shutdown` resolves, then cleans up and returns `Ok`. It
/// resolves the loop and any read of the node it is waiting for.
pub async fn run(mut opts: Options, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let mut stop = Stop::new(shutdown);
    let walker = Walker::new(opts.rescan_deadline);
    let (file, cfg) =
        checked(ConfigFile::load(opts.config.as_deref()), &opts.roots, &walker, &mut stop).await?;
    if let Some(root) = &cfg.kubelet_root {
        opts.kubelet_dir = root.join("device-plugins");
        if opts.pod_resources.is_some() {
            opts.pod_resources = Some(root.join("pod-resources/kubelet.sock"));
        }
        tracing::info!(kubelet_dir = %opts.kubelet_dir.display(), "kubeletRootDir from the config");
    }
    let metrics = Arc::new(Metrics::default());
    metrics.watch_walks(walker.walks());
    if let Some(addr) = opts.metrics_addr {
        let (local, fut) = crate::metrics::serve(addr, metrics.clone())
            .await
            .map_err(|source| DaemonError::Metrics { addr, source })?;
        tracing::info!(%local, "metrics listening");
        tokio::spawn(fut);
    }
    std::fs::create_dir_all(&opts.kubelet_dir)
        .map_err(|source| DaemonError::Watch { path: opts.kubelet_dir.clone(), source })?;
    let mut kubelet_events = kubelet::watch_dir(&opts.kubelet_dir)
        .map_err(|source| DaemonError::Watch { path: opts.kubelet_dir.clone(), source })?;
    let period = cfg.rescan_interval.unwrap_or(opts.rescan_interval);
    metrics.set_stale_after(stale_after(period, walker.deadline()));
    let mut node = NodeWatch::start(opts.link_events, 1024, opts.config.as_deref(), period);
    let mut kubelet_alloc =
        opts.pod_resources.clone().map(|p| poll_pod_resources(p, opts.pod_resources_interval));
    let (died_tx, mut died_rx) = mpsc::unbounded_channel();
    let kubelet_tx = watch::Sender::new(registration::instance(&opts.kubelet_dir));
    let mut d = Daemon {
        opts,
        metrics,
        cfg,
        file,
        inv: Inventory::default(),
        memory: Memory::default(),
        alloc: None,
        running: BTreeMap::new(),
        unserved: BTreeMap::new(),
        retired: BTreeMap::new(),
        died_tx,
        generation: 0,
        kubelet_tx,
        walker,
        missed: false,
    };

    d.adopt_cdi_specs();
    d.inv = d.walk_node(&mut stop).await.unwrap_or_default();
    if stop.fired {
        // Stopped during the first walk: nothing is served yet.
        return Ok(());
    }
    let plan = pools::plan_with(&d.inv, &d.cfg, &Allocations::default());
    for pool in plan.pools {
        d.start_or_keep(pool);
    }
    d.sync_retired();
    give_back_freed_memory();

    while !stop.fired {
        tokio::select! {
            _ = stop.wait() => break,
            w = node.next() => match node.settle(w).await {
                Wake::Timer => d.rescan(Scan::Node, "timer", &mut stop).await,
                Wake::Links(evs) => {
                    let scan = d.scan_for(&evs);
                    d.rescan(scan, "link event", &mut stop).await;
                }
                Wake::ConfigDir => {
                    if d.maybe_reload(&mut stop).await {
                        let period = d.cfg.rescan_interval.unwrap_or(d.opts.rescan_interval);
                        d.metrics.set_stale_after(stale_after(period, d.walker.deadline()));
                        node.set_period(period);
                    }
                }
            },
            Some(ev) = kubelet_events.recv() => d.on_kubelet_dir(ev),
            Some(a) = nodewatch::recv_opt(&mut kubelet_alloc) => d.on_allocations(a),
            Some((name, generation)) = died_rx.recv() => d.on_died(name, generation),
        }
    }
    d.stop_all().await;
    Ok(())
}

/// Asks PodResources every `every` on its own task (a kubelet that hangs
/// never stalls the event loop); sends `None` when it does not answer.
fn poll_pod_resources(socket: PathBuf, every: Duration) -> mpsc::Receiver<Option<Allocations>> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut last_err: Option<String> = None;
        loop {
            let r = podresources::list(&socket, Duration::from_secs(5)).await;
            let sent = match r {
                Ok(a) => {
                    if last_err.take().is_some() {
                        tracing::info!(socket = %socket.display(), "PodResources answers again");
                    }
                    tx.send(Some(a)).await
                }
                Err(e) => {
                    let msg = nic::error_chain(&e);
                    if last_err.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "PodResources unavailable: allocated devices counted from what the host shows");
                    }
                    last_err = Some(msg);
                    tx.send(None).await
                }
            };
            if sent.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    rx
}

impl Daemon {
    /// Which functions the link events concern (a PF's link state is read
    /// from the PF, a VF's from the VF); the whole node when one names a
    /// netdev the last walk did not see (new VFs, a VF back from a pod) or
    /// events were lost.
    fn scan_for(&self, evs: &[RtnlEvent]) -> Scan {
        if self.missed {
            return Scan::Node;
        }
        let mut fns = BTreeSet::new();
        for e in evs {
            let RtnlEvent::Link(l) = e else { return Scan::Node };
            match l.name.as_deref().and_then(|n| self.inv.function_of_netdev(n)) {
                Some(f) => {
                    fns.insert(f);
                }
                None => return Scan::Node,
            }
        }
        Scan::Functions(fns)
    }

    /// Binds and serves a pool, writes its CDI spec, and starts its registration.
    fn start_pool(&mut self, pool: Pool) -> Result<(), ServeError> {
        let name = pool.resource_name();
        let c = &pool.config;
        let sock = names::socket_name(&self.opts.kubelet_dir, &c.prefix, &c.name).ok_or_else(|| {
            ServeError::PathTooLong { resource: name.clone(), dir: self.opts.kubelet_dir.clone() }
        })?;
        let socket = self.opts.kubelet_dir.join(&sock);
        let listener =
            server::bind(&socket).map_err(|source| ServeError::Bind { path: socket.clone(), source })?;
        let (tx, rx) = watch::channel(Arc::new(pool.clone()));
        let (closing, closing_rx) = watch::channel(false);
        let svc = PoolService::new(rx, closing_rx, self.opts.devinfo_dir.clone(), self.metrics.clone());
        let streams = svc.streams();
        self.metrics.set_served(&name, Some(streams.clone()));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        self.generation += 1;
        let generation = self.generation;
        let died = self.died_tx.clone();
        let task_name = name.clone();
        let task = tokio::spawn(async move {
            let res = server::serve(listener, svc, async {
                let _ = stop_rx.await;
            })
            .await;
            // Whether it failed or stopped, the loop decides if it was wanted.
            if let Err(e) = &res {
                tracing::error!(pool = %task_name, error = %e, "gRPC server ended with an error");
            }
            let _ = died.send((task_name, generation));
        });
        tracing::info!(pool = %name, socket = %socket.display(), devices = pool.devices.len(), "serving");
        // After binding, before registering: the kubelet cannot Allocate before it
        // knows us, so the CDI spec is in place by the first Allocate. It starts
        // from what is on disk (a previous run's spec, a retired one).
        let last = match self.retired.remove(&name) {
            Some(r) => r.disk,
            None if std::fs::symlink_metadata(cdi::pool::cdi_path(&self.opts.cdi_dir, &pool)).is_ok() => {
                OnDisk::Foreign
            }
            None => OnDisk::Absent,
        };
        let cdi = self.sync_cdi(&pool, last);
        self.metrics.set_pool(&pool);
        let registrar = tokio::spawn(registration::run(Registrar {
            kubelet_dir: self.opts.kubelet_dir.clone(),
            endpoint: sock,
            resource: name.clone(),
            streams,
            kubelet: self.kubelet_tx.subscribe(),
            timing: self.opts.registration,
            metrics: self.metrics.clone(),
        }));
        self.running.insert(
            name,
            Running {
                config: pool.config,
                tx,
                closing,
                stop: Some(stop_tx),
                task,
                registrar,
                socket,
                generation,
                cdi,
            },
        );
        Ok(())
    }

    /// Brings the CDI spec of `pool` in line with the node (devices gone
    /// from it dropped, devices whose edits cannot be computed now kept as
    /// written, no file when no device is left) and returns what is on disk
    /// now.
    fn sync_cdi(&self, pool: &Pool, last: OnDisk) -> OnDisk {
        let on_node = pools::OnNode::new(&self.inv);
        let fresh = cdi::pool::cdi_devices(pool, |d| on_node.has(d));
        let path = cdi::pool::cdi_path(&self.opts.cdi_dir, pool);
        let synced = cdi::pool::sync(&path, pool.config.cdi_kind(), fresh, last, &on_node);
        logged(&pool.resource_name(), &path, synced)
    }

    /// Takes the CDI specs of ours on disk (a previous run's, see
    /// [`cdi::pool::read_ours`]) as retired: a configured pool starts from its
    /// own ([`Self::start_pool`]); one no pool owns any more follows the node
    /// until none of its devices is left ([`Self::sync_retired`]).
    fn adopt_cdi_specs(&mut self) {
        let mut prefixes: BTreeSet<String> = self.cfg.pools.iter().map(|p| p.prefix.clone()).collect();
        prefixes.insert(crate::DEFAULT_PREFIX.to_string());
        let (found, warnings) = cdi::pool::read_ours(&self.opts.cdi_dir, &prefixes);
        for w in warnings {
            tracing::warn!("{w}");
        }
        for f in found {
            if !self.cfg.pools.iter().any(|p| p.resource_name() == f.resource) {
                tracing::info!(pool = %f.resource, path = %f.path.display(), devices = f.names.len(), "CDI spec of a pool no longer configured: kept while its devices are on the node");
            }
            let disk = OnDisk::read(f.names, &f.bytes);
            self.retired.insert(f.resource, Retired { path: f.path, kind: f.kind, disk });
        }
    }

    /// Publishes the kubelet instance `kubelet.sock` belongs to now; the
    /// registration tasks act on a change only.
    fn look_at_kubelet(&self) {
        let now = registration::instance(&self.opts.kubelet_dir);
        self.kubelet_tx.send_if_modified(|seen| {
            let changed = *seen != now;
            if changed && now.is_some() {
                tracing::info!("kubelet.sock is a new kubelet: registering every pool with it");
            } else if changed {
                tracing::info!("kubelet.sock is gone: waiting for a kubelet");
            }
            *seen = now;
            changed
        });
    }

    /// Stops the pools `names` together: their streams end, their servers
    /// stop; whatever has not stopped by [`STOP_DEADLINE`] is aborted. Then
    /// sockets and device-info files go; CDI specs stay (retired).
    async fn stop_pools(&mut self, names: &[String]) {
        let mut stopping = Vec::new();
        for n in names {
            let Some(mut r) = self.running.remove(n) else { continue };
            r.registrar.abort();
            let _ = r.closing.send(true);
            if let Some(s) = r.stop.take() {
                let _ = s.send(());
            }
            stopping.push((n.clone(), r));
        }
        let deadline = tokio::time::Instant::now() + STOP_DEADLINE;
        for (_, r) in &mut stopping {
            if tokio::time::timeout_at(deadline, &mut r.task).await.is_err() {
                r.task.abort();
            }
        }
        for (name, r) in stopping {
            let _ = std::fs::remove_file(&r.socket);
            self.remove_pool_files(&name);
            if matches!(r.cdi, OnDisk::Ours { .. }) {
                let path = cdi::pool::cdi_path(&self.opts.cdi_dir, &r.tx.borrow());
                let kind = r.config.cdi_kind();
                self.retired.insert(name.clone(), Retired { path, kind, disk: r.cdi });
            }
            tracing::info!(pool = %name, "stopped");
        }
    }

    /// Device-info files and metrics of a pool that is going away (its CDI
    /// spec stays: see the module docs).
    fn remove_pool_files(&self, name: &str) {
        if let Err(e) = devinfo::remove_devinfo(&self.opts.devinfo_dir, name) {
            tracing::warn!(pool = %name, error = %format!("{e:#}"), "cannot remove device-info files");
        }
        self.metrics.remove_pool(name);
    }

    /// Shutdown: every pool stops; CDI specs stay for the containers that
    /// restart before (or without) the next daemon.
    async fn stop_all(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        self.stop_pools(&names).await;
        for n in std::mem::take(&mut self.unserved).into_keys() {
            self.remove_pool_files(&n);
        }
    }

    /// Retired pools' specs follow the node (each device kept while its
    /// hardware is there); one with no device left goes.
    fn sync_retired(&mut self) {
        let on_node = pools::OnNode::new(&self.inv);
        for (name, r) in std::mem::take(&mut self.retired) {
            if !matches!(r.disk, OnDisk::Ours { .. }) {
                continue;
            }
            let synced = cdi::pool::sync(&r.path, r.kind.clone(), BTreeMap::new(), r.disk, &on_node);
            let disk = logged(&name, &r.path, synced);
            if matches!(disk, OnDisk::Ours { .. }) {
                self.retired.insert(name, Retired { disk, ..r });
            }
        }
    }

    /// Specs of served pools that keep devices not computed from the node
    /// follow it on every rescan: such a device leaving changes no pool.
    fn sync_carried(&mut self) {
        let names: Vec<String> =
            self.running.iter().filter(|(_, r)| r.cdi.keeps()).map(|(n, _)| n.clone()).collect();
        for name in names {
            let Some(r) = self.running.get_mut(&name) else { continue };
            let pool = Pool::clone(&r.tx.borrow());
            let last = std::mem::take(&mut r.cdi);
            let cdi = self.sync_cdi(&pool, last);
            if let Some(r) = self.running.get_mut(&name) {
                r.cdi = cdi;
            }
        }
    }

    /// Starts a pool; if it cannot be served, keeps it for [`Self::retry_unserved`].
    fn start_or_keep(&mut self, pool: Pool) -> bool {
        let name = pool.resource_name();
        match self.start_pool(pool.clone()) {
            Ok(()) => {
                self.unserved.remove(&name);
                true
            }
            Err(e) => {
                if !self.unserved.contains_key(&name) {
                    tracing::error!(pool = %name, error = %format!("{e:#}"), "cannot serve pool; will retry");
                }
                self.metrics.set_pool(&pool);
                self.metrics.set_served(&name, None);
                self.unserved.insert(name, pool);
                false
            }
        }
    }

    /// Serves the pools that could not be served before.
    fn retry_unserved(&mut self) {
        for (name, pool) in std::mem::take(&mut self.unserved) {
            if self.start_or_keep(pool) {
                tracing::info!(pool = %name, "serving again");
            }
        }
    }

    /// Re-serves a pool on a fresh socket (it was deleted, or its server
    /// died); the new server registers on its own.
    fn restart_pool(&mut self, name: &str) {
        let Some(mut r) = self.running.remove(name) else { return };
        r.registrar.abort();
        let _ = r.closing.send(true);
        if let Some(s) = r.stop.take() {
            let _ = s.send(());
        }
        r.task.abort();
        let pool = Pool::clone(&r.tx.borrow());
        // Its spec is current: carried over rather than rewritten.
        let path = cdi::pool::cdi_path(&self.opts.cdi_dir, &pool);
        let kind = pool.config.cdi_kind();
        self.retired.insert(name.to_string(), Retired { path, kind, disk: r.cdi });
        self.start_or_keep(pool);
    }

    /// Any change in the kubelet dir: pools whose socket is gone (a kubelet
    /// restart removes them all) are served again, pools that could not be
    /// served are tried again, and `kubelet.sock` is looked at, in that
    /// order, so a new kubelet finds every socket served when it is told.
    fn on_kubelet_dir(&mut self, ev: DirEvent) {
        if let DirEvent::Deleted(f) = &ev {
            tracing::debug!(file = %f, "deleted from the kubelet dir");
        }
        let missing: Vec<String> =
            self.running.iter().filter(|(_, r)| !r.socket.exists()).map(|(n, _)| n.clone()).collect();
        for n in missing {
            tracing::info!(pool = %n, "socket deleted (kubelet restart?): serving it again");
            self.restart_pool(&n);
        }
        self.retry_unserved();
        self.look_at_kubelet();
    }

    fn on_died(&mut self, name: String, generation: u64) {
        let alive = self.running.get(&name).is_some_and(|r| r.generation == generation);
        if alive {
            tracing::warn!(pool = %name, "gRPC server stopped unexpectedly: restarting it");
            self.restart_pool(&name);
        }
    }

    fn on_allocations(&mut self, a: Option<Allocations>) {
        self.metrics.set_allocations(a.as_ref());
        if a != self.alloc {
            self.alloc = a;
            self.update_pools("kubelet allocations");
        }
    }

    /// Walks the whole node with the [`Walker`]; `None` when the walk did not
    /// complete (the caller keeps what it knew).
    async fn walk_node<F: Future<Output = ()>>(&mut self, stop: &mut Stop<F>) -> Option<Inventory> {
        let roots = self.opts.roots.clone();
        let job = move || nic::discover::discover_scoped(&roots, nodewatch::scope());
        let Walked::Done(mut inv) = self.walker.run("node walk", job, stop.wait()).await else {
            self.missed = true;
            return None;
        };
        self.missed = false;
        self.memory.observe(&mut inv);
        Some(inv)
    }

    /// Re-reads the functions a link event named, on a copy of the inventory:
    /// a read that does not complete leaves the inventory as it was.
    async fn walk_functions<F: Future<Output = ()>>(
        &mut self,
        fns: BTreeSet<(PciAddr, PciAddr)>,
        stop: &mut Stop<F>,
    ) -> Option<Inventory> {
        let (roots, inv) = (self.opts.roots.clone(), self.inv.clone());
        let job = move || rescan_functions(&roots, inv, fns);
        let Walked::Done((mut inv, touched)) = self.walker.run("link event rescan", job, stop.wait()).await
        else {
            self.missed = true;
            return None;
        };
        for p in inv.pfs.iter_mut().filter(|p| touched.contains(&p.pci)) {
            self.memory.observe_pf(p);
        }
        Some(inv)
    }

    /// Reads the node (or the functions `scan` names) again and brings the
    /// pools and CDI specs in line; a read that does not complete changes
    /// nothing (the pools keep what was known).
    async fn rescan<F: Future<Output = ()>>(&mut self, scan: Scan, why: &str, stop: &mut Stop<F>) {
        let whole_node = matches!(scan, Scan::Node);
        let walked = match scan {
            Scan::Node => self.walk_node(stop).await,
            Scan::Functions(fns) => self.walk_functions(fns, stop).await,
        };
        let Some(inv) = walked else { return };
        self.inv = inv;
        self.update_pools(why);
        self.sync_carried();
        self.sync_retired();
        self.retry_unserved();
        // The safety net for a kubelet.sock change inotify did not report.
        self.look_at_kubelet();
        if whole_node {
            give_back_freed_memory();
        }
    }

    /// Plans the pools from the current inventory and allocations and hands
    /// every change to its server.
    fn update_pools(&mut self, why: &str) {
        let empty = Allocations::default();
        let plan = pools::plan_with(&self.inv, &self.cfg, self.alloc.as_ref().unwrap_or(&empty));
        for mut pool in plan.pools {
            let name = pool.resource_name();
            if let Some(u) = self.unserved.get_mut(&name) {
                *u = pool;
                continue;
            }
            let Some(r) = self.running.get(&name) else { continue };
            let prev = r.tx.borrow().clone();
            pools::carry_missing(&prev, &mut pool, &self.inv);
            if *prev == pool {
                continue;
            }
            log_changes(&prev, &pool, why);
            let last = self.running.get_mut(&name).map(|r| std::mem::take(&mut r.cdi)).unwrap_or_default();
            let cdi = self.sync_cdi(&pool, last);
            self.metrics.set_pool(&pool);
            let Some(r) = self.running.get_mut(&name) else { continue };
            r.cdi = cdi;
            r.tx.send_replace(Arc::new(pool));
        }
        self.metrics.set_allocations(self.alloc.as_ref());
    }

    /// Reloads a changed config; true when it took effect.
    async fn maybe_reload<F: Future<Output = ()>>(&mut self, stop: &mut Stop<F>) -> bool {
        let Some(loaded) = self.file.changed() else { return false };
        let (file, cfg) = match checked(loaded, &self.opts.roots, &self.walker, stop).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "config changed but is invalid; keeping the running pools");
                return false;
            }
        };
        let wanted = cfg.kubelet_root.as_ref().map(|r| r.join("device-plugins"));
        if wanted.as_ref().is_some_and(|w| *w != self.opts.kubelet_dir) {
            tracing::error!(
                now = %self.opts.kubelet_dir.display(),
                wanted = ?wanted,
                "kubeletRootDir changed: restart the daemon to serve another kubelet; keeping the running pools"
            );
            return false;
        }
        tracing::info!("config changed: reloading pools");
        self.cfg = cfg;
        self.file.accept(file);
        let wanted: BTreeMap<String, PoolConfig> =
            self.cfg.pools.iter().map(|p| (p.resource_name(), p.clone())).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(n, r)| wanted.get(*n) != Some(&r.config))
            .map(|(n, _)| n.clone())
            .collect();
        self.stop_pools(&stale).await;
        let gone: Vec<String> = self.unserved.keys().filter(|n| !wanted.contains_key(*n)).cloned().collect();
        for n in gone {
            if self.unserved.remove(&n).is_some() {
                self.remove_pool_files(&n);
            }
        }
        if let Some(inv) = self.walk_node(stop).await {
            self.inv = inv;
        }
        let empty = Allocations::default();
        let plan = pools::plan_with(&self.inv, &self.cfg, self.alloc.as_ref().unwrap_or(&empty));
        for pool in plan.pools {
            let name = pool.resource_name();
            if self.running.contains_key(&name) {
                continue;
            }
            self.start_or_keep(pool);
        }
        self.update_pools("config reload");
        true
    }
}

/// Returns the memory a walk of the node and a rewrite of its CDI specs freed
/// to the system, a moment later and off the daemon's task. Those are bursts
/// of many small allocations (a JSON value per device); glibc keeps freed
/// pages resident wherever a longer-lived allocation sits between them, which
/// left 4.6 MiB of a 1024-VF daemon's 13.2 MiB of anonymous memory free but
/// resident (bench `daemon`, VmRSS target 20 MiB). Done at once, the trim
/// delayed the first ListAndWatch by 30 ms. Other C libraries have no such
/// call and need none.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // SAFETY: malloc_trim only releases free heap pages; no Rust object is touched.
        let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
    });
}

/// What a CDI spec sync did, logged; returns what is on disk now.
fn logged(pool: &str, path: &Path, (disk, done): (OnDisk, Synced)) -> OnDisk {
    match done {
        Synced::Removed => {
            tracing::info!(pool, path = %path.display(), "no device of the pool left on the node: CDI spec removed");
        }
        // What was there before is still there: the next sync tries again.
        Synced::Failed(e) => tracing::warn!(pool, error = %format!("{e:#}"), "cannot write CDI spec"),
        Synced::Unchanged | Synced::Written => {}
    }
    disk
}

fn log_changes(prev: &Pool, next: &Pool, why: &str) {
    let name = next.resource_name();
    for d in &next.devices {
        match prev.device(&d.id) {
            None => tracing::info!(pool = %name, device = %d.id, why, "device added"),
            Some(p) if p.health != d.health => match &d.health {
                crate::health::Health::Healthy => {
                    tracing::info!(pool = %name, device = %d.id, why, "device healthy again");
                }
                crate::health::Health::Unhealthy(r) => {
                    tracing::warn!(pool = %name, device = %d.id, reason = %r, why, "device unhealthy");
                }
            },
            Some(p) if p.in_use != d.in_use => {
                tracing::info!(pool = %name, device = %d.id, in_use = d.in_use, why, "device use changed");
            }
            Some(_) => {}
        }
    }
    for d in &prev.devices {
        if next.device(&d.id).is_none() {
            tracing::info!(pool = %name, device = %d.id, why, "device removed");
        }
    }
}
