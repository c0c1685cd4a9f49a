//! The simulated node's mutators change the tree as the kernel would, and
//! discovery follows; description errors name the file, line and field.

use std::fs;
use std::path::PathBuf;

use nic::sim::{describe, load_desc, Sim, SimError};
use nic::simdesc::DescError;
use nic::{discover, PciAddr};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(name)
}

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

fn assert_in_step(sim: &Sim) -> nic::Inventory {
    let inv = discover(&sim.roots());
    assert_eq!(describe(&inv), sim.summary());
    inv
}

#[test]
fn link_down_shows_in_netdev_and_rdma_port() {
    let mut sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    sim.set_operstate("ens1f0np0v2", "down").unwrap();
    let inv = assert_in_step(&sim);
    let (_, vf) = inv.vf(pci("0000:3d:00.3")).unwrap();
    let nd = vf.netdev.as_ref().unwrap();
    assert_eq!((nd.operstate.as_deref(), nd.speed_mbps), (Some("down"), None));
    let port = &vf.rdma[0].ports[0];
    assert_eq!((port.state.as_deref(), port.phys_state.as_deref()), (Some("DOWN"), Some("Disabled")));
    sim.set_operstate("ens1f0np0", "down").unwrap();
    assert_eq!(sim.desc().adapters[0].pfs[0].operstate, "down");
    assert_in_step(&sim);
    assert!(matches!(sim.set_operstate("nosuch0", "up"), Err(SimError::NotFound(_))));
}

#[test]
fn changing_num_vfs_renumbers_like_the_kernel() {
    let mut sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    let pf0 = pci("0000:3d:00.0");
    sim.set_num_vfs(pf0, 4).unwrap();
    let inv = assert_in_step(&sim);
    let pf = inv.pf(pf0).unwrap();
    assert_eq!((pf.num_vfs, pf.vfs.len()), (Some(4), 4));
    // Freed names and char device numbers are reused lowest-first; PF1's VFs keep theirs.
    let names: Vec<&str> = pf.vfs.iter().map(|v| v.rdma[0].name.as_str()).collect();
    assert_eq!(names, ["mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]);
    assert_eq!(inv.pf(pci("0000:af:00.0")).unwrap().vfs[0].rdma[0].name, "mlx5_10");
    assert!(!sim.roots().dev("infiniband/uverbs9").exists());
    assert!(!sim.roots().sys("class/net/ens1f0np0v7").exists());
    assert!(!sim.roots().sys("bus/pci/devices/0000:3d:01.0").exists());
    assert_eq!(load_desc(sim.path().join("node.yaml")).unwrap().adapters[0].pfs[0].vfs, 4);
    sim.set_num_vfs(pf0, 0).unwrap();
    let inv = assert_in_step(&sim);
    assert!(inv.pf(pf0).unwrap().vfs.is_empty());
    sim.set_num_vfs(pf0, 12).unwrap();
    let inv = assert_in_step(&sim);
    // 2..=9 are free again, 10..=17 belong to PF1's VFs, so the last four get 18..=21.
    assert_eq!(inv.pf(pf0).unwrap().vfs[7].rdma[0].name, "mlx5_9");
    assert_eq!(inv.pf(pf0).unwrap().vfs[11].rdma[0].name, "mlx5_21");
    match sim.set_num_vfs(pf0, 128) {
        Err(SimError::Refused(m)) => assert!(m.contains("sriov_totalvfs 127"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(sim.set_num_vfs(pci("0000:3d:00.2"), 1), Err(SimError::Refused(_))));
    assert!(matches!(sim.set_num_vfs(pci("0000:01:00.0"), 1), Err(SimError::NotFound(_))));
}

#[test]
fn netdev_moved_into_a_pod_and_back() {
    let mut sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    sim.remove_netdev("ens1f0np0v1").unwrap();
    let inv = assert_in_step(&sim);
    let (_, vf) = inv.vf(pci("0000:3d:00.2")).unwrap();
    assert!(vf.netdev.is_none());
    assert_eq!(vf.rdma[0].name, "mlx5_3", "the RDMA device stays (shared netns mode)");
    assert_eq!(vf.rdma[0].ports[0].gids.len(), 2, "IPv4 GIDs go with the address");
    assert!(matches!(sim.remove_netdev("ens1f0np0v1"), Err(SimError::NotFound(_))));
    sim.add_netdev_back("ens1f0np0v1").unwrap();
    let inv = assert_in_step(&sim);
    let (_, vf) = inv.vf(pci("0000:3d:00.2")).unwrap();
    assert_eq!(vf.netdev.as_ref().unwrap().name, "ens1f0np0v1");
    assert_eq!(vf.rdma[0].roce_v2_gid_index("ens1f0np0v1"), Some(3));
}

#[test]
fn char_devices_and_rdma_cm_can_disappear() {
    let mut sim = Sim::from_file(example("e810-xxv.yaml")).unwrap();
    sim.remove_char_dev("rdma_cm").unwrap();
    sim.remove_char_dev("uverbs1").unwrap();
    let inv = assert_in_step(&sim);
    assert!(!inv.rdma_cm);
    assert!(!inv.pfs[1].rdma[0].uverbs.as_ref().unwrap().present);
    assert!(matches!(sim.remove_char_dev("uverbs1"), Err(SimError::NotFound(_))));
    assert!(matches!(sim.remove_char_dev("../x"), Err(SimError::NotFound(_))));
}

#[test]
fn vfs_without_netdev_and_vfio_vfs_from_the_description() {
    let yaml = r#"
node: t
adapters:
  - model: connectx-6dx
    pfs:
      - bdf: "0000:3b:00.0"
        netdev: p0
        vfs: 3
        rdma: mlx5_0
        vfsWithoutNetdev: [1]
        vfsVfio: [2]
"#;
    let desc: nic::simdesc::NodeDesc = serde_yaml::from_str(yaml).unwrap();
    let mut sim = Sim::materialise(&desc).unwrap();
    let inv = assert_in_step(&sim);
    let vfs = &inv.pfs[0].vfs;
    assert!(vfs[1].netdev.is_none() && vfs[1].rdma.len() == 1);
    assert_eq!(
        (vfs[2].driver.as_deref(), vfs[2].netdev.is_none(), vfs[2].rdma.is_empty()),
        (Some("vfio-pci"), true, true)
    );
    sim.add_netdev_back("p0v1").unwrap();
    assert_in_step(&sim);
}

fn write_yaml(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let p = dir.path().join("node.yaml");
    fs::write(&p, text).unwrap();
    p
}

#[test]
fn description_errors_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_yaml(&dir, "node: x\nadapters:\n  - model: connectx-6dx\n    pfs:\n      - bdf: \"0000:3b:00.0\"\n        netdev: p0\n        vfz: 3\n");
    let e = load_desc(&p).unwrap_err();
    let msg = nic::error_chain(&e);
    assert!(matches!(e, DescError::Parse { .. }));
    assert!(msg.contains("node.yaml") && msg.contains("vfz") && msg.contains("line 7"), "{msg}");
    assert!(msg.contains("adapters[0].pfs[0]"), "{msg}");

    let p = write_yaml(&dir, "node: x\nadapters:\n  - model: connectx-6dx\n    pfs:\n      - bdf: \"0000:3b:00.0\"\n        netdev: p0\n        vfs: many\n");
    let msg = nic::error_chain(&load_desc(&p).unwrap_err());
    assert!(msg.contains("adapters[0].pfs[0].vfs") && msg.contains("line 7"), "{msg}");

    let p = write_yaml(&dir, "node: x\nadapters:\n  - model: connectx-9\n    pfs: []\n");
    assert!(nic::error_chain(&load_desc(&p).unwrap_err()).contains("connectx-9"));

    let p = write_yaml(&dir, "node: x\nadapters:\n  - model: connectx-6dx\n    pfs:\n      - {bdf: \"0000:3b:00.0/..\", netdev: p0}\n");
    assert!(nic::error_chain(&load_desc(&p).unwrap_err()).contains("not a PCI address"));

    let invalid = [
        ("- {bdf: \"0000:3b:00.0\", netdev: p0}\n      - {bdf: \"0000:3b:00.0\", netdev: p1}", "duplicate PCI address 0000:3b:00.0"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, switch: nosuch}", "unknown switch \"nosuch\""),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, vfs: 9, totalVfs: 8}", "vfs 9 > totalVfs 8"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, vfs: 2, vfsVfio: [2]}", "VF index 2 out of range"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0}\n      - {bdf: \"0000:3b:00.1\", netdev: p0}", "duplicate netdev name p0"),
        ("- {bdf: \"0000:3b:00.0\", netdev: \"a/b\"}", "not a valid interface name"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, rdma: x}\n      - {bdf: \"0000:3b:00.1\", netdev: p1, rdma: x}", "duplicate RDMA device name x"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, roce: {pfc: [9]}}", "roce.pfc: priority 9 > 7"),
        ("- {bdf: \"0000:ff:1f.0\", netdev: p0, vfs: 20}", "past bus ff"),
        ("- {bdf: \"0000:3b:00.0\", netdev: p0, totalVfs: 4294967295}\n      - {bdf: \"0000:3b:00.1\", netdev: p1, vfs: 4000000000, totalVfs: 4294967295}", "past"),
    ];
    for (pfs, want) in invalid {
        let text = format!("node: x\nadapters:\n  - model: connectx-6dx\n    pfs:\n      {pfs}\n");
        let p = write_yaml(&dir, &text);
        match load_desc(&p) {
            Err(DescError::Invalid { path, what }) => {
                assert!(path.ends_with("node.yaml"), "{path}");
                assert!(what.contains(want), "{what:?} should contain {want:?}");
            }
            other => panic!("{pfs}: {other:?}"),
        }
    }
    let nosriov = "node: x\nadapters:\n  - model: connectx-6dx-nosriov\n    pfs:\n      - {bdf: \"0000:3b:00.0\", netdev: p0, vfs: 1}\n";
    let p = write_yaml(&dir, nosriov);
    assert!(load_desc(&p).unwrap_err().to_string().contains("has no SR-IOV"));
    assert!(matches!(load_desc(dir.path().join("missing.yaml")), Err(DescError::Io { .. })));
}

#[test]
fn big_node_has_1024_vfs() {
    let d = nic::sim::big_node(8, 128);
    assert_eq!(d.adapters.iter().flat_map(|a| &a.pfs).map(|p| p.vfs).sum::<u32>(), 1024);
    nic::sim::validate(&d).unwrap();
}

#[test]
fn tree_layout_is_the_kernels() {
    use std::path::Path;
    let sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    let r = sim.roots();
    let link = |p: &str| fs::read_link(r.sys(p)).unwrap();
    let real = |p: &str| fs::canonicalize(r.sys(p)).unwrap();
    let sys = fs::canonicalize(&r.sysfs).unwrap();
    // Bus links are relative and land in the bridge hierarchy.
    assert_eq!(
        link("bus/pci/devices/0000:3d:00.0"),
        Path::new("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/0000:3c:00.0/0000:3d:00.0")
    );
    let pf = real("bus/pci/devices/0000:3d:00.0");
    assert!(fs::symlink_metadata(&pf).unwrap().is_dir());
    assert_eq!(
        fs::read_link(pf.join("driver")).unwrap(),
        Path::new("../../../../../../bus/pci/drivers/mlx5_core")
    );
    assert_eq!(fs::canonicalize(pf.join("driver")).unwrap(), sys.join("bus/pci/drivers/mlx5_core"));
    assert_eq!(fs::read_link(pf.join("virtfn0")).unwrap(), Path::new("../0000:3d:00.1"));
    assert_eq!(link("bus/pci/devices/0000:3d:00.1/physfn"), Path::new("../0000:3d:00.0"));
    assert_eq!(fs::read_to_string(pf.join("sriov_totalvfs")).unwrap(), "127\n");
    assert_eq!(fs::read_to_string(pf.join("vendor")).unwrap(), "0x15b3\n");
    // Netdev: real dir under the function, class link, `device` back to the function.
    assert_eq!(real("class/net/ens1f0np0"), pf.join("net/ens1f0np0"));
    assert_eq!(real("class/net/ens1f0np0/device"), pf);
    assert_eq!(fs::read_to_string(r.sys("class/net/ens1f0np0/device/sriov_numvfs")).unwrap(), "8\n");
    // RDMA under the mlx5 aux device, char devices beside it, class links.
    assert_eq!(real("class/infiniband/mlx5_0"), pf.join("mlx5_core.rdma.0/infiniband/mlx5_0"));
    assert!(pf.join("mlx5_core.eth.0").is_dir());
    assert_eq!(real("class/infiniband_verbs/uverbs0"), pf.join("mlx5_core.rdma.0/infiniband_verbs/uverbs0"));
    assert_eq!(fs::read_to_string(r.sys("class/infiniband_verbs/uverbs0/ibdev")).unwrap(), "mlx5_0\n");
    assert_eq!(fs::read_to_string(r.sys("class/infiniband_mad/issm0/dev")).unwrap(), "231:64\n");
    assert_eq!(fs::read_to_string(r.sys("class/infiniband/mlx5_0/ports/1/state")).unwrap(), "4: ACTIVE\n");
    assert_eq!(
        fs::read_to_string(r.sys("class/infiniband/mlx5_2/ports/1/gids/3")).unwrap(),
        "0000:0000:0000:0000:0000:ffff:c0a8:0102\n"
    );
    assert_eq!(
        fs::read_to_string(r.sys("class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent")).unwrap(),
        "0\n"
    );
    // The bundled node runs RDMA's exclusive netns mode (`netns_mode=0`, read back as N),
    // which the CNI's moves need.
    assert_eq!(fs::read_to_string(r.sys("module/ib_core/parameters/netns_mode")).unwrap(), "N\n");
    // E810: RDMA via ice.roce.N; GPU class 0x030200.
    let e810 = Sim::from_file(example("mixed.yaml")).unwrap();
    let er = e810.roots();
    let pf = fs::canonicalize(er.sys("bus/pci/devices/0000:5e:00.0")).unwrap();
    assert_eq!(
        fs::canonicalize(er.sys("class/infiniband/rocep94s0f0")).unwrap(),
        pf.join("ice.roce.0/infiniband/rocep94s0f0")
    );
    let vf = fs::canonicalize(er.sys("bus/pci/devices/0000:5e:01.1")).unwrap();
    assert!(vf.join("iavf.rdma.1/infiniband/rocep94s0f0v1").is_dir());
    assert_eq!(fs::read_to_string(er.sys("bus/pci/devices/0000:1b:00.0/class")).unwrap(), "0x030200\n");
    assert!(!er.sys("class/net/ens4f0/ecn").exists(), "no OFED sysfs on E810");
}
