//! Checks of simulated nodes: the bundled examples, and variants with one setting
//! broken in code. Each asserts the failing check, its result and the exact remediation.
use kube_rdma_operator::checks::{default_profile, default_profile_spec};
use kube_rdma_operator::crd::{Check, CheckResult, RdmaNodeStateStatus, RoceProfile};
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::status::evaluate;
use nic::simdesc::NodeDesc;

fn run(desc: &NodeDesc) -> RdmaNodeStateStatus {
    let node = SimNode::new(desc);
    evaluate(&default_profile(), &node.read())
}

fn check<'a>(s: &'a RdmaNodeStateStatus, iface: &str, name: &str) -> &'a Check {
    s.checks
        .iter()
        .find(|c| c.interface == iface && c.name == name)
        .unwrap_or_else(|| panic!("no check {iface}/{name} in {:#?}", s.checks))
}

fn failing(s: &RdmaNodeStateStatus) -> Vec<String> {
    s.checks
        .iter()
        .filter(|c| c.result == CheckResult::Fail)
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect()
}

#[test]
fn correct_cx6dx_node_passes_every_check() {
    let s = run(&example("cx6dx-dual"));
    assert!(failing(&s).is_empty(), "{:#?}", failing(&s));
    assert_eq!(s.summary.ready, "True");
    assert_eq!(s.summary.pfc, "3");
    assert_eq!(s.summary.trust, "dscp");
    assert_eq!(s.summary.mtu, "9000");
    assert_eq!(s.summary.roce, "v2");
    assert!(s.checks.iter().all(|c| matches!(c.result, CheckResult::Pass | CheckResult::NotApplicable)));
    let cond = s.conditions.iter().find(|c| c.type_ == "RoceReady").unwrap();
    assert_eq!(cond.status, "True");
    assert_eq!(check(&s, "ens1f0np0", "gid-index").actual, "index 3");
}

#[test]
fn pfc_missing_fails_pfc_and_the_tos_chain_with_the_dcb_command() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![]));
    let c = check(&s, "ens1f0np0", "pfc");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!((c.expected.as_str(), c.actual.as_str()), ("3", "none"));
    assert_eq!(c.remediation, "dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on");
    let chain = check(&s, "ens1f0np0", "chain-tos-pfc");
    assert_eq!(chain.result, CheckResult::Fail);
    assert_eq!(chain.actual, "tos 106 → dscp 26 → prio 3, pfc none");
    assert_eq!(chain.remediation, "dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on");
    // Without PFC, the CNP priority cannot collide with a lossless one.
    assert_eq!(check(&s, "ens1f0np0", "chain-cnp-not-lossless").result, CheckResult::Pass);
    assert_eq!(s.summary.ready, "False");
    assert_eq!(s.conditions.iter().find(|c| c.type_ == "Drifted").unwrap().status, "True");
}

#[test]
fn wrong_dscp_map_sends_roce_to_priority_0_and_says_how_to_fix_it() {
    // DSCP 26 mapped to priority 0, a classic mistake: traffic lands on a lossy priority.
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.dscp_to_priority = [(26, 0), (48, 6)].into_iter().collect();
    }));
    let c = check(&s, "ens1f1np1", "dscp-map");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!(c.actual, "26:0 48:6");
    assert_eq!(c.remediation, "dcb app replace dev ens1f1np1 dscp-prio 26:3");
    let chain = check(&s, "ens1f1np1", "chain-tos-pfc");
    assert_eq!(chain.result, CheckResult::Fail);
    assert_eq!(chain.actual, "tos 106 → dscp 26 → prio 0, pfc 3");
    assert_eq!(chain.remediation, "dcb app replace dev ens1f1np1 dscp-prio 26:3");
    assert_eq!(check(&s, "ens1f1np1", "chain-tos-ecn").result, CheckResult::Fail);
}

#[test]
fn unmapped_dscp_falls_to_default_priority_0() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.dscp_to_priority = [(48, 6)].into_iter().collect();
    }));
    let chain = check(&s, "ens1f0np0", "chain-tos-pfc");
    assert_eq!(chain.result, CheckResult::Fail);
    assert!(chain.actual.contains("dscp 26 unmapped → default prio 0"), "{}", chain.actual);
}

#[test]
fn mtu_1500_fails_mtu_and_active_mtu_with_the_ip_command() {
    let mut d = example("cx6dx-dual");
    d.adapters[0].pfs[0].mtu = 1500;
    let s = run(&d);
    let c = check(&s, "ens1f0np0", "mtu");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!((c.expected.as_str(), c.actual.as_str()), (">= 4200", "1500"));
    assert_eq!(c.remediation, "ip link set dev ens1f0np0 mtu 4200");
    let a = check(&s, "ens1f0np0", "chain-active-mtu");
    assert_eq!(a.result, CheckResult::Fail);
    assert_eq!(a.actual, "netdev mtu 1500 → active mtu 1024");
    // The other port is untouched.
    assert_eq!(check(&s, "ens1f1np1", "mtu").result, CheckResult::Pass);
    assert_eq!(s.summary.mtu, "1500,9000");
}

#[test]
fn active_mtu_4096_needs_netdev_mtu_4192_exactly() {
    let mut d = example("cx6dx-dual");
    d.adapters[0].pfs[0].mtu = 4191;
    d.adapters[0].pfs[1].mtu = 4192;
    let s = run(&d);
    assert_eq!(check(&s, "ens1f0np0", "chain-active-mtu").result, CheckResult::Fail);
    assert_eq!(check(&s, "ens1f0np0", "chain-active-mtu").actual, "netdev mtu 4191 → active mtu 2048");
    assert_eq!(check(&s, "ens1f1np1", "chain-active-mtu").result, CheckResult::Pass);
    // Both are below the profile's 4200 though.
    assert_eq!(check(&s, "ens1f1np1", "mtu").result, CheckResult::Fail);
}

#[test]
fn cnp_on_the_lossless_priority_fails_coherence() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.cnp_priority = 3));
    let c = check(&s, "ens1f0np0", "chain-cnp-not-lossless");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!(c.actual, "cnp prio 3");
    assert_eq!(c.remediation, "echo 6 > /sys/class/net/ens1f0np0/ecn/roce_np/cnp_802p_prio");
    let cnp = check(&s, "ens1f0np0", "cnp");
    assert_eq!(cnp.result, CheckResult::Fail);
    assert_eq!(cnp.remediation, "echo 6 > /sys/class/net/ens1f0np0/ecn/roce_np/cnp_802p_prio");
}

#[test]
fn upstream_mlx5_without_ofed_sysfs_reports_ecn_unsupported_not_fail() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.ofed_sysfs = Some(false)));
    for name in ["ecn", "cnp", "chain-tos-ecn", "chain-cnp-not-lossless"] {
        let c = check(&s, "ens1f0np0", name);
        assert_eq!(c.result, CheckResult::Unsupported, "{name}: {c:?}");
        assert!(c.remediation.is_empty());
    }
    assert!(failing(&s).is_empty(), "{:?}", failing(&s));
    assert_eq!(s.summary.ready, "True");
    assert_eq!(s.summary.ecn, "?");
}

#[test]
fn a_ready_node_names_the_checks_it_could_not_read_as_unverified() {
    // Inbox mlx5 (no NVIDIA OFED/DOCA sysfs): ECN and CNP cannot be read.
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.ofed_sysfs = Some(false)));
    assert_eq!(s.summary.ready, "True");
    let unread: Vec<String> = s
        .checks
        .iter()
        .filter(|c| matches!(c.result, CheckResult::Unsupported | CheckResult::Unknown))
        .map(|c| format!("{}/{}", c.interface, c.name))
        .collect();
    assert_eq!(s.summary.unverified_checks, unread);
    assert_eq!(s.summary.unverified as usize, unread.len());
    for name in ["ens1f0np0/ecn", "ens1f0np0/cnp", "ens1f1np1/ecn", "ens1f1np1/cnp"] {
        assert!(unread.iter().any(|u| u == name), "{name} not in {unread:?}");
    }
    let ready = s.conditions.iter().find(|c| c.type_ == "RoceReady").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "ChecksUnverified"));
    assert!(ready.message.starts_with(&format!("{} check(s) unverified", unread.len())), "{}", ready.message);
    assert!(ready.message.contains("ens1f0np0/ecn"), "{}", ready.message);

    // E810 (ice/irdma): no ECN sysfs either, and still ready.
    let s = run(&example("e810-xxv"));
    assert_eq!(s.summary.ready, "True");
    assert!(
        s.summary.unverified_checks.iter().any(|u| u == "ens2f0/ecn"),
        "{:?}",
        s.summary.unverified_checks
    );

    // Everything read: nothing unverified, and the reason says all checks pass.
    let s = run(&example("cx6dx-dual"));
    assert_eq!((s.summary.unverified, s.summary.unverified_checks.len()), (0, 0));
    let ready = s.conditions.iter().find(|c| c.type_ == "RoceReady").unwrap();
    assert_eq!((ready.reason.as_str(), ready.message.as_str()), ("AllChecksPass", ""));
}

#[test]
fn e810_with_firmware_lldp_agent_on_fails_with_the_ethtool_command() {
    let s = run(&with_roce(example("e810-xxv"), |r| r.fw_lldp_agent = true));
    let c = check(&s, "ens2f0", "fw-lldp-agent");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!(c.actual, "on");
    assert_eq!(c.remediation, "ethtool --set-priv-flags ens2f0 fw-lldp-agent off");
    // E810 has no OFED ECN sysfs: unsupported, not failing.
    assert_eq!(check(&s, "ens2f0", "ecn").result, CheckResult::Unsupported);
    assert_eq!(failing(&s), vec!["ens2f0/fw-lldp-agent", "ens2f1/fw-lldp-agent"]);
}

#[test]
fn e810_with_lldp_off_is_ready_and_fw_lldp_is_not_applicable_on_mlx5() {
    let s = run(&example("e810-xxv"));
    assert_eq!(check(&s, "ens2f0", "fw-lldp-agent").result, CheckResult::Pass);
    assert_eq!(s.summary.ready, "True");
    let s = run(&example("cx6dx-dual"));
    assert_eq!(check(&s, "ens1f0np0", "fw-lldp-agent").result, CheckResult::NotApplicable);
}

#[test]
fn global_pause_with_pfc_fails_coherence() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.global_pause = true));
    let c = check(&s, "ens1f0np0", "chain-global-pause-pfc");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!(c.remediation, "ethtool -A ens1f0np0 rx off tx off");
    assert_eq!(check(&s, "ens1f0np0", "global-pause").result, CheckResult::Fail);
}

#[test]
fn trust_pcp_breaks_the_dscp_chain() {
    // Upstream mlx5 (no OFED qos/trust file): DSCP trust comes from the APP entries.
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.trust = nic::simdesc::Trust::Pcp;
        r.ofed_sysfs = Some(false);
        r.dscp_to_priority.clear();
    }));
    let t = check(&s, "ens1f0np0", "trust");
    assert_eq!(t.result, CheckResult::Fail, "{t:?}");
    assert_eq!(t.remediation, "dcb app replace dev ens1f0np0 dscp-prio 26:3 48:6");
    assert_eq!(check(&s, "ens1f0np0", "chain-tos-pfc").result, CheckResult::Fail);
}

#[test]
fn trust_with_ofed_is_set_with_mlnx_qos_since_mlx5_then_ignores_dscp_app_entries() {
    // NVIDIA OFED's qos/trust says pcp: the APP entries are there but do not switch trust.
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.trust = nic::simdesc::Trust::Pcp));
    let t = check(&s, "ens1f0np0", "trust");
    assert_eq!(t.result, CheckResult::Fail, "{t:?}");
    assert_eq!(t.remediation, "mlnx_qos -i ens1f0np0 --trust dscp");
    assert_eq!(check(&s, "ens1f0np0", "dscp-map").result, CheckResult::Pass);
}

#[test]
fn tos_0_is_fixed_with_the_tos_never_by_mapping_dscp_0_into_the_lossless_priority() {
    // rdma_cm ToS 0: RoCE is unmarked (DSCP 0), like all default traffic.
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.tos = 0));
    for name in ["chain-tos-pfc", "chain-tos-ecn"] {
        let c = check(&s, "ens1f0np0", name);
        assert_eq!(c.result, CheckResult::Fail, "{c:?}");
        assert_eq!(c.remediation, "cma_roce_tos -d mlx5_0 -p 1 -t 106", "{name}");
    }
    // Even when DSCP 0 happens to be mapped to the lossless priority, that is not a pass.
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.tos = 0;
        r.dscp_to_priority.insert(0, 3);
    }));
    let c = check(&s, "ens1f0np0", "chain-tos-pfc");
    assert_eq!(c.result, CheckResult::Fail, "{c:?}");
    assert_eq!(c.remediation, "cma_roce_tos -d mlx5_0 -p 1 -t 106");
    // A profile without a ToS of its own: a ToS from a DSCP the map sends to priority 3.
    let mut spec = default_profile_spec();
    spec.rdma_cm = None;
    let node = SimNode::new(&with_roce(example("cx6dx-dual"), |r| r.tos = 0));
    let s = evaluate(&RoceProfile::new("no-tos", spec), &node.read());
    assert_eq!(check(&s, "ens1f0np0", "chain-tos-pfc").remediation, "cma_roce_tos -d mlx5_0 -p 1 -t 106");
}

#[test]
fn roce_v1_is_fixed_with_the_roce_mode_and_the_tos() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.roce_mode = "IB/RoCE v1".into();
        r.tos = 0;
    }));
    let c = check(&s, "ens1f0np0", "chain-tos-pfc");
    assert_eq!(c.remediation, "cma_roce_mode -d mlx5_0 -p 1 -m 2 && cma_roce_tos -d mlx5_0 -p 1 -t 106");
    assert_eq!(check(&s, "ens1f0np0", "chain-tos-ecn").remediation, c.remediation);
}

#[test]
fn a_missing_dscp_entry_is_fixed_in_the_map_not_with_ecn_on_priority_0() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.dscp_to_priority = [(48, 6)].into_iter().collect();
    }));
    for name in ["chain-tos-pfc", "chain-tos-ecn", "dscp-map"] {
        let c = check(&s, "ens1f0np0", name);
        assert_eq!(c.result, CheckResult::Fail, "{c:?}");
        assert_eq!(c.remediation, "dcb app replace dev ens1f0np0 dscp-prio 26:3", "{name}");
    }
}

#[test]
fn pfc_and_the_chain_propose_the_same_pfc_command() {
    // PFC on 4 instead of 3: both checks want exactly the profile's set.
    let s = run(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![4]));
    let pfc = check(&s, "ens1f0np0", "pfc");
    let chain = check(&s, "ens1f0np0", "chain-tos-pfc");
    assert_eq!(pfc.remediation, "dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on");
    assert_eq!(chain.remediation, pfc.remediation);
}

#[test]
fn dcbx_is_checked_when_the_profile_asks() {
    let mut spec = default_profile_spec();
    spec.dcbx = Some(kube_rdma_operator::crd::DcbxSpec::Os);
    let node = SimNode::new(&with_roce(example("cx6dx-dual"), |r| r.dcbx = nic::simdesc::DcbxMode::Firmware));
    let s = evaluate(&RoceProfile::new("os", spec.clone()), &node.read());
    let c = check(&s, "ens1f0np0", "dcbx");
    assert_eq!((c.result, c.expected.as_str(), c.actual.as_str()), (CheckResult::Fail, "os", "firmware"));
    assert_eq!(c.remediation, "dcb dcbx set dev ens1f0np0 host ieee");
    // Not asked: not checked.
    assert!(run(&example("cx6dx-dual")).checks.iter().all(|c| c.name != "dcbx"));
}

#[test]
fn ets_is_checked_when_the_profile_asks() {
    let mut spec = default_profile_spec();
    spec.ets = Some(kube_rdma_operator::crd::EtsSpec {
        bandwidth: vec![50, 0, 0, 50, 0, 0, 0, 0],
        priority_to_tc: None,
    });
    let mut node = SimNode::new(&example("cx6dx-dual")).read();
    let i = node.interfaces.iter_mut().find(|i| i.netdev == "ens1f0np0").unwrap();
    i.ets = nic::roce::Observed::Value(nic::netlink::dcb::IeeeEts {
        tc_tx_bw: [100, 0, 0, 0, 0, 0, 0, 0],
        tc_tsa: [2; 8],
        ..Default::default()
    });
    let s = evaluate(&RoceProfile::new("ets", spec), &node);
    let c = check(&s, "ens1f0np0", "ets");
    assert_eq!(c.result, CheckResult::Fail, "{c:?}");
    assert_eq!(
        (c.expected.as_str(), c.actual.as_str()),
        ("tc-bw 50,0,0,50,0,0,0,0", "tc-bw 100,0,0,0,0,0,0,0")
    );
    assert_eq!(
        c.remediation,
        "dcb ets set dev ens1f0np0 tc-tsa all:ets tc-bw 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0"
    );
    // Where ETS cannot be read, the check says so instead of guessing.
    assert_ne!(check(&s, "ens1f1np1", "ets").result, CheckResult::Pass);
}

#[test]
fn roce_v1_and_wrong_tos_fail_with_the_mlnx_tools_commands() {
    let s = run(&with_roce(example("cx6dx-dual"), |r| {
        r.roce_mode = "IB/RoCE v1".into();
        r.tos = 0;
    }));
    assert_eq!(check(&s, "ens1f0np0", "roce-mode").remediation, "cma_roce_mode -d mlx5_0 -p 1 -m 2");
    assert_eq!(check(&s, "ens1f0np0", "tos").remediation, "cma_roce_tos -d mlx5_0 -p 1 -t 106");
    // ToS 0 → DSCP 0 → unmapped → priority 0 → not lossless.
    assert_eq!(check(&s, "ens1f0np0", "chain-tos-pfc").result, CheckResult::Fail);
    assert_eq!(
        check(&s, "ens1f0np0", "chain-tos-pfc").remediation,
        "cma_roce_mode -d mlx5_0 -p 1 -m 2 && cma_roce_tos -d mlx5_0 -p 1 -t 106"
    );
    assert_eq!(s.summary.roce, "v1");
}

#[test]
fn a_partial_profile_only_checks_what_it_names() {
    let spec = kube_rdma_operator::crd::RoceProfileSpec {
        pfc: Some(kube_rdma_operator::crd::PfcSpec { priorities: vec![3] }),
        ..serde_json::from_str("{}").unwrap()
    };
    let p = RoceProfile::new("pfc-only", spec);
    let node = SimNode::new(&example("cx6dx-dual"));
    let s = evaluate(&p, &node.read());
    let names: std::collections::BTreeSet<&str> = s.checks.iter().map(|c| c.name.as_str()).collect();
    assert!(names.contains("pfc") && !names.contains("ecn") && !names.contains("mtu"), "{names:?}");
    assert_eq!(s.profile, "pfc-only");
}

#[test]
fn interface_selector_limits_the_checked_ports() {
    let mut spec = default_profile_spec();
    spec.interface_selector =
        Some(kube_rdma_operator::crd::InterfaceSelector { names: vec!["ens1f0*".into()], drivers: vec![] });
    let node = SimNode::new(&example("cx6dx-dual"));
    let s = evaluate(&RoceProfile::new("p", spec), &node.read());
    // Beside the node-wide rdma-netns check, only the selected port's.
    assert!(s.checks.iter().all(|c| c.interface == "ens1f0np0" || c.interface == "node"), "{:#?}", s.checks);
    assert_eq!(s.interfaces.len(), 1);
}

#[test]
fn fingerprint_is_stable_and_changes_with_settings() {
    let a = run(&example("cx6dx-dual"));
    let b = run(&example("cx6dx-dual"));
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.fingerprint.len(), 16);
    let c = run(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![3, 4]));
    assert_ne!(a.fingerprint, c.fingerprint);
    // Pause counters move all the time; they must not change the fingerprint.
    let d = run(&with_roce(example("cx6dx-dual"), |r| r.pfc_requests = vec![0, 0, 0, 12345, 0, 0, 0, 0]));
    assert_eq!(a.fingerprint, d.fingerprint);
}

#[test]
fn the_rdma_netns_mode_is_reported_per_node() {
    let s = run(&example("cx6dx-dual"));
    assert_eq!(s.netns_mode, kube_rdma_operator::crd::NetnsModeState::Exclusive);
    assert_eq!(serde_json::to_value(&s).unwrap()["netnsMode"], "exclusive");
    let mut d = example("cx6dx-dual");
    d.rdma_netns_mode = nic::simdesc::NetnsMode::Shared;
    let s = run(&d);
    assert_eq!(s.netns_mode, kube_rdma_operator::crd::NetnsModeState::Shared);
    // A change of mode is a change of the state (the fingerprint moves).
    assert_ne!(s.fingerprint, run(&example("cx6dx-dual")).fingerprint);
}

/// Shared netns mode where VFs with RDMA devices go to pods: a failing node check
/// with the module option as remediation, so the node is not ready; exclusive
/// passes; a node without such VFs is not checked for it.
#[test]
fn shared_netns_mode_with_rdma_vfs_fails_the_rdma_netns_check() {
    let netns = |s: &RdmaNodeStateStatus| s.checks.iter().find(|c| c.name == "rdma-netns").cloned().unwrap();
    let ok = run(&example("cx6dx-dual"));
    assert_eq!(netns(&ok).result, CheckResult::Pass);
    assert_eq!(ok.summary.ready, "True");

    let mut d = example("cx6dx-dual");
    d.rdma_netns_mode = nic::simdesc::NetnsMode::Shared;
    let s = run(&d);
    let c = netns(&s);
    assert_eq!(
        (c.interface.as_str(), c.result, c.expected.as_str()),
        ("node", CheckResult::Fail, "exclusive")
    );
    assert_eq!(c.actual, "shared: 16 VFs with RDMA devices cannot move into pods");
    assert_eq!(c.remediation, "echo 'options ib_core netns_mode=0' > /etc/modprobe.d/ib_core.conf && kubectl drain NODE --ignore-daemonsets && reboot && kubectl uncordon NODE");
    assert_eq!(s.summary.ready, "False");
    let ready = s.conditions.iter().find(|c| c.type_ == "RoceReady").unwrap();
    assert!(ready.message.contains("node/rdma-netns"), "{ready:?}");

    // e810-xxv's VFs have no RDMA device (upstream iavf): nothing moves into pods.
    let s = run(&example("e810-xxv"));
    assert_eq!(netns(&s).result, CheckResult::NotApplicable, "{:?}", netns(&s));
}

#[test]
fn e810_in_rocev2_mode_passes_the_protocol_check_and_reports_it() {
    let s = run(&example("e810-xxv"));
    let c = check(&s, "ens2f0", "rdma-protocol");
    assert_eq!(c.result, CheckResult::Pass);
    assert_eq!((c.expected.as_str(), c.actual.as_str()), ("RoCEv2", "RoCEv2"));
    assert!(s.interfaces.iter().all(|i| i.rdma_protocol.as_deref() == Some("RoCEv2")), "{:#?}", s.interfaces);
    // Link speed and FEC are reported (ETHTOOL_GFECPARAM: active RS).
    let i = &s.interfaces[0];
    assert_eq!((i.speed_mbps, i.fec.as_deref()), (Some(25_000), Some("rs")));
    assert!(
        !i.unavailable.iter().any(|u| u.field == "fec" || u.field == "rdmaProtocol"),
        "{:#?}",
        i.unavailable
    );
}

#[test]
fn e810_in_iwarp_mode_fails_with_the_devlink_commands_and_nothing_else_fails() {
    let s = run(&example("e810-c-iwarp"));
    let c = check(&s, "ens3f0", "rdma-protocol");
    assert_eq!(c.result, CheckResult::Fail);
    assert_eq!((c.expected.as_str(), c.actual.as_str()), ("RoCEv2", "iWARP"));
    assert_eq!(
        c.remediation,
        "devlink dev param set pci/0000:5e:00.0 name enable_iwarp value false cmode runtime && \
         devlink dev param set pci/0000:5e:00.0 name enable_roce value true cmode runtime"
    );
    // Every DCB setting is right: the protocol is the one thing that stops RoCE here.
    assert_eq!(failing(&s), ["ens3f0/rdma-protocol"]);
    assert_eq!(check(&s, "ens3f1", "rdma-protocol").result, CheckResult::Pass);
    // An RNIC has no RoCE mode and no RoCE GIDs: not failures of their own.
    for name in ["roce-mode", "gid-index"] {
        let c = check(&s, "ens3f0", name);
        assert_eq!(c.result, CheckResult::NotApplicable, "{c:?}");
        assert!(c.actual.starts_with("iWARP: "), "{c:?}");
    }
    let i = s.interfaces.iter().find(|i| i.name == "ens3f0").unwrap();
    assert_eq!(i.rdma_protocol.as_deref(), Some("iWARP"));
    assert_eq!(s.summary.ready, "False");
}

#[test]
fn mlx5_ports_run_roce_and_pass_the_protocol_check() {
    let s = run(&example("cx6dx-dual"));
    assert_eq!(check(&s, "ens1f0np0", "rdma-protocol").actual, "RoCEv2");
}

/// The protocol of an ice PF comes over devlink (`enable_roce`/`enable_iwarp`)
/// and must agree with the RDMA function discovery found; an older irdma without
/// those parameters leaves the discovered protocol standing.
#[test]
fn e810_protocol_is_read_over_devlink_and_checked_against_the_auxiliary_device() {
    use nic::netlink::devlink::{recorded, Cmode, DevHandle, Param, ParamReply, ParamType, ParamValue};
    use nic::roce::{DcbSource, Observed, RdmaProtocol};
    let mut node = SimNode::new(&example("e810-xxv"));
    let DcbSource::Recorded(r) = &mut node.source.dcb else { panic!("a simulated node is recorded") };
    // The family lookup, then two GETs per PF.
    assert_eq!(r.devlink.len(), 5);
    let proto = |n: &SimNode, iface: &str| n.read().interface(iface).unwrap().rdma_protocol.clone();
    // devlink says iWARP on the first PF while its auxiliary device is ice.roce.N.
    let h = DevHandle::pci("0000:17:00.0".parse().unwrap());
    let get = |name: &str, on: bool| {
        let param = Param {
            name: name.into(),
            generic: true,
            kind: ParamType::Bool,
            values: vec![(Cmode::Runtime, ParamValue::Bool(on))],
        };
        // 0x15: the family id the simulated kernel gives devlink (its recorded lookup, r.devlink[0]).
        recorded::param_get(0x15, &ParamReply { handle: h.clone(), param })
    };
    r.devlink[1] = get("enable_roce", false);
    r.devlink[2] = get("enable_iwarp", true);
    match proto(&node, "ens2f0") {
        Observed::Unknown(why) => {
            assert!(why.contains("devlink says iWARP") && why.contains("runs RoCEv2"), "{why}");
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(proto(&node, "ens2f1"), Observed::Value(RdmaProtocol::RoceV2));

    // The older irdma (roce_ena): ice has no such parameters, the auxiliary device decides.
    let mut desc = example("e810-xxv");
    desc.irdma_roce_ena = Some(true);
    let node = SimNode::new(&desc);
    assert_eq!(proto(&node, "ens2f0"), Observed::Value(RdmaProtocol::RoceV2));
    let s = evaluate(&default_profile(), &node.read());
    assert_eq!(check(&s, "ens2f0", "rdma-protocol").result, CheckResult::Pass);
}
