//! The production path on a real API server: etcd and kube-apiserver built from
//! the Go module proxy ([`kube_rdma_e2e::ApiServer`]), our CRDs applied by the
//! command the chart's upgrade hook runs (`kube-rdma-operator crds --apply`), and
//! the real `kube-rdma-operator` and `kubectl-rdma` executables run with a
//! kubeconfig, as users run them. Faults are the server's own: restarts of
//! kube-apiserver (dropped watches, refused connections), etcd compaction (410),
//! its in-flight limit (429 with Retry-After), a concurrent writer (409), etcd
//! stopped with SIGSTOP (writes answered 504 Timeout after `--request-timeout`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube_rdma_e2e::apiserver::{ApiServer, Options, PlaneSlot};
use kube_rdma_operator::fixtures::example;
use kube_rdma_operator::kubectl::client::{connect, ClientOpts};
use nic::simdesc::NodeDesc;
use serde_json::{json, Value};

/// Generous bounds: the suite runs on two shared cores.
pub const WAIT: Duration = Duration::from_secs(60);

pub fn operator() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kube-rdma-operator"))
}

pub fn kubectl_rdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-rdma"))
}

pub fn node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
}

pub fn profile(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": name}, "spec": spec})
}

/// The API resource behind a short name the tests use.
pub fn resource(name: &str) -> ApiResource {
    let (g, v, k, plural) = match name {
        "nodes" => ("", "v1", "Node", "nodes"),
        "pods" => ("", "v1", "Pod", "pods"),
        "serviceaccounts" => ("", "v1", "ServiceAccount", "serviceaccounts"),
        "configmaps" => ("", "v1", "ConfigMap", "configmaps"),
        "events" => ("events.k8s.io", "v1", "Event", "events"),
        "rdmanodestates" => ("kuberdma.io", "v1alpha1", "RdmaNodeState", "rdmanodestates"),
        "roceprofiles" => ("kuberdma.io", "v1alpha1", "RoceProfile", "roceprofiles"),
        "customresourcedefinitions" => {
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions")
        }
        other => panic!("no resource {other} in the harness"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural)
}

/// A real control plane with our CRDs, a temp dir for simulated nodes and logs,
/// and an admin client for the test's own reads and writes.
pub struct Cluster {
    pub api: ApiServer,
    pub dir: tempfile::TempDir,
    pub rt: tokio::runtime::Runtime,
    pub client: kube::Client,
    _slot: PlaneSlot,
}

impl Cluster {
    /// A control plane with `nodes` (name, labels) as Node objects.
    pub fn new(nodes: &[(&str, Value)]) -> Self {
        Self::with_args(&[], nodes)
    }

    /// As [`Cluster::new`], kube-apiserver started with `args` too.
    pub fn with_args(args: &[&str], nodes: &[(&str, Value)]) -> Self {
        let slot = PlaneSlot::take();
        let opts = Options { extra_args: args.iter().map(|a| a.to_string()).collect(), ..Options::default() };
        let api = ApiServer::start_with(opts).unwrap_or_else(|e| panic!("control plane: {e:#}"));
        // The CRDs as the chart's upgrade hook applies them.
        let o = operator().args(["crds", "--apply", "--kubeconfig"]).arg(api.kubeconfig()).output().unwrap();
        assert!(o.status.success(), "crds --apply: {}", String::from_utf8_lossy(&o.stderr));
        let out = api
            .kubectl()
            .args(["wait", "--for=condition=Established", "--timeout=60s"])
            .args(["crd/rdmanodestates.kuberdma.io", "crd/roceprofiles.kuberdma.io"])
            .output()
            .unwrap();
        assert!(out.status.success(), "CRDs established: {}", String::from_utf8_lossy(&out.stderr));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = rt
            .block_on(connect(&ClientOpts { kubeconfig: Some(api.kubeconfig()), ..Default::default() }))
            .unwrap();
        let c = Self { api, dir: tempfile::tempdir().unwrap(), rt, client, _slot: slot };
        for (n, labels) in nodes {
            c.create(node(n, labels.clone()));
        }
        c
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.api.kubeconfig()
    }

    fn api_of(&self, resource_name: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = resource(resource_name);
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    fn ns_of(v: &Value) -> Option<String> {
        v["metadata"]["namespace"].as_str().map(String::from)
    }

    /// Writes a simulated node description named `node` (from the bundled `example`
    /// with `edit` applied) and returns its path.
    pub fn sim(&self, node: &str, example_name: &str, edit: impl FnOnce(&mut NodeDesc)) -> PathBuf {
        let mut d = example(example_name);
        d.node = node.into();
        edit(&mut d);
        let p = self.dir.path().join(format!("{}.yaml", file_stem(node)));
        std::fs::write(&p, serde_yaml::to_string(&d).unwrap()).unwrap();
        p
    }

    /// Runs `cmd` with `kubeconfig` (the admin's when `None`), logging to `<name>.log`.
    pub fn spawn_as(&self, name: &str, mut cmd: Command, kubeconfig: Option<&Path>) -> Proc {
        let log = self.dir.path().join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .env("KUBECONFIG", kubeconfig.map_or_else(|| self.kubeconfig(), Path::to_path_buf))
            .env("RUST_LOG", std::env::var("E2E_LOG").unwrap_or_else(|_| "info,kube_client=warn".into()))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap();
        Proc { child: Some(child), log }
    }

    /// `kube-rdma-operator agent` for `node` reading `sim`: poll 1 s, heartbeat 2 s;
    /// with `metrics`, /metrics and /healthz on a free port ([`Proc::metrics_addr`]).
    pub fn agent(&self, node: &str, sim: &Path, metrics: bool, extra: &[&str]) -> Proc {
        self.agent_as(node, sim, metrics, extra, None)
    }

    /// [`Cluster::agent`] with another kubeconfig (a ServiceAccount's).
    pub fn agent_as(&self, node: &str, sim: &Path, metrics: bool, extra: &[&str], kc: Option<&Path>) -> Proc {
        let mut c = operator();
        c.args(["agent", "--node-name", node, "--poll-interval", "1", "--sim"]).arg(sim);
        if !extra.contains(&"--heartbeat") {
            c.args(["--heartbeat", "2"]);
        }
        if metrics {
            c.args(["--metrics-addr", "127.0.0.1:0"]);
        }
        c.args(extra);
        self.spawn_as(&format!("agent-{}", file_stem(node)), c, kc)
    }

    /// `kube-rdma-operator controller`: stale after 4 s, re-check every second.
    pub fn controller(&self, metrics: bool) -> Proc {
        self.controller_as(metrics, None)
    }

    /// [`Cluster::controller`] with another kubeconfig.
    pub fn controller_as(&self, metrics: bool, kc: Option<&Path>) -> Proc {
        let mut c = operator();
        c.args(["controller", "--stale-after", "4", "--interval", "1"]);
        if metrics {
            c.args(["--metrics-addr", "127.0.0.1:0"]);
        }
        self.spawn_as("controller", c, kc)
    }

    /// The object, or `None`; namespaced resources take `ns/name`.
    pub fn get(&self, resource_name: &str, name: &str) -> Option<Value> {
        let (ns, name) = match name.split_once('/') {
            Some((ns, n)) => (Some(ns), n),
            None => (None, name),
        };
        let api = self.api_of(resource_name, ns);
        let o =
            self.rt.block_on(api.get_opt(name)).unwrap_or_else(|e| panic!("get {resource_name}/{name}: {e}"));
        o.map(|o| serde_json::to_value(o).unwrap())
    }

    /// Creates `v` (its kind names the resource).
    pub fn create(&self, v: Value) -> Value {
        let plural = plural_of(&v);
        let api = self.api_of(&plural, Self::ns_of(&v).as_deref());
        let obj: DynamicObject = serde_json::from_value(v.clone()).unwrap();
        let r = self.rt.block_on(api.create(&PostParams::default(), &obj));
        serde_json::to_value(r.unwrap_or_else(|e| panic!("create {v}: {e}"))).unwrap()
    }

    /// Deletes an object (404 is fine).
    pub fn delete(&self, resource_name: &str, name: &str) {
        let api = self.api_of(resource_name, None);
        match self.rt.block_on(api.delete(name, &DeleteParams::default())) {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("delete {resource_name}/{name}: {e}"),
        }
    }

    /// A JSON merge patch, as the admin.
    pub fn merge(&self, resource_name: &str, name: &str, patch: Value) -> Value {
        let api = self.api_of(resource_name, None);
        let r = self.rt.block_on(api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)));
        serde_json::to_value(r.unwrap_or_else(|e| panic!("merge patch {resource_name}/{name}: {e}"))).unwrap()
    }

    /// A JSON merge patch as the holder of `kc` (no GET first, unlike kubectl).
    pub fn merge_as(
        &self,
        kc: &Path,
        resource_name: &str,
        name: &str,
        patch: Value,
    ) -> Result<Value, kube::Error> {
        let client = self
            .rt
            .block_on(connect(&ClientOpts { kubeconfig: Some(kc.to_path_buf()), ..Default::default() }))
            .unwrap();
        let api: Api<DynamicObject> = Api::all_with(client, &resource(resource_name));
        let r = self.rt.block_on(api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)));
        r.map(|o| serde_json::to_value(o).unwrap())
    }

    /// Server-side apply of `body` by `manager` (to the status subresource with
    /// `status`), forced or not; the server's answer.
    pub fn apply(
        &self,
        resource_name: &str,
        name: &str,
        manager: &str,
        body: &Value,
        status: bool,
        force: bool,
    ) -> Result<Value, kube::Error> {
        let api = self.api_of(resource_name, None);
        let mut pp = PatchParams::apply(manager);
        pp.force = force;
        let patch = Patch::Apply(body);
        let r = self.rt.block_on(async {
            if status {
                api.patch_status(name, &pp, &patch).await
            } else {
                api.patch(name, &pp, &patch).await
            }
        });
        r.map(|o| serde_json::to_value(o).unwrap())
    }

    /// Polls the object until `pred` holds; panics with `what` and the logs otherwise.
    pub fn wait(
        &self,
        resource_name: &str,
        name: &str,
        what: &str,
        procs: &[&Proc],
        mut pred: impl FnMut(Option<&Value>) -> bool,
    ) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.get(resource_name, name);
            if pred(v.as_ref()) {
                return v.unwrap_or(Value::Null);
            }
            if t0.elapsed() > WAIT {
                panic!(
                    "{what}: not within {WAIT:?}\nobject: {:#}\n{}\n{}",
                    v.unwrap_or(Value::Null),
                    procs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n"),
                    self.api.apiserver.log_tail(20),
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls `f` until it returns `Some`.
    pub fn wait_until<T>(&self, what: &str, procs: &[&Proc], f: impl FnMut() -> Option<T>) -> T {
        eventually(what, procs, f)
    }

    /// The events.k8s.io Events in `default`.
    pub fn events(&self) -> Vec<Value> {
        let api = self.api_of("events", Some("default"));
        let l = self.rt.block_on(api.list(&ListParams::default())).unwrap();
        l.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect()
    }

    /// `apiserver_request_total` from kube-apiserver's /metrics, summed by
    /// (verb, resource, subresource, code): what the server itself counted.
    pub fn requests(&self) -> BTreeMap<(String, String, String, String), f64> {
        let o = self.api.kubectl().args(["get", "--raw", "/metrics"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
            let Some((labels, value)) = line.rsplit_once(' ') else { continue };
            let l = prom_labels(labels);
            let key =
                ["verb", "resource", "subresource", "code"].map(|k| l.get(k).cloned().unwrap_or_default());
            *out.entry((key[0].clone(), key[1].clone(), key[2].clone(), key[3].clone())).or_insert(0.0) +=
                value.parse::<f64>().unwrap_or(0.0);
        }
        out
    }

    /// A ServiceAccount `ns/name` (and its namespace), as the chart creates them.
    pub fn service_account(&self, ns: &str, name: &str) {
        let _ = self.api.kubectl().args(["create", "namespace", ns]).output();
        let o = self.api.kubectl().args(["create", "serviceaccount", name, "-n", ns]).output().unwrap();
        assert!(o.status.success() || String::from_utf8_lossy(&o.stderr).contains("AlreadyExists"));
    }

    /// A kubeconfig for a token of ServiceAccount `ns/sa`, bound to a Pod
    /// `<sa>-on-<node>` scheduled to `node` when one is given (its token then
    /// carries the node claim, as a DaemonSet pod's does).
    pub fn service_account_kubeconfig(&self, ns: &str, sa: &str, node: Option<&str>) -> PathBuf {
        let bound = node.map(|n| {
            let pod = format!("{sa}-on-{n}");
            self.create(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": ns},
                "spec": {"serviceAccountName": sa, "nodeName": n, "automountServiceAccountToken": false,
                         "containers": [{"name": "c", "image": "registry.invalid/none"}]},
            }));
            pod
        });
        let token = self
            .api
            .service_account_token(ns, sa, bound.as_deref().map(|p| ("Pod", p)))
            .unwrap_or_else(|e| panic!("token of {ns}/{sa}: {e:#}"));
        let name = bound.clone().unwrap_or_else(|| sa.to_string());
        self.api.token_kubeconfig(&name, &token).unwrap()
    }

    /// Applies objects (JSON values) with the pinned kubectl, server-side, as the admin.
    pub fn kubectl_apply(&self, objs: &[Value]) {
        let path = self.dir.path().join(format!("apply-{}.json", objs.len()));
        std::fs::write(
            &path,
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objs})).unwrap(),
        )
        .unwrap();
        let o = self
            .api
            .kubectl()
            .args(["apply", "--server-side", "--force-conflicts", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(o.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A file name for `node`: a Node name may be 253 characters, a file name only 255 bytes
/// with its suffix.
fn file_stem(node: &str) -> String {
    if node.len() <= 64 {
        node.to_string()
    } else {
        format!("{}-{:016x}", &node[..48], kube_rdma_operator::status::fnv1a(node.as_bytes()))
    }
}

fn plural_of(v: &Value) -> String {
    match v["kind"].as_str().unwrap_or_default() {
        "Node" => "nodes",
        "Pod" => "pods",
        "RdmaNodeState" => "rdmanodestates",
        "RoceProfile" => "roceprofiles",
        "Event" => "events",
        k => panic!("no plural for {k}"),
    }
    .into()
}

fn prom_labels(s: &str) -> BTreeMap<String, String> {
    let inner = s.trim_start_matches(|c| c != '{').trim_start_matches('{').trim_end_matches('}');
    let mut out = BTreeMap::new();
    for part in inner.split("\",") {
        if let Some((k, v)) = part.split_once("=\"") {
            out.insert(k.trim_matches(',').to_string(), v.trim_end_matches('"').to_string());
        }
    }
    out
}

/// The chart rendered by Helm's own engine (scripts/delivery/chart.py) for a
/// Kubernetes 1.34 cluster: every object, the upgrade hook's with `upgrade`.
pub fn chart_objects(upgrade: bool) -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let py = format!(
        "import json, sys; sys.path.insert(0, {d:?}); import chart; \
         print(json.dumps(chart.objects(chart.render(None, kube_version='1.34.0', upgrade={u}))))",
        d = root.join("scripts/delivery").display().to_string(),
        u = if upgrade { "True" } else { "False" },
    );
    let o = Command::new("python3").args(["-c", &py]).output().unwrap();
    assert!(o.status.success(), "rendering the chart: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A running executable, killed when dropped.
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn log(&self) -> String {
        format!("--- {} ---\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// Kills it (SIGKILL: a crashed agent sends nothing more).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The address it serves /metrics and /healthz on, from its log.
    pub fn metrics_addr(&self) -> SocketAddr {
        eventually("metrics address in the log", &[self], || {
            let log = strip_ansi(&std::fs::read_to_string(&self.log).ok()?);
            let at = log.find("metrics_addr=")? + "metrics_addr=".len();
            log[at..].split_whitespace().next()?.parse().ok()
        })
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `text` without terminal colour sequences (`ESC [ ... m`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `GET path` on `addr`: status code and body; `None` while nothing listens.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let code = r.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, r.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// Polls `f` every 200 ms until it returns `Some`.
pub fn eventually<T>(what: &str, procs: &[&Proc], mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(t) = f() {
            return t;
        }
        if t0.elapsed() > WAIT {
            panic!(
                "{what}: not within {WAIT:?}\n{}",
                procs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The value of one sample line `name{labels} value` in a Prometheus text.
pub fn sample(text: &str, line_prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// Runs `kubectl rdma ARGS` with `--kubeconfig` of the cluster; exit code and stdout/stderr.
pub fn kubectl(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    kubectl_with(&c.kubeconfig(), args)
}

/// Runs `kubectl rdma ARGS` with `--kubeconfig KC`.
pub fn kubectl_with(kc: &Path, args: &[&str]) -> (i32, String, String) {
    let o = kubectl_rdma().env_remove("KUBECONFIG").arg("--kubeconfig").arg(kc).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

pub fn label<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node["metadata"]["labels"][key].as_str()
}

pub fn condition<'a>(state: &'a Value, ty: &str) -> Option<&'a Value> {
    state["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ty)
}
