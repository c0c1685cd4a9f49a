//! DRA test fixtures: a real etcd + kube-apiserver v1.34.4 (or 1.36's,
//! [`Plane`]; [`kube_rdma_e2e::ApiServer`], resource.k8s.io/v1 served as GA) with the
//! chart's ServiceAccount and RBAC for the driver, the real
//! `kube-rdma-device-plugin dra` binary run with that account's token, and a
//! fake kubelet that does what the kubelet's plugin watcher and DRA manager
//! do: GetInfo on the registration socket, pick a service from
//! `supported_versions`, NotifyRegistrationStatus, dial the endpoint (sending
//! `:authority localhost`, as kubelets >= 1.26 do on unix sockets), call
//! NodePrepareResources / NodeUnprepareResources and NodeWatchResources,
//! and delete the node's ResourceSlices as a restarting kubelet does; its
//! PodResources API is device plugin mode's fake ([`common::FakePodResources`]),
//! serving what the test assigns (nothing, by default) as a kubelet always does.
//!
//! What the driver asked the server is read from kube-apiserver's own audit
//! log; faults are the server's own where it can make them (see [`faults`]).
#![allow(dead_code)]

#[path = "../common/mod.rs"]
pub mod common;
pub mod faults;

/// The driver's `/healthz`, `/livez` and `/metrics` are read as device plugin mode's are.
#[allow(unused_imports)] // as `dead_code` above: not every test binary reads them
pub use common::stuck::http_get;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube_rdma_device_plugin::dra::api::health::dra_resource_health_client::DraResourceHealthClient;
use kube_rdma_device_plugin::dra::api::health::{NodeWatchResourcesRequest, NodeWatchResourcesResponse};
use kube_rdma_device_plugin::dra::api::registration::registration_client::RegistrationClient;
use kube_rdma_device_plugin::dra::api::registration::{InfoRequest, PluginInfo, RegistrationStatus};
use kube_rdma_device_plugin::dra::api::{v1, v1beta1};
use kube_rdma_device_plugin::kubelet;
use kube_rdma_e2e::apiserver::{ApiServer, Options, PlaneSlot};
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::Streaming;

pub const T: Duration = Duration::from_secs(10);
/// How long to wait for the API to show what the driver did (two control
/// planes and their drivers share two cores).
pub const WAIT: Duration = Duration::from_secs(60);
pub const DRIVER: &str = "rdma.kuberdma.io";
/// The chart's namespace and the driver's ServiceAccount in it.
pub const NAMESPACE: &str = "kube-rdma";
pub const SERVICE_ACCOUNT: &str = "kube-rdma-device-plugin";
/// The user the driver's token authenticates as.
pub const DRIVER_USER: &str = "system:serviceaccount:kube-rdma:kube-rdma-device-plugin";

/// Every request to the DRA and kuberdma.io groups, once answered (the
/// `ResponseComplete` stage; watches also log `ResponseStarted`).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: resource.k8s.io}, {group: kuberdma.io}]
- level: None
";

/// The simulated nodes shipped in the repo.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(name)
}

/// The driver's ServiceAccount, ClusterRole and ClusterRoleBinding as the
/// chart renders them with `dra.enabled` for Kubernetes 1.34 (Helm's engine,
/// scripts/delivery/chart.py; `scripts/setup-deps` installs it).
pub fn chart_rbac() -> &'static [Value] {
    static RBAC: OnceLock<Vec<Value>> = OnceLock::new();
    RBAC.get_or_init(|| chart_rbac_for("1.34.0"))
}

/// As [`chart_rbac`], rendered for the cluster version `kube_version` (the
/// chart grants by `.Capabilities.KubeVersion`).
pub fn chart_rbac_for(kube_version: &str) -> Vec<Value> {
    let rbac =
        chart_device_plugin_objects(kube_version, &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]);
    let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds.len(), 3, "the driver's ServiceAccount, ClusterRole and binding: {kinds:?}");
    rbac
}

/// The chart's device plugin objects of `kinds`, rendered with `dra.enabled`
/// for the cluster version `kube_version` (Helm's engine,
/// scripts/delivery/chart.py; `scripts/setup-deps` installs it).
pub fn chart_device_plugin_objects(kube_version: &str, kinds: &[&str]) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/delivery");
    let py = format!(
        "import json, sys; sys.path.insert(0, {d:?}); import chart\n\
         v = chart.load_values(chart.CHART_DIR / 'values.yaml'); v['dra']['enabled'] = True\n\
         print(json.dumps(chart.objects(chart.render(v, kube_version={kube_version:?}))))",
        d = dir.display().to_string(),
    );
    let o = std::process::Command::new("python3").args(["-c", &py]).output().expect("run python3");
    assert!(
        o.status.success(),
        "rendering the chart (scripts/setup-deps installs Helm's engine): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let objs: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    objs.into_iter()
        .filter(|o| {
            o["kind"].as_str().is_some_and(|k| kinds.contains(&k))
                && o["metadata"]["labels"]["app.kubernetes.io/component"] == "device-plugin"
        })
        .collect()
}

/// Which control plane an [`Env`] runs, and the driver's RBAC and token on it.
pub struct Plane {
    /// A kube-apiserver of another version (`peers::bin("kube-apiserver-1.36")`);
    /// `None`: the pinned one.
    pub apiserver_bin: Option<PathBuf>,
    /// The driver's RBAC, as the chart renders it for this cluster version.
    pub rbac: Vec<Value>,
    /// The driver's token bound to a Pod on the node, as the DaemonSet's projected
    /// token is (the API server then knows the token's node); else a plain one.
    pub token_of_a_pod_on_the_node: bool,
}

impl Default for Plane {
    fn default() -> Self {
        Plane { apiserver_bin: None, rbac: chart_rbac().to_vec(), token_of_a_pod_on_the_node: false }
    }
}

/// The API resource behind a short name the tests use.
pub fn resource(name: &str) -> ApiResource {
    let (g, v, k, plural) = match name {
        "nodes" => ("", "v1", "Node", "nodes"),
        "configmaps" => ("", "v1", "ConfigMap", "configmaps"),
        "resourceslices" => ("resource.k8s.io", "v1", "ResourceSlice", "resourceslices"),
        "resourceclaims" => ("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"),
        "rdmanodestates" => ("kuberdma.io", "v1alpha1", "RdmaNodeState", "rdmanodestates"),
        other => panic!("no resource {other} in the fixtures"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
}

/// A client for `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    kube::Client::try_from(config_for(kubeconfig).await).unwrap()
}

/// The client configuration `kubeconfig` gives (kube's default: 429, 503
/// and 504 are retried, honouring Retry-After).
pub async fn config_for(kubeconfig: &Path) -> kube::Config {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()
}

/// `kubectl apply --server-side` of `objs` as the admin.
pub fn kubectl_apply(api: &ApiServer, dir: &Path, objs: &[Value]) {
    let path = dir.join("apply.json");
    std::fs::write(
        &path,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objs})).unwrap(),
    )
    .unwrap();
    let o = api
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&o.stderr));
}

/// One driver's world: a control plane of its own, temp dirs and the node.
pub struct Env {
    /// The control plane (stopped when the Env goes).
    pub api: ApiServer,
    /// The admin's client, for the test's own reads and writes.
    pub client: kube::Client,
    /// The driver's kubeconfig: its ServiceAccount's token.
    pub driver_kubeconfig: PathBuf,
    pub tmp: tempfile::TempDir,
    pub node: String,
    pub registry: PathBuf,
    pub plugins: PathBuf,
    pub cdi: PathBuf,
    pub prepared: PathBuf,
    pub roots: nic::Roots,
    /// The kubelet's PodResources (device plugin mode's assignments).
    pub pod_resources: common::FakePodResources,
    audit_log: PathBuf,
    _slot: PlaneSlot,
}

impl Env {
    /// A control plane holding `node` (a Node object), and the driver's dirs.
    pub async fn new(node: &str, roots: nic::Roots) -> Self {
        Self::with_args(node, roots, &[]).await
    }

    /// As [`Env::new`], kube-apiserver started with `args` too.
    pub async fn with_args(node: &str, roots: nic::Roots, args: &[&str]) -> Self {
        Self::with_plane(node, roots, args, Plane::default()).await
    }

    /// As [`Env::new`], on Kubernetes 1.36's kube-apiserver (checked: the server
    /// says so) with `rbac`, the driver's token bound to a pod on `node`.
    pub async fn on_kubernetes_1_36(node: &str, roots: nic::Roots, rbac: Vec<Value>) -> Self {
        let plane = Plane {
            apiserver_bin: Some(kube_rdma_e2e::peers::bin("kube-apiserver-1.36")),
            rbac,
            token_of_a_pod_on_the_node: true,
        };
        let env = Self::with_plane(node, roots, &[], plane).await;
        let version =
            tokio::task::block_in_place(|| env.api.kubectl().args(["version", "-o", "json"]).output())
                .unwrap();
        let version: Value = serde_json::from_slice(&version.stdout).unwrap();
        assert_eq!(version["serverVersion"]["minor"], "36", "{version}");
        env
    }

    /// As [`Env::with_args`], on the control plane `plane` says.
    pub async fn with_plane(node: &str, roots: nic::Roots, args: &[&str], plane: Plane) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let policy = tmp.path().join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY).unwrap();
        let audit_log = tmp.path().join("audit.log");
        let mut extra = vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
        ];
        extra.extend(args.iter().map(|a| a.to_string()));
        let (slot, api, token) = tokio::task::block_in_place(|| {
            let slot = PlaneSlot::take();
            let opts =
                Options { extra_args: extra, apiserver_bin: plane.apiserver_bin, ..Options::default() };
            let api = ApiServer::start_with(opts).unwrap_or_else(|e| panic!("control plane: {e:#}"));
            let mut objs =
                vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})];
            objs.extend(plane.rbac.iter().cloned());
            let pod = format!("driver-on-{node}");
            if plane.token_of_a_pod_on_the_node {
                // The DaemonSet's pod, as far as the token needs it: bound to the node.
                objs.push(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "namespace": NAMESPACE},
                    "spec": {"nodeName": node, "serviceAccountName": SERVICE_ACCOUNT,
                             "containers": [{"name": "driver", "image": "kube-rdma:test"}]}}));
            }
            kubectl_apply(&api, tmp.path(), &objs);
            let bound = plane.token_of_a_pod_on_the_node.then_some(("Pod", pod.as_str()));
            let token = api
                .service_account_token(NAMESPACE, SERVICE_ACCOUNT, bound)
                .unwrap_or_else(|e| panic!("the driver's token: {e:#}"));
            (slot, api, token)
        });
        let driver_kubeconfig = api.token_kubeconfig(SERVICE_ACCOUNT, &token).unwrap();
        let client = client_for(&api.kubeconfig()).await;
        let registry = tmp.path().join("plugins_registry");
        let plugins = tmp.path().join("plugins");
        std::fs::create_dir_all(&registry).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        let prepared = plugins.join(DRIVER).join("prepared");
        let pod_resources = common::FakePodResources::start(&tmp.path().join("pod-resources/kubelet.sock"));
        let env = Env {
            pod_resources,
            api,
            client,
            driver_kubeconfig,
            cdi: tmp.path().join("cdi"),
            tmp,
            node: node.into(),
            registry,
            plugins,
            prepared,
            roots,
            audit_log,
            _slot: slot,
        };
        env.create("nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})).await;
        env
    }

    pub fn reg_socket(&self) -> PathBuf {
        self.registry.join(format!("{DRIVER}-reg.sock"))
    }

    pub fn dra_socket(&self) -> PathBuf {
        self.plugins.join(DRIVER).join("dra.sock")
    }

    /// The real binary in DRA mode, configured as the chart configures it
    /// (its ServiceAccount's token; here through a kubeconfig).
    pub fn command(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"));
        c.arg("dra")
            .arg("--node-name")
            .arg(&self.node)
            .arg("--plugins-registry-dir")
            .arg(&self.registry)
            .arg("--plugins-dir")
            .arg(&self.plugins)
            .arg("--cdi-dir")
            .arg(&self.cdi)
            .arg("--sysfs-root")
            .arg(&self.roots.sysfs)
            .arg("--dev-root")
            .arg(&self.roots.dev)
            .arg("--no-link-events")
            .arg("--pod-resources-socket")
            .arg(&self.pod_resources.socket)
            .env("KUBECONFIG", &self.driver_kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", std::env::var("DRA_LOG").unwrap_or_else(|_| "info".into()))
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Starts the driver; its stderr is collected into [`Driver::log`].
    pub fn spawn(&self, extra: &[&str]) -> Driver {
        let mut c = self.command();
        c.args(extra);
        Driver::spawn(c)
    }

    fn api_of(&self, res: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = resource(res);
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Creates `obj` (a `res`), as the admin; returns it as stored.
    pub async fn create(&self, res: &str, obj: Value) -> Value {
        let ns = obj["metadata"]["namespace"].as_str().map(String::from);
        let o: DynamicObject = serde_json::from_value(obj).unwrap();
        let created = self
            .api_of(res, ns.as_deref())
            .create(&PostParams::default(), &o)
            .await
            .unwrap_or_else(|e| panic!("create {res}: {e}"));
        serde_json::to_value(created).unwrap()
    }

    pub async fn get(&self, res: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let o = self.api_of(res, ns).get_opt(name).await.unwrap_or_else(|e| panic!("get {res} {name}: {e}"));
        o.map(|o| serde_json::to_value(o).unwrap())
    }

    pub async fn list(&self, res: &str) -> Vec<Value> {
        let l = self
            .api_of(res, None)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list {res}: {e}"));
        l.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect()
    }

    pub async fn delete(&self, res: &str, ns: Option<&str>, name: &str) {
        self.api_of(res, ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {res} {name}: {e}"));
    }

    /// Merge-patches the status subresource with `status`.
    pub async fn patch_status(&self, res: &str, ns: Option<&str>, name: &str, status: Value) -> Value {
        let o = self
            .api_of(res, ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap_or_else(|e| panic!("patch {res}/{name}/status: {e}"));
        serde_json::to_value(o).unwrap()
    }

    /// Reads `res/name`, changes it with `f` and writes it back (a replace
    /// with its resourceVersion): a writer racing the driver, which retries
    /// when the server answers 409 Conflict. Returns how many 409s it got.
    pub async fn update(&self, res: &str, ns: Option<&str>, name: &str, f: impl Fn(&mut Value)) -> usize {
        let api = self.api_of(res, ns);
        for conflicts in 0..20 {
            let mut v = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
            f(&mut v);
            let o: DynamicObject = serde_json::from_value(v).unwrap();
            match api.replace(name, &PostParams::default(), &o).await {
                Ok(_) => return conflicts,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => panic!("replace {res} {name}: {e}"),
            }
        }
        panic!("replace {res} {name}: 20 conflicts in a row");
    }

    /// Waits until `res/name` satisfies `pred`; returns it.
    pub async fn wait_for(
        &self,
        res: &str,
        ns: Option<&str>,
        name: &str,
        what: &str,
        pred: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let v = self.get(res, ns, name).await;
            if pred(v.as_ref()) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}; {res}/{name} is {:#}", json!(v));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// This node's ResourceSlices of our driver, by name.
    pub async fn slices(&self) -> Vec<Value> {
        let mut v: Vec<Value> = self
            .list("resourceslices")
            .await
            .into_iter()
            .filter(|s| s["spec"]["driver"] == DRIVER && s["spec"]["nodeName"] == self.node.as_str())
            .collect();
        v.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
        v
    }

    /// Waits until the published slices satisfy `pred`.
    pub async fn wait_slices(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.wait_slices_within(what, WAIT, pred).await
    }

    pub async fn wait_slices_within(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let v = self.slices().await;
            if pred(&v) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for slices: {what}; have {:#}", json!(v));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes every ResourceSlice of the node, as the kubelet does when it starts.
    pub async fn wipe_slices(&self) -> usize {
        let slices = self.slices().await;
        for s in &slices {
            self.delete("resourceslices", None, s["metadata"]["name"].as_str().unwrap()).await;
        }
        slices.len()
    }

    /// Creates a ResourceClaim allocated on this node (`results`: request,
    /// driver, device) and reserved for pod `pod_uid`; returns its UID.
    pub async fn create_claim(
        &self,
        name: &str,
        results: &[(&str, &str, &str)],
        config: Value,
        pod_uid: &str,
    ) -> String {
        // One request per name, asking for as many devices as it was allocated.
        let mut requests: Vec<(&str, usize)> = Vec::new();
        for (req, _, _) in results {
            match requests.iter_mut().find(|(r, _)| r == req) {
                Some((_, n)) => *n += 1,
                None => requests.push((req, 1)),
            }
        }
        let requests: Vec<Value> = requests
            .iter()
            .map(|(req, n)| {
                json!({"name": req, "exactly": {"deviceClassName": "rdma.kuberdma.io",
                                                "allocationMode": "ExactCount", "count": n}})
            })
            .collect();
        self.create_claim_with_requests(name, json!(requests), results, config, pod_uid).await
    }

    /// Like [`Env::create_claim`] with the claim's own `spec.devices.requests`
    /// (`firstAvailable` lists, say; the results then name `req/sub`). The
    /// allocation is written to the status subresource, as the scheduler does.
    pub async fn create_claim_with_requests(
        &self,
        name: &str,
        requests: Value,
        results: &[(&str, &str, &str)],
        config: Value,
        pod_uid: &str,
    ) -> String {
        let results: Vec<Value> = results
            .iter()
            .map(|(req, driver, dev)| json!({"request": req, "driver": driver, "pool": self.node, "device": dev}))
            .collect();
        let obj = self
            .create(
                "resourceclaims",
                json!({
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": "default",
                                 "annotations": {"resource.kubernetes.io/pod-claim-name": "rdma"}},
                    "spec": {"devices": {"requests": requests}},
                }),
            )
            .await;
        self.patch_status(
            "resourceclaims",
            Some("default"),
            name,
            json!({
                // The scheduler's node selector for devices of a node-local pool
                // (kube-apiserver >= 1.36 reads the claim's node from it).
                "allocation": {"devices": {"results": results, "config": config},
                               "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                   {"key": "metadata.name", "operator": "In", "values": [self.node]}]}]}},
                "reservedFor": [{"resource": "pods", "name": format!("pod-{pod_uid}"), "uid": pod_uid}],
            }),
        )
        .await;
        obj["metadata"]["uid"].as_str().unwrap().to_string()
    }

    pub async fn claim(&self, name: &str) -> Value {
        self.get("resourceclaims", Some("default"), name).await.expect("claim exists")
    }

    /// kube-apiserver's audit events so far (answered requests), oldest first.
    pub fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .collect()
    }

    /// The driver's requests among `events`, as `"<verb> <resource>[/<sub>] <name>"`.
    pub fn driver_requests(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .filter(|e| e["user"]["username"] == DRIVER_USER)
            .map(|e| {
                let r = &e["objectRef"];
                let sub = r["subresource"].as_str().map(|s| format!("/{s}")).unwrap_or_default();
                format!(
                    "{} {}{sub} {} {}",
                    e["verb"].as_str().unwrap_or(""),
                    r["resource"].as_str().unwrap_or(""),
                    r["name"].as_str().unwrap_or(""),
                    e["responseStatus"]["code"]
                )
            })
            .collect()
    }

    /// GET requests the driver made for claim `name`, as kube-apiserver
    /// logged them (after a moment for the last answer's audit event).
    pub async fn claim_reads(&self, name: &str) -> usize {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.audit()
            .iter()
            .filter(|e| {
                e["user"]["username"] == DRIVER_USER
                    && e["verb"] == "get"
                    && e["objectRef"]["resource"] == "resourceclaims"
                    && e["objectRef"]["name"] == name
            })
            .count()
    }

    /// Our CRDs (charts/kube-rdma/crds/crds.yaml), applied and established.
    pub fn apply_crds(&self) {
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kube-rdma/crds/crds.yaml");
        let o = self.api.kubectl().args(["apply", "--server-side", "-f"]).arg(&crds).output().unwrap();
        assert!(o.status.success(), "applying the CRDs: {}", String::from_utf8_lossy(&o.stderr));
        let o = self
            .api
            .kubectl()
            .args(["wait", "--for=condition=Established", "--timeout=60s", "crd/rdmanodestates.kuberdma.io"])
            .output()
            .unwrap();
        assert!(o.status.success(), "CRD established: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// The running driver process.
pub struct Driver {
    pub child: tokio::process::Child,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Driver {
    /// Runs `c` (built with [`Env::command`]), collecting its stderr.
    pub fn spawn(mut c: tokio::process::Command) -> Self {
        let mut child = c.spawn().expect("spawn kube-rdma-device-plugin dra");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                sink.lock().unwrap().push_str(&l);
                sink.lock().unwrap().push('\n');
            }
        });
        Driver { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str) {
        self.wait_log_within(needle, T).await;
    }

    /// Waits up to `within` until the log contains `needle`.
    pub async fn wait_log_within(&self, needle: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.log().contains(needle) {
            if tokio::time::Instant::now() > deadline {
                panic!("no {needle:?} in the driver's log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The address `--metrics-addr 127.0.0.1:0` was bound to (from the log).
    pub async fn metrics_addr(&self) -> String {
        self.wait_log("metrics listening").await;
        let log = self.log();
        let at = log.find("metrics listening").unwrap();
        let rest = &log[at..];
        let from = rest.find("local=").expect("local= in the log line") + "local=".len();
        rest[from..].split_whitespace().next().unwrap().to_string()
    }

    /// SIGTERM, and the exit status.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running") as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM).unwrap();
        tokio::time::timeout(T, self.child.wait()).await.expect("stops in time").unwrap()
    }
}

/// A gRPC channel to a unix socket as the kubelet dials it (`:authority localhost`).
pub async fn dial(path: &Path) -> Channel {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if path.exists() {
            if let Ok(ch) = kubelet::connect_unix(path).await {
                return ch;
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("cannot connect to {}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the kubelet keeps after registering a DRA plugin.
pub struct Plugin {
    pub info: PluginInfo,
    pub v1: v1::dra_plugin_client::DraPluginClient<Channel>,
    pub v1beta1: v1beta1::dra_plugin_client::DraPluginClient<Channel>,
    pub health: DraResourceHealthClient<Channel>,
}

/// The services this fake kubelet speaks, newest first (pkg/kubelet/cm/dra/plugin:
/// `servicesSupportedByKubelet`).
pub const KUBELET_SERVICES: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// Does what the plugin watcher and DRA manager do with a new registration socket.
pub async fn register(reg_socket: &Path) -> Plugin {
    let mut reg = RegistrationClient::new(dial(reg_socket).await);
    let info = reg.get_info(InfoRequest {}).await.expect("GetInfo").into_inner();
    let chosen = info.supported_versions.iter().find(|v| KUBELET_SERVICES.contains(&v.as_str()));
    let (ok, error) = match (info.r#type.as_str(), chosen) {
        ("DRAPlugin", Some(_)) => (true, String::new()),
        (t, c) => (false, format!("type {t:?}, services {:?} (chosen {c:?})", info.supported_versions)),
    };
    reg.notify_registration_status(RegistrationStatus { plugin_registered: ok, error: error.clone() })
        .await
        .expect("NotifyRegistrationStatus");
    assert!(ok, "the fake kubelet refused the plugin: {error}");
    let ch = dial(Path::new(&info.endpoint)).await;
    Plugin {
        info,
        v1: v1::dra_plugin_client::DraPluginClient::new(ch.clone()),
        v1beta1: v1beta1::dra_plugin_client::DraPluginClient::new(ch.clone()),
        health: DraResourceHealthClient::new(ch),
    }
}

/// The CDI devices the kubelet hands a container whose `resources.claims[]`
/// entry names `request` (empty: the whole claim), from a claim's prepare
/// answer: pkg/kubelet/cm/dra/claiminfo.go `cdiDevicesAsList`, which keeps a
/// device when the container names no request, the device names none, or
/// its `request_names` contain the container's.
pub fn kubelet_cdi_devices(answer: &v1::NodePrepareResourceResponse, request: &str) -> Vec<String> {
    answer
        .devices
        .iter()
        .filter(|d| {
            request.is_empty() || d.request_names.is_empty() || d.request_names.iter().any(|r| r == request)
        })
        .flat_map(|d| d.cdi_device_ids.iter().cloned())
        .collect()
}

pub fn claim_ref(name: &str, uid: &str) -> v1::Claim {
    v1::Claim { namespace: "default".into(), uid: uid.into(), name: name.into() }
}

impl Plugin {
    pub async fn prepare(&mut self, claims: Vec<v1::Claim>) -> v1::NodePrepareResourcesResponse {
        self.v1
            .node_prepare_resources(v1::NodePrepareResourcesRequest { claims })
            .await
            .expect("NodePrepareResources")
            .into_inner()
    }

    pub async fn unprepare(&mut self, claims: Vec<v1::Claim>) -> v1::NodeUnprepareResourcesResponse {
        self.v1
            .node_unprepare_resources(v1::NodeUnprepareResourcesRequest { claims })
            .await
            .expect("NodeUnprepareResources")
            .into_inner()
    }

    pub async fn watch_health(&mut self) -> Streaming<NodeWatchResourcesResponse> {
        self.health
            .node_watch_resources(NodeWatchResourcesRequest {})
            .await
            .expect("NodeWatchResources")
            .into_inner()
    }
}

/// Reads the health stream until `pred` holds.
pub async fn wait_health(
    s: &mut Streaming<NodeWatchResourcesResponse>,
    what: &str,
    pred: impl Fn(&NodeWatchResourcesResponse) -> bool,
) -> NodeWatchResourcesResponse {
    let deadline = tokio::time::Instant::now() + T;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, s.message()).await {
            Ok(Ok(Some(m))) => {
                if pred(&m) {
                    return m;
                }
                last = Some(m);
            }
            Ok(other) => panic!("health stream ended while waiting for {what}: {other:?}"),
            Err(_) => panic!("timed out waiting for {what}; last: {last:?}"),
        }
    }
}
