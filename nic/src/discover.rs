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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::inventory::*;
use crate::pci::PciAddr;
use crate::roots::Roots;
use crate::sysfs::{self, SysfsError};

pub use crate::sim::roce_active_mtu;

/// Reads the node under `roots` into an [`Inventory`]. Never panics; problems
/// are recorded on the device they concern.
pub fn discover(roots: &Roots) -> Inventory {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    discover_with_threads(roots, threads)
}

/// [`discover`] reading functions on at most `threads` threads (1: only the
/// calling thread). The result does not depend on `threads`.
pub fn discover_with_threads(roots: &Roots, threads: usize) -> Inventory {
    Walk::new(roots).run(threads)
}

/// One PCI function as listed in `bus/pci/devices`.
struct Entry {
    /// `<sysfs>/bus/pci/devices/<bdf>` (through the link).
    dir: PathBuf,
    /// Sorted names inside the device directory.
    names: Vec<String>,
}

impl Entry {
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

struct Walk<'a> {
    roots: &'a Roots,
    entries: BTreeMap<PciAddr, Entry>,
    /// Names in `<dev>/infiniband/`, listed once.
    dev_nodes: BTreeSet<String>,
    /// `/sys/class/infiniband_verbs/*/ibdev`, read on first need.
    verbs_index: OnceLock<HashMap<String, (String, PathBuf)>>,
}

fn problem(field: impl Into<String>, reason: impl Into<String>) -> Problem {
    Problem { field: field.into(), reason: reason.into() }
}

fn not_found(path: PathBuf) -> SysfsError {
    SysfsError::Io { path, source: std::io::Error::from(std::io::ErrorKind::NotFound) }
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
        let handles: Vec<_> =
            (1..threads).filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok()).collect();
        let mut all = work();
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

impl<'a> Walk<'a> {
    fn new(roots: &'a Roots) -> Self {
        let dev_nodes = sysfs::list_dir(&roots.dev("infiniband")).unwrap_or_default().into_iter().collect();
        Walk { roots, entries: BTreeMap::new(), dev_nodes, verbs_index: OnceLock::new() }
    }

    fn run(mut self, threads: usize) -> Inventory {
        let mut inv = Inventory::default();
        self.list_devices(&mut inv);
        let addrs: Vec<PciAddr> = self.entries.keys().copied().collect();
        let reads = parallel_map(&addrs, threads, |a| self.read_function(*a));

        // Assemble: VFs go to the PF whose virtfnN link names them.
        let mut vfs: BTreeMap<PciAddr, (Vf, Result<PathBuf, SysfsError>)> = BTreeMap::new();
        let mut pfs = vec![];
        for (a, r) in addrs.iter().zip(reads) {
            match r {
                Read::Pf(pf, links) => pfs.push((pf, links)),
                Read::Vf(vf, physfn) => {
                    vfs.insert(*a, (vf, physfn));
                }
                Read::Hcas(h) => inv.hcas.extend(h),
                Read::Gpu(g) => inv.gpus.push(g),
                Read::Nothing => {}
            }
        }
        let pf_addrs: BTreeSet<PciAddr> = pfs.iter().map(|(pf, _)| pf.pci).collect();
        for (mut pf, links) in pfs {
            for (index, link, target) in links {
                let path = self.entries[&pf.pci].dir.join(&link);
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
                let physfn_path = self.entries[&vf_addr].dir.join("physfn");
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
                            self.entries[&pf.pci].dir,
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
            let physfn_path = self.entries[&a].dir.join("physfn");
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
        self.read_unattached_rdma(&seen, &mut inv);
        inv.rdma_cm = self.dev_nodes.contains("rdma_cm");
        inv
    }

    fn list_devices(&mut self, inv: &mut Inventory) {
        let bus = self.roots.sys("bus/pci/devices");
        let names = match sysfs::list_dir(&bus) {
            Ok(n) => n,
            Err(e) if e.is_not_found() => return, // no PCI (containers, some VMs)
            Err(e) => {
                inv.skipped.push(Skipped { device: "bus/pci/devices".into(), reason: e.to_string() });
                return;
            }
        };
        for name in names {
            let Ok(addr) = name.parse::<PciAddr>() else {
                inv.skipped.push(Skipped {
                    device: name.clone(),
                    reason: format!("{:?}: entry is not a PCI address", bus.join(&name)),
                });
                continue;
            };
            let dir = bus.join(&name);
            match sysfs::list_dir(&dir) {
                Ok(names) => {
                    self.entries.insert(addr, Entry { dir, names });
                }
                Err(e) => {
                    let reason = match sysfs::read_link(&dir) {
                        Ok(t) if e.is_not_found() => format!("{dir:?} -> {t:?}: dangling link (device gone)"),
                        _ => e.to_string(),
                    };
                    inv.skipped.push(Skipped { device: addr.to_string(), reason });
                }
            }
        }
    }

    fn read_function(&self, a: PciAddr) -> Read {
        let e = &self.entries[&a];
        if e.has("sriov_totalvfs") {
            self.read_pf(a)
        } else if e.has("physfn") {
            self.read_vf(a)
        } else {
            self.read_other(a)
        }
    }

    fn read_hex16(&self, e: &Entry, field: &str, problems: &mut Vec<Problem>) -> Option<u16> {
        self.read_opt(e, field, problems, sysfs::read_hex_u16)
    }

    /// Reads `<dev>/<field>` with `f`, turning absence or garbage into a problem.
    fn read_opt<T>(
        &self,
        e: &Entry,
        field: &str,
        problems: &mut Vec<Problem>,
        f: impl FnOnce(&Path) -> Result<T, SysfsError>,
    ) -> Option<T> {
        let p = e.dir.join(field);
        let r = if e.has(field) { f(&p) } else { Err(not_found(p)) };
        r.map_err(|err| problems.push(problem(field, err.to_string()))).ok()
    }

    fn numa(&self, e: &Entry, problems: &mut Vec<Problem>) -> Option<u32> {
        let v = self.read_opt(e, "numa_node", problems, sysfs::read_i64)?;
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

    fn driver(&self, e: &Entry, problems: &mut Vec<Problem>) -> Option<String> {
        let p = e.dir.join("driver");
        if !e.has("driver") {
            problems.push(problem("driver", format!("{p:?} missing: no driver bound")));
            return None;
        }
        sysfs::link_name(&p).map_err(|err| problems.push(problem("driver", err.to_string()))).ok()
    }

    /// Bridges between the function and the root complex, nearest first, from
    /// the `bus/pci/devices/<bdf>` link target (one readlink, no canonicalize).
    fn upstream(&self, a: PciAddr, problems: &mut Vec<Problem>) -> Vec<PciAddr> {
        let link = self.roots.sys("bus/pci/devices").join(a.to_string());
        match sysfs::read_link(&link) {
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

    fn read_pf(&self, a: PciAddr) -> Read {
        let mut problems = vec![];
        let e = &self.entries[&a];
        let vendor = self.read_hex16(e, "vendor", &mut problems);
        let device = self.read_hex16(e, "device", &mut problems);
        let driver = self.driver(e, &mut problems);
        let total_vfs = self.read_opt(e, "sriov_totalvfs", &mut problems, sysfs::read_u32);
        let num_vfs = self.read_opt(e, "sriov_numvfs", &mut problems, sysfs::read_u32);
        let numa_node = self.numa(e, &mut problems);
        let upstream = self.upstream(a, &mut problems);
        let netdevs = self.netdevs(e);
        let rdma = self.rdma_of(e, &netdevs);
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
                let t = sysfs::read_link(&e.dir.join(&l));
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
            upstream,
            vfs: vec![],
            problems,
        };
        Read::Pf(pf, links)
    }

    /// A VF on its own; index and PF are filled in when its PF claims it.
    fn read_vf(&self, a: PciAddr) -> Read {
        let mut problems = vec![];
        let e = &self.entries[&a];
        let vendor = self.read_hex16(e, "vendor", &mut problems);
        let device = self.read_hex16(e, "device", &mut problems);
        let driver = self.driver(e, &mut problems);
        let numa_node = self.numa(e, &mut problems);
        let physfn = sysfs::read_link(&e.dir.join("physfn"));
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
        Read::Vf(
            Vf { index: 0, pci: a, pf, vendor, device, driver, numa_node, netdev, rdma, problems },
            physfn,
        )
    }

    /// Functions that are neither PF nor VF: GPUs and RDMA HCAs without SR-IOV.
    fn read_other(&self, a: PciAddr) -> Read {
        let e = &self.entries[&a];
        let has_rdma = e.has("infiniband") || e.names.iter().any(|n| is_rdma_aux(n));
        let vendor = if e.has("vendor") { sysfs::read_hex_u16(&e.dir.join("vendor")).ok() } else { None };
        if vendor == Some(0x10de) && !has_rdma {
            let class = if e.has("class") { sysfs::read_hex_u32(&e.dir.join("class")).ok() } else { None };
            // PCI class 03 (display): 0300 VGA, 0302 3D controller (PCI Code and ID Assignment spec).
            if !matches!(class.map(|c| c >> 8), Some(0x0300 | 0x0302)) {
                return Read::Nothing;
            }
            let mut problems = vec![];
            let device = self.read_hex16(e, "device", &mut problems);
            let numa_node = self.numa(e, &mut problems);
            let upstream = self.upstream(a, &mut problems);
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
        let upstream = self.upstream(a, &mut problems);
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
    fn netdevs(&self, e: &Entry) -> Vec<Netdev> {
        if !e.has("net") {
            return vec![];
        }
        let net = e.dir.join("net");
        match sysfs::list_dir(&net) {
            Ok(names) => names.into_iter().map(|n| read_netdev(&net.join(&n), n)).collect(),
            Err(err) => {
                tracing::debug!(error = %err, "net directory unreadable");
                vec![]
            }
        }
    }

    /// RDMA devices of a function: direct and via aux devices.
    fn rdma_of(&self, e: &Entry, netdevs: &[Netdev]) -> Vec<RdmaDev> {
        let mut bases: Vec<(PathBuf, RdmaVia)> = vec![];
        if e.has("infiniband") {
            bases.push((e.dir.clone(), RdmaVia::Direct));
        }
        for n in e.names.iter().filter(|n| is_rdma_aux(n)) {
            bases.push((e.dir.join(n), RdmaVia::Aux(n.clone())));
        }
        let mut out = vec![];
        for (base, via) in bases {
            let ibdir = base.join("infiniband");
            let names = match sysfs::list_dir(&ibdir) {
                Ok(n) => n,
                Err(err) if err.is_not_found() => continue, // aux device without RDMA registered
                Err(err) => {
                    tracing::debug!(error = %err, "infiniband directory unreadable");
                    continue;
                }
            };
            if names.is_empty() {
                continue;
            }
            let chars = CharDevs::scan(&base, &self.dev_nodes);
            for name in names {
                out.push(self.read_rdma(&ibdir.join(&name), name, via.clone(), &chars, netdevs));
            }
        }
        out
    }

    fn read_rdma(
        &self,
        dir: &Path,
        name: String,
        via: RdmaVia,
        chars: &CharDevs,
        netdevs: &[Netdev],
    ) -> RdmaDev {
        let mut problems = chars.problems.clone();
        let node_guid = sysfs::read_string(&dir.join("node_guid"))
            .map_err(|e| problems.push(problem("node_guid", e.to_string())))
            .ok();
        let mut uverbs = chars.verbs.get(&name).cloned();
        if uverbs.is_none() {
            uverbs = self.verbs_fallback(&name);
            if uverbs.is_none() {
                problems.push(problem(
                    "uverbs",
                    format!("no infiniband_verbs/uverbsN with ibdev {name:?} next to {dir:?} nor in class/infiniband_verbs"),
                ));
            }
        }
        let umad = chars.umad.get(&name).cloned().unwrap_or_default();
        let issm = chars.issm.get(&name).cloned().unwrap_or_default();
        let mtu = netdevs.iter().find_map(|n| n.mtu).and_then(roce_active_mtu);
        let ports = read_ports(dir, mtu, &mut problems);
        RdmaDev { name, via, node_guid, uverbs, umad, issm, ports, problems }
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
        let class = self.roots.sys("class/infiniband");
        let Ok(names) = sysfs::list_dir(&class) else { return };
        for name in names {
            if seen.contains(&name) {
                continue;
            }
            let dir = class.join(&name);
            if let Err(e) = sysfs::list_dir_os(&dir) {
                let reason = match sysfs::read_link(&dir) {
                    Ok(t) if e.is_not_found() => format!("{dir:?} -> {t:?}: dangling link (device gone)"),
                    _ => e.to_string(),
                };
                inv.skipped.push(Skipped { device: name, reason });
                continue;
            }
            let parent_link = dir.join("device");
            let pci = sysfs::link_name(&parent_link).ok().and_then(|n| n.parse::<PciAddr>().ok());
            // A virtual device (rxe, siw) has no parent directory holding its char
            // devices: the class directories list them with the same layout.
            let chars_base = if pci.is_some() { parent_link.clone() } else { self.roots.sys("class") };
            let chars = CharDevs::scan(&chars_base, &self.dev_nodes);
            let via = if pci.is_some() { RdmaVia::Direct } else { RdmaVia::Virtual };
            let mut rdma = self.read_rdma(&dir, name.clone(), via, &chars, &[]);
            // A virtual device's netdev is the one its GIDs are bound to.
            let ndev = rdma.ports.iter().flat_map(|p| &p.gids).find_map(|g| g.netdev.clone());
            let netdevs: Vec<Netdev> =
                ndev.map(|n| vec![read_netdev(&self.roots.sys("class/net").join(&n), n)]).unwrap_or_default();
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
    fn scan(base: &Path, dev_nodes: &BTreeSet<String>) -> CharDevs {
        let mut c = CharDevs::default();
        let verbs = base.join("infiniband_verbs");
        for n in sysfs::list_dir(&verbs).unwrap_or_default() {
            // `class/infiniband_verbs` also holds `abi_version`.
            if !n.starts_with("uverbs") {
                continue;
            }
            let d = verbs.join(&n);
            match sysfs::read_string(&d.join("ibdev")) {
                Ok(ib) => {
                    let mm = sysfs::read_major_minor(&d.join("dev")).ok();
                    c.verbs.insert(ib, char_dev(n, mm, dev_nodes));
                }
                Err(e) => c.problems.push(problem("uverbs", format!("{n}: {e}"))),
            }
        }
        let mad = base.join("infiniband_mad");
        for n in sysfs::list_dir(&mad).unwrap_or_default() {
            let issm = n.starts_with("issm");
            if !issm && !n.starts_with("umad") {
                continue;
            }
            let d = mad.join(&n);
            match sysfs::read_string(&d.join("ibdev")) {
                Ok(ib) => {
                    let mm = sysfs::read_major_minor(&d.join("dev")).ok();
                    let map = if issm { &mut c.issm } else { &mut c.umad };
                    map.entry(ib).or_default().push(char_dev(n, mm, dev_nodes));
                }
                Err(e) => c.problems.push(problem(if issm { "issm" } else { "umad" }, format!("{n}: {e}"))),
            }
        }
        c
    }
}

fn read_netdev(dir: &Path, name: String) -> Netdev {
    let mut problems = vec![];
    let mut field = |f: &str| -> Option<String> {
        sysfs::read_string(&dir.join(f)).map_err(|e| problems.push(problem(f, e.to_string()))).ok()
    };
    let ifindex = field("ifindex");
    let operstate = field("operstate");
    let mtu = field("mtu");
    let mac = field("address").map(|m| m.to_ascii_lowercase());
    let kind = field("type");
    // speed: -1 (SPEED_UNKNOWN) without link, EINVAL when the device is down; neither is a problem.
    let speed = match sysfs::read_i64(&dir.join("speed")) {
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
                problems.push(problem(f, format!("{:?}: not a decimal number, found {v:?}", dir.join(f))))
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
                format!("{:?}: not Ethernet (1) or InfiniBand (32), found {other:?}", dir.join("type")),
            ));
            None
        }
    };
    Netdev { name, ifindex, speed_mbps: speed, operstate, mtu, mac, link_layer, problems }
}

fn read_ports(dir: &Path, active_mtu: Option<u32>, problems: &mut Vec<Problem>) -> Vec<RdmaPort> {
    let ports_dir = dir.join("ports");
    let names = match sysfs::list_dir(&ports_dir) {
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
        let p = ports_dir.join(num.to_string());
        let mut state_of = |f: &str| -> Option<String> {
            let path = p.join(f);
            match sysfs::read_string(&path) {
                Ok(s) => state_name(&s).or_else(|| {
                    problems.push(problem(
                        format!("ports/{num}/{f}"),
                        format!("{path:?}: expected \"N: NAME\", found {s:?}"),
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
        let ll_path = p.join("link_layer");
        let link_layer = match sysfs::read_string(&ll_path) {
            Ok(s) if s == "Ethernet" => Some(LinkLayer::Ethernet),
            Ok(s) if s == "InfiniBand" => Some(LinkLayer::InfiniBand),
            Ok(s) => {
                problems.push(problem(
                    format!("ports/{num}/link_layer"),
                    format!("{ll_path:?}: unknown link layer {s:?}"),
                ));
                None
            }
            Err(e) => {
                problems.push(problem(format!("ports/{num}/link_layer"), e.to_string()));
                None
            }
        };
        let gids = read_gids(&p, num, problems);
        let active_mtu = if link_layer == Some(LinkLayer::Ethernet) { active_mtu } else { None };
        out.push(RdmaPort { num, state, phys_state, link_layer, active_mtu, gids });
    }
    out
}

fn read_gids(port: &Path, num: u32, problems: &mut Vec<Problem>) -> Vec<Gid> {
    let gdir = port.join("gids");
    let mut idx: Vec<u32> = match sysfs::list_dir(&gdir) {
        Ok(n) => n.iter().filter_map(|n| n.parse().ok()).collect(),
        Err(e) => {
            problems.push(problem(format!("ports/{num}/gids"), e.to_string()));
            return vec![];
        }
    };
    idx.sort_unstable();
    let mut out = vec![];
    for i in idx {
        let gpath = gdir.join(i.to_string());
        let gid = match sysfs::read_string(&gpath) {
            Ok(g) => g,
            Err(e) => {
                problems.push(problem(format!("ports/{num}/gids/{i}"), e.to_string()));
                continue;
            }
        };
        let Ok(addr) = gid.parse::<Ipv6Addr>() else {
            problems.push(problem(
                format!("ports/{num}/gids/{i}"),
                format!("{gpath:?}: not a GID, found {gid:?}"),
            ));
            continue;
        };
        if addr.is_unspecified() {
            continue; // empty table entry
        }
        let tpath = port.join("gid_attrs/types").join(i.to_string());
        let kind = match sysfs::read_string(&tpath) {
            Ok(t) if t == "RoCE v2" => GidKind::RoceV2,
            Ok(t) if t == "IB/RoCE v1" => GidKind::RoceV1,
            Ok(t) if t.is_empty() => GidKind::Other,
            Err(e) if e.is_einval() => GidKind::Other,
            Ok(t) => {
                problems.push(problem(
                    format!("ports/{num}/gid_attrs/types/{i}"),
                    format!("{tpath:?}: unknown GID type {t:?}"),
                ));
                GidKind::Other
            }
            Err(e) => {
                problems.push(problem(format!("ports/{num}/gid_attrs/types/{i}"), e.to_string()));
                GidKind::Other
            }
        };
        let netdev = sysfs::read_string(&port.join("gid_attrs/ndevs").join(i.to_string()))
            .ok()
            .filter(|s| !s.is_empty());
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

    #[test]
    fn roce_mtu_follows_iboe_get_mtu() {
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(4100), Some(2048));
        assert_eq!(roce_active_mtu(300), None);
    }
}
