//! What every case uses: the cluster's layout, the pinned kubectl, and waits.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, Layout};
use serde_json::Value;

/// The running cluster, as the cases see it.
pub struct Ctx {
    pub layout: Layout,
}

impl Ctx {
    /// Brings the cluster up through the real `kube-rdma-cluster` binary
    /// (what `scripts/cluster up` runs), unless it is up already.
    pub fn up() -> Result<Ctx> {
        let st = Command::new(env!("CARGO_BIN_EXE_kube-rdma-cluster")).arg("up").status()?;
        if !st.success() {
            bail!("kube-rdma-cluster up failed ({st})");
        }
        Ok(Ctx { layout: Layout::new() })
    }

    /// kubectl with the admin kubeconfig; the error carries stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        kube_rdma_e2e::daemon::run(cluster::kubectl(&self.layout).args(args))
    }

    /// kubectl's output parsed as JSON (`-o json` is added).
    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.kubectl(&a)?;
        serde_json::from_str(&out).with_context(|| format!("kubectl {args:?} printed no JSON: {out}"))
    }

    /// `kubectl apply --server-side -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String> {
        let mut child = cluster::kubectl(&self.layout)
            .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().context("kubectl stdin")?.write_all(yaml.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("kubectl apply failed: {}\n{yaml}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until pod `ns/name` is Running with every container ready.
    pub fn wait_running(&self, ns: &str, name: &str, timeout: Duration) -> Result<Value> {
        let t0 = Instant::now();
        loop {
            if let Ok(p) = self.json(&["-n", ns, "get", "pod", name]) {
                let ready = p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["ready"] == true));
                if p["status"]["phase"] == "Running" && ready {
                    return Ok(p);
                }
                if t0.elapsed() > timeout {
                    let events = self
                        .kubectl(&[
                            "-n",
                            ns,
                            "get",
                            "events",
                            "--field-selector",
                            &format!("involvedObject.name={name}"),
                        ])
                        .unwrap_or_default();
                    bail!("pod {ns}/{name} not running after {timeout:?}: {}\n{events}", p["status"]);
                }
            } else if t0.elapsed() > timeout {
                bail!("pod {ns}/{name} does not exist after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `kubectl exec` in `ns/pod`.
    pub fn exec(&self, ns: &str, pod: &str, cmd: &[&str]) -> Result<String> {
        let mut a = vec!["-n", ns, "exec", pod, "--"];
        a.extend(cmd);
        self.kubectl(&a)
    }

    /// Whether the cluster's node reports Ready.
    pub fn node_ready(&self) -> Result<bool> {
        let n = self.json(&["get", "node", cluster::NODE_NAME])?;
        Ok(n["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")))
    }

    /// Deletes `kind ns/name` and waits until it is gone.
    pub fn delete(&self, ns: &str, kind: &str, name: &str) -> Result<()> {
        self.kubectl(&[
            "-n",
            ns,
            "delete",
            kind,
            name,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ])?;
        Ok(())
    }
}

/// Polls `f` until it answers `Some`, failing after `timeout` with `what` and the last error.
pub fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let t0 = Instant::now();
    let mut last = String::new();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if t0.elapsed() > timeout {
            bail!(
                "{what}: not after {timeout:?}{}",
                if last.is_empty() { String::new() } else { format!(" (last error: {last})") }
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A busybox pod manifest that sleeps, with optional extra container fields (YAML, indented 6).
/// Its shell exits on SIGTERM: `sleep` as PID 1 ignores it, so every delete waited out the
/// kubelet's 2-second minimum grace (kuberuntime `minimumGracePeriodInSeconds`).
pub fn busybox_pod(ns: &str, name: &str, extra_container: &str, annotations: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  annotations: {{{annotations}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: {img}
      imagePullPolicy: Never
      command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
{extra_container}
"#,
        img = kube_rdma_e2e::images::BUSYBOX
    )
}

/// Merges `b` into `a` as Helm merges values files: objects key by key, anything else replaced.
pub fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// The shell block of `doc` (a Markdown file of the repo) whose info string names `case`:
/// a walk-through the docs show and the suite runs (its `no-test` reason says so).
pub fn doc_block(doc: &str, case: &str) -> Result<String> {
    let path = kube_rdma_e2e::peers::repo_root().join(doc);
    let md = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = md.lines();
    while let Some(l) = lines.next() {
        if l.trim_start().starts_with("```sh") && l.contains(case) {
            let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
            return Ok(body.join("\n") + "\n");
        }
    }
    bail!("{doc} has no sh block naming {case}")
}

/// Runs `block` as the docs test runs a block (from the repo root, `bash -euo
/// pipefail`), on this lane's cluster: `scripts/cluster` is the binary that script
/// runs (this lane's instance), `kubectl` the pinned one. Returns (stdout, stderr);
/// an exit status other than 0 is an error with both.
pub fn run_doc_block(block: &str) -> Result<(String, String)> {
    let script = block.replace("scripts/cluster ", &format!("{} ", env!("CARGO_BIN_EXE_kube-rdma-cluster")));
    let path = format!(
        "{}:{}",
        kube_rdma_e2e::peers::cache_dir().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(kube_rdma_e2e::peers::repo_root())
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    ensure!(
        out.status.success(),
        "the block failed ({}):\n{block}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    Ok((stdout, stderr))
}
