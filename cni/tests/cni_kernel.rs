//! ADD / CHECK / DEL / GC / STATUS against real network namespaces, veth links
//! standing in for VF netdevs (wired to VF PCI addresses by a simulated node
//! tree), and Debian's `host-local` / `static` IPAM plugins. Runs as root.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn add_check_del_moves_the_vf_in_and_restores_it_exactly() {
    let lab = Lab::new("e810-xxv", 2, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.201.1.0/24");
    conf["mtu"] = json!(1400);

    let (code, res) = lab.cni("ADD", "c1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    assert_eq!(res["cniVersion"], "1.1.0");
    let iface = &res["interfaces"][0];
    assert_eq!(iface["name"], "net1");
    assert_eq!(iface["mac"], before.0, "the VF's own MAC");
    assert_eq!(iface["mtu"], 1400);
    assert_eq!(iface["pciID"], pci.to_string());
    assert_eq!(iface["sandbox"], pod.path().display().to_string());
    assert_eq!(res["ips"][0]["address"], "10.201.1.2/24");
    assert_eq!(res["ips"][0]["interface"], 0);
    assert_eq!(res["routes"][0]["dst"], "10.250.0.0/16");

    // Kernel state: gone from the host, present in the pod, configured.
    assert!(!lab.host_links().contains(&vfname));
    assert_eq!(links(pod.name()), ["net1".to_string()].into());
    assert_eq!(link_info(pod.name(), "net1"), (before.0.clone(), 1400, true));
    assert_eq!(addrs(pod.name(), "net1"), vec!["10.201.1.2/24".to_string()]);
    assert!(ip(pod.name(), &["route", "show"]).contains("10.250.0.0/16 via 10.201.1.1 dev net1"));
    assert_eq!(lab.ipam_allocations().len(), 1);

    // CHECK with prevResult.
    let mut check = conf.clone();
    check["prevResult"] = res.clone();
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &check);
    assert_eq!(code, 0, "{out}");

    // CHECK notices drift: MTU, a missing address, a missing route.
    ip(pod.name(), &["link", "set", "net1", "mtu", "1300"]);
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &check);
    assert_eq!(code, 102, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("MTU"), "{out}");
    ip(pod.name(), &["link", "set", "net1", "mtu", "1400"]);
    ip(pod.name(), &["route", "del", "10.250.0.0/16"]);
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &check);
    assert_eq!(code, 102, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("10.250.0.0/16"), "{out}");
    ip(pod.name(), &["route", "add", "10.250.0.0/16", "via", "10.201.1.1", "dev", "net1"]);
    // CHECK without prevResult is refused (spec: CHECK compares against it).
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &conf);
    assert_eq!(code, 7, "{out}");

    // DEL restores name, MAC, MTU; releases IPAM; forgets the journal.
    let (code, out) = lab.cni("DEL", "c1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname));
    assert_eq!(link_info(lab.host.name(), &vfname), before);
    assert!(links(pod.name()).is_empty());
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());

    // A repeated DEL is a no-op success.
    let (code, out) = lab.cni("DEL", "c1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn static_ipam_with_a_1_0_0_config_gets_a_1_0_0_result() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "static-net",
        "type": "kube-rdma-cni",
        "deviceID": pci.to_string(),
        "stateDir": lab.state.path(),
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.202.0.7/24", "gateway": "10.202.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]
        }
    });
    let (code, res) = lab.cni("ADD", "s1", pod.path(), "eth1", &conf);
    assert_eq!(code, 0, "{res}");
    assert_eq!(res["cniVersion"], "1.0.0");
    assert!(res["interfaces"][0].get("pciID").is_none(), "pciID is a 1.1.0 field: {res}");
    assert_eq!(res["ips"][0]["address"], "10.202.0.7/24");
    assert_eq!(res["ips"][0]["gateway"], "10.202.0.1");
    assert_eq!(addrs(pod.name(), "eth1"), vec!["10.202.0.7/24".to_string()]);
    assert!(ip(pod.name(), &["route", "show"]).contains("default via 10.202.0.1 dev eth1"));
    let (code, out) = lab.cni("DEL", "s1", pod.path(), "eth1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname));
}

#[test]
fn the_move_and_the_rename_are_one_request_so_a_pod_link_named_like_the_vf_cannot_clash() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    // A pod link already named like the VF on the host: a move followed by a
    // rename would clash; the kernel renames during the one request.
    ip(pod.name(), &["link", "add", &vfname, "type", "veth", "peer", "name", "clashp"]);
    let conf = lab.conf("1.1.0", pci, "10.211.0.0/24");
    let (code, out) = lab.cni("ADD", "t1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).contains("net1"));
    assert_eq!(addrs(pod.name(), "net1"), vec!["10.211.0.2/24".to_string()]);
    let (code, out) = lab.cni("DEL", "t1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before);
    assert!(links(pod.name()).contains(&vfname), "the pod's own link stays");
}

#[test]
fn an_interface_name_taken_in_the_pod_is_refused_before_anything_moves() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    ip(pod.name(), &["link", "add", "net1", "type", "veth", "peer", "name", "net1p"]);
    let conf = lab.conf("1.1.0", pci, "10.213.0.0/24");
    let (code, out) = lab.cni("ADD", "n1", pod.path(), "net1", &conf);
    assert_eq!(code, 4, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("already exists in the container"), "{out}");
    assert!(lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
    let (code, out) = lab.cni("DEL", "n1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).contains("net1"), "DEL leaves a link that is not ours");
}

#[test]
fn old_versions_get_results_in_their_own_format() {
    let lab = Lab::new("e810-xxv", 2, "");
    for (i, v) in ["0.3.1", "0.4.0"].into_iter().enumerate() {
        let (pci, _) = lab.vfs[i];
        let pod = lab.pod(i as u32);
        let conf = lab.conf(v, pci, "10.203.0.0/24");
        let (code, res) = lab.cni("ADD", &format!("o{i}"), pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{res}");
        assert_eq!(res["cniVersion"], v);
        assert_eq!(res["ips"][0]["version"], "4", "{res}");
        let (code, out) = lab.cni("DEL", &format!("o{i}"), pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
    }
    assert!(lab.ipam_allocations().is_empty());
}

#[test]
fn del_succeeds_and_releases_ipam_when_the_netns_is_gone() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.204.0.0/24");
    let (code, res) = lab.cni("ADD", "g1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    let path = pod.path().to_path_buf();
    pod.delete().unwrap();
    // The veth died with the netns (a real VF would return to the host: see bring_home).
    let (code, out) = lab.cni("DEL", "g1", &path, "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty());
    // Also with an empty CNI_NETNS, as runtimes send after the sandbox died.
    let (code, out) = lab.cni_env("DEL", "g1", std::path::Path::new(""), "net1", &conf, &[("CNI_NETNS", "")]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn del_repairs_a_vf_the_kernel_returned_to_the_host_under_its_pod_name() {
    // When a pod netns dies, the kernel moves a physical VF back to the
    // initial netns keeping its pod name (sriov-cni #126: VFs left misnamed).
    // Stand-in: move net1 back by hand, then delete the netns.
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.212.0.0/24");
    conf["mtu"] = json!(1280);
    let (code, out) = lab.cni("ADD", "k1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    ip(pod.name(), &["link", "set", "net1", "netns", lab.host.name()]);
    let path = pod.path().to_path_buf();
    pod.delete().unwrap();
    assert!(lab.host_links().contains("net1"));
    let (code, out) = lab.cni("DEL", "k1", &path, "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(!lab.host_links().contains("net1"));
    assert_eq!(link_info(lab.host.name(), &vfname), before, "name, MAC, MTU and state restored");
    assert!(lab.ipam_allocations().is_empty());
}

#[test]
fn rdma_auto_skips_and_required_fails_when_the_vf_has_no_rdma_device() {
    let lab = Lab::new("e810-xxv", 2, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.205.0.0/24");
    conf["rdma"] = json!("required");
    let (code, out) = lab.cni("ADD", "r1", pod.path(), "net1", &conf);
    assert_eq!(code, 103, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("has no RDMA device"), "{out}");
    assert!(lab.host_links().contains(&vfname), "nothing may change on a refused ADD");
    assert!(lab.state_files().is_empty());
    conf["rdma"] = json!("auto");
    let (code, out) = lab.cni("ADD", "r1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let (code, out) = lab.cni("DEL", "r1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn rdma_shared_mode_auto_skips_and_required_names_the_fix() {
    // ConnectX-6 Dx VFs carry an RDMA device in the sim tree.
    let lab = Lab::new("connectx-6dx", 1, "        rdma: mlx5_0\n");
    lab.set_rdma_netns_mode(true);
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.206.0.0/24");
    conf["rdma"] = json!("required");
    let (code, out) = lab.cni("ADD", "m1", pod.path(), "net1", &conf);
    assert_eq!(code, 103, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("ib_core netns_mode=0"), "{out}");
    assert!(lab.host_links().contains(&vfname));
    let mut status = conf.clone();
    status["cniVersion"] = json!("1.1.0");
    let (code, out) = lab.cni("STATUS", "", pod.path(), "", &status);
    assert_eq!(code, 50, "{out}");
    conf["rdma"] = json!("auto");
    let (code, out) = lab.cni("ADD", "m1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let (code, out) = lab.cni("DEL", "m1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let (code, out) = lab.cni("STATUS", "", pod.path(), "", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn device_info_file_is_read_extended_and_removed() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let info = lab.state.path().join("devinfo/dp.json");
    std::fs::create_dir_all(info.parent().unwrap()).unwrap();
    std::fs::write(
        &info,
        r#"{"type":"pci","version":"1.1.0","pci":{"pci-address":"x","pf-pci-address":"0000:10:00.0"}}"#,
    )
    .unwrap();
    let mut conf = lab.conf("1.1.0", pci, "10.207.0.0/24");
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": info});
    let (code, out) = lab.cni("ADD", "d1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    assert_eq!(v["pci"]["pci-address"], pci.to_string());
    assert_eq!(v["pci"]["pf-pci-address"], "0000:10:00.0");
    let (code, out) = lab.cni("DEL", "d1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(!info.exists());
}

#[test]
fn gc_undoes_attachments_that_are_no_longer_valid() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1)];
    for (i, p) in pods.iter().enumerate() {
        let conf = lab.conf("1.1.0", lab.vfs[i].0, "10.208.0.0/24");
        let (code, out) = lab.cni("ADD", &format!("gc{i}"), p.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
    }
    assert_eq!(lab.ipam_allocations().len(), 2);
    let mut gc = lab.conf("1.1.0", lab.vfs[0].0, "10.208.0.0/24");
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "gc0", "ifname": "net1"}]);
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&lab.vfs[1].1), "the stale VF is back on the host");
    assert!(!lab.host_links().contains(&lab.vfs[0].1), "the valid one stays in its pod");
    assert_eq!(lab.ipam_allocations().len(), 1);
    assert_eq!(lab.state_files().len(), 1);
    let conf = lab.conf("1.1.0", lab.vfs[0].0, "10.208.0.0/24");
    let (code, out) = lab.cni("DEL", "gc0", pods[0].path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.ipam_allocations().is_empty());
}

type Names = std::collections::BTreeSet<String>;

/// Everything an ADD may change: host links, pod links, state files, IPAM
/// allocations, and name/MAC/MTU/state of each VF netdev on the host.
#[derive(Debug, PartialEq)]
struct Snapshot {
    host: Names,
    pod: Names,
    state: Names,
    ipam: Names,
    vfs: Vec<(String, u64, bool)>,
}

fn snapshot(lab: &Lab, pod: &str) -> Snapshot {
    let host = lab.host_links();
    let vfs = lab
        .vfs
        .iter()
        .filter(|(_, n)| host.contains(n))
        .map(|(_, n)| link_info(lab.host.name(), n))
        .collect();
    Snapshot { host, pod: links(pod), state: lab.state_files(), ipam: lab.ipam_allocations(), vfs }
}

#[test]
fn a_crash_after_any_add_step_is_fully_undone_by_del() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let info = lab.state.path().join("devinfo.json");
    let mut conf = lab.conf("1.1.0", pci, "10.209.0.0/24");
    conf["mtu"] = json!(1450);
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": info});
    // pf_attrs and move_rdma cannot run without SR-IOV / RDMA hardware (kernel lab covers them).
    for step in ["journal", "move_netdev", "ipam", "addresses", "device_info"] {
        let before = snapshot(&lab, pod.name());
        let fp = format!("after:{step}");
        let (code, out) =
            lab.cni_env("ADD", "f1", pod.path(), "net1", &conf, &[("KUBE_RDMA_CNI_FAILPOINT", &fp)]);
        assert_eq!(code, 99, "{step}: plugin did not die at the failpoint: {out}");
        assert_ne!(snapshot(&lab, pod.name()), before, "{step}: the crash left nothing to undo?");
        let (code, out) = lab.cni("DEL", "f1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{step}: {out}");
        assert_eq!(snapshot(&lab, pod.name()), before, "{step}: DEL did not restore the host");
        assert!(!info.exists(), "{step}");
    }
}

#[test]
fn thirty_two_parallel_add_del_cycles_leak_nothing() {
    const N: usize = 32;
    let lab = Lab::new("e810-c", N as u32, "");
    let pods: Vec<_> = (0..N as u32).map(|i| lab.pod(i)).collect();
    let before = (lab.host_links(), lab.state_files(), lab.ipam_allocations());
    for round in 0..10 {
        std::thread::scope(|s| {
            for (i, pod) in pods.iter().enumerate() {
                let lab = &lab;
                s.spawn(move || {
                    let conf = lab.conf("1.1.0", lab.vfs[i].0, "10.210.0.0/22");
                    let cid = format!("p{round}x{i}");
                    let (code, out) = lab.cni("ADD", &cid, pod.path(), "net1", &conf);
                    assert_eq!(code, 0, "round {round} vf {i}: {out}");
                    assert_eq!(addrs(pod.name(), "net1").len(), 1);
                    let (code, out) = lab.cni("DEL", &cid, pod.path(), "net1", &conf);
                    assert_eq!(code, 0, "round {round} vf {i}: {out}");
                });
            }
        });
        assert_eq!(
            (lab.host_links(), lab.state_files(), lab.ipam_allocations()),
            before,
            "leak after round {round}"
        );
        for p in &pods {
            assert!(links(p.name()).is_empty(), "leaked link in {}", p.name());
        }
    }
}

#[test]
fn mac_is_also_the_vfs_administrative_mac_so_it_needs_the_pf() {
    // sriov-cni sets `mac` PF-side too (the MAC the switch enforces). The
    // simulated PF has no real netdev here; the kernel lab sets it on netdevsim.
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "10.214.0.0/24");
    conf["mac"] = json!("02:11:22:33:44:55");
    let (code, out) = lab.cni("ADD", "m1", pod.path(), "net1", &conf);
    assert_eq!(code, 7, "{out}");
    let msg = out["msg"].as_str().unwrap();
    assert!(msg.contains("PF netdev") && msg.contains("not found"), "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before);
    assert!(lab.state_files().is_empty() && lab.ipam_allocations().is_empty());
}

/// Runs ADD then DEL on `conf` and checks the host is as before.
fn refused_add_then_del(
    lab: &Lab,
    pod: &nic::netns::NamedNetns,
    case: &str,
    conf: &[u8],
    env: &[(&str, &str)],
    code: i32,
) {
    let before = snapshot(lab, pod.name());
    let run = |cmd: &str| {
        run_plugin(lab.host.path(), &lab.sim.roots().sysfs, cmd, "r1", pod.path(), "net1", conf, env)
    };
    let (c, out) = run("ADD");
    assert_eq!(c, code, "{case}: ADD {out}");
    // Runtimes repeat DEL with the same configuration until it succeeds.
    for n in 0..2 {
        let (c, out) = run("DEL");
        assert_eq!(c, 0, "{case}: DEL #{n} {out}");
    }
    assert_eq!(snapshot(lab, pod.name()), before, "{case}: host changed");
}

#[test]
fn del_after_each_refused_add_succeeds_and_leaves_the_host_as_before() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let base = lab.conf("1.1.0", pci, "10.215.0.0/24");
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c[k] = v;
        serde_json::to_vec(&c).unwrap()
    };
    let ok = serde_json::to_vec(&base).unwrap();
    refused_add_then_del(&lab, &pod, "vlan 5000", &with("vlan", json!(5000)), &[], 7);
    refused_add_then_del(&lab, &pod, "mtu 70000", &with("mtu", json!(70000)), &[], 7);
    refused_add_then_del(&lab, &pod, "trust yes", &with("trust", json!("yes")), &[], 7);
    refused_add_then_del(&lab, &pod, "CNI_ARGS MAC=zz", &ok, &[("CNI_ARGS", "IgnoreUnknown=1;MAC=zz")], 7);
    refused_add_then_del(&lab, &pod, "cniVersion 9.9.9", &with("cniVersion", json!("9.9.9")), &[], 1);
    refused_add_then_del(&lab, &pod, "malformed JSON", b"{\"cniVersion\": ", &[], 6);
    let mut big = base.clone();
    big["padding"] = json!("x".repeat(1 << 20));
    refused_add_then_del(&lab, &pod, "stdin over 1 MiB", &serde_json::to_vec(&big).unwrap(), &[], 6);
}

#[test]
fn del_with_prev_result_and_no_journal_brings_the_vf_home() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.216.0.0/24");
    let (code, res) = lab.cni("ADD", "p1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    // The state dir is lost (a node rebuilt /var/lib, an operator wiped it).
    std::fs::remove_dir_all(lab.state.path().join("attachments")).unwrap();
    let mut del = conf.clone();
    del["prevResult"] = res;
    let (code, out) = lab.cni("DEL", "p1", pod.path(), "net1", &del);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).is_empty(), "the VF left the pod");
    // Its host name went with the journal: it is home under its pod name, down.
    assert!(lab.host_links().contains("net1"), "{:?}", lab.host_links());
    assert!(!link_info(lab.host.name(), "net1").2, "down");
    assert!(addrs(lab.host.name(), "net1").is_empty());
    assert!(lab.ipam_allocations().is_empty(), "IPAM released from the stdin config");
    assert!(!lab.host_links().contains(&vfname));
    // Without prevResult, a DEL with no journal leaves other links alone.
    let (code, out) = lab.cni("DEL", "p1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_chained_add_keeps_the_previous_interfaces_and_addresses() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.0.0", pci, "10.217.0.0/24");
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "10.9.0.5/16", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.9.0.1"}],
        "dns": {"nameservers": ["10.96.0.10"]}});
    conf["prevResult"] = prev.clone();
    let (code, res) = lab.cni("ADD", "ch1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    assert_eq!(res["interfaces"][0], prev["interfaces"][0]);
    assert_eq!(res["interfaces"][1]["name"], "net1");
    assert_eq!(res["ips"][0], prev["ips"][0]);
    assert_eq!(res["ips"][1]["address"], "10.217.0.2/24");
    assert_eq!(res["ips"][1]["interface"], 1);
    assert_eq!(res["routes"][0], prev["routes"][0]);
    assert_eq!(res["dns"]["nameservers"][0], "10.96.0.10");
    let (code, out) = lab.cni("DEL", "ch1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn check_delegates_to_the_ipam_plugins_check_and_its_stderr_reaches_our_log() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let (bin, calls) = ipam_stub(dir.path(), "logipam");
    let log = dir.path().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "unused");
    conf["ipam"] = json!({"type": "logipam"});
    conf["logFile"] = json!(log);
    let path = format!("{}:{CNI_PATH}", bin.display());
    // Not in key order, as the previous release would have re-sorted them.
    let args = "K8S_POD_NAMESPACE=ns;IgnoreUnknown=1;K8S_POD_NAME=pod-a";
    let env = [("CNI_PATH", path.as_str()), ("CNI_ARGS", args)];
    let (code, res) = lab.cni_env("ADD", "cd1", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{res}");
    assert_eq!(addrs(pod.name(), "net1"), vec!["10.77.0.5/24".to_string()]);
    let mut check = conf.clone();
    check["prevResult"] = res;
    let (code, out) = lab.cni_env("CHECK", "cd1", pod.path(), "net1", &check, &env);
    assert_eq!(code, 0, "{out}");
    let checks: Vec<String> = lines(&calls).into_iter().filter(|l| l.starts_with("CHECK ")).collect();
    assert_eq!(checks.len(), 1, "{:?}", lines(&calls));
    // It got CNI_ARGS exactly as the runtime gave them, and the result to check.
    assert!(checks[0].starts_with(&format!("CHECK args={args} stdin=")), "{}", checks[0]);
    let sent: Value = serde_json::from_str(checks[0].split_once(" stdin=").unwrap().1).unwrap();
    assert_eq!(sent["prevResult"]["ips"][0]["address"], "10.77.0.5/24");
    assert!(
        sent.get("deviceID").is_none() && sent.get("logFile").is_none(),
        "our own keys stay ours: {sent}"
    );
    // The plugin's CHECK failing fails ours, with its message.
    std::fs::write(dir.path().join("logipam.fail"), "").unwrap();
    let (code, out) = lab.cni_env("CHECK", "cd1", pod.path(), "net1", &check, &env);
    assert_eq!(code, 7, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("lease of 10.77.0.5 is gone"), "{out}");
    let (code, out) = lab.cni_env("DEL", "cd1", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{out}");
    assert!(lines(&calls).iter().any(|l| l.starts_with(&format!("DEL args={args} "))));
    // The plugin's stderr is in our log at warn level, with no colour codes.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().any(|l| l.contains("WARN") && l.contains("stub logipam: CHECK")), "{text}");
    assert!(!text.contains('\u{1b}'), "ANSI escapes in the log file");
}

#[test]
fn keys_in_any_case_and_sriov_cni_log_levels_work() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let base = lab.conf("1.1.0", pci, "10.218.0.0/24");
    // Go-style keys, as sriov-cni configurations are written.
    let conf = |level: &str, log: &std::path::Path, format: &str| {
        json!({"CNIVersion": "1.1.0", "Name": base["name"], "Type": "kube-rdma-cni", "DeviceID": pci.to_string(),
               "StateDir": lab.state.path(), "MTU": 1420, "IPAM": base["ipam"],
               "LogLevel": level, "LogFile": log, "logFormat": format})
    };
    let run = |level: &str, format: &str| -> Vec<String> {
        let log = dir.path().join(format!("{level}-{format}.log"));
        let c = conf(level, &log, format);
        let (code, out) = lab.cni("ADD", "lv1", pod.path(), "net1", &c);
        assert_eq!(code, 0, "{level}: {out}");
        assert_eq!(link_info(pod.name(), "net1").1, 1420, "MTU key in capitals");
        let (code, out) = lab.cni("DEL", "lv1", pod.path(), "net1", &c);
        assert_eq!(code, 0, "{level}: {out}");
        assert!(lab.host_links().contains(&vfname));
        lines(&log)
    };
    let debug = run("debug", "text");
    for want in ["planned", "applied", "attached", "undone", "detached"] {
        assert!(debug.iter().any(|l| l.contains(want)), "debug log lacks {want:?}: {debug:#?}");
    }
    assert!(debug.iter().any(|l| l.contains("DEBUG")));
    let info = run("info", "text");
    assert!(
        info.iter().any(|l| l.contains("attached")) && !info.iter().any(|l| l.contains("DEBUG")),
        "{info:#?}"
    );
    // "warning" is sriov-cni's name for warn: quiet for a clean ADD+DEL, but not off.
    assert!(run("warning", "text").is_empty());
    assert!(run("panic", "text").is_empty());
    let json_lines = run("debug", "json");
    assert!(!json_lines.is_empty());
    for l in &json_lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["level"].is_string() && v["fields"]["message"].is_string(), "{v}");
    }
    // A warning is logged at "warning": an unusable logFormat.
    let w = run("warning", "xml");
    assert!(w.iter().any(|l| l.contains("WARN") && l.contains("logFormat")), "{w:#?}");
}

#[test]
fn a_vf_bound_to_vfio_pci_gets_the_ipam_result_without_moving_anything() {
    // sriov-cni's "DPDK mode": no netdev to move; IPAM allocates, the result
    // reports the addresses for the application to use.
    let lab = Lab::new("e810-xxv", 2, "        vfsVfio: [0]\n");
    let (pci, name) = lab.vfs[0].clone();
    assert!(name.is_empty(), "VF 0 has no netdev");
    let pod = lab.pod(0);
    let host_before = lab.host_links();
    let conf = lab.conf("1.1.0", pci, "10.219.0.0/24");
    let (code, res) = lab.cni("ADD", "u1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    assert_eq!(res["interfaces"][0]["name"], "net1");
    assert_eq!(res["interfaces"][0]["pciID"], pci.to_string());
    assert_eq!(res["interfaces"][0]["sandbox"], pod.path().display().to_string());
    assert_eq!(res["ips"][0]["address"], "10.219.0.2/24");
    assert!(links(pod.name()).is_empty(), "nothing moved into the pod");
    assert_eq!(lab.host_links(), host_before);
    let mut req = conf.clone();
    req["rdma"] = json!("required");
    let (code, out) = lab.cni("ADD", "u2", pod.path(), "net2", &req);
    assert_eq!(code, 103, "{out}");
    let (code, out) = lab.cni("DEL", "u1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
}

fn journal_files(lab: &Lab) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(lab.state.path().join("attachments")).unwrap().map(|e| e.unwrap().path()).collect()
}

#[test]
fn gc_of_another_network_leaves_the_attachment_intact() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.220.0.0/24");
    let (code, out) = lab.cni("ADD", "ga", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let mut gc = conf.clone();
    gc["name"] = json!("netB");
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([]);
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).contains("net1"), "netB's GC took netA's VF");
    assert!(!lab.host_links().contains(&vfname));
    assert_eq!(lab.ipam_allocations().len(), 1, "netB's GC released netA's IP");
    // netA's own GC with nothing valid collects it.
    gc["name"] = conf["name"].clone();
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
}

#[test]
fn gc_without_valid_attachments_changes_nothing() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.221.0.0/24");
    let (code, out) = lab.cni("ADD", "gn", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let before = snapshot(&lab, pod.name());
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &conf);
    assert_eq!(code, 7, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("cni.dev/valid-attachments"), "{out}");
    assert_eq!(snapshot(&lab, pod.name()), before);
    let (code, out) = lab.cni("DEL", "gn", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn gc_goes_past_a_corrupt_journal_and_reports_it() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1)];
    let conf = |i: usize| lab.conf("1.1.0", lab.vfs[i].0, "10.222.0.0/24");
    for (i, p) in pods.iter().enumerate() {
        let (code, out) = lab.cni("ADD", &format!("gx{i}"), p.path(), "net1", &conf(i));
        assert_eq!(code, 0, "{out}");
    }
    let bad = lab.state.path().join("attachments/gx0:net1.json");
    assert!(bad.exists(), "{:?}", journal_files(&lab));
    std::fs::write(&bad, b"{\"version\": 2, \"truncated").unwrap();
    let mut gc = conf(0);
    gc["cni.dev/valid-attachments"] = json!([]);
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 5, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("gx0:net1.json"), "{out}");
    assert!(lab.host_links().contains(&lab.vfs[1].1), "the readable one was collected");
    assert_eq!(journal_files(&lab), vec![bad.clone()], "the unreadable one is left for inspection");
    // DEL of the broken one still tears down (here: IPAM; its VF is in the pod,
    // found through prevResult-less DEL only by its journal, which is gone).
    let (code, out) = lab.cni("DEL", "gx0", pods[0].path(), "net1", &conf(0));
    assert_eq!(code, 0, "{out}");
    assert!(!bad.exists(), "moved aside");
    assert_eq!(lab.ipam_allocations().len(), 0);
}

#[test]
fn a_previous_release_journal_is_undone_by_del_and_collected_by_gc() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1)];
    let conf = |i: usize| lab.conf("1.1.0", lab.vfs[i].0, "10.223.0.0/24");
    for (i, p) in pods.iter().enumerate() {
        let cid = format!("old{i}");
        let (code, out) = lab.cni("ADD", &cid, p.path(), "net1", &conf(i));
        assert_eq!(code, 0, "{out}");
        // Rewrite the journal as the previous release wrote it.
        let ours = lab.state.path().join(format!("attachments/{cid}:net1.json"));
        let j: Value = serde_json::from_slice(&std::fs::read(&ours).unwrap()).unwrap();
        let ipam = j["steps"].as_array().unwrap().iter().find_map(|s| s.get("ipam")).unwrap().clone();
        let mv = j["steps"].as_array().unwrap().iter().find_map(|s| s.get("moveNetdev")).unwrap().clone();
        let (mac, mtu, up) = link_info(p.name(), "net1");
        let legacy = json!({
            "containerId": cid, "ifname": "net1", "netns": p.path(), "pci": lab.vfs[i].0.to_string(),
            "original": {"name": mv["hostName"], "mac": mac, "mtu": mtu, "up": !up},
            "vfUndo": null, "rdma": [], "mac": mac, "mtu": null,
            "ipamConf": ipam["conf"], "ipamType": ipam["plugin"], "deviceInfoFile": null,
            "steps": ["ipam", "move_netdev", "link_config", "addresses"], "complete": true, "result": {}
        });
        std::fs::remove_file(&ours).unwrap();
        std::fs::write(lab.state.path().join(format!("attachments/{cid}-net1.json")), legacy.to_string())
            .unwrap();
    }
    let (code, out) = lab.cni("DEL", "old0", pods[0].path(), "net1", &conf(0));
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&lab.vfs[0].1));
    assert!(!link_info(lab.host.name(), &lab.vfs[0].1).2, "state restored to down");
    assert_eq!(lab.ipam_allocations().len(), 1);
    // GC of its network (the name its saved IPAM config carries) takes the other.
    let mut gc = conf(1);
    gc["cni.dev/valid-attachments"] = json!([]);
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&lab.vfs[1].1));
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// DRA mode: the network names no deviceID; the DRA driver prepared a claim
/// with two VFs for the pod (`nic::prepared`, the files the driver writes), and
/// the runtime passes `K8S_POD_UID`. Each interface gets its own VF, the
/// attachment files say what the pod got (for the claim's network data), DEL
/// removes them, and a pod without a prepared claim is refused by name.
#[test]
fn dra_mode_finds_the_pods_prepared_vf_by_pod_uid_and_records_the_attachment() {
    use nic::prepared::{self, DeviceConfig, PreparedClaim, PreparedDevice};
    let lab = Lab::new("e810-xxv", 2, "");
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let pod_uid = "6c9a1f2e-0000-4000-8000-000000000001";
    let dev = |request: &str, i: usize| PreparedDevice {
        request: request.into(),
        pool: "node-a".into(),
        device: format!("vf{i}"),
        pci: lab.vfs[i].0,
        pf: Some(lab.pf),
        netdev: Some(lab.vfs[i].1.clone()),
        rdma_devices: vec![],
        cdi_ids: vec![],
        config: DeviceConfig::default(),
    };
    let claim = PreparedClaim {
        version: prepared::VERSION,
        uid: "c1a1-0001".into(),
        namespace: "default".into(),
        name: "job-0-rdma-x7k2p".into(),
        pod_claim_name: Some("rdma".into()),
        pods: vec![pod_uid.into()],
        devices: vec![dev("vf", 0), dev("vf", 1)],
    };
    prepared::write_claim(dir.path(), &claim).unwrap();
    let mut conf = lab.conf("1.1.0", lab.vfs[0].0, "10.209.0.0/24");
    conf.as_object_mut().unwrap().remove("deviceID");
    // Two interfaces on one network: one route would clash.
    conf["ipam"]["routes"] = json!([]);
    conf["claim"] = json!("rdma");
    conf["request"] = json!("vf");
    conf["preparedDir"] = json!(dir.path());
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=job-0;K8S_POD_UID={pod_uid}");
    let with_uid = [("CNI_ARGS", args.as_str())];

    let (code, r1) = lab.cni_env("ADD", "s1", pod.path(), "net1", &conf, &with_uid);
    assert_eq!(code, 0, "{r1}");
    assert_eq!(r1["interfaces"][0]["pciID"], lab.vfs[0].0.to_string());
    let (code, r2) = lab.cni_env("ADD", "s1", pod.path(), "net2", &conf, &with_uid);
    assert_eq!(code, 0, "{r2}");
    assert_eq!(
        r2["interfaces"][0]["pciID"],
        lab.vfs[1].0.to_string(),
        "the second interface gets the other VF"
    );
    assert_eq!(links(pod.name()), ["net1".to_string(), "net2".to_string()].into());

    let listing = prepared::list(dir.path()).unwrap();
    let mut got: Vec<_> =
        listing.attachments.iter().map(|a| (a.device.as_str(), a.ifname.as_str(), a.ips.clone())).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("vf0", "net1", vec!["10.209.0.2/24".to_string()]),
            ("vf1", "net2", vec!["10.209.0.3/24".to_string()])
        ]
    );
    let a = &listing.attachments[0];
    assert_eq!(
        (a.pod_uid.as_str(), a.container_id.as_str(), a.claim_uid.as_str()),
        (pod_uid, "s1", "c1a1-0001")
    );
    assert_eq!(a.mac.as_deref(), r1["interfaces"][0]["mac"].as_str());

    // Every VF of the claim is attached: a third interface is refused, naming them.
    let (code, out) = lab.cni_env("ADD", "s1", pod.path(), "net3", &conf, &with_uid);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("already attached"), "{out}");

    // DEL: the VFs come home, the attachment files go.
    for ifname in ["net1", "net2"] {
        let (code, out) = lab.cni_env("DEL", "s1", pod.path(), ifname, &conf, &with_uid);
        assert_eq!(code, 0, "{out}");
    }
    assert!(lab.host_links().contains(&lab.vfs[0].1) && lab.host_links().contains(&lab.vfs[1].1));
    assert!(prepared::list(dir.path()).unwrap().attachments.is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());

    // Another pod has nothing prepared: refused with its UID, nothing moved.
    let other = "IgnoreUnknown=1;K8S_POD_UID=0000-other";
    let (code, out) = lab.cni_env("ADD", "s2", pod.path(), "net1", &conf, &[("CNI_ARGS", other)]);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("0000-other"), "{out}");
    // A network that names no claim may be a device plugin network missing its deviceID: said too.
    let mut plain = conf.clone();
    for k in ["claim", "request"] {
        plain.as_object_mut().unwrap().remove(k);
    }
    let (code, out) = lab.cni_env("ADD", "s2", pod.path(), "net1", &plain, &[("CNI_ARGS", other)]);
    assert_eq!(code, 104, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("resourceName"), "{out}");
    // No deviceID and no pod UID: the configuration cannot name a VF.
    let (code, out) = lab.cni_env("ADD", "s3", pod.path(), "net1", &conf, &[("CNI_ARGS", "")]);
    assert_eq!(code, 7, "{out}");
    assert!(links(pod.name()).is_empty());
}
