//! ADD+DEL wall time of `kube-rdma-cni` against the kernel's floor and
//! against Debian's `host-device` plugin (Go, /usr/lib/cni/host-device),
//! interleaved in one run, each moving the same kind of veth into one pod
//! netns with the same `static` IPAM.
//!
//! The floor is what no plugin can avoid: two bare netns moves of a veth
//! (there and back, `RTM_SETLINK IFLA_NET_NS_FD`), sent from this process.
//! Each move waits for RCU grace periods in `__dev_change_net_namespace`
//! (net/core/dev.c: `synchronize_net`, `rcu_barrier`), ~18 ms here.
//!
//! Beside it, the process floor: the same binary launched twice doing
//! nothing (VERSION), which any exec'd plugin pays for an ADD and a DEL.
//! `ADD_DEL_EXPLAIN=1` adds where each ADD and DEL spends its time, from the
//! plugin's debug log (since spawn, per step) and the wall clock.
//!
//! Run (as root): `cargo bench -p kube-rdma-cni --bench add_del [-- ROUNDS]`.
//! With `KUBE_RDMA_CNI_BASELINE=/path/to/an/older/kube-rdma-cni` the older
//! build is timed in the same rounds too (before/after in one run).
//! Targets: kube-rdma ≤ 1.15× the floor; not slower than the baseline.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nic::netlink::link::{LinkChange, RouteSocket};
use serde_json::json;

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `plugin` (ours, a baseline, or host-device) in the lab's host netns.
#[allow(clippy::too_many_arguments)]
fn run(
    lab: &Lab,
    plugin: &Path,
    cmd: &str,
    cid: &str,
    netns: &Path,
    ifname: &str,
    conf: &serde_json::Value,
) -> (i32, serde_json::Value) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let nsf = std::fs::File::open(lab.host.path()).unwrap();
    let fd = nsf.as_raw_fd();
    let mut c = std::process::Command::new(plugin);
    c.env_remove("LD_LIBRARY_PATH")
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", CNI_PATH)
        .env("KUBE_RDMA_SYSFS_ROOT", &lab.sim.roots().sysfs)
        .env("KUBE_RDMA_CNI_LOG_DIR", lab.log_dir())
        // The state dirs are in /var/tmp (on disk, as /var/lib/cni is).
        .env("KUBE_RDMA_CNI_STATE_ROOT", "/var/tmp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(st) = conf.get("stateDir").and_then(|s| s.as_str()) {
        // The node dir is the state dir, as with the defaults in production.
        c.env("KUBE_RDMA_CNI_NODE_DIR", st);
    }
    // SAFETY: setns is async-signal-safe; fd stays open until exec.
    unsafe {
        c.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(conf.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(40);
    let baseline = std::env::var_os("KUBE_RDMA_CNI_BASELINE").map(std::path::PathBuf::from);
    let lab = Lab::new("e810-xxv", 4, "");
    let pod = lab.pod(0);
    // The state dirs on disk as in production (/var/lib), not tmpfs.
    let state = |p: &str| tempfile::Builder::new().prefix(p).tempdir_in("/var/tmp").unwrap();
    let (ours_state, base_state) = (state("kr-bench-"), state("kr-bench-base-"));
    let ipam = json!({"type": "static", "addresses": [{"address": "10.240.0.2/24", "gateway": "10.240.0.1"}], "routes": [{"dst": "10.241.0.0/16"}]});
    let conf = |pci: nic::PciAddr, st: &Path| json!({"cniVersion": "1.0.0", "name": "bench", "type": "kube-rdma-cni", "deviceID": pci.to_string(), "stateDir": st, "ipam": ipam});
    let ours = conf(lab.vfs[0].0, ours_state.path());
    let base = conf(lab.vfs[3].0, base_state.path());
    let theirs = json!({"cniVersion": "1.0.0", "name": "bench", "type": "host-device", "device": lab.vfs[1].1, "ipam": ipam});
    let hd = Path::new(CNI_PATH).join("host-device");
    let bin = Path::new(BIN);

    let add_del = |plugin: &Path, conf: &serde_json::Value, cid: &str, ifname: &str| -> Duration {
        let t = Instant::now();
        for cmd in ["ADD", "DEL"] {
            let (code, out) = run(&lab, plugin, cmd, cid, pod.path(), ifname, conf);
            assert_eq!(code, 0, "{} {cmd}: {out}", plugin.display());
        }
        t.elapsed()
    };

    let mut kernel = Kernel {
        host_ns: lab.host.open().unwrap(),
        pod_ns: pod.open().unwrap(),
        dev: lab.vfs[2].1.clone(),
        host: RouteSocket::open_in(&lab.host.open().unwrap()).unwrap(),
        pod: RouteSocket::open_in(&pod.open().unwrap()).unwrap(),
    };
    // Warm-up (page cache, IPAM version cache).
    add_del(bin, &ours, "w", "net1");
    add_del(&hd, &theirs, "hw", "net2");
    if let Some(b) = &baseline {
        add_del(b, &base, "bw", "net3");
    }
    kernel.floor();

    let (mut f, mut k, mut h, mut b, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 1..=rounds {
        // Rotate the order so that no one always runs right after another.
        for j in 0..4 {
            match (i + j) % 4 {
                0 => {
                    f.push(kernel.floor());
                    // The same plugin binary launched twice doing nothing
                    // (VERSION): what any exec'd plugin pays for ADD+DEL.
                    let t = Instant::now();
                    for _ in 0..2 {
                        let (code, out) = run(&lab, bin, "VERSION", "v", pod.path(), "net1", &ours);
                        assert_eq!(code, 0, "VERSION: {out}");
                    }
                    p.push(t.elapsed());
                }
                1 => k.push(add_del(bin, &ours, &format!("b{i}"), "net1")),
                2 => h.push(add_del(&hd, &theirs, &format!("h{i}"), "net2")),
                _ => {
                    if let Some(old) = &baseline {
                        b.push(add_del(old, &base, &format!("o{i}"), "net3"));
                    }
                }
            }
        }
    }
    let (mut c1, mut c2) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        c1.push(kernel.configured(false));
        c2.push(kernel.configured(true));
    }
    // Where our time goes: the plugin's own debug timings (logFile) against
    // the wall time of each process, over a few more rounds.
    let explain = std::env::var_os("ADD_DEL_EXPLAIN").is_some();
    let mut phases: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    if explain {
        // A process that does nothing: exec, dynamic linking, exit.
        for _ in 0..rounds {
            let t = Instant::now();
            let (code, out) = run(&lab, bin, "VERSION", "v", pod.path(), "net1", &ours);
            assert_eq!(code, 0, "VERSION: {out}");
            phases.entry("VERSION wall (a process round trip)".into()).or_default().push(ms(t.elapsed()));
        }
        let log = lab.log_dir().join("debug.log");
        let mut dbg = ours.clone();
        dbg["logLevel"] = json!("debug");
        dbg["logFile"] = json!(log);
        for i in 0..rounds {
            for cmd in ["ADD", "DEL"] {
                let _ = std::fs::remove_file(&log);
                let t = Instant::now();
                let started = day_seconds(std::time::SystemTime::now());
                let (code, out) = run(&lab, bin, cmd, &format!("x{i}"), pod.path(), "net1", &dbg);
                let ended = day_seconds(std::time::SystemTime::now());
                phases.entry(format!("{cmd} wall")).or_default().push(ms(t.elapsed()));
                assert_eq!(code, 0, "{cmd}: {out}");
                let stamps: Vec<f64> = lines(&log).iter().filter_map(|l| stamp(l)).collect();
                if let (Some(first), Some(last)) = (stamps.first(), stamps.last()) {
                    phases
                        .entry(format!("{cmd} spawn to first log line"))
                        .or_default()
                        .push((first - started) * 1e3);
                    phases
                        .entry(format!("{cmd} last log line to reaped"))
                        .or_default()
                        .push((ended - last) * 1e3);
                }
                for l in lines(&log) {
                    let msg = l.rsplit("}: ").next().unwrap_or("");
                    let msg = msg.split_once(": ").map_or(msg, |(_, m)| m);
                    let msg: String =
                        msg.split_whitespace().take_while(|w| !w.contains('=')).collect::<Vec<_>>().join(" ");
                    if let Some(at) = stamp(&l) {
                        phases
                            .entry(format!("{cmd} @ {msg} (since spawn)"))
                            .or_default()
                            .push((at - started) * 1e3);
                    }
                    let Some(v) = l
                        .split("ms=")
                        .nth(1)
                        .and_then(|x| x.split_whitespace().next())
                        .and_then(|x| x.parse::<f64>().ok())
                    else {
                        continue;
                    };
                    // `... DEBUG cni{..}: kube_rdma_cni::txn: undone step="move_netdev" ms=19.3`
                    let what = l.rsplit("}: ").next().unwrap_or("");
                    let what =
                        what.split_once(": ").map_or(what, |(_, m)| m).split(" ms=").next().unwrap_or("");
                    phases.entry(format!("{cmd} {what}")).or_default().push(v);
                }
            }
        }
    }
    let (mf, mk, mh) = (median(&f), median(&k), median(&h));
    println!("ADD+DEL median over {rounds} rounds (static IPAM, veth into a pod netns, interleaved):");
    // Each round's own ratio too: the machine's load drifts, and a round's
    // floor is measured right beside its plugin runs.
    let paired = |v: &[Duration]| {
        let mut r: Vec<f64> = v.iter().zip(&f).map(|(a, b)| a.as_secs_f64() / b.as_secs_f64()).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let mp = median(&p);
    println!("  kernel floor   : {:>7.2} ms (two bare netns moves, in-process netlink)", ms(mf));
    println!(
        "  process floor  : {:>7.2} ms (our binary launched twice, doing nothing: fork, exec, exit) = {:.2}x kernel floor",
        ms(mp),
        ms(mp) / ms(mf)
    );
    println!(
        "  kube-rdma-cni  : {:>7.2} ms = {:.2}x floor, per-round median {:.2}x (target <= 1.15)",
        ms(mk),
        ms(mk) / ms(mf),
        paired(&k)
    );
    println!(
        "  host-device    : {:>7.2} ms = {:.2}x floor, per-round median {:.2}x",
        ms(mh),
        ms(mh) / ms(mf),
        paired(&h)
    );
    println!("  kube-rdma / host-device: {:.2}", ms(mk) / ms(mh));
    println!(
        "  kube-rdma beyond both floors: {:.2} ms ({:.2}x of kernel + process floor)",
        ms(mk) - ms(mf) - ms(mp),
        ms(mk) / (ms(mf) + ms(mp))
    );
    println!(
        "  the same moves with rename+up / down: {:.2} ms ({:.2}x floor); plus an address and a route: {:.2} ms ({:.2}x)",
        ms(median(&c1)),
        ms(median(&c1)) / ms(mf),
        ms(median(&c2)),
        ms(median(&c2)) / ms(mf)
    );
    for (k, v) in &phases {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        println!("  explain: {k:<50} {:>7.2} ms (median of {})", v[v.len() / 2], v.len());
    }
    if let Some(p) = &baseline {
        let mb = median(&b);
        println!(
            "  baseline       : {:>7.2} ms = {:.2}x floor, per-round median {:.2}x ({})",
            ms(mb),
            ms(mb) / ms(mf),
            paired(&b),
            p.display()
        );
        println!("  kube-rdma / baseline: {:.2} (target <= 1.00)", ms(mk) / ms(mb));
    }
}

/// Bare kernel moves of one veth between the lab's host netns and the pod.
struct Kernel {
    host_ns: nic::netns::Netns,
    pod_ns: nic::netns::Netns,
    dev: String,
    host: RouteSocket,
    pod: RouteSocket,
}

impl Kernel {
    /// The floor: the veth moved there and back, nothing else.
    fn floor(&mut self) -> Duration {
        let l = self.host.link_by_name(&self.dev).unwrap().unwrap();
        let t = Instant::now();
        self.host
            .set_link(l.index, &LinkChange { netns_fd: Some(self.pod_ns.raw_fd()), ..LinkChange::default() })
            .unwrap();
        let l = self.pod.link_by_name(&self.dev).unwrap().unwrap();
        self.pod
            .set_link(l.index, &LinkChange { netns_fd: Some(self.host_ns.raw_fd()), ..LinkChange::default() })
            .unwrap();
        t.elapsed()
    }

    /// What the same two moves cost when they carry what an attachment
    /// carries: rename and up on the way there, (an address and a route
    /// while in the pod,) down and the old name on the way back.
    fn configured(&mut self, with_addr: bool) -> Duration {
        let l = self.host.link_by_name(&self.dev).unwrap().unwrap();
        let t = Instant::now();
        let there = LinkChange {
            netns_fd: Some(self.pod_ns.raw_fd()),
            name: Some("fl1".into()),
            up: Some(true),
            ..LinkChange::default()
        };
        self.host.set_link(l.index, &there).unwrap();
        let spent = t.elapsed();
        let l = self.pod.link_by_name("fl1").unwrap().unwrap();
        if with_addr {
            self.pod.add_address(l.index, "10.242.0.2".parse().unwrap(), 24).unwrap();
            let r = nic::netlink::link::Route {
                dst: "10.243.0.0".parse().unwrap(),
                prefix: 16,
                gw: Some("10.242.0.1".parse().unwrap()),
            };
            self.pod.add_route(l.index, &r).unwrap();
        }
        let t = Instant::now();
        let back = LinkChange {
            netns_fd: Some(self.host_ns.raw_fd()),
            name: Some(self.dev.clone()),
            up: Some(false),
            ..LinkChange::default()
        };
        self.pod.set_link(l.index, &back).unwrap();
        spent + t.elapsed()
    }
}

/// Seconds since midnight UTC.
fn day_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() % 86400.0
}

/// The time of day of a `tracing` text line (`2026-12-01T13:49:44.578654Z ...`).
fn stamp(line: &str) -> Option<f64> {
    let t = line.get(11..26)?;
    let h: f64 = t.get(0..2)?.parse().ok()?;
    let m: f64 = t.get(3..5)?.parse().ok()?;
    let s: f64 = t.get(6..)?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}
