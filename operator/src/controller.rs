//! The controller: for each `RoceProfile`, how many nodes its selector matches and
//! how many of those comply or drifted (from the agents' `RdmaNodeState`s), into
//! the profile's status; and removal of `RdmaNodeState`s whose node is gone.
//!
//! A pass lists nodes, profiles and states, computes everything with the pure
//! [`profile_status`] and [`orphans`], and writes only what changed: status by
//! server-side apply (field manager `kube-rdma-controller`, force), orphans by
//! DELETE (404 counts as done). Retriable errors back off as in the agent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::agent::{selector_matches, with_backoff, AgentError, Backoff};
use crate::crd::{CheckResult, RdmaNodeState, RoceProfile, RoceProfileStatus, CONTROLLER_MANAGER};

/// Most drifted node names kept in a profile's status.
const MAX_DRIFTED_NAMES: usize = 50;

/// Status of `profile` given all nodes and node states.
pub fn profile_status(profile: &RoceProfile, nodes: &[Node], states: &[RdmaNodeState]) -> RoceProfileStatus {
    let by_name: BTreeMap<String, &RdmaNodeState> = states.iter().map(|s| (s.name_any(), s)).collect();
    let mut st = RoceProfileStatus::default();
    let mut names: Vec<String> = nodes
        .iter()
        .filter(|n| selector_matches(&profile.spec.node_selector, n.labels()))
        .map(|n| n.name_any())
        .collect();
    names.sort();
    for n in names {
        st.nodes_matched += 1;
        match by_name.get(&n).and_then(|s| s.status.as_ref()) {
            None => st.nodes_unreported += 1,
            Some(s) if s.checks.iter().any(|c| c.result == CheckResult::Fail) => {
                st.nodes_drifted += 1;
                if st.drifted.len() < MAX_DRIFTED_NAMES {
                    st.drifted.push(n);
                }
            }
            // A state with no checks at all has no RoCE interface: not compliant.
            Some(s) if s.checks.is_empty() => st.nodes_drifted += 1,
            Some(_) => st.nodes_compliant += 1,
        }
    }
    st
}

/// Names of node states whose node no longer exists.
pub fn orphans(nodes: &[Node], states: &[RdmaNodeState]) -> Vec<String> {
    let live: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    states.iter().map(|s| s.name_any()).filter(|n| !live.contains(n)).collect()
}

/// What one pass changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Profiles whose status was written.
    pub statuses_written: Vec<String>,
    /// Node states deleted.
    pub deleted: Vec<String>,
}

/// The controller loop.
pub struct Controller {
    client: Client,
    backoff: Backoff,
}

impl Controller {
    /// A controller writing through `client`.
    pub fn new(client: Client) -> Self {
        Self { client, backoff: Backoff::default() }
    }

    /// Replaces the retry policy.
    pub fn with_backoff(mut self, b: Backoff) -> Self {
        self.backoff = b;
        self
    }

    /// One pass over everything.
    pub async fn reconcile(&self) -> Result<Pass, AgentError> {
        let b = self.backoff;
        let lp = ListParams::default();
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        let profiles_api: Api<RoceProfile> = Api::all(self.client.clone());
        let states_api: Api<RdmaNodeState> = Api::all(self.client.clone());
        let nodes = with_backoff(b, "list nodes", || nodes_api.list(&lp)).await?.items;
        let profiles = with_backoff(b, "list roceprofiles", || profiles_api.list(&lp)).await?.items;
        let states = with_backoff(b, "list rdmanodestates", || states_api.list(&lp)).await?.items;

        let mut pass = Pass::default();
        for p in &profiles {
            let st = profile_status(p, &nodes, &states);
            if p.status.as_ref() == Some(&st) {
                continue;
            }
            let name = p.name_any();
            let body = json!({
                "apiVersion": RoceProfile::api_version(&()),
                "kind": RoceProfile::kind(&()),
                "status": st,
            });
            let pp = PatchParams::apply(CONTROLLER_MANAGER).force();
            let patch = Patch::Apply(body);
            with_backoff(b, &format!("apply roceprofiles/{name} status"), || {
                profiles_api.patch_status(&name, &pp, &patch)
            })
            .await?;
            pass.statuses_written.push(name);
        }
        let dp = DeleteParams::default();
        for name in orphans(&nodes, &states) {
            let r =
                with_backoff(b, &format!("delete rdmanodestates/{name}"), || states_api.delete(&name, &dp))
                    .await;
            match r {
                Ok(_) => {}
                // Already gone (the Node owner reference may have garbage-collected it).
                Err(AgentError::Api { source: kube::Error::Api(s), .. }) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
            tracing::info!(node = %name, "deleted RdmaNodeState of a deleted node");
            pass.deleted.push(name);
        }
        Ok(pass)
    }

    /// Reconciles every `interval` until `shutdown` resolves; errors are logged.
    pub async fn run(self, interval: Duration, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            match self.reconcile().await {
                Ok(p) => {
                    tracing::info!(written = ?p.statuses_written, deleted = ?p.deleted, "controller pass");
                }
                Err(e) => tracing::error!(error = %e, "controller pass failed"),
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}
