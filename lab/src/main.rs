//! `kube-rdma-labtests`: the in-VM tests of the kernel lab.
//!
//! `lab/run` boots Debian's kernel in QEMU with this executable in the initramfs; `lab/init` sets up a
//! netdevsim PF with VFs and a Soft-RoCE device (rxe) and runs us. Each test drives the project's own
//! code against the real kernel and prints `LAB <name> PASS|FAIL <detail>`; the last line is
//! `N passed, N failed`, and the exit status is non-zero on any failure.

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

use harness::{Lab, Test};
use std::process::ExitCode;
use std::time::Duration;

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
            println!("LAB lab-env FAIL {e:#}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let filter = std::env::var("LAB_FILTER").unwrap_or_default();
    let (pass, fail) = harness::run_all(&lab, &tests(), &filter, Duration::from_secs(60));
    println!("{pass} passed, {fail} failed");
    if fail == 0 && pass > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
