//! What containers get, on simulated nodes: per-pool hints for multi-rail
//! jobs, no empty variables, no `rdma_cm` without RDMA devices, VFIO devices
//! for vfio-pci VFs, `additionalInfo` as sriov-network-device-plugin writes it,
//! and CDI specs whose kind, names and `cdiVersion` follow the CDI spec.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::sim;
use kube_rdma_device_plugin::allocate::container_response;
use kube_rdma_device_plugin::cdi::pool::{self as specs, cdi_devices, cdi_spec};
use kube_rdma_device_plugin::config::Config;
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
    // Nothing to inject, so no CDI device: neither named nor defined.
    assert!(r.cdi_devices.is_empty(), "{:?}", r.cdi_devices);
    assert_eq!(cdi_spec(&p[0]), None);
}

/// Regression (issue 20, defect 1): the README's sriov-network-device-plugin
/// netdevice config (`conformance/sndp/readme-intel-netdevice.json`) on an
/// E810-XXV gave 8 CDI devices with `{"deviceNodes": []}`, which the CDI
/// library refuses ("invalid device, empty device edits") and with them the
/// whole spec, so every pod of the pool failed in CreateContainer on a
/// CDI-enabled runtime. Now no device without edits is named or defined, and
/// a pool with none has no spec at all.
#[test]
fn a_netdevice_pool_without_rdma_names_no_cdi_device_and_writes_no_spec() {
    let node = sim("e810-xxv.yaml");
    let cfg = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/sndp/readme-intel-netdevice.json"),
    )
    .unwrap();
    let p = plan(&node, &cfg).remove(0);
    assert_eq!(p.resource_name(), "intel.com/intel_sriov_netdevice");
    assert_eq!(p.devices.len(), 8);
    for d in &p.devices {
        let r = container_response(&p, &ids(&[&d.id])).unwrap();
        assert!(r.cdi_devices.is_empty(), "{}: {:?}", d.id, r.cdi_devices);
        assert!(r.devices.is_empty());
    }
    assert_eq!(cdi_spec(&p), None, "a spec without devices is refused as a whole");
}

/// Every spec kube-rdma writes for the example nodes, under every pool kind,
/// passes the CDI library's rules, and Allocate names exactly the devices the
/// spec defines. A restarted daemon reads each back as its own, every device
/// standing for hardware that is on the node (what it keeps them by).
#[test]
fn every_cdi_spec_of_the_example_nodes_passes_the_cdi_library_rules() {
    let configs = [
        "pools: [{name: vfs, selectors: {vendors: [\"15b3\", \"8086\"]}}]",
        "pools: [{name: hca, mode: shared, rdmaHcaMax: 3, selectors: {vendors: [\"15b3\", \"8086\"]}}]",
        r#"{"resourceList": [{"resourceName": "net", "selectors": {"vendors": ["8086", "15b3"]}},
            {"resourceName": "rdma", "selectors": {"isRdma": true}}]}"#,
        r#"{"configList": [{"resourceName": "shared", "rdmaHcaMax": 2, "selectors": {"vendors": ["15b3", "8086"]}}]}"#,
    ];
    let mut checked = 0;
    for node in ["cx6dx-dual.yaml", "e810-xxv.yaml", "e810-c-vf-rdma.yaml", "mixed.yaml"] {
        let node = sim(node);
        for cfg in configs {
            for pool in plan(&node, cfg) {
                let spec = cdi_spec(&pool);
                let defined = match &spec {
                    Some(s) => common::cdi::validate(s)
                        .unwrap_or_else(|e| panic!("{}: {e}\n{s:#}", pool.resource_name())),
                    None => vec![],
                };
                if let Some(s) = &spec {
                    let kind = pool.config.cdi_kind();
                    let back = specs::parse_ours(&serde_json::to_vec_pretty(s).unwrap(), &kind)
                        .unwrap_or_else(|e| panic!("{kind}: {e}"))
                        .unwrap();
                    assert_eq!(back.to_value().as_ref(), Some(s), "{kind}");
                    let inv = nic::discover(&node.roots());
                    let on_node = pools::OnNode::new(&inv);
                    for (name, dev) in &back.devices {
                        let hw = specs::Hardware::of(dev);
                        assert!(hw.on(&on_node), "{kind}={name}: {hw:?} not found on the node");
                    }
                }
                for d in &pool.devices {
                    let r = container_response(&pool, &ids(&[&d.id])).unwrap();
                    let named: Vec<String> = r.cdi_devices.iter().map(|c| c.name.clone()).collect();
                    let want: Vec<String> = if defined.contains(&d.id) {
                        vec![format!("{}={}", pool.config.cdi_kind(), d.id)]
                    } else {
                        vec![]
                    };
                    assert_eq!(named, want, "{}: {}", pool.resource_name(), d.id);
                }
                checked += spec.is_some() as usize;
            }
        }
    }
    assert!(checked >= 8, "only {checked} specs checked");
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
    let spec = cdi_spec(&p).unwrap();
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

/// `PCIDEVICE_<RES>_INFO`, whole, as sriov-network-device-plugin builds it:
/// a map from device ID to one string map per info provider
/// (`pkg/resources/pool_stub.go` `GetEnvs`, `pkg/devices/api.go`
/// `GetEnvVal`): `generic` always; `rdma` for `isRdma` pools with the char
/// devices, `rdma_cm` and `rdma_dev`, the function's first RDMA device
/// (`pkg/infoprovider/rdmaInfoProvider.go`, `pkg/devices/rdma.go`
/// `GetRdmaDeviceName`); `vfio` for vfio-pci; `extra` whenever the config has
/// `additionalInfo`, `{}` for a device it names nothing for
/// (`pkg/netdevice/pciNetDevice.go`). Regression (issue 20, defect 6):
/// `rdma_dev` was lost.
#[test]
fn pcidevice_info_has_the_whole_shape_sriov_network_device_plugin_gives_it() {
    let node = sim("cx6dx-dual.yaml");
    let info = |cfg: &str, id: &[&str]| -> serde_json::Value {
        let p = plan(&node, cfg).remove(0);
        let r = container_response(&p, &ids(id)).unwrap();
        let key = format!(
            "{}_INFO",
            kube_rdma_device_plugin::names::pcidevice_env(&p.config.prefix, &p.config.name)
        );
        serde_json::from_str(&r.envs[&key]).unwrap()
    };
    let rdma = r#"{"resourceList": [{"resourceName": "r", "selectors": {"rootDevices": ["0000:3d:00.0"], "isRdma": true}}]}"#;
    assert_eq!(
        info(rdma, &["0000:3d:00.1", "0000:3d:00.2"]),
        serde_json::json!({
            "0000:3d:00.1": {
                "generic": {"deviceID": "0000:3d:00.1"},
                "rdma": {"uverbs": "/dev/infiniband/uverbs2", "umad": "/dev/infiniband/umad2",
                         "issm": "/dev/infiniband/issm2", "rdma_cm": "/dev/infiniband/rdma_cm",
                         "rdma_dev": "mlx5_2"}},
            "0000:3d:00.2": {
                "generic": {"deviceID": "0000:3d:00.2"},
                "rdma": {"uverbs": "/dev/infiniband/uverbs3", "umad": "/dev/infiniband/umad3",
                         "issm": "/dev/infiniband/issm3", "rdma_cm": "/dev/infiniband/rdma_cm",
                         "rdma_dev": "mlx5_3"}}
        })
    );
    // Our own format hands out RDMA devices too: the same entry.
    let ours = "pools: [{name: r, selectors: {rootDevices: [\"0000:3d:00.0\"]}}]";
    assert_eq!(info(ours, &["0000:3d:00.1"])["0000:3d:00.1"], info(rdma, &["0000:3d:00.1"])["0000:3d:00.1"]);
    // Without isRdma: generic only.
    let net = r#"{"resourceList": [{"resourceName": "r", "selectors": {"rootDevices": ["0000:3d:00.0"]}}]}"#;
    assert_eq!(
        info(net, &["0000:3d:00.1"]),
        serde_json::json!({"0000:3d:00.1": {"generic": {"deviceID": "0000:3d:00.1"}}})
    );
    // additionalInfo naming another device, or empty: `extra` is there, empty.
    for extra in [r#"{"0000:3d:00.2": {"k": "v"}}"#, "{}"] {
        let cfg = format!(
            r#"{{"resourceList": [{{"resourceName": "r", "additionalInfo": {extra}, "selectors": {{"rootDevices": ["0000:3d:00.0"]}}}}]}}"#
        );
        assert_eq!(
            info(&cfg, &["0000:3d:00.1"]),
            serde_json::json!({"0000:3d:00.1": {"generic": {"deviceID": "0000:3d:00.1"}, "extra": {}}}),
            "additionalInfo {extra}"
        );
    }
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
        let spec = cdi_spec(pool).unwrap();
        common::cdi::validate(&spec).unwrap();
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

/// The CDI model (`common/cdi.rs`) refuses what the library refuses.
#[test]
fn the_cdi_model_refuses_what_the_library_refuses() {
    let ok = serde_json::json!({"cdiVersion": "0.5.0", "kind": "kuberdma.io/a",
        "devices": [{"name": "0000:3d:00.2", "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs2"}]}}]});
    assert_eq!(common::cdi::validate(&ok).unwrap(), ["0000:3d:00.2"]);
    let mut empty = ok.clone();
    empty["devices"][0]["containerEdits"] = serde_json::json!({"deviceNodes": []});
    assert!(common::cdi::validate(&empty).unwrap_err().contains("empty device edits"));
    let mut none = ok.clone();
    none["devices"] = serde_json::json!([]);
    assert!(common::cdi::validate(&none).unwrap_err().contains("no devices"));
    let mut old = ok.clone();
    old["cdiVersion"] = "0.3.0".into();
    assert!(common::cdi::validate(&old).unwrap_err().contains("at least v0.5.0"));
    let mut strict = ok.clone();
    strict["devices"][0]["extra"] = 1.into();
    assert!(common::cdi::validate(&strict).unwrap_err().contains("unknown field"));
    let mut env = ok;
    env["devices"][0]["containerEdits"]["env"] = serde_json::json!(["=x"]);
    assert!(common::cdi::validate(&env).unwrap_err().contains("invalid environment variable"));
}

/// The paths of CDI device nodes.
#[cfg(feature = "dra")]
fn paths(edits: &kube_rdma_device_plugin::cdi::Edits) -> Vec<String> {
    edits.device_nodes.iter().flatten().map(|n| n.path.clone()).collect()
}

/// The MAD devices (`umadN`, `issmN`) go with a VF's RDMA device in both
/// modes, as sriov-network-device-plugin hands them out
/// (`allocate::device_nodes` says why): Allocate's DeviceSpecs, the pool's CDI
/// device and a DRA claim's CDI spec list the same nodes for the same VF, so
/// switching modes changes no container. Only a claim's `umad: false` leaves
/// them out, and nothing else.
#[cfg(feature = "dra")]
#[test]
fn a_vf_gives_its_container_the_same_device_nodes_mad_devices_included_in_both_modes() {
    use kube_rdma_device_plugin::dra::cdi::{spec, ClaimDevice};
    use kube_rdma_device_plugin::dra::claimconfig::DeviceConfig;
    use kube_rdma_device_plugin::dra::devices::{from_plan, History, PreparedDevices, View};
    let node = sim("cx6dx-dual.yaml");
    let inv = nic::discover(&node.roots());
    let cfg =
        Config::parse("pools: [{name: vfs, selectors: {vendors: [\"15b3\"]}}]", Path::new("t.yaml")).unwrap();
    let plan = pools::plan(&inv, &cfg);
    let pool = &plan.pools[0];
    let pool_specs = cdi_devices(pool, |_| true);
    let view = from_plan(&plan, &inv, History { last: &View::default(), prepared: &PreparedDevices::new() });
    assert_eq!(view.devices.len(), pool.devices.len());
    let no_mad = DeviceConfig { umad: false, ..Default::default() };
    for d in &view.devices {
        let id = d.pci.to_string();
        let allocated: Vec<String> = container_response(pool, &ids(&[&id]))
            .unwrap()
            .devices
            .into_iter()
            .map(|s| s.host_path)
            .collect();
        let kinds: Vec<&str> =
            allocated.iter().map(|p| p.trim_end_matches(|c: char| c.is_ascii_digit())).collect();
        let all = ["uverbs", "umad", "issm", "rdma_cm"].map(|c| format!("/dev/infiniband/{c}"));
        assert_eq!(kinds, all, "{id}: device plugin mode");
        let want = allocated;
        assert_eq!(paths(&pool_specs[&id].container_edits), want, "{id}: the pool's CDI device");
        let claim = |config: &DeviceConfig| {
            let s = spec("u", &[ClaimDevice { request: "vf", device: d, config }], view.rdma_cm).unwrap();
            [paths(&s.devices[0].container_edits), paths(&s.container_edits)].concat()
        };
        assert_eq!(claim(&DeviceConfig::default()), want, "{id}: DRA mode");
        let without: Vec<String> =
            want.iter().filter(|p| !p.contains("/umad") && !p.contains("/issm")).cloned().collect();
        assert_eq!(claim(&no_mad), without, "{id}: DRA mode, umad: false");
    }
}
