//! The simulated node's description: a YAML file naming a node's adapters,
//! PFs, VFs, GPUs and RoCE settings. [`super`] (the simulator) turns it into a sysfs +
//! `/dev` tree; tests compare discovery of that tree with this description.
//!
//! ```yaml
//! node: cx6dx-dual
//! switches:
//!   - name: sw0
//!     rootPort: "0000:3a:00.0"
//!     upstream: "0000:3b:00.0"
//! adapters:
//!   - model: connectx-6dx
//!     pfs:
//!       - bdf: "0000:3d:00.0"
//!         netdev: ens1f0np0
//!         vfs: 8
//!         numa: 0
//!         speed: 100000
//!         rdma: mlx5_0
//!         switch: sw0
//! gpus:
//!   - bdf: "0000:3e:00.0"
//!     numa: 0
//!     switch: sw0
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::pci::PciAddr;

// Domain types live in the model; the description format names them.
pub use crate::inventory::{NetnsMode, RdmaProtocol};
pub use crate::roce::{DcbxMode, Trust};

/// A whole simulated node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeDesc {
    /// Node name (the Kubernetes node the agent reports as).
    pub node: String,
    /// PCIe switches devices can sit behind (for GPU affinity).
    #[serde(default)]
    pub switches: Vec<SwitchDesc>,
    /// Network adapters.
    #[serde(default)]
    pub adapters: Vec<AdapterDesc>,
    #[serde(default)]
    pub gpus: Vec<GpuDesc>,
    /// Whether `/dev/infiniband/rdma_cm` exists (default true).
    #[serde(default = "yes")]
    pub rdma_cm: bool,
    /// RDMA subsystem netns mode (`rdma system` : shared or exclusive; default shared,
    /// as the kernel boots).
    #[serde(default)]
    pub rdma_netns_mode: NetnsMode,
    /// An older, out-of-tree irdma with the `roce_ena` module parameter (true:
    /// RoCEv2 on every E810 port, false: iWARP, its default) and no ice devlink
    /// parameters for the protocol. Omitted: upstream ice/irdma (Linux ≥ 5.17, whose
    /// ice commit e523af4ee560 added the devlink `enable_roce`/`enable_iwarp` pair),
    /// where each PF's protocol is that pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irdma_roce_ena: Option<bool>,
}

/// A PCIe switch: an upstream port under a root port; each device behind it
/// gets its own downstream port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchDesc {
    /// Name devices refer to.
    pub name: String,
    /// The root port above the switch.
    pub root_port: PciAddr,
    /// The switch's upstream port.
    pub upstream: PciAddr,
}

/// Adapter models the simulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// NVIDIA ConnectX-6 Dx: PF 15b3:101d, VF 15b3:101e, mlx5_core.
    #[serde(rename = "connectx-6dx")]
    ConnectX6Dx,
    /// NVIDIA ConnectX-7: PF 15b3:1021, VF 15b3:101e, mlx5_core.
    #[serde(rename = "connectx-7")]
    ConnectX7,
    /// A ConnectX-6 Dx used without SR-IOV (shared RDMA mode): an HCA, no VFs.
    #[serde(rename = "connectx-6dx-nosriov")]
    ConnectX6DxNoSriov,
    /// Intel E810-C 100G: PF 8086:1592 (ice), VF 8086:1889 (iavf), RDMA via `ice.roce.N`.
    #[serde(rename = "e810-c")]
    E810C,
    /// Intel E810-XXV 25G: PF 8086:159b (ice), VF 8086:1889 (iavf).
    #[serde(rename = "e810-xxv")]
    E810Xxv,
}

impl Model {
    /// PCI vendor id.
    pub fn vendor(self) -> u16 {
        match self {
            Model::ConnectX6Dx | Model::ConnectX7 | Model::ConnectX6DxNoSriov => 0x15b3,
            Model::E810C | Model::E810Xxv => 0x8086,
        }
    }
    /// PF device id.
    pub fn pf_device(self) -> u16 {
        match self {
            Model::ConnectX6Dx | Model::ConnectX6DxNoSriov => 0x101d,
            Model::ConnectX7 => 0x1021,
            Model::E810C => 0x1592,
            Model::E810Xxv => 0x159b,
        }
    }
    /// VF device id.
    pub fn vf_device(self) -> u16 {
        match self {
            Model::ConnectX6Dx | Model::ConnectX7 | Model::ConnectX6DxNoSriov => 0x101e,
            Model::E810C | Model::E810Xxv => 0x1889,
        }
    }
    pub fn pf_driver(self) -> &'static str {
        match self {
            Model::ConnectX6Dx | Model::ConnectX7 | Model::ConnectX6DxNoSriov => "mlx5_core",
            Model::E810C | Model::E810Xxv => "ice",
        }
    }
    pub fn vf_driver(self) -> &'static str {
        match self {
            Model::ConnectX6Dx | Model::ConnectX7 | Model::ConnectX6DxNoSriov => "mlx5_core",
            Model::E810C | Model::E810Xxv => "iavf",
        }
    }
    /// `sriov_totalvfs` the firmware advertises by default.
    pub fn default_total_vfs(self) -> u32 {
        match self {
            Model::ConnectX6Dx | Model::ConnectX7 => 127,
            Model::ConnectX6DxNoSriov => 0,
            Model::E810C | Model::E810Xxv => 256,
        }
    }
    /// Whether this is an NVIDIA (mlx5) adapter.
    pub fn is_mlx5(self) -> bool {
        self.vendor() == 0x15b3
    }
}

/// One adapter (card): a model and its PFs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterDesc {
    pub model: Model,
    /// Physical functions (ports).
    pub pfs: Vec<PfDesc>,
}

/// One physical function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PfDesc {
    /// PCI address (bus:device.function).
    pub bdf: PciAddr,
    pub netdev: String,
    /// Number of VFs enabled (`sriov_numvfs`).
    #[serde(default)]
    pub vfs: u32,
    /// `sriov_totalvfs` (default: the model's).
    #[serde(default)]
    pub total_vfs: Option<u32>,
    /// NUMA node (`None`: `-1` in sysfs).
    #[serde(default)]
    pub numa: Option<u32>,
    /// Link speed in Mb/s (default 100000 for 100G models, 25000 for E810-XXV).
    #[serde(default)]
    pub speed: Option<u32>,
    /// `operstate` (default up).
    #[serde(default = "up")]
    pub operstate: String,
    /// MTU (default 1500).
    #[serde(default = "mtu1500")]
    pub mtu: u32,
    /// PF RDMA device name, e.g. `mlx5_0` or `rocep59s0f0`; omitted: no RDMA on the PF.
    #[serde(default)]
    pub rdma: Option<String>,
    /// How VF RDMA devices are named: `mlx5` continues `mlx5_N` numbering node-wide;
    /// `rocep` uses the PCI-derived name (`rocep<bus>s<dev>f<fn>v<N>`).
    #[serde(default)]
    pub rdma_naming: RdmaNaming,
    /// The PF's RDMA protocol: `RoCEv2`, `iWARP` (E810 only) or `none` (RDMA
    /// disabled: no auxiliary device, no RDMA device). Default: RoCEv2, what ice
    /// starts a PF in (`ice_init_rdma`), or with `irdmaRoceEna` what that says.
    /// An E810 PF in RoCEv2 or iWARP mode has its `ice.roce.N`/`ice.iwarp.N`
    /// auxiliary device even without `rdma` (irdma not loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_protocol: Option<RdmaProtocol>,
    /// Whether VFs get RDMA devices (default: true for mlx5, false for E810, whose
    /// iavf VFs get `iavf.rdma.N` only when enabled here).
    #[serde(default)]
    pub vf_rdma: Option<bool>,
    /// VF netdev names: `<prefix><index>` (default `<netdev>v`).
    #[serde(default)]
    pub vf_netdev_prefix: Option<String>,
    /// VFs whose netdev is absent (moved into a pod) by index.
    #[serde(default)]
    pub vfs_without_netdev: Vec<u32>,
    /// VFs bound to vfio-pci (no netdev, no RDMA), by index.
    #[serde(default)]
    pub vfs_vfio: Vec<u32>,
    /// PCIe switch this PF sits behind (name from `switches`); none: directly under a root port.
    #[serde(default)]
    pub switch: Option<String>,
    /// RoCE fabric settings of this port.
    #[serde(default)]
    pub roce: RoceDesc,
}

/// RDMA device naming scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaNaming {
    /// `mlx5_N`, numbered in PCI order across the node.
    #[default]
    Mlx5,
    /// Persistent names from the PCI address (`rocep59s0f0`, `rocep59s0f0v3`).
    Rocep,
}

/// The RoCE fabric settings of a PF port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoceDesc {
    /// DCBX mode.
    #[serde(default)]
    pub dcbx: DcbxMode,
    /// Trust mode.
    #[serde(default)]
    pub trust: Trust,
    /// Priorities with PFC enabled (default `[3]`).
    #[serde(default = "prio3")]
    pub pfc: Vec<u8>,
    /// PFC delay (cable length allowance), in bit times.
    #[serde(default)]
    pub pfc_delay: u16,
    /// DSCP → priority APP entries (default 26 → 3, 48 → 6).
    #[serde(default = "default_dscp_map")]
    pub dscp_to_priority: BTreeMap<u8, u8>,
    /// Priorities with ECN (RoCE RP/NP) enabled (default `[3]`).
    #[serde(default = "prio3")]
    pub ecn: Vec<u8>,
    /// Whether the NVIDIA OFED ECN/CNP sysfs (`/sys/class/net/<if>/ecn/...`) exists
    /// (default: true for mlx5, false for E810; false for upstream mlx5 without OFED).
    #[serde(default)]
    pub ofed_sysfs: Option<bool>,
    /// CNP DSCP (default 48).
    #[serde(default = "cnp_dscp")]
    pub cnp_dscp: u8,
    /// CNP 802.1p priority (default 6).
    #[serde(default = "cnp_prio")]
    pub cnp_priority: u8,
    /// rdma_cm default RoCE mode (`RoCE v2` by default; `IB/RoCE v1` otherwise).
    #[serde(default = "roce_v2")]
    pub roce_mode: String,
    /// rdma_cm default ToS (default 106 = DSCP 26 << 2 | ECT(0)… as commonly set).
    #[serde(default = "tos106")]
    pub tos: u8,
    /// Link-level (global) pause on.
    #[serde(default)]
    pub global_pause: bool,
    /// E810 firmware LLDP agent on (`fw-lldp-agent` private flag).
    #[serde(default)]
    pub fw_lldp_agent: bool,
    /// PFC pause frames per priority (requests, indications) counters to report.
    #[serde(default)]
    pub pfc_requests: Vec<u64>,
    /// PFC indications per priority.
    #[serde(default)]
    pub pfc_indications: Vec<u64>,
}

impl Default for RoceDesc {
    fn default() -> Self {
        // Round-trip through serde defaults so there is one source of truth.
        serde_yaml::from_str("{}").expect("RoceDesc defaults deserialize from an empty map")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuDesc {
    /// PCI address (bus:device.function).
    pub bdf: PciAddr,
    /// PCI device id (default 0x2330, H100 SXM).
    #[serde(default)]
    pub device: Option<u16>,
    /// NUMA node.
    #[serde(default)]
    pub numa: Option<u32>,
    /// Switch it sits behind.
    #[serde(default)]
    pub switch: Option<String>,
}

fn yes() -> bool {
    true
}
fn up() -> String {
    "up".into()
}
fn mtu1500() -> u32 {
    1500
}
fn prio3() -> Vec<u8> {
    vec![3]
}
fn default_dscp_map() -> BTreeMap<u8, u8> {
    BTreeMap::from([(26, 3), (48, 6)])
}
fn cnp_dscp() -> u8 {
    48
}
fn cnp_prio() -> u8 {
    6
}
fn roce_v2() -> String {
    "RoCE v2".into()
}
fn tos106() -> u8 {
    106
}

/// Why a description cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DescError {
    /// Not valid YAML for this format.
    #[error("{path}")]
    Parse {
        /// File the description came from.
        path: String,
        /// The YAML error (with line and column).
        #[source]
        source: serde_yaml::Error,
    },
    /// Valid YAML, inconsistent contents.
    #[error("{path}: {what}")]
    Invalid {
        /// File the description came from.
        path: String,
        what: String,
    },
    /// The file could not be read.
    #[error("cannot read {path}")]
    Io {
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
