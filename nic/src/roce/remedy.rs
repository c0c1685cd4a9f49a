//! The exact command a human would run to fix one RoCE setting, as pure
//! functions: the operator puts them in check results and `kubectl rdma` prints
//! them. Tools: iproute2 `dcb` (dcb-pfc(8), dcb-app(8), dcb-dcbx(8)), `ip`,
//! `ethtool`, and the NVIDIA mlnx-tools scripts `mlnx_qos`, `cma_roce_mode`,
//! `cma_roce_tos` where no upstream tool exists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DcbxMode, Trust};

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
    Ecn {
        /// Priority.
        priority: u8,
        /// On or off.
        on: bool,
    },
    /// CNP DSCP (NVIDIA OFED sysfs).
    CnpDscp(u8),
    /// CNP 802.1p priority (NVIDIA OFED sysfs).
    CnpPriority(u8),
    /// Netdev MTU.
    Mtu(u32),
    /// rdma_cm default RoCE mode of a port (`cma_roce_mode -m 2` = RoCE v2, `1` = v1).
    RoceMode {
        /// RDMA device.
        rdma_dev: String,
        /// Port (1-based).
        port: u32,
        /// RoCE v2 (else v1).
        v2: bool,
    },
    /// rdma_cm default ToS of a port.
    Tos {
        /// RDMA device.
        rdma_dev: String,
        /// Port (1-based).
        port: u32,
        /// ToS byte.
        tos: u8,
    },
    /// Link-level (802.3x) pause.
    GlobalPause(bool),
    /// E810 firmware LLDP agent (`fw-lldp-agent` private flag of ice).
    FwLldpAgent(bool),
    /// DCBX mode.
    Dcbx(DcbxMode),
}

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
    }
}

impl Remedy {
    /// Same as [`remediation`].
    pub fn command(&self, iface: &str) -> String {
        remediation(iface, self)
    }

    /// Whether applying it can bounce the link (MTU changes do on mlx5 and ice;
    /// the operator refuses those unless `allowLinkFlap`).
    pub fn flaps_link(&self) -> bool {
        matches!(self, Remedy::Mtu(_) | Remedy::GlobalPause(_) | Remedy::FwLldpAgent(_))
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
        assert!(Remedy::Mtu(9000).flaps_link() && !Remedy::CnpDscp(48).flaps_link());
    }
}
