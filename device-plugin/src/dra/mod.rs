//! DRA mode (`kube-rdma-device-plugin dra`): the same pools, published as
//! `resource.k8s.io/v1` ResourceSlices and prepared for pods through the
//! kubelet's DRA plugin API, instead of served as extended resources.
//!
//! Data flow: **sysfs → [`nic::discover`] → [`crate::pools::plan`] (the device
//! plugin's config, selectors and health) → [`devices`] (one DRA device per
//! VF) → [`slices`] (ResourceSlice objects, pure) → [`publish`] (server-side
//! apply)**, with `roceReady` from the node's `RdmaNodeState` ([`nodestate`]).
//! The kubelet side: [`registration`] (plugin watcher socket), [`service`]
//! (`DRAPlugin` v1 and v1beta1 → [`prepare`], [`cdi`], [`checkpoint`]),
//! [`health`] (`DRAResourceHealth`); both sockets serve through
//! [`authority`], which lets a request whose `:authority` is a socket path
//! through h2. What was prepared is written in the format of
//! [`nic::prepared`], which the CNI reads to find a pod's VF by `K8S_POD_UID`
//! and where it records what it configured; [`status`] turns those records
//! into `ResourceClaim.status.devices` network data.
//! [`withhold`] keeps out of the slices every VF already in a pod that DRA
//! did not prepare (the kubelet's PodResources and the host are witnesses).
//! [`driver`] ties it together.

pub mod authority;
pub mod cdi;
pub mod checkpoint;
pub mod claimconfig;
pub mod devices;
pub mod driver;
pub mod health;
pub mod metrics;
pub mod nodestate;
pub mod prepare;
pub mod publish;
pub mod registration;
pub mod request;
pub mod service;
pub mod slices;
pub mod status;
pub mod withheld;
pub mod withhold;

/// The kubelet APIs of a DRA plugin, generated from `proto/` (see each file
/// for the upstream path it follows).
#[allow(missing_docs, clippy::all)]
pub mod api {
    /// `pluginregistration` (kubelet plugin watcher).
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
    /// `k8s.io.kubelet.pkg.apis.dra.v1`.
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1` (kubelets 1.32 and 1.33).
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
    /// `v1alpha1` DRA resource health (Kubernetes 1.34, gate ResourceHealthStatus).
    pub mod health {
        tonic::include_proto!("v1alpha1");
    }
}

/// The DRA driver name: a DNS subdomain, what DeviceClasses select with
/// `device.driver == "rdma.kuberdma.io"`.
pub const DRIVER: &str = "rdma.kuberdma.io";

/// Plugin type in `PluginInfo.type` for DRA drivers.
pub const PLUGIN_TYPE: &str = "DRAPlugin";

/// Services we serve, as the kubelet names them in `supported_versions`
/// (`<short package>.<service>`, newest first).
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// The kubelet's plugin watcher directory.
pub const DEFAULT_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";

/// The kubelet's directory for plugin sockets and state.
pub const DEFAULT_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";

/// Field manager of our server-side applies (slices and claim status).
pub const FIELD_MANAGER: &str = DRIVER;

/// Registration socket name in the registry dir (`<driver>-reg.sock`).
pub fn registration_socket_name() -> String {
    format!("{DRIVER}-reg.sock")
}

/// The DRA socket name inside `<plugins dir>/<driver>/`.
pub const DRA_SOCKET: &str = "dra.sock";

/// How long one API request of the driver may take. The kubelet gives a
/// whole NodePrepareResources call 45 s (`defaultClientCallTimeout` in
/// pkg/kubelet/cm/dra/plugin/dra_plugin.go); a prepare makes at most two
/// rounds of requests (the claim, then its devices' stale holders, read
/// together), so it answers within 2 × this even when the API server hangs.
pub const API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Server-side timeout of our watches (`timeoutSeconds`): the server ends
/// each watch after this and the watcher resumes from its resourceVersion.
pub const WATCH_TIMEOUT_SECS: u32 = 60;

/// The client's read timeout, a backstop for requests the driver does not
/// await itself (the watchers' lists and watch starts, which kube's watcher
/// leaves unbounded): longer than a quiet watch lasts
/// ([`WATCH_TIMEOUT_SECS`] plus kube-runtime's 5 s idle margin).
pub const CLIENT_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(75);

/// An API request that failed or did not answer in [`API_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API server answered with an error, or the connection failed.
    #[error("cannot {op}")]
    Api {
        /// What was asked (`list ResourceSlices`).
        op: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// No answer in time.
    #[error("cannot {op}: the API server did not answer in {after:?}")]
    Timeout {
        /// What was asked.
        op: &'static str,
        /// How long we waited.
        after: std::time::Duration,
    },
}

/// `fut`, bounded by [`API_TIMEOUT`].
pub async fn bounded<T>(
    op: &'static str,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(API_TIMEOUT, fut).await {
        Ok(r) => r.map_err(|source| ApiError::Api { op, source }),
        Err(_) => Err(ApiError::Timeout { op, after: API_TIMEOUT }),
    }
}
