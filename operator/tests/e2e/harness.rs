//! The production path: the real `kube-rdma-operator` and `kubectl-rdma`
//! executables against the API emulator over TLS, configured through the
//! emulator's kubeconfig exactly as users configure them.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_rdma_apiemu::Emulator;
use kube_rdma_operator::fixtures::example;
use nic::simdesc::NodeDesc;
use serde_json::{json, Value};

/// Generous bounds: the suite runs on two shared cores.
pub const WAIT: Duration = Duration::from_secs(30);

pub fn operator() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kube-rdma-operator"))
}

pub fn kubectl_rdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-rdma"))
}

/// An emulator over TLS with our CRDs applied as `kubectl apply -f crds.yaml` would,
/// and a temp dir for simulated nodes and logs.
pub struct Cluster {
    pub emu: Emulator,
    pub dir: tempfile::TempDir,
}

pub fn node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
}

pub fn profile(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RoceProfile", "metadata": {"name": name}, "spec": spec})
}

impl Cluster {
    pub fn new(nodes: &[(&str, Value)]) -> Self {
        let crds = kube_rdma_operator::crd::crds_yaml().unwrap();
        let mut b = Emulator::builder().seed_yaml(&crds);
        for (n, labels) in nodes {
            b = b.seed(node(n, labels.clone()));
        }
        let emu = b.start_background().expect("emulator starts");
        assert!(emu.url().starts_with("https://"), "TLS: {}", emu.url());
        Self { emu, dir: tempfile::tempdir().unwrap() }
    }

    pub fn kubeconfig(&self) -> &Path {
        self.emu.kubeconfig_path()
    }

    /// Writes a simulated node description named `node` (from the bundled `example`
    /// with `edit` applied) and returns its path.
    pub fn sim(&self, node: &str, example_name: &str, edit: impl FnOnce(&mut NodeDesc)) -> PathBuf {
        let mut d = example(example_name);
        d.node = node.into();
        edit(&mut d);
        let p = self.dir.path().join(format!("{node}.yaml"));
        std::fs::write(&p, serde_yaml::to_string(&d).unwrap()).unwrap();
        p
    }

    fn spawn(&self, name: &str, mut cmd: Command) -> Proc {
        let log = self.dir.path().join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .env("KUBECONFIG", self.kubeconfig())
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
        let mut c = operator();
        c.args(["agent", "--node-name", node, "--poll-interval", "1", "--sim"]).arg(sim);
        if !extra.contains(&"--heartbeat") {
            c.args(["--heartbeat", "2"]);
        }
        if metrics {
            c.args(["--metrics-addr", "127.0.0.1:0"]);
        }
        c.args(extra);
        self.spawn(&format!("agent-{node}"), c)
    }

    /// `kube-rdma-operator controller`: stale after 4 s, re-check every second.
    pub fn controller(&self, metrics: bool) -> Proc {
        let mut c = operator();
        c.args(["controller", "--stale-after", "4", "--interval", "1"]);
        if metrics {
            c.args(["--metrics-addr", "127.0.0.1:0"]);
        }
        self.spawn("controller", c)
    }

    pub fn get(&self, resource: &str, name: &str) -> Option<Value> {
        self.emu.store().get(resource, None, name).unwrap()
    }

    /// Waits until `pred` holds for the object; panics with `what` and the logs otherwise.
    pub fn wait(
        &self,
        resource: &str,
        name: &str,
        what: &str,
        procs: &[&Proc],
        pred: impl FnMut(Option<&Value>) -> bool,
    ) -> Value {
        match self.emu.store().wait_for_blocking(resource, None, name, WAIT, pred) {
            Ok(v) => v.unwrap_or(Value::Null),
            Err(e) => panic!(
                "{what}: {e}\nobject: {:#}\n{}",
                self.get(resource, name).unwrap_or(Value::Null),
                procs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")
            ),
        }
    }

    /// The emulator's events.k8s.io Events.
    pub fn events(&self) -> Vec<Value> {
        self.emu.store().list("events.events.k8s.io", Some("default")).unwrap()
    }

    pub fn wait_until<T>(
        &self,
        what: &str,
        procs: &[&Proc],
        f: impl FnMut(&kube_rdma_apiemu::Store) -> Option<T>,
    ) -> T {
        match self.emu.store().wait_until_blocking(WAIT, f) {
            Ok(t) => t,
            Err(e) => panic!("{what}: {e}\n{}", procs.iter().map(|p| p.log()).collect::<Vec<_>>().join("\n")),
        }
    }
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

/// Polls `f` every 100 ms until it returns `Some`, for conditions outside the store.
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
        std::thread::sleep(Duration::from_millis(100));
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
    let o = kubectl_rdma()
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .args(args)
        .output()
        .unwrap();
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
