//! Operating the installed chart as its users do: `helm test`, Prometheus' own linter on each
//! daemon's live `/metrics`, and uninstalling by docs/uninstall.md until nothing kube-rdma
//! wrote is left on the cluster or the node (then the chart is installed again, as `up` left it).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NAMESPACE, NODE_NAME, RELEASE};
use kube_rdma_e2e::{node, peers};

use crate::ctx::{doc_block, eventually, Ctx};
use crate::Case;

const UNINSTALL_CASE: &str = "uninstall_by_the_docs_leaves_the_cluster_and_node_clean";
const READY_LABEL: &str = "kuberdma.io/roce-ready";

/// The uninstall case removes the release and installs it again: it runs last in its lane.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "helm_test_passes_on_the_installed_chart",
            run: helm_test_passes_on_the_installed_chart,
        },
        Case {
            name: "promtool_check_metrics_is_clean_on_every_daemons_live_metrics",
            run: promtool_check_metrics_is_clean_on_every_daemons_live_metrics,
        },
        Case { name: UNINSTALL_CASE, run: uninstall_by_the_docs_leaves_the_cluster_and_node_clean },
    ]
}

fn helm(ctx: &Ctx, action: &str, extra: &[&str]) -> Result<String> {
    kube_rdma_e2e::daemon::run(
        Command::new("python3")
            .arg(peers::repo_root().join("e2e/helm.py"))
            .args([action, "--namespace", NAMESPACE, "--release", RELEASE])
            .arg(format!("--kubeconfig={}", ctx.layout.kubeconfig().display()))
            .args(extra),
    )
}

/// `helm test` (Helm's engine, e2e/helm.py): the chart's test pod is scheduled on the
/// RoCE-ready node with a device of the first pool and reads that node's RdmaNodeState.
fn helm_test_passes_on_the_installed_chart(ctx: &Ctx) -> Result<()> {
    let out = helm(ctx, "test", &["--wait=180"])?;
    ensure!(out.contains("passed"), "helm test: {out}");
    // The test pod's output is `kubectl rdma status NODE`: the node it ran on, read from the API.
    ensure!(out.contains(NODE_NAME), "the test pod did not print the node's state:\n{out}");
    Ok(())
}

/// Each kube-rdma pod's metrics port, read from its spec (the container port named `metrics`).
fn metrics_targets(ctx: &Ctx) -> Result<Vec<(String, u64)>> {
    let pods =
        ctx.json(&["-n", NAMESPACE, "get", "pods", "-l", &format!("app.kubernetes.io/instance={RELEASE}")])?;
    let mut out = Vec::new();
    for p in pods["items"].as_array().context("no pod list")? {
        let name = p["metadata"]["name"].as_str().context("pod without a name")?;
        let port = p["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().into_iter().flatten())
            .find(|port| port["name"] == "metrics")
            .and_then(|port| port["containerPort"].as_u64());
        if let Some(port) = port {
            out.push((name.to_string(), port));
        }
    }
    Ok(out)
}

/// `promtool check metrics` (pinned from the Go module proxy, e2e/peers/promtool) on the page each
/// daemon serves on the cluster, fetched through the API server's pod proxy (device plugin mode;
/// the DRA driver's page: `dra_promtool_check_metrics_is_clean_on_the_drivers_live_metrics`).
fn promtool_check_metrics_is_clean_on_every_daemons_live_metrics(ctx: &Ctx) -> Result<()> {
    promtool_checks_every_live_metrics_page(ctx, &[("device-plugin", "kuberdma_pool_registered")])
}

/// Runs `promtool check metrics` on the live page of every kube-rdma pod with a metrics port.
/// Each of the agent, the controller and the pods named by `expected` (a pod name part, and a
/// metric prefix its page must show, so the mode under test is the one that answered) must have one.
pub fn promtool_checks_every_live_metrics_page(ctx: &Ctx, expected: &[(&str, &str)]) -> Result<()> {
    let promtool = peers::cache_dir().join("bin/promtool");
    let targets = metrics_targets(ctx)?;
    let expected: Vec<(&str, &str)> = [("agent", "kuberdma_"), ("controller", "kuberdma_")]
        .into_iter()
        .chain(expected.iter().copied())
        .collect();
    for (component, _) in &expected {
        ensure!(
            targets.iter().any(|(p, _)| p.contains(component)),
            "no {component} pod with a metrics port: {targets:?}"
        );
    }
    let mut problems = Vec::new();
    for (pod, port) in &targets {
        let page = ctx.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}:{port}/proxy/metrics"),
        ])?;
        ensure!(page.contains("kuberdma_build_info{"), "{pod}: no kuberdma_build_info in\n{page}");
        for (component, prefix) in expected.iter().filter(|(c, _)| pod.contains(c)) {
            ensure!(
                page.contains(&format!("\n{prefix}")),
                "{pod} ({component}): no {prefix}* series in\n{page}"
            );
        }
        let mut child = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", promtool.display()))?;
        child.stdin.take().context("promtool stdin")?.write_all(page.as_bytes())?;
        let o = child.wait_with_output()?;
        if !o.status.success() {
            problems.push(format!(
                "{pod} ({} lines): {}{}",
                page.lines().count(),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    ensure!(problems.is_empty(), "promtool check metrics:\n{}", problems.join("\n"));
    println!("     promtool check metrics: clean on {} pages", targets.len());
    Ok(())
}

/// Runs a docs block on the cluster: the pinned kubectl on PATH with the admin kubeconfig, and
/// `helm` as Helm's engine (there is no helm CLI here).
fn run_api_block(ctx: &Ctx, block: &str) -> Result<String> {
    let helm_fn = format!(
        "helm() {{ [ \"$1\" = uninstall ] && [ \"$3\" = -n ] || {{ echo \"unexpected: helm $*\" >&2; return 2; }}; \
         python3 {} uninstall --kubeconfig \"$KUBECONFIG\" --release \"$2\" --namespace \"$4\" --wait 120; }}\n",
        peers::repo_root().join("e2e/helm.py").display()
    );
    let path =
        format!("{}:{}", peers::cache_dir().join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let script = helm_fn + block;
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script.as_str()])
        .env("PATH", path)
        .env("KUBECONFIG", ctx.layout.kubeconfig())
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success(), "the block failed ({}):\n{block}\n{text}", out.status);
    Ok(text)
}

/// What kube-rdma wrote on the node and is still there, as paths the node sees.
fn node_leftovers(ctx: &Ctx) -> Result<Vec<String>> {
    let mut left = Vec::new();
    if ctx.layout.root("/opt/cni/bin/kube-rdma-cni").exists() {
        left.push("/opt/cni/bin/kube-rdma-cni".to_string());
    }
    for dir in ["/run/cdi", "/etc/cdi", "/run/k8s.cni.cncf.io/devinfo/dp"] {
        if let Ok(entries) = std::fs::read_dir(ctx.layout.root(dir)) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("kuberdma.io-") {
                    left.push(format!("{dir}/{name}"));
                }
            }
        }
    }
    if ctx.layout.root("/var/lib/cni/kube-rdma").exists() {
        left.push("/var/lib/cni/kube-rdma".to_string());
    }
    Ok(left)
}

/// What kube-rdma leaves in the API: RdmaNodeStates (or their CRD) and the node's label.
fn api_leftovers(ctx: &Ctx) -> Result<Vec<String>> {
    let mut left = Vec::new();
    let crds = ctx.kubectl(&["get", "crd", "-o", "name"])?;
    left.extend(crds.lines().filter(|l| l.ends_with(".kuberdma.io")).map(String::from));
    if left.iter().any(|c| c.contains("rdmanodestates")) {
        let states = ctx.kubectl(&["get", "rdmanodestates", "-o", "name"])?;
        left.extend(states.lines().filter(|l| !l.is_empty()).map(String::from));
    }
    let node = ctx.json(&["get", "node", NODE_NAME])?;
    if let Some(v) = node["metadata"]["labels"][READY_LABEL].as_str() {
        left.push(format!("node label {READY_LABEL}={v}"));
    }
    Ok(left)
}

/// `helm uninstall` alone leaves what docs/uninstall.md lists; its two blocks (the cluster's,
/// then the node's, run in the node's mount namespace) remove all of it. Then the chart is
/// installed again with the values the cluster had.
fn uninstall_by_the_docs_leaves_the_cluster_and_node_clean(ctx: &Ctx) -> Result<()> {
    let before_node = node_leftovers(ctx)?;
    for want in ["/opt/cni/bin/kube-rdma-cni", "/run/cdi/kuberdma.io-"] {
        ensure!(
            before_node.iter().any(|p| p.starts_with(want)),
            "installed, but no {want}*: {before_node:?}"
        );
    }
    let api_block = doc_block("docs/uninstall.md", UNINSTALL_CASE)?;
    let node_block = {
        let md = std::fs::read_to_string(peers::repo_root().join("docs/uninstall.md"))?;
        let second =
            md.split("```sh").filter(|b| b.contains(UNINSTALL_CASE)).nth(1).context("no node block")?;
        second.split_once('\n').context("empty block")?.1.split("```").next().unwrap_or_default().to_string()
    };
    ensure!(
        node_block.contains("rm -f /opt/cni/bin/kube-rdma-cni"),
        "the second block is not the node's:\n{node_block}"
    );
    let result = (|| -> Result<()> {
        run_api_block(ctx, &api_block)?;
        let holder = cluster::state()?.created.holder.context("no mount-namespace holder")?;
        node::in_node(holder, "bash", &["-euo", "pipefail", "-c", &node_block])?;
        let api = api_leftovers(ctx)?;
        let on_node = node_leftovers(ctx)?;
        ensure!(api.is_empty() && on_node.is_empty(), "left after the documented steps: {api:?} {on_node:?}");
        Ok(())
    })();
    let back = reinstall(ctx);
    result?;
    back
}

/// The chart again, as `up` installed it (`<base>/values.yaml`), until the pool is allocatable.
fn reinstall(ctx: &Ctx) -> Result<()> {
    let values = ctx.layout.base.join("values.yaml");
    if !values.exists() {
        bail!("{} is missing: cannot install the chart again", values.display());
    }
    cluster::helm_upgrade(&ctx.layout, &values)?;
    cluster::wait_rollout(&ctx.layout)?;
    eventually("the node's RdmaNodeState again", Duration::from_secs(120), || {
        Ok(ctx.kubectl(&["get", "rdmanodestate", NODE_NAME, "-o", "name"]).ok().map(|_| ()))
    })
}
