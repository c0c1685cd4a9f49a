//! Damaged trees: each kind of damage gives a precise diagnostic on the device
//! it concerns (field + reason naming the path and what was found), the rest of
//! the node is still discovered, and nothing panics.

use std::fs;
use std::path::{Path, PathBuf};

use nic::sim::Sim;
use nic::{discover, GidKind, Inventory, PciAddr, Problem, RdmaVia, Roots};

const PF0: &str = "0000:3d:00.0";
const PF1: &str = "0000:af:00.0";
const VF2: &str = "0000:3d:00.3"; // VF 2 of PF0: mlx5_4, uverbs4

fn sim() -> Sim {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes/cx6dx-dual.yaml");
    Sim::from_file(p).unwrap()
}

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

/// The real directory of a function (through its bus link).
fn dev_dir(r: &Roots, bdf: &str) -> PathBuf {
    fs::canonicalize(r.sys("bus/pci/devices").join(bdf)).unwrap()
}

fn only_problem<'a>(problems: &'a [Problem], field: &str) -> &'a Problem {
    let hits: Vec<&Problem> = problems.iter().filter(|p| p.field == field).collect();
    assert_eq!(hits.len(), 1, "expected one {field:?} problem in {problems:#?}");
    hits[0]
}

fn assert_rest_is_clean(inv: &Inventory, except: &[&str]) {
    for pf in &inv.pfs {
        if !except.contains(&pf.pci.to_string().as_str()) {
            assert!(pf.problems.is_empty(), "{}: {:?}", pf.pci, pf.problems);
        }
        for vf in pf.vfs.iter().filter(|v| !except.contains(&v.pci.to_string().as_str())) {
            assert!(vf.problems.is_empty(), "{}: {:?}", vf.pci, vf.problems);
            assert!(vf.rdma.iter().all(|r| r.problems.is_empty()), "{}: {:?}", vf.pci, vf.rdma);
        }
    }
}

#[test]
fn dangling_bus_link_skips_that_device_and_flags_the_virtfn() {
    let sim = sim();
    let r = sim.roots();
    fs::remove_dir_all(dev_dir(&r, VF2)).unwrap();
    let inv = discover(&r);
    let s: Vec<_> = inv.skipped.iter().filter(|s| s.device == VF2).collect();
    assert_eq!(s.len(), 1, "{:?}", inv.skipped);
    assert!(s[0].reason.contains("dangling link") && s[0].reason.contains(VF2), "{}", s[0].reason);
    let pf = inv.pf(pci(PF0)).unwrap();
    let p = only_problem(&pf.problems, "virtfn2");
    assert!(p.reason.contains("does not exist (dangling link)") && p.reason.contains(VF2), "{}", p.reason);
    assert_eq!(pf.vfs.len(), 7);
    assert_eq!(inv.pf(pci(PF1)).unwrap().vfs.len(), 8);
    assert_rest_is_clean(&inv, &[PF0]);
}

#[test]
fn non_numeric_numa_node_is_unknown_with_the_value_found() {
    let sim = sim();
    let r = sim.roots();
    fs::write(dev_dir(&r, PF0).join("numa_node"), "abc\n").unwrap();
    let inv = discover(&r);
    let pf = inv.pf(pci(PF0)).unwrap();
    assert_eq!(pf.numa_node, None);
    let p = only_problem(&pf.problems, "numa_node");
    assert!(p.reason.contains(&format!("{PF0}/numa_node")) && p.reason.contains("\"abc\""), "{}", p.reason);
    assert!(p.reason.contains("not a decimal number"), "{}", p.reason);
    // -1 means "no NUMA affinity", not a problem.
    fs::write(dev_dir(&r, PF0).join("numa_node"), "-1\n").unwrap();
    let inv = discover(&r);
    assert!(inv.pf(pci(PF0)).unwrap().problems.is_empty());
    fs::write(dev_dir(&r, PF0).join("numa_node"), "-7\n").unwrap();
    let inv = discover(&r);
    assert!(only_problem(&inv.pf(pci(PF0)).unwrap().problems, "numa_node").reason.contains("found -7"));
    assert_rest_is_clean(&inv, &[PF0]);
}

#[test]
fn vfs_whose_pf_vanished_are_skipped_with_the_dangling_physfn() {
    let sim = sim();
    let r = sim.roots();
    fs::remove_dir_all(dev_dir(&r, PF1)).unwrap();
    fs::remove_file(r.sys("bus/pci/devices").join(PF1)).unwrap();
    let inv = discover(&r);
    assert_eq!(inv.pfs.len(), 1);
    let orphans: Vec<_> =
        inv.skipped.iter().filter(|s| s.reason.starts_with("VF whose PF vanished")).collect();
    assert_eq!(orphans.len(), 8, "{:#?}", inv.skipped);
    assert!(orphans
        .iter()
        .all(|s| s.reason.contains("physfn") && s.reason.contains(&format!("PF {PF1} not present"))));
    assert_eq!(orphans[0].device, "0000:af:00.1");
    // The PF's own RDMA device link now dangles: skipped by name; VF RDMA devices stay with their VFs.
    let mlx5_1: Vec<_> = inv.skipped.iter().filter(|s| s.device == "mlx5_1").collect();
    assert_eq!(mlx5_1.len(), 1);
    assert!(mlx5_1[0].reason.contains("dangling link"));
    assert!(inv.hcas.is_empty(), "{:#?}", inv.hcas);
    assert_eq!(inv.vfs().count(), 8);
    assert_rest_is_clean(&inv, &[]);
}

#[test]
fn virtfn_pointing_nowhere_is_a_problem_on_the_pf() {
    let mut sim = sim();
    sim.remove_vf(pci("0000:3d:00.4")).unwrap(); // VF 3 of PF0
    let inv = discover(&sim.roots());
    let pf = inv.pf(pci(PF0)).unwrap();
    let p = only_problem(&pf.problems, "virtfn3");
    assert!(p.reason.contains("virtfn3") && p.reason.contains("0000:3d:00.4 does not exist"), "{}", p.reason);
    let idx: Vec<u32> = pf.vfs.iter().map(|v| v.index).collect();
    assert_eq!(idx, [0, 1, 2, 4, 5, 6, 7]);
    assert!(inv.skipped.is_empty(), "{:?}", inv.skipped);
    assert_rest_is_clean(&inv, &[PF0]);
}

#[test]
fn unreadable_vendor_is_unknown_but_the_vf_is_kept() {
    let sim = sim();
    let r = sim.roots();
    fs::write(dev_dir(&r, VF2).join("vendor"), "0xzz\n").unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    assert_eq!(vf.vendor, None);
    assert_eq!(vf.device, Some(0x101e));
    let p = only_problem(&vf.problems, "vendor");
    assert!(p.reason.contains(&format!("{VF2}/vendor")) && p.reason.contains("\"0xzz\""), "{}", p.reason);
    // A vendor file that cannot be read at all (a directory here) names the OS error.
    fs::remove_file(dev_dir(&r, VF2).join("vendor")).unwrap();
    fs::create_dir(dev_dir(&r, VF2).join("vendor")).unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    assert!(only_problem(&vf.problems, "vendor").reason.contains("directory"), "{:?}", vf.problems);
    assert_rest_is_clean(&inv, &[VF2]);
}

#[test]
fn missing_driver_link_means_unbound() {
    let sim = sim();
    let r = sim.roots();
    fs::remove_file(dev_dir(&r, VF2).join("driver")).unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    assert_eq!(vf.driver, None);
    let p = only_problem(&vf.problems, "driver");
    assert!(
        p.reason.contains(&format!("{VF2}/driver")) && p.reason.contains("no driver bound"),
        "{}",
        p.reason
    );
    assert_rest_is_clean(&inv, &[VF2]);
}

#[test]
fn uverbs_dir_without_ibdev_leaves_the_rdma_device_without_uverbs() {
    let sim = sim();
    let r = sim.roots();
    let uv = dev_dir(&r, VF2).join("mlx5_core.rdma.4/infiniband_verbs/uverbs4");
    fs::remove_file(uv.join("ibdev")).unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let rd = &vf.rdma[0];
    assert_eq!(rd.name, "mlx5_4");
    assert_eq!(rd.uverbs, None);
    let uverbs: Vec<&Problem> = rd.problems.iter().filter(|p| p.field == "uverbs").collect();
    assert_eq!(uverbs.len(), 2, "{:#?}", rd.problems);
    assert!(
        uverbs[0].reason.contains("uverbs4/ibdev") && uverbs[0].reason.contains("No such file"),
        "{}",
        uverbs[0].reason
    );
    assert!(
        uverbs[1].reason.contains("no infiniband_verbs/uverbsN with ibdev \"mlx5_4\""),
        "{}",
        uverbs[1].reason
    );
    // umad/issm next to it are still found.
    assert_eq!(rd.umad[0].name, "umad4");
    assert_rest_is_clean(&inv, &[VF2]);
}

#[test]
fn uverbs_is_found_through_the_class_directory_when_not_a_sibling() {
    let sim = sim();
    let r = sim.roots();
    let base = dev_dir(&r, VF2).join("mlx5_core.rdma.4");
    let moved = r.sys("devices/virtual/infiniband_verbs/uverbs4");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(base.join("infiniband_verbs/uverbs4"), &moved).unwrap();
    fs::remove_dir(base.join("infiniband_verbs")).unwrap();
    let link = r.sys("class/infiniband_verbs/uverbs4");
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("../../devices/virtual/infiniband_verbs/uverbs4", &link).unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let uv = vf.rdma[0].uverbs.as_ref().expect("found via /sys/class/infiniband_verbs");
    assert_eq!((uv.name.as_str(), uv.major_minor), ("uverbs4", Some((231, 196))));
    assert!(vf.rdma[0].problems.is_empty(), "{:?}", vf.rdma[0].problems);
}

#[test]
fn bad_gid_type_is_flagged_and_the_gid_kept_as_other() {
    let sim = sim();
    let r = sim.roots();
    let port = r.sys("class/infiniband/mlx5_4/ports/1");
    fs::write(port.join("gid_attrs/types/3"), "RoCE v9\n").unwrap();
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let rd = &vf.rdma[0];
    let p = only_problem(&rd.problems, "ports/1/gid_attrs/types/3");
    assert!(p.reason.contains("gid_attrs/types/3") && p.reason.contains("\"RoCE v9\""), "{}", p.reason);
    let g = rd.ports[0].gids.iter().find(|g| g.index == 3).unwrap();
    assert_eq!(g.kind, GidKind::Other);
    // With index 3 unusable, the RoCE v2 choice falls back to the link-local v2 GID.
    assert_eq!(rd.roce_v2_gid_index("ens1f0np0v2"), Some(1));
    assert_rest_is_clean(&inv, &[VF2]);
}

#[test]
fn netdev_dir_without_files_gives_a_problem_per_field() {
    let sim = sim();
    let r = sim.roots();
    let nd = dev_dir(&r, VF2).join("net/ens1f0np0v2");
    for e in fs::read_dir(&nd).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
    }
    let inv = discover(&r);
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let n = vf.netdev.as_ref().unwrap();
    assert_eq!(n.name, "ens1f0np0v2");
    assert_eq!(
        (n.ifindex, n.mtu, n.speed_mbps, n.mac.as_deref(), n.link_layer),
        (None, None, None, None, None)
    );
    let mut fields: Vec<&str> = n.problems.iter().map(|p| p.field.as_str()).collect();
    fields.sort();
    assert_eq!(fields, ["address", "ifindex", "mtu", "operstate", "speed", "type"]);
    assert!(n
        .problems
        .iter()
        .all(|p| p.reason.contains("ens1f0np0v2/") && p.reason.contains("No such file")));
    // The RDMA port cannot derive its MTU without the netdev's.
    assert_eq!(vf.rdma[0].ports[0].active_mtu, None);
    assert_rest_is_clean(&inv, &[VF2]);
}

#[test]
fn non_pci_entries_and_garbled_port_state_are_reported() {
    let sim = sim();
    let r = sim.roots();
    fs::create_dir(r.sys("bus/pci/devices/not-a-bdf")).unwrap();
    fs::write(r.sys("class/infiniband/mlx5_4/ports/1/state"), "ACTIVE\n").unwrap();
    fs::write(r.sys("class/infiniband/mlx5_4/ports/1/link_layer"), "Token Ring\n").unwrap();
    let inv = discover(&r);
    let s = inv.skipped.iter().find(|s| s.device == "not-a-bdf").unwrap();
    assert!(s.reason.contains("not a PCI address"));
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let port = &vf.rdma[0].ports[0];
    assert_eq!(
        (port.state.as_deref(), port.phys_state.as_deref(), port.link_layer),
        (None, Some("LinkUp"), None)
    );
    let p = only_problem(&vf.rdma[0].problems, "ports/1/state");
    assert!(p.reason.contains("expected \"N: NAME\", found \"ACTIVE\""), "{}", p.reason);
    assert!(only_problem(&vf.rdma[0].problems, "ports/1/link_layer").reason.contains("\"Token Ring\""));
}

#[test]
fn garbage_sriov_numvfs_and_a_missing_char_node() {
    let mut sim = sim();
    let r = sim.roots();
    fs::write(dev_dir(&r, PF1).join("sriov_numvfs"), "eight\n").unwrap();
    sim.remove_char_dev("uverbs4").unwrap();
    let inv = discover(&r);
    let pf1 = inv.pf(pci(PF1)).unwrap();
    assert_eq!(pf1.num_vfs, None);
    assert!(only_problem(&pf1.problems, "sriov_numvfs").reason.contains("\"eight\""));
    assert_eq!(pf1.vfs.len(), 8, "VFs still come from virtfn links");
    // A missing /dev node is a fact (present: false), not a problem.
    let (_, vf) = inv.vf(pci(VF2)).unwrap();
    let uv = vf.rdma[0].uverbs.as_ref().unwrap();
    assert!(!uv.present);
    assert_eq!(uv.node_path, Path::new("/dev/infiniband/uverbs4"));
    assert!(vf.rdma[0].problems.is_empty());
}

#[test]
fn direct_mlx5_layout_and_a_virtual_rxe_device() {
    let sim = sim();
    let r = sim.roots();
    // Older kernels: RDMA directly under the PCI function, char devices beside it.
    let pf = dev_dir(&r, PF0);
    for d in ["infiniband", "infiniband_verbs", "infiniband_mad"] {
        fs::rename(pf.join("mlx5_core.rdma.0").join(d), pf.join(d)).unwrap();
    }
    fs::remove_dir(pf.join("mlx5_core.rdma.0")).unwrap();
    // Soft-RoCE: /sys/devices/virtual/infiniband/rxe0, no `device` link, GIDs bound to a netdev.
    let rxe = r.sys("devices/virtual/infiniband/rxe0");
    let port = rxe.join("ports/1");
    fs::create_dir_all(port.join("gids")).unwrap();
    fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
    fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    fs::write(rxe.join("node_guid"), "5054:00ff:fe12:3456\n").unwrap();
    fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
    fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
    fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    fs::write(port.join("gids/0"), "fe80:0000:0000:0000:5054:00ff:fe12:3456\n").unwrap();
    fs::write(port.join("gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n").unwrap();
    fs::write(port.join("gid_attrs/types/0"), "RoCE v2\n").unwrap();
    fs::write(port.join("gid_attrs/ndevs/0"), "ens1f0np0\n").unwrap();
    std::os::unix::fs::symlink("../../devices/virtual/infiniband/rxe0", r.sys("class/infiniband/rxe0"))
        .unwrap();
    let verbs = r.sys("devices/virtual/infiniband_verbs/uverbs99");
    fs::create_dir_all(&verbs).unwrap();
    fs::write(verbs.join("ibdev"), "rxe0\n").unwrap();
    fs::write(verbs.join("dev"), "240:67\n").unwrap();
    std::os::unix::fs::symlink(
        "../../devices/virtual/infiniband_verbs/uverbs99",
        r.sys("class/infiniband_verbs/uverbs99"),
    )
    .unwrap();

    // Its umad/issm nodes too are only listed in the class directory (lab regression).
    for (n, mm) in [("umad99", "231:99"), ("issm99", "231:163")] {
        let d = r.sys("devices/virtual/infiniband_mad").join(n);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("ibdev"), "rxe0\n").unwrap();
        fs::write(d.join("port"), "1\n").unwrap();
        fs::write(d.join("dev"), format!("{mm}\n")).unwrap();
        fs::create_dir_all(r.sys("class/infiniband_mad")).unwrap();
        std::os::unix::fs::symlink(
            format!("../../devices/virtual/infiniband_mad/{n}"),
            r.sys("class/infiniband_mad").join(n),
        )
        .unwrap();
    }

    let inv = discover(&r);
    let pf = inv.pf(pci(PF0)).unwrap();
    assert_eq!(pf.rdma[0].via, RdmaVia::Direct);
    assert_eq!(pf.rdma[0].uverbs.as_ref().unwrap().name, "uverbs0");
    assert_eq!(inv.hcas.len(), 1);
    let h = &inv.hcas[0];
    assert_eq!((h.pci, &h.rdma.via, h.rdma.name.as_str()), (None, &RdmaVia::Virtual, "rxe0"));
    assert_eq!(h.rdma.ports[0].gids.len(), 1, "all-zero GIDs are left out");
    assert_eq!(h.netdevs[0].name, "ens1f0np0");
    assert_eq!(h.rdma.ports[0].active_mtu, Some(4096));
    let uv = h.rdma.uverbs.as_ref().unwrap();
    assert_eq!((uv.name.as_str(), uv.major_minor, uv.present), ("uverbs99", Some((240, 67)), false));
    assert_eq!(h.rdma.umad.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["umad99"]);
    assert_eq!(h.rdma.issm.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["issm99"]);
    assert_rest_is_clean(&inv, &[]);

    // The device plugin walks without GID tables: the netdev still comes from the
    // default GID's binding (lab regression: a shared pool on rxe listed nothing).
    let lean =
        nic::discover::discover_scoped(&r, nic::discover::Scope { gid_tables: false, ..Default::default() });
    let h = &lean.hcas[0];
    assert!(h.rdma.ports[0].gids.is_empty());
    assert_eq!(h.netdevs.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["ens1f0np0"]);
    assert_eq!(h.rdma.ports[0].active_mtu, Some(4096));
}

#[test]
fn empty_or_missing_roots_give_an_empty_inventory() {
    let dir = tempfile::tempdir().unwrap();
    let inv = discover(&Roots { sysfs: dir.path().join("nope"), dev: dir.path().join("nodev") });
    assert_eq!(inv, Inventory::default());
}

/// xorshift64 for the random-damage property below.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn all_paths(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        out.push(p.clone());
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            all_paths(&p, out);
        }
    }
}

#[test]
fn random_damage_never_panics_and_keeps_the_rest() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let desc =
        nic::sim::load_desc(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes/mixed.yaml"))
            .unwrap();
    for round in 0..30 {
        let sim = Sim::materialise(&desc).unwrap();
        let r = sim.roots();
        let mut paths = vec![];
        all_paths(&r.sysfs, &mut paths);
        paths.sort();
        for _ in 0..15 {
            let p = &paths[(xorshift(&mut seed) % paths.len() as u64) as usize];
            if fs::symlink_metadata(p).is_err() {
                continue; // gone with an earlier removal
            }
            let is_dir = fs::symlink_metadata(p).map(|m| m.is_dir()).unwrap_or(false);
            let _ = if is_dir { fs::remove_dir_all(p) } else { fs::remove_file(p) };
            match xorshift(&mut seed) % 5 {
                0 => {}                                                              // gone
                1 => drop(fs::write(p, b"\xff\xfe garbage \x00\n")),                 // not UTF-8
                2 => drop(fs::create_dir(p)),                                        // file became a dir
                3 => drop(std::os::unix::fs::symlink("../nowhere/0000:99:00.0", p)), // dangling
                _ => drop(std::os::unix::fs::symlink(p.file_name().unwrap(), p)),    // loop (ELOOP)
            }
        }
        let inv = discover(&r);
        // Whatever broke, the node is still read: every VF found is attached to a PF found.
        for pf in &inv.pfs {
            assert!(pf.vfs.iter().all(|v| v.pf == pf.pci), "round {round}");
        }
        let _ = nic::sim::describe(&inv);
    }
}
