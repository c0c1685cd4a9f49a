//! Daemon benchmark on a simulated 1024-VF node (8 PF × 128 VF), run against
//! the real binary (the daemon is its own process, as in production):
//! - start → first ListAndWatch response (process spawn, discovery, pools,
//!   socket served, first list received by a client), with and without the
//!   previous run's CDI spec on disk;
//! - Allocate latency p50/p99 over 10 000 calls on one connection;
//! - resident memory (VmRSS) of the daemon after start, once the start's freed
//!   heap is returned, after the calls, and its peak (VmHWM);
//! - SIGTERM → exit with 1, 4 and 16 pools, each with an open ListAndWatch
//!   stream (as the kubelet keeps one), against the 1-pool stop of the same run;
//! - the rescan a link event on one PF triggers (walk of that PF, merge, memory,
//!   pools), against a walk of the whole node in the same run.
//!
//! Targets: first list < 100 ms, Allocate p99 < 1 ms, RSS < 20 MiB, stop < 1 s
//! whatever the pool count, one-PF rescan < 5 ms.
//! Run: `cargo bench -p kube-rdma-device-plugin --bench daemon`. With
//! `KUBE_RDMA_DP_BASELINE=/path/to/an/older/kube-rdma-device-plugin` (a release
//! build) the older binary is measured the same way in the same run, after
//! ours, and each process-level number is printed as a ratio against it
//! (before/after a change in one run).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Dirs, FakeKubelet, SOCK};
use kube_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use kube_rdma_device_plugin::api::{AllocateRequest, ContainerAllocateRequest, Empty};
use kube_rdma_device_plugin::kubelet;

/// Starts timed per build: a start is ~50 ms and its spread a few ms, so a
/// median of 5 moved by 25% between idle runs.
const STARTS: usize = 21;

/// `field` (`VmRSS`, `VmHWM`) of `/proc/<pid>/status`, KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time (ns) of process `pid`, user + system, including threads that have
/// already exited (discovery's workers do): `/proc/<pid>/stat` fields 14 and 15,
/// in clock ticks (usually 10 ms, so single starts are coarse; medians help).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // The command name (field 2) may hold spaces; fields after it are plain.
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else { return 0 };
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sim = nic::sim::Sim::materialise(&nic::sim::big_node(8, 128)).expect("materialise 1024-VF node");
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"));
    let baseline = std::env::var_os("KUBE_RDMA_DP_BASELINE").filter(|v| !v.is_empty()).map(PathBuf::from);
    println!("kube-rdma-device-plugin on a simulated 8 PF x 128 VF node (1024 VFs), release build");
    let now = rt.block_on(measure(&sim, &ours));
    now.print("this build");
    let before = baseline.map(|b| {
        let m = rt.block_on(measure(&sim, &b));
        m.print(&format!("baseline {}", b.display()));
        m
    });
    if let Some(b) = &before {
        now.compare(b);
    }
    in_process(&sim);
    one_pf_rescan(&sim);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end of the run: {}", load.trim());
}

/// What the daemon process costs, measured from outside as the kubelet sees it.
struct Measured {
    /// Starts that found the previous run's CDI spec on disk.
    starts: Vec<Duration>,
    /// Starts that found none.
    starts_no_spec: Vec<Duration>,
    start_cpu: Vec<Duration>,
    allocate: Vec<Duration>,
    cpu_per_call: Duration,
    rss_start_kib: u64,
    rss_settled_kib: u64,
    rss_after_kib: u64,
    /// VmHWM at the end: the most ever resident.
    rss_peak_kib: u64,
    stops: Vec<(usize, Duration)>,
}

async fn measure(sim: &nic::sim::Sim, exe: &Path) -> Measured {
    let mut m = start_and_allocate(sim, exe).await;
    m.stops = stop_times(sim, exe).await;
    m
}

impl Measured {
    fn print(&self, what: &str) {
        let (starts, lat) = (&self.starts, &self.allocate);
        println!("{what}:");
        for (set, with) in
            [(starts, "the previous run's CDI spec on disk"), (&self.starts_no_spec, "no spec on disk")]
        {
            println!(
                "  start -> first ListAndWatch (1024 devices), {with}: median {:.1} ms, min {:.1} ms, max {:.1} ms over {} starts (target < 100 ms)",
                ms(pct(set, 0.5)),
                ms(set[0]),
                ms(set[set.len() - 1]),
                set.len(),
            );
        }
        println!(
            "  daemon CPU to the first list (/proc stat, all threads): median {:.1} ms",
            ms(pct(&self.start_cpu, 0.5))
        );
        println!(
            "  Allocate (1 VF, gRPC round trip over the unix socket, incl. device-info file write) x {}: p50 {:.0} us, p99 {:.0} us, max {:.0} us (target p99 < 1 ms); daemon CPU per call {:.0} us",
            lat.len(),
            us(pct(lat, 0.5)),
            us(pct(lat, 0.99)),
            us(lat[lat.len() - 1]),
            us(self.cpu_per_call)
        );
        println!(
            "  VmRSS: {:.1} MiB 0.2 s after start, {:.1} MiB 1.5 s after (the daemon returns the start's freed heap after 1 s), {:.1} MiB after the Allocate calls (target < 20 MiB); peak (VmHWM) {:.1} MiB",
            self.rss_start_kib as f64 / 1024.0,
            self.rss_settled_kib as f64 / 1024.0,
            self.rss_after_kib as f64 / 1024.0,
            self.rss_peak_kib as f64 / 1024.0
        );
        let base = self.stops[0].1.as_secs_f64();
        for (n, t) in &self.stops {
            println!(
                "  SIGTERM -> exit with {n:>2} pools, one open ListAndWatch each: median {:.1} ms of {STOP_RUNS} ({:.2}x the 1-pool stop; target < 1 s)",
                ms(*t),
                t.as_secs_f64() / base
            );
        }
    }

    /// Each process-level number of this build over the baseline's (< 1: faster or smaller).
    fn compare(&self, before: &Measured) {
        let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
        println!("this build / baseline (same run):");
        println!(
            "  start median {:.2}x (no spec on disk: {:.2}x; an older build may remove its spec at SIGTERM), start CPU {:.2}x, Allocate p50 {:.2}x, p99 {:.2}x, CPU per Allocate {:.2}x, VmRSS after the calls {:.2}x, peak {:.2}x",
            r(pct(&self.starts, 0.5), pct(&before.starts, 0.5)),
            r(pct(&self.starts_no_spec, 0.5), pct(&before.starts_no_spec, 0.5)),
            r(pct(&self.start_cpu, 0.5), pct(&before.start_cpu, 0.5)),
            r(pct(&self.allocate, 0.5), pct(&before.allocate, 0.5)),
            r(pct(&self.allocate, 0.99), pct(&before.allocate, 0.99)),
            r(self.cpu_per_call, before.cpu_per_call),
            self.rss_after_kib as f64 / before.rss_after_kib.max(1) as f64,
            self.rss_peak_kib as f64 / before.rss_peak_kib.max(1) as f64
        );
        for ((n, a), (_, b)) in self.stops.iter().zip(&before.stops) {
            println!("  SIGTERM -> exit with {n:>2} pools {:.2}x", r(*a, *b));
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `n` pools over the 8 PFs of `big_node(8, 128)`: whole PFs, or VF halves for 16.
fn pools_config(n: usize) -> String {
    let mut s = String::from("pools:\n");
    for i in 0..n {
        let sel = if n <= 8 {
            format!("{{rootDevices: [\"0000:{:02x}:00.0\"]}}", 0x10 + i * 0x10)
        } else {
            let (pf, half) = (i / 2, i % 2);
            format!("{{pfNames: [\"ens{}f0np0#{}-{}\"]}}", pf + 1, half * 64, half * 64 + 63)
        };
        s.push_str(&format!("- name: p{i}\n  selectors: {sel}\n"));
    }
    s
}

/// Stops timed per pool count: a stop is 10-25 ms on 2 cores with a spread as
/// wide as its median, so 3 could not tell two builds apart.
const STOP_RUNS: usize = 9;

/// SIGTERM → exit of the real daemon serving `n` pools, each with an open stream.
async fn stop_times(sim: &nic::sim::Sim, exe: &Path) -> Vec<(usize, Duration)> {
    let roots = sim.roots();
    let mut results = Vec::new();
    for n in [1usize, 4, 16] {
        let mut times = Vec::new();
        for _ in 0..STOP_RUNS {
            let dirs = Dirs::new();
            let k = FakeKubelet::start(&dirs.kubelet);
            let cfg = dirs.write_config(&pools_config(n));
            let mut child = dirs
                .daemon_command_of(exe)
                .arg("--sysfs-root")
                .arg(&roots.sysfs)
                .arg("--dev-root")
                .arg(&roots.dev)
                .arg("--rescan-interval")
                .arg("3600")
                .arg("--config")
                .arg(&cfg)
                .spawn()
                .expect("spawn daemon");
            let mut streams = Vec::new();
            for _ in 0..n {
                let reg = k.next_registration(Duration::from_secs(10)).await;
                let ch = kubelet::connect_unix(&dirs.kubelet.join(&reg.endpoint)).await.unwrap();
                let mut c = DevicePluginClient::new(ch);
                let mut s = c.list_and_watch(Empty {}).await.unwrap().into_inner();
                s.message().await.unwrap().unwrap();
                streams.push((c, s));
            }
            let t = Instant::now();
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            let st = child.wait().await.unwrap();
            times.push(t.elapsed());
            assert!(st.success());
            drop(streams);
        }
        times.sort();
        results.push((n, pct(&times, 0.5)));
    }
    results
}

/// CPU time of the calling thread (`RUSAGE_THREAD`).
fn thread_cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr());
        u.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// What a link event costs the daemon: re-read the function whose netdev
/// changed (the PF here), fill in memory, plan every pool; and, when every VF
/// of that PF changed too, the walk of the whole PF; against a walk of the node.
fn one_pf_rescan(sim: &nic::sim::Sim) {
    use kube_rdma_device_plugin::config::Config;
    use kube_rdma_device_plugin::inuse::{Allocations, Memory};
    let roots = sim.roots();
    let scope = nic::discover::Scope { gid_tables: false, ..Default::default() };
    let cfg = Config::default_pools();
    let mut mem = Memory::default();
    let mut inv = nic::discover::discover_scoped(&roots, scope);
    mem.observe(&mut inv);
    let pf: nic::PciAddr = "0000:30:00.0".parse().unwrap();
    let (mut one, mut one_cpu, mut whole, mut full) = (vec![], vec![], vec![], vec![]);
    for _ in 0..21 {
        let (t, c) = (Instant::now(), thread_cpu());
        assert!(nic::discover::rescan_function(&roots, scope, &mut inv, pf));
        if let Some(p) = inv.pfs.iter_mut().find(|p| p.pci == pf) {
            mem.observe_pf(p);
        }
        let plan = kube_rdma_device_plugin::pools::plan_with(&inv, &cfg, &Allocations::default());
        one.push(t.elapsed());
        one_cpu.push(thread_cpu() - c);
        assert_eq!(plan.pools[0].devices.len(), 1024);
        let t = Instant::now();
        let mut part = nic::discover::discover_pf(&roots, scope, pf);
        for p in &mut part.pfs {
            mem.observe_pf(p);
        }
        inv.replace_pf(pf, part);
        let plan = kube_rdma_device_plugin::pools::plan_with(&inv, &cfg, &Allocations::default());
        whole.push(t.elapsed());
        assert_eq!(plan.pools[0].devices.len(), 1024);
        let t = Instant::now();
        let mut all = nic::discover::discover_scoped(&roots, scope);
        mem.observe(&mut all);
        let plan = kube_rdma_device_plugin::pools::plan_with(&all, &cfg, &Allocations::default());
        full.push(t.elapsed());
        assert_eq!(plan.pools[0].devices.len(), 1024);
    }
    for v in [&mut one, &mut one_cpu, &mut whole, &mut full] {
        v.sort();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let base = ms(pct(&full, 0.5));
    println!(
        "rescan after a link event on one PF's netdev (that function, memory, every pool): median {:.2} ms wall, {:.2} ms CPU, p90 {:.2} ms ({:.3}x the node walk; target < 5 ms)",
        ms(pct(&one, 0.5)),
        ms(pct(&one_cpu, 0.5)),
        ms(pct(&one, 0.9)),
        ms(pct(&one, 0.5)) / base
    );
    println!(
        "  the same PF with all its 128 VFs read again (each VF's netdev changed too): median {:.2} ms ({:.2}x); node walk {:.1} ms",
        ms(pct(&whole, 0.5)),
        ms(pct(&whole, 0.5)) / base,
        base
    );
}

/// Starts to the first full list ([`STARTS`]), then 10 000 Allocate calls on the last one.
async fn start_and_allocate(sim: &nic::sim::Sim, exe: &Path) -> Measured {
    let roots = sim.roots();
    let dirs = Dirs::new();
    let k = FakeKubelet::start(&dirs.kubelet);
    let sock = dirs.kubelet.join(SOCK);
    let mut starts = Vec::new();
    let mut starts_no_spec = Vec::new();
    let mut start_cpu = Vec::new();
    let mut last_child = None;
    for round in 0..STARTS {
        // Every other start finds no CDI spec of a previous run (a first start, or
        // an older build, which removed its spec at SIGTERM); the others find the
        // one the last run kept, as a restart on a node does.
        let no_spec = round % 2 == 0;
        if no_spec {
            let _ = std::fs::remove_dir_all(&dirs.cdi);
        }
        let t0 = Instant::now();
        let mut child = dirs
            .daemon_command_of(exe)
            .arg("--sysfs-root")
            .arg(&roots.sysfs)
            .arg("--dev-root")
            .arg(&roots.dev)
            .arg("--rescan-interval")
            .arg("3600")
            .spawn()
            .expect("spawn daemon");
        // Dial as soon as the socket exists; the first list must be the full 1024.
        let ch = loop {
            if sock.exists() {
                if let Ok(ch) = kubelet::connect_unix(&sock).await {
                    break ch;
                }
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        let mut c = DevicePluginClient::new(ch);
        let mut s = c.list_and_watch(Empty {}).await.unwrap().into_inner();
        let first = s.message().await.unwrap().unwrap();
        let took = t0.elapsed();
        start_cpu.push(Duration::from_nanos(cpu_ns(child.id().unwrap())));
        assert_eq!(first.devices.len(), 1024);
        if no_spec { &mut starts_no_spec } else { &mut starts }.push(took);
        let _ = k.next_registration(Duration::from_secs(5)).await;
        if round + 1 < STARTS {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            let st = child.wait().await.unwrap();
            assert!(st.success());
            // Wait for cleanup so the next round starts from an empty dir.
            while sock.exists() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        } else {
            last_child = Some((child, c, first));
        }
    }
    let (mut child, mut c, first) = last_child.unwrap();
    let pid = child.id().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_start_kib = status_kib(pid, "VmRSS");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let rss_settled_kib = status_kib(pid, "VmRSS");

    let ids: Vec<String> = first.devices.iter().map(|d| d.id.clone()).collect();
    // Warm-up, then 10 000 measured calls.
    for id in ids.iter().take(100) {
        c.allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest { devices_ids: vec![id.clone()] }],
        })
        .await
        .unwrap();
    }
    let cpu_before = cpu_ns(pid);
    let mut allocate = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let id = ids[i % ids.len()].clone();
        let t = Instant::now();
        let r = c
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest { devices_ids: vec![id] }],
            })
            .await
            .unwrap();
        allocate.push(t.elapsed());
        assert_eq!(r.into_inner().container_responses.len(), 1);
    }
    let cpu_per_call = Duration::from_nanos((cpu_ns(pid) - cpu_before) / 10_000);
    allocate.sort();
    let rss_after_kib = status_kib(pid, "VmRSS");
    let rss_peak_kib = status_kib(pid, "VmHWM");
    starts.sort();
    starts_no_spec.sort();
    start_cpu.sort();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let _ = child.wait().await;
    Measured {
        starts,
        starts_no_spec,
        start_cpu,
        allocate,
        cpu_per_call,
        rss_start_kib,
        rss_settled_kib,
        rss_after_kib,
        rss_peak_kib,
        stops: vec![],
    }
}

/// The daemon's work in this process, to separate CPU cost from scheduling on a busy machine.
fn in_process(sim: &nic::sim::Sim) {
    let roots = sim.roots();
    let mut disc = Vec::new();
    let mut lean = Vec::new();
    let mut plan_t = Vec::new();
    let mut pool = None;
    for _ in 0..5 {
        let t = Instant::now();
        let scope = nic::discover::Scope { gid_tables: false, ..Default::default() };
        std::hint::black_box(nic::discover::discover_scoped(&roots, scope));
        lean.push(t.elapsed());
        let t = Instant::now();
        let inv = nic::discover(&roots);
        disc.push(t.elapsed());
        let t = Instant::now();
        let plan = kube_rdma_device_plugin::pools::plan(
            &inv,
            &kube_rdma_device_plugin::config::Config::default_pools(),
        );
        plan_t.push(t.elapsed());
        pool = plan.pools.into_iter().next();
    }
    disc.sort();
    lean.sort();
    plan_t.sort();
    let pool = pool.unwrap();
    let ids: Vec<String> = pool.devices.iter().map(|d| d.id.clone()).collect();
    let mut pure = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let id = [ids[i % ids.len()].clone()];
        let t = Instant::now();
        let r = kube_rdma_device_plugin::allocate::container_response(&pool, &id).unwrap();
        pure.push(t.elapsed());
        std::hint::black_box(r);
    }
    pure.sort();
    println!(
        "in-process (this build): discovery without GID tables (all the daemon reads) {:.1} ms, with GID tables {:.1} ms, pools {:.2} ms (medians of 5); allocate::container_response p50 {:.1} us, p99 {:.1} us",
        ms(pct(&lean, 0.5)),
        ms(pct(&disc, 0.5)),
        ms(pct(&plan_t, 0.5)),
        us(pct(&pure, 0.5)),
        us(pct(&pure, 0.99))
    );
}
