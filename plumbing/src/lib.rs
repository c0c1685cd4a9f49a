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
