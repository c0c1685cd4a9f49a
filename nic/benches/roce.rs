//! `cargo bench -p nic --bench roce`: the agent's read of a simulated node
//! (discovery + RoCE observation of 8 PFs with 8 VFs each) and the DCB reply
//! parser. Plain `Instant` timing (no bench crate): median of N runs.

use std::time::{Duration, Instant};

use nic::netlink::dcb::{parse_messages, DcbApp, DcbMessage, IeeePfc, IeeeState, Payload};
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
    let src = DcbSource::Sim(sim.desc().clone());
    let opts = ObserveOpts::default();
    let inv = nic::discover(&roots);

    let obs = time(50, || observe(&roots, &inv, &src, &opts));
    let both = time(50, || observe(&roots, &nic::discover(&roots), &src, &opts));
    let n = observe(&roots, &inv, &src, &opts).interfaces.len();
    println!("observe, {n} PFs (inventory given):        median {obs:?}");
    println!("discover + observe, {n} PFs x 8 VFs:       median {both:?}");

    // A reply like the ones mlx5 sends: PFC + 16 DSCP APP entries.
    let apps: Vec<DcbApp> = (0..16).map(|d| DcbApp::dscp(d * 4, d % 8)).collect();
    let mut msg = DcbMessage::add_apps("ens1f0np0", &apps);
    if let Payload::Dcb(d) = &mut msg.payload {
        if let Some(nic::netlink::dcb::DcbAttr::Ieee(i)) = d.attrs.get_mut(1) {
            i.push(nic::netlink::dcb::IeeeAttr::Pfc(IeeePfc { pfc_cap: 8, pfc_en: 8, ..Default::default() }));
        }
    }
    let raw = msg.emit();
    let per = time(200, || {
        for _ in 0..1000 {
            let m = parse_messages(std::hint::black_box(&raw)).expect("parses");
            if let Payload::Dcb(d) = &m[0].payload {
                std::hint::black_box(IeeeState::from_msg(d));
            }
        }
    });
    println!("parse_messages + IeeeState, {} bytes:  median {:?} per reply", raw.len(), per / 1000);
}
