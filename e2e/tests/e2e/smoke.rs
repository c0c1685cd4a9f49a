//! The tier's own cases: the cluster is real and kube-rdma is installed on
//! it by its chart, as users install it.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kube_rdma_e2e::cluster::{NAMESPACE, NODE_NAME};
use kube_rdma_e2e::peers::K8S_VERSION;

use crate::ctx::{busybox_pod, doc_block, eventually, run_doc_block, Ctx};
use crate::Case;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "the_node_is_ready_and_runs_the_pinned_peers",
            run: the_node_is_ready_and_runs_the_pinned_peers,
        },
        Case {
            name: "kube_rdma_runs_as_the_charts_pods_under_their_service_accounts",
            run: kube_rdma_runs_as_the_charts_pods_under_their_service_accounts,
        },
        Case {
            name: "a_busybox_pod_runs_and_kubectl_exec_works",
            run: a_busybox_pod_runs_and_kubectl_exec_works,
        },
        Case {
            name: "kubectl_get_rdmanodestates_prints_the_crds_printer_columns",
            run: kubectl_get_rdmanodestates_prints_the_crds_printer_columns,
        },
        Case {
            name: "the_default_pool_is_allocatable_on_the_node",
            run: the_default_pool_is_allocatable_on_the_node,
        },
        Case {
            name: "cluster_env_prints_one_export_line_and_nothing_else",
            run: cluster_env_prints_one_export_line,
        },
        Case {
            name: "the_readmes_local_cluster_walkthrough_runs",
            run: the_readmes_local_cluster_walkthrough_runs,
        },
        Case {
            name: "the_multus_kubeconfig_token_does_not_expire",
            run: the_multus_kubeconfig_token_does_not_expire,
        },
        Case {
            name: "a_restarted_kubelet_comes_back_with_the_node_ready",
            run: a_restarted_kubelet_comes_back_with_the_node_ready,
        },
    ]
}

fn the_node_is_ready_and_runs_the_pinned_peers(ctx: &Ctx) -> Result<()> {
    let n = ctx.json(&["get", "node", NODE_NAME])?;
    let ready = n["status"]["conditions"]
        .as_array()
        .context("conditions")?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    ensure!(ready, "node not Ready: {}", n["status"]["conditions"]);
    let info = &n["status"]["nodeInfo"];
    ensure!(info["kubeletVersion"] == K8S_VERSION, "kubelet {}", info["kubeletVersion"]);
    // The kubelet prints the runtime version parsed as a semantic version, without the "v"
    // (kuberuntime_manager.go `newRuntimeVersion`, nodestatus `ContainerRuntimeVersion`).
    let ctrd = kube_rdma_e2e::peers::pinned_version("containerd")?;
    ensure!(
        info["containerRuntimeVersion"] == format!("containerd://{}", ctrd.trim_start_matches('v')),
        "runtime {}, e2e/peers/containerd/go.mod pins {ctrd}",
        info["containerRuntimeVersion"]
    );
    ensure!(
        n["metadata"]["labels"]["feature.node.kubernetes.io/rdma.capable"] == "true",
        "NFD's RDMA label missing"
    );
    let v = ctx.json(&["version"])?;
    ensure!(v["serverVersion"]["gitVersion"] == K8S_VERSION, "server {}", v["serverVersion"]);
    Ok(())
}

fn kube_rdma_runs_as_the_charts_pods_under_their_service_accounts(ctx: &Ctx) -> Result<()> {
    let pods = ctx.json(&["-n", NAMESPACE, "get", "pods"])?;
    let items = pods["items"].as_array().context("items")?;
    for component in ["device-plugin", "agent", "controller"] {
        let p = items
            .iter()
            .find(|p| p["metadata"]["labels"]["app.kubernetes.io/component"] == component)
            .with_context(|| format!("no {component} pod"))?;
        ensure!(p["status"]["phase"] == "Running", "{component}: {}", p["status"]["phase"]);
        let sa = p["spec"]["serviceAccountName"].as_str().unwrap_or("");
        ensure!(sa == format!("kube-rdma-{component}"), "{component} runs as ServiceAccount {sa:?}");
        let sa_obj = ctx.json(&["-n", NAMESPACE, "get", "serviceaccount", sa]);
        ensure!(sa_obj.is_ok(), "{component}'s ServiceAccount {sa} does not exist");
    }
    Ok(())
}

fn a_busybox_pod_runs_and_kubectl_exec_works(ctx: &Ctx) -> Result<()> {
    ctx.apply(&busybox_pod("default", "smoke", "", ""))?;
    let p = ctx.wait_running("default", "smoke", Duration::from_secs(90))?;
    let ip = p["status"]["podIP"].as_str().unwrap_or("").to_string();
    let out =
        ctx.exec("default", "smoke", &["sh", "-c", "echo hello from $(hostname); ip -4 -o addr show eth0"])?;
    ensure!(out.contains("hello from smoke"), "exec printed {out:?}");
    ensure!(!ip.is_empty() && out.contains(&ip), "eth0 lacks the pod IP {ip}: {out}");
    ctx.delete("default", "pod", "smoke")
}

fn kubectl_get_rdmanodestates_prints_the_crds_printer_columns(ctx: &Ctx) -> Result<()> {
    let crd = ctx.json(&["get", "crd", "rdmanodestates.kuberdma.io"])?;
    let cols: Vec<String> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .context("printer columns")?
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|c| c["name"].as_str().unwrap_or("").to_uppercase())
        .collect();
    let out = eventually("the agent's RdmaNodeState", Duration::from_secs(60), || {
        let out = ctx.kubectl(&["get", "rdmanodestates"])?;
        Ok(out.lines().any(|l| l.starts_with(NODE_NAME)).then_some(out))
    })?;
    let header = out.lines().next().unwrap_or("");
    for c in std::iter::once("NAME".to_string()).chain(cols) {
        ensure!(header.contains(&c), "column {c} missing from {header:?}");
    }
    Ok(())
}

fn the_default_pool_is_allocatable_on_the_node(ctx: &Ctx) -> Result<()> {
    eventually("kuberdma.io/rdma_vfs allocatable 4", Duration::from_secs(60), || {
        let n = ctx.json(&["get", "node", NODE_NAME])?;
        Ok((n["status"]["allocatable"]["kuberdma.io/rdma_vfs"] == "4").then_some(()))
    })
}

/// `scripts/cluster env` (issue 19: `export KUBECONFIG=...` and nothing else on stdout), and
/// the shell that evals it reaches the cluster.
fn cluster_env_prints_one_export_line(ctx: &Ctx) -> Result<()> {
    let bin = env!("CARGO_BIN_EXE_kube-rdma-cluster");
    let out = std::process::Command::new(bin).arg("env").output()?;
    ensure!(out.status.success(), "kube-rdma-cluster env: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout)?;
    let want = format!("export KUBECONFIG={}\n", ctx.layout.kubeconfig().display());
    ensure!(stdout == want, "stdout {stdout:?}, want exactly {want:?}");
    let kubectl = kube_rdma_e2e::peers::bin("kubectl");
    let script = format!("eval \"$({bin} env)\" && {} get node {NODE_NAME} -o name", kubectl.display());
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env_remove("KUBECONFIG")
        .output()?;
    let printed = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && printed.trim() == format!("node/{NODE_NAME}"),
        "kubectl after eval \"$(env)\": {printed} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The README's "Try it on a local cluster" block, run as written on this cluster
/// (`up` on a running cluster starts nothing): what it prints is what the README says.
fn the_readmes_local_cluster_walkthrough_runs(ctx: &Ctx) -> Result<()> {
    let block = doc_block("README.md", "the_readmes_local_cluster_walkthrough_runs")?;
    let r = run_doc_block(&block).and_then(|(stdout, stderr)| {
        ensure!(
            stderr.contains("cluster: already up"),
            "`scripts/cluster up` did not find the cluster up:\n{stderr}"
        );
        // Runs of spaces count as one, as in the docs test's quoted output.
        let squeezed = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        for want in [
            &format!("node/{NODE_NAME} Ready"),
            "kube-rdma-device-plugin-",
            "kube-rdma-agent-",
            "kube-rdma-controller-",
            "kuberdma.io/rdma_vfs: 4",
            "pod/vf-demo created",
            "rdma_cm",
            "uverbs",
            "PCIDEVICE_KUBERDMA_IO_RDMA_VFS=0000:",
            "kube-apiserver",
        ] {
            ensure!(
                squeezed.contains(want),
                "the README's walk-through printed no {want:?}:\n{stdout}\n{stderr}"
            );
        }
        Ok(())
    });
    ctx.delete("default", "pod", "vf-demo")?;
    r
}

/// The node's Multus kubeconfig carries a ServiceAccount token that does not expire
/// (`cluster.rs` MULTUS_TOKEN_SECRET): a legacy token Secret's JWT has no `exp`, and names its
/// Secret; the API server takes it as Multus' ServiceAccount.
fn the_multus_kubeconfig_token_does_not_expire(ctx: &Ctx) -> Result<()> {
    let f = ctx.layout.root("/etc/cni/net.d").join("multus.d/multus.kubeconfig");
    let kc: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&f)?)?;
    let token = kc["users"][0]["user"]["token"].as_str().context("no token in the Multus kubeconfig")?;
    let payload = token.split('.').nth(1).context("the token is no JWT")?;
    let claims: serde_json::Value = serde_json::from_slice(&base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        payload,
    )?)?;
    ensure!(claims.get("exp").is_none(), "the Multus token expires: {claims}");
    ensure!(claims["kubernetes.io/serviceaccount/secret.name"] == "multus-token", "claims {claims}");
    // The kubeconfig as Multus uses it (from the host, as the thin plugin does from the node).
    let who = kube_rdma_e2e::daemon::run(kube_rdma_e2e::apiserver::kubectl(&f).args([
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]))?;
    ensure!(
        who.trim() == "system:serviceaccount:kube-system:multus",
        "the API server takes the token as {who:?}"
    );
    Ok(())
}

fn a_restarted_kubelet_comes_back_with_the_node_ready(ctx: &Ctx) -> Result<()> {
    let before = kube_rdma_e2e::cluster::state()?;
    let old = before.created.daemons.iter().find(|(n, _)| n == "kubelet").map(|(_, p)| *p);
    let pid = kube_rdma_e2e::cluster::restart_daemon("kubelet", Duration::from_secs(10))?;
    ensure!(Some(pid) != old, "same pid after a restart");
    ensure!(
        kube_rdma_e2e::node::cgroup_pids().contains(&pid),
        "the restarted kubelet is outside the cluster's cgroups"
    );
    eventually("the node Ready after the kubelet restart", Duration::from_secs(60), || {
        let ready = ctx.node_ready()?;
        Ok(ready.then_some(()))
    })
}

/// The last case: `scripts/cluster down` leaves links, netns, mounts, device
/// nodes, cgroups and processes as they were before `up`.
pub fn down_leaves_the_host_as_it_found_it(_ctx: &Ctx) -> Result<()> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-cluster")).arg("down").output()?;
    ensure!(
        out.status.success(),
        "kube-rdma-cluster down: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("differs") || l.contains("error"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let after = kube_rdma_e2e::node::snapshot();
    ensure!(!after.netns.contains(&kube_rdma_e2e::node::netns()), "netns still there");
    ensure!(!after.links.contains(&kube_rdma_e2e::node::host_link()), "host link still there");
    ensure!(!kube_rdma_e2e::cluster::base_dir().exists(), "base dir still there");
    Ok(())
}
