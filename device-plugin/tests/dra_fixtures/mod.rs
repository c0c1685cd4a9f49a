//! DRA test fixtures: the API emulator (real HTTP + TLS through a
//! kubeconfig), the real `kube-rdma-device-plugin dra` binary, and a fake
//! kubelet that does what the kubelet's plugin watcher and DRA manager do:
//! GetInfo on the registration socket, pick a service from
//! `supported_versions`, NotifyRegistrationStatus, dial the endpoint (sending
//! `:authority localhost`, as kubelets >= 1.26 do on unix sockets), call
//! NodePrepareResources / NodeUnprepareResources and NodeWatchResources,
//! and delete the node's ResourceSlices as a restarting kubelet does.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_rdma_apiemu::Emulator;
use kube_rdma_device_plugin::dra::api::health::dra_resource_health_client::DraResourceHealthClient;
use kube_rdma_device_plugin::dra::api::health::{NodeWatchResourcesRequest, NodeWatchResourcesResponse};
use kube_rdma_device_plugin::dra::api::registration::registration_client::RegistrationClient;
use kube_rdma_device_plugin::dra::api::registration::{InfoRequest, PluginInfo, RegistrationStatus};
use kube_rdma_device_plugin::dra::api::{v1, v1beta1};
use kube_rdma_device_plugin::kubelet;
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::Streaming;

pub const T: Duration = Duration::from_secs(10);
pub const DRIVER: &str = "rdma.kuberdma.io";

/// The simulated nodes shipped in the repo.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(name)
}

/// One driver's world: emulator, temp dirs and the node.
pub struct Env {
    pub emu: Emulator,
    pub tmp: tempfile::TempDir,
    pub node: String,
    pub registry: PathBuf,
    pub plugins: PathBuf,
    pub cdi: PathBuf,
    pub prepared: PathBuf,
    pub roots: nic::Roots,
}

impl Env {
    /// An emulator holding `node` (a Node object), and the driver's dirs.
    pub async fn new(node: &str, roots: nic::Roots) -> Self {
        let emu = Emulator::builder().start().await.expect("start the API emulator");
        emu.store()
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
            .expect("create the Node");
        let tmp = tempfile::tempdir().unwrap();
        let registry = tmp.path().join("plugins_registry");
        let plugins = tmp.path().join("plugins");
        std::fs::create_dir_all(&registry).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        let prepared = plugins.join(DRIVER).join("prepared");
        Env { emu, cdi: tmp.path().join("cdi"), tmp, node: node.into(), registry, plugins, prepared, roots }
    }

    pub fn reg_socket(&self) -> PathBuf {
        self.registry.join(format!("{DRIVER}-reg.sock"))
    }

    pub fn dra_socket(&self) -> PathBuf {
        self.plugins.join(DRIVER).join("dra.sock")
    }

    /// The real binary in DRA mode, configured as the chart configures it.
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
            .env("KUBECONFIG", self.emu.kubeconfig_path())
            .env("RUST_LOG", "info")
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

    /// This node's ResourceSlices of our driver, by name.
    pub fn slices(&self) -> Vec<Value> {
        let mut v: Vec<Value> = self
            .emu
            .store()
            .list("resourceslices", None)
            .unwrap()
            .into_iter()
            .filter(|s| s["spec"]["driver"] == DRIVER && s["spec"]["nodeName"] == self.node.as_str())
            .collect();
        v.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
        v
    }

    /// Waits until the published slices satisfy `pred`.
    pub async fn wait_slices(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let node = self.node.clone();
        let r = self
            .emu
            .store()
            .wait_until(T, |s| {
                let mut v: Vec<Value> = s
                    .list("resourceslices", None)
                    .ok()?
                    .into_iter()
                    .filter(|s| s["spec"]["driver"] == DRIVER && s["spec"]["nodeName"] == node.as_str())
                    .collect();
                v.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
                pred(&v).then_some(v)
            })
            .await;
        match r {
            Ok(v) => v,
            Err(_) => panic!("timed out waiting for slices: {what}; have {:#}", json!(self.slices())),
        }
    }

    /// Deletes every ResourceSlice of the node, as the kubelet does when it starts.
    pub fn wipe_slices(&self) -> usize {
        let slices = self.slices();
        for s in &slices {
            self.emu.store().delete("resourceslices", None, s["metadata"]["name"].as_str().unwrap()).unwrap();
        }
        slices.len()
    }

    /// Creates a ResourceClaim allocated on this node (`results`: request,
    /// driver, device) and reserved for pod `pod_uid`; returns its UID.
    pub fn create_claim(
        &self,
        name: &str,
        results: &[(&str, &str, &str)],
        config: Value,
        pod_uid: &str,
    ) -> String {
        let requests: Vec<Value> = results
            .iter()
            .map(|(req, _, _)| json!({"name": req, "exactly": {"deviceClassName": "rdma.kuberdma.io"}}))
            .collect();
        self.create_claim_with_requests(name, json!(requests), results, config, pod_uid)
    }

    /// Like [`Env::create_claim`] with the claim's own `spec.devices.requests`
    /// (`firstAvailable` lists, say; the results then name `req/sub`).
    pub fn create_claim_with_requests(
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
            .emu
            .store()
            .create(json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default",
                             "annotations": {"resource.kubernetes.io/pod-claim-name": "rdma"}},
                "spec": {"devices": {"requests": requests}},
                "status": {
                    "allocation": {"devices": {"results": results, "config": config}},
                    "reservedFor": [{"resource": "pods", "name": format!("pod-{pod_uid}"), "uid": pod_uid}],
                }
            }))
            .expect("create the claim");
        obj["metadata"]["uid"].as_str().unwrap().to_string()
    }

    pub fn claim(&self, name: &str) -> Value {
        self.emu.store().get("resourceclaims", Some("default"), name).unwrap().expect("claim exists")
    }

    /// GET requests the emulator saw for claim `name`.
    pub fn claim_reads(&self, name: &str) -> usize {
        let path = format!("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}");
        self.emu.log().records().iter().filter(|r| r.method == "GET" && r.path == path).count()
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

/// An API server that hangs: a TCP listener that accepts every connection
/// and never answers (nor closes), as a wedged kube-apiserver or a
/// black-holed path through a load balancer looks to a client.
pub struct HungApiServer {
    pub addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl HungApiServer {
    pub async fn start() -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        HungApiServer { addr, task }
    }

    /// `template` (a kubeconfig) with every cluster's server pointing here,
    /// written to `path`.
    pub fn kubeconfig(&self, template: &Path, path: &Path) -> PathBuf {
        let mut kc: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(template).unwrap()).unwrap();
        for c in kc["clusters"].as_sequence_mut().unwrap() {
            c["cluster"]["server"] = format!("https://{}", self.addr).into();
        }
        std::fs::write(path, serde_yaml::to_string(&kc).unwrap()).unwrap();
        path.to_path_buf()
    }
}

impl Drop for HungApiServer {
    fn drop(&mut self) {
        self.task.abort();
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

/// `GET path` over plain HTTP/1.1: (status code, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect to the metrics port");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}
