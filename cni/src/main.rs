//! `kube-rdma-cni`: CNI plugin entry point. Stdout carries only the CNI JSON;
//! logs go to stderr or to `logFile`. Exit status as the CNI spec says (0, or
//! the error JSON's code path: 1), except that a stdout that cannot be written
//! and a failed `install` are 2, as every kube-rdma binary ([`plumbing::cli`]).

use std::process::ExitCode;

use anyhow::Context;
use kube_rdma_cni::logging::Settings;
use plumbing::cli::{emit, error_line, print_info, EXIT_ERROR};
use plumbing::logging::Filter;

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
    error_line(&format!("installed {}", to.display()));
    Ok(())
}

fn main() -> ExitCode {
    let t0 = std::time::Instant::now();
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("install") => {
            return match install(&args[2..]) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    error_line(&format!("kube-rdma-cni: {e:#}"));
                    ExitCode::from(EXIT_ERROR)
                }
            }
        }
        Some("--version") | Some("version") => {
            let text = format!(
                "kube-rdma-cni {} (CNI {})\n",
                plumbing::VERSION,
                kube_rdma_cni::SUPPORTED_VERSIONS.join(", ")
            );
            return print_info("kube-rdma-cni", &text);
        }
        Some("--help") | Some("-h") => {
            return print_info("kube-rdma-cni", &format!("{}\n", usage()));
        }
        _ => {}
    }
    let cmd = std::env::var("CNI_COMMAND").unwrap_or_default();
    // Without CNI_COMMAND there is nothing to read (and a user at a terminal
    // must get the error, not a hang); VERSION may come without stdin.
    let input = if !cmd.is_empty() && (cmd != "VERSION" || !atty_stdin()) {
        kube_rdma_cni::Input::read(std::io::stdin().lock())
    } else {
        kube_rdma_cni::Input::none()
    };
    let mut settings =
        Settings::from_config(input.config(), std::env::var("KUBE_RDMA_CNI_LOG").ok().as_deref());
    // Never in colour, never on stdout: the lines end up in files and runtime logs.
    let sink = settings.sink(&kube_rdma_cni::logging::log_dir(&|k| std::env::var(k).ok()));
    plumbing::logging::init(settings.format, Filter::Max(settings.level), sink);
    for p in &settings.problems {
        tracing::warn!("{p}");
    }
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "input read");
    let env = |k: &str| std::env::var(k).ok();
    let out = kube_rdma_cni::run(&env, input);
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "ran");
    if let Some(e) = &out.error {
        tracing::error!(code = e.code(), kind = e.label(), command = %cmd, "{}", e.chain());
    }
    if !out.stdout.is_empty() {
        // A runtime that stopped reading (EPIPE) gets nothing more and the status
        // stands; a result that cannot be written at all (ENOSPC) was not delivered:
        // exit 2 (docs/cli.md). Never the panic of `println!`.
        if let Err(e) = emit(&format!("{}\n", out.stdout)) {
            if settings.file.is_some() {
                tracing::error!(command = %cmd, "{e}");
            }
            error_line(&format!("kube-rdma-cni: {e}"));
            return ExitCode::from(EXIT_ERROR);
        }
    }
    tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "done");
    ExitCode::from(out.status as u8)
}

fn atty_stdin() -> bool {
    // SAFETY: isatty on fd 0.
    unsafe { libc::isatty(0) == 1 }
}
