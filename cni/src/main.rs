//! `kube-rdma-cni`: CNI plugin entry point. Stdout carries only the CNI JSON;
//! logs go to stderr or to `logFile`.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;

fn usage() -> &'static str {
    "kube-rdma-cni: CNI plugin (run by a container runtime with CNI_COMMAND set)\n\
     usage: kube-rdma-cni install --dest DIR | --version"
}

fn install(args: &[String]) -> anyhow::Result<()> {
    let dest = match args {
        [flag, dir] if flag == "--dest" => dir.clone(),
        [one] if one.starts_with("--dest=") => one["--dest=".len()..].to_string(),
        _ => anyhow::bail!("usage: kube-rdma-cni install --dest DIR"),
    };
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let to = kube_rdma_cni::install(&exe, std::path::Path::new(&dest))
        .with_context(|| format!("install into {dest}"))?;
    eprintln!("installed {}", to.display());
    Ok(())
}

fn init_logging(stdin: &[u8]) {
    let v: serde_json::Value = serde_json::from_slice(stdin).unwrap_or_default();
    let level = v
        .get("logLevel")
        .and_then(|l| l.as_str())
        .map(str::to_string)
        .or_else(|| std::env::var("KUBE_RDMA_CNI_LOG").ok())
        .unwrap_or_else(|| "warn".into());
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let file = v
        .get("logFile")
        .and_then(|f| f.as_str())
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false);
    match file {
        Some(f) => {
            let _ = b.with_writer(std::sync::Mutex::new(f)).try_init();
        }
        None => {
            let _ = b.with_writer(std::io::stderr).try_init();
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("install") => {
            return match install(&args[2..]) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kube-rdma-cni: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Some("--version") | Some("version") => {
            println!(
                "kube-rdma-cni {} (CNI {})",
                // Release version from scripts/delivery/build-dist (VERSION), else the crate's.
                option_env!("KUBE_RDMA_VERSION").unwrap_or(env!("CARGO_PKG_VERSION")),
                kube_rdma_cni::SUPPORTED_VERSIONS.join(", ")
            );
            return ExitCode::SUCCESS;
        }
        Some("--help") | Some("-h") => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let mut stdin = Vec::new();
    let cmd = std::env::var("CNI_COMMAND").unwrap_or_default();
    // Without CNI_COMMAND there is nothing to read (and a user at a terminal
    // must get the error, not a hang); VERSION may come without stdin.
    if !cmd.is_empty() && (cmd != "VERSION" || !atty_stdin()) {
        let _ = std::io::stdin().read_to_end(&mut stdin);
    }
    init_logging(&stdin);
    let env = |k: &str| std::env::var(k).ok();
    let out = kube_rdma_cni::run(&env, &stdin);
    if let Some(e) = &out.error {
        tracing::error!(code = e.code(), kind = e.label(), command = %cmd, "{e}");
    }
    if !out.stdout.is_empty() {
        println!("{}", out.stdout);
    }
    ExitCode::from(out.status as u8)
}

fn atty_stdin() -> bool {
    // SAFETY: isatty on fd 0.
    unsafe { libc::isatty(0) == 1 }
}
