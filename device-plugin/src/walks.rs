//! Reads of the node off the daemon's loop, each with a deadline.
//!
//! A sysfs read can block in the kernel (a driver that hangs, a FUSE or NFS
//! mount where sysfs should be) and nothing can interrupt it. So each walk
//! runs on a thread of its own and the daemon waits for it until a deadline
//! only: a walk that overruns is abandoned (its thread stays stuck, holding
//! nothing the daemon needs) and counted, the daemon goes on with what it
//! knew, and no new walk starts while [`MAX_STUCK`] are stuck (each may hold
//! discovery's worker threads too). A stuck walk that returns at last is
//! forgotten and its result dropped.
//!
//! [`Walks`] is what `/healthz` and `/metrics` read: when the last walk
//! completed, how many overran, how many are stuck now. Both modes (device
//! plugin and DRA) render them with [`Walks::health`] and [`Walks::render`],
//! so the `/healthz` line and the metric names are the same in each.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use plumbing::prometheus::{head, sample};
use tokio::sync::oneshot;

/// How many abandoned walks may be stuck before no new one starts.
pub const MAX_STUCK: usize = 2;

/// Periodic rescans that may pass without a completed read of the node
/// before `/healthz` calls its view stale (one missed tick is no alarm).
pub const STALE_PERIODS: u32 = 3;

/// How long without a completed read of the node is stale: [`STALE_PERIODS`]
/// periods and a deadline; `None` without a periodic rescan.
pub fn stale_after(period: Duration, deadline: Duration) -> Option<Duration> {
    (!period.is_zero()).then(|| period * STALE_PERIODS + deadline)
}

/// A walk's outcome.
#[derive(Debug)]
pub enum Walked<T> {
    /// It completed in time.
    Done(T),
    /// It overran its deadline and was abandoned.
    Overran,
    /// Not started: [`MAX_STUCK`] walks are stuck (or no thread could be made).
    Refused,
    /// The daemon is stopping: abandoned.
    Stopped,
}

/// Walk bookkeeping shared with the metrics.
#[derive(Debug, Default)]
pub struct Walks {
    /// The last completed walk: wall clock (for the metric) and monotonic (for age).
    last_ok: Mutex<Option<(SystemTime, Instant)>>,
    overruns: AtomicU64,
    stuck: AtomicUsize,
    /// A refusal was logged and no walk ran since (log once, not per tick).
    refusing: AtomicBool,
}

impl Walks {
    /// Unix time of the last completed walk.
    pub fn last_ok_unix(&self) -> Option<f64> {
        let g = self.last_ok.lock().unwrap_or_else(|e| e.into_inner());
        g.and_then(|(t, _)| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_secs_f64())
    }

    /// How long ago the last walk completed.
    pub fn last_ok_age(&self) -> Option<Duration> {
        self.last_ok.lock().unwrap_or_else(|e| e.into_inner()).map(|(_, i)| i.elapsed())
    }

    /// Walks that overran their deadline, ever.
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    /// Abandoned walks whose thread has not returned yet.
    pub fn stuck(&self) -> usize {
        self.stuck.load(Ordering::Relaxed)
    }

    fn completed(&self) {
        *self.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = Some((SystemTime::now(), Instant::now()));
    }

    /// The `/healthz` line on reads of the node, and whether they are fresh:
    /// not while one is stuck, nor when none completed for longer than
    /// `stale_after` (`None`: no age is too old).
    pub fn health(&self, stale_after: Option<Duration>) -> (bool, String) {
        let age = self.last_ok_age();
        let last = match age {
            Some(a) => format!("last completed {:.1}s ago", a.as_secs_f64()),
            None => "none completed yet".to_string(),
        };
        let stuck = self.stuck();
        if stuck > 0 {
            return (false, format!("node rescan: stale: {stuck} read(s) of the node stuck past their deadline (a sysfs read blocked in the kernel?); {last}"));
        }
        match (stale_after, age) {
            (Some(after), Some(age)) if age > after => {
                (false, format!("node rescan: stale: {last}, expected within {}s", after.as_secs()))
            }
            _ => (true, format!("node rescan: ok ({last})")),
        }
    }

    /// The metrics on reads of the node, in Prometheus text.
    pub fn render(&self, s: &mut String) {
        let n = "kuberdma_rescan_last_success_timestamp_seconds";
        head(s, n, "gauge", "Unix time the last read of the node completed (absent until one has).");
        if let Some(t) = self.last_ok_unix() {
            sample(s, n, &[], t);
        }
        let n = "kuberdma_rescan_overruns_total";
        head(s, n, "counter", "Reads of the node that overran their deadline and were abandoned.");
        sample(s, n, &[], self.overruns());
        let n = "kuberdma_rescans_stuck";
        head(s, n, "gauge", "Abandoned reads of the node whose thread is still blocked in the kernel.");
        sample(s, n, &[], self.stuck());
    }
}

/// Where a walk's thread stands; whoever moves it off `RUNNING` first decides
/// whether the result is taken or the walk counted as stuck.
const RUNNING: u8 = 0;
const RETURNED: u8 = 1;
const ABANDONED: u8 = 2;

/// Runs walks with a deadline (see the module docs).
#[derive(Debug, Clone)]
pub struct Walker {
    deadline: Duration,
    walks: Arc<Walks>,
}

impl Walker {
    /// Walks get `deadline` each.
    pub fn new(deadline: Duration) -> Walker {
        Walker { deadline, walks: Arc::default() }
    }

    /// The deadline of each walk.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// What the metrics read.
    pub fn walks(&self) -> Arc<Walks> {
        self.walks.clone()
    }

    /// Runs `job` (named `what` in logs) on a thread of its own, waiting until
    /// the deadline or until `stop` resolves. A completed walk counts as the
    /// last successful one.
    pub async fn run<T: Send + 'static>(
        &self,
        what: &'static str,
        job: impl FnOnce() -> T + Send + 'static,
        stop: impl std::future::Future<Output = ()>,
    ) -> Walked<T> {
        let stuck = self.walks.stuck();
        if stuck >= MAX_STUCK {
            if !self.walks.refusing.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    what,
                    stuck,
                    "not reading the node until earlier reads stuck in the kernel return"
                );
            }
            return Walked::Refused;
        }
        self.walks.refusing.store(false, Ordering::Relaxed);
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (tx, rx) = oneshot::channel();
        let (st, walks, deadline) = (state.clone(), self.walks.clone(), self.deadline);
        let spawned = std::thread::Builder::new().name("kr-walk".into()).spawn(move || {
            let t0 = Instant::now();
            let r = job();
            if st.compare_exchange(RUNNING, RETURNED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                let _ = tx.send(r);
            } else {
                walks.stuck.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(what, took = ?t0.elapsed(), ?deadline, "a read of the node abandoned past its deadline returned at last");
            }
        });
        if let Err(e) = spawned {
            tracing::error!(what, error = %e, "cannot start a thread to read the node");
            return Walked::Refused;
        }
        tokio::pin!(rx);
        let why = tokio::select! {
            r = &mut rx => return self.done(r),
            _ = tokio::time::sleep(self.deadline) => Walked::Overran,
            _ = stop => Walked::Stopped,
        };
        if state.compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // It returned just now: its result is on the way.
            return self.done(rx.await);
        }
        let stuck = self.walks.stuck.fetch_add(1, Ordering::Relaxed) + 1;
        if matches!(why, Walked::Overran) {
            self.walks.overruns.fetch_add(1, Ordering::Relaxed);
            tracing::error!(what, deadline = ?self.deadline, stuck, "reading the node overran its deadline (a sysfs read blocked in the kernel?): abandoned; the daemon goes on with what it knew");
        }
        why
    }

    fn done<T>(&self, r: Result<T, oneshot::error::RecvError>) -> Walked<T> {
        match r {
            Ok(v) => {
                self.walks.completed();
                Walked::Done(v)
            }
            // The job panicked: nothing was read.
            Err(_) => Walked::Refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test]
    async fn a_walk_in_time_is_taken_and_counts_as_the_last_success() {
        let w = Walker::new(Duration::from_secs(5));
        assert!(w.walks().last_ok_unix().is_none());
        let r = w.run("test", || 7, std::future::pending()).await;
        assert!(matches!(r, Walked::Done(7)));
        assert!(w.walks().last_ok_age().unwrap() < Duration::from_secs(1));
        assert_eq!((w.walks().overruns(), w.walks().stuck()), (0, 0));
    }

    #[tokio::test]
    async fn stuck_walks_are_abandoned_counted_and_bounded() {
        let w = Walker::new(Duration::from_millis(50));
        let mut release = Vec::new();
        for n in 1..=MAX_STUCK {
            let (tx, rx) = mpsc::channel::<()>();
            release.push(tx);
            let r = w.run("test", move || rx.recv(), std::future::pending()).await;
            assert!(matches!(r, Walked::Overran));
            assert_eq!((w.walks().overruns(), w.walks().stuck()), (n as u64, n));
        }
        // No third thread while two are stuck.
        let r = w.run("test", || 1, std::future::pending()).await;
        assert!(matches!(r, Walked::Refused));
        assert!(w.walks().last_ok_unix().is_none());
        // They return at last: forgotten, and walks run again.
        release.clear();
        let t0 = Instant::now();
        while w.walks().stuck() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "stuck walks never returned");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(matches!(w.run("test", || 2, std::future::pending()).await, Walked::Done(2)));
        assert_eq!(w.walks().overruns(), MAX_STUCK as u64);
    }

    #[tokio::test]
    async fn stopping_abandons_a_walk_at_once() {
        let w = Walker::new(Duration::from_secs(60));
        let (_keep, rx) = mpsc::channel::<()>();
        let t0 = Instant::now();
        let r = w.run("test", move || rx.recv(), tokio::time::sleep(Duration::from_millis(20))).await;
        assert!(matches!(r, Walked::Stopped));
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(w.walks().overruns(), 0, "stopping is no overrun");
    }
}
