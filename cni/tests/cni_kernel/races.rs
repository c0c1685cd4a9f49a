//! Invocations of one VF at once, held at chosen points (a lock held by the
//! test, `stop:` failpoints): a GC beside a DEL and a new ADD, and a DEL
//! beside its own ADD in either order.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

/// Waits until process `pid` has `file` open (a plugin waiting for that lock).
fn wait_until_open(pid: u32, file: &Path) {
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
    let run = |cmd: &str, cid: &str, pod: &Path, c: &Value, who: &'static str| {
        let e = env(who);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        lab.cni_env(cmd, cid, pod, "net1", c, &e)
    };
    // a0 (VF 0) and b0 (VF 1): GC walks them in that order.
    assert_eq!(run("ADD", "a0", pods[0].path(), &conf(0), "add").0, 0);
    assert_eq!(run("ADD", "b0", pods[1].path(), &conf(1), "add").0, 0);
    // GC (nothing valid but the attachment about to be made) lists both and
    // waits for VF 0's lock.
    let lock0 = lab.hold_vf_lock(lab.vfs[0].0);
    let mut gc = conf(0);
    gc.as_object_mut().unwrap().remove("deviceID");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c0", "ifname": "net1"}]);
    let e = env("gc");
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = lab.spawn("GC", "", Path::new(""), "", &gc, &e);
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
    let pf = lab.stand_in_pf();
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
    assert!(lab.journal_files().is_empty(), "no journal yet when the DEL came");
    cont(add.id());
    wait_stopped(add.id());
    // What an ADD with `"trust": "on"` journals first.
    lab.journal_pf_attrs("ra1", &pf, json!({"trust": false}));
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
    lab.del("ra1", Path::new(""), &conf);
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
    lab.del("rb1", pod.path(), &conf);
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
    lab.del("rb1", Path::new(""), &conf);
    nothing("after the runtime's final DEL");
    let (code, out) = lab.cni("ADD", "rb1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "an ADD after the DEL: {out}");
    lab.del("rb1", pod.path(), &conf);
    nothing("after the new attachment's DEL");
}
