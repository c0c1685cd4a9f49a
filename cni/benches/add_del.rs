//! ADD+DEL wall time of `kube-rdma-cni` against Debian's `host-device`
//! plugin (Go, /usr/lib/cni/host-device) moving the same kind of veth into a
//! pod netns with the same `static` IPAM, interleaved in one run.
//!
//! Run (as root): `cargo bench -p kube-rdma-cni --bench add_del [-- ROUNDS]`.
//! Prints both medians and the ratio (target ≤ 0.6).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(40);
    let lab = Lab::new("e810-xxv", 3, "");
    let pod = lab.pod(0);
    let (ours_pci, _) = lab.vfs[0].clone();
    let (_, theirs_dev) = lab.vfs[1].clone();
    // The state dir on disk as in production (/var/lib), not tmpfs.
    let state = tempfile::Builder::new().prefix("kr-bench-").tempdir_in("/var/tmp").unwrap();
    let ipam = json!({"type": "static", "addresses": [{"address": "10.240.0.2/24", "gateway": "10.240.0.1"}], "routes": [{"dst": "10.241.0.0/16"}]});
    let ours = json!({"cniVersion": "1.0.0", "name": "bench", "type": "kube-rdma-cni", "deviceID": ours_pci.to_string(), "stateDir": state.path(), "ipam": ipam});
    let theirs = json!({"cniVersion": "1.0.0", "name": "bench", "type": "host-device", "device": theirs_dev, "ipam": ipam});
    let hd = std::path::Path::new(CNI_PATH).join("host-device");

    let run_ours = |cmd: &str, i: usize| {
        let (code, out) = lab.cni(cmd, &format!("b{i}"), pod.path(), "net1", &ours);
        assert_eq!(code, 0, "kube-rdma-cni {cmd}: {out}");
    };
    let run_theirs = |cmd: &str, i: usize| {
        let (code, out) = run_host_device(&lab, &hd, cmd, &format!("h{i}"), pod.path(), "net2", &theirs);
        assert_eq!(code, 0, "host-device {cmd}: {out}");
    };
    // Warm-up (page cache, IPAM version cache).
    run_ours("ADD", 0);
    run_ours("DEL", 0);
    run_theirs("ADD", 0);
    run_theirs("DEL", 0);

    // The kernel's share: one netns move and back of the third veth, by
    // netlink from this process (both plugins pay this; it is mostly
    // synchronize_net()/rcu_barrier() in __dev_change_net_namespace).
    let host_ns = lab.host.open().unwrap();
    let pod_ns = pod.open().unwrap();
    let floor_dev = lab.vfs[2].1.clone();
    let mut host_c = nic::netlink::link::open_in(&host_ns).unwrap();
    let mut pod_c = nic::netlink::link::open_in(&pod_ns).unwrap();
    let mut move_and_back = || {
        let l = nic::netlink::link::link_by_name(&mut host_c, &floor_dev).unwrap().unwrap();
        let t = Instant::now();
        nic::netlink::link::move_to_netns(&mut host_c, l.index, pod_ns.raw_fd(), None).unwrap();
        let l = nic::netlink::link::link_by_name(&mut pod_c, &floor_dev).unwrap().unwrap();
        nic::netlink::link::move_to_netns(&mut pod_c, l.index, host_ns.raw_fd(), None).unwrap();
        t.elapsed()
    };

    let (mut a, mut b, mut k) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=rounds {
        k.push(move_and_back());
        let t = Instant::now();
        run_ours("ADD", i);
        run_ours("DEL", i);
        a.push(t.elapsed());
        let t = Instant::now();
        run_theirs("ADD", i);
        run_theirs("DEL", i);
        b.push(t.elapsed());
    }
    let (ma, mb, mk) = (median(a), median(b), median(k));
    println!("ADD+DEL median over {rounds} rounds (static IPAM, veth into a pod netns):");
    println!("  kube-rdma-cni : {:>8.2} ms", ma.as_secs_f64() * 1e3);
    println!("  host-device   : {:>8.2} ms", mb.as_secs_f64() * 1e3);
    println!("  ratio         : {:>8.2} (target <= 0.60)", ma.as_secs_f64() / mb.as_secs_f64());
    println!(
        "  kernel floor  : {:>8.2} ms (netns move + move back, in-process netlink)",
        mk.as_secs_f64() * 1e3
    );
}

/// Runs Debian's host-device in the lab's host netns (same harness as ours).
fn run_host_device(
    lab: &Lab,
    plugin: &std::path::Path,
    cmd: &str,
    cid: &str,
    netns: &std::path::Path,
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
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setns is async-signal-safe.
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
