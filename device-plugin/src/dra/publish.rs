//! Keeps the API's ResourceSlices of this node and driver equal to the
//! wanted pool content, with server-side apply under our field manager.
//!
//! A sync lists what is published; when it already is the wanted content as
//! one complete generation, nothing is written (a restart without change
//! writes nothing). Otherwise the generation is bumped past every generation
//! seen, every slice is applied, and slices of ours that are no longer
//! wanted are deleted. The driver calls [`Publisher::sync`] on every change of
//! devices or readiness and on every change it sees to its slices (the
//! kubelet deletes a node's slices when it restarts, and a driver's 30 s after
//! the driver goes away): what is gone is put back.

use futures::StreamExt;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::mpsc;

use super::slices::{self, Content, NodeRef};
use super::FIELD_MANAGER;

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

    fn ours(&self, s: &ResourceSlice) -> bool {
        s.spec.driver == self.driver && s.spec.node_name.as_deref() == Some(self.node.name.as_str())
    }

    /// Makes the published slices hold `content`.
    pub async fn sync(&mut self, content: &Content) -> Result<Synced, kube::Error> {
        let lp = ListParams::default().fields(&field_selector(&self.node.name, &self.driver));
        let mut existing: Vec<ResourceSlice> =
            self.api.list(&lp).await?.items.into_iter().filter(|s| self.ours(s)).collect();
        existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if let Some((generation, published)) =
            slices::published_content(&self.node.name, &self.driver, &existing)
        {
            if &published == content {
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
            self.api.patch(&name, &pp, &Patch::Apply(body)).await?;
            out.applied += 1;
        }
        for s in &existing {
            let Some(name) = s.metadata.name.as_deref() else { continue };
            if wanted.iter().any(|w| w.metadata.name.as_deref() == Some(name)) {
                continue;
            }
            match self.api.delete(name, &DeleteParams::default()).await {
                Ok(_) => out.deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// Sends `()` whenever a ResourceSlice of `node` and `driver` changes or goes
/// away (including our own writes: a sync after them finds nothing to do).
pub fn watch_slices(client: kube::Client, node: &str, driver: &str) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(1);
    let api: Api<ResourceSlice> = Api::all(client);
    let cfg = watcher::Config::default().fields(&field_selector(node, driver));
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
