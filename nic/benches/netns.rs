//! What opening a socket in another network namespace costs, against a bare
//! thread spawn measured in the same run (root: `setns` needs CAP_SYS_ADMIN).
//!
//! Run: `cargo bench -p nic --bench netns [-- ROUNDS]`.
//!
//! Seen on our 2-vCPU VMs: a thread that opens its own `/proc/thread-self/ns/net`
//! (to switch back) costs ~0.3-0.5 ms more than one that does not, because the
//! kernel flushes the thread's proc entries when it exits; so
//! [`nic::netns::Netns::run`] lets its thread end in the namespace instead.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn time(rounds: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(200);
    let pod = nic::netns::NamedNetns::create(&format!("nic-bench-{}", std::process::id())).unwrap();
    let ns = pod.open().unwrap();
    let file = std::fs::File::open(pod.path()).unwrap();
    let bare = time(rounds, || std::thread::scope(|s| s.spawn(|| ()).join().unwrap()));
    let enter = time(rounds, || {
        std::thread::scope(|s| {
            s.spawn(|| setns(file.as_fd(), CloneFlags::CLONE_NEWNET).unwrap()).join().unwrap();
        });
    });
    let enter_and_back = time(rounds, || {
        std::thread::scope(|s| {
            s.spawn(|| {
                let back = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
                setns(file.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
                setns(back.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
            })
            .join()
            .unwrap();
        });
    });
    let run = time(rounds, || ns.run(|| ()).unwrap());
    let socket = time(rounds, || drop(nic::netlink::link::RouteSocket::open_in(&ns).unwrap()));
    let here = time(rounds, || drop(nic::netlink::link::RouteSocket::open_here().unwrap()));
    println!("median over {rounds} rounds (baseline: spawning and joining a thread, {bare:.1} us):");
    for (what, us) in [
        ("thread + setns into the netns", enter),
        ("thread + setns + switch back via /proc/thread-self/ns/net", enter_and_back),
        ("Netns::run (no-op)", run),
        ("RouteSocket::open_in (runtime + socket in the netns)", socket),
        ("RouteSocket::open_here (runtime + socket here)", here),
    ] {
        println!("  {what:<58} {us:>8.1} us = {:>5.1}x baseline", us / bare);
    }
}
