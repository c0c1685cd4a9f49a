// RoCE observation on simulated nodes (nic::sim trees read by nic::discover and
// nic::roce::observe with DcbSource::Sim): a correct mlx5 node, upstream mlx5
// without the NVIDIA OFED ECN sysfs, an E810 with the firmware LLDP agent on,
// MTU 1500, and the rdma_cm configfs rules.

use std::collections::BTreeMap;

use nic::roce::*;
use nic::sim::Sim;
use nic::simdesc::NodeDesc;

fn node(yaml: &str) -> NodeDesc {
    serde_yaml::from_str(yaml).expect("test description parses")
}

fn observe_sim(desc: &NodeDesc, opts: &ObserveOpts) -> (Sim, NodeRoce) {
    let sim = Sim::materialise(desc).expect("sim materialises");
    let inv = nic::discover(&sim.roots());
    let r = observe(&sim.roots(), &inv, &DcbSource::Sim(sim.desc().clone()), opts);
    (sim, r)
}

const CX6: &str = r#"
node: cx6-good
adapters:
  - model: connectx-6dx
    pfs:
      - bdf: "0000:3d:00.0"
        netdev: ens1f0np0
        vfs: 4
        mtu: 9000
        rdma: mlx5_0
        roce:
          pfc: [3]
          pfcDelay: 32
          pfcRequests: [0, 0, 0, 17]
          dscpToPriority: {26: 3, 48: 6}
          ecn: [3]
          cnpDscp: 48
          cnpPriority: 6
"#;

#[test]
fn correct_mlx5_node_reads_every_setting() {
    let (_sim, r) = observe_sim(&node(CX6), &ObserveOpts::default());
    assert_eq!(r.node, "cx6-good");
    assert_eq!(r.rdma_netns_mode, Observed::Value(NetnsMode::Shared));
    assert_eq!(r.interfaces.len(), 1, "{:#?}", r.interfaces);
    let i = r.interface("ens1f0np0").expect("PF netdev observed");
    assert_eq!(i.kind, IfaceKind::Pf);
    assert_eq!(i.pci.map(|p| p.to_string()).as_deref(), Some("0000:3d:00.0"));
    assert_eq!(i.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(i.rdma_dev.as_deref(), Some("mlx5_0"));
    assert_eq!((i.vendor, i.device), (Some(0x15b3), Some(0x101d)));
    assert_eq!(i.speed_mbps, Observed::Value(100000));
    assert_eq!(i.mtu, Observed::Value(9000));
    assert_eq!(i.active_mtu, Observed::Value(4096));
    assert_eq!(i.operstate, Observed::Value("up".into()));
    assert_eq!(i.dcbx, Observed::Value(DcbxMode::Os));
    assert_eq!(i.dcbx_bits, Observed::Value(0x09));
    assert_eq!(i.trust, Observed::Value(Trust::Dscp));
    assert_eq!(i.dscp_to_priority, Observed::Value(BTreeMap::from([(26, 3), (48, 6)])));
    let pfc = i.pfc.value().expect("pfc read");
    assert_eq!(pfc.enabled_priorities(), vec![3]);
    assert_eq!(pfc.bitmap(), 0x08);
    assert_eq!(pfc.delay, 32);
    assert_eq!(pfc.requests[3], 17);
    assert_eq!(i.global_pause, Observed::Value(false));
    assert_eq!(i.ecn, Observed::Value(vec![3]));
    assert_eq!(i.ecn_detail, Observed::Value(Ecn { np: vec![3], rp: vec![3] }));
    assert_eq!(i.cnp, Observed::Value(Cnp { dscp: 48, priority: 6 }));
    assert_eq!(i.roce_mode, Observed::Value("RoCE v2".into()));
    assert_eq!(i.tos, Observed::Value(106));
    assert_eq!(i.port_state, Observed::Value("ACTIVE".into()));
    assert!(i.hw_counters.contains_key("np_cnp_sent"), "{:?}", i.hw_counters);
    assert_eq!(i.num_vfs, Observed::Value(4));
    assert_eq!(i.total_vfs, Observed::Value(127));
    assert!(i.fw_lldp_agent.is_unsupported(), "{:?}", i.fw_lldp_agent);
    assert!(i.ets.is_unknown());
    // The GID index comes from the inventory's GID table, or says why there is none.
    match &i.gid_index {
        Observed::Value(_) => {}
        other => assert!(other.reason().unwrap().contains("no RoCE v2 GID"), "{other:?}"),
    }
}

#[test]
fn observation_serializes_for_the_crd() {
    let (_sim, r) = observe_sim(&node(CX6), &ObserveOpts::default());
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["interfaces"][0]["pfc"]["value"]["enabled"][3], true);
    assert!(json["interfaces"][0]["fwLldpAgent"]["unsupported"].is_string());
    let back: NodeRoce = serde_json::from_value(json).unwrap();
    assert_eq!(back, r);
}

#[test]
fn upstream_mlx5_without_ofed_sysfs_reports_ecn_unsupported() {
    let yaml = CX6.replace("cnpPriority: 6", "cnpPriority: 6\n          ofedSysfs: false");
    let (_sim, r) = observe_sim(&node(&yaml), &ObserveOpts::default());
    let i = &r.interfaces[0];
    assert_eq!(i.ecn, Observed::Unsupported("no NVIDIA OFED ECN sysfs (upstream mlx5)".into()));
    assert!(i.ecn_detail.is_unsupported() && i.cnp.is_unsupported());
    // Without qos/trust, trust comes from the DCB side (the description here).
    assert_eq!(i.trust, Observed::Value(Trust::Dscp));
}

#[test]
fn e810_with_firmware_lldp_on() {
    let yaml = r#"
node: e810
adapters:
  - model: e810-c
    pfs:
      - bdf: "0000:5e:00.0"
        netdev: ens2f0
        vfs: 2
        mtu: 9000
        rdma: rocep94s0f0
        rdmaNaming: rocep
        roce:
          dcbx: firmware
          fwLldpAgent: true
"#;
    let (_sim, r) = observe_sim(&node(yaml), &ObserveOpts::default());
    let i = r.interface("ens2f0").expect("E810 PF observed");
    assert_eq!(i.driver.as_deref(), Some("ice"));
    assert_eq!(i.fw_lldp_agent, Observed::Value(true));
    assert_eq!(i.dcbx, Observed::Value(DcbxMode::Firmware));
    assert_eq!(i.dcbx_bits, Observed::Value(0x0a));
    assert_eq!(i.ecn, Observed::Unsupported("no NVIDIA OFED ECN sysfs (driver ice)".into()));
    assert_eq!(i.total_vfs, Observed::Value(256));
    assert_eq!(
        remediation(&i.netdev, &Remedy::FwLldpAgent(false)),
        "ethtool --set-priv-flags ens2f0 fw-lldp-agent off"
    );
}

#[test]
fn mtu_1500_gives_active_mtu_1024() {
    let yaml = CX6.replace("mtu: 9000", "mtu: 1500");
    let (_sim, r) = observe_sim(&node(&yaml), &ObserveOpts::default());
    assert_eq!(r.interfaces[0].mtu, Observed::Value(1500));
    assert_eq!(r.interfaces[0].active_mtu, Observed::Value(1024));
}

#[test]
fn active_mtu_follows_iboe_get_mtu() {
    assert_eq!(roce_active_mtu(4192), Some(4096));
    assert_eq!(roce_active_mtu(4191), Some(2048));
    assert_eq!(roce_active_mtu(9000), Some(4096));
    assert_eq!(roce_active_mtu(1500), Some(1024));
    assert_eq!(roce_active_mtu(352), Some(256));
    assert_eq!(roce_active_mtu(351), None);
    assert_eq!(roce_active_mtu(0), None);
    assert_eq!(min_netdev_mtu_for(4096), 4192);
}

#[test]
fn link_down_speed_is_unknown_with_the_reason() {
    let mut sim = Sim::materialise(&node(CX6)).unwrap();
    sim.set_operstate("ens1f0np0", "down").unwrap();
    let inv = nic::discover(&sim.roots());
    let r = observe(&sim.roots(), &inv, &DcbSource::Sim(sim.desc().clone()), &ObserveOpts::default());
    let i = &r.interfaces[0];
    assert_eq!(i.operstate, Observed::Value("down".into()));
    assert!(i.speed_mbps.is_unknown(), "{:?}", i.speed_mbps);
    assert!(i.speed_mbps.reason().unwrap().contains("speed"), "{:?}", i.speed_mbps);
}

#[test]
fn rdma_cm_configfs_is_read_only_where_it_exists_unless_allowed() {
    let sim = Sim::materialise(&node(CX6)).unwrap();
    let roots = sim.roots();
    let inv = nic::discover(&roots);
    let dev_dir = roots.sys("kernel/config/rdma_cm/mlx5_0");
    std::fs::remove_dir_all(&dev_dir).unwrap();

    // Flag off: Unknown, and nothing created.
    let src = DcbSource::Sim(sim.desc().clone());
    let r = observe(&roots, &inv, &src, &ObserveOpts::default());
    let i = &r.interfaces[0];
    assert!(i.roce_mode.is_unknown() && i.roce_mode.reason().unwrap().contains("read_rdma_cm_configfs"));
    assert!(!dev_dir.exists());

    // Flag on: mkdir, read (a plain directory here has no kernel-made files, so
    // the values stay Unknown with the path), then rmdir.
    let opts = ObserveOpts { read_rdma_cm_configfs: true, ..Default::default() };
    let r = observe(&roots, &inv, &src, &opts);
    assert!(r.interfaces[0].roce_mode.reason().unwrap().contains("default_roce_mode"));
    assert!(!dev_dir.exists(), "the directory observe created must be removed");

    // No rdma_cm configfs at all: Unsupported.
    std::fs::remove_dir_all(roots.sys("kernel/config/rdma_cm")).unwrap();
    let r = observe(&roots, &inv, &src, &opts);
    assert!(r.interfaces[0].tos.is_unsupported(), "{:?}", r.interfaces[0].tos);
}

#[test]
fn bundled_example_nodes_observe_every_pf() {
    for f in ["cx6dx-dual.yaml", "e810-xxv.yaml", "mixed.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nodes").join(f);
        let sim = Sim::from_file(&path).unwrap();
        let inv = nic::discover(&sim.roots());
        let r = observe(&sim.roots(), &inv, &DcbSource::Sim(sim.desc().clone()), &ObserveOpts::default());
        let pfs: usize = sim.desc().adapters.iter().map(|a| a.pfs.len()).sum();
        assert_eq!(
            r.interfaces.len(),
            pfs,
            "{f}: {:#?}",
            r.interfaces.iter().map(|i| &i.netdev).collect::<Vec<_>>()
        );
        for i in &r.interfaces {
            assert!(i.mtu.is_value() && i.pfc.is_value() && i.dscp_to_priority.is_value(), "{f}: {i:#?}");
        }
    }
}

#[test]
fn node_name_option_wins() {
    let opts = ObserveOpts { node_name: Some("worker-7".into()), ..Default::default() };
    let (_sim, r) = observe_sim(&node(CX6), &opts);
    assert_eq!(r.node, "worker-7");
}
