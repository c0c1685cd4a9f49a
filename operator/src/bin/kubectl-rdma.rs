//! `kubectl rdma`: the RoCE state of nodes.
//!
//! - `kubectl rdma status [NODE...] [-l SELECTOR] [-o FORMAT] [--all]`: every node
//!   one line each (or the Nodes matching the label selector), or the named nodes in
//!   detail (failing checks and the commands that fix them, in the order they must
//!   run), from the agents' `RdmaNodeState`s. Cluster flags as kubectl's:
//!   `--kubeconfig`, `--context`, `--as`, `--as-group`, `--request-timeout`.
//! - `kubectl rdma check --sim FILE | --local [--profile FILE] [-o FORMAT]`: check a
//!   simulated node or this host without a cluster, as `kube-rdma-operator agent
//!   --once` does.
//!
//! Output formats and exit status: `kube_rdma_operator::output`.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube_rdma_operator::client::{connect_described, parse_timeout, ClientOpts};
use kube_rdma_operator::output::{self, Format, EXIT_HELP};
use kube_rdma_operator::source::NodeSource;
use kube_rdma_operator::view::{self, Detail, Selection};
use kube_rdma_operator::{check_once, checks, load_profile};
use nic::roce::{DcbSource, ObserveOpts};
use plumbing::cli::{emit, error_line};
use plumbing::logging::{self, Filter, Format as LogFormat, Sink};
use plumbing::VERSION;

#[derive(Parser)]
#[command(
    name = "kubectl-rdma",
    bin_name = "kubectl rdma",
    version = VERSION,
    about = "RoCE settings of Kubernetes nodes",
    after_help = EXIT_HELP
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    // Before `cluster`: its help heading would otherwise cover this flag too.
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Cluster flags may also come before the command, as `kubectl rdma --context x status`.
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// How to reach the API server, as kubectl's flags (`kubectl rdma status` only).
#[derive(clap::Args, Default)]
#[command(next_help_heading = "Cluster options (status)")]
struct ClusterArgs {
    /// Kubeconfig file (default: env KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// User to impersonate for the requests.
    #[arg(long = "as", value_name = "USER")]
    impersonate: Option<String>,
    /// Group to impersonate (repeat for several).
    #[arg(long = "as-group", value_name = "GROUP")]
    impersonate_groups: Vec<String>,
    /// Time to wait for each request before giving up (0, the default: no limit; e.g. 30s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    request_timeout: Option<std::time::Duration>,
}

impl ClusterArgs {
    /// These flags, each falling back to `outer` (given before the command).
    fn or(self, outer: ClusterArgs) -> ClientOpts {
        ClientOpts {
            kubeconfig: self.kubeconfig.or(outer.kubeconfig),
            context: self.context.or(outer.context),
            impersonate: self.impersonate.or(outer.impersonate),
            impersonate_groups: if self.impersonate_groups.is_empty() {
                outer.impersonate_groups
            } else {
                self.impersonate_groups
            },
            request_timeout: self.request_timeout.or(outer.request_timeout).filter(|t| !t.is_zero()),
        }
    }

    fn given(&self) -> Option<&'static str> {
        [
            (self.kubeconfig.is_some(), "--kubeconfig"),
            (self.context.is_some(), "--context"),
            (self.impersonate.is_some(), "--as"),
            (!self.impersonate_groups.is_empty(), "--as-group"),
            (self.request_timeout.is_some(), "--request-timeout"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the agents' view of all nodes, or of the named nodes in detail.
    #[command(after_help = EXIT_HELP)]
    Status {
        /// Node names (default: every node with an RdmaNodeState).
        nodes: Vec<String>,
        /// Only the Nodes whose labels match this selector (as `kubectl get nodes -l`; needs list on nodes).
        #[arg(short = 'l', long = "selector", conflicts_with = "nodes")]
        selector: Option<String>,
        /// Output format: table, wide (PFC, TRUST, ECN, MTU, ROCE and NETNS columns; every check of named
        /// nodes), json, yaml, name, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, default_value = "table", value_parser = output::parse_objects)]
        output: Format,
        /// Show every check of the named nodes, not only problems (table output; -o wide does too).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Check a simulated node or this host, without a cluster (exit 1 when a check fails).
    #[command(after_help = EXIT_HELP, group(clap::ArgGroup::new("node").required(true).args(["sim", "local"])))]
    Check {
        /// Simulated node: a YAML description, or the directory of a materialised
        /// one (`sys/`, `dev/`, `node.yaml`).
        #[arg(long)]
        sim: Option<PathBuf>,
        /// This host (honours KUBE_RDMA_SYSFS_ROOT / KUBE_RDMA_DEV_ROOT).
        #[arg(long)]
        local: bool,
        /// RoceProfile YAML (default: the built-in RoCE v2 lossless profile).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// Output format: table (every check), json, yaml, jsonpath=TEMPLATE.
        #[arg(short = 'o', long, default_value = "table", value_parser = output::parse_check)]
        output: Format,
    },
}

fn main() -> ExitCode {
    let cli = match plumbing::cli::parse::<Cli>("kubectl-rdma") {
        Ok(c) => c,
        Err(code) => return code,
    };
    logging::init(cli.log_format, Filter::Env("warn,kube_client=off"), Sink::Terminal);
    plumbing::cli::finish("kubectl-rdma", run(cli))
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Status { nodes, selector, output, all, cluster } => {
            if all {
                if let Some(why) = all_does_nothing(nodes.is_empty(), &output) {
                    bail!("--all shows every check of named nodes in the table: {why}");
                }
            }
            let api = cluster.or(cli.cluster);
            let sel = match (selector, nodes.is_empty()) {
                (Some(s), _) => Selection::Labels(s),
                (None, true) => Selection::All,
                (None, false) => Selection::Named(nodes),
            };
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(status(&api, sel, output, all))
        }
        Cmd::Check { sim, local: _, profile, output } => {
            if let Some(flag) = cli.cluster.given() {
                bail!("check runs without a cluster: {flag} does not apply (it is an option of status)");
            }
            let profile =
                profile.as_deref().map(load_profile).transpose()?.unwrap_or_else(checks::default_profile);
            let (_sim, src) = match sim {
                Some(p) => {
                    let (s, src) = kube_rdma_operator::source::simulated(&p, ObserveOpts::default())
                        .with_context(|| format!("loading simulated node {}", p.display()))?;
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
            emit(&output::checked_node(&state, &output)?)?;
            let ready = state.status.as_ref().is_some_and(|s| s.summary.ready == "True");
            Ok(output::verdict(ready))
        }
    }
}

/// Why `--all` would change nothing: it lists every check of the nodes shown in
/// detail, which are named nodes in a table (`wide` lists every check already).
fn all_does_nothing(no_nodes: bool, output: &Format) -> Option<String> {
    if no_nodes {
        return Some("name the nodes (all nodes or -l show one line each)".into());
    }
    let word = match output {
        Format::Table | Format::Wide => return None,
        Format::Json => "json",
        Format::Yaml => "yaml",
        Format::Name => "name",
        Format::JsonPath(_) => "jsonpath",
    };
    Some(format!("-o {word} prints no table"))
}

async fn status(api: &ClientOpts, sel: Selection, output: Format, all: bool) -> anyhow::Result<ExitCode> {
    let (client, about) = connect_described(api).await?;
    let fetched = match view::fetch(client, &sel, api.request_timeout).await {
        Ok(f) => f,
        Err(e) => bail!("{e} ({about})"),
    };
    let reports = &fetched.reports;
    let states: Vec<_> = reports.iter().filter_map(|r| r.state.clone()).collect();
    // One named node prints as the object, anything else as a List (as kubectl get).
    let single = matches!(&sel, Selection::Named(n) if n.len() == 1);
    let value = match states.first() {
        Some(s) if single => serde_json::to_value(s)?,
        _ => {
            serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": states})
        }
    };
    let not_ready: Vec<&str> = reports.iter().filter(|r| !r.ready()).map(|r| r.name.as_str()).collect();
    match &output {
        Format::Table | Format::Wide => {
            let wide = output == Format::Wide;
            if !reports.is_empty() {
                let text = match &sel {
                    Selection::Named(_) => {
                        view::details(reports, if all || wide { Detail::All } else { Detail::Problems })
                    }
                    _ => {
                        let mut t = view::summary_table(reports, wide, Timestamp::now());
                        if !not_ready.is_empty() {
                            t.push_str(&format!(
                                "\n{} of {} nodes not ready: {}\n",
                                not_ready.len(),
                                reports.len(),
                                not_ready.join(", ")
                            ));
                        }
                        t
                    }
                };
                emit(&text)?;
            }
        }
        Format::Name => {
            let names: String =
                states.iter().map(|s| format!("rdmanodestate.kuberdma.io/{}\n", s.name_any())).collect();
            emit(&names)?;
        }
        data => {
            if !(single && states.is_empty()) {
                emit(&output::data(&value, data)?.unwrap_or_default())?;
            }
        }
    }
    for n in &fetched.not_found {
        error_line(&format!("Error from server (NotFound): rdmanodestates.kuberdma.io \"{n}\" not found"));
    }
    if reports.is_empty() && fetched.not_found.is_empty() {
        error_line(
            match &sel {
                Selection::Labels(s) => format!("No Node matches -l {s}"),
                _ => "No RdmaNodeState found: is the kube-rdma agent running?".to_string(),
            }
            .as_str(),
        );
    }
    let ok = fetched.not_found.is_empty() && !reports.is_empty() && not_ready.is_empty();
    Ok(output::verdict(ok))
}
