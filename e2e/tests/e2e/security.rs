//! The chart's admission policies on the real cluster, with the tokens the
//! kubelet projected into the chart's own pods (bound to the pod, so carrying
//! the node claim): what a stolen token of a node's daemon could write beyond
//! its own node is refused with the policy's message (issue 36, D2 and the
//! agent's Events), while the daemons themselves run under the same policies.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kube_rdma_e2e::cluster::{NAMESPACE, NODE_NAME};

use crate::ctx::{eventually, Ctx};
use crate::operator::{kubectl_create, pod_token, token_kubeconfig};
use crate::Case;

const DRIVER: &str = "rdma.kuberdma.io";
/// A node that does not exist: the forged slice names it.
const OTHER: &str = "e2e-forged-node";

/// Quiet: no restart, no chart change, no VF taken.
pub fn quiet_cases() -> Vec<Case> {
    vec![Case {
        name: "security_the_agents_token_may_post_events_only_about_its_own_node",
        run: security_the_agents_token_may_post_events_only_about_its_own_node,
    }]
}

/// With the DRA cases: the chart in DRA mode.
pub fn dra_cases() -> Vec<Case> {
    vec![Case {
        name: "security_dra_a_forged_slice_with_the_drivers_token_is_refused",
        run: security_dra_a_forged_slice_with_the_drivers_token_is_refused,
    }]
}

fn slice(name: &str, node: &str, driver: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: {name}\nspec:\n  \
         driver: {driver}\n  nodeName: {node}\n  pool:\n    name: {node}\n    generation: 1\n    \
         resourceSliceCount: 1\n  devices:\n  - name: forged-0\n"
    )
}

fn security_dra_a_forged_slice_with_the_drivers_token_is_refused(ctx: &Ctx) -> Result<()> {
    // The driver publishes its own slices under the policies (dra_mode waits for them).
    crate::dra::dra_mode(ctx)?;
    eventually("one device plugin pod, in DRA mode", Duration::from_secs(90), || {
        let pods =
            ctx.json(&["-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=device-plugin"])?;
        let items = pods["items"].as_array().context("items")?;
        Ok((items.len() == 1
            && items[0]["status"]["phase"] == "Running"
            && items[0]["spec"]["containers"][0]["args"][0] == "dra")
            .then_some(()))
    })?;
    let kc = token_kubeconfig(ctx, "dra-driver", &pod_token(ctx, "device-plugin")?)?;
    let _cleanup = Cleanup(ctx);
    for (name, node, driver, want) in [
        (
            "e2e-forged-other-node",
            OTHER,
            DRIVER,
            format!(
                "the kube-rdma DRA driver may write only ResourceSlices of the node its pod runs on \
                 ({NODE_NAME}), not one of node {OTHER}"
            ),
        ),
        (
            "e2e-forged-other-driver",
            NODE_NAME,
            "gpu.example.com",
            "the kube-rdma DRA driver may write only ResourceSlices of driver rdma.kuberdma.io, not of \
             gpu.example.com"
                .to_string(),
        ),
    ] {
        let (ok, err) = kubectl_create(&kc, &slice(name, node, driver))?;
        ensure!(!ok, "the driver's token created {name}");
        ensure!(err.contains("ValidatingAdmissionPolicy") && err.contains(&want), "{name}: {err}");
        let left = ctx.kubectl(&["get", "resourceslice", name, "--ignore-not-found"])?;
        ensure!(left.trim().is_empty(), "{name} exists: {left}");
    }
    Ok(())
}

/// Removes what a failed refusal may have created.
struct Cleanup<'a>(&'a Ctx);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for name in ["e2e-forged-other-node", "e2e-forged-other-driver"] {
            let _ = self.0.kubectl(&["delete", "resourceslice", name, "--ignore-not-found"]);
        }
    }
}

fn event(name: &str, kind: &str, regarding: &str) -> String {
    let now = "2026-01-01T00:00:00.000000Z";
    format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: {name}\n  namespace: default\n\
         eventTime: \"{now}\"\nreportingController: kuberdma.io/agent\nreportingInstance: e2e\n\
         action: CheckRoce\nreason: RoceDrift\ntype: Warning\nnote: e2e\nregarding:\n  apiVersion: v1\n  \
         kind: {kind}\n  name: {regarding}\n"
    )
}

fn security_the_agents_token_may_post_events_only_about_its_own_node(ctx: &Ctx) -> Result<()> {
    let kc = token_kubeconfig(ctx, "agent-events", &pod_token(ctx, "agent")?)?;
    let names = ["e2e-agent-own-node", "e2e-agent-other-node", "e2e-agent-a-pod"];
    let _cleanup = EventsCleanup(ctx, names);
    let (ok, err) = kubectl_create(&kc, &event(names[0], "Node", NODE_NAME))?;
    ensure!(ok, "an Event about its own node was refused: {err}");
    for (name, kind, regarding) in [(names[1], "Node", OTHER), (names[2], "Pod", "victim")] {
        let (ok, err) = kubectl_create(&kc, &event(name, kind, regarding))?;
        ensure!(!ok, "the agent's token posted an Event about {kind} {regarding}");
        let want = format!(
            "the kube-rdma agent may post Events only about the node its pod runs on, not about {kind} {regarding}"
        );
        ensure!(err.contains(&want), "{name}: {err}");
    }
    Ok(())
}

struct EventsCleanup<'a>(&'a Ctx, [&'static str; 3]);

impl Drop for EventsCleanup<'_> {
    fn drop(&mut self) {
        for name in self.1 {
            let _ = self.0.kubectl(&[
                "-n",
                "default",
                "delete",
                "events.events.k8s.io",
                name,
                "--ignore-not-found",
            ]);
        }
    }
}
