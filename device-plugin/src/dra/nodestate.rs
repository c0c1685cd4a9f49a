//! `roceReady` per PF from the node's `RdmaNodeState` (group `kuberdma.io`,
//! `v1alpha1`, cluster-scoped, named after the node, written by the operator's
//! agent). Read as a dynamic object so the device plugin does not depend on
//! the operator crate; watched, so a change reaches the slices in seconds.
//!
//! Rule: [`nic::readiness::pf_readiness`], the one the agent's `RoceReady`
//! follows, per PF: a PF is RoCE-ready when it has at least one check, none of
//! its checks is `Fail` and no node-wide check (`rdma-netns`) is. No state, a PF
//! without checks, or a state the controller marked `Stale` give no attribute
//! at all: unknown is not "not ready".

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use nic::readiness::{self, Verdict};
use serde_json::Value;
use tokio::sync::watch;

use super::slices::RoceReadiness;

/// The CRD's group, version and kind.
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: "kuberdma.io".into(),
        version: "v1alpha1".into(),
        api_version: "kuberdma.io/v1alpha1".into(),
        kind: "RdmaNodeState".into(),
        plural: "rdmanodestates".into(),
    }
}

/// Readiness per PF netdev from an `RdmaNodeState`'s `status`.
pub fn readiness(status: &Value) -> RoceReadiness {
    let list = |key: &str| status[key].as_array().map(Vec::as_slice).unwrap_or_default();
    let conditions =
        list("conditions").iter().filter_map(|c| Some((c["type"].as_str()?, c["status"].as_str()?)));
    if readiness::marked_stale(conditions) {
        return RoceReadiness::new();
    }
    // A check without an interface or a result is not one the agent writes; it is skipped.
    let checks = list("checks")
        .iter()
        .filter_map(|c| Some((c["interface"].as_str()?, Verdict::of(c["result"].as_str()?))));
    readiness::pf_readiness(checks)
}

/// Watches `RdmaNodeState/<node>` and keeps the readiness in the returned
/// channel (empty while there is none, or the CRD is not installed: the
/// watcher retries with backoff and we log once per kind of failure).
pub fn watch_node(client: kube::Client, node: &str) -> watch::Receiver<RoceReadiness> {
    let (tx, rx) = watch::channel(RoceReadiness::new());
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let cfg = watcher::Config::default()
        .fields(&format!("metadata.name={node}"))
        .timeout(super::WATCH_TIMEOUT_SECS);
    let node = node.to_string();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
        let mut last_error: Option<String> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    last_error = None;
                    let r = readiness(&o.data["status"]);
                    tx.send_if_modified(|cur| std::mem::replace(cur, r) != *cur);
                }
                Ok(Event::Delete(_)) => {
                    tx.send_if_modified(|cur| !std::mem::take(cur).is_empty());
                }
                Ok(Event::Init | Event::InitDone) => {}
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(node = %node, error = %msg, "cannot watch RdmaNodeState; roceReady is left out until it can");
                        last_error = Some(msg);
                    }
                    tx.send_if_modified(|cur| !std::mem::take(cur).is_empty());
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pf_is_ready_when_its_checks_pass_and_unknown_otherwise() {
        let status = json!({
            "checks": [
                {"name": "pfc", "interface": "ens1f0np0", "result": "Pass"},
                {"name": "ecn", "interface": "ens1f0np0", "result": "Unsupported"},
                {"name": "pfc", "interface": "ens1f1np1", "result": "Pass"},
                {"name": "mtu", "interface": "ens1f1np1", "result": "Fail"},
            ],
            "conditions": [{"type": "RoceReady", "status": "False"}]
        });
        let r = readiness(&status);
        assert_eq!(r.get("ens1f0np0"), Some(&true));
        assert_eq!(r.get("ens1f1np1"), Some(&false));
        assert_eq!(r.get("ens2f0"), None);
    }

    #[test]
    fn a_stale_state_says_nothing() {
        let status = json!({
            "checks": [{"name": "pfc", "interface": "ens1f0np0", "result": "Pass"}],
            "conditions": [{"type": "Stale", "status": "True"}]
        });
        assert!(readiness(&status).is_empty());
        assert!(readiness(&Value::Null).is_empty());
    }

    #[test]
    fn a_failing_node_wide_check_makes_every_pf_unready_and_is_no_pf_itself() {
        let status = json!({
            "checks": [
                {"name": "pfc", "interface": "ens1f0np0", "result": "Pass"},
                {"name": "rdma-netns", "interface": "node", "result": "Fail"},
            ],
        });
        assert_eq!(readiness(&status), RoceReadiness::from([("ens1f0np0".into(), false)]));
    }
}
