//! `DRAPlugin` (v1, and v1beta1 for kubelets 1.32–1.33) on the driver's
//! socket: NodePrepareResources / NodeUnprepareResources.
//!
//! Every claim of a request is answered, each on its own: one claim's failure
//! is its entry's `error`, never the call's. Claims are read from the API in
//! parallel; the decision and the file writes for one claim happen under the
//! checkpoint lock, so two claims can never be given the same VF. Prepare is
//! idempotent (a prepared claim answers from the checkpoint, writing its CDI
//! spec again if it went missing); unprepare of an unknown claim succeeds.
//! Order of writes: CDI spec, then checkpoint record; a failed record write
//! removes the spec again, so a failed prepare leaves the node as it was.
//! A prepare makes at most two rounds of API requests, each bounded by
//! [`super::API_TIMEOUT`]: it answers well inside the kubelet's 45 s even
//! when the API server accepts connections and never answers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tokio::sync::{mpsc, watch, Mutex};
use tonic::{Request, Response, Status};

use super::api::{v1, v1beta1};
use super::cdi;
use super::checkpoint::Checkpoint;
use super::devices::SharedView;
use super::metrics::DraMetrics;
use super::prepare::{self, ClaimRef, PrepareError};

/// One prepared device as the kubelet wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceOut {
    /// The claim's top-level request (a subrequest `req/sub` is answered as
    /// `req`: [`prepare::top_level_request`]).
    pub request: String,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// CDI device IDs.
    pub cdi_ids: Vec<String>,
}

/// What [`Claims::new`] is made of.
pub struct ClaimsParts {
    /// The driver name.
    pub driver: String,
    /// This node's pool name.
    pub pool: String,
    /// Where CDI specs go.
    pub cdi_dir: PathBuf,
    /// For reading claims.
    pub client: kube::Client,
    /// The node's devices.
    pub view: watch::Receiver<SharedView>,
    /// What is prepared.
    pub checkpoint: Checkpoint,
    /// Claims unprepared (their status network data goes).
    pub changed: mpsc::UnboundedSender<String>,
    pub metrics: Arc<DraMetrics>,
}

/// What the service needs; shared by both API versions.
pub struct Claims {
    driver: String,
    pool: String,
    cdi_dir: PathBuf,
    client: kube::Client,
    view: watch::Receiver<SharedView>,
    checkpoint: Mutex<Checkpoint>,
    /// Claims whose status network data must be looked at again (unprepared).
    changed: mpsc::UnboundedSender<String>,
    metrics: Arc<DraMetrics>,
}

impl Claims {
    /// The service over `parts`.
    pub fn new(parts: ClaimsParts) -> Arc<Self> {
        let ClaimsParts { driver, pool, cdi_dir, client, view, checkpoint, changed, metrics } = parts;
        metrics.set_prepared(prepared_counts(&checkpoint, &view.borrow()));
        Arc::new(Claims {
            driver,
            pool,
            cdi_dir,
            client,
            view,
            checkpoint: Mutex::new(checkpoint),
            changed,
            metrics,
        })
    }

    fn count_prepared(&self, cp: &Checkpoint) {
        self.metrics.set_prepared(prepared_counts(cp, &self.view.borrow()));
    }

    /// The devices prepared now, by name, as recorded when prepared.
    pub async fn prepared_devices(&self) -> super::devices::PreparedDevices {
        self.checkpoint.lock().await.devices()
    }

    /// Writes the CDI spec of every prepared claim that has none (after a
    /// reboot emptied `/var/run/cdi`, say); returns how many were written.
    pub async fn restore_cdi_specs(&self) -> usize {
        let cp = self.checkpoint.lock().await;
        let view = self.view.borrow().clone();
        let mut n = 0;
        for rec in cp.claims() {
            if cdi::spec_path(&self.cdi_dir, &rec.uid).exists() {
                continue;
            }
            match cdi::spec_for(rec, &view) {
                Ok(Some(spec)) => match cdi::write(&self.cdi_dir, &rec.uid, &spec) {
                    Ok(_) => n += 1,
                    Err(e) => tracing::warn!(claim = %rec.uid, error = %e, "cannot write CDI spec again"),
                },
                Ok(None) => {}
                Err(why) => tracing::warn!(claim = %rec.uid, %why, "cannot write CDI spec again"),
            }
        }
        n
    }

    fn outputs(rec: &nic::prepared::PreparedClaim) -> Vec<DeviceOut> {
        rec.devices
            .iter()
            .map(|d| DeviceOut {
                request: prepare::top_level_request(&d.request).to_string(),
                pool: d.pool.clone(),
                device: d.device.clone(),
                cdi_ids: d.cdi_ids.clone(),
            })
            .collect()
    }

    /// Reads a claim, bounded by [`super::API_TIMEOUT`] (the kubelet asks
    /// again when a claim fails).
    async fn read(&self, want: &ClaimRef) -> Result<ResourceClaim, PrepareError> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &want.namespace);
        match super::bounded("read the ResourceClaim", api.get_opt(&want.name)).await {
            Err(e) => Err(PrepareError::Read { claim: want.clone(), why: nic::error_chain(&e) }),
            Ok(None) => Err(PrepareError::NotFound { claim: want.clone() }),
            Ok(Some(c)) => Ok(c),
        }
    }

    /// The answer for one claim from the checkpoint, if it is prepared
    /// (its CDI spec written again when missing).
    fn cached(&self, cp: &Checkpoint, want: &ClaimRef) -> Option<Result<Vec<DeviceOut>, String>> {
        let rec = cp.get(&want.uid)?;
        if !rec.devices.is_empty() && !cdi::spec_path(&self.cdi_dir, &rec.uid).exists() {
            let view = self.view.borrow().clone();
            let written = cdi::spec_for(rec, &view)
                .map_err(|why| {
                    format!("{want}: prepared before, but its CDI spec cannot be written again: {why}")
                })
                .and_then(|spec| match spec {
                    Some(s) => cdi::write(&self.cdi_dir, &rec.uid, &s)
                        .map(|_| ())
                        .map_err(|e| format!("{want}: {e:#}")),
                    None => Ok(()),
                });
            if let Err(e) = written {
                return Some(Err(e));
            }
        }
        Some(Ok(Self::outputs(rec)))
    }

    /// Prepares one claim: its devices, or an error message for the kubelet.
    pub async fn prepare(&self, want: ClaimRef) -> Result<Vec<DeviceOut>, String> {
        let start = std::time::Instant::now();
        let res = self.prepare_one(want).await;
        self.metrics.prepare(start.elapsed(), res.is_ok());
        res
    }

    async fn prepare_one(&self, want: ClaimRef) -> Result<Vec<DeviceOut>, String> {
        if let Err(e) = nic::prepared::claim_path(self.checkpoint.lock().await.dir(), &want.uid) {
            return Err(format!("{want}: {e}"));
        }
        if let Some(r) = self.cached(&*self.checkpoint.lock().await, &want) {
            return r;
        }
        let claim = self.read(&want).await.map_err(|e| e.to_string())?;
        self.forget_stale_holders(&want, &claim).await;
        let mut cp = self.checkpoint.lock().await;
        // Prepared meanwhile by a concurrent call for the same claim.
        if let Some(r) = self.cached(&cp, &want) {
            return r;
        }
        let view = self.view.borrow().clone();
        let planned = prepare::plan(&want, &claim, &self.driver, &self.pool, &view, |d| cp.owner(d))
            .map_err(|e| e.to_string())?;
        if let Some(spec) = &planned.cdi_spec {
            cdi::write(&self.cdi_dir, &want.uid, spec).map_err(|e| format!("{want}: {e:#}"))?;
        }
        let out = Self::outputs(&planned.record);
        if let Err(e) = cp.insert(planned.record) {
            if let Err(e2) = cdi::remove(&self.cdi_dir, &want.uid) {
                tracing::warn!(claim = %want, error = %e2, "cannot remove the CDI spec of a failed prepare");
            }
            return Err(format!("{want}: cannot record it: {e:#}"));
        }
        self.count_prepared(&cp);
        tracing::info!(claim = %want, devices = ?out.iter().map(|d| d.device.as_str()).collect::<Vec<_>>(), "prepared");
        Ok(out)
    }

    /// A device this claim was allocated may be recorded for another claim
    /// that no longer holds it: deleted (or recreated) while the kubelet was
    /// not there to unprepare it, e.g. across a reboot. The API decides: a
    /// holder that is gone, has another UID, or is no longer allocated that
    /// device is unprepared here, so the new claim can have its VF. A holder
    /// the API cannot be asked about stays (the new claim then fails and the
    /// kubelet asks again).
    async fn forget_stale_holders(&self, want: &ClaimRef, claim: &ResourceClaim) {
        let ours: Vec<String> = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.driver == self.driver && r.pool == self.pool)
            .map(|r| r.device.clone())
            .collect();
        let holders: Vec<ClaimRef> = {
            let cp = self.checkpoint.lock().await;
            let mut v: Vec<ClaimRef> = ours
                .iter()
                .filter_map(|d| cp.owner(d).filter(|o| *o != want.uid))
                .filter_map(|uid| cp.get(uid))
                .map(|c| ClaimRef {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    uid: c.uid.clone(),
                })
                .collect();
            v.sort_by(|a, b| a.uid.cmp(&b.uid));
            v.dedup_by(|a, b| a.uid == b.uid);
            v
        };
        // Read together: one round of requests, however many holders.
        let reads = futures::future::join_all(holders.iter().map(|h| self.read(h))).await;
        for (h, read) in holders.into_iter().zip(reads) {
            let still = match read {
                Ok(c) if c.metadata.uid.as_deref() == Some(h.uid.as_str()) => {
                    let held = c
                        .status
                        .as_ref()
                        .and_then(|s| s.allocation.as_ref())
                        .and_then(|a| a.devices.as_ref())
                        .and_then(|d| d.results.as_ref())
                        .into_iter()
                        .flatten()
                        .any(|r| r.driver == self.driver && r.pool == self.pool && ours.contains(&r.device));
                    if held {
                        continue;
                    }
                    "no longer allocated the device"
                }
                Ok(_) => "recreated with another UID",
                Err(PrepareError::NotFound { .. }) => "deleted",
                Err(e) => {
                    tracing::warn!(claim = %h, error = %e, "cannot tell whether a prepared claim still exists");
                    continue;
                }
            };
            tracing::warn!(claim = %h, why = still, for_claim = %want, "unpreparing a prepared claim that no longer holds its device");
            if let Err(e) = self.unprepare(h.clone()).await {
                tracing::warn!(claim = %h, error = %e, "cannot unprepare a stale claim");
            }
        }
    }

    /// Unprepares one claim (unknown: nothing to do).
    pub async fn unprepare(&self, want: ClaimRef) -> Result<(), String> {
        if let Err(e) = nic::prepared::claim_path(self.checkpoint.lock().await.dir(), &want.uid) {
            return Err(format!("{want}: {e}"));
        }
        let mut cp = self.checkpoint.lock().await;
        cdi::remove(&self.cdi_dir, &want.uid).map_err(|e| format!("{want}: {e:#}"))?;
        let old = cp.remove(&want.uid).map_err(|e| format!("{want}: {e:#}"))?;
        if old.is_some() {
            self.count_prepared(&cp);
            tracing::info!(claim = %want, "unprepared");
            let _ = self.changed.send(want.uid.clone());
        }
        Ok(())
    }

    async fn prepare_all(
        self: &Arc<Self>,
        claims: Vec<ClaimRef>,
    ) -> HashMap<String, Result<Vec<DeviceOut>, String>> {
        let calls = claims.into_iter().map(|c| {
            let me = self.clone();
            async move { (c.uid.clone(), me.prepare(c).await) }
        });
        futures::future::join_all(calls).await.into_iter().collect()
    }

    async fn unprepare_all(self: &Arc<Self>, claims: Vec<ClaimRef>) -> HashMap<String, Result<(), String>> {
        let mut out = HashMap::new();
        for c in claims {
            let uid = c.uid.clone();
            out.insert(uid, self.unprepare(c).await);
        }
        out
    }
}

/// Devices prepared now, per pool resource (metrics).
fn prepared_counts(
    cp: &Checkpoint,
    view: &super::devices::View,
) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for d in cp.claims().flat_map(|c| c.devices.iter()) {
        if let Some(dev) = view.device(&d.device) {
            *counts.entry(dev.resource.clone()).or_insert(0) += 1;
        }
    }
    counts
}

/// The gRPC service, one value serving both versions.
#[derive(Clone)]
pub struct DraService(pub Arc<Claims>);

/// `DRAPlugin` for one API version: v1 and v1beta1 carry the same messages in
/// different packages (distinct generated types), so one body serves both.
macro_rules! dra_plugin {
    ($v:ident) => {
        #[tonic::async_trait]
        impl $v::dra_plugin_server::DraPlugin for DraService {
            async fn node_prepare_resources(
                &self,
                req: Request<$v::NodePrepareResourcesRequest>,
            ) -> Result<Response<$v::NodePrepareResourcesResponse>, Status> {
                let refs = req.into_inner().claims.into_iter();
                let refs =
                    refs.map(|c| ClaimRef { namespace: c.namespace, name: c.name, uid: c.uid }).collect();
                let claims = self
                    .0
                    .prepare_all(refs)
                    .await
                    .into_iter()
                    .map(|(uid, r)| {
                        let entry = match r {
                            Ok(devs) => $v::NodePrepareResourceResponse {
                                devices: devs
                                    .into_iter()
                                    .map(|d| $v::Device {
                                        request_names: vec![d.request],
                                        pool_name: d.pool,
                                        device_name: d.device,
                                        cdi_device_ids: d.cdi_ids,
                                    })
                                    .collect(),
                                error: String::new(),
                            },
                            Err(e) => $v::NodePrepareResourceResponse { devices: vec![], error: e },
                        };
                        (uid, entry)
                    })
                    .collect();
                Ok(Response::new($v::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<$v::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$v::NodeUnprepareResourcesResponse>, Status> {
                let refs = req.into_inner().claims.into_iter();
                let refs =
                    refs.map(|c| ClaimRef { namespace: c.namespace, name: c.name, uid: c.uid }).collect();
                let claims = self
                    .0
                    .unprepare_all(refs)
                    .await
                    .into_iter()
                    .map(|(uid, r)| {
                        (uid, $v::NodeUnprepareResourceResponse { error: r.err().unwrap_or_default() })
                    })
                    .collect();
                Ok(Response::new($v::NodeUnprepareResourcesResponse { claims }))
            }
        }
    };
}

dra_plugin!(v1);
dra_plugin!(v1beta1);
