//! Keeps the simulated node's sysfs in step with its real veth links, as a
//! kernel keeps sysfs in step with its netdevs: the `net` class is network
//! namespace tagged, so a VF netdev the CNI moved into a pod vanishes from
//! the host's `<vf>/net/` and `/sys/class/net`, and comes back with DEL.
//! Runs inside the node's network namespace (`kube-rdma-cluster simsync`,
//! started by `up`) and polls the namespace's links every 100 ms.
//!
//! The RDMA device is left on the host: the kernel here has no RDMA
//! subsystem, so the e2e networks use `rdma: disabled` and nothing moves it
//! (the RDMA move itself is covered by the kernel lab).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

/// Netdev names of the VFs of the node's tree, as on the host now.
fn vf_netdevs(sim: &nic::sim::Sim) -> Vec<String> {
    nic::discover::discover(&sim.roots())
        .pfs
        .iter()
        .flat_map(|p| p.vfs.iter())
        .filter_map(|v| v.netdev.as_ref().map(|n| n.name.clone()))
        .collect()
}

/// Runs forever (until killed).
pub fn run(dir: &Path) -> Result<()> {
    let mut sim = nic::sim::Sim::open(dir).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    // Every VF netdev the tree knows, present or not: the tree's own list is the description.
    let names: BTreeSet<String> = vf_netdevs(&sim).into_iter().collect();
    let mut on_host: BTreeSet<String> = names.clone();
    eprintln!("simsync: watching {} VF netdevs of {}", names.len(), dir.display());
    loop {
        let links: BTreeSet<String> = std::fs::read_dir("/sys/class/net")
            .context("reading /sys/class/net")?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for n in &names {
            let now = links.contains(n);
            if now == on_host.contains(n) {
                continue;
            }
            let r = if now { sim.add_netdev_back(n) } else { sim.remove_netdev(n) };
            match r {
                Ok(()) => {
                    eprintln!("simsync: {n} {}", if now { "back on the host" } else { "left the host (in a pod)" });
                    if now {
                        on_host.insert(n.clone());
                    } else {
                        on_host.remove(n);
                    }
                }
                Err(e) => eprintln!("simsync: {n}: {}", nic::error_chain(&e)),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
