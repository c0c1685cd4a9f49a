//! `/metrics` (Prometheus text format 0.0.4), `/healthz` and `/livez` on a
//! tiny HTTP/1.1 server on tokio.
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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::inuse::Allocations;
use crate::pools::Pool;
use crate::registration::State;
use crate::server::Streams;

/// Histogram bucket upper bounds, seconds.
const BUCKETS: [f64; 9] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1];

#[derive(Debug, Default, Clone)]
struct PoolMetrics {
    capacity: usize,
    healthy: usize,
    /// Devices a pod visibly holds on the host.
    held: usize,
    ids: std::collections::BTreeSet<String>,
    /// Devices the kubelet lists as assigned (None: PodResources unavailable).
    assigned: Option<usize>,
    failures: u64,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
    /// ListAndWatch streams of the served socket (None: not served).
    streams: Option<watch::Receiver<Streams>>,
    /// Registration with the kubelet (None: not served, so not tried).
    registration: Option<State>,
    registrations: u64,
    registration_failures: u64,
}

/// Shared metrics and health registry.
#[derive(Debug, Default)]
pub struct Metrics {
    pools: Mutex<BTreeMap<String, PoolMetrics>>,
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
        self.with(pool, |m| {
            let s = took.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if s <= *b {
                    m.buckets[i] += 1;
                }
            }
            m.count += 1;
            m.sum += s;
        });
    }

    /// Records a refused Allocate.
    pub fn allocate_failed(&self, pool: &str) {
        self.with(pool, |m| m.failures += 1);
    }

    /// `/healthz`: whether every pool is served, registered and watched, and a
    /// line per pool saying so.
    pub fn health(&self) -> (bool, String) {
        let g = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok = !g.is_empty();
        let mut body = String::new();
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
        let gauge = |s: &mut String, name: &str, help: &str, f: &dyn Fn(&PoolMetrics) -> String| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (p, m) in g.iter() {
                let _ = writeln!(s, "{name}{{resource=\"{p}\"}} {}", f(m));
            }
        };
        gauge(&mut s, "kuberdma_pool_capacity", "Devices advertised by the pool.", &|m| {
            m.capacity.to_string()
        });
        gauge(&mut s, "kuberdma_pool_healthy", "Healthy devices of the pool.", &|m| m.healthy.to_string());
        gauge(
            &mut s,
            "kuberdma_pool_allocated",
            "Devices of the pool in use now (kubelet PodResources; without it, devices a pod holds on the host).",
            &|m| m.assigned.unwrap_or(m.held).to_string(),
        );
        gauge(
            &mut s,
            "kuberdma_pool_registered",
            "1 while the running kubelet has accepted the pool's registration and watches it (ListAndWatch open).",
            &|m| u8::from(m.registration == Some(State::Registered)).to_string(),
        );
        let counter = |s: &mut String, name: &str, help: &str, f: &dyn Fn(&PoolMetrics) -> u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for (p, m) in g.iter() {
                let _ = writeln!(s, "{name}{{resource=\"{p}\"}} {}", f(m));
            }
        };
        counter(&mut s, "kuberdma_pool_registrations_total", "Register calls the kubelet accepted.", &|m| {
            m.registrations
        });
        counter(
            &mut s,
            "kuberdma_pool_registration_failures_total",
            "Registrations that failed: refused, no answer, no ListAndWatch after an accepted Register, or a watch the kubelet ended.",
            &|m| m.registration_failures,
        );
        let _ = writeln!(s, "# HELP kuberdma_allocate_failures_total Allocate calls refused.\n# TYPE kuberdma_allocate_failures_total counter");
        for (p, m) in g.iter() {
            let _ = writeln!(s, "kuberdma_allocate_failures_total{{resource=\"{p}\"}} {}", m.failures);
        }
        let h = "kuberdma_allocate_duration_seconds";
        let _ = writeln!(s, "# HELP {h} Allocate latency.\n# TYPE {h} histogram");
        for (p, m) in g.iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(s, "{h}_bucket{{resource=\"{p}\",le=\"{b}\"}} {}", m.buckets[i]);
            }
            let _ = writeln!(s, "{h}_bucket{{resource=\"{p}\",le=\"+Inf\"}} {}", m.count);
            let _ = writeln!(s, "{h}_sum{{resource=\"{p}\"}} {}", m.sum);
            let _ = writeln!(s, "{h}_count{{resource=\"{p}\"}} {}", m.count);
        }
        s
    }
}

/// Binds `addr`; returns the bound address (port 0 picks one) and the serving
/// future: `/metrics`, `/healthz` (503 with the reasons when unhealthy), `/livez`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let route: Routes = Arc::new(move |path: &str| match path {
        "/metrics" => Some(("200 OK", "text/plain; version=0.0.4", metrics.render())),
        "/healthz" => Some(match metrics.health() {
            (true, body) => ("200 OK", "text/plain", body),
            (false, body) => ("503 Service Unavailable", "text/plain", body),
        }),
        "/livez" => Some(("200 OK", "text/plain", "ok\n".to_string())),
        _ => None,
    });
    serve_routes(addr, route).await
}

/// What one HTTP route answers: status line, content type, body.
pub type Answer = (&'static str, &'static str, String);

/// A path → answer function ([`serve_routes`]).
pub type Routes = Arc<dyn Fn(&str) -> Option<Answer> + Send + Sync>;

/// Serves GET routes over a tiny HTTP/1.1 responder: `route(path)` answers,
/// `None` is 404. The device plugin's ([`serve`]) and DRA mode's endpoints.
pub async fn serve_routes(
    addr: SocketAddr,
    route: Routes,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let fut = async move {
        loop {
            let mut sock = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // E.g. EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let route = route.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                let mut n = 0;
                // Read until the end of the request head (or 2 KiB, or 2 s).
                let read = async {
                    while n < buf.len() {
                        match sock.read(&mut buf[n..]).await {
                            Ok(0) | Err(_) => break,
                            Ok(k) => n += k,
                        }
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
                let head = String::from_utf8_lossy(&buf[..n]);
                // The route is the path alone: `/metrics?x=1` is `/metrics`, as the
                // operator's endpoints and Prometheus (`params:`) expect.
                let target = head.split_whitespace().nth(1).unwrap_or("");
                let path = target.split(['?', '#']).next().unwrap_or("");
                let (status, ctype, body) =
                    route(path).unwrap_or(("404 Not Found", "text/plain", "not found\n".to_string()));
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    };
    Ok((local, fut))
}
