//! A simulated node answers the agent's DCB reads the way the kernel does:
//! recorded netlink replies (`nic::sim::Sim::recording`) go through the same
//! transport and decoder as on hardware, so what the checks see of DCB comes
//! from the decoder, broken replies included.
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::{Check, CheckResult, RdmaNodeStateStatus};
use kube_rdma_operator::fixtures::{example, SimNode};
use kube_rdma_operator::status::evaluate;
use nic::roce::DcbSource;

fn check<'a>(s: &'a RdmaNodeStateStatus, iface: &str, name: &str) -> &'a Check {
    s.checks
        .iter()
        .find(|c| c.interface == iface && c.name == name)
        .unwrap_or_else(|| panic!("no check {iface}/{name} in {:#?}", s.checks))
}

#[test]
fn corrupted_recorded_dcb_reply_gives_unknown_with_the_decoder_diagnostic() {
    let mut node = SimNode::new(&example("cx6dx-dual"));
    let DcbSource::Recorded(rec) = &mut node.source.dcb else {
        panic!("a simulated node is read from a recording")
    };
    let x = rec
        .dcb
        .iter_mut()
        .find(|x| x.request.windows(9).any(|w| w == b"ens1f0np0"))
        .expect("an IEEE_GET exchange for ens1f0np0");
    // struct ieee_pfc is 136 bytes: make DCB_ATTR_IEEE_PFC's nla_len (140) one short.
    let reply = &mut x.replies[0];
    let at = reply.windows(4).position(|w| w == [0x8c, 0x00, 0x02, 0x00]).expect("DCB_ATTR_IEEE_PFC");
    reply[at] = 0x8b;

    let s = evaluate(&default_profile(), &node.read());
    let pfc = check(&s, "ens1f0np0", "pfc");
    assert_eq!(pfc.result, CheckResult::Unknown, "{pfc:#?}");
    for part in
        ["ens1f0np0", "RTM_GETDCB", "cannot decode reply", "DCB_ATTR_IEEE_PFC: 135 bytes, expected 136"]
    {
        assert!(pfc.actual.contains(part), "{:?} lacks {part:?}", pfc.actual);
    }
    assert_eq!(check(&s, "ens1f0np0", "dscp-map").result, CheckResult::Unknown);
    // The other port's reply is intact: read and passing, as before.
    assert_eq!(check(&s, "ens1f1np1", "pfc").result, CheckResult::Pass);
    let i = s.interfaces.iter().find(|i| i.name == "ens1f0np0").expect("interface state");
    assert_eq!(i.ets_bandwidth, None, "nothing read from the broken reply");
}

#[test]
fn simulated_node_reports_ets_through_the_decoder() {
    let s = evaluate(&default_profile(), &SimNode::new(&example("cx6dx-dual")).read());
    for i in &s.interfaces {
        // mlx5's boot ETS: every TC at 100 (vendor TSA).
        assert_eq!(i.ets_bandwidth, Some(vec![100; 8]), "{}", i.name);
    }
    assert_eq!(check(&s, "ens1f0np0", "pfc").result, CheckResult::Pass);
}
