//! Running undo over journaled steps: a failed ADD's rollback, DEL and GC.
//! ADD's forward path is in `cmd::add`.

use std::time::Duration;

use crate::error::Error;
use crate::step::{Step, UndoCx};

/// How long ADD/DEL/GC wait for the per-VF lock.
pub const VF_LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long ADD waits for the short per-PF lock (PF-side VF attributes).
pub const PF_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Test-only: `KUBE_RDMA_CNI_LOCK_WAIT_MS` shortens the lock waits so the
/// "busy → code 11" path can be tested quickly. Not for production use.
pub const LOCK_WAIT_ENV: &str = "KUBE_RDMA_CNI_LOCK_WAIT_MS";

/// A lock wait, shortened by [`LOCK_WAIT_ENV`].
pub fn lock_wait(default: Duration) -> Duration {
    std::env::var(LOCK_WAIT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(default)
}

/// Test-only: `KUBE_RDMA_CNI_FAILPOINT=after:<point>` makes ADD exit abruptly
/// (status 99, no cleanup) at `<point>`, `stop:<point>` makes it stop itself
/// (`SIGSTOP`) there until the test continues it (`SIGCONT`), to run a DEL
/// at that point of an ADD; several, comma-separated. Points: `prepared`
/// (validated, before the VF lock), `locked` (the VF lock held, the
/// attachment found new), `journal` (written), a step name of
/// [`Step::name`], `ipam`, `addresses`. Used by the crash and race tests;
/// never set it in production.
pub const FAILPOINT_ENV: &str = "KUBE_RDMA_CNI_FAILPOINT";

/// Dies or stops here if the failpoint names `point`.
pub fn failpoint(point: &str) {
    let Ok(v) = std::env::var(FAILPOINT_ENV) else { return };
    for f in v.split(',') {
        if f.strip_prefix("after:") == Some(point) {
            tracing::warn!(step = point, "failpoint hit: exiting abruptly");
            // SAFETY: _exit ends the process at once; that is the point.
            unsafe { libc::_exit(99) };
        }
        if f.strip_prefix("stop:") == Some(point) {
            tracing::warn!(step = point, "failpoint hit: stopping until SIGCONT");
            // SAFETY: raise on our own process.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
    }
}

/// What an undo could not do; each failure was logged as it happened.
#[derive(Debug, Default)]
pub struct Undone {
    /// Steps other than the IPAM release whose undo failed.
    pub steps: Vec<(&'static str, Error)>,
    /// The IPAM release, if it failed: only the plugin can release its
    /// lease, and a retried DEL may still succeed at it.
    pub ipam: Option<Error>,
}

impl Undone {
    /// Whether everything was undone.
    pub fn complete(&self) -> bool {
        self.steps.is_empty() && self.ipam.is_none()
    }

    /// The first failure, the IPAM release's first.
    pub fn first(self) -> Option<Error> {
        self.ipam.or_else(|| self.steps.into_iter().next().map(|(_, e)| e))
    }
}

/// Undoes `steps`, last first, each whether or not it ran, going on past a
/// failing one (best effort, as DEL must be: CNI spec 1.1.0, "DEL"). The
/// IPAM release is started first, so that it runs while the netdev moves
/// back. An IPAM plugin that cannot be run at all (gone from `CNI_PATH`, not
/// executable) is logged and passed over: no retry can release through it,
/// and a failing DEL would keep the attachment (and its sandbox) forever.
pub fn undo(steps: &[Step], cx: &mut UndoCx) -> Undone {
    let mut undone = Undone::default();
    // Measured (cni/benches/add_del.rs, 30 interleaved rounds each): a DEL
    // that releases IPAM while the netdev moves back took 23.8 ms, one that
    // releases it after the move 32.9 ms.
    let releases: Vec<_> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Ipam(l) => Some(l.start_undo(cx.env, cx.held)),
            _ => None,
        })
        .collect();
    for s in steps.iter().rev().filter(|s| !matches!(s, Step::Ipam(_))) {
        let t = std::time::Instant::now();
        match s.undo(cx) {
            Ok(()) => tracing::debug!(step = s.name(), ms = t.elapsed().as_secs_f64() * 1e3, "undone"),
            Err(e) => {
                tracing::error!(step = s.name(), error = %e.chain(), "undo failed; going on with the rest");
                undone.steps.push((s.name(), e));
            }
        }
    }
    for r in releases {
        match r.and_then(|p| p.wait()) {
            Ok(_) => {}
            Err(e @ Error::IpamNotRun { .. }) => not_released(&e, cx.env),
            Err(e) => {
                tracing::error!(step = "ipam", error = %e.chain(), "IPAM release failed");
                undone.ipam.get_or_insert(e);
            }
        }
    }
    undone
}

/// Logs an IPAM release DEL goes on without: the plugin cannot be run or
/// speak to us (`e` names it), so its lease, if it made one, stays with it.
pub fn not_released(e: &Error, env: &crate::conf::Env) {
    tracing::error!(
        step = "ipam",
        cni_path = env.path_raw.as_deref().unwrap_or(""),
        error = %e.chain(),
        "IPAM release skipped: the plugin cannot be run; a lease it holds stays (DEL goes on, best effort)"
    );
}
