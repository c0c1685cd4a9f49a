//! Prometheus text exposition (format 0.0.4) of one node's RoCE state: check
//! results, the RDMA protocol, PFC per priority, pause frames per priority (the `ieee_pfc`
//! requests/indications counters), ECN, MTU, GID index, RDMA hw counters, and the RDMA
//! port counters of each PF port and of each VF whose RDMA device the host sees, and the
//! netdev counters of every VF as its PF's driver counts them (wherever the VF is).
//! [`crate::health::serve`] serves it with the agent's self-metrics.
//!
//! No series carries a `node` label: each agent exports one node, and Prometheus adds
//! `node` from the scrape target (the chart's ServiceMonitor/PodMonitor relabel
//! `__meta_kubernetes_pod_node_name`). A label set here would collide with that one
//! and come out as `exported_node`.

use nic::roce::{InterfaceRoce, NodeRoce, Observed, VfStats};
use plumbing::prometheus::{head, sample};

use crate::crd::{Check, CheckResult};

/// The metrics text of one node.
pub fn render(observed: &NodeRoce, checks: &[Check]) -> String {
    let mut o = String::new();
    write_checks(&mut o, checks);
    write_protocol_and_priorities(&mut o, &observed.interfaces);
    write_port_values(&mut o, &observed.interfaces);
    write_port_counters(&mut o, observed);
    write_vf_netdev_counters(&mut o, observed);
    o
}

/// Readiness and the result of each check.
fn write_checks(o: &mut String, checks: &[Check]) {
    head(o, "kuberdma_node_roce_ready", "gauge", "1 when the node has RoCE interfaces and no check fails.");
    sample(o, "kuberdma_node_roce_ready", &[], u8::from(crate::status::node_ready(checks)));

    head(
        o,
        "kuberdma_check_passing",
        "gauge",
        "1 when the check passes, 0 when it fails (other results are not exported here).",
    );
    for c in checks.iter().filter(|c| matches!(c.result, CheckResult::Pass | CheckResult::Fail)) {
        let labels = [("interface", c.interface.as_str()), ("check", c.name.as_str())];
        sample(o, "kuberdma_check_passing", &labels, u8::from(c.result == CheckResult::Pass));
    }
    head(o, "kuberdma_check_result", "gauge", "1 for the current result of each check.");
    for c in checks {
        let labels =
            [("interface", c.interface.as_str()), ("check", c.name.as_str()), ("result", c.result.as_str())];
        sample(o, "kuberdma_check_result", &labels, 1);
    }
}

/// The RDMA protocol of each interface, and PFC, pause frames and ECN per priority.
fn write_protocol_and_priorities(o: &mut String, ifs: &[InterfaceRoce]) {
    head(
        o,
        "kuberdma_rdma_protocol",
        "gauge",
        "1 for the RDMA protocol the interface's function runs (RoCEv2, iWARP, InfiniBand, none).",
    );
    for i in ifs {
        if let Observed::Value(p) = i.rdma_protocol {
            sample(o, "kuberdma_rdma_protocol", &[("interface", &i.netdev), ("protocol", p.as_str())], 1);
        }
    }
    head(o, "kuberdma_pfc_enabled", "gauge", "1 when PFC is on for the priority.");
    for i in ifs {
        if let Observed::Value(pfc) = &i.pfc {
            for p in 0..8 {
                let ps = p.to_string();
                sample(
                    o,
                    "kuberdma_pfc_enabled",
                    &[("interface", &i.netdev), ("priority", &ps)],
                    u8::from(pfc.pfc_en.contains(p as u8)),
                );
            }
        }
    }
    head(
        o,
        "kuberdma_pfc_pause_frames_total",
        "counter",
        "PFC pause frames per priority: tx = requests sent, rx = indications received (struct ieee_pfc).",
    );
    for i in ifs {
        if let Observed::Value(pfc) = &i.pfc {
            for p in 0..8 {
                let ps = p.to_string();
                for (dir, v) in [("tx", pfc.requests[p]), ("rx", pfc.indications[p])] {
                    let labels =
                        [("interface", i.netdev.as_str()), ("priority", ps.as_str()), ("direction", dir)];
                    sample(o, "kuberdma_pfc_pause_frames_total", &labels, v);
                }
            }
        }
    }
    head(o, "kuberdma_ecn_enabled", "gauge", "1 when RoCE ECN is on for the priority (NVIDIA OFED sysfs).");
    for i in ifs {
        if let Observed::Value(ecn) = &i.ecn {
            for p in 0u8..8 {
                let ps = p.to_string();
                sample(
                    o,
                    "kuberdma_ecn_enabled",
                    &[("interface", &i.netdev), ("priority", &ps)],
                    u8::from(ecn.contains(&p)),
                );
            }
        }
    }
}

/// Per interface: MTUs, the GID index and the RDMA hw counters.
fn write_port_values(o: &mut String, ifs: &[InterfaceRoce]) {
    head(o, "kuberdma_mtu_bytes", "gauge", "Netdev MTU.");
    for i in ifs {
        if let Observed::Value(m) = i.mtu {
            sample(o, "kuberdma_mtu_bytes", &[("interface", &i.netdev)], m);
        }
    }
    head(o, "kuberdma_roce_active_mtu_bytes", "gauge", "RoCE active MTU.");
    for i in ifs {
        if let Observed::Value(m) = i.active_mtu {
            sample(o, "kuberdma_roce_active_mtu_bytes", &[("interface", &i.netdev)], m);
        }
    }
    head(o, "kuberdma_gid_index", "gauge", "RoCE v2 GID index bound to the interface (NCCL_IB_GID_INDEX).");
    for i in ifs {
        if let Observed::Value(g) = i.gid_index {
            sample(o, "kuberdma_gid_index", &[("interface", &i.netdev)], g);
        }
    }
    head(
        o,
        "kuberdma_rdma_hw_stats_total",
        "counter",
        "RDMA port hw_counters (e.g. np_cnp_sent, rp_cnp_handled, out_of_sequence).",
    );
    for i in ifs {
        for (k, v) in i.hw_counters.iter().filter(|(k, _)| !NOT_COUNTERS.contains(&k.as_str())) {
            sample(o, "kuberdma_rdma_hw_stats_total", &[("interface", &i.netdev), ("counter", k)], v);
        }
    }
}

/// Files of `hw_counters/` that are settings, not counts: mlx5's `lifespan` is how
/// long (ms) the driver caches the others, and a write changes it.
const NOT_COUNTERS: [&str; 1] = ["lifespan"];

/// The data counters of ib_core's `counters/`, in 4-octet words (IBTA PortCounters
/// `PortXmitData`/`PortRcvData`), exported in bytes; every other file there is a count.
const DATA_WORDS: [(&str, &str); 2] = [("port_xmit_data", "transmitted"), ("port_rcv_data", "received")];

/// One port's counters with the labels that name it (`interface`, and `vf` for a VF).
struct Port<'a> {
    labels: Vec<(&'static str, &'a str)>,
    counters: &'a std::collections::BTreeMap<String, u64>,
}

/// The port counters of each PF/HCA port (`kuberdma_rdma_port_*`) and each VF the
/// host sees (`kuberdma_vf_port_*`, labelled with the PF's `interface` and `vf`).
fn write_port_counters(o: &mut String, observed: &NodeRoce) {
    let pfs: Vec<Port> = observed
        .interfaces
        .iter()
        .map(|i| Port { labels: vec![("interface", i.netdev.as_str())], counters: &i.port_counters })
        .collect();
    let indexes: Vec<String> = observed.vf_counters.iter().map(|v| v.vf.to_string()).collect();
    let vfs: Vec<Port> = observed
        .vf_counters
        .iter()
        .zip(&indexes)
        .map(|(v, n)| Port {
            labels: vec![("interface", v.pf.as_str()), ("vf", n.as_str())],
            counters: &v.counters,
        })
        .collect();
    for (prefix, ports, whose) in
        [("kuberdma_rdma_port", &pfs, "RDMA port 1"), ("kuberdma_vf_port", &vfs, "VF RDMA port 1")]
    {
        for (file, dir) in DATA_WORDS {
            let name = format!("{prefix}_{dir}_bytes_total");
            head(
                o,
                &name,
                "counter",
                &format!("Bytes {dir} by the {whose} ({file} x 4, ib_core counters/)."),
            );
            for p in ports.iter() {
                if let Some(words) = p.counters.get(file) {
                    sample(o, &name, &p.labels, words.saturating_mul(4));
                }
            }
        }
        let name = format!("{prefix}_stats_total");
        head(
            o,
            &name,
            "counter",
            &format!(
                "{whose} counters of ib_core counters/ (symbol_error, link_downed, port_rcv_errors, ...)."
            ),
        );
        for p in ports.iter() {
            for (k, v) in p.counters.iter().filter(|(k, _)| !DATA_WORDS.iter().any(|(f, _)| f == k)) {
                let mut labels = p.labels.clone();
                labels.push(("counter", k));
                sample(o, &name, &labels, v);
            }
        }
    }
}

/// Help text shared by the VF netdev counters: where they come from.
const VF_NETDEV_SOURCE: &str =
    "counted by the PF's driver (IFLA_VF_STATS: mlx5, ice), including while the VF is in a pod's namespace";

/// The netdev counters of each VF read through its PF (`kuberdma_vf_netdev_*`,
/// labelled with the PF's `interface` and `vf`).
fn write_vf_netdev_counters(o: &mut String, observed: &NodeRoce) {
    type Field = fn(&VfStats) -> u64;
    let families: [(&str, &str, Field); 8] = [
        ("received_bytes_total", "Bytes received by the VF", |s| s.rx_bytes),
        ("transmitted_bytes_total", "Bytes transmitted by the VF", |s| s.tx_bytes),
        ("received_packets_total", "Packets received by the VF", |s| s.rx_packets),
        ("transmitted_packets_total", "Packets transmitted by the VF", |s| s.tx_packets),
        ("received_dropped_total", "Received packets of the VF dropped", |s| s.rx_dropped),
        ("transmitted_dropped_total", "Transmitted packets of the VF dropped", |s| s.tx_dropped),
        ("received_multicast_total", "Multicast packets received by the VF", |s| s.multicast),
        ("received_broadcast_total", "Broadcast packets received by the VF", |s| s.broadcast),
    ];
    let indexes: Vec<String> = observed.vf_netdev_counters.iter().map(|v| v.vf.to_string()).collect();
    for (suffix, help, field) in families {
        let name = format!("kuberdma_vf_netdev_{suffix}");
        head(o, &name, "counter", &format!("{help}, {VF_NETDEV_SOURCE}."));
        for (v, n) in observed.vf_netdev_counters.iter().zip(&indexes) {
            sample(o, &name, &[("interface", v.pf.as_str()), ("vf", n.as_str())], field(&v.stats));
        }
    }
}
