//! Ports of an RDMA device and their GID tables.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use super::problem;
use crate::inventory::{Gid, GidKind, LinkLayer, Problem, RdmaPort};
use crate::sysfs::Dir;

/// `"4: ACTIVE"` → `"ACTIVE"`.
pub(super) fn state_name(s: &str) -> Option<String> {
    let (num, name) = s.split_once(':')?;
    let name = name.trim();
    (num.trim().parse::<u32>().is_ok() && !name.is_empty()).then(|| name.to_string())
}

/// Ports of RDMA device `name` in `ibdir`; port files are read relative to `ports/`.
pub(super) fn read_ports(
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
