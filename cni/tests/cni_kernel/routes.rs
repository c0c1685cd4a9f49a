//! Routes in the pod: several VFs of one network, each with its routes and
//! a default route beside eth0's, and routes an IPAM result repeats.

use serde_json::{json, Value};

use crate::common::*;

/// A pod whose `eth0` has its default route, as the cluster network leaves it.
fn pod_with_eth0(lab: &Lab) -> nic::netns::NamedNetns {
    let pod = lab.pod(0);
    ip(pod.name(), &["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"]);
    ip(pod.name(), &["addr", "add", "10.9.0.5/16", "dev", "eth0"]);
    ip(pod.name(), &["link", "set", "eth0", "up"]);
    ip(pod.name(), &["link", "set", "eth0p", "up"]);
    ip(pod.name(), &["route", "add", "default", "via", "10.9.0.1", "dev", "eth0"]);
    pod
}

/// `n` VFs of one network in one pod (the multi-rail RDMA workload), the
/// network's IPAM giving each a route and a default route (both families with
/// `v6`): every ADD succeeds beside the routes the others and eth0 already
/// have, every `netN` is up with its address, CHECK passes, and the DELs
/// bring every VF home as it was and leave no lease or journal.
fn vfs_of_one_network_come_up_with_their_routes(n: u32, v4: &str, v6: Option<&str>) {
    let lab = Lab::new("e810-xxv", n, "");
    let pod = pod_with_eth0(&lab);
    let before: Vec<_> = lab.vfs.iter().map(|(_, name)| link_info(lab.host.name(), name)).collect();
    let mut conf = lab.conf("1.1.0", lab.vfs[0].0, v4);
    let mut routes = vec![json!({"dst": "10.250.0.0/16"}), json!({"dst": "0.0.0.0/0"})];
    if let Some(v6) = v6 {
        conf["ipam"]["ranges"] = json!([[{"subnet": v4}], [{"subnet": v6}]]);
        routes.push(json!({"dst": "::/0"}));
    }
    conf["ipam"]["routes"] = json!(routes);
    let confs: Vec<Value> = (0..n as usize)
        .map(|i| {
            let mut c = conf.clone();
            c["deviceID"] = json!(lab.vfs[i].0.to_string());
            c
        })
        .collect();
    let ifname = |i: usize| format!("net{}", i + 1);
    let mut results = Vec::new();
    for (i, c) in confs.iter().enumerate() {
        let (code, res) = lab.cni("ADD", "mr1", pod.path(), &ifname(i), c);
        assert_eq!(code, 0, "ADD {}: {res}", ifname(i));
        results.push(res);
    }
    let table = route_table(pod.name(), false);
    let table6 = route_table(pod.name(), true);
    let has = |t: &[(String, String, String)], dst: &str, gw: &str, dev: &str| {
        t.contains(&(dst.to_string(), gw.to_string(), dev.to_string()))
    };
    assert!(has(&table, "default", "10.9.0.1", "eth0"), "eth0's default route stays: {table:?}");
    for (i, res) in results.iter().enumerate() {
        let dev = ifname(i);
        assert!(link_info(pod.name(), &dev).2, "{dev} is up");
        let want: Vec<String> = res["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["address"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(want.len(), 1 + usize::from(v6.is_some()), "{res}");
        let have = addrs(pod.name(), &dev);
        for a in &want {
            assert!(have.contains(a), "{dev} lacks {a}: {have:?}");
        }
        // The configured route and a default route out of every netN, each
        // through the gateway of its family (ECMP beside the others and eth0's).
        let gw = res["ips"][0]["gateway"].as_str().unwrap();
        for dst in ["10.250.0.0/16", "default"] {
            assert!(has(&table, dst, gw, &dev), "no {dst} via {gw} dev {dev}: {table:?}");
        }
        if v6.is_some() {
            let gw6 = res["ips"][1]["gateway"].as_str().unwrap();
            assert!(gw6.contains(':'), "{res}");
            assert!(has(&table6, "default", gw6, &dev), "no IPv6 default via {gw6} dev {dev}: {table6:?}");
        }
        let mut check = confs[i].clone();
        check["prevResult"] = res.clone();
        let (code, out) = lab.cni("CHECK", "mr1", pod.path(), &dev, &check);
        assert_eq!(code, 0, "CHECK {dev}: {out}");
    }
    assert_eq!(lab.ipam_allocations().len(), results.len() * (1 + usize::from(v6.is_some())));
    for (i, c) in confs.iter().enumerate() {
        let (code, out) = lab.cni("DEL", "mr1", pod.path(), &ifname(i), c);
        assert_eq!(code, 0, "DEL {}: {out}", ifname(i));
    }
    let after: Vec<_> = lab.vfs.iter().map(|(_, name)| link_info(lab.host.name(), name)).collect();
    assert_eq!(after, before, "every VF home with its name, MAC, MTU and state");
    assert_eq!(links(pod.name()), ["eth0".to_string(), "eth0p".to_string()].into());
    let table = route_table(pod.name(), false);
    assert!(table.iter().all(|(_, _, dev)| dev == "eth0"), "only eth0's routes left: {table:?}");
    assert!(has(&table, "default", "10.9.0.1", "eth0"), "{table:?}");
    assert!(lab.ipam_allocations().is_empty(), "{:?}", lab.ipam_allocations());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Regression (issue 22, defect 1): the second VF's route and a default
/// route beside eth0's failed ADD with `RTM_NEWROUTE ... File exists`.
#[test]
fn two_vfs_of_one_network_come_up_with_a_route_and_default_routes_in_both_families() {
    vfs_of_one_network_come_up_with_their_routes(2, "10.224.0.0/24", Some("fd00:224::/64"));
}

#[test]
fn four_vfs_of_one_network_come_up_with_a_route_and_a_default_route_each() {
    vfs_of_one_network_come_up_with_their_routes(4, "10.225.0.0/24", None);
}

/// `ip -j [-6] route show` in `ns` as `(dst, gateway, dev)`, a multipath
/// route (IPv6 ECMP siblings) once per nexthop.
fn route_table(ns: &str, v6: bool) -> Vec<(String, String, String)> {
    let mut args = vec!["-j"];
    if v6 {
        args.push("-6");
    }
    args.extend(["route", "show"]);
    let v: Value = serde_json::from_str(&ip(ns, &args)).unwrap();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = vec![];
    for r in v.as_array().unwrap() {
        match r["nexthops"].as_array() {
            Some(hops) => out.extend(hops.iter().map(|h| (s(&r["dst"]), s(&h["gateway"]), s(&h["dev"])))),
            None => out.push((s(&r["dst"]), s(&r["gateway"]), s(&r["dev"]))),
        }
    }
    out
}

/// Issue 22 (audit): a route the IPAM result lists twice is added once and
/// the second add's `EEXIST` accepted, because the table then holds that
/// very route out of the interface; `EEXIST` is no longer taken on the
/// kernel's word alone.
#[test]
fn a_route_listed_twice_is_added_once_and_the_add_succeeds() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "unused");
    conf["ipam"] = json!({"type": "static", "addresses": [{"address": "10.239.0.2/24", "gateway": "10.239.0.1"}],
                          "routes": [{"dst": "10.252.0.0/16"}, {"dst": "10.252.0.0/16"}]});
    lab.add("rt1", pod.path(), &conf);
    let want = ("10.252.0.0/16".to_string(), "10.239.0.1".to_string(), "net1".to_string());
    let table = route_table(pod.name(), false);
    assert_eq!(table.iter().filter(|r| **r == want).count(), 1, "{table:?}");
    lab.del("rt1", pod.path(), &conf);
}
