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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::inventory::*;
use crate::pci::PciAddr;
use crate::roots::Roots;
use crate::sysfs::{self, Dir, SysfsError};

use crate::roce::roce_active_mtu;

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

/// The aux device name patterns that carry RDMA devices.
fn is_rdma_aux(name: &str) -> bool {
    let mut parts = name.split('.');
    let (Some(drv), Some(kind), Some(id), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !drv.is_empty()
        && matches!(kind, "rdma" | "roce" | "iwarp")
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
}

/// The RDMA protocol of a device from its `node_type` (`"1: CA"`, `"4: RNIC"`;
/// `enum rdma_node_type` in include/rdma/ib_verbs.h, printed by `node_type_show`
/// in drivers/infiniband/core/sysfs.c) and its ports' link layer. `Ok(None)`: a
/// CA whose link layer could not be read (a problem says so already).
fn protocol_of(node_type: &str, ports: &[RdmaPort]) -> Result<Option<RdmaProtocol>, String> {
    let num = node_type.split_once(':').map_or(node_type, |(n, _)| n).trim();
    match num {
        // RDMA_NODE_IB_CA: RoCE or InfiniBand, by link layer.
        "1" => Ok(ports.first().and_then(|p| p.link_layer).map(|l| match l {
            LinkLayer::Ethernet => RdmaProtocol::RoceV2,
            LinkLayer::InfiniBand => RdmaProtocol::InfiniBand,
        })),
        // RDMA_NODE_RNIC.
        "4" => Ok(Some(RdmaProtocol::Iwarp)),
        _ => Err(format!("node type {node_type:?} is neither a CA (1) nor an RNIC (4)")),
    }
}

/// A PF's protocol: the kind of ice's auxiliary device (`ice.roce.N`,
/// `ice.iwarp.N`; `ice_plug_aux_dev` in drivers/net/ethernet/intel/ice/ice_idc.c
/// names it after the PF's RDMA mode), else its RDMA device's, else none.
fn pf_protocol(aux: &[String], rdma: &[RdmaDev], problems: &mut Vec<Problem>) -> Option<RdmaProtocol> {
    let kind = |k: &str| aux.iter().any(|a| a.split('.').nth(1) == Some(k));
    match (kind("roce"), kind("iwarp")) {
        (true, true) => {
            // ice plugs one aux device per PF: both kinds at once is a layout we cannot read.
            problems
                .push(problem("rdma_protocol", format!("both RoCE and iWARP auxiliary devices: {aux:?}")));
            None
        }
        (true, false) => Some(RdmaProtocol::RoceV2),
        (false, true) => Some(RdmaProtocol::Iwarp),
        (false, false) => match rdma.first() {
            Some(d) => d.protocol,
            None => Some(RdmaProtocol::None),
        },
    }
}

/// `"4: ACTIVE"` → `"ACTIVE"`.
fn state_name(s: &str) -> Option<String> {
    let (num, name) = s.split_once(':')?;
    let name = name.trim();
    (num.trim().parse::<u32>().is_ok() && !name.is_empty()).then(|| name.to_string())
}

fn pci_of(target: &Path) -> Option<PciAddr> {
    target.file_name()?.to_str()?.parse().ok()
}

/// Runs `f` over `items` on up to `threads` scoped threads, results in input order.
/// Falls back to the calling thread if a thread cannot be spawned.
fn parallel_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if threads <= 1 || items.len() < 64 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            out.push((i, f(item)));
        }
        out
    };
    let mut all: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .spawn_scoped(s, || {
                        private_fd_table();
                        work()
                    })
                    .ok()
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            // Our readers do not panic; if one did, its items are redone below.
            if let Ok(part) = h.join() {
                all.extend(part);
            }
        }
        all
    });
    if all.len() != items.len() {
        let done: BTreeSet<usize> = all.iter().map(|(i, _)| *i).collect();
        for (i, item) in items.iter().enumerate().filter(|(i, _)| !done.contains(i)) {
            all.push((i, f(item)));
        }
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// Gives the calling thread its own copy of the descriptor table. Every
/// open, read and close then skips the table lock and the per-file reference
/// count that a table shared between threads costs (with two workers on one
/// table, a third of discovery's CPU time went there). The copy keeps every
/// descriptor number valid; what the thread opens stays its own, and it closes
/// all of it before it ends. The cost: a descriptor another thread closes
/// meanwhile stays open until the worker ends (a walk lasts milliseconds).
/// Failure only costs the speed.
fn private_fd_table() {
    // SAFETY: unshare(CLONE_FILES) takes no pointers and only affects this thread.
    let _ = unsafe { libc::unshare(libc::CLONE_FILES) };
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

    /// Reads the functions `names` of `bus/pci/devices` and assembles them;
    /// `full`: the walk saw every function, so RDMA devices nobody claimed are
    /// read from the class directory too.
    fn assemble(mut self, mut inv: Inventory, names: &[String], threads: usize, full: bool) -> Inventory {
        // Each function is listed and read on a worker; the results are merged
        // below in name order, as a serial walk would have met them.
        let listings = match &self.bus {
            Some(bus) => parallel_map(names, threads, |name| self.list_and_read(bus, name)),
            None => vec![],
        };
        let mut reads: BTreeMap<PciAddr, Read> = BTreeMap::new();
        for l in listings {
            match l {
                // Two names for one address (`0000:3d:00.1` and `3d:00.1`): the last listed wins.
                Listing::Read(a, dir, r) => {
                    self.entries.insert(a, dir);
                    reads.insert(a, *r);
                }
                Listing::Skip(s) => inv.skipped.push(s),
            }
        }

        // Assemble: VFs go to the PF whose virtfnN link names them.
        let mut vfs: BTreeMap<PciAddr, (Vf, Result<PathBuf, SysfsError>)> = BTreeMap::new();
        let mut pfs = vec![];
        for (a, r) in reads {
            match r {
                Read::Pf(pf, links) => pfs.push((pf, links)),
                Read::Vf(vf, physfn) => {
                    vfs.insert(a, (vf, physfn));
                }
                Read::Hcas(h) => inv.hcas.extend(h),
                Read::Gpu(g) => inv.gpus.push(g),
                Read::Nothing => {}
            }
        }
        let pf_addrs: BTreeSet<PciAddr> = pfs.iter().map(|(pf, _)| pf.pci).collect();
        for (mut pf, links) in pfs {
            for (index, link, target) in links {
                let path = self.entries[&pf.pci].join(&link);
                let target = match target {
                    Ok(t) => t,
                    Err(e) => {
                        pf.problems.push(problem(link, e.to_string()));
                        continue;
                    }
                };
                let Some(vf_addr) = pci_of(&target) else {
                    pf.problems
                        .push(problem(link, format!("{path:?} -> {target:?}: target is not a PCI address")));
                    continue;
                };
                let Some((mut vf, physfn)) = vfs.remove(&vf_addr) else {
                    let why = if self.entries.contains_key(&vf_addr) {
                        "is not a VF (no physfn)"
                    } else {
                        "does not exist (dangling link)"
                    };
                    pf.problems.push(problem(link, format!("{path:?} -> {target:?}: VF {vf_addr} {why}")));
                    continue;
                };
                let physfn_path = self.entries[&vf_addr].join("physfn");
                match physfn.as_ref().map(|t| pci_of(t)) {
                    Ok(Some(p)) if p == pf.pci => {}
                    Ok(_) => vf.problems.push(problem(
                        "physfn",
                        format!(
                            "{physfn_path:?} -> {:?}, but PF {} lists this VF",
                            physfn.as_ref().ok(),
                            pf.pci
                        ),
                    )),
                    Err(e) => vf.problems.push(problem("physfn", e.to_string())),
                }
                vf.index = index;
                vf.pf = pf.pci;
                pf.vfs.push(vf);
            }
            if let Some(n) = pf.num_vfs {
                if n as usize != pf.vfs.len() && !pf.problems.iter().any(|p| p.field.starts_with("virtfn")) {
                    pf.problems.push(problem(
                        "sriov_numvfs",
                        format!(
                            "{:?} says {n} but {} virtfn links lead to VFs",
                            self.entries[&pf.pci],
                            pf.vfs.len()
                        ),
                    ));
                }
            }
            inv.pfs.push(pf);
        }
        let mut seen: BTreeSet<String> = BTreeSet::new();
        // VFs no PF claimed; their RDMA devices go with them.
        for (a, (vf, physfn)) in vfs {
            seen.extend(vf.rdma.iter().map(|r| r.name.clone()));
            let physfn_path = self.entries[&a].join("physfn");
            let reason = match physfn {
                Ok(t) => {
                    match pci_of(&t) {
                        Some(pf) if !self.entries.contains_key(&pf) => {
                            format!("VF whose PF vanished: {physfn_path:?} -> {t:?} dangles (PF {pf} not present)")
                        }
                        Some(pf) if !pf_addrs.contains(&pf) => {
                            format!("{physfn_path:?} -> {t:?}: {pf} is not an SR-IOV PF")
                        }
                        Some(pf) => format!("VF not listed by its PF: no virtfnN link of {pf} points to {a}"),
                        None => format!("{physfn_path:?} -> {t:?}: target is not a PCI address"),
                    }
                }
                Err(e) => format!("VF without a readable physfn: {e}"),
            };
            inv.skipped.push(Skipped { device: a.to_string(), reason });
        }
        for pf in &inv.pfs {
            seen.extend(pf.rdma.iter().chain(pf.vfs.iter().flat_map(|v| &v.rdma)).map(|r| r.name.clone()));
        }
        seen.extend(inv.hcas.iter().map(|h| h.rdma.name.clone()));
        if full {
            self.read_unattached_rdma(&seen, &mut inv);
        }
        inv.rdma_cm = self.dev_nodes.contains("rdma_cm");
        inv.irdma_roce_ena = self.irdma_roce_ena(&mut inv);
        inv.vfio_container = self.vfio_nodes.contains("vfio");
        inv
    }

    /// The out-of-tree irdma's `roce_ena` module parameter, when that irdma is loaded.
    fn irdma_roce_ena(&self, inv: &mut Inventory) -> Option<bool> {
        let p = self.roots.sys("module/irdma/parameters/roce_ena");
        match sysfs::read_string(&p) {
            // A bool module parameter prints Y/N; an int one 1/0.
            Ok(v) if v == "Y" || v == "1" => Some(true),
            Ok(v) if v == "N" || v == "0" => Some(false),
            Ok(v) => {
                let reason = format!("{p:?}: expected Y/N or 1/0, found {v:?}");
                inv.skipped.push(Skipped { device: "irdma roce_ena".into(), reason });
                None
            }
            Err(_) => None,
        }
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

    fn read_hex16(&self, e: &Entry<'_>, field: &str, problems: &mut Vec<Problem>) -> Option<u16> {
        self.read_opt(e, field, problems, |d, f| d.read_hex_u16(f))
    }

    /// Reads `<dev>/<field>` with `f`, turning absence or garbage into a problem.
    fn read_opt<T>(
        &self,
        e: &Entry<'_>,
        field: &str,
        problems: &mut Vec<Problem>,
        f: impl FnOnce(&Dir, &str) -> Result<T, SysfsError>,
    ) -> Option<T> {
        let r = if e.has(field) { f(&e.dir, field) } else { Err(not_found(e.dir.join(field))) };
        r.map_err(|err| problems.push(problem(field, err.to_string()))).ok()
    }

    fn numa(&self, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Option<u32> {
        let v = self.read_opt(e, "numa_node", problems, |d, f| d.read_i64(f))?;
        match u32::try_from(v) {
            Ok(n) => Some(n),
            Err(_) if v == -1 => None, // no NUMA affinity: not a problem
            Err(_) => {
                let p = e.dir.join("numa_node");
                problems
                    .push(problem("numa_node", format!("{p:?}: expected -1 or a node number, found {v}")));
                None
            }
        }
    }

    fn driver(&self, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Option<String> {
        if !e.has("driver") {
            let p = e.dir.join("driver");
            problems.push(problem("driver", format!("{p:?} missing: no driver bound")));
            return None;
        }
        e.dir.link_name("driver").map_err(|err| problems.push(problem("driver", err.to_string()))).ok()
    }

    /// Bridges between the function and the root complex, nearest first, from
    /// the `bus/pci/devices/<bdf>` link target (one readlink, no canonicalize).
    fn upstream(&self, a: PciAddr, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Vec<PciAddr> {
        match e.bus.read_link(a.to_string()) {
            Ok(t) => {
                let mut chain: Vec<PciAddr> =
                    t.components().filter_map(|c| c.as_os_str().to_str()?.parse().ok()).collect();
                if chain.last() == Some(&a) {
                    chain.pop();
                }
                chain.reverse();
                chain
            }
            Err(e) => {
                problems.push(problem("upstream", e.to_string()));
                vec![]
            }
        }
    }

    fn read_pf(&self, a: PciAddr, e: &Entry<'_>) -> Read {
        let mut problems = vec![];
        let vendor = self.read_hex16(e, "vendor", &mut problems);
        let device = self.read_hex16(e, "device", &mut problems);
        let driver = self.driver(e, &mut problems);
        let total_vfs = self.read_opt(e, "sriov_totalvfs", &mut problems, |d, f| d.read_u32(f));
        let num_vfs = self.read_opt(e, "sriov_numvfs", &mut problems, |d, f| d.read_u32(f));
        let numa_node = self.numa(e, &mut problems);
        let upstream = self.upstream(a, e, &mut problems);
        let netdevs = self.netdevs(e);
        let rdma = self.rdma_of(e, &netdevs);
        let rdma_aux: Vec<String> = e.names.iter().filter(|n| is_rdma_aux(n)).cloned().collect();
        let rdma_protocol = pf_protocol(&rdma_aux, &rdma, &mut problems);
        // virtfnN links, by numeric index (virtfn10 after virtfn9).
        let mut links: Vec<(u32, String)> = e
            .names
            .iter()
            .filter_map(|n| Some((n.strip_prefix("virtfn")?.parse().ok()?, n.clone())))
            .collect();
        links.sort();
        let links = links
            .into_iter()
            .map(|(i, l)| {
                let t = e.dir.read_link(&l);
                (i, l, t)
            })
            .collect();
        let pf = Pf {
            pci: a,
            vendor,
            device,
            driver,
            total_vfs,
            num_vfs,
            numa_node,
            netdevs,
            rdma,
            rdma_aux,
            rdma_protocol,
            upstream,
            vfs: vec![],
            problems,
        };
        Read::Pf(pf, links)
    }

    /// A VF on its own; index and PF are filled in when its PF claims it.
    fn read_vf(&self, a: PciAddr, e: &Entry<'_>) -> Read {
        let mut problems = vec![];
        let vendor = self.read_hex16(e, "vendor", &mut problems);
        let device = self.read_hex16(e, "device", &mut problems);
        let driver = self.driver(e, &mut problems);
        let numa_node = self.numa(e, &mut problems);
        let physfn = e.dir.read_link("physfn");
        let mut netdevs = self.netdevs(e);
        if netdevs.len() > 1 {
            let names: Vec<&str> = netdevs.iter().map(|n| n.name.as_str()).collect();
            problems.push(problem(
                "net",
                format!("{:?}: several netdevs {names:?}; using the first", e.dir.join("net")),
            ));
        }
        let rdma = self.rdma_of(e, &netdevs);
        let netdev = if netdevs.is_empty() { None } else { Some(netdevs.swap_remove(0)) };
        let pf = physfn.as_ref().ok().and_then(|t| pci_of(t)).unwrap_or(a);
        let vfio = if driver.as_deref() == Some(VFIO_PCI) { self.vfio_group(e, &mut problems) } else { None };
        Read::Vf(
            Vf { index: 0, pci: a, pf, vendor, device, driver, numa_node, netdev, rdma, vfio, problems },
            physfn,
        )
    }

    /// `/dev/vfio/<N>` of a function whose `iommu_group` link points at
    /// `…/kernel/iommu_groups/<N>` (Documentation/ABI/testing/sysfs-kernel-iommu_groups,
    /// Documentation/driver-api/vfio.rst).
    fn vfio_group(&self, e: &Entry<'_>, problems: &mut Vec<Problem>) -> Option<CharDev> {
        let group = match e.dir.link_name("iommu_group") {
            Ok(g) => g,
            Err(err) => {
                problems.push(problem(
                    "iommu_group",
                    format!("bound to {VFIO_PCI} without an IOMMU group: {err}"),
                ));
                return None;
            }
        };
        if group.is_empty() || !group.bytes().all(|b| b.is_ascii_digit()) {
            let p = e.dir.join("iommu_group");
            problems.push(problem("iommu_group", format!("{p:?} -> {group:?}: not an IOMMU group number")));
            return None;
        }
        let present = self.vfio_nodes.contains(&group);
        Some(CharDev {
            node_path: Path::new("/dev/vfio").join(&group),
            name: group,
            major_minor: None,
            present,
        })
    }

    /// Functions that are neither PF nor VF: GPUs and RDMA HCAs without SR-IOV.
    fn read_other(&self, a: PciAddr, e: &Entry<'_>) -> Read {
        let has_rdma = e.has("infiniband") || e.names.iter().any(|n| is_rdma_aux(n));
        let vendor = if e.has("vendor") { e.dir.read_hex_u16("vendor").ok() } else { None };
        if vendor == Some(0x10de) && !has_rdma {
            let class = if e.has("class") { e.dir.read_hex_u32("class").ok() } else { None };
            // PCI class 03 (display): 0300 VGA, 0302 3D controller (PCI Code and ID Assignment spec).
            if !matches!(class.map(|c| c >> 8), Some(0x0300 | 0x0302)) {
                return Read::Nothing;
            }
            let mut problems = vec![];
            let device = self.read_hex16(e, "device", &mut problems);
            let numa_node = self.numa(e, &mut problems);
            let upstream = self.upstream(a, e, &mut problems);
            for p in problems {
                tracing::debug!(gpu = %a, field = %p.field, reason = %p.reason, "GPU field unknown");
            }
            return Read::Gpu(Gpu { pci: a, vendor: 0x10de, device, numa_node, upstream });
        }
        if !has_rdma {
            return Read::Nothing;
        }
        let mut problems = vec![];
        let vendor = self.read_hex16(e, "vendor", &mut problems);
        let device = self.read_hex16(e, "device", &mut problems);
        let driver = self.driver(e, &mut problems);
        let numa_node = self.numa(e, &mut problems);
        let upstream = self.upstream(a, e, &mut problems);
        let netdevs = self.netdevs(e);
        let hcas = self
            .rdma_of(e, &netdevs)
            .into_iter()
            .map(|rdma| Hca {
                pci: Some(a),
                vendor,
                device,
                driver: driver.clone(),
                numa_node,
                netdevs: netdevs.clone(),
                rdma,
                upstream: upstream.clone(),
                problems: problems.clone(),
            })
            .collect();
        Read::Hcas(hcas)
    }

    /// Netdevs under `<pci>/net/`.
    fn netdevs(&self, e: &Entry<'_>) -> Vec<Netdev> {
        if !e.has("net") {
            return vec![];
        }
        match e.dir.open_at("net").and_then(|net| Ok((net.list()?, net))) {
            Ok((names, net)) => {
                names.into_iter().map(|n| read_netdev(&net, Path::new(&n), n.clone())).collect()
            }
            Err(err) => {
                tracing::debug!(error = %err, "net directory unreadable");
                vec![]
            }
        }
    }

    /// RDMA devices of a function: direct and via aux devices.
    fn rdma_of(&self, e: &Entry<'_>, netdevs: &[Netdev]) -> Vec<RdmaDev> {
        // Where the RDMA devices hang, relative to the function's directory.
        let mut bases: Vec<(&Path, RdmaVia)> = vec![];
        if e.has("infiniband") || e.has("infiniband_verbs") {
            bases.push((Path::new(""), RdmaVia::Direct));
        }
        for n in e.names.iter().filter(|n| is_rdma_aux(n)) {
            bases.push((Path::new(n), RdmaVia::Aux(n.clone())));
        }
        let mut out = vec![];
        for (base, via) in bases {
            // The `infiniband` class is namespace-tagged: a device moved into
            // another netns leaves this directory empty (or absent) while its
            // `infiniband_verbs/uverbsN` sibling stays and names it in `ibdev`.
            let visible = match e.dir.open_at(base.join("infiniband")).and_then(|d| Ok((d.list()?, d))) {
                Ok(n) => Some(n),
                Err(err) if err.is_not_found() => None,
                Err(err) => {
                    tracing::debug!(error = %err, "infiniband directory unreadable");
                    continue;
                }
            };
            let chars = CharDevs::scan(&e.dir, base, &self.dev_nodes);
            let mut shown = BTreeSet::new();
            if let Some((names, ibdir)) = visible {
                for name in names {
                    shown.insert(name.clone());
                    out.push(self.read_rdma(&ibdir, name, via.clone(), &chars, netdevs));
                }
            }
            let mut hidden: Vec<&String> = chars.verbs.keys().filter(|n| !shown.contains(*n)).collect();
            hidden.sort();
            for name in hidden {
                out.push(RdmaDev {
                    name: name.clone(),
                    via: via.clone(),
                    node_guid: None,
                    uverbs: chars.verbs.get(name).cloned(),
                    umad: chars.umad.get(name).cloned().unwrap_or_default(),
                    issm: chars.issm.get(name).cloned().unwrap_or_default(),
                    ports: vec![],
                    // node_type is hidden with the device; the pod's side knows.
                    protocol: None,
                    in_other_netns: true,
                    problems: chars.problems.clone(),
                });
            }
        }
        out
    }

    /// Reads RDMA device `name` in `ibdir` (an `infiniband` directory).
    fn read_rdma(
        &self,
        ibdir: &Dir,
        name: String,
        via: RdmaVia,
        chars: &CharDevs,
        netdevs: &[Netdev],
    ) -> RdmaDev {
        let mut problems = chars.problems.clone();
        let node_guid = ibdir
            .read_string(Path::new(&name).join("node_guid"))
            .map_err(|e| problems.push(problem("node_guid", e.to_string())))
            .ok();
        let mut uverbs = chars.verbs.get(&name).cloned();
        if uverbs.is_none() {
            uverbs = self.verbs_fallback(&name);
            if uverbs.is_none() {
                problems.push(problem(
                    "uverbs",
                    format!(
                        "no infiniband_verbs/uverbsN with ibdev {name:?} next to {:?} nor in class/infiniband_verbs",
                        ibdir.join(&name)
                    ),
                ));
            }
        }
        let umad = chars.umad.get(&name).cloned().unwrap_or_default();
        let issm = chars.issm.get(&name).cloned().unwrap_or_default();
        let mtu = netdevs.iter().find_map(|n| n.mtu).and_then(roce_active_mtu);
        let ports = read_ports(ibdir, &name, mtu, self.gid_tables, &mut problems);
        let node_type_rel = Path::new(&name).join("node_type");
        let protocol = match ibdir.read_string(&node_type_rel) {
            Ok(t) => match protocol_of(&t, &ports) {
                Ok(p) => p,
                Err(why) => {
                    problems.push(problem("node_type", format!("{:?}: {why}", ibdir.join(&node_type_rel))));
                    None
                }
            },
            Err(e) => {
                problems.push(problem("node_type", e.to_string()));
                None
            }
        };
        RdmaDev { name, via, node_guid, uverbs, umad, issm, ports, protocol, in_other_netns: false, problems }
    }

    /// `/sys/class/infiniband_verbs/*/ibdev`, for kernels or layouts where the
    /// verbs device is not a sibling of the RDMA device.
    fn verbs_fallback(&self, name: &str) -> Option<CharDev> {
        let idx = self.verbs_index.get_or_init(|| {
            let class = self.roots.sys("class/infiniband_verbs");
            let mut idx = HashMap::new();
            for n in sysfs::list_dir(&class).unwrap_or_default() {
                if !n.starts_with("uverbs") {
                    continue;
                }
                if let Ok(ib) = sysfs::read_string(&class.join(&n).join("ibdev")) {
                    idx.insert(ib, (n.clone(), class.join(&n)));
                }
            }
            idx
        });
        let (n, path) = idx.get(name)?;
        Some(char_dev(n.clone(), sysfs::read_major_minor(&path.join("dev")).ok(), &self.dev_nodes))
    }

    /// RDMA devices in `/sys/class/infiniband` not found under any PCI function:
    /// Soft-RoCE and other virtual devices (no `device` link), or devices on
    /// parents we do not know (subfunctions).
    fn read_unattached_rdma(&self, seen: &BTreeSet<String>, inv: &mut Inventory) {
        let Ok((names, ib)) = Dir::open(self.roots.sys("class/infiniband")).and_then(|d| Ok((d.list()?, d)))
        else {
            return;
        };
        // Rarely needed (virtual devices only); a stand-in if it cannot be opened, so
        // that reads below it fail as reads by path would.
        let class = OnceLock::new();
        let class = || class.get_or_init(|| Dir::lenient(self.roots.sys("class")));
        for name in names {
            if seen.contains(&name) {
                continue;
            }
            if let Err(e) = ib.open_at(&name).and_then(|d| d.list_os()) {
                let reason = match ib.read_link(&name) {
                    Ok(t) if e.is_not_found() => {
                        format!("{:?} -> {t:?}: dangling link (device gone)", ib.join(&name))
                    }
                    _ => e.to_string(),
                };
                inv.skipped.push(Skipped { device: name, reason });
                continue;
            }
            let parent_link = Path::new(&name).join("device");
            let pci = ib.link_name(&parent_link).ok().and_then(|n| n.parse::<PciAddr>().ok());
            // A virtual device (rxe, siw) has no parent directory holding its char
            // devices: the class directories list them with the same layout.
            let chars = if pci.is_some() {
                CharDevs::scan(&ib, &parent_link, &self.dev_nodes)
            } else {
                CharDevs::scan(class(), Path::new(""), &self.dev_nodes)
            };
            let via = if pci.is_some() { RdmaVia::Direct } else { RdmaVia::Virtual };
            let mut rdma = self.read_rdma(&ib, name.clone(), via, &chars, &[]);
            // A virtual device's netdev is the one its GIDs are bound to. Without the
            // GID tables, the netdev of each port's default GID (index 0, the
            // link-local GID the kernel derives from that netdev) says the same.
            let ndev = rdma.ports.iter().flat_map(|p| &p.gids).find_map(|g| g.netdev.clone()).or_else(|| {
                rdma.ports.iter().find_map(|p| {
                    ib.read_string(format!("{name}/ports/{}/gid_attrs/ndevs/0", p.num))
                        .ok()
                        .filter(|n| !n.is_empty())
                })
            });
            let netdevs: Vec<Netdev> =
                ndev.map(|n| vec![read_netdev(class(), &Path::new("net").join(&n), n)]).unwrap_or_default();
            if let Some(mtu) = netdevs.iter().find_map(|n| n.mtu).and_then(roce_active_mtu) {
                for p in rdma.ports.iter_mut().filter(|p| p.link_layer == Some(LinkLayer::Ethernet)) {
                    p.active_mtu = Some(mtu);
                }
            }
            inv.hcas.push(Hca {
                pci,
                vendor: None,
                device: None,
                driver: None,
                numa_node: None,
                netdevs,
                rdma,
                upstream: vec![],
                problems: vec![],
            });
        }
    }
}

/// The driver that hands a function to userspace through VFIO.
const VFIO_PCI: &str = "vfio-pci";

/// Names of the character devices in `dir` (a missing directory has none). A
/// regular file or a directory of that name is not a device a container could use.
fn char_devices(dir: &Path) -> BTreeSet<String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return BTreeSet::new() };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_char_device()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Char devices next to the RDMA devices of one parent (PCI function or aux device).
#[derive(Default)]
struct CharDevs {
    verbs: HashMap<String, CharDev>,
    umad: HashMap<String, Vec<CharDev>>,
    issm: HashMap<String, Vec<CharDev>>,
    problems: Vec<Problem>,
}

fn char_dev(name: String, major_minor: Option<(u32, u32)>, dev_nodes: &BTreeSet<String>) -> CharDev {
    let node_path = Path::new("/dev/infiniband").join(&name);
    let present = dev_nodes.contains(&name);
    CharDev { name, node_path, major_minor, present }
}

impl CharDevs {
    /// Scans `parent/base/infiniband_{verbs,mad}`.
    fn scan(parent: &Dir, base: &Path, dev_nodes: &BTreeSet<String>) -> CharDevs {
        let mut c = CharDevs::default();
        // A directory that cannot be listed has no char devices for us.
        let listed = |sub: &str| parent.open_at(base.join(sub)).and_then(|d| Ok((d.list()?, d))).ok();
        if let Some((names, verbs)) = listed("infiniband_verbs") {
            for n in names {
                // `class/infiniband_verbs` also holds `abi_version`.
                if !n.starts_with("uverbs") {
                    continue;
                }
                let d = Path::new(&n);
                match verbs.read_string(d.join("ibdev")) {
                    Ok(ib) => {
                        let mm = verbs.read_major_minor(d.join("dev")).ok();
                        c.verbs.insert(ib, char_dev(n, mm, dev_nodes));
                    }
                    Err(e) => c.problems.push(problem("uverbs", format!("{n}: {e}"))),
                }
            }
        }
        let Some((names, mad)) = listed("infiniband_mad") else { return c };
        for n in names {
            let issm = n.starts_with("issm");
            if !issm && !n.starts_with("umad") {
                continue;
            }
            let d = Path::new(&n);
            match mad.read_string(d.join("ibdev")) {
                Ok(ib) => {
                    let mm = mad.read_major_minor(d.join("dev")).ok();
                    let map = if issm { &mut c.issm } else { &mut c.umad };
                    map.entry(ib).or_default().push(char_dev(n, mm, dev_nodes));
                }
                Err(e) => c.problems.push(problem(if issm { "issm" } else { "umad" }, format!("{n}: {e}"))),
            }
        }
        c
    }
}

/// Reads netdev `name` whose directory is `rel` below `at`.
fn read_netdev(at: &Dir, rel: &Path, name: String) -> Netdev {
    let mut problems = vec![];
    let mut field = |f: &str| -> Option<String> {
        at.read_string(rel.join(f)).map_err(|e| problems.push(problem(f, e.to_string()))).ok()
    };
    let ifindex = field("ifindex");
    let operstate = field("operstate");
    let mtu = field("mtu");
    let mac = field("address").map(|m| m.to_ascii_lowercase());
    let kind = field("type");
    // speed: -1 (SPEED_UNKNOWN) without link, EINVAL when the device is down; neither is a problem.
    let speed = match at.read_i64(rel.join("speed")) {
        Ok(v) => u32::try_from(v).ok(),
        Err(e) if e.is_einval() => None,
        Err(e) => {
            problems.push(problem("speed", e.to_string()));
            None
        }
    };
    let num = |f: &str, v: Option<String>, problems: &mut Vec<Problem>| -> Option<u32> {
        let v = v?;
        v.parse()
            .map_err(|_| {
                problems.push(problem(
                    f,
                    format!("{:?}: not a decimal number, found {v:?}", at.join(rel.join(f))),
                ));
            })
            .ok()
    };
    let ifindex = num("ifindex", ifindex, &mut problems);
    let mtu = num("mtu", mtu, &mut problems);
    // ARPHRD_ETHER = 1, ARPHRD_INFINIBAND = 32 (include/uapi/linux/if_arp.h).
    let link_layer = match kind.as_deref() {
        None => None,
        Some("1") => Some(LinkLayer::Ethernet),
        Some("32") => Some(LinkLayer::InfiniBand),
        Some(other) => {
            problems.push(problem(
                "type",
                format!(
                    "{:?}: not Ethernet (1) or InfiniBand (32), found {other:?}",
                    at.join(rel.join("type"))
                ),
            ));
            None
        }
    };
    Netdev { name, ifindex, speed_mbps: speed, operstate, mtu, mac, link_layer, problems }
}

/// Ports of RDMA device `name` in `ibdir`; port files are read relative to `ports/`.
fn read_ports(
    ibdir: &Dir,
    name: &str,
    active_mtu: Option<u32>,
    gid_tables: bool,
    problems: &mut Vec<Problem>,
) -> Vec<RdmaPort> {
    let (names, ports_dir) =
        match ibdir.open_at(Path::new(name).join("ports")).and_then(|d| Ok((d.list()?, d))) {
            Ok(n) => n,
            Err(e) => {
                problems.push(problem("ports", e.to_string()));
                return vec![];
            }
        };
    let mut nums: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    nums.sort_unstable();
    let mut out = vec![];
    for num in nums {
        let p = num.to_string();
        let mut state_of = |f: &str| -> Option<String> {
            let rel = format!("{p}/{f}");
            match ports_dir.read_string(&rel) {
                Ok(s) => state_name(&s).or_else(|| {
                    problems.push(problem(
                        format!("ports/{num}/{f}"),
                        format!("{:?}: expected \"N: NAME\", found {s:?}", ports_dir.join(&rel)),
                    ));
                    None
                }),
                Err(e) => {
                    problems.push(problem(format!("ports/{num}/{f}"), e.to_string()));
                    None
                }
            }
        };
        let state = state_of("state");
        let phys_state = state_of("phys_state");
        let ll_rel = format!("{p}/link_layer");
        let link_layer = match ports_dir.read_string(&ll_rel) {
            Ok(s) if s == "Ethernet" => Some(LinkLayer::Ethernet),
            Ok(s) if s == "InfiniBand" => Some(LinkLayer::InfiniBand),
            Ok(s) => {
                problems.push(problem(
                    format!("ports/{num}/link_layer"),
                    format!("{:?}: unknown link layer {s:?}", ports_dir.join(&ll_rel)),
                ));
                None
            }
            Err(e) => {
                problems.push(problem(format!("ports/{num}/link_layer"), e.to_string()));
                None
            }
        };
        let gids = if gid_tables { read_gids(&ports_dir, &p, num, problems) } else { vec![] };
        let active_mtu = if link_layer == Some(LinkLayer::Ethernet) { active_mtu } else { None };
        out.push(RdmaPort { num, state, phys_state, link_layer, active_mtu, gids });
    }
    out
}

/// GIDs of port `port` (relative to `ports`, e.g. `1`); the GID table is listed
/// and read through its own directory, the attributes of the few used entries
/// relative to `ports`.
fn read_gids(ports: &Dir, port: &str, num: u32, problems: &mut Vec<Problem>) -> Vec<Gid> {
    let (mut idx, gdir): (Vec<u32>, Dir) =
        match ports.open_at(format!("{port}/gids")).and_then(|d| Ok((d.list()?, d))) {
            Ok((n, d)) => (n.iter().filter_map(|n| n.parse().ok()).collect(), d),
            Err(e) => {
                problems.push(problem(format!("ports/{num}/gids"), e.to_string()));
                return vec![];
            }
        };
    idx.sort_unstable();
    let mut out = vec![];
    for i in idx {
        let i_name = i.to_string();
        let gid = match gdir.read_string(&i_name) {
            Ok(g) => g,
            Err(e) => {
                problems.push(problem(format!("ports/{num}/gids/{i}"), e.to_string()));
                continue;
            }
        };
        let Ok(addr) = gid.parse::<Ipv6Addr>() else {
            problems.push(problem(
                format!("ports/{num}/gids/{i}"),
                format!("{:?}: not a GID, found {gid:?}", gdir.join(&i_name)),
            ));
            continue;
        };
        if addr.is_unspecified() {
            continue; // empty table entry
        }
        let trel = format!("{port}/gid_attrs/types/{i_name}");
        let kind = match ports.read_string(&trel) {
            Ok(t) if t == "RoCE v2" => GidKind::RoceV2,
            Ok(t) if t == "IB/RoCE v1" => GidKind::RoceV1,
            Ok(t) if t.is_empty() => GidKind::Other,
            Err(e) if e.is_einval() => GidKind::Other,
            Ok(t) => {
                problems.push(problem(
                    format!("ports/{num}/gid_attrs/types/{i}"),
                    format!("{:?}: unknown GID type {t:?}", ports.join(&trel)),
                ));
                GidKind::Other
            }
            Err(e) => {
                problems.push(problem(format!("ports/{num}/gid_attrs/types/{i}"), e.to_string()));
                GidKind::Other
            }
        };
        let netdev =
            ports.read_string(format!("{port}/gid_attrs/ndevs/{i_name}")).ok().filter(|s| !s.is_empty());
        let ip = match addr.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(addr),
        };
        out.push(Gid { index: i, gid, ip: Some(ip), kind, netdev });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
