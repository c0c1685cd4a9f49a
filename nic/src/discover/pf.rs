//! SR-IOV physical functions.

use super::rdma::is_rdma_aux;
use super::{problem, Entry, Read, Walk};
use crate::inventory::{Pf, Problem, RdmaDev, RdmaProtocol};
use crate::pci::PciAddr;

impl Walk<'_> {
    pub(super) fn read_pf(&self, a: PciAddr, e: &Entry<'_>) -> Read {
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
