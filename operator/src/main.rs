//! `kube-rdma-operator`: `agent`, `controller`, `crds`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use kube_rdma_operator::agent::{Agent, AgentConfig};
use kube_rdma_operator::controller::{Controller, STALE_AFTER};
use kube_rdma_operator::kubectl::client::{connect, ClientOpts};
use kube_rdma_operator::kubectl::duration;
use kube_rdma_operator::kubectl::output::{self, Format, EXIT_HELP, EXIT_HELP_NO_CHECKS};
use kube_rdma_operator::source::NodeSource;
use kube_rdma_operator::{check_once, checks, crd, crd_apply, health, load_profile};
use nic::roce::{DcbSource, ObserveOpts};
use plumbing::cli::emit;
use plumbing::logging::{self, Filter, Format as LogFormat, Sink};
use plumbing::VERSION;

#[derive(Parser)]
#[command(
    name = "kube-rdma-operator",
    version = VERSION,
    about = "RoCE fabric settings per node: agent, controller, CRDs",
    after_help = EXIT_HELP
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// How to reach the API server (as kubectl: --kubeconfig, KUBECONFIG, ~/.kube/config, in-cluster).
#[derive(clap::Args, Clone)]
struct ApiArgs {
    /// Kubeconfig file (default: env KUBECONFIG, ~/.kube/config, else the pod's service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
}

impl ApiArgs {
    /// The first of these flags given, if any.
    fn given(&self) -> Option<&'static str> {
        [("--kubeconfig", self.kubeconfig.is_some()), ("--context", self.context.is_some())]
            .into_iter()
            .find_map(|(flag, set)| set.then_some(flag))
    }

    fn opts(&self) -> ClientOpts {
        ClientOpts {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            ..Default::default()
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Node agent: read RoCE settings, check them, publish RdmaNodeState.
    #[command(after_help = EXIT_HELP)]
    Agent(AgentArgs),
    /// Controller: RoceProfile status, stale agents, cleanup of RdmaNodeStates of deleted nodes.
    #[command(after_help = EXIT_HELP_NO_CHECKS)]
    Controller(ControllerArgs),
    /// Print both CRDs as YAML; with --apply, server-side apply them to the cluster instead.
    #[command(after_help = EXIT_HELP_NO_CHECKS)]
    Crds {
        /// Apply (field manager `kube-rdma`, forcing conflicts) using the kubeconfig or in-cluster config.
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
}

#[derive(clap::Args)]
struct ControllerArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Time between full re-checks of what the watches hold (staleness of agents);
    /// changes are handled as they arrive. No API requests. A duration (60s, 1m) or seconds.
    #[arg(long, default_value_t = 60, value_parser = duration::parse_secs)]
    interval: u64,
    /// Time without a heartbeat after which an agent is marked Stale (25m; or seconds).
    #[arg(long, default_value_t = STALE_AFTER.as_secs(), value_parser = duration::parse_secs)]
    stale_after: u64,
    /// Serve /metrics, /healthz and /livez here, e.g. 0.0.0.0:9412.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

// The loop's options given with --once would be ignored: they conflict with it.
#[derive(clap::Args)]
struct AgentArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// One check without a cluster; print the result and exit (as `kubectl rdma check`:
    /// exit 1 when a check fails).
    #[arg(long)]
    once: bool,
    /// Output of --once: table (every check), json, yaml, jsonpath=TEMPLATE.
    #[arg(short = 'o', long, default_value = "table", value_parser = output::parse_check, requires = "once")]
    output: Format,
    /// Read a simulated node instead of this host: a YAML description, or the
    /// directory of a materialised one (`sys/`, `dev/`, `node.yaml`).
    #[arg(long)]
    sim: Option<PathBuf>,
    /// A RoceProfile YAML to check against (default: profiles from the cluster, or the built-in default with --once).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// sysfs root (env KUBE_RDMA_SYSFS_ROOT, default /sys). Not with --sim, which brings its own.
    #[arg(long, conflicts_with = "sim")]
    sysfs_root: Option<PathBuf>,
    /// dev root (env KUBE_RDMA_DEV_ROOT, default /dev). Not with --sim, which brings its own.
    #[arg(long, conflicts_with = "sim")]
    dev_root: Option<PathBuf>,
    /// Node to report as.
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// Time between local re-reads of the node (± 10 %; no API request unless
    /// something changed), a duration (30s) or seconds. Kernel link/DCB events trigger extra passes.
    #[arg(long, default_value_t = 30, value_parser = duration::parse_secs, conflicts_with = "once")]
    poll_interval: u64,
    /// Time without a status write after which the agent refreshes
    /// status.lastHeartbeatTime (+ up to 10 %), a duration (10m) or seconds. The controller
    /// marks an agent Stale after --stale-after (25 min): keep this well below it.
    #[arg(long, default_value_t = kube_rdma_operator::agent::HEARTBEAT.as_secs(), value_parser = duration::parse_secs, conflicts_with = "once")]
    heartbeat: u64,
    /// Read rdma_cm defaults from configfs, creating the device directory if needed (mkdir/rmdir).
    #[arg(long)]
    read_rdma_cm_configfs: bool,
    /// Serve /metrics, /healthz and /livez here, e.g. 0.0.0.0:9411.
    #[arg(long, conflicts_with = "once")]
    metrics_addr: Option<SocketAddr>,
}

fn main() -> ExitCode {
    let cli = match plumbing::cli::parse::<Cli>("kube-rdma-operator") {
        Ok(c) => c,
        Err(code) => return code,
    };
    logging::init(cli.log_format, Filter::Env("info"), Sink::Terminal);
    plumbing::cli::finish("kube-rdma-operator", run(cli))
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Crds { apply: false, api } => {
            // ApiArgs is shared with the other commands, so clap cannot say it needs --apply.
            if let Some(flag) = api.given() {
                bail!("crds prints the CRDs without a cluster: {flag} applies only with --apply");
            }
            emit(&crd::crds_yaml().context("serialising the CRDs")?)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Crds { apply: true, api } => {
            let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            rt.block_on(async {
                let client = connect(&api.opts()).await?;
                for a in crd_apply::apply(client).await? {
                    emit(&format!(
                        "customresourcedefinition.apiextensions.k8s.io/{} serverside-applied (resourceVersion {})\n",
                        a.name, a.resource_version
                    ))?;
                }
                Ok(ExitCode::SUCCESS)
            })
        }
        Cmd::Controller(c) => {
            let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            rt.block_on(async {
                let client = connect(&c.api.opts()).await?;
                let ctl = Controller::new(client)
                    .with_stale_after(Duration::from_secs(c.stale_after.max(1)))
                    .with_check_interval(Duration::from_secs(c.interval.max(1)));
                if let Some(addr) = c.metrics_addr {
                    let l = tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("binding metrics address {addr}"))?;
                    tracing::info!(metrics_addr = %l.local_addr().unwrap_or(addr), "serving /metrics, /healthz and /livez");
                    tokio::spawn(health::serve(l, ctl.endpoints()));
                }
                ctl.run(shutdown()).await;
                Ok(ExitCode::SUCCESS)
            })
        }
        Cmd::Agent(a) => agent(a),
    }
}

fn agent(a: AgentArgs) -> anyhow::Result<ExitCode> {
    if a.once {
        // ApiArgs is shared with the other commands, so clap cannot say it conflicts.
        if let Some(flag) = a.api.given() {
            bail!("--once runs without a cluster: {flag} does not apply");
        }
    }
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
        emit(&output::checked_node(&state, &a.output)?)?;
        let ready = state.status.as_ref().is_some_and(|s| s.summary.ready == "True");
        return Ok(output::verdict(ready));
    }
    let Some(node_name) = a.node_name.clone() else {
        bail!("--node-name (or env NODE_NAME) is required for the agent loop");
    };
    if let Some(problem) = plumbing::node_name_problem(&node_name) {
        bail!(problem);
    }
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async move {
        let client = connect(&a.api.opts()).await?;
        let mut cfg = AgentConfig::new(node_name, source.clone());
        cfg.poll = Duration::from_secs(a.poll_interval.max(1));
        cfg.heartbeat = Duration::from_secs(a.heartbeat.max(1));
        cfg.profile = profile;
        let agent = Agent::new(cfg, client);
        if let Some(addr) = a.metrics_addr {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding metrics address {addr}"))?;
            tracing::info!(metrics_addr = %l.local_addr().unwrap_or(addr), "serving /metrics, /healthz and /livez");
            tokio::spawn(health::serve(l, agent.endpoints()));
        }
        let kernel = match source.dcb {
            DcbSource::Netlink => kernel_events(),
            DcbSource::Recorded(_) => None,
        };
        agent.run(kernel, shutdown()).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Link and DCB change notifications; `None` (poll only) when the subscription fails.
fn kernel_events() -> Option<tokio::sync::mpsc::Receiver<nic::netlink::events::RtnlEvent>> {
    use nic::netlink::events::{subscribe, Group};
    match subscribe(&[Group::Link, Group::Dcb], 64) {
        Ok(rx) => Some(rx),
        Err(e) => {
            tracing::warn!(error = %kube_rdma_operator::api::chain(&e), "cannot subscribe to link/DCB events; polling only");
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
            let (sim, src) = kube_rdma_operator::source::simulated(path, opts)
                .with_context(|| format!("loading simulated node {}", path.display()))?;
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
