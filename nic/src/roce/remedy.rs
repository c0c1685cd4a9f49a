//! The exact command a human would run to fix one RoCE setting, as pure
//! functions: the operator puts them in check results and `kubectl rdma` prints
//! them. Tools: iproute2 `dcb` (dcb-pfc(8), dcb-app(8), dcb-dcbx(8)), `ip`,
//! `ethtool`, and the NVIDIA mlnx-tools scripts `mlnx_qos`, `cma_roce_mode`,
//! `cma_roce_tos` where no upstream tool exists, and iproute2 `devlink`
//! (devlink-dev(8)) for the E810 RDMA protocol.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DcbxMode, Trust};
use crate::netlink::devlink::{param_set_command, Cmode, DevHandle, ParamValue};
use crate::pci::PciAddr;

/// One setting to change, with its target value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Remedy {
    /// PFC on exactly these priorities (all others off).
    Pfc {
        /// Lossless priorities.
        priorities: Vec<u8>,
    },
    /// PFC delay (cable allowance, bits).
    PfcDelay(u16),
    /// Add (or replace) DSCP → priority APP entries.
    DscpAdd(BTreeMap<u8, u8>),
    /// Delete DSCP → priority APP entries.
    DscpDel(BTreeMap<u8, u8>),
    /// Trust mode through the NVIDIA OFED `mlnx_qos` (upstream mlx5 and ice infer
    /// DSCP trust from DSCP APP entries: use [`Remedy::DscpAdd`] there).
    Trust(Trust),
    /// RoCE ECN at both the notification and reaction point of a priority
    /// (NVIDIA OFED sysfs).
    Ecn { priority: u8, on: bool },
    /// CNP DSCP (NVIDIA OFED sysfs).
    CnpDscp(u8),
    /// CNP 802.1p priority (NVIDIA OFED sysfs).
    CnpPriority(u8),
    /// Netdev MTU.
    Mtu(u32),
    /// rdma_cm default RoCE mode of a port (`cma_roce_mode -m 2` = RoCE v2, `1` = v1).
    RoceMode {
        rdma_dev: String,
        /// Port (1-based).
        port: u32,
        /// RoCE v2 (else v1).
        v2: bool,
    },
    /// rdma_cm default ToS of a port.
    Tos {
        rdma_dev: String,
        /// Port (1-based).
        port: u32,
        tos: u8,
    },
    /// Link-level (802.3x) pause.
    GlobalPause(bool),
    /// E810 firmware LLDP agent (`fw-lldp-agent` private flag of ice).
    FwLldpAgent(bool),
    /// DCBX mode.
    Dcbx(DcbxMode),
    /// ETS on every traffic class with these transmit shares (percent), and
    /// optionally this priority → traffic class map.
    Ets {
        /// Bandwidth of traffic classes 0..7.
        bandwidth: [u8; 8],
        /// Traffic class of priorities 0..7.
        priority_to_tc: Option<[u8; 8]>,
    },
    /// An E810 PF's RDMA function to RoCEv2: ice's devlink runtime parameters
    /// `enable_iwarp` off, then `enable_roce` on (ice refuses `enable_roce` while
    /// iWARP is on: the two are exclusive, `ice_devlink_enable_roce_validate`).
    /// ice unplugs and replugs the RDMA auxiliary device, so irdma re-creates
    /// the RDMA device.
    EnableRoce {
        /// The PF (its devlink instance is `pci/<bdf>`).
        pci: PciAddr,
    },
}

pub use crate::netlink::devlink::ENABLE_ROCE_PARAMS;

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn dscp_list(m: &BTreeMap<u8, u8>) -> String {
    m.iter().map(|(d, p)| format!("{d}:{p}")).collect::<Vec<_>>().join(" ")
}

/// The shell command that applies `fix` to interface `iface`.
///
/// ```
/// use nic::roce::{remediation, Remedy};
/// assert_eq!(remediation("ens1f0np0", &Remedy::Pfc { priorities: vec![3] }),
///            "dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on");
/// assert_eq!(remediation("ens1f0np0", &Remedy::Mtu(9000)), "ip link set dev ens1f0np0 mtu 9000");
/// ```
pub fn remediation(iface: &str, fix: &Remedy) -> String {
    match fix {
        Remedy::Pfc { priorities } => {
            let mut p: Vec<u8> = priorities.iter().copied().filter(|&p| p < 8).collect();
            p.sort_unstable();
            p.dedup();
            let on: String = p.iter().map(|p| format!(" {p}:on")).collect();
            format!("dcb pfc set dev {iface} prio-pfc all:off{on}")
        }
        Remedy::PfcDelay(d) => format!("dcb pfc set dev {iface} delay {d}"),
        // `replace` (iproute2 ≥ 5.11) also drops a stale priority for the same DSCP.
        Remedy::DscpAdd(m) => format!("dcb app replace dev {iface} dscp-prio {}", dscp_list(m)),
        Remedy::DscpDel(m) => format!("dcb app del dev {iface} dscp-prio {}", dscp_list(m)),
        Remedy::Trust(t) => format!("mlnx_qos -i {iface} --trust {}", t.as_str()),
        Remedy::Ecn { priority, on } => {
            let v = u8::from(*on);
            format!(
                "echo {v} > /sys/class/net/{iface}/ecn/roce_np/enable/{priority} && \
                 echo {v} > /sys/class/net/{iface}/ecn/roce_rp/enable/{priority}"
            )
        }
        Remedy::CnpDscp(d) => format!("echo {d} > /sys/class/net/{iface}/ecn/roce_np/cnp_dscp"),
        Remedy::CnpPriority(p) => format!("echo {p} > /sys/class/net/{iface}/ecn/roce_np/cnp_802p_prio"),
        Remedy::Mtu(m) => format!("ip link set dev {iface} mtu {m}"),
        Remedy::RoceMode { rdma_dev, port, v2 } => {
            format!("cma_roce_mode -d {rdma_dev} -p {port} -m {}", if *v2 { 2 } else { 1 })
        }
        Remedy::Tos { rdma_dev, port, tos } => format!("cma_roce_tos -d {rdma_dev} -p {port} -t {tos}"),
        Remedy::GlobalPause(on) => format!("ethtool -A {iface} rx {0} tx {0}", onoff(*on)),
        Remedy::FwLldpAgent(on) => format!("ethtool --set-priv-flags {iface} fw-lldp-agent {}", onoff(*on)),
        Remedy::Dcbx(DcbxMode::Os) => format!("dcb dcbx set dev {iface} host ieee"),
        Remedy::Dcbx(DcbxMode::Firmware) => format!("dcb dcbx set dev {iface} lld-managed ieee"),
        Remedy::Ets { bandwidth, priority_to_tc } => {
            let bw: String = bandwidth.iter().enumerate().map(|(tc, b)| format!(" {tc}:{b}")).collect();
            let map: String = priority_to_tc
                .map(|m| {
                    let pairs: String = m.iter().enumerate().map(|(p, tc)| format!(" {p}:{tc}")).collect();
                    format!(" prio-tc{pairs}")
                })
                .unwrap_or_default();
            format!("dcb ets set dev {iface} tc-tsa all:ets tc-bw{bw}{map}")
        }
        Remedy::EnableRoce { pci } => ENABLE_ROCE_PARAMS
            .iter()
            .map(|&(name, on)| {
                param_set_command(&DevHandle::pci(*pci), name, &ParamValue::Bool(on), Cmode::Runtime)
            })
            .collect::<Vec<_>>()
            .join(" && "),
    }
}

/// Execution order of remedies, earliest first (what [`Remedy::rank`] returns, by
/// the command's leading words): the E810 RDMA protocol first (it re-creates the
/// RDMA device, so rdma_cm defaults written before it would be lost); the E810 firmware LLDP agent off before any DCB
/// write (ice refuses DCB changes while it runs); DCBX before the settings it
/// governs; link-level pause off before PFC (802.3x pause and PFC exclude each
/// other); PFC and ETS on the lossless priority before DSCP is steered to it
/// (never send RoCE to a priority that drops); the APP table, then trust, ECN and
/// CNP; rdma_cm defaults; MTU last (it bounces the link).
const ORDER: [(&str, u8); 14] = [
    ("devlink dev param set", 0),
    ("ethtool --set-priv-flags", 1),
    ("dcb dcbx", 2),
    ("ethtool -A", 3),
    ("dcb pfc", 4),
    ("dcb ets", 5),
    ("dcb app del", 6),
    ("dcb app replace", 7),
    ("mlnx_qos", 8),
    ("echo", 9),
    ("cma_roce_mode", 11),
    ("cma_roce_tos", 12),
    ("ip link set", 13),
    ("ip addr", 14),
];

/// Where a command (one `&&` part of a remediation) runs in [`ORDER`]; unknown
/// commands go last. ECN writes (`echo` into `ecn/roce_*/enable`) run before CNP ones.
pub fn command_rank(cmd: &str) -> u8 {
    let cmd = cmd.trim();
    if cmd.starts_with("echo") {
        return if cmd.contains("/ecn/roce_np/cnp_") { 10 } else { 9 };
    }
    ORDER.iter().find(|(p, _)| cmd.starts_with(p)).map_or(15, |&(_, r)| r)
}

/// The commands of several remediations in execution order, each once
/// (`a && b` splits into its parts; the sort is stable, so equal ranks keep their order).
pub fn in_execution_order<'a>(remediations: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut cmds: Vec<String> = Vec::new();
    for r in remediations {
        for c in r.split(" && ").map(str::trim).filter(|c| !c.is_empty()) {
            if !cmds.iter().any(|x| x == c) {
                cmds.push(c.to_string());
            }
        }
    }
    cmds.sort_by_key(|c| command_rank(c));
    cmds
}

impl Remedy {
    /// Same as [`remediation`].
    pub fn command(&self, iface: &str) -> String {
        remediation(iface, self)
    }

    /// Its place in the order commands must run (see [`command_rank`]).
    pub fn rank(&self, iface: &str) -> u8 {
        command_rank(&remediation(iface, self))
    }

    /// Whether applying it on a port driven by `driver` can bounce the link (the
    /// operator refuses those unless `allowLinkFlap`): MTU changes (mlx5 and ice),
    /// link-level pause (autonegotiation restarts), the E810 firmware LLDP agent,
    /// and PFC or ETS on ice, which resets the port to apply a new DCB
    /// configuration (ice_dcb_lib.c: `ice_pf_dcb_cfg()` quiesces and rebuilds the VSIs).
    /// The RDMA protocol switch does not bounce the netdev but tears down the
    /// RDMA device and every queue pair on it: treated the same way.
    pub fn flaps_link(&self, driver: Option<&str>) -> bool {
        match self {
            Remedy::Mtu(_) | Remedy::GlobalPause(_) | Remedy::FwLldpAgent(_) | Remedy::EnableRoce { .. } => {
                true
            }
            Remedy::Pfc { .. } | Remedy::PfcDelay(_) | Remedy::Ets { .. } => driver == Some("ice"),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_read_as_a_human_would_type_them() {
        let i = "ens1f0np0";
        assert_eq!(
            remediation(i, &Remedy::Pfc { priorities: vec![4, 3, 3, 9] }),
            "dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on 4:on"
        );
        assert_eq!(
            remediation(i, &Remedy::Pfc { priorities: vec![] }),
            "dcb pfc set dev ens1f0np0 prio-pfc all:off"
        );
        assert_eq!(
            remediation(i, &Remedy::DscpAdd(BTreeMap::from([(26, 3), (48, 6)]))),
            "dcb app replace dev ens1f0np0 dscp-prio 26:3 48:6"
        );
        assert_eq!(
            remediation(i, &Remedy::DscpDel(BTreeMap::from([(0, 0)]))),
            "dcb app del dev ens1f0np0 dscp-prio 0:0"
        );
        assert_eq!(remediation(i, &Remedy::Trust(Trust::Dscp)), "mlnx_qos -i ens1f0np0 --trust dscp");
        assert_eq!(
            remediation(i, &Remedy::Ecn { priority: 3, on: true }),
            "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3 && echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3"
        );
        assert_eq!(
            remediation(i, &Remedy::CnpDscp(48)),
            "echo 48 > /sys/class/net/ens1f0np0/ecn/roce_np/cnp_dscp"
        );
        assert_eq!(
            remediation(i, &Remedy::CnpPriority(6)),
            "echo 6 > /sys/class/net/ens1f0np0/ecn/roce_np/cnp_802p_prio"
        );
        assert_eq!(
            remediation(i, &Remedy::RoceMode { rdma_dev: "mlx5_0".into(), port: 1, v2: true }),
            "cma_roce_mode -d mlx5_0 -p 1 -m 2"
        );
        assert_eq!(
            remediation(i, &Remedy::Tos { rdma_dev: "mlx5_0".into(), port: 1, tos: 106 }),
            "cma_roce_tos -d mlx5_0 -p 1 -t 106"
        );
        assert_eq!(remediation(i, &Remedy::GlobalPause(false)), "ethtool -A ens1f0np0 rx off tx off");
        assert_eq!(
            remediation(i, &Remedy::FwLldpAgent(false)),
            "ethtool --set-priv-flags ens1f0np0 fw-lldp-agent off"
        );
        assert_eq!(remediation(i, &Remedy::Dcbx(DcbxMode::Os)), "dcb dcbx set dev ens1f0np0 host ieee");
        assert_eq!(
            remediation(i, &Remedy::Ets { bandwidth: [50, 0, 0, 50, 0, 0, 0, 0], priority_to_tc: None }),
            "dcb ets set dev ens1f0np0 tc-tsa all:ets tc-bw 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0"
        );
        assert_eq!(
            remediation(
                i,
                &Remedy::Ets { bandwidth: [50, 0, 0, 50, 0, 0, 0, 0], priority_to_tc: Some([0, 0, 0, 3, 0, 0, 0, 0]) }
            ),
            "dcb ets set dev ens1f0np0 tc-tsa all:ets tc-bw 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0 prio-tc 0:0 1:0 2:0 3:3 4:0 5:0 6:0 7:0"
        );
        assert_eq!(
            remediation(i, &Remedy::EnableRoce { pci: "0000:17:00.0".parse().unwrap() }),
            "devlink dev param set pci/0000:17:00.0 name enable_iwarp value false cmode runtime && \
             devlink dev param set pci/0000:17:00.0 name enable_roce value true cmode runtime"
        );
        assert!(
            Remedy::Mtu(9000).flaps_link(Some("mlx5_core")) && !Remedy::CnpDscp(48).flaps_link(Some("ice"))
        );
        assert!(Remedy::EnableRoce { pci: "0000:17:00.0".parse().unwrap() }.flaps_link(Some("ice")));
        let pfc = Remedy::Pfc { priorities: vec![3] };
        assert!(pfc.flaps_link(Some("ice")) && !pfc.flaps_link(Some("mlx5_core")));
    }

    #[test]
    fn commands_are_ordered_as_they_must_run() {
        let i = "eth0";
        let all = [
            Remedy::EnableRoce { pci: "0000:17:00.0".parse().unwrap() },
            Remedy::FwLldpAgent(false),
            Remedy::Dcbx(DcbxMode::Os),
            Remedy::GlobalPause(false),
            Remedy::Pfc { priorities: vec![3] },
            Remedy::Ets { bandwidth: [100, 0, 0, 0, 0, 0, 0, 0], priority_to_tc: None },
            Remedy::DscpDel(BTreeMap::from([(0, 0)])),
            Remedy::DscpAdd(BTreeMap::from([(26, 3)])),
            Remedy::Trust(Trust::Dscp),
            Remedy::Ecn { priority: 3, on: true },
            Remedy::CnpDscp(48),
            Remedy::RoceMode { rdma_dev: "mlx5_0".into(), port: 1, v2: true },
            Remedy::Tos { rdma_dev: "mlx5_0".into(), port: 1, tos: 106 },
            Remedy::Mtu(9000),
        ];
        let ranks: Vec<u8> = all.iter().map(|r| r.rank(i)).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
        let mut shuffled: Vec<String> = all.iter().rev().map(|r| remediation(i, r)).collect();
        shuffled.push(remediation(i, &Remedy::Pfc { priorities: vec![3] }));
        let ordered = in_execution_order(shuffled.iter().map(String::as_str));
        // enable_iwarp off before enable_roce on: ice refuses RoCE while iWARP is on.
        assert_eq!(
            ordered[0],
            "devlink dev param set pci/0000:17:00.0 name enable_iwarp value false cmode runtime"
        );
        assert_eq!(
            ordered[1],
            "devlink dev param set pci/0000:17:00.0 name enable_roce value true cmode runtime"
        );
        assert_eq!(ordered[2], "ethtool --set-priv-flags eth0 fw-lldp-agent off");
        assert_eq!(ordered[5], "dcb pfc set dev eth0 prio-pfc all:off 3:on");
        assert_eq!(ordered.last().unwrap(), "ip link set dev eth0 mtu 9000");
        // The ECN and RoCE remedies are two commands each; the duplicate PFC command is printed once.
        assert_eq!(ordered.len(), all.len() + 2);
    }
}
