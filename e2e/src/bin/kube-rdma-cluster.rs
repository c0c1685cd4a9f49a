//! `kube-rdma-cluster up|build|down|env|status`: the local single-node cluster
//! (`scripts/cluster` runs this). See `kube_rdma_e2e::cluster`. Output and
//! exit status as every kube-rdma binary ([`plumbing::cli`]): `--help` and
//! `--version` on stdout, a usage error exit 2; `env | head` does not panic; a
//! failure is one line on stderr and exit 2 (an environment error: there are no
//! checks here to fail).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube_rdma_e2e::cluster;
use plumbing::cli::emit;

const PROGRAM: &str = "kube-rdma-cluster";

#[derive(Parser)]
#[command(
    version,
    about = "A real single-node Kubernetes cluster with a simulated RDMA node and kube-rdma installed by its chart"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build what is missing (cached), start the cluster, install kube-rdma. On a running
    /// cluster: nothing, or with --values an upgrade of the chart.
    Up {
        /// More chart values (a YAML mapping), merged over the e2e defaults. On a running
        /// cluster, upgrades the chart to the e2e defaults plus these (as `helm upgrade -f`).
        #[arg(long, value_name = "FILE", conflicts_with = "no_chart")]
        values: Option<PathBuf>,
        /// Leave kube-rdma out (a bare node). Refused on a running cluster with the chart.
        #[arg(long)]
        no_chart: bool,
    },
    /// Build the peers and images `up` needs (cached) and start nothing.
    Build,
    /// Stop everything `up` started and remove what it created.
    Down,
    /// Print `export KUBECONFIG=...` (and nothing else on stdout).
    Env,
    /// Processes, the node and every pod.
    Status,
    /// (Started by `up` in the node's netns.) Keep the simulated tree in step with its links.
    #[command(hide = true)]
    Simsync {
        /// The simulated node's directory.
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = match plumbing::cli::parse::<Cli>(PROGRAM) {
        Ok(c) => c,
        Err(code) => return code,
    };
    plumbing::cli::finish(PROGRAM, run(cli).map(|()| ExitCode::SUCCESS))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Up { values, no_chart } => cluster::up(&cluster::UpOptions { values, no_chart }).map(|st| {
            let l = cluster::Layout::new();
            for (what, s) in &st.timings {
                eprintln!("  {s:>6.1} s  {what}");
            }
            // Another instance's commands need its number, or they reach instance 0's cluster.
            let n = match kube_rdma_e2e::node::instance() {
                0 => String::new(),
                n => format!("KUBE_RDMA_E2E_INSTANCE={n} "),
            };
            eprintln!(
                "\nThe cluster is up. Look around with:\n\n  eval \"$({n}scripts/cluster env)\"\n  kubectl get nodes,pods -A\n  kubectl get rdmanodestates\n  kubectl describe node {}\n\nLogs: {}\nStop it: {n}scripts/cluster down",
                cluster::NODE_NAME,
                l.logs().display()
            );
        }),
        Cmd::Build => cluster::build(),
        Cmd::Down => cluster::down().and_then(|diff| {
            if diff.is_empty() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("the host differs from before `up`: {}", diff.join("; ")))
            }
        }),
        Cmd::Env => cluster::env().and_then(|s| Ok(emit(&format!("{s}\n"))?)),
        Cmd::Status => cluster::status().and_then(|s| Ok(emit(&s)?)),
        Cmd::Simsync { dir } => kube_rdma_e2e::simsync::run(&dir),
    }
}
