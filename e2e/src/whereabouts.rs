//! whereabouts, the cluster-wide IPAM plugin, installed on the local cluster's node: the IPAM of
//! the README quick start's RDMA network (`examples/my-values.yaml`).
//!
//! Why not host-local: it allocates from a file store on each node (`/var/lib/cni/networks`),
//! so two nodes hand out the same address of one range. whereabouts keeps a range's allocations
//! in an `IPPool` custom resource (one per range, in [`NAMESPACE`]), updated under a Lease, so a
//! network spanning nodes gets each address once. kube-rdma-cni runs it like any IPAM plugin
//! (`ipam.type` found in `CNI_PATH`), with the network's `ipam` section on stdin.
//!
//! ```text
//! e2e/peers/whereabouts (pinned)  → <cache>/bin/whereabouts → the node's /opt/cni/bin
//! the module's doc/crds/*.yaml    → CRDs (IPPool, OverlappingRangeIPReservation, NodeSlicePool)
//! rbac() (upstream's rules)       → ServiceAccount kube-system/whereabouts, its long-lived token
//! that token                      → /etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig
//!                                   + whereabouts.conf naming it (the plugin's flat-file config)
//! ```
//!
//! Upstream's DaemonSet (`doc/crds/daemonset-install.yaml`) does the same from a pod: copies the
//! binary, writes the two files from the pod's ServiceAccount token, and runs `ip-control-loop`,
//! which frees allocations of pods gone without a CNI DEL. That reconciler does not run here: the
//! plugin runs from the node's files with no such pod (as Multus does, `cluster::multus_setup`),
//! and the kubelet's DEL releases an address.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::apiserver;
use crate::daemon::{self, run};
use crate::peers;

/// The pinned Go module (e2e/peers/whereabouts/go.mod).
pub const MODULE: &str = "github.com/k8snetworkplumbingwg/whereabouts";
/// Where the IPPools (and Leases) live: the namespace of the plugin's kubeconfig context, as
/// upstream's install writes it (the DaemonSet's own namespace).
pub const NAMESPACE: &str = "kube-system";
/// The ServiceAccount the plugin acts as, and its ClusterRole (upstream's names).
const ACCOUNT: &str = "whereabouts";
const CLUSTER_ROLE: &str = "whereabouts-cni";
/// The Secret holding the ServiceAccount's long-lived token (see `cluster::MULTUS_TOKEN_SECRET`
/// for why not a TokenRequest token: nothing on this node would refresh it).
const TOKEN_SECRET: &str = "whereabouts-token";
/// The plugin's flat-file config directory, as the node sees it (whereabouts reads
/// `/etc/cni/net.d/whereabouts.d/whereabouts.conf` when the network's `ipam` names none:
/// `config.GetFlatIPAM`).
pub const CONF_DIR: &str = "/etc/cni/net.d/whereabouts.d";

/// The node to install on: host paths of what the node sees at `/opt/cni/bin` and
/// `/etc/cni/net.d`, and how the plugin reaches the API server from there.
#[derive(Debug, Clone)]
pub struct Node {
    /// The admin kubeconfig (kubectl applies with it).
    pub admin_kubeconfig: PathBuf,
    /// The host directory shown as the node's `/opt/cni/bin`.
    pub cni_bin: PathBuf,
    /// The host directory shown as the node's `/etc/cni/net.d`.
    pub cni_conf: PathBuf,
    /// The API server's URL as the node reaches it.
    pub server: String,
    /// The cluster CA, at a path the node can read.
    pub ca_file: PathBuf,
    /// The plugin's log file, at a path the node can write.
    pub log_file: PathBuf,
    /// Where the applied RBAC manifest is kept (the cluster's base directory).
    pub work_dir: PathBuf,
}

/// Installs whereabouts on `node` (see the module docs). Idempotent: objects are applied
/// server-side and files rewritten, so a second run changes nothing.
pub fn install(node: &Node) -> Result<()> {
    let dir = module_dir()?;
    let upstream = dir.join("doc/crds/daemonset-install.yaml");
    let text =
        std::fs::read_to_string(&upstream).with_context(|| format!("reading {}", upstream.display()))?;
    check_rules(&text)
        .with_context(|| format!("comparing whereabouts::rules with {}", upstream.display()))?;
    install_binary(node)?;
    apply_crds(node, &dir)?;
    let manifest = node.work_dir.join("whereabouts-rbac.yaml");
    std::fs::write(&manifest, rbac_yaml()?).with_context(|| format!("writing {}", manifest.display()))?;
    run(kubectl(node).args(["apply", "--server-side", "-f"]).arg(&manifest))?;
    let token = wait_token(node)?;
    write_conf(node, &token)
}

fn kubectl(node: &Node) -> Command {
    apiserver::kubectl(&node.admin_kubeconfig)
}

/// The binary into the node's `/opt/cni/bin`: copied beside it and renamed over it, so a
/// plugin that is running meanwhile keeps its file (a copy onto it would fail, ETXTBSY).
fn install_binary(node: &Node) -> Result<()> {
    let src = peers::bin("whereabouts");
    std::fs::create_dir_all(&node.cni_bin).with_context(|| format!("creating {}", node.cni_bin.display()))?;
    let tmp = node.cni_bin.join(".whereabouts.new");
    std::fs::copy(&src, &tmp)
        .with_context(|| format!("copying {} (e2e/build-peers builds it)", src.display()))?;
    let dst = node.cni_bin.join("whereabouts");
    std::fs::rename(&tmp, &dst).with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
}

/// The pinned module's directory in Go's module cache (downloaded if missing), where its
/// `doc/crds` are.
fn module_dir() -> Result<PathBuf> {
    let wrapper = peers::repo_root().join("e2e/peers/whereabouts");
    let out = run(Command::new("go").current_dir(&wrapper).args(["mod", "download", "-json", MODULE]))?;
    module_dir_of(&out)
}

/// The `Dir` that `go mod download -json` printed.
fn module_dir_of(go_json: &str) -> Result<PathBuf> {
    let v: Value = serde_json::from_str(go_json)
        .with_context(|| format!("go mod download printed no JSON: {go_json}"))?;
    if let Some(e) = v["Error"].as_str() {
        bail!("go mod download {MODULE}: {e}");
    }
    match v["Dir"].as_str() {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => bail!("go mod download {MODULE} printed no Dir: {go_json}"),
    }
}

/// The CRD files of the module (`doc/crds/whereabouts.cni.cncf.io_*.yaml`), sorted.
fn crd_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let crds = dir.join("doc/crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
        .with_context(|| format!("reading {}", crds.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("whereabouts.cni.cncf.io_") && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} holds no whereabouts.cni.cncf.io_*.yaml CRDs", crds.display());
    }
    Ok(files)
}

/// The CRDs applied from the module's own files, and established before the plugin can need them.
fn apply_crds(node: &Node, dir: &Path) -> Result<()> {
    let files = crd_files(dir)?;
    let mut apply = kubectl(node);
    apply.args(["apply", "--server-side"]);
    for f in &files {
        apply.arg("-f").arg(f);
    }
    let names = run(apply.args(["-o", "name"]))?;
    let mut wait = kubectl(node);
    wait.args(["wait", "--for=condition=Established", "--timeout=60s"]);
    wait.args(names.lines().filter(|l| !l.trim().is_empty()));
    run(&mut wait)?;
    Ok(())
}

/// The ClusterRole's rules, as upstream's `doc/crds/daemonset-install.yaml` grants them to its
/// ServiceAccount: IPPools, OverlappingRangeIPReservations and NodeSlicePools; Leases (the
/// plugin allocates under leader election); pods, nodes and NetworkAttachmentDefinitions read;
/// Events written. [`check_rules`] keeps the two equal when the pin moves.
fn rules() -> Value {
    json!([
        {"apiGroups": ["whereabouts.cni.cncf.io"],
         "resources": ["ippools", "overlappingrangeipreservations", "nodeslicepools"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["create", "patch", "update", "get"]}
    ])
}

/// The ServiceAccount, its ClusterRole and binding, and the token Secret.
fn rbac() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": CLUSTER_ROLE}, "rules": rules()}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": ACCOUNT},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": TOKEN_SECRET, "namespace": NAMESPACE,
                            "annotations": {"kubernetes.io/service-account.name": ACCOUNT}}}),
    ]
}

fn rbac_yaml() -> Result<String> {
    let mut out = String::new();
    for o in rbac() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&o)?);
    }
    Ok(out)
}

/// Fails unless upstream's install manifest (`manifest`) grants its ClusterRole exactly [`rules`].
fn check_rules(manifest: &str) -> Result<()> {
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let v = Value::deserialize(doc)?;
        if v["kind"] == "ClusterRole" && v["metadata"]["name"] == CLUSTER_ROLE {
            if v["rules"] != rules() {
                bail!(
                    "upstream's {CLUSTER_ROLE} rules differ from ours; update whereabouts::rules to:\n{}",
                    serde_json::to_string_pretty(&v["rules"])?
                );
            }
            return Ok(());
        }
    }
    bail!("no ClusterRole {CLUSTER_ROLE} in upstream's install manifest")
}

/// The ServiceAccount's token, once the token controller has filled the Secret.
fn wait_token(node: &Node) -> Result<String> {
    let what = format!("the token controller to fill {NAMESPACE}/{TOKEN_SECRET}");
    daemon::wait_for(&what, Duration::from_secs(60), || {
        let out = run(kubectl(node).args([
            "-n",
            NAMESPACE,
            "get",
            "secret",
            TOKEN_SECRET,
            "-o",
            "jsonpath={.data.token}",
        ]))
        .ok()?;
        let token = base64::engine::general_purpose::STANDARD.decode(out.trim()).ok()?;
        String::from_utf8(token).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
    })
}

/// The plugin's kubeconfig: `token` for the API server, the context in [`NAMESPACE`].
fn kubeconfig(node: &Node, token: &str) -> Result<String> {
    let text = crate::pki::kubeconfig(
        &node.server,
        &node.ca_file,
        ACCOUNT,
        crate::pki::Credentials::Token(token),
        ACCOUNT,
    );
    let mut v: Value = serde_yaml::from_str(&text)?;
    match v["contexts"].get_mut(0) {
        Some(c) => c["context"]["namespace"] = json!(NAMESPACE),
        None => bail!("a kubeconfig without a context: {text}"),
    }
    Ok(serde_yaml::to_string(&v)?)
}

/// `whereabouts.conf`, what upstream's install-cni.sh writes (`generateWhereaboutsConf`): the
/// kubernetes datastore and the kubeconfig at its node path; plus a log file (none by default).
fn flat_conf(log_file: &Path) -> Value {
    json!({
        "datastore": "kubernetes",
        "kubernetes": {"kubeconfig": format!("{CONF_DIR}/whereabouts.kubeconfig")},
        "log_file": log_file,
        "log_level": "debug",
    })
}

/// The two files in the node's `whereabouts.d`, mode 0600 as upstream writes them.
fn write_conf(node: &Node, token: &str) -> Result<()> {
    let dir = node.cni_conf.join("whereabouts.d");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    crate::pki::write_private(&dir, "whereabouts.kubeconfig", &kubeconfig(node, token)?)?;
    crate::pki::write_private(
        &dir,
        "whereabouts.conf",
        &serde_json::to_string_pretty(&flat_conf(&node.log_file))?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An excerpt of upstream's doc/crds/daemonset-install.yaml (v0.9.2) around its ClusterRole.
    fn upstream_with(rules: &str) -> String {
        format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: whereabouts\n  namespace: kube-system\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: whereabouts-cni\nrules:\n{rules}\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: whereabouts-config\n"
        )
    }

    const UPSTREAM_RULES: &str = "- apiGroups:\n  - whereabouts.cni.cncf.io\n  resources:\n  - ippools\n  - overlappingrangeipreservations\n  - nodeslicepools\n  verbs:\n  - get\n  - list\n  - watch\n  - create\n  - update\n  - patch\n  - delete\n\
- apiGroups:\n  - coordination.k8s.io\n  resources:\n  - leases\n  verbs:\n  - '*'\n\
- apiGroups: [\"\"]\n  resources:\n  - pods\n  verbs:\n  - list\n  - watch\n  - get\n\
- apiGroups: [\"\"]\n  resources:\n  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n\
- apiGroups: [\"k8s.cni.cncf.io\"]\n  resources:\n    - network-attachment-definitions\n  verbs:\n    - get\n    - list\n    - watch\n\
- apiGroups:\n  - \"\"\n  - events.k8s.io\n  resources:\n    - events\n  verbs:\n  - create\n  - patch\n  - update\n  - get\n";

    #[test]
    fn our_cluster_role_grants_what_upstreams_install_manifest_grants() {
        check_rules(&upstream_with(UPSTREAM_RULES)).unwrap();
    }

    #[test]
    fn a_rule_upstream_adds_is_reported_with_its_new_rules() {
        let more =
            format!("{UPSTREAM_RULES}- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n");
        let e = format!("{:#}", check_rules(&upstream_with(&more)).unwrap_err());
        assert!(e.contains("differ from ours") && e.contains("configmaps"), "{e}");
        let e = format!("{:#}", check_rules("kind: ServiceAccount\n").unwrap_err());
        assert!(e.contains("no ClusterRole whereabouts-cni"), "{e}");
    }

    #[test]
    fn the_service_account_is_bound_to_the_role_and_its_token_secret_names_it() {
        let objs = rbac();
        let binding = objs.iter().find(|o| o["kind"] == "ClusterRoleBinding").unwrap();
        assert_eq!(binding["roleRef"]["name"], CLUSTER_ROLE);
        assert_eq!(
            binding["subjects"][0],
            json!({"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE})
        );
        let secret = objs.iter().find(|o| o["kind"] == "Secret").unwrap();
        assert_eq!(secret["metadata"]["annotations"]["kubernetes.io/service-account.name"], ACCOUNT);
        assert_eq!(secret["metadata"]["namespace"], NAMESPACE);
        assert!(rbac_yaml().unwrap().matches("---\n").count() == 4);
    }

    #[test]
    fn the_flat_config_names_the_kubeconfig_at_its_node_path() {
        let c = flat_conf(Path::new("/var/lib/kube-rdma-e2e/logs/whereabouts.log"));
        assert_eq!(c["datastore"], "kubernetes");
        assert_eq!(c["kubernetes"]["kubeconfig"], "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig");
        assert_eq!(c["log_file"], "/var/lib/kube-rdma-e2e/logs/whereabouts.log");
    }

    #[test]
    fn the_plugins_kubeconfig_carries_the_token_and_the_ipam_namespace() {
        let node = Node {
            admin_kubeconfig: "/a".into(),
            cni_bin: "/b".into(),
            cni_conf: "/c".into(),
            server: "https://10.213.3.2:6443".into(),
            ca_file: "/d/ca.crt".into(),
            log_file: "/e".into(),
            work_dir: "/f".into(),
        };
        let v: Value = serde_yaml::from_str(&kubeconfig(&node, "tok").unwrap()).unwrap();
        assert_eq!(v["users"][0]["user"]["token"], "tok");
        assert_eq!(v["clusters"][0]["cluster"]["server"], "https://10.213.3.2:6443");
        assert_eq!(v["contexts"][0]["context"]["namespace"], NAMESPACE);
        assert_eq!(v["current-context"], v["contexts"][0]["name"]);
    }

    #[test]
    fn the_module_dir_is_read_from_go_mod_download_and_its_error_reported() {
        let ok = r#"{"Path": "github.com/k8snetworkplumbingwg/whereabouts", "Version": "v0.9.2", "Dir": "/root/go/pkg/mod/x@v0.9.2"}"#;
        assert_eq!(module_dir_of(ok).unwrap(), PathBuf::from("/root/go/pkg/mod/x@v0.9.2"));
        let bad = r#"{"Path": "github.com/k8snetworkplumbingwg/whereabouts", "Error": "no network"}"#;
        assert!(format!("{:#}", module_dir_of(bad).unwrap_err()).contains("no network"));
        assert!(module_dir_of("").is_err());
    }

    #[test]
    fn only_the_modules_whereabouts_crds_are_applied() {
        let d = std::env::temp_dir().join(format!("wb-crds-{}", std::process::id()));
        let crds = d.join("doc/crds");
        std::fs::create_dir_all(&crds).unwrap();
        for f in [
            "whereabouts.cni.cncf.io_ippools.yaml",
            "whereabouts.cni.cncf.io_nodeslicepools.yaml",
            "daemonset-install.yaml",
            "node-slice-controller.yaml",
        ] {
            std::fs::write(crds.join(f), "").unwrap();
        }
        let names: Vec<String> = crd_files(&d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(
            names,
            ["whereabouts.cni.cncf.io_ippools.yaml", "whereabouts.cni.cncf.io_nodeslicepools.yaml"]
        );
    }
}
