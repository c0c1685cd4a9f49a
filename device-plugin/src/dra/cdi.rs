//! One CDI spec per prepared claim (CDI `SPEC.md`), written before the
//! kubelet gets the CDI device IDs and removed at unprepare.
//!
//! - kind `kuberdma.io/claim`; one CDI device per prepared VF, named
//!   `<device>_<claim uid>` (`pci-0000-3d-00-2_6f1c…`): unique per claim, and
//!   starting with a letter, so the spec needs no more than cdiVersion 0.3.0
//!   (0.5.0 is needed for names that start with a digit; podman 4.3 and
//!   containerd 1.7 read 0.3.0 specs);
//! - a device's edits, what device plugin mode hands a container for the VF:
//!   its RDMA char devices (`uverbsN`, and `umadN`/`issmN` unless the
//!   request's config says `umad: false`) when its pool hands them out (always
//!   in our format, only with `isRdma: true` in sriov-network-device-plugin's),
//!   `/dev/vfio/vfio` and `/dev/vfio/<group>` for a VF bound to vfio-pci, plus
//!   the request's extra env. Every device is defined and handed to the
//!   kubelet: the CDI library refuses a device with empty edits ("invalid
//!   device, empty device edits", container-device-interface
//!   `pkg/cdi/device.go`) and with it the whole spec, so a device with none of
//!   those (a netdevice VF without RDMA) carries its request's
//!   `KUBERDMA_<REQUEST>_PCI_ADDRESSES`, the counterpart of the `PCIDEVICE_*`
//!   variable device plugin mode gives it;
//! - spec-wide edits (applied whenever any device of the claim is used):
//!   `rdma_cm` when a device hands out RDMA devices and its request wants it,
//!   and per request `KUBERDMA_<REQUEST>_PCI_ADDRESSES` and
//!   `KUBERDMA_<REQUEST>_RDMA_DEVICES` (top-level request names, the ones
//!   containers use, upper-cased, `-` as `_`: a `firstAvailable` subrequest
//!   `vf/fast` sets `KUBERDMA_VF_...`, so a program reads the same name
//!   whichever alternative the scheduler chose); a variable with nothing to
//!   list (`_RDMA_DEVICES` of VFs whose RDMA devices are not handed out) is
//!   left out rather than set empty.
//!
//! Paths are the node's `/dev/...`, never the roots we read from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nic::prepared::PreparedClaim;
use plumbing::atomic_file::FileError;

use super::claimconfig::DeviceConfig;
use super::devices::{DraDevice, View};
use super::request::top_level_request;
use crate::allocate::device_nodes;
use crate::cdi::{CdiDevice, Edits};
use crate::names::env_part;
use crate::RDMA_CM;

/// CDI kind of claim devices.
pub const KIND: &str = "kuberdma.io/claim";

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

/// The RDMA devices of `d` a container gets.
fn handed_out(d: &DraDevice) -> &[crate::pools::RdmaInfo] {
    if d.hands_out_rdma {
        &d.rdma
    } else {
        &[]
    }
}

fn pci_env(request: &str, pcis: &[String]) -> String {
    format!("KUBERDMA_{}_PCI_ADDRESSES={}", env_part(request), pcis.join(","))
}

/// A claim's CDI spec: its devices, in the claim's order, and the edits
/// every container using any of them gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSpec {
    /// One per prepared device.
    pub devices: Vec<CdiDevice>,
    /// Spec-wide edits.
    pub container_edits: Edits,
}

impl ClaimSpec {
    /// The file's bytes ([`crate::cdi::file`]); `None` without devices.
    pub fn file(&self) -> Option<Vec<u8>> {
        crate::cdi::file(KIND, Some(&self.container_edits), self.devices.iter().collect())
    }
}

/// The spec of one claim; `None` for a claim without devices of ours.
pub fn spec(claim_uid: &str, devices: &[ClaimDevice], rdma_cm_on_node: bool) -> Option<ClaimSpec> {
    if devices.is_empty() {
        return None;
    }
    let mut per_request: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for cd in devices {
        let (pcis, rdmas) = per_request.entry(top_level_request(cd.request)).or_default();
        pcis.push(cd.device.pci.to_string());
        rdmas.extend(handed_out(cd.device).iter().map(|r| r.name.clone()));
    }
    let cdi_devices = devices
        .iter()
        .map(|cd| {
            let d = cd.device;
            let nodes = device_nodes(handed_out(d), d.vfio.as_ref(), cd.config.umad);
            let mut env: Vec<String> = cd.config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if nodes.is_empty() && env.is_empty() {
                // Empty edits would take the whole spec down (module doc); the
                // same value as the spec-wide variable, so setting it twice is harmless.
                let req = top_level_request(cd.request);
                let pcis = per_request.get(req).map(|(p, _)| p.as_slice()).unwrap_or_default();
                env.push(pci_env(req, pcis));
            }
            CdiDevice { container_edits: Edits::of(nodes, env), name: device_name(&d.name, claim_uid) }
        })
        .collect();
    let mut env = Vec::new();
    for (req, (pcis, rdmas)) in &per_request {
        env.push(pci_env(req, pcis));
        if !rdmas.is_empty() {
            env.push(format!("KUBERDMA_{}_RDMA_DEVICES={}", env_part(req), rdmas.join(",")));
        }
    }
    let rdma_cm =
        rdma_cm_on_node && devices.iter().any(|d| d.config.rdma_cm && !handed_out(d.device).is_empty());
    let nodes = if rdma_cm { vec![RDMA_CM.to_string()] } else { vec![] };
    Some(ClaimSpec { devices: cdi_devices, container_edits: Edits::of(nodes, env) })
}

/// The spec of a prepared claim, from its record and the node's current
/// devices (char device numbers are read again, so a spec written after a
/// reboot names the devices as they are now); `None` for a claim without
/// devices of ours.
pub fn spec_for(record: &PreparedClaim, view: &View) -> Result<Option<ClaimSpec>, String> {
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
pub fn write(dir: &Path, claim_uid: &str, spec: &ClaimSpec) -> Result<PathBuf, FileError> {
    let path = spec_path(dir, claim_uid);
    crate::cdi::put(&path, spec.file().as_deref())?;
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
    use nic::CharDev;
    use serde_json::{json, Value};

    use super::*;
    use crate::health::Health;
    use crate::pools::RdmaInfo;

    /// The spec as it is written, read back as JSON.
    fn spec(claim_uid: &str, devices: &[ClaimDevice], rdma_cm_on_node: bool) -> Option<Value> {
        let s = super::spec(claim_uid, devices, rdma_cm_on_node)?;
        Some(serde_json::from_slice(&s.file().unwrap()).unwrap())
    }

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
            hands_out_rdma: true,
            vfio: None,
            port_state: None,
            health: Health::Healthy,
        }
    }

    /// The edits of the spec's device `i`.
    fn edits(s: &Value, i: usize) -> &Value {
        &s["devices"][i]["containerEdits"]
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
    /// whole claim's spec down. Every device is defined, each with edits: one
    /// with nothing else carries its request's PCI addresses.
    #[test]
    fn every_device_is_defined_with_edits_of_its_own() {
        let rdma = dev();
        let mut plain = dev();
        plain.name = "pci-0000-3d-00-3".into();
        plain.pci = "0000:3d:00.3".parse().unwrap();
        plain.rdma.clear();
        let cfg = DeviceConfig::default();
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
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[1]["name"], "pci-0000-3d-00-3_u");
        for d in devices {
            let e = d["containerEdits"].as_object().unwrap();
            assert!(!e.is_empty() && e.values().all(|v| !v.as_array().unwrap().is_empty()), "{d}");
        }
        assert_eq!(*edits(&s, 1), json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2,0000:3d:00.3"]}));
        assert_eq!(s["containerEdits"]["env"][0], "KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2,0000:3d:00.3");

        let only_plain = [ClaimDevice { request: "vf", device: &plain, config: &cfg }];
        let s = spec("u", &only_plain, true).unwrap();
        assert_eq!(*edits(&s, 0), json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.3"]}));
        assert!(s["containerEdits"].get("deviceNodes").is_none(), "no rdma_cm without RDMA: {s}");
        assert_eq!(spec("u", &[], true), None, "no devices, no spec");
        // Only MAD devices, and the config drops them: the PCI address again.
        let no_mad = DeviceConfig { umad: false, ..Default::default() };
        let mut mad_only = dev();
        mad_only.rdma[0].char_devs.retain(|c| c.name.starts_with("umad"));
        let s =
            spec("u", &[ClaimDevice { request: "vf", device: &mad_only, config: &no_mad }], true).unwrap();
        assert_eq!(*edits(&s, 0), json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2"]}));
        let env = DeviceConfig { env: [("A".to_string(), "1".to_string())].into(), ..Default::default() };
        let s = spec("u", &[ClaimDevice { request: "vf", device: &plain, config: &env }], true).unwrap();
        assert_eq!(*edits(&s, 0), json!({"env": ["A=1"]}));
        assert_eq!(s["containerEdits"]["env"], json!(["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.3"]));
    }

    /// sriov-network-device-plugin's `isRdma` absent (or false): the VF's RDMA
    /// devices are not handed out, as in device plugin mode.
    #[test]
    fn a_pool_that_hands_out_no_rdma_gives_no_rdma_nodes_variables_or_rdma_cm() {
        let mut d = dev();
        d.hands_out_rdma = false;
        let cfg = DeviceConfig::default();
        let s = spec("u", &[ClaimDevice { request: "vf", device: &d, config: &cfg }], true).unwrap();
        assert_eq!(*edits(&s, 0), json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2"]}));
        assert_eq!(s["containerEdits"], json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.2"]}));
    }

    /// A VF bound to vfio-pci gets the VFIO container and its group, as
    /// device plugin mode's Allocate gives it.
    #[test]
    fn a_vfio_vf_gets_the_vfio_container_and_its_group() {
        let mut d = dev();
        d.rdma.clear();
        d.vfio = Some(CharDev {
            name: "45".into(),
            node_path: "/dev/vfio/45".into(),
            major_minor: None,
            present: true,
        });
        let cfg = DeviceConfig::default();
        let s = spec("u", &[ClaimDevice { request: "dpdk", device: &d, config: &cfg }], true).unwrap();
        assert_eq!(
            *edits(&s, 0),
            json!({"deviceNodes": [{"path": "/dev/vfio/vfio"}, {"path": "/dev/vfio/45"}]})
        );
        assert_eq!(s["containerEdits"], json!({"env": ["KUBERDMA_DPDK_PCI_ADDRESSES=0000:3d:00.2"]}));
    }
}
