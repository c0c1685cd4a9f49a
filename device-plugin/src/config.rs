//! Pool configuration: our own format, and unchanged the `config.json` of
//! sriov-network-device-plugin (SNDP) and the `configList` of
//! k8s-rdma-shared-dev-plugin (RSDP). YAML or JSON (JSON is read as YAML).
//!
//! Our format:
//! ```yaml
//! resourcePrefix: kuberdma.io      # optional, the default
//! pools:
//!   - name: rdma_a                 # resource kuberdma.io/rdma_a
//!     mode: vf                     # vf (default) | shared
//!     policy: pack                 # pack (default) | spread
//!     gpuAffinity: true            # prefer VFs behind a PCIe switch that hosts a GPU
//!     selectors:                   # one object, or a list (a device matching any entry is selected)
//!       vendors: ["15b3"]
//!       devices: ["101e"]
//!       drivers: [mlx5_core]
//!       pfNames: ["ens1f0np0#0-3,6"]
//!       rootDevices: ["0000:3d:00.0"]
//!       pciAddresses: ["0000:3d:00.2"]
//!       linkTypes: [ether]
//!       isRdma: true
//!       linkSpeeds: [100000]       # ours: PF link speed in Mb/s
//!       numaNodes: [0]             # ours
//!       ifNames: [ens1f0np0]       # RSDP's: the PF (or HCA) netdev
//!       deviceIDs: ["101d"]        # RSDP's name for `devices`
//!   - name: hca_shared
//!     mode: shared
//!     rdmaHcaMax: 16               # shared mode: how many pods may share one HCA
//!     selectors: {ifNames: [ens2f0]}
//! ```
//! The format is told by the top-level key: `pools` (ours), `resourceList`
//! (SNDP), `configList` (RSDP). Defaults that differ by format follow the
//! project they come from, so a migrated file keeps its resource names:
//! SNDP's prefix defaults to `intel.com`, RSDP's to `rdma` (mode shared).
//! Every error names the file, the pool and the field.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use nic::{LinkLayer, PciAddr};
use serde_json::{Map, Value};

use crate::DEFAULT_PREFIX;

/// Name of the pool used when no config file is given.
pub const DEFAULT_POOL: &str = "rdma_vfs";

/// Which format a file was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Ours (`pools:`).
    Native,
    /// sriov-network-device-plugin `resourceList`.
    Sndp,
    /// k8s-rdma-shared-dev-plugin `configList`.
    Rsdp,
    /// No file: the built-in default pool.
    Default,
}

/// How a pool hands out devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One device ID per VF (ID = VF PCI address).
    Vf,
    /// `rdma_hca_max` device IDs per HCA (or PF) RDMA device, shared by pods.
    Shared,
}

/// Preferred-allocation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Fill one PF before using another (keeps other PFs whole).
    Pack,
    /// Take VFs from as many PFs as possible (bandwidth).
    Spread,
}

/// A PF name with an optional VF index range (`ens1f0#0-3,6`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfName {
    /// PF netdev name.
    pub name: String,
    /// VF indices; `None` = all VFs.
    pub vfs: Option<Vec<RangeInclusive<u32>>>,
}

impl PfName {
    /// Whether VF `index` of this PF is selected.
    pub fn covers(&self, index: u32) -> bool {
        self.vfs.as_ref().is_none_or(|r| r.iter().any(|r| r.contains(&index)))
    }
}

impl fmt::Display for PfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(r) = &self.vfs {
            let parts: Vec<String> = r
                .iter()
                .map(|r| {
                    if r.start() == r.end() {
                        r.start().to_string()
                    } else {
                        format!("{}-{}", r.start(), r.end())
                    }
                })
                .collect();
            write!(f, "#{}", parts.join(","))?;
        }
        Ok(())
    }
}

/// One selector object: a device must satisfy every non-empty field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// PCI vendor ids.
    pub vendors: Vec<u16>,
    /// PCI device ids (SNDP `devices`, RSDP `deviceIDs`).
    pub devices: Vec<u16>,
    /// Kernel drivers.
    pub drivers: Vec<String>,
    /// PCI addresses of the device itself.
    pub pci_addresses: Vec<PciAddr>,
    /// PF netdev names with optional VF ranges.
    pub pf_names: Vec<PfName>,
    /// PF PCI addresses (SNDP `rootDevices`).
    pub root_devices: Vec<PciAddr>,
    /// Link layers (`ether`, `infiniband`).
    pub link_types: Vec<LinkLayer>,
    /// Must (or must not) have an RDMA device.
    pub is_rdma: Option<bool>,
    /// PF/HCA netdev names (RSDP `ifNames`).
    pub if_names: Vec<String>,
    /// PF link speeds in Mb/s (ours).
    pub link_speeds: Vec<u32>,
    /// NUMA nodes (ours).
    pub numa_nodes: Vec<u32>,
}

/// One pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Resource name without prefix (`rdma_vfs`).
    pub name: String,
    /// Resource prefix (`kuberdma.io`).
    pub prefix: String,
    /// VF or shared.
    pub mode: Mode,
    /// Selector objects; a device matching any one is selected.
    pub selectors: Vec<Selector>,
    /// Preferred-allocation policy.
    pub policy: Policy,
    /// Prefer VFs behind a PCIe switch that also hosts a GPU.
    pub gpu_affinity: bool,
    /// Shared mode: device IDs per HCA.
    pub rdma_hca_max: u32,
    /// Do not report NUMA topology to the kubelet (SNDP `excludeTopology`).
    pub exclude_topology: bool,
}

impl PoolConfig {
    /// `prefix/name`.
    pub fn resource_name(&self) -> String {
        format!("{}/{}", self.prefix, self.name)
    }
}

/// A parsed config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Pools in file order (a device two pools select goes to the first).
    pub pools: Vec<PoolConfig>,
    /// The format it was written in.
    pub format: Format,
    /// Where it came from.
    pub source: Option<PathBuf>,
}

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Io {
        /// File.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML/JSON at all.
    #[error("{path}: not valid YAML or JSON: {source}")]
    Syntax {
        /// File.
        path: PathBuf,
        /// Parser error with line and column.
        #[source]
        source: serde_yaml::Error,
    },
    /// A field has a bad value.
    #[error("{path}: {}field `{field}`: {why}", pool.as_ref().map(|p| format!("pool {p:?}: ")).unwrap_or_default())]
    Field {
        /// File.
        path: PathBuf,
        /// Pool name (or `#N` when the pool has no valid name yet).
        pool: Option<String>,
        /// Field path inside the pool, e.g. `selectors[1].vendors[0]`.
        field: String,
        /// What is wrong.
        why: String,
    },
}

impl Config {
    /// The built-in config: one pool [`DEFAULT_POOL`] of every VF that has an RDMA device.
    pub fn default_pools() -> Self {
        Config {
            pools: vec![PoolConfig {
                name: DEFAULT_POOL.into(),
                prefix: DEFAULT_PREFIX.into(),
                mode: Mode::Vf,
                selectors: vec![Selector { is_rdma: Some(true), ..Selector::default() }],
                policy: Policy::Pack,
                gpu_affinity: false,
                rdma_hca_max: 0,
                exclude_topology: false,
            }],
            format: Format::Default,
            source: None,
        }
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses `text`; `path` is used in errors only.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let value: Value = serde_yaml::from_str(text)
            .map_err(|source| ConfigError::Syntax { path: path.to_path_buf(), source })?;
        let mut cx = Cx { path: path.to_path_buf(), pool: None };
        let Value::Object(top) = value else {
            return Err(
                cx.err("(top level)", "expected a mapping with `pools`, `resourceList` or `configList`")
            );
        };
        let (format, pools) = if top.contains_key("pools") {
            cx.keys(&top, "", &["pools", "resourcePrefix"])?;
            let prefix = opt_str(&cx, &top, "resourcePrefix")?.unwrap_or_else(|| DEFAULT_PREFIX.into());
            (Format::Native, cx.list(&top, "pools", |cx, p| native_pool(cx, p, &prefix))?)
        } else if top.contains_key("resourceList") {
            (Format::Sndp, cx.list(&top, "resourceList", sndp_pool)?)
        } else if top.contains_key("configList") {
            cx.keys(&top, "", &["configList", "periodicUpdateInterval"])?;
            (Format::Rsdp, cx.list(&top, "configList", rsdp_pool)?)
        } else {
            return Err(cx.err("(top level)", "none of `pools` (kube-rdma), `resourceList` (sriov-network-device-plugin) or `configList` (k8s-rdma-shared-dev-plugin) is present"));
        };
        cx.pool = None;
        if pools.is_empty() {
            return Err(cx.err("pools", "no pool is defined"));
        }
        let mut seen = BTreeSet::new();
        for p in &pools {
            if !seen.insert(p.resource_name()) {
                cx.pool = Some(p.name.clone());
                return Err(cx.err("name", &format!("resource {} is defined twice", p.resource_name())));
            }
        }
        Ok(Config { pools, format, source: Some(path.to_path_buf()) })
    }
}

/// Error context: file and pool.
struct Cx {
    path: PathBuf,
    pool: Option<String>,
}

impl Cx {
    fn err(&self, field: &str, why: &str) -> ConfigError {
        ConfigError::Field {
            path: self.path.clone(),
            pool: self.pool.clone(),
            field: field.to_string(),
            why: why.to_string(),
        }
    }

    /// Rejects keys not in `known` (a typo must not silently widen a selection).
    fn keys(&self, m: &Map<String, Value>, at: &str, known: &[&str]) -> Result<(), ConfigError> {
        for k in m.keys() {
            if !known.contains(&k.as_str()) {
                let field = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                return Err(
                    self.err(&field, &format!("unknown field; expected one of: {}", known.join(", ")))
                );
            }
        }
        Ok(())
    }

    fn list<T>(
        &mut self,
        top: &Map<String, Value>,
        key: &str,
        f: impl Fn(&mut Cx, (usize, &Map<String, Value>)) -> Result<T, ConfigError>,
    ) -> Result<Vec<T>, ConfigError> {
        let Some(Value::Array(items)) = top.get(key) else {
            return Err(self.err(key, "expected a list of pools"));
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            self.pool = Some(format!("#{i}"));
            let Value::Object(m) = item else {
                return Err(self.err(&format!("{key}[{i}]"), "expected a mapping"));
            };
            out.push(f(self, (i, m))?);
        }
        Ok(out)
    }
}

fn opt_str(cx: &Cx, m: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(cx.err(key, &format!("expected a string, found {v}"))),
    }
}

fn opt_bool(cx: &Cx, m: &Map<String, Value>, key: &str, at: &str) -> Result<Option<bool>, ConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(cx.err(&join(at, key), &format!("expected true or false, found {v}"))),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// Sets the pool name in the context, validating it as the name part of an
/// extended resource (`[A-Za-z0-9][-A-Za-z0-9_.]*`, at most 63 characters).
fn pool_name(cx: &mut Cx, m: &Map<String, Value>, key: &str) -> Result<String, ConfigError> {
    let name = opt_str(cx, m, key)?.ok_or_else(|| cx.err(key, "missing (every pool needs a name)"))?;
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        return Err(cx.err(
            key,
            &format!("{name:?} is not a valid resource name (letters, digits, '-', '_', '.'; at most 63; starting and ending with a letter or digit)"),
        ));
    }
    cx.pool = Some(name.clone());
    Ok(name)
}

fn prefix_of(cx: &Cx, m: &Map<String, Value>, default: &str) -> Result<String, ConfigError> {
    let p = opt_str(cx, m, "resourcePrefix")?.unwrap_or_else(|| default.to_string());
    let ok = !p.is_empty()
        && p.len() <= 253
        && p.split('.').all(|l| {
            !l.is_empty()
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if !ok {
        return Err(cx.err("resourcePrefix", &format!("{p:?} is not a DNS subdomain")));
    }
    Ok(p)
}

fn native_pool(
    cx: &mut Cx,
    (_, m): (usize, &Map<String, Value>),
    prefix: &str,
) -> Result<PoolConfig, ConfigError> {
    let name = pool_name(cx, m, "name")?;
    cx.keys(
        m,
        "",
        &[
            "name",
            "resourcePrefix",
            "mode",
            "policy",
            "gpuAffinity",
            "rdmaHcaMax",
            "excludeTopology",
            "selectors",
        ],
    )?;
    let prefix = prefix_of(cx, m, prefix)?;
    let mode = match opt_str(cx, m, "mode")?.as_deref() {
        None | Some("vf") => Mode::Vf,
        Some("shared") => Mode::Shared,
        Some(o) => return Err(cx.err("mode", &format!("{o:?} is not one of: vf, shared"))),
    };
    let policy = match opt_str(cx, m, "policy")?.as_deref() {
        None | Some("pack") => Policy::Pack,
        Some("spread") => Policy::Spread,
        Some(o) => return Err(cx.err("policy", &format!("{o:?} is not one of: pack, spread"))),
    };
    let gpu_affinity = opt_bool(cx, m, "gpuAffinity", "")?.unwrap_or(false);
    let exclude_topology = opt_bool(cx, m, "excludeTopology", "")?.unwrap_or(false);
    let rdma_hca_max = hca_max(cx, m, mode == Mode::Shared)?;
    let selectors = selectors(cx, m, SelKind::Native)?;
    Ok(PoolConfig { name, prefix, mode, selectors, policy, gpu_affinity, rdma_hca_max, exclude_topology })
}

fn hca_max(cx: &Cx, m: &Map<String, Value>, required: bool) -> Result<u32, ConfigError> {
    match m.get("rdmaHcaMax") {
        None if required => {
            Err(cx.err("rdmaHcaMax", "missing: shared mode needs the number of pods per HCA"))
        }
        None => Ok(0),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=1000).contains(&n) && required => Ok(n as u32),
            Some(_) if !required => Err(cx.err("rdmaHcaMax", "only meaningful with `mode: shared`")),
            _ => Err(cx.err("rdmaHcaMax", &format!("expected a whole number from 1 to 1000, found {v}"))),
        },
    }
}

fn sndp_pool(cx: &mut Cx, (_, m): (usize, &Map<String, Value>)) -> Result<PoolConfig, ConfigError> {
    let name = pool_name(cx, m, "resourceName")?;
    cx.keys(
        m,
        "",
        &[
            "resourceName",
            "resourcePrefix",
            "deviceType",
            "excludeTopology",
            "selectors",
            "isRdma",
            "additionalInfo",
        ],
    )?;
    // SNDP's --resource-prefix defaults to intel.com; keep it so pods' requests still match.
    let prefix = prefix_of(cx, m, "intel.com")?;
    match opt_str(cx, m, "deviceType")?.as_deref() {
        None | Some("netDevice") => {}
        Some(o) => {
            return Err(
                cx.err("deviceType", &format!("{o:?} is not supported: kube-rdma serves netDevice VFs only"))
            )
        }
    }
    let exclude_topology = opt_bool(cx, m, "excludeTopology", "")?.unwrap_or(false);
    let top_rdma = opt_bool(cx, m, "isRdma", "")?;
    let mut selectors = selectors(cx, m, SelKind::Sndp)?;
    if let Some(r) = top_rdma {
        for s in &mut selectors {
            s.is_rdma.get_or_insert(r);
        }
    }
    Ok(PoolConfig {
        name,
        prefix,
        mode: Mode::Vf,
        selectors,
        policy: Policy::Pack,
        gpu_affinity: false,
        rdma_hca_max: 0,
        exclude_topology,
    })
}

fn rsdp_pool(cx: &mut Cx, (_, m): (usize, &Map<String, Value>)) -> Result<PoolConfig, ConfigError> {
    let name = pool_name(cx, m, "resourceName")?;
    cx.keys(m, "", &["resourceName", "resourcePrefix", "rdmaHcaMax", "selectors", "devices"])?;
    // RSDP advertises rdma/<resourceName> unless told otherwise.
    let prefix = prefix_of(cx, m, "rdma")?;
    let rdma_hca_max = hca_max(cx, m, true)?;
    let mut selectors = if m.contains_key("selectors") {
        selectors(cx, m, SelKind::Rsdp)?
    } else {
        vec![Selector::default()]
    };
    // The deprecated top-level `devices` list of RSDP holds interface names.
    if m.contains_key("devices") {
        let names = strings(cx, m.get("devices"), "devices")?;
        for s in &mut selectors {
            s.if_names.extend(names.iter().cloned());
        }
    }
    Ok(PoolConfig {
        name,
        prefix,
        mode: Mode::Shared,
        selectors,
        policy: Policy::Pack,
        gpu_affinity: false,
        rdma_hca_max,
        exclude_topology: false,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SelKind {
    Native,
    Sndp,
    Rsdp,
}

fn selectors(cx: &Cx, m: &Map<String, Value>, kind: SelKind) -> Result<Vec<Selector>, ConfigError> {
    match m.get("selectors") {
        None => Err(cx.err("selectors", "missing (an empty mapping `{}` selects every device)")),
        Some(Value::Object(o)) => Ok(vec![selector(cx, o, "selectors", kind)?]),
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(o) => selector(cx, o, &format!("selectors[{i}]"), kind),
                _ => Err(cx.err(&format!("selectors[{i}]"), "expected a mapping")),
            })
            .collect(),
        Some(v) => {
            Err(cx
                .err("selectors", &format!("expected a mapping or a non-empty list of mappings, found {v}")))
        }
    }
}

const SNDP_UNSUPPORTED: &[&str] = &["ddpProfiles", "vdpaType", "acpiIndexes", "auxTypes", "pKeys"];

fn selector(cx: &Cx, o: &Map<String, Value>, at: &str, kind: SelKind) -> Result<Selector, ConfigError> {
    let known: &[&str] = match kind {
        SelKind::Native => &[
            "vendors",
            "devices",
            "deviceIDs",
            "drivers",
            "pciAddresses",
            "pfNames",
            "rootDevices",
            "linkTypes",
            "isRdma",
            "ifNames",
            "linkSpeeds",
            "numaNodes",
        ],
        SelKind::Sndp => &[
            "vendors",
            "devices",
            "drivers",
            "pciAddresses",
            "pfNames",
            "rootDevices",
            "linkTypes",
            "isRdma",
            "needVhostNet",
            "ddpProfiles",
            "vdpaType",
            "acpiIndexes",
            "auxTypes",
            "pKeys",
        ],
        SelKind::Rsdp => &["vendors", "deviceIDs", "drivers", "ifNames", "linkTypes"],
    };
    cx.keys(o, at, known)?;
    for k in SNDP_UNSUPPORTED {
        if o.contains_key(*k) {
            return Err(cx.err(
                &join(at, k),
                "not supported by kube-rdma (ignoring it would select devices the file meant to exclude)",
            ));
        }
    }
    if let Some(true) = opt_bool(cx, o, "needVhostNet", at)? {
        return Err(cx.err(&join(at, "needVhostNet"), "vhost-net is not supported by kube-rdma"));
    }
    let mut s = Selector {
        vendors: hex_ids(cx, o, at, "vendors")?,
        devices: hex_ids(cx, o, at, "devices")?,
        drivers: strings(cx, o.get("drivers"), &join(at, "drivers"))?,
        pci_addresses: pcis(cx, o, at, "pciAddresses")?,
        root_devices: pcis(cx, o, at, "rootDevices")?,
        is_rdma: opt_bool(cx, o, "isRdma", at)?,
        if_names: strings(cx, o.get("ifNames"), &join(at, "ifNames"))?,
        ..Selector::default()
    };
    s.devices.extend(hex_ids(cx, o, at, "deviceIDs")?);
    for (i, p) in strings(cx, o.get("pfNames"), &join(at, "pfNames"))?.iter().enumerate() {
        s.pf_names.push(parse_pf_name(p).map_err(|why| cx.err(&format!("{at}.pfNames[{i}]"), &why))?);
    }
    for (i, t) in strings(cx, o.get("linkTypes"), &join(at, "linkTypes"))?.iter().enumerate() {
        s.link_types.push(match t.to_ascii_lowercase().as_str() {
            "ether" | "ethernet" | "eth" => LinkLayer::Ethernet,
            "infiniband" | "ib" => LinkLayer::InfiniBand,
            o => {
                return Err(cx.err(
                    &format!("{at}.linkTypes[{i}]"),
                    &format!("{o:?} is not one of: ether, infiniband"),
                ))
            }
        });
    }
    s.link_speeds = numbers(cx, o, at, "linkSpeeds")?;
    s.numa_nodes = numbers(cx, o, at, "numaNodes")?;
    Ok(s)
}

fn strings(cx: &Cx, v: Option<&Value>, at: &str) -> Result<Vec<String>, ConfigError> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                v => Err(cx.err(&format!("{at}[{i}]"), &format!("expected a non-empty string, found {v}"))),
            })
            .collect(),
        Some(v) => Err(cx.err(at, &format!("expected a list, found {v}"))),
    }
}

/// PCI ids are hex strings (`"15b3"`, `"0x15b3"`); YAML reads unquoted `8086`
/// as a number, which is taken as the hex digits it was written with.
fn hex_ids(cx: &Cx, o: &Map<String, Value>, at: &str, key: &str) -> Result<Vec<u16>, ConfigError> {
    let at = join(at, key);
    strings(cx, o.get(key), &at)?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = s.trim_start_matches("0x");
            if t.is_empty() || t.len() > 4 {
                return Err(cx.err(&format!("{at}[{i}]"), &format!("{s:?} is not a 4-digit hex PCI id")));
            }
            u16::from_str_radix(t, 16)
                .map_err(|_| cx.err(&format!("{at}[{i}]"), &format!("{s:?} is not a 4-digit hex PCI id")))
        })
        .collect()
}

fn pcis(cx: &Cx, o: &Map<String, Value>, at: &str, key: &str) -> Result<Vec<PciAddr>, ConfigError> {
    let at = join(at, key);
    strings(cx, o.get(key), &at)?
        .iter()
        .enumerate()
        .map(|(i, s)| s.parse::<PciAddr>().map_err(|e| cx.err(&format!("{at}[{i}]"), &e.to_string())))
        .collect()
}

fn numbers(cx: &Cx, o: &Map<String, Value>, at: &str, key: &str) -> Result<Vec<u32>, ConfigError> {
    let at = join(at, key);
    match o.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_u64().filter(|n| *n <= u32::MAX as u64).map(|n| n as u32).ok_or_else(|| {
                    cx.err(&format!("{at}[{i}]"), &format!("expected a whole number, found {v}"))
                })
            })
            .collect(),
        Some(v) => Err(cx.err(&at, &format!("expected a list of numbers, found {v}"))),
    }
}

/// Parses SNDP's `pfName#ranges` (`ens1f0`, `ens1f0#0-3,6`).
pub fn parse_pf_name(s: &str) -> Result<PfName, String> {
    let (name, ranges) = match s.split_once('#') {
        None => (s, None),
        Some((n, r)) => (n, Some(r)),
    };
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
        return Err(format!("{s:?}: {name:?} is not an interface name"));
    }
    let vfs = match ranges {
        None => None,
        Some(r) => {
            let mut out = Vec::new();
            for part in r.split(',') {
                let bad = || format!("{s:?}: VF range {part:?} is not N or N-M (e.g. ens1f0#0-3,6)");
                let (a, b) = match part.split_once('-') {
                    None => {
                        let n: u32 = part.trim().parse().map_err(|_| bad())?;
                        (n, n)
                    }
                    Some((a, b)) => {
                        (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?)
                    }
                };
                if a > b {
                    return Err(format!("{s:?}: VF range {part:?} runs backwards"));
                }
                out.push(a..=b);
            }
            Some(out)
        }
    };
    Ok(PfName { name: name.to_string(), vfs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pf_name_ranges() {
        let p = parse_pf_name("ens1f0#0-3,6").unwrap();
        assert!(p.covers(0) && p.covers(3) && p.covers(6) && !p.covers(4) && !p.covers(7));
        assert_eq!(p.to_string(), "ens1f0#0-3,6");
        assert!(parse_pf_name("ens1f0").unwrap().covers(99));
        assert!(parse_pf_name("ens1f0#3-1").is_err());
        assert!(parse_pf_name("ens1f0#a").is_err());
        assert!(parse_pf_name("#1").is_err());
    }

    #[test]
    fn yaml_number_vendor_is_read_as_hex_digits() {
        let c =
            Config::parse("pools: [{name: a, selectors: {vendors: [8086, \"15b3\"]}}]", Path::new("c.yaml"))
                .unwrap();
        assert_eq!(c.pools[0].selectors[0].vendors, vec![0x8086, 0x15b3]);
        assert_eq!(c.pools[0].resource_name(), "kuberdma.io/a");
    }
}
