//! One full agent check of a simulated node with 8 PFs (8 VFs each): discover +
//! observe + checks + status. Target: < 50 ms. Run: `cargo bench -p kube-rdma-operator --bench agent`.
use std::time::{Duration, Instant};

use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::fixtures::SimNode;
use kube_rdma_operator::status::evaluate;

const TARGET: Duration = Duration::from_millis(50);

fn main() {
    let pfs = 8;
    let vfs = 8;
    let node = SimNode::new(&nic::sim::big_node(pfs, vfs));
    let profile = default_profile();
    // Warm the page cache and check the node is what we think it is.
    let first = evaluate(&profile, &node.read());
    assert_eq!(first.interfaces.len(), pfs as usize, "8 PF interfaces checked");
    let checks = first.checks.len();

    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            let status = evaluate(&profile, &node.read());
            let d = t.elapsed();
            std::hint::black_box(status);
            d
        })
        .collect();
    // Where the time goes: discovery (sysfs walk), RoCE observation, checks.
    let src = &node.source;
    let (mut t_disc, mut t_obs, mut t_eval) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..20 {
        let t = Instant::now();
        let inv = nic::discover(&src.roots);
        t_disc += t.elapsed();
        let t = Instant::now();
        let observed = nic::roce::observe(&src.roots, &inv, &src.dcb, &src.opts);
        t_obs += t.elapsed();
        let t = Instant::now();
        std::hint::black_box(evaluate(&profile, &observed));
        t_eval += t.elapsed();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / 20.0;
    times.sort();
    let median = times[times.len() / 2];
    let p95 = times[times.len() * 95 / 100];
    let max = times[times.len() - 1];
    println!(
        "agent full check, sim node {pfs} PFs x {vfs} VFs, {checks} checks: median {:.2} ms, p95 {:.2} ms, max {:.2} ms (target < {} ms): {}",
        median.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        TARGET.as_millis(),
        if median < TARGET { "OK" } else { "OVER TARGET" }
    );
    println!(
        "  mean split: discover {:.2} ms, observe {:.2} ms, checks+status {:.3} ms",
        ms(t_disc),
        ms(t_obs),
        ms(t_eval)
    );
}
