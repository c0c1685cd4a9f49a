//! `kubectl rdma`: the RoCE state of nodes.
//!
//! - `kubectl rdma status [NODE...] [-o table|wide|json|yaml] [--all]`: every node
//!   one line each, or the named nodes in detail (failing checks and the commands
//!   that fix them, in the order they must run), from the agents' `RdmaNodeState`s.
//! - `kubectl rdma check --sim FILE | --local [--profile FILE]`: check a simulated
//!   node or this host without a cluster.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use kube_rdma_operator::api::chain;
use kube_rdma_operator::client::{connect_described, ClientOpts};
use kube_rdma_operator::logging::{self, LogFormat, VERSION};
use kube_rdma_operator::source::NodeSource;
use kube_rdma_operator::view::{self, node_table, Detail};
use kube_rdma_operator::{check_once, checks, load_profile};
use nic::roce::{DcbSource, ObserveOpts};

const EXIT_HELP: &str = "\
Exit status:
  0  every node shown is ready (RoceReady, agent reporting)
  1  a node shown is not ready: a check fails, its agent is stale, or it has no RdmaNodeState
  2  an error: bad arguments, no cluster access, an API error";

#[derive(Parser)]
#[command(
    name = "kubectl-rdma",
    bin_name = "kubectl rdma",
    version = VERSION,
    about = "RoCE settings of Kubernetes nodes",
    after_help = EXIT_HELP
)]
struct Cli {
    /// Kubeconfig file (default: env KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// One line per node; the named nodes in detail.
    Table,
    /// As table, with PFC, TRUST, ECN, MTU, ROCE and NETNS columns and every check.
    Wide,
    /// The RdmaNodeState objects.
    Json,
    /// The RdmaNodeState objects.
    Yaml,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the agents' view of all nodes, or of the named nodes in detail.
    #[command(after_help = EXIT_HELP)]
    Status {
        /// Node names (default: every node with an RdmaNodeState).
        nodes: Vec<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
        /// Show every check of detailed nodes, not only problems.
        #[arg(long)]
        all: bool,
    },
    /// Check a simulated node or this host, without a cluster (exit 1 when a check fails).
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
        /// Output format (table, json or yaml).
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
        /// Same as `-o json`.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format, "warn,kube_client=off");
    match run(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubectl-rdma: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let api = ClientOpts { kubeconfig: cli.kubeconfig, context: cli.context };
    match cli.cmd {
        Cmd::Status { nodes, output, all } => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(status(&api, nodes, output, all))
        }
        Cmd::Check { sim, local, profile, output, json } => {
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
            match if json { Output::Json } else { output } {
                Output::Json => println!("{}", serde_json::to_string_pretty(&state)?),
                Output::Yaml => print!("{}", serde_yaml::to_string(&state)?),
                Output::Table => print!("{}", node_table(&state.spec.node_name, st, Detail::All)),
                Output::Wide => print!("{}", node_table(&state.spec.node_name, st, Detail::All)),
            }
            Ok(if st.summary.ready == "True" { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

async fn status(api: &ClientOpts, nodes: Vec<String>, output: Output, all: bool) -> anyhow::Result<ExitCode> {
    let (client, about) = connect_described(api).await?;
    let what = if nodes.is_empty() {
        "rdmanodestates".to_string()
    } else {
        format!("rdmanodestates/{}", nodes.join(","))
    };
    let reports = match view::fetch(client, &nodes).await {
        Ok(r) => r,
        Err(e) => bail!("reading {what} from the {about}: {}", chain(&e)),
    };
    match output {
        Output::Json | Output::Yaml => {
            let items: Vec<_> = reports.iter().filter_map(|r| r.state.clone()).collect();
            let v = if nodes.len() == 1 {
                serde_json::to_value(items.first())?
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
            };
            if output == Output::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", serde_yaml::to_string(&v)?);
            }
            for r in reports.iter().filter(|r| r.state.is_none()) {
                eprintln!(
                    "kubectl-rdma: node {}: no RdmaNodeState (is the kube-rdma agent running there?)",
                    r.name
                );
            }
        }
        Output::Table | Output::Wide => {
            let wide = output == Output::Wide;
            if reports.is_empty() {
                println!("No RdmaNodeState found: is the kube-rdma agent running?");
            } else if nodes.is_empty() {
                print!("{}", view::summary_table(&reports, wide, Timestamp::now()));
            } else {
                let detail = if all || wide { Detail::All } else { Detail::Problems };
                print!("{}", view::details(&reports, detail));
            }
        }
    }
    let not_ready: Vec<&str> = reports.iter().filter(|r| !r.ready()).map(|r| r.name.as_str()).collect();
    if !not_ready.is_empty() && matches!(output, Output::Table | Output::Wide) && nodes.is_empty() {
        println!("\n{} of {} nodes not ready: {}", not_ready.len(), reports.len(), not_ready.join(", "));
    }
    Ok(if not_ready.is_empty() && !reports.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
