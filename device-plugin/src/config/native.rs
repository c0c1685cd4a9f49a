//! Our own format (`pools:`), documented in [`super`]. Keys match exactly.

use nic::LinkLayer;
use serde_json::{Map, Value};

use super::fields::{Cx, Keys, Obj};
use super::{Config, ConfigError, Format, Mode, Policy, PoolConfig, Selector};
use crate::DEFAULT_PREFIX;

pub(super) const TOP: &[&str] = &["pools", "resourcePrefix"];
pub(super) const POOL: &[&str] = &[
    "name",
    "resourcePrefix",
    "mode",
    "policy",
    "gpuAffinity",
    "rdmaHcaMax",
    "excludeTopology",
    "selectors",
];
pub(super) const SELECTOR: &[&str] = &[
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
];
/// `mode`; absent means the first.
pub(super) const MODES: &[(&str, Mode)] = &[("vf", Mode::Vf), ("shared", Mode::Shared)];
/// `policy`; absent means the first.
pub(super) const POLICIES: &[(&str, Policy)] = &[("pack", Policy::Pack), ("spread", Policy::Spread)];
/// `linkTypes`, in any ASCII case (what the sysfs `link_layer` file says, and short forms).
pub(super) const LINK_TYPES: &[(&str, LinkLayer)] = &[
    ("ether", LinkLayer::Ethernet),
    ("ethernet", LinkLayer::Ethernet),
    ("eth", LinkLayer::Ethernet),
    ("infiniband", LinkLayer::InfiniBand),
    ("ib", LinkLayer::InfiniBand),
];

pub(super) fn parse(cx: &mut Cx, top: &Map<String, Value>) -> Result<Config, ConfigError> {
    let t = cx.obj(top, "", TOP, Keys::Exact)?;
    let default_prefix = match cx.opt_str(&t, "resourcePrefix")? {
        Some(p) => super::prefix(cx, p, "resourcePrefix")?,
        None => DEFAULT_PREFIX.to_string(),
    };
    let Some(Value::Array(items)) = t.get("pools") else {
        return Err(cx.err("pools", "expected a list of pools"));
    };
    let mut pools = vec![];
    for (i, item) in items.iter().enumerate() {
        cx.pool = Some(format!("#{i}"));
        let Value::Object(m) = item else { return Err(cx.err(&format!("pools[{i}]"), "expected a mapping")) };
        pools.push(pool(cx, m, &default_prefix)?);
    }
    Ok(Config { pools, format: Format::Native, source: None, rescan_interval: None, kubelet_root: None })
}

fn pool(cx: &mut Cx, m: &Map<String, Value>, default_prefix: &str) -> Result<PoolConfig, ConfigError> {
    let o = cx.obj(m, "", POOL, Keys::Exact)?;
    let name = cx.opt_str(&o, "name")?;
    let name = super::pool_name(cx, name, "name")?;
    let prefix = match cx.opt_str(&o, "resourcePrefix")? {
        Some(p) => super::prefix(cx, p, "resourcePrefix")?,
        None => default_prefix.to_string(),
    };
    let mode = one_of(cx, &o, "mode", MODES)?;
    let policy = one_of(cx, &o, "policy", POLICIES)?;
    let gpu_affinity = cx.opt_bool(&o, "gpuAffinity")?.unwrap_or(false);
    let exclude_topology = cx.opt_bool(&o, "excludeTopology")?.unwrap_or(false);
    let rdma_hca_max = match (cx.opt_int(&o, "rdmaHcaMax", 1..=1000)?, mode) {
        (Some(n), Mode::Shared) => n as u32,
        (None, Mode::Shared) => {
            return Err(cx.err("rdmaHcaMax", "missing: shared mode needs the number of pods per HCA"))
        }
        (Some(_), _) => return Err(cx.err("rdmaHcaMax", "only meaningful with `mode: shared`")),
        (None, _) => 0,
    };
    let selectors = match o.get("selectors") {
        None => return Err(cx.err("selectors", "missing (an empty mapping `{}` selects every device)")),
        Some(v) => selectors(cx, v)?,
    };
    Ok(PoolConfig {
        name,
        prefix,
        mode,
        selectors,
        policy,
        gpu_affinity,
        rdma_hca_max,
        exclude_topology,
        rdma_devices: true,
        additional_info: None,
    })
}

/// The value of `key` named in `names`; the first when absent.
fn one_of<T: Copy>(cx: &Cx, o: &Obj, key: &str, names: &[(&str, T)]) -> Result<T, ConfigError> {
    let Some(given) = cx.opt_str(o, key)? else { return Ok(names[0].1) };
    names.iter().find(|(n, _)| *n == given).map(|(_, v)| *v).ok_or_else(|| {
        let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        cx.err(key, format!("{given:?} is not one of: {}", all.join(", ")))
    })
}

/// A selector mapping and where it is (`selectors`, `selectors[1]`).
pub(super) type At<'a> = (String, &'a Map<String, Value>);

/// `selectors`: one mapping or a non-empty list of them.
pub(super) fn selector_list<'a>(cx: &Cx, v: &'a Value) -> Result<Vec<At<'a>>, ConfigError> {
    match v {
        Value::Object(o) => Ok(vec![("selectors".to_string(), o)]),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(o) => Ok((format!("selectors[{i}]"), o)),
                _ => Err(cx.err(&format!("selectors[{i}]"), "expected a mapping")),
            })
            .collect(),
        v => {
            Err(cx.err("selectors", format!("expected a mapping or a non-empty list of mappings, found {v}")))
        }
    }
}

fn selectors(cx: &Cx, v: &Value) -> Result<Vec<Selector>, ConfigError> {
    selector_list(cx, v)?.into_iter().map(|(at, m)| selector(cx, m, &at)).collect()
}

fn selector(cx: &Cx, m: &Map<String, Value>, at: &str) -> Result<Selector, ConfigError> {
    let o = cx.obj(m, at, SELECTOR, Keys::Exact)?;
    let mut s = Selector {
        vendors: cx.pci_ids(&o, "vendors", false)?,
        devices: cx.pci_ids(&o, "devices", false)?,
        drivers: cx.strings(&o, "drivers")?,
        pci_addresses: cx.pcis(&o, "pciAddresses", false)?,
        pf_names: cx.pf_names(&o, "pfNames")?,
        root_devices: cx.root_devices(&o, "rootDevices", false)?,
        link_types: link_types(cx, &o)?,
        is_rdma: cx.opt_bool(&o, "isRdma")?,
        if_names: cx.strings(&o, "ifNames")?,
        link_speeds: cx.numbers(&o, "linkSpeeds")?,
        numa_nodes: cx.numbers(&o, "numaNodes")?,
    };
    s.devices.extend(cx.pci_ids(&o, "deviceIDs", false)?);
    Ok(s)
}

fn link_types(cx: &Cx, o: &Obj) -> Result<Vec<LinkLayer>, ConfigError> {
    let at = o.path("linkTypes");
    cx.strings(o, "linkTypes")?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.to_ascii_lowercase();
            LINK_TYPES.iter().find(|(n, _)| *n == t).map(|(_, l)| *l).ok_or_else(|| {
                cx.err(&format!("{at}[{i}]"), format!("{t:?} is not one of: ether, infiniband"))
            })
        })
        .collect()
}
