//! A VF moved into a pod, as the host's sysfs shows it: the `net` and
//! `infiniband` classes are namespace-tagged, so the VF's netdev and (in
//! exclusive RDMA netns mode) its RDMA device vanish from the host while the
//! function, its driver, `infiniband_verbs/uverbsN` and `/dev/infiniband/*`
//! stay. Discovery names the hidden RDMA device from its uverbs `ibdev`.
//! Also: VFIO groups, char devices that are regular files, and the one-PF walk.

use std::path::PathBuf;

use nic::discover::{discover_pf, discover_scoped, Scope};
use nic::sim::{describe, load_desc, Sim};
use nic::{discover, NetnsMode, PciAddr};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(name)
}

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

fn node(mode: NetnsMode) -> Sim {
    let mut desc = load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = mode;
    Sim::materialise(&desc).unwrap()
}

fn in_step(sim: &Sim) -> nic::Inventory {
    let inv = discover(&sim.roots());
    assert_eq!(describe(&inv), sim.summary());
    inv
}

#[test]
fn exclusive_mode_hides_netdev_and_rdma_device_but_not_the_char_devices() {
    let mut sim = node(NetnsMode::Exclusive);
    let vf = pci("0000:3d:00.2");
    let before = in_step(&sim);
    let (_, was) = before.vf(vf).unwrap();
    assert!(!was.moved_into_netns());
    sim.move_vf_into_pod(vf).unwrap();
    let r = sim.roots();
    // What the kernel hides and what it keeps.
    assert!(!r.sys("class/net/ens1f0np0v1").exists());
    assert!(!r.sys("class/infiniband/mlx5_3").exists());
    assert!(r.sys("class/infiniband_verbs/uverbs3").exists());
    assert!(r.dev("infiniband/uverbs3").exists());
    let inv = in_step(&sim);
    let (_, now) = inv.vf(vf).unwrap();
    assert!(now.netdev.is_none());
    assert_eq!(now.driver.as_deref(), Some("mlx5_core"));
    let rd = &now.rdma[0];
    assert_eq!(rd.name, "mlx5_3", "named by infiniband_verbs/uverbs3/ibdev");
    assert!(rd.in_other_netns && rd.node_guid.is_none() && rd.ports.is_empty());
    assert_eq!(rd.uverbs, was.rdma[0].uverbs);
    assert_eq!((&rd.umad, &rd.issm), (&was.rdma[0].umad, &was.rdma[0].issm));
    assert!(now.moved_into_netns());
    // A daemon restarted now has no memory: the node-wide class does not list it either.
    assert!(inv.hcas.iter().all(|h| h.rdma.name != "mlx5_3"));

    sim.return_vf_from_pod(vf).unwrap();
    let back = in_step(&sim);
    assert_eq!(back.vf(vf).unwrap().1, was);
}

#[test]
fn shared_mode_moves_only_the_netdev() {
    let mut sim = node(NetnsMode::Shared);
    let vf = pci("0000:af:00.1");
    sim.move_vf_into_pod(vf).unwrap();
    let inv = in_step(&sim);
    let (_, v) = inv.vf(vf).unwrap();
    assert!(v.netdev.is_none());
    assert!(!v.rdma[0].in_other_netns && !v.rdma[0].ports.is_empty());
    assert!(v.moved_into_netns());
    assert!(sim.move_vf_into_pod(vf).is_err(), "already in a pod");
}

#[test]
fn a_regular_file_in_dev_is_not_a_char_device() {
    let sim = node(NetnsMode::Exclusive);
    let p = sim.roots().dev("infiniband/uverbs3");
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, "231:195\n").unwrap();
    let inv = discover(&sim.roots());
    let (_, v) = inv.vf(pci("0000:3d:00.2")).unwrap();
    assert!(!v.rdma[0].uverbs.as_ref().unwrap().present);
    let rcm = sim.roots().dev("infiniband/rdma_cm");
    std::fs::remove_file(&rcm).unwrap();
    std::fs::create_dir(&rcm).unwrap();
    assert!(!discover(&sim.roots()).rdma_cm);
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
fn vfio_vfs_have_their_iommu_group_device() {
    let desc: nic::simdesc::NodeDesc = serde_yaml::from_str(VFIO_NODE).unwrap();
    let mut sim = Sim::materialise(&desc).unwrap();
    let inv = in_step(&sim);
    assert!(inv.vfio_container);
    let pf = &inv.pfs[0];
    let groups: Vec<Option<&str>> = pf.vfs.iter().map(|v| v.vfio.as_ref().map(|c| c.name.as_str())).collect();
    // Groups: PF 0, VFs 1..=4 in index order.
    assert_eq!(groups, [None, Some("2"), None, Some("4")]);
    let g = pf.vfs[1].vfio.as_ref().unwrap();
    assert_eq!(g.node_path, PathBuf::from("/dev/vfio/2"));
    assert!(g.present);
    std::fs::remove_file(sim.roots().dev("vfio/4")).unwrap();
    let inv = discover(&sim.roots());
    assert!(!inv.pfs[0].vfs[3].vfio.as_ref().unwrap().present);
    // Without an iommu_group link: a problem naming it.
    sim.set_num_vfs(pci("0000:17:00.0"), 2).unwrap();
    let link = sim.roots().sys("bus/pci/devices").join(inv.pfs[0].vfs[1].pci.to_string()).join("iommu_group");
    std::fs::remove_file(link).unwrap();
    let inv = discover(&sim.roots());
    let v = &inv.pfs[0].vfs[1];
    assert!(v.vfio.is_none());
    assert!(v.problems.iter().any(|p| p.field == "iommu_group"), "{:?}", v.problems);
}

#[test]
fn one_pf_walk_replaces_that_pf_and_nothing_else() {
    let mut sim = node(NetnsMode::Exclusive);
    let scope = Scope { gid_tables: false, ..Scope::default() };
    let mut inv = discover_scoped(&sim.roots(), scope);
    let pf1 = pci("0000:af:00.0");
    sim.set_operstate("ens1f1np1", "down").unwrap();
    sim.move_vf_into_pod(pci("0000:af:00.3")).unwrap();
    sim.set_operstate("ens1f0np0", "down").unwrap(); // on the other PF: not seen by a PF1 walk
    let part = discover_pf(&sim.roots(), scope, pf1);
    assert_eq!(part.pfs.len(), 1);
    assert_eq!(inv.pf_of_netdev("ens1f1np1v2"), Some(pf1));
    inv.replace_pf(pf1, part);
    let full = discover_scoped(&sim.roots(), scope);
    assert_eq!(inv.pf(pf1), full.pf(pf1));
    assert_ne!(inv.pf(pci("0000:3d:00.0")), full.pf(pci("0000:3d:00.0")), "PF0 was not read again");
    // A PF that went away is removed.
    assert!(discover_pf(&sim.roots(), scope, pci("0000:99:00.0")).pfs.is_empty());
    inv.replace_pf(pci("0000:3d:00.0"), discover_pf(&sim.roots(), scope, pci("0000:99:00.0")));
    assert_eq!(inv.pfs.len(), 1);
}

#[test]
fn one_function_is_read_again_in_place_after_its_link_event() {
    let mut sim = node(NetnsMode::Exclusive);
    let scope = Scope { gid_tables: false, ..Scope::default() };
    let mut inv = discover_scoped(&sim.roots(), scope);
    let (pf0, vf) = (pci("0000:3d:00.0"), pci("0000:3d:00.4"));
    assert_eq!(inv.function_of_netdev("ens1f0np0"), Some((pf0, pf0)));
    assert_eq!(inv.function_of_netdev("ens1f0np0v3"), Some((pf0, vf)));
    sim.set_operstate("ens1f0np0", "down").unwrap();
    sim.move_vf_into_pod(vf).unwrap();
    assert!(nic::discover::rescan_function(&sim.roots(), scope, &mut inv, pf0));
    assert!(nic::discover::rescan_function(&sim.roots(), scope, &mut inv, vf));
    assert_eq!(inv, discover_scoped(&sim.roots(), scope));
    // Another number of VFs cannot be patched in place.
    sim.set_num_vfs(pf0, 2).unwrap();
    let before = inv.clone();
    assert!(!nic::discover::rescan_function(&sim.roots(), scope, &mut inv, pf0));
    assert!(!nic::discover::rescan_function(&sim.roots(), scope, &mut inv, pci("0000:3d:00.5")), "gone");
    assert_eq!(inv, before, "unchanged when it says no");
}

#[test]
fn a_kept_tree_reopened_by_another_process_sees_what_moved_meanwhile() {
    // The e2e cluster's node: one process materialises the tree at a fixed path,
    // another (the agent, simsync) opens it later and changes it in place.
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("node");
    let mut desc = load_desc(example("cx6dx-dual.yaml")).unwrap();
    desc.rdma_netns_mode = NetnsMode::Exclusive;
    let vf = pci("0000:3d:00.2");
    {
        let mut first = Sim::materialise_at(&desc, &dir).unwrap();
        first.move_vf_into_pod(vf).unwrap();
    }
    assert!(dir.join("sys").exists(), "a kept tree outlives its Sim");
    let mut again = Sim::open(&dir).unwrap();
    assert_eq!(describe(&discover(&again.roots())), again.summary(), "the reopened model matches the files");
    assert!(again.move_vf_into_pod(vf).is_err(), "already in a pod: the reopened model knows");
    again.return_vf_from_pod(vf).unwrap();
    let (_, back) = discover(&again.roots()).vf(vf).map(|(p, v)| (p.clone(), v.clone())).unwrap();
    assert!(!back.moved_into_netns());
    assert!(Sim::materialise_at(&desc, &dir).is_err(), "an existing tree is never overwritten");
}
