//! `DRAResourceHealth.NodeWatchResources`: the full device health list at
//! once, again on every health change, and again every [`REFRESH`] — the
//! kubelet stamps each report with its arrival time and turns a device it
//! has not heard of for 30 s into Unknown (`DefaultHealthTimeout` in
//! pkg/kubelet/cm/dra/healthinfo.go). Health comes from the device plugin's
//! rules (PF carrier, RDMA port and char devices, driver bound), through the
//! same view the slices are built from.

use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::api::health::dra_resource_health_server::DraResourceHealth;
use super::api::health::{
    DeviceHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesRequest, NodeWatchResourcesResponse,
};
use super::devices::{SharedView, View};

/// Re-send the unchanged list this often (well inside the kubelet's 30 s).
pub const REFRESH: Duration = Duration::from_secs(10);

/// The health list of `view` for pool `pool`, stamped `now` (Unix seconds).
pub fn report(view: &View, pool: &str, now: i64) -> NodeWatchResourcesResponse {
    NodeWatchResourcesResponse {
        devices: view
            .devices
            .iter()
            .map(|d| DeviceHealth {
                device: Some(DeviceIdentifier { pool_name: pool.into(), device_name: d.name.clone() }),
                health: if d.health.is_healthy() { HealthStatus::Healthy } else { HealthStatus::Unhealthy }
                    as i32,
                last_updated_time: now,
            })
            .collect(),
    }
}

fn states(view: &View) -> Vec<(String, bool)> {
    view.devices.iter().map(|d| (d.name.clone(), d.health.is_healthy())).collect()
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// The health service over the driver's view.
#[derive(Clone)]
pub struct HealthService {
    pool: String,
    view: watch::Receiver<SharedView>,
}

impl HealthService {
    /// Reports the devices of `view` as pool `pool`.
    pub fn new(pool: &str, view: watch::Receiver<SharedView>) -> Self {
        HealthService { pool: pool.into(), view }
    }
}

type HealthStream = Pin<Box<dyn Stream<Item = Result<NodeWatchResourcesResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = HealthStream;

    async fn node_watch_resources(
        &self,
        _: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let mut rx = self.view.clone();
        let pool = self.pool.clone();
        let stream = async_stream(move |tx| async move {
            let mut last: Option<Vec<(String, bool)>> = None;
            loop {
                let view = rx.borrow_and_update().clone();
                let now = states(&view);
                if last.as_ref() != Some(&now) {
                    if tx.send(Ok(report(&view, &pool, unix_now()))).await.is_err() {
                        return;
                    }
                    last = Some(now);
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(REFRESH) => last = None,
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(stream))
    }
}

/// A stream fed by a task through a small channel; the task ends when the
/// client goes away.
fn async_stream<F, Fut>(f: F) -> HealthStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<NodeWatchResourcesResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
