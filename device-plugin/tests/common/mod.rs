//! Test fixtures: a fake kubelet (Registration server on `kubelet.sock`,
//! dialling plugins back and watching them as the kubelet's device manager
//! does), a plugin client over the pool's real unix socket, and the daemon
//! run in-process or as the real binary.
#![allow(dead_code)]

pub mod cdi;
pub mod dra;
pub mod stuck;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use kube_rdma_device_plugin::api::registration_server::{Registration, RegistrationServer};
use kube_rdma_device_plugin::api::{Empty, ListAndWatchResponse, RegisterRequest};
use kube_rdma_device_plugin::api_podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use kube_rdma_device_plugin::api_podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices, ContainerResources,
    GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};
use kube_rdma_device_plugin::{daemon, kubelet};
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

/// How a fake kubelet answers Register.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// Open ListAndWatch after accepting, as the kubelet does; `false`: a
    /// kubelet that accepts Register and never watches.
    pub list_and_watch: bool,
    /// Refuse the first this many Register calls (the kubelet answers a plain
    /// Go error: gRPC `Unknown`).
    pub refuse_first: usize,
    /// How long after answering Register its ListAndWatch goroutine gets to
    /// run: zero, or seconds on a loaded node.
    pub watch_after: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour { list_and_watch: true, refuse_first: 0, watch_after: Duration::ZERO }
    }
}

/// What the kubelet's device manager holds for one resource (`manager.go`
/// `endpoints`, `healthyDevices`): the last list and whether the endpoint is
/// stopped (its client disconnected; the devices count as Unhealthy, and 5
/// minutes later the resource is gone).
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    pub devices: Vec<kube_rdma_device_plugin::api::Device>,
    pub stopped: bool,
    /// Lists received over this endpoint's streams.
    pub lists: usize,
}

impl Endpoint {
    /// What the node's allocatable shows for the resource: its Healthy
    /// devices, 0 while stopped.
    pub fn allocatable(&self) -> usize {
        if self.stopped {
            0
        } else {
            self.devices.iter().filter(|d| d.health == "Healthy").count()
        }
    }
}

/// One plugin client (`plugin/v1beta1/client.go`): its ListAndWatch task, or
/// just its connection when the kubelet does not watch.
struct Client {
    task: Option<tokio::task::AbortHandle>,
    _channel: Channel,
}

#[derive(Default)]
struct KubeletState {
    /// `server.go` `clients`: one per resource.
    clients: std::collections::HashMap<String, Client>,
    endpoints: std::collections::HashMap<String, Endpoint>,
    refused: usize,
}

type Shared = Arc<std::sync::Mutex<KubeletState>>;

/// The kubelet's `runClient` after a client's ListAndWatch ended: it
/// disconnects whichever client is current for the resource (possibly a
/// newer one than the stream that ended; `handler.go`), which stops the
/// endpoint (`PluginDisconnected`).
fn client_ended(state: &Shared, resource: &str) {
    let mut g = state.lock().unwrap();
    if let Some(current) = g.clients.remove(resource) {
        if let Some(t) = current.task {
            t.abort();
        }
        if let Some(e) = g.endpoints.get_mut(resource) {
            e.stopped = true;
        }
    }
}

#[derive(Clone)]
struct Reg {
    dir: PathBuf,
    behaviour: Behaviour,
    state: Shared,
    accepted: mpsc::UnboundedSender<RegisterRequest>,
    attempts: Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl Registration for Reg {
    /// As `server.go` `Register` → `handler.go` `connectClient`: check the
    /// version, dial the plugin (authority `localhost`), GetDevicePluginOptions,
    /// answer; then ListAndWatch from a task of its own.
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = req.into_inner();
        self.attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if r.version != "v1beta1" {
            return Err(Status::unknown(format!(
                "requested device plugin version {} is not supported",
                r.version
            )));
        }
        {
            let mut g = self.state.lock().unwrap();
            if g.refused < self.behaviour.refuse_first {
                g.refused += 1;
                return Err(Status::unknown("fake kubelet: refusing registrations for now"));
            }
        }
        let path = self.dir.join(&r.endpoint);
        let ch = tokio::time::timeout(Duration::from_secs(10), kubelet::connect_unix(&path))
            .await
            .map_err(|_| Status::unknown("failed to dial device plugin: timeout"))?
            .map_err(|e| Status::unknown(format!("failed to dial device plugin: {e}")))?;
        let mut c = DevicePluginClient::new(ch.clone());
        c.get_device_plugin_options(Empty {})
            .await
            .map_err(|e| Status::unknown(format!("failed to get device plugin options: {e}")))?;
        let resource = r.resource_name.clone();
        let mut g = self.state.lock().unwrap();
        // PluginConnected: a new endpoint; the devices stay until the next list.
        g.endpoints.entry(resource.clone()).or_default().stopped = false;
        let task = self.behaviour.list_and_watch.then(|| {
            let state = self.state.clone();
            let resource = resource.clone();
            let late = self.behaviour.watch_after;
            tokio::spawn(async move {
                tokio::time::sleep(late).await;
                if let Ok(s) = c.list_and_watch(Empty {}).await {
                    let mut s = s.into_inner();
                    while let Ok(Some(m)) = s.message().await {
                        // Any client's list is the resource's (`PluginListAndWatchReceiver`).
                        let mut g = state.lock().unwrap();
                        if let Some(e) = g.endpoints.get_mut(&resource) {
                            e.devices = m.devices;
                            e.lists += 1;
                        }
                    }
                }
                client_ended(&state, &resource);
            })
            .abort_handle()
        });
        // registerClient: the old client is replaced, not closed.
        g.clients.insert(resource, Client { task, _channel: ch });
        drop(g);
        let _ = self.accepted.send(r);
        Ok(Response::new(Empty {}))
    }
}

/// A kubelet stand-in modelled on the device manager of k8s.io/kubernetes
/// v1.34 (`pkg/kubelet/cm/devicemanager`): serves Registration on
/// `<dir>/kubelet.sock`, dials each registering plugin back, opens its
/// ListAndWatch, keeps one client per resource and the last list, and
/// disconnects the current client when any stream of the resource ends.
/// Records every accepted RegisterRequest.
pub struct FakeKubelet {
    pub dir: PathBuf,
    pub registrations: Arc<Mutex<mpsc::UnboundedReceiver<RegisterRequest>>>,
    /// Register calls received, refused ones included.
    pub attempts: Arc<std::sync::atomic::AtomicUsize>,
    state: Shared,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FakeKubelet {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, Behaviour::default())
    }

    pub fn start_with(dir: &Path, behaviour: Behaviour) -> Self {
        let sock = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind kubelet.sock");
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let state = Shared::default();
        let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reg = Reg {
            dir: dir.to_path_buf(),
            behaviour,
            state: state.clone(),
            accepted: tx,
            attempts: attempts.clone(),
        };
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(reg))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                })
                .await;
        });
        FakeKubelet {
            dir: dir.to_path_buf(),
            registrations: Arc::new(Mutex::new(rx)),
            attempts,
            state,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    /// Next RegisterRequest within `within`.
    pub async fn next_registration(&self, within: Duration) -> RegisterRequest {
        let mut rx = self.registrations.lock().await;
        tokio::time::timeout(within, rx.recv())
            .await
            .expect("no registration in time")
            .expect("registration channel closed")
    }

    /// The accepted registrations of the next `within`.
    pub async fn registrations_within(&self, within: Duration) -> Vec<RegisterRequest> {
        let mut rx = self.registrations.lock().await;
        let deadline = tokio::time::Instant::now() + within;
        let mut out = vec![];
        while let Ok(Some(r)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            out.push(r);
        }
        out
    }

    /// What the device manager holds for `resource` now.
    pub fn endpoint(&self, resource: &str) -> Option<Endpoint> {
        self.state.lock().unwrap().endpoints.get(resource).cloned()
    }

    /// Waits until `resource` has a live endpoint whose last list has `n`
    /// Healthy devices (allocatable `n`).
    pub async fn wait_allocatable(&self, resource: &str, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let e = self.endpoint(resource);
            if e.as_ref().is_some_and(|e| e.allocatable() == n) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{resource}: allocatable never {n}: {e:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Disconnects the current client of `resource`, as the kubelet does
    /// when an older client's stream ends after a newer Register
    /// (`handler.go` `runClient`).
    pub fn disconnect(&self, resource: &str) {
        client_ended(&self.state, resource);
    }

    /// Stops like a kubelet restart does: stop serving, drop every plugin
    /// connection (the process is gone) and delete every socket in the dir
    /// (the next kubelet's `CleanupPluginDirectory`).
    pub async fn stop_and_wipe(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
        self.drop_clients();
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".sock") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    fn drop_clients(&self) {
        let mut g = self.state.lock().unwrap();
        for (_, c) in g.clients.drain() {
            if let Some(t) = c.task {
                t.abort();
            }
        }
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Ok(mut g) = self.state.lock() {
            for (_, c) in g.clients.drain() {
                if let Some(t) = c.task {
                    t.abort();
                }
            }
        }
    }
}

/// A DevicePlugin client over the socket `endpoint` in `dir`.
pub async fn plugin(dir: &Path, endpoint: &str) -> DevicePluginClient<Channel> {
    let path = dir.join(endpoint);
    for _ in 0..100 {
        if path.exists() {
            if let Ok(ch) = kubelet::connect_unix(&path).await {
                return DevicePluginClient::new(ch);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot connect to {}", path.display());
}

pub async fn list_and_watch(c: &mut DevicePluginClient<Channel>) -> Streaming<ListAndWatchResponse> {
    c.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner()
}

/// Reads the stream until `pred` holds, or panics after `within`.
pub async fn wait_list(
    s: &mut Streaming<ListAndWatchResponse>,
    within: Duration,
    what: &str,
    pred: impl Fn(&ListAndWatchResponse) -> bool,
) -> ListAndWatchResponse {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, s.message()).await {
            Ok(Ok(Some(m))) => {
                if pred(&m) {
                    return m;
                }
                last = Some(m);
            }
            Ok(other) => panic!("stream ended while waiting for {what}: {other:?}"),
            Err(_) => panic!("timed out waiting for {what}; last list: {last:#?}"),
        }
    }
}

pub fn health_of<'a>(m: &'a ListAndWatchResponse, id: &str) -> Option<&'a str> {
    m.devices.iter().find(|d| d.id == id).map(|d| d.health.as_str())
}

/// Pod → resource → device IDs.
type Assigned = Arc<std::sync::Mutex<Vec<(String, String, Vec<String>)>>>;

/// The kubelet's PodResources service on a real unix socket, answering `List`
/// with whatever assignments the test sets (pod `ns/name` → container → resource → IDs).
pub struct FakePodResources {
    pub socket: PathBuf,
    assigned: Assigned,
    pub calls: Arc<std::sync::atomic::AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
}

#[derive(Clone)]
struct Lister {
    assigned: Assigned,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        req: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = req;
        let pods = self
            .assigned
            .lock()
            .unwrap()
            .iter()
            .map(|(pod, resource, ids)| PodResources {
                name: pod.clone(),
                namespace: "default".into(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: vec![ContainerDevices {
                        resource_name: resource.clone(),
                        device_ids: ids.clone(),
                        topology: None,
                    }],
                    ..Default::default()
                }],
            })
            .collect();
        Ok(Response::new(ListPodResourcesResponse { pod_resources: pods }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by kube-rdma"))
    }

    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by kube-rdma"))
    }
}

impl FakePodResources {
    pub fn start(socket: &Path) -> Self {
        if let Some(d) = socket.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket).expect("bind pod-resources socket");
        let lister = Lister { assigned: Arc::default(), calls: Arc::default() };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let svc = PodResourcesListerServer::new(lister.clone());
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                })
                .await;
        });
        FakePodResources {
            socket: socket.to_path_buf(),
            assigned: lister.assigned,
            calls: lister.calls,
            stop: Some(stop_tx),
        }
    }

    /// Pod `pod` holds `ids` of `resource` (replacing what it held).
    pub fn assign(&self, pod: &str, resource: &str, ids: &[&str]) {
        let mut g = self.assigned.lock().unwrap();
        g.retain(|(p, r, _)| !(p == pod && r == resource));
        if !ids.is_empty() {
            g.push((pod.into(), resource.into(), ids.iter().map(|s| s.to_string()).collect()));
        }
    }

    /// Stops answering and removes the socket (kubelet gone).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for FakePodResources {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Paths of one daemon instance.
pub struct Dirs {
    pub tmp: tempfile::TempDir,
    pub kubelet: PathBuf,
    pub cdi: PathBuf,
    pub devinfo: PathBuf,
}

impl Dirs {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let kubelet = tmp.path().join("device-plugins");
        let cdi = tmp.path().join("cdi");
        let devinfo = tmp.path().join("devinfo");
        std::fs::create_dir_all(&kubelet).unwrap();
        Dirs { tmp, kubelet, cdi, devinfo }
    }

    pub fn options(&self, roots: nic::Roots, config: Option<PathBuf>, rescan: Duration) -> daemon::Options {
        daemon::Options {
            config,
            roots,
            kubelet_dir: self.kubelet.clone(),
            rescan_interval: rescan,
            rescan_deadline: Duration::from_secs(10),
            cdi_dir: self.cdi.clone(),
            devinfo_dir: self.devinfo.clone(),
            metrics_addr: None,
            link_events: false,
            pod_resources: None,
            pod_resources_interval: Duration::from_millis(100),
            registration: Default::default(),
        }
    }

    /// The real daemon binary with this instance's kubelet, CDI and device-info
    /// dirs (add the node: `--sim FILE` or `--sysfs-root`/`--dev-root`).
    pub fn daemon_command(&self) -> tokio::process::Command {
        self.daemon_command_of(Path::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin")))
    }

    /// [`Dirs::daemon_command`] with another build of the daemon (a benchmark's baseline).
    pub fn daemon_command_of(&self, exe: &Path) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(exe);
        c.arg("--kubelet-dir")
            .arg(&self.kubelet)
            .arg("--pod-resources-socket")
            .arg(self.tmp.path().join("pod-resources/kubelet.sock"))
            .arg("--cdi-dir")
            .arg(&self.cdi)
            .arg("--devinfo-dir")
            .arg(&self.devinfo)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true);
        c
    }

    /// Writes `text` as `<tmp>/etc/config.yaml` and returns its path.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let dir = self.tmp.path().join("etc");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("config.yaml");
        std::fs::write(&cfg, text).unwrap();
        cfg
    }
}

/// The daemon in-process; dropping the handle does not stop it, `stop` does.
pub struct InProc {
    stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<Result<(), daemon::DaemonError>>,
}

impl InProc {
    pub fn spawn(opts: daemon::Options) -> Self {
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(daemon::run(opts, async {
            let _ = rx.await;
        }));
        InProc { stop: Some(tx), task }
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(5), &mut self.task)
            .await
            .expect("daemon did not stop")
            .expect("daemon task panicked")
            .expect("daemon returned an error");
    }
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes")
}

/// The example node `name` in RDMA netns mode `mode`, as a description file in
/// `dir` (for the real binary's `--sim`): shared pools need shared mode, and the
/// bundled cx6dx-dual is exclusive.
pub fn example_in_mode(dir: &Path, name: &str, mode: nic::NetnsMode) -> PathBuf {
    let mut desc = nic::sim::load_desc(examples().join(name)).expect("example node");
    desc.rdma_netns_mode = mode;
    let p = dir.join(name);
    std::fs::write(&p, serde_yaml::to_string(&desc).unwrap()).unwrap();
    p
}

pub fn sim(name: &str) -> nic::sim::Sim {
    nic::sim::Sim::from_file(examples().join(name)).expect("materialise example node")
}

pub const SOCK: &str = "kuberdma-kuberdma.io-rdma_vfs.sock";
