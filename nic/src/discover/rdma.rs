//! RDMA devices: under a function, its aux devices, or only in the class directory.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::OnceLock;

use super::chardev::{char_dev, CharDevs};
use super::netdev::read_netdev;
use super::ports::read_ports;
use super::{problem, Entry, Walk};
use crate::inventory::*;
use crate::pci::PciAddr;
use crate::roce::roce_active_mtu;
use crate::sysfs::{self, Dir};

/// The aux device name patterns that carry RDMA devices.
pub(super) fn is_rdma_aux(name: &str) -> bool {
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

impl Walk<'_> {
    /// RDMA devices of a function: direct and via aux devices.
    pub(super) fn rdma_of(&self, e: &Entry<'_>, netdevs: &[Netdev]) -> Vec<RdmaDev> {
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
    pub(super) fn read_unattached_rdma(&self, seen: &BTreeSet<String>, inv: &mut Inventory) {
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
