//! GC: it undoes its own network's attachments that are no longer valid,
//! and only those, goes past what it cannot read, and collects leftovers.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

#[test]
fn gc_undoes_attachments_that_are_no_longer_valid() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1)];
    for (i, p) in pods.iter().enumerate() {
        let conf = lab.conf("1.1.0", lab.vfs[i].0, "10.208.0.0/24");
        lab.add(&format!("gc{i}"), p.path(), &conf);
    }
    assert_eq!(lab.ipam_allocations().len(), 2);
    let mut gc = lab.conf("1.1.0", lab.vfs[0].0, "10.208.0.0/24");
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "gc0", "ifname": "net1"}]);
    lab.gc(&gc);
    assert!(lab.host_links().contains(&lab.vfs[1].1), "the stale VF is back on the host");
    assert!(!lab.host_links().contains(&lab.vfs[0].1), "the valid one stays in its pod");
    assert_eq!(lab.ipam_allocations().len(), 1);
    assert_eq!(lab.state_files().len(), 1);
    let conf = lab.conf("1.1.0", lab.vfs[0].0, "10.208.0.0/24");
    lab.del("gc0", pods[0].path(), &conf);
    assert!(lab.ipam_allocations().is_empty());
}

#[test]
fn gc_of_another_network_leaves_the_attachment_intact() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.220.0.0/24");
    lab.add("ga", pod.path(), &conf);
    let mut gc = conf.clone();
    gc["name"] = json!("netB");
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([]);
    lab.gc(&gc);
    assert!(links(pod.name()).contains("net1"), "netB's GC took netA's VF");
    assert!(!lab.host_links().contains(&vfname));
    assert_eq!(lab.ipam_allocations().len(), 1, "netB's GC released netA's IP");
    // netA's own GC with nothing valid collects it.
    gc["name"] = conf["name"].clone();
    lab.gc(&gc);
    assert!(lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty());
}

#[test]
fn gc_without_valid_attachments_changes_nothing() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.221.0.0/24");
    lab.add("gn", pod.path(), &conf);
    let before = lab.snapshot(pod.name());
    let msg = lab.refused("GC", "", Path::new(""), "", &conf, 7);
    assert!(msg.contains("cni.dev/valid-attachments"), "{msg}");
    assert_eq!(lab.snapshot(pod.name()), before);
    lab.del("gn", pod.path(), &conf);
}

#[test]
fn gc_goes_past_a_corrupt_journal_and_reports_it() {
    let lab = Lab::new("e810-xxv", 2, "");
    let pods = [lab.pod(0), lab.pod(1)];
    let conf = |i: usize| lab.conf("1.1.0", lab.vfs[i].0, "10.222.0.0/24");
    for (i, p) in pods.iter().enumerate() {
        lab.add(&format!("gx{i}"), p.path(), &conf(i));
    }
    let bad = lab.state.path().join("attachments/gx0:net1.json");
    assert!(bad.exists(), "{:?}", lab.journal_files());
    std::fs::write(&bad, b"{\"version\": 2, \"truncated").unwrap();
    let mut gc = conf(0);
    gc["cni.dev/valid-attachments"] = json!([]);
    let msg = lab.refused("GC", "", Path::new(""), "", &gc, 5);
    assert!(msg.contains("gx0:net1.json"), "{msg}");
    assert!(lab.host_links().contains(&lab.vfs[1].1), "the readable one was collected");
    assert_eq!(lab.journal_files(), vec![bad.clone()], "the unreadable one is left for inspection");
    // DEL of the broken one still tears down: IPAM from its configuration, and
    // its VF, which deviceID names and the unreadable journal shows it took,
    // comes home (under its pod name: the host name was in the journal).
    lab.del("gx0", pods[0].path(), &conf(0));
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
        lab.add(&cid, p.path(), &conf(i));
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
    lab.del("old0", pods[0].path(), &conf(0));
    assert!(lab.host_links().contains(&lab.vfs[0].1));
    assert!(!link_info(lab.host.name(), &lab.vfs[0].1).2, "state restored to down");
    assert_eq!(lab.ipam_allocations().len(), 1);
    // GC of its network (the name its saved IPAM config carries) takes the other.
    let mut gc = conf(1);
    gc["cni.dev/valid-attachments"] = json!([]);
    lab.gc(&gc);
    assert!(lab.host_links().contains(&lab.vfs[1].1));
    assert!(lab.ipam_allocations().is_empty() && lab.state_files().is_empty(), "{:?}", lab.state_files());
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
    lab.del("lf1", pod.path(), &conf);
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
    lab.gc(&gc);
    assert_eq!(lab.state_files(), ["attachments/.new:net1.json.tmp".to_string()].into());
}
