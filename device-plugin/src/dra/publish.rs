//! Keeps the API's ResourceSlices of this node and driver equal to the
//! wanted pool content, with server-side apply under our field manager.
//!
//! A sync lists what is published; when it already is the wanted content as
//! one complete generation, nothing is written (a restart without change
//! writes nothing). Otherwise the generation is bumped past every generation
//! seen, every slice is applied, and slices of ours that are no longer
//! wanted are deleted. [`Publisher::sync`] runs on every change of devices or
//! readiness and on every change seen to the node's slices (the
//! kubelet deletes a node's slices when it restarts, and a driver's 30 s after
//! the driver goes away): what is gone is put back. [`run`] does that on a
//! task of its own, every request bounded by [`super::API_TIMEOUT`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::{mpsc, watch};

use super::metrics::DraMetrics;
use super::slices::{self, Content, NodeRef};
use super::{bounded, ApiError, FIELD_MANAGER, WATCH_TIMEOUT_SECS};

/// What a sync did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Synced {
    /// Generation now published.
    pub generation: i64,
    /// Slices applied.
    pub applied: usize,
    /// Slices deleted.
    pub deleted: usize,
}

/// The publisher of one node's pool.
pub struct Publisher {
    api: Api<ResourceSlice>,
    node: NodeRef,
    driver: String,
    generation: i64,
}

/// `spec.nodeName=<node>,spec.driver=<driver>`: the field selectors
/// ResourceSlices support (`ResourceSliceSelectorNodeName`, `…Driver`).
pub fn field_selector(node: &str, driver: &str) -> String {
    format!("spec.nodeName={node},spec.driver={driver}")
}

impl Publisher {
    /// A publisher for `node`'s pool of `driver`.
    pub fn new(client: kube::Client, node: NodeRef, driver: &str) -> Self {
        Publisher { api: Api::all(client), node, driver: driver.into(), generation: 0 }
    }

    /// The Node's UID, once it could be read: slices written from now on
    /// carry it as their owner.
    pub fn set_node_uid(&mut self, uid: Option<String>) {
        self.node.uid = uid;
    }

    fn ours(&self, s: &ResourceSlice) -> bool {
        s.spec.driver == self.driver && s.spec.node_name.as_deref() == Some(self.node.name.as_str())
    }

    /// Whether `s` has the owner reference we would write (any, while the
    /// Node's UID is unknown).
    fn owned_as_wanted(&self, s: &ResourceSlice) -> bool {
        match &self.node.uid {
            None => true,
            Some(uid) => s.metadata.owner_references.iter().flatten().any(|o| &o.uid == uid),
        }
    }

    /// Makes the published slices hold `content`. Every request is bounded
    /// by [`super::API_TIMEOUT`]: a hung API server fails the sync, which is
    /// retried, instead of holding it forever.
    pub async fn sync(&mut self, content: &Content) -> Result<Synced, ApiError> {
        let lp = ListParams::default().fields(&field_selector(&self.node.name, &self.driver));
        let listed = bounded("list ResourceSlices", self.api.list(&lp)).await?;
        let mut existing: Vec<ResourceSlice> = listed.items.into_iter().filter(|s| self.ours(s)).collect();
        existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if let Some((generation, published)) =
            slices::published_content(&self.node.name, &self.driver, &existing)
        {
            if &published == content && existing.iter().all(|s| self.owned_as_wanted(s)) {
                self.generation = generation;
                return Ok(Synced { generation, ..Default::default() });
            }
        }
        let seen = existing.iter().map(|s| s.spec.pool.generation).max().unwrap_or(0);
        self.generation = self.generation.max(seen) + 1;
        let wanted = slices::build(&self.node, &self.driver, content, self.generation);
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let mut out = Synced { generation: self.generation, ..Default::default() };
        for s in &wanted {
            let name = s.metadata.name.clone().unwrap_or_default();
            let mut body = serde_json::to_value(s).unwrap_or_default();
            body["apiVersion"] = "resource.k8s.io/v1".into();
            body["kind"] = "ResourceSlice".into();
            bounded("apply a ResourceSlice", self.api.patch(&name, &pp, &Patch::Apply(body))).await?;
            out.applied += 1;
        }
        for s in &existing {
            let Some(name) = s.metadata.name.as_deref() else { continue };
            if wanted.iter().any(|w| w.metadata.name.as_deref() == Some(name)) {
                continue;
            }
            match bounded("delete a ResourceSlice", self.api.delete(name, &DeleteParams::default())).await {
                Ok(_) => out.deleted += 1,
                Err(ApiError::Api { source: kube::Error::Api(e), .. }) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// First retry after a failed sync; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between failed syncs.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Our own writes come back as watch events: wait this long for the burst.
const EVENT_DEBOUNCE: Duration = Duration::from_millis(100);

/// Keeps the node's slices equal to `content` until its sender goes away:
/// syncs when the content changes and when the node's slices change in the
/// API (a restarted kubelet wiped them; someone edited one), retrying failed
/// syncs with backoff. Runs on its own task, so the driver's rescans and
/// the kubelet's calls never wait for the API server.
pub async fn run(
    client: kube::Client,
    node_name: String,
    driver: String,
    mut content: watch::Receiver<Content>,
    metrics: Arc<DraMetrics>,
    started: Instant,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut publisher =
        Publisher::new(client.clone(), NodeRef { name: node_name.clone(), uid: None }, &driver);
    let mut slice_events = watch_slices(client, &node_name, &driver);
    // Whether the Node was looked up (found or not); a failed read is tried again before the next sync.
    let mut owner_settled = false;
    let mut first = true;
    let mut backoff = FIRST_BACKOFF;
    let mut due = Some(tokio::time::Instant::now());
    loop {
        let wait = async {
            match due {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = content.changed() => {
                if changed.is_err() {
                    return;
                }
                due.get_or_insert_with(tokio::time::Instant::now);
            }
            Some(()) = slice_events.recv() => {
                due.get_or_insert_with(|| tokio::time::Instant::now() + EVENT_DEBOUNCE);
            }
            () = wait => {
                due = None;
                if !owner_settled {
                    match bounded("get the Node", nodes.get_opt(&node_name)).await {
                        Ok(Some(n)) => {
                            publisher.set_node_uid(n.metadata.uid);
                            owner_settled = true;
                        }
                        Ok(None) => {
                            tracing::warn!(node = %node_name, "Node not found: slices are published without an owner");
                            owner_settled = true;
                        }
                        Err(e) => tracing::warn!(node = %node_name, error = %nic::error_chain(&e), "cannot read the Node: slices are published without an owner for now"),
                    }
                }
                let wanted = content.borrow_and_update().clone();
                match publisher.sync(&wanted).await {
                    Ok(s) => {
                        metrics.published(s.generation);
                        backoff = FIRST_BACKOFF;
                        if first {
                            first = false;
                            tracing::info!(generation = s.generation, slices = wanted.len(), elapsed = ?started.elapsed(), "first ResourceSlices published");
                        } else if s.applied + s.deleted > 0 {
                            tracing::info!(generation = s.generation, applied = s.applied, deleted = s.deleted, "ResourceSlices updated");
                        }
                    }
                    Err(e) => {
                        let msg = nic::error_chain(&e);
                        metrics.publish_failed(msg.clone());
                        tracing::warn!(error = %msg, retry_in = ?backoff, "cannot publish ResourceSlices");
                        due = Some(tokio::time::Instant::now() + backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
    }
}

/// Sends `()` whenever a ResourceSlice of `node` and `driver` changes or goes
/// away (including our own writes: a sync after them finds nothing to do).
pub fn watch_slices(client: kube::Client, node: &str, driver: &str) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(1);
    let api: Api<ResourceSlice> = Api::all(client);
    let cfg = watcher::Config::default().fields(&field_selector(node, driver)).timeout(WATCH_TIMEOUT_SECS);
    let (node, driver) = (node.to_string(), driver.to_string());
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            let relevant = match &ev {
                Ok(Event::Apply(s) | Event::Delete(s)) => {
                    s.spec.driver == driver && s.spec.node_name.as_deref() == Some(node.as_str())
                }
                // A relist may have missed deletions: look again.
                Ok(Event::InitDone) => true,
                Ok(Event::Init | Event::InitApply(_)) => false,
                Err(e) => {
                    tracing::debug!(error = %e, "ResourceSlice watch error; the watcher retries");
                    false
                }
            };
            if relevant {
                match tx.try_send(()) {
                    Ok(()) | Err(mpsc::error::TrySendError::Full(())) => {}
                    Err(mpsc::error::TrySendError::Closed(())) => return,
                }
            }
        }
    });
    rx
}
