//! kube-rdma operator: the node agent, the controller, the CRDs and the kubectl view.
//!
//! Data flows one way: **sysfs / netlink (`nic`) → [`nic::roce::NodeRoce`] →
//! [`checks`] against a [`crd::RoceProfile`] → `RdmaNodeState` status, node label,
//! Events and [`metrics`]**. The checks are pure functions; the agent and
//! controller are thin loops around them that tests drive against a mocked API
//! server.
//!
//! ```no_run
//! use kube_rdma_operator::{agent::NodeSource, check_once, checks::default_profile};
//! use nic::roce::{DcbSource, ObserveOpts};
//! let src = NodeSource { roots: nic::Roots::from_env(), dcb: DcbSource::Netlink, opts: ObserveOpts::default() };
//! let state = check_once(&src, &default_profile());
//! println!("{}", kube_rdma_operator::view::node_table(&state.spec.node_name,
//!     state.status.as_ref().unwrap(), kube_rdma_operator::view::Detail::All));
//! ```
pub mod agent;
pub mod checks;
pub mod controller;
pub mod crd;
pub mod crd_apply;
pub mod enforce;
pub mod fixtures;
pub mod metrics;
pub mod view;

use std::path::{Path, PathBuf};

use crd::{RdmaNodeState, RdmaNodeStateSpec, RoceProfile};

/// One check of a node without a cluster: read, check against `profile`, and
/// return the `RdmaNodeState` the agent would publish (with `observedAt` set).
pub fn check_once(source: &agent::NodeSource, profile: &RoceProfile) -> RdmaNodeState {
    let node = source.read();
    let mut status = agent::evaluate(profile, &node);
    let now = agent::now_rfc3339();
    status.observed_at = Some(now.clone());
    agent::carry_transition_times(&mut status.conditions, &[], &now);
    let mut obj = RdmaNodeState::new(&node.node, RdmaNodeStateSpec { node_name: node.node.clone() });
    obj.status = Some(status);
    obj
}

/// Why a profile file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Unreadable.
    #[error("cannot read profile {path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a RoceProfile.
    #[error("{path} is not a kuberdma.io/v1alpha1 RoceProfile: {source}")]
    Parse {
        /// File.
        path: PathBuf,
        /// YAML error.
        #[source]
        source: serde_yaml::Error,
    },
    /// Wrong apiVersion/kind.
    #[error("{path}: expected apiVersion kuberdma.io/v1alpha1 kind RoceProfile, found {found}")]
    Kind {
        /// File.
        path: PathBuf,
        /// What it had.
        found: String,
    },
}

/// Reads a `RoceProfile` YAML (or JSON) file.
pub fn load_profile(path: &Path) -> Result<RoceProfile, ProfileError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ProfileError::Io { path: path.into(), source })?;
    let v: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|source| ProfileError::Parse { path: path.into(), source })?;
    let api = v.get("apiVersion").and_then(|x| x.as_str()).unwrap_or("");
    let kind = v.get("kind").and_then(|x| x.as_str()).unwrap_or("");
    if api != "kuberdma.io/v1alpha1" || kind != "RoceProfile" {
        return Err(ProfileError::Kind { path: path.into(), found: format!("{api} {kind}") });
    }
    serde_yaml::from_value(v).map_err(|source| ProfileError::Parse { path: path.into(), source })
}
