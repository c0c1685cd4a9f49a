//! Assembly: VFs go to the PF whose `virtfnN` link names them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::parallel::parallel_map;
use super::{pci_of, problem, Listing, Read, Walk};
use crate::inventory::*;
use crate::pci::PciAddr;
use crate::sysfs::{self, SysfsError};

/// A PF's `virtfnN` links: (index, link name, target).
type VfLinks = Vec<(u32, String, Result<PathBuf, SysfsError>)>;
/// VFs as read, with their `physfn` link target, by address.
type VfReads = BTreeMap<PciAddr, (Vf, Result<PathBuf, SysfsError>)>;

impl Walk<'_> {
    /// Reads the functions `names` of `bus/pci/devices` and assembles them;
    /// `full`: the walk saw every function, so RDMA devices nobody claimed are
    /// read from the class directory too.
    pub(super) fn assemble(
        mut self,
        mut inv: Inventory,
        names: &[String],
        threads: usize,
        full: bool,
    ) -> Inventory {
        let reads = self.read_all(&mut inv, names, threads);
        let (pfs, mut vfs) = sort_reads(reads, &mut inv);
        let pf_addrs: BTreeSet<PciAddr> = pfs.iter().map(|(pf, _)| pf.pci).collect();
        for (pf, links) in pfs {
            let pf = self.claim_vfs(pf, links, &mut vfs);
            inv.pfs.push(pf);
        }
        let mut seen: BTreeSet<String> = BTreeSet::new();
        // VFs no PF claimed; their RDMA devices go with them.
        for (a, (vf, physfn)) in vfs {
            seen.extend(vf.rdma.iter().map(|r| r.name.clone()));
            let reason = self.unclaimed_vf_reason(a, physfn, &pf_addrs);
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

    /// Lists and reads `names` on workers, keyed by address; what cannot be
    /// listed goes to `inv.skipped`.
    fn read_all(&mut self, inv: &mut Inventory, names: &[String], threads: usize) -> BTreeMap<PciAddr, Read> {
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
        reads
    }

    /// Moves the VFs that `links` name from `vfs` into `pf`; what does not
    /// match becomes a problem on the PF or the VF.
    fn claim_vfs(&self, mut pf: Pf, links: VfLinks, vfs: &mut VfReads) -> Pf {
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
                    format!("{physfn_path:?} -> {:?}, but PF {} lists this VF", physfn.as_ref().ok(), pf.pci),
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
        pf
    }

    /// Why VF `a`, which no PF listed, is skipped.
    fn unclaimed_vf_reason(
        &self,
        a: PciAddr,
        physfn: Result<PathBuf, SysfsError>,
        pf_addrs: &BTreeSet<PciAddr>,
    ) -> String {
        let physfn_path = self.entries[&a].join("physfn");
        match physfn {
            Ok(t) => match pci_of(&t) {
                Some(pf) if !self.entries.contains_key(&pf) => {
                    format!("VF whose PF vanished: {physfn_path:?} -> {t:?} dangles (PF {pf} not present)")
                }
                Some(pf) if !pf_addrs.contains(&pf) => {
                    format!("{physfn_path:?} -> {t:?}: {pf} is not an SR-IOV PF")
                }
                Some(pf) => format!("VF not listed by its PF: no virtfnN link of {pf} points to {a}"),
                None => format!("{physfn_path:?} -> {t:?}: target is not a PCI address"),
            },
            Err(e) => format!("VF without a readable physfn: {e}"),
        }
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
}

/// Splits the reads by kind: HCAs and GPUs go straight to `inv`.
fn sort_reads(reads: BTreeMap<PciAddr, Read>, inv: &mut Inventory) -> (Vec<(Pf, VfLinks)>, VfReads) {
    let mut vfs: VfReads = BTreeMap::new();
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
    (pfs, vfs)
}
