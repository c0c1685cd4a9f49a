//! Liveness of the agent and the controller, their self-metrics, and the routes
//! of their `/metrics`, `/healthz` and `/livez` endpoint (every daemon's,
//! [`plumbing::http::Routes::daemon`]).
//!
//! Unhealthy (`/healthz` answers 503 with the reason) when the API server has
//! been unreachable for longer than the allowed silence, or when no pass has
//! succeeded for that long. Self-metrics: `kuberdma_<component>_last_success_timestamp_seconds`,
//! `kuberdma_<component>_pass_duration_seconds`, `kuberdma_api_errors_total{kind}`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use plumbing::http::Routes;
use plumbing::prometheus::{head, sample};
use tokio::net::TcpListener;

use crate::api::ApiRecord;

/// Error kinds always exported (at 0 until seen), so rate() works from the start.
pub const ERROR_KINDS: [&str; 11] = [
    "conflict",
    "throttled",
    "server",
    "transport",
    "forbidden",
    "unauthorized",
    "not_found",
    "gone",
    "invalid",
    "decode",
    "other",
];

#[derive(Debug)]
struct State {
    started: Instant,
    last_success: Option<(Instant, SystemTime)>,
    last_duration: Option<Duration>,
}

/// Health of one component, shared between its loop and the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct Health {
    component: &'static str,
    max_silence: Duration,
    state: Arc<Mutex<State>>,
    /// What the API server answered lately.
    pub api: ApiRecord,
}

impl Health {
    /// `component` is `agent` or `controller` (it names the metrics); unhealthy after
    /// `max_silence` without a successful pass or with the API server unreachable.
    pub fn new(component: &'static str, max_silence: Duration) -> Self {
        Self {
            component,
            max_silence,
            state: Arc::new(Mutex::new(State {
                started: Instant::now(),
                last_success: None,
                last_duration: None,
            })),
            api: ApiRecord::default(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// A pass succeeded after `took`.
    pub fn pass_ok(&self, took: Duration) {
        self.with(|s| {
            s.last_success = Some((Instant::now(), SystemTime::now()));
            s.last_duration = Some(took);
        });
    }

    /// A pass failed after `took`.
    pub fn pass_failed(&self, took: Duration) {
        self.with(|s| s.last_duration = Some(took));
    }

    /// `Ok` when healthy, else why not (every reason that applies).
    pub fn check(&self) -> Result<(), String> {
        let max = self.max_silence;
        let failing = self.api.failing();
        let mut why = Vec::new();
        self.with(|s| {
            let last = s.last_success.map(|(i, _)| i).unwrap_or(s.started);
            if last.elapsed() > max {
                let what =
                    if s.last_success.is_some() { "no successful pass" } else { "no successful pass yet" };
                why.push(format!(
                    "{what} for {}s (longer than {}s)",
                    last.elapsed().as_secs(),
                    max.as_secs()
                ));
            }
        });
        if let Some((since, err)) = &failing {
            if since.elapsed() > max {
                why.push(format!(
                    "API server unreachable for {}s (longer than {}s): {err}",
                    since.elapsed().as_secs(),
                    max.as_secs()
                ));
            } else if !why.is_empty() {
                why.push(format!("API server failing for {}s: {err}", since.elapsed().as_secs()));
            }
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }

    /// The self-metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let c = self.component;
        let mut o = String::new();
        let (last, took) = self.with(|s| (s.last_success.map(|(_, t)| t), s.last_duration));
        let name = format!("kuberdma_{c}_last_success_timestamp_seconds");
        head(&mut o, &name, "gauge", "Unix time of the last pass that completed without error.");
        let ts = last.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64());
        sample(&mut o, &name, &[], format_args!("{ts:.3}"));
        let name = format!("kuberdma_{c}_pass_duration_seconds");
        head(&mut o, &name, "gauge", "Duration of the last pass.");
        sample(&mut o, &name, &[], format_args!("{:.6}", took.map_or(0.0, |d| d.as_secs_f64())));
        let name = "kuberdma_api_errors_total";
        head(&mut o, name, "counter", "Failed Kubernetes API requests and watches, by kind.");
        let counts = self.api.snapshot();
        for k in ERROR_KINDS {
            sample(&mut o, name, &[("kind", k)], counts.get(k).copied().unwrap_or(0));
        }
        o
    }
}

/// What the endpoint serves.
#[derive(Clone)]
pub struct Endpoints {
    /// The full `/metrics` text.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// Behind `/healthz`.
    pub health: Health,
}

impl Endpoints {
    /// Every daemon's routes ([`Routes::daemon`]): `/metrics`, `/healthz` (200 `ok`,
    /// or 503 with the reason), `/livez`; 404 elsewhere.
    pub fn routes(self) -> Routes {
        let (metrics, health) = (self.metrics, self.health);
        Routes::daemon(
            move || metrics(),
            move || match health.check() {
                Ok(()) => (true, "ok\n".into()),
                Err(why) => (false, format!("{why}\n")),
            },
        )
    }
}

/// Serves [`Endpoints::routes`] on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Endpoints) {
    plumbing::http::serve(listener, endpoints.routes()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_after_silence_and_api_failure_healthy_again_after_success() {
        let h = Health::new("agent", Duration::from_millis(30));
        assert!(h.check().is_ok(), "fresh");
        std::thread::sleep(Duration::from_millis(40));
        assert!(h.check().unwrap_err().contains("no successful pass yet"));
        h.pass_ok(Duration::from_millis(5));
        assert!(h.check().is_ok());
        h.api.failed("transport", "connection refused".into());
        assert!(h.check().is_ok(), "not yet for long");
        std::thread::sleep(Duration::from_millis(40));
        let e = h.check().unwrap_err();
        assert!(e.contains("API server unreachable") && e.contains("connection refused"), "{e}");
        h.api.ok();
        h.pass_ok(Duration::from_millis(5));
        assert!(h.check().is_ok());
        let m = h.render();
        assert!(m.contains("kuberdma_api_errors_total{kind=\"transport\"} 1"), "{m}");
        assert!(m.contains("kuberdma_api_errors_total{kind=\"conflict\"} 0"), "{m}");
        assert!(m.contains("kuberdma_agent_pass_duration_seconds 0.005"), "{m}");
    }
}
