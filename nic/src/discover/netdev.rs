//! Netdevs of a function.

use std::path::Path;

use super::{problem, Entry, Walk};
use crate::inventory::{LinkLayer, Netdev, Problem};
use crate::sysfs::Dir;

impl Walk<'_> {
    /// Netdevs under `<pci>/net/`.
    pub(super) fn netdevs(&self, e: &Entry<'_>) -> Vec<Netdev> {
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
}

/// Reads netdev `name` whose directory is `rel` below `at`.
pub(super) fn read_netdev(at: &Dir, rel: &Path, name: String) -> Netdev {
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
