//! The one command-line convention of every kube-rdma binary (also in
//! `docs/cli.md`): output flags, exit status, and a stdout that may close or fill.
//! The device plugin, the operator's binaries (`kube-rdma-operator`,
//! `kubectl-rdma`), the CNI plugin and the lab's test runner all write through
//! [`emit`] and exit with these codes.
//!
//! - `-o, --output FORMAT`: `table` (default), `wide` (only where it shows more
//!   columns: `kubectl rdma status`), `json`, `yaml`; the operator's commands add
//!   `jsonpath=TEMPLATE` (and `name` for objects). A format a command does not
//!   offer is a usage error naming those it does.
//! - Exit status: [`EXIT_OK`] 0, all is well; [`EXIT_FAILED`] 1, a check fails
//!   (`discover`: the node cannot serve what the pools ask for, or has no SR-IOV/RDMA
//!   device at all; `agent --once`, `kubectl rdma check`: a check fails; `kubectl
//!   rdma status`: a node is not ready or not found); [`EXIT_ERROR`] 2, a usage or
//!   environment error (bad flags or files, no cluster access, an API error, stdout
//!   not writable). `kubectl rdma` follows kubectl instead: every error is exit 1
//!   (its `status` verdict too). The CNI plugin follows the CNI spec instead (its error JSON on
//!   stdout, exit 1), except that an unwritable stdout is exit 2 as here.
//! - Results on stdout, errors (one line each) and logs on stderr.
//! - A stdout the reader closed early (`| head -c1`, EPIPE) ends the output
//!   quietly: nothing more is written, nothing is said, and the exit status is
//!   still the verdict (0 or 1), as if all was read; not 141 (death by SIGPIPE),
//!   since the command did finish. Rust ignores SIGPIPE, so `print!` would panic
//!   there instead: binaries write through [`emit`]. Any other write error (a full
//!   disk: `> /dev/full`) is one line on stderr and exit 2.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Exit 0: all is well.
pub const EXIT_OK: u8 = 0;
/// Exit 1: a check fails, a node is not ready, something asked for was not found.
pub const EXIT_FAILED: u8 = 1;
/// Exit 2: a usage or environment error.
pub const EXIT_ERROR: u8 = 2;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes it. Once the reader has closed stdout
/// (EPIPE), this and every later call write nothing and succeed: the output
/// simply ends there. Other errors (ENOSPC, EIO) are returned, to be reported
/// as a one-line error with [`EXIT_ERROR`].
pub fn emit(text: &str) -> std::io::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(std::io::Error::new(e.kind(), format!("writing to stdout: {e}"))),
        Ok(()) => Ok(()),
    }
}

/// Writes one error line to stderr; a closed stderr is ignored (nothing else could be done).
pub fn error_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Prints what a user asked for instead of a run (`--help`, `--version`: clap's
/// text) under this convention: exit 0, or one error line and exit 2 when stdout
/// cannot be written. `program` names the binary in that line.
pub fn print_info(program: &str, text: &str) -> std::process::ExitCode {
    match emit(text) {
        Ok(()) => std::process::ExitCode::from(EXIT_OK),
        Err(e) => {
            error_line(&format!("{program}: {e}"));
            std::process::ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Parses the command line into `C` under this convention: `--help` and
/// `--version` are printed through [`print_info`] and returned as the exit
/// status to end with; a usage error is clap's message on stderr and exit 2.
#[cfg(feature = "clap")]
pub fn parse<C: clap::Parser>(program: &str) -> Result<C, std::process::ExitCode> {
    match C::try_parse() {
        Ok(c) => Ok(c),
        Err(e) if !e.use_stderr() => Err(print_info(program, &e.render().to_string())),
        Err(e) => e.exit(),
    }
}

/// The exit status of a run: its own, or for an error one line on stderr
/// (`program: error: cause: ...`, the alternate form anyhow prints its chain
/// with) and [`EXIT_ERROR`].
pub fn finish(
    program: &str,
    run: Result<std::process::ExitCode, impl std::fmt::Display>,
) -> std::process::ExitCode {
    run.unwrap_or_else(|e| {
        error_line(&format!("{program}: {e:#}"));
        std::process::ExitCode::from(EXIT_ERROR)
    })
}
