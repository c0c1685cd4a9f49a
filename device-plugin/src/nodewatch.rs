//! What both daemons (the device plugin's and the DRA driver's) watch on the
//! node and how they read it: netlink link events, the config file's
//! directory, a periodic rescan, the node walk and the config file.
//!
//! The daemons differ in what they do with a wake-up (pools served to the
//! kubelet vs. slices published to the API), not in what wakes them, so the
//! inputs live here once and each daemon's loop is a `select!` over
//! [`NodeWatch::next`] and its own inputs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nic::discover::Scope;
use nic::netlink::events::{Group, RtnlEvent};
use nic::{Inventory, Roots};
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError};
use crate::inuse::Memory;
use crate::kubelet::{self, DirEvent};

/// How long events are collected after the first before one rescan handles
/// them all: a `sriov_numvfs` write creates many links at once, an editor
/// writes a file in several steps.
pub const COALESCE: Duration = Duration::from_millis(20);

/// Why a daemon looks at the node again.
#[derive(Debug)]
pub enum Wake {
    /// The periodic rescan.
    Timer,
    /// Link events (a burst, once [`NodeWatch::settle`]d).
    Links(Vec<RtnlEvent>),
    /// Something changed in the config file's directory.
    ConfigDir,
}

/// The node-side inputs of a daemon's loop. Each is optional: without link
/// events the periodic rescan is the only trigger, without a config file
/// there is nothing to reload, with a zero period there is no timer.
#[derive(Debug, Default)]
pub struct NodeWatch {
    links: Option<mpsc::Receiver<RtnlEvent>>,
    config_dir: Option<mpsc::Receiver<DirEvent>>,
    tick: Option<tokio::time::Interval>,
}

impl NodeWatch {
    /// Subscribes to link events (when `link_events`, queueing up to
    /// `buffer`), watches `config`'s directory, and rescans every `period`.
    /// What cannot be watched is logged and left out: the others still run.
    pub fn start(link_events: bool, buffer: usize, config: Option<&Path>, period: Duration) -> NodeWatch {
        let links = if link_events {
            nic::netlink::events::subscribe(&[Group::Link], buffer)
                .map_err(
                    |e| tracing::warn!(error = %e, "no netlink link events; relying on the periodic rescan"),
                )
                .ok()
        } else {
            None
        };
        let config_dir = config.and_then(Path::parent).and_then(|dir| {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            kubelet::watch_dir(dir)
                .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "cannot watch config dir; reload disabled"))
                .ok()
        });
        let mut w = NodeWatch { links, config_dir, tick: None };
        w.set_period(period);
        w
    }

    /// Rescans every `period` from now on (zero: never).
    pub fn set_period(&mut self, period: Duration) {
        self.tick = (!period.is_zero()).then(|| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
    }

    /// The next wake-up. Cancel-safe (it only receives), so it can sit in a
    /// `select!` beside other inputs; pass what it returns to [`Self::settle`].
    pub async fn next(&mut self) -> Wake {
        tokio::select! {
            _ = tick_opt(&mut self.tick) => Wake::Timer,
            Some(ev) = recv_opt(&mut self.links) => Wake::Links(vec![ev]),
            Some(_) = recv_opt(&mut self.config_dir) => Wake::ConfigDir,
        }
    }

    /// Waits [`COALESCE`] and takes what arrived meanwhile on the same input
    /// into `w`.
    pub async fn settle(&mut self, mut w: Wake) -> Wake {
        match &mut w {
            Wake::Timer => {}
            Wake::Links(evs) => {
                tokio::time::sleep(COALESCE).await;
                if let Some(rx) = self.links.as_mut() {
                    while let Ok(e) = rx.try_recv() {
                        evs.push(e);
                    }
                }
            }
            Wake::ConfigDir => {
                tokio::time::sleep(COALESCE).await;
                if let Some(rx) = self.config_dir.as_mut() {
                    while rx.try_recv().is_ok() {}
                }
            }
        }
        w
    }
}

/// Receives from `rx`, or waits forever when there is none (a `select!` branch
/// that never fires).
pub async fn recv_opt<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

async fn tick_opt(t: &mut Option<tokio::time::Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// What a walk reads: never GID tables, since nothing either daemon hands out
/// depends on them (a GID index cannot be known before the CNI addresses the VF).
pub fn scope() -> Scope {
    Scope { gid_tables: false, ..Scope::default() }
}

/// Walks the node (on a blocking thread) and fills in VFs whose netdev or RDMA
/// device is in a pod with what `memory` learned of them on the host.
pub async fn discover(roots: &Roots, memory: &mut Memory) -> Inventory {
    let roots = roots.clone();
    let mut inv = tokio::task::spawn_blocking(move || nic::discover::discover_scoped(&roots, scope()))
        .await
        .unwrap_or_default();
    memory.observe(&mut inv);
    inv
}

/// The config file as last loaded: its text tells a real change from an
/// inotify event that changed nothing (a touch, an editor's swap file).
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    path: Option<PathBuf>,
    text: Option<String>,
}

impl ConfigFile {
    /// Reads and parses `path` (`None`: the default pools).
    pub fn load(path: Option<&Path>) -> Result<(ConfigFile, Config), ConfigError> {
        let Some(p) = path else { return Ok((ConfigFile::default(), Config::default_pools())) };
        Self::parse(p, crate::config::read::read_text(p)?)
    }

    fn parse(p: &Path, text: String) -> Result<(ConfigFile, Config), ConfigError> {
        let cfg = Config::parse(&text, p)?;
        Ok((ConfigFile { path: Some(p.to_path_buf()), text: Some(text) }, cfg))
    }

    /// The file's path, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The file again when its text changed since it was loaded (`None`: no
    /// file, unreadable for now, or the same text; a file refused as a config,
    /// a FIFO or too large, is an error). The caller checks it and
    /// [`Self::accept`]s it when it takes effect.
    pub fn changed(&self) -> Option<Result<(ConfigFile, Config), ConfigError>> {
        let p = self.path.as_deref()?;
        let text = match crate::config::read::read_text(p) {
            Ok(t) => t,
            Err(ConfigError::Io { .. }) => return None,
            Err(e) => return Some(Err(e)),
        };
        (Some(&text) != self.text.as_ref()).then(|| Self::parse(p, text))
    }

    /// Takes `next` as the running config file.
    pub fn accept(&mut self, next: ConfigFile) {
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOLS: &str = "pools: [{name: a, selectors: {vendors: [\"15b3\"]}}]\n";

    #[test]
    fn only_a_changed_text_is_a_config_change() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, POOLS).unwrap();
        let (file, cfg) = ConfigFile::load(Some(&p)).unwrap();
        assert_eq!(cfg.pools.len(), 1);
        assert!(file.changed().is_none(), "same text: nothing to reload");
        std::fs::write(&p, POOLS.replace("name: a", "name: b")).unwrap();
        let (next, cfg) = file.changed().expect("a change").unwrap();
        assert_eq!(cfg.pools[0].name, "b");
        // A bad edit is reported, and the running file stays what it was.
        std::fs::write(&p, "resourceList: [").unwrap();
        assert!(file.changed().expect("a change").is_err());
        let mut file = file;
        file.accept(next);
        std::fs::write(&p, POOLS.replace("name: a", "name: b")).unwrap();
        assert!(file.changed().is_none());
        // Gone for now (an editor's rename): no change until it is back.
        std::fs::remove_file(&p).unwrap();
        assert!(file.changed().is_none());
        assert!(ConfigFile::load(None).unwrap().0.changed().is_none());
    }

    #[tokio::test]
    async fn a_burst_of_config_events_wakes_once_and_the_timer_keeps_its_period() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        let period = Duration::from_millis(300);
        let t0 = tokio::time::Instant::now();
        let mut w = NodeWatch::start(false, 16, Some(&p), period);
        let (tx, rx) = mpsc::channel(8);
        w.config_dir = Some(rx);
        for _ in 0..3 {
            tx.send(DirEvent::Created("config.yaml".into())).await.unwrap();
        }
        let first = w.next().await;
        assert!(matches!(w.settle(first).await, Wake::ConfigDir));
        // Drained: the next wake-up is the timer, one period after the start.
        assert!(matches!(w.next().await, Wake::Timer));
        assert!(t0.elapsed() >= period);
        w.set_period(Duration::ZERO);
        let none = tokio::time::timeout(Duration::from_millis(700), w.next()).await;
        assert!(none.is_err(), "no timer, no events: nothing wakes it");
    }
}
