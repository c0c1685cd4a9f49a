//! `kube-rdma-operator`: `agent`, `controller`, `crds`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand, ValueEnum};
use kube_rdma_operator::agent::{Agent, AgentConfig, NodeSource};
use kube_rdma_operator::controller::Controller;
use kube_rdma_operator::{check_once, checks, crd, crd_apply, load_profile, metrics, view};
use nic::roce::{DcbSource, ObserveOpts};

#[derive(Parser)]
#[command(
    name = "kube-rdma-operator",
    version = VERSION,
    about = "RoCE fabric settings per node: agent, controller, CRDs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// The release version: `KUBE_RDMA_VERSION` at build time (scripts/delivery/build-dist and the
/// Dockerfile set it from their VERSION), else the crate version.
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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => fmt.json().init(),
        // Colour codes only help a person at a terminal; in pod logs they are noise.
        LogFormat::Text => {
            fmt.with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()).init();
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Node agent: read RoCE settings, check them, publish RdmaNodeState.
    Agent(AgentArgs),
    /// Controller: RoceProfile status, cleanup of RdmaNodeStates of deleted nodes.
    Controller {
        /// Seconds between passes.
        #[arg(long, default_value_t = 30)]
        interval: u64,
    },
    /// Print both CRDs as YAML; with --apply, server-side apply them to the cluster instead.
    Crds {
        /// Apply (field manager `kube-rdma`, forcing conflicts) using the kubeconfig or in-cluster config.
        #[arg(long)]
        apply: bool,
    },
}

#[derive(clap::Args)]
struct AgentArgs {
    /// One check without a cluster; print the result and exit.
    #[arg(long)]
    once: bool,
    /// Output of --once.
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
    /// Read a simulated node (YAML description) instead of this host.
    #[arg(long)]
    sim: Option<PathBuf>,
    /// A RoceProfile YAML to check against (default: profiles from the cluster, or the built-in default with --once).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// sysfs root (env KUBE_RDMA_SYSFS_ROOT, default /sys).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// dev root (env KUBE_RDMA_DEV_ROOT, default /dev).
    #[arg(long)]
    dev_root: Option<PathBuf>,
    /// Node to report as.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// Seconds between polls (kernel link/DCB events trigger extra passes).
    #[arg(long, default_value_t = 30)]
    poll_interval: u64,
    /// Read rdma_cm defaults from configfs, creating the device directory if needed (mkdir/rmdir).
    #[arg(long)]
    read_rdma_cm_configfs: bool,
    /// Serve Prometheus metrics here, e.g. 0.0.0.0:9870.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kube-rdma-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Crds { apply: false } => {
            print!("{}", crd::crds_yaml().context("serialising the CRDs")?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Crds { apply: true } => {
            let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            rt.block_on(async {
                let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
                for a in crd_apply::apply(client).await? {
                    println!("customresourcedefinition.apiextensions.k8s.io/{} serverside-applied (resourceVersion {})", a.name, a.resource_version);
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        Cmd::Controller { interval } => {
            let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            rt.block_on(async {
                let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
                Controller::new(client).run(Duration::from_secs(interval.max(1)), shutdown()).await;
                Ok(ExitCode::SUCCESS)
            })
        }
        Cmd::Agent(a) => agent(a),
    }
}

fn agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    // The simulated tree lives as long as `_sim`.
    let (_sim, source) = source(
        a.sim.as_deref(),
        a.sysfs_root.clone(),
        a.dev_root.clone(),
        a.node_name.clone(),
        a.read_rdma_cm_configfs,
    )?;
    let profile = a.profile.as_deref().map(load_profile).transpose()?;
    if a.once {
        let profile = profile.unwrap_or_else(checks::default_profile);
        let state = check_once(&source, &profile);
        match a.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&state)?),
            Output::Table => {
                let s = state.status.as_ref().context("no status computed")?;
                print!("{}", view::node_table(&state.spec.node_name, s, view::Detail::All));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(node_name) = a.node_name.clone() else {
        bail!("--node-name (or env NODE_NAME) is required for the agent loop");
    };
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async move {
        let client = kube::Client::try_default().await.context("connecting to the Kubernetes API")?;
        let cfg = AgentConfig {
            node_name,
            source: source.clone(),
            poll: Duration::from_secs(a.poll_interval.max(1)),
            profile,
            debounce: Duration::from_millis(500),
        };
        let agent = Agent::new(cfg, client);
        if let Some(addr) = a.metrics_addr {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding metrics address {addr}"))?;
            tokio::spawn(metrics::serve(l, agent.metrics()));
        }
        let triggers = match source.dcb {
            DcbSource::Netlink => kernel_triggers(),
            DcbSource::Recorded(_) => None,
        };
        agent.run(triggers, shutdown()).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Link and DCB change notifications as bare triggers; `None` (poll only) when the
/// subscription fails.
fn kernel_triggers() -> Option<tokio::sync::mpsc::Receiver<()>> {
    use nic::netlink::events::{subscribe, Group};
    match subscribe(&[Group::Link, Group::Dcb], 64) {
        Ok(mut rx) => {
            let (tx, out) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                while rx.recv().await.is_some() {
                    // A full channel already holds a pending trigger.
                    let _ = tx.try_send(());
                }
            });
            Some(out)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot subscribe to link/DCB events; polling only");
            None
        }
    }
}

fn source(
    sim: Option<&std::path::Path>,
    sysfs: Option<PathBuf>,
    dev: Option<PathBuf>,
    node_name: Option<String>,
    rdma_cm: bool,
) -> anyhow::Result<(Option<nic::sim::Sim>, NodeSource)> {
    let opts = ObserveOpts { read_rdma_cm_configfs: rdma_cm, node_name };
    match sim {
        Some(path) => {
            let sim = nic::sim::Sim::from_file(path)
                .with_context(|| format!("loading simulated node {}", path.display()))?;
            // The simulated node's name stands in for NODE_NAME unless one is given.
            let opts =
                ObserveOpts { node_name: opts.node_name.or_else(|| Some(sim.desc().node.clone())), ..opts };
            let src = NodeSource { roots: sim.roots(), dcb: DcbSource::Recorded(sim.recording()), opts };
            Ok((Some(sim), src))
        }
        None => {
            Ok((None, NodeSource { roots: nic::Roots::resolve(sysfs, dev), dcb: DcbSource::Netlink, opts }))
        }
    }
}

async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
