//! A real etcd + kube-apiserver ([`kube_rdma_e2e::ApiServer`]) for checks that run
//! the operator's binaries from outside Rust (`scripts/delivery`): objects from the
//! YAML files given as arguments are applied in order (`kubectl apply --server-side`;
//! CRDs are waited for until established, and an apply is retried while the kinds
//! it names are not served yet), then three lines are printed and the control plane
//! runs until stdin closes:
//!
//! ```text
//! https://127.0.0.1:PORT
//! kubeconfig: /tmp/kube-rdma-apiserver-.../admin.kubeconfig
//! kubectl: /var/cache/kube-rdma-e2e/bin/kubectl
//! ```
//!
//! Run: `cargo run -p kube-rdma-operator --example apiserver -- seed.yaml ...`.
use std::io::Read as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let api = match kube_rdma_e2e::ApiServer::start() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("apiserver: {e:#}");
            return ExitCode::from(2);
        }
    };
    for seed in std::env::args().skip(1) {
        let mut attempt = 0;
        loop {
            let o = api.kubectl().args(["apply", "--server-side", "--force-conflicts", "-f", &seed]).output();
            match o {
                Ok(o) if o.status.success() => break,
                // A CRD applied by the previous seed may not be served for a moment.
                Ok(o)
                    if attempt < 20 && String::from_utf8_lossy(&o.stderr).contains("no matches for kind") =>
                {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                Ok(o) => {
                    eprintln!("apiserver: applying {seed}: {}", String::from_utf8_lossy(&o.stderr).trim());
                    return ExitCode::from(2);
                }
                Err(e) => {
                    eprintln!("apiserver: running kubectl: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        // CRDs among them: served once established (none: kubectl says so, and that is fine).
        let _ = api
            .kubectl()
            .args(["wait", "--for=condition=Established", "--all", "crd", "--timeout=60s"])
            .output();
    }
    println!("{}", api.url);
    println!("kubeconfig: {}", api.kubeconfig().display());
    println!("kubectl: {}", kube_rdma_e2e::peers::bin("kubectl").display());
    // Until whoever started us is done (or gone): then the control plane stops (drop).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(api);
    ExitCode::SUCCESS
}
