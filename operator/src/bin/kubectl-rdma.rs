//! `kubectl rdma`: the RoCE state of nodes.
//!
//! - `kubectl rdma status [NODE] [--all]`: per node and interface, the failing checks
//!   with their remediation (from the agents' `RdmaNodeState`s).
//! - `kubectl rdma check --sim FILE | --local [--profile FILE]`: check a simulated
//!   node or this host without a cluster; exits 1 when a check fails.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand, ValueEnum};
use kube_rdma_operator::agent::NodeSource;
use kube_rdma_operator::view::{self, node_table, Detail};
use kube_rdma_operator::{check_once, checks, load_profile};
use nic::roce::{DcbSource, ObserveOpts};

#[derive(Parser)]
#[command(
    name = "kubectl-rdma",
    bin_name = "kubectl rdma",
    version = VERSION,
    about = "RoCE settings of Kubernetes nodes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// `KUBE_RDMA_VERSION` at build time (set by scripts/delivery/build-dist), else the crate version.
const VERSION: &str = match option_env!("KUBE_RDMA_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => fmt.json().init(),
        // Colour codes only for a person at a terminal.
        LogFormat::Text => {
            fmt.with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()).init();
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the agents' view of one node or all nodes.
    Status {
        /// Node name (default: every node with an RdmaNodeState).
        node: Option<String>,
        /// Show every check, not only problems.
        #[arg(long)]
        all: bool,
    },
    /// Check a simulated node or this host, without a cluster.
    Check {
        /// Simulated node description (YAML).
        #[arg(long, conflicts_with = "local")]
        sim: Option<PathBuf>,
        /// This host (honours KUBE_RDMA_SYSFS_ROOT / KUBE_RDMA_DEV_ROOT).
        #[arg(long)]
        local: bool,
        /// RoceProfile YAML (default: the built-in RoCE v2 lossless profile).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubectl-rdma: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Status { node, all } => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(status(node, if all { Detail::All } else { Detail::Problems }))
        }
        Cmd::Check { sim, local, profile, json } => {
            if sim.is_none() && !local {
                bail!("give --sim FILE or --local");
            }
            let profile =
                profile.as_deref().map(load_profile).transpose()?.unwrap_or_else(checks::default_profile);
            let (_sim, src) = match sim {
                Some(p) => {
                    let s = nic::sim::Sim::from_file(&p)
                        .with_context(|| format!("loading simulated node {}", p.display()))?;
                    let src = NodeSource {
                        roots: s.roots(),
                        dcb: DcbSource::Recorded(s.recording()),
                        opts: ObserveOpts {
                            node_name: Some(s.desc().node.clone()),
                            ..ObserveOpts::default()
                        },
                    };
                    (Some(s), src)
                }
                None => (
                    None,
                    NodeSource {
                        roots: nic::Roots::from_env(),
                        dcb: DcbSource::Netlink,
                        opts: ObserveOpts::default(),
                    },
                ),
            };
            let state = check_once(&src, &profile);
            let st = state.status.as_ref().context("no status computed")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&state)?);
            } else {
                print!("{}", node_table(&state.spec.node_name, st, Detail::All));
            }
            Ok(if st.summary.ready == "True" { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

async fn status(node: Option<String>, detail: Detail) -> anyhow::Result<ExitCode> {
    let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
    let what =
        node.as_deref().map(|n| format!("rdmanodestates/{n}")).unwrap_or_else(|| "rdmanodestates".into());
    let text =
        view::status(client, node.as_deref(), detail).await.with_context(|| format!("reading {what}"))?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
