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

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// What one pool's service needs.
#[derive(Clone)]
pub struct PoolService {
    pool: watch::Receiver<Arc<Pool>>,
    closing: watch::Receiver<bool>,
    streams: Arc<AtomicUsize>,
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
        Self { pool, closing, streams: Arc::new(AtomicUsize::new(0)), devinfo_dir, metrics }
    }

    /// Open ListAndWatch streams right now.
    pub fn streams(&self) -> Arc<AtomicUsize> {
        self.streams.clone()
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
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(n: Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Open(n)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
        let container_responses = req
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                ContainerPreferredAllocationResponse {
                    device_i_ds: allocate::preferred(
                        &pool,
                        &c.available_device_i_ds,
                        &c.must_include_device_i_ds,
                        size,
                    ),
                }
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, req: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let start = Instant::now();
        let pool = self.pool.borrow().clone();
        let mut container_responses = Vec::new();
        let mut all_ids = Vec::new();
        for c in req.into_inner().container_requests {
            let resp = match allocate::container_response(&pool, &c.devices_ids) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(pool = %pool.resource_name(), error = %e, "Allocate refused");
                    self.metrics.allocate_failed(&pool.resource_name());
                    return Err(match e {
                        allocate::AllocError::Unhealthy { .. } => Status::failed_precondition(e.to_string()),
                        _ => Status::invalid_argument(e.to_string()),
                    });
                }
            };
            if pool.config.mode == Mode::Vf || pool.config.mode == Mode::Shared {
                let devs = allocate::resolve(&pool, &c.devices_ids).unwrap_or_default();
                if let Err(e) = devinfo::write_devinfo(&self.devinfo_dir, &pool, &devs) {
                    tracing::error!(pool = %pool.resource_name(), error = %e, "cannot write device-info file");
                    return Err(Status::internal(format!("device-info file: {e:#}")));
                }
            }
            all_ids.extend(c.devices_ids);
            container_responses.push(resp);
        }
        tracing::info!(pool = %pool.resource_name(), devices = ?all_ids, "allocated");
        self.metrics.allocated(&pool.resource_name(), start.elapsed());
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
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
