//! kube-rdma operator: the node agent, the controller, the CRDs and the kubectl view.
//!
//! Data flows one way: **sysfs / netlink (`nic`) → [`nic::roce::NodeRoce`] →
//! [`checks`] against a [`crd::RoceProfile`] ([`status::evaluate`]) → `RdmaNodeState`
//! status, node label, Events ([`publish`]) and [`metrics`]**. The checks and the
//! status are pure functions; the [`agent`] and the [`controller`] are loops around
//! them driven by watches, which tests run against an API server over TLS.
//! [`health`] serves their liveness and self-metrics with the [`metrics`] over
//! [`plumbing::http`]; logging, the version and the stdout/exit-status convention
//! of both binaries are [`plumbing`]'s.
//!
//! ```no_run
//! use kube_rdma_operator::{source::NodeSource, check_once, checks::default_profile};
//! use nic::roce::{DcbSource, ObserveOpts};
//! let src = NodeSource { roots: nic::Roots::from_env(), dcb: DcbSource::Netlink, opts: ObserveOpts::default() };
//! let state = check_once(&src, &default_profile());
//! println!("{}", kube_rdma_operator::kubectl::view::node_table(&state.spec.node_name,
//!     state.status.as_ref().unwrap(), kube_rdma_operator::kubectl::view::Detail::All));
//! ```
pub mod agent;
pub mod api;
pub mod checks;
pub mod controller;
pub mod crd;
pub mod crd_apply;
pub mod enforce;
pub mod events;
#[cfg(feature = "test-fixtures")]
pub mod fixtures;
pub mod health;
pub mod jitter;
pub mod kubectl;
pub mod metrics;
pub mod overlap;
pub mod profiles;
pub mod publish;
pub mod source;
pub mod status;
pub mod validate;

use std::path::{Path, PathBuf};

use crd::{RdmaNodeState, RdmaNodeStateSpec, RoceProfile};
use source::NodeSource;

/// One check of a node without a cluster: read, check against `profile`, and
/// return the `RdmaNodeState` the agent would publish (with `observedAt` set).
pub fn check_once(source: &NodeSource, profile: &RoceProfile) -> RdmaNodeState {
    let node = source.read();
    let mut status = status::evaluate(profile, &node);
    let now = status::now_rfc3339();
    status.observed_at = Some(now.clone());
    status::carry_transition_times(&mut status.conditions, &[], &now);
    let mut obj = RdmaNodeState::new(&node.node, RdmaNodeStateSpec { node_name: node.node.clone() });
    obj.status = Some(status);
    obj
}

/// Why a profile file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Unreadable.
    #[error("cannot read profile {path}")]
    Io {
        /// The profile file.
        path: PathBuf,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML or JSON.
    #[error("profile {path} is not YAML or JSON")]
    Parse {
        /// The profile file.
        path: PathBuf,
        /// YAML error.
        #[source]
        source: serde_yaml::Error,
    },
    /// Not a valid `kuberdma.io/v1alpha1` RoceProfile: what the API server would refuse.
    #[error("profile {path} is invalid: {problems}")]
    Invalid {
        /// The profile file.
        path: PathBuf,
        /// Each problem with its field path.
        problems: validate::Invalid,
    },
}

/// Reads a `RoceProfile` YAML (or JSON) file and validates it as the API server
/// validates the CRD (schema with unknown fields refused, then the CEL rules).
pub fn load_profile(path: &Path) -> Result<RoceProfile, ProfileError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ProfileError::Io { path: path.into(), source })?;
    let v: serde_json::Value =
        serde_yaml::from_str(&text).map_err(|source| ProfileError::Parse { path: path.into(), source })?;
    validate::from_value(v).map_err(|problems| ProfileError::Invalid { path: path.into(), problems })
}
