//! The end-to-end suite: cases run against the real local cluster
//! (`scripts/cluster up`, started here if it is not up), printing `ok`/`FAIL`
//! per case and `N passed, N failed` at the end.
//!
//!   scripts/test-e2e [WORD...] [--keep]
//!
//! A WORD runs only the cases whose name contains it. Without `--keep` each
//! lane ends by taking its cluster down and checking the host is as it was.
//!
//! The cases run in two lanes at the same time, each on a cluster of its own
//! ([`lanes`]): the second lane is this executable again (`--lane=1`) with
//! `KUBE_RDMA_E2E_INSTANCE` one up, and its lines are printed prefixed `[N]`.

mod cni;
mod ctx;
mod device_plugin;
mod dra;
mod install;
mod links;
mod operator;
mod pod_start;
mod pools;
mod quickstart;
mod security;
mod smoke;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ctx::Ctx;

/// One case: a name that reads as the behaviour, and its body.
pub struct Case {
    pub name: &'static str,
    pub run: fn(&Ctx) -> anyhow::Result<()>,
}

/// The two lanes, in order within each. The first holds the device plugin's
/// kubelet restart: for 6 minutes after it nothing on that cluster may restart
/// a peer or the plugin, or change the chart's values, so a lost registration
/// cannot hide behind a fresh one; quiet cases fill those minutes. Everything
/// that restarts or reconfigures runs meanwhile in the second lane: the
/// operator's stale case stops the kubelet, the CNI's cases need all 4 VFs of
/// the RDMA pool (the restart case's pod holds one until the watch ends), and
/// DRA mode switches the chart (its last case switches it back).
fn lanes() -> [Vec<Case>; 2] {
    let mut watched = smoke::cases();
    watched.extend(device_plugin::watch_start());
    watched.extend(device_plugin::watched_cases());
    watched.extend(operator::quiet_cases());
    watched.extend(security::quiet_cases());
    watched.extend(device_plugin::watch_end());
    let mut rest = device_plugin::disruptive_cases();
    rest.extend(operator::disruptive_cases());
    rest.extend(cni::cases());
    rest.extend(quickstart::cases());
    // The security case in DRA mode runs before the last DRA case switches the chart back.
    let mut dra_cases = dra::cases();
    let back = dra_cases.pop();
    rest.extend(dra_cases);
    rest.extend(security::dra_cases());
    rest.extend(back);
    rest.extend(install::cases()); // last: its uninstall case reinstalls the chart
    [watched, rest]
}

/// Cases passed and the names of those that failed.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keep = args.iter().any(|a| a == "--keep");
    let second_lane = args.iter().any(|a| a == "--lane=1");
    let words: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let chosen = |cases: Vec<Case>| -> Vec<Case> {
        cases
            .into_iter()
            .filter(|c| words.is_empty() || words.iter().any(|w| c.name.contains(w.as_str())))
            .collect()
    };
    let [watched, rest] = lanes().map(chosen);
    // The second lane's process runs its cases alone; one cluster is enough when the
    // words chose cases of one lane only.
    let (here, there) = match (second_lane, watched.is_empty()) {
        (true, _) | (false, true) => (rest, vec![]),
        (false, false) => (watched, rest),
    };

    let t0 = Instant::now();
    let ctx = match Ctx::up() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("e2e: the cluster did not come up: {e:#}");
            finish(t0, Tally { passed: 0, failed: vec!["the cluster did not come up".into()] }, None);
        }
    };
    let up = t0.elapsed();
    // Started once this cluster is up: the two `up`s would build the same images at once.
    let second = (!there.is_empty()).then(|| SecondLane::start(&args, there.len()));
    let on_second = match &second {
        Some(Ok(s)) => format!(", {} at the same time on instance {}", s.cases, s.instance),
        _ => String::new(),
    };
    println!("e2e: cluster ready in {:.0} s; {} cases here{on_second}", up.as_secs_f64(), here.len());
    let mut tally = run_cases(&ctx, &here);
    if !keep {
        down(&ctx, &mut tally);
    }
    match second {
        None => {}
        Some(Ok(s)) => {
            println!("e2e: this lane took {:.0} s", t0.elapsed().as_secs_f64());
            let theirs = s.join();
            tally.passed += theirs.passed;
            tally.failed.extend(theirs.failed);
        }
        Some(Err(e)) => tally.failed.push(format!("the second lane (it did not start: {e:#})")),
    }
    finish(t0, tally, Some(up));
}

fn run_cases(ctx: &Ctx, cases: &[Case]) -> Tally {
    let mut tally = Tally::default();
    for c in cases {
        let t = Instant::now();
        match (c.run)(ctx) {
            Ok(()) => {
                tally.passed += 1;
                println!("ok   {} ({:.1} s)", c.name, t.elapsed().as_secs_f64());
            }
            Err(e) => {
                println!("FAIL {} ({:.1} s)\n     {e:#}", c.name, t.elapsed().as_secs_f64());
                tally.failed.push(c.name.to_string());
            }
        }
    }
    tally
}

fn down(ctx: &Ctx, tally: &mut Tally) {
    let t = Instant::now();
    match smoke::down_leaves_the_host_as_it_found_it(ctx) {
        Ok(()) => {
            tally.passed += 1;
            println!("ok   down_leaves_the_host_as_it_found_it ({:.1} s)", t.elapsed().as_secs_f64());
        }
        Err(e) => {
            println!("FAIL down_leaves_the_host_as_it_found_it\n     {e:#}");
            tally.failed.push(format!(
                "down_leaves_the_host_as_it_found_it (instance {})",
                kube_rdma_e2e::node::instance()
            ));
        }
    }
}

/// Prints the summary (the last line is `N passed, N failed`) and exits.
fn finish(t0: Instant, tally: Tally, up: Option<Duration>) -> ! {
    println!("\ne2e: {:.0} s in all", t0.elapsed().as_secs_f64());
    if let (Some(up), Some(waited)) = (up, *device_plugin::WAITED.lock().expect("lock")) {
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
    for f in &tally.failed {
        println!("failed: {f}");
    }
    println!("{} passed, {} failed", tally.passed, tally.failed.len());
    std::process::exit(if tally.failed.is_empty() { 0 } else { 1 });
}

/// The second lane: this executable again, on the next instance's cluster.
struct SecondLane {
    instance: u8,
    cases: usize,
    child: Child,
    out: JoinHandle<Option<Tally>>,
    err: JoinHandle<()>,
}

impl SecondLane {
    fn start(args: &[String], cases: usize) -> anyhow::Result<SecondLane> {
        let mine = kube_rdma_e2e::node::instance();
        let instance = if mine < 9 { mine + 1 } else { mine - 1 };
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .arg("--lane=1")
            .env("KUBE_RDMA_E2E_INSTANCE", instance.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let tag = format!("[{instance}]");
        let out = {
            let tag = tag.clone();
            std::thread::spawn(move || {
                let mut summary = None;
                let mut failed = vec![];
                for line in BufReader::new(stdout?).lines().map_while(Result::ok) {
                    println!("{tag} {line}");
                    if let Some(f) = line.strip_prefix("failed: ") {
                        failed.push(format!("{f} (instance {instance})"));
                    } else if let Some(n) = passed_of_summary(&line) {
                        summary = Some(n);
                    }
                }
                summary.map(|passed| Tally { passed, failed })
            })
        };
        let err = std::thread::spawn(move || {
            if let Some(e) = stderr {
                for line in BufReader::new(e).lines().map_while(Result::ok) {
                    eprintln!("{tag} {line}");
                }
            }
        });
        Ok(SecondLane { instance, cases, child, out, err })
    }

    /// Waits for the lane to finish; a lane that ended without its summary line counts as one failure.
    fn join(mut self) -> Tally {
        let status = self.child.wait();
        let tally = self.out.join().ok().flatten();
        let _ = self.err.join();
        tally.unwrap_or_else(|| Tally {
            passed: 0,
            failed: vec![format!(
                "the second lane (instance {}) ended without its summary: {status:?}",
                self.instance
            )],
        })
    }
}

/// `N` of a `N passed, M failed` line.
fn passed_of_summary(line: &str) -> Option<usize> {
    let (passed, failed) = line.split_once(" passed, ")?;
    failed.strip_suffix(" failed")?.parse::<usize>().ok()?;
    passed.parse().ok()
}
