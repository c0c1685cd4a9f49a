//! `kube-rdma-device-plugin`: serves SR-IOV VFs (and, in shared mode, whole
//! HCAs) with their RDMA devices to the kubelet as pools.
//!
//! Data flow: **sysfs → [`nic::discover`] → [`nic::Inventory`] →
//! [`pools::plan`] (config × inventory → pools and a decision per device) →
//! [`server`] (kubelet v1beta1 gRPC, one unix socket per pool) →
//! [`allocate`] (pure: DeviceSpecs, env, CDI names; preferred allocation)**.
//! [`daemon`] ties it together: registration and re-registration
//! ([`kubelet`]), rescans on netlink link events and on a timer, config
//! reloads, device-info and CDI files ([`devinfo`]), metrics ([`metrics`]).
//!
//! [`dra`] is the same inventory and pools in DRA mode (`kube-rdma-device-plugin dra`).
//!
//! ```no_run
//! use kube_rdma_device_plugin::{config::Config, pools};
//! let inv = nic::discover(&nic::Roots::from_env());
//! let plan = pools::plan(&inv, &Config::default_pools());
//! for pool in &plan.pools {
//!     println!("{}: {} devices", pool.resource_name(), pool.devices.len());
//! }
//! ```

pub mod allocate;
pub mod config;
pub mod daemon;
pub mod devinfo;
pub mod dra;
pub mod health;
pub mod kubelet;
pub mod metrics;
pub mod pools;
pub mod report;
pub mod server;

/// Kubelet device plugin API `v1beta1`, generated from `proto/api.proto`.
#[allow(missing_docs, clippy::all)]
pub mod api {
    tonic::include_proto!("v1beta1");
}

/// API version string sent in `RegisterRequest.version`.
pub const API_VERSION: &str = "v1beta1";
/// Default resource prefix (`kuberdma.io/<pool>`).
pub const DEFAULT_PREFIX: &str = "kuberdma.io";
/// `/dev/infiniband/rdma_cm` on the node.
pub const RDMA_CM: &str = "/dev/infiniband/rdma_cm";
