//! Registration of one served pool with the kubelet, for as long as that
//! server runs: one task per pool server ([`run`]).
//!
//! What the kubelet does (k8s.io/kubernetes v1.34, `pkg/kubelet/cm/devicemanager`):
//! - `Register` dials the plugin's socket and asks GetDevicePluginOptions
//!   before it answers, then opens ListAndWatch from a goroutine
//!   (`plugin/v1beta1/handler.go` `connectClient`, `client.go` `Connect`, `Run`);
//! - it keeps one client per resource: another Register replaces the client
//!   without closing the old one, and when any client's ListAndWatch ends it
//!   disconnects whichever client is current (`handler.go` `runClient`), so
//!   the late end of an old stream drops a fresh registration. The endpoint is
//!   then stopped with its devices Unhealthy, and 5 minutes later the resource
//!   is gone from the node (`endpoint.go` `stopGracePeriodExpired`,
//!   `manager.go` `GetCapacity`), while the plugin still thinks it registered;
//! - a restarting kubelet removes every socket in its directory, its own old
//!   one included, and then listens on a new `kubelet.sock` (`manager.go`
//!   `CleanupPluginDirectory`, `server.go` `Start`).
//!
//! So each pool server registers once per kubelet instance, told apart by
//! `kubelet.sock`'s device, inode and change time ([`Instance`]); after each
//! Register the kubelet must open a ListAndWatch within [`Timing::verify`],
//! else the pool registers again, after waiting at least as long once more
//! (a watch opened meanwhile is that Register's: a loaded kubelet can be late,
//! and a second Register would leave it two clients); a watch that ends while the same kubelet
//! runs means the kubelet dropped the pool, and it registers again too.
//! Failures back off exponentially up to [`Timing::backoff_max`] and never
//! give up; a new kubelet instance is tried at once. Each pool's [`State`] is
//! in `/healthz` and `kuberdma_pool_registered` ([`crate::metrics`]).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::kubelet::{self, KUBELET_SOCKET};
use crate::metrics::Metrics;
use crate::serving::{State, Streams};

/// One kubelet instance: the identity of the `kubelet.sock` it listens on. A
/// kubelet that restarts makes a new socket file (new inode, new change
/// time), even when the inode number is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

/// The kubelet instance of `<kubelet_dir>/kubelet.sock` now; `None` when
/// there is no socket there.
pub fn instance(kubelet_dir: &Path) -> Option<Instance> {
    let m = std::fs::metadata(kubelet_dir.join(KUBELET_SOCKET)).ok()?;
    m.file_type().is_socket().then(|| Instance {
        dev: m.dev(),
        ino: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// How long registration waits, and for what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long the kubelet has to open ListAndWatch after accepting Register
    /// (it opens it right after answering: milliseconds, seconds when loaded).
    pub verify: Duration,
    /// The wait after the first failure; doubled after each further one.
    pub backoff_first: Duration,
    /// The longest wait between tries; also how long a watch must last before
    /// the failures before it are forgotten.
    pub backoff_max: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            verify: Duration::from_secs(5),
            backoff_first: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
        }
    }
}

impl Timing {
    /// The wait before the next try after `failures` failures in a row (at least 1).
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.backoff_first.saturating_mul(1 << doublings).min(self.backoff_max)
    }
}

/// What one pool's registration task needs.
pub struct Registrar {
    /// The kubelet's device plugin directory.
    pub kubelet_dir: PathBuf,
    /// The pool's socket, relative to `kubelet_dir` (`RegisterRequest.endpoint`).
    pub endpoint: String,
    /// The pool's resource name.
    pub resource: String,
    /// The pool server's ListAndWatch streams.
    pub streams: watch::Receiver<Streams>,
    /// Changes when the daemon sees `kubelet.sock` change (the task then
    /// looks at the socket itself).
    pub kubelet: watch::Receiver<Option<Instance>>,
    /// Waits.
    pub timing: Timing,
    /// Where the state goes.
    pub metrics: Arc<Metrics>,
}

/// Keeps the pool registered with whichever kubelet runs, until the daemon
/// drops the instance channel or the pool's server goes (or the task is
/// aborted, as the daemon does when it stops or re-serves the pool).
pub async fn run(r: Registrar) {
    let mut task = Task {
        server: r.streams.clone(),
        r,
        watched_by: None,
        failing_with: None,
        failures: 0,
        error: String::new(),
        unwatched_since: None,
    };
    loop {
        // The channel only says when to look: what counts is the socket now,
        // so a Register never goes to a kubelet other than the one recorded.
        task.r.kubelet.borrow_and_update();
        let Some(kubelet) = instance(&task.r.kubelet_dir) else {
            task.watched_by = None;
            task.set(State::NoKubelet);
            if task.r.kubelet.changed().await.is_err() {
                return;
            }
            continue;
        };
        if task.failing_with != Some(kubelet) {
            // Another kubelet: what failed before was the old one's doing.
            task.failing_with = Some(kubelet);
            task.failures = 0;
            task.unwatched_since = None;
        }
        let step = if task.watched_by == Some(kubelet) {
            task.stay_registered(kubelet).await
        } else if task.failures > 0 {
            task.wait_to_retry(kubelet).await
        } else {
            Step::Register
        };
        match step {
            Step::Stop => return,
            Step::Look => continue,
            Step::Register => {
                if task.register(kubelet).await == Step::Stop {
                    return;
                }
            }
        }
    }
}

/// What the registration loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The daemon or the pool's server is gone.
    Stop,
    /// Look at the kubelet socket again.
    Look,
    /// Send a Register now.
    Register,
}

/// One pool's registration state between steps.
struct Task {
    r: Registrar,
    /// A handle on the server's streams: names this server to the metrics.
    server: watch::Receiver<Streams>,
    /// The instance this server is registered with and watched by.
    watched_by: Option<Instance>,
    /// The kubelet the failures in a row (`failures`, last `error`) are with.
    failing_with: Option<Instance>,
    failures: u32,
    error: String,
    /// After an accepted Register whose ListAndWatch has not come yet: the
    /// stream count before it.
    unwatched_since: Option<u64>,
}

impl Task {
    fn set(&self, s: State) {
        self.r.metrics.set_registration(&self.r.resource, &self.server, s);
    }

    fn failed(&mut self, error: String) {
        self.failures += 1;
        self.error = error;
        self.r.metrics.registration_failed(&self.r.resource, &self.server);
    }

    /// Registered and watched: wait for the socket to change or the watch to end.
    async fn stay_registered(&mut self, kubelet: Instance) -> Step {
        self.set(State::Registered);
        let (backoff_max, backoff_first) = (self.r.timing.backoff_max, self.r.timing.backoff_first);
        let failing = self.failures > 0;
        let settled = async {
            if !failing {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(backoff_max).await;
        };
        let streams = &mut self.r.streams;
        let current = &mut self.r.kubelet;
        let lost = tokio::select! {
            c = current.changed() => return if c.is_err() { Step::Stop } else { Step::Look },
            lost = async { streams.wait_for(|s| s.open == 0).await.map(|_| ()) } => lost,
            _ = settled => {
                self.failures = 0;
                return Step::Look;
            }
        };
        if lost.is_err() {
            return Step::Stop;
        }
        self.watched_by = None;
        // A kubelet on its way out ends its streams before its socket goes;
        // give it a moment to show which it is.
        tokio::select! {
            _ = tokio::time::sleep(backoff_first) => {}
            c = self.r.kubelet.changed() => if c.is_err() { return Step::Stop },
        }
        let resource = &self.r.resource;
        if instance(&self.r.kubelet_dir) == Some(kubelet) {
            tracing::warn!(pool = %resource, "the kubelet stopped watching the pool: registering again");
            self.failed(
                "the kubelet ended the pool's ListAndWatch while it runs (it dropped the pool's client)"
                    .into(),
            );
        } else {
            tracing::info!(pool = %resource, "ListAndWatch ended with its kubelet: registering with the next one");
        }
        Step::Look
    }

    /// After failures: wait out the backoff, unless the socket changes or a
    /// late ListAndWatch shows the last accepted Register worked after all.
    async fn wait_to_retry(&mut self, kubelet: Instance) -> Step {
        // After a Register the kubelet accepted, its ListAndWatch may still come (a
        // loaded node can delay the kubelet's goroutine past `verify`). Another
        // Register would leave it two clients, and the end of the older one's stream
        // drops the newer (see the module docs): so wait at least `verify` again, and
        // take a watch that opens meanwhile as that registration's.
        let timing = self.r.timing;
        let retry_in = match self.unwatched_since {
            Some(_) => timing.backoff(self.failures).max(timing.verify),
            None => timing.backoff(self.failures),
        };
        self.set(State::Retrying { failures: self.failures, retry_in, error: self.error.clone() });
        let unwatched_since = self.unwatched_since;
        let streams = &mut self.r.streams;
        let late_watch = async {
            match unwatched_since {
                Some(before) => streams.wait_for(|s| s.opened > before && s.open > 0).await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(retry_in) => Step::Register,
            w = late_watch => {
                if w.is_err() {
                    return Step::Stop;
                }
                tracing::info!(pool = %self.r.resource, "the kubelet opened ListAndWatch late: registered, not registering again");
                self.unwatched_since = None;
                self.watched_by = Some(kubelet);
                Step::Look
            }
            c = self.r.kubelet.changed() => if c.is_err() { Step::Stop } else { Step::Look },
        }
    }

    /// One Register, then wait up to `verify` for the kubelet's ListAndWatch.
    async fn register(&mut self, kubelet: Instance) -> Step {
        self.unwatched_since = None;
        self.set(State::Registering);
        let before = self.r.streams.borrow().opened;
        let (resource, endpoint) = (&self.r.resource, &self.r.endpoint);
        if let Err(e) = kubelet::register(&self.r.kubelet_dir, endpoint, resource).await {
            let msg = nic::error_chain(&e);
            if self.failures == 0 || msg != self.error {
                tracing::warn!(pool = %resource, error = %msg, failures = self.failures + 1, "register failed; retrying with backoff");
            } else {
                tracing::debug!(pool = %resource, error = %msg, failures = self.failures + 1, "register failed again");
            }
            self.failed(msg);
            return Step::Look;
        }
        self.r.metrics.registration_accepted(resource, &self.server);
        self.set(State::Verifying);
        let streams = &mut self.r.streams;
        let watched = tokio::time::timeout(self.r.timing.verify, async {
            streams.wait_for(|s| s.opened > before && s.open > 0).await.map(|_| ())
        })
        .await;
        match watched {
            Ok(Ok(())) => {
                tracing::info!(pool = %self.r.resource, endpoint = %self.r.endpoint, "registered with the kubelet, which watches the pool");
                self.watched_by = Some(kubelet);
                Step::Look
            }
            Ok(Err(_)) => Step::Stop,
            Err(_) => {
                self.unwatched_since = Some(before);
                let error = format!(
                    "the kubelet accepted Register but opened no ListAndWatch within {:?}",
                    self.r.timing.verify
                );
                tracing::warn!(pool = %self.r.resource, error = %error, failures = self.failures + 1, "registering again with backoff");
                self.failed(error);
                Step::Look
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_wait_up_to_the_cap() {
        let t = Timing {
            verify: Duration::from_secs(1),
            backoff_first: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
        };
        let waits: Vec<u128> = (1..=10).map(|n| t.backoff(n).as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        // Never overflows, however long the kubelet stays away.
        assert_eq!(t.backoff(u32::MAX), Duration::from_secs(30));
        assert_eq!(t.backoff(0), Duration::from_millis(250));
    }

    #[test]
    fn a_recreated_kubelet_socket_is_another_instance() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(instance(d.path()), None);
        let sock = d.path().join(KUBELET_SOCKET);
        // A plain file is no kubelet.
        std::fs::write(&sock, b"").unwrap();
        assert_eq!(instance(d.path()), None);
        std::fs::remove_file(&sock).unwrap();
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let a = instance(d.path()).expect("a socket");
        assert_eq!(instance(d.path()), Some(a), "the same socket is the same kubelet");
        drop(l);
        std::fs::remove_file(&sock).unwrap();
        // File times come from the coarse clock (a few ms); a kubelet restart
        // takes seconds.
        std::thread::sleep(Duration::from_millis(20));
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let b = instance(d.path()).expect("a socket");
        assert_ne!(a, b, "a socket made again is another kubelet, even on a reused inode");
    }
}
