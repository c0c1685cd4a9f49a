//! ADD / CHECK / DEL / GC / STATUS against real network namespaces, veth links
//! standing in for VF netdevs (wired to VF PCI addresses by a simulated node
//! tree), and Debian's `host-local` / `static` IPAM plugins. Runs as root.
//!
//! One file per behaviour beside this one; the lab and the scenario steps
//! they share (`lab.add`, `lab.del`, `lab.refused`, snapshots, journal
//! edits) are in `tests/common`.

#[path = "../common/mod.rs"]
mod common;

mod attach;
mod gc;
mod journal;
mod modes;
mod races;
mod routes;
mod teardown;
