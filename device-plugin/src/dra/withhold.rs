//! Which VFs of the pools the driver must not offer: a VF already in a pod
//! that DRA did not prepare (issue 36, D11: after a switch from device plugin
//! mode with pods running, a claim was given VFs a running pod held).
//!
//! Two witnesses, each enough on its own:
//! - the kubelet's PodResources `List`: a VF whose PCI address is a device ID
//!   the kubelet assigned to a container, under any extended resource (ours,
//!   whatever prefix the config had, or another plugin's: a PCI address is one
//!   function of this node, so whoever was given it holds it);
//! - the host: a VF whose netdev or RDMA device is in another network
//!   namespace ([`away_from_host`]) while no claim this driver prepared holds
//!   it (the checkpoint is the witness of our own), since something the
//!   kubelet does not report can take a VF too.
//!
//! A VF prepared for a claim is never withheld: its claim is allocated and
//! may be prepared again (kubelet restart), and it keeps its slice entry so
//! nothing changes under running pods.
//!
//! Withheld means left out of the ResourceSlice, not published unhealthy: the
//! scheduler allocates only devices a slice lists, whatever the DeviceClass
//! selects (a `healthy` attribute guards only classes that test it), and a
//! claim already allocated keeps its allocation when a device leaves the
//! slice (the allocator counts allocated devices from the claims themselves,
//! `k8s.io/dynamic-resource-allocation/structured`). A slice entry cannot say
//! why it is missing, so the driver logs it, lists it in
//! `kuberdma_dra_device_withheld` and refuses to prepare it, naming why.
//! Pure, so the rules are tested without a kubelet.

use std::collections::BTreeMap;

use nic::{Inventory, Vf};

use super::devices::{PreparedDevices, View};
pub use super::withheld::{Reason, Withheld};
use crate::api_podresources::ListPodResourcesResponse;

/// Drivers that hand a VF to userspace: such a VF never has a netdev.
const USERSPACE_DRIVERS: [&str; 4] = ["vfio-pci", "uio_pci_generic", "igb_uio", "pci-stub"];

/// Who the kubelet assigned a device ID to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The extended resource.
    pub resource: String,
    /// `namespace/name` of the pod.
    pub pod: String,
}

/// Device IDs the kubelet assigned to containers, with who holds each.
pub type Holders = BTreeMap<String, Holder>;

/// The device-plugin assignments in a PodResources `List` answer (DRA claims,
/// listed as `dynamic_resources`, are not device plugin assignments).
pub fn holders(resp: &ListPodResourcesResponse) -> Holders {
    let mut out = Holders::new();
    for pod in &resp.pod_resources {
        let who = format!("{}/{}", pod.namespace, pod.name);
        for d in pod.containers.iter().flat_map(|c| &c.devices) {
            for id in &d.device_ids {
                out.entry(id.clone())
                    .or_insert_with(|| Holder { resource: d.resource_name.clone(), pod: who.clone() });
            }
        }
    }
    out
}

/// What PodResources said last: the holders of its last answer (kept when a
/// later call fails, so a VF is not offered because the kubelet did not
/// answer), and the last call's error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletWitness {
    /// From the last answer.
    pub holders: Holders,
    /// Whether the kubelet ever answered.
    pub answered: bool,
    /// The last call's error (`None`: it answered).
    pub error: Option<String>,
}

impl KubeletWitness {
    /// After a call that answered `holders`.
    pub fn answer(holders: Holders) -> Self {
        KubeletWitness { holders, answered: true, error: None }
    }

    /// After a call that failed with `error`: the last answer stays.
    pub fn failed(&self, error: String) -> Self {
        KubeletWitness { holders: self.holders.clone(), answered: self.answered, error: Some(error) }
    }
}

/// The VF's netdev or RDMA device is in another network namespace: its
/// function and driver are on the host, but the netdev a network driver
/// always creates is not (or its RDMA device is only seen through its char
/// devices). A VF bound to a userspace driver has no netdev to move.
pub fn away_from_host(vf: &Vf) -> bool {
    if vf.moved_into_netns() || vf.rdma.iter().any(|r| r.in_other_netns) {
        return true;
    }
    vf.netdev.is_none() && vf.driver.as_deref().is_some_and(|d| !USERSPACE_DRIVERS.contains(&d))
}

/// Moves the devices of `view` that must not be offered into its `withheld`
/// list: a VF the kubelet lists under `holders`, or one [`away_from_host`]
/// in `inv`, unless `prepared` holds it.
pub fn apply(mut view: View, inv: &Inventory, prepared: &PreparedDevices, holders: &Holders) -> View {
    let mut kept = Vec::with_capacity(view.devices.len());
    view.withheld.clear();
    for d in view.devices {
        let reason = if prepared.contains_key(&d.name) {
            None
        } else if let Some(h) = holders.get(&d.pci.to_string()) {
            Some(Reason::DevicePlugin { resource: h.resource.clone(), pod: h.pod.clone() })
        } else if inv.vf(d.pci).is_some_and(|(_, vf)| away_from_host(vf)) {
            Some(Reason::InNetns)
        } else {
            None
        };
        match reason {
            Some(reason) => view.withheld.push(Withheld {
                name: d.name.clone(),
                pci: d.pci,
                resource: d.resource.clone(),
                reason,
            }),
            None => kept.push(d),
        }
    }
    view.devices = kept;
    view
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::api_podresources::{ContainerDevices, ContainerResources, PodResources};
    use crate::config::Config;
    use crate::dra::devices::{self, History, Recorded};
    use nic::PciAddr;

    fn pci(s: &str) -> PciAddr {
        s.parse().unwrap()
    }

    fn sim(mode: nic::NetnsMode) -> nic::sim::Sim {
        let mut desc = nic::sim::load_desc(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes/cx6dx-dual.yaml"),
        )
        .unwrap();
        desc.rdma_netns_mode = mode;
        desc.adapters[0].pfs[1].vfs_vfio = vec![7];
        nic::sim::Sim::materialise(&desc).unwrap()
    }

    fn view_of(inv: &Inventory) -> View {
        let cfg = Config::parse(
            r#"{"resourceList": [{"resourceName": "rdma", "selectors": {"pfNames": ["ens1f0np0"]}},
                                 {"resourceName": "vfio", "selectors": {"drivers": ["vfio-pci"]}}]}"#,
            Path::new("c.json"),
        )
        .unwrap();
        let plan = crate::pools::plan(inv, &cfg);
        devices::from_plan(&plan, inv, History { last: &View::default(), prepared: &PreparedDevices::new() })
    }

    fn held(id: &str, resource: &str, pod: &str) -> Holders {
        Holders::from([(id.to_string(), Holder { resource: resource.into(), pod: pod.into() })])
    }

    fn recorded(p: &str) -> Recorded {
        Recorded { pci: pci(p), netdev: None, rdma: vec![], port_state: None }
    }

    #[test]
    fn a_vf_the_kubelet_assigned_is_withheld_naming_pod_and_resource_even_on_the_host() {
        let sim = sim(nic::NetnsMode::Shared);
        let inv = nic::discover::discover(&sim.roots());
        let all = view_of(&inv).devices.len();
        let v =
            apply(view_of(&inv), &inv, &PreparedDevices::new(), &held("0000:3d:00.2", "intel.com/x", "ns/p"));
        assert_eq!(v.devices.len(), all - 1);
        assert!(v.device("pci-0000-3d-00-2").is_none());
        assert_eq!(
            v.withheld,
            [Withheld {
                name: "pci-0000-3d-00-2".into(),
                pci: pci("0000:3d:00.2"),
                resource: "intel.com/rdma".into(),
                reason: Reason::DevicePlugin { resource: "intel.com/x".into(), pod: "ns/p".into() },
            }]
        );
        assert!(v.withheld[0].reason.to_string().contains("pod ns/p as intel.com/x"));
    }

    #[test]
    fn a_vf_in_a_netns_is_withheld_unless_a_prepared_claim_holds_it() {
        for mode in [nic::NetnsMode::Shared, nic::NetnsMode::Exclusive] {
            let mut sim = sim(mode);
            sim.move_vf_into_pod(pci("0000:3d:00.1")).unwrap();
            sim.move_vf_into_pod(pci("0000:3d:00.3")).unwrap();
            let inv = nic::discover::discover(&sim.roots());
            let prepared =
                PreparedDevices::from([("pci-0000-3d-00-3".to_string(), recorded("0000:3d:00.3"))]);
            let v = apply(view_of(&inv), &inv, &prepared, &Holders::new());
            let names: Vec<(&str, &str)> =
                v.withheld.iter().map(|w| (w.name.as_str(), w.reason.label())).collect();
            assert_eq!(names, [("pci-0000-3d-00-1", "netns")], "{mode:?}");
            assert!(v.device("pci-0000-3d-00-3").is_some(), "prepared: published ({mode:?})");
            // The kubelet's word does not take a VF our own claim holds either.
            let v = apply(view_of(&inv), &inv, &prepared, &held("0000:3d:00.3", "kuberdma.io/rdma", "ns/p"));
            assert!(v.device("pci-0000-3d-00-3").is_some(), "{mode:?}");
        }
    }

    #[test]
    fn a_vf_on_the_host_or_bound_to_vfio_is_offered() {
        let sim = sim(nic::NetnsMode::Exclusive);
        let inv = nic::discover::discover(&sim.roots());
        let v = apply(view_of(&inv), &inv, &PreparedDevices::new(), &Holders::new());
        assert!(v.withheld.is_empty(), "{:?}", v.withheld);
        assert!(v.device("pci-0000-af-01-0").is_some_and(|d| d.vfio.is_some()), "the vfio-pci VF");
        let vfio = inv.vf(pci("0000:af:01.0")).unwrap().1;
        assert!(vfio.netdev.is_none() && !away_from_host(vfio));
    }

    #[test]
    fn holders_are_the_device_plugin_assignments_of_the_answer() {
        let dev = |r: &str, ids: &[&str]| ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        };
        let resp = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    devices: vec![dev("kuberdma.io/rdma_vfs", &["0000:3d:00.1", "0000:3d:00.2"])],
                    ..Default::default()
                }],
            }],
        };
        let h = holders(&resp);
        assert_eq!(h.len(), 2);
        assert_eq!(h["0000:3d:00.2"], Holder { resource: "kuberdma.io/rdma_vfs".into(), pod: "ns/p".into() });
        let w = KubeletWitness::answer(h.clone()).failed("gone".into());
        assert_eq!((w.holders, w.answered, w.error.as_deref()), (h, true, Some("gone")));
    }
}
