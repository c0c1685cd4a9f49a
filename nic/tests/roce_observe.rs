// RoCE observation on simulated nodes (nic::sim trees read by nic::discover and
// nic::roce::observe with DcbSource::Recorded(sim.recording()): the DCB netlink
// and ethtool answers a kernel would give, decoded by the production readers): a
// correct mlx5 node, upstream mlx5 without the NVIDIA OFED ECN sysfs, an E810
// with the firmware LLDP agent on, MTU 1500, the rdma_cm configfs rules, and
// broken recorded replies.

use std::collections::BTreeMap;

use nic::roce::*;
use nic::sim::Sim;
use nic::simdesc::NodeDesc;

fn node(yaml: &str) -> NodeDesc {
    serde_yaml::from_str(yaml).expect("test description parses")
}

/// How the agent's DaemonSet runs it: `NODE_NAME` set to the node's name.
fn opts_for(sim: &Sim) -> ObserveOpts {
    ObserveOpts { node_name: Some(sim.desc().node.clone()), ..ObserveOpts::default() }
}

fn observe_sim(desc: &NodeDesc, opts: &ObserveOpts) -> (Sim, NodeRoce) {
    let sim = Sim::materialise(desc).expect("sim materialises");
    let inv = nic::discover(&sim.roots());
    let opts = ObserveOpts { node_name: opts.node_name.clone().or(opts_for(&sim).node_name), ..opts.clone() };
    let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(sim.recording()), &opts);
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
    assert_eq!(pfc.pfc_en.bits(), 0x08);
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
    // mlx5's boot ETS (mlx5e_ets_init): vendor TSA, priorities 0 and 1 swapped.
    let ets = i.ets.value().expect("ets read");
    assert_eq!((ets.ets_cap, ets.tc_tsa, ets.prio_tc), (8, [255; 8], [1, 0, 2, 3, 4, 5, 6, 7]));
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
    assert_eq!(json["interfaces"][0]["pfc"]["value"]["pfcEn"], serde_json::json!([3]));
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
    // Without qos/trust, trust comes from the DCB APP table: DSCP entries, so DSCP.
    assert_eq!(i.trust, Observed::Value(Trust::Dscp));
    // A PCP-trusting port of an upstream driver has no DSCP entries, and reads as PCP.
    let yaml = yaml
        .replace("dscpToPriority: {26: 3, 48: 6}", "dscpToPriority: {26: 3, 48: 6}\n          trust: pcp");
    let (_sim, r) = observe_sim(&node(&yaml), &ObserveOpts::default());
    assert_eq!(r.interfaces[0].trust, Observed::Value(Trust::Pcp));
    assert_eq!(r.interfaces[0].dscp_to_priority, Observed::Value(BTreeMap::new()));
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
    // ice's default ETS: every priority on TC 0, which gets all the bandwidth.
    let ets = i.ets.value().expect("ets read");
    assert_eq!((ets.prio_tc, ets.tc_tx_bw[0], ets.tc_tsa[0]), ([0; 8], 100, 2));
    assert_eq!(i.global_pause, Observed::Value(false));
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
    let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(sim.recording()), &opts_for(&sim));
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
    let src = DcbSource::Recorded(sim.recording());
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
        let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(sim.recording()), &opts_for(&sim));
        assert_eq!(r.node, sim.desc().node);
        assert_eq!(
            r.rdma_netns_mode,
            Observed::Value(sim.desc().rdma_netns_mode),
            "{f}: from ib_core's parameter"
        );
        let pfs: usize = sim.desc().adapters.iter().map(|a| a.pfs.len()).sum();
        assert_eq!(
            r.interfaces.len(),
            pfs,
            "{f}: {:#?}",
            r.interfaces.iter().map(|i| &i.netdev).collect::<Vec<_>>()
        );
        for i in &r.interfaces {
            assert!(i.mtu.is_value() && i.pfc.is_value() && i.dscp_to_priority.is_value(), "{f}: {i:#?}");
            assert!(i.ets.is_value() && i.dcbx.is_value() && i.global_pause.is_value(), "{f}: {i:#?}");
        }
    }
}

#[test]
fn node_name_option_wins() {
    let opts = ObserveOpts { node_name: Some("worker-7".into()), ..Default::default() };
    let (_sim, r) = observe_sim(&node(CX6), &opts);
    assert_eq!(r.node, "worker-7");
}

/// The recorded replies go through the production decoder: a reply whose PFC
/// attribute is a byte short reads as Unknown naming the attribute, the offset
/// and the request, as a bad reply from hardware would; the ethtool reads of
/// the same port are unaffected.
#[test]
fn corrupted_recorded_dcb_reply_is_unknown_with_the_decoder_diagnostic() {
    let sim = Sim::materialise(&node(CX6)).unwrap();
    let inv = nic::discover(&sim.roots());
    let mut rec = sim.recording();
    let reply = &mut rec.dcb[0].replies[0];
    // nla_len 140 of DCB_ATTR_IEEE_PFC (2) -> 139: a struct ieee_pfc of 135 bytes.
    let at = reply.windows(4).position(|w| w == [0x8c, 0x00, 0x02, 0x00]).expect("PFC attribute");
    reply[at] = 0x8b;
    let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(rec), &opts_for(&sim));
    let i = &r.interfaces[0];
    for (what, o) in [
        ("pfc", i.pfc.as_ref().map(|_| ())),
        ("ets", i.ets.as_ref().map(|_| ())),
        ("dcbx", i.dcbx.as_ref().map(|_| ())),
        ("dscp", i.dscp_to_priority.as_ref().map(|_| ())),
    ] {
        assert!(o.is_unknown(), "{what}: {o:?}");
        let why = o.reason().unwrap();
        for part in
            ["RTM_GETDCB", "ens1f0np0", "cannot decode reply", "DCB_ATTR_IEEE_PFC: 135 bytes, expected 136"]
        {
            assert!(why.contains(part), "{what}: {why:?} lacks {part:?}");
        }
    }
    // The OFED trust file still answers; ethtool was not part of the broken reply.
    assert_eq!(i.trust, Observed::Value(Trust::Dscp));
    assert_eq!(i.global_pause, Observed::Value(false));
    assert!(i.fw_lldp_agent.is_unsupported(), "{:?}", i.fw_lldp_agent);
}

/// A port the recording has nothing for reads as Unknown (not a panic, not Unsupported).
#[test]
fn a_port_without_recorded_answers_is_unknown() {
    let sim = Sim::materialise(&node(CX6)).unwrap();
    let inv = nic::discover(&sim.roots());
    let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(Recording::default()), &opts_for(&sim));
    let i = &r.interfaces[0];
    assert!(i.pfc.is_unknown() && i.pfc.reason().unwrap().contains("no answer"), "{:?}", i.pfc);
    assert!(
        i.global_pause.is_unknown() && i.global_pause.reason().unwrap().contains("ens1f0np0"),
        "{:?}",
        i.global_pause
    );
}

/// Node name and netns mode come from where production reads them: the
/// options / NODE_NAME and ib_core's `netns_mode` parameter in the tree.
#[test]
fn netns_mode_is_read_from_the_tree() {
    let yaml = format!("{CX6}rdmaNetnsMode: exclusive\n");
    let (sim, r) = observe_sim(&node(&yaml), &ObserveOpts::default());
    assert_eq!(r.rdma_netns_mode, Observed::Value(NetnsMode::Exclusive));
    std::fs::write(sim.roots().sys("module/ib_core/parameters/netns_mode"), "Y\n").unwrap();
    let inv = nic::discover(&sim.roots());
    let r = observe(&sim.roots(), &inv, &DcbSource::Recorded(sim.recording()), &opts_for(&sim));
    assert_eq!(r.rdma_netns_mode, Observed::Value(NetnsMode::Shared));
}
