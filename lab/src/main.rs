//! `kube-rdma-labtests`: the in-VM tests of the kernel lab.
//!
//! `lab/run` boots Debian's kernel in QEMU with this executable in the initramfs; `lab/init` sets up a
//! netdevsim PF with VFs and a Soft-RoCE device (rxe) and runs us. Each test drives the project's own
//! code against the real kernel and prints `LAB <name> PASS|FAIL <detail>`; the last line is
//! `N passed, N failed`. Exit status as every kube-rdma binary ([`plumbing::cli`]): 0 when every test
//! passed, 1 when one failed (or none ran), 2 when the lab's environment is unusable; a stdout that
//! closes (the `tee` of lab/init gone) ends the lines quietly instead of panicking.

mod cni;
mod dcb;
mod devlink;
mod discover;
mod events;
mod harness;
mod nldev;
mod plugin;
mod setup;
mod util;
mod vf;

use std::process::ExitCode;
use std::time::Duration;

use harness::{Lab, Test};
use plumbing::cli::{emit, error_line, EXIT_ERROR, EXIT_FAILED};

fn tests() -> Vec<Test> {
    let mut v = Vec::new();
    v.extend(setup::tests());
    // nldev first: its netns-mode test needs a machine with no other network namespace.
    v.extend(nldev::tests());
    v.extend(vf::tests());
    v.extend(discover::tests());
    v.extend(events::tests());
    v.extend(dcb::tests());
    v.extend(devlink::tests());
    v.extend(cni::tests());
    // Last: it takes rxe's netdev down for a moment.
    v.extend(plugin::tests());
    v
}

fn main() -> ExitCode {
    let lab = match Lab::from_env() {
        Ok(l) => l,
        Err(e) => {
            say(&format!("LAB lab-env FAIL {e:#}\n0 passed, 1 failed\n"));
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let filter = std::env::var("LAB_FILTER").unwrap_or_default();
    let (pass, fail) = harness::run_all(&lab, &tests(), &filter, Duration::from_secs(60));
    say(&format!("{pass} passed, {fail} failed\n"));
    if fail == 0 && pass > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

/// Writes result lines to stdout; a stdout that cannot be written (not
/// closed: full) is said on stderr, which lab/init keeps.
pub(crate) fn say(text: &str) {
    if let Err(e) = emit(text) {
        error_line(&format!("kube-rdma-labtests: {e}"));
    }
}
