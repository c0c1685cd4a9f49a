//! A Kubernetes API server emulator for tests and benchmarks.
//!
//! The real binaries (`kube-rdma-operator`, `kubectl-rdma`, the device
//! plugin) run against it exactly as users run them: through a kubeconfig,
//! over real HTTP/1.1 on TCP, with TLS by default.
//!
//! Data flow: **socket → (TLS) → hyper → handler (auth, faults, route) →
//! [`Store`] (objects, resourceVersion, history, per-resource broadcast) →
//! JSON response or watch stream**. Tests read and change the store
//! directly, inject faults with [`Faults`] and check traffic in the
//! [`RequestLog`].
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use kube_rdma_apiemu::{Emulator, Fault};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // A TLS server on 127.0.0.1:<free port>, its CA and token in a kubeconfig.
//! let emu = Emulator::builder().start().await?;
//! emu.store().create(json!({
//!     "apiVersion": "v1", "kind": "Node",
//!     "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}},
//! }))?;
//!
//! // Run the real binary the way a user does.
//! let mut agent = std::process::Command::new("kube-rdma-operator")
//!     .arg("agent")
//!     .env("KUBECONFIG", emu.kubeconfig_path())
//!     .spawn()?;
//!
//! // Make the API misbehave once, then wait for the agent to get its state through.
//! emu.faults().add(Fault::internal_error().path_prefix("/apis/kuberdma.io/").times(1));
//! let state = emu
//!     .store()
//!     .wait_for("rdmanodestates", None, "node-1", Duration::from_secs(10), |o| o.is_some())
//!     .await?;
//! println!("{state:?}; {} requests so far", emu.log().stats().requests);
//! agent.kill()?;
//! # Ok(()) }
//! ```
//!
//! With the kube client in-process, build the client the way the binaries do:
//!
//! ```no_run
//! # async fn demo(emu: &kube_rdma_apiemu::Emulator) -> Result<(), Box<dyn std::error::Error>> {
//! use kube::config::{KubeConfigOptions, Kubeconfig};
//! let kubeconfig = Kubeconfig::read_from(emu.kubeconfig_path())?;
//! let options = KubeConfigOptions { context: Some("emu-other".into()), ..Default::default() };
//! let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
//! let client = kube::Client::try_from(config)?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! Synchronous tests (that spawn binaries and wait) can run the emulator on
//! its own thread with [`Builder::start_background`].
//!
//! # What is modelled
//!
//! - **Verbs**: get, list (label selectors with `=`, `==`, `!=`, `in`,
//!   `notin`, exists, `!key`, `>`/`<`; field selectors `metadata.name`,
//!   `metadata.namespace` and the per-resource fields in
//!   [`ResourceType::field_selectors`]; `limit`/`continue` paging over the
//!   current state), watch, create, replace (stale `resourceVersion` → 409
//!   Conflict; none at all → 422 for custom resources, which forbid
//!   unconditional updates), patch (merge, strategic as merge with lists replaced,
//!   JSON patch, server-side apply), delete (with `preconditions`), delete
//!   collection, and `/status` for resources with a status subresource.
//!   Errors are `metav1.Status` bodies with the real reasons and codes.
//! - **Server-set fields**: `uid`, `creationTimestamp`, a global
//!   `resourceVersion`, `generation` (bumped only when something other than
//!   `metadata`, and `status` under a status subresource, changes); no-op
//!   writes change nothing and send no event; finalizers delay deletion
//!   (`deletionTimestamp`) until removed; namespaced objects need their
//!   namespace to exist (`default`, `kube-system`, `kube-public`,
//!   `kube-node-lease` and `other` exist at start); names and labels are
//!   validated. Creating a CustomResourceDefinition serves its resource
//!   (and reports it `Established`); deleting it removes the objects.
//! - **Watches**: `resourceVersion` unset or `0` → current objects as
//!   `ADDED`, then changes; `N` → changes after `N` from the retained
//!   history, or one `ERROR` event `410 Expired` when `N` is older
//!   ([`Store::compact`] drops the history); `sendInitialEvents=true` ends
//!   the initial events with a bookmark annotated
//!   `k8s.io/initial-events-end`; `allowWatchBookmarks=true` → periodic
//!   `BOOKMARK`s with the latest safe resourceVersion
//!   ([`Builder::bookmark_interval`], default 60 s); `timeoutSeconds` ends
//!   the stream (default 1800 s); selectors apply to events, and an object
//!   that stops matching is sent as `DELETED`. A watcher that falls more than
//!   [`Builder::watch_buffer`] events behind is ended, as the real server
//!   ends slow watchers.
//! - **Server-side apply**: requires `fieldManager`; creates when absent;
//!   merges the applied configuration (maps merged, lists atomic); records
//!   each manager's applied fields in `managedFields` (`operation: Apply`,
//!   per subresource), so a field the same manager applied before and now
//!   omits is removed. Not modelled: ownership conflicts between managers
//!   (every apply acts as `force=true`), `Update` entries in
//!   `managedFields`, list-map keys (`x-kubernetes-list-type: map`).
//! - **Metadata-only** responses for
//!   `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
//!   on get, list, watch and writes.
//! - **Auth**: bearer tokens from the kubeconfig (two users); a wrong token
//!   gets 401 everywhere, no token gets 403 except on `/healthz`, `/livez`,
//!   `/readyz`, `/version`.
//!
//! Not modelled: namespace termination (deleting a Namespace removes only
//! that object), RBAC, admission webhooks, OpenAPI validation of objects
//! (so `fieldValidation=Strict` finds no unknown fields),
//! garbage collection of dependents (`ownerReferences`), graceful pod
//! deletion (pods are deleted at once), `dryRun` (refused with 400), list
//! consistency across `continue` pages (each page reads the current state),
//! protobuf, HTTP/2, aggregated discovery (clients fall back to the legacy
//! documents served at `/api`, `/apis`).

#![warn(missing_docs)]

mod error;
mod faults;
mod kubeconfig;
mod log;
mod object;
mod patch;
mod resources;
mod selector;
mod server;
mod store;
mod tls;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

pub use error::{ApiError, ErrorDetails, StartError};
pub use faults::{Fault, FaultAction, FaultId, Faults, PathMatch};
pub use kubeconfig::{CONTEXT, OTHER_CONTEXT, OTHER_NAMESPACE};
pub use log::{RequestLog, RequestRecord, Stats};
pub use patch::PatchKind;
pub use resources::{default_resources, ResourceType};
pub use store::{Store, WaitError};

use server::Shared;
use store::StoreConfig;

/// User name of the kubeconfig's current context.
pub const ADMIN_USER: &str = "admin";
/// User name of the [`OTHER_CONTEXT`].
pub const OTHER_USER: &str = "other";

/// Namespaces that exist when an emulator starts.
const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease", OTHER_NAMESPACE];

/// Configures and starts an [`Emulator`].
#[derive(Debug, Clone)]
pub struct Builder {
    listen: String,
    tls: bool,
    kubeconfig_path: Option<PathBuf>,
    resources: Vec<ResourceType>,
    seeds: Vec<Seed>,
    bookmark_interval: Duration,
    history_limit: usize,
    watch_buffer: usize,
    log_limit: usize,
}

#[derive(Debug, Clone)]
enum Seed {
    Yaml { origin: String, text: String },
    File(PathBuf),
    Object(Value),
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            listen: "127.0.0.1:0".into(),
            tls: true,
            kubeconfig_path: None,
            resources: Vec::new(),
            seeds: Vec::new(),
            bookmark_interval: Duration::from_secs(60),
            history_limit: 10_000,
            watch_buffer: 4096,
            log_limit: 200_000,
        }
    }
}

impl Builder {
    /// Listen address (default `127.0.0.1:0`: a free port).
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.to_string();
        self
    }

    /// Serve plain HTTP instead of TLS (the kubeconfig then has an
    /// `http://` server and no CA).
    pub fn plain_http(mut self) -> Self {
        self.tls = false;
        self
    }

    /// Write the kubeconfig here (default: `kubeconfig` in a temporary
    /// directory removed with the emulator).
    pub fn kubeconfig_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig_path = Some(path.into());
        self
    }

    /// Serve one more resource (besides [`default_resources`]).
    pub fn resource(mut self, ty: ResourceType) -> Self {
        self.resources.push(ty);
        self
    }

    /// Objects to create at start: YAML/JSON documents separated by `---`
    /// (a `kind: List` document's `items` count as documents).
    pub fn seed_yaml(mut self, text: &str) -> Self {
        self.seeds.push(Seed::Yaml { origin: "inline".into(), text: text.to_string() });
        self
    }

    /// Like [`seed_yaml`](Self::seed_yaml), from a file.
    pub fn seed_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.seeds.push(Seed::File(path.into()));
        self
    }

    /// One object to create at start (any `Serialize`, e.g. a k8s-openapi type).
    pub fn seed(mut self, obj: impl Serialize) -> Self {
        self.seeds.push(Seed::Object(serde_json::to_value(obj).unwrap_or(Value::Null)));
        self
    }

    /// Period of watch bookmarks (default 60 s, like the real server).
    pub fn bookmark_interval(mut self, period: Duration) -> Self {
        self.bookmark_interval = period;
        self
    }

    /// Changes retained per resource for watches that resume from a
    /// resourceVersion (default 10 000); older ones get `410 Expired`.
    pub fn history_limit(mut self, n: usize) -> Self {
        self.history_limit = n;
        self
    }

    /// Events a watcher may fall behind before its stream is ended
    /// (per-resource broadcast capacity; default 4096).
    pub fn watch_buffer(mut self, n: usize) -> Self {
        self.watch_buffer = n.max(1);
        self
    }

    /// Request log records kept (default 200 000; counters are unbounded).
    pub fn request_log_limit(mut self, n: usize) -> Self {
        self.log_limit = n;
        self
    }

    /// Starts the emulator on the current tokio runtime. It stops when the
    /// [`Emulator`] is dropped.
    pub async fn start(self) -> Result<Emulator, StartError> {
        let (parts, serve) = self.prepare().await?;
        let task = tokio::spawn(serve);
        Ok(parts.into_emulator(Runner::Task(task)))
    }

    /// Starts the emulator on its own thread and runtime (2 worker threads),
    /// for synchronous tests; works outside any runtime.
    pub fn start_background(self) -> Result<Emulator, StartError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("apiemu".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(StartError::Runtime(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    match self.prepare().await {
                        Ok((parts, serve)) => {
                            let _ = tx.send(Ok(parts));
                            tokio::select! {
                                _ = serve => {}
                                _ = stop_rx => {}
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                });
                // Dropping the runtime here cancels every connection task.
            })
            .map_err(StartError::Runtime)?;
        let parts = rx.recv().map_err(|_| {
            StartError::Runtime(std::io::Error::other("the emulator thread exited during start"))
        })??;
        Ok(parts.into_emulator(Runner::Thread { stop: Some(stop_tx), thread: Some(thread) }))
    }

    async fn prepare(
        self,
    ) -> Result<(Parts, impl std::future::Future<Output = ()> + Send + 'static), StartError> {
        let mut types = default_resources();
        types.extend(self.resources.iter().cloned());
        let store = Store::new(
            types,
            StoreConfig { history_limit: self.history_limit, channel_capacity: self.watch_buffer },
        );
        for ns in INITIAL_NAMESPACES {
            store
                .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .map_err(|source| StartError::SeedObject {
                    origin: "initial namespaces".into(),
                    index: 0,
                    source,
                })?;
        }
        for seed in &self.seeds {
            apply_seed(&store, seed)?;
        }
        let listener = tokio::net::TcpListener::bind(&self.listen)
            .await
            .map_err(|source| StartError::Bind { addr: self.listen.clone(), source })?;
        let addr =
            listener.local_addr().map_err(|source| StartError::Bind { addr: self.listen.clone(), source })?;
        let (acceptor, ca_pem) = if self.tls {
            let certs = tls::generate()?;
            (Some(tokio_rustls::TlsAcceptor::from(certs.server_config)), Some(certs.ca_pem))
        } else {
            (None, None)
        };
        let host = match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let url = format!("{}://{host}:{}", if self.tls { "https" } else { "http" }, addr.port());
        let admin_token = store.ids().token();
        let other_token = store.ids().token();
        let kubeconfig_yaml = kubeconfig::render(
            &url,
            ca_pem.as_deref(),
            &kubeconfig::Users { admin_token: &admin_token, other_token: &other_token },
        );
        let (tempdir, kubeconfig_path) = match &self.kubeconfig_path {
            Some(p) => (None, p.clone()),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("apiemu-")
                    .tempdir()
                    .map_err(|source| StartError::Kubeconfig { path: std::env::temp_dir(), source })?;
                let p = dir.path().join("kubeconfig");
                (Some(dir), p)
            }
        };
        write_private(&kubeconfig_path, &kubeconfig_yaml)
            .map_err(|source| StartError::Kubeconfig { path: kubeconfig_path.clone(), source })?;
        let (close_watches, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(Shared {
            store,
            faults: Faults::default(),
            log: Arc::new(RequestLog::new(self.log_limit)),
            tokens: vec![(admin_token.clone(), ADMIN_USER.into()), (other_token.clone(), OTHER_USER.into())],
            bookmark_interval: self.bookmark_interval,
            close_watches,
        });
        tracing::info!(%url, kubeconfig = %kubeconfig_path.display(), "API emulator listening");
        let serve = server::accept_loop(listener, acceptor, shared.clone());
        let parts = Parts {
            shared,
            addr,
            url,
            kubeconfig_path,
            kubeconfig_yaml,
            ca_pem,
            admin_token,
            other_token,
            tempdir,
        };
        Ok((parts, serve))
    }
}

/// Writes the kubeconfig readable by its owner only (it holds tokens).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(text.as_bytes())
}

fn apply_seed(store: &Store, seed: &Seed) -> Result<(), StartError> {
    let (origin, docs) = match seed {
        Seed::Object(v) => ("object".to_string(), vec![v.clone()]),
        Seed::Yaml { origin, text } => (origin.clone(), parse_docs(origin, text)?),
        Seed::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| StartError::SeedRead { path: path.clone(), source })?;
            let origin = path.display().to_string();
            let docs = parse_docs(&origin, &text)?;
            (origin, docs)
        }
    };
    for (index, doc) in docs.into_iter().enumerate() {
        store.create(doc).map_err(|source| StartError::SeedObject {
            origin: origin.clone(),
            index,
            source,
        })?;
    }
    Ok(())
}

fn parse_docs(origin: &str, text: &str) -> Result<Vec<Value>, StartError> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (index, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(de).map_err(|e| StartError::SeedParse {
            origin: origin.to_string(),
            index,
            message: e.to_string(),
        })?;
        match v {
            Value::Null => {}
            Value::Object(ref m)
                if m.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List"))
                    && m.contains_key("items") =>
            {
                out.extend(m["items"].as_array().cloned().unwrap_or_default());
            }
            Value::Object(_) => out.push(v),
            _ => {
                return Err(StartError::SeedParse {
                    origin: origin.to_string(),
                    index,
                    message: "a seed document must be an object".into(),
                })
            }
        }
    }
    Ok(out)
}

struct Parts {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    kubeconfig_yaml: String,
    ca_pem: Option<String>,
    admin_token: String,
    other_token: String,
    tempdir: Option<tempfile::TempDir>,
}

impl Parts {
    fn into_emulator(self, runner: Runner) -> Emulator {
        Emulator {
            shared: self.shared,
            addr: self.addr,
            url: self.url,
            kubeconfig_path: self.kubeconfig_path,
            kubeconfig_yaml: self.kubeconfig_yaml,
            ca_pem: self.ca_pem,
            admin_token: self.admin_token,
            other_token: self.other_token,
            runner,
            _tempdir: self.tempdir,
        }
    }
}

enum Runner {
    Task(tokio::task::JoinHandle<()>),
    Thread { stop: Option<tokio::sync::oneshot::Sender<()>>, thread: Option<std::thread::JoinHandle<()>> },
}

/// A running API emulator. Dropping it stops the server and closes every
/// connection (and removes the temporary kubeconfig).
pub struct Emulator {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    kubeconfig_yaml: String,
    ca_pem: Option<String>,
    admin_token: String,
    other_token: String,
    runner: Runner,
    _tempdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("url", &self.url).field("kubeconfig", &self.kubeconfig_path).finish()
    }
}

impl Emulator {
    /// A builder with the defaults (TLS on `127.0.0.1:0`, temporary kubeconfig).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The server URL (`https://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig file (for `KUBECONFIG` or `--kubeconfig`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The kubeconfig's contents.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig_yaml
    }

    /// The CA certificate (PEM) clients must trust; `None` in plain HTTP mode.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Bearer token of [`ADMIN_USER`] (context [`CONTEXT`]).
    pub fn token(&self) -> &str {
        &self.admin_token
    }

    /// Bearer token of [`OTHER_USER`] (context [`OTHER_CONTEXT`]).
    pub fn other_token(&self) -> &str {
        &self.other_token
    }

    /// The objects.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Fault injection rules.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Request log and counters.
    pub fn log(&self) -> &RequestLog {
        &self.shared.log
    }

    /// Aborts every open watch stream now (as a server restart or a
    /// network cut would); clients re-watch from their last resourceVersion.
    pub fn disconnect_watches(&self) {
        self.shared.close_watches.send_modify(|n| *n += 1);
    }

    /// [`Store::compact`]: the next watch resuming from an older
    /// resourceVersion gets `410 Expired`. Combine with
    /// [`disconnect_watches`](Self::disconnect_watches) to force relists.
    pub fn compact(&self) {
        self.shared.store.compact();
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        match &mut self.runner {
            Runner::Task(task) => task.abort(),
            Runner::Thread { stop, thread } => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}
