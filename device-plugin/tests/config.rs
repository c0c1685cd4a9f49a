//! Config files: every bad file in `tests/configs/bad/` with its error, and
//! the SNDP / RSDP example configs parsed and pooled as those projects
//! document them, on simulated nodes.

mod common;

use std::path::{Path, PathBuf};

use common::sim;
use kube_rdma_device_plugin::config::{Config, Format, Mode};
use kube_rdma_device_plugin::{allocate, pools};

fn cfg_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs")
}

/// (file, substrings the error must contain). Every error names the file;
/// field errors name the pool and the field.
const BAD: &[(&str, &[&str])] = &[
    ("not-yaml.yaml", &["not-yaml.yaml", "not valid YAML or JSON", "line"]),
    ("no-known-top-level.yaml", &["no-known-top-level.yaml", "none of `pools`"]),
    (
        "bad-vendor.yaml",
        &[
            "bad-vendor.yaml",
            "pool \"rdma_a\"",
            "`selectors.vendors[1]`",
            "\"15bz\" is not a 4-digit hex PCI id",
        ],
    ),
    ("unknown-selector.yaml", &["pool \"rdma_a\"", "`selectors.vendor`", "unknown field", "vendors"]),
    ("bad-pfname-range.yaml", &["pool \"rdma_a\"", "`selectors.pfNames[0]`", "runs backwards"]),
    ("bad-mode.yaml", &["pool \"rdma_a\"", "`mode`", "\"exclusive\" is not one of: vf, shared"]),
    ("shared-without-max.yaml", &["pool \"hca\"", "`rdmaHcaMax`", "missing"]),
    ("bad-policy.yaml", &["pool \"rdma_a\"", "`policy`", "\"random\" is not one of: pack, spread"]),
    ("duplicate-pool.yaml", &["pool \"rdma_a\"", "`name`", "kuberdma.io/rdma_a is defined twice"]),
    ("bad-resource-name.yaml", &["pool \"#0\"", "`name`", "\"rdma/a\" is not a valid resource name"]),
    ("bad-pci-address.yaml", &["pool \"rdma_a\"", "`selectors.pciAddresses[1]`", "is not a PCI address"]),
    ("sndp-missing-name.json", &["sndp-missing-name.json", "pool \"#0\"", "`resourceName`", "missing"]),
    ("sndp-vdpa.json", &["pool \"vdpa\"", "`selectors.vdpaType`", "not served"]),
    ("sndp-accelerator.json", &["pool \"fec\"", "`deviceType`", "\"accelerator\" is not supported"]),
    ("rsdp-hca-max-negative.json", &["pool \"hca_shared\"", "`rdmaHcaMax`", "from 0 to 10000"]),
    ("bad-link-type.yaml", &["pool \"rdma_a\"", "`selectors[1].linkTypes[0]`", "\"token-ring\""]),
    ("no-selectors.yaml", &["pool \"rdma_a\"", "`selectors`", "missing"]),
    ("bad-numa.yaml", &["pool \"rdma_a\"", "`selectors.numaNodes[0]`", "expected a whole number"]),
    ("empty-pools.yaml", &["empty-pools.yaml", "no pool is defined"]),
];

#[test]
fn every_bad_config_is_rejected_with_file_pool_and_field() {
    let dir = cfg_dir().join("bad");
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(on_disk, BAD.len(), "every file in tests/configs/bad has an expectation");
    assert!(BAD.len() >= 10);
    for (file, wants) in BAD {
        let err = match Config::load(&dir.join(file)) {
            Ok(c) => panic!("{file} was accepted: {c:?}"),
            // As the binary prints it: the error and its causes.
            Err(e) => nic::error_chain(&e),
        };
        for w in *wants {
            assert!(err.contains(w), "{file}: error {err:?} lacks {w:?}");
        }
    }
}

#[test]
fn missing_file_names_the_path() {
    let e = Config::load(Path::new("/nonexistent/kube-rdma.yaml")).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/kube-rdma.yaml"), "{e}");
}

#[test]
fn sndp_config_json_is_read_unchanged_and_pooled_first_pool_wins() {
    let cfg = Config::load(&cfg_dir().join("sndp-config.json")).unwrap();
    assert_eq!(cfg.format, Format::Sndp);
    let names: Vec<String> = cfg.pools.iter().map(|p| p.resource_name()).collect();
    // SNDP's default prefix is intel.com: pods keep requesting what they requested.
    assert_eq!(
        names,
        vec![
            "nvidia.com/mlnx_sriov_rdma",
            "intel.com/sriov_netdevice_pf1_low",
            "intel.com/intel_sriov_netdevice"
        ]
    );
    let pf1 = &cfg.pools[1].selectors[0].pf_names[0];
    assert!(pf1.covers(3) && pf1.covers(6) && !pf1.covers(4));

    let node = sim("cx6dx-dual.yaml");
    let inv = nic::discover(&node.roots());
    let plan = pools::plan(&inv, &cfg);
    assert_eq!(plan.pools[0].devices.len(), 16, "all mlx5 RDMA VFs");
    assert_eq!(plan.pools[1].devices.len(), 0, "claimed by the first pool");
    // discover says who else wanted a device, and only for VFs in the pfNames range.
    let note = |dev: &str| plan.decisions.iter().find(|d| d.device == dev).unwrap().notes.join("; ");
    assert!(
        note("0000:af:00.1").contains("also selected by intel.com/sriov_netdevice_pf1_low"),
        "{}",
        note("0000:af:00.1")
    );
    assert!(note("0000:af:00.7").contains("also selected by intel.com/sriov_netdevice_pf1_low"));
    assert!(!note("0000:af:00.5").contains("also selected"), "VF index 4 is outside #0-3,6");
    assert!(!note("0000:3d:00.1").contains("also selected"), "PF0 is not ens1f1np1");
    let env = allocate::container_response(&plan.pools[0], &["0000:3d:00.1".to_string()]).unwrap().envs;
    assert_eq!(env["PCIDEVICE_NVIDIA_COM_MLNX_SRIOV_RDMA"], "0000:3d:00.1");

    let node = sim("e810-xxv.yaml");
    let inv = nic::discover(&node.roots());
    let plan = pools::plan(&inv, &cfg);
    assert_eq!(plan.pools[2].devices.len(), 8, "iavf VFs, no isRdma needed");
    let d = plan.decisions.iter().find(|d| d.device == "0000:17:01.0").unwrap();
    assert!(
        d.notes.iter().any(|n| n
            .contains("nvidia.com/mlnx_sriov_rdma: rejected by selectors.vendors [15b3]: vendor is 8086")),
        "{d:?}"
    );
    let env = allocate::container_response(&plan.pools[2], &["0000:17:01.0".to_string()]).unwrap().envs;
    assert_eq!(env["PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE"], "0000:17:01.0");
}

#[test]
fn rsdp_config_list_is_read_unchanged_as_shared_resources() {
    let cfg = Config::load(&cfg_dir().join("rsdp-config.json")).unwrap();
    assert_eq!(cfg.format, Format::Rsdp);
    assert!(cfg.pools.iter().all(|p| p.mode == Mode::SharedResource));
    assert_eq!(cfg.pools[0].resource_name(), "rdma/hca_shared_devices_a");
    assert_eq!(cfg.pools[0].rdma_hca_max, 1000);
    assert_eq!(cfg.rescan_interval, Some(std::time::Duration::from_secs(300)), "periodicUpdateInterval");
    let node = sim("mixed.yaml");
    let inv = nic::discover(&node.roots());
    let plan = pools::plan(&inv, &cfg);
    // rdmaHcaMax counts IDs of the resource ("0" … "999"); each hands out every selected device.
    let a = &plan.pools[0];
    assert_eq!(a.devices.len(), 1000);
    assert!(a.device("0").is_some() && a.device("999").is_some() && a.device("1000").is_none());
    let names = |d: &pools::Device| d.rdma.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    assert!(a.devices.iter().all(|d| names(d) == ["mlx5_1"]), "pool a: the HCA by ifNames");
    // Pool b: every mlx5 Ethernet function with an RDMA device — the ConnectX-7 PF, its
    // VFs, and the HCA pool a also took: a shared device is in every resource that selects it.
    let b = &plan.pools[1];
    assert_eq!(b.devices.len(), 500);
    let mut got = names(&b.devices[0]);
    got.sort();
    assert_eq!(got, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]);
    let hca = plan.decisions.iter().find(|d| d.kind == pools::DecisionKind::Hca).unwrap();
    assert_eq!(hca.pool.as_deref(), Some("rdma/hca_shared_devices_a"));
    assert!(hca.notes.iter().any(|n| n.contains("also in rdma/hca_shared_devices_b")), "{hca:?}");
    // E810 PF: rejected by vendor in both pools.
    let e810 = plan.decisions.iter().find(|d| d.device.starts_with("0000:5e:00.0")).unwrap();
    assert_eq!(e810.pool, None);
    // Allocate of one ID: every selected device's char devices and rdma_cm; no PCIDEVICE_ variable.
    let r = allocate::container_response(b, &["7".to_string()]).unwrap();
    assert_eq!(r.devices.iter().filter(|s| s.host_path.contains("uverbs")).count(), 6);
    assert!(r.devices.iter().any(|s| s.host_path == "/dev/infiniband/rdma_cm"));
    assert!(!r.envs.keys().any(|k| k.starts_with("PCIDEVICE_")), "{:?}", r.envs);
}

#[test]
fn native_example_splits_by_numa_with_gpu_affinity() {
    let cfg = Config::load(&cfg_dir().join("native.yaml")).unwrap();
    assert_eq!(cfg.format, Format::Native);
    let node = sim("cx6dx-dual.yaml");
    let inv = nic::discover(&node.roots());
    let plan = pools::plan(&inv, &cfg);
    assert_eq!(plan.pools[0].devices.len(), 8);
    assert!(plan.pools[0].devices.iter().all(|d| d.numa == Some(0) && d.near_gpu));
    assert_eq!(plan.pools[1].devices.len(), 8);
    let d = plan.decisions.iter().find(|d| d.device == "0000:af:00.1").unwrap();
    assert!(d.notes.iter().any(|n| n.contains("numaNodes: NUMA node is 1")), "{d:?}");
}
