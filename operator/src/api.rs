//! Calls to the API server that can fail for a while, shared by the agent and the
//! controller: the error naming the operation, which errors pass on their own
//! (retried with jittered exponential backoff), and the error kinds counted in
//! `kuberdma_api_errors_total{kind}`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::jitter;

/// A Kubernetes API call that failed (after retries where it could pass).
#[derive(Debug, thiserror::Error)]
#[error("{op}")]
pub struct ApiError {
    /// What was being done, e.g. `apply rdmanodestates/node-a status`.
    pub op: String,
    /// The client error.
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// The HTTP status code when the server answered with an error.
    pub fn code(&self) -> Option<u16> {
        match &self.source {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }
}

/// Retry policy for API calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Upper bound of one delay.
    pub max: Duration,
    /// Attempts in all (≥ 1).
    pub attempts: u32,
    /// Each delay is shortened by a random part of up to this fraction (0 = exact
    /// delays), so a fleet of agents that failed together does not retry together.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial: Duration::from_millis(500), max: Duration::from_secs(8), attempts: 5, jitter: 0.5 }
    }
}

impl Backoff {
    /// The delay before attempt `n + 1` (n ≥ 1) without jitter: `initial · 2ⁿ⁻¹`, capped at `max`.
    pub fn base_delay(&self, n: u32) -> Duration {
        let mul = 1u32.checked_shl(n.saturating_sub(1).min(30)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(mul).min(self.max)
    }

    /// [`Backoff::base_delay`] with jitter applied.
    pub fn delay(&self, n: u32) -> Duration {
        jitter::shorten(self.base_delay(n), self.jitter)
    }
}

/// Whether an API error can pass on its own: conflict, throttling, server errors, transport.
pub fn is_retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 409 || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The `Retry-After` the server asked for (429/503), in seconds, from the
/// `metav1.Status` details (`details.retryAfterSeconds`).
fn retry_after(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) => {
            let secs = s.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            (secs > 0).then(|| Duration::from_secs(u64::from(secs)))
        }
        _ => None,
    }
}

/// The `kind` label of `kuberdma_api_errors_total` for a client error.
pub fn error_kind(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) => match s.code {
            401 => "unauthorized",
            403 => "forbidden",
            404 => "not_found",
            409 => "conflict",
            410 => "gone",
            400 | 422 => "invalid",
            429 => "throttled",
            500..=599 => "server",
            _ => "other",
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => "transport",
        kube::Error::SerdeError(_) => "decode",
        _ => "other",
    }
}

/// The `kind` of a watch failure (a 410 Gone ends the watch and forces a re-list).
pub fn watch_error_kind(e: &kube::runtime::watcher::Error) -> &'static str {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => error_kind(e),
        W::WatchError(s) if s.code == 410 => "gone",
        W::WatchError(s) => error_kind(&kube::Error::Api(s.clone())),
        W::NoResourceVersion => "other",
    }
}

/// What the API server answered lately, shared between the loops that make the
/// calls and the health endpoint: failed requests by kind, and since when (and
/// why) it has been failing with no success since.
#[derive(Debug, Clone, Default)]
pub struct ApiRecord {
    counts: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    failing: Arc<Mutex<Option<(Instant, String)>>>,
}

impl ApiRecord {
    /// A request or watch failed: counted under `kind`; the server counts as
    /// failing from now unless it already was.
    pub fn failed(&self, kind: &'static str, why: String) {
        if let Ok(mut m) = self.counts.lock() {
            *m.entry(kind).or_insert(0) += 1;
        }
        if let Ok(mut f) = self.failing.lock() {
            f.get_or_insert((Instant::now(), why));
        }
    }

    /// The server answered.
    pub fn ok(&self) {
        if let Ok(mut f) = self.failing.lock() {
            *f = None;
        }
    }

    /// Since when, and why, the server has been failing.
    pub fn failing(&self) -> Option<(Instant, String)> {
        self.failing.lock().ok().and_then(|f| f.clone())
    }

    /// Failed requests by kind so far.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// All failed requests so far.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

/// Runs `f` until it succeeds, fails for good, or the attempts run out, waiting
/// [`Backoff::delay`] (or the server's `Retry-After`, if longer) between attempts.
/// Every attempt is recorded in `record` as it happens.
pub async fn with_backoff<T, F, Fut>(
    b: Backoff,
    record: &ApiRecord,
    op: &str,
    mut f: F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => {
                record.ok();
                return Ok(v);
            }
            // An answer about the object, not about the server.
            Err(e @ kube::Error::Api(_)) if !is_retriable(&e) => {
                record.failed(error_kind(&e), String::new());
                record.ok();
                return Err(ApiError { op: op.into(), source: e });
            }
            Err(e) => {
                record.failed(error_kind(&e), format!("{op}: {}", chain(&e)));
                if attempt >= b.attempts.max(1) || !is_retriable(&e) {
                    return Err(ApiError { op: op.into(), source: e });
                }
                let delay = retry_after(&e).map_or(b.delay(attempt), |ra| ra.max(b.delay(attempt)));
                tracing::warn!(op, attempt, delay_ms = delay.as_millis() as u64, error = %chain(&e), "API call failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// An error and its sources on one line (`a: b: c`), for logs.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        // kube's own messages often embed their source already.
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_jitter_only_shortens() {
        let b = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
            attempts: 9,
            jitter: 0.5,
        };
        let base: Vec<u64> = (1..=6).map(|n| b.base_delay(n).as_secs()).collect();
        assert_eq!(base, [1, 2, 4, 8, 8, 8]);
        for n in 1..=6 {
            for _ in 0..50 {
                let d = b.delay(n);
                assert!(d <= b.base_delay(n) && d >= b.base_delay(n) / 2, "{d:?}");
            }
        }
        let spread: std::collections::BTreeSet<Duration> = (0..50).map(|_| b.delay(3)).collect();
        assert!(spread.len() > 10, "jitter spreads the delays: {spread:?}");
        let exact = Backoff { jitter: 0.0, ..b };
        assert_eq!(exact.delay(3), Duration::from_secs(4));
    }

    #[test]
    fn error_kinds_name_the_failure() {
        let api = |code| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        assert_eq!(error_kind(&api(409)), "conflict");
        assert_eq!(error_kind(&api(429)), "throttled");
        assert_eq!(error_kind(&api(503)), "server");
        assert_eq!(error_kind(&api(403)), "forbidden");
        assert!(is_retriable(&api(409)) && is_retriable(&api(500)) && !is_retriable(&api(403)));
    }
}
