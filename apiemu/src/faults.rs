//! Fault injection: rules that match requests (method, path, watch or not)
//! and make the emulator misbehave the way real API servers and networks do.
//!
//! Note that kube's client (5.x) retries 429, 503 and 504 by itself (up to
//! 15 times, waiting `Retry-After` when given): a 429 rule with `times(1)`
//! delays a call, it does not fail it. Set `Config::default_retry = false`
//! in a test to see the status itself.
//!
//! ```
//! use kube_rdma_apiemu::Fault;
//! use http::Method;
//! // The next two status patches of any RdmaNodeState get 429 with Retry-After: 1.
//! let f = Fault::too_many_requests(1)
//!     .method(Method::PATCH)
//!     .path_prefix("/apis/kuberdma.io/v1alpha1/rdmanodestates/")
//!     .times(2);
//! # let _ = f;
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use http::Method;

/// What a matching request gets.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this HTTP code and a `metav1.Status` body (reason chosen
    /// from the code as the real server does); `retry_after` adds
    /// `Retry-After` and `details.retryAfterSeconds`.
    Status {
        /// HTTP code (409, 429, 500, 503, ...).
        code: u16,
        /// Seconds for `Retry-After`.
        retry_after: Option<u32>,
    },
    /// Close the connection without answering.
    DropConnection,
    /// Start the watch, then abort the connection after this many events
    /// (0: right after the response headers). Only matches watches.
    DropWatchAfter(usize),
    /// Start the watch, then send a `410 Gone` ERROR event (reason
    /// `Expired`) after this many events and end the stream. Only matches
    /// watches.
    ExpireWatchAfter(usize),
    /// Delay the request by this long, then handle it normally (combines
    /// with one other matching fault).
    Latency(Duration),
}

/// How a rule matches the request path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathMatch {
    /// Every path.
    Any,
    /// Exactly this path (no query).
    Exact(String),
    /// Paths starting with this.
    Prefix(String),
}

/// A fault rule. Build one with a constructor, narrow it with the matchers,
/// then [`Faults::add`] it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub(crate) action: FaultAction,
    pub(crate) method: Option<Method>,
    pub(crate) path: PathMatch,
    pub(crate) watch: Option<bool>,
    pub(crate) times: Option<u32>,
}

impl Fault {
    fn new(action: FaultAction) -> Self {
        let watch = matches!(action, FaultAction::DropWatchAfter(_) | FaultAction::ExpireWatchAfter(_))
            .then_some(true);
        Fault { action, method: None, path: PathMatch::Any, watch, times: None }
    }

    /// Answer with `code` (e.g. 409, 500, 503).
    pub fn status(code: u16) -> Self {
        Self::new(FaultAction::Status { code, retry_after: None })
    }

    /// `409 Conflict`.
    pub fn conflict() -> Self {
        Self::status(409)
    }

    /// `429 TooManyRequests` with `Retry-After: <secs>`.
    pub fn too_many_requests(retry_after_secs: u32) -> Self {
        Self::new(FaultAction::Status { code: 429, retry_after: Some(retry_after_secs) })
    }

    /// `500 InternalError`.
    pub fn internal_error() -> Self {
        Self::status(500)
    }

    /// `503 ServiceUnavailable`.
    pub fn unavailable() -> Self {
        Self::status(503)
    }

    /// Close the connection before answering.
    pub fn drop_connection() -> Self {
        Self::new(FaultAction::DropConnection)
    }

    /// Abort watch streams after `events` events (0 = at once).
    pub fn drop_watch_after(events: usize) -> Self {
        Self::new(FaultAction::DropWatchAfter(events))
    }

    /// End watch streams with a `410 Gone` ERROR event after `events` events.
    pub fn expire_watch_after(events: usize) -> Self {
        Self::new(FaultAction::ExpireWatchAfter(events))
    }

    /// Add latency.
    pub fn latency(delay: Duration) -> Self {
        Self::new(FaultAction::Latency(delay))
    }

    /// Only this method (`GET` also matches watches).
    pub fn method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    /// Only this exact path.
    pub fn path(mut self, path: &str) -> Self {
        self.path = PathMatch::Exact(path.to_string());
        self
    }

    /// Only paths starting with `prefix`.
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.path = PathMatch::Prefix(prefix.to_string());
        self
    }

    /// Only watch requests.
    pub fn watches(mut self) -> Self {
        self.watch = Some(true);
        self
    }

    /// Only requests that are not watches.
    pub fn not_watches(mut self) -> Self {
        self.watch = Some(false);
        self
    }

    /// Fire at most `n` times, then retire (default: until removed).
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    fn matches(&self, method: &Method, path: &str, watch: bool) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self.watch.is_none_or(|w| w == watch)
            && match &self.path {
                PathMatch::Any => true,
                PathMatch::Exact(p) => p == path,
                PathMatch::Prefix(p) => path.starts_with(p.as_str()),
            }
    }
}

/// Identifies an added fault, to remove it or ask how often it fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

#[derive(Debug)]
struct Rule {
    id: FaultId,
    fault: Fault,
    fired: u32,
}

/// The emulator's fault rules (reach them with [`crate::Emulator::faults`]).
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    retired: Mutex<Vec<(FaultId, u32)>>,
    next: AtomicU64,
}

/// What the faults decided for one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Decision {
    pub(crate) delay: Duration,
    pub(crate) action: Option<FaultAction>,
}

impl Faults {
    /// Adds a rule; rules are tried in the order added.
    pub fn add(&self, fault: Fault) -> FaultId {
        let id = FaultId(self.next.fetch_add(1, Ordering::Relaxed));
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).push(Rule { id, fault, fired: 0 });
        id
    }

    /// Removes a rule (no-op when it already retired).
    pub fn remove(&self, id: FaultId) {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = rules.iter().position(|r| r.id == id) {
            let r = rules.remove(i);
            self.retired.lock().unwrap_or_else(|e| e.into_inner()).push((r.id, r.fired));
        }
    }

    /// Removes every rule.
    pub fn clear(&self) {
        let ids: Vec<FaultId> =
            self.rules.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|r| r.id).collect();
        for id in ids {
            self.remove(id);
        }
    }

    /// How many requests this rule has affected so far.
    pub fn fired(&self, id: FaultId) -> u32 {
        if let Some(r) = self.rules.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|r| r.id == id) {
            return r.fired;
        }
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0, |(_, n)| *n)
    }

    /// Decides for one request: the summed latency of matching latency
    /// rules and the first matching other rule; counts and retires them.
    pub(crate) fn decide(&self, method: &Method, path: &str, watch: bool) -> Decision {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut d = Decision::default();
        let mut done = Vec::new();
        for r in rules.iter_mut() {
            if !r.fault.matches(method, path, watch) {
                continue;
            }
            match &r.fault.action {
                FaultAction::Latency(l) => d.delay += *l,
                _ if d.action.is_some() => continue,
                other => d.action = Some(other.clone()),
            }
            r.fired += 1;
            if r.fault.times.is_some_and(|n| r.fired >= n) {
                done.push(r.id);
            }
        }
        if !done.is_empty() {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            rules.retain(|r| {
                let keep = !done.contains(&r.id);
                if !keep {
                    retired.push((r.id, r.fired));
                }
                keep
            });
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_fire_n_times_and_retire() {
        let f = Faults::default();
        let a = f.add(Fault::conflict().method(Method::PUT).path_prefix("/api/v1/nodes").times(2));
        let l = f.add(Fault::latency(Duration::from_millis(5)));
        let w = f.add(Fault::drop_watch_after(3));
        assert_eq!(f.decide(&Method::GET, "/api/v1/nodes", false).action, None);
        let d = f.decide(&Method::PUT, "/api/v1/nodes/a", false);
        assert_eq!(d.action, Some(FaultAction::Status { code: 409, retry_after: None }));
        assert_eq!(d.delay, Duration::from_millis(5));
        f.decide(&Method::PUT, "/api/v1/nodes/a", false);
        assert_eq!(f.decide(&Method::PUT, "/api/v1/nodes/a", false).action, None);
        assert_eq!(f.fired(a), 2);
        assert_eq!(
            f.decide(&Method::GET, "/api/v1/nodes", true).action,
            Some(FaultAction::DropWatchAfter(3))
        );
        assert_eq!(f.fired(w), 1);
        f.remove(l);
        assert_eq!(f.decide(&Method::GET, "/x", false).delay, Duration::ZERO);
        assert_eq!(f.fired(l), 5);
    }
}
