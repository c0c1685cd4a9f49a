//! Where the test peers live: Go binaries built by `e2e/build-peers` into a
//! cache outside the clone (`$KUBE_RDMA_E2E_CACHE/bin`, default
//! `/var/cache/kube-rdma-e2e/bin`), and the Debian packages the node needs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The pinned Kubernetes version (must match e2e/peers/kube/go.mod and build-peers).
pub const K8S_VERSION: &str = "v1.34.4";

/// The repository root, found at run time where it can be: `KUBE_RDMA_REPO`
/// (scripts/cluster sets it), else the parent of the `CARGO_MANIFEST_DIR` that
/// cargo sets for tests and `cargo run` (and the children they start), else
/// the path compiled in. Cargo keeps a binary fresh when its checkout moves or
/// another checkout shares the target dir, so the compiled-in path can name a
/// tree that is not this one (seen: a CI clone's path in a developer's build).
pub fn repo_root() -> PathBuf {
    if let Some(r) = std::env::var_os("KUBE_RDMA_REPO").filter(|v| !v.is_empty()) {
        return PathBuf::from(r);
    }
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().unwrap_or(Path::new("/")).to_path_buf()
}

/// The cache directory for peers and images.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("KUBE_RDMA_E2E_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/kube-rdma-e2e".into())
}

/// Path of the peer binary `name` (kube, etcd, containerd, ctr, containerd-shim-runc-v2, multus, pause).
pub fn bin(name: &str) -> PathBuf {
    cache_dir().join("bin").join(name)
}

/// Builds the peers if needed (cached: seconds when nothing changed).
pub fn ensure_built() -> Result<()> {
    let script = repo_root().join("e2e/build-peers");
    let st = Command::new(&script).status().with_context(|| format!("running {}", script.display()))?;
    if !st.success() {
        bail!("{} failed ({st}); see its output above", script.display());
    }
    Ok(())
}

/// The Debian CNI plugins directory (package containernetworking-plugins).
pub const DEBIAN_CNI_DIR: &str = "/usr/lib/cni";

/// Checks the host programs the node needs, naming the package of each one missing.
pub fn check_host_tools() -> Result<()> {
    let needs = [
        ("runc", "runc"),
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("iptables", "iptables"),
        ("podman", "podman"),
        ("mount", "mount"),
    ];
    let mut missing = vec![];
    for (prog, pkg) in needs {
        if which(prog).is_none() {
            missing.push(format!("{prog} (Debian package {pkg})"));
        }
    }
    for p in ["bridge", "host-local", "loopback", "portmap"] {
        if !Path::new(DEBIAN_CNI_DIR).join(p).exists() {
            missing.push(format!("{DEBIAN_CNI_DIR}/{p} (Debian package containernetworking-plugins)"));
        }
    }
    if !Path::new("/bin/busybox").exists() {
        missing.push("/bin/busybox (Debian package busybox-static)".into());
    }
    if !missing.is_empty() {
        bail!("the e2e node needs: {}; scripts/setup-deps installs them", missing.join(", "));
    }
    Ok(())
}

/// The first `prog` on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(prog)).find(|p| p.is_file())
}
