//! SR-IOV virtual functions.

use std::path::Path;

use super::{pci_of, problem, Entry, Read, Walk};
use crate::inventory::{CharDev, Problem, Vf};
use crate::pci::PciAddr;

/// The driver that hands a function to userspace through VFIO.
const VFIO_PCI: &str = "vfio-pci";

impl Walk<'_> {
    /// A VF on its own; index and PF are filled in when its PF claims it.
    pub(super) fn read_vf(&self, a: PciAddr, e: &Entry<'_>) -> Read {
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
}
