//! The journal keeps the host restorable: a crash after any step is undone
//! by DEL, parallel attachments leak nothing, every name fits, and writes
//! and removals are on disk before the plugin answers (seen under strace).

use serde_json::json;

use crate::common::*;

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
        let before = lab.snapshot(pod.name());
        let fp = format!("after:{step}");
        let (code, out) =
            lab.cni_env("ADD", "f1", pod.path(), "net1", &conf, &[("KUBE_RDMA_CNI_FAILPOINT", &fp)]);
        assert_eq!(code, 99, "{step}: plugin did not die at the failpoint: {out}");
        assert_ne!(lab.snapshot(pod.name()), before, "{step}: the crash left nothing to undo?");
        let (code, out) = lab.cni("DEL", "f1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{step}: {out}");
        assert_eq!(lab.snapshot(pod.name()), before, "{step}: DEL did not restore the host");
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
        for f in lab.journal_files() {
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
    let joined = joined_calls(raw.iter().map(|l| l.to_string()).collect());
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
    lab.del("fs1", pod.path(), &conf);
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
    lab.add("fs2", pod.path(), &conf);
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
    assert!(lab.journal_files().is_empty());
}
