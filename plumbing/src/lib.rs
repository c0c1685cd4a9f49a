//! `kube-rdma-plumbing`: what every kube-rdma binary does the same way, written
//! once so the copies cannot drift apart.
//!
//! Data flow, per binary: flags and env → [`logging::init`] (one subscriber: a
//! daemon's stderr, the CNI's `logFile`) and [`VERSION`] → the binary's own
//! work → results through [`cli::emit`] (stdout that tolerates a closed pipe)
//! and the exit status of [`cli`] (0 ok, 1 a check failed, 2 usage or
//! environment). Files handed to other processes are replaced whole through
//! [`atomic_file`] (durable, unsynced on purpose, or renamed first and flushed
//! later). The daemons' registries record into [`histogram::Histogram`]s and
//! render with [`prometheus`]; [`http`] serves those pages (`/metrics`,
//! `/healthz`, `/livez`) over a tiny HTTP/1 responder.
//!
//! Cargo features keep light users light: `http` (tokio), `logging`
//! (tracing-subscriber), `clap` (`logging::Format` as a flag value). Without
//! any, the crate needs thiserror and tracing alone.
//!
//! ```no_run
//! use plumbing::{atomic_file, cli, prometheus};
//! let mut page = String::new();
//! prometheus::head(&mut page, "kuberdma_pool_capacity", "gauge", "Devices advertised by the pool.");
//! prometheus::sample(&mut page, "kuberdma_pool_capacity", &[("resource", "kuberdma.io/rdma_vfs")], 16);
//! atomic_file::write_unsynced("/run/example/metrics.txt".as_ref(), page.as_bytes()).unwrap();
//! cli::emit(&page).unwrap();
//! ```

pub mod atomic_file;
pub mod cli;
pub mod histogram;
#[cfg(feature = "http")]
pub mod http;
pub mod logging;
pub mod prometheus;

/// The release version every binary reports (`--version`, logs):
/// `KUBE_RDMA_VERSION` at build time (scripts/delivery/build-dist and the
/// Dockerfile set it from their VERSION), else the crate version, which is the
/// workspace's.
pub const VERSION: &str = match option_env!("KUBE_RDMA_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// The git commit the binaries were built from: `KUBE_RDMA_GIT_COMMIT` at build
/// time (scripts/delivery/build-dist sets it from the checkout), else `unknown`
/// (a build outside a git checkout, or a plain `cargo build`).
pub const GIT_COMMIT: &str = match option_env!("KUBE_RDMA_GIT_COMMIT") {
    Some(v) => v,
    None => "unknown",
};

/// k8s.io/apimachinery `IsDNS1123Subdomain`: what a Node (and most object)
/// name and an extended resource's prefix must be. At most 253 characters;
/// dot-separated labels of lowercase letters, digits and `-`, each starting and
/// ending with a letter or digit. Unlike a DNS name, a label may be longer than
/// 63: apimachinery checks the whole name's length only
/// (`validation.IsDNS1123Subdomain`), and we accept what the API server does.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// [`is_dns_subdomain`] as a JSON Schema / OpenAPI pattern (apimachinery's
/// `dns1123SubdomainFmt`), for schemas generated from our types; the length
/// limit (253) goes beside it as `maxLength`.
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Why `name`, given with `--node-name` or env NODE_NAME, cannot be this
/// node's name; `None` when it can. An empty or malformed name would only fail
/// later, as an API error at every write.
pub fn node_name_problem(name: &str) -> Option<String> {
    (!is_dns_subdomain(name)).then(|| {
        format!(
            "--node-name (or env NODE_NAME) {name:?} is not a Node name (a DNS subdomain: lowercase \
             letters, digits, '-' and '.', at most 253 characters)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::is_dns_subdomain;

    #[test]
    fn dns_subdomains_are_what_the_api_server_accepts_as_names() {
        for ok in ["n1", "node-a.example.com", "0", &"a".repeat(253), &format!("{}.io", "b".repeat(64))] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", "Node1", "-a", "a-", "a..b", "a.", ".a", "a_b", "a b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
