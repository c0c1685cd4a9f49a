//! The text renderer used as a test oracle: [`Sim::summary`] says what
//! discovery must find on the node, [`describe`] renders what it did find, in
//! the same one-fact-per-line format, so a test can `assert_eq!` the two and
//! read a diff.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::layout::{fmt_gid, fmt_mac, umad_dev, uverbs_dev, Func, Role, VFIO_PCI};
use super::Sim;
use crate::inventory::{CharDev, GidKind, Inventory, LinkLayer, Netdev, RdmaDev, RdmaProtocol, RdmaVia};
use crate::pci::PciAddr;
use crate::roce::roce_active_mtu;

impl Sim {
    /// What discovery must find on this node right now, one line per fact, in the
    /// format of [`describe`].
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        let upstream = |f: &Func| -> Vec<PciAddr> {
            let mut v: Vec<PciAddr> =
                f.parent.components().filter_map(|c| c.as_os_str().to_str()?.parse().ok()).collect();
            v.reverse();
            v
        };
        let numa = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or("-".into());
        let hex = |v: u16| format!("{v:04x}");
        let rank = |f: &&Func| match f.role {
            Role::Pf { .. } => 0,
            Role::Hca => 1,
            Role::Gpu => 2,
            Role::Bridge | Role::Vf { .. } => 3,
        };
        let mut ordered: Vec<&Func> = self.funcs.values().collect();
        ordered.sort_by_key(|f| (rank(f), f.bdf));
        for f in ordered {
            match &f.role {
                Role::Pf { total, num, .. } => {
                    out.push(pf_line(
                        f.bdf,
                        Some(f.vendor),
                        Some(f.device),
                        f.driver.as_deref(),
                        Some(*num),
                        Some(*total),
                        f.numa,
                        &upstream(f),
                        Some(f.rdma_protocol()),
                        &f.rdma_aux(),
                    ));
                    self.func_lines(f, "  ", &mut out);
                    let mut vfs: Vec<(&u32, &Func)> = self
                        .funcs
                        .values()
                        .filter_map(|v| match v.role {
                            Role::Vf { pf, ref index } if pf == f.bdf => Some((index, v)),
                            _ => None,
                        })
                        .collect();
                    vfs.sort_by_key(|(i, _)| **i);
                    for (i, v) in vfs {
                        out.push(format!(
                            "  vf{i} {} {}:{} driver={} numa={}",
                            v.bdf,
                            hex(v.vendor),
                            hex(v.device),
                            v.driver.as_deref().unwrap_or("-"),
                            numa(v.numa)
                        ));
                        if v.driver.as_deref() == Some(VFIO_PCI) {
                            if let Some(g) = v.iommu_group {
                                let c = CharDev {
                                    name: g.to_string(),
                                    node_path: PathBuf::from("/dev/vfio").join(g.to_string()),
                                    major_minor: None,
                                    present: true,
                                };
                                out.push(format!("    vfio {}", chardev_str(&c)));
                            }
                        }
                        if v.net.as_ref().is_none_or(|n| !n.present) {
                            out.push("    netdev -".into());
                        }
                        self.func_lines(v, "    ", &mut out);
                    }
                }
                // A NIC without SR-IOV and without RDMA is not in the inventory.
                Role::Hca if f.rdma.is_some() => {
                    let up: Vec<String> = upstream(f).iter().map(|a| a.to_string()).collect();
                    out.push(format!(
                        "hca {} {}:{} driver={} numa={} upstream={}",
                        f.bdf,
                        hex(f.vendor),
                        hex(f.device),
                        f.driver.as_deref().unwrap_or("-"),
                        numa(f.numa),
                        up.join(",")
                    ));
                    self.func_lines(f, "  ", &mut out);
                }
                Role::Gpu => {
                    let up: Vec<String> = upstream(f).iter().map(|a| a.to_string()).collect();
                    out.push(format!(
                        "gpu {} {}:{} numa={} upstream={}",
                        f.bdf,
                        hex(f.vendor),
                        hex(f.device),
                        numa(f.numa),
                        up.join(",")
                    ));
                }
                Role::Hca | Role::Bridge | Role::Vf { .. } => {}
            }
        }
        out.push(format!("rdma_cm {}", self.desc.rdma_cm && !self.removed_char_devs.contains("rdma_cm")));
        out
    }

    fn func_lines(&self, f: &Func, ind: &str, out: &mut Vec<String>) {
        let net = f.net.as_ref().filter(|n| n.present);
        if let Some(n) = net {
            let up = n.operstate == "up";
            out.push(netdev_line(
                ind,
                &n.name,
                Some(n.ifindex),
                if up { Some(n.speed) } else { None },
                Some(&n.operstate),
                Some(n.mtu),
                Some(&fmt_mac(&n.mac)),
                Some(LinkLayer::Ethernet),
            ));
        }
        let Some(r) = &f.rdma else { return };
        let chardev = |name: String, mm: (u32, u32)| CharDev {
            node_path: PathBuf::from("/dev/infiniband").join(&name),
            present: !self.removed_char_devs.contains(&name),
            name,
            major_minor: Some(mm),
        };
        let umad: Vec<CharDev> =
            r.mad.iter().map(|m| chardev(format!("umad{m}"), umad_dev(*m, false))).collect();
        let issm: Vec<CharDev> =
            r.mad.iter().map(|m| chardev(format!("issm{m}"), umad_dev(*m, true))).collect();
        let via = match &r.aux {
            Some(a) => RdmaVia::Aux(a.clone()),
            None => RdmaVia::Direct,
        };
        out.push(rdma_line(
            ind,
            &r.name,
            &via,
            (!r.in_other_netns).then_some(r.protocol),
            (!r.in_other_netns).then_some(r.guid.as_str()),
            Some(&chardev(format!("uverbs{}", r.uverbs), uverbs_dev(r.uverbs))),
            &umad,
            &issm,
            r.in_other_netns,
        ));
        if r.in_other_netns {
            return; // no ports: the device is only known from its char devices
        }
        let up = f.net.as_ref().is_some_and(|n| n.operstate == "up");
        let mtu = net.and_then(|n| roce_active_mtu(n.mtu));
        out.push(format!(
            "{ind}  port1 {}/{} {:?} mtu={}",
            if up { "ACTIVE" } else { "DOWN" },
            if up { "LinkUp" } else { "Disabled" },
            LinkLayer::Ethernet,
            opt(mtu)
        ));
        for e in f.gid_entries() {
            let kind = if e.kind == "RoCE v2" { GidKind::RoceV2 } else { GidKind::RoceV1 };
            let ndev = if e.ndev.is_empty() { "-" } else { &e.ndev };
            out.push(format!("{ind}    gid{} {} {kind:?} {} {ndev}", e.index, fmt_gid(e.gid), e.ip));
        }
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or("-".into())
}

#[allow(clippy::too_many_arguments)]
fn pf_line(
    bdf: PciAddr,
    vendor: Option<u16>,
    device: Option<u16>,
    driver: Option<&str>,
    num: Option<u32>,
    total: Option<u32>,
    numa: Option<u32>,
    upstream: &[PciAddr],
    protocol: Option<RdmaProtocol>,
    rdma_aux: &[String],
) -> String {
    let up: Vec<String> = upstream.iter().map(|a| a.to_string()).collect();
    format!(
        "pf {bdf} {}:{} driver={} vfs={}/{} numa={} upstream={} rdma={} aux={}",
        vendor.map(|v| format!("{v:04x}")).unwrap_or("-".into()),
        device.map(|v| format!("{v:04x}")).unwrap_or("-".into()),
        driver.unwrap_or("-"),
        opt(num),
        opt(total),
        opt(numa),
        up.join(","),
        opt(protocol),
        if rdma_aux.is_empty() { "-".to_string() } else { rdma_aux.join(",") }
    )
}

#[allow(clippy::too_many_arguments)]
fn netdev_line(
    ind: &str,
    name: &str,
    ifindex: Option<u32>,
    speed: Option<u32>,
    operstate: Option<&str>,
    mtu: Option<u32>,
    mac: Option<&str>,
    ll: Option<LinkLayer>,
) -> String {
    format!(
        "{ind}netdev {name} ifindex={} speed={} {} mtu={} mac={} {}",
        opt(ifindex),
        opt(speed),
        operstate.unwrap_or("-"),
        opt(mtu),
        mac.unwrap_or("-"),
        ll.map(|l| format!("{l:?}")).unwrap_or("-".into())
    )
}

fn chardev_str(c: &CharDev) -> String {
    let mm = c.major_minor.map(|(a, b)| format!("{a}:{b}")).unwrap_or("-".into());
    format!("{}({mm}{})", c.name, if c.present { "" } else { ",absent" })
}

#[allow(clippy::too_many_arguments)]
fn rdma_line(
    ind: &str,
    name: &str,
    via: &RdmaVia,
    protocol: Option<RdmaProtocol>,
    guid: Option<&str>,
    uverbs: Option<&CharDev>,
    umad: &[CharDev],
    issm: &[CharDev],
    other_netns: bool,
) -> String {
    let via = match via {
        RdmaVia::Direct => "direct".to_string(),
        RdmaVia::Aux(a) => format!("aux:{a}"),
        RdmaVia::Virtual => "virtual".to_string(),
    };
    let list = |v: &[CharDev]| {
        if v.is_empty() {
            "-".into()
        } else {
            v.iter().map(chardev_str).collect::<Vec<_>>().join(",")
        }
    };
    format!(
        "{ind}rdma {name} via={via} proto={} guid={} uverbs={} umad={} issm={}{}",
        opt(protocol),
        guid.unwrap_or("-"),
        uverbs.map(chardev_str).unwrap_or("-".into()),
        list(umad),
        list(issm),
        if other_netns { " netns=other" } else { "" }
    )
}

fn netdev_lines(ind: &str, n: &Netdev, out: &mut Vec<String>) {
    out.push(netdev_line(
        ind,
        &n.name,
        n.ifindex,
        n.speed_mbps,
        n.operstate.as_deref(),
        n.mtu,
        n.mac.as_deref(),
        n.link_layer,
    ));
    problem_lines(&format!("{ind}  "), &n.problems, out);
}

fn problem_lines(ind: &str, problems: &[crate::inventory::Problem], out: &mut Vec<String>) {
    for p in problems {
        out.push(format!("{ind}problem {}: {}", p.field, p.reason));
    }
}

fn rdma_lines(ind: &str, r: &RdmaDev, out: &mut Vec<String>) {
    out.push(rdma_line(
        ind,
        &r.name,
        &r.via,
        r.protocol,
        r.node_guid.as_deref(),
        r.uverbs.as_ref(),
        &r.umad,
        &r.issm,
        r.in_other_netns,
    ));
    problem_lines(&format!("{ind}  "), &r.problems, out);
    for p in &r.ports {
        out.push(format!(
            "{ind}  port{} {}/{} {} mtu={}",
            p.num,
            p.state.as_deref().unwrap_or("-"),
            p.phys_state.as_deref().unwrap_or("-"),
            p.link_layer.map(|l| format!("{l:?}")).unwrap_or("-".into()),
            opt(p.active_mtu)
        ));
        for g in &p.gids {
            out.push(format!(
                "{ind}    gid{} {} {:?} {} {}",
                g.index,
                g.gid,
                g.kind,
                opt(g.ip),
                g.netdev.as_deref().unwrap_or("-")
            ));
        }
    }
}

/// The inventory as lines of text, one fact per line, in the format of
/// [`Sim::summary`], so that a test can `assert_eq!` the two and read a diff.
/// Problems and skipped devices appear as `problem …` / `skipped …` lines.
pub fn describe(inv: &Inventory) -> Vec<String> {
    let mut out = Vec::new();
    for pf in &inv.pfs {
        out.push(pf_line(
            pf.pci,
            pf.vendor,
            pf.device,
            pf.driver.as_deref(),
            pf.num_vfs,
            pf.total_vfs,
            pf.numa_node,
            &pf.upstream,
            pf.rdma_protocol,
            &pf.rdma_aux,
        ));
        problem_lines("  ", &pf.problems, &mut out);
        for n in &pf.netdevs {
            netdev_lines("  ", n, &mut out);
        }
        for r in &pf.rdma {
            rdma_lines("  ", r, &mut out);
        }
        for v in &pf.vfs {
            let mut line = String::new();
            let _ = write!(
                line,
                "  vf{} {} {}:{} driver={} numa={}",
                v.index,
                v.pci,
                v.vendor.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
                v.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
                v.driver.as_deref().unwrap_or("-"),
                opt(v.numa_node)
            );
            out.push(line);
            problem_lines("    ", &v.problems, &mut out);
            if let Some(c) = &v.vfio {
                out.push(format!("    vfio {}", chardev_str(c)));
            }
            match &v.netdev {
                Some(n) => netdev_lines("    ", n, &mut out),
                None => out.push("    netdev -".into()),
            }
            for r in &v.rdma {
                rdma_lines("    ", r, &mut out);
            }
        }
    }
    for h in &inv.hcas {
        let up: Vec<String> = h.upstream.iter().map(|a| a.to_string()).collect();
        out.push(format!(
            "hca {} {}:{} driver={} numa={} upstream={}",
            h.pci.map(|p| p.to_string()).unwrap_or("-".into()),
            h.vendor.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            h.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            h.driver.as_deref().unwrap_or("-"),
            opt(h.numa_node),
            up.join(",")
        ));
        problem_lines("  ", &h.problems, &mut out);
        for n in &h.netdevs {
            netdev_lines("  ", n, &mut out);
        }
        rdma_lines("  ", &h.rdma, &mut out);
    }
    for g in &inv.gpus {
        let up: Vec<String> = g.upstream.iter().map(|a| a.to_string()).collect();
        out.push(format!(
            "gpu {} {:04x}:{} numa={} upstream={}",
            g.pci,
            g.vendor,
            g.device.map(|x| format!("{x:04x}")).unwrap_or("-".into()),
            opt(g.numa_node),
            up.join(",")
        ));
    }
    out.push(format!("rdma_cm {}", inv.rdma_cm));
    for s in &inv.skipped {
        out.push(format!("skipped {}: {}", s.device, s.reason));
    }
    out
}
