//! The README demo command: `kube-rdma-device-plugin discover --sim <node>`,
//! run as the real binary on every bundled example node, under the one
//! command-line convention (`-o`, exit 0/1/2, a stdout that closes or fills).

mod common;

use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"));
    c.env("RUST_LOG", "warn");
    c
}

fn discover_code(args: &[&str]) -> (i32, String, String) {
    let out = bin().arg("discover").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn discover(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = discover_code(args);
    (code == 0, out, err)
}

fn example(name: &str) -> String {
    common::examples().join(name).to_str().unwrap().to_string()
}

#[test]
fn table_for_the_dual_port_connectx6dx_node_lists_every_vf_with_its_pool() {
    let node = common::examples().join("cx6dx-dual.yaml");
    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("Physical functions (2)"), "{out}");
    assert!(out.contains("Virtual functions (16)"), "{out}");
    assert!(out.contains("default pool kuberdma.io/rdma_vfs"));
    let vf_rows: Vec<&str> =
        out.lines().filter(|l| l.starts_with("0000:3d:0") || l.starts_with("0000:af:0")).collect();
    // 2 PF rows + 16 VF rows
    assert_eq!(vf_rows.len(), 18, "{out}");
    let row = out.lines().find(|l| l.starts_with("0000:3d:00.1")).unwrap();
    for want in ["mlx5_core", "ens1f0np0v0", "mlx5_2", "uverbs2", "100G", "→ kuberdma.io/rdma_vfs", "Healthy"]
    {
        assert!(row.contains(want), "{want} missing in {row:?}");
    }
    // Columns are aligned: every VF row has its PF column at the same offset.
    let header = out.lines().find(|l| l.starts_with("PCI") && l.contains("UVERBS")).unwrap();
    let col = header.find("NETDEV").unwrap();
    for l in out.lines().filter(|l| l.starts_with("0000:3d:00.") || l.starts_with("0000:af:00.")) {
        if l.contains("ens1f0np0v") || l.contains("ens1f1np1v") {
            assert!(l[col..].starts_with("ens1f"), "misaligned row {l:?}");
        }
    }
    assert!(out.contains("Pools (1)"));
}

/// The first command of the README: selected and rejected devices, each with its
/// reason, the columns explained under the tables, and the node checks.
#[test]
fn the_bundled_node_shows_rejected_devices_with_reasons_and_explains_the_columns() {
    let (code, out, err) = discover_code(&["--sim", &example("cx6dx-dual.yaml")]);
    assert_eq!(code, 0, "{err}");
    let pf = out.lines().find(|l| l.starts_with("0000:3d:00.0")).unwrap();
    assert!(pf.contains("not served: a PF stays with the host, VF pools serve its VFs"), "{pf}");
    let vf = out.lines().find(|l| l.starts_with("0000:af:00.1")).unwrap();
    assert!(vf.contains("→ kuberdma.io/rdma_vfs"), "{vf}");
    let legend = &out[out.find("Columns:").expect("a legend")..];
    for col in ["VFS", "UPSTREAM", "GID", "UVERBS", "POOL / WHY NOT", "SOCKET"] {
        assert!(legend.lines().any(|l| l.trim_start().starts_with(col)), "{col} not explained: {legend}");
    }
    assert!(out.contains("rdma netns: exclusive (ib_core netns_mode=0"), "{out}");
    assert!(out.trim_end().ends_with("Node checks: all pass"), "{out}");
}

/// Shared netns mode on a node whose VF pools need exclusive: a failing check with
/// the remediation, exit 1, in the table and in JSON; the report is still printed.
#[test]
fn shared_netns_mode_with_vf_pools_is_a_failing_check_with_the_fix() {
    let (code, out, err) = discover_code(&["--sim", &example("mixed.yaml")]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("Pools (1)"), "the report is printed: {out}");
    assert!(out.contains("rdma netns: shared (ib_core netns_mode=1"), "{out}");
    assert!(out.contains("Node checks: 1 failing"), "{out}");
    assert!(out.contains("FAIL rdma-netns: RDMA netns mode is shared"), "{out}");
    // The reboot is drained first and uncordoned after, one step a line (issue 39, item 7).
    let steps = [
        "    fix: echo 'options ib_core netns_mode=0' > /etc/modprobe.d/ib_core.conf\n",
        "    fix: kubectl drain NODE --ignore-daemonsets\n",
        "    fix: reboot\n",
        "    fix: kubectl uncordon NODE\n",
    ];
    assert!(out.contains(&steps.concat()), "{out}");
    assert!(out.contains("rdma system set netns exclusive"), "{out}");

    let (code, out, _) = discover_code(&["--sim", &example("mixed.yaml"), "-o", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rdmaNetnsMode"], "shared");
    assert_eq!(v["failures"][0]["check"], "rdma-netns");
    assert!(v["failures"][0]["fix"][0].as_str().unwrap().contains("netns_mode=0"));
}

/// A host without SR-IOV or RDMA (an empty sysfs tree; a node whose PFs have no
/// VF): what was looked for and what to check, exit 1, not empty tables and 0.
#[test]
fn a_host_without_sriov_or_rdma_says_what_was_looked_for_and_what_to_check() {
    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(empty.path().join("bus/pci/devices")).unwrap();
    let (code, out, err) = discover_code(&["--sysfs-root", empty.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("FAIL no-devices: no SR-IOV physical function and no RDMA device found"), "{out}");
    assert!(out.contains(&format!("under {}/bus/pci/devices", empty.path().display())), "{out}");
    for hint in ["sriov_numvfs", "mlx5_core, ice", "mlx5_ib -e irdma", "rdma link"] {
        assert!(out.contains(hint), "{hint}: {out}");
    }

    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("no-vfs.yaml");
    let text = std::fs::read_to_string(example("cx6dx-dual.yaml")).unwrap().replace("vfs: 8", "vfs: 0");
    std::fs::write(&node, text).unwrap();
    let (code, out, err) = discover_code(&["--sim", node.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("2 SR-IOV physical function(s) but no VF: sriov_numvfs is 0 on every one"), "{out}");
    assert!(out.contains("it has no VF (sriov_numvfs 0)"), "{out}");
}

/// `-o` as the operator's commands read it; `wide` would add nothing, so it is
/// refused with the formats that apply; a usage error is exit 2.
#[test]
fn output_flag_follows_the_one_convention() {
    let node = example("cx6dx-dual.yaml");
    let (code, out, err) = discover_code(&["--sim", &node, "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(v["pools"][0]["resource"], "kuberdma.io/rdma_vfs");
    let (code, short, _) = discover_code(&["--sim", &node, "-o", "json"]);
    let (_, long, _) = discover_code(&["--sim", &node, "--output", "json"]);
    assert_eq!(code, 0);
    let strip = |t: &str| t.lines().filter(|l| !l.contains("/kube-rdma-sim-")).collect::<Vec<_>>().join("\n");
    assert_eq!(strip(&short), strip(&long));
    let (code, _, err) = discover_code(&["--sim", &node, "-o", "wide"]);
    assert_eq!(code, 2);
    assert!(err.contains("-o wide does not apply here: use one of table, json, yaml"), "{err}");
    let (code, _, err) = discover_code(&["--sim", &node, "-o", "xml"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown output format \"xml\""), "{err}");
    let help = bin().args(["discover", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("-o, --output <OUTPUT>") && help.contains("Exit status:"), "{help}");
}

/// `discover | head -c1`: the reader is gone, the output ends quietly with the
/// verdict as exit status; `> /dev/full`: one line on stderr, exit 2. The same
/// for --help and for the daemon's flags errors.
#[test]
fn a_closed_or_full_stdout_never_panics() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let cases: [(&[&str], i32); 4] = [
        (&["discover", "--sim", &example("cx6dx-dual.yaml")], 0),
        (&["discover", "-o", "json", "--sim", &example("cx6dx-dual.yaml")], 0),
        (&["discover", "-o", "yaml", "--sim", &example("mixed.yaml")], 1),
        (&["--help"], 0),
    ];
    for (args, want) in cases {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(ours);
        let o = bin().args(args).stdout(std::process::Stdio::from(OwnedFd::from(theirs))).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: quiet, got {err}");

        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = bin().args(args).stdout(full).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("kube-rdma-device-plugin: writing to stdout: No space left on device"), "{err}");
    }
}

#[test]
fn e810_vfs_without_rdma_say_which_selector_rejected_them() {
    let node = common::examples().join("e810-xxv.yaml");
    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap()]);
    assert!(ok, "{err}");
    let row = out.lines().find(|l| l.starts_with("0000:17:01.0")).unwrap();
    assert!(row.contains("not served") && row.contains("isRdma: no RDMA device"), "{row}");
}

#[test]
fn json_output_has_inventory_pools_and_decisions() {
    let node = common::examples().join("mixed.yaml");
    // Exit 1: mixed.yaml is in shared netns mode (see the rdma-netns test).
    let (code, out, err) = discover_code(&["--sim", node.to_str().unwrap(), "--output", "json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["inventory"]["pfs"].as_array().unwrap().len(), 2);
    assert_eq!(v["pools"][0]["resource"], "kuberdma.io/rdma_vfs");
    assert_eq!(v["pools"][0]["devices"].as_array().unwrap().len(), 8);
    let hca = v["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "HCA").unwrap();
    assert!(hca["notes"][0].as_str().unwrap().contains("no pool in shared mode"));
}

#[test]
fn a_bad_config_fails_with_its_error_and_exit_code_2() {
    let node = common::examples().join("cx6dx-dual.yaml");
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/bad/bad-mode.yaml");
    let (code, _, err) = discover_code(&["--sim", node.to_str().unwrap(), "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(err.contains("bad-mode.yaml: pool \"rdma_a\": field `mode`"), "{err}");
}

/// The protocol of each E810 PF, and why each VF has no RDMA device (upstream
/// iavf has none); with VF RDMA on, the VFs are served and nothing is explained.
#[test]
fn e810_nodes_show_the_pf_protocol_and_why_a_vf_has_no_rdma() {
    let node = common::examples().join("e810-c-iwarp.yaml");
    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap()]);
    assert!(ok, "{err}");
    let pf = |bdf: &str| out.lines().find(|l| l.starts_with(bdf)).unwrap().to_string();
    assert!(out.lines().any(|l| l.starts_with("PCI") && l.contains(" PROTOCOL ")), "{out}");
    assert!(pf("0000:5e:00.0").contains(" iWARP "), "{out}");
    assert!(pf("0000:5e:00.1").contains(" RoCEv2 "), "{out}");
    assert!(out.contains("E810 VFs without an RDMA device (4)"), "{out}");
    let why = out.lines().rfind(|l| l.starts_with("0000:5e:01.0")).unwrap();
    assert!(why.contains("no iavf.rdma.N auxiliary device") && why.ends_with("(the PF runs iWARP)"), "{why}");

    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap(), "--output", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = v["vfsWithoutRdma"].as_array().unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(list[0]["vf"], "0000:5e:01.0");

    let node = common::examples().join("e810-c-vf-rdma.yaml");
    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap(), "--output", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("vfsWithoutRdma").is_none(), "{v}");
    let served = v["pools"][0]["devices"].as_array().unwrap();
    assert_eq!(served.len(), 4);
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Issue 39, item 6: the quick start's pool on a node it does not fit serves
/// nothing. That is a failing check naming the pool and, per selector, the
/// device it came nearest to taking (the E810 VFs fail at `vendors`, the
/// ConnectX-7 VFs only at `pfNames`), exit 1; the same config on the node it
/// was written for passes.
#[test]
fn a_configured_pool_that_would_serve_no_device_fails_naming_it_and_its_nearest_miss() {
    let pools = common::examples().join("../pools.yaml").to_str().unwrap().to_string();
    let (code, out, err) = discover_code(&["--sim", &example("mixed.yaml"), "--config", &pools]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("Node checks: 1 failing"), "{out}");
    assert!(
        out.contains(
            "FAIL empty-pool: pool kuberdma.io/rdma_vfs serves no device: its selectors reject every device; \
             nearest miss: selectors rejected 0000:1a:00.1 by pfNames [ens1f0np0#0-7,ens1f1np1#0-7]: PF is ens3np0, VF index 0"
        ),
        "{out}"
    );
    assert!(out.contains("fix: a config meant for other kinds of nodes too"), "{out}");
    let (code, json, _) = discover_code(&["--sim", &example("mixed.yaml"), "--config", &pools, "-o", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["failures"][0]["check"], "empty-pool");

    let (code, out, err) = discover_code(&["--sim", &example("cx6dx-dual.yaml"), "--config", &pools]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("Node checks: all pass"), "{out}");
}

/// One config for a fleet of several kinds of nodes: `--allow-empty-pools`
/// passes the pools a node has no device for (the table still shows 0).
#[test]
fn allow_empty_pools_passes_a_fleet_config_on_a_node_it_only_partly_fits() {
    let pools = common::examples().join("../pools.yaml").to_str().unwrap().to_string();
    let args = ["--sim", &example("mixed.yaml"), "--config", &pools, "--allow-empty-pools"];
    let (code, out, err) = discover_code(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("Node checks: all pass"), "{out}");
    let pool = out.lines().find(|l| l.starts_with("kuberdma.io/rdma_vfs")).unwrap();
    assert_eq!(pool.split_whitespace().nth(4), Some("0"), "{pool}");
}

/// Each selector of an empty pool gets its own nearest miss; a pool whose
/// devices an earlier pool took says which; a vf pool on a node without VFs
/// (only an HCA) says there was nothing to try.
#[test]
fn an_empty_pool_says_why_per_selector_and_names_the_pool_that_took_its_devices() {
    let dir = tempfile::tempdir().unwrap();
    let pools = [
        "pools:",
        "  - name: first",
        "    selectors: {vendors: [\"15b3\"]}",
        "  - name: second",
        "    selectors: {pfNames: [ens3np0]}",
        "  - name: nowhere",
        "    selectors:",
        "      - {vendors: [\"15b3\"], drivers: [mlx5_ib]}",
        "      - {numaNodes: [7]}",
    ];
    let cfg = write(dir.path(), "pools.yaml", &pools.join("\n"));
    let (code, out, err) = discover_code(&["--sim", &example("mixed.yaml"), "--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("Node checks: 3 failing"), "{out}"); // and rdma-netns: `first` takes RDMA VFs
    assert!(
        out.contains(
            "FAIL empty-pool: pool kuberdma.io/second serves no device: every device it selects is taken by \
             an earlier pool (kuberdma.io/first; the first pool in the config that selects a device wins)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL empty-pool: pool kuberdma.io/nowhere serves no device: its selectors reject every device; \
             nearest miss: selectors[0] rejected 0000:1a:00.1 by drivers [mlx5_ib]: driver is mlx5_core; \
             selectors[1] rejected 0000:1a:00.1 by numaNodes: NUMA node is 0"
        ),
        "{out}"
    );

    let node = [
        "node: hca-only",
        "adapters:",
        "  - model: connectx-6dx-nosriov",
        "    pfs:",
        "      - bdf: \"0000:86:00.0\"",
        "        netdev: ens5f0np0",
        "        rdma: mlx5_1",
    ];
    let node = write(dir.path(), "hca-only.yaml", &node.join("\n"));
    let vf_pool = write(dir.path(), "vf.yaml", "pools:\n  - name: vfs\n    selectors: {isRdma: true}\n");
    let (code, out, err) = discover_code(&["--sim", &node, "--config", &vf_pool]);
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains(
            "FAIL empty-pool: pool kuberdma.io/vfs serves no device: this node has no device of its mode"
        ),
        "{out}"
    );
}
