// Per-VF netdev counters read through each SR-IOV PF (`IFLA_VF_STATS` of the PF's
// RTM_GETLINK) on simulated nodes: the simulated kernel answers with
// nic::sim::sim_vf_stats, decoded by the production reader (nic::roce::observe
// with DcbSource::Recorded(sim.recording())).

use nic::roce::*;
use nic::sim::{load_desc, sim_vf_stats, Sim};
use nic::simdesc::NodeDesc;

fn example(name: &str) -> NodeDesc {
    load_desc(format!("{}/../examples/nodes/{name}.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn read(sim: &Sim, rec: Recording) -> NodeRoce {
    let inv = nic::discover(&sim.roots());
    let opts = ObserveOpts { node_name: Some("n".into()), ..ObserveOpts::default() };
    observe(&sim.roots(), &inv, &DcbSource::Recorded(rec), &opts)
}

fn counted(n: &NodeRoce) -> Vec<(&str, u32)> {
    n.vf_netdev_counters.iter().map(|c| (c.pf.as_str(), c.vf)).collect()
}

#[test]
fn every_vf_of_each_pf_has_netdev_counters_read_through_its_pf() {
    let sim = Sim::materialise(&example("cx6dx-dual")).unwrap();
    let n = read(&sim, sim.recording());
    let want: Vec<(&str, u32)> =
        ["ens1f0np0", "ens1f1np1"].into_iter().flat_map(|pf| (0..8).map(move |vf| (pf, vf))).collect();
    assert_eq!(counted(&n), want);
    for c in &n.vf_netdev_counters {
        assert_eq!(c.stats, sim_vf_stats(c.vf), "{c:?}");
    }
    assert_eq!(sim.recording().vf_stats.len(), 2, "one request per PF, not per VF");
}

#[test]
fn a_vf_moved_into_a_pods_namespace_keeps_its_netdev_counters() {
    let mut sim = Sim::materialise(&example("cx6dx-dual")).unwrap();
    let inv = nic::discover(&sim.roots());
    let vf = inv.pfs[0].vfs.iter().find(|v| v.index == 2).unwrap().pci;
    let before = read(&sim, sim.recording());
    sim.move_vf_into_pod(vf).unwrap();
    let after = read(&sim, sim.recording());
    let port = |n: &NodeRoce| n.vf_counters.iter().any(|v| v.pf == "ens1f0np0" && v.vf == 2);
    assert!(port(&before) && !port(&after), "exclusive mode: its RDMA device left the host's sysfs");
    assert_eq!(counted(&after), counted(&before));
    let c = after.vf_netdev_counters.iter().find(|c| c.pf == "ens1f0np0" && c.vf == 2).unwrap();
    assert_eq!(c.stats, sim_vf_stats(2));
}

#[test]
fn a_pf_whose_read_fails_has_no_vf_counters_and_the_observation_goes_on() {
    let sim = Sim::materialise(&example("cx6dx-dual")).unwrap();
    let mut rec = sim.recording();
    // Cut the first PF's reply inside its VF list: that PF's VFs go, the other PF's stay.
    let reply = &mut rec.vf_stats[0].replies[0];
    let len = 16 + 16 + 8 + 100;
    reply.truncate(len);
    reply[..4].copy_from_slice(&(len as u32).to_ne_bytes());
    let n = read(&sim, rec);
    assert_eq!(counted(&n), (0..8).map(|vf| ("ens1f1np1", vf)).collect::<Vec<_>>());
    assert!(n.interfaces[0].pfc.is_value(), "{:?}", n.interfaces[0].pfc);

    // Nothing recorded (a kernel that refuses): no counters, every other setting read.
    let n = read(&sim, Recording { vf_stats: vec![], ..sim.recording() });
    assert!(n.vf_netdev_counters.is_empty());
    assert!(n.interfaces.iter().all(|i| i.pfc.is_value()));
}

#[test]
fn a_pf_with_256_vfs_answers_in_one_message_over_64_kib() {
    let mut d = example("e810-xxv");
    let pf = &mut d.adapters[0].pfs[0];
    pf.total_vfs = Some(256);
    pf.vfs = 256;
    let sim = Sim::materialise(&d).unwrap();
    let rec = sim.recording();
    let big = rec.vf_stats.iter().map(|x| x.replies[0].len()).max().unwrap();
    assert!(big > 65_536, "{big} bytes");
    let n = read(&sim, rec);
    let pf_name = d.adapters[0].pfs[0].netdev.clone();
    let got: Vec<u32> = n.vf_netdev_counters.iter().filter(|c| c.pf == pf_name).map(|c| c.vf).collect();
    assert_eq!(got, (0..256).collect::<Vec<_>>());
}

#[test]
fn an_observation_serialized_before_vf_netdev_counters_still_reads() {
    let sim = Sim::materialise(&example("cx6dx-dual")).unwrap();
    let n = read(&sim, sim.recording());
    let mut v = serde_json::to_value(&n).unwrap();
    assert!(v["vfNetdevCounters"][0]["stats"]["rxBytes"].is_u64(), "{}", v["vfNetdevCounters"][0]);
    v.as_object_mut().unwrap().remove("vfNetdevCounters");
    let back: NodeRoce = serde_json::from_value(v).unwrap();
    assert!(back.vf_netdev_counters.is_empty());
}
