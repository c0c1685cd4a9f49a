//! The node agent: observe → checks → fingerprint → publish.
//!
//! One pass ([`evaluate`]) is pure given the observed [`NodeRoce`]; the loop around
//! it ([`Agent::run`]) reads the node on a poll (default 30 s) and whenever the
//! kernel reports a link or DCB change, then publishes through [`Publisher`]:
//! server-side apply of the `RdmaNodeState` status only when the fingerprint
//! changed, the `kuberdma.io/roce-ready` node label when readiness flips, and a
//! Kubernetes Event when new checks start failing. API errors that can pass
//! (409 conflict, 429, 5xx, transport) are retried with exponential backoff.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use nic::roce::{observe, DcbSource, InterfaceRoce, NodeRoce, ObserveOpts, Observed};
use nic::Roots;
use serde_json::json;
use tokio::sync::mpsc;

use crate::checks::{self, check_node, is_ready, map_str, prio_str};
use crate::crd::{
    Check, CheckResult, Condition, DscpMapping, InterfaceState, RdmaNodeState, RdmaNodeStateSpec,
    RdmaNodeStateStatus, RoceProfile, Summary, Unavailable, AGENT_MANAGER, READY_LABEL,
};
use crate::enforce;
use crate::metrics;

/// Errors of the agent loop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A Kubernetes API call failed (after retries where it could pass).
    #[error("{op}: {source}")]
    Api {
        /// What was being done, e.g. `apply rdmanodestates/node-a status`.
        op: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Reading the node panicked or the blocking task was cancelled.
    #[error("reading the node failed: {0}")]
    Observe(String),
}

/// Where the node is read from.
#[derive(Debug, Clone)]
pub struct NodeSource {
    /// sysfs and dev roots.
    pub roots: Roots,
    /// DCB netlink, or the simulated node's description.
    pub dcb: DcbSource,
    /// Reader options.
    pub opts: ObserveOpts,
}

impl NodeSource {
    /// Discover and observe the node (blocking sysfs / netlink I/O).
    pub fn read(&self) -> NodeRoce {
        let inv = nic::discover(&self.roots);
        observe(&self.roots, &inv, &self.dcb, &self.opts)
    }
}

/// One agent pass, without the API server: checks of `node` against `profile`, the
/// summary, conditions and the fingerprint. `observedAt` and condition times are left
/// for the caller, so equal inputs give equal outputs.
pub fn evaluate(profile: &RoceProfile, node: &NodeRoce) -> RdmaNodeStateStatus {
    let spec = &profile.spec;
    let checks = check_node(spec, node);
    let interfaces: Vec<InterfaceState> = node
        .interfaces
        .iter()
        .filter(|i| checks::interface_selected(spec.interface_selector.as_ref(), i))
        .map(interface_state)
        .collect();
    let summary = summarize(&interfaces, &checks);
    let conditions = conditions(&checks);
    let mut status = RdmaNodeStateStatus {
        observed_at: None,
        fingerprint: String::new(),
        profile: profile.name_any(),
        mode: spec.mode,
        summary,
        interfaces,
        checks,
        conditions,
        enforcement: Vec::new(),
    };
    status.fingerprint = fingerprint(&status);
    status
}

/// FNV-1a 64 of everything but time and the fingerprint itself: stable across
/// processes and Rust versions (unlike `DefaultHasher`).
pub fn fingerprint(status: &RdmaNodeStateStatus) -> String {
    let mut s = status.clone();
    s.observed_at = None;
    s.fingerprint.clear();
    for c in &mut s.conditions {
        c.last_transition_time = None;
    }
    let bytes = serde_json::to_vec(&s).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The CRD view of one observed interface (counters stay in metrics, so the status
/// changes only when a setting does).
pub fn interface_state(i: &InterfaceRoce) -> InterfaceState {
    let mut un = Vec::new();
    fn take<T: Clone>(un: &mut Vec<Unavailable>, field: &str, o: &Observed<T>) -> Option<T> {
        match o {
            Observed::Value(v) => Some(v.clone()),
            Observed::Unsupported(r) => {
                un.push(Unavailable {
                    field: field.into(),
                    state: CheckResult::Unsupported,
                    reason: r.clone(),
                });
                None
            }
            Observed::Unknown(r) => {
                un.push(Unavailable { field: field.into(), state: CheckResult::Unknown, reason: r.clone() });
                None
            }
        }
    }
    let dcbx = take(&mut un, "dcbx", &i.dcbx).map(|d| match d {
        nic::roce::DcbxMode::Os => "os".to_string(),
        nic::roce::DcbxMode::Firmware => "firmware".to_string(),
    });
    let dscp = take(&mut un, "dscpToPriority", &i.dscp_to_priority)
        .map(|m| m.into_iter().map(|(dscp, priority)| DscpMapping { dscp, priority }).collect());
    let cnp = take(&mut un, "cnp", &i.cnp);
    InterfaceState {
        name: i.netdev.clone(),
        pci: i.pci.map(|p| p.to_string()),
        driver: i.driver.clone(),
        rdma_device: i.rdma_dev.clone(),
        speed_mbps: take(&mut un, "speedMbps", &i.speed_mbps),
        mtu: take(&mut un, "mtu", &i.mtu),
        active_mtu: take(&mut un, "activeMtu", &i.active_mtu),
        operstate: take(&mut un, "operstate", &i.operstate),
        dcbx,
        trust: take(&mut un, "trust", &i.trust).map(|t| t.as_str().to_string()),
        dscp_to_priority: dscp,
        pfc_priorities: take(&mut un, "pfcPriorities", &i.pfc).map(|p| p.enabled_priorities()),
        ets_bandwidth: take(&mut un, "etsBandwidth", &i.ets).map(|e| e.tc_tx_bw.to_vec()),
        global_pause: take(&mut un, "globalPause", &i.global_pause),
        ecn_priorities: take(&mut un, "ecnPriorities", &i.ecn),
        cnp_dscp: cnp.map(|c| c.dscp),
        cnp_priority: cnp.map(|c| c.priority),
        roce_mode: take(&mut un, "roceMode", &i.roce_mode),
        tos: take(&mut un, "tos", &i.tos),
        gid_index: take(&mut un, "gidIndex", &i.gid_index),
        port_state: take(&mut un, "portState", &i.port_state),
        num_vfs: take(&mut un, "numVfs", &i.num_vfs),
        total_vfs: take(&mut un, "totalVfs", &i.total_vfs),
        fw_lldp_agent: match &i.fw_lldp_agent {
            // Not an E810: nothing to report, and not a problem.
            Observed::Unsupported(_) => None,
            o => take(&mut un, "fwLldpAgent", o),
        },
        unavailable: un,
    }
}

fn joined<T>(
    ifs: &[InterfaceState],
    f: impl Fn(&InterfaceState) -> Option<T>,
    show: impl Fn(T) -> String,
) -> String {
    let vals: BTreeSet<String> = ifs.iter().map(|i| f(i).map(&show).unwrap_or_else(|| "?".into())).collect();
    if vals.is_empty() {
        return "-".into();
    }
    vals.into_iter().collect::<Vec<_>>().join(",")
}

/// Printer-column summary.
pub fn summarize(ifs: &[InterfaceState], checks: &[Check]) -> Summary {
    let pass = checks.iter().filter(|c| c.result == CheckResult::Pass).count();
    let counted = checks.iter().filter(|c| c.result != CheckResult::NotApplicable).count();
    Summary {
        ready: if node_ready(checks) { "True" } else { "False" }.into(),
        pass_total: format!("{pass}/{counted}"),
        pfc: joined(ifs, |i| i.pfc_priorities.clone(), |v| prio_str(&v)),
        trust: joined(ifs, |i| i.trust.clone(), |t| t),
        ecn: joined(ifs, |i| i.ecn_priorities.clone(), |v| prio_str(&v)),
        mtu: joined(ifs, |i| i.mtu, |m| m.to_string()),
        roce: joined(
            ifs,
            |i| i.roce_mode.clone(),
            |m| {
                if m.contains("v2") {
                    "v2".into()
                } else if m.contains("v1") {
                    "v1".into()
                } else {
                    m
                }
            },
        ),
    }
}

/// Ready: at least one interface checked and nothing fails.
pub fn node_ready(checks: &[Check]) -> bool {
    !checks.is_empty() && is_ready(checks)
}

/// RoceReady, Drifted, Degraded.
pub fn conditions(checks: &[Check]) -> Vec<Condition> {
    let failing: Vec<String> = checks
        .iter()
        .filter(|c| c.result == CheckResult::Fail)
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect();
    let unknown: Vec<String> = checks
        .iter()
        .filter(|c| c.result == CheckResult::Unknown)
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect();
    let ready = node_ready(checks);
    let cond = |t: &str, on: bool, reason: &str, message: String| Condition {
        type_: t.into(),
        status: if on { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: None,
    };
    vec![
        cond(
            "RoceReady",
            ready,
            if ready {
                "AllChecksPass"
            } else if checks.is_empty() {
                "NoRoceInterfaces"
            } else {
                "ChecksFailing"
            },
            if ready { String::new() } else { failing.join(", ") },
        ),
        cond(
            "Drifted",
            !failing.is_empty(),
            if failing.is_empty() { "InProfile" } else { "SettingsDrifted" },
            failing.join(", "),
        ),
        cond(
            "Degraded",
            !unknown.is_empty(),
            if unknown.is_empty() { "AllReadable" } else { "UnreadableSettings" },
            unknown.join(", "),
        ),
    ]
}

/// Keeps `lastTransitionTime` of conditions whose status did not change; stamps `now` on the others.
pub fn carry_transition_times(new: &mut [Condition], old: &[Condition], now: &str) {
    for c in new.iter_mut() {
        let prev = old.iter().find(|o| o.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status => p.last_transition_time.clone().or_else(|| Some(now.into())),
            _ => Some(now.into()),
        };
    }
}

/// The profile for a node: the first (by name) whose `nodeSelector` matches the
/// node's labels, else [`checks::default_profile`].
pub fn select_profile(
    profiles: &[RoceProfile],
    labels: &std::collections::BTreeMap<String, String>,
) -> RoceProfile {
    let mut matching: Vec<&RoceProfile> =
        profiles.iter().filter(|p| selector_matches(&p.spec.node_selector, labels)).collect();
    matching.sort_by_key(|p| p.name_any());
    if matching.len() > 1 {
        tracing::warn!(
            chosen = %matching[0].name_any(),
            others = ?matching[1..].iter().map(|p| p.name_any()).collect::<Vec<_>>(),
            "several RoceProfiles match this node; using the first by name"
        );
    }
    matching.first().map(|p| (*p).clone()).unwrap_or_else(checks::default_profile)
}

/// Every selector label must be present with the same value.
pub fn selector_matches(
    sel: &std::collections::BTreeMap<String, String>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Retry policy for API calls.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Upper bound of one delay.
    pub max: Duration,
    /// Attempts in all (≥ 1).
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial: Duration::from_millis(500), max: Duration::from_secs(8), attempts: 5 }
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

/// Runs `f` until it succeeds, fails for good, or the attempts run out; waits
/// `initial · 2ⁿ` (capped at `max`) between attempts.
pub async fn with_backoff<T, F, Fut>(b: Backoff, op: &str, mut f: F) -> Result<T, AgentError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = b.initial;
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < b.attempts.max(1) && is_retriable(&e) => {
                tracing::warn!(op, attempt, delay_ms = delay.as_millis() as u64, error = %e, "API call failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(b.max);
                attempt += 1;
            }
            Err(e) => return Err(AgentError::Api { op: op.into(), source: e }),
        }
    }
}

/// What [`Publisher::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The status was applied (its fingerprint changed).
    pub status_applied: bool,
    /// The node label was patched.
    pub label_patched: bool,
    /// A drift Event was posted.
    pub event_posted: bool,
}

/// Writes the agent's results to the API server, remembering what it wrote so an
/// unchanged node costs no requests.
pub struct Publisher {
    client: Client,
    node: String,
    node_uid: Option<String>,
    backoff: Backoff,
    object_applied: bool,
    last_fingerprint: Option<String>,
    last_ready: Option<bool>,
    last_failing: BTreeSet<(String, String)>,
    last_conditions: Vec<Condition>,
}

impl Publisher {
    /// A publisher for `node`.
    pub fn new(client: Client, node: impl Into<String>) -> Self {
        Self {
            client,
            node: node.into(),
            node_uid: None,
            backoff: Backoff::default(),
            object_applied: false,
            last_fingerprint: None,
            last_ready: None,
            last_failing: BTreeSet::new(),
            last_conditions: Vec::new(),
        }
    }

    /// Replaces the retry policy.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }

    /// The Node's uid, so the `RdmaNodeState` is owned by (and garbage-collected with) its Node.
    pub fn set_node_uid(&mut self, uid: Option<String>) {
        self.node_uid = uid;
    }

    /// Publishes `status` (from [`evaluate`]); `now` is RFC 3339.
    pub async fn publish(
        &mut self,
        mut status: RdmaNodeStateStatus,
        now: &str,
    ) -> Result<Published, AgentError> {
        let mut done = Published::default();
        let api: Api<RdmaNodeState> = Api::all(self.client.clone());
        let pp = PatchParams::apply(AGENT_MANAGER).force();
        if self.last_fingerprint.as_deref() != Some(status.fingerprint.as_str()) {
            if !self.object_applied {
                let mut obj =
                    RdmaNodeState::new(&self.node, RdmaNodeStateSpec { node_name: self.node.clone() });
                if let Some(uid) = &self.node_uid {
                    obj.meta_mut().owner_references = Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.node.clone(),
                        uid: uid.clone(),
                        ..Default::default()
                    }]);
                }
                let body = serde_json::to_value(&obj).map_err(|e| AgentError::Api {
                    op: "serialise RdmaNodeState".into(),
                    source: kube::Error::SerdeError(e),
                })?;
                let op = format!("apply rdmanodestates/{}", self.node);
                let patch = Patch::Apply(body);
                with_backoff(self.backoff, &op, || api.patch(&self.node, &pp, &patch)).await?;
                self.object_applied = true;
            }
            status.observed_at = Some(now.to_string());
            carry_transition_times(&mut status.conditions, &self.last_conditions, now);
            let body = json!({
                "apiVersion": RdmaNodeState::api_version(&()),
                "kind": RdmaNodeState::kind(&()),
                "status": status,
            });
            let op = format!("apply rdmanodestates/{} status", self.node);
            let patch = Patch::Apply(body);
            let r = with_backoff(self.backoff, &op, || api.patch_status(&self.node, &pp, &patch)).await;
            if let Err(AgentError::Api { source: kube::Error::Api(s), .. }) = &r {
                // The object was deleted under us (by hand, or by the controller): recreate it next pass.
                if s.code == 404 {
                    self.object_applied = false;
                }
            }
            r?;
            self.last_fingerprint = Some(status.fingerprint.clone());
            self.last_conditions = status.conditions.clone();
            done.status_applied = true;
        }

        let ready = status.summary.ready == "True";
        if self.last_ready != Some(ready) {
            let nodes: Api<Node> = Api::all(self.client.clone());
            let body = json!({"metadata": {"labels": {READY_LABEL: ready.to_string()}}});
            let op = format!("label nodes/{}", self.node);
            let (patch, mp) = (Patch::Merge(body), PatchParams::default());
            with_backoff(self.backoff, &op, || nodes.patch(&self.node, &mp, &patch)).await?;
            self.last_ready = Some(ready);
            done.label_patched = true;
        }

        let failing: BTreeSet<(String, String)> = status
            .checks
            .iter()
            .filter(|c| c.result == CheckResult::Fail)
            .map(|c| (c.interface.clone(), c.name.clone()))
            .collect();
        let new: Vec<&Check> = status
            .checks
            .iter()
            .filter(|c| {
                c.result == CheckResult::Fail
                    && !self.last_failing.contains(&(c.interface.clone(), c.name.clone()))
            })
            .collect();
        if !new.is_empty() {
            let ev = drift_event(&self.node, self.node_uid.as_deref(), &new, now);
            let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
            let op = format!("post drift event for {}", self.node);
            let pp = PostParams::default();
            with_backoff(self.backoff, &op, || events.create(&pp, &ev)).await?;
            done.event_posted = true;
        }
        self.last_failing = failing;
        Ok(done)
    }
}

/// An `events.k8s.io/v1` Warning about the Node: which checks started failing and how to fix them.
pub fn drift_event(node: &str, uid: Option<&str>, new: &[&Check], now: &str) -> Event {
    let mut note = new
        .iter()
        .map(|c| format!("{}/{}: want {}, have {}", c.interface, c.name, c.expected, c.actual))
        .collect::<Vec<_>>()
        .join("; ");
    // The API server rejects notes over 1 kB.
    if note.len() > 1000 {
        let mut cut = 997;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    let time = now.parse::<Timestamp>().unwrap_or_else(|_| Timestamp::now());
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}.roce-drift.")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(time)),
        action: Some("CheckRoce".into()),
        reason: Some("RoceDrift".into()),
        note: Some(note),
        type_: Some("Warning".into()),
        reporting_controller: Some("kuberdma.io/agent".into()),
        reporting_instance: Some(format!("kube-rdma-agent-{node}")),
        regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: uid.map(String::from),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Current time, RFC 3339 with seconds.
pub fn now_rfc3339() -> String {
    Timestamp::now().round(jiff_unit_second()).unwrap_or_else(|_| Timestamp::now()).to_string()
}

fn jiff_unit_second() -> k8s_openapi::jiff::Unit {
    k8s_openapi::jiff::Unit::Second
}

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node to report as.
    pub node_name: String,
    /// Where to read it.
    pub source: NodeSource,
    /// Poll interval.
    pub poll: Duration,
    /// A fixed profile (from `--profile`); otherwise profiles come from the cluster.
    pub profile: Option<RoceProfile>,
    /// Wait after a kernel event before reading, so a burst of events costs one pass.
    pub debounce: Duration,
}

/// The agent: one node, one publisher, the latest metrics text.
pub struct Agent {
    cfg: AgentConfig,
    client: Client,
    publisher: Publisher,
    metrics: Arc<RwLock<String>>,
}

impl Agent {
    /// An agent writing through `client`.
    pub fn new(cfg: AgentConfig, client: Client) -> Self {
        let publisher = Publisher::new(client.clone(), cfg.node_name.clone());
        Self { cfg, client, publisher, metrics: Arc::new(RwLock::new(String::new())) }
    }

    /// Replaces the retry policy.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.publisher = self.publisher.with_backoff(b);
        self
    }

    /// The metrics text the agent keeps up to date (serve it with [`metrics::serve`]).
    pub fn metrics(&self) -> Arc<RwLock<String>> {
        self.metrics.clone()
    }

    /// One pass: node labels and profiles from the API, read, check, enforce when the
    /// profile says so, publish.
    pub async fn tick(&mut self) -> Result<(RdmaNodeStateStatus, Published), AgentError> {
        let b = self.publisher.backoff;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = self.cfg.node_name.clone();
        let node = with_backoff(b, &format!("get nodes/{name}"), || nodes.get(&name)).await?;
        self.publisher.set_node_uid(node.metadata.uid.clone());
        let profile = match &self.cfg.profile {
            Some(p) => p.clone(),
            None => {
                let api: Api<RoceProfile> = Api::all(self.client.clone());
                let lp = ListParams::default();
                let list = with_backoff(b, "list roceprofiles", || api.list(&lp)).await?;
                select_profile(&list.items, node.labels())
            }
        };
        let src = self.cfg.source.clone();
        let observed = tokio::task::spawn_blocking(move || src.read())
            .await
            .map_err(|e| AgentError::Observe(e.to_string()))?;
        let (observed, records) = if profile.spec.mode == crate::crd::Mode::Enforce {
            let src = self.cfg.source.clone();
            let spec = profile.spec.clone();
            tokio::task::spawn_blocking(move || enforce::enforce(&src, &spec, observed))
                .await
                .map_err(|e| AgentError::Observe(e.to_string()))?
        } else {
            (observed, Vec::new())
        };
        let mut status = evaluate(&profile, &observed);
        if !records.is_empty() {
            status.enforcement = records;
            status.fingerprint = fingerprint(&status);
        }
        if let Ok(mut m) = self.metrics.write() {
            *m = metrics::render(&observed, &status.checks);
        }
        let published = self.publisher.publish(status.clone(), &now_rfc3339()).await?;
        Ok((status, published))
    }

    /// Runs until `shutdown` resolves: a pass now, then on every poll tick and after
    /// every kernel event on `triggers` (debounced). A failed pass is logged and
    /// retried at the next tick.
    pub async fn run(
        mut self,
        mut triggers: Option<mpsc::Receiver<()>>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            match self.tick().await {
                Ok((s, p)) => tracing::info!(
                    ready = %s.summary.ready, pass_total = %s.summary.pass_total,
                    applied = p.status_applied, labelled = p.label_patched, event = p.event_posted,
                    "checked node"
                ),
                Err(e) => tracing::error!(error = %e, "agent pass failed"),
            }
            let event = async {
                match triggers.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.cfg.poll) => {}
                got = event => {
                    if got.is_none() {
                        tracing::warn!("kernel event stream ended; polling only");
                        triggers = None;
                    } else {
                        tokio::time::sleep(self.cfg.debounce).await;
                        if let Some(rx) = triggers.as_mut() {
                            while rx.try_recv().is_ok() {}
                        }
                    }
                }
            }
        }
    }
}

/// The one-line-per-interface view of observed settings (for `--once` tables).
pub fn describe_interface(i: &InterfaceState) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    format!(
        "{} ({}{}): speed {} mtu {} (active {}) trust {} map {} pfc {} ecn {} cnp {} roce {} tos {} gid {}",
        i.name,
        opt(i.driver.clone()),
        i.rdma_device.as_ref().map(|d| format!(", {d}")).unwrap_or_default(),
        opt(i.speed_mbps.map(|s| format!("{s}Mb/s"))),
        opt(i.mtu.map(|m| m.to_string())),
        opt(i.active_mtu.map(|m| m.to_string())),
        opt(i.trust.clone()),
        opt(i.dscp_to_priority.as_ref().map(|m| map_str(&m.iter().map(|e| (e.dscp, e.priority)).collect()))),
        opt(i.pfc_priorities.as_ref().map(|p| prio_str(p))),
        opt(i.ecn_priorities.as_ref().map(|p| prio_str(p))),
        match (i.cnp_dscp, i.cnp_priority) {
            (Some(d), Some(p)) => format!("{d}/{p}"),
            _ => "?".into(),
        },
        opt(i.roce_mode.clone()),
        opt(i.tos.map(|t| t.to_string())),
        opt(i.gid_index.map(|g| g.to_string())),
    )
}
