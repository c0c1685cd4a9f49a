//! Pod start latency on the real cluster: a pod with one `rdma_vfs` VF and the
//! `rdma-net` Multus network against a plain busybox pod, median of 10 each in
//! the same run (issue 20's target: at most 1.25 times the plain pod).
//!
//!   cargo bench -p kube-rdma-e2e --bench pod_start [-- N]
//!
//! Brings the cluster up if it is not (as `scripts/cluster up`) and installs the
//! device plugin cases' pools; leaves the cluster up. Performance is printed, never
//! asserted (CONTRIBUTING.md, Benchmarks): the last line says whether the target is met.

#[path = "../tests/e2e/ctx.rs"]
#[allow(dead_code)]
mod ctx;
#[path = "pod_start/measure.rs"]
mod podstart;
#[path = "../tests/e2e/pools.rs"]
#[allow(dead_code)]
mod pools;

/// The target ratio (VF pod / plain pod).
const TARGET: f64 = 1.25;

fn main() {
    let n = std::env::args().skip(1).find_map(|a| a.parse::<usize>().ok()).unwrap_or(10);
    let r = ctx::Ctx::up().and_then(|ctx| podstart::measure(&ctx, n));
    match r {
        Ok(lat) => {
            println!("{}", lat.report());
            let ok = lat.ratio() <= TARGET;
            println!("target <= {TARGET:.2}x: {}", if ok { "met" } else { "MISSED" });
        }
        Err(e) => {
            eprintln!("pod_start: {e:#}");
            std::process::exit(2);
        }
    }
}
