//! The config of k8s-rdma-shared-dev-plugin (`configList`), read unchanged,
//! with its meaning (`pkg/types/types.go`, `pkg/resources/resources_manager.go`
//! and `server.go` of that project):
//! - keys match in any case (Go's `encoding/json`);
//! - the prefix defaults to `rdma` (also when given empty);
//! - `rdmaHcaMax` is the number of device IDs (`0` … `N-1`) of the *resource*,
//!   and every ID hands out every RDMA device the selectors chose (VFs, PFs and
//!   HCAs alike: that project considers every PCI network function); absent or 0:
//!   no devices;
//! - the deprecated `devices` list names interfaces, like `selectors.ifNames`,
//!   and is refused together with non-empty `selectors`, as there;
//! - `periodicUpdateInterval` (seconds; 0 = never) sets the periodic rescan;
//! - `kubeletRootDir` says where the kubelet keeps `device-plugins/` (and
//!   `pod-resources/`), as `--kubelet-dir` does;
//! - resource names are `[A-Za-z0-9_]+` there: others are refused as there.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::fields::{Cx, Keys};
use super::{Config, ConfigError, Format, Mode, Policy, PoolConfig, Selector};

/// Default resource prefix of k8s-rdma-shared-dev-plugin.
pub const RSDP_PREFIX: &str = "rdma";

const TOP: &[&str] = &["configList", "periodicUpdateInterval", "kubeletRootDir"];
const POOL: &[&str] = &["resourceName", "resourcePrefix", "rdmaHcaMax", "devices", "selectors"];
const SELECTOR: &[&str] = &["vendors", "deviceIDs", "drivers", "ifNames", "linkTypes"];

/// Upper bound on `rdmaHcaMax`: every ID is a line in each ListAndWatch message.
const MAX_IDS: i64 = 10_000;

pub(super) fn parse(cx: &mut Cx, top: &Map<String, Value>) -> Result<Config, ConfigError> {
    let t = cx.obj(top, "", TOP, Keys::AnyCase)?;
    let rescan_interval = cx
        .opt_int(&t, "periodicUpdateInterval", 0..=i64::from(u32::MAX))?
        .map(|s| Duration::from_secs(s as u64));
    let kubelet_root = match cx.opt_str(&t, "kubeletRootDir")?.filter(|d| !d.is_empty()) {
        Some(d) if d.starts_with('/') => Some(PathBuf::from(d)),
        Some(d) => return Err(cx.err(&t.path("kubeletRootDir"), format!("{d:?} is not an absolute path"))),
        None => None,
    };
    let items = match t.get("configList") {
        Some(Value::Array(a)) => a,
        _ => return Err(cx.err(&t.path("configList"), "expected a list of pools")),
    };
    let mut pools = vec![];
    for (i, item) in items.iter().enumerate() {
        cx.pool = Some(format!("#{i}"));
        let Value::Object(m) = item else {
            return Err(cx.err(&format!("configList[{i}]"), "expected a mapping"));
        };
        pools.push(pool(cx, m)?);
    }
    Ok(Config { pools, format: Format::Rsdp, source: None, rescan_interval, kubelet_root })
}

fn pool(cx: &mut Cx, m: &Map<String, Value>) -> Result<PoolConfig, ConfigError> {
    let o = cx.obj(m, "", POOL, Keys::AnyCase)?;
    let key = o.path("resourceName");
    let name = cx.opt_str(&o, "resourceName")?;
    let name = super::pool_name(cx, name, &key)?;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(
            cx.err(&key, format!("{name:?}: k8s-rdma-shared-dev-plugin allows letters, digits and '_' only"))
        );
    }
    let prefix = match cx.opt_str(&o, "resourcePrefix")?.filter(|p| !p.is_empty()) {
        Some(p) => super::prefix(cx, p, &o.path("resourcePrefix"))?,
        None => RSDP_PREFIX.to_string(),
    };
    let rdma_hca_max = cx.opt_int(&o, "rdmaHcaMax", 0..=MAX_IDS)?.unwrap_or(0) as u32;
    let mut sel = match cx.mapping(&o, "selectors")? {
        None => Selector::default(),
        Some(m) => {
            let s = cx.obj(m, &o.path("selectors"), SELECTOR, Keys::AnyCase)?;
            Selector {
                vendors: cx.pci_ids(&s, "vendors", true)?,
                devices: cx.pci_ids(&s, "deviceIDs", true)?,
                drivers: cx.strings(&s, "drivers")?,
                if_names: cx.strings(&s, "ifNames")?,
                link_types: super::sndp::link_types(cx, &s)?,
                ..Selector::default()
            }
        }
    };
    let devices = cx.strings(&o, "devices")?;
    match (sel == Selector::default(), devices.is_empty()) {
        (true, true) => {
            return Err(cx.err(
                &o.path("selectors"),
                "missing: neither `selectors` nor `devices` is given (k8s-rdma-shared-dev-plugin refuses this too)",
            ))
        }
        (false, false) => {
            return Err(cx.err(
                &o.path("devices"),
                "cannot be combined with `selectors` (k8s-rdma-shared-dev-plugin refuses both together); move the names to `selectors.ifNames`",
            ))
        }
        (true, false) => sel.if_names = devices,
        (false, true) => {}
    }
    Ok(PoolConfig {
        name,
        prefix,
        mode: Mode::SharedResource,
        selectors: vec![sel],
        policy: Policy::Pack,
        gpu_affinity: false,
        rdma_hca_max,
        exclude_topology: true,
        rdma_devices: true,
        additional_info: None,
    })
}
