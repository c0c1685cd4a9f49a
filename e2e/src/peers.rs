//! Where the test peers live: Go binaries built by `e2e/build-peers` into a
//! cache outside the clone (`$KUBE_RDMA_E2E_CACHE/bin`, default
//! `/var/cache/kube-rdma-e2e/bin`), and the Debian packages the node needs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The pinned Kubernetes version: `k8s.io/kubernetes` in e2e/peers/kube/go.mod, the one
/// place it is set (build-peers reads it from there; a unit test keeps this copy equal).
pub const K8S_VERSION: &str = "v1.34.4";

/// The pinned peers: (what the docs call it, wrapper module under `e2e/peers`, the Go module
/// whose version its go.mod pins).
pub const PINNED: &[(&str, &str, &str)] = &[
    ("Kubernetes", "kube", "k8s.io/kubernetes"),
    ("containerd", "containerd", "github.com/containerd/containerd/v2"),
    ("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    ("Multus", "multus", "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"),
    // The cluster-wide IPAM plugin of the quick start's RDMA network (crate::whereabouts).
    ("whereabouts", "whereabouts", "github.com/k8snetworkplumbingwg/whereabouts"),
    // Kubernetes 1.36's API server alone (e2e/peers/apiserver-1.36/main.go says why).
    ("kube-apiserver-1.36", "apiserver-1.36", "k8s.io/kubernetes"),
    // Prometheus' promtool, which lints each daemon's live /metrics (v0.3xx.y is Prometheus 3.xx.y).
    ("promtool", "promtool", "github.com/prometheus/prometheus"),
];

/// The version of `module` that wrapper module `wrapper` (`e2e/peers/<wrapper>/go.mod`) pins.
pub fn pinned_version(wrapper: &str) -> Result<String> {
    let (_, _, module) =
        PINNED.iter().find(|(_, w, _)| *w == wrapper).with_context(|| format!("no pinned peer {wrapper}"))?;
    let path = repo_root().join("e2e/peers").join(wrapper).join("go.mod");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    go_mod_version(&text, module).with_context(|| format!("{} does not require {module}", path.display()))
}

/// The version a go.mod's `require` gives `module` (one-line or in a block); `replace`
/// lines are not requirements.
pub fn go_mod_version(go_mod: &str, module: &str) -> Option<String> {
    let mut in_require = false;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        let mut words: Vec<&str> = line.split_whitespace().collect();
        match words.first().copied() {
            Some("require") if words.get(1) == Some(&"(") => {
                in_require = true;
                continue;
            }
            Some("require") => {
                words.remove(0);
            }
            Some(")") => {
                in_require = false;
                continue;
            }
            _ if !in_require => continue,
            _ => {}
        }
        if words.len() >= 2 && words[0] == module {
            return Some(words[1].to_string());
        }
    }
    None
}

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

/// Path of the peer binary `name` (kube, etcd, containerd, ctr, containerd-shim-runc-v2, multus,
/// whereabouts, pause, kube-apiserver-1.36, promtool).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_mod_requirement_is_read_from_a_block_or_a_line_never_from_replace() {
        let m = "module x\n\ngo 1.24\n\nrequire k8s.io/kubernetes v1.34.4\n\nrequire (\n\tgithub.com/a/b v0.1.0 // indirect\n\tk8s.io/api v0.34.4\n)\n\nreplace k8s.io/api => k8s.io/api v0.34.5\n";
        assert_eq!(go_mod_version(m, "k8s.io/kubernetes").as_deref(), Some("v1.34.4"));
        assert_eq!(go_mod_version(m, "github.com/a/b").as_deref(), Some("v0.1.0"));
        assert_eq!(go_mod_version(m, "k8s.io/api").as_deref(), Some("v0.34.4"));
        assert_eq!(go_mod_version(m, "k8s.io/apimachinery"), None);
    }

    #[test]
    fn the_kubernetes_version_constant_is_the_one_go_mod_pins() {
        assert_eq!(
            pinned_version("kube").unwrap(),
            K8S_VERSION,
            "e2e/peers/kube/go.mod vs peers::K8S_VERSION"
        );
        for (_, wrapper, _) in PINNED {
            assert!(pinned_version(wrapper).unwrap().starts_with('v'), "{wrapper}");
        }
    }

    /// Every `NAME vX.Y.Z` of a pinned peer in the docs is the version go.mod pins.
    #[test]
    fn the_docs_name_the_pinned_peer_versions() {
        let root = repo_root();
        let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
        files.extend(std::fs::read_dir(root.join("docs")).unwrap().flatten().map(|e| e.path()));
        let mut seen = 0;
        for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "md")) {
            let text = std::fs::read_to_string(f).unwrap();
            for (name, wrapper, _) in PINNED {
                let want = pinned_version(wrapper).unwrap();
                let names: &[&str] =
                    if *name == "Kubernetes" { &["Kubernetes", "kube-apiserver"] } else { &[name] };
                for n in names {
                    for (i, _) in text.match_indices(&format!("{n} v")) {
                        let v: String = text[i + n.len() + 1..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
                            .collect();
                        // Only full versions (vX.Y.Z): "Kubernetes v1.34" names the minor.
                        if v.matches('.').count() == 2 {
                            seen += 1;
                            assert_eq!(v, want, "{}: {n} {v}, go.mod pins {want}", f.display());
                        }
                    }
                }
            }
        }
        assert!(seen >= 4, "the docs name no pinned peer versions (found {seen})");
    }
}
