//! The in-memory object store: JSON objects keyed by resource, namespace and
//! name, one global `resourceVersion` counter, a bounded per-resource event
//! history (for watches that resume from a `resourceVersion`) and a
//! per-resource broadcast channel that open watches filter.
//!
//! Every write, from HTTP or from a test, goes through [`Store::commit`]
//! under one mutex, so the history, the broadcast and the counter never
//! disagree. The server-set fields follow the real API server: `uid`,
//! `creationTimestamp`, `resourceVersion`, `generation` (bumped only when
//! something other than `metadata`, and `status` for resources with a status
//! subresource, changes), `deletionTimestamp` for objects with finalizers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::object::{self, meta_mut, meta_str, Ids};
use crate::patch::{self, FieldSet, JsonPatchError, PatchKind};
use crate::resources::{self, ResourceType};

/// Index of a resource in the table (stable: resources are never removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ResId(pub(crate) usize);

/// What a committed change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

/// One committed change, shared by every watch that sees it; the JSON forms
/// are rendered once, on first use.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) kind: ChangeKind,
    pub(crate) rv: u64,
    /// The object after the change (for a deletion: its last state, at the
    /// deletion's resourceVersion).
    pub(crate) object: Arc<Value>,
    /// The object before the change.
    pub(crate) prev: Option<Arc<Value>>,
    full: OnceLock<Bytes>,
    meta: OnceLock<Bytes>,
    prev_full: OnceLock<Bytes>,
    prev_meta: OnceLock<Bytes>,
}

impl Change {
    fn new(kind: ChangeKind, rv: u64, object: Arc<Value>, prev: Option<Arc<Value>>) -> Self {
        Change {
            kind,
            rv,
            object,
            prev,
            full: OnceLock::new(),
            meta: OnceLock::new(),
            prev_full: OnceLock::new(),
            prev_meta: OnceLock::new(),
        }
    }

    /// The object's JSON, full or as `PartialObjectMetadata`.
    pub(crate) fn object_json(&self, metadata_only: bool) -> Bytes {
        let (cell, obj) = if metadata_only { (&self.meta, &self.object) } else { (&self.full, &self.object) };
        cell.get_or_init(|| render(obj, metadata_only)).clone()
    }

    /// The previous object's JSON at this change's resourceVersion: what a
    /// watch whose selector stops matching receives as `DELETED`
    /// (`cacheWatcher.convertToWatchEvent` in k8s.io/apiserver).
    pub(crate) fn prev_json(&self, metadata_only: bool) -> Bytes {
        let cell = if metadata_only { &self.prev_meta } else { &self.prev_full };
        cell.get_or_init(|| {
            let mut prev = self.prev.as_deref().cloned().unwrap_or_else(|| (*self.object).clone());
            meta_mut(&mut prev).insert("resourceVersion".into(), json!(self.rv.to_string()));
            render(&prev, metadata_only)
        })
        .clone()
    }
}

fn render(obj: &Value, metadata_only: bool) -> Bytes {
    let v = if metadata_only { object::partial_metadata(obj) } else { obj.clone() };
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

#[derive(Debug)]
struct Slot {
    ty: Arc<ResourceType>,
    served: bool,
    objects: BTreeMap<(String, String), Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    /// Watches from a resourceVersion below this get `410 Expired`: every
    /// change after it is still in `history`.
    floor: u64,
    /// Changes for watches without a `metadata.name=` requirement.
    tx: Option<broadcast::Sender<Arc<Change>>>,
    /// Changes of one object name, for watches that select one name (an
    /// agent watching its own Node): a change wakes only those watches,
    /// not all 1000 (the real server's cacher indexes such "triggers" too).
    by_name: HashMap<String, broadcast::Sender<Arc<Change>>>,
    /// `by_name` size after the last sweep of senders without receivers.
    swept_at: usize,
}

#[derive(Debug)]
struct State {
    rv: u64,
    slots: Vec<Slot>,
    namespaces: Option<ResId>,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The main resource: `status` is kept from the stored object when the
    /// resource has a status subresource.
    Main,
    /// The `/status` subresource: only `status` changes.
    Status,
    /// A test writing directly: everything but the server-set fields.
    Raw,
}

impl Target {
    fn subresource(self) -> Option<&'static str> {
        (self == Target::Status).then_some("status")
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    /// `resourceVersion` unset or `0`: the current objects as `ADDED`, then changes.
    Now,
    /// Changes after this resourceVersion (from the retained history).
    Rv(u64),
}

/// A started watch: the events to send first and the live channel.
pub(crate) struct WatchStart {
    pub(crate) initial: Vec<Arc<Change>>,
    pub(crate) rx: broadcast::Receiver<Arc<Change>>,
    pub(crate) rv: u64,
}

/// Why waiting on the store ended without the condition.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The condition did not hold within the timeout.
    #[error("{what}: condition not met within {timeout:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The resource spec names no served resource.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Store tuning.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) history_limit: usize,
    pub(crate) channel_capacity: usize,
}

/// The emulator's objects. Tests reach it through [`crate::Emulator::store`]
/// to read and write objects directly, as another client would.
///
/// Resources are named like kubectl names them: `nodes`, `rns`,
/// `rdmanodestates.kuberdma.io`, `v1/pods`, `kuberdma.io/v1alpha1/rdmanodestates`.
#[derive(Debug)]
pub struct Store {
    state: Mutex<State>,
    changed: Condvar,
    notify: tokio::sync::watch::Sender<u64>,
    ids: Ids,
    config: StoreConfig,
}

type Key = (String, String);

fn key(ns: Option<&str>, name: &str) -> Key {
    (ns.unwrap_or_default().to_string(), name.to_string())
}

impl Store {
    pub(crate) fn new(types: Vec<ResourceType>, config: StoreConfig) -> Self {
        let (notify, _) = tokio::sync::watch::channel(0);
        let store = Store {
            state: Mutex::new(State { rv: 0, slots: Vec::new(), namespaces: None }),
            changed: Condvar::new(),
            notify,
            ids: Ids::new(),
            config,
        };
        for ty in types {
            store.register(ty);
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-written
        // (each write is one insert/remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn ids(&self) -> &Ids {
        &self.ids
    }

    /// Serves another resource (or replaces the definition of one already
    /// served with the same group, version and plural).
    pub fn register(&self, ty: ResourceType) {
        let mut st = self.lock();
        Self::register_locked(&mut st, ty);
    }

    fn register_locked(st: &mut State, ty: ResourceType) -> ResId {
        let is_ns = ty.group.is_empty() && ty.plural == "namespaces";
        let id =
            match st.slots.iter().position(|s| {
                s.ty.group == ty.group && s.ty.version == ty.version && s.ty.plural == ty.plural
            }) {
                Some(i) => {
                    st.slots[i].ty = Arc::new(ty);
                    st.slots[i].served = true;
                    ResId(i)
                }
                None => {
                    st.slots.push(Slot {
                        ty: Arc::new(ty),
                        served: true,
                        objects: BTreeMap::new(),
                        history: VecDeque::new(),
                        floor: 0,
                        tx: None,
                        by_name: HashMap::new(),
                        swept_at: 0,
                    });
                    ResId(st.slots.len() - 1)
                }
            };
        if is_ns {
            st.namespaces = Some(id);
        }
        id
    }

    /// The served resources, in table order.
    pub fn resources(&self) -> Vec<ResourceType> {
        self.lock().slots.iter().filter(|s| s.served).map(|s| (*s.ty).clone()).collect()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Resolves a path's group/version/plural.
    pub(crate) fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<(ResId, Arc<ResourceType>)> {
        let st = self.lock();
        st.slots
            .iter()
            .enumerate()
            .find(|(_, s)| {
                s.served && s.ty.group == group && s.ty.version == version && s.ty.plural == plural
            })
            .map(|(i, s)| (ResId(i), s.ty.clone()))
    }

    /// Resolves a kubectl-style resource name.
    pub(crate) fn resolve_spec(&self, spec: &str) -> Result<(ResId, Arc<ResourceType>), ApiError> {
        let st = self.lock();
        let found: Vec<(usize, &Slot)> =
            st.slots.iter().enumerate().filter(|(_, s)| s.served && s.ty.matches_spec(spec)).collect();
        match found.as_slice() {
            [(i, s)] => Ok((ResId(*i), s.ty.clone())),
            [] => Err(ApiError::new(404, "NotFound", format!("no served resource matches {spec:?}"))),
            _ => {
                // `events` is both core and events.k8s.io: like kubectl, prefer
                // the core group for a bare name.
                if let Some((i, s)) = found.iter().find(|(_, s)| s.ty.group.is_empty()) {
                    return Ok((ResId(*i), s.ty.clone()));
                }
                let names: Vec<String> = found.iter().map(|(_, s)| s.ty.group_resource()).collect();
                Err(ApiError::bad_request(format!("{spec:?} is ambiguous: {}", names.join(", "))))
            }
        }
    }

    fn resolve_object(&self, obj: &Value) -> Result<(ResId, Arc<ResourceType>), ApiError> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        if api_version.is_empty() || kind.is_empty() {
            return Err(ApiError::bad_request("the object needs apiVersion and kind to find its resource"));
        }
        let st = self.lock();
        st.slots
            .iter()
            .enumerate()
            .find(|(_, s)| s.served && s.ty.api_version() == api_version && s.ty.kind == kind)
            .map(|(i, s)| (ResId(i), s.ty.clone()))
            .ok_or_else(|| {
                ApiError::new(404, "NotFound", format!("no served resource for {api_version}, Kind={kind}"))
            })
    }

    // ---- reads ----

    pub(crate) fn get_obj(&self, res: ResId, ns: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        let st = self.lock();
        let slot = &st.slots[res.0];
        slot.objects.get(&key(ns, name)).cloned().ok_or_else(|| ApiError::not_found(&slot.ty, name))
    }

    /// Objects of `res` (in `ns` when given), in key order, with the
    /// current resourceVersion.
    pub(crate) fn list_objs(&self, res: ResId, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let st = self.lock();
        let slot = &st.slots[res.0];
        let items = match ns {
            Some(ns) => slot
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => slot.objects.values().cloned().collect(),
        };
        (items, st.rv)
    }

    // ---- watch ----

    /// Starts a watch; `name` routes it to that object's changes only.
    pub(crate) fn watch(&self, res: ResId, since: Since, name: Option<&str>) -> Result<WatchStart, ApiError> {
        let mut st = self.lock();
        let rv = st.rv;
        let capacity = self.config.channel_capacity;
        let slot = &mut st.slots[res.0];
        let named = |o: &Value| name.is_none_or(|n| meta_str(o, "name") == Some(n));
        let initial = match since {
            Since::Now => slot
                .objects
                .values()
                .filter(|o| named(o))
                .map(|o| {
                    let orv = object::resource_version(o).unwrap_or(rv);
                    Arc::new(Change::new(ChangeKind::Added, orv, o.clone(), None))
                })
                .collect(),
            Since::Rv(from) => {
                if from < slot.floor {
                    return Err(ApiError::expired(from, slot.floor));
                }
                slot.history.iter().filter(|c| c.rv > from && named(&c.object)).cloned().collect()
            }
        };
        let rx = match name {
            None => slot.tx.get_or_insert_with(|| broadcast::channel(capacity).0).subscribe(),
            Some(name) => {
                if slot.by_name.len() >= 2 * slot.swept_at.max(512) {
                    slot.by_name.retain(|_, tx| tx.receiver_count() > 0);
                    slot.swept_at = slot.by_name.len();
                }
                // One object's changes: a small buffer is plenty.
                let per_name = capacity.clamp(1, 64);
                slot.by_name
                    .entry(name.to_string())
                    .or_insert_with(|| broadcast::channel(per_name).0)
                    .subscribe()
            }
        };
        Ok(WatchStart { initial, rx, rv })
    }

    /// The resourceVersion a bookmark may carry for a watch whose channel
    /// is drained: every change up to it has been delivered.
    pub(crate) fn bookmark_rv(&self, rx: &broadcast::Receiver<Arc<Change>>, last_seen: u64) -> u64 {
        let st = self.lock();
        if rx.is_empty() {
            st.rv.max(last_seen)
        } else {
            last_seen
        }
    }

    /// Drops the retained event history of every resource ("etcd
    /// compaction"): a watch resuming from an older resourceVersion gets
    /// `410 Expired` and must relist.
    pub fn compact(&self) {
        let mut st = self.lock();
        let rv = st.rv;
        for slot in &mut st.slots {
            slot.history.clear();
            slot.floor = rv;
        }
    }

    // ---- writes ----

    /// Commits a change: bumps the counter, stamps the object, records it in
    /// the history and broadcasts it. Returns the stored object.
    fn commit(
        &self,
        st: &mut State,
        res: ResId,
        key: Key,
        new: Option<Value>,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        st.rv += 1;
        let rv = st.rv;
        let limit = self.config.history_limit;
        let slot = &mut st.slots[res.0];
        let (kind, object) = match new {
            Some(mut obj) => {
                meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
                let obj = Arc::new(obj);
                slot.objects.insert(key, obj.clone());
                (if prev.is_some() { ChangeKind::Modified } else { ChangeKind::Added }, obj)
            }
            None => {
                slot.objects.remove(&key);
                let mut last = prev.as_deref().cloned().unwrap_or(Value::Null);
                meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
                (ChangeKind::Deleted, Arc::new(last))
            }
        };
        let change = Arc::new(Change::new(kind, rv, object.clone(), prev));
        if limit > 0 {
            if slot.history.len() >= limit {
                if let Some(old) = slot.history.pop_front() {
                    slot.floor = old.rv;
                }
            }
            slot.history.push_back(change.clone());
        } else {
            slot.floor = rv;
        }
        let name = change.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        if let Some(tx) = slot.by_name.get(name) {
            if tx.send(change.clone()).is_err() {
                // Every watch of this name has ended.
                slot.by_name.remove(name);
            }
        }
        if let Some(tx) = &slot.tx {
            // No receivers is fine: nobody watches this resource right now.
            let _ = tx.send(change);
        }
        object
    }

    fn notify_waiters(&self, rv: u64) {
        self.changed.notify_all();
        self.notify.send_replace(rv);
    }

    fn check_namespace(&self, st: &State, ty: &ResourceType, ns: Option<&str>) -> Result<(), ApiError> {
        if !ty.namespaced {
            return Ok(());
        }
        let ns = ns.unwrap_or_default();
        if ns.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{} is namespaced: a namespace is required",
                ty.group_resource()
            )));
        }
        if let Some(nsres) = st.namespaces {
            let nsslot = &st.slots[nsres.0];
            if !nsslot.objects.contains_key(&(String::new(), ns.to_string())) {
                return Err(ApiError::not_found(&nsslot.ty, ns));
            }
        }
        Ok(())
    }

    /// Creates an object (`POST`); `raw` keeps `status` (test writes).
    pub(crate) fn create_obj(
        &self,
        res: ResId,
        ns: Option<&str>,
        body: Value,
        raw: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let mut st = self.lock();
        let stored = self.create_locked(&mut st, res, ns, body, raw)?;
        let rv = st.rv;
        drop(st);
        self.notify_waiters(rv);
        Ok(stored)
    }

    fn create_locked(
        &self,
        st: &mut State,
        res: ResId,
        ns: Option<&str>,
        body: Value,
        raw: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let ty = st.slots[res.0].ty.clone();
        let mut obj = body;
        check_type(&ty, &mut obj)?;
        let ns = resolve_namespace(&ty, ns, &obj)?;
        let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => match meta_str(&obj, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => format!("{prefix}{}", self.ids.suffix()),
                None => {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "{} is invalid: metadata.name: Required value: name or generateName is required",
                            ty.kind
                        ),
                    ))
                }
            },
        };
        validate(&ty, &name, &obj)?;
        self.check_namespace(st, &ty, ns.as_deref())?;
        let k = key(ns.as_deref(), &name);
        if st.slots[res.0].objects.contains_key(&k) {
            return Err(ApiError::already_exists(&ty, &name));
        }
        if ty.status_subresource && !raw {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        {
            let meta = meta_mut(&mut obj);
            meta.insert("name".into(), json!(name));
            match &ns {
                Some(n) => meta.insert("namespace".into(), json!(n)),
                None => meta.remove("namespace"),
            };
            meta.insert("uid".into(), json!(self.ids.uid()));
            meta.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
            meta.insert("generation".into(), json!(1));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
        }
        server_defaults(&ty, &mut obj);
        let stored = self.commit(st, res, k, Some(obj), None);
        after_write(st, &ty, Some(&stored));
        Ok(stored)
    }

    /// Replaces an object (`PUT`) on the main resource or `/status`.
    pub(crate) fn replace(
        &self,
        res: ResId,
        ns: Option<&str>,
        name: &str,
        mut body: Value,
        target: Target,
    ) -> Result<Arc<Value>, ApiError> {
        let ty = self.ty(res);
        check_type(&ty, &mut body)?;
        if let Some(n) = meta_str(&body, "name") {
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        let precondition = object::resource_version(&body);
        if meta_str(&body, "resourceVersion").is_some_and(|s| !s.is_empty() && s.parse::<u64>().is_err()) {
            return Err(ApiError::bad_request("metadata.resourceVersion: must be a number"));
        }
        if precondition.is_none() && !ty.unconditional_update {
            return Err(ApiError::invalid(
                &ty,
                name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            ));
        }
        self.modify(res, ns, name, target, false, |_cur| Ok(Modify::Replace { obj: body, precondition }))
            .map(|(o, _)| o)
    }

    /// Patches an object (`PATCH`); apply patches create it when absent.
    /// Returns the object and whether it was created.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &self,
        res: ResId,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &Value,
        target: Target,
        manager: Option<&str>,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let ty = self.ty(res);
        if kind == PatchKind::Apply {
            let manager = manager.filter(|m| !m.is_empty()).ok_or_else(|| {
                ApiError::bad_request(
                    "fieldManager is required for apply requests (PATCH with application/apply-patch+yaml)",
                )
            })?;
            let mut config = body.clone();
            if !config.is_object() {
                return Err(ApiError::bad_request("an apply patch must be an object"));
            }
            check_type(&ty, &mut config)?;
            if let Some(n) = meta_str(&config, "name") {
                if n != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
            }
            if let Some(m) = config.as_object_mut() {
                if ty.status_subresource {
                    match target {
                        // Applying to the main resource never sets status; applying
                        // to /status sets only status.
                        Target::Main => {
                            m.remove("status");
                        }
                        Target::Status => m.retain(|k, _| {
                            matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                        }),
                        Target::Raw => {}
                    }
                }
            }
            if target == Target::Status {
                // A /status apply must not carry metadata changes either.
                if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.retain(|k, _| {
                        matches!(k.as_str(), "name" | "namespace" | "resourceVersion" | "uid")
                    });
                }
            }
            let precondition = object::resource_version(&config);
            let manager = manager.to_string();
            return self.modify(res, ns, name, target, true, move |_| {
                Ok(Modify::Apply { config, manager, precondition })
            });
        }
        let body = body.clone();
        self.modify(res, ns, name, target, false, move |cur| {
            let Some(cur) = cur else { return Err(ApiError::not_found(&ty, name)) };
            let mut obj = (**cur).clone();
            match kind {
                PatchKind::Merge => patch::merge(&mut obj, &body),
                PatchKind::Strategic => patch::strategic(&mut obj, &body),
                PatchKind::Json => patch::json_patch(&mut obj, &body).map_err(|e| match e {
                    JsonPatchError::Decode(m) => ApiError::bad_request(m),
                    JsonPatchError::Apply(m) => ApiError::from_code(422, m),
                })?,
                PatchKind::Apply => unreachable!("handled above"),
            }
            if !obj.is_object() {
                return Err(ApiError::bad_request("the patch did not leave an object"));
            }
            let precondition = object::resource_version(&obj);
            Ok(Modify::Replace { obj, precondition })
        })
    }

    fn ty(&self, res: ResId) -> Arc<ResourceType> {
        self.lock().slots[res.0].ty.clone()
    }

    /// The common read-modify-write: `f` sees the current object (None when
    /// absent) and says what to write; the server-set fields, the status
    /// rules, generation, optimistic concurrency, no-op detection and
    /// finalizer-driven deletion are applied here.
    fn modify(
        &self,
        res: ResId,
        ns: Option<&str>,
        name: &str,
        target: Target,
        may_create: bool,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<Modify, ApiError>,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let mut st = self.lock();
        let ty = st.slots[res.0].ty.clone();
        let k = key(ns.filter(|_| ty.namespaced), name);
        let cur = st.slots[res.0].objects.get(&k).cloned();
        let m = f(cur.as_ref())?;
        let Some(cur) = cur else {
            // Only apply gets here without an object: it creates.
            let (Modify::Apply { config, manager, .. }, true) = (m, may_create) else {
                return Err(ApiError::not_found(&ty, name));
            };
            if target == Target::Status {
                return Err(ApiError::not_found(&ty, name));
            }
            let mut obj = config;
            let set = FieldSet::of_config(&obj);
            meta_mut(&mut obj).insert("name".into(), json!(name));
            set_managed(&mut obj, &ty, &manager, None, &set);
            strip_nulls(&mut obj);
            let created = self.create_locked(&mut st, res, ns, obj, false)?;
            let rv = st.rv;
            drop(st);
            self.notify_waiters(rv);
            return Ok((created, true));
        };
        let (mut next, precondition) = match m {
            Modify::Replace { obj, precondition } => (obj, precondition),
            Modify::Apply { config, manager, precondition } => {
                let sub = target.subresource();
                let old_set = applied_set(&cur, &manager, sub);
                let new_set = FieldSet::of_config(&config);
                let mut obj = (*cur).clone();
                old_set.remove_dropped(&mut obj, &new_set);
                patch::merge(&mut obj, &config);
                set_managed(&mut obj, &ty, &manager, sub, &new_set);
                (obj, precondition)
            }
        };
        if let Some(want) = precondition {
            if object::resource_version(&cur) != Some(want) {
                return Err(ApiError::stale(&ty, name));
            }
        }
        next = finalize_update(&ty, &cur, next, target);
        validate(&ty, name, &next)?;
        if same_ignoring_rv(&cur, &next) {
            return Ok((cur, false));
        }
        let gone = next.pointer("/metadata/deletionTimestamp").is_some()
            && next.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
        let stored = if gone {
            self.commit(&mut st, res, k, None, Some(cur))
        } else {
            self.commit(&mut st, res, k, Some(next), Some(cur))
        };
        if !gone {
            after_write(&mut st, &ty, Some(&stored));
        }
        let rv = st.rv;
        drop(st);
        self.notify_waiters(rv);
        Ok((stored, false))
    }

    /// Deletes an object (`DELETE`): objects with finalizers get a
    /// `deletionTimestamp` and stay until their finalizers are removed.
    pub(crate) fn delete_obj(
        &self,
        res: ResId,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Arc<Value>, ApiError> {
        let mut st = self.lock();
        let ty = st.slots[res.0].ty.clone();
        let k = key(ns.filter(|_| ty.namespaced), name);
        let Some(cur) = st.slots[res.0].objects.get(&k).cloned() else {
            return Err(ApiError::not_found(&ty, name));
        };
        if let Some(uid) = &pre.uid {
            if meta_str(&cur, "uid") != Some(uid.as_str()) {
                return Err(ApiError::conflict(
                    &ty,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&cur, "uid").unwrap_or_default()
                    ),
                ));
            }
        }
        if let Some(rv) = &pre.resource_version {
            if meta_str(&cur, "resourceVersion") != Some(rv.as_str()) {
                return Err(ApiError::conflict(
                    &ty,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(&cur, "resourceVersion").unwrap_or_default()
                    ),
                ));
            }
        }
        let has_finalizers =
            cur.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        let stored = if has_finalizers {
            if cur.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(cur);
            }
            let mut next = (*cur).clone();
            let meta = meta_mut(&mut next);
            meta.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            self.commit(&mut st, res, k, Some(next), Some(cur))
        } else {
            let stored = self.commit(&mut st, res, k, None, Some(cur));
            if is_crd(&ty) {
                self.drop_crd_resources(&mut st, &stored);
            }
            stored
        };
        let rv = st.rv;
        drop(st);
        self.notify_waiters(rv);
        Ok(stored)
    }

    /// A deleted CRD stops serving its resources, and their objects are
    /// deleted (with DELETED events), as the real server's finalizer does.
    fn drop_crd_resources(&self, st: &mut State, crd: &Value) {
        let Some(types) = resources::from_crd(crd) else { return };
        for t in types {
            let Some(i) = st
                .slots
                .iter()
                .position(|s| s.ty.group == t.group && s.ty.version == t.version && s.ty.plural == t.plural)
            else {
                continue;
            };
            let keys: Vec<(Key, Arc<Value>)> =
                st.slots[i].objects.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for (k, v) in keys {
                self.commit(st, ResId(i), k, None, Some(v));
            }
            st.slots[i].served = false;
        }
    }

    // ---- test-facing API ----

    /// An object, or `None` when absent.
    pub fn get(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let (res, ty) = self.resolve_spec(resource)?;
        let ns = namespace.filter(|_| ty.namespaced);
        match self.get_obj(res, ns, name) {
            Ok(o) => Ok(Some((*o).clone())),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An object deserialized into `T` (e.g. a `k8s-openapi` or CRD type).
    pub fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<T>, ApiError> {
        match self.get(resource, namespace, name)? {
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| ApiError::from_code(500, format!("{resource} {name} does not decode: {e}"))),
            None => Ok(None),
        }
    }

    /// All objects of a resource (in one namespace when given).
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Vec<Value>, ApiError> {
        let (res, ty) = self.resolve_spec(resource)?;
        let (items, _) = self.list_objs(res, namespace.filter(|_| ty.namespaced));
        Ok(items.iter().map(|o| (**o).clone()).collect())
    }

    /// Creates an object as a client would (`POST`); its resource comes
    /// from `apiVersion` and `kind`. Unlike a client, `status` is kept.
    pub fn create(&self, obj: impl Serialize) -> Result<Value, ApiError> {
        let obj = to_value(obj)?;
        let (res, _) = self.resolve_object(&obj)?;
        let ns = meta_str(&obj, "namespace").map(str::to_string);
        self.create_obj(res, ns.as_deref(), obj, true).map(|o| (*o).clone())
    }

    /// Creates or replaces an object unconditionally, `status` included.
    pub fn put(&self, obj: impl Serialize) -> Result<Value, ApiError> {
        let mut obj = to_value(obj)?;
        let (res, ty) = self.resolve_object(&obj)?;
        let ns = resolve_namespace(&ty, None, &obj)?;
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if !name.is_empty() && self.get_obj(res, ns.as_deref(), &name).is_ok() {
            meta_mut(&mut obj).remove("resourceVersion");
            return self
                .modify(res, ns.as_deref(), &name, Target::Raw, false, |_| {
                    Ok(Modify::Replace { obj, precondition: None })
                })
                .map(|(o, _)| (*o).clone());
        }
        self.create_obj(res, ns.as_deref(), obj, true).map(|o| (*o).clone())
    }

    /// Changes an object as another client would: `f` edits a copy (labels,
    /// spec, status, finalizers...), which is then written back (a no-op
    /// edit writes nothing).
    ///
    /// ```no_run
    /// # fn demo(emu: &kube_rdma_apiemu::Emulator) -> Result<(), kube_rdma_apiemu::ApiError> {
    /// emu.store().update("nodes", None, "node-1", |node| {
    ///     node["metadata"]["labels"].as_object_mut().map(|l| l.remove("kuberdma.io/roce-ready"));
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn update(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let (res, _) = self.resolve_spec(resource)?;
        self.modify(res, namespace, name, Target::Raw, false, |cur| {
            let mut obj = cur.map(|c| (**c).clone()).unwrap_or(Value::Null);
            f(&mut obj);
            Ok(Modify::Replace { obj, precondition: None })
        })
        .map(|(o, _)| (*o).clone())
    }

    /// Sets one label, as another client would.
    pub fn set_label(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<Value, ApiError> {
        self.update(resource, namespace, name, |o| {
            let labels = meta_mut(o).entry("labels").or_insert_with(|| json!({}));
            if !labels.is_object() {
                *labels = json!({});
            }
            labels[key] = json!(value);
        })
    }

    /// Removes one label, as another client would (no-op when absent).
    pub fn remove_label(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        key: &str,
    ) -> Result<Value, ApiError> {
        self.update(resource, namespace, name, |o| {
            if let Some(l) = o.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
                l.remove(key);
            }
        })
    }

    /// Deletes an object as a client would (finalizers honoured); returns
    /// what the server would answer.
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let (res, ty) = self.resolve_spec(resource)?;
        self.delete_obj(res, namespace.filter(|_| ty.namespaced), name, &Preconditions::default())
            .map(|o| (*o).clone())
    }

    /// Waits until `f` returns `Some`, re-checking after every write;
    /// `f` may read the store.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Store) -> Option<T>,
    ) -> Result<T, WaitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.notify.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(t) = f(self) {
                return Ok(t);
            }
            if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
                return f(self).ok_or(WaitError::Timeout { what: "wait_until".into(), timeout });
            }
        }
    }

    /// Waits until `pred` holds for the object (`None` = absent) and
    /// returns it.
    pub async fn wait_for(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
        mut pred: impl FnMut(Option<&Value>) -> bool,
    ) -> Result<Option<Value>, WaitError> {
        self.resolve_spec(resource)?;
        self.wait_until(timeout, |s| {
            let o = s.get(resource, namespace, name).ok()?;
            pred(o.as_ref()).then_some(o)
        })
        .await
        .map_err(|e| match e {
            WaitError::Timeout { timeout, .. } => {
                WaitError::Timeout { what: format!("{resource} {name}"), timeout }
            }
            other => other,
        })
    }

    /// [`wait_until`](Self::wait_until) for synchronous tests (blocks the thread).
    pub fn wait_until_blocking<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Store) -> Option<T>,
    ) -> Result<T, WaitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let rv = self.resource_version();
            if let Some(t) = f(self) {
                return Ok(t);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Timeout { what: "wait_until".into(), timeout });
            }
            let st = self.lock();
            if st.rv == rv {
                // Woken by the next commit (or the deadline); `f` runs unlocked.
                let _ = self.changed.wait_timeout(st, deadline - now);
            }
        }
    }

    /// [`wait_for`](Self::wait_for) for synchronous tests.
    pub fn wait_for_blocking(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        timeout: Duration,
        mut pred: impl FnMut(Option<&Value>) -> bool,
    ) -> Result<Option<Value>, WaitError> {
        self.resolve_spec(resource)?;
        self.wait_until_blocking(timeout, |s| {
            let o = s.get(resource, namespace, name).ok()?;
            pred(o.as_ref()).then_some(o)
        })
        .map_err(|e| match e {
            WaitError::Timeout { timeout, .. } => {
                WaitError::Timeout { what: format!("{resource} {name}"), timeout }
            }
            other => other,
        })
    }
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Preconditions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

enum Modify {
    Replace { obj: Value, precondition: Option<u64> },
    Apply { config: Value, manager: String, precondition: Option<u64> },
}

fn to_value(obj: impl Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(obj).map_err(|e| ApiError::bad_request(format!("object does not serialize: {e}")))
}

/// Sets `apiVersion`/`kind` when missing; refuses other types' objects.
fn check_type(ty: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    let Some(m) = obj.as_object_mut() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    let want_av = ty.api_version();
    match m.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            m.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av != want_av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )))
        }
        Some(_) => {}
    }
    match m.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            m.insert("kind".into(), json!(ty.kind));
        }
        Some(k) if k != ty.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ty.kind
            )))
        }
        Some(_) => {}
    }
    Ok(())
}

/// The namespace a create lands in: the path's, which the body must agree with.
fn resolve_namespace(
    ty: &ResourceType,
    path_ns: Option<&str>,
    obj: &Value,
) -> Result<Option<String>, ApiError> {
    if !ty.namespaced {
        return Ok(None);
    }
    let body_ns = meta_str(obj, "namespace").filter(|n| !n.is_empty());
    match (path_ns, body_ns) {
        (Some(p), Some(b)) if p != b => Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({b}) does not match the namespace sent on the request ({p})"
        ))),
        (Some(p), _) => Ok(Some(p.to_string())),
        (None, Some(b)) => Ok(Some(b.to_string())),
        (None, None) => Ok(Some("default".to_string())),
    }
}

fn validate(ty: &ResourceType, name: &str, obj: &Value) -> Result<(), ApiError> {
    let named = if ty.group.is_empty() && ty.plural == "namespaces" {
        object::check_label_name(name)
    } else {
        object::check_subdomain(name)
    };
    named.map_err(|m| ApiError::invalid(ty, name, format!("metadata.name: Invalid value: {m}")))?;
    object::check_labels(obj).map_err(|m| ApiError::invalid(ty, name, m))
}

/// Fields the real server fills in on create.
fn server_defaults(ty: &ResourceType, obj: &mut Value) {
    if ty.group.is_empty() && ty.plural == "namespaces" {
        let name = meta_str(obj, "name").unwrap_or_default().to_string();
        let meta = meta_mut(obj);
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        obj["status"] = json!({"phase": "Active"});
    }
    if is_crd(ty) {
        let names = obj.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
        let stored: Vec<Value> = obj
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter(|v| v.get("storage") == Some(&json!(true)))
                    .filter_map(|v| v.get("name").cloned())
                    .collect()
            })
            .unwrap_or_default();
        let now = object::now_rfc3339();
        obj["status"] = json!({
            "acceptedNames": names,
            "storedVersions": stored,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
        });
    }
}

/// After a CRD is written: serve what it declares and report it established
/// (the real server's establishing controller does this right after).
fn after_write(st: &mut State, ty: &ResourceType, stored: Option<&Arc<Value>>) {
    if !is_crd(ty) {
        return;
    }
    let Some(types) = stored.and_then(|crd| resources::from_crd(crd)) else { return };
    for t in types {
        Store::register_locked(st, t);
    }
}

fn is_crd(ty: &ResourceType) -> bool {
    ty.group == "apiextensions.k8s.io" && ty.plural == "customresourcedefinitions"
}

/// Applies the immutable and status rules to a candidate object.
fn finalize_update(ty: &ResourceType, cur: &Value, mut next: Value, target: Target) -> Value {
    if !next.is_object() {
        next = json!({});
    }
    match target {
        Target::Status => {
            // Only status changes, but managedFields keep what this write
            // recorded (an apply to /status tracks its fields there).
            let status = next.get("status").cloned();
            let managed = next.pointer("/metadata/managedFields").cloned();
            next = cur.clone();
            if let Some(mf) = managed {
                meta_mut(&mut next).insert("managedFields".into(), mf);
            }
            match status {
                Some(s) => next["status"] = s,
                None => {
                    if let Some(m) = next.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        Target::Main if ty.status_subresource => {
            let m = next.as_object_mut().expect("checked to be an object");
            match cur.get("status") {
                Some(s) => {
                    m.insert("status".into(), s.clone());
                }
                None => {
                    m.remove("status");
                }
            }
        }
        _ => {}
    }
    let m = next.as_object_mut().expect("made an object");
    m.insert("apiVersion".into(), json!(ty.api_version()));
    m.insert("kind".into(), json!(ty.kind));
    let cur_meta = cur.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let old_gen = cur_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
    let bump = object::generation_part(cur, ty.status_subresource)
        != object::generation_part(&next, ty.status_subresource);
    let meta = meta_mut(&mut next);
    for k in
        ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"]
    {
        match cur_meta.get(k) {
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
    if !meta.contains_key("managedFields") {
        if let Some(mf) = cur_meta.get("managedFields") {
            meta.insert("managedFields".into(), mf.clone());
        }
    }
    meta.insert("generation".into(), json!(if bump { old_gen + 1 } else { old_gen }));
    meta.insert("resourceVersion".into(), cur_meta.get("resourceVersion").cloned().unwrap_or(Value::Null));
    next
}

/// Equal apart from managedFields timestamps (a no-op write).
fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(mf) = v.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) {
            for e in mf {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
        v
    }
    strip(a) == strip(b)
}

/// The field set `manager` applied (to `subresource`), from managedFields.
fn applied_set(obj: &Value, manager: &str, subresource: Option<&str>) -> FieldSet {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|entries| {
            entries.iter().find(|e| {
                e.get("manager").and_then(Value::as_str) == Some(manager)
                    && e.get("operation").and_then(Value::as_str) == Some("Apply")
                    && e.get("subresource").and_then(Value::as_str) == subresource
            })
        })
        .and_then(|e| e.get("fieldsV1"))
        .map(FieldSet::from_fields_v1)
        .unwrap_or_default()
}

/// Records (replaces) `manager`'s Apply entry in managedFields.
fn set_managed(obj: &mut Value, ty: &ResourceType, manager: &str, subresource: Option<&str>, set: &FieldSet) {
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": ty.api_version(),
        "time": object::now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": set.to_fields_v1(),
    });
    if let Some(s) = subresource {
        entry["subresource"] = json!(s);
    }
    let meta = meta_mut(obj);
    let mf = meta.entry("managedFields").or_insert_with(|| json!([]));
    if !mf.is_array() {
        *mf = json!([]);
    }
    let arr = mf.as_array_mut().expect("made an array");
    let same = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str) == subresource
    };
    match arr.iter_mut().find(|e| same(e)) {
        Some(e) => {
            // Keep the old time when nothing changed, so a repeated apply is a no-op.
            if e.get("fieldsV1") == entry.get("fieldsV1") {
                if let Some(t) = e.get("time").cloned() {
                    entry["time"] = t;
                }
            }
            *e = entry;
        }
        None => arr.push(entry),
    }
}

/// Removes `null` map values (an applied `null` means "not set").
fn strip_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, v| !v.is_null());
        for v in m.values_mut() {
            strip_nulls(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        let s = Store::new(
            resources::default_resources(),
            StoreConfig { history_limit: 3, channel_capacity: 16 },
        );
        s.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})).unwrap();
        s
    }

    fn rns(name: &str) -> Value {
        json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": name},
               "spec": {"nodeName": name}, "status": {"ready": true}})
    }

    #[test]
    fn creates_stamp_server_fields_and_refuse_duplicates() {
        let s = store();
        let o = s.create(rns("n1")).unwrap();
        assert_eq!(o["metadata"]["generation"], 1);
        assert!(o["metadata"]["uid"].as_str().unwrap().len() == 36);
        assert_eq!(o["metadata"]["resourceVersion"], "2");
        assert_eq!(s.create(rns("n1")).unwrap_err().code, 409);
        assert_eq!(s.resource_version(), 2);
    }

    #[test]
    fn generation_bumps_on_spec_not_on_status_or_labels() {
        let s = store();
        s.create(rns("n1")).unwrap();
        let o = s.update("rns", None, "n1", |o| o["status"]["ready"] = json!(false)).unwrap();
        assert_eq!(o["metadata"]["generation"], 1);
        let o = s.update("rns", None, "n1", |o| o["metadata"]["labels"] = json!({"a": "b"})).unwrap();
        assert_eq!(o["metadata"]["generation"], 1);
        let o = s.update("rns", None, "n1", |o| o["spec"]["nodeName"] = json!("x")).unwrap();
        assert_eq!(o["metadata"]["generation"], 2);
    }

    #[test]
    fn put_creates_then_replaces_in_the_default_namespace() {
        let s = store();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}});
        s.put(pod.clone()).unwrap();
        let mut again = pod;
        again["status"]["phase"] = json!("Succeeded");
        let o = s.put(again).unwrap();
        assert_eq!(
            (o["metadata"]["namespace"].as_str(), o["status"]["phase"].as_str()),
            (Some("default"), Some("Succeeded"))
        );
        s.set_label("pods", Some("default"), "p", "a", "b").unwrap();
        assert_eq!(s.get("pods", Some("default"), "p").unwrap().unwrap()["metadata"]["labels"]["a"], "b");
        s.remove_label("pods", Some("default"), "p", "a").unwrap();
        assert_eq!(s.get("pods", Some("default"), "p").unwrap().unwrap()["metadata"]["labels"], json!({}));
    }

    #[test]
    fn no_op_writes_keep_the_resource_version() {
        let s = store();
        let a = s.create(rns("n1")).unwrap();
        let b = s.update("rns", None, "n1", |_| {}).unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"]);
    }

    #[test]
    fn history_beyond_the_limit_expires_old_watches() {
        let s = store();
        let (res, _) = s.resolve_spec("rns").unwrap();
        for i in 0..5 {
            s.create(rns(&format!("n{i}"))).unwrap();
        }
        // rv 1 (namespace) .. 6; history keeps the last 3 (4,5,6): floor 3.
        assert_eq!(s.watch(res, Since::Rv(2), None).err().unwrap().code, 410);
        let w = s.watch(res, Since::Rv(4), None).ok().unwrap();
        assert_eq!(w.initial.iter().map(|c| c.rv).collect::<Vec<_>>(), vec![5, 6]);
        s.compact();
        assert_eq!(s.watch(res, Since::Rv(5), None).err().unwrap().code, 410);
        assert_eq!(s.watch(res, Since::Now, None).ok().unwrap().initial.len(), 5);
    }

    #[test]
    fn a_name_selecting_watch_is_woken_only_by_its_object() {
        let s = store();
        let (res, _) = s.resolve_spec("rns").unwrap();
        s.create(rns("a")).unwrap();
        s.create(rns("b")).unwrap();
        let one = s.watch(res, Since::Now, Some("a")).ok().unwrap();
        let all = s.watch(res, Since::Now, None).ok().unwrap();
        assert_eq!((one.initial.len(), all.initial.len()), (1, 2));
        s.update("rns", None, "b", |o| o["spec"]["x"] = json!(1)).unwrap();
        assert!(one.rx.is_empty());
        assert_eq!(all.rx.len(), 1);
        s.update("rns", None, "a", |o| o["spec"]["x"] = json!(1)).unwrap();
        assert_eq!(one.rx.len(), 1);
        drop(one);
        s.update("rns", None, "a", |o| o["spec"]["x"] = json!(2)).unwrap();
        let (res_slot, _) = s.resolve_spec("rns").unwrap();
        assert!(s.lock().slots[res_slot.0].by_name.is_empty(), "a name nobody watches is forgotten");
    }

    #[test]
    fn finalizers_delay_deletion_until_removed() {
        let s = store();
        let mut o = rns("n1");
        o["metadata"]["finalizers"] = json!(["x/y"]);
        s.create(o).unwrap();
        let d = s.delete("rns", None, "n1").unwrap();
        assert!(d["metadata"]["deletionTimestamp"].is_string());
        assert!(s.get("rns", None, "n1").unwrap().is_some());
        s.update("rns", None, "n1", |o| o["metadata"]["finalizers"] = json!([])).unwrap();
        assert!(s.get("rns", None, "n1").unwrap().is_none());
    }

    #[test]
    fn namespaced_creates_need_the_namespace() {
        let s = store();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "nope"}});
        let e = s.create(pod).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (404, "namespaces \"nope\" not found"));
    }

    #[test]
    fn a_crd_makes_its_resource_served() {
        let s = store();
        assert!(s.resolve_spec("widgets").is_err());
        s.create(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true}]}}))
        .unwrap();
        s.create(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
            .unwrap();
        s.delete("crd", None, "widgets.example.com").unwrap();
        assert!(s.resolve_spec("widgets").is_err());
    }
}
