//! `kube-rdma-device-plugin`: serves SR-IOV VFs (and, in shared mode, whole
//! HCAs) with their RDMA devices to the kubelet as pools.
//!
//! Data flow: **sysfs → [`nic::discover`] → [`nic::Inventory`] (+ [`inuse`]:
//! what was learned of VFs now in pods, and the kubelet's allocations from
//! [`podresources`]) → [`pools::plan_with`] (config × inventory → pools and a
//! decision per device) → [`server`] (kubelet v1beta1 gRPC, one unix socket per
//! pool) → [`allocate`] (pure: DeviceSpecs, env, CDI names; preferred
//! allocation)**. [`daemon`] ties it together: registration once per kubelet
//! instance, checked by the kubelet's ListAndWatch, retried with backoff
//! ([`registration`] over [`kubelet`]), rescans of one PF on its netlink link events
//! and of the node on a timer, config reloads, device-info files
//! ([`devinfo`]) and CDI specs ([`cdi`], DRA's claim specs included), metrics
//! and health ([`metrics`], served by [`plumbing::http`], reading each pool's
//! [`serving`] state). [`config`] reads our
//! format and, with their meaning, those of sriov-network-device-plugin and
//! k8s-rdma-shared-dev-plugin; [`names`] derives socket, CDI and variable names.
//!
//! [`dra`] is the same inventory and pools in DRA mode (`kube-rdma-device-plugin dra`;
//! cargo feature `dra`, on by default). Everything that talks to the kubelet is
//! cargo feature `daemon` (on with `dra`); without it the crate is discovery,
//! config, pools and their report only (the README's first command).
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
pub mod cdi;
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod devinfo;
#[cfg(feature = "dra")]
pub mod dra;
pub mod health;
pub mod inuse;
#[cfg(feature = "daemon")]
pub mod kubelet;
#[cfg(feature = "daemon")]
pub mod metrics;
pub mod names;
#[cfg(feature = "daemon")]
pub mod nodewatch;
#[cfg(feature = "daemon")]
pub mod podresources;
pub mod pools;
#[cfg(feature = "daemon")]
pub mod registration;
pub mod report;
#[cfg(feature = "daemon")]
pub mod server;
#[cfg(feature = "daemon")]
pub mod serving;
#[cfg(feature = "daemon")]
pub mod walks;

/// Kubelet device plugin API `v1beta1`, generated from `proto/api.proto`.
#[cfg(feature = "daemon")]
#[allow(missing_docs, clippy::all)]
pub mod api {
    tonic::include_proto!("v1beta1");
}

/// Kubelet PodResources API `v1`, generated from `proto/podresources.proto`.
#[cfg(feature = "daemon")]
#[allow(missing_docs, clippy::all)]
pub mod api_podresources {
    tonic::include_proto!("v1");
}

/// The kubelet's PodResources socket (the daemon asks it what is in use).
pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// API version string sent in `RegisterRequest.version`.
pub const API_VERSION: &str = "v1beta1";
/// Default resource prefix (`kuberdma.io/<pool>`).
pub const DEFAULT_PREFIX: &str = "kuberdma.io";
/// `/dev/infiniband/rdma_cm` on the node.
pub const RDMA_CM: &str = "/dev/infiniband/rdma_cm";
