//! `kubectl rdma version`: this binary's build and, as `kubectl version` adds the
//! server's, what the cluster runs: the API server's version (`GET /version`) and
//! each kube-rdma component's images, read from the DaemonSets and Deployments
//! the chart labels `app.kubernetes.io/part-of: kube-rdma`. `-o json|yaml` print
//! the same as one object, in the shape of kubectl's (`clientVersion`,
//! `serverVersion`) plus `components`.

use std::fmt::Write as _;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::view::{call, FetchError};

/// The label the chart puts on every workload it installs.
pub const PART_OF: &str = "app.kubernetes.io/part-of=kube-rdma";

/// This binary's build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientVersion {
    /// The release (`KUBE_RDMA_VERSION` at build time, else the crate's).
    pub version: String,
    /// The commit built (`unknown` for a plain `cargo build`).
    pub git_commit: String,
    /// `os/arch` in Go's words, as kubectl's `platform`.
    pub platform: String,
}

impl ClientVersion {
    /// The running binary's.
    pub fn this_binary() -> Self {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        ClientVersion {
            version: plumbing::VERSION.to_string(),
            git_commit: plumbing::GIT_COMMIT.to_string(),
            platform: format!("{}/{arch}", std::env::consts::OS),
        }
    }
}

/// One kube-rdma workload in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Component {
    /// `app.kubernetes.io/component` (agent, controller, device-plugin), else the name.
    pub component: String,
    /// `DaemonSet` or `Deployment`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The image of each container, in order.
    pub images: Vec<String>,
    /// The tag (or digest) of the first container's image: the version it runs.
    pub version: String,
    /// Pods ready / desired, as `kubectl get` shows READY.
    pub ready: String,
}

/// What `version` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub client_version: ClientVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_version: Option<Info>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<Component>>,
}

/// The version an image reference names: its tag, else its digest, else `latest`
/// (what the runtime pulls for a bare name).
pub fn image_version(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match (last.rsplit_once(':'), digest) {
        (Some((_, tag)), _) => tag,
        (None, Some(d)) => d,
        (None, None) => "latest",
    }
}

fn component(kind: &str, meta: &impl ResourceExt, images: Vec<String>, ready: String) -> Component {
    let labels = meta.labels();
    Component {
        component: labels.get("app.kubernetes.io/component").cloned().unwrap_or_else(|| meta.name_any()),
        kind: kind.into(),
        namespace: meta.namespace().unwrap_or_default(),
        name: meta.name_any(),
        version: images.first().map(|i| image_version(i).to_string()).unwrap_or_default(),
        images,
        ready,
    }
}

fn images(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<String> {
    spec.map(|s| s.containers.iter().filter_map(|c| c.image.clone()).collect()).unwrap_or_default()
}

/// A DaemonSet as a [`Component`].
pub fn from_daemonset(ds: &DaemonSet) -> Component {
    let st = ds.status.as_ref();
    let ready =
        format!("{}/{}", st.map_or(0, |s| s.number_ready), st.map_or(0, |s| s.desired_number_scheduled));
    component("DaemonSet", ds, images(ds.spec.template.spec.as_ref()), ready)
}

/// A Deployment as a [`Component`].
pub fn from_deployment(d: &Deployment) -> Component {
    let st = d.status.as_ref();
    let ready =
        format!("{}/{}", st.and_then(|s| s.ready_replicas).unwrap_or(0), d.spec.replicas.unwrap_or(1));
    component("Deployment", d, images(d.spec.template.spec.as_ref()), ready)
}

/// The API server's version and the kube-rdma workloads in `namespace` (all
/// namespaces when `None`), sorted by component, namespace and name.
pub async fn fetch(
    client: Client,
    namespace: Option<&str>,
    timeout: Option<std::time::Duration>,
) -> Result<(Info, Vec<Component>), FetchError> {
    let server = call("get /version".into(), timeout, client.apiserver_version()).await?;
    let lp = ListParams::default().labels(PART_OF);
    let (ds, deploy): (Api<DaemonSet>, Api<Deployment>) = match namespace {
        Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client, ns)),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let mut out: Vec<Component> = call("list daemonsets".into(), timeout, ds.list(&lp))
        .await?
        .items
        .iter()
        .map(from_daemonset)
        .collect();
    out.extend(
        call("list deployments".into(), timeout, deploy.list(&lp)).await?.items.iter().map(from_deployment),
    );
    out.sort_by(|a, b| (&a.component, &a.namespace, &a.name).cmp(&(&b.component, &b.namespace, &b.name)));
    Ok((server, out))
}

/// The text form: kubectl's `Client Version:` / `Server Version:` lines, then a
/// table of the components (or why there is none).
pub fn text(v: &Version) -> String {
    let c = &v.client_version;
    let mut out = format!("Client Version: {} (git commit {}, {})\n", c.version, c.git_commit, c.platform);
    if let Some(s) = &v.server_version {
        let _ = writeln!(out, "Server Version: {}", s.git_version);
    }
    match v.components.as_deref() {
        None => {}
        Some([]) => {
            let _ = writeln!(
                out,
                "kube-rdma components: none found (no DaemonSet or Deployment labelled {PART_OF})"
            );
        }
        Some(list) => {
            let rows: Vec<[String; 6]> = list
                .iter()
                .map(|c| {
                    [
                        c.component.clone(),
                        c.namespace.clone(),
                        format!("{}/{}", c.kind.to_lowercase(), c.name),
                        c.ready.clone(),
                        c.version.clone(),
                        c.images.join(","),
                    ]
                })
                .collect();
            out.push_str("kube-rdma components:\n");
            let table = super::view::table(
                &["COMPONENT", "NAMESPACE", "WORKLOAD", "READY", "VERSION", "IMAGES"],
                &rows,
            );
            for l in table.lines() {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_s_version_is_its_tag_else_its_digest_else_latest() {
        assert_eq!(image_version("ghcr.io/acme/kube-rdma:0.1.0"), "0.1.0");
        assert_eq!(image_version("localhost:5000/kube-rdma:dev"), "dev");
        assert_eq!(image_version("localhost:5000/kube-rdma"), "latest");
        assert_eq!(image_version("kube-rdma@sha256:abcd"), "sha256:abcd");
        assert_eq!(image_version("kube-rdma:0.2@sha256:abcd"), "0.2");
    }

    #[test]
    fn workloads_show_their_component_images_and_readiness() {
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kr-agent", "namespace": "kube-rdma",
                         "labels": {"app.kubernetes.io/component": "agent"}},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a", "image": "r/kube-rdma:0.1.0"}]}}},
            "status": {"numberReady": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                       "numberMisscheduled": 0}
        }))
        .unwrap();
        let c = from_daemonset(&ds);
        assert_eq!(
            (c.component.as_str(), c.version.as_str(), c.ready.as_str(), c.kind.as_str()),
            ("agent", "0.1.0", "2/3", "DaemonSet")
        );
        let v = Version {
            client_version: ClientVersion {
                version: "0.1.0".into(),
                git_commit: "abc".into(),
                platform: "linux/amd64".into(),
            },
            server_version: Some(Info { git_version: "v1.34.4".into(), ..Default::default() }),
            components: Some(vec![c]),
        };
        let t = text(&v);
        assert!(
            t.starts_with("Client Version: 0.1.0 (git commit abc, linux/amd64)\nServer Version: v1.34.4\n"),
            "{t}"
        );
        assert!(
            t.contains("  agent      kube-rdma  daemonset/kr-agent  2/3    0.1.0    r/kube-rdma:0.1.0"),
            "{t}"
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["serverVersion"]["gitVersion"], "v1.34.4");
        assert_eq!(json["clientVersion"]["gitCommit"], "abc");
        assert_eq!(json["components"][0]["images"][0], "r/kube-rdma:0.1.0");
    }
}
