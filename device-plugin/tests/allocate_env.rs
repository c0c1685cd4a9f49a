//! What containers get, on simulated nodes: per-pool hints for multi-rail
//! jobs, no empty variables, no `rdma_cm` without RDMA devices, VFIO devices
//! for vfio-pci VFs, `additionalInfo` as sriov-network-device-plugin writes it,
//! and CDI specs whose kind, names and `cdiVersion` follow the CDI spec.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::sim;
use kube_rdma_device_plugin::allocate::container_response;
use kube_rdma_device_plugin::config::Config;
use kube_rdma_device_plugin::devinfo::cdi_spec;
use kube_rdma_device_plugin::pools::{self, Pool};
use nic::sim::Sim;

fn plan(node: &Sim, cfg: &str) -> Vec<Pool> {
    let cfg = Config::parse(cfg, Path::new("test.yaml")).unwrap();
    pools::plan(&nic::discover(&node.roots()), &cfg).pools
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What the kubelet hands the container: the first value of a variable wins
/// when two Allocate answers set it (`pkg/kubelet/cm/devicemanager`).
fn merged(answers: &[HashMap<String, String>]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for a in answers {
        for (k, v) in a {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    out
}

const RAILS: &str = r#"
pools:
  - name: rail0
    selectors: {rootDevices: ["0000:3d:00.0"]}
  - name: rail1
    selectors: {rootDevices: ["0000:af:00.0"]}
"#;

#[test]
fn a_container_with_one_pool_per_rail_sees_every_rail() {
    let node = sim("cx6dx-dual.yaml");
    let p = plan(&node, RAILS);
    let a = container_response(&p[0], &ids(&["0000:3d:00.1"])).unwrap().envs;
    let b = container_response(&p[1], &ids(&["0000:af:00.1"])).unwrap().envs;
    let env = merged(&[a.clone(), b.clone()]);
    assert_eq!(env["KUBERDMA_RAIL0_RDMA_DEVICES"], "mlx5_2");
    assert_eq!(env["KUBERDMA_RAIL1_RDMA_DEVICES"], "mlx5_10");
    assert_eq!(env["KUBERDMA_RAIL0_UCX_NET_DEVICES"], "mlx5_2:1");
    assert_eq!(env["KUBERDMA_RAIL1_UCX_NET_DEVICES"], "mlx5_10:1");
    assert_eq!(env["NCCL_IB_ROCE_VERSION_NUM"], "2");
    // Every variable both answers set has the same value: nothing is lost by the merge.
    for (k, v) in &a {
        if let Some(w) = b.get(k) {
            assert_eq!(v, w, "{k} differs between rails: the kubelet would keep only rail0's");
        }
    }
    for k in ["NCCL_IB_GID_INDEX", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_IB_ADDR_FAMILY"] {
        assert!(!env.contains_key(k), "{k} is set: {env:?}");
    }
}

#[test]
fn vfs_without_rdma_get_no_rdma_cm_and_no_empty_variables() {
    let node = sim("e810-xxv.yaml");
    let p = plan(&node, "pools: [{name: plain, selectors: {vendors: [\"8086\"]}}]");
    let r = container_response(&p[0], &ids(&["0000:17:01.0"])).unwrap();
    assert!(r.devices.is_empty(), "no device node for a VF without RDMA: {:?}", r.devices);
    assert!(r.envs.values().all(|v| !v.is_empty()), "{:?}", r.envs);
    assert!(!r.envs.keys().any(|k| k.starts_with("KUBERDMA_") || k.starts_with("NCCL_")), "{:?}", r.envs);
    let info: serde_json::Value = serde_json::from_str(&r.envs["PCIDEVICE_KUBERDMA_IO_PLAIN_INFO"]).unwrap();
    assert_eq!(info, serde_json::json!({"0000:17:01.0": {"generic": {"deviceID": "0000:17:01.0"}}}));
    let spec = cdi_spec(&p[0]);
    let dev = spec["devices"].as_array().unwrap().iter().find(|d| d["name"] == "0000:17:01.0").unwrap();
    assert_eq!(dev["containerEdits"]["deviceNodes"], serde_json::json!([]));
}

/// sriov-network-device-plugin's `isRdma`: `true` filters and hands out RDMA
/// devices; `false` (its zero value) does neither.
#[test]
fn sndp_is_rdma_false_filters_nothing_and_hands_out_no_rdma() {
    let node = sim("mixed.yaml");
    let with = |v: bool| {
        plan(
            &node,
            &format!(
                "{{\"resourceList\": [{{\"resourceName\": \"r\", \"selectors\": {{\"isRdma\": {v}}}}}]}}"
            ),
        )
        .remove(0)
    };
    let off = with(false);
    let on = with(true);
    // mixed.yaml: 4 ConnectX-7 VFs and 4 E810 VFs, all with RDMA devices.
    assert_eq!(off.devices.len(), 8);
    assert_eq!(on.devices.len(), 8);
    let id = ids(&[&on.devices[0].id]);
    let r_on = container_response(&on, &id).unwrap();
    let r_off = container_response(&off, &id).unwrap();
    assert!(r_on.devices.iter().any(|d| d.host_path.contains("uverbs")));
    assert!(r_on.devices.iter().any(|d| d.host_path == "/dev/infiniband/rdma_cm"));
    assert!(r_off.devices.is_empty(), "{:?}", r_off.devices);
    let info: serde_json::Value = serde_json::from_str(&r_off.envs["PCIDEVICE_INTEL_COM_R_INFO"]).unwrap();
    assert!(info[&on.devices[0].id].get("rdma").is_none(), "{info}");
}

const VFIO_NODE: &str = r#"
node: vfio
adapters:
  - model: e810-c
    pfs:
      - bdf: "0000:17:00.0"
        netdev: ens1f0
        vfs: 4
        vfsVfio: [1, 3]
"#;

#[test]
fn vfio_vfs_get_their_group_and_the_container_device_as_upstream() {
    let desc: nic::simdesc::NodeDesc = serde_yaml::from_str(VFIO_NODE).unwrap();
    let mut node = Sim::materialise(&desc).unwrap();
    let cfg = r#"{"resourceList": [{"resourceName": "dpdk", "selectors": {"drivers": ["vfio-pci"]}}]}"#;
    let p = plan(&node, cfg).remove(0);
    let got: Vec<&str> = p.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["0000:17:01.1", "0000:17:01.3"]);
    assert!(p.devices.iter().all(|d| d.health.is_healthy()));
    let r = container_response(&p, &ids(&["0000:17:01.1"])).unwrap();
    let paths: Vec<(&str, &str)> =
        r.devices.iter().map(|d| (d.host_path.as_str(), d.container_path.as_str())).collect();
    assert_eq!(paths, [("/dev/vfio/vfio", "/dev/vfio/vfio"), ("/dev/vfio/2", "/dev/vfio/2")]);
    let info: serde_json::Value = serde_json::from_str(&r.envs["PCIDEVICE_INTEL_COM_DPDK_INFO"]).unwrap();
    assert_eq!(
        info["0000:17:01.1"],
        serde_json::json!({"generic": {"deviceID": "0000:17:01.1"}, "vfio": {"mount": "/dev/vfio/vfio", "dev-mount": "/dev/vfio/2"}})
    );
    let spec = cdi_spec(&p);
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"],
        serde_json::json!([{"path": "/dev/vfio/vfio"}, {"path": "/dev/vfio/2"}])
    );
    // A group device that is gone makes that VF Unhealthy.
    std::fs::remove_file(node.roots().dev("vfio/2")).unwrap();
    let p = plan(&node, cfg).remove(0);
    assert!(!p.device("0000:17:01.1").unwrap().health.is_healthy());
    node.set_num_vfs("0000:17:00.0".parse().unwrap(), 0).unwrap();
}

#[test]
fn additional_info_and_root_device_ranges_mean_what_they_meant() {
    let node = sim("cx6dx-dual.yaml");
    let cfg = r#"{"resourceList": [{
        "resourceName": "r",
        "additionalInfo": {"*": {"token": "all", "zone": "a"}, "0000:3d:00.2": {"token": "mine"}},
        "selectors": {"rootDevices": ["0000:3d:00.0#1-2"], "isRdma": true}}]}"#;
    let p = plan(&node, cfg).remove(0);
    let got: Vec<&str> = p.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(got, ["0000:3d:00.2", "0000:3d:00.3"], "VFs 1 and 2 of that PF");
    let r = container_response(&p, &ids(&["0000:3d:00.2", "0000:3d:00.3"])).unwrap();
    let info: serde_json::Value = serde_json::from_str(&r.envs["PCIDEVICE_INTEL_COM_R_INFO"]).unwrap();
    assert_eq!(info["0000:3d:00.2"]["extra"], serde_json::json!({"token": "mine", "zone": "a"}));
    assert_eq!(info["0000:3d:00.3"]["extra"], serde_json::json!({"token": "all", "zone": "a"}));
}

// CDI names, checked against the rules of the CDI spec (SPEC.md, "Kind" and
// "devices"), written out here independently of the code under test:
// vendor `[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]`, class `[A-Za-z][A-Za-z0-9_-]*[A-Za-z0-9]`
// (a `.` in the class needs cdiVersion 0.6.0), device `[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]`
// (a first character that is not a letter needs 0.5.0).
fn rule(s: &str, first: fn(char) -> bool, inner: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    !c.is_empty()
        && first(c[0])
        && c[c.len() - 1].is_ascii_alphanumeric()
        && c.iter().all(|x| x.is_ascii_alphanumeric() || inner.contains(*x))
}

#[test]
fn cdi_kinds_are_valid_for_every_pool_name_the_config_accepts() {
    let node = sim("mixed.yaml");
    let cfg = r#"
resourcePrefix: kuberdma.io
pools:
  - name: 100g
    selectors: {vendors: ["15b3"]}
  - name: rail.0
    selectors: {vendors: ["8086"]}
  - name: x
    resourcePrefix: 9lives.io
    mode: shared
    rdmaHcaMax: 2
    selectors: {ifNames: [ens5f0np0]}
"#;
    let p = plan(&node, cfg);
    let kinds: Vec<String> = p.iter().map(|p| p.config.cdi_kind()).collect();
    assert_eq!(kinds, ["kuberdma.io/pool-100g", "kuberdma.io/pool-rail-0", "kuberdma-9lives.io/x"]);
    for pool in &p {
        let spec = cdi_spec(pool);
        let kind = spec["kind"].as_str().unwrap();
        let (vendor, class) = kind.split_once('/').unwrap();
        assert!(rule(vendor, |c| c.is_ascii_alphabetic(), "-_."), "vendor {vendor:?}");
        assert!(rule(class, |c| c.is_ascii_alphabetic(), "-_"), "class {class:?} (0.3.0 rules)");
        let names: Vec<&str> =
            spec["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert!(!names.is_empty());
        for n in &names {
            assert!(rule(n, |c| c.is_ascii_alphanumeric(), "-_.:"), "device {n:?}");
        }
        // The lowest version those names need: digits first need 0.5.0, nothing needs 0.6.0.
        let need = if names.iter().any(|n| !n.starts_with(|c: char| c.is_ascii_alphabetic())) {
            "0.5.0"
        } else {
            "0.3.0"
        };
        assert_eq!(spec["cdiVersion"], need, "{kind}");
    }
}
