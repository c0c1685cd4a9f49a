//! Bad inputs: each gets the CNI spec's error code and a message saying what
//! to fix, and nothing on the host changes. Plus VERSION, `--version` and
//! `install`.

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

struct Case {
    name: &'static str,
    code: i32,
    msg: &'static str,
}

#[test]
fn bad_inputs_get_the_spec_code_and_a_useful_message_and_change_nothing() {
    let lab = Lab::new("e810-xxv", 2, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    // An interface already named net9 in the pod.
    ip(pod.name(), &["link", "add", "net9", "type", "veth", "peer", "name", "net9p"]);
    let not_netns = tempfile::NamedTempFile::new().unwrap();
    let base = lab.conf("1.1.0", pci, "10.220.0.0/24");
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c[k] = v;
        c
    };
    // GC's input: the config and the (here empty) attachments to keep.
    let gc_with = |k: &str, v: Value| {
        let mut c = with(k, v);
        c["cni.dev/valid-attachments"] = json!([]);
        c
    };
    let host_before = lab.host_links();
    let pod_before = links(pod.name());
    let pod_path = pod.path().display().to_string();
    let pf = lab.pf.to_string();

    // (case, CNI_COMMAND, stdin, env overrides)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(Case, &str, Vec<u8>, Vec<(&str, String)>)> = vec![
        (
            Case { name: "malformed JSON", code: 6, msg: "cannot decode" },
            "ADD",
            b"{\"cniVersion\": ".to_vec(),
            vec![],
        ),
        (
            Case { name: "config is not an object", code: 6, msg: "JSON object" },
            "ADD",
            b"[1,2]".to_vec(),
            vec![],
        ),
        (
            Case { name: "missing CNI_COMMAND", code: 4, msg: "CNI_COMMAND" },
            "",
            vec![],
            vec![("CNI_COMMAND", String::new())],
        ),
        (Case { name: "unknown CNI_COMMAND", code: 4, msg: "not ADD, DEL" }, "FROB", vec![], vec![]),
        (
            Case { name: "missing CNI_CONTAINERID", code: 4, msg: "CNI_CONTAINERID" },
            "ADD",
            vec![],
            vec![("CNI_CONTAINERID", String::new())],
        ),
        (
            Case { name: "bad CNI_CONTAINERID", code: 4, msg: "CNI_CONTAINERID" },
            "ADD",
            vec![],
            vec![("CNI_CONTAINERID", "../x".into())],
        ),
        (
            Case { name: "missing CNI_NETNS", code: 4, msg: "CNI_NETNS" },
            "ADD",
            vec![],
            vec![("CNI_NETNS", String::new())],
        ),
        (
            Case { name: "CNI_IFNAME too long", code: 4, msg: "IFNAMSIZ" },
            "ADD",
            vec![],
            vec![("CNI_IFNAME", "averyverylongname0".into())],
        ),
        (
            Case { name: "CNI_IFNAME with a slash", code: 4, msg: "'/'" },
            "ADD",
            vec![],
            vec![("CNI_IFNAME", "a/b".into())],
        ),
        (
            Case { name: "interface name taken in the pod", code: 4, msg: "already exists in the container" },
            "ADD",
            vec![],
            vec![("CNI_IFNAME", "net9".into())],
        ),
        (
            Case { name: "traversal deviceID", code: 7, msg: "deviceID" },
            "ADD",
            ser(&with("deviceID", json!("../../../etc"))),
            vec![],
        ),
        (
            Case { name: "short deviceID", code: 7, msg: "not a PCI address" },
            "ADD",
            ser(&with("deviceID", json!("0000:3b:00"))),
            vec![],
        ),
        (
            Case { name: "traversal runtimeConfig.deviceID", code: 7, msg: "deviceID" },
            "ADD",
            ser(&with("runtimeConfig", json!({"deviceID": "0000:3b:00.0/../.."}))),
            vec![],
        ),
        (
            Case { name: "missing deviceID", code: 7, msg: "deviceID" },
            "ADD",
            ser(&{
                let mut c = base.clone();
                c.as_object_mut().unwrap().remove("deviceID");
                c
            }),
            vec![],
        ),
        (
            Case { name: "no such PCI device", code: 7, msg: "no such PCI device" },
            "ADD",
            ser(&with("deviceID", json!("0000:fe:1f.7"))),
            vec![],
        ),
        (
            Case { name: "not a VF (the PF)", code: 7, msg: "not an SR-IOV VF" },
            "ADD",
            ser(&with("deviceID", json!(pf))),
            vec![],
        ),
        (
            Case { name: "bad MAC", code: 7, msg: "not a MAC address" },
            "ADD",
            ser(&with("mac", json!("02:00:00:00:00"))),
            vec![],
        ),
        (
            Case { name: "multicast MAC", code: 7, msg: "multicast" },
            "ADD",
            ser(&with("mac", json!("03:00:00:00:00:01"))),
            vec![],
        ),
        (
            Case { name: "bad CNI_ARGS MAC", code: 7, msg: "CNI_ARGS MAC" },
            "ADD",
            vec![],
            vec![("CNI_ARGS", "IgnoreUnknown=1;MAC=zz".into())],
        ),
        (
            Case { name: "vlan out of range", code: 7, msg: "vlan: 4096 is outside" },
            "ADD",
            ser(&with("vlan", json!(4096))),
            vec![],
        ),
        (
            Case {
                name: "vlan 4095 (reserved; sriov-cni refuses it too)",
                code: 7,
                msg: "vlan: 4095 is outside 0..4094",
            },
            "ADD",
            ser(&with("vlan", json!(4095))),
            vec![],
        ),
        (
            Case { name: "one key twice in different case", code: 7, msg: "set twice" },
            "ADD",
            ser(&{
                let mut c = with("mtu", json!(1400));
                c["MTU"] = json!(1500);
                c
            }),
            vec![],
        ),
        (
            Case { name: "no network name", code: 7, msg: "name: missing" },
            "ADD",
            ser(&{
                let mut c = base.clone();
                c.as_object_mut().unwrap().remove("name");
                c
            }),
            vec![],
        ),
        (
            Case { name: "stdin over 1 MiB", code: 6, msg: "larger than 1048576 bytes" },
            "ADD",
            {
                let mut c = base.clone();
                c["padding"] = json!("x".repeat(1 << 20));
                ser(&c)
            },
            vec![],
        ),
        (
            Case { name: "vlanQoS out of range", code: 7, msg: "vlanQoS" },
            "ADD",
            ser(&{
                let mut c = with("vlan", json!(10));
                c["vlanQoS"] = json!(8);
                c
            }),
            vec![],
        ),
        (
            Case { name: "bad vlanProto", code: 7, msg: "vlanProto" },
            "ADD",
            ser(&{
                let mut c = with("vlan", json!(10));
                c["vlanProto"] = json!("802.1x");
                c
            }),
            vec![],
        ),
        (
            Case { name: "trust yes", code: 7, msg: "trust: \"yes\" is not \"on\" or \"off\"" },
            "ADD",
            ser(&with("trust", json!("yes"))),
            vec![],
        ),
        (
            Case { name: "spoofchk true", code: 7, msg: "spoofchk" },
            "ADD",
            ser(&with("spoofchk", json!("true"))),
            vec![],
        ),
        (
            Case { name: "min above max rate", code: 7, msg: "above max_tx_rate" },
            "ADD",
            ser(&{
                let mut c = with("min_tx_rate", json!(200));
                c["max_tx_rate"] = json!(100);
                c
            }),
            vec![],
        ),
        (
            Case { name: "bad link_state", code: 7, msg: "link_state" },
            "ADD",
            ser(&with("link_state", json!("up"))),
            vec![],
        ),
        (Case { name: "mtu too small", code: 7, msg: "mtu" }, "ADD", ser(&with("mtu", json!(10))), vec![]),
        (
            Case { name: "bad rdma mode", code: 7, msg: "rdma" },
            "ADD",
            ser(&with("rdma", json!("maybe"))),
            vec![],
        ),
        (
            Case { name: "wrong type for vlan", code: 7, msg: "vlan: \"ten\" is not an integer" },
            "ADD",
            ser(&with("vlan", json!("ten"))),
            vec![],
        ),
        (
            Case { name: "unsupported cniVersion", code: 1, msg: "not supported" },
            "ADD",
            ser(&with("cniVersion", json!("2.0.0"))),
            vec![],
        ),
        (
            Case { name: "CHECK with a pre-0.4.0 config", code: 1, msg: "CHECK needs 0.4.0" },
            "CHECK",
            ser(&with("cniVersion", json!("0.3.1"))),
            vec![],
        ),
        (
            Case { name: "GC with a pre-1.1.0 config", code: 1, msg: "GC needs 1.1.0" },
            "GC",
            ser(&gc_with("cniVersion", json!("1.0.0"))),
            vec![],
        ),
        (
            Case { name: "STATUS with a pre-1.1.0 config", code: 1, msg: "STATUS needs 1.1.0" },
            "STATUS",
            ser(&with("cniVersion", json!("0.4.0"))),
            vec![],
        ),
        (
            Case {
                name: "network name against the spec",
                code: 7,
                msg: "name: \"../n\" is not a network name",
            },
            "ADD",
            ser(&with("name", json!("../n"))),
            vec![],
        ),
        (
            Case { name: "GC of a network name against the spec", code: 7, msg: "is not a network name" },
            "GC",
            ser(&gc_with("name", json!("n n"))),
            vec![],
        ),
        (
            Case {
                name: "sriov-cni vlan_trunk (not implemented)",
                code: 7,
                msg: "vlan_trunk: sriov-cni's VLAN trunk",
            },
            "ADD",
            ser(&with("vlan_trunk", json!("10,20-30"))),
            vec![],
        ),
        (
            Case {
                name: "empty deviceID (Multus: fewer devices than attachments)",
                code: 7,
                msg: "deviceID: is empty",
            },
            "ADD",
            ser(&{
                let mut c = with("deviceID", json!(""));
                c["pciBusID"] = json!("");
                c
            }),
            vec![],
        ),
        (
            Case { name: "netns path is not a netns", code: 3, msg: "not a network namespace" },
            "ADD",
            vec![],
            vec![("CNI_NETNS", not_netns.path().display().to_string())],
        ),
        (
            Case { name: "netns path missing", code: 3, msg: "cannot open network namespace" },
            "ADD",
            vec![],
            vec![("CNI_NETNS", "/run/netns/does-not-exist".into())],
        ),
        (
            Case { name: "CNI_NETNS is the host's own", code: 4, msg: "own network namespace" },
            "ADD",
            vec![],
            vec![("CNI_NETNS", lab.host.path().display().to_string())],
        ),
        (
            Case { name: "IPAM plugin not in CNI_PATH", code: 7, msg: "not found in CNI_PATH" },
            "ADD",
            ser(&with("ipam", json!({"type": "no-such-ipam"}))),
            vec![],
        ),
        (
            Case { name: "relative stateDir", code: 7, msg: "stateDir" },
            "ADD",
            ser(&with("stateDir", json!("relative/dir"))),
            vec![],
        ),
    ];
    assert!(cases.len() >= 15);
    for (case, cmd, stdin, env) in cases {
        let stdin = if stdin.is_empty() { ser(&base) } else { stdin };
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, out) = run_plugin(
            lab.host.path(),
            &lab.sim.roots().sysfs,
            cmd,
            "bad1",
            Path::new(&pod_path),
            "net1",
            &stdin,
            &envs,
        );
        assert_eq!(code, case.code, "{}: {out}", case.name);
        let msg = out["msg"].as_str().unwrap_or_default();
        assert!(msg.contains(case.msg), "{}: message {msg:?} lacks {:?}", case.name, case.msg);
        assert!(out["cniVersion"].is_string(), "{}: {out}", case.name);
        assert_eq!(lab.host_links(), host_before, "{}: host changed", case.name);
        assert_eq!(links(pod.name()), pod_before, "{}: pod changed", case.name);
        assert!(lab.state_files().is_empty(), "{}: state left {:?}", case.name, lab.state_files());
        assert!(lab.ipam_allocations().is_empty(), "{}: IPAM leaked", case.name);
    }
}

#[test]
fn a_vf_locked_by_another_attachment_is_busy_code_11() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let conf = lab.conf("1.1.0", pci, "10.221.0.0/24");
    let f = lab.hold_vf_lock(pci);
    let (code, out) =
        lab.cni_env("ADD", "busy1", pod.path(), "net1", &conf, &[("KUBE_RDMA_CNI_LOCK_WAIT_MS", "200")]);
    assert_eq!(code, 11, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("busy"), "{out}");
    assert!(lab.host_links().contains(&vfname));
    assert!(lab.ipam_allocations().is_empty());
    drop(f);
    let (code, out) = lab.cni("ADD", "busy1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let (code, out) = lab.cni("DEL", "busy1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
}

fn ser(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

#[test]
fn version_lists_every_supported_version() {
    let out = std::process::Command::new(BIN)
        .env("CNI_COMMAND", "VERSION")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["supportedVersions"], json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]));
}

/// A runtime that closed our stdout (EPIPE) or a full disk: never a panic. A
/// closed pipe keeps the status (0 for VERSION, 1 for an error JSON); a stdout
/// that cannot be written is one line on stderr and exit 2 (docs/cli.md).
#[test]
fn a_closed_or_full_stdout_never_panics() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let cases: [(&str, &[&str], i32); 3] = [("VERSION", &[], 0), ("", &[], 1), ("", &["--version"], 0)];
    for (cmd, args, want) in cases {
        let mut c = std::process::Command::new(BIN);
        c.args(args).env("CNI_COMMAND", cmd).stdin(std::process::Stdio::null());
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(ours);
        let o = c.stdout(std::process::Stdio::from(OwnedFd::from(theirs))).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "{cmd} {args:?}: {err}");
        assert!(!err.contains("panicked"), "{cmd} {args:?}: {err}");

        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = c.stdout(full).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd} {args:?}: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(last.starts_with("kube-rdma-cni: writing to stdout: No space left on device"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn missing_cni_command_prints_error_json_not_usage() {
    let out = std::process::Command::new(BIN)
        .env_remove("CNI_COMMAND")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is the error JSON");
    assert_eq!(v["code"], 4);
}

#[test]
fn dash_dash_version_and_install_copy_the_binary_atomically() {
    let out = std::process::Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("kube-rdma-cni "));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("opt/cni/bin");
    let out = std::process::Command::new(BIN).args(["install", "--dest"]).arg(&dest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let installed = dest.join("kube-rdma-cni");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(BIN).unwrap());
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 1, "no temp file left behind");
    // The installed copy works.
    let out = std::process::Command::new(&installed).arg("--version").output().unwrap();
    assert!(out.status.success());
    // Bad usage fails with a message.
    let out = std::process::Command::new(BIN).args(["install"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn status_reports_an_unwritable_state_dir() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let conf =
        json!({"cniVersion": "1.1.0", "name": "n", "type": "kube-rdma-cni", "stateDir": file.join("sub")});
    let out = std::process::Command::new(BIN)
        .env("CNI_COMMAND", "STATUS")
        .env("KUBE_RDMA_CNI_STATE_ROOT", common::state_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            common::feed(c.stdin.take().unwrap(), conf.to_string().as_bytes());
            c.wait_with_output()
        })
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], 50, "{v}");
    assert!(v["msg"].as_str().unwrap().contains("state directory"));
}

#[test]
fn status_refuses_a_configuration_no_add_could_take_before_looking_at_the_node() {
    // The IPAM plugin is missing too (that alone is 50): the bad value wins with 7.
    let empty = tempfile::tempdir().unwrap();
    let conf = json!({"cniVersion": "1.1.0", "name": "n", "type": "kube-rdma-cni", "mtu": 99999,
                      "ipam": {"type": "host-local"}});
    let (code, out) = run_with_path("STATUS", &conf, empty.path());
    assert_eq!(code, 7, "{out}");
    assert!(out.contains("mtu") && out.contains("68..65535"), "{out}");
}

/// Runs the plugin with `cmd`, `stdin` and `CNI_PATH`; returns its error code (0: success) and stdout.
fn run_with_path(cmd: &str, stdin: &Value, cni_path: &Path) -> (i32, String) {
    // Never the node's own /var/lib/cni/kube-rdma.
    let node = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .env("CNI_COMMAND", cmd)
        .env("CNI_PATH", cni_path)
        .env("KUBE_RDMA_CNI_NODE_DIR", node.path())
        .env("KUBE_RDMA_CNI_STATE_ROOT", common::state_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .and_then(|mut c| {
            common::feed(c.stdin.take().unwrap(), stdin.to_string().as_bytes());
            c.wait_with_output()
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return (0, stdout);
    }
    // A failing plugin exits non-zero and puts the spec's error code in its answer.
    let v: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (v["code"].as_i64().map_or(-1, |c| c as i32), stdout)
}

/// A spec 1.1 IPAM plugin gets GC (with the valid attachments) and STATUS
/// forwarded, and its STATUS error is ours; a plugin that only speaks up to
/// 1.0.0 is not asked either.
#[test]
fn gc_and_status_are_forwarded_to_a_spec_1_1_ipam_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("calls.log");
    let down = dir.path().join("down");
    for (name, versions) in [("ipam11", r#"["1.0.0","1.1.0"]"#), ("ipam10", r#"["0.4.0","1.0.0"]"#)] {
        let script = format!(
            "#!/bin/sh\n\
             in=$(cat)\n\
             echo \"{name} $CNI_COMMAND $in\" >> {log}\n\
             case \"$CNI_COMMAND\" in\n\
             VERSION) echo '{{\"cniVersion\":\"1.0.0\",\"supportedVersions\":{versions}}}' ;;\n\
             STATUS) if [ -e {down} ]; then echo '{{\"cniVersion\":\"1.1.0\",\"code\":51,\"msg\":\"lease store down\"}}'; exit 1; fi ;;\n\
             esac\n",
            log = log.display(),
            down = down.display(),
        );
        let p = bin.join(name);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let conf = |ipam: &str| {
        json!({
            "cniVersion": "1.1.0", "name": "rdma-net", "type": "kube-rdma-cni",
            "stateDir": dir.path().join("state"),
            "ipam": {"type": ipam, "subnet": "10.9.0.0/24"},
            "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "net1"}],
        })
    };
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();

    let (code, out) = run_with_path("GC", &conf("ipam11"), &bin);
    assert_eq!(code, 0, "{out}");
    let gc = calls().lines().find(|l| l.starts_with("ipam11 GC ")).map(str::to_string).expect("GC forwarded");
    let sent: Value = serde_json::from_str(gc.trim_start_matches("ipam11 GC ")).unwrap();
    assert_eq!(sent["cniVersion"], "1.1.0");
    assert_eq!(sent["cni.dev/valid-attachments"][0]["containerID"], "c1");

    let (code, out) = run_with_path("STATUS", &conf("ipam11"), &bin);
    assert_eq!(code, 0, "{out}");
    assert!(calls().contains("ipam11 STATUS "));
    std::fs::write(&down, "").unwrap();
    let (code, out) = run_with_path("STATUS", &conf("ipam11"), &bin);
    assert_eq!(code, 51, "{out}");
    assert!(out.contains("lease store down"), "{out}");

    // A 1.0.0 plugin is asked its VERSION only.
    for cmd in ["GC", "STATUS"] {
        let (code, out) = run_with_path(cmd, &conf("ipam10"), &bin);
        assert_eq!(code, 0, "{cmd}: {out}");
    }
    let ipam10: Vec<String> =
        calls().lines().filter(|l| l.starts_with("ipam10 ")).map(str::to_string).collect();
    assert!(ipam10.iter().all(|l| l.starts_with("ipam10 VERSION")), "{ipam10:?}");
}

/// Issue 22, defect 6: an unknown key (`"vlna": 3`) is accepted, never
/// refused (meta-plugins add keys of their own), and logged as a warning that
/// names it; the keys the CNI spec, runtimes and Multus put in a
/// configuration are not.
#[test]
fn unknown_keys_are_accepted_and_logged_by_name_but_spec_runtime_and_multus_keys_are_not() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let run = |extra: &[(&str, Value)]| -> Vec<String> {
        let log = lab.log_dir().join(format!("{}.log", extra.len()));
        let mut conf = lab.conf("1.1.0", pci, "10.236.0.0/24");
        conf["logFile"] = json!(log);
        for (k, v) in extra {
            conf[*k] = v.clone();
        }
        let (code, out) = lab.cni("ADD", "uk1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
        let (code, out) = lab.cni("DEL", "uk1", pod.path(), "net1", &conf);
        assert_eq!(code, 0, "{out}");
        lines(&log).into_iter().filter(|l| l.contains("WARN")).collect()
    };
    // As Multus and libcni hand a delegate over: deviceID and pciBusID
    // (delegateAddDeviceID), runtimeConfig for the capabilities, args.
    let pci_s = json!(pci.to_string());
    let multus = [
        ("pciBusID", pci_s.clone()),
        (
            "runtimeConfig",
            json!({"deviceID": pci_s, "CNIDeviceInfoFile": lab.devinfo_dir().join("none.json")}),
        ),
        ("capabilities", json!({"deviceID": true, "ips": true})),
        ("args", json!({"cni": {"ips": []}})),
        ("dns", json!({"nameservers": ["10.96.0.10"]})),
        ("disableCheck", json!(false)),
    ];
    let warnings = run(&multus);
    assert!(warnings.is_empty(), "{warnings:#?}");
    let warnings = run(&[("vlna", json!(3)), ("kubernetes", json!({"kubeconfig": "/x"}))]);
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings.iter().any(|l| l.contains("\"vlna\"") && l.contains("did you mean \"vlan\"")),
        "{warnings:#?}"
    );
    assert!(warnings.iter().any(|l| l.contains("\"kubernetes\"")), "{warnings:#?}");
}

/// Runs the plugin and waits at most 20 s for it (a plugin stuck opening a
/// FIFO is killed and fails the test): exit code as `run_plugin` reports
/// it, stdout, stderr.
fn run_bounded(lab: &Lab, cmd: &str, cid: &str, netns: &Path, conf: &Value) -> (i32, Value, String) {
    let mut child = lab.spawn(cmd, cid, netns, "net1", conf, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("{cmd} {cid} hung (a FIFO opened for blocking I/O?)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let status = out.status.code().unwrap_or(-1);
    let code =
        if status == 0 { 0 } else { v.get("code").and_then(Value::as_i64).map_or(status, |c| c as i32) };
    (code, v, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Content and mtime of a file, to show it was not touched.
fn fingerprint(p: &Path) -> (Vec<u8>, std::time::SystemTime) {
    (std::fs::read(p).unwrap(), std::fs::metadata(p).unwrap().modified().unwrap())
}

/// Issue 36, D1: whoever writes a network configuration (a
/// NetworkAttachmentDefinition's author) names no host file the plugin acts
/// on as root. A device-info file outside the device-info directory is
/// refused before anything is touched (code 7, naming the key and the
/// directory); a symlink inside it is not followed; a DEL never removes a
/// file only its own configuration names; a logFile outside the log
/// directory, or a symlink or FIFO in it, is not opened, and the plugin
/// works all the same, saying so on stderr.
#[test]
fn a_network_configuration_cannot_make_the_plugin_write_or_remove_a_host_file() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let outside = tempfile::tempdir().unwrap();
    let sentinel = outside.path().join("sentinel");
    std::fs::write(&sentinel, "root-owned content\n").unwrap();
    let before = fingerprint(&sentinel);
    let devinfo = lab.devinfo_dir();
    let base = lab.conf("1.1.0", pci, "10.237.0.0/24");
    let with_info = |f: &Path| {
        let mut c = base.clone();
        c["runtimeConfig"] = json!({ "CNIDeviceInfoFile": f });
        c
    };
    let escape = devinfo.join("../").join(outside.path().strip_prefix("/").unwrap()).join("sentinel");
    for f in [sentinel.clone(), escape, devinfo.join("sub/x")] {
        let (code, out) = lab.cni("ADD", "h1", pod.path(), "net1", &with_info(&f));
        assert_eq!(code, 7, "{}: {out}", f.display());
        let msg = out["msg"].as_str().unwrap();
        assert!(
            msg.contains("runtimeConfig.CNIDeviceInfoFile") && msg.contains(&devinfo.display().to_string()),
            "{msg}"
        );
        assert!(lab.host_links().contains(&vfname) && lab.state_files().is_empty(), "ADD touched something");
    }
    // A symlink in the allowed directory is refused at the file, not followed.
    std::os::unix::fs::symlink(&sentinel, devinfo.join("net-h2_net1")).unwrap();
    let (code, out) = lab.cni("ADD", "h2", pod.path(), "net1", &with_info(&devinfo.join("net-h2_net1")));
    assert_ne!(code, 0, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("net-h2_net1"), "{out}");
    assert!(lab.host_links().contains(&vfname) && lab.state_files().is_empty(), "not rolled back");
    // DEL of no attachment: neither the file outside nor one inside is removed.
    let inside = devinfo.join("net-other_net1");
    std::fs::write(&inside, "{}").unwrap();
    for f in [&sentinel, &inside] {
        let (code, out) = lab.cni("DEL", "h3", pod.path(), "net1", &with_info(f));
        assert_eq!(code, 0, "{out}");
        assert!(f.exists(), "DEL removed {}, named only by its configuration", f.display());
    }
    assert_eq!(fingerprint(&sentinel), before, "the sentinel changed");
    // logFile: outside the log dir, a symlink, a FIFO: not opened; the plugin works.
    let log_dir = lab.log_dir();
    std::fs::create_dir_all(&log_dir).unwrap();
    std::os::unix::fs::symlink(&sentinel, log_dir.join("link.log")).unwrap();
    nix::unistd::mkfifo(&log_dir.join("fifo.log"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let new_file = outside.path().join("cni.log");
    for (i, f) in [new_file.clone(), log_dir.join("link.log"), log_dir.join("fifo.log")].iter().enumerate() {
        let mut c = base.clone();
        c["logFile"] = json!(f);
        let cid = format!("hl{i}");
        let (code, out, stderr) = run_bounded(&lab, "ADD", &cid, pod.path(), &c);
        assert_eq!(code, 0, "{}: {out}", f.display());
        assert!(stderr.contains("logFile") && stderr.contains("refused"), "{stderr}");
        let (code, out, _) = run_bounded(&lab, "DEL", &cid, pod.path(), &c);
        assert_eq!(code, 0, "{out}");
    }
    assert!(!new_file.exists(), "logFile outside the log directory was created");
    assert_eq!(fingerprint(&sentinel), before, "the sentinel changed through the symlink");
    assert!(lab.host_links().contains(&vfname));
}

/// Issue 36, D6: `CNI_NETNS` is checked to be a namespace before it is
/// opened: a FIFO there gets an error at once, instead of an ADD (or DEL)
/// waiting forever for a writer.
#[test]
fn a_fifo_as_cni_netns_is_refused_without_hanging() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("netns");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let conf = lab.conf("1.1.0", pci, "10.238.0.0/24");
    let (code, out, _) = run_bounded(&lab, "ADD", "f1", &fifo, &conf);
    assert_ne!(code, 0, "{out}");
    assert!(out["msg"].as_str().unwrap().contains("not a network namespace"), "{out}");
    let (code, out, _) = run_bounded(&lab, "DEL", "f1", &fifo, &conf);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname) && lab.state_files().is_empty());
}

/// Issue 36, D1: every logged string is escaped in text logs. A configuration
/// value holding a newline (a key, a network name) cannot forge a line of its
/// own in the log, nor put terminal escape codes in it.
#[test]
fn a_configuration_value_with_a_newline_cannot_forge_a_log_line() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let log = lab.log_dir().join("forged.log");
    let mut conf = lab.conf("1.1.0", pci, "10.239.0.0/24");
    conf["logFile"] = json!(log);
    conf["logLevel"] = json!("debug");
    conf["vlna\nFORGED ERROR key"] = json!(1);
    let (code, out) = lab.cni("ADD", "fl1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    // DEL takes an invalid network name, and logs it.
    conf["name"] = json!("n\nFORGED ERROR name\u{1b}[2J");
    let (code, out) = lab.cni("DEL", "fl1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("FORGED ERROR key") && text.contains("FORGED ERROR name"), "not logged: {text}");
    // Each line is one event: it starts with its timestamp (`2026-12-07T...`).
    for l in text.lines() {
        let stamped = l.len() > 5 && l[..4].bytes().all(|b| b.is_ascii_digit()) && l.as_bytes()[4] == b'-';
        assert!(stamped, "a line that is no event of ours: {l:?}\n{text}");
    }
    assert!(!text.contains('\u{1b}'), "an escape code reached the log");
}

/// Issue 36, D7: a temp file an ADD killed while writing the device-info
/// file left beside it (the writer's `.NAME.PID.SEQ.tmp`) goes with the DEL;
/// another file's temp files stay.
#[test]
fn del_removes_the_temp_files_a_killed_add_left_beside_the_device_info_file() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, _) = lab.vfs[0];
    let pod = lab.pod(0);
    let devinfo = lab.devinfo_dir();
    let info = devinfo.join("net-k1_net1");
    let mut conf = lab.conf("1.1.0", pci, "10.240.0.0/24");
    conf["runtimeConfig"] = json!({ "CNIDeviceInfoFile": info });
    let (code, out) = lab.cni("ADD", "k1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(info.exists());
    let ours = devinfo.join(".net-k1_net1.4242.0.tmp");
    let other = devinfo.join(".net-k2_net1.4242.0.tmp");
    std::fs::write(&ours, "{\"type\":").unwrap();
    std::fs::write(&other, "{\"type\":").unwrap();
    let (code, out) = lab.cni("DEL", "k1", pod.path(), "net1", &conf);
    assert_eq!(code, 0, "{out}");
    assert!(!info.exists() && !ours.exists(), "left: {:?}", files(&devinfo));
    assert!(other.exists(), "another file's temp file was removed");
}

/// Issue 36, D9: an IPAM plugin that refuses to release (its DEL fails the
/// same way every time: a configuration it cannot read) fails the first DEL,
/// so that a passing fault gets its retry, and not the retry: the runtime
/// stops retrying (the sandbox goes), everything else is undone, the
/// refusal is logged and the journal keeps the lease alone, for GC and a
/// later DEL, which releases it once the plugin accepts. A refusal by a code
/// that says the configuration is wrong (7) ends the first DEL already.
#[test]
fn a_del_whose_ipam_plugin_refuses_the_release_finishes_and_keeps_the_lease_on_record() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let refuse = d.path().join("refuse");
    let released = d.path().join("released");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\ncase \"$CNI_COMMAND\" in\n\
         VERSION) echo '{{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}}' ;;\n\
         ADD) echo '{{\"cniVersion\":\"1.1.0\",\"ips\":[{{\"address\":\"10.78.0.5/24\"}}]}}' ;;\n\
         DEL) if [ -e {r} ]; then echo \"{{\\\"code\\\":$(cat {r}),\\\"msg\\\":\\\"invalid CIDR address: nope\\\"}}\"; exit 1; fi; echo del >> {ok} ;;\n\
         esac\n",
        r = refuse.display(),
        ok = released.display()
    );
    std::fs::write(bin.join("refusing"), script).unwrap();
    std::fs::set_permissions(bin.join("refusing"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let path = format!("{}:{CNI_PATH}", bin.display());
    let env = [("CNI_PATH", path.as_str())];
    let mut conf = lab.conf("1.1.0", pci, "unused");
    conf["ipam"] = json!({"type": "refusing"});
    let journal = "attachments/rf1:net1.json";
    let (code, out) = lab.cni_env("ADD", "rf1", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{out}");
    std::fs::write(&refuse, "999").unwrap();
    let (code, out) = lab.cni_env("DEL", "rf1", pod.path(), "net1", &conf, &env);
    assert_ne!(code, 0, "the first refusal fails DEL, for a retry: {out}");
    assert!(out["msg"].as_str().unwrap().contains("invalid CIDR address"), "{out}");
    assert!(lab.host_links().contains(&vfname), "the rest is undone meanwhile");
    let (code, out) = lab.cni_env("DEL", "rf1", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "the same refusal again: DEL finishes: {out}");
    let kept: Value =
        serde_json::from_slice(&std::fs::read(lab.state.path().join(journal)).unwrap()).unwrap();
    let steps = kept["steps"].as_array().unwrap();
    assert!(steps.len() == 1 && steps[0].get("ipam").is_some(), "only the lease stays on record: {kept}");
    assert!(kept["ipamRefused"].as_str().unwrap().contains("invalid CIDR address"), "{kept}");
    // Once the plugin accepts, a later DEL releases it and forgets the attachment.
    std::fs::remove_file(&refuse).unwrap();
    let (code, out) = lab.cni_env("DEL", "rf1", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{out}");
    assert!(lab.state_files().is_empty() && released.exists(), "{:?}", lab.state_files());
    // Code 7, the configuration is invalid: no retry can help, the first DEL finishes.
    let (code, out) = lab.cni_env("ADD", "rf2", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{out}");
    std::fs::write(&refuse, "7").unwrap();
    let (code, out) = lab.cni_env("DEL", "rf2", pod.path(), "net1", &conf, &env);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname));
    assert_eq!(lab.state_files().len(), 1, "the lease is on record");
}

/// Every file under `dir` with its content and mtime, to show none was touched.
fn snapshot(dir: &Path) -> Vec<(String, (Vec<u8>, std::time::SystemTime))> {
    files(dir).into_iter().map(|f| (f.clone(), fingerprint(&dir.join(&f)))).collect()
}

/// Issue 36, D1: `stateDir` is where the plugin creates directories and
/// files as root (and DEL and GC remove them), so a network configuration may
/// name only the default or a directory inside the root the runtime's
/// environment sets (`KUBE_RDMA_CNI_STATE_ROOT`). An ADD naming one outside,
/// or climbing out with `..`, is refused with code 7 naming the key and the
/// root, and creates nothing there; a DEL naming one, which tears down
/// whatever it can, looks in the default instead and leaves a journal there
/// (a real one, from an ADD while that directory was allowed) untouched.
#[test]
fn a_state_dir_outside_the_state_root_is_refused_and_never_touched() {
    let lab = Lab::new("e810-xxv", 1, "");
    let (pci, vfname) = lab.vfs[0].clone();
    let pod = lab.pod(0);
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root_s = root.path().display().to_string();
    let strict = [("KUBE_RDMA_CNI_STATE_ROOT", root_s.as_str())];
    let conf = |st: &Path| {
        let mut c = lab.conf("1.1.0", pci, "10.238.0.0/24");
        c["stateDir"] = json!(st);
        c
    };
    let escape = root.path().join("..").join(outside.path().file_name().unwrap());
    for st in [outside.path().to_path_buf(), escape] {
        let (code, out) = lab.cni_env("ADD", "s1", pod.path(), "net1", &conf(&st), &strict);
        assert_eq!(code, 7, "{}: {out}", st.display());
        let msg = out["msg"].as_str().unwrap();
        for want in ["stateDir", root_s.as_str(), "KUBE_RDMA_CNI_STATE_ROOT"] {
            assert!(msg.contains(want), "{}: {msg} does not name {want}", st.display());
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "ADD created something there");
        assert!(lab.host_links().contains(&vfname), "ADD moved the VF");
    }

    // A real attachment journaled there while the environment allowed it.
    let parent = outside.path().parent().unwrap().display().to_string();
    let lenient = [("KUBE_RDMA_CNI_STATE_ROOT", parent.as_str())];
    let (code, out) = lab.cni_env("ADD", "s1", pod.path(), "net1", &conf(outside.path()), &lenient);
    assert_eq!(code, 0, "{out}");
    let before = snapshot(outside.path());
    assert!(before.iter().any(|(f, _)| f.starts_with("attachments/")), "no journal: {before:?}");
    let (code, out) = lab.cni_env("DEL", "s1", pod.path(), "net1", &conf(outside.path()), &strict);
    assert_eq!(code, 0, "{out}");
    assert_eq!(snapshot(outside.path()), before, "DEL acted on a stateDir outside the root");

    // Allowed again, the same DEL finds its journal and tears the attachment down.
    let (code, out) = lab.cni_env("DEL", "s1", pod.path(), "net1", &conf(outside.path()), &lenient);
    assert_eq!(code, 0, "{out}");
    assert!(lab.host_links().contains(&vfname), "the VF did not come back");
    assert!(!files(outside.path()).iter().any(|f| f.starts_with("attachments/")), "journal kept");
}
