//! Keeps the simulated node's sysfs in step with its real veth links, as a
//! kernel keeps sysfs in step with its netdevs: the `net` class is network
//! namespace tagged, so a VF netdev the CNI moved into a pod vanishes from
//! the host's `<vf>/net/` and `/sys/class/net`, and comes back with DEL.
//! Runs inside the node's network namespace (`kube-rdma-cluster simsync`,
//! started by `up`) and polls the namespace's links (`/proc/net/dev`, flags) every 20 ms.
//!
//! A PF's link state follows too: `ip link set <pf> down|up` in the node's
//! namespace becomes the tree's `operstate` (and carrier, speed, RDMA port
//! state), after which simsync changes the link's alias so that a
//! netlink link event follows the sysfs change, in the kernel's order (a
//! daemon that rescans on the first event would read the old state).
//!
//! The RDMA device is left on the host: the kernel here has no RDMA
//! subsystem, so the e2e networks use `rdma: disabled` and nothing moves it
//! (the RDMA move itself is covered by the kernel lab).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

/// Netdev names of the VFs of the node's tree, as on the host now, with their VF.
fn vf_netdevs(sim: &nic::sim::Sim) -> BTreeMap<String, nic::PciAddr> {
    nic::discover::discover(&sim.roots())
        .pfs
        .iter()
        .flat_map(|p| p.vfs.iter())
        .filter_map(|v| v.netdev.as_ref().map(|n| (n.name.clone(), v.pci)))
        .collect()
}

/// Netdev names of the PFs of the node's tree.
fn pf_netdevs(sim: &nic::sim::Sim) -> Vec<String> {
    nic::discover::discover(&sim.roots())
        .pfs
        .iter()
        .flat_map(|p| p.netdevs.iter().map(|n| n.name.clone()))
        .collect()
}

/// Whether the link `name` of this network namespace has its lower layer up
/// (`IFF_RUNNING`: operstate up), `None` when there is no such link.
fn running(name: &str) -> Option<bool> {
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = b as libc::c_char;
    }
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) };
    unsafe { libc::close(fd) };
    (rc == 0).then_some(unsafe { req.ifr_ifru.ifru_flags } as libc::c_int & libc::IFF_RUNNING != 0)
}

/// Runs forever (until killed).
pub fn run(dir: &Path) -> Result<()> {
    let mut sim = nic::sim::Sim::open(dir).map_err(|e| anyhow::anyhow!("{}", nic::error_chain(&e)))?;
    // Every VF netdev the tree knows, present or not: the tree's own list is the description.
    let names = vf_netdevs(&sim);
    let mut on_host: BTreeSet<String> = names.keys().cloned().collect();
    let devices = sim.roots().sysfs.join("bus/pci/devices");
    // Only changes are mirrored: the tree's initial state is the description's.
    let mut pf_up: Vec<(String, Option<bool>)> = pf_netdevs(&sim)
        .into_iter()
        .map(|n| {
            let r = running(&n);
            (n, r)
        })
        .collect();
    let mut pokes = 0u64;
    eprintln!("simsync: watching {} VF netdevs of {}", names.len(), dir.display());
    loop {
        // /proc/net/dev lists the links of the reader's network namespace (/sys here is the host's).
        let links: BTreeSet<String> = std::fs::read_to_string("/proc/net/dev")
            .context("reading /proc/net/dev")?
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(|n| n.trim().to_string())
            .collect();
        for (n, vf) in &names {
            let now = links.contains(n);
            if now == on_host.contains(n) {
                continue;
            }
            // A VF removed from the tree (`echo 1 > remove`, sriov_numvfs lowered) took its
            // netdev with it: nothing to mirror, and writing its port would bring back part
            // of a device that is gone. Its netdev comes back with the device.
            if !devices.join(vf.to_string()).exists() {
                continue;
            }
            let r = if now { sim.add_netdev_back(n) } else { sim.remove_netdev(n) };
            match r {
                Ok(()) => {
                    eprintln!(
                        "simsync: {n} {}",
                        if now { "back on the host" } else { "left the host (in a pod)" }
                    );
                    if now {
                        on_host.insert(n.clone());
                    } else {
                        on_host.remove(n);
                    }
                }
                Err(e) => eprintln!("simsync: {n}: {}", nic::error_chain(&e)),
            }
        }
        for (n, last) in pf_up.iter_mut() {
            let now = running(n);
            if now.is_none() || now == *last {
                continue;
            }
            *last = now;
            let state = if now == Some(true) { "up" } else { "down" };
            match sim.set_operstate(n, state) {
                Ok(()) => {
                    eprintln!("simsync: {n} operstate {state}");
                    pokes += 1;
                    let alias = format!("simsync-{pokes}");
                    let ok = std::process::Command::new("ip")
                        .args(["link", "set", "dev", n.as_str(), "alias", alias.as_str()])
                        .status()
                        .is_ok_and(|s| s.success());
                    if !ok {
                        eprintln!(
                            "simsync: {n}: setting the alias (link event after the sysfs change) failed"
                        );
                    }
                }
                Err(e) => eprintln!("simsync: {n}: {}", nic::error_chain(&e)),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
