//! RoCE fabric settings of a node, as observed: what the operator's agent
//! reports and checks.
//!
//! Data flow: **sysfs (`/sys/class/net`, `/sys/class/infiniband`, configfs
//! `rdma_cm`) + DCB netlink + ethtool + the PFs' VF counters (`RTM_GETLINK`)
//! (the kernel's, or a [`Recording`] of them, e.g. a simulated node's) →
//! [`NodeRoce`]**. Every value is an [`Observed`]: a value, `Unsupported` (this
//! driver/kernel has no such knob: not a failure) or `Unknown` (it should be
//! readable but was not, with the reason).
//!
//! ```no_run
//! use nic::roce::{observe, DcbSource, ObserveOpts};
//! let roots = nic::Roots::from_env();
//! let inv = nic::discover(&roots);
//! let node = observe(&roots, &inv, &DcbSource::Netlink, &ObserveOpts::default());
//! for i in &node.interfaces {
//!     println!("{} pfc={:?}", i.netdev, i.pfc.value().map(|p| p.pfc_en.to_vec()));
//! }
//! ```
//!
//! Remediation commands (what a human would type to fix a setting) are pure
//! functions in [`remedy`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::inventory::{NetnsMode, RdmaProtocol};
pub use crate::netlink::dcb::{DcbxMode, IeeeEts, IeeePfc, Priorities};
pub use crate::netlink::transport::Exchange;
pub use crate::netlink::vf_stats::VfStats;
use crate::pci::PciAddr;

mod ethtool;
mod read;
pub mod remedy;
pub mod write;

pub use ethtool::{set_pause, set_priv_flag, EthtoolExchange};
pub use read::observe;
pub use remedy::{command_rank, in_execution_order, remediation, Remedy};

/// A value read from the node, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Observed<T> {
    /// The value as read.
    Value(T),
    /// The driver, kernel or adapter has no such setting (e.g. upstream mlx5
    /// without the NVIDIA OFED ECN sysfs); a check should say `Unsupported`, not `Fail`.
    Unsupported(String),
    /// The setting should exist but could not be read; the reason names the
    /// path or netlink operation.
    Unknown(String),
}

impl<T> Observed<T> {
    /// The value, if one was read.
    pub fn value(&self) -> Option<&T> {
        match self {
            Observed::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Consumes into the value, if one was read.
    pub fn into_value(self) -> Option<T> {
        match self {
            Observed::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Whether a value was read.
    pub fn is_value(&self) -> bool {
        matches!(self, Observed::Value(_))
    }

    /// Whether the setting is unsupported here.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Observed::Unsupported(_))
    }

    /// Whether the setting could not be read.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Observed::Unknown(_))
    }

    /// Why there is no value (`None` when there is one).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Observed::Value(_) => None,
            Observed::Unsupported(r) | Observed::Unknown(r) => Some(r),
        }
    }

    /// Maps the value, keeping the reason otherwise.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Observed<U> {
        match self {
            Observed::Value(v) => Observed::Value(f(v)),
            Observed::Unsupported(r) => Observed::Unsupported(r),
            Observed::Unknown(r) => Observed::Unknown(r),
        }
    }

    /// Borrows the value.
    pub fn as_ref(&self) -> Observed<&T> {
        match self {
            Observed::Value(v) => Observed::Value(v),
            Observed::Unsupported(r) => Observed::Unsupported(r.clone()),
            Observed::Unknown(r) => Observed::Unknown(r.clone()),
        }
    }

    /// Chains another observation on the value.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Observed<U>) -> Observed<U> {
        match self {
            Observed::Value(v) => f(v),
            Observed::Unsupported(r) => Observed::Unsupported(r),
            Observed::Unknown(r) => Observed::Unknown(r),
        }
    }

    /// `Value` from `Some`, `Unknown(reason)` from `None`.
    pub fn from_option(v: Option<T>, reason: impl Into<String>) -> Self {
        match v {
            Some(v) => Observed::Value(v),
            None => Observed::Unknown(reason.into()),
        }
    }

    /// A short label for tables and metrics: the value's rendering, `unsupported` or `unknown`.
    pub fn label(&self, render: impl FnOnce(&T) -> String) -> String {
        match self {
            Observed::Value(v) => render(v),
            Observed::Unsupported(_) => "unsupported".into(),
            Observed::Unknown(_) => "unknown".into(),
        }
    }
}

/// Trust mode: what classifies packets into priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// 802.1p PCP bits.
    Pcp,
    /// DSCP (what RoCE v2 fabrics use).
    #[default]
    Dscp,
}

impl Trust {
    /// Lower-case name, as the OFED `qos/trust` file, `mlnx_qos` and our CRDs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Pcp => "pcp",
            Trust::Dscp => "dscp",
        }
    }
}

/// RoCE settings of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRoce {
    pub node: String,
    /// One entry per PF netdev (SR-IOV PFs, then shared-mode HCA netdevs), in inventory order.
    pub interfaces: Vec<InterfaceRoce>,
    /// RDMA subsystem netns mode (`rdma system show`).
    pub rdma_netns_mode: Observed<NetnsMode>,
    /// SR-IOV VFs with an RDMA device: what VF pools give to pods, and why the
    /// netns mode must be exclusive ([`crate::netns_mode_problem`]).
    #[serde(default)]
    pub rdma_vfs: usize,
    /// Port counters of the VFs whose RDMA device this namespace sees (one
    /// moved into a pod's namespace in exclusive mode is not in the host's
    /// `infiniband` class, so it has none here).
    #[serde(default)]
    pub vf_counters: Vec<VfPortCounters>,
    /// Netdev counters of every VF of each SR-IOV PF, as the PF's driver
    /// counts them (`IFLA_VF_STATS`, [`crate::netlink::vf_stats`]): a VF whose
    /// netdev and RDMA device are in a pod's namespace is counted here too.
    /// mlx5 and ice fill them; a driver without `ndo_get_vf_stats` reports zeros.
    #[serde(default)]
    pub vf_netdev_counters: Vec<VfNetdevCounters>,
}

/// One VF's netdev counters, read through its PF (`ip -s link show PF`, the `vf N` lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfNetdevCounters {
    /// The PF's netdev (`ens1f0np0`).
    pub pf: String,
    /// VF index on the PF (the `N` of `virtfnN`).
    pub vf: u32,
    /// The counters.
    pub stats: VfStats,
}

/// RDMA port 1 `counters/*` of one VF (as [`InterfaceRoce::port_counters`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VfPortCounters {
    /// The PF's netdev (`ens1f0np0`); its PCI address when it has none.
    pub pf: String,
    /// VF index on the PF (the `N` of `virtfnN`).
    pub vf: u32,
    /// The VF's RDMA device (`mlx5_2`).
    pub rdma_dev: String,
    /// Its port 1 `counters/*`, by file name.
    pub counters: BTreeMap<String, u64>,
}

impl NodeRoce {
    /// The interface named `netdev`.
    pub fn interface(&self, netdev: &str) -> Option<&InterfaceRoce> {
        self.interfaces.iter().find(|i| i.netdev == netdev)
    }
}

/// What kind of function an observed interface belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum IfaceKind {
    /// An SR-IOV physical function's netdev.
    Pf,
    /// The netdev of an RDMA HCA without SR-IOV (shared mode) or of a virtual
    /// RDMA device (rxe).
    Hca,
}

/// RoCE settings of one PF (or HCA) netdev.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceRoce {
    /// Netdev name, e.g. `ens1f0np0`.
    pub netdev: String,
    /// PF or shared HCA.
    pub kind: IfaceKind,
    /// PCI address of the function (none for a virtual RDMA device).
    pub pci: Option<PciAddr>,
    /// Bound driver (`mlx5_core`, `ice`).
    pub driver: Option<String>,
    /// RDMA device on this netdev (`mlx5_0`, `rocep59s0f0`, `irdma0`).
    pub rdma_dev: Option<String>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    /// Link speed in Mb/s (`/sys/class/net/<if>/speed`; unknown while the link is down).
    pub speed_mbps: Observed<u32>,
    /// Netdev MTU.
    pub mtu: Observed<u32>,
    /// RoCE active MTU (256..4096) derived from the netdev MTU with the kernel's
    /// rule, see [`roce_active_mtu`].
    pub active_mtu: Observed<u32>,
    pub operstate: Observed<String>,
    /// DCBX mode (`DCB_CMD_GDCBX`).
    pub dcbx: Observed<DcbxMode>,
    /// Raw DCBX capability bits (`DCB_CAP_DCBX_*`, dcbnl.h) as the kernel reported them.
    pub dcbx_bits: Observed<u8>,
    /// Trust mode: the legacy OFED `qos/trust` file where it exists, else DSCP when
    /// the APP table holds DSCP entries and PCP otherwise.
    pub trust: Observed<Trust>,
    /// NVIDIA OFED's `qos/trust` file exists: trust is set there (`mlnx_qos
    /// --trust`), and DSCP APP entries alone do not switch mlx5 to DSCP trust.
    pub trust_file: bool,
    /// DSCP → priority APP entries (selector 5).
    pub dscp_to_priority: Observed<BTreeMap<u8, u8>>,
    /// PFC (`struct ieee_pfc`).
    pub pfc: Observed<IeeePfc>,
    /// ETS (`struct ieee_ets`).
    pub ets: Observed<IeeeEts>,
    /// Link-level (802.3x) pause on in either direction (`ETHTOOL_GPAUSEPARAM`).
    pub global_pause: Observed<bool>,
    /// Priorities where RoCE ECN is on at both the notification point
    /// (`ecn/roce_np/enable/<p>`) and the reaction point (`ecn/roce_rp/enable/<p>`).
    pub ecn: Observed<Vec<u8>>,
    /// Per-role ECN detail behind [`InterfaceRoce::ecn`].
    pub ecn_detail: Observed<Ecn>,
    /// CNP DSCP and 802.1p priority (`ecn/roce_np/cnp_dscp`, `cnp_802p_prio`).
    pub cnp: Observed<Cnp>,
    /// rdma_cm default RoCE mode of port 1 (`RoCE v2`, `IB/RoCE v1`).
    pub roce_mode: Observed<String>,
    /// rdma_cm default ToS of port 1.
    pub tos: Observed<u8>,
    /// The RoCE v2 GID index bound to this netdev (IPv4 first), what `NCCL_IB_GID_INDEX` takes.
    pub gid_index: Observed<u32>,
    /// RDMA port 1 state (`ACTIVE`, `DOWN`, …).
    pub port_state: Observed<String>,
    /// RDMA port 1 `hw_counters/*` (empty when there are none).
    pub hw_counters: BTreeMap<String, u64>,
    /// RDMA port 1 `counters/*`, the InfiniBand port counters ib_core reads
    /// through the driver's `process_mad` (mlx5; not irdma or rxe): `port_xmit_data`,
    /// `port_rcv_data` (both in 4-octet words), `symbol_error`, `link_downed`,
    /// `port_rcv_errors`, … Empty when there are none.
    #[serde(default)]
    pub port_counters: BTreeMap<String, u64>,
    /// `sriov_numvfs` (Unsupported for a shared-mode HCA).
    pub num_vfs: Observed<u32>,
    /// `sriov_totalvfs`.
    pub total_vfs: Observed<u32>,
    /// E810 firmware LLDP agent (`ethtool --show-priv-flags <if>` `fw-lldp-agent`);
    /// Unsupported on other drivers.
    pub fw_lldp_agent: Observed<bool>,
    /// Active FEC mode (`ethtool --show-fec <if>`: `rs`, `baser`, `llrs`, `off`).
    #[serde(default = "not_recorded")]
    pub fec: Observed<String>,
    /// The RDMA protocol of the function (`RoCEv2`, `iWARP`, `none`): ice's
    /// auxiliary device kind (`ice.roce.N` / `ice.iwarp.N`, what the devlink
    /// parameters `enable_roce` / `enable_iwarp` select), else the RDMA
    /// device's `node_type` (see [`crate::inventory::Pf::rdma_protocol`]).
    #[serde(default = "not_recorded")]
    pub rdma_protocol: Observed<RdmaProtocol>,
}

/// What a serialized [`InterfaceRoce`] of an older agent says of a field it lacked.
fn not_recorded<T>() -> Observed<T> {
    Observed::Unknown("not recorded".into())
}

/// ECN per role (NVIDIA OFED sysfs `ecn/roce_np`, `ecn/roce_rp`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ecn {
    /// Priorities where the notification point (receiver sending CNPs) is on.
    pub np: Vec<u8>,
    /// Priorities where the reaction point (sender slowing down on CNPs) is on.
    pub rp: Vec<u8>,
}

/// Congestion notification packet marking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cnp {
    /// DSCP of CNPs.
    pub dscp: u8,
    /// 802.1p priority of CNPs.
    pub priority: u8,
}

/// Where DCB settings (PFC, ETS, APP table, DCBX), global pause and the fw
/// LLDP flag come from. Either way the same decoders read them.
#[derive(Debug, Clone, PartialEq)]
pub enum DcbSource {
    /// The real kernel: DCB netlink over `NETLINK_ROUTE` and ethtool ioctls;
    /// `EOPNOTSUPP`/`ENODEV` become `Unsupported`.
    Netlink,
    /// Recorded kernel answers (a simulated node's: `nic::sim::Sim::recording`).
    Recorded(Recording),
}

/// Kernel answers recorded ahead of time, as [`DcbSource::Recorded`] serves them:
/// DCB netlink exchanges through the netlink transport's
/// [`Recorded`](crate::netlink::transport::Recorded), ethtool answers through
/// the ethtool reader's recorded side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recording {
    /// DCB netlink requests and the datagrams that answer them.
    pub dcb: Vec<Exchange>,
    /// ethtool commands and their answers.
    pub ethtool: Vec<EthtoolExchange>,
    /// Generic netlink devlink exchanges (the family lookup, then parameter
    /// GETs of ice PFs); empty on a node without an ice PF.
    pub devlink: Vec<Exchange>,
    /// `RTM_GETLINK` exchanges reading each SR-IOV PF's VF counters
    /// ([`crate::netlink::vf_stats::stats_request`]); empty on a node without VFs.
    pub vf_stats: Vec<Exchange>,
}

/// Options for [`observe`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObserveOpts {
    /// Create `/sys/kernel/config/rdma_cm/<dev>` (and remove it afterwards) to read
    /// the rdma_cm defaults when it does not exist. Off: read only when it already
    /// exists, else `Unknown`.
    pub read_rdma_cm_configfs: bool,
    /// Node name to report; default: the `NODE_NAME` env var, else the kernel
    /// hostname.
    pub node_name: Option<String>,
}

/// IB MTU values a RoCE port can run, ascending (IBTA: `enum ib_mtu`).
pub const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Bytes the kernel subtracts from the netdev MTU before picking the RoCE
/// active MTU: GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4 = 96
/// (`iboe_get_mtu()` in include/rdma/ib_addr.h, used by mlx5_ib's query_port).
pub const ROCE_MTU_OVERHEAD: u32 = 96;

/// RoCE active MTU for a netdev MTU: the largest IB MTU ≤ `mtu - 96`, as
/// `iboe_get_mtu()` computes it for hardware RoCE (mlx5_ib, irdma), so 4096
/// needs a netdev MTU of at least 4192; `None` below 352. Soft-RoCE (rxe)
/// subtracts `RXE_MAX_HDR_LENGTH` = 80 instead (drivers/infiniband/sw/rxe), so
/// it already reaches 4096 at 4176; this function follows the hardware rule.
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(ROCE_MTU_OVERHEAD)?;
    IB_MTUS.iter().rev().copied().find(|&m| m <= room)
}

/// The smallest netdev MTU giving a RoCE active MTU of `active` (4192 for 4096).
pub fn min_netdev_mtu_for(active: u32) -> u32 {
    active + ROCE_MTU_OVERHEAD
}
