//! `kube-rdma-apiemu serve`: run the API emulator for demos, scripts and
//! manual runs; prints the URL and serves until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "kube-rdma-apiemu", version, about = "Kubernetes API server emulator (tests, demos)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve until SIGINT/SIGTERM; prints the URL, then `kubeconfig: PATH`.
    Serve {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Where to write the kubeconfig (contexts `emu` and `emu-other`).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Serve plain HTTP instead of TLS.
        #[arg(long)]
        plain_http: bool,
        /// YAML/JSON files of objects to create at start (repeatable).
        #[arg(long = "seed", value_name = "FILE.yaml")]
        seeds: Vec<PathBuf>,
        /// Seconds between watch bookmarks.
        #[arg(long, default_value_t = 60)]
        bookmark_interval: u64,
    },
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kube-rdma-apiemu: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let Command::Serve { listen, kubeconfig, plain_http, seeds, bookmark_interval } = cli.command;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(async move {
        let mut b = kube_rdma_apiemu::Emulator::builder()
            .listen(&listen)
            .kubeconfig_path(&kubeconfig)
            .bookmark_interval(Duration::from_secs(bookmark_interval.max(1)));
        if plain_http {
            b = b.plain_http();
        }
        for s in seeds {
            b = b.seed_file(s);
        }
        let emu = b.start().await.context("starting the API emulator")?;
        println!("{}", emu.url());
        println!("kubeconfig: {}", emu.kubeconfig_path().display());
        use std::io::Write;
        std::io::stdout().flush().context("writing to stdout")?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
            _ = term.recv() => {}
        }
        drop(emu);
        Ok(())
    })
}
