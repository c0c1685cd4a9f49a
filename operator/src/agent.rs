//! The node agent's loop: watches in, passes, writes out.
//!
//! Inputs: three watches (its own `Node`, metadata only; its own `RdmaNodeState`;
//! the `RoceProfile`s, each decoded on its own so one bad profile is skipped), the
//! kernel's link/DCB notifications for the interfaces it checks, and a local poll
//! (default 30 s ± 10 %) that re-reads the node without any API request.
//!
//! A pass reads the node when it may have changed, evaluates it against the
//! profile that applies ([`crate::status::evaluate`], pure), enforces in `Enforce`
//! mode, and hands the result to the [`Publisher`], which writes only what the
//! server does not already show. An idle node costs one request per heartbeat
//! (default every 10 min, + up to 10 % jitter) beyond its open watches.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use nic::netlink::events::RtnlEvent;
use nic::roce::NodeRoce;
use tokio::sync::mpsc;

use crate::api::{chain, describe_watch, watch_error_kind, ApiError, Backoff};
use crate::crd::{EnforceRecord, Mode, RdmaNodeState, RdmaNodeStateStatus, RoceProfile, RoceProfileSpec};
use crate::health::Health;
use crate::profiles::{decode, profile_resource, resolve, select_profile, BadProfile, ProfileSet};
use crate::publish::{Published, Publisher, Seen};
use crate::source::NodeSource;
use crate::status::{evaluate, fingerprint, now_rfc3339};
use crate::{enforce, jitter, metrics};

/// Errors of one agent pass.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A Kubernetes API call failed (after retries where it could pass).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Reading the node panicked or the blocking task was cancelled.
    #[error("reading the node failed: {0}")]
    Observe(String),
}

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node to report as.
    pub node_name: String,
    /// Where to read it.
    pub source: NodeSource,
    /// Local re-read interval (no API requests unless something changed).
    pub poll: Duration,
    /// A fixed profile (from `--profile`); otherwise profiles come from the cluster.
    pub profile: Option<RoceProfile>,
    /// Wait after a kernel event before reading, so a burst of events costs one pass.
    pub debounce: Duration,
    /// Longest time without a status write before `lastHeartbeatTime` is refreshed.
    pub heartbeat: Duration,
    /// Server-side timeout of each watch request (the watch is then re-opened from
    /// where it was, without a re-list).
    pub watch_timeout: Duration,
}

impl AgentConfig {
    /// Defaults for `node_name` reading `source`: poll 30 s, debounce 500 ms,
    /// heartbeat 10 min, watch timeout 10 min.
    pub fn new(node_name: impl Into<String>, source: NodeSource) -> Self {
        Self {
            node_name: node_name.into(),
            source,
            poll: Duration::from_secs(30),
            profile: None,
            debounce: Duration::from_millis(500),
            heartbeat: HEARTBEAT,
            watch_timeout: Duration::from_secs(600),
        }
    }
}

/// How often an idle agent confirms it is alive (`status.lastHeartbeatTime`).
/// One write per node per 10 minutes is the fleet's idle API budget.
pub const HEARTBEAT: Duration = Duration::from_secs(600);

/// The fixed lengthening (0..10 %) of the heartbeat of the agent of `node`, so
/// agents started together spread their heartbeats: an idle agent writes every
/// `heartbeat + heartbeat_jitter(node, heartbeat)`.
pub fn heartbeat_jitter(node: &str, heartbeat: Duration) -> Duration {
    let h = crate::status::fnv1a(node.as_bytes());
    heartbeat.mul_f64((h % 1000) as f64 / 10_000.0)
}

/// A pass failing on the API is retried after this, doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// When [`Agent::run`] next acts, and on what.
struct Timers {
    /// The next pass.
    due: Option<Instant>,
    /// Whether the next pass reads the node again.
    reread: bool,
    next_poll: Instant,
    /// A kernel event, debounced.
    kernel_at: Option<Instant>,
    /// The next probe of a failing API.
    probe_at: Option<Instant>,
    heartbeat_not_before: Instant,
}

/// The agent: one node, its watches' view, the last reading, the publisher.
pub struct Agent {
    cfg: AgentConfig,
    client: Client,
    publisher: Publisher,
    metrics: Arc<RwLock<String>>,
    health: Health,
    profiles: ProfileSet,
    profiles_synced: bool,
    reported_bad: BTreeSet<(String, Option<i64>)>,
    observed: Option<NodeRoce>,
    last_profile: Option<RoceProfile>,
    /// What Enforce last wrote or refused, and under which profile (name, spec).
    enforced: Option<(ProfileKey, Vec<EnforceRecord>)>,
    failures: u32,
}

type ProfileKey = (String, RoceProfileSpec);

/// The enforcement records a pass publishes: its own when it wrote or refused
/// something, else those of the last pass that did under the same profile. A
/// converged node keeps showing what was applied to it; a new profile, or leaving
/// Enforce, starts afresh.
fn carry_records(
    last: Option<(ProfileKey, Vec<EnforceRecord>)>,
    key: &ProfileKey,
    enforcing: bool,
    now: Vec<EnforceRecord>,
) -> Option<(ProfileKey, Vec<EnforceRecord>)> {
    match (enforcing, now.is_empty(), last) {
        (false, _, _) => None,
        (true, false, _) => Some((key.clone(), now)),
        (true, true, Some((k, recs))) if &k == key => Some((k, recs)),
        (true, true, _) => None,
    }
}

/// Kernel notifications that concern an interface the agent checks (or that
/// notifications were lost). Other links (VF netdevs moving into pods, veths)
/// do not start a pass.
pub fn concerns(ev: &RtnlEvent, watched: &BTreeSet<String>) -> bool {
    match ev {
        RtnlEvent::Link(l) => l.name.as_ref().is_some_and(|n| watched.contains(n)),
        RtnlEvent::Dcb(d) => d.ifname.as_ref().is_none_or(|n| watched.contains(n)),
        RtnlEvent::Overrun => true,
        RtnlEvent::Other { .. } => false,
    }
}

/// One watch stream's update, as the loop consumes it.
enum Update {
    Node(Seen<kube::api::ObjectMeta>),
    State(Box<Seen<RdmaNodeState>>),
    Profiles(Seen<DynamicObject>, Option<Vec<DynamicObject>>),
    Failed(&'static str, String),
}

/// A watch update and, for lists and deletions, the objects concerned.
type Folded<K> = (Seen<K>, Option<Vec<K>>);

/// Folds `Init`/`InitApply`/`InitDone` into one `Listed` and maps the rest.
fn fold<K: Clone>(
    buf: &mut Option<Vec<K>>,
    ev: Result<Event<K>, watcher::Error>,
) -> Option<Result<Folded<K>, watcher::Error>> {
    match ev {
        Err(e) => Some(Err(e)),
        Ok(Event::Init) => {
            *buf = Some(Vec::new());
            None
        }
        Ok(Event::InitApply(o)) => {
            buf.get_or_insert_with(Vec::new).push(o);
            None
        }
        Ok(Event::InitDone) => {
            let all = buf.take().unwrap_or_default();
            Some(Ok((Seen::Listed(all.first().cloned()), Some(all))))
        }
        Ok(Event::Apply(o)) => Some(Ok((Seen::Applied(o), None))),
        // The deleted object rides along: profiles need its name.
        Ok(Event::Delete(o)) => Some(Ok((Seen::Deleted, Some(vec![o])))),
    }
}

fn watch_config(field_selector: Option<&str>, timeout: Duration) -> watcher::Config {
    let mut c = watcher::Config::default().timeout(timeout.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
    if let Some(f) = field_selector {
        c = c.fields(f);
    }
    c
}

impl Agent {
    /// An agent writing through `client`.
    pub fn new(cfg: AgentConfig, client: Client) -> Self {
        // "No successful pass for N intervals": N = 3.
        let health = Health::new("agent", (cfg.poll * 3).max(Duration::from_secs(3)));
        let publisher = Publisher::new(client.clone(), cfg.node_name.clone(), health.api.clone());
        Self {
            cfg,
            client,
            publisher,
            metrics: Arc::new(RwLock::new(String::new())),
            health,
            profiles: ProfileSet::new(),
            profiles_synced: false,
            reported_bad: BTreeSet::new(),
            observed: None,
            last_profile: None,
            enforced: None,
            failures: 0,
        }
    }

    /// Replaces the retry policy of single API calls.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.publisher = self.publisher.with_backoff(b);
        self
    }

    /// The node's RoCE metrics text, updated every pass.
    pub fn metrics(&self) -> Arc<RwLock<String>> {
        self.metrics.clone()
    }

    /// Liveness and self-metrics.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// The `/metrics`, `/healthz` and `/livez` endpoints of this agent.
    pub fn endpoints(&self) -> crate::health::Endpoints {
        let (text, health) = (self.metrics.clone(), self.health.clone());
        let h = health.clone();
        crate::health::Endpoints {
            metrics: Arc::new(move || {
                let mut t = text.read().map(|t| t.clone()).unwrap_or_default();
                t.push_str(&h.render());
                t
            }),
            health,
        }
    }

    /// Interfaces whose kernel notifications start a pass: those last read.
    pub fn watched_interfaces(&self) -> BTreeSet<String> {
        self.observed.iter().flat_map(|n| n.interfaces.iter().map(|i| i.netdev.clone())).collect()
    }

    /// The profile for this node now.
    fn profile(&self) -> RoceProfile {
        match &self.cfg.profile {
            Some(p) => p.clone(),
            None => {
                let empty = Default::default();
                let labels = self.publisher.node_labels().unwrap_or(&empty);
                select_profile(self.profiles.values().filter_map(|r| r.as_ref().ok()), labels)
            }
        }
    }

    /// Whether the watches have listed what a pass needs.
    pub fn ready_to_publish(&self) -> bool {
        self.publisher.synced() && (self.cfg.profile.is_some() || self.profiles_synced)
    }

    async fn read(&self) -> Result<NodeRoce, AgentError> {
        let src = self.cfg.source.clone();
        tokio::task::spawn_blocking(move || src.read()).await.map_err(|e| AgentError::Observe(e.to_string()))
    }

    /// One pass: read the node if `reread` (or never read), check against the
    /// profile that applies, enforce in `Enforce` mode, publish what the server
    /// does not show yet.
    pub async fn pass(&mut self, reread: bool) -> Result<(RdmaNodeStateStatus, Published), AgentError> {
        let t0 = Instant::now();
        let r = self.pass_inner(reread).await;
        match &r {
            // Before the watches have listed, a pass publishes nothing: not a success yet.
            Ok(_) if !self.ready_to_publish() => {}
            Ok(_) => {
                self.health.pass_ok(t0.elapsed());
                self.failures = 0;
            }
            Err(_) => {
                self.health.pass_failed(t0.elapsed());
                self.failures += 1;
            }
        }
        r
    }

    async fn pass_inner(&mut self, reread: bool) -> Result<(RdmaNodeStateStatus, Published), AgentError> {
        let profile = self.profile();
        let enforcing = profile.spec.mode == Mode::Enforce;
        let observed = match (&self.observed, reread || enforcing) {
            (Some(o), false) => o.clone(),
            _ => self.read().await?,
        };
        let (observed, records) = if enforcing {
            let (src, spec) = (self.cfg.source.clone(), profile.spec.clone());
            tokio::task::spawn_blocking(move || enforce::enforce(&src, &spec, observed))
                .await
                .map_err(|e| AgentError::Observe(e.to_string()))?
        } else {
            (observed, Vec::new())
        };
        if self.last_profile.as_ref() != Some(&profile) {
            self.note_tie();
        }
        let mut status = evaluate(&profile, &observed);
        let key = (profile.name_any(), profile.spec.clone());
        self.enforced = carry_records(self.enforced.take(), &key, enforcing, records);
        if let Some((_, recs)) = &self.enforced {
            status.enforcement = recs.clone();
            status.fingerprint = fingerprint(&status);
        }
        if let Ok(mut m) = self.metrics.write() {
            *m = metrics::render(&observed, &status.checks);
        }
        self.observed = Some(observed);
        self.last_profile = Some(profile);
        if !self.ready_to_publish() {
            return Ok((status, Published::default()));
        }
        let published = self.publisher.publish(status.clone(), &now_rfc3339()).await?;
        Ok((status, published))
    }

    /// Says so when several profiles tie for this node (once per change of profile):
    /// it is checked in Audit and nothing is enforced ([`resolve`]).
    fn note_tie(&self) {
        if self.cfg.profile.is_some() {
            return;
        }
        let empty = Default::default();
        let labels = self.publisher.node_labels().unwrap_or(&empty);
        let r = resolve(self.profiles.values().filter_map(|r| r.as_ref().ok()), labels);
        if r.ambiguous {
            tracing::warn!(
                profiles = ?r.names(),
                checked = %r.profile().name_any(),
                "several RoceProfiles select this node and none is more specific: checking in Audit, enforcing none"
            );
        }
    }

    fn note_bad_profile(&mut self, bad: &BadProfile) {
        if self.reported_bad.insert((bad.name.clone(), bad.generation)) {
            tracing::warn!(profile = %bad.name, error = %bad.error, "skipping a RoceProfile this agent cannot use");
        }
    }

    fn profiles_updated(&mut self, seen: Seen<DynamicObject>, objs: Option<Vec<DynamicObject>>) {
        match seen {
            Seen::Listed(_) => {
                self.profiles.clear();
                for o in objs.unwrap_or_default() {
                    self.profiles.insert(o.name_any(), decode(&o));
                }
                self.profiles_synced = true;
            }
            Seen::Applied(o) => {
                self.profiles.insert(o.name_any(), decode(&o));
            }
            Seen::Deleted => {
                for o in objs.unwrap_or_default() {
                    self.profiles.remove(&o.name_any());
                }
            }
        }
        let bad: Vec<BadProfile> = self.profiles.values().filter_map(|r| r.as_ref().err().cloned()).collect();
        for b in &bad {
            self.note_bad_profile(b);
        }
    }

    fn streams(&self) -> impl Stream<Item = Update> + Send + 'static {
        let name = &self.cfg.node_name;
        let sel = format!("metadata.name={name}");
        let t = self.cfg.watch_timeout;
        let nodes: Api<PartialObjectMeta<Node>> = Api::all(self.client.clone());
        let node_w =
            watcher::watcher(nodes, watch_config(Some(&sel), t)).default_backoff().scan(None, |buf, ev| {
                let out = match fold(buf, ev) {
                    None => None,
                    Some(Ok((s, _))) => Some(Update::Node(match s {
                        Seen::Applied(o) => Seen::Applied(o.metadata),
                        Seen::Deleted => Seen::Deleted,
                        Seen::Listed(o) => Seen::Listed(o.map(|o| o.metadata)),
                    })),
                    Some(Err(e)) => Some(Update::Failed(
                        watch_error_kind(&e),
                        format!("watch nodes: {}", describe_watch(&e)),
                    )),
                };
                futures::future::ready(Some(out))
            });
        let states: Api<RdmaNodeState> = Api::all(self.client.clone());
        let state_w =
            watcher::watcher(states, watch_config(Some(&sel), t)).default_backoff().scan(None, |buf, ev| {
                let out = match fold(buf, ev) {
                    None => None,
                    Some(Ok((s, _))) => Some(Update::State(Box::new(s))),
                    Some(Err(e)) => Some(Update::Failed(
                        watch_error_kind(&e),
                        format!("watch rdmanodestates: {}", describe_watch(&e)),
                    )),
                };
                futures::future::ready(Some(out))
            });
        let profile_w = if self.cfg.profile.is_some() {
            futures::stream::pending().boxed()
        } else {
            let ar = profile_resource();
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
            watcher::watcher(api, watch_config(None, t))
                .default_backoff()
                .scan(None, |buf, ev| {
                    let out = match fold(buf, ev) {
                        None => None,
                        Some(Ok((s, all))) => Some(Update::Profiles(s, all)),
                        Some(Err(e)) => Some(Update::Failed(
                            watch_error_kind(&e),
                            format!("watch roceprofiles: {}", describe_watch(&e)),
                        )),
                    };
                    futures::future::ready(Some(out))
                })
                .boxed()
        };
        futures::stream::select(futures::stream::select(node_w.boxed(), state_w.boxed()), profile_w)
            .filter_map(futures::future::ready)
    }

    /// Runs until `shutdown` resolves. `kernel` carries link/DCB notifications
    /// (those for interfaces the agent does not check are ignored).
    pub async fn run(
        mut self,
        mut kernel: Option<mpsc::Receiver<RtnlEvent>>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let updates = self.streams();
        tokio::pin!(updates);
        let mut t = Timers {
            due: Some(Instant::now()), // a pass now: read the node
            reread: true,
            next_poll: Instant::now() + jitter::spread(self.cfg.poll, 0.1),
            kernel_at: None,
            probe_at: None,
            heartbeat_not_before: Instant::now(),
        };
        loop {
            // Never written by this process (restarted onto an unchanged state): confirm now.
            let heartbeat_at = self.ready_to_publish().then(|| {
                let at = self
                    .publisher
                    .last_write()
                    .map_or_else(Instant::now, |w| w + self.cfg.heartbeat + self.heartbeat_jitter());
                at.max(t.heartbeat_not_before)
            });
            let wake =
                [Some(t.next_poll), t.due, t.kernel_at, heartbeat_at, t.probe_at].into_iter().flatten().min();
            let sleep =
                tokio::time::sleep_until(wake.unwrap_or_else(|| Instant::now() + self.cfg.poll).into());
            let kernel_ev = async {
                match kernel.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                u = updates.next() => {
                    let Some(u) = u else { return };
                    if self.on_update(u) {
                        t.due.get_or_insert_with(Instant::now);
                    }
                    if self.health.api.failing().is_some() {
                        t.probe_at.get_or_insert_with(|| Instant::now() + Duration::from_secs(10));
                    } else {
                        // The watch itself showed the API back: a probe left over from a
                        // transient watch error (a 410 relist, a restart) would be a stray GET.
                        t.probe_at = None;
                    }
                }
                ev = kernel_ev => match ev {
                    None => {
                        tracing::warn!("kernel event stream ended; polling only");
                        kernel = None;
                    }
                    Some(ev) if concerns(&ev, &self.watched_interfaces()) => {
                        t.kernel_at.get_or_insert_with(|| Instant::now() + self.cfg.debounce);
                    }
                    Some(_) => {}
                },
                _ = sleep => self.on_wake(&mut t, heartbeat_at, &mut kernel).await,
            }
        }
    }

    /// Acts on what is due in `t`: a debounced kernel event, the poll and a
    /// successful API probe schedule a pass; then the pass runs, or else the
    /// heartbeat.
    async fn on_wake(
        &mut self,
        t: &mut Timers,
        heartbeat_at: Option<Instant>,
        kernel: &mut Option<mpsc::Receiver<RtnlEvent>>,
    ) {
        let now = Instant::now();
        if t.kernel_at.is_some_and(|at| at <= now) {
            t.kernel_at = None;
            if let Some(rx) = kernel.as_mut() {
                while rx.try_recv().is_ok() {}
            }
            t.reread = true;
            // A pass backing off after API errors keeps its time.
            if self.failures == 0 {
                t.due = Some(now);
            }
        }
        if t.next_poll <= now {
            t.next_poll = now + jitter::spread(self.cfg.poll, 0.1);
            t.reread = true;
            t.due.get_or_insert(now);
        }
        if t.probe_at.is_some_and(|at| at <= now) {
            t.probe_at = None;
            self.probe().await;
            if self.health.api.failing().is_some() {
                t.probe_at = Some(Instant::now() + Duration::from_secs(10));
            } else {
                t.due.get_or_insert(now);
            }
        }
        if t.due.is_some_and(|at| at <= now) {
            t.due = None;
            self.due_pass(t).await;
        } else if heartbeat_at.is_some_and(|at| at <= now) {
            self.due_heartbeat(t, now).await;
        }
    }

    /// Runs the pass that is due; after a failure, schedules the next one, backing off.
    async fn due_pass(&mut self, t: &mut Timers) {
        match self.pass(t.reread).await {
            Ok((s, p)) => {
                t.reread = false;
                if p != Published::default() {
                    tracing::info!(
                        ready = %s.summary.ready, pass_total = %s.summary.pass_total, profile = %s.profile,
                        object = p.object_applied, status = p.status_applied,
                        labelled = p.label_patched, event = p.event_posted, "published node state"
                    );
                }
            }
            Err(e) => {
                let wait = jitter::shorten(
                    RETRY_FIRST.saturating_mul(1 << self.failures.min(6)).min(RETRY_MAX),
                    0.5,
                );
                tracing::error!(error = %chain(&e), retry_in_s = wait.as_secs(), "agent pass failed");
                t.due = Some(Instant::now() + wait);
            }
        }
    }

    async fn due_heartbeat(&mut self, t: &mut Timers, now: Instant) {
        match self.publisher.heartbeat(&now_rfc3339()).await {
            Ok(true) => {}
            // Nothing applied by this process yet: a pass publishes (and
            // confirms), unless one is already due (backing off).
            Ok(false) => {
                t.heartbeat_not_before = Instant::now() + RETRY_FIRST;
                t.due.get_or_insert(now);
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), "heartbeat failed");
                t.heartbeat_not_before = Instant::now() + jitter::shorten(RETRY_MAX / 10, 0.5);
                // Recreate a deleted object, or retry, through a pass.
                t.due = Some(Instant::now() + RETRY_FIRST);
            }
        }
    }

    /// See [`heartbeat_jitter`].
    fn heartbeat_jitter(&self) -> Duration {
        heartbeat_jitter(&self.cfg.node_name, self.cfg.heartbeat)
    }

    /// While the API looks down: one cheap read to learn when it is back.
    async fn probe(&self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes.get_metadata_opt(&self.cfg.node_name).await {
            Ok(_) => self.health.api.ok(),
            Err(e) => self.health.api.failed(
                crate::api::error_kind(&e),
                format!("get nodes/{}: {}", self.cfg.node_name, crate::api::describe(&e)),
            ),
        }
    }

    /// Applies a watch update; `true` when a pass should follow.
    fn on_update(&mut self, u: Update) -> bool {
        match u {
            Update::Failed(kind, why) => {
                tracing::warn!(error = %why, "watch failed; retrying with backoff");
                self.health.api.failed(kind, why);
                false
            }
            Update::Node(s) => {
                self.health.api.ok();
                let before = self.profile_key();
                let fresh = self.publisher.node_seen(s);
                fresh && (before != self.profile_key() || self.ready_to_publish())
            }
            Update::State(s) => {
                self.health.api.ok();
                self.publisher.state_seen(*s) && self.ready_to_publish()
            }
            Update::Profiles(s, objs) => {
                self.health.api.ok();
                let before = self.profile_key();
                self.profiles_updated(s, objs);
                before != self.profile_key() || !self.profiles_synced || self.last_profile.is_none()
            }
        }
    }

    /// The profile that applies now, as far as a change matters.
    /// Only name and spec count: a profile's status changes with every controller
    /// pass and must not start a pass on every node.
    fn profile_key(&self) -> Option<(String, RoceProfileSpec)> {
        self.ready_to_publish().then(|| {
            let p = self.profile();
            (p.name_any(), p.spec)
        })
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("node", &self.cfg.node_name).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::netlink::events::{DcbEvent, LinkEvent, LinkEventKind};

    fn link(name: &str) -> RtnlEvent {
        RtnlEvent::Link(LinkEvent {
            kind: LinkEventKind::New,
            ifindex: 7,
            name: Some(name.into()),
            operstate: Some("up".into()),
            admin_up: true,
            lower_up: true,
        })
    }

    fn rec(setting: &str, outcome: &str) -> EnforceRecord {
        EnforceRecord {
            interface: "ens1f0np0".into(),
            setting: setting.into(),
            outcome: outcome.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn a_converged_node_keeps_showing_what_enforce_applied_until_the_profile_changes() {
        let spec = RoceProfileSpec { mode: Mode::Enforce, ..crate::checks::default_profile_spec() };
        let key = ("e".to_string(), spec.clone());
        let wrote = carry_records(None, &key, true, vec![rec("ecn", "Applied")]);
        assert_eq!(wrote.as_ref().unwrap().1, vec![rec("ecn", "Applied")]);
        // The next pass finds nothing to write: the records stay.
        let settled = carry_records(wrote.clone(), &key, true, vec![]);
        assert_eq!(settled, wrote);
        // A pass that writes or refuses again replaces them.
        let again = carry_records(settled, &key, true, vec![rec("mtu", "Refused")]);
        assert_eq!(again.as_ref().unwrap().1, vec![rec("mtu", "Refused")]);
        // Another profile (or the same one edited) starts with nothing; so does Audit.
        let edited = ("e".to_string(), RoceProfileSpec { min_mtu: Some(9123), ..spec });
        assert_eq!(carry_records(again.clone(), &edited, true, vec![]), None);
        assert_eq!(carry_records(again, &key, false, vec![]), None);
    }

    #[test]
    fn only_events_of_checked_interfaces_start_a_pass() {
        let watched: BTreeSet<String> = ["ens1f0np0".to_string()].into();
        assert!(concerns(&link("ens1f0np0"), &watched));
        // A VF netdev moving into a pod, a veth: not ours.
        assert!(!concerns(&link("ens1f0v3"), &watched));
        assert!(!concerns(&link("veth12ab"), &watched));
        let dcb =
            |n: Option<&str>| RtnlEvent::Dcb(DcbEvent { msg_type: 78, cmd: 21, ifname: n.map(String::from) });
        assert!(concerns(&dcb(Some("ens1f0np0")), &watched));
        assert!(!concerns(&dcb(Some("ens2f0")), &watched));
        assert!(concerns(&dcb(None), &watched), "unknown interface: read to be safe");
        assert!(concerns(&RtnlEvent::Overrun, &watched), "lost events: read again");
        assert!(!concerns(&RtnlEvent::Other { msg_type: 20 }, &watched));
    }
}
