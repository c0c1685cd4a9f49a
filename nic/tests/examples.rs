//! Each bundled example: discovery of the materialised tree equals the
//! description, both as a whole (`describe` vs `Sim::summary`) and on the
//! facts written out by hand here (addresses, RDMA names, uverbs, NUMA, speeds,
//! GPU affinity), so a bug shared by the simulator and discovery still shows.

use std::path::PathBuf;

use nic::sim::{describe, Sim};
use nic::{discover, GidKind, Inventory, PciAddr, RdmaVia};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(name)
}

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

fn round_trip(name: &str) -> (Sim, Inventory) {
    let sim = Sim::from_file(example(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inv = discover(&sim.roots());
    assert_eq!(describe(&inv), sim.summary(), "{name}: discovery differs from the description");
    assert!(inv.skipped.is_empty(), "{:?}", inv.skipped);
    (sim, inv)
}

#[test]
fn cx6dx_dual_discovers_as_described() {
    let (_sim, inv) = round_trip("cx6dx-dual.yaml");
    assert_eq!(inv.pfs.len(), 2);
    assert_eq!(inv.vfs().count(), 16);
    let pf0 = inv.pf(pci("0000:3d:00.0")).unwrap();
    let pf1 = inv.pf(pci("0000:af:00.0")).unwrap();
    assert_eq!(
        (pf0.vendor, pf0.device, pf0.driver.as_deref()),
        (Some(0x15b3), Some(0x101d), Some("mlx5_core"))
    );
    assert_eq!((pf0.num_vfs, pf0.total_vfs), (Some(8), Some(127)));
    assert_eq!((pf0.numa_node, pf1.numa_node), (Some(0), Some(1)));
    let nd = &pf0.netdevs[0];
    assert_eq!(
        (nd.name.as_str(), nd.speed_mbps, nd.mtu, nd.operstate.as_deref()),
        ("ens1f0np0", Some(100000), Some(9000), Some("up"))
    );
    assert_eq!(pf0.rdma[0].name, "mlx5_0");
    assert_eq!(pf0.rdma[0].via, RdmaVia::Aux("mlx5_core.rdma.0".into()));
    assert_eq!(pf1.rdma[0].name, "mlx5_1");
    // VFs: routing offset 1 after a lone PF, stride 1; names continue mlx5_N in PCI order.
    let vf_addrs: Vec<String> = pf0.vfs.iter().map(|v| v.pci.to_string()).collect();
    assert_eq!(vf_addrs[0], "0000:3d:00.1");
    assert_eq!(vf_addrs[7], "0000:3d:01.0");
    let vf0 = &pf0.vfs[0];
    assert_eq!((vf0.index, vf0.pf, vf0.device, vf0.numa_node), (0, pf0.pci, Some(0x101e), Some(0)));
    assert_eq!(vf0.netdev.as_ref().unwrap().name, "ens1f0np0v0");
    assert_eq!(vf0.rdma[0].name, "mlx5_2");
    let uv = vf0.rdma[0].uverbs.as_ref().unwrap();
    assert_eq!((uv.name.as_str(), uv.major_minor, uv.present), ("uverbs2", Some((231, 194)), true));
    assert_eq!(uv.node_path, PathBuf::from("/dev/infiniband/uverbs2"));
    assert_eq!(vf0.rdma[0].umad[0].name, "umad2");
    assert_eq!(pf1.vfs[0].rdma[0].name, "mlx5_10");
    assert_eq!(pf1.vfs[7].rdma[0].uverbs.as_ref().unwrap().name, "uverbs17");
    assert!(pf1.vfs.iter().all(|v| v.numa_node == Some(1)));
    // RoCE v2 GID with the VF's IPv4 address at index 3.
    assert_eq!(vf0.rdma[0].roce_v2_gid_index("ens1f0np0v0"), Some(3));
    let g3 = &vf0.rdma[0].ports[0].gids[3];
    assert_eq!((g3.kind, g3.ip), (GidKind::RoceV2, Some("192.168.1.2".parse().unwrap())));
    assert_eq!(vf0.rdma[0].ports[0].state.as_deref(), Some("ACTIVE"));
    // GPU behind the same switch as PF0: they share the switch upstream port and root port.
    assert_eq!(inv.gpus.len(), 1);
    let gpu = &inv.gpus[0];
    assert_eq!((gpu.pci, gpu.vendor, gpu.device), (pci("0000:3e:00.0"), 0x10de, Some(0x2330)));
    assert_eq!(gpu.upstream, vec![pci("0000:3c:01.0"), pci("0000:3b:00.0"), pci("0000:3a:00.0")]);
    assert_eq!(pf0.upstream, vec![pci("0000:3c:00.0"), pci("0000:3b:00.0"), pci("0000:3a:00.0")]);
    assert!(pf1.upstream.iter().all(|b| !gpu.upstream.contains(b)));
    assert!(inv.rdma_cm);
    assert!(inv.hcas.is_empty());
}

#[test]
fn e810_xxv_has_rdma_on_pfs_only() {
    let (_sim, inv) = round_trip("e810-xxv.yaml");
    assert_eq!(inv.pfs.len(), 2);
    let pf0 = &inv.pfs[0];
    let pf1 = &inv.pfs[1];
    assert_eq!((pf0.vendor, pf0.device, pf0.driver.as_deref()), (Some(0x8086), Some(0x159b), Some("ice")));
    assert_eq!(pf0.netdevs[0].speed_mbps, Some(25000));
    assert_eq!(pf0.rdma[0].name, "rocep23s0f0");
    assert_eq!(pf0.rdma[0].via, RdmaVia::Aux("ice.roce.0".into()));
    assert_eq!(pf1.rdma[0].via, RdmaVia::Aux("ice.roce.1".into()));
    assert!(pf0.rdma[0].umad.is_empty());
    assert_eq!(pf0.rdma[0].uverbs.as_ref().unwrap().name, "uverbs0");
    assert_eq!(pf1.rdma[0].uverbs.as_ref().unwrap().name, "uverbs1");
    // E810: VFs start on the next device number; PF1's after PF0's 64.
    let a: Vec<String> = inv.vfs().map(|v| v.pci.to_string()).collect();
    assert_eq!(
        a,
        [
            "0000:17:01.0",
            "0000:17:01.1",
            "0000:17:01.2",
            "0000:17:01.3",
            "0000:17:09.0",
            "0000:17:09.1",
            "0000:17:09.2",
            "0000:17:09.3"
        ]
    );
    for vf in inv.vfs() {
        assert_eq!((vf.device, vf.driver.as_deref()), (Some(0x1889), Some("iavf")));
        assert!(vf.rdma.is_empty(), "{} has RDMA", vf.pci);
        assert!(vf.netdev.is_some());
    }
}

#[test]
fn mixed_node_has_vf_rdma_on_e810_an_hca_and_a_gpu() {
    let (_sim, inv) = round_trip("mixed.yaml");
    assert_eq!(inv.pfs.len(), 2);
    let cx7 = inv.pf(pci("0000:1a:00.0")).unwrap();
    assert_eq!(cx7.device, Some(0x1021));
    let names: Vec<&str> = cx7.vfs.iter().map(|v| v.rdma[0].name.as_str()).collect();
    assert_eq!(names, ["mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]);
    let e810 = inv.pf(pci("0000:5e:00.0")).unwrap();
    assert_eq!(e810.device, Some(0x1592));
    let vf = &e810.vfs[2];
    assert_eq!(vf.rdma[0].name, "rocep94s0f0v2");
    assert_eq!(vf.rdma[0].via, RdmaVia::Aux("iavf.rdma.2".into()));
    assert_eq!(vf.rdma[0].uverbs.as_ref().unwrap().name, "uverbs9");
    assert_eq!(inv.hcas.len(), 1);
    let hca = &inv.hcas[0];
    assert_eq!(
        (hca.pci, hca.rdma.name.as_str(), hca.numa_node),
        (Some(pci("0000:86:00.0")), "mlx5_1", Some(1))
    );
    assert_eq!(hca.netdevs[0].name, "ens5f0np0");
    assert_eq!(inv.gpus.len(), 1);
    assert_eq!(inv.gpus[0].upstream[1..], cx7.upstream[1..]);
}

#[test]
fn node_yaml_is_written_and_parses_back() {
    let sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    let back = nic::sim::load_desc(sim.path().join("node.yaml")).unwrap();
    assert_eq!(&back, sim.desc());
    let trust = std::fs::read_to_string(sim.roots().sys("class/net/ens1f0np0/qos/trust")).unwrap();
    assert_eq!(trust.trim(), "dscp");
    let np3 = std::fs::read_to_string(sim.roots().sys("class/net/ens1f0np0/ecn/roce_np/enable/3")).unwrap();
    let np2 = std::fs::read_to_string(sim.roots().sys("class/net/ens1f0np0/ecn/roce_np/enable/2")).unwrap();
    assert_eq!((np3.trim(), np2.trim()), ("1", "0"));
    let mode =
        std::fs::read_to_string(sim.roots().sys("kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"))
            .unwrap();
    assert_eq!(mode.trim(), "RoCE v2");
}

#[test]
fn char_devices_are_real_when_root() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let sim = Sim::from_file(example("cx6dx-dual.yaml")).unwrap();
    let md = std::fs::metadata(sim.roots().dev("infiniband/uverbs2")).unwrap();
    if nix::unistd::geteuid().is_root() {
        assert!(md.file_type().is_char_device());
        let rdev = md.rdev();
        assert_eq!((nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev)), (231, 194));
    } else {
        assert!(md.is_file());
    }
}
