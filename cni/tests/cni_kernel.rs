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
    let info = lab.devinfo_dir().join("net-d1_net1");
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
    let info = lab.devinfo_dir().join("devinfo.json");
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
    refused_add_then_del(&lab, &pod, "deviceID of the wrong type", &with("deviceID", json!(7)), &[], 7);
    refused_add_then_del(
        &lab,
        &pod,
        "deviceID twice in different case",
        &with("DeviceID", json!(pci.to_string())),
        &[],
        7,
    );
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
    // A prevResult the runtime did not convert to the configuration's version
    // (0.4.0 addresses carry `version`, 1.0.0 ones must not; the other way
    // round for a 0.4.0 result) comes back in the version asked.
    for (version, prev_ip, want) in [
        (
            "1.0.0",
            json!({"version": "4", "address": "10.9.0.5/16", "interface": 0}),
            json!({"address": "10.9.0.5/16", "interface": 0}),
        ),
        (
            "0.4.0",
            json!({"address": "fd00::5/64", "interface": 0}),
            json!({"version": "6", "address": "fd00::5/64", "interface": 0}),
        ),
    ] {
        let mut conf = lab.conf(version, pci, "10.217.0.0/24");
        conf["prevResult"] = json!({"cniVersion": "0.4.0", "interfaces": [{"name": "eth0", "sandbox": pod.path()}], "ips": [prev_ip]});
        let (code, res) = lab.cni("ADD", "ch2", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{res}");
        assert_eq!((&res["cniVersion"], &res["ips"][0]), (&json!(version), &want), "{res}");
        let (code, out) = lab.cni("DEL", "ch2", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
    }
}

#[test]
fn check_delegates_to_the_ipam_plugins_check_and_its_stderr_reaches_our_log() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let (bin, calls) = ipam_stub(dir.path(), "logipam");
    let log = lab.log_dir().join("cni.log");
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
    let base = lab.conf("1.1.0", pci, "10.218.0.0/24");
    // Go-style keys, as sriov-cni configurations are written.
    let conf = |level: &str, log: &std::path::Path, format: &str| {
        json!({"CNIVersion": "1.1.0", "Name": base["name"], "Type": "kube-rdma-cni", "DeviceID": pci.to_string(),
               "StateDir": lab.state.path(), "MTU": 1420, "IPAM": base["ipam"],
               "LogLevel": level, "LogFile": log, "logFormat": format})
    };
    let run = |level: &str, format: &str| -> Vec<String> {
        let log = lab.log_dir().join(format!("{level}-{format}.log"));
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
    // DEL of the broken one still tears down: IPAM from its configuration, and
    // its VF, which deviceID names and the unreadable journal shows it took,
    // comes home (under its pod name: the host name was in the journal).
    let (code, out) = lab.cni("DEL", "gx0", pods[0].path(), "net1", &conf(0));
    assert_eq!(code, 0, "{out}");
    assert!(links(pods[0].name()).is_empty(), "the VF left the pod");
    assert!(lab.host_links().contains("net1"), "{:?}", lab.host_links());
    assert_eq!(lab.ipam_allocations().len(), 0);
    assert!(lab.state_files().is_empty(), "removed, no .corrupt copy: {:?}", lab.state_files());
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
        port_state: None,
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

/// A pod whose `eth0` has its default route, as the cluster network leaves it.
fn pod_with_eth0(lab: &Lab) -> nic::netns::NamedNetns {
    let pod = lab.pod(0);
    ip(pod.name(), &["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"]);
    ip(pod.name(), &["addr", "add", "10.9.0.5/16", "dev", "eth0"]);
    ip(pod.name(), &["link", "set", "eth0", "up"]);
    ip(pod.name(), &["link", "set", "eth0p", "up"]);
    ip(pod.name(), &["route", "add", "default", "via", "10.9.0.1", "dev", "eth0"]);
    pod
}

/// `n` VFs of one network in one pod (the multi-rail RDMA workload), the
/// network's IPAM giving each a route and a default route (both families with
/// `v6`): every ADD succeeds beside the routes the others and eth0 already
/// have, every `netN` is up with its address, CHECK passes, and the DELs
/// bring every VF home as it was and leave no lease or journal.
fn vfs_of_one_network_come_up_with_their_routes(n: u32, v4: &str, v6: Option<&str>) {
    let lab = Lab::new("e810-xxv", n, "");
    let pod = pod_with_eth0(&lab);
    let before: Vec<_> = lab.vfs.iter().map(|(_, name)| link_info(lab.host.name(), name)).collect();
    let mut conf = lab.conf("1.1.0", lab.vfs[0].0, v4);
    let mut routes = vec![json!({"dst": "10.250.0.0/16"}), json!({"dst": "0.0.0.0/0"})];
    if let Some(v6) = v6 {
        conf["ipam"]["ranges"] = json!([[{"subnet": v4}], [{"subnet": v6}]]);
        routes.push(json!({"dst": "::/0"}));
    }
    conf["ipam"]["routes"] = json!(routes);
    let confs: Vec<Value> = (0..n as usize)
        .map(|i| {
            let mut c = conf.clone();
            c["deviceID"] = json!(lab.vfs[i].0.to_string());
            c
        })
        .collect();
    let ifname = |i: usize| format!("net{}", i + 1);
    let mut results = Vec::new();
    for (i, c) in confs.iter().enumerate() {
        let (code, res) = lab.cni("ADD", "mr1", pod.path(), &ifname(i), c);
        assert_eq!(code, 0, "ADD {}: {res}", ifname(i));
        results.push(res);
    }
    let table = route_table(pod.name(), false);
    let table6 = route_table(pod.name(), true);
    let has = |t: &[(String, String, String)], dst: &str, gw: &str, dev: &str| {
        t.contains(&(dst.to_string(), gw.to_string(), dev.to_string()))
    };
    assert!(has(&table, "default", "10.9.0.1", "eth0"), "eth0's default route stays: {table:?}");
    for (i, res) in results.iter().enumerate() {
        let dev = ifname(i);
        assert!(link_info(pod.name(), &dev).2, "{dev} is up");
        let want: Vec<String> = res["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["address"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(want.len(), 1 + usize::from(v6.is_some()), "{res}");
        let have = addrs(pod.name(), &dev);
        for a in &want {
            assert!(have.contains(a), "{dev} lacks {a}: {have:?}");
        }
        // The configured route and a default route out of every netN, each
        // through the gateway of its family (ECMP beside the others and eth0's).
        let gw = res["ips"][0]["gateway"].as_str().unwrap();
        for dst in ["10.250.0.0/16", "default"] {
            assert!(has(&table, dst, gw, &dev), "no {dst} via {gw} dev {dev}: {table:?}");
        }
        if v6.is_some() {
            let gw6 = res["ips"][1]["gateway"].as_str().unwrap();
            assert!(gw6.contains(':'), "{res}");
            assert!(has(&table6, "default", gw6, &dev), "no IPv6 default via {gw6} dev {dev}: {table6:?}");
        }
        let mut check = confs[i].clone();
        check["prevResult"] = res.clone();
        let (code, out) = lab.cni("CHECK", "mr1", pod.path(), &dev, &check);
        assert_eq!(code, 0, "CHECK {dev}: {out}");
    }
    assert_eq!(lab.ipam_allocations().len(), results.len() * (1 + usize::from(v6.is_some())));
    for (i, c) in confs.iter().enumerate() {
        let (code, out) = lab.cni("DEL", "mr1", pod.path(), &ifname(i), c);
        assert_eq!(code, 0, "DEL {}: {out}", ifname(i));
    }
    let after: Vec<_> = lab.vfs.iter().map(|(_, name)| link_info(lab.host.name(), name)).collect();
    assert_eq!(after, before, "every VF home with its name, MAC, MTU and state");
    assert_eq!(links(pod.name()), ["eth0".to_string(), "eth0p".to_string()].into());
    let table = route_table(pod.name(), false);
    assert!(table.iter().all(|(_, _, dev)| dev == "eth0"), "only eth0's routes left: {table:?}");
    assert!(has(&table, "default", "10.9.0.1", "eth0"), "{table:?}");
    assert!(lab.ipam_allocations().is_empty(), "{:?}", lab.ipam_allocations());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Regression (issue 22, defect 1): the second VF's route and a default
/// route beside eth0's failed ADD with `RTM_NEWROUTE ... File exists`.
#[test]
fn two_vfs_of_one_network_come_up_with_a_route_and_default_routes_in_both_families() {
    vfs_of_one_network_come_up_with_their_routes(2, "10.224.0.0/24", Some("fd00:224::/64"));
}

#[test]
fn four_vfs_of_one_network_come_up_with_a_route_and_a_default_route_each() {
    vfs_of_one_network_come_up_with_their_routes(4, "10.225.0.0/24", None);
}

/// The journal of `(cid, ifname)` as JSON.
fn journal_of(lab: &Lab, cid: &str, ifname: &str) -> (std::path::PathBuf, Value) {
    let p = lab.state.path().join(format!("attachments/{cid}:{ifname}.json"));
    let j = serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap();
    (p, j)
}

/// Inserts `step` into the journal of `(cid, ifname)` at `at`, as an ADD
/// that planned it would have written it.
fn add_journal_step(lab: &Lab, cid: &str, ifname: &str, at: usize, step: Value) {
    let (p, mut j) = journal_of(lab, cid, ifname);
    j["steps"].as_array_mut().unwrap().insert(at, step);
    std::fs::write(&p, j.to_string()).unwrap();
}

/// Regression (issue 22, defect 2): a journal with an RDMA step on a node
/// where the RDMA netlink family is gone (ib_core unloaded, which destroys
/// its devices) failed DEL with code 103, also with an empty CNI_NETNS (DEL
/// then uses the journal's netns). The journals here are what an ADD that
/// moved the RDMA device wrote; this kernel has no RDMA netlink family.
#[test]
fn del_finishes_when_the_rdma_netlink_family_is_gone_with_a_journal_holding_an_rdma_step() {
    // SAFETY: a socket we close at once.
    let fd = unsafe {
        libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 20 /* NETLINK_RDMA */)
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert!(
        fd < 0 && errno == Some(libc::EPROTONOSUPPORT),
        "this test needs a kernel without the RDMA netlink family (no ib_core), as CI's"
    );
    let lab = Lab::new("connectx-6dx", 1, "        rdma: mlx5_0\n");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.226.0.0/24");
    conf["logFile"] = json!(log);
    for (cid, netns) in [("rg1", pod.path().display().to_string()), ("rg2", String::new())] {
        let (code, out) = lab.cni("ADD", cid, pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
        let (_, j) = journal_of(&lab, cid, "net1");
        let at =
            j["steps"].as_array().unwrap().iter().position(|s| s.get("moveNetdev").is_some()).unwrap() + 1;
        add_journal_step(&lab, cid, "net1", at, json!({"moveRdma": {"devices": ["mlx5_2"]}}));
        assert_eq!(lab.ipam_allocations().len(), 1);
        let (code, out) = lab.cni_env("DEL", cid, pod.path(), "net1", &conf, &[("CNI_NETNS", &netns)]);
        assert_eq!(code, 0, "{cid} (CNI_NETNS {netns:?}): {out}");
        assert_eq!(link_info(lab.host.name(), &vfname), before, "{cid}: the VF is home as it was");
        assert!(links(pod.name()).is_empty());
        assert!(lab.ipam_allocations().is_empty(), "{cid}: lease not released");
        assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("no RDMA subsystem") && text.contains("mlx5_2"), "{text}");
}

/// Regression (issue 22, defect 2): a PF refusing to restore a PF-side
/// setting failed DEL with code 100 and kept the lease. The stand-in PF is a
/// veth named as the PF, which refuses VF attributes (`EOPNOTSUPP`: no
/// `ndo_set_vf_trust`), as a PF driver that lost its VFs' state does.
#[test]
fn del_finishes_when_the_pf_refuses_to_restore_a_vf_setting_and_releases_the_lease() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pf = format!("k{}p", lab.tag);
    ip(lab.host.name(), &["link", "add", &pf, "type", "veth", "peer", "name", &format!("k{}q", lab.tag)]);
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.227.0.0/24");
    conf["logFile"] = json!(log);
    let (code, out) = lab.cni("ADD", "pr1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    // What an ADD with `"trust": "on"` journals first.
    let restore =
        json!({"mac": null, "vlan": null, "spoofchk": null, "trust": false, "rate": null, "linkState": null});
    add_journal_step(
        &lab,
        "pr1",
        "net1",
        0,
        json!({"pfAttrs": {"pfNetdev": pf, "vf": 0, "restore": restore}}),
    );
    let (code, out) = lab.cni("DEL", "pr1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before, "the VF is home as it was");
    assert!(lab.ipam_allocations().is_empty(), "lease not released");
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
    let text = std::fs::read_to_string(&log).unwrap();
    let refused = text.lines().find(|l| l.contains("undo failed") && l.contains("pf_attrs"));
    assert!(
        refused.is_some_and(|l| l.contains("restore VF 0 attributes on")),
        "the refusal is logged: {text}"
    );
    // The repeated DEL a runtime may send is a no-op success.
    let (code, out) = lab.cni("DEL", "pr1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

/// Regression (issue 22, defect 2): a `stateDir` that is a dangling symlink
/// or a regular file failed DEL with code 5 before anything ran, so the
/// lease stayed. DEL now releases IPAM from its configuration and, the ADD
/// result (`prevResult`, which libcni passes on DEL) naming the VF, brings it home.
#[test]
fn del_with_a_state_dir_that_is_a_dangling_symlink_or_a_file_releases_the_lease() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.228.0.0/24");
    let odd = tempfile::tempdir().unwrap();
    let dangling = odd.path().join("dangling");
    std::os::unix::fs::symlink(odd.path().join("gone"), &dangling).unwrap();
    let file = odd.path().join("file");
    std::fs::write(&file, "").unwrap();
    for (case, state) in [("dangling symlink", &dangling), ("regular file", &file)] {
        let (code, res) = lab.cni("ADD", "sd1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{case}: {res}");
        assert_eq!(lab.ipam_allocations().len(), 1);
        let mut del = conf.clone();
        del["stateDir"] = json!(state);
        // Without the ADD result: the lease is released, the VF cannot be told from the pod's own links.
        let (code, out) = lab.cni("DEL", "sd1", pod.path(), "net1", &del);
        assert_eq!(code, 0, "{case}: {out}");
        assert!(lab.ipam_allocations().is_empty(), "{case}: lease not released");
        assert!(links(pod.name()).contains("net1"));
        // With it, the VF comes home (under its pod name: its host name was in the journal).
        del["prevResult"] = res;
        let (code, out) = lab.cni("DEL", "sd1", pod.path(), "net1", &del);
        assert_eq!(code, 0, "{case}: {out}");
        assert!(links(pod.name()).is_empty(), "{case}");
        assert!(lab.host_links().contains("net1"), "{case}: {:?}", lab.host_links());
        assert!(std::fs::symlink_metadata(state).is_ok() && !state.is_dir(), "{case}: DEL changed it");
        // Put the VF back under its name and forget the journal DEL could not see.
        ip(lab.host.name(), &["link", "set", "net1", "name", &lab.vfs[0].1]);
        std::fs::remove_file(journal_of(&lab, "sd1", "net1").0).unwrap();
    }
}

/// Regression (issue 22, defect 4): a VF bound to vfio-pci was given to two
/// pods (both ADDs succeeded). While the first pod's netns lives the second
/// is refused with code 7, as a netdev VF in a pod is; once that netns is
/// gone (a pod whose DEL never came) the VF can be taken again.
#[test]
fn a_vfio_vf_given_to_a_pod_whose_netns_lives_is_refused_to_another_with_code_7() {
    let lab = Lab::new("e810-xxv", 2, "        vfsVfio: [0]\n");
    let (pci, _) = lab.vfs[0];
    let (pod0, pod1) = (lab.pod(0), lab.pod(1));
    let conf = lab.conf("1.1.0", pci, "10.229.0.0/24");
    let (code, out) = lab.cni("ADD", "vf1", pod0.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    for (cid, pod, ifname) in [("vf2", &pod1, "net1"), ("vf1", &pod0, "net2")] {
        let (code, out) = lab.cni("ADD", cid, pod.path(), ifname, &conf);
        assert_eq!(code, 7, "{cid}/{ifname}: {out}");
        let msg = out["msg"].as_str().unwrap();
        assert!(msg.contains("already given to container vf1") && msg.contains(pod0.name()), "{out}");
        let (code, out) = lab.cni("DEL", cid, pod.path(), ifname, &conf);
        assert_eq!(code, 0, "{out}");
    }
    assert_eq!(lab.ipam_allocations().len(), 1, "the refused ADDs took no lease");
    let (code, out) = lab.cni("DEL", "vf1", pod0.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let (code, out) = lab.cni("ADD", "vf2", pod1.path(), "net1", &conf);
    assert_eq!(code, 0, "free again after the first DEL: {out}");
    // The pod dies without a DEL: its attachment is stale, the VF can be taken.
    let gone = pod1.path().to_path_buf();
    pod1.delete().unwrap();
    let (code, out) = lab.cni("ADD", "vf3", pod0.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    for (cid, netns) in [("vf2", gone.as_path()), ("vf3", pod0.path())] {
        let (code, out) = lab.cni("DEL", cid, netns, "net1", &conf);
        assert_eq!(code, 0, "{out}");
    }
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
    assert!(lab.node_files().is_empty(), "{:?}", lab.node_files());
}

/// Regression (issue 22, defect 5): DEL refused (code 7) a configuration
/// whose deviceID/pciBusID had the wrong type or a case duplicate, values
/// only ADD uses: DEL tears down from the journal whatever they are.
#[test]
fn del_never_fails_on_a_wrong_typed_or_case_duplicate_device_id() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.230.0.0/24");
    let bad: [(&str, Value); 4] = [
        ("deviceID", json!(7)),
        ("DeviceID", json!("0000:99:00.1")),
        ("pciBusID", json!(["x"])),
        ("runtimeConfig", json!({"deviceID": 5, "DEVICEID": "0000:99:00.1"})),
    ];
    for (k, v) in bad {
        let (code, out) = lab.cni("ADD", "dt1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
        let mut del = conf.clone();
        del[k] = v.clone();
        let (code, out) = lab.cni("DEL", "dt1", pod.path(), "net1", &del);
        assert_eq!(code, 0, "{k}={v}: {out}");
        assert_eq!(link_info(lab.host.name(), &vfname), before, "{k}={v}");
        assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty(), "{k}={v}");
    }
}

/// Regression (issue 22, defect 5): container IDs of 241 to 1024 bytes failed
/// ADD (a temp journal name over 255 bytes, a legacy journal name looked up
/// past NAME_MAX) although the journal design hashes long names.
#[test]
fn container_ids_up_to_1024_bytes_attach_with_every_journal_name_under_name_max() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.231.0.0/24");
    for (n, ifname) in [
        (240, "net1"),
        (241, "net1"),
        (245, "net1"),
        (246, "net1"),
        (250, "eth15"),
        (1024, "averyverylongif"),
    ] {
        let cid = format!("c{}", "x".repeat(n - 1));
        let (code, out) = lab.cni("ADD", &cid, pod.path(), ifname, &conf);
        assert_eq!(code, 0, "{n} bytes: {out}");
        for f in journal_files(&lab) {
            // `.<name>.tmp` is written first and must fit as well.
            let tmp = format!(".{}.tmp", f.file_name().unwrap().to_str().unwrap());
            assert!(tmp.len() <= 255, "{n} bytes: {tmp} ({} bytes)", tmp.len());
        }
        let (code, out) = lab.cni("DEL", &cid, pod.path(), ifname, &conf);
        assert_eq!(code, 0, "{n} bytes: {out}");
        assert!(lab.host_links().contains(&vfname), "{n} bytes");
        assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty(), "{n} bytes");
    }
}

/// Regression (issue 22, defect 5): undoing the rename reconfigured (down,
/// MTU) an unrelated link that had taken the VF's host name meanwhile. Now
/// the VF comes home under another name with its own settings restored, and
/// the other link is left exactly as it was, whether the pod still exists
/// or the kernel returned the VF when it died.
#[test]
fn undo_of_the_rename_never_touches_a_link_that_took_the_vfs_host_name() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let (_, mtu, up) = link_info(lab.host.name(), &vfname);
    let mut conf = lab.conf("1.1.0", pci, "10.232.0.0/24");
    conf["mtu"] = json!(1400);
    for (n, pod_dies) in [(0, false), (1, true)] {
        let pod = lab.pod(n);
        let (code, out) = lab.cni("ADD", "tk1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
        // Another link takes the name, up, with its own MTU.
        ip(lab.host.name(), &["link", "add", &vfname, "type", "veth", "peer", "name", "tk1peer"]);
        ip(lab.host.name(), &["link", "set", &vfname, "mtu", "1300", "up"]);
        let other = link_info(lab.host.name(), &vfname);
        let path = pod.path().to_path_buf();
        if pod_dies {
            // The kernel returns a physical VF to the host under its pod name.
            ip(pod.name(), &["link", "set", "net1", "netns", lab.host.name()]);
            pod.delete().unwrap();
        }
        let (code, out) = lab.cni("DEL", "tk1", &path, "net1", &conf);
        assert_eq!(code, 0, "pod dies {pod_dies}: {out}");
        assert_eq!(link_info(lab.host.name(), &vfname), other, "pod dies {pod_dies}: the other link changed");
        let home = link_info(lab.host.name(), "net1");
        assert_eq!((home.1, home.2), (mtu, up), "pod dies {pod_dies}: the VF's MTU and state restored");
        assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
        ip(lab.host.name(), &["link", "del", &vfname]);
        ip(lab.host.name(), &["link", "set", "net1", "name", &vfname]);
    }
}

/// Regression (issue 22, defect 5): a corrupt journal and no prevResult left
/// the VF in the pod although deviceID names it. The journal file shows the
/// ADD ran: the VF comes home (under its pod name, down), the lease is
/// released, the unreadable file is removed (no `.corrupt` copy).
#[test]
fn a_corrupt_journal_without_prev_result_still_brings_the_vf_home_when_device_id_names_it() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.233.0.0/24");
    let (code, out) = lab.cni("ADD", "cj1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    // What a power loss during an ADD of an earlier build could leave.
    std::fs::write(journal_of(&lab, "cj1", "net1").0, b"").unwrap();
    let (code, out) = lab.cni("DEL", "cj1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).is_empty(), "the VF left the pod");
    assert!(lab.host_links().contains("net1") && !link_info(lab.host.name(), "net1").2);
    assert!(!lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Issue 22, defect 3: what a killed ADD or an earlier build leaves beside a
/// journal is removed by the attachment's DEL (the temp file of a write
/// killed before its rename, the `.corrupt` copy earlier builds made); GC
/// removes `.corrupt` copies and temp files too old to be in flight.
#[test]
fn leftover_temp_and_corrupt_journal_files_are_removed_by_del_and_gc() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.234.0.0/24");
    let dir = lab.state.path().join("attachments");
    std::fs::create_dir_all(&dir).unwrap();
    let left = [dir.join(".lf1:net1.json.tmp"), dir.join("lf1:net1.json.corrupt")];
    for f in &left {
        std::fs::write(f, b"{\"version\": 2, \"trunc").unwrap();
    }
    let (code, out) = lab.cni("DEL", "lf1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
    // Others' leftovers, for GC: a fresh temp file (an ADD may be writing it) stays.
    let (old, fresh, corrupt) =
        (dir.join(".old:net1.json.tmp"), dir.join(".new:net1.json.tmp"), dir.join("x:net1.json.corrupt"));
    for f in [&old, &fresh, &corrupt] {
        std::fs::write(f, b"").unwrap();
    }
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(hour_ago).unwrap();
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    let (code, out) = lab.cni("GC", "", std::path::Path::new(""), "", &gc);
    assert_eq!(code, 0, "{out}");
    assert_eq!(lab.state_files(), ["attachments/.new:net1.json.tmp".to_string()].into());
}

/// The flushes run on two threads, so strace cuts one call in two when the
/// other's comes between; the trace helper puts it back together where it returned.
#[test]
fn a_call_strace_cut_in_two_is_read_as_one_where_it_returned() {
    let raw = [
        "7 fdatasync(11</s/attachments/a.json> <unfinished ...>",
        "8 fsync(19</s/attachments> <unfinished ...>",
        "7 <... fdatasync resumed>) = 0",
        "8 <... fsync resumed>) = 0",
        "7 write(1<pipe:[1]>, \"{}\", 2) = 2",
    ];
    let joined = common::joined_calls(raw.iter().map(|l| l.to_string()).collect());
    assert_eq!(
        joined,
        [
            "7 fdatasync(11</s/attachments/a.json>) = 0",
            "8 fsync(19</s/attachments>) = 0",
            "7 write(1<pipe:[1]>, \"{}\", 2) = 2",
        ]
    );
}

/// Issue 22, defect 5: a journal is flushed to disk, file and directory (the
/// rename), before ADD returns (else a power loss could leave an empty
/// journal of an attachment the runtime knows of). Seen from the system calls
/// of the real ADD, under strace; `journal::save` says why the flushes follow
/// the rename.
#[test]
fn the_journal_and_its_directory_are_flushed_before_add_returns() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.235.0.0/24");
    let trace = strace_plugin(
        &lab,
        "ADD",
        "fs1",
        pod.path(),
        &conf,
        "openat,fsync,fdatasync,rename,renameat,renameat2,write",
    );
    let calls: Vec<String> = trace
        .into_iter()
        .filter(|l| (l.contains("attachments") || l.contains("write(1<")) && !l.contains("ENOENT"))
        .map(|l| l.split_once(' ').map_or(l.clone(), |(_, c)| c.trim().to_string()))
        .collect();
    let at = |what: &str, path: &str| {
        calls
            .iter()
            .position(|c| c.starts_with(what) && c.contains(path))
            .unwrap_or_else(|| panic!("no {what} of {path} in {calls:#?}"))
    };
    let (created, renamed) = (at("openat(", ".fs1:net1.json.tmp"), at("rename", ".fs1:net1.json.tmp"));
    // strace -y names a descriptor by its path at the time of the call.
    let flushed = at("fdatasync(", "/attachments/fs1:net1.json>");
    let dir_flushed = at("fsync(", "/attachments>)");
    // The plugin's own answer is the last one on a stdout (its IPAM plugin's come before).
    let answered = calls.iter().rposition(|c| c.starts_with("write(1<") && c.contains("cniVersion")).unwrap();
    assert!(created < renamed && renamed < flushed && renamed < dir_flushed, "{calls:#?}");
    assert!(flushed < answered && dir_flushed < answered, "the result before the flushes: {calls:#?}");
    let (code, out) = lab.cni("DEL", "fs1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

/// Journal ownership (issue 22, "node reboot"): a pod's netns went without a
/// DEL (a node reboot: its processes and netns gone, the VF back on the host
/// under its own name), the VF was given to a new pod, and only then did the
/// old attachment's DEL come, with an empty CNI_NETNS as containerd sends it
/// once the netns is gone (`stopPodSandbox`). The DEL succeeds and releases
/// the old lease, but the VF, in the new pod with the new pod's MTU, and its
/// PF-side settings are the new pod's: the old journal's restore of them
/// (what an ADD with `"vlan": 10` journals) is not attempted. It used to be,
/// resetting the new pod's VLAN.
#[test]
fn a_late_del_of_a_pod_gone_with_its_node_leaves_the_vf_of_the_pod_that_has_it_now() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pf = format!("k{}p", lab.tag);
    ip(lab.host.name(), &["link", "add", &pf, "type", "veth", "peer", "name", &format!("k{}q", lab.tag)]);
    let before = link_info(lab.host.name(), &vfname);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.228.0.0/24");
    conf["logFile"] = json!(log);
    let old = lab.pod(0);
    let (code, out) = lab.cni("ADD", "old", old.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let restore = json!({"mac": null, "vlan": [0, 0, false], "spoofchk": null, "trust": null, "rate": null, "linkState": null});
    add_journal_step(
        &lab,
        "old",
        "net1",
        0,
        json!({"pfAttrs": {"pfNetdev": pf, "vf": 0, "restore": restore}}),
    );
    // The reboot: the VF is recreated on the host under its name, the pod's netns is gone.
    ip(old.name(), &["link", "set", "net1", "netns", lab.host.name(), "name", &vfname]);
    ip(lab.host.name(), &["link", "set", &vfname, "mtu", &before.1.to_string()]);
    drop(old);

    let new = lab.pod(1);
    let mut conf_new = conf.clone();
    conf_new["mtu"] = json!(1400);
    let (code, res) = lab.cni("ADD", "new", new.path(), "net1", &conf_new);
    assert_eq!(code, 0, "{res}");
    let new_addr = res["ips"][0]["address"].as_str().unwrap().to_string();
    let logged = std::fs::read_to_string(&log).unwrap().len();

    let (code, out) = lab.cni("DEL", "old", std::path::Path::new(""), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        link_info(new.name(), "net1"),
        (before.0.clone(), 1400, true),
        "the new pod's VF as its ADD made it"
    );
    assert_eq!(addrs(new.name(), "net1"), vec![new_addr.clone()]);
    let leases = lab.ipam_allocations();
    assert_eq!(leases.len(), 1, "the old lease released, the new one kept: {leases:?}");
    assert!(leases.iter().any(|l| new_addr.starts_with(l.rsplit('/').next().unwrap())), "{leases:?}");
    assert_eq!(lab.state_files(), ["attachments/new:net1.json".to_string()].into());
    let text = std::fs::read_to_string(&log).unwrap()[logged..].to_string();
    assert!(
        !text.contains("restore VF 0 attributes"),
        "the old DEL touched the new pod's PF-side settings: {text}"
    );
    assert!(text.contains("given to another attachment"), "the skip is logged: {text}");

    // The new pod's own DEL puts everything back.
    let (code, out) = lab.cni("DEL", "new", new.path(), "net1", &conf_new);
    assert_eq!(code, 0, "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before, "the VF is home as it was");
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Regression (found by the e2e tier, whose VF netdevs are up on the node as
/// `ip link set up` or systemd-networkd leave them): DEL brought an up VF home
/// down. Its state in the pod (up) matched the original, so the request left
/// it out, but the netns move closes the link; the state is now always set.
#[test]
fn del_brings_a_vf_that_was_up_home_up() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    ip(lab.host.name(), &["link", "set", &vfname, "up"]);
    let before = link_info(lab.host.name(), &vfname);
    assert!(before.2, "set up above");
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.229.0.0/24");
    let (code, out) = lab.cni("ADD", "up1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(link_info(pod.name(), "net1").2, "up in the pod");
    let (code, out) = lab.cni("DEL", "up1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before, "home as it was, up");
}

/// Takes the VF lock `<node dir>/locks/vf-<pci>.lock` as another ADD/DEL of
/// the VF holds it; released when the file is dropped.
fn hold_vf_lock(lab: &Lab, pci: nic::PciAddr) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let path = lab.vf_lock(pci);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    f
}

/// Waits until process `pid` has `file` open (a plugin waiting for that lock).
fn wait_until_open(pid: u32, file: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == file));
        if open {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("process {pid} never opened {}", file.display());
}

/// A GC that listed an attachment, then waited for the VF lock while that
/// attachment's DEL ran and the VF went to a new attachment, re-reads the
/// journal under the lock, as DEL does, and leaves alone what it no longer
/// finds: undoing the stale copy would redo the release of a lease and put
/// back PF-side settings (MAC, VLAN, ...) over the new attachment's.
#[test]
fn gc_rereads_the_journal_under_the_vf_lock_and_skips_an_attachment_its_del_removed_meanwhile() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1), lab.pod(2)];
    let dir = tempfile::tempdir().unwrap();
    let (bin, calls) = ipam_stub(dir.path(), "gcipam");
    let path = format!("{}:{CNI_PATH}", bin.display());
    let conf = |i: usize| {
        let mut c = lab.conf("1.1.0", lab.vfs[i].0, "unused");
        c["ipam"] = json!({"type": "gcipam"});
        c
    };
    let env = |who: &'static str| [("CNI_PATH", path.clone()), ("CNI_ARGS", format!("K8S_POD_NAME={who}"))];
    let run = |cmd: &str, cid: &str, pod: &std::path::Path, c: &Value, who: &'static str| {
        let e = env(who);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        lab.cni_env(cmd, cid, pod, "net1", c, &e)
    };
    // a0 (VF 0) and b0 (VF 1): GC walks them in that order.
    assert_eq!(run("ADD", "a0", pods[0].path(), &conf(0), "add").0, 0);
    assert_eq!(run("ADD", "b0", pods[1].path(), &conf(1), "add").0, 0);
    // GC (nothing valid but the attachment about to be made) lists both and
    // waits for VF 0's lock.
    let lock0 = hold_vf_lock(&lab, lab.vfs[0].0);
    let mut gc = conf(0);
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c0", "ifname": "net1"}]);
    let e = env("gc");
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = lab.spawn("GC", "", std::path::Path::new(""), "", &gc, &e);
    wait_until_open(child.id(), &lab.vf_lock(lab.vfs[0].0));
    // Meanwhile b0's DEL runs and VF 1 goes to a new attachment, c0.
    let (code, out) = run("DEL", "b0", pods[1].path(), &conf(1), "del");
    assert_eq!(code, 0, "{out}");
    let (code, out) = run("ADD", "c0", pods[2].path(), &conf(1), "add");
    assert_eq!(code, 0, "{out}");
    drop(lock0);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "GC: {}", String::from_utf8_lossy(&out.stdout));
    // a0 collected; b0, gone when GC got its lock, not released a second time.
    assert!(lab.host_links().contains(&lab.vfs[0].1), "a0's VF is home");
    let gc_dels = lines(&calls).into_iter().filter(|l| l.starts_with("DEL args=K8S_POD_NAME=gc ")).count();
    assert_eq!(gc_dels, 1, "GC released a0 only: {:#?}", lines(&calls));
    assert_eq!(links(pods[2].name()), ["net1".to_string()].into(), "c0 keeps VF 1");
    let (code, out) = run("DEL", "c0", pods[2].path(), &conf(1), "del");
    assert_eq!(code, 0, "{out}");
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Waits until process `pid` is stopped (a plugin at a `stop:` failpoint).
fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T')) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("process {pid} never stopped at its failpoint");
}

/// Continues a plugin stopped at a failpoint.
fn cont(pid: u32) {
    // SAFETY: a signal to a child of ours.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGCONT) }, 0);
}

/// The answer of a plugin started with [`Lab::spawn`]: (code, JSON).
fn answer(child: std::process::Child) -> (i32, Value) {
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let code = match out.status.code() {
        Some(0) => 0,
        s => v["code"].as_i64().map(|c| c as i32).or(s).unwrap_or(-1),
    };
    (code, v)
}

/// Issue 22 (audit): under Multus the runtime's timeout kills Multus, not our
/// ADD, and the runtime's DEL then runs beside it. Here it comes while the
/// ADD holds the VF lock and has not written its journal yet: it waits for
/// the lock and reads the journal the ADD wrote meanwhile, so the VF comes
/// home under its host name with its MTU, the journal's PF-side settings are
/// restored (tried: the stand-in PF refuses, as in the test of that undo
/// above, and the attempt is logged), the lease is released and the journal
/// removed. DEL used to read the journal only before taking the lock, and
/// tore down without it: the VF stayed in the pod, the journal forever.
#[test]
fn a_del_waiting_for_the_vf_lock_of_its_add_undoes_the_journal_that_add_wrote_meanwhile() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pf = format!("k{}p", lab.tag);
    ip(lab.host.name(), &["link", "add", &pf, "type", "veth", "peer", "name", &format!("k{}q", lab.tag)]);
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.236.0.0/24");
    conf["mtu"] = json!(1400);
    conf["logFile"] = json!(log);
    let fp = [("KUBE_RDMA_CNI_FAILPOINT", "stop:locked,stop:journal")];
    let add = lab.spawn("ADD", "ra1", pod.path(), "net1", &conf, &fp);
    wait_stopped(add.id());
    let del = lab.spawn("DEL", "ra1", pod.path(), "net1", &conf, &[]);
    wait_until_open(del.id(), &lab.vf_lock(pci));
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(journal_files(&lab).is_empty(), "no journal yet when the DEL came");
    cont(add.id());
    wait_stopped(add.id());
    // What an ADD with `"trust": "on"` journals first.
    let restore =
        json!({"mac": null, "vlan": null, "spoofchk": null, "trust": false, "rate": null, "linkState": null});
    add_journal_step(
        &lab,
        "ra1",
        "net1",
        0,
        json!({"pfAttrs": {"pfNetdev": pf, "vf": 0, "restore": restore}}),
    );
    cont(add.id());
    let (code, out) = answer(add);
    assert_eq!(code, 0, "the ADD finishes: {out}");
    let (code, out) = answer(del);
    assert_eq!(code, 0, "{out}");
    assert_eq!(link_info(lab.host.name(), &vfname), before, "the VF is home as it was");
    assert!(links(pod.name()).is_empty());
    assert!(lab.ipam_allocations().is_empty(), "lease not released: {:?}", lab.ipam_allocations());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().any(|l| l.contains("pf_attrs") && l.contains("restore VF 0 attributes on")),
        "the DEL restored the journal's PF-side settings: {text}"
    );
    // The runtime's final DEL (containerd's at sandbox removal) finds nothing left.
    let (code, out) = lab.cni("DEL", "ra1", std::path::Path::new(""), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Issue 22 (audit), the other order: the runtime's DEL runs to its end
/// before its ADD reaches the VF lock (here the ADD is held just before it).
/// The DEL finds no journal and leaves a record in the VF's lock file; the
/// ADD then refuses with code 3 and attaches nothing to the sandbox the
/// runtime tore down: no VF in the pod, no lease, no file, so the runtime's
/// final DEL has nothing to do. It used to attach the VF and take a lease
/// nobody would release. An ADD of the same IDs that starts after the DEL
/// (podman's `network connect` after `disconnect`) is not refused.
#[test]
fn an_add_whose_del_ran_before_it_reached_the_vf_lock_attaches_nothing() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.237.0.0/24");
    let fp = [("KUBE_RDMA_CNI_FAILPOINT", "stop:prepared")];
    let add = lab.spawn("ADD", "rb1", pod.path(), "net1", &conf, &fp);
    wait_stopped(add.id());
    let (code, out) = lab.cni("DEL", "rb1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    cont(add.id());
    let (code, out) = answer(add);
    assert_eq!(code, 3, "{out}");
    let msg = out["msg"].as_str().unwrap();
    assert!(
        msg.contains("rb1/net1") && msg.contains("its DEL ran") && msg.contains("nothing was attached"),
        "{msg}"
    );
    let nothing = |when: &str| {
        assert_eq!(link_info(lab.host.name(), &vfname), before, "{when}: the VF is home as it was");
        assert!(links(pod.name()).is_empty(), "{when}");
        assert!(lab.ipam_allocations().is_empty(), "{when}: {:?}", lab.ipam_allocations());
        assert!(lab.state_files().is_empty(), "{when}: {:?}", lab.state_files());
    };
    nothing("after the refused ADD");
    let (code, out) = lab.cni("DEL", "rb1", std::path::Path::new(""), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    nothing("after the runtime's final DEL");
    let (code, out) = lab.cni("ADD", "rb1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "an ADD after the DEL: {out}");
    let (code, out) = lab.cni("DEL", "rb1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    nothing("after the new attachment's DEL");
}

/// A logging IPAM plugin whose VERSION fails, `DIR/bin/NAME`.
fn ipam_without_version(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = "#!/bin/sh\ncat >/dev/null\necho '{\"cniVersion\":\"1.0.0\",\"code\":1,\"msg\":\"VERSION broken\"}'\nexit 1\n";
    let p = bin.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

/// Issue 22 (audit): DEL when the IPAM plugin cannot be run, which no retry
/// mends: gone from CNI_PATH or not executable (with a journal), or gone or
/// failing VERSION (without one). Each DEL succeeds, undoes the rest and
/// forgets the attachment, and logs the skipped release naming the plugin
/// and CNI_PATH; a repeated DEL succeeds too. It used to fail every time
/// (code 7 or 5), keeping the journal and the sandbox forever.
#[test]
fn del_succeeds_and_forgets_the_attachment_when_its_ipam_plugin_cannot_be_run() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = ipam_stub(dir.path(), "goneipam");
    let with_stub = format!("{}:{CNI_PATH}", bin.display());
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "unused");
    conf["ipam"] = json!({"type": "goneipam"});
    conf["logFile"] = json!(log);
    let logged = |from: usize| std::fs::read_to_string(&log).unwrap()[from..].to_string();
    // With a journal: the plugin gone from CNI_PATH, then not executable.
    let plugin = bin.join("goneipam");
    for (case, path) in [("gone", CNI_PATH.to_string()), ("not executable", with_stub.clone())] {
        let (code, out) = lab.cni_env("ADD", "ip1", pod.path(), "net1", &conf, &[("CNI_PATH", &with_stub)]);
        assert_eq!(code, 0, "{case}: {out}");
        if case == "not executable" {
            std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        }
        let from = std::fs::metadata(&log).unwrap().len() as usize;
        for round in 0..2 {
            let (code, out) = lab.cni_env("DEL", "ip1", pod.path(), "net1", &conf, &[("CNI_PATH", &path)]);
            assert_eq!(code, 0, "{case} (DEL {round}): {out}");
        }
        assert_eq!(link_info(lab.host.name(), &vfname), before, "{case}: the VF is home as it was");
        assert!(lab.state_files().is_empty(), "{case}: {:?}", lab.state_files());
        let text = logged(from);
        let skipped = text
            .lines()
            .find(|l| l.contains("IPAM release skipped"))
            .unwrap_or_else(|| panic!("{case}: {text}"));
        assert!(
            skipped.contains("goneipam") && skipped.contains(&path),
            "{case}: names the plugin and CNI_PATH: {skipped}"
        );
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // Without a journal (a refused ADD's DEL): the plugin gone, or failing VERSION.
    let badver = ipam_without_version(dir.path(), "badver");
    for (kind, path) in
        [("goneipam", CNI_PATH.to_string()), ("badver", format!("{}:{CNI_PATH}", badver.display()))]
    {
        let mut c = conf.clone();
        c["ipam"] = json!({"type": kind});
        let from = std::fs::metadata(&log).unwrap().len() as usize;
        let (code, out) = lab.cni_env("DEL", "ip2", pod.path(), "net1", &c, &[("CNI_PATH", &path)]);
        assert_eq!(code, 0, "{kind}: {out}");
        let text = logged(from);
        assert!(
            text.lines().any(|l| l.contains("IPAM release skipped") && l.contains(kind) && l.contains(&path)),
            "{kind}: {text}"
        );
    }
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}

/// Issue 22 (audit): a journal's removal is flushed before DEL returns (the
/// `fsync` of its directory after the `unlink`), else a power loss could
/// bring back the journal of an attachment torn down, for a GC to undo over
/// whatever has the VF by then. Seen from the system calls of the real DEL.
#[test]
fn the_removal_of_a_journal_is_flushed_before_del_returns() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.238.0.0/24");
    let (code, out) = lab.cni("ADD", "fs2", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let trace = strace_plugin(&lab, "DEL", "fs2", pod.path(), &conf, "unlink,unlinkat,fsync,exit_group");
    // The plugin's main thread removes the journal (its IPAM plugin's lines have other pids).
    let main = trace
        .iter()
        .find(|l| l.contains("unlink") && l.contains("/attachments/fs2:net1.json\""))
        .and_then(|l| l.split_once(' '))
        .map(|(p, _)| p.to_string())
        .unwrap_or_else(|| panic!("the journal's unlink is not in {trace:#?}"));
    let at = |what: &str, path: &str| {
        trace
            .iter()
            .position(|c| c.starts_with(&format!("{main} ")) && c.contains(what) && c.contains(path))
            .unwrap_or_else(|| panic!("no {what} of {path} by {main} in {trace:#?}"))
    };
    let unlinked = at("unlink", "/attachments/fs2:net1.json\"");
    let flushed = at("fsync(", "/attachments>)");
    let exited = at("exit_group(", "0");
    assert!(unlinked < flushed && flushed < exited, "{trace:#?}");
    assert!(journal_files(&lab).is_empty());
}

/// `ip -j [-6] route show` in `ns` as `(dst, gateway, dev)`, a multipath
/// route (IPv6 ECMP siblings) once per nexthop.
fn route_table(ns: &str, v6: bool) -> Vec<(String, String, String)> {
    let mut args = vec!["-j"];
    if v6 {
        args.push("-6");
    }
    args.extend(["route", "show"]);
    let v: Value = serde_json::from_str(&ip(ns, &args)).unwrap();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out = vec![];
    for r in v.as_array().unwrap() {
        match r["nexthops"].as_array() {
            Some(hops) => out.extend(hops.iter().map(|h| (s(&r["dst"]), s(&h["gateway"]), s(&h["dev"])))),
            None => out.push((s(&r["dst"]), s(&r["gateway"]), s(&r["dev"]))),
        }
    }
    out
}

/// Issue 22 (audit): a route the IPAM result lists twice is added once and
/// the second add's `EEXIST` accepted, because the table then holds that
/// very route out of the interface; `EEXIST` is no longer taken on the
/// kernel's word alone.
#[test]
fn a_route_listed_twice_is_added_once_and_the_add_succeeds() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let mut conf = lab.conf("1.1.0", pci, "unused");
    conf["ipam"] = json!({"type": "static", "addresses": [{"address": "10.239.0.2/24", "gateway": "10.239.0.1"}],
                          "routes": [{"dst": "10.252.0.0/16"}, {"dst": "10.252.0.0/16"}]});
    let (code, out) = lab.cni("ADD", "rt1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let want = ("10.252.0.0/16".to_string(), "10.239.0.1".to_string(), "net1".to_string());
    let table = route_table(pod.name(), false);
    assert_eq!(table.iter().filter(|r| **r == want).count(), 1, "{table:?}");
    let (code, out) = lab.cni("DEL", "rt1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

/// Issue 22 (audit): the rule that a vfio-pci VF serves one attachment is
/// node-wide: a network with a state dir of its own is refused the VF
/// another network gave to a pod whose netns lives (code 7, naming that
/// attachment and its network), and gets it once that one's DEL ran. Each
/// network used to look only at its own state dir's journals, and both ADDs
/// succeeded.
#[test]
fn a_vfio_vf_given_by_one_network_is_refused_to_another_network_with_its_own_state_dir() {
    let lab = Lab::new("e810-xxv", 1, "        vfsVfio: [0]\n");
    let (pci, _) = lab.vfs[0];
    let (pod0, pod1) = (lab.pod(0), lab.pod(1));
    let a = lab.conf("1.1.0", pci, "10.240.0.0/24");
    let other = tempfile::tempdir().unwrap();
    let mut b = lab.conf("1.1.0", pci, "10.241.0.0/24");
    b["name"] = json!(format!("other-{}", lab.tag));
    b["stateDir"] = json!(other.path());
    let (code, out) = lab.cni("ADD", "na1", pod0.path(), "net1", &a);
    assert_eq!(code, 0, "{out}");
    assert_eq!(lab.node_files(), [format!("vfs/{pci}.json")].into());
    let (code, out) = lab.cni("ADD", "nb1", pod1.path(), "net1", &b);
    assert_eq!(code, 7, "{out}");
    let msg = out["msg"].as_str().unwrap();
    assert!(
        msg.contains("already given to container na1") && msg.contains(a["name"].as_str().unwrap()),
        "{msg}"
    );
    let (code, out) = lab.cni("DEL", "nb1", pod1.path(), "net1", &b);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        lab.node_files(),
        [format!("vfs/{pci}.json")].into(),
        "the refused ADD's DEL leaves na1's record"
    );
    let (code, out) = lab.cni("DEL", "na1", pod0.path(), "net1", &a);
    assert_eq!(code, 0, "{out}");
    assert!(lab.node_files().is_empty(), "{:?}", lab.node_files());
    let (code, out) = lab.cni("ADD", "nb1", pod1.path(), "net1", &b);
    assert_eq!(code, 0, "free once na1's DEL ran: {out}");
    let (code, out) = lab.cni("DEL", "nb1", pod1.path(), "net1", &b);
    assert_eq!(code, 0, "{out}");
    assert!(lab.node_files().is_empty() && lab.state_files().is_empty() && lab.ipam_allocations().is_empty());
    assert!(
        common::files(other.path()).iter().all(|f| f == "ipam-versions.json"),
        "{:?}",
        common::files(other.path())
    );
}
