//! `/metrics` (Prometheus text format 0.0.4), `/healthz` and `/livez`, served
//! by [`plumbing::http`].
//!
//! Per pool: capacity, healthy, allocated (in use now: the devices the
//! kubelet's PodResources API lists as assigned to containers; without that
//! socket, the devices a pod visibly holds on the host), Allocate failures and
//! an Allocate latency histogram. No `node` label: Prometheus adds it from the
//! scrape target.
//!
//! Per pool, registration with the kubelet ([`crate::registration`]):
//! `kuberdma_pool_registered` (1 while the kubelet now running has accepted
//! the pool and watches it), Register calls accepted and failures (refused,
//! failed, or accepted without a ListAndWatch following, or a watch the
//! kubelet ended).
//!
//! `/healthz` is 200 only when every pool is served on its socket, registered
//! with the kubelet and has a ListAndWatch stream open (the kubelet opens one
//! right after registering); otherwise 503, and the body says which pool lacks
//! what, with its registration state (`registration=retrying failures=3 …
//! error="…"`). `/livez` is 200 while the daemon answers at all.
//!
//! Reads of the node ([`crate::walks`]): the unix time of the last completed
//! one, how many overran their deadline, how many are stuck now. `/healthz`
//! is 503 too while one is stuck, or when none completed for longer than
//! the window the daemon sets ([`Metrics::set_stale_after`]): the pools then
//! show a node that may have changed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plumbing::histogram::Histogram;
use plumbing::http::Routes;
use plumbing::prometheus::{head, sample};
use tokio::sync::watch;

use crate::inuse::Allocations;
use crate::pools::Pool;
use crate::serving::{State, Streams};
use crate::walks::Walks;

/// Histogram bucket upper bounds, seconds.
const BUCKETS: [f64; 9] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1];

#[derive(Debug, Clone)]
struct PoolMetrics {
    capacity: usize,
    healthy: usize,
    /// Devices a pod visibly holds on the host.
    held: usize,
    ids: std::collections::BTreeSet<String>,
    /// Devices the kubelet lists as assigned (None: PodResources unavailable).
    assigned: Option<usize>,
    failures: u64,
    /// Allocate latency.
    latency: Histogram,
    /// ListAndWatch streams of the served socket (None: not served).
    streams: Option<watch::Receiver<Streams>>,
    /// Registration with the kubelet (None: not served, so not tried).
    registration: Option<State>,
    registrations: u64,
    registration_failures: u64,
}

impl Default for PoolMetrics {
    fn default() -> Self {
        Self {
            capacity: 0,
            healthy: 0,
            held: 0,
            ids: Default::default(),
            assigned: None,
            failures: 0,
            latency: Histogram::new(&BUCKETS),
            streams: None,
            registration: None,
            registrations: 0,
            registration_failures: 0,
        }
    }
}

/// Shared metrics and health registry.
#[derive(Debug, Default)]
pub struct Metrics {
    pools: Mutex<BTreeMap<String, PoolMetrics>>,
    /// Reads of the node, and how long without a completed one is stale
    /// (`None`: no periodic rescan, so no age is too old).
    walks: Mutex<(Option<Arc<Walks>>, Option<Duration>)>,
}

impl Metrics {
    fn with<R>(&self, pool: &str, f: impl FnOnce(&mut PoolMetrics) -> R) -> R {
        let mut g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        f(g.entry(pool.to_string()).or_default())
    }

    /// Records the pool's current devices.
    pub fn set_pool(&self, pool: &Pool) {
        self.with(&pool.resource_name(), |m| {
            m.capacity = pool.devices.len();
            m.healthy = pool.devices.iter().filter(|d| d.health.is_healthy()).count();
            m.held = pool.devices.iter().filter(|d| d.in_use).count();
            m.ids = pool.devices.iter().map(|d| d.id.clone()).collect();
        });
    }

    /// Records what the kubelet has assigned (`None`: PodResources unavailable).
    pub fn set_allocations(&self, alloc: Option<&Allocations>) {
        let mut g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        for (name, m) in g.iter_mut() {
            m.assigned = alloc
                .map(|a| a.of(name).map(|s| s.iter().filter(|i| m.ids.contains(*i)).count()).unwrap_or(0));
        }
    }

    /// The pool is served on its socket, with these streams (`None`: not served).
    pub fn set_served(&self, pool: &str, streams: Option<watch::Receiver<Streams>>) {
        self.with(pool, |m| {
            if streams.is_none() {
                m.registration = None;
            }
            m.streams = streams;
        });
    }

    /// Applies `f` to the pool served with `server`'s streams; a task of a
    /// server that is gone (a pool re-served or removed while it ran) changes
    /// nothing.
    fn with_server(&self, pool: &str, server: &watch::Receiver<Streams>, f: impl FnOnce(&mut PoolMetrics)) {
        let mut g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) =
            g.get_mut(pool).filter(|m| m.streams.as_ref().is_some_and(|s| s.same_channel(server)))
        {
            f(m);
        }
    }

    /// Where the registration of the pool served with `server`'s streams stands.
    pub fn set_registration(&self, pool: &str, server: &watch::Receiver<Streams>, state: State) {
        self.with_server(pool, server, |m| m.registration = Some(state));
    }

    /// The kubelet accepted a Register call of the pool.
    pub fn registration_accepted(&self, pool: &str, server: &watch::Receiver<Streams>) {
        self.with_server(pool, server, |m| m.registrations += 1);
    }

    /// A registration of the pool failed (refused, failed, not followed by a
    /// ListAndWatch, or its watch ended).
    pub fn registration_failed(&self, pool: &str, server: &watch::Receiver<Streams>) {
        self.with_server(pool, server, |m| m.registration_failures += 1);
    }

    /// Forgets a removed pool.
    pub fn remove_pool(&self, resource: &str) {
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).remove(resource);
    }

    /// Records a successful Allocate.
    pub fn allocated(&self, pool: &str, took: Duration) {
        self.with(pool, |m| m.latency.observe(took.as_secs_f64()));
    }

    /// Records a refused Allocate.
    pub fn allocate_failed(&self, pool: &str) {
        self.with(pool, |m| m.failures += 1);
    }

    /// Reports on `walks` (the daemon's reads of the node).
    pub fn watch_walks(&self, walks: Arc<Walks>) {
        self.walks.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(walks);
    }

    /// How long without a completed read of the node makes `/healthz` fail
    /// (`None`: never, as with no periodic rescan).
    pub fn set_stale_after(&self, after: Option<Duration>) {
        self.walks.lock().unwrap_or_else(|e| e.into_inner()).1 = after;
    }

    /// The `/healthz` line on reads of the node, and whether they are fresh.
    fn walks_health(&self) -> Option<(bool, String)> {
        let g = self.walks.lock().unwrap_or_else(|e| e.into_inner());
        Some(g.0.as_ref()?.health(g.1))
    }

    /// `/healthz`: whether every pool is served, registered and watched, and
    /// the node's reads are fresh; a line per pool, and one on the reads.
    pub fn health(&self) -> (bool, String) {
        let walks = self.walks_health();
        let g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok = !g.is_empty();
        let mut body = String::new();
        if let Some((fresh, line)) = walks {
            ok &= fresh;
            let _ = writeln!(body, "{line}");
        }
        if g.is_empty() {
            body.push_str("no pool\n");
        }
        for (name, m) in g.iter() {
            let streams = m.streams.as_ref().map(|s| s.borrow().open);
            let registered = m.registration == Some(State::Registered);
            let good = streams.is_some_and(|n| n > 0) && registered;
            ok &= good;
            let _ = writeln!(
                body,
                "{name}: {} served={} registered={registered} streams={} registration={}",
                if good { "ok" } else { "not ready" },
                streams.is_some(),
                streams.unwrap_or(0),
                m.registration.as_ref().map(|r| r.to_string()).unwrap_or_else(|| "none".into()),
            );
        }
        (ok, body)
    }

    /// Renders the Prometheus text exposition.
    pub fn render(&self) -> String {
        let g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = String::new();
        let mut family = |name: &str, kind: &str, help: &str, f: &dyn Fn(&PoolMetrics) -> String| {
            head(&mut s, name, kind, help);
            for (p, m) in g.iter() {
                sample(&mut s, name, &[("resource", p)], f(m));
            }
        };
        family("kuberdma_pool_capacity", "gauge", "Devices advertised by the pool.", &|m| {
            m.capacity.to_string()
        });
        family("kuberdma_pool_healthy", "gauge", "Healthy devices of the pool.", &|m| m.healthy.to_string());
        family(
            "kuberdma_pool_allocated",
            "gauge",
            "Devices of the pool in use now (kubelet PodResources; without it, devices a pod holds on the host).",
            &|m| m.assigned.unwrap_or(m.held).to_string(),
        );
        family(
            "kuberdma_pool_registered",
            "gauge",
            "1 while the running kubelet has accepted the pool's registration and watches it (ListAndWatch open).",
            &|m| u8::from(m.registration == Some(State::Registered)).to_string(),
        );
        family(
            "kuberdma_pool_registrations_total",
            "counter",
            "Register calls the kubelet accepted.",
            &|m| m.registrations.to_string(),
        );
        family(
            "kuberdma_pool_registration_failures_total",
            "counter",
            "Registrations that failed: refused, no answer, no ListAndWatch after an accepted Register, or a watch the kubelet ended.",
            &|m| m.registration_failures.to_string(),
        );
        family("kuberdma_allocate_failures_total", "counter", "Allocate calls refused.", &|m| {
            m.failures.to_string()
        });
        let h = "kuberdma_allocate_duration_seconds";
        head(&mut s, h, "histogram", "Allocate latency.");
        for (p, m) in g.iter() {
            m.latency.render(&mut s, h, &[("resource", p)]);
        }
        drop(g);
        self.render_walks(&mut s);
        s
    }

    fn render_walks(&self, s: &mut String) {
        let Some(w) = self.walks.lock().unwrap_or_else(|e| e.into_inner()).0.clone() else { return };
        w.render(s);
    }
}

/// The device plugin's routes: `/metrics`, `/healthz` (503 with the reasons
/// when unhealthy), `/livez`.
pub fn routes(metrics: Arc<Metrics>) -> Routes {
    let m = metrics.clone();
    Routes::daemon(move || m.render(), move || metrics.health())
}

/// Binds `addr`; returns the bound address (port 0 picks one) and the serving
/// future of [`routes`].
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    plumbing::http::bind(addr, routes(metrics)).await
}
