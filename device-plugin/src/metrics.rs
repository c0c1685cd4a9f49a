//! `/metrics` (Prometheus text format 0.0.4) and `/healthz` on a tiny HTTP/1.1
//! server on tokio. Per pool: capacity, healthy, allocated (distinct device IDs
//! handed out since start that are still advertised; the device plugin API
//! never tells a plugin when a pod releases a device), Allocate failures and an
//! Allocate latency histogram.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::pools::Pool;

/// Histogram bucket upper bounds, seconds.
const BUCKETS: [f64; 9] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1];

#[derive(Debug, Default, Clone)]
struct PoolMetrics {
    capacity: usize,
    healthy: usize,
    ids: BTreeSet<String>,
    allocated: BTreeSet<String>,
    failures: u64,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Shared metrics registry.
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
            m.ids = pool.devices.iter().map(|d| d.id.clone()).collect();
            let ids = m.ids.clone();
            m.allocated.retain(|i| ids.contains(i));
        });
    }

    /// Forgets a removed pool.
    pub fn remove_pool(&self, resource: &str) {
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).remove(resource);
    }

    /// Records a successful Allocate.
    pub fn allocated(&self, pool: &str, ids: &[String], took: Duration) {
        self.with(pool, |m| {
            for id in ids {
                if m.ids.contains(id) {
                    m.allocated.insert(id.clone());
                }
            }
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
            "Distinct advertised devices handed out by Allocate since start.",
            &|m| m.allocated.len().to_string(),
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

/// Binds `addr`; returns the bound address (port 0 picks one) and the serving future.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
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
            let metrics = metrics.clone();
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
                let path = head.split_whitespace().nth(1).unwrap_or("");
                let (status, ctype, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                };
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

/// What one HTTP route answers: status line, content type, body.
pub type Answer = (&'static str, &'static str, String);

/// Serves GET routes over the same tiny HTTP/1.1 responder as [`serve`]:
/// `route(path)` answers, `None` is 404. DRA mode's `/metrics` and `/healthz`.
pub async fn serve_routes(
    addr: SocketAddr,
    route: Arc<dyn Fn(&str) -> Option<Answer> + Send + Sync>,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let fut = async move {
        loop {
            let mut sock = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let route = route.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                let mut n = 0;
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
                let path = head.split_whitespace().nth(1).unwrap_or("");
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
