//! DRA mode's `/metrics`, `/healthz` and `/livez` (served by
//! [`plumbing::http`]).
//!
//! Pool gauges carry the device plugin's names and `resource` label, so
//! dashboards read both modes alike: `kuberdma_pool_capacity`,
//! `kuberdma_pool_healthy`, and `kuberdma_pool_allocated` = devices prepared
//! for claims now. DRA's own: `kuberdma_dra_prepare_duration_seconds`
//! (histogram, one claim), `kuberdma_dra_prepare_failures_total`,
//! `kuberdma_dra_pool_generation` (published ResourceSlice pool generation),
//! `kuberdma_dra_publish_failures_total`, and per kubelet-facing socket
//! (`socket="registration"` or `"plugin"`) `kuberdma_dra_socket_served` and
//! `kuberdma_dra_socket_bind_failures_total` (a socket that cannot be bound
//! is tried again with capped backoff, as device plugin mode does).
//! `kuberdma_dra_device_withheld` (1 per VF of a pool not offered, with its
//! `device`, `resource` and `reason`: `device-plugin` or `netns`) and
//! `kuberdma_dra_pod_resources_up` (the kubelet's PodResources answered the
//! last call) say which VFs are kept out of the slices and whether the
//! kubelet's witness is there ([`super::withhold`]).
//!
//! Reads of the node carry device plugin mode's names, rendered by the same
//! code ([`crate::walks`]): `kuberdma_rescan_last_success_timestamp_seconds`,
//! `kuberdma_rescan_overruns_total`, `kuberdma_rescans_stuck`.
//!
//! `/healthz` is 200 only when both sockets are served, the kubelet has
//! registered the driver, the node's slices are published, PodResources
//! answers and the node's reads are fresh (none stuck past its deadline, one
//! completed within the window the driver sets); its body says which part is
//! missing.
//! `/livez` is 200 while the process answers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plumbing::histogram::Histogram;
use plumbing::http::Routes;
use plumbing::prometheus::{head, sample};

use super::devices::View;
use super::registration::Registered;
use crate::walks::Walks;

/// Histogram bucket upper bounds, seconds (a prepare reads the claim from the API).
const BUCKETS: [f64; 9] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5];

/// A kubelet-facing socket of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Socket {
    /// The plugin watcher's registration socket.
    Registration,
    /// The DRA service socket the kubelet dials.
    Plugin,
}

impl Socket {
    /// The `socket` label.
    pub fn label(self) -> &'static str {
        match self {
            Socket::Registration => "registration",
            Socket::Plugin => "plugin",
        }
    }
}

/// Where serving one socket stands.
#[derive(Debug, Clone, Default)]
struct Serving {
    /// The last bind failed with this (`None`: served).
    error: Option<String>,
    /// Failed binds in a row.
    failing: u32,
    /// Failed binds, ever.
    failures: u64,
}

#[derive(Debug)]
struct Inner {
    /// resource → (capacity, healthy).
    pools: BTreeMap<String, (usize, usize)>,
    /// resource → prepared devices.
    prepared: BTreeMap<String, usize>,
    registered: Registered,
    generation: Option<i64>,
    publish_error: Option<String>,
    publish_failures: u64,
    prepare_failures: u64,
    /// Time to prepare one claim.
    latency: Histogram,
    sockets: BTreeMap<Socket, Serving>,
    /// (device, resource, reason label) of each withheld VF.
    withheld: Vec<(String, String, &'static str)>,
    /// PodResources: `None` before the first call, else the last call's error.
    pod_resources: Option<Option<String>>,
    /// The driver's reads of the node, and how long without a completed one
    /// is stale.
    walks: Option<Arc<Walks>>,
    stale_after: Option<Duration>,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            pools: BTreeMap::new(),
            prepared: BTreeMap::new(),
            registered: Registered::default(),
            generation: None,
            publish_error: None,
            publish_failures: 0,
            prepare_failures: 0,
            latency: Histogram::new(&BUCKETS),
            sockets: BTreeMap::new(),
            withheld: Vec::new(),
            pod_resources: None,
            walks: None,
            stale_after: None,
        }
    }
}

/// The registry.
#[derive(Debug, Default)]
pub struct DraMetrics {
    inner: Mutex<Inner>,
}

impl DraMetrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The node's devices now.
    pub fn set_view(&self, view: &View) {
        let mut pools: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for d in &view.devices {
            let e = pools.entry(d.resource.clone()).or_default();
            e.0 += 1;
            e.1 += usize::from(d.health.is_healthy());
        }
        let withheld =
            view.withheld.iter().map(|w| (w.name.clone(), w.resource.clone(), w.reason.label())).collect();
        self.with(|m| {
            m.pools = pools;
            m.withheld = withheld;
        });
    }

    /// Reports on `walks` (the driver's reads of the node), stale when none
    /// completed for longer than `stale_after`.
    pub fn watch_walks(&self, walks: Arc<Walks>, stale_after: Option<Duration>) {
        self.with(|m| {
            m.walks = Some(walks);
            m.stale_after = stale_after;
        });
    }

    /// The last PodResources call: `None` when it answered, else why not.
    pub fn set_pod_resources(&self, error: Option<String>) {
        self.with(|m| m.pod_resources = Some(error));
    }

    /// Devices prepared now, per resource.
    pub fn set_prepared(&self, prepared: BTreeMap<String, usize>) {
        self.with(|m| m.prepared = prepared);
    }

    /// What the kubelet said.
    pub fn set_registered(&self, r: Registered) {
        self.with(|m| m.registered = r);
    }

    /// A sync published (or confirmed) `generation`.
    pub fn published(&self, generation: i64) {
        self.with(|m| {
            m.generation = Some(generation);
            m.publish_error = None;
        });
    }

    /// A sync failed.
    pub fn publish_failed(&self, why: String) {
        self.with(|m| {
            m.publish_error = Some(why);
            m.publish_failures += 1;
        });
    }

    /// One prepared claim took `took`; `ok` false when it was refused.
    pub fn prepare(&self, took: Duration, ok: bool) {
        let s = took.as_secs_f64();
        self.with(|m| {
            if !ok {
                m.prepare_failures += 1;
            }
            m.latency.observe(s);
        });
    }

    /// `socket` is served.
    pub fn socket_served(&self, socket: Socket) {
        self.with(|m| {
            let s = m.sockets.entry(socket).or_default();
            s.error = None;
            s.failing = 0;
        });
    }

    /// Binding `socket` failed with `why`; it is tried again.
    pub fn socket_failed(&self, socket: Socket, why: String) {
        self.with(|m| {
            let s = m.sockets.entry(socket).or_default();
            s.error = Some(why);
            s.failing += 1;
            s.failures += 1;
        });
    }

    /// `/healthz`: ready when both sockets are served, registered and published.
    pub fn health(&self) -> (bool, String) {
        self.with(|m| {
            let mut ok = true;
            let mut body = String::new();
            if let Some(w) = &m.walks {
                let (fresh, line) = w.health(m.stale_after);
                ok &= fresh;
                let _ = writeln!(body, "{line}");
            }
            for (socket, s) in &m.sockets {
                match &s.error {
                    None => {
                        let _ = writeln!(body, "{} socket: served", socket.label());
                    }
                    Some(e) => {
                        ok = false;
                        let _ = writeln!(
                            body,
                            "{} socket: not served ({} failed binds in a row, retrying): {e}",
                            socket.label(),
                            s.failing
                        );
                    }
                }
            }
            match &m.registered {
                Registered::Yes => body.push_str("kubelet registration: ok\n"),
                Registered::Unknown => {
                    ok = false;
                    body.push_str("kubelet registration: not yet (the kubelet has not called NotifyRegistrationStatus)\n");
                }
                Registered::No(why) => {
                    ok = false;
                    let _ = writeln!(body, "kubelet registration: refused: {why}");
                }
            }
            match &m.pod_resources {
                Some(None) => {
                    let _ = writeln!(body, "pod-resources: answered ({} VFs withheld)", m.withheld.len());
                }
                Some(Some(e)) => {
                    ok = false;
                    let _ = writeln!(
                        body,
                        "pod-resources: unreachable, retrying: {e}; withholding every VF in another network \
                         namespace that no prepared claim holds, and those its last answer named"
                    );
                }
                None => {
                    ok = false;
                    body.push_str("pod-resources: not asked yet\n");
                }
            }
            match (&m.publish_error, m.generation) {
                (None, Some(g)) => {
                    let _ = writeln!(body, "resourceslices: published, generation {g}");
                }
                (Some(e), _) => {
                    ok = false;
                    let _ = writeln!(body, "resourceslices: publishing fails: {e}");
                }
                (None, None) => {
                    ok = false;
                    body.push_str("resourceslices: not published yet\n");
                }
            }
            (ok, body)
        })
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.with(|m| {
            let mut s = String::new();
            let mut gauge = |name: &str, help: &str, vals: Vec<(&str, usize)>| {
                head(&mut s, name, "gauge", help);
                for (r, v) in vals {
                    sample(&mut s, name, &[("resource", r)], v);
                }
            };
            gauge(
                "kuberdma_pool_capacity",
                "Devices published for the pool.",
                m.pools.iter().map(|(r, (c, _))| (r.as_str(), *c)).collect(),
            );
            gauge(
                "kuberdma_pool_healthy",
                "Healthy devices of the pool.",
                m.pools.iter().map(|(r, (_, h))| (r.as_str(), *h)).collect(),
            );
            gauge(
                "kuberdma_pool_allocated",
                "Devices of the pool prepared for ResourceClaims now.",
                m.pools.keys().map(|r| (r.as_str(), m.prepared.get(r).copied().unwrap_or(0))).collect(),
            );
            let g = "kuberdma_dra_pool_generation";
            head(&mut s, g, "gauge", "Generation of the published ResourceSlice pool.");
            if let Some(v) = m.generation {
                sample(&mut s, g, &[], v);
            }
            let g = "kuberdma_dra_socket_served";
            head(&mut s, g, "gauge", "1 while the kubelet-facing socket is served.");
            for (socket, v) in &m.sockets {
                sample(&mut s, g, &[("socket", socket.label())], u8::from(v.error.is_none()));
            }
            let g = "kuberdma_dra_device_withheld";
            head(
                &mut s,
                g,
                "gauge",
                "1 for each VF of a pool kept out of the slices: already in a pod DRA did not prepare.",
            );
            for (device, resource, reason) in &m.withheld {
                sample(&mut s, g, &[("device", device), ("resource", resource), ("reason", reason)], 1);
            }
            let g = "kuberdma_dra_pod_resources_up";
            head(&mut s, g, "gauge", "1 when the kubelet's PodResources answered the last call.");
            sample(&mut s, g, &[], u8::from(matches!(m.pod_resources, Some(None))));
            let c = "kuberdma_dra_socket_bind_failures_total";
            head(
                &mut s,
                c,
                "counter",
                "Failed binds of the kubelet-facing socket (each retried with capped backoff).",
            );
            for (socket, v) in &m.sockets {
                sample(&mut s, c, &[("socket", socket.label())], v.failures);
            }
            let c = "kuberdma_dra_publish_failures_total";
            head(&mut s, c, "counter", "ResourceSlice syncs that failed.");
            sample(&mut s, c, &[], m.publish_failures);
            let c = "kuberdma_dra_prepare_failures_total";
            head(&mut s, c, "counter", "Claims NodePrepareResources refused.");
            sample(&mut s, c, &[], m.prepare_failures);
            let h = "kuberdma_dra_prepare_duration_seconds";
            head(&mut s, h, "histogram", "Time to prepare one claim.");
            m.latency.render(&mut s, h, &[]);
            if let Some(w) = &m.walks {
                w.render(&mut s);
            }
            s
        })
    }

    /// The routes [`plumbing::http`] serves.
    pub fn routes(self: &Arc<Self>) -> Routes {
        let (m, h) = (self.clone(), self.clone());
        Routes::daemon(move || m.render(), move || h.health())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_prepare_latency_failures_and_the_published_generation() {
        let m = DraMetrics::default();
        m.prepare(Duration::from_millis(2), true);
        m.prepare(Duration::from_millis(200), false);
        m.published(7);
        m.publish_failed("429".into());
        let page = m.render();
        for line in [
            "# TYPE kuberdma_dra_prepare_duration_seconds histogram",
            "kuberdma_dra_prepare_duration_seconds_bucket{le=\"0.001\"} 0",
            "kuberdma_dra_prepare_duration_seconds_bucket{le=\"0.0025\"} 1",
            "kuberdma_dra_prepare_duration_seconds_bucket{le=\"0.5\"} 2",
            "kuberdma_dra_prepare_duration_seconds_bucket{le=\"+Inf\"} 2",
            "kuberdma_dra_prepare_duration_seconds_count 2",
            "kuberdma_dra_prepare_failures_total 1",
            "kuberdma_dra_publish_failures_total 1",
            "kuberdma_dra_pool_generation 7",
        ] {
            assert!(page.lines().any(|l| l == line), "missing `{line}` in\n{page}");
        }
        let (ok, body) = m.health();
        assert!(!ok && body.contains("publishing fails: 429"), "{body}");
    }

    #[test]
    fn a_socket_that_cannot_be_bound_shows_in_health_and_metrics_until_served() {
        let m = DraMetrics::default();
        m.set_registered(Registered::Yes);
        m.published(1);
        m.set_pod_resources(None);
        m.socket_served(Socket::Plugin);
        m.socket_failed(Socket::Registration, "Is a directory (os error 21)".into());
        m.socket_failed(Socket::Registration, "Is a directory (os error 21)".into());
        let (ok, body) = m.health();
        assert!(!ok, "{body}");
        assert!(
            body.contains(
                "registration socket: not served (2 failed binds in a row, retrying): Is a directory"
            ),
            "{body}"
        );
        assert!(body.contains("plugin socket: served"), "{body}");
        let page = m.render();
        for line in [
            "kuberdma_dra_socket_served{socket=\"registration\"} 0",
            "kuberdma_dra_socket_served{socket=\"plugin\"} 1",
            "kuberdma_dra_socket_bind_failures_total{socket=\"registration\"} 2",
        ] {
            assert!(page.lines().any(|l| l == line), "missing `{line}` in\n{page}");
        }
        m.socket_served(Socket::Registration);
        let (ok, body) = m.health();
        assert!(ok, "{body}");
        assert!(m
            .render()
            .lines()
            .any(|l| l == "kuberdma_dra_socket_bind_failures_total{socket=\"registration\"} 2"));
    }

    #[test]
    fn withheld_vfs_and_an_unreachable_pod_resources_show_in_metrics_and_health() {
        use crate::dra::withhold::{Reason, Withheld};
        let m = DraMetrics::default();
        m.set_registered(Registered::Yes);
        m.published(1);
        let (ok, body) = m.health();
        assert!(!ok && body.contains("pod-resources: not asked yet"), "{body}");
        let view = View {
            withheld: vec![Withheld {
                name: "pci-0000-3d-00-2".into(),
                pci: "0000:3d:00.2".parse().unwrap(),
                resource: "kuberdma.io/rdma_vfs".into(),
                reason: Reason::InNetns,
            }],
            ..View::default()
        };
        m.set_view(&view);
        m.set_pod_resources(Some("/x/kubelet.sock does not exist".into()));
        let (ok, body) = m.health();
        assert!(!ok, "{body}");
        assert!(
            body.contains("pod-resources: unreachable, retrying: /x/kubelet.sock does not exist"),
            "{body}"
        );
        let page = m.render();
        for line in [
            "kuberdma_dra_device_withheld{device=\"pci-0000-3d-00-2\",resource=\"kuberdma.io/rdma_vfs\",reason=\"netns\"} 1",
            "kuberdma_dra_pod_resources_up 0",
        ] {
            assert!(page.lines().any(|l| l == line), "missing `{line}` in\n{page}");
        }
        m.set_pod_resources(None);
        let (ok, body) = m.health();
        assert!(ok && body.contains("pod-resources: answered (1 VFs withheld)"), "{body}");
        assert!(m.render().lines().any(|l| l == "kuberdma_dra_pod_resources_up 1"));
    }
}
