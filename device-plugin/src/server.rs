//! tonic glue: one `DevicePlugin` service per pool on its own unix socket.
//!
//! The pool lives in a `tokio::sync::watch` channel owned by the daemon:
//! ListAndWatch sends the current full list first and a new full list on
//! every change the kubelet can see (IDs, health, topology); Allocate reads the
//! current value, so a rescan is visible to the next call without a restart. A client that drops its stream only ends
//! that stream; the server keeps serving.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
use crate::devinfo;
use crate::metrics::Metrics;
use crate::pools::Pool;

/// What one pool's service needs.
#[derive(Clone)]
pub struct PoolService {
    pool: watch::Receiver<Arc<Pool>>,
    devinfo_dir: PathBuf,
    metrics: Arc<Metrics>,
}

impl PoolService {
    /// A service reading its pool from `pool`.
    pub fn new(pool: watch::Receiver<Arc<Pool>>, devinfo_dir: PathBuf, metrics: Arc<Metrics>) -> Self {
        Self { pool, devinfo_dir, metrics }
    }
}

/// How long Allocate waits for the daemon's first full walk (GID tables) to
/// land. It follows the first, GID-less walk within a fraction of a second;
/// past this bound Allocate answers without GID variables rather than fail.
const GID_TABLES_WAIT: Duration = Duration::from_secs(5);

impl PoolService {
    /// The current pool, once its GID indexes are known (see [`GID_TABLES_WAIT`]).
    async fn pool_with_gid_tables(&self) -> Arc<Pool> {
        let pool = self.pool.borrow().clone();
        if pool.gid_tables {
            return pool;
        }
        let mut rx = self.pool.clone();
        let waited = tokio::time::timeout(GID_TABLES_WAIT, async {
            rx.wait_for(|p| p.gid_tables).await.ok().map(|p| p.clone())
        })
        .await;
        match waited {
            Ok(Some(p)) => p,
            _ => {
                tracing::warn!(pool = %pool.resource_name(), "GID tables not read yet: answering without GID indexes");
                self.pool.borrow().clone()
            }
        }
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
        // A pool change the kubelet cannot see (GID indexes, char devices) sends nothing.
        let mut last: Option<ListAndWatchResponse> = None;
        let stream = WatchStream::new(self.pool.clone()).filter_map(move |p| {
            let r = list_response(&p);
            let new = last.as_ref() != Some(&r);
            if new {
                last = Some(r.clone());
            }
            std::future::ready(new.then_some(Ok(r)))
        });
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
        let pool = self.pool_with_gid_tables().await;
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
            let devs = allocate::resolve(&pool, &c.devices_ids).unwrap_or_default();
            if let Err(e) = devinfo::write_devinfo(&self.devinfo_dir, &pool, &devs) {
                tracing::error!(pool = %pool.resource_name(), error = %e, "cannot write device-info file");
                return Err(Status::internal(format!("device-info file: {e}")));
            }
            all_ids.extend(c.devices_ids);
            container_responses.push(resp);
        }
        tracing::info!(pool = %pool.resource_name(), devices = ?all_ids, "allocated");
        self.metrics.allocated(&pool.resource_name(), &all_ids, start.elapsed());
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
