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
    conf["mac"] = json!("02:11:22:33:44:55");
    conf["mtu"] = json!(1400);

    let (code, res) = lab.cni("ADD", "c1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{res}");
    assert_eq!(res["cniVersion"], "1.1.0");
    let iface = &res["interfaces"][0];
    assert_eq!(iface["name"], "net1");
    assert_eq!(iface["mac"], "02:11:22:33:44:55");
    assert_eq!(iface["mtu"], 1400);
    assert_eq!(iface["pciID"], pci.to_string());
    assert_eq!(iface["sandbox"], pod.path().display().to_string());
    assert_eq!(res["ips"][0]["address"], "10.201.1.2/24");
    assert_eq!(res["ips"][0]["interface"], 0);
    assert_eq!(res["routes"][0]["dst"], "10.250.0.0/16");

    // Kernel state: gone from the host, present in the pod, configured.
    assert!(!lab.host_links().contains(&vfname));
    assert_eq!(links(pod.name()), ["net1".to_string()].into());
    assert_eq!(link_info(pod.name(), "net1"), ("02:11:22:33:44:55".into(), 1400, true));
    assert_eq!(addrs(pod.name(), "net1"), vec!["10.201.1.2/24".to_string()]);
    assert!(ip(pod.name(), &["route", "show"]).contains("10.250.0.0/16 via 10.201.1.1 dev net1"));
    assert_eq!(lab.ipam_allocations().len(), 1);

    // CHECK with prevResult.
    let mut check = conf.clone();
    check["prevResult"] = res.clone();
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &check);
    assert_eq!(code, 0, "{out}");

    // CHECK notices drift.
    ip(pod.name(), &["link", "set", "net1", "mtu", "1300"]);
    let (code, out) = lab.cni("CHECK", "c1", pod.path(), "net1", &check);
    assert_eq!(code, 102, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("MTU"), "{out}");

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
fn rename_falls_back_to_a_temporary_netns_when_the_combined_move_is_refused() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    // A pod link already named like the VF on the host: renaming inside the
    // pod would clash; the temporary netns cannot.
    ip(pod.name(), &["link", "add", &vfname, "type", "veth", "peer", "name", "clashp"]);
    let conf = lab.conf("1.1.0", pci, "10.211.0.0/24");
    let fp = [("KUBE_RDMA_CNI_FAILPOINT", "refuse:combined_move")];
    let (code, out) = lab.cni_env("ADD", "t1", pod.path(), "net1", &conf, &fp);
    assert_eq!(code, 0, "{out}");
    assert!(links(pod.name()).contains("net1"));
    assert_eq!(addrs(pod.name(), "net1"), vec!["10.211.0.2/24".to_string()]);
    let (code, out) = lab.cni("DEL", "t1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname));
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
    conf["mac"] = json!("02:00:00:00:12:34");
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
    conf["mac"] = json!("02:00:00:00:00:09");
    conf["mtu"] = json!(1450);
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": info});
    // pf_attrs and move_rdma cannot run without SR-IOV / RDMA hardware (kernel lab covers them).
    for step in ["move_netdev", "link_config", "ipam", "addresses", "device_info"] {
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
