//! Checks that `/init` built the lab as the other tests expect (so a broken setup is reported as
//! such and not as a failure of the code under test).

use crate::check_eq;
use crate::harness::{Lab, Test};
use anyhow::Context;
use std::fs;

pub fn tests() -> Vec<Test> {
    vec![Test { name: "setup-kernel-objects", run: kernel_objects }]
}

fn read(path: &str) -> anyhow::Result<String> {
    Ok(fs::read_to_string(path).with_context(|| format!("read {path}"))?.trim().to_string())
}

/// netdevsim PF with its VFs, rxe bound to its veth, uverbs char device present.
fn kernel_objects(lab: &Lab) -> anyhow::Result<String> {
    let numvfs = read(&format!("/sys/bus/netdevsim/devices/{}/sriov_numvfs", lab.nsim_dev))?;
    check_eq!("netdevsim sriov_numvfs", numvfs, lab.vfs.to_string());
    let pf_dev = fs::read_link(format!("/sys/class/net/{}/device", lab.pf)).context("PF device link")?;
    check_eq!(
        "PF's device",
        pf_dev.file_name().map(|s| s.to_string_lossy().into_owned()),
        Some(lab.nsim_dev.clone())
    );
    let ib_net = fs::read_dir(format!("/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs", lab.rxe))
        .context("rxe gid_attrs")?
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .any(|n| n.trim() == lab.rxe_netdev);
    anyhow::ensure!(ib_net, "{} has no GID on {}", lab.rxe, lab.rxe_netdev);
    let uverbs: Vec<String> = fs::read_dir("/dev/infiniband")
        .context("/dev/infiniband")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    anyhow::ensure!(
        uverbs.iter().any(|n| n.starts_with("uverbs")),
        "no uverbs in /dev/infiniband: {uverbs:?}"
    );
    Ok(format!(
        "pf={} vfs={numvfs} rxe={} over {} dev/infiniband={uverbs:?}",
        lab.pf, lab.rxe, lab.rxe_netdev
    ))
}
