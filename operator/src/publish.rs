//! The agent's writer: what the API server holds for this node (as the watches
//! report it) against what the agent wants there, and the fewest requests that
//! close the gap.
//!
//! - the `RdmaNodeState` object (server-side apply, owned by the Node, so it is
//!   garbage-collected with it), again whenever it is deleted;
//! - its status (server-side apply of [`status_apply_body`]) when the checks
//!   changed, or when the object no longer shows what the agent wrote (deleted, or
//!   changed by someone else);
//! - the `kuberdma.io/roce-ready` label (merge patch) whenever the Node does not
//!   carry the wanted value (it was removed, or the controller set `unknown`);
//! - a Warning Event when checks start failing ([`crate::events`]); an Event the
//!   server refuses does not fail the pass;
//! - a heartbeat (the same status applied again with a new
//!   `status.lastHeartbeatTime`) when nothing else was written for a while.
//!
//! Field ownership (see [`crate::crd`]): the agent's field manager owns all of the
//! status but the controller's `Stale` condition, and its one applied
//! configuration is always the whole of it, the heartbeat included, so no apply
//! of the agent drops a field it wrote before.
//!
//! Watch events can lag behind the agent's own writes. After a write, events for
//! that object are ignored until the write's own `resourceVersion` comes back on
//! the watch (or the watch re-lists), so a stale event never causes a rewrite.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{json, Value};

use crate::api::{chain, with_backoff, ApiError, ApiRecord, Backoff};
use crate::crd::{
    Check, CheckResult, Condition, RdmaNodeState, RdmaNodeStateSpec, RdmaNodeStateStatus, AGENT_MANAGER,
    READY_LABEL,
};
use crate::status::carry_transition_times;

/// Condition types the agent owns (the controller owns `Stale`).
pub const AGENT_CONDITIONS: [&str; 3] = ["RoceReady", "Drifted", "Degraded"];

/// The agent's server-side apply of the status subresource (field manager
/// [`AGENT_MANAGER`]): all of `status` as the agent computed it. Conditions other
/// than [`AGENT_CONDITIONS`] are left out, so the controller's `Stale` entry of the
/// list-map is never part of the agent's configuration.
pub fn status_apply_body(node: &str, status: &RdmaNodeStateStatus) -> Value {
    let mut status = status.clone();
    status.conditions.retain(|c| AGENT_CONDITIONS.contains(&c.type_.as_str()));
    json!({
        "apiVersion": RdmaNodeState::api_version(&()),
        "kind": RdmaNodeState::kind(&()),
        "metadata": {"name": node},
        "status": status,
    })
}

/// The status a heartbeat applies: the last one applied with `lastHeartbeatTime`
/// set to `now`. Re-applying the whole configuration (rather than patching the one
/// field) keeps every field in the agent's managed set: an apply that left them out
/// would remove them from the object.
pub fn heartbeat_status(last_applied: &RdmaNodeStateStatus, now: &str) -> RdmaNodeStateStatus {
    RdmaNodeStateStatus { last_heartbeat_time: Some(now.to_string()), ..last_applied.clone() }
}

/// Merge-patch parameters naming `manager`: the label is written by an update, which
/// never conflicts, and the Node's managedFields show who set it.
pub fn label_patch_params(manager: &str) -> PatchParams {
    PatchParams { field_manager: Some(manager.to_string()), ..Default::default() }
}

/// What [`Publisher::publish`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The object (metadata, spec, owner) was applied.
    pub object_applied: bool,
    /// The status was applied.
    pub status_applied: bool,
    /// The node label was patched.
    pub label_patched: bool,
    /// A drift Event was posted.
    pub event_posted: bool,
}

/// An update from a watch of one object.
#[derive(Debug, Clone)]
pub enum Seen<K> {
    /// The object as it is now.
    Applied(K),
    /// It was deleted.
    Deleted,
    /// The watch (re)listed: the object, or `None` when it does not exist.
    Listed(Option<K>),
}

#[derive(Debug, Clone, Default)]
struct StateView {
    rv: Option<String>,
    owner_uid: Option<String>,
    status: Option<RdmaNodeStateStatus>,
}

impl StateView {
    fn of(s: &RdmaNodeState) -> Self {
        let owner_uid = s.owner_references().iter().find(|o| o.kind == "Node").map(|o| o.uid.clone());
        Self { rv: s.resource_version(), owner_uid, status: s.status.clone() }
    }
}

#[derive(Debug, Clone, Default)]
struct NodeView {
    rv: Option<String>,
    uid: Option<String>,
    labels: BTreeMap<String, String>,
}

/// One watched object: its last trusted view, and the `resourceVersion` of our
/// last write to it while the watch has not shown it yet.
#[derive(Debug)]
struct Watched<V> {
    synced: bool,
    view: Option<V>,
    pending: Option<(String, Instant)>,
}

impl<V> Default for Watched<V> {
    fn default() -> Self {
        Self { synced: false, view: None, pending: None }
    }
}

impl<V> Watched<V> {
    /// Applies a watch update; `false` when it was ignored as older than our write.
    fn update<K>(
        &mut self,
        seen: Seen<K>,
        rv_of: impl Fn(&K) -> Option<String>,
        view: impl Fn(&K) -> V,
    ) -> bool {
        // A write whose event never shows (a no-op the server did not record) stops
        // gating after a while.
        if self.pending.as_ref().is_some_and(|(_, at)| at.elapsed().as_secs() > 60) {
            self.pending = None;
        }
        match seen {
            Seen::Listed(o) => {
                self.synced = true;
                self.pending = None;
                self.view = o.as_ref().map(&view);
                true
            }
            Seen::Applied(o) => {
                if let Some((rv, _)) = &self.pending {
                    if rv_of(&o).as_deref() != Some(rv.as_str()) {
                        return false;
                    }
                    self.pending = None;
                }
                self.view = Some(view(&o));
                true
            }
            Seen::Deleted => {
                if self.pending.is_some() {
                    return false;
                }
                self.view = None;
                true
            }
        }
    }

    fn wrote(&mut self, rv: Option<String>, current_rv: Option<String>) {
        // An unchanged resourceVersion means the server recorded nothing: no event will come.
        self.pending = rv.filter(|r| Some(r) != current_rv.as_ref()).map(|r| (r, Instant::now()));
    }
}

/// Writes the agent's results to the API server, comparing with what the watches
/// show so an unchanged node costs no requests.
pub struct Publisher {
    client: Client,
    node: String,
    backoff: Backoff,
    api: ApiRecord,
    state: Watched<StateView>,
    node_obj: Watched<NodeView>,
    /// The status we last wrote (fingerprint, ready, conditions with their times).
    written: Option<RdmaNodeStateStatus>,
    object_applied: bool,
    label_written: Option<String>,
    last_failing: BTreeSet<(String, String)>,
    last_write: Option<Instant>,
}

impl Publisher {
    /// A publisher for `node`; every API call is recorded in `api`.
    pub fn new(client: Client, node: impl Into<String>, api: ApiRecord) -> Self {
        Self {
            client,
            node: node.into(),
            backoff: Backoff::default(),
            api,
            state: Watched::default(),
            node_obj: Watched::default(),
            written: None,
            object_applied: false,
            label_written: None,
            last_failing: BTreeSet::new(),
            last_write: None,
        }
    }

    /// Replaces the retry policy.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }

    /// The retry policy.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// Feeds a watch update of this node's `RdmaNodeState`; `true` when what the
    /// server holds changed in a way [`Publisher::publish`] may need to repair.
    pub fn state_seen(&mut self, seen: Seen<RdmaNodeState>) -> bool {
        self.state.update(seen, |s| s.resource_version(), StateView::of)
    }

    /// Feeds a watch update of this node's `Node` (metadata is enough).
    pub fn node_seen(&mut self, seen: Seen<ObjectMeta>) -> bool {
        self.node_obj.update(
            seen,
            |m| m.resource_version.clone(),
            |m| NodeView {
                rv: m.resource_version.clone(),
                uid: m.uid.clone(),
                labels: m.labels.clone().unwrap_or_default(),
            },
        )
    }

    /// Whether both watches have listed once.
    pub fn synced(&self) -> bool {
        self.state.synced && self.node_obj.synced
    }

    /// The Node's labels, once its watch has listed it.
    pub fn node_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.node_obj.view.as_ref().map(|v| &v.labels)
    }

    /// When the status or heartbeat was last written by this process.
    pub fn last_write(&self) -> Option<Instant> {
        self.last_write
    }

    /// Whether the server's object shows the status we want (our fingerprint,
    /// readiness and conditions, and no `Stale` mark); without a synced watch,
    /// whether we wrote it.
    fn state_shows(&self, want: &RdmaNodeStateStatus) -> bool {
        let have = if self.state.synced {
            match self.state.view.as_ref().and_then(|v| v.status.as_ref()) {
                Some(s) => s,
                None => return false,
            }
        } else {
            match &self.written {
                Some(s) => s,
                None => return false,
            }
        };
        let cond = |c: &[Condition], t: &str| c.iter().find(|x| x.type_ == t).map(|x| x.status.clone());
        // Marked stale by the controller: confirm at once rather than at the next heartbeat.
        !crate::crd::marked_stale(&have.conditions)
            && have.fingerprint == want.fingerprint
            && have.summary.ready == want.summary.ready
            && AGENT_CONDITIONS.iter().all(|t| cond(&have.conditions, t) == cond(&want.conditions, t))
    }

    fn needs_object(&self) -> bool {
        if !self.state.synced {
            return !self.object_applied;
        }
        match &self.state.view {
            None => true,
            Some(v) => {
                let uid = self.node_obj.view.as_ref().and_then(|n| n.uid.clone());
                uid.is_some() && v.owner_uid != uid
            }
        }
    }

    /// Publishes `status` (from [`crate::status::evaluate`]); `now` is RFC 3339.
    pub async fn publish(
        &mut self,
        mut status: RdmaNodeStateStatus,
        now: &str,
    ) -> Result<Published, ApiError> {
        let mut done = Published::default();
        let api: Api<RdmaNodeState> = Api::all(self.client.clone());
        let pp = PatchParams::apply(AGENT_MANAGER).force();
        let node_uid = self.node_obj.view.as_ref().and_then(|n| n.uid.clone());

        if self.needs_object() {
            self.apply_object(&api, &pp, node_uid.as_ref()).await?;
            done.object_applied = true;
        }
        let changed = self.written.as_ref().map(|w| &w.fingerprint) != Some(&status.fingerprint);
        if changed || done.object_applied || !self.state_shows(&status) {
            self.apply_status(&api, &pp, &mut status, now).await?;
            done.status_applied = true;
        }
        done.label_patched = self.label_ready(&status).await?;
        done.event_posted = self.post_drift_event(&status, node_uid.as_deref(), now).await;
        Ok(done)
    }

    /// Applies the object itself, owned by the Node when its UID is known.
    async fn apply_object(
        &mut self,
        api: &Api<RdmaNodeState>,
        pp: &PatchParams,
        node_uid: Option<&String>,
    ) -> Result<(), ApiError> {
        let b = self.backoff;
        let mut obj = RdmaNodeState::new(&self.node, RdmaNodeStateSpec { node_name: self.node.clone() });
        if let Some(uid) = node_uid {
            obj.meta_mut().owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.node.clone(),
                uid: uid.clone(),
                ..Default::default()
            }]);
        }
        let op = format!("apply rdmanodestates/{}", self.node);
        let body = serde_json::to_value(&obj)
            .map_err(|e| ApiError { op: op.clone(), source: kube::Error::SerdeError(e) })?;
        let patch = Patch::Apply(body);
        let r = with_backoff(b, &self.api, &op, || api.patch(&self.node, pp, &patch)).await?;
        let current = self.state.view.as_ref().and_then(|v| v.rv.clone());
        self.state.wrote(r.resource_version(), current);
        self.state.view = Some(StateView::of(&r));
        self.object_applied = true;
        Ok(())
    }

    /// Applies `status`, keeping the observation time and the conditions'
    /// transition times of what is already there.
    async fn apply_status(
        &mut self,
        api: &Api<RdmaNodeState>,
        pp: &PatchParams,
        status: &mut RdmaNodeStateStatus,
        now: &str,
    ) -> Result<(), ApiError> {
        let b = self.backoff;
        let prev = self
            .state
            .view
            .as_ref()
            .and_then(|v| v.status.clone())
            .filter(|s| s.fingerprint == status.fingerprint)
            .or_else(|| self.written.clone().filter(|s| s.fingerprint == status.fingerprint));
        status.observed_at =
            prev.as_ref().and_then(|p| p.observed_at.clone()).or_else(|| Some(now.to_string()));
        let old_conditions = self
            .written
            .as_ref()
            .map(|w| w.conditions.clone())
            .or_else(|| {
                self.state.view.as_ref().and_then(|v| v.status.as_ref()).map(|s| s.conditions.clone())
            })
            .unwrap_or_default();
        carry_transition_times(&mut status.conditions, &old_conditions, now);
        status.last_heartbeat_time = Some(now.to_string());
        let body = status_apply_body(&self.node, status);
        let op = format!("apply rdmanodestates/{} status", self.node);
        let patch = Patch::Apply(body);
        let r = with_backoff(b, &self.api, &op, || api.patch_status(&self.node, pp, &patch)).await;
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                // Deleted under us (by hand, or with its Node): recreate it next time.
                if e.code() == Some(404) {
                    self.object_applied = false;
                    self.state.view = None;
                }
                return Err(e);
            }
        };
        let current = self.state.view.as_ref().and_then(|v| v.rv.clone());
        self.state.wrote(r.resource_version(), current);
        self.state.view = Some(StateView::of(&r));
        self.written = Some(status.clone());
        self.last_write = Some(Instant::now());
        Ok(())
    }

    /// Sets the Node's ready label to what `status` says; `Ok(false)` when it
    /// says so already.
    async fn label_ready(&mut self, status: &RdmaNodeStateStatus) -> Result<bool, ApiError> {
        let b = self.backoff;
        let want = status.summary.ready.to_lowercase();
        let have = match &self.node_obj.view {
            Some(n) => n.labels.get(READY_LABEL).cloned(),
            None if self.node_obj.synced => Some(want.clone()), // no Node: nothing to label
            None => self.label_written.clone(),
        };
        if have.as_deref() == Some(want.as_str()) {
            return Ok(false);
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let body = json!({"metadata": {"labels": {READY_LABEL: want}}});
        let op = format!("label nodes/{}", self.node);
        let (patch, mp) = (Patch::Merge(body), label_patch_params(AGENT_MANAGER));
        let r = with_backoff(b, &self.api, &op, || nodes.patch(&self.node, &mp, &patch)).await?;
        let current = self.node_obj.view.as_ref().and_then(|v| v.rv.clone());
        self.node_obj.wrote(r.resource_version(), current);
        self.node_obj.view =
            Some(NodeView { rv: r.resource_version(), uid: r.uid(), labels: r.labels().clone() });
        self.label_written = Some(want);
        Ok(true)
    }

    /// Posts an Event naming the checks that newly fail; `true` when posted.
    /// A lost Event does not fail the pass: the next pass posts it again.
    async fn post_drift_event(
        &mut self,
        status: &RdmaNodeStateStatus,
        node_uid: Option<&str>,
        now: &str,
    ) -> bool {
        let b = self.backoff;
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
        if new.is_empty() {
            self.last_failing = failing;
            return false;
        }
        let ev = drift_event(&self.node, node_uid, &new, now);
        let events: Api<Event> = Api::namespaced(self.client.clone(), crate::events::NAMESPACE);
        let op = format!("post drift event for {}", self.node);
        let pp = PostParams::default();
        match with_backoff(b, &self.api, &op, || events.create(&pp, &ev)).await {
            Ok(_) => {
                self.last_failing = failing;
                true
            }
            // Refused for good (invalid, forbidden): posting it again would not help.
            Err(e) if e.code().is_some_and(|c| (400..500).contains(&c) && c != 409 && c != 429) => {
                tracing::warn!(error = %chain(&e), "drift Event refused; the RdmaNodeState has the checks");
                self.last_failing = failing;
                false
            }
            // The status and label are written: a lost Event must not fail the pass.
            // It is posted again by the next pass.
            Err(e) => {
                tracing::warn!(error = %chain(&e), "drift Event not posted; retried next pass");
                false
            }
        }
    }

    /// Refreshes `status.lastHeartbeatTime`: applies the last applied status again
    /// with the new time ([`heartbeat_status`]). `Ok(false)` when this process has
    /// applied nothing yet (a pass must publish first). A missing object is
    /// recreated by the next [`Publisher::publish`].
    pub async fn heartbeat(&mut self, now: &str) -> Result<bool, ApiError> {
        let Some(last) = &self.written else { return Ok(false) };
        let status = heartbeat_status(last, now);
        let api: Api<RdmaNodeState> = Api::all(self.client.clone());
        let pp = PatchParams::apply(AGENT_MANAGER).force();
        let patch = Patch::Apply(status_apply_body(&self.node, &status));
        let op = format!("heartbeat rdmanodestates/{}", self.node);
        let r =
            with_backoff(self.backoff, &self.api, &op, || api.patch_status(&self.node, &pp, &patch)).await;
        match r {
            Ok(r) => {
                let current = self.state.view.as_ref().and_then(|v| v.rv.clone());
                self.state.wrote(r.resource_version(), current);
                self.state.view = Some(StateView::of(&r));
                self.written = Some(status);
                self.last_write = Some(Instant::now());
                Ok(true)
            }
            Err(e) => {
                if e.code() == Some(404) {
                    self.object_applied = false;
                    self.state.view = None;
                    self.written = None;
                }
                Err(e)
            }
        }
    }
}

/// An `events.k8s.io/v1` Warning about the Node: which checks started failing and how to fix them.
pub fn drift_event(node: &str, uid: Option<&str>, new: &[&Check], now: &str) -> Event {
    let note = new
        .iter()
        .map(|c| format!("{}/{}: want {}, have {}", c.interface, c.name, c.expected, c.actual))
        .collect::<Vec<_>>()
        .join("; ");
    crate::events::warning(
        crate::events::Warning {
            regarding: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                uid: uid.map(String::from),
                ..Default::default()
            },
            action: "CheckRoce",
            reason: "RoceDrift",
            topic: "roce-drift",
            controller: "kuberdma.io/agent",
            instance: "kube-rdma-agent",
            instance_name: node,
            note,
        },
        now,
    )
}
