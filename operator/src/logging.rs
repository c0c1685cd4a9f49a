//! What both operator binaries (`kube-rdma-operator`, `kubectl-rdma`) set up the
//! same way: the version they report and their logs on stderr.

/// The release version: `KUBE_RDMA_VERSION` at build time (scripts/delivery/build-dist and the
/// Dockerfile set it from their VERSION), else the crate version.
pub const VERSION: &str = match option_env!("KUBE_RDMA_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// `--log-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Plain text, colour only on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs to stderr in `format`; `RUST_LOG` overrides `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal as _;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => fmt.json().init(),
        // Colour codes only help a person at a terminal; in pod logs they are noise.
        LogFormat::Text => {
            fmt.with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()).init();
        }
    }
}
