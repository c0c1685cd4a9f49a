//! Pool configuration, read from one of three formats (YAML or JSON; JSON is
//! read as YAML), told apart by the top-level key:
//! - `pools` — ours ([`native`]);
//! - `resourceList` — the `config.json` of sriov-network-device-plugin, unchanged
//!   ([`sndp`]);
//! - `configList` — the config of k8s-rdma-shared-dev-plugin, unchanged ([`rsdp`]).
//!
//! A key from the other two projects is either honoured with the meaning it has
//! there or refused at load with a message naming it; nothing is accepted and
//! ignored. `docs/config-conformance.md` lists every upstream example config and
//! what happens to it (checked by `tests/conformance.rs`). Every error names the
//! file, the pool and the field.
//!
//! Our format:
//! ```yaml
//! resourcePrefix: kuberdma.io      # optional, the default
//! pools:
//!   - name: rdma_a                 # resource kuberdma.io/rdma_a
//!     mode: vf                     # vf (default) | shared
//!     policy: pack                 # pack (default) | spread
//!     gpuAffinity: true            # prefer VFs behind a PCIe switch that hosts a GPU
//!     excludeTopology: false       # do not report NUMA nodes to the kubelet
//!     selectors:                   # one object, or a list (a device matching any entry is selected)
//!       vendors: ["15b3"]          # PCI ids are quoted strings ("0x15b3" and "15B3" work too)
//!       devices: ["101e"]
//!       drivers: [mlx5_core]
//!       pfNames: ["ens1f0np0#0-3,6"]
//!       rootDevices: ["0000:3d:00.0#0-7"]
//!       pciAddresses: ["0000:3d:00.2"]
//!       linkTypes: [ether]
//!       isRdma: true               # true: must have an RDMA device; false: must not
//!       linkSpeeds: [100000]       # PF link speed in Mb/s
//!       numaNodes: [0]
//!       ifNames: [ens1f0np0]       # the PF (or HCA) netdev
//!       deviceIDs: ["101d"]        # same as devices
//!   - name: hca_shared
//!     mode: shared
//!     rdmaHcaMax: 16               # shared mode: pods per HCA
//!     selectors: {ifNames: [ens2f0]}
//! ```

mod fields;
mod native;
pub mod read;
mod rsdp;
#[cfg(feature = "config-schema")]
pub mod schema;
mod sndp;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nic::{LinkLayer, NetnsMode, PciAddr};
use serde_json::Value;

use crate::{names, DEFAULT_PREFIX};
use fields::Cx;

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
    /// Ours: `rdma_hca_max` device IDs per selected HCA (or PF) RDMA device;
    /// each ID hands out that one device.
    Shared,
    /// k8s-rdma-shared-dev-plugin: `rdma_hca_max` device IDs (`0` … `N-1`) for the
    /// whole resource; each ID hands out every selected RDMA device.
    SharedResource,
}

/// Preferred-allocation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Fill one PF before using another (keeps other PFs whole).
    Pack,
    /// Take VFs from as many PFs as possible (bandwidth).
    Spread,
}

/// VF index ranges (`0-3,6`); `None` = every VF.
pub type VfRanges = Option<Vec<RangeInclusive<u32>>>;

fn covers(r: &VfRanges, index: u32) -> bool {
    r.as_ref().is_none_or(|r| r.iter().any(|r| r.contains(&index)))
}

fn fmt_ranges(r: &VfRanges, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if let Some(r) = r {
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

/// A PF name with an optional VF index range (`ens1f0#0-3,6`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfName {
    /// PF netdev name.
    pub name: String,
    /// VF indices; `None` = all VFs.
    pub vfs: VfRanges,
}

impl PfName {
    /// Whether VF `index` of this PF is selected.
    pub fn covers(&self, index: u32) -> bool {
        covers(&self.vfs, index)
    }
}

impl fmt::Display for PfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        fmt_ranges(&self.vfs, f)
    }
}

/// A PF PCI address with an optional VF index range (`0000:3d:00.0#0-3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootDevice {
    /// PF PCI address.
    pub pci: PciAddr,
    /// VF indices; `None` = all VFs.
    pub vfs: VfRanges,
}

impl RootDevice {
    /// Whether VF `index` of this PF is selected.
    pub fn covers(&self, index: u32) -> bool {
        covers(&self.vfs, index)
    }
}

impl fmt::Display for RootDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.pci)?;
        fmt_ranges(&self.vfs, f)
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
    /// PF PCI addresses with optional VF ranges (SNDP `rootDevices`).
    pub root_devices: Vec<RootDevice>,
    /// Link layers (`ether`, `infiniband`).
    pub link_types: Vec<LinkLayer>,
    /// `Some(true)`: must have an RDMA device; `Some(false)` (ours only): must not.
    pub is_rdma: Option<bool>,
    /// The device's own netdev names (RSDP `ifNames`; for VFs in our format the PF's too).
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
    /// How devices are handed out.
    pub mode: Mode,
    /// Selector objects; a device matching any one is selected.
    pub selectors: Vec<Selector>,
    /// Preferred-allocation policy.
    pub policy: Policy,
    /// Prefer VFs behind a PCIe switch that also hosts a GPU.
    pub gpu_affinity: bool,
    /// Shared modes: device IDs per HCA ([`Mode::Shared`]) or per resource
    /// ([`Mode::SharedResource`]).
    pub rdma_hca_max: u32,
    /// Do not report NUMA topology to the kubelet (SNDP `excludeTopology`).
    pub exclude_topology: bool,
    /// Hand out the devices' RDMA char devices (and `rdma_cm`). Always in our
    /// format; in SNDP's only for selectors with `isRdma: true`, as there.
    pub rdma_devices: bool,
    /// SNDP `additionalInfo`: per PCI address (or `*` for all) key/value pairs
    /// that go into `PCIDEVICE_<RES>_INFO` as `extra`. `Some` whenever the key
    /// is there, even empty: upstream then gives every device an `extra` entry.
    pub additional_info: Option<AdditionalInfo>,
}

/// SNDP `additionalInfo`: `*` or a PCI address → key/value pairs.
pub type AdditionalInfo = BTreeMap<String, BTreeMap<String, String>>;

impl PoolConfig {
    /// `prefix/name`.
    pub fn resource_name(&self) -> String {
        format!("{}/{}", self.prefix, self.name)
    }

    /// The CDI kind of the pool ([`names::cdi_kind`]).
    pub fn cdi_kind(&self) -> String {
        names::cdi_kind(&self.prefix, &self.name)
    }

    /// A pool of RDMA devices shared between pods.
    pub fn is_shared(&self) -> bool {
        matches!(self.mode, Mode::Shared | Mode::SharedResource)
    }

    /// SNDP `additionalInfo` for device `id`: the `*` entries, then the device's
    /// own on top (as sriov-network-device-plugin merges them).
    pub fn extra_info(&self, id: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for key in ["*", id] {
            if let Some(m) = self.additional_info.as_ref().and_then(|a| a.get(key)) {
                out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        out
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
    /// Periodic rescan the file asks for (RSDP `periodicUpdateInterval`; zero:
    /// none, link events only). `None`: the `--rescan-interval` flag decides.
    pub rescan_interval: Option<Duration>,
    /// Where the kubelet keeps its state (RSDP `kubeletRootDir`): the daemon
    /// serves `<root>/device-plugins` and asks `<root>/pod-resources/kubelet.sock`.
    /// `None`: the flags decide.
    pub kubelet_root: Option<PathBuf>,
}

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Io {
        /// The config file.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The path is not a regular file (it could block the read or never end).
    #[error("{path}: not a regular file ({kind}); the config must be a file")]
    NotAFile {
        /// The config file.
        path: PathBuf,
        /// What it is instead ("a FIFO", "a character device", …).
        kind: &'static str,
    },
    /// The file is larger than any config ([`read::MAX_BYTES`]).
    #[error("{path}: larger than {max} bytes; a config is a few KiB")]
    TooLarge {
        /// The config file.
        path: PathBuf,
        /// The limit, bytes.
        max: u64,
    },
    /// Collections nested deeper than [`read::MAX_DEPTH`].
    #[error("{path}: line {line} column {column}: nested deeper than {max} levels")]
    TooDeep {
        /// The config file.
        path: PathBuf,
        /// Where, from 1.
        line: usize,
        /// Where, from 1.
        column: usize,
        /// The limit.
        max: usize,
    },
    /// More than one YAML document.
    #[error("{path}: line {line}: a second YAML document begins; a config is one document")]
    Documents {
        /// The config file.
        path: PathBuf,
        /// Where the second document begins, from 1.
        line: usize,
    },
    /// Not YAML/JSON at all.
    #[error("{path}: not valid YAML or JSON")]
    Syntax {
        /// The config file.
        path: PathBuf,
        /// Parser error with line and column.
        #[source]
        source: serde_yaml::Error,
    },
    /// A field has a bad value.
    #[error("{path}: {}field `{field}`: {why}", pool.as_ref().map(|p| format!("pool {p:?}: ")).unwrap_or_default())]
    Field {
        /// The config file.
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
                rdma_devices: true,
                additional_info: None,
            }],
            format: Format::Default,
            source: None,
            rescan_interval: None,
            kubelet_root: None,
        }
    }

    /// Reads ([`read::read_text`]: a regular file of bounded size, never a
    /// blocking read) and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::parse(&read::read_text(path)?, path)
    }

    /// Parses `text`; `path` is used in errors only. Text nested deeper than
    /// [`read::MAX_DEPTH`] is refused before the YAML parser sees it.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        if let Some((line, column)) = read::too_deep(text, read::MAX_DEPTH) {
            return Err(ConfigError::TooDeep {
                path: path.to_path_buf(),
                line,
                column,
                max: read::MAX_DEPTH,
            });
        }
        let value: Value = serde_yaml::from_str(text).map_err(|e| syntax(text, path, e))?;
        let mut cx = Cx { path: path.to_path_buf(), pool: None };
        let Value::Object(top) = value else {
            return Err(
                cx.err("(top level)", "expected a mapping with `pools`, `resourceList` or `configList`")
            );
        };
        let has =
            |k: &str, fold: bool| top.keys().any(|t| if fold { t.eq_ignore_ascii_case(k) } else { t == k });
        let mut cfg = if has("pools", false) {
            native::parse(&mut cx, &top)?
        } else if has("resourceList", true) {
            sndp::parse(&mut cx, &top)?
        } else if has("configList", true) {
            rsdp::parse(&mut cx, &top)?
        } else if has("pfNetdevices", true) {
            return Err(cx.err("pfNetdevices", "the pre-1.0 format of k8s-rdma-shared-dev-plugin (`mode`, `pfNetdevices`) is not read: write it as `configList` with `selectors.ifNames`, as that project's 1.x does"));
        } else {
            return Err(cx.err("(top level)", "none of `pools` (kube-rdma), `resourceList` (sriov-network-device-plugin) or `configList` (k8s-rdma-shared-dev-plugin) is present"));
        };
        cfg.source = Some(path.to_path_buf());
        cx.pool = None;
        check_distinct(&mut cx, &cfg.pools)?;
        Ok(cfg)
    }

    /// Refuses shared pools on a node whose RDMA subsystem is in exclusive
    /// netns mode: there an RDMA device belongs to one network namespace, so
    /// pods in their own namespaces cannot use the host's devices
    /// (k8s-rdma-shared-dev-plugin refuses to start in that mode for the same
    /// reason). Unknown mode (old kernel): nothing to refuse.
    pub fn check_netns(&self, mode: Option<NetnsMode>) -> Result<(), ConfigError> {
        if mode != Some(NetnsMode::Exclusive) {
            return Ok(());
        }
        let Some(p) = self.pools.iter().find(|p| p.is_shared()) else { return Ok(()) };
        let field = if p.mode == Mode::SharedResource { "rdmaHcaMax" } else { "mode" };
        Err(ConfigError::Field {
            path: self.source.clone().unwrap_or_default(),
            pool: Some(p.name.clone()),
            field: field.into(),
            why: "shared RDMA devices cannot be used from pods on this node: its RDMA subsystem is in exclusive netns mode (ib_core netns_mode=0), where each RDMA device belongs to one network namespace; serve VFs instead, or boot the node with netns_mode=1 to share HCAs".into(),
        })
    }
}

/// The error for text serde_yaml refused, with a position. serde_yaml reports
/// anything after the first document (a second one, or bad text there) as
/// "more than one document" without one; reading the documents one by one
/// finds the bad text's position, or else where the second document begins.
fn syntax(text: &str, path: &Path, e: serde_yaml::Error) -> ConfigError {
    use serde::Deserialize as _;
    let path = path.to_path_buf();
    if e.location().is_some() {
        return ConfigError::Syntax { path, source: e };
    }
    for doc in serde_yaml::Deserializer::from_str(text).skip(1) {
        if let Err(source) = Value::deserialize(doc) {
            if source.location().is_some() {
                return ConfigError::Syntax { path, source };
            }
        }
    }
    match second_document(text) {
        Some(line) => ConfigError::Documents { path, line },
        None => ConfigError::Syntax { path, source: e },
    }
}

/// The line (from 1) where a second YAML document begins: the second `---`
/// marker when the text starts with one, else the first; or a `...` end
/// marker followed by more.
fn second_document(text: &str) -> Option<usize> {
    let marker = |l: &str, m: &str| l == m || l.strip_prefix(m).is_some_and(|r| r.starts_with([' ', '\t']));
    let mut seen_content = false;
    let mut ended = false;
    for (n, l) in text.lines().enumerate() {
        let blank = l.trim().is_empty() || l.trim_start().starts_with('#');
        if marker(l, "---") {
            if seen_content || ended {
                return Some(n + 1);
            }
            seen_content = true;
        } else if marker(l, "...") {
            ended = true;
        } else if !blank {
            if ended {
                return Some(n + 1);
            }
            seen_content = true;
        }
    }
    None
}

/// Two pools may not derive the same resource, environment variable or CDI kind.
fn check_distinct(cx: &mut Cx, pools: &[PoolConfig]) -> Result<(), ConfigError> {
    if pools.is_empty() {
        return Err(cx.err("pools", "no pool is defined"));
    }
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for p in pools {
        cx.pool = Some(p.name.clone());
        let derived = [
            (p.resource_name(), "resource"),
            (names::pcidevice_env(&p.prefix, &p.name), "environment variable"),
            (names::pool_env_stem(&p.name), "environment variable stem"),
            (format!("cdi:{}", p.cdi_kind()), "CDI kind"),
        ];
        let mut mine = BTreeSet::new();
        for (key, what) in derived {
            if !mine.insert(key.clone()) {
                continue;
            }
            if let Some(other) = seen.insert(key.clone(), &p.name) {
                let shown = key.trim_start_matches("cdi:");
                let why = if what == "resource" {
                    format!("resource {shown} is defined twice")
                } else {
                    format!("pool {other:?} derives the same {what} {shown}; rename one of them")
                };
                return Err(cx.err("name", why));
            }
        }
    }
    Ok(())
}

/// Validates a pool name as the name part of an extended resource
/// (`[A-Za-z0-9][-A-Za-z0-9_.]*`, at most 63 characters) and sets it as the
/// context's pool.
fn pool_name(cx: &mut Cx, name: Option<String>, key: &str) -> Result<String, ConfigError> {
    let name = name.ok_or_else(|| cx.err(key, "missing (every pool needs a name)"))?;
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        return Err(cx.err(
            key,
            format!("{name:?} is not a valid resource name (letters, digits, '-', '_', '.'; at most 63; starting and ending with a letter or digit)"),
        ));
    }
    cx.pool = Some(name.clone());
    Ok(name)
}

/// Validates a resource prefix: a DNS subdomain, as the API server checks an
/// extended resource's prefix (`IsQualifiedName`).
fn prefix(cx: &Cx, p: String, key: &str) -> Result<String, ConfigError> {
    if !plumbing::is_dns_subdomain(&p) {
        return Err(cx.err(
            key,
            format!("{p:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"),
        ));
    }
    Ok(p)
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
        Some(r) => Some(parse_vf_ranges(s, r)?),
    };
    Ok(PfName { name: name.to_string(), vfs })
}

/// `0-3,6` of `whole` (`ens1f0#0-3,6`), for messages.
fn parse_vf_ranges(whole: &str, r: &str) -> Result<Vec<RangeInclusive<u32>>, String> {
    let mut out = Vec::new();
    for part in r.split(',') {
        let bad = || format!("{whole:?}: VF range {part:?} is not N or N-M (e.g. ens1f0#0-3,6)");
        let (a, b) = match part.split_once('-') {
            None => {
                let n: u32 = part.trim().parse().map_err(|_| bad())?;
                (n, n)
            }
            Some((a, b)) => (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?),
        };
        if a > b {
            return Err(format!("{whole:?}: VF range {part:?} runs backwards"));
        }
        out.push(a..=b);
    }
    Ok(out)
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
    fn unquoted_yaml_numbers_are_refused_as_pci_ids() {
        for (text, shown) in [("8086", "8086"), ("0x15b3", "5555")] {
            let e = Config::parse(
                &format!("pools: [{{name: a, selectors: {{vendors: [{text}, \"15b3\"]}}}}]"),
                Path::new("c.yaml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("`selectors.vendors[0]`") && e.contains(&format!("the number {shown}")),
                "{e}"
            );
        }
        let c = Config::parse(
            "pools: [{name: a, selectors: {vendors: [\"0x8086\", \"15B3\"]}}]",
            Path::new("c.yaml"),
        )
        .unwrap();
        assert_eq!(c.pools[0].selectors[0].vendors, vec![0x8086, 0x15b3]);
        assert_eq!(c.pools[0].resource_name(), "kuberdma.io/a");
    }

    #[test]
    fn pools_that_derive_the_same_names_are_refused() {
        let e = Config::parse(
            "pools: [{name: rail.0, selectors: {}}, {name: rail_0, selectors: {}}]",
            Path::new("c.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("pool \"rail_0\"") && e.contains("same environment variable"), "{e}");
        let e = Config::parse(
            "pools: [{name: rail.0, selectors: {}}, {name: pool-rail-0, selectors: {}}]",
            Path::new("c.yaml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("same CDI kind kuberdma.io/pool-rail-0"), "{e}");
    }
}
