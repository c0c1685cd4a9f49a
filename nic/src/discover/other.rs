//! Functions that are neither PF nor VF.

use super::rdma::is_rdma_aux;
use super::{Entry, Read, Walk};
use crate::inventory::{Gpu, Hca};
use crate::pci::PciAddr;

impl Walk<'_> {
    /// Functions that are neither PF nor VF: GPUs and RDMA HCAs without SR-IOV.
    pub(super) fn read_other(&self, a: PciAddr, e: &Entry<'_>) -> Read {
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
}
