//! The kubelet's PodResources API (`v1`, `List`): which device IDs the kubelet
//! has assigned to containers right now. It makes `kuberdma_pool_allocated`
//! "in use now", is the second witness that a VF whose netdev and RDMA device
//! left the host is in use, and tells preferred allocation which devices were
//! freed. The socket is `/var/lib/kubelet/pod-resources/kubelet.sock`; the
//! daemon works without it (those three fall back to what the host shows).
//! DRA mode reads it too (`dra::withhold`): a VF a device plugin
//! resource holds is not offered to claims.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api_podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::api_podresources::{ListPodResourcesRequest, ListPodResourcesResponse};
use crate::inuse::Allocations;
use crate::kubelet::connect_unix;

/// Where the kubelet serves PodResources.
pub const DEFAULT_SOCKET: &str = crate::POD_RESOURCES_SOCKET;

/// A `List` call that gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// The socket does not exist (kubelet down, or the directory not mounted).
    #[error("{path} does not exist")]
    Absent {
        /// Socket path.
        path: PathBuf,
    },
    /// Could not connect.
    #[error("cannot connect to {path}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The kubelet refused or the call failed.
    #[error("PodResources List at {path} failed: {status}")]
    List {
        /// Socket path.
        path: PathBuf,
        /// gRPC status.
        status: tonic::Status,
    },
    /// No answer in time.
    #[error("PodResources List at {path} timed out")]
    Timeout {
        /// Socket path.
        path: PathBuf,
    },
}

/// What the kubelet's answer says, by resource (pure).
pub fn allocations(resp: &ListPodResourcesResponse) -> Allocations {
    let mut a = Allocations::default();
    let devices = resp.pod_resources.iter().flat_map(|p| &p.containers).flat_map(|c| &c.devices);
    for d in devices {
        a.by_resource.entry(d.resource_name.clone()).or_default().extend(d.device_ids.iter().cloned());
    }
    a
}

/// Calls `List` on `socket` (sending `:authority localhost`, as kubelets expect).
pub async fn list(socket: &Path, timeout: Duration) -> Result<Allocations, PodResourcesError> {
    list_pods(socket, timeout).await.map(|resp| allocations(&resp))
}

/// The kubelet's whole `List` answer (DRA mode also wants the pods' names).
pub async fn list_pods(
    socket: &Path,
    timeout: Duration,
) -> Result<ListPodResourcesResponse, PodResourcesError> {
    let path = socket.to_path_buf();
    if !socket.exists() {
        return Err(PodResourcesError::Absent { path });
    }
    let call = async {
        let ch = connect_unix(socket)
            .await
            .map_err(|source| PodResourcesError::Connect { path: path.clone(), source })?;
        let resp = PodResourcesListerClient::new(ch)
            .list(ListPodResourcesRequest {})
            .await
            .map_err(|status| PodResourcesError::List { path: path.clone(), status })?;
        Ok(resp.into_inner())
    };
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| PodResourcesError::Timeout { path: path.clone() })?
}
