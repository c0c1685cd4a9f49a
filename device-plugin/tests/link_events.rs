//! Real kernel link events drive rescans. The daemon runs on a thread inside
//! a fresh network namespace, with a one-hour rescan timer; a veth named
//! after the simulated PF netdev is created and set up there, and the kernel's
//! RTM_NEWLINK notifications (RTNLGRP_LINK) make the daemon re-read the
//! simulated sysfs at once. What is real: the netlink events and the
//! subscription; what is simulated: the sysfs the rescan reads.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use kube_rdma_device_plugin::daemon;

struct Netns(String);

impl Netns {
    fn new(name: String) -> Self {
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let st = Command::new("ip").args(["netns", "add", &name]).status().expect("run ip");
        assert!(st.success(), "ip netns add {name}");
        Netns(name)
    }
    fn ip(&self, args: &[&str]) {
        let st = Command::new("ip").arg("-n").arg(&self.0).args(args).status().expect("run ip");
        assert!(st.success(), "ip -n {} {args:?}", self.0);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_events_trigger_a_rescan_without_waiting_for_the_timer() {
    let ns = Netns::new(format!("kdp-lev-{}", std::process::id()));
    let mut sim = sim("cx6dx-dual.yaml");
    let dirs = Dirs::new();
    let _k = FakeKubelet::start(&dirs.kubelet);
    let mut opts = dirs.options(sim.roots(), None, Duration::from_secs(3600));
    opts.link_events = true;
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let nspath = format!("/run/netns/{}", ns.0);
    let th = std::thread::spawn(move || {
        let f = std::fs::File::open(&nspath).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(daemon::run(opts, async move {
            let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
        }))
        .unwrap();
    });

    let mut c = plugin(&dirs.kubelet, SOCK).await;
    let mut s = list_and_watch(&mut c).await;
    wait_list(&mut s, Duration::from_secs(5), "all healthy", |m| {
        m.devices.iter().all(|d| d.health == "Healthy")
    })
    .await;

    // sysfs changes alone are not seen: the timer is an hour away.
    sim.set_operstate("ens1f0np0", "down").unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), s.message()).await.is_err(),
        "no update expected before a link event"
    );
    // The kernel announces a link named like the PF: RTM_NEWLINK → rescan.
    ns.ip(&["link", "add", "ens1f0np0", "type", "veth", "peer", "name", "ens1f0peer"]);
    wait_list(&mut s, Duration::from_secs(2), "PF0 VFs unhealthy after RTM_NEWLINK", |m| {
        health_of(m, "0000:3d:00.1") == Some("Unhealthy")
    })
    .await;
    sim.set_operstate("ens1f0np0", "up").unwrap();
    ns.ip(&["link", "set", "ens1f0np0", "up"]);
    wait_list(&mut s, Duration::from_secs(2), "healthy after link up", |m| {
        m.devices.iter().all(|d| d.health == "Healthy")
    })
    .await;
    stop_tx.send(()).unwrap();
    th.join().unwrap();
}
