//! One CDI spec per prepared claim (CDI `SPEC.md`), written before the
//! kubelet gets the CDI device IDs and removed at unprepare.
//!
//! - kind `kuberdma.io/claim`; one CDI device per prepared VF, named
//!   `<device>_<claim uid>` (`pci-0000-3d-00-2_6f1c…`): unique per claim, and
//!   starting with a letter, so the spec needs no more than cdiVersion 0.3.0
//!   (0.5.0 is needed for names that start with a digit; podman 4.3 and
//!   containerd 1.7 read 0.3.0 specs);
//! - a device's edits: its char devices (`uverbsN`, and `umadN`/`issmN` unless
//!   the request's config says `umad: false`) plus the request's extra env. A
//!   device without any (a VF without RDMA, no extra env) is neither defined
//!   nor handed to the kubelet, as in device plugin mode: the CDI library
//!   refuses a device with empty edits ("invalid device, empty device edits",
//!   container-device-interface `pkg/cdi/device.go`) and with it the whole
//!   spec, so containerd would fail the container; a claim with no such device
//!   has no spec at all ("invalid spec, no devices");
//! - spec-wide edits (applied whenever any device of the claim is used):
//!   `rdma_cm` unless no request of the claim wants it, and per request
//!   `KUBERDMA_<REQUEST>_PCI_ADDRESSES` and `KUBERDMA_<REQUEST>_RDMA_DEVICES`
//!   (top-level request names, the ones containers use, upper-cased, `-` as
//!   `_`: a `firstAvailable` subrequest `vf/fast` sets `KUBERDMA_VF_...`, so a
//!   program reads the same name whichever alternative the scheduler chose);
//!   a variable with nothing to list (`_RDMA_DEVICES` of VFs without RDMA) is
//!   left out rather than set empty. Spec-wide edits reach a container only
//!   through a named device, so the variables of a claim none of whose devices
//!   has edits are not set.
//!
//! Paths are the node's `/dev/...`, never the roots we read from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nic::prepared::PreparedClaim;
use plumbing::atomic_file::{write_unsynced, FileError};
use serde_json::{json, Value};

use super::claimconfig::DeviceConfig;
use super::devices::{DraDevice, View};
use super::prepare::top_level_request;
use crate::names::env_part;
use crate::RDMA_CM;

/// CDI kind of claim devices.
pub const KIND: &str = "kuberdma.io/claim";
/// The lowest CDI version our content needs.
pub const CDI_VERSION: &str = "0.3.0";

/// One device of a claim as the CDI spec needs it.
#[derive(Debug, Clone)]
pub struct ClaimDevice<'a> {
    /// The claim's request it serves.
    pub request: &'a str,
    pub device: &'a DraDevice,
    /// The request's effective config.
    pub config: &'a DeviceConfig,
}

/// `<device>_<claim uid>`.
pub fn device_name(device: &str, claim_uid: &str) -> String {
    format!("{device}_{claim_uid}")
}

/// The fully qualified CDI device ID handed to the kubelet.
pub fn device_id(device: &str, claim_uid: &str) -> String {
    format!("{KIND}={}", device_name(device, claim_uid))
}

/// `<dir>/kuberdma.io-claim_<uid>.json`.
pub fn spec_path(dir: &Path, claim_uid: &str) -> PathBuf {
    dir.join(format!("kuberdma.io-claim_{claim_uid}.json"))
}

/// The char device paths a container gets for `cd`.
fn node_paths(cd: &ClaimDevice) -> Vec<String> {
    cd.device
        .rdma
        .iter()
        .flat_map(|r| r.char_devs.iter())
        .filter(|c| cd.config.umad || !(c.name.starts_with("umad") || c.name.starts_with("issm")))
        .map(|c| c.node_path.to_string_lossy().into_owned())
        .collect()
}

/// Whether the claim's spec defines a CDI device for `device` under `config`,
/// and so whether the kubelet gets its ID: only when it has edits of its own.
pub fn named(device: &DraDevice, config: &DeviceConfig) -> bool {
    !config.env.is_empty() || !node_paths(&ClaimDevice { request: "", device, config }).is_empty()
}

/// The spec of one claim; `None` when none of its devices is [`named`].
pub fn spec(claim_uid: &str, devices: &[ClaimDevice], rdma_cm_on_node: bool) -> Option<Value> {
    let mut per_request: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for cd in devices {
        let (pcis, rdmas) = per_request.entry(top_level_request(cd.request)).or_default();
        pcis.push(cd.device.pci.to_string());
        rdmas.extend(cd.device.rdma.iter().map(|r| r.name.clone()));
    }
    let cdi_devices: Vec<Value> = devices
        .iter()
        .filter(|cd| named(cd.device, cd.config))
        .map(|cd| {
            let mut edits = serde_json::Map::new();
            let nodes: Vec<Value> = node_paths(cd).into_iter().map(|p| json!({ "path": p })).collect();
            if !nodes.is_empty() {
                edits.insert("deviceNodes".into(), nodes.into());
            }
            let env: Vec<String> = cd.config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if !env.is_empty() {
                edits.insert("env".into(), env.into());
            }
            json!({ "name": device_name(&cd.device.name, claim_uid), "containerEdits": edits })
        })
        .collect();
    if cdi_devices.is_empty() {
        return None;
    }
    let mut env = Vec::new();
    for (req, (pcis, rdmas)) in &per_request {
        let r = env_part(req);
        env.push(format!("KUBERDMA_{r}_PCI_ADDRESSES={}", pcis.join(",")));
        if !rdmas.is_empty() {
            env.push(format!("KUBERDMA_{r}_RDMA_DEVICES={}", rdmas.join(",")));
        }
    }
    let mut edits = json!({ "env": env });
    if rdma_cm_on_node && devices.iter().any(|d| d.config.rdma_cm && !d.device.rdma.is_empty()) {
        edits["deviceNodes"] = json!([{ "path": RDMA_CM }]);
    }
    Some(json!({ "cdiVersion": CDI_VERSION, "kind": KIND, "devices": cdi_devices, "containerEdits": edits }))
}

/// The spec of a prepared claim, from its record and the node's current
/// devices (char device numbers are read again, so a spec written after a
/// reboot names the devices as they are now); `None` for a claim without
/// [`named`] devices of ours.
pub fn spec_for(record: &PreparedClaim, view: &View) -> Result<Option<Value>, String> {
    if record.devices.is_empty() {
        return Ok(None);
    }
    let mut cds = Vec::with_capacity(record.devices.len());
    for d in &record.devices {
        let device = view.device(&d.device).ok_or_else(|| {
            format!("device {} (request {}) is not published by this node any more", d.device, d.request)
        })?;
        cds.push(ClaimDevice { request: &d.request, device, config: &d.config });
    }
    Ok(spec(&record.uid, &cds, view.rdma_cm))
}

/// Writes the claim's spec atomically; returns its path.
pub fn write(dir: &Path, claim_uid: &str, spec: &Value) -> Result<PathBuf, FileError> {
    let path = spec_path(dir, claim_uid);
    write_unsynced(&path, &serde_json::to_vec_pretty(spec).unwrap_or_default())?;
    Ok(path)
}

/// Removes the claim's spec; already gone is fine.
pub fn remove(dir: &Path, claim_uid: &str) -> Result<(), FileError> {
    let path = spec_path(dir, claim_uid);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FileError { op: "remove", path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;
    use crate::pools::RdmaInfo;
    use nic::CharDev;

    fn cd(name: &str) -> CharDev {
        CharDev {
            name: name.into(),
            node_path: format!("/dev/infiniband/{name}").into(),
            major_minor: None,
            present: true,
        }
    }

    fn dev() -> DraDevice {
        DraDevice {
            name: "pci-0000-3d-00-2".into(),
            pool: "rdma_vfs".into(),
            resource: "kuberdma.io/rdma_vfs".into(),
            pci: "0000:3d:00.2".parse().unwrap(),
            pf: "0000:3d:00.0".parse().unwrap(),
            pf_netdev: None,
            vf_index: Some(1),
            vendor: None,
            device_id: None,
            netdev: None,
            numa: None,
            pcie_root: None,
            link_speed_mbps: None,
            link_layer: None,
            rdma: vec![RdmaInfo {
                name: "mlx5_3".into(),
                char_devs: vec![cd("uverbs3"), cd("umad3"), cd("issm3")],
                link_layer: None,
                in_other_netns: false,
            }],
            port_state: None,
            health: Health::Healthy,
        }
    }

    #[test]
    fn spec_has_char_devices_env_and_rdma_cm() {
        let d = dev();
        let mut cfg = DeviceConfig::default();
        cfg.env.insert("NCCL_IB_TC".into(), "106".into());
        let s = spec("0a1b", &[ClaimDevice { request: "rail-0", device: &d, config: &cfg }], true).unwrap();
        assert_eq!(s["cdiVersion"], "0.3.0");
        assert_eq!(s["kind"], "kuberdma.io/claim");
        assert_eq!(s["devices"][0]["name"], "pci-0000-3d-00-2_0a1b");
        let paths: Vec<&str> = s["devices"][0]["containerEdits"]["deviceNodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["/dev/infiniband/uverbs3", "/dev/infiniband/umad3", "/dev/infiniband/issm3"]);
        assert_eq!(s["devices"][0]["containerEdits"]["env"][0], "NCCL_IB_TC=106");
        assert_eq!(s["containerEdits"]["deviceNodes"][0]["path"], RDMA_CM);
        assert_eq!(s["containerEdits"]["env"][0], "KUBERDMA_RAIL_0_PCI_ADDRESSES=0000:3d:00.2");
        assert_eq!(s["containerEdits"]["env"][1], "KUBERDMA_RAIL_0_RDMA_DEVICES=mlx5_3");
        assert_eq!(device_id("pci-0000-3d-00-2", "0a1b"), "kuberdma.io/claim=pci-0000-3d-00-2_0a1b");
    }

    #[test]
    fn a_subrequests_devices_are_named_by_their_top_level_request() {
        let (a, mut b) = (dev(), dev());
        b.name = "pci-0000-3d-00-3".into();
        b.pci = "0000:3d:00.3".parse().unwrap();
        let cfg = DeviceConfig::default();
        let s = spec(
            "u",
            &[
                ClaimDevice { request: "vf/fast", device: &a, config: &cfg },
                ClaimDevice { request: "vf/fast", device: &b, config: &cfg },
            ],
            true,
        )
        .unwrap();
        assert_eq!(
            s["containerEdits"]["env"],
            json!([
                "KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2,0000:3d:00.3",
                "KUBERDMA_VF_RDMA_DEVICES=mlx5_3,mlx5_3"
            ])
        );
    }

    #[test]
    fn config_can_drop_mad_devices_and_rdma_cm() {
        let d = dev();
        let cfg = DeviceConfig { umad: false, rdma_cm: false, ..Default::default() };
        let s = spec("u", &[ClaimDevice { request: "vf", device: &d, config: &cfg }], true).unwrap();
        assert_eq!(s["devices"][0]["containerEdits"]["deviceNodes"].as_array().unwrap().len(), 1);
        assert!(s["containerEdits"].get("deviceNodes").is_none());
    }

    /// The CDI library's `Device.validate` refuses a device whose edits are
    /// empty, and `Spec.validate` a spec without devices; either takes the
    /// whole claim's spec down. Every device defined has edits, only defined
    /// devices are named, and a claim with nothing to inject has no spec.
    #[test]
    fn only_devices_with_edits_are_defined_and_a_spec_needs_one() {
        let rdma = dev();
        let mut plain = dev();
        plain.name = "pci-0000-3d-00-3".into();
        plain.pci = "0000:3d:00.3".parse().unwrap();
        plain.rdma.clear();
        let cfg = DeviceConfig::default();
        assert!(named(&rdma, &cfg) && !named(&plain, &cfg));
        let s = spec(
            "u",
            &[
                ClaimDevice { request: "vf", device: &rdma, config: &cfg },
                ClaimDevice { request: "vf", device: &plain, config: &cfg },
            ],
            true,
        )
        .unwrap();
        let devices = s["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0]["name"], "pci-0000-3d-00-2_u");
        for d in devices {
            let e = d["containerEdits"].as_object().unwrap();
            assert!(e.values().all(|v| !v.as_array().unwrap().is_empty()), "no empty edit lists: {d}");
        }
        // The spec-wide variables still list both: the container gets them
        // through the RDMA VF.
        assert_eq!(s["containerEdits"]["env"][0], "KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2,0000:3d:00.3");

        let only_plain = [ClaimDevice { request: "vf", device: &plain, config: &cfg }];
        assert_eq!(spec("u", &only_plain, true), None);
        // rdma_cm goes with RDMA devices, umad: false does not empty a device with uverbs.
        let no_mad = DeviceConfig { umad: false, ..Default::default() };
        assert!(named(&rdma, &no_mad));
        let mut mad_only = dev();
        mad_only.rdma[0].char_devs.retain(|c| c.name.starts_with("umad"));
        assert!(!named(&mad_only, &no_mad), "only MAD devices, and the config drops them");
        let env = DeviceConfig { env: [("A".to_string(), "1".to_string())].into(), ..Default::default() };
        let s = spec("u", &[ClaimDevice { request: "vf", device: &plain, config: &env }], true).unwrap();
        assert!(s["containerEdits"].get("deviceNodes").is_none(), "no rdma_cm without RDMA: {s}");
        assert_eq!(s["containerEdits"]["env"], json!(["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.3"]));
    }
}
