//! DEL finishes whatever it finds: a pod netns gone, a VF the kernel
//! returned, no journal or a corrupt one, an odd state dir or configuration,
//! steps whose undo the node refuses, an IPAM plugin that cannot run, and a
//! VF another pod has by now.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

#[test]
fn del_succeeds_and_releases_ipam_when_the_netns_is_gone() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.204.0.0/24");
    lab.add("g1", pod.path(), &conf);
    let path = pod.path().to_path_buf();
    pod.delete().unwrap();
    // The veth died with the netns (a real VF would return to the host: see bring_home).
    lab.del("g1", &path, &conf);
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty());
    // Also with an empty CNI_NETNS, as runtimes send after the sandbox died.
    let (code, out) = lab.cni_env("DEL", "g1", Path::new(""), "net1", &conf, &[("CNI_NETNS", "")]);
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
    lab.add("k1", pod.path(), &conf);
    ip(pod.name(), &["link", "set", "net1", "netns", lab.host.name()]);
    let path = pod.path().to_path_buf();
    pod.delete().unwrap();
    assert!(lab.host_links().contains("net1"));
    lab.del("k1", &path, &conf);
    assert!(!lab.host_links().contains("net1"));
    assert_eq!(link_info(lab.host.name(), &vfname), before, "name, MAC, MTU and state restored");
    assert!(lab.ipam_allocations().is_empty());
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
    let before = lab.snapshot(pod.name());
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
    assert_eq!(lab.snapshot(pod.name()), before, "{case}: host changed");
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
    let res = lab.add("p1", pod.path(), &conf);
    // The state dir is lost (a node rebuilt /var/lib, an operator wiped it).
    std::fs::remove_dir_all(lab.state.path().join("attachments")).unwrap();
    let mut del = conf.clone();
    del["prevResult"] = res;
    lab.del("p1", pod.path(), &del);
    assert!(links(pod.name()).is_empty(), "the VF left the pod");
    // Its host name went with the journal: it is home under its pod name, down.
    assert!(lab.host_links().contains("net1"), "{:?}", lab.host_links());
    assert!(!link_info(lab.host.name(), "net1").2, "down");
    assert!(addrs(lab.host.name(), "net1").is_empty());
    assert!(lab.ipam_allocations().is_empty(), "IPAM released from the stdin config");
    assert!(!lab.host_links().contains(&vfname));
    // Without prevResult, a DEL with no journal leaves other links alone.
    lab.del("p1", pod.path(), &conf);
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
    lab.add("cj1", pod.path(), &conf);
    // What a power loss during an ADD of an earlier build could leave.
    std::fs::write(lab.journal_of("cj1", "net1").0, b"").unwrap();
    lab.del("cj1", pod.path(), &conf);
    assert!(links(pod.name()).is_empty(), "the VF left the pod");
    assert!(lab.host_links().contains("net1") && !link_info(lab.host.name(), "net1").2);
    assert!(!lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
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
        std::fs::remove_file(lab.journal_of("sd1", "net1").0).unwrap();
    }
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
        lab.add("dt1", pod.path(), &conf);
        let mut del = conf.clone();
        del[k] = v.clone();
        let (code, out) = lab.cni("DEL", "dt1", pod.path(), "net1", &del);
        assert_eq!(code, 0, "{k}={v}: {out}");
        assert_eq!(link_info(lab.host.name(), &vfname), before, "{k}={v}");
        assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty(), "{k}={v}");
    }
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
        lab.add(cid, pod.path(), &conf);
        let (_, j) = lab.journal_of(cid, "net1");
        let at =
            j["steps"].as_array().unwrap().iter().position(|s| s.get("moveNetdev").is_some()).unwrap() + 1;
        lab.add_journal_step(cid, "net1", at, json!({"moveRdma": {"devices": ["mlx5_2"]}}));
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
    let pf = lab.stand_in_pf();
    let before = link_info(lab.host.name(), &vfname);
    let pod = lab.pod(0);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.227.0.0/24");
    conf["logFile"] = json!(log);
    lab.add("pr1", pod.path(), &conf);
    // What an ADD with `"trust": "on"` journals first.
    lab.journal_pf_attrs("pr1", &pf, json!({"trust": false}));
    lab.del("pr1", pod.path(), &conf);
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
    lab.del("pr1", pod.path(), &conf);
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
        lab.add("tk1", pod.path(), &conf);
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

/// A logging IPAM plugin whose VERSION fails, `DIR/bin/NAME`.
fn ipam_without_version(dir: &Path, name: &str) -> std::path::PathBuf {
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
    let pf = lab.stand_in_pf();
    let before = link_info(lab.host.name(), &vfname);
    let log = lab.log_dir().join("cni.log");
    let mut conf = lab.conf("1.1.0", pci, "10.228.0.0/24");
    conf["logFile"] = json!(log);
    let old = lab.pod(0);
    lab.add("old", old.path(), &conf);
    lab.journal_pf_attrs("old", &pf, json!({"vlan": [0, 0, false]}));
    // The reboot: the VF is recreated on the host under its name, the pod's netns is gone.
    ip(old.name(), &["link", "set", "net1", "netns", lab.host.name(), "name", &vfname]);
    ip(lab.host.name(), &["link", "set", &vfname, "mtu", &before.1.to_string()]);
    drop(old);

    let new = lab.pod(1);
    let mut conf_new = conf.clone();
    conf_new["mtu"] = json!(1400);
    let res = lab.add("new", new.path(), &conf_new);
    let new_addr = res["ips"][0]["address"].as_str().unwrap().to_string();
    let logged = std::fs::read_to_string(&log).unwrap().len();

    lab.del("old", Path::new(""), &conf);
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
    lab.del("new", new.path(), &conf_new);
    assert_eq!(link_info(lab.host.name(), &vfname), before, "the VF is home as it was");
    assert!(lab.ipam_allocations().is_empty());
    assert!(lab.state_files().is_empty(), "{:?}", lab.state_files());
}
