//! The ADD result (CNI spec 1.1.0 "Success", in the version the runtime
//! asked for), chained onto a `prevResult` when we are not first in a chain.

use serde_json::{json, Map, Value};

use crate::cni_version;
use crate::conf::Env;

/// Our interface in the result.
#[derive(Debug, Clone)]
pub struct Iface {
    /// Name in the pod (`CNI_IFNAME`).
    pub name: String,
    /// MAC, when known.
    pub mac: Option<String>,
    /// MTU, when known (1.1.0 results only).
    pub mtu: Option<u32>,
    /// The netns path (`CNI_NETNS`).
    pub sandbox: String,
    /// The VF's PCI address (`pciID`, 1.1.0 results only).
    pub pci: String,
}

fn array(v: Option<&Value>, key: &str) -> Vec<Value> {
    v.and_then(|r| r.get(key)).and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Merges two DNS objects: lists joined without repeats, first domain kept.
fn merge_dns(a: Option<&Value>, b: Option<&Value>) -> Value {
    let mut out = Map::new();
    for src in [a, b].into_iter().flatten().filter_map(Value::as_object) {
        for (k, v) in src {
            match (out.get_mut(k), v) {
                (Some(Value::Array(have)), Value::Array(more)) => {
                    for x in more {
                        if !have.contains(x) {
                            have.push(x.clone());
                        }
                    }
                }
                (Some(_), _) => {}
                (None, v) => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// An `ips[]` entry of another result in the format of ours: with
/// `version` ("4"/"6", from its address) before 1.0.0, without it since.
fn ip_in_version(mut ip: Value, pre1: bool) -> Value {
    let Some(o) = ip.as_object_mut() else { return ip };
    if !pre1 {
        o.remove("version");
    } else if !o.contains_key("version") {
        if let Some(a) = o.get("address").and_then(Value::as_str) {
            let six = a.contains(':');
            o.insert("version".into(), if six { "6" } else { "4" }.into());
        }
    }
    ip
}

/// Our interface in a previous result: named `CNI_IFNAME`, in our sandbox.
pub fn ours_in<'a>(prev: &'a Value, env: &Env) -> Option<&'a Value> {
    prev.get("interfaces")?.as_array()?.iter().find(|i| {
        i.get("name").and_then(Value::as_str) == Some(env.ifname.as_str())
            && i.get("sandbox").and_then(Value::as_str).is_none_or(|s| s.is_empty() || s == env.netns)
    })
}

/// The result for `version`: `prev`'s interfaces, IPs, routes and DNS kept
/// (spec: a plugin in a chain passes the previous result on), our interface
/// appended, the IPAM result's addresses attached to it.
pub fn build(version: &str, iface: &Iface, ipam: Option<&Value>, prev: Option<&Value>) -> Value {
    let v11 = cni_version::key(version) >= (1, 1, 0);
    let pre1 = cni_version::key(version) < (1, 0, 0);
    let mut interfaces = array(prev, "interfaces");
    let index = interfaces.len();
    let mut ours = json!({"name": iface.name, "sandbox": iface.sandbox});
    if let Some(m) = &iface.mac {
        ours["mac"] = m.clone().into();
    }
    if v11 {
        if let Some(m) = iface.mtu {
            ours["mtu"] = m.into();
        }
        ours["pciID"] = iface.pci.clone().into();
    }
    interfaces.push(ours);
    // The runtime converts prevResult to the configuration's version (spec,
    // "Chained plugins"); one that did not still gets a result in the version
    // asked: `ips[].version` is required before 1.0.0 and gone since.
    let mut ips: Vec<Value> = array(prev, "ips").into_iter().map(|ip| ip_in_version(ip, pre1)).collect();
    for ip in array(ipam, "ips") {
        let mut o = Map::new();
        if let Some(a) = ip.get("address") {
            o.insert("address".into(), a.clone());
            if pre1 {
                let six = a.as_str().is_some_and(|s| s.contains(':'));
                o.insert("version".into(), if six { "6" } else { "4" }.into());
            }
        }
        if let Some(g) = ip.get("gateway") {
            o.insert("gateway".into(), g.clone());
        }
        o.insert("interface".into(), index.into());
        ips.push(Value::Object(o));
    }
    let mut routes = array(prev, "routes");
    routes.extend(array(ipam, "routes"));
    let dns = merge_dns(prev.and_then(|p| p.get("dns")), ipam.and_then(|r| r.get("dns")));
    json!({"cniVersion": version, "interfaces": interfaces, "ips": ips, "routes": routes, "dns": dns})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface() -> Iface {
        Iface {
            name: "net1".into(),
            mac: Some("02:00:00:00:00:01".into()),
            mtu: Some(9000),
            sandbox: "/run/netns/p".into(),
            pci: "0000:3b:00.2".into(),
        }
    }

    #[test]
    fn results_follow_the_requested_version() {
        let ipam = json!({"ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 5}], "dns": {"nameservers": ["1.1.1.1"]}});
        let r = build("1.1.0", &iface(), Some(&ipam), None);
        assert_eq!(r["interfaces"][0]["pciID"], "0000:3b:00.2");
        assert_eq!(r["interfaces"][0]["mtu"], 9000);
        assert_eq!(r["ips"][0]["interface"], 0);
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["dns"]["nameservers"][0], "1.1.1.1");
        let r = build("1.0.0", &iface(), Some(&ipam), None);
        assert!(r["interfaces"][0].get("pciID").is_none() && r["interfaces"][0].get("mtu").is_none());
        let r = build("0.3.1", &iface(), Some(&ipam), None);
        assert_eq!(r["ips"][0]["version"], "4");
        assert_eq!(r["cniVersion"], "0.3.1");
    }

    #[test]
    fn a_previous_result_in_another_version_is_written_in_ours() {
        let v040 = json!({"cniVersion": "0.4.0", "interfaces": [{"name": "eth0"}],
            "ips": [{"version": "4", "address": "10.9.0.5/16", "interface": 0}]});
        let r = build("1.0.0", &iface(), None, Some(&v040));
        assert_eq!(r["ips"][0], json!({"address": "10.9.0.5/16", "interface": 0}));
        let v100 = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}],
            "ips": [{"address": "fd00::5/64", "interface": 0}]});
        let r = build("0.4.0", &iface(), None, Some(&v100));
        assert_eq!(r["ips"][0], json!({"version": "6", "address": "fd00::5/64", "interface": 0}));
    }

    #[test]
    fn a_chained_add_keeps_the_previous_interfaces_and_addresses() {
        let prev = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}, {"name": "veth1"}],
            "ips": [{"address": "10.9.0.5/16", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.96.0.10"], "search": ["a.svc"]}});
        let ipam = json!({"ips": [{"address": "10.0.0.2/24"}], "routes": [{"dst": "10.250.0.0/16"}],
                          "dns": {"nameservers": ["10.96.0.10", "1.1.1.1"], "domain": "x"}});
        let r = build("1.0.0", &iface(), Some(&ipam), Some(&prev));
        assert_eq!(r["interfaces"].as_array().unwrap().len(), 3);
        assert_eq!(r["interfaces"][0]["name"], "eth0");
        assert_eq!(r["interfaces"][2]["name"], "net1");
        assert_eq!(r["ips"][0], json!({"address": "10.9.0.5/16", "interface": 0}));
        assert_eq!(r["ips"][1]["interface"], 2, "our address points at our interface");
        assert_eq!(r["routes"].as_array().unwrap().len(), 2);
        assert_eq!(r["dns"]["nameservers"], json!(["10.96.0.10", "1.1.1.1"]));
        assert_eq!(r["dns"]["domain"], "x");
    }
}
