//! The `kube-rdma-apiemu serve` binary, run as a user runs it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

const BIN: &str = env!("CARGO_BIN_EXE_kube-rdma-apiemu");

struct Served {
    child: Child,
    url: String,
    kubeconfig: std::path::PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &std::path::Path, extra: &[&str]) -> Served {
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().expect("a URL line").unwrap();
    let second = lines.next().expect("a kubeconfig line").unwrap();
    assert_eq!(second, format!("kubeconfig: {}", kubeconfig.display()));
    Served { child, url, kubeconfig }
}

async fn client(kubeconfig: &std::path::Path, context: &str) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap();
    let options = KubeConfigOptions { context: Some(context.into()), ..Default::default() };
    kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &options).await.unwrap()).unwrap()
}

#[tokio::test]
async fn serve_writes_a_kubeconfig_that_works_for_both_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: seeded\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: other\ndata:\n  k: v\n",
    )
    .unwrap();
    let served = serve(dir.path(), &["--seed", seed.to_str().unwrap()]);
    assert!(served.url.starts_with("https://127.0.0.1:"), "{}", served.url);
    let nodes: Api<Node> = Api::all(client(&served.kubeconfig, "emu").await);
    let names: Vec<_> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, ["seeded"]);
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&served.kubeconfig, "emu-other").await);
    assert_eq!(cms.get("cm").await.unwrap().data.unwrap()["k"], "v");
}

#[tokio::test]
async fn serve_plain_http_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path(), &["--plain-http"]);
    assert!(served.url.starts_with("http://127.0.0.1:"), "{}", served.url);
    let nodes: Api<Node> = Api::all(client(&served.kubeconfig, "emu").await);
    assert!(nodes.list(&ListParams::default()).await.unwrap().items.is_empty());
    let pid = libc::pid_t::try_from(served.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = served.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn a_bad_seed_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("bad.yaml");
    std::fs::write(&seed, "apiVersion: v1\nkind: Node\nmetadata:\n  name: ok\n---\napiVersion: v1\nkind: Node\nmetadata:\n  name: Not_Valid\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--kubeconfig"])
        .arg(dir.path().join("kc"))
        .arg("--seed")
        .arg(&seed)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml, document 1") && err.contains("Not_Valid"), "{err}");
}
