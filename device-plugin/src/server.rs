//! tonic glue: one `DevicePlugin` service per pool on its own unix socket.
//!
//! The pool lives in a `tokio::sync::watch` channel owned by the daemon:
//! ListAndWatch sends the current full list first and a new full list on
//! every change the kubelet can see (IDs, health, topology); Allocate reads the
//! current value, so a rescan is visible to the next call without a restart.
//! A client that drops its stream only ends that stream; the server keeps
//! serving. When the pool is stopped, its open streams end at once (the
//! server's graceful shutdown waits for open streams, and a kubelet never ends
//! its ListAndWatch), so stopping takes milliseconds, not a timeout.
//!
//! Every request is checked against the pool before anything is computed
//! ([`allocate::check_ids`], [`allocate::check_preferred`],
//! [`allocate::resolve`]); what no kubelet sends is refused with
//! `InvalidArgument` naming the field and values, and changes nothing. The
//! open and ever-opened ListAndWatch streams are published ([`Streams`]) so
//! registration can tell whether the kubelet really watches the pool.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::{UnixListenerStream, WatchStream};
use tonic::{Request, Response, Status};

use crate::allocate;
use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device as ApiDevice,
    DevicePluginOptions, Empty, ListAndWatchResponse, NumaNode, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse, TopologyInfo,
};
use crate::config::Mode;
use crate::devinfo;
use crate::metrics::Metrics;
use crate::pools::Pool;
use crate::serving::Streams;

/// What one pool's service needs.
#[derive(Clone)]
pub struct PoolService {
    pool: watch::Receiver<Arc<Pool>>,
    closing: watch::Receiver<bool>,
    streams: Arc<watch::Sender<Streams>>,
    devinfo_dir: PathBuf,
    metrics: Arc<Metrics>,
}

impl PoolService {
    /// A service reading its pool from `pool`; its ListAndWatch streams end
    /// when `closing` turns true.
    pub fn new(
        pool: watch::Receiver<Arc<Pool>>,
        closing: watch::Receiver<bool>,
        devinfo_dir: PathBuf,
        metrics: Arc<Metrics>,
    ) -> Self {
        let streams = Arc::new(watch::Sender::new(Streams::default()));
        Self { pool, closing, streams, devinfo_dir, metrics }
    }

    /// The service's ListAndWatch streams, as they change.
    pub fn streams(&self) -> watch::Receiver<Streams> {
        self.streams.subscribe()
    }
}

/// The ListAndWatch message for a pool.
pub fn list_response(pool: &Pool) -> ListAndWatchResponse {
    let devices = pool
        .devices
        .iter()
        .map(|d| ApiDevice {
            id: d.id.clone(),
            health: d.health.as_kubelet().to_string(),
            topology: match (d.numa, pool.config.exclude_topology) {
                (Some(n), false) => Some(TopologyInfo { nodes: vec![NumaNode { id: n as i64 }] }),
                _ => None,
            },
        })
        .collect();
    ListAndWatchResponse { devices }
}

type ListStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send + 'static>>;

/// Counts a stream while it lives.
struct Open(Arc<watch::Sender<Streams>>);

impl Open {
    fn new(n: Arc<watch::Sender<Streams>>) -> Self {
        n.send_modify(|s| {
            s.open += 1;
            s.opened += 1;
        });
        Open(n)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.send_modify(|s| s.open -= 1);
    }
}

/// `InvalidArgument` (or `FailedPrecondition` for Unhealthy devices) for a
/// refused request, the container request's index first.
fn refused(at: Option<usize>, e: &allocate::AllocError) -> Status {
    let msg = match at {
        Some(i) => format!("container_requests[{i}]: {e}"),
        None => e.to_string(),
    };
    match e {
        allocate::AllocError::Unhealthy { .. } => Status::failed_precondition(msg),
        _ => Status::invalid_argument(msg),
    }
}

fn no_containers(pool: &Pool) -> allocate::AllocError {
    allocate::AllocError::Empty { pool: pool.resource_name(), field: "container_requests" }
}

#[tonic::async_trait]
impl DevicePlugin for PoolService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = ListStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<Self::ListAndWatchStream>, Status> {
        // A pool change the kubelet cannot see (char devices, in-use state) sends nothing.
        let mut last: Option<ListAndWatchResponse> = None;
        let open = Open::new(self.streams.clone());
        let mut closing = self.closing.clone();
        let until_closing = async move {
            let _ = closing.wait_for(|c| *c).await;
        };
        let stream = WatchStream::new(self.pool.clone())
            .filter_map(move |p| {
                let _ = &open;
                let r = list_response(&p);
                let new = last.as_ref() != Some(&r);
                if new {
                    last = Some(r.clone());
                }
                std::future::ready(new.then_some(Ok(r)))
            })
            .take_until(until_closing);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let pool = self.pool.borrow().clone();
        let req = req.into_inner();
        if req.container_requests.is_empty() {
            return Err(refused(None, &no_containers(&pool)));
        }
        let mut container_responses = Vec::with_capacity(req.container_requests.len());
        for (i, c) in req.container_requests.iter().enumerate() {
            let size = allocate::check_preferred(
                &pool,
                &c.available_device_i_ds,
                &c.must_include_device_i_ds,
                c.allocation_size,
            )
            .map_err(|e| {
                tracing::warn!(pool = %pool.resource_name(), error = %e, "GetPreferredAllocation refused");
                refused(Some(i), &e)
            })?;
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: allocate::preferred(
                    &pool,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    size,
                ),
            });
        }
        Ok(Response::new(PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let start = Instant::now();
        let pool = self.pool.borrow().clone();
        let req = req.into_inner();
        let refuse = |at: Option<usize>, e: allocate::AllocError| {
            tracing::warn!(pool = %pool.resource_name(), error = %e, "Allocate refused");
            self.metrics.allocate_failed(&pool.resource_name());
            refused(at, &e)
        };
        if req.container_requests.is_empty() {
            return Err(refuse(None, no_containers(&pool)));
        }
        // Everything is checked before any device-info file is written: a
        // refused request changes nothing. A device is never given to two
        // containers of one request.
        let mut taken: HashSet<&str> = HashSet::new();
        let mut resolved = Vec::with_capacity(req.container_requests.len());
        for (i, c) in req.container_requests.iter().enumerate() {
            let devs = allocate::resolve(&pool, &c.devices_ids).map_err(|e| refuse(Some(i), e))?;
            let twice: Vec<String> =
                c.devices_ids.iter().filter(|id| taken.contains(id.as_str())).cloned().collect();
            if !twice.is_empty() {
                let e = allocate::AllocError::Duplicate {
                    pool: pool.resource_name(),
                    field: "devices_ids (also in an earlier container request)",
                    ids: twice,
                };
                return Err(refuse(Some(i), e));
            }
            taken.extend(c.devices_ids.iter().map(String::as_str));
            let resp = allocate::container_response(&pool, &c.devices_ids).map_err(|e| refuse(Some(i), e))?;
            resolved.push((devs, resp));
        }
        let mut container_responses = Vec::with_capacity(resolved.len());
        for (devs, resp) in resolved {
            if pool.config.mode == Mode::Vf || pool.config.mode == Mode::Shared {
                if let Err(e) = devinfo::write_devinfo(&self.devinfo_dir, &pool, &devs) {
                    tracing::error!(pool = %pool.resource_name(), error = %e, "cannot write device-info file");
                    return Err(Status::internal(format!("device-info file: {e:#}")));
                }
            }
            container_responses.push(resp);
        }
        let all: Vec<&str> =
            req.container_requests.iter().flat_map(|c| &c.devices_ids).map(String::as_str).collect();
        tracing::info!(pool = %pool.resource_name(), devices = ?all, "allocated");
        self.metrics.allocated(&pool.resource_name(), start.elapsed());
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    /// Never asked for (`pre_start_required: false`), but a caller still gets
    /// its IDs checked.
    async fn pre_start_container(
        &self,
        req: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        let pool = self.pool.borrow().clone();
        let ids = req.into_inner().devices_ids;
        if ids.is_empty() {
            let e = allocate::AllocError::Empty { pool: pool.resource_name(), field: "devices_ids" };
            return Err(refused(None, &e));
        }
        allocate::check_ids(&pool, "devices_ids", &ids).map_err(|e| refused(None, &e))?;
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// Binds `socket` (removing a stale file first). Binding before registering
/// means the kubelet always finds the socket served when it dials back.
pub fn bind(socket: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    UnixListener::bind(socket)
}

/// Serves `svc` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    svc: PoolService,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(DevicePluginServer::new(svc))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await
}
