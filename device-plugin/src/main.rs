//! `kube-rdma-device-plugin`: with no subcommand, the daemon; `discover`
//! prints what would be advertised and why.
//!
//! Output flags and exit status follow the one convention of every kube-rdma
//! binary ([`plumbing::cli`], docs/cli.md): `discover -o table|json|yaml`, exit 0 when
//! its node checks pass, 1 when one fails (the RDMA netns mode does not fit the
//! pools, there is no SR-IOV VF and no RDMA device, or a configured pool would
//! serve no device), 2 for a usage or environment error.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
#[cfg(feature = "daemon")]
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kube_rdma_device_plugin::config::{Config, Format};
#[cfg(feature = "daemon")]
use kube_rdma_device_plugin::daemon;
#[cfg(feature = "dra")]
use kube_rdma_device_plugin::dra;
use kube_rdma_device_plugin::{pools, report};
use nic::Roots;
use plumbing::cli::{emit, EXIT_FAILED};
use plumbing::logging::{self, Filter, Format as LogFormat, Sink};
use plumbing::VERSION;

#[derive(Parser, Debug)]
#[command(
    name = "kube-rdma-device-plugin",
    version = VERSION,
    about = "Serves SR-IOV VFs with their RDMA devices to the kubelet",
    after_help = EXIT_HELP
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Pool config (kube-rdma, sriov-network-device-plugin or k8s-rdma-shared-dev-plugin format).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Read sysfs from here (default /sys, env KUBE_RDMA_SYSFS_ROOT).
    #[arg(long, global = true)]
    sysfs_root: Option<PathBuf>,
    /// Read /dev from here (default /dev, env KUBE_RDMA_DEV_ROOT).
    #[arg(long, global = true)]
    dev_root: Option<PathBuf>,
    /// Materialise this simulated node description and read from it.
    #[arg(long, global = true, conflicts_with_all = ["sysfs_root", "dev_root"])]
    sim: Option<PathBuf>,
    /// Kubelet device plugin directory.
    #[arg(long, global = true, default_value = "/var/lib/kubelet/device-plugins")]
    kubelet_dir: PathBuf,
    /// Periodic rescan, seconds (netlink link events trigger rescans in between).
    #[arg(long, default_value_t = 30.0)]
    rescan_interval: f64,
    /// How long one read of the node may take, seconds, before it is abandoned
    /// (a sysfs read blocked in the kernel) and /healthz reports the node's view stale.
    #[arg(long, default_value_t = 10.0)]
    rescan_deadline: f64,
    /// Where CDI specs are written.
    #[arg(long, default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// Where device-info files are written.
    #[arg(long, default_value = "/var/run/k8s.cni.cncf.io/devinfo/dp")]
    devinfo_dir: PathBuf,
    /// Serve /metrics and /healthz here, e.g. 0.0.0.0:9410 (the chart's port; default: not served).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Do not subscribe to netlink link events.
    #[arg(long)]
    no_link_events: bool,
    /// The kubelet's PodResources socket (what is in use now).
    #[arg(long, default_value = kube_rdma_device_plugin::POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// Do not ask the kubelet's PodResources API.
    #[arg(long)]
    no_pod_resources: bool,
    /// How often PodResources is asked, seconds.
    #[arg(long, default_value_t = 10.0)]
    pod_resources_interval: f64,
    /// Log format on stderr: text (no colour unless stderr is a terminal) or json (one object per line).
    #[arg(long, global = true, value_enum, env = "KUBE_RDMA_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print PFs, VFs, RDMA devices and, per device, its pool or why not; then the node checks.
    #[command(after_help = EXIT_HELP)]
    Discover {
        /// Output format: table (with a legend of its columns), json, yaml.
        #[arg(short = 'o', long, default_value = "table", value_parser = parse_output)]
        output: Output,
        /// Pass a pool that would serve no device on this node: for one config meant for
        /// several kinds of nodes, whose pools each select devices of some of them.
        #[arg(long)]
        allow_empty_pools: bool,
    },
    /// DRA mode: publish the pools as ResourceSlices and prepare claims for the kubelet.
    #[cfg(feature = "dra")]
    Dra(dra::driver::Args),
    /// Print the JSON Schema of the config format (`pools:`), from the parser's types.
    #[cfg(feature = "config-schema")]
    ConfigSchema,
}

/// Exit status, for `--help` (the convention of [`plumbing::cli`]).
const EXIT_HELP: &str = "\
Exit status:
  0  all is well (discover: every node check passes)
  1  discover: a node check fails (RDMA netns mode against the pools, no SR-IOV VF or RDMA device,
     a configured pool that would serve no device here, unless --allow-empty-pools)
  2  a usage or environment error: bad flags or files, stdout not writable";

#[derive(Clone, Copy, Debug)]
enum Output {
    Table,
    Json,
    Yaml,
}

/// `-o` as every kube-rdma binary reads it; `wide` has nothing more to show here.
fn parse_output(s: &str) -> Result<Output, String> {
    match s {
        "table" => Ok(Output::Table),
        "json" => Ok(Output::Json),
        "yaml" => Ok(Output::Yaml),
        "wide" | "name" => Err(format!("-o {s} does not apply here: use one of table, json, yaml")),
        _ if s.starts_with("jsonpath") => {
            Err("-o jsonpath does not apply here: use one of table, json, yaml".into())
        }
        _ => Err(format!("unknown output format {s:?}: use one of table, json, yaml")),
    }
}

fn main() -> ExitCode {
    let cli = match plumbing::cli::parse::<Cli>("kube-rdma-device-plugin") {
        Ok(c) => c,
        Err(code) => return code,
    };
    logging::init(cli.log_format, Filter::Env("info"), Sink::Terminal);
    plumbing::cli::finish("kube-rdma-device-plugin", run(cli))
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // The simulated node lives as long as this value.
    let sim = match &cli.sim {
        Some(p) => {
            Some(nic::sim::Sim::from_file(p).with_context(|| format!("simulated node {}", p.display()))?)
        }
        None => None,
    };
    let roots = match &sim {
        Some(s) => s.roots(),
        None => Roots::resolve(cli.sysfs_root.clone(), cli.dev_root.clone()),
    };
    match cli.cmd {
        Some(Cmd::Discover { output, allow_empty_pools }) => {
            discover(&cli, &roots, output, allow_empty_pools)
        }
        #[cfg(feature = "config-schema")]
        Some(Cmd::ConfigSchema) => {
            emit(&kube_rdma_device_plugin::config::schema::text())?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "dra")]
        Some(Cmd::Dra(ref args)) => {
            let misplaced = device_plugin_flags(&cli);
            if !misplaced.is_empty() {
                anyhow::bail!("{} set before `dra`: device plugin mode flags mean nothing in DRA mode (DRA's own flags go after `dra`, see `dra --help`)", misplaced.join(", "));
            }
            let opts = args.clone().options(cli.config.clone(), roots)?;
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let ran = rt.block_on(dra::driver::run_until_signal(opts));
            // As in device plugin mode: the exit must not wait for a read of the node stuck in the kernel.
            rt.shutdown_timeout(Duration::from_millis(200));
            ran?;
            drop(sim);
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(not(feature = "daemon"))]
        None => anyhow::bail!(
            "this build is discovery only (built without the `daemon` cargo feature): run `discover`, \
             or build with default features to serve the kubelet"
        ),
        #[cfg(feature = "daemon")]
        None => {
            for (flag, v) in [
                ("--rescan-interval", cli.rescan_interval),
                ("--rescan-deadline", cli.rescan_deadline),
                ("--pod-resources-interval", cli.pod_resources_interval),
            ] {
                if !(v > 0.0 && v.is_finite()) {
                    anyhow::bail!("{flag} must be a positive number of seconds");
                }
            }
            let opts = daemon::Options {
                config: cli.config,
                roots,
                kubelet_dir: cli.kubelet_dir,
                rescan_interval: Duration::from_secs_f64(cli.rescan_interval),
                rescan_deadline: Duration::from_secs_f64(cli.rescan_deadline),
                cdi_dir: cli.cdi_dir,
                devinfo_dir: cli.devinfo_dir,
                metrics_addr: cli.metrics_addr,
                link_events: !cli.no_link_events,
                pod_resources: (!cli.no_pod_resources).then_some(cli.pod_resources_socket),
                pod_resources_interval: Duration::from_secs_f64(cli.pod_resources_interval),
                registration: Default::default(),
            };
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let ran = rt.block_on(async {
                // Install the handlers before anything is served: a SIGTERM that
                // arrives during startup must still mean "clean up and exit 0".
                use tokio::signal::unix::{signal, SignalKind};
                let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
                let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
                let shutdown = async move {
                    tokio::select! {
                        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
                    }
                };
                daemon::run(opts, shutdown).await.map_err(anyhow::Error::from)
            });
            // Dropping a runtime waits for its blocking tasks; the exit must not
            // (reads of the node run on threads of their own and may be stuck
            // in the kernel: returning from main ends them).
            rt.shutdown_timeout(Duration::from_millis(200));
            ran?;
            drop(sim);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `discover`: the node read, planned and checked, printed as `output`; exit 1
/// when a node check fails.
fn discover(cli: &Cli, roots: &Roots, output: Output, allow_empty_pools: bool) -> anyhow::Result<ExitCode> {
    let cfg = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default_pools(),
    };
    let netns = nic::vfdev::netns_mode_from_sysfs(roots);
    let inv = nic::discover(roots);
    let plan = pools::plan(&inv, &cfg);
    // Without --config the default pool is no choice of the user's: a node
    // where it is empty (E810 VFs without RDMA) says why per VF, and passes.
    let empty = if allow_empty_pools || cfg.format == Format::Default {
        Vec::new()
    } else {
        pools::empty_pools(&inv, &cfg, &plan)
    };
    let failures = report::node_checks(&inv, &cfg, &plan, netns, roots, &empty);
    let origin = match &cli.sim {
        Some(p) => {
            format!("simulated from {} (materialised under {})", p.display(), roots.sysfs.display())
        }
        None => format!("sysfs {}, dev {}", roots.sysfs.display(), roots.dev.display()),
    };
    let text = match output {
        Output::Table => report::render_table(&inv, &cfg, &plan, &origin, &cli.kubelet_dir, netns, &failures),
        Output::Json | Output::Yaml => {
            let v = report::render_json(&inv, &cfg, &plan, &cli.kubelet_dir, netns, &failures);
            match output {
                Output::Yaml => serde_yaml::to_string(&v)?,
                _ => format!("{}\n", serde_json::to_string_pretty(&v)?),
            }
        }
    };
    emit(&text)?;
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_FAILED) })
}

/// Device plugin mode flags given with `dra` (they would be ignored there).
#[cfg(feature = "dra")]
fn device_plugin_flags(cli: &Cli) -> Vec<&'static str> {
    let mut set = Vec::new();
    let d = Cli::parse_from(["kube-rdma-device-plugin"]);
    if cli.kubelet_dir != d.kubelet_dir {
        set.push("--kubelet-dir");
    }
    if cli.rescan_interval != d.rescan_interval {
        set.push("--rescan-interval");
    }
    if cli.rescan_deadline != d.rescan_deadline {
        set.push("--rescan-deadline");
    }
    if cli.cdi_dir != d.cdi_dir {
        set.push("--cdi-dir");
    }
    if cli.devinfo_dir != d.devinfo_dir {
        set.push("--devinfo-dir");
    }
    if cli.metrics_addr.is_some() {
        set.push("--metrics-addr");
    }
    if cli.no_link_events {
        set.push("--no-link-events");
    }
    set
}
