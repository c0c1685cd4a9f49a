//! Pod start latency on the real cluster: a pod with one `rdma_vfs` VF and the
//! `rdma-net` Multus network against a plain busybox pod, median of 10 each in
//! the same run (issue 20's target: at most 1.25 times the plain pod).
//!
//!   cargo bench -p kube-rdma-e2e --bench pod_start [-- N]
//!
//! Brings the cluster up if it is not (as `scripts/cluster up`) and installs the
//! device plugin cases' pools; leaves the cluster up. Performance is printed, never
//! asserted (CONTRIBUTING.md, Benchmarks): the last line says whether the target is met.
//! `scripts/test-e2e` runs the same measurement as a case (`tests/e2e/pod_start.rs`).

#[path = "../tests/e2e/ctx.rs"]
#[allow(dead_code)]
mod ctx;
#[path = "../tests/e2e/pod_start.rs"]
mod podstart;
#[path = "../tests/e2e/pools.rs"]
#[allow(dead_code)]
mod pools;

fn main() {
    let n = std::env::args().skip(1).find_map(|a| a.parse::<usize>().ok()).unwrap_or(podstart::STARTS);
    let r = ctx::Ctx::up().and_then(|ctx| podstart::measure(&ctx, n));
    match r {
        Ok(lat) => println!("{}", lat.summary()),
        Err(e) => {
            eprintln!("pod_start: {e:#}");
            std::process::exit(2);
        }
    }
}
