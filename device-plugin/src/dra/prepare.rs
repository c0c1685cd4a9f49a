//! What preparing one claim means, as a pure function: the ResourceClaim read
//! from the API, the node's devices and who holds them in → the record to
//! keep and the CDI spec to write out, or an error that names the claim and
//! why. [`super::service`] does the I/O around it.

use super::cdi;
use super::claimconfig;
use super::devices::View;
use k8s_openapi::api::resource::v1::ResourceClaim;
use nic::prepared::{PreparedClaim, PreparedDevice, VERSION};

/// The annotation Kubernetes puts on claims made from a template: the pod's
/// name for the claim (`pod.spec.resourceClaims[].name`).
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// Where the request names of results are read ([`super::request`]).
pub use super::request::top_level_request;

/// The kubelet's name for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResourceClaim {}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// Why a claim cannot be prepared. Each message is what the kubelet shows in
/// the pod's events, so it says what to look at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The claim does not exist (any more).
    #[error("{claim}: not found in the API")]
    NotFound { claim: ClaimRef },
    /// Reading it failed.
    #[error("{claim}: cannot read it: {why}")]
    Read {
        claim: ClaimRef,
        /// The API error.
        why: String,
    },
    /// A claim of that name exists with another UID (deleted and recreated).
    #[error("{claim}: the API has UID {actual} for that name (the claim was recreated)")]
    WrongUid {
        claim: ClaimRef,
        /// UID in the API.
        actual: String,
    },
    /// Something about the claim's allocation or reservation.
    #[error("{claim}: {why}")]
    Claim {
        claim: ClaimRef,
        /// What.
        why: String,
    },
    /// Our opaque config in the allocation is bad.
    #[error("{claim}: {error}")]
    Config {
        claim: ClaimRef,
        /// The entry and what is wrong with it (shown whole: the kubelet
        /// shows only this message).
        error: Box<claimconfig::ConfigError>,
    },
}

/// A prepared claim: the record and its CDI spec (none without devices).
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// What to keep (checkpoint, CNI).
    pub record: PreparedClaim,
    /// The claim's CDI spec.
    pub cdi_spec: Option<cdi::ClaimSpec>,
}

/// Plans the preparation of `claim` (as read from the API) for the kubelet's
/// request `want` on the node whose pool is `pool`. `owner(device)` tells which
/// claim holds a device already.
pub fn plan<'a>(
    want: &ClaimRef,
    claim: &ResourceClaim,
    driver: &str,
    pool: &str,
    view: &View,
    owner: impl Fn(&str) -> Option<&'a str>,
) -> Result<Prepared, PrepareError> {
    let err = |why: String| PrepareError::Claim { claim: want.clone(), why };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    if uid != want.uid {
        return Err(PrepareError::WrongUid { claim: want.clone(), actual: uid });
    }
    let status = claim.status.as_ref();
    let Some(alloc) = status.and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref()) else {
        return Err(err("not allocated yet".into()));
    };
    let pods: Vec<String> = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().unwrap_or("").is_empty())
        .map(|r| r.uid.clone())
        .collect();
    if pods.is_empty() {
        return Err(err("not reserved for any pod (status.reservedFor has no pod)".into()));
    }
    let configs = claimconfig::ours(alloc.config.as_deref().unwrap_or_default(), driver)
        .map_err(|error| PrepareError::Config { claim: want.clone(), error: Box::new(error) })?;

    let mut picked = Vec::new();
    for r in alloc.results.iter().flatten().filter(|r| r.driver == driver) {
        let what = format!("request {} device {}", r.request, r.device);
        if r.admin_access == Some(true) {
            return Err(err(format!(
                "{what}: adminAccess is not supported by {driver} (a VF is moved into one pod; it cannot be shared for monitoring)"
            )));
        }
        if r.pool != pool {
            return Err(err(format!(
                "{what}: allocated from pool {:?}, but this node's pool is {pool:?}",
                r.pool
            )));
        }
        let Some(d) = view.device(&r.device) else {
            // Allocated while it was offered, taken since: preparing it would give one VF to two pods.
            if let Some(w) = view.withheld(&r.device) {
                return Err(err(format!("{what}: withheld, not offered to claims: {}", w.reason)));
            }
            return Err(err(format!("{what}: not published by this node (gone since it was allocated?)")));
        };
        if let crate::health::Health::Unhealthy(why) = &d.health {
            return Err(err(format!("{what}: unhealthy: {why}")));
        }
        if let Some(other) = owner(&r.device).filter(|o| *o != want.uid) {
            return Err(err(format!("{what}: already prepared for claim {other}")));
        }
        if picked.iter().any(|(_, p): &(String, &super::devices::DraDevice)| p.name == d.name) {
            return Err(err(format!("{what}: allocated twice in the same claim")));
        }
        picked.push((r.request.clone(), d));
    }

    let devices = picked
        .iter()
        .map(|(req, d)| {
            let config = claimconfig::effective(&configs, req);
            // The spec defines every device (see `cdi`).
            let cdi_ids = vec![cdi::device_id(&d.name, &want.uid)];
            PreparedDevice {
                request: req.clone(),
                pool: pool.to_string(),
                device: d.name.clone(),
                pci: d.pci,
                pf: Some(d.pf),
                netdev: d.netdev.clone(),
                rdma_devices: d.rdma.iter().map(|r| r.name.clone()).collect(),
                port_state: d.port_state.clone(),
                cdi_ids,
                config,
            }
        })
        .collect();
    let record = PreparedClaim {
        version: VERSION,
        uid: want.uid.clone(),
        namespace: want.namespace.clone(),
        name: want.name.clone(),
        pod_claim_name: claim.metadata.annotations.as_ref().and_then(|a| a.get(POD_CLAIM_NAME)).cloned(),
        pods,
        devices,
    };
    let cdi_spec = cdi::spec_for(&record, view).map_err(err)?;
    Ok(Prepared { record, cdi_spec })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::devices::DraDevice;
    use crate::health::Health;
    use serde_json::json;

    /// The claim's CDI spec as written, read back as JSON.
    fn written(p: &Prepared) -> serde_json::Value {
        serde_json::from_slice(&p.cdi_spec.as_ref().unwrap().file().unwrap()).unwrap()
    }

    fn view() -> View {
        let d = |name: &str, pci: &str, health: Health| DraDevice {
            name: name.into(),
            pool: "rdma_vfs".into(),
            resource: "kuberdma.io/rdma_vfs".into(),
            pci: pci.parse().unwrap(),
            pf: "0000:3d:00.0".parse().unwrap(),
            pf_netdev: Some("ens1f0np0".into()),
            vf_index: Some(0),
            vendor: None,
            device_id: None,
            netdev: Some("ens1f0v0".into()),
            numa: Some(0),
            pcie_root: None,
            link_speed_mbps: None,
            link_layer: None,
            rdma: vec![],
            hands_out_rdma: true,
            vfio: None,
            port_state: None,
            health,
        };
        // 3d:00.2 has an RDMA device, 3d:00.3 none (nothing for a container but its netdev).
        let mut with_rdma = d("pci-0000-3d-00-2", "0000:3d:00.2", Health::Healthy);
        with_rdma.rdma = vec![crate::pools::RdmaInfo {
            name: "mlx5_2".into(),
            char_devs: vec![nic::CharDev {
                name: "uverbs2".into(),
                node_path: "/dev/infiniband/uverbs2".into(),
                major_minor: None,
                present: true,
            }],
            link_layer: None,
            in_other_netns: false,
        }];
        View {
            devices: vec![
                with_rdma,
                d("pci-0000-3d-00-3", "0000:3d:00.3", Health::Healthy),
                d("pci-0000-3d-00-4", "0000:3d:00.4", Health::Unhealthy("PF link down".into())),
            ],
            rdma_cm: true,
            withheld: vec![crate::dra::withhold::Withheld {
                name: "pci-0000-3d-00-5".into(),
                pci: "0000:3d:00.5".parse().unwrap(),
                resource: "kuberdma.io/rdma_vfs".into(),
                reason: crate::dra::withhold::Reason::DevicePlugin {
                    resource: "kuberdma.io/rdma_vfs".into(),
                    pod: "default/dp-pod".into(),
                },
            }],
        }
    }

    fn want() -> ClaimRef {
        ClaimRef { namespace: "ns".into(), name: "pod-a-rdma-x1".into(), uid: "u1".into() }
    }

    fn claim(
        results: serde_json::Value,
        config: serde_json::Value,
        reserved: serde_json::Value,
    ) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "pod-a-rdma-x1", "namespace": "ns", "uid": "u1",
                         "annotations": {POD_CLAIM_NAME: "rdma"}},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": results, "config": config}},
                "reservedFor": reserved,
            }
        }))
        .unwrap()
    }

    fn result(request: &str, device: &str) -> serde_json::Value {
        json!({"request": request, "driver": "rdma.kuberdma.io", "pool": "node-a", "device": device})
    }

    fn pods() -> serde_json::Value {
        json!([{"resource": "pods", "name": "pod-a", "uid": "p1"}])
    }

    fn plan_it(c: &ResourceClaim, owner: Option<&'static str>) -> Result<Prepared, PrepareError> {
        plan(&want(), c, "rdma.kuberdma.io", "node-a", &view(), |_| owner)
    }

    #[test]
    fn devices_of_our_driver_are_recorded_with_pods_config_and_cdi_ids() {
        let c = claim(
            json!([result("rail0", "pci-0000-3d-00-2"),
                   {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
                   result("rail1", "pci-0000-3d-00-3")]),
            json!([{"source": "FromClaim", "requests": ["rail1"], "opaque": {"driver": "rdma.kuberdma.io",
                   "parameters": {"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig", "umad": false}}}]),
            pods(),
        );
        let p = plan_it(&c, None).unwrap();
        let r = &p.record;
        assert_eq!(r.pods, vec!["p1"]);
        assert_eq!(r.pod_claim_name.as_deref(), Some("rdma"));
        let devs: Vec<(&str, &str)> =
            r.devices.iter().map(|d| (d.request.as_str(), d.device.as_str())).collect();
        assert_eq!(devs, [("rail0", "pci-0000-3d-00-2"), ("rail1", "pci-0000-3d-00-3")]);
        assert_eq!(r.devices[0].cdi_ids, ["kuberdma.io/claim=pci-0000-3d-00-2_u1"]);
        assert!(r.devices[0].config.umad && !r.devices[1].config.umad);
        // 3d:00.3 has no RDMA device and rail1 no env: it carries its request's
        // PCI address, so that its spec entry has edits.
        assert_eq!(r.devices[1].cdi_ids, ["kuberdma.io/claim=pci-0000-3d-00-3_u1"]);
        let spec = written(&p);
        let names: Vec<&str> =
            spec["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["pci-0000-3d-00-2_u1", "pci-0000-3d-00-3_u1"]);
        assert_eq!(
            spec["devices"][1]["containerEdits"],
            json!({"env": ["KUBERDMA_RAIL1_PCI_ADDRESSES=0000:3d:00.3"]})
        );
    }

    /// Regression: a claim for a VF without RDMA got a CDI device
    /// `{"deviceNodes": [], "env": []}`, which the CDI library refuses ("invalid
    /// device, empty device edits") together with the whole spec, so
    /// containerd failed the pod's container on the unresolvable CDI ID. Then
    /// (audit) it got no spec at all, so the container lacked even the PCI
    /// address device plugin mode gives it in `PCIDEVICE_*`.
    #[test]
    fn a_vf_without_rdma_gets_its_pci_address_and_never_empty_edits() {
        let c = claim(json!([result("vf", "pci-0000-3d-00-3")]), json!([]), pods());
        let p = plan_it(&c, None).unwrap();
        assert_eq!(p.record.devices.len(), 1, "prepared: the CNI moves its netdev");
        assert_eq!(p.record.devices[0].cdi_ids, ["kuberdma.io/claim=pci-0000-3d-00-3_u1"]);
        let spec = written(&p);
        assert_eq!(
            spec["devices"][0]["containerEdits"],
            json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.3"]})
        );
        assert!(spec["containerEdits"].get("deviceNodes").is_none(), "no rdma_cm without RDMA");
        // Extra env from the claim's config is an edit of its own.
        let c = claim(
            json!([result("vf", "pci-0000-3d-00-3")]),
            json!([{"source": "FromClaim", "opaque": {"driver": "rdma.kuberdma.io",
                   "parameters": {"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig",
                                  "env": {"NCCL_IB_TC": "106"}}}}]),
            pods(),
        );
        let p = plan_it(&c, None).unwrap();
        assert_eq!(p.record.devices[0].cdi_ids, ["kuberdma.io/claim=pci-0000-3d-00-3_u1"]);
        let spec = written(&p);
        assert_eq!(spec["devices"][0]["containerEdits"], json!({"env": ["NCCL_IB_TC=106"]}));
        assert_eq!(spec["containerEdits"], json!({"env": ["KUBERDMA_VF_PCI_ADDRESSES=0000:3d:00.3"]}));
    }

    #[test]
    fn each_refusal_names_the_claim_and_the_reason() {
        let cases: Vec<(ResourceClaim, Option<&'static str>, &str)> = vec![
            (
                claim(json!([result("vf", "pci-0000-3d-00-9")]), json!([]), pods()),
                None,
                "not published by this node",
            ),
            (
                claim(json!([result("vf", "pci-0000-3d-00-4")]), json!([]), pods()),
                None,
                "unhealthy: PF link down",
            ),
            (
                claim(json!([result("vf", "pci-0000-3d-00-5")]), json!([]), pods()),
                None,
                "withheld, not offered to claims: the kubelet assigned it to pod default/dp-pod",
            ),
            (
                claim(json!([result("vf", "pci-0000-3d-00-2")]), json!([]), pods()),
                Some("u0"),
                "already prepared for claim u0",
            ),
            (
                claim(json!([result("vf", "pci-0000-3d-00-2")]), json!([]), json!([])),
                None,
                "not reserved for any pod",
            ),
            (
                claim(
                    json!([{"request": "vf", "driver": "rdma.kuberdma.io", "pool": "node-b", "device": "pci-0000-3d-00-2"}]),
                    json!([]),
                    pods(),
                ),
                None,
                "this node's pool is \"node-a\"",
            ),
            (
                claim(
                    json!([result("vf", "pci-0000-3d-00-2")]),
                    json!([{"source": "FromClass", "opaque": {"driver": "rdma.kuberdma.io", "parameters": {"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig", "mtu": 9000}}}]),
                    pods(),
                ),
                None,
                "config[0] (FromClass): unknown field `mtu`",
            ),
        ];
        for (c, owner, want_msg) in cases {
            let e = plan_it(&c, owner).unwrap_err().to_string();
            assert!(e.starts_with("ResourceClaim ns/pod-a-rdma-x1 (uid u1)") && e.contains(want_msg), "{e}");
        }
        let mut c = claim(json!([]), json!([]), pods());
        c.metadata.uid = Some("other".into());
        let e = plan_it(&c, None).unwrap_err();
        assert!(matches!(e, PrepareError::WrongUid { ref actual, .. } if actual == "other"), "{e}");
        c.metadata.uid = Some("u1".into());
        c.status = None;
        assert!(plan_it(&c, None).unwrap_err().to_string().contains("not allocated yet"));
    }

    #[test]
    fn a_subrequest_is_recorded_whole_and_answered_by_its_top_level_request() {
        let c = claim(
            json!([result("vf/fast", "pci-0000-3d-00-2")]),
            json!([{"source": "FromClaim", "requests": ["vf"], "opaque": {"driver": "rdma.kuberdma.io",
                   "parameters": {"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaDeviceConfig", "umad": false}}}]),
            pods(),
        );
        let p = plan_it(&c, None).unwrap();
        // The record keeps the subrequest: the CNI's `request` and the config match on it.
        assert_eq!(p.record.devices[0].request, "vf/fast");
        assert!(!p.record.devices[0].config.umad, "a config for `vf` covers `vf/fast`");
    }

    #[test]
    fn the_claims_own_device_is_no_conflict_and_a_claim_without_our_devices_has_no_spec() {
        let c = claim(json!([result("vf", "pci-0000-3d-00-2")]), json!([]), pods());
        assert!(plan_it(&c, Some("u1")).is_ok());
        let c = claim(json!([]), json!([]), pods());
        let p = plan_it(&c, None).unwrap();
        assert!(p.record.devices.is_empty() && p.cdi_spec.is_none());
    }
}
