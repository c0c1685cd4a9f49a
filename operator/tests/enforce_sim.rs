//! Enforce mode on simulated nodes: the minimal ordered plan, refused link-flapping
//! writes, sysfs writes that really land in the tree, and the re-read recorded.
use kube_rdma_operator::checks::default_profile_spec;
use kube_rdma_operator::crd::{CheckResult, Mode, RoceProfile};
use kube_rdma_operator::enforce::{enforce, plan};
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::status::evaluate;
use nic::roce::Remedy;

fn broken() -> nic::simdesc::NodeDesc {
    let mut d = with_roce(example("cx6dx-dual"), |r| {
        r.ecn = vec![];
        r.cnp_priority = 3;
        r.pfc = vec![];
        r.global_pause = true;
    });
    d.adapters[0].pfs[0].mtu = 1500;
    d
}

#[test]
fn plan_is_minimal_and_ordered_pause_then_pfc_then_steering_then_mtu() {
    let node = SimNode::new(&broken()).read();
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let w = plan(&spec, &node.interfaces[0]);
    let remedies: Vec<&Remedy> = w.iter().map(|w| &w.remedy).collect();
    assert_eq!(
        remedies,
        [
            &Remedy::GlobalPause(false),
            &Remedy::Pfc { priorities: vec![3] },
            &Remedy::Ecn { priority: 3, on: true },
            &Remedy::CnpPriority(6),
            &Remedy::Mtu(4200),
        ]
    );
    // Link-flapping writes are refused without allowLinkFlap, the others are not.
    let refused: Vec<bool> = w.iter().map(|w| w.refused.is_some()).collect();
    assert_eq!(refused, [true, false, false, false, true]);
    assert!(w[4].refused.as_ref().unwrap().contains("ip link set dev ens1f0np0 mtu 4200"));
    // The correct port needs nothing.
    let good = SimNode::new(&example("cx6dx-dual")).read();
    assert!(plan(&spec, &good.interfaces[0]).is_empty());
}

#[test]
fn enforce_writes_ecn_and_cnp_refuses_mtu_and_records_what_happened() {
    let sim = SimNode::new(&broken());
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let before = sim.read();
    let (after, records) = enforce(&sim.source, &spec, before);
    let rec = |iface: &str, setting: &str| {
        records
            .iter()
            .find(|r| r.interface == iface && r.setting == setting)
            .unwrap_or_else(|| panic!("{iface}/{setting} in {records:#?}"))
    };
    assert_eq!(rec("ens1f0np0", "ecn").outcome, "Applied");
    assert_eq!(rec("ens1f0np0", "cnp").outcome, "Applied");
    assert_eq!(rec("ens1f0np0", "mtu").outcome, "Refused");
    assert_eq!(rec("ens1f0np0", "global-pause").outcome, "Refused");
    // DCB of a simulated node comes from its description: reported, not faked.
    let pfc = rec("ens1f0np0", "pfc");
    assert_eq!(pfc.outcome, "Failed");
    assert!(pfc.detail.contains("dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on"), "{}", pfc.detail);
    // The re-read shows the sysfs writes.
    let enabled =
        std::fs::read_to_string(sim.source.roots.sys("class/net/ens1f0np0/ecn/roce_np/enable/3")).unwrap();
    assert_eq!(enabled.trim(), "1");
    let s = evaluate(&RoceProfile::new("p", spec), &after);
    let result = |i: &str, n: &str| s.checks.iter().find(|c| c.interface == i && c.name == n).unwrap().result;
    assert_eq!(result("ens1f0np0", "ecn"), CheckResult::Pass);
    assert_eq!(result("ens1f0np0", "cnp"), CheckResult::Pass);
    assert_eq!(result("ens1f0np0", "mtu"), CheckResult::Fail);
    assert_eq!(result("ens1f0np0", "pfc"), CheckResult::Fail);
}

#[test]
fn allow_link_flap_lets_the_mtu_write_through() {
    let sim = SimNode::new(&broken());
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    spec.allow_link_flap = true;
    let (after, records) = enforce(&sim.source, &spec, sim.read());
    let mtu = records.iter().find(|r| r.interface == "ens1f0np0" && r.setting == "mtu").unwrap();
    assert_eq!(mtu.outcome, "Applied", "{mtu:?}");
    assert_eq!(after.interface("ens1f0np0").unwrap().mtu.value(), Some(&4200));
}

#[test]
fn rdma_cm_defaults_are_written_through_configfs_and_read_back() {
    let d = with_roce(example("cx6dx-dual"), |r| {
        r.roce_mode = "IB/RoCE v1".into();
        r.tos = 0;
    });
    let sim = SimNode::new(&d);
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let before = sim.read();
    let w = plan(&spec, before.interface("ens1f0np0").unwrap());
    let remedies: Vec<&Remedy> = w.iter().map(|w| &w.remedy).collect();
    assert_eq!(
        remedies,
        [
            &Remedy::RoceMode { rdma_dev: "mlx5_0".into(), port: 1, v2: true },
            &Remedy::Tos { rdma_dev: "mlx5_0".into(), port: 1, tos: 106 },
        ]
    );
    let (after, records) = enforce(&sim.source, &spec, before);
    for r in records.iter().filter(|r| r.interface == "ens1f0np0") {
        assert_eq!(r.outcome, "Applied", "{r:?}");
    }
    let port = sim.source.roots.sys("kernel/config/rdma_cm/mlx5_0/ports/1");
    assert_eq!(std::fs::read_to_string(port.join("default_roce_mode")).unwrap(), "RoCE v2");
    assert_eq!(std::fs::read_to_string(port.join("default_roce_tos")).unwrap(), "106");
    let s = evaluate(&RoceProfile::new("p", spec), &after);
    let result =
        |n: &str| s.checks.iter().find(|c| c.interface == "ens1f0np0" && c.name == n).unwrap().result;
    assert_eq!(result("roce-mode"), CheckResult::Pass);
    assert_eq!(result("tos"), CheckResult::Pass);
}

#[test]
fn trust_is_its_own_write_only_where_the_dscp_map_does_not_carry_it() {
    let node = SimNode::new(&example("cx6dx-dual")).read();
    let i = node.interface("ens1f0np0").unwrap();
    let mut spec = default_profile_spec();
    // DSCP trust with a map: the APP entries are the trust; nothing to do here.
    assert!(plan(&spec, i).is_empty());
    // PCP trust on a DSCP-trusting port: one trust write.
    spec.trust = Some(kube_rdma_operator::crd::TrustMode::Pcp);
    spec.dscp_to_priority.clear();
    let w = plan(&spec, i);
    assert_eq!(w.iter().map(|w| &w.remedy).collect::<Vec<_>>(), [&Remedy::Trust(nic::roce::Trust::Pcp)]);
    spec.mode = Mode::Enforce;
    let trust_of = |records: &[kube_rdma_operator::crd::EnforceRecord]| {
        records.iter().find(|r| r.interface == "ens1f0np0" && r.setting == "trust").cloned().unwrap()
    };

    // With OFED's qos/trust file, the file is written and the re-read sees it.
    let sim = SimNode::new(&example("cx6dx-dual"));
    let (after, records) = enforce(&sim.source, &spec, sim.read());
    assert_eq!(trust_of(&records).outcome, "Applied");
    let file = sim.source.roots.sys("class/net/ens1f0np0/qos/trust");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "pcp");
    let s = evaluate(&RoceProfile::new("p", spec.clone()), &after);
    let trust = s.checks.iter().find(|c| c.interface == "ens1f0np0" && c.name == "trust").unwrap();
    assert_eq!(trust.result, CheckResult::Pass, "{trust:?}");

    // Upstream mlx5 (no OFED sysfs): PCP trust means deleting the DSCP APP
    // entries over DCB netlink; a simulated node's DCB comes from its
    // description, so it says what to run instead of faking it.
    let upstream = with_roce(example("cx6dx-dual"), |r| r.ofed_sysfs = Some(false));
    let sim = SimNode::new(&upstream);
    let (_, records) = enforce(&sim.source, &spec, sim.read());
    let t = trust_of(&records);
    assert_eq!(t.outcome, "Failed", "{t:?}");
    assert!(
        t.detail.contains("simulated node") && t.detail.contains("mlnx_qos -i ens1f0np0 --trust pcp"),
        "{t:?}"
    );
}

#[test]
fn trust_with_ofed_is_planned_and_written_to_qos_trust_even_with_the_dscp_map_in_place() {
    // OFED's qos/trust says pcp; the DSCP APP entries are already there but mlx5 ignores them for trust.
    let sim = SimNode::new(&with_roce(example("cx6dx-dual"), |r| r.trust = nic::roce::Trust::Pcp));
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let before = sim.read();
    let w = plan(&spec, before.interface("ens1f0np0").unwrap());
    assert_eq!(w.iter().map(|w| &w.remedy).collect::<Vec<_>>(), [&Remedy::Trust(nic::roce::Trust::Dscp)]);
    assert!(w[0].refused.is_none());
    let (after, records) = enforce(&sim.source, &spec, before);
    let t = records.iter().find(|r| r.interface == "ens1f0np0" && r.setting == "trust").unwrap();
    assert_eq!((t.outcome.as_str(), t.detail.as_str()), ("Applied", "mlnx_qos -i ens1f0np0 --trust dscp"));
    assert_eq!(
        std::fs::read_to_string(sim.source.roots.sys("class/net/ens1f0np0/qos/trust")).unwrap(),
        "dscp"
    );
    let s = evaluate(&RoceProfile::new("p", spec), &after);
    let trust = s.checks.iter().find(|c| c.interface == "ens1f0np0" && c.name == "trust").unwrap();
    assert_eq!(trust.result, CheckResult::Pass, "{trust:?}");
}

#[test]
fn e810_turns_the_firmware_lldp_agent_off_first_and_its_pfc_changes_count_as_link_flapping() {
    let d = with_roce(example("e810-xxv"), |r| {
        r.fw_lldp_agent = true;
        r.pfc = vec![];
    });
    let node = SimNode::new(&d).read();
    let i = node.interface("ens2f0").unwrap();
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let w = plan(&spec, i);
    assert_eq!(
        w.iter().map(|w| &w.remedy).collect::<Vec<_>>(),
        [&Remedy::FwLldpAgent(false), &Remedy::Pfc { priorities: vec![3] }]
    );
    // Without allowLinkFlap both are refused: the agent restarts the port on ice, and the
    // PFC write would be refused by ice while its firmware agent runs anyway.
    assert!(w[0].refused.as_ref().unwrap().contains("ethtool --set-priv-flags ens2f0 fw-lldp-agent off"));
    assert!(w[1].refused.as_ref().unwrap().contains("dcb pfc set dev ens2f0 prio-pfc all:off 3:on"));
    spec.allow_link_flap = true;
    let w = plan(&spec, i);
    assert!(w.iter().all(|w| w.refused.is_none()), "{w:?}");
    assert_eq!(w[0].remedy, Remedy::FwLldpAgent(false));
    // With the agent already off, a PFC change on ice still flaps the link; on mlx5 it does not.
    let node = SimNode::new(&with_roce(example("e810-xxv"), |r| r.pfc = vec![])).read();
    spec.allow_link_flap = false;
    let w = plan(&spec, node.interface("ens2f0").unwrap());
    assert_eq!(w.len(), 1);
    assert!(w[0]
        .refused
        .as_ref()
        .unwrap()
        .starts_with("would bounce the link; set allowLinkFlap or run: dcb pfc set"));
    let node = SimNode::new(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![])).read();
    let w = plan(&spec, node.interface("ens1f0np0").unwrap());
    assert!(w.iter().all(|w| w.refused.is_none()), "{w:?}");
}

#[test]
fn dcbx_is_enforced_when_the_profile_asks() {
    let sim = SimNode::new(&with_roce(example("cx6dx-dual"), |r| r.dcbx = nic::simdesc::DcbxMode::Firmware));
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    assert!(plan(&spec, sim.read().interface("ens1f0np0").unwrap()).is_empty(), "not asked: left alone");
    spec.dcbx = Some(kube_rdma_operator::crd::DcbxSpec::Os);
    let w = plan(&spec, sim.read().interface("ens1f0np0").unwrap());
    assert_eq!(w.iter().map(|w| &w.remedy).collect::<Vec<_>>(), [&Remedy::Dcbx(nic::roce::DcbxMode::Os)]);
    // A simulated node's DCB comes from its description: reported with the command.
    let (_, records) = enforce(&sim.source, &spec, sim.read());
    let r = records.iter().find(|r| r.interface == "ens1f0np0" && r.setting == "dcbx").unwrap();
    assert_eq!(r.outcome, "Failed");
    assert!(r.detail.contains("dcb dcbx set dev ens1f0np0 host ieee"), "{r:?}");
}

/// An E810 PF in iWARP mode: the devlink switch is planned first, refused without
/// allowLinkFlap (it reloads the RDMA function); with it, a simulated node
/// answers with the commands to run, as for its DCB settings.
#[test]
fn e810_iwarp_is_switched_to_roce_only_with_allow_link_flap() {
    let sim = SimNode::new(&example("e810-c-iwarp"));
    let node = sim.read();
    let iwarp = node.interfaces.iter().find(|i| i.netdev == "ens3f0").unwrap();
    let roce = node.interfaces.iter().find(|i| i.netdev == "ens3f1").unwrap();
    let mut spec = default_profile_spec();
    spec.mode = Mode::Enforce;
    let cmds = "devlink dev param set pci/0000:5e:00.0 name enable_iwarp value false cmode runtime && \
                devlink dev param set pci/0000:5e:00.0 name enable_roce value true cmode runtime";

    let w = plan(&spec, iwarp);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].remedy, Remedy::EnableRoce { pci: "0000:5e:00.0".parse().unwrap() });
    let why = w[0].refused.as_deref().unwrap();
    assert!(why.contains("set allowLinkFlap") && why.ends_with(cmds), "{why}");
    assert!(plan(&spec, roce).is_empty());

    let (_, records) = enforce(&sim.source, &spec, node.clone());
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!((records[0].setting.as_str(), records[0].outcome.as_str()), ("rdma-protocol", "Refused"));

    spec.allow_link_flap = true;
    let w = plan(&spec, iwarp);
    assert_eq!(w.len(), 1);
    assert!(w[0].refused.is_none());
    let (after, records) = enforce(&sim.source, &spec, node);
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].outcome, "Failed");
    assert_eq!(
        records[0].detail,
        format!("simulated node: devlink parameters come from its description; run: {cmds}")
    );
    // Nothing was written: the node still runs iWARP there.
    let s = evaluate(&RoceProfile::new("p", spec), &after);
    assert_eq!(
        s.checks.iter().find(|c| c.name == "rdma-protocol" && c.interface == "ens3f0").unwrap().result,
        CheckResult::Fail
    );
}
