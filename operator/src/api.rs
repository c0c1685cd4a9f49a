//! Calls to the API server that can fail for a while, shared by the agent and the
//! controller: the error naming the operation, which errors pass on their own
//! (retried with jittered exponential backoff), and the error kinds counted in
//! `kuberdma_api_errors_total{kind}`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::jitter;

/// A Kubernetes API call that failed (after retries where it could pass).
///
/// Displayed on one line: the operation and [`describe`] of the client error
/// (`apply rdmanodestates/n1 status: Error from server (Conflict): ...`).
#[derive(Debug)]
pub struct ApiError {
    /// What was being done, e.g. `apply rdmanodestates/node-a status`.
    pub op: String,
    /// The client error (already in the message with its causes, so not reported
    /// again as the error's source).
    pub source: kube::Error,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, describe(&self.source))
    }
}

impl std::error::Error for ApiError {}

/// A client error on one readable line, as kubectl prints it: `Error from server
/// (Reason): message` for an answer of the API server (kubectl's
/// `k8s.io/kubectl/pkg/cmd/util/helpers.go` `StandardErrorMessage`), else the
/// error and its causes (`a: b: c`). Never the Rust `Debug` form that kube's own
/// `Display` of [`kube::Error::Api`] appends.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let message = if s.message.is_empty() { format!("HTTP {}", s.code) } else { s.message.clone() };
            // kube's stand-in reason for a body that is not a Status: name the HTTP status instead.
            let reason = if s.reason.is_empty() || s.reason == "Failed to parse error data" {
                reason_of(s.code)
            } else {
                s.reason.as_str()
            };
            if reason.is_empty() {
                format!("Error from server: {message}")
            } else {
                format!("Error from server ({reason}): {message}")
            }
        }
        other => chain(other),
    }
}

/// The `metav1.StatusReason` the API server uses for an HTTP status (k8s.io/apimachinery
/// `pkg/api/errors`), empty for others.
fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// A watch failure on one line: what failed and [`describe`] of its cause.
pub fn describe_watch(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(e) => format!("initial list failed: {}", describe(e)),
        W::WatchStartFailed(e) => format!("starting the watch failed: {}", describe(e)),
        W::WatchFailed(e) => format!("watch stream failed: {}", describe(e)),
        W::WatchError(s) => format!("watch ended by the server: {}", describe(&kube::Error::Api(s.clone()))),
        W::NoResourceVersion => e.to_string(),
    }
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
                record.failed(error_kind(&e), format!("{op}: {}", describe(&e)));
                if attempt >= b.attempts.max(1) || !is_retriable(&e) {
                    return Err(ApiError { op: op.into(), source: e });
                }
                let delay = retry_after(&e).map_or(b.delay(attempt), |ra| ra.max(b.delay(attempt)));
                tracing::warn!(op, attempt, delay_ms = delay.as_millis() as u64, error = %describe(&e), "API call failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// An error and its sources on one line (`a: b: c`), for logs.
pub use nic::error_chain as chain;

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

    #[test]
    fn api_errors_read_as_kubectl_prints_them_on_one_line() {
        let forbidden = kube::Error::Api(
            kube::core::Status::failure(
                "rdmanodestates.kuberdma.io \"n2\" is forbidden: User \"u\" cannot get resource",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        );
        let line = describe(&forbidden);
        assert_eq!(
            line,
            "Error from server (Forbidden): rdmanodestates.kuberdma.io \"n2\" is forbidden: User \"u\" cannot get resource"
        );
        let e = ApiError { op: "get rdmanodestates/n2".into(), source: forbidden };
        let shown = chain(&e);
        assert_eq!(shown, format!("get rdmanodestates/n2: {line}"));
        assert!(!shown.contains("Status {") && !shown.contains('\n'), "{shown}");
        let bare = kube::Error::Api(kube::core::Status::failure("", "").with_code(502).boxed());
        assert_eq!(describe(&bare), "Error from server: HTTP 502");
        // A plain-text error body, as kube reconstructs it.
        let plain = kube::Error::Api(
            kube::core::Status::failure(
                "Too many requests, please try again later.",
                "Failed to parse error data",
            )
            .with_code(429)
            .boxed(),
        );
        assert_eq!(
            describe(&plain),
            "Error from server (TooManyRequests): Too many requests, please try again later."
        );
    }
}
