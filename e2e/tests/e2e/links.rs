//! The simulated node's VF links as the cases see and rebuild them: each VF
//! netdev is a veth in the node's netns whose peer (its "cable") is in the
//! wire netns, as `scripts/cluster up` wires them.

use anyhow::{Context, Result};
use kube_rdma_e2e::node;
use serde_json::Value;

/// `ip -j link show dev NAME` in the node's netns; `None` when it is not there.
pub fn node_link(name: &str) -> Option<Value> {
    let out = node::ip_in(&node::netns(), &["-j", "link", "show", "dev", name]).ok()?;
    let v: Value = serde_json::from_str(&out).ok()?;
    v.as_array()?.first().cloned()
}

/// A VF link's peer in the wire netns (its "cable").
pub fn peer_of(link: &Value) -> Result<String> {
    let idx = link["link_index"].as_u64().context("veth without link_index")?;
    let v: Value = serde_json::from_str(&node::ip_in(&node::wire_netns(), &["-j", "link", "show"])?)?;
    v.as_array()
        .into_iter()
        .flatten()
        .find(|l| l["ifindex"].as_u64() == Some(idx))
        .and_then(|l| l["ifname"].as_str().map(String::from))
        .with_context(|| format!("no peer with ifindex {idx} in the wire netns"))
}

/// A VF netdev wired again as `up` wired it (after the driver unregistered it):
/// `name` in the node's netns with `mac` and `mtu`, up, its peer `peer` in the
/// wire netns.
pub fn add_vf_link(name: &str, peer: &str, mac: &str, mtu: u64) -> Result<()> {
    let mtu = mtu.to_string();
    let ns = node::netns();
    node::ip_in(
        &ns,
        &["link", "add", name, "type", "veth", "peer", "name", peer, "netns", &node::wire_netns()],
    )?;
    node::ip_in(&ns, &["link", "set", name, "address", mac, "mtu", &mtu, "up"])?;
    node::ip_in(&node::wire_netns(), &["link", "set", peer, "mtu", &mtu, "up"])?;
    Ok(())
}
