//! The README demo command: `kube-rdma-device-plugin discover --sim <node>`,
//! run as the real binary on every bundled example node.

mod common;

use std::process::Command;

fn discover(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-rdma-device-plugin"))
        .arg("discover")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
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
    let header = out.lines().find(|l| l.starts_with("PCI") && l.contains("POOL / WHY NOT")).unwrap();
    let col = header.find("NETDEV").unwrap();
    for l in out.lines().filter(|l| l.starts_with("0000:3d:00.") || l.starts_with("0000:af:00.")) {
        if l.contains("ens1f0np0v") || l.contains("ens1f1np1v") {
            assert!(l[col..].starts_with("ens1f"), "misaligned row {l:?}");
        }
    }
    assert!(out.contains("Pools (1)"));
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
    let (ok, out, err) = discover(&["--sim", node.to_str().unwrap(), "--output", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["inventory"]["pfs"].as_array().unwrap().len(), 2);
    assert_eq!(v["pools"][0]["resource"], "kuberdma.io/rdma_vfs");
    assert_eq!(v["pools"][0]["devices"].as_array().unwrap().len(), 8);
    let hca = v["decisions"].as_array().unwrap().iter().find(|d| d["kind"] == "HCA").unwrap();
    assert!(hca["notes"][0].as_str().unwrap().contains("no pool in shared mode"));
}

#[test]
fn a_bad_config_fails_with_its_error_and_exit_code_1() {
    let node = common::examples().join("cx6dx-dual.yaml");
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/bad/bad-mode.yaml");
    let (ok, _, err) = discover(&["--sim", node.to_str().unwrap(), "--config", cfg.to_str().unwrap()]);
    assert!(!ok);
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
