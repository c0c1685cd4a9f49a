//! The controller: for each `RoceProfile`, how many nodes it covers and how many
//! of those comply, drifted or went stale (from the agents' `RdmaNodeState`s),
//! into the profile's status; staleness of agents that stopped reporting; removal
//! of `RdmaNodeState`s whose node is gone; profiles this version cannot decode,
//! reported on the profile (condition `Valid=False`) and as an Event.
//!
//! It watches profiles, node states and nodes (metadata only), keeps them in
//! memory, and after a change (coalesced over [`Controller::with_debounce`])
//! computes everything with the pure [`plan`], then writes only what differs:
//! profile status and the `Stale` condition by server-side apply (field manager
//! `kube-rdma-controller`; of a node state's status only that one entry of the
//! `conditions` list-map, [`stale_apply_body`]), the node label to `unknown` for
//! a stale agent, orphans
//! by DELETE (404 counts as done). Staleness is re-checked every minute from the
//! heartbeats in memory, without requests.
//!
//! A node counts for exactly one profile: the one its agent checked it against
//! (`status.profile`), else the one the agent would choose (the first matching by
//! name), so overlapping selectors are not double-counted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};
use nic::readiness::{self, Verdict};
use plumbing::prometheus::{head, sample};
use serde::Deserialize;
use serde_json::json;

use crate::api::{chain, describe_watch, watch_error_kind, with_backoff, ApiError, Backoff};
use crate::crd::{Condition, RdmaNodeState, RoceProfile, RoceProfileStatus, CONTROLLER_MANAGER, READY_LABEL};
use crate::health::{Endpoints, Health};
use crate::jitter;
use crate::overlap::{self, ProfileOverlap};
use crate::profiles::{decode, profile_resource, resolve, BadProfile, ProfileSet};

/// An agent that has not confirmed its state for this long is stale: more than two
/// missed heartbeats ([`crate::agent::HEARTBEAT`] is 10 min + up to 10 %).
pub const STALE_AFTER: Duration = Duration::from_secs(25 * 60);

/// What the controller knows of one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl NodeInfo {
    /// From a Node's metadata.
    pub fn of(m: &ObjectMeta) -> Self {
        Self { name: m.name.clone().unwrap_or_default(), labels: m.labels.clone().unwrap_or_default() }
    }
}

/// What the controller keeps of one `RdmaNodeState`: enough to count it, judge
/// its staleness and see the `Stale` mark, without holding the whole object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StateInfo {
    /// The agent published a status.
    pub reported: bool,
    /// `status.profile`.
    pub profile: String,
    /// Not RoCE-ready: a check fails, or no interface was checked
    /// ([`nic::readiness::node_ready`]).
    pub drifted: bool,
    /// `lastHeartbeatTime`, else `observedAt`, else the object's creation.
    pub heartbeat: Option<Timestamp>,
    /// The `Stale` condition is `True`.
    pub marked_stale: bool,
}

/// The parts of an `RdmaNodeState` the controller reads, decoded straight from
/// the watch: a thousand agents rewriting their states after a profile change
/// cost the controller a partial decode each, not a full object. Values are kept
/// as strings, so a state written by a newer agent (a new check result) still decodes.
#[derive(Deserialize, Clone, Debug, Default)]
pub struct StateObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The agent's report.
    #[serde(default)]
    pub status: Option<StateStatus>,
}

/// See [`StateObject`].
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct StateStatus {
    /// Profile checked against.
    #[serde(default)]
    pub profile: String,
    /// Check results.
    #[serde(default)]
    pub checks: Vec<StateCheck>,
    /// Conditions (type and status).
    #[serde(default)]
    pub conditions: Vec<StateCondition>,
    #[serde(default)]
    pub last_heartbeat_time: Option<String>,
    /// When the checks last changed.
    #[serde(default)]
    pub observed_at: Option<String>,
}

/// See [`StateObject`].
#[derive(Deserialize, Clone, Debug, Default)]
pub struct StateCheck {
    /// The PF netdev checked, or [`nic::readiness::NODE`].
    #[serde(default)]
    pub interface: String,
    /// `Pass`, `Fail`, ...
    #[serde(default)]
    pub result: String,
}

/// See [`StateObject`].
#[derive(Deserialize, Clone, Debug, Default)]
pub struct StateCondition {
    /// Condition type.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    #[serde(default)]
    pub status: String,
}

impl Resource for StateObject {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        RdmaNodeState::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        RdmaNodeState::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        RdmaNodeState::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        RdmaNodeState::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl StateInfo {
    /// From a full object (tests, [`Controller::load`]).
    pub fn of(s: &RdmaNodeState) -> Self {
        let o: StateObject = serde_json::to_value(s).and_then(serde_json::from_value).unwrap_or_default();
        Self::from_object(&o)
    }

    /// From what the watch decoded.
    pub fn from_object(s: &StateObject) -> Self {
        let st = s.status.as_ref();
        let heartbeat = st
            .and_then(|x| x.last_heartbeat_time.as_deref())
            .or(st.and_then(|x| x.observed_at.as_deref()))
            .and_then(|t| t.parse().ok())
            .or_else(|| s.metadata.creation_timestamp.as_ref().map(|t| t.0));
        Self {
            reported: st.is_some(),
            profile: st.map(|x| x.profile.clone()).unwrap_or_default(),
            drifted: st.is_some_and(|x| {
                !readiness::node_ready(
                    x.checks.iter().map(|c| (c.interface.as_str(), Verdict::of(&c.result))),
                )
            }),
            heartbeat,
            marked_stale: st.is_some_and(|x| {
                readiness::marked_stale(x.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())))
            }),
        }
    }

    /// Whether its agent stopped reporting, at `now`.
    pub fn is_stale(&self, now: Timestamp, after: Duration) -> bool {
        self.reported
            && self.heartbeat.is_some_and(|t| {
                now.duration_since(t).as_secs() >= i64::try_from(after.as_secs()).unwrap_or(i64::MAX)
            })
    }
}

/// The profile (by name) each node counts for: its agent's `status.profile`
/// when that profile exists, else the one the agent would check it against
/// ([`resolve`]: the most specific matching selector, on a tie the first of the
/// most specific by name); nodes under the built-in default count for none.
pub fn assign(
    profiles: &ProfileSet,
    nodes: &[NodeInfo],
    states: &BTreeMap<String, StateInfo>,
) -> BTreeMap<String, String> {
    let valid: Vec<&RoceProfile> = profiles.values().filter_map(|r| r.as_ref().ok()).collect();
    let mut out = BTreeMap::new();
    for n in nodes {
        let reported = states
            .get(&n.name)
            .filter(|s| s.reported)
            .map(|s| s.profile.clone())
            .filter(|p| profiles.get(p).is_some_and(|r| r.is_ok()));
        let chosen =
            reported.or_else(|| resolve(valid.iter().copied(), &n.labels).chosen.map(|p| p.name_any()));
        if let Some(p) = chosen {
            out.insert(n.name.clone(), p);
        }
    }
    out
}

/// The `Valid` condition of a profile.
fn valid_condition(bad: Option<&BadProfile>, previous: &[Condition], now: &str) -> Condition {
    let (status, reason, message) = match bad {
        None => ("True", "Decoded", String::new()),
        Some(b) => ("False", "CannotDecode", b.error.clone()),
    };
    let since = previous
        .iter()
        .find(|c| c.type_ == "Valid" && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    Condition {
        type_: "Valid".into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: Some(since),
    }
}

/// Everything a pass should write, computed from what is in memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// New status per profile (only those that differ from what the profile has).
    pub statuses: BTreeMap<String, RoceProfileStatus>,
    /// Nodes whose `Stale` condition must change, and to what.
    pub stale: BTreeMap<String, bool>,
    /// Node states whose node no longer exists.
    pub orphans: Vec<String>,
    /// Every node with a state, and whether it is stale now (for metrics).
    pub staleness: BTreeMap<String, bool>,
    /// Per profile: matched, passing, drifted (for metrics).
    pub counts: BTreeMap<String, RoceProfileStatus>,
    /// Profiles that select some node together with another profile, and how
    /// (their `Overlapping` condition; an Event when it changes).
    pub overlaps: BTreeMap<String, ProfileOverlap>,
}

/// The pure part of a pass. `current` holds each profile's status as the server
/// has it; `marks` the `Stale` marks written but maybe not yet seen on the watch.
pub fn plan(
    profiles: &ProfileSet,
    current: &BTreeMap<String, Option<RoceProfileStatus>>,
    nodes: &[NodeInfo],
    states: &BTreeMap<String, StateInfo>,
    marks: &BTreeMap<String, bool>,
    now: Timestamp,
    stale_after: Duration,
) -> Plan {
    let now_s = now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now).to_string();
    let mut p = Plan::default();
    for (name, s) in states {
        let stale = s.is_stale(now, stale_after);
        p.staleness.insert(name.clone(), stale);
        if stale != marks.get(name).copied().unwrap_or(s.marked_stale) {
            p.stale.insert(name.clone(), stale);
        }
    }
    let live: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    p.orphans = states.keys().filter(|n| !live.contains(n.as_str())).cloned().collect();

    let assigned = assign(profiles, nodes, states);
    let mut status: BTreeMap<String, RoceProfileStatus> =
        profiles.keys().map(|k| (k.clone(), RoceProfileStatus::default())).collect();
    for n in nodes {
        let Some(st) = assigned.get(&n.name).and_then(|pn| status.get_mut(pn)) else { continue };
        st.nodes_matched += 1;
        match states.get(&n.name).filter(|s| s.reported) {
            None => st.nodes_unreported += 1,
            Some(_) if p.staleness.get(&n.name) == Some(&true) => st.nodes_stale += 1,
            // No check at all (no RoCE interface) counts as drifted too.
            Some(s) if s.drifted => {
                st.nodes_drifted += 1;
                st.drifted.push(n.name.clone());
            }
            Some(_) => st.nodes_compliant += 1,
        }
    }
    let valid: Vec<&RoceProfile> = profiles.values().filter_map(|r| r.as_ref().ok()).collect();
    p.overlaps =
        overlap::per_profile(&overlap::find(&valid, nodes.iter().map(|n| (n.name.as_str(), &n.labels))));
    for (name, st) in &mut status {
        let bad = profiles.get(name).and_then(|r| r.as_ref().err());
        let prev = current.get(name).cloned().flatten().unwrap_or_default();
        st.conditions = vec![valid_condition(bad, &prev.conditions, &now_s)];
        // A profile this version cannot use selects nothing, so it overlaps nothing.
        if bad.is_none() {
            st.conditions.push(overlap::condition(p.overlaps.get(name), &prev.conditions, &now_s));
        }
        if current.get(name).cloned().flatten().as_ref() != Some(st) {
            p.statuses.insert(name.clone(), st.clone());
        }
    }
    p.counts = status;
    p
}

/// The controller's own metrics: `kuberdma_node_stale{node}` and
/// `kuberdma_profile_nodes{profile,state}`.
pub fn render_metrics(p: &Plan) -> String {
    let mut o = String::new();
    let help = format!(
        "1 when the node's agent stopped reporting (no heartbeat for {} min).",
        STALE_AFTER.as_secs() / 60
    );
    head(&mut o, "kuberdma_node_stale", "gauge", &help);
    for (n, s) in &p.staleness {
        sample(&mut o, "kuberdma_node_stale", &[("node", n)], u8::from(*s));
    }
    head(
        &mut o,
        "kuberdma_profile_nodes",
        "gauge",
        "Nodes a RoceProfile covers (matched), of which pass every check (passing) or fail one (drifted).",
    );
    for (name, st) in &p.counts {
        for (state, v) in
            [("matched", st.nodes_matched), ("passing", st.nodes_compliant), ("drifted", st.nodes_drifted)]
        {
            sample(&mut o, "kuberdma_profile_nodes", &[("profile", name), ("state", state)], v);
        }
    }
    o
}

/// What one pass wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Profiles whose status was written.
    pub statuses_written: Vec<String>,
    /// Node states marked stale (`true`) or fresh again (`false`).
    pub stale_marked: Vec<(String, bool)>,
    /// Node states deleted.
    pub deleted: Vec<String>,
    /// Profiles an Event was posted about: one this version cannot decode, or
    /// one whose overlap with other profiles changed.
    pub events: Vec<String>,
}

/// The controller: watches in memory, a pass on change.
///
/// What the watches show lives in kube-runtime reflector stores (the watch
/// streams fill them, [`Controller::load`] does in tests); each pass reads them.
pub struct Controller {
    client: Client,
    backoff: Backoff,
    health: Health,
    debounce: Duration,
    debounce_max: Duration,
    stale_after: Duration,
    check_every: Duration,
    watch_timeout: Duration,
    metrics: Arc<RwLock<String>>,
    stores: Stores,
    synced: Synced,
    reported: BTreeSet<(String, Option<i64>)>,
    /// Per overlapping profile, the [`ProfileOverlap::key`] last announced by an Event.
    overlap_noted: BTreeMap<String, String>,
    /// Writes made by this process that the watches may not show yet.
    written_status: BTreeMap<String, RoceProfileStatus>,
    written_stale: BTreeMap<String, bool>,
}

enum Update {
    Profiles(Result<Event<DynamicObject>, watcher::Error>),
    States(Result<Event<StateObject>, watcher::Error>),
    Nodes(Result<Event<PartialObjectMeta<Node>>, watcher::Error>),
}

/// What the three watches show.
struct Stores {
    profiles: Store<DynamicObject>,
    states: Store<StateObject>,
    nodes: Store<PartialObjectMeta<Node>>,
}

/// The writers that fill [`Stores`].
struct Writers {
    profiles: Writer<DynamicObject>,
    states: Writer<StateObject>,
    nodes: Writer<PartialObjectMeta<Node>>,
}

/// Empty stores and their writers.
fn stores() -> (Stores, Writers) {
    let profiles = Writer::new(profile_resource());
    let (states_r, states) = reflector::store();
    let (nodes_r, nodes) = reflector::store();
    (
        Stores { profiles: profiles.as_reader(), states: states_r, nodes: nodes_r },
        Writers { profiles, states, nodes },
    )
}

/// What a pass reads, taken from the stores at its start.
struct View {
    profiles: ProfileSet,
    profile_status: BTreeMap<String, Option<RoceProfileStatus>>,
    nodes: BTreeMap<String, NodeInfo>,
    states: BTreeMap<String, StateInfo>,
}

/// A profile's status as the server has it (`None`: none, or one this version cannot read).
fn profile_status(o: &DynamicObject) -> Option<RoceProfileStatus> {
    o.data.get("status").and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Which of the three watches have listed once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Synced {
    profiles: bool,
    states: bool,
    nodes: bool,
}

impl Synced {
    fn all(self) -> bool {
        self.profiles && self.states && self.nodes
    }
}

/// Forgets the writes of this process (by object name) that a watch event makes
/// moot: the watch now shows the value written (`shown`; `None`: shows none this
/// version reads), the object is gone, or a re-list no longer holds it (`store`,
/// already updated by the event). `true` when the event ends a list (`InitDone`).
fn forget_shown<K, V: PartialEq>(
    written: &mut BTreeMap<String, V>,
    ev: &Event<K>,
    shown: impl Fn(&K) -> Option<V>,
    store: &Store<K>,
) -> bool
where
    K: ResourceExt + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match ev {
        Event::Apply(o) | Event::InitApply(o) => {
            let name = o.name_any();
            if shown(o).is_some_and(|v| written.get(&name) == Some(&v)) {
                written.remove(&name);
            }
        }
        Event::Delete(o) => {
            written.remove(&o.name_any());
        }
        Event::InitDone => {
            let listed: BTreeSet<String> = store.state().iter().map(|o| o.name_any()).collect();
            written.retain(|k, _| listed.contains(k));
            return true;
        }
        Event::Init => {}
    }
    false
}

impl Controller {
    /// A controller writing through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            backoff: Backoff::default(),
            health: Health::new("controller", Duration::from_secs(180)),
            debounce: Duration::from_millis(200),
            debounce_max: Duration::from_secs(1),
            stale_after: STALE_AFTER,
            check_every: Duration::from_secs(60),
            watch_timeout: Duration::from_secs(600),
            metrics: Arc::new(RwLock::new(String::new())),
            stores: stores().0,
            synced: Synced::default(),
            reported: BTreeSet::new(),
            overlap_noted: BTreeMap::new(),
            written_status: BTreeMap::new(),
            written_stale: BTreeMap::new(),
        }
    }

    /// New empty stores in place of the current ones; the writers fill them.
    fn fresh_stores(&mut self) -> Writers {
        let (fresh, writers) = stores();
        self.stores = fresh;
        writers
    }

    /// Replaces the retry policy.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }

    /// A pass follows changes once none came for `quiet`, or `max` after the first:
    /// during a rollout (a thousand agents writing) the profile status, which every
    /// agent's watch receives, is written about once per `max` rather than per change.
    pub fn with_debounce(mut self, quiet: Duration, max: Duration) -> Self {
        self.debounce = quiet;
        self.debounce_max = max;
        self
    }

    /// The heartbeat age after which an agent is stale.
    pub fn with_stale_after(mut self, d: Duration) -> Self {
        self.stale_after = d;
        self
    }

    /// How often staleness is re-checked from memory (also a full pass; no requests
    /// unless something changed).
    pub fn with_check_interval(mut self, d: Duration) -> Self {
        self.check_every = d;
        self
    }

    /// The `/metrics`, `/healthz` and `/livez` endpoints.
    pub fn endpoints(&self) -> Endpoints {
        let (text, health) = (self.metrics.clone(), self.health.clone());
        let h = health.clone();
        Endpoints {
            metrics: Arc::new(move || {
                let mut t = text.read().map(|t| t.clone()).unwrap_or_default();
                t.push_str(&h.render());
                t
            }),
            health,
        }
    }

    /// Replaces what the watches hold, as after a re-list of all three.
    pub fn load(&mut self, profiles: Vec<DynamicObject>, states: Vec<RdmaNodeState>, nodes: Vec<NodeInfo>) {
        fn relist<K: Resource + Clone + 'static>(w: &mut Writer<K>, objects: impl IntoIterator<Item = K>)
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            w.apply_watcher_event(&Event::Init);
            for o in objects {
                w.apply_watcher_event(&Event::InitApply(o));
            }
            w.apply_watcher_event(&Event::InitDone);
        }
        let mut w = self.fresh_stores();
        relist(&mut w.profiles, profiles);
        let states = states.iter().map(|s| serde_json::to_value(s).and_then(serde_json::from_value));
        relist(&mut w.states, states.map(|s: Result<StateObject, _>| s.unwrap_or_default()));
        let nodes = nodes.into_iter().map(|n| {
            ObjectMeta { name: Some(n.name), labels: Some(n.labels), ..Default::default() }
                .into_response_partial::<Node>()
        });
        relist(&mut w.nodes, nodes);
        self.synced = Synced { profiles: true, states: true, nodes: true };
    }

    /// The three watches, each filling its store (fresh ones, replacing the current).
    /// managedFields are dropped on the way in: nothing here reads them, and a
    /// thousand node states would hold them all.
    fn streams(&mut self) -> impl Stream<Item = Update> + Send + 'static {
        let w = self.fresh_stores();
        let cfg = watcher::Config::default().timeout(self.watch_timeout.as_secs().clamp(1, 3600) as u32);
        let profiles: Api<DynamicObject> = Api::all_with(self.client.clone(), &profile_resource());
        let states: Api<StateObject> = Api::all(self.client.clone());
        let nodes: Api<PartialObjectMeta<Node>> = Api::all(self.client.clone());
        let p = watcher::watcher(profiles, cfg.clone())
            .default_backoff()
            .modify(|o| o.managed_fields_mut().clear())
            .reflect(w.profiles)
            .map(Update::Profiles);
        let s = watcher::watcher(states, cfg.clone())
            .default_backoff()
            .modify(|o| o.managed_fields_mut().clear())
            .reflect(w.states)
            .map(Update::States);
        let n = watcher::watcher(nodes, cfg)
            .default_backoff()
            .modify(|o| o.managed_fields_mut().clear())
            .reflect(w.nodes)
            .map(Update::Nodes);
        futures::stream::select(futures::stream::select(p.boxed(), s.boxed()), n.boxed())
    }

    /// After a watch event (already in its store): forgets writes of this process
    /// the watch now shows; `true` when a pass should follow.
    fn on_update(&mut self, u: Update) -> bool {
        let err = match u {
            Update::Profiles(Ok(ev)) => {
                self.synced.profiles |=
                    forget_shown(&mut self.written_status, &ev, profile_status, &self.stores.profiles);
                None
            }
            Update::States(Ok(ev)) => {
                let marked = |o: &StateObject| Some(StateInfo::from_object(o).marked_stale);
                self.synced.states |= forget_shown(&mut self.written_stale, &ev, marked, &self.stores.states);
                None
            }
            Update::Nodes(Ok(ev)) => {
                self.synced.nodes |= matches!(ev, Event::InitDone);
                None
            }
            Update::Profiles(Err(e)) | Update::States(Err(e)) | Update::Nodes(Err(e)) => Some(e),
        };
        match err {
            Some(e) => {
                tracing::warn!(error = %describe_watch(&e), "watch failed; retrying with backoff");
                self.health.api.failed(watch_error_kind(&e), describe_watch(&e));
                false
            }
            None => {
                self.health.api.ok();
                true
            }
        }
    }

    /// What the stores hold now, decoded for a pass.
    fn view(&self) -> View {
        let mut v = View {
            profiles: ProfileSet::new(),
            profile_status: BTreeMap::new(),
            nodes: BTreeMap::new(),
            states: BTreeMap::new(),
        };
        for o in self.stores.profiles.state() {
            v.profile_status.insert(o.name_any(), profile_status(&o));
            v.profiles.insert(o.name_any(), decode(&o));
        }
        v.states =
            self.stores.states.state().iter().map(|o| (o.name_any(), StateInfo::from_object(o))).collect();
        v.nodes =
            self.stores.nodes.state().iter().map(|o| (o.name_any(), NodeInfo::of(&o.metadata))).collect();
        v
    }

    /// One pass over what is in memory: plan, then write what differs.
    pub async fn reconcile(&mut self) -> Result<Pass, ApiError> {
        let view = self.view();
        let nodes: Vec<NodeInfo> = view.nodes.values().cloned().collect();
        // What this process wrote counts as current until the watch shows it.
        let mut current = view.profile_status.clone();
        for (k, v) in &self.written_status {
            current.insert(k.clone(), Some(v.clone()));
        }
        let p = plan(
            &view.profiles,
            &current,
            &nodes,
            &view.states,
            &self.written_stale,
            Timestamp::now(),
            self.stale_after,
        );
        if let Ok(mut m) = self.metrics.write() {
            *m = render_metrics(&p);
        }
        let mut pass = Pass::default();
        let now = crate::status::now_rfc3339();
        self.write_statuses(&p, &mut pass).await?;
        self.report_bad_profiles(&view.profiles, &now, &mut pass).await?;
        self.report_overlaps(&p, &view, &now, &mut pass).await?;
        self.write_stale_marks(&p, &view.nodes, &now, &mut pass).await?;
        if self.synced.nodes {
            self.delete_orphans(&p, &mut pass).await?;
        }
        Ok(pass)
    }

    /// Profile statuses that differ, by server-side apply.
    async fn write_statuses(&mut self, p: &Plan, pass: &mut Pass) -> Result<(), ApiError> {
        let (b, errors) = (self.backoff, self.health.api.clone());
        // Dynamic objects: the answer to a write about a profile this version cannot
        // decode must not turn a successful write into an error.
        let profiles_api: Api<DynamicObject> = Api::all_with(self.client.clone(), &profile_resource());
        for (name, st) in &p.statuses {
            let body = json!({
                "apiVersion": RoceProfile::api_version(&()),
                "kind": RoceProfile::kind(&()),
                "metadata": {"name": name},
                "status": st,
            });
            let pp = PatchParams::apply(CONTROLLER_MANAGER).force();
            let patch = Patch::Apply(body);
            let r = with_backoff(b, &errors, &format!("apply roceprofiles/{name} status"), || {
                profiles_api.patch_status(name, &pp, &patch)
            })
            .await;
            match r {
                Ok(_) => {}
                Err(e) if e.code() == Some(404) => continue, // deleted meanwhile
                Err(e) => return Err(e),
            }
            self.written_status.insert(name.clone(), st.clone());
            pass.statuses_written.push(name.clone());
        }
        Ok(())
    }

    /// One Event per profile (and generation) this version cannot decode.
    async fn report_bad_profiles(
        &mut self,
        profiles: &ProfileSet,
        now: &str,
        pass: &mut Pass,
    ) -> Result<(), ApiError> {
        let (b, errors) = (self.backoff, self.health.api.clone());
        for (name, r) in profiles {
            let Err(bad) = r else { continue };
            if !self.reported.insert((bad.name.clone(), bad.generation)) {
                continue;
            }
            let ev = bad_profile_event(bad, now);
            let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), crate::events::NAMESPACE);
            let pp = PostParams::default();
            if let Err(e) = with_backoff(b, &errors, &format!("post event about roceprofiles/{name}"), || {
                events.create(&pp, &ev)
            })
            .await
            {
                self.reported.remove(&(bad.name.clone(), bad.generation));
                return Err(e);
            }
            tracing::warn!(profile = %name, error = %bad.error, "RoceProfile cannot be decoded; agents skip it");
            pass.events.push(name.clone());
        }
        Ok(())
    }

    /// One Event per overlapping profile each time its overlap changes
    /// ([`overlap::to_announce`]), regarding the profile and naming the nodes and
    /// the other profiles.
    async fn report_overlaps(
        &mut self,
        p: &Plan,
        view: &View,
        now: &str,
        pass: &mut Pass,
    ) -> Result<(), ApiError> {
        self.overlap_noted.retain(|k, _| p.overlaps.contains_key(k));
        let server: BTreeMap<String, Option<Condition>> = view
            .profile_status
            .iter()
            .map(|(k, st)| {
                let c =
                    st.as_ref().and_then(|st| st.conditions.iter().find(|c| c.type_ == overlap::CONDITION));
                (k.clone(), c.cloned())
            })
            .collect();
        let (b, errors) = (self.backoff, self.health.api.clone());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), crate::events::NAMESPACE);
        for name in overlap::to_announce(&p.overlaps, &self.overlap_noted, &server) {
            let o = &p.overlaps[&name];
            let uid = view.profiles.get(&name).and_then(|r| r.as_ref().ok()).and_then(|p| p.uid());
            let ev = overlap_event(&name, uid, o, now);
            let pp = PostParams::default();
            with_backoff(b, &errors, &format!("post event about roceprofiles/{name} (overlap)"), || {
                events.create(&pp, &ev)
            })
            .await?;
            tracing::warn!(profile = %name, overlap = %o.message, "RoceProfiles overlap");
            self.overlap_noted.insert(name.clone(), o.key.clone());
            pass.events.push(name);
        }
        // Announced before a restart (the server's condition says the same): noted without an Event.
        for (name, o) in &p.overlaps {
            self.overlap_noted.entry(name.clone()).or_insert_with(|| o.key.clone());
        }
        Ok(())
    }

    /// `Stale` marks that change, and the ready label of a node whose agent went stale.
    async fn write_stale_marks(
        &mut self,
        p: &Plan,
        nodes: &BTreeMap<String, NodeInfo>,
        now: &str,
        pass: &mut Pass,
    ) -> Result<(), ApiError> {
        let (b, errors) = (self.backoff, self.health.api.clone());
        let states_api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &kube::api::ApiResource::erase::<RdmaNodeState>(&()));
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        for (node, stale) in &p.stale {
            let body = stale_apply_body(node, *stale, self.stale_after, now);
            let pp = PatchParams::apply(CONTROLLER_MANAGER).force();
            let patch = Patch::Apply(body);
            let r = with_backoff(b, &errors, &format!("apply rdmanodestates/{node} status (Stale)"), || {
                states_api.patch_status(node, &pp, &patch)
            })
            .await;
            match r {
                Ok(_) => {}
                Err(e) if e.code() == Some(404) => continue,
                Err(e) => return Err(e),
            }
            self.written_stale.insert(node.clone(), *stale);
            // A dead agent must not leave the node looking ready to the scheduler.
            let labelled_true = nodes
                .get(node)
                .is_some_and(|n| n.labels.get(READY_LABEL).map(String::as_str) == Some("true"));
            if *stale && labelled_true {
                let body = json!({"metadata": {"labels": {READY_LABEL: "unknown"}}});
                let (patch, mp) =
                    (Patch::Merge(body), crate::publish::label_patch_params(CONTROLLER_MANAGER));
                let op = format!("label nodes/{node}");
                match with_backoff(b, &errors, &op, || nodes_api.patch(node, &mp, &patch)).await {
                    Ok(_) => {}
                    Err(e) if e.code() == Some(404) => {}
                    Err(e) => return Err(e),
                }
            }
            tracing::info!(node = %node, stale, "agent staleness changed");
            pass.stale_marked.push((node.clone(), *stale));
        }
        Ok(())
    }

    /// Node states whose node is gone (only once the node watch has listed).
    async fn delete_orphans(&self, p: &Plan, pass: &mut Pass) -> Result<(), ApiError> {
        let (b, errors) = (self.backoff, self.health.api.clone());
        let states_api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &kube::api::ApiResource::erase::<RdmaNodeState>(&()));
        let dp = DeleteParams::default();
        for name in &p.orphans {
            let r = with_backoff(b, &errors, &format!("delete rdmanodestates/{name}"), || {
                states_api.delete(name, &dp)
            })
            .await;
            match r {
                Ok(_) => {}
                // Already gone (the Node owner reference may have garbage-collected it).
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(e),
            }
            tracing::info!(node = %name, "deleted RdmaNodeState of a deleted node");
            pass.deleted.push(name.clone());
        }
        Ok(())
    }

    /// Runs until `shutdown` resolves: watches, a pass after changes (coalesced),
    /// a staleness check every minute, retries with backoff after errors.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let updates = self.streams();
        tokio::pin!(updates);
        let mut due: Option<Instant> = None;
        let mut failures = 0u32;
        let mut seen = 0u64;
        let mut batch: Option<Instant> = None;
        let check_every = self.check_every.min(self.stale_after / 4).max(Duration::from_millis(100));
        let mut next_check = Instant::now() + check_every;
        loop {
            let wake = due.map_or(next_check, |d| d.min(next_check));
            tokio::select! {
                _ = &mut shutdown => return,
                u = updates.next() => {
                    let Some(u) = u else { return };
                    seen += 1;
                    if self.on_update(u) && self.synced.all() && failures == 0 {
                        let now = Instant::now();
                        let first = *batch.get_or_insert(now);
                        due = Some((now + self.debounce).min(first + self.debounce_max));
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    let now = Instant::now();
                    if next_check <= now {
                        next_check = now + check_every;
                        if self.synced.all() {
                            due.get_or_insert(now);
                        }
                    }
                    if due.is_none_or(|d| d > now) || !self.synced.all() {
                        continue;
                    }
                    due = None;
                    batch = None;
                    let t0 = Instant::now();
                    let r = self.reconcile().await;
                    tracing::debug!(took_ms = t0.elapsed().as_millis() as u64, updates = seen, states = self.stores.states.len(), "pass");
                    seen = 0;
                    match r {
                        Ok(p) => {
                            failures = 0;
                            self.health.pass_ok(t0.elapsed());
                            if p != Pass::default() {
                                tracing::info!(written = ?p.statuses_written, stale = ?p.stale_marked, deleted = ?p.deleted, events = ?p.events, "controller pass");
                            }
                        }
                        Err(e) => {
                            failures += 1;
                            self.health.pass_failed(t0.elapsed());
                            let wait = jitter::shorten(Duration::from_secs(2).saturating_mul(1 << failures.min(7)), 0.5);
                            tracing::error!(error = %chain(&e), retry_in_s = wait.as_secs(), "controller pass failed");
                            due = Some(Instant::now() + wait);
                        }
                    }
                }
            }
        }
    }
}

/// The controller's server-side apply of a node state's status (field manager
/// [`CONTROLLER_MANAGER`]): the `Stale` entry of the `conditions` list-map and
/// nothing else. `summary.ready` and the agent's conditions stay the agent's, so
/// neither manager's apply removes or takes over a field of the other (see
/// [`crate::crd`]); a stale node shows `STALE True` with the agent's last READY.
pub fn stale_apply_body(node: &str, stale: bool, stale_after: Duration, now: &str) -> serde_json::Value {
    let message = if stale {
        format!("no heartbeat from the agent for {} min or more", stale_after.as_secs() / 60)
    } else {
        String::new()
    };
    let condition = Condition {
        type_: readiness::STALE.into(),
        status: if stale { "True" } else { "False" }.into(),
        reason: if stale { "NoHeartbeat" } else { "Reporting" }.into(),
        message,
        last_transition_time: Some(now.to_string()),
    };
    json!({
        "apiVersion": RdmaNodeState::api_version(&()),
        "kind": RdmaNodeState::kind(&()),
        "metadata": {"name": node},
        "status": {"conditions": [condition]},
    })
}

/// A Warning Event about a profile that selects nodes together with others.
pub fn overlap_event(name: &str, uid: Option<String>, o: &ProfileOverlap, now: &str) -> K8sEvent {
    crate::events::warning(
        crate::events::Warning {
            regarding: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("kuberdma.io/v1alpha1".into()),
                kind: Some("RoceProfile".into()),
                name: Some(name.to_string()),
                uid,
                ..Default::default()
            },
            action: "SelectProfile",
            reason: "OverlappingProfiles",
            topic: "profile-overlap",
            controller: "kuberdma.io/controller",
            instance: "kube-rdma-controller",
            instance_name: "",
            note: format!("RoceProfile {name} selects nodes other RoceProfiles select too: {}", o.message),
        },
        now,
    )
}

/// A Warning Event about a profile this version cannot decode.
pub fn bad_profile_event(bad: &BadProfile, now: &str) -> K8sEvent {
    crate::events::warning(
        crate::events::Warning {
            regarding: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("kuberdma.io/v1alpha1".into()),
                kind: Some("RoceProfile".into()),
                name: Some(bad.name.clone()),
                uid: bad.uid.clone(),
                ..Default::default()
            },
            action: "DecodeProfile",
            reason: "InvalidProfile",
            topic: "invalid-profile",
            controller: "kuberdma.io/controller",
            instance: "kube-rdma-controller",
            instance_name: "",
            note: format!("RoceProfile {} cannot be used and is skipped: {}", bad.name, bad.error),
        },
        now,
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, v: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            data: Some([("v".to_string(), v.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_write_is_forgotten_once_its_watch_shows_it_the_object_goes_or_a_relist_drops_it() {
        let mut w: Writer<ConfigMap> = Writer::default();
        let store = w.as_reader();
        let shown = |o: &ConfigMap| o.data.as_ref().and_then(|d| d.get("v").cloned());
        let mut written: BTreeMap<String, String> = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let mut step = |ev: Event<ConfigMap>, written: &mut BTreeMap<String, String>| {
            w.apply_watcher_event(&ev);
            forget_shown(written, &ev, shown, &store)
        };
        assert!(!step(Event::Apply(cm("a", "0")), &mut written));
        assert!(written.contains_key("a"), "the watch shows an older value: the write is still ahead of it");
        step(Event::Apply(cm("a", "1")), &mut written);
        assert!(!written.contains_key("a"));
        step(Event::Delete(cm("b", "0")), &mut written);
        assert!(!written.contains_key("b"));
        step(Event::Init, &mut written);
        step(Event::InitApply(cm("d", "0")), &mut written);
        assert!(step(Event::InitDone, &mut written), "InitDone: the watch has listed");
        assert_eq!(written.keys().collect::<Vec<_>>(), ["d"], "c is gone from the re-list, d is still ahead");
    }
}
