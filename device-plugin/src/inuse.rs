//! What tells the device plugin that a device is in use, as plain data:
//! - [`Memory`]: each VF's RDMA devices as last seen on the host, so that a VF
//!   whose RDMA device moved into a pod (exclusive RDMA netns mode hides it from
//!   the host's `infiniband` class) keeps its ports and GUID in the pools. After a
//!   restart there is no memory; discovery then knows the device from its char
//!   devices only (`infiniband_verbs/uverbsN/ibdev`), which is enough to serve it.
//! - [`Allocations`]: what the kubelet has assigned to containers (PodResources
//!   `List`), the second witness.
//!
//! Pure and free of gRPC, so the DRA mode can reuse both.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nic::{Inventory, PciAddr, Pf, RdmaDev};

/// RDMA devices of each VF as last seen on the host.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    by_vf: HashMap<PciAddr, Vec<RdmaDev>>,
}

impl Memory {
    /// Learns from, and fills in, every PF of a full inventory; forgets VFs
    /// that no longer exist.
    pub fn observe(&mut self, inv: &mut Inventory) {
        for pf in &mut inv.pfs {
            self.observe_pf(pf);
        }
        let present: BTreeSet<PciAddr> = inv.vfs().map(|v| v.pci).collect();
        self.by_vf.retain(|k, _| present.contains(k));
    }

    /// Learns the RDMA devices of VFs of `pf` that show them on the host, and
    /// gives VFs whose devices are in another netns what was learned before
    /// (with today's char devices: the kernel re-creates them on a netns move).
    pub fn observe_pf(&mut self, pf: &mut Pf) {
        for vf in &mut pf.vfs {
            if vf.rdma.is_empty() {
                continue;
            }
            if vf.rdma.iter().all(|r| !r.in_other_netns) {
                if self.by_vf.get(&vf.pci) != Some(&vf.rdma) {
                    self.by_vf.insert(vf.pci, vf.rdma.clone());
                }
                continue;
            }
            let Some(known) = self.by_vf.get(&vf.pci) else { continue };
            for r in vf.rdma.iter_mut().filter(|r| r.in_other_netns) {
                if let Some(k) = known.iter().find(|k| k.name == r.name) {
                    let mut filled = k.clone();
                    filled.uverbs = r.uverbs.take();
                    filled.umad = std::mem::take(&mut r.umad);
                    filled.issm = std::mem::take(&mut r.issm);
                    filled.problems = std::mem::take(&mut r.problems);
                    filled.in_other_netns = true;
                    *r = filled;
                }
            }
        }
    }

    /// How many VFs are remembered.
    pub fn len(&self) -> usize {
        self.by_vf.len()
    }

    /// Nothing remembered.
    pub fn is_empty(&self) -> bool {
        self.by_vf.is_empty()
    }
}

/// Device IDs the kubelet has assigned to containers, by resource name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocations {
    /// `kuberdma.io/rdma_vfs` → device IDs.
    pub by_resource: BTreeMap<String, BTreeSet<String>>,
}

impl Allocations {
    /// Whether the kubelet assigned `id` of `resource`.
    pub fn contains(&self, resource: &str, id: &str) -> bool {
        self.by_resource.get(resource).is_some_and(|s| s.contains(id))
    }

    /// Whether any resource has `id` assigned.
    pub fn assigned_anywhere(&self, id: &str) -> bool {
        self.by_resource.values().any(|s| s.contains(id))
    }

    /// The IDs of `resource`.
    pub fn of(&self, resource: &str) -> Option<&BTreeSet<String>> {
        self.by_resource.get(resource)
    }
}
