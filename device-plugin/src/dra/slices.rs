//! ResourceSlices of one node, as pure functions: devices → attributes →
//! slices of at most [`MAX_DEVICES_PER_SLICE`] devices, one pool named after
//! the node. Every object is checked against the API's limits before it
//! leaves here: an attribute that would break them is left out with a
//! warning, so the API server never sees an invalid slice.
//!
//! Limits and names from `k8s.io/api/resource/v1` (`types.go`):
//! `ResourceSliceMaxDevices` = 128, `ResourceSliceMaxAttributesAndCapacitiesPerDevice`
//! = 32, `DeviceAttributeMaxValueLength` = 64 (bytes: pkg/apis/resource/validation
//! checks `len()` of the Go string), `DeviceMaxIDLength` (the identifier
//! of a qualified name) = 32, `DeviceMaxDomainLength` = 63; the standard
//! attributes `resource.kubernetes.io/pciBusID` (string, `0000:3b:00.2`),
//! `resource.kubernetes.io/pcieRoot` (string, `pci0000:3a`) and
//! `resource.kubernetes.io/numaNode` (int, left out when the device has no
//! NUMA node, as k8s.io/dynamic-resource-allocation/deviceattribute does).

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use nic::LinkLayer;

use super::devices::{DraDevice, View};

/// At most this many devices per slice.
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// At most this many attributes and capacities per device.
pub const MAX_ATTRIBUTES_PER_DEVICE: usize = 32;
/// At most this many bytes (UTF-8) in a string attribute.
pub const MAX_STRING_LEN: usize = 64;

/// Our attribute domain (`kuberdma.io/<name>`).
pub const DOMAIN: &str = "kuberdma.io";
/// The standard attribute domain.
pub const STANDARD: &str = "resource.kubernetes.io";

/// Who owns the slices (the Node, so they go when it goes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// Node name: the pool name and `spec.nodeName`.
    pub name: String,
    /// Node UID, when it could be read (for the owner reference).
    pub uid: Option<String>,
}

/// RoCE readiness per PF netdev, from the node's `RdmaNodeState`.
pub type RoceReadiness = BTreeMap<String, bool>;

/// The pool content, what a generation numbers: device lists per slice.
pub type Content = Vec<Vec<Device>>;

fn string(v: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute { string: Some(v.into()), ..Default::default() }
}

fn int(v: i64) -> DeviceAttribute {
    DeviceAttribute { int: Some(v), ..Default::default() }
}

fn boolean(v: bool) -> DeviceAttribute {
    DeviceAttribute { bool: Some(v), ..Default::default() }
}

fn link_layer(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::InfiniBand => "InfiniBand",
    }
}

/// Whether `name` is a valid qualified attribute name: `<DNS subdomain, ≤ 63>/<C identifier, ≤ 32>`.
pub fn valid_qualified_name(name: &str) -> bool {
    let Some((domain, id)) = name.split_once('/') else { return false };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let id_ok = !id.is_empty()
        && id.len() <= 32
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !id.as_bytes()[0].is_ascii_digit();
    domain.len() <= 63 && domain.split('.').all(label_ok) && id_ok
}

/// The attributes of one device, checked against the limits; what had to be
/// left out is returned as warnings.
pub fn attributes(d: &DraDevice, roce: &RoceReadiness) -> (BTreeMap<String, DeviceAttribute>, Vec<String>) {
    let mut cand: Vec<(String, DeviceAttribute)> = Vec::new();
    let mut std_attr = |n: &str, v| cand.push((format!("{STANDARD}/{n}"), v));
    std_attr("pciBusID", string(d.pci.to_string()));
    if let Some(r) = &d.pcie_root {
        std_attr("pcieRoot", string(r.clone()));
    }
    if let Some(n) = d.numa {
        std_attr("numaNode", int(i64::from(n)));
    }
    let mut ours = |n: &str, v| cand.push((format!("{DOMAIN}/{n}"), v));
    ours("pool", string(d.pool.clone()));
    if let Some(v) = d.vendor {
        ours("vendorID", string(format!("{v:04x}")));
    }
    if let Some(v) = d.device_id {
        ours("deviceID", string(format!("{v:04x}")));
    }
    if let Some(n) = &d.pf_netdev {
        ours("pfName", string(n.clone()));
    }
    ours("pfPciAddress", string(d.pf.to_string()));
    if let Some(i) = d.vf_index {
        ours("vfIndex", int(i64::from(i)));
    }
    if let Some(n) = &d.netdev {
        ours("netdev", string(n.clone()));
    }
    if let Some(s) = d.link_speed_mbps {
        ours("linkSpeedMbps", int(i64::from(s)));
    }
    if let Some(l) = d.link_layer {
        ours("linkLayer", string(link_layer(l)));
    }
    if let Some(r) = d.rdma.first() {
        ours("rdmaDevice", string(r.name.clone()));
    }
    if let Some(s) = &d.port_state {
        ours("portState", string(s.clone()));
    }
    if let Some(ready) = d.pf_netdev.as_ref().and_then(|n| roce.get(n)) {
        ours("roceReady", boolean(*ready));
    }
    ours("healthy", boolean(d.health.is_healthy()));

    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    for (name, v) in cand {
        if !valid_qualified_name(&name) {
            warnings.push(format!(
                "device {}: attribute {name:?} is not a valid qualified name; left out",
                d.name
            ));
            continue;
        }
        if let Some(s) = v.string.as_ref().filter(|s| s.len() > MAX_STRING_LEN) {
            warnings.push(format!(
                "device {}: attribute {name} is {} bytes (the API's limit is {MAX_STRING_LEN}); left out",
                d.name,
                s.len()
            ));
            continue;
        }
        if out.len() == MAX_ATTRIBUTES_PER_DEVICE {
            warnings.push(format!(
                "device {}: more than {MAX_ATTRIBUTES_PER_DEVICE} attributes; {name} left out",
                d.name
            ));
            continue;
        }
        out.insert(name, v);
    }
    (out, warnings)
}

/// The pool content for `view`: devices in name order, in chunks of
/// [`MAX_DEVICES_PER_SLICE`]; an empty node is one empty slice (the pool
/// exists and is complete: nothing to allocate here).
pub fn content(view: &View, roce: &RoceReadiness) -> (Content, Vec<String>) {
    let mut warnings = Vec::new();
    let devices: Vec<Device> = view
        .devices
        .iter()
        .map(|d| {
            let (attrs, w) = attributes(d, roce);
            warnings.extend(w);
            Device { name: d.name.clone(), attributes: Some(attrs), ..Default::default() }
        })
        .collect();
    let mut chunks: Content = devices.chunks(MAX_DEVICES_PER_SLICE).map(|c| c.to_vec()).collect();
    if chunks.is_empty() {
        chunks.push(Vec::new());
    }
    (chunks, warnings)
}

/// Name of slice `index` of `node`'s pool: `<node>-rdma.kuberdma.io-<index>`,
/// a DNS subdomain; a node name too long for that (node names may be 253
/// characters) is cut and a hash of the whole name keeps it unique.
pub fn slice_name(node: &str, driver: &str, index: usize) -> String {
    let full = format!("{node}-{driver}-{index}");
    if full.len() <= 253 {
        return full;
    }
    // FNV-1a: stable across builds and platforms, which a name must be.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let tail = format!("-{h:016x}-{driver}-{index}");
    let mut keep = 253 - tail.len();
    while !node.is_char_boundary(keep) {
        keep -= 1;
    }
    let head = node[..keep].trim_end_matches(['-', '.']);
    format!("{head}{tail}")
}

/// The slice objects for `content` at `generation`.
pub fn build(node: &NodeRef, driver: &str, content: &Content, generation: i64) -> Vec<ResourceSlice> {
    let count = content.len() as i64;
    content
        .iter()
        .enumerate()
        .map(|(i, devices)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(slice_name(&node.name, driver, i)),
                owner_references: node.uid.as_ref().map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node.name.clone(),
                        uid: uid.clone(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: driver.into(),
                node_name: Some(node.name.clone()),
                pool: ResourcePool { name: node.name.clone(), generation, resource_slice_count: count },
                devices: Some(devices.clone()),
                ..Default::default()
            },
        })
        .collect()
}

/// The content of published slices of one pool, when they form a complete
/// pool of one generation: `(generation, content)` in slice-name order.
pub fn published_content(node: &str, driver: &str, slices: &[ResourceSlice]) -> Option<(i64, Content)> {
    let first = slices.first()?;
    let generation = first.spec.pool.generation;
    let count = usize::try_from(first.spec.pool.resource_slice_count).ok()?;
    if slices.len() != count
        || slices
            .iter()
            .any(|s| s.spec.pool.generation != generation || s.spec.pool.resource_slice_count != count as i64)
    {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let want = slice_name(node, driver, i);
        let s = slices.iter().find(|s| s.metadata.name.as_deref() == Some(want.as_str()))?;
        out.push(s.spec.devices.clone().unwrap_or_default());
    }
    Some((generation, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;

    fn dev(name: &str) -> DraDevice {
        DraDevice {
            name: name.into(),
            pool: "rdma_vfs".into(),
            resource: "kuberdma.io/rdma_vfs".into(),
            pci: "0000:3d:00.2".parse().unwrap(),
            pf: "0000:3d:00.0".parse().unwrap(),
            pf_netdev: Some("ens1f0np0".into()),
            vf_index: Some(1),
            vendor: Some(0x15b3),
            device_id: Some(0x101e),
            netdev: Some("ens1f0v1".into()),
            numa: Some(0),
            pcie_root: Some("pci0000:3a".into()),
            link_speed_mbps: Some(100_000),
            link_layer: Some(LinkLayer::Ethernet),
            rdma: vec![],
            hands_out_rdma: true,
            vfio: None,
            port_state: Some("ACTIVE".into()),
            health: Health::Healthy,
        }
    }

    #[test]
    fn attributes_have_standard_and_kuberdma_names_and_types() {
        let roce = RoceReadiness::from([("ens1f0np0".to_string(), true)]);
        let (a, w) = attributes(&dev("pci-0000-3d-00-2"), &roce);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(a["resource.kubernetes.io/pciBusID"].string.as_deref(), Some("0000:3d:00.2"));
        assert_eq!(a["resource.kubernetes.io/pcieRoot"].string.as_deref(), Some("pci0000:3a"));
        assert_eq!(a["resource.kubernetes.io/numaNode"].int, Some(0));
        assert_eq!(a["kuberdma.io/vendorID"].string.as_deref(), Some("15b3"));
        assert_eq!(a["kuberdma.io/linkSpeedMbps"].int, Some(100_000));
        assert_eq!(a["kuberdma.io/roceReady"].bool, Some(true));
        assert_eq!(a["kuberdma.io/healthy"].bool, Some(true));
        assert!(a.keys().all(|k| valid_qualified_name(k)));
        // Without a state for the PF, no roceReady at all (unknown is not false).
        let (a, _) = attributes(&dev("pci-0000-3d-00-2"), &RoceReadiness::new());
        assert!(!a.contains_key("kuberdma.io/roceReady"));
    }

    #[test]
    fn overlong_strings_are_left_out_with_a_warning() {
        let mut d = dev("pci-0000-3d-00-2");
        d.netdev = Some("x".repeat(65));
        let (a, w) = attributes(&d, &RoceReadiness::new());
        assert!(!a.contains_key("kuberdma.io/netdev"));
        assert!(w[0].contains("kuberdma.io/netdev") && w[0].contains("65 bytes"), "{w:?}");
        // Exactly at the limit is fine.
        d.netdev = Some("x".repeat(64));
        assert!(attributes(&d, &RoceReadiness::new()).0.contains_key("kuberdma.io/netdev"));
    }

    #[test]
    fn the_string_limit_counts_bytes_as_the_api_server_does_and_spares_the_slice() {
        // 40 characters, 80 bytes: under the limit by characters, over it by `len()`,
        // which is what the API server's validation measures.
        let mut d = dev("pci-0000-3d-00-2");
        d.rdma = vec![crate::pools::RdmaInfo {
            name: "ñ".repeat(40),
            char_devs: vec![],
            link_layer: None,
            in_other_netns: false,
        }];
        let view = View { devices: vec![d, dev("pci-0000-3d-00-3")], rdma_cm: true, withheld: vec![] };
        let (c, w) = content(&view, &RoceReadiness::new());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("pci-0000-3d-00-2")
                && w[0].contains("kuberdma.io/rdmaDevice")
                && w[0].contains("80 bytes")
        );
        // The device and its other attributes are published; only that value is left out.
        let a = c[0][0].attributes.as_ref().unwrap();
        assert!(!a.contains_key("kuberdma.io/rdmaDevice"));
        assert_eq!(a["kuberdma.io/netdev"].string.as_deref(), Some("ens1f0v1"));
        assert_eq!(c[0].len(), 2);
        for dev in &c[0] {
            for v in dev.attributes.as_ref().unwrap().values() {
                assert!(v.string.as_ref().is_none_or(|s| s.len() <= MAX_STRING_LEN));
            }
        }
    }

    #[test]
    fn qualified_names_follow_the_api_rules() {
        assert!(valid_qualified_name("kuberdma.io/roceReady"));
        assert!(!valid_qualified_name("kuberdma.io/1x"));
        assert!(!valid_qualified_name("Kuberdma.io/x"));
        assert!(!valid_qualified_name(&format!("kuberdma.io/{}", "a".repeat(33))));
        assert!(!valid_qualified_name("noslash"));
    }

    #[test]
    fn slices_hold_at_most_128_devices_and_share_one_generation() {
        let view = View {
            devices: (0..300).map(|i| dev(&format!("pci-0000-3d-{:02x}-{}", i / 8, i % 8))).collect(),
            rdma_cm: true,
            withheld: vec![],
        };
        let (c, _) = content(&view, &RoceReadiness::new());
        assert_eq!(c.iter().map(Vec::len).collect::<Vec<_>>(), vec![128, 128, 44]);
        let node = NodeRef { name: "node-a".into(), uid: Some("u".into()) };
        let s = build(&node, "rdma.kuberdma.io", &c, 7);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|s| s.spec.pool.generation == 7 && s.spec.pool.resource_slice_count == 3));
        assert_eq!(s[2].metadata.name.as_deref(), Some("node-a-rdma.kuberdma.io-2"));
        assert_eq!(published_content("node-a", "rdma.kuberdma.io", &s), Some((7, c)));
        // An incomplete pool is not a published content.
        assert_eq!(published_content("node-a", "rdma.kuberdma.io", &s[..2]), None);
        // An empty node still publishes its (empty) pool.
        let (c, _) = content(&View::default(), &RoceReadiness::new());
        assert_eq!(c, vec![Vec::<Device>::new()]);
    }

    #[test]
    fn long_node_names_give_unique_valid_slice_names() {
        let a = "n".repeat(250);
        let b = format!("{}m", "n".repeat(249));
        let (x, y) = (slice_name(&a, "rdma.kuberdma.io", 0), slice_name(&b, "rdma.kuberdma.io", 0));
        assert!(x.len() <= 253 && y.len() <= 253);
        assert_ne!(x, y);
        assert_eq!(x, slice_name(&a, "rdma.kuberdma.io", 0));
    }
}
