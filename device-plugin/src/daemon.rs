//! The daemon: one event loop owning every pool.
//!
//! Inputs: netlink link events (`RTNLGRP_LINK`) and a periodic rescan as the
//! safety net; inotify on the kubelet dir (kubelet restart → re-serve and
//! re-register, no polling); inotify on the config file's directory (reload;
//! unchanged pools keep serving); a server task that dies (restarted); the
//! shutdown signal (sockets, device-info files and CDI specs removed).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nic::{Inventory, Roots};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ConfigError, PoolConfig};
use crate::devinfo;
use crate::kubelet::{self, DirEvent, KUBELET_SOCKET};
use crate::metrics::Metrics;
use crate::pools::{self, Pool};
use crate::server::{self, PoolService};

/// Everything the daemon needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    /// Config file; `None`: the default pool.
    pub config: Option<PathBuf>,
    /// Where to read the node from.
    pub roots: Roots,
    /// Kubelet device plugin dir.
    pub kubelet_dir: PathBuf,
    /// Periodic rescan.
    pub rescan_interval: Duration,
    /// CDI spec dir.
    pub cdi_dir: PathBuf,
    /// Device-info dir.
    pub devinfo_dir: PathBuf,
    /// Metrics listen address.
    pub metrics_addr: Option<SocketAddr>,
    /// Subscribe to netlink link events (rescan on link changes).
    pub link_events: bool,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The config file is bad at startup.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A socket could not be served.
    #[error("cannot serve {path}")]
    Bind {
        /// Socket path.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
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

struct Running {
    config: PoolConfig,
    tx: watch::Sender<Arc<Pool>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    socket: PathBuf,
    generation: u64,
}

struct Daemon {
    opts: Options,
    metrics: Arc<Metrics>,
    cfg: Config,
    cfg_text: Option<String>,
    running: BTreeMap<String, Running>,
    /// Pools whose socket could not be bound (the kubelet dir was gone, say):
    /// served again on the next kubelet-dir event or rescan, never dropped.
    unserved: BTreeMap<String, Pool>,
    died_tx: mpsc::UnboundedSender<(String, u64)>,
    generation: u64,
}

async fn discover(roots: &Roots) -> Inventory {
    discover_scoped(roots, nic::discover::Scope::default()).await
}

async fn discover_scoped(roots: &Roots, scope: nic::discover::Scope) -> Inventory {
    let roots = roots.clone();
    tokio::task::spawn_blocking(move || nic::discover::discover_scoped(&roots, scope))
        .await
        .unwrap_or_default()
}

fn load_config(path: Option<&Path>) -> Result<(Config, Option<String>), ConfigError> {
    match path {
        None => Ok((Config::default_pools(), None)),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|source| ConfigError::Io { path: p.to_path_buf(), source })?;
            Ok((Config::parse(&text, p)?, Some(text)))
        }
    }
}

/// Runs until `shutdown` resolves, then cleans up and returns `Ok`.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()>) -> Result<(), DaemonError> {
    let (cfg, cfg_text) = load_config(opts.config.as_deref())?;
    let metrics = Arc::new(Metrics::default());
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
    let mut config_events = match opts.config.as_ref().and_then(|p| p.parent()) {
        Some(dir) => {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            match kubelet::watch_dir(dir) {
                Ok(rx) => Some(rx),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch config dir; reload disabled");
                    None
                }
            }
        }
        None => None,
    };
    let mut link_events = if opts.link_events {
        match nic::netlink::events::subscribe(&[nic::netlink::events::Group::Link], 256) {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(error = %e, "no netlink link events; relying on the periodic rescan");
                None
            }
        }
    } else {
        None
    };
    let (died_tx, mut died_rx) = mpsc::unbounded_channel();
    let mut d = Daemon {
        opts,
        metrics,
        cfg,
        cfg_text,
        running: BTreeMap::new(),
        unserved: BTreeMap::new(),
        died_tx,
        generation: 0,
    };

    // Serve first from a walk without GID tables (the largest part of a walk,
    // and nothing the kubelet sees); the full walk follows at once and only
    // Allocate, which hands out GID indexes, waits for it.
    let scope = nic::discover::Scope { gid_tables: false, ..Default::default() };
    let inv = discover_scoped(&d.opts.roots, scope).await;
    let plan = pools::plan(&inv, &d.cfg);
    for pool in plan.pools {
        d.start_pool(pool)?;
    }
    d.register_all();
    d.rescan("GID tables").await;

    let mut tick = tokio::time::interval(d.opts.rescan_interval.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate; we just scanned
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => d.rescan("timer").await,
            Some(ev) = recv_opt(&mut link_events) => {
                tracing::debug!(?ev, "link event");
                // Coalesce a burst (numvfs changes create many links at once).
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(rx) = link_events.as_mut() { while rx.try_recv().is_ok() {} }
                d.rescan("link event").await;
            }
            Some(ev) = kubelet_events.recv() => d.on_kubelet_dir(ev),
            Some(_) = recv_opt(&mut config_events) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(rx) = config_events.as_mut() { while rx.try_recv().is_ok() {} }
                d.maybe_reload().await;
            }
            Some((name, generation)) = died_rx.recv() => d.on_died(name, generation),
        }
    }
    d.stop_all().await;
    Ok(())
}

async fn recv_opt<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

impl Daemon {
    fn socket_path(&self, c: &PoolConfig) -> PathBuf {
        self.opts.kubelet_dir.join(pools::socket_name(c))
    }

    /// Binds and serves a pool, writes its CDI spec. Registration is separate.
    fn start_pool(&mut self, pool: Pool) -> Result<(), DaemonError> {
        let name = pool.resource_name();
        let socket = self.socket_path(&pool.config);
        let (tx, rx) = watch::channel(Arc::new(pool.clone()));
        let listener =
            server::bind(&socket).map_err(|source| DaemonError::Bind { path: socket.clone(), source })?;
        let svc = PoolService::new(rx, self.opts.devinfo_dir.clone(), self.metrics.clone());
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
        // knows us, so the CDI spec is in place by the first Allocate.
        if let Err(e) = devinfo::write_cdi(&self.opts.cdi_dir, &pool) {
            tracing::warn!(pool = %name, error = %e, "cannot write CDI spec");
        }
        self.metrics.set_pool(&pool);
        self.running
            .insert(name, Running { config: pool.config, tx, stop: Some(stop_tx), task, socket, generation });
        Ok(())
    }

    fn register(&self, name: &str) {
        let Some(r) = self.running.get(name) else { return };
        let dir = self.opts.kubelet_dir.clone();
        let endpoint = r.socket.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let resource = name.to_string();
        tokio::spawn(async move {
            if !dir.join(KUBELET_SOCKET).exists() {
                tracing::info!(pool = %resource, "kubelet.sock absent; will register when it appears");
                return;
            }
            // The kubelet creates its socket just before it listens: retry briefly.
            for attempt in 0..5u64 {
                match kubelet::register(&dir, &endpoint, &resource).await {
                    Ok(()) => {
                        tracing::info!(pool = %resource, endpoint, "registered with the kubelet");
                        return;
                    }
                    Err(e) if attempt < 4 => {
                        tracing::debug!(pool = %resource, error = %e, "register failed, retrying");
                        tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await;
                    }
                    Err(e) => tracing::warn!(pool = %resource, error = %e, "register failed"),
                }
            }
        });
    }

    fn register_all(&self) {
        for name in self.running.keys() {
            self.register(name);
        }
    }

    async fn stop_pool(&mut self, name: &str) {
        let Some(mut r) = self.running.remove(name) else { return };
        if let Some(s) = r.stop.take() {
            let _ = s.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut r.task).await.is_err() {
            r.task.abort();
        }
        let _ = std::fs::remove_file(&r.socket);
        let pool = r.tx.borrow().clone();
        self.remove_pool_files(name, &pool);
        tracing::info!(pool = %name, "stopped");
    }

    /// Device-info files, CDI spec and metrics of a pool that is going away.
    fn remove_pool_files(&self, name: &str, pool: &Pool) {
        if let Err(e) = devinfo::remove_devinfo(&self.opts.devinfo_dir, name) {
            tracing::warn!(pool = %name, error = %e, "cannot remove device-info files");
        }
        let _ = std::fs::remove_file(devinfo::cdi_path(&self.opts.cdi_dir, pool));
        self.metrics.remove_pool(name);
    }

    async fn stop_all(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for n in names {
            self.stop_pool(&n).await;
        }
        for (n, pool) in std::mem::take(&mut self.unserved) {
            self.remove_pool_files(&n, &pool);
        }
    }

    /// Starts a pool; if its socket cannot be bound, keeps it for [`Self::retry_unserved`].
    fn start_or_keep(&mut self, pool: Pool) -> bool {
        let name = pool.resource_name();
        match self.start_pool(pool.clone()) {
            Ok(()) => {
                self.unserved.remove(&name);
                true
            }
            Err(e) => {
                if !self.unserved.contains_key(&name) {
                    tracing::error!(pool = %name, error = %e, "cannot serve pool; will retry");
                }
                self.unserved.insert(name, pool);
                false
            }
        }
    }

    /// Serves the pools that could not be bound before; returns the ones now served.
    fn retry_unserved(&mut self) -> Vec<String> {
        let mut started = vec![];
        for (name, pool) in std::mem::take(&mut self.unserved) {
            if self.start_or_keep(pool) {
                tracing::info!(pool = %name, "serving again");
                started.push(name);
            }
        }
        started
    }

    /// Re-serves a pool on a fresh socket (it was deleted, or its server died).
    fn restart_pool(&mut self, name: &str) {
        let Some(mut r) = self.running.remove(name) else { return };
        if let Some(s) = r.stop.take() {
            let _ = s.send(());
        }
        r.task.abort();
        let pool = Pool::clone(&r.tx.borrow());
        if self.start_or_keep(pool) {
            self.register(name);
        }
    }

    fn on_kubelet_dir(&mut self, ev: DirEvent) {
        // Every event may mean the directory is usable again. Pools served here
        // are registered below (Created(kubelet.sock)) or right away.
        let started = self.retry_unserved();
        if !matches!(&ev, DirEvent::Created(n) if n == KUBELET_SOCKET) {
            for n in &started {
                self.register(n);
            }
        }
        match ev {
            DirEvent::Created(n) if n == KUBELET_SOCKET => {
                tracing::info!("kubelet.sock appeared: registering every pool");
                // The kubelet removed our sockets before; make sure they are served.
                let missing: Vec<String> =
                    self.running.iter().filter(|(_, r)| !r.socket.exists()).map(|(n, _)| n.clone()).collect();
                for n in &missing {
                    self.restart_pool(n);
                }
                for n in self.running.keys().filter(|n| !missing.contains(n)) {
                    self.register(n);
                }
            }
            DirEvent::Deleted(f) => {
                let hit: Vec<String> = self
                    .running
                    .iter()
                    .filter(|(_, r)| {
                        r.socket.file_name().is_some_and(|s| s.to_string_lossy() == f) && !r.socket.exists()
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                for n in hit {
                    tracing::info!(pool = %n, "socket deleted (kubelet restart?): serving it again");
                    self.restart_pool(&n);
                }
            }
            DirEvent::Rescan => {
                let missing: Vec<String> =
                    self.running.iter().filter(|(_, r)| !r.socket.exists()).map(|(n, _)| n.clone()).collect();
                for n in missing {
                    self.restart_pool(&n);
                }
            }
            DirEvent::Created(_) => {}
        }
    }

    fn on_died(&mut self, name: String, generation: u64) {
        let alive = self.running.get(&name).is_some_and(|r| r.generation == generation);
        if alive {
            tracing::warn!(pool = %name, "gRPC server stopped unexpectedly: restarting it");
            self.restart_pool(&name);
        }
    }

    async fn rescan(&mut self, why: &str) {
        let inv = discover(&self.opts.roots).await;
        let plan = pools::plan(&inv, &self.cfg);
        for mut pool in plan.pools {
            let name = pool.resource_name();
            if let Some(u) = self.unserved.get_mut(&name) {
                *u = pool;
                continue;
            }
            let Some(r) = self.running.get(&name) else { continue };
            let prev = r.tx.borrow().clone();
            pools::carry_missing(&prev, &mut pool, &inv);
            if *prev == pool {
                continue;
            }
            log_changes(&prev, &pool, why);
            if let Err(e) = devinfo::write_cdi(&self.opts.cdi_dir, &pool) {
                tracing::warn!(pool = %name, error = %e, "cannot write CDI spec");
            }
            self.metrics.set_pool(&pool);
            r.tx.send_replace(Arc::new(pool));
        }
        for n in self.retry_unserved() {
            self.register(&n);
        }
    }

    async fn maybe_reload(&mut self) {
        let path = self.opts.config.clone();
        let text = path.as_deref().and_then(|p| std::fs::read_to_string(p).ok());
        if text.is_none() || text == self.cfg_text {
            return;
        }
        let (cfg, text) = match load_config(path.as_deref()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "config changed but is invalid; keeping the running pools");
                return;
            }
        };
        tracing::info!("config changed: reloading pools");
        self.cfg = cfg;
        self.cfg_text = text;
        let wanted: BTreeMap<String, PoolConfig> =
            self.cfg.pools.iter().map(|p| (p.resource_name(), p.clone())).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(n, r)| wanted.get(*n) != Some(&r.config))
            .map(|(n, _)| n.clone())
            .collect();
        for n in &stale {
            self.stop_pool(n).await;
        }
        let gone: Vec<String> = self.unserved.keys().filter(|n| !wanted.contains_key(*n)).cloned().collect();
        for n in gone {
            if let Some(pool) = self.unserved.remove(&n) {
                self.remove_pool_files(&n, &pool);
            }
        }
        let inv = discover(&self.opts.roots).await;
        let plan = pools::plan(&inv, &self.cfg);
        for pool in plan.pools {
            let name = pool.resource_name();
            if self.running.contains_key(&name) {
                continue;
            }
            if self.start_or_keep(pool) {
                self.register(&name);
            }
        }
        self.rescan("config reload").await;
    }
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
            Some(_) => {}
        }
    }
    for d in &prev.devices {
        if next.device(&d.id).is_none() {
            tracing::info!(pool = %name, device = %d.id, why, "device removed");
        }
    }
}
