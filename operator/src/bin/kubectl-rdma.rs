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
//! - `kubectl rdma version [--client] [-o json|yaml]`: this build, and what the
//!   cluster runs (`kube_rdma_operator::kubectl::version`).
//! - `kubectl rdma completion bash|zsh|fish`: a completion script (clap_complete).
//!
//! kubectl's habits (`kube_rdma_operator::kubectl`): an error is one message on
//! stderr in kubectl's words and exit 1, a usage error too (`See 'kubectl rdma
//! status --help' for usage.`); `-n` and `-A` are accepted and change nothing for
//! the cluster-scoped RdmaNodeStates, as `kubectl get nodes -n x` ignores `-n`.
//! Output formats and the exit status of checks: `kube_rdma_operator::kubectl::output`.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{CommandFactory, Parser, Subcommand};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube_rdma_operator::kubectl::client::{connect_described, ClientOpts, Connected};
use kube_rdma_operator::kubectl::duration;
use kube_rdma_operator::kubectl::output::{self, Format, EXIT_HELP_KUBECTL};
use kube_rdma_operator::kubectl::version::{self as ver, ClientVersion, Version};
use kube_rdma_operator::kubectl::view::{self, Detail, FetchError, Selection};
use kube_rdma_operator::kubectl::{completion, errors};
use kube_rdma_operator::source::NodeSource;
use kube_rdma_operator::{check_once, checks, load_profile};
use nic::roce::{DcbSource, ObserveOpts};
use plumbing::cli::{emit, error_line, EXIT_FAILED};
use plumbing::logging::{self, Filter, Format as LogFormat, Sink};
use plumbing::VERSION;

#[derive(Parser)]
#[command(
    name = "kubectl-rdma",
    bin_name = "kubectl rdma",
    version = VERSION,
    about = "RoCE settings of Kubernetes nodes",
    after_help = EXIT_HELP_KUBECTL
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

/// How to reach the API server, as kubectl's flags (`status` and `version`).
#[derive(clap::Args, Default)]
#[command(next_help_heading = "Cluster options (status, version)")]
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
    /// Time to wait for each request before giving up (0, the default: no limit; e.g. 30s, 2m; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    request_timeout: Option<std::time::Duration>,
    /// Namespace, as kubectl's -n: RdmaNodeStates and Nodes are cluster-scoped, so status ignores it
    /// as `kubectl get nodes` does; version looks for the kube-rdma workloads only there.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// All namespaces, as kubectl's -A: what status and version do anyway.
    // Not in conflict with -n: kubectl lets -A win.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
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

    /// `-n` given here or before the command (`-A` means what no `-n` means).
    fn namespace(&self, outer: &ClusterArgs) -> Option<String> {
        self.namespace
            .clone()
            .or_else(|| outer.namespace.clone())
            .filter(|_| !self.all_namespaces && !outer.all_namespaces)
    }

    fn given(&self) -> Option<&'static str> {
        [
            (self.kubeconfig.is_some(), "--kubeconfig"),
            (self.context.is_some(), "--context"),
            (self.impersonate.is_some(), "--as"),
            (!self.impersonate_groups.is_empty(), "--as-group"),
            (self.request_timeout.is_some(), "--request-timeout"),
            (self.namespace.is_some(), "--namespace"),
            (self.all_namespaces, "--all-namespaces"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the agents' view of all nodes, or of the named nodes in detail.
    #[command(after_help = EXIT_HELP_KUBECTL)]
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
    #[command(after_help = EXIT_HELP_KUBECTL, group(clap::ArgGroup::new("node").required(true).args(["sim", "local"])))]
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
    /// Print this build's version and, when the cluster is reachable, its server version and the
    /// kube-rdma components' images.
    #[command(after_help = EXIT_HELP_PLAIN)]
    Version {
        /// This build only; no cluster needed.
        #[arg(long)]
        client: bool,
        /// Output format: json or yaml (default: text).
        #[arg(short = 'o', long, value_parser = ["json", "yaml"])]
        output: Option<String>,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Print a shell completion script of kubectl-rdma: `source <(kubectl rdma completion bash)`.
    /// For `kubectl rdma <TAB>` (kubectl >= 1.26), link this binary as kubectl_complete-rdma on PATH.
    #[command(after_help = EXIT_HELP_PLAIN)]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The exit status of the commands that check nothing, for `--help`.
const EXIT_HELP_PLAIN: &str = "\
Exit status:
  0  done
  1  an error: bad flags, the cluster not reachable (version), stdout cannot be written";

fn main() -> ExitCode {
    // Run as kubectl_complete-rdma (a symlink): answer kubectl's completion request.
    let arg0 = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&arg0).file_name().is_some_and(|n| n == completion::EXECUTABLE) {
        let words: Vec<String> = std::env::args().skip(1).collect();
        let (candidates, directive) = completion::candidates(&Cli::command(), &words);
        return print(&completion::cobra_answer(&candidates, directive));
    }
    let cli = match parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    logging::init(cli.log_format, Filter::Env("warn,kube_client=off"), Sink::Terminal);
    run(cli).unwrap_or_else(|e| {
        error_line(&errors::line(&e));
        ExitCode::from(EXIT_FAILED)
    })
}

/// The command line, as kubectl takes one: `--help` and `--version` (and no
/// command at all, which is help, as for a kubectl command group) print on
/// stdout with exit 0; a usage error is kubectl's two lines and exit 1.
fn parse() -> Result<Cli, ExitCode> {
    let e = match Cli::try_parse() {
        Ok(c) => return Ok(c),
        Err(e) => e,
    };
    if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return Err(print(&e.render().to_string()));
    }
    error_line(&errors::usage(&e.render().to_string(), &command_path()));
    Err(ExitCode::from(EXIT_FAILED))
}

/// `kubectl rdma` and the subcommand named on the command line, if any.
fn command_path() -> String {
    let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
    match std::env::args().skip(1).find(|a| names.contains(a)) {
        Some(sub) => format!("kubectl rdma {sub}"),
        None => "kubectl rdma".into(),
    }
}

/// Prints `text` on stdout: exit 0, or the error and exit 1 when stdout cannot be written.
fn print(text: &str) -> ExitCode {
    match emit(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error_line(&format!("error: {e}"));
            ExitCode::from(EXIT_FAILED)
        }
    }
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
        Cmd::Version { client, output, cluster } => {
            let namespace = cluster.namespace(&cli.cluster);
            let api = cluster.or(cli.cluster);
            if client && api != ClientOpts::default() {
                bail!("--client prints this build only: cluster flags do not apply");
            }
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(version(&api, namespace.as_deref(), output.as_deref(), client))
        }
        Cmd::Completion { shell } => {
            if let Some(flag) = cli.cluster.given() {
                bail!("completion prints a script: {flag} does not apply");
            }
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-rdma", &mut script);
            emit(&String::from_utf8(script)?)?;
            Ok(ExitCode::SUCCESS)
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

/// A failed request, as kubectl words it: the server's answer or why it could
/// not be reached; else the request and where the configuration came from.
fn request_error(e: FetchError, conn: &Connected) -> anyhow::Error {
    match errors::from_fetch(&e, &conn.server) {
        Some(w) => anyhow::Error::new(w),
        None => anyhow::anyhow!("{e} (API server {} from {})", conn.server, conn.source),
    }
}

async fn version(
    api: &ClientOpts,
    namespace: Option<&str>,
    output: Option<&str>,
    client_only: bool,
) -> anyhow::Result<ExitCode> {
    let mut v =
        Version { client_version: ClientVersion::this_binary(), server_version: None, components: None };
    // As kubectl version: the client's part is printed even when the server cannot be reached.
    let mut failed = None;
    if !client_only {
        let conn = connect_described(api).await?;
        match ver::fetch(conn.client.clone(), namespace, api.request_timeout).await {
            Ok((server, components)) => {
                v.server_version = Some(server);
                v.components = Some(components);
            }
            Err(e) => failed = Some(request_error(e, &conn)),
        }
    }
    emit(&match output {
        Some("json") => format!("{}\n", serde_json::to_string_pretty(&v)?),
        Some(_) => serde_yaml::to_string(&v)?,
        None => ver::text(&v),
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

async fn status(api: &ClientOpts, sel: Selection, output: Format, all: bool) -> anyhow::Result<ExitCode> {
    let conn = connect_described(api).await?;
    let fetched = match view::fetch(conn.client.clone(), &sel, api.request_timeout).await {
        Ok(f) => f,
        Err(e) => return Err(request_error(e, &conn)),
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
