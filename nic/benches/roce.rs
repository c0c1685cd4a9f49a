//! `cargo bench -p nic --bench roce`: the agent's read of a simulated node
//! (discovery + RoCE observation of 8 PFs with 8 VFs each) and the DCB reply
//! parser. Plain `Instant` timing (no bench crate): median of N runs.

use std::time::{Duration, Instant};

use netlink_packet_core::NetlinkPayload;
use nic::netlink::dcb::{parse_messages, DcbApp, DcbMsg, IeeePfc, IeeeState, Priorities};
use nic::netlink::transport::{emit, request_message};
use nic::roce::{observe, DcbSource, ObserveOpts};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(f());
        v.push(t.elapsed());
    }
    median(v)
}

fn main() {
    let sim = nic::sim::Sim::materialise(&nic::sim::big_node(8, 8)).expect("sim");
    let roots = sim.roots();
    let src = DcbSource::Recorded(sim.recording());
    let opts = ObserveOpts { node_name: Some(sim.desc().node.clone()), ..ObserveOpts::default() };
    let inv = nic::discover(&roots);

    let obs = time(50, || observe(&roots, &inv, &src, &opts));
    let both = time(50, || observe(&roots, &nic::discover(&roots), &src, &opts));
    let n = observe(&roots, &inv, &src, &opts).interfaces.len();
    println!("observe, {n} PFs (inventory given):        median {obs:?}");
    println!("discover + observe, {n} PFs x 8 VFs:       median {both:?}");

    // A reply like the ones mlx5 sends: PFC + 16 DSCP APP entries.
    let apps: Vec<DcbApp> = (0..16).map(|d| DcbApp::dscp(d * 4, d % 8)).collect();
    let mut msg = DcbMsg::add_apps("ens1f0np0", &apps);
    if let Some(nic::netlink::dcb::DcbAttr::Ieee(i)) = msg.attrs.get_mut(1) {
        let pfc = IeeePfc { pfc_cap: 8, pfc_en: Priorities::from_bits(8), ..Default::default() };
        i.push(nic::netlink::dcb::IeeeAttr::Pfc(pfc));
    }
    let raw = emit(&mut request_message(0, 1, msg));
    let per = time(200, || {
        for _ in 0..1000 {
            let m = parse_messages(std::hint::black_box(&raw)).expect("parses");
            if let NetlinkPayload::InnerMessage(d) = &m[0].payload {
                std::hint::black_box(IeeeState::from_msg(d));
            }
        }
    });
    println!("parse_messages + IeeeState, {} bytes:  median {:?} per reply", raw.len(), per / 1000);
}
