//! Discovery: one walk of `/sys/bus/pci/devices` into an [`Inventory`].
//!
//! Each PCI function's directory is listed once; what the listing shows
//! (`sriov_totalvfs`, `physfn`, `virtfnN`, `net`, `infiniband`, aux devices
//! like `mlx5_core.rdma.0` or `ice.roce.0`) decides which files are read, and
//! every file is read once. A file that is missing or garbled becomes a
//! [`Problem`] on its device ("unknown, because …"); a device that cannot be
//! modelled at all becomes a [`Skipped`]. Nothing here panics or gives up on
//! the node because of one bad device.
//!
//! Kernel layout relied on (Documentation/ABI/testing/sysfs-bus-pci,
//! sysfs-class-net, sysfs-class-infiniband):
//! - `/sys/bus/pci/devices/<bdf>` links to `../../../devices/pciDDDD:BB/<bridges…>/<bdf>`;
//!   the PCI-address components of that target are the upstream bridges.
//! - A PF has `sriov_totalvfs`/`sriov_numvfs` and `virtfnN -> ../<vf>`; a VF has `physfn`.
//! - RDMA devices sit at `<pci>/infiniband/<dev>` or, with auxiliary-bus drivers
//!   (mlx5 since 5.11, ice/irdma), at `<pci>/<drv>.{rdma,roce,iwarp}.N/infiniband/<dev>`;
//!   their char devices are siblings: `infiniband_verbs/uverbsN`, `infiniband_mad/{umad,issm}N`.
//!
//! Speed (~42 files and directories per VF, ~43k opens for 1024 VFs): every listed
//! directory is opened once as a [`Dir`] and the files under it are opened with
//! `openat` and short relative names, never by absolute path (which makes the
//! kernel walk `/sys/bus/pci/devices/<bdf>` and its symlink again for each file).
//! Each function is listed and read by the same worker thread, so no directory
//! descriptor outlives its function (a node may have more functions than the
//! default limit of 1024 open files). Paths in diagnostics are built only on error
//! and are the same as reading by path would give.
//!
//! Files: this one drives the walk (list each function, read it, assemble);
//! `pf.rs`, `vf.rs` and `other.rs` read one function of each kind, with the
//! attribute readers in `fields.rs`, `netdev.rs`, `rdma.rs`, `chardev.rs` and
//! `ports.rs`; `assemble.rs` puts VFs under their PFs; `parallel.rs` runs the
//! reads on worker threads.

mod assemble;
mod chardev;
mod fields;
mod netdev;
mod other;
mod parallel;
mod pf;
mod ports;
mod rdma;
mod vf;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::inventory::*;
use crate::pci::PciAddr;
use crate::roots::Roots;
use crate::sysfs::{Dir, SysfsError};

use chardev::char_devices;

/// Reads the node under `roots` into an [`Inventory`]. Never panics; problems
/// are recorded on the device they concern.
pub fn discover(roots: &Roots) -> Inventory {
    discover_scoped(roots, Scope::default())
}

/// [`discover`] reading functions on at most `threads` threads (1: only the
/// calling thread). The result does not depend on `threads`.
pub fn discover_with_threads(roots: &Roots, threads: usize) -> Inventory {
    discover_scoped(roots, Scope { threads, ..Scope::default() })
}

/// How much of the node one walk reads, and on how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// Worker threads (1: only the calling thread).
    pub threads: usize,
    /// Read each RDMA port's GID table. It is the largest part of a walk (a
    /// `gids/N` file per entry plus two attribute files per used entry: ~40% of
    /// the files on a VF-heavy node, and a real mlx5 port lists 255 entries), and
    /// only consumers of GID indexes need it. `false` leaves every
    /// [`RdmaPort::gids`] empty and sets [`Inventory::gid_tables_skipped`].
    pub gid_tables: bool,
}

impl Default for Scope {
    /// Everything, on up to 8 threads (as many as the machine has).
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
        Scope { threads, gid_tables: true }
    }
}

/// Reads what `scope` says into an [`Inventory`]; see [`discover`].
pub fn discover_scoped(roots: &Roots, scope: Scope) -> Inventory {
    Walk::new(roots, scope.gid_tables).run(scope.threads)
}

/// Reads PF `pf` and the VFs its `virtfnN` links name, nothing else: an
/// [`Inventory`] holding at most that PF, what was skipped among those
/// functions, and the node-wide `/dev` facts. Meant for
/// [`Inventory::replace_pf`] after an event on one PF (a link change of the PF
/// or of one of its VFs); a function the PF does not list (a new PF, VFs of a
/// changed `sriov_numvfs` the PF has not linked yet) needs a full [`discover`].
pub fn discover_pf(roots: &Roots, scope: Scope, pf: PciAddr) -> Inventory {
    Walk::new(roots, scope.gid_tables).run_pf(scope.threads, pf)
}

/// Re-reads one function of `inv` in place, after a link event on its netdev:
/// a PF's own directory (attributes, netdevs, RDMA devices; its VFs stay as
/// they were, since a PF's link state is read from the PF), or one VF.
/// Returns `false`, changing nothing, when that cannot be done in place: the
/// function is not in `inv` or is gone, or its PF now has another number of
/// VFs. Then [`discover_pf`] (or [`discover`]) is needed.
pub fn rescan_function(roots: &Roots, scope: Scope, inv: &mut Inventory, pci: PciAddr) -> bool {
    let walk = Walk::new(roots, scope.gid_tables);
    let Ok(bus) = Dir::open(roots.sys("bus/pci/devices")) else { return false };
    let Listing::Read(_, _, read) = walk.list_and_read(&bus, &pci.to_string()) else { return false };
    match *read {
        Read::Pf(mut new, links) => {
            let Some(old) = inv.pfs.iter_mut().find(|p| p.pci == pci) else { return false };
            if links.len() != old.vfs.len() || new.num_vfs != old.num_vfs {
                return false;
            }
            // What only the assembly of the VFs finds stays as it was found.
            let kept =
                old.problems.iter().filter(|p| p.field.starts_with("virtfn") || p.field == "sriov_numvfs");
            new.problems.extend(kept.cloned());
            new.vfs = std::mem::take(&mut old.vfs);
            *old = new;
        }
        Read::Vf(mut new, _) => {
            let Some(old) = inv.pfs.iter_mut().flat_map(|p| p.vfs.iter_mut()).find(|v| v.pci == pci) else {
                return false;
            };
            new.index = old.index;
            new.pf = old.pf;
            new.problems.extend(old.problems.iter().filter(|p| p.field == "physfn").cloned());
            *old = new;
        }
        _ => return false,
    }
    inv.rdma_cm = walk.dev_nodes.contains("rdma_cm");
    inv.vfio_container = walk.vfio_nodes.contains("vfio");
    true
}

/// One PCI function as listed in `bus/pci/devices`, while it is being read.
struct Entry<'b> {
    /// `<sysfs>/bus/pci/devices`.
    bus: &'b Dir,
    /// `<sysfs>/bus/pci/devices/<bdf>`, opened through the link.
    dir: Dir,
    /// Sorted names inside the device directory.
    names: Vec<String>,
}

impl Entry<'_> {
    fn has(&self, name: &str) -> bool {
        self.names.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
    }
}

/// What one function's directory says, read independently of every other
/// function (so that functions can be read in parallel), assembled afterwards.
enum Read {
    Pf(Pf, Vec<(u32, String, Result<PathBuf, SysfsError>)>),
    Vf(Vf, Result<PathBuf, SysfsError>),
    Hcas(Vec<Hca>),
    Gpu(Gpu),
    Nothing,
}

/// The outcome of listing and reading one `bus/pci/devices` entry.
enum Listing {
    /// Listed: the address, the directory as reached (for messages), what it holds.
    Read(PciAddr, PathBuf, Box<Read>),
    /// Not a PCI address, or a directory that cannot be listed.
    Skip(Skipped),
}

struct Walk<'a> {
    roots: &'a Roots,
    /// `bus/pci/devices`, if it could be listed.
    bus: Option<Dir>,
    /// Listed functions: `bus/pci/devices/<bdf>` as reached (for messages).
    entries: BTreeMap<PciAddr, PathBuf>,
    /// Character devices in `<dev>/infiniband/`, listed once.
    dev_nodes: BTreeSet<String>,
    /// Character devices in `<dev>/vfio/`, listed once.
    vfio_nodes: BTreeSet<String>,
    /// `/sys/class/infiniband_verbs/*/ibdev`, read on first need.
    verbs_index: OnceLock<HashMap<String, (String, PathBuf)>>,
    /// [`Scope::gid_tables`].
    gid_tables: bool,
}

fn problem(field: impl Into<String>, reason: impl Into<String>) -> Problem {
    Problem { field: field.into(), reason: reason.into() }
}

fn not_found(path: PathBuf) -> SysfsError {
    SysfsError::Io { path, error: std::io::Error::from(std::io::ErrorKind::NotFound) }
}

fn pci_of(target: &Path) -> Option<PciAddr> {
    target.file_name()?.to_str()?.parse().ok()
}

impl<'a> Walk<'a> {
    fn new(roots: &'a Roots, gid_tables: bool) -> Self {
        let dev_nodes = char_devices(&roots.dev("infiniband"));
        let vfio_nodes = char_devices(&roots.dev("vfio"));
        Walk {
            roots,
            bus: None,
            entries: BTreeMap::new(),
            dev_nodes,
            vfio_nodes,
            verbs_index: OnceLock::new(),
            gid_tables,
        }
    }

    fn run(mut self, threads: usize) -> Inventory {
        let mut inv = Inventory { gid_tables_skipped: !self.gid_tables, ..Inventory::default() };
        let names = self.list_bus(&mut inv);
        self.assemble(inv, &names, threads, true)
    }

    /// One PF and the functions its `virtfnN` links name.
    fn run_pf(mut self, threads: usize, pf: PciAddr) -> Inventory {
        let mut inv = Inventory { gid_tables_skipped: !self.gid_tables, ..Inventory::default() };
        let bus = match Dir::open(self.roots.sys("bus/pci/devices")) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return self.assemble(inv, &[], threads, false),
            Err(e) => {
                inv.skipped.push(Skipped { device: "bus/pci/devices".into(), reason: e.to_string() });
                return self.assemble(inv, &[], threads, false);
            }
        };
        let name = pf.to_string();
        let mut names = vec![name.clone()];
        if let Ok(dir) = bus.open_at(&name) {
            for l in dir.list().unwrap_or_default().iter().filter(|n| n.starts_with("virtfn")) {
                if let Ok(t) = dir.read_link(l) {
                    if let Some(vf) = t.file_name().and_then(|n| n.to_str()) {
                        names.push(vf.to_string());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        self.bus = Some(bus);
        self.assemble(inv, &names, threads, false)
    }

    /// Lists `bus/pci/devices` (sorted names).
    fn list_bus(&mut self, inv: &mut Inventory) -> Vec<String> {
        let listed = Dir::open(self.roots.sys("bus/pci/devices")).and_then(|d| Ok((d.list()?, d)));
        match listed {
            Ok((names, bus)) => {
                self.bus = Some(bus);
                names
            }
            Err(e) if e.is_not_found() => vec![], // no PCI (containers, some VMs)
            Err(e) => {
                inv.skipped.push(Skipped { device: "bus/pci/devices".into(), reason: e.to_string() });
                vec![]
            }
        }
    }

    /// Lists one function's directory and reads what the listing shows.
    fn list_and_read(&self, bus: &Dir, name: &str) -> Listing {
        let Ok(a) = name.parse::<PciAddr>() else {
            let reason = format!("{:?}: entry is not a PCI address", bus.join(name));
            return Listing::Skip(Skipped { device: name.to_string(), reason });
        };
        match bus.open_at(name).and_then(|dir| Ok(Entry { bus, names: dir.list()?, dir })) {
            Ok(e) => {
                let r = self.read_function(a, &e);
                Listing::Read(a, e.dir.path().to_path_buf(), Box::new(r))
            }
            Err(e) => {
                let reason = match bus.read_link(name) {
                    Ok(t) if e.is_not_found() => {
                        format!("{:?} -> {t:?}: dangling link (device gone)", bus.join(name))
                    }
                    _ => e.to_string(),
                };
                Listing::Skip(Skipped { device: a.to_string(), reason })
            }
        }
    }

    fn read_function(&self, a: PciAddr, e: &Entry<'_>) -> Read {
        if e.has("sriov_totalvfs") {
            self.read_pf(a, e)
        } else if e.has("physfn") {
            self.read_vf(a, e)
        } else {
            self.read_other(a, e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ports::state_name;
    use super::rdma::is_rdma_aux;
    use super::*;
    use crate::roce::roce_active_mtu;

    #[test]
    fn aux_names_and_port_states() {
        assert!(is_rdma_aux("mlx5_core.rdma.0"));
        assert!(is_rdma_aux("ice.roce.12"));
        assert!(is_rdma_aux("ice.iwarp.1"));
        assert!(!is_rdma_aux("mlx5_core.eth.0"));
        assert!(!is_rdma_aux("mlx5_core.rdma.x"));
        assert!(!is_rdma_aux("a.rdma.0.1"));
        assert_eq!(state_name("4: ACTIVE").as_deref(), Some("ACTIVE"));
        assert_eq!(state_name("5: LinkUp").as_deref(), Some("LinkUp"));
        assert_eq!(state_name("ACTIVE"), None);
    }

    /// Workers read functions in any order; the merge must not depend on it,
    /// also when devices are damaged (the reads then differ per function).
    #[test]
    fn result_does_not_depend_on_thread_count() {
        let sim = crate::sim::Sim::materialise(&crate::sim::big_node(2, 40)).unwrap();
        let r = sim.roots();
        let bus = r.sys("bus/pci/devices");
        // A dangling function link, a garbled attribute, an unreadable GID table.
        std::fs::remove_file(bus.join("0000:10:00.3")).unwrap();
        std::os::unix::fs::symlink("../../../devices/gone", bus.join("0000:10:00.3")).unwrap();
        std::fs::write(bus.join("0000:20:00.4/numa_node"), "x\n").unwrap();
        let gids = std::fs::read_dir(bus.join("0000:20:00.5"))
            .unwrap()
            .flatten()
            .find(|e| is_rdma_aux(&e.file_name().to_string_lossy()));
        let ib = gids.unwrap().path().join("infiniband");
        let dev = std::fs::read_dir(&ib).unwrap().flatten().next().unwrap().path();
        std::fs::remove_dir_all(dev.join("ports/1/gids")).unwrap();
        let one = discover_with_threads(&r, 1);
        assert_eq!(one.skipped.len(), 1, "{:?}", one.skipped);
        assert_eq!(one.vfs().filter(|v| !v.problems.is_empty()).count(), 1);
        assert!(one
            .vfs()
            .any(|v| v.rdma.iter().any(|d| d.problems.iter().any(|p| p.field == "ports/1/gids"))));
        for threads in [2, 3, 8] {
            assert_eq!(discover_with_threads(&r, threads), one, "{threads} threads");
        }
    }

    /// Without GID tables the walk reads everything else exactly as before,
    /// and says that the tables are missing by choice.
    #[test]
    fn skipping_gid_tables_changes_only_the_gid_tables() {
        let sim = crate::sim::Sim::materialise(&crate::sim::big_node(2, 8)).unwrap();
        let r = sim.roots();
        let mut full = discover(&r);
        assert!(!full.gid_tables_skipped);
        assert!(full.vfs().all(|v| v.rdma.iter().all(|d| d.ports.iter().all(|p| !p.gids.is_empty()))));
        let lean = discover_scoped(&r, Scope { gid_tables: false, ..Scope::default() });
        assert!(lean.gid_tables_skipped);
        for pf in &mut full.pfs {
            let devs = pf.rdma.iter_mut().chain(pf.vfs.iter_mut().flat_map(|v| v.rdma.iter_mut()));
            devs.flat_map(|d| d.ports.iter_mut()).for_each(|p| p.gids.clear());
        }
        full.gid_tables_skipped = true;
        assert_eq!(lean, full);
    }

    #[test]
    fn roce_mtu_follows_iboe_get_mtu() {
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(4100), Some(2048));
        assert_eq!(roce_active_mtu(300), None);
    }
}
