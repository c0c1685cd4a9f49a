//! Discovery of a simulated 8 PF × 128 VF node (1024 VFs), timed against a
//! plain `std::fs` walk that reads the same files, in the same run.
//!
//! `cargo bench -p nic --bench discover` prints both medians and the ratio.
//! Targets (issue 2): discovery under 50 ms and at most 1.5× the plain walk.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use nic::sim::{big_node, Sim};

/// The baseline: what any tool must do to read the same facts — list each
/// device, read its attribute files and links, its netdev's files, its RDMA
/// device's port and GID files, its char devices — with plain `std::fs` calls
/// and no modelling.
fn plain_walk(sys: &Path, dev: &Path) -> usize {
    let bytes = std::cell::Cell::new(0usize);
    let read = |p: &Path| {
        if let Ok(s) = std::fs::read_to_string(p) {
            bytes.set(bytes.get() + s.len());
        }
    };
    let bus = sys.join("bus/pci/devices");
    let mut names: Vec<_> = std::fs::read_dir(&bus).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    let mut links = 0usize;
    let mut gid_bytes = 0usize;
    for n in names {
        let d = bus.join(&n);
        let entries: Vec<String> =
            std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        for f in ["vendor", "device", "numa_node", "sriov_totalvfs", "sriov_numvfs"] {
            if entries.iter().any(|e| e == f) {
                read(&d.join(f));
            }
        }
        for e in &entries {
            if e == "driver" || e == "physfn" || e.starts_with("virtfn") {
                links += std::fs::read_link(d.join(e)).map(|t| t.as_os_str().len()).unwrap_or(0);
            }
        }
        if entries.iter().any(|e| e == "sriov_totalvfs") {
            links += std::fs::read_link(&d).map(|t| t.as_os_str().len()).unwrap_or(0);
        }
        if entries.iter().any(|e| e == "net") {
            for nd in std::fs::read_dir(d.join("net")).unwrap() {
                let nd = nd.unwrap().path();
                for f in ["ifindex", "operstate", "mtu", "address", "type", "speed"] {
                    read(&nd.join(f));
                }
            }
        }
        for aux in
            entries.iter().filter(|e| e.contains(".rdma.") || e.contains(".roce.") || e.contains(".iwarp."))
        {
            let base = d.join(aux);
            let Ok(ibs) = std::fs::read_dir(base.join("infiniband")) else { continue };
            for verbs in std::fs::read_dir(base.join("infiniband_verbs")).into_iter().flatten() {
                let v = verbs.unwrap().path();
                read(&v.join("ibdev"));
                read(&v.join("dev"));
                links += std::fs::symlink_metadata(dev.join("infiniband").join(v.file_name().unwrap()))
                    .is_ok() as usize;
            }
            for mad in std::fs::read_dir(base.join("infiniband_mad")).into_iter().flatten() {
                let m = mad.unwrap().path();
                read(&m.join("ibdev"));
                read(&m.join("dev"));
                links += std::fs::symlink_metadata(dev.join("infiniband").join(m.file_name().unwrap()))
                    .is_ok() as usize;
            }
            for ib in ibs {
                let ib = ib.unwrap().path();
                read(&ib.join("node_guid"));
                for port in std::fs::read_dir(ib.join("ports")).unwrap() {
                    let p = port.unwrap().path();
                    for f in ["state", "phys_state", "link_layer"] {
                        read(&p.join(f));
                    }
                    for g in std::fs::read_dir(p.join("gids")).unwrap() {
                        let g = g.unwrap();
                        let s = std::fs::read_to_string(g.path()).unwrap_or_default();
                        gid_bytes += s.len();
                        if !s.trim().chars().all(|c| c == '0' || c == ':') {
                            read(&p.join("gid_attrs/types").join(g.file_name()));
                            read(&p.join("gid_attrs/ndevs").join(g.file_name()));
                        }
                    }
                }
            }
        }
    }
    bytes.get() + links + gid_bytes
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let t = Instant::now();
    let sim = Sim::materialise(&big_node(8, 128)).expect("materialise the bench node");
    let roots = sim.roots();
    eprintln!("materialised 8 PF x 128 VF in {:?} at {}", t.elapsed(), sim.path().display());

    let inv = nic::discover(&roots);
    assert_eq!(inv.vfs().count(), 1024, "discovery must find every VF");
    assert!(inv.vfs().all(|v| v.rdma.len() == 1 && v.problems.is_empty()));

    let rounds = 21;
    let (mut ours, mut single, mut plain, mut lean) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut ours_cpu, mut ours_sys, mut plain_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let lean_scope = nic::discover::Scope { gid_tables: false, ..Default::default() };
    // Interleave the runs so that machine noise hits all alike; warm the page cache first.
    black_box(plain_walk(&roots.sysfs, &roots.dev));
    for _ in 0..rounds {
        let (t, c, k) = (Instant::now(), cpu_time(), sys_time());
        black_box(nic::discover(&roots));
        ours.push(t.elapsed());
        ours_cpu.push(cpu_time() - c);
        ours_sys.push(sys_time() - k);
        let t = Instant::now();
        black_box(nic::discover::discover_with_threads(&roots, 1));
        single.push(t.elapsed());
        let t = Instant::now();
        black_box(nic::discover::discover_scoped(&roots, lean_scope));
        lean.push(t.elapsed());
        let (t, c) = (Instant::now(), cpu_time());
        black_box(plain_walk(&roots.sysfs, &roots.dev));
        plain.push(t.elapsed());
        plain_cpu.push(cpu_time() - c);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (o, s, p) = (median(ours), median(single), median(plain));
    let (oc, pc, ok, l) = (median(ours_cpu), median(plain_cpu), median(ours_sys), median(lean));
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    println!(
        "node: 8 PF x 128 VF = 1024 VFs (1024 RDMA devices, 8-entry GID tables); medians of {rounds} runs"
    );
    println!("discover ({threads} threads):   {:8.2} ms wall  {:8.2} ms CPU", ms(o), ms(oc));
    println!("discover (1 thread):    {:8.2} ms wall", ms(s));
    println!(
        "discover, no GID tables ({threads} threads, what the device plugin serves first): {:8.2} ms wall",
        ms(l)
    );
    println!(
        "  of discover's CPU, in the kernel (open/read/close/getdents): {:.2} ms = {:.0}%; spread over {threads} cores that alone is {:.2} ms wall",
        ms(ok),
        100.0 * ok.as_secs_f64() / oc.as_secs_f64(),
        ms(ok) / threads as f64
    );
    println!("plain std::fs walk:     {:8.2} ms wall  {:8.2} ms CPU", ms(p), ms(pc));
    println!(
        "ratio discover / plain walk: {:.2} wall, {:.2} single-threaded, {:.2} CPU (target <= 1.5; discover < 50 ms)",
        o.as_secs_f64() / p.as_secs_f64(),
        s.as_secs_f64() / p.as_secs_f64(),
        oc.as_secs_f64() / pc.as_secs_f64()
    );
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("machine load average while measuring: {}", l.trim());
    }
}

/// System (kernel) CPU time of this process, all threads.
fn sys_time() -> Duration {
    let (_, s) = rusage();
    s
}

/// CPU time (user + system) of this process, all threads.
fn cpu_time() -> Duration {
    let (u, s) = rusage();
    u + s
}

/// (user, system) CPU time of this process, all threads.
fn rusage() -> (Duration, Duration) {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(u.ru_utime), tv(u.ru_stime))
}
