//! The end-to-end suite: cases run against the real local cluster
//! (`scripts/cluster up`, started here if it is not up), one after another,
//! printing `ok`/`FAIL` per case and `N passed, N failed` at the end.
//!
//!   scripts/test-e2e [WORD...] [--keep]
//!
//! A WORD runs only the cases whose name contains it. Without `--keep` the
//! last case takes the cluster down and checks the host is as it was.

mod cni;
mod ctx;
mod device_plugin;
mod dra;
mod links;
mod operator;
mod pools;
mod smoke;

use std::time::Instant;

use ctx::Ctx;

/// One case: a name that reads as the behaviour, and its body.
pub struct Case {
    pub name: &'static str,
    pub run: fn(&Ctx) -> anyhow::Result<()>,
}

fn main() {
    let args: Vec<String> =
        std::env::args().skip(1).filter(|a| !a.starts_with("--") || a == "--keep").collect();
    let keep = args.iter().any(|a| a == "--keep");
    let words: Vec<&String> = args.iter().filter(|a| *a != "--keep").collect();
    let mut cases: Vec<Case> = vec![];
    cases.extend(smoke::cases());
    // The device plugin cases first, up to its kubelet restart: the watcher it leaves
    // must see 6 minutes without another kubelet or plugin restart. Quiet cases (none
    // restarts a peer or the plugin, or changes the chart's values) fill those
    // minutes; the disruptive ones (the operator's stale case stops the kubelet) and
    // the CNI's (they need all 4 VFs of the RDMA pool, and the restart case's pod
    // holds one until the watcher's end) come after it.
    cases.extend(device_plugin::cases());
    cases.extend(device_plugin::watched_cases());
    cases.extend(operator::quiet_cases());
    cases.extend(device_plugin::after_watch_cases());
    cases.extend(operator::disruptive_cases());
    cases.extend(cni::cases());
    // DRA mode last: its cases switch the chart and the last switches it back.
    cases.extend(dra::cases());
    let selected: Vec<&Case> = cases
        .iter()
        .filter(|c| words.is_empty() || words.iter().any(|w| c.name.contains(w.as_str())))
        .collect();

    let t0 = Instant::now();
    let ctx = match Ctx::up() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("e2e: the cluster did not come up: {e:#}");
            println!("0 passed, 1 failed");
            std::process::exit(1);
        }
    };
    let up = t0.elapsed();
    println!("e2e: cluster ready in {:.0} s; {} cases", up.as_secs_f64(), selected.len());
    let (mut passed, mut failed) = (0, vec![]);
    for c in &selected {
        let t = Instant::now();
        match (c.run)(&ctx) {
            Ok(()) => {
                passed += 1;
                println!("ok   {} ({:.1} s)", c.name, t.elapsed().as_secs_f64());
            }
            Err(e) => {
                println!("FAIL {} ({:.1} s)\n     {e:#}", c.name, t.elapsed().as_secs_f64());
                failed.push(c.name);
            }
        }
    }
    if !keep {
        let t = Instant::now();
        match smoke::down_leaves_the_host_as_it_found_it(&ctx) {
            Ok(()) => {
                passed += 1;
                println!("ok   down_leaves_the_host_as_it_found_it ({:.1} s)", t.elapsed().as_secs_f64());
            }
            Err(e) => {
                println!("FAIL down_leaves_the_host_as_it_found_it\n     {e:#}");
                failed.push("down_leaves_the_host_as_it_found_it");
            }
        }
    }
    println!("\ne2e: {:.0} s in all", t0.elapsed().as_secs_f64());
    if let Some(waited) = *device_plugin::WAITED.lock().expect("lock") {
        // No run that watches the kubelet restart can be shorter than this: the
        // cluster must be up, and the watch lasts past the kubelet's 5-minute grace.
        let floor = up + device_plugin::WATCH_FOR;
        println!(
            "e2e: floor of any run with the kubelet-restart watch: cluster start {:.0} s + the watch {:.0} s = {:.0} s; {:.0} s of the watch waited with no quiet case left to run",
            up.as_secs_f64(),
            device_plugin::WATCH_FOR.as_secs_f64(),
            floor.as_secs_f64(),
            waited.as_secs_f64()
        );
    }
    for f in &failed {
        println!("failed: {f}");
    }
    println!("{passed} passed, {} failed", failed.len());
    std::process::exit(if failed.is_empty() { 0 } else { 1 });
}
