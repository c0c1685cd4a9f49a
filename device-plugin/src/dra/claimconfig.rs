//! Our opaque device configuration: what a DeviceClass or a ResourceClaim can
//! say to this driver in `config[].opaque.parameters` when `opaque.driver` is
//! `rdma.kuberdma.io`.
//!
//! ```yaml
//! apiVersion: kuberdma.io/v1alpha1
//! kind: RdmaDeviceConfig
//! env:                 # extra environment for the containers using the devices
//!   NCCL_IB_TC: "106"
//! umad: false          # hand out umadN/issmN (MAD access) too; default true
//! rdmaCm: true         # hand out /dev/infiniband/rdma_cm; default true
//! ```
//!
//! Versioned and strict: another apiVersion or kind, an unknown field or a
//! bad value is refused at prepare time with the claim, the config entry and
//! the field named, never ignored. Entries apply in the allocation's order
//! (the class's first, then the claim's): a later entry overrides an earlier
//! one field by field, `env` key by key.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde_json::Value;

/// `apiVersion` we read.
pub const API_VERSION: &str = "kuberdma.io/v1alpha1";
/// `kind` we read.
pub const KIND: &str = "RdmaDeviceConfig";

/// One config entry as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdmaDeviceConfig {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Hand out `umadN`/`issmN`.
    pub umad: Option<bool>,
    /// Hand out `rdma_cm`.
    pub rdma_cm: Option<bool>,
}

/// The fields of [`RdmaDeviceConfig`] as written.
const FIELDS: [&str; 5] = ["apiVersion", "kind", "env", "umad", "rdmaCm"];

/// The effective configuration of the devices of one request (kept with
/// what was prepared, so it lives in [`nic::prepared`]).
pub use nic::prepared::DeviceConfig;

/// A config entry we cannot use. Names the entry and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config[{index}] ({source_kind}{}): {why}", requests.as_ref().map(|r| format!(", requests [{}]", r.join(", "))).unwrap_or_default())]
pub struct ConfigError {
    /// Position in `status.allocation.devices.config`.
    pub index: usize,
    /// `FromClass` or `FromClaim`.
    pub source_kind: String,
    /// The requests it applies to (`None`: all).
    pub requests: Option<Vec<String>>,
    /// What is wrong.
    pub why: String,
}

/// Environment variable names we set ourselves; a config may not override them.
const RESERVED_PREFIX: &str = "KUBERDMA_";

fn valid_env_name(n: &str) -> bool {
    let mut b = n.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses and checks one entry's parameters; errors name the field.
pub fn parse(params: &Value) -> Result<RdmaDeviceConfig, String> {
    let Value::Object(map) = params else {
        return Err(format!("parameters must be an object, not {}", type_name(params)));
    };
    let mut c = RdmaDeviceConfig::default();
    for (k, v) in map {
        let wrong = |want: &str| format!("field `{k}`: expected {want}, got {} {v}", type_name(v));
        match k.as_str() {
            "apiVersion" => c.api_version = v.as_str().ok_or_else(|| wrong("a string"))?.to_string(),
            "kind" => c.kind = v.as_str().ok_or_else(|| wrong("a string"))?.to_string(),
            "umad" => c.umad = Some(v.as_bool().ok_or_else(|| wrong("true or false"))?),
            "rdmaCm" => c.rdma_cm = Some(v.as_bool().ok_or_else(|| wrong("true or false"))?),
            "env" => {
                let m = v.as_object().ok_or_else(|| wrong("an object of name: value"))?;
                for (name, val) in m {
                    let val = val.as_str().ok_or_else(|| {
                        format!(
                            "field `env.{name}`: expected a string, got {} {val} (quote numbers)",
                            type_name(val)
                        )
                    })?;
                    c.env.insert(name.clone(), val.to_string());
                }
            }
            other => return Err(format!("unknown field `{other}` (known: {})", FIELDS.join(", "))),
        }
    }
    if c.api_version.is_empty() {
        return Err(format!("field `apiVersion` is required ({API_VERSION:?})"));
    }
    if c.api_version != API_VERSION {
        return Err(format!(
            "apiVersion {:?} is not supported (this driver reads {API_VERSION:?})",
            c.api_version
        ));
    }
    if c.kind != KIND {
        return Err(format!("kind {:?} is not supported (expected {KIND:?})", c.kind));
    }
    for (k, v) in &c.env {
        if !valid_env_name(k) {
            return Err(format!("env {k:?}: not a valid environment variable name"));
        }
        if k.starts_with(RESERVED_PREFIX) {
            return Err(format!("env {k:?}: names starting with {RESERVED_PREFIX} are set by the driver"));
        }
        if v.len() > 4096 {
            return Err(format!("env {k:?}: value longer than 4096 bytes"));
        }
    }
    Ok(c)
}

/// Whether a config entry's `requests` covers `request` (`req` covers its subrequests `req/x`).
pub fn covers(requests: Option<&[String]>, request: &str) -> bool {
    match requests {
        None => true,
        Some([]) => true,
        Some(list) => list.iter().any(|r| r == request || r == super::request::top_level_request(request)),
    }
}

/// One of our config entries: the requests it applies to (`None`: all) and what it says.
pub type Entry = (Option<Vec<String>>, RdmaDeviceConfig);

/// Our entries of an allocation's `config`, parsed and checked; entries for
/// other drivers are not ours to read.
pub fn ours(configs: &[DeviceAllocationConfiguration], driver: &str) -> Result<Vec<Entry>, ConfigError> {
    let mut out = Vec::new();
    for (index, c) in configs.iter().enumerate() {
        let Some(o) = &c.opaque else { continue };
        if o.driver != driver {
            continue;
        }
        let parsed = parse(&o.parameters.0).map_err(|why| ConfigError {
            index,
            source_kind: c.source.clone(),
            requests: c.requests.clone(),
            why,
        })?;
        out.push((c.requests.clone(), parsed));
    }
    Ok(out)
}

/// The effective config of `request`, folding `entries` in order.
pub fn effective(entries: &[Entry], request: &str) -> DeviceConfig {
    let mut out = DeviceConfig::default();
    for (requests, c) in entries {
        if !covers(requests.as_deref(), request) {
            continue;
        }
        out.env.extend(c.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(u) = c.umad {
            out.umad = u;
        }
        if let Some(r) = c.rdma_cm {
            out.rdma_cm = r;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::OpaqueDeviceConfiguration;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use serde_json::json;

    fn entry(
        driver: &str,
        source: &str,
        requests: Option<&[&str]>,
        p: serde_json::Value,
    ) -> DeviceAllocationConfiguration {
        DeviceAllocationConfiguration {
            opaque: Some(OpaqueDeviceConfiguration { driver: driver.into(), parameters: RawExtension(p) }),
            requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
            source: source.into(),
        }
    }

    #[test]
    fn class_then_claim_entries_fold_per_request() {
        let cfgs = vec![
            entry(
                "rdma.kuberdma.io",
                "FromClass",
                None,
                json!({"apiVersion": API_VERSION, "kind": KIND, "env": {"A": "class", "B": "class"}, "umad": false}),
            ),
            entry("gpu.nvidia.com", "FromClaim", None, json!({"anything": "theirs"})),
            entry(
                "rdma.kuberdma.io",
                "FromClaim",
                Some(&["rail0"]),
                json!({"apiVersion": API_VERSION, "kind": KIND, "env": {"A": "claim"}, "rdmaCm": false}),
            ),
        ];
        let e = ours(&cfgs, "rdma.kuberdma.io").unwrap();
        assert_eq!(e.len(), 2, "the GPU driver's entry is not ours");
        let r0 = effective(&e, "rail0/fast");
        assert_eq!(r0.env["A"], "claim");
        assert_eq!(r0.env["B"], "class");
        assert!(!r0.umad && !r0.rdma_cm);
        let r1 = effective(&e, "rail1");
        assert_eq!(r1.env["A"], "class");
        assert!(r1.rdma_cm);
        assert_eq!(effective(&[], "x"), DeviceConfig::default());
    }

    #[test]
    fn unknown_fields_versions_and_bad_env_are_refused_by_name() {
        let bad = [
            (json!({"apiVersion": API_VERSION, "kind": KIND, "mtu": 9000}), "unknown field `mtu`"),
            (json!({"apiVersion": "kuberdma.io/v2", "kind": KIND}), "kuberdma.io/v2"),
            (json!({"apiVersion": API_VERSION, "kind": "GpuConfig"}), "GpuConfig"),
            (json!({"kind": KIND}), "apiVersion"),
            (json!({"apiVersion": API_VERSION, "kind": KIND, "env": {"1X": "y"}}), "1X"),
            (json!({"apiVersion": API_VERSION, "kind": KIND, "env": {"KUBERDMA_X": "y"}}), "KUBERDMA_"),
            (json!({"apiVersion": API_VERSION, "kind": KIND, "umad": "yes"}), "umad"),
        ];
        for (p, want) in bad {
            let cfgs = vec![entry("rdma.kuberdma.io", "FromClaim", Some(&["vf"]), p.clone())];
            let e = ours(&cfgs, "rdma.kuberdma.io").unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("config[0] (FromClaim, requests [vf])"), "{p}: {e}");
        }
    }
}
