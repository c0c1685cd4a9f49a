//! The real binaries on the bundled simulated nodes, without a cluster.
use std::process::Command;

use kube_rdma_operator::crd::RdmaNodeState;
use kube_rdma_operator::fixtures::example_path;

fn op() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kube-rdma-operator"))
}
fn kubectl_rdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-rdma"))
}

fn run(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[test]
fn agent_once_prints_a_table_for_the_cx6dx_example() {
    let (code, out, err) = run(op().args(["agent", "--once", "--sim"]).arg(example_path("cx6dx-dual")));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("NODE cx6dx-dual  profile default (Audit)  READY True  PASS/TOTAL "), "{out}");
    assert!(out.contains("INTERFACE  CHECK"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("ens1f0np0  chain-tos-pfc")
            && l.contains("Pass")
            && l.contains("tos 106 → dscp 26 → prio 3, pfc 3")),
        "{out}"
    );
}

#[test]
fn agent_once_json_is_an_rdma_node_state() {
    let (code, out, err) =
        run(op().args(["agent", "--once", "--output", "json", "--sim"]).arg(example_path("e810-xxv")));
    assert_eq!(code, 0, "{err}");
    let s: RdmaNodeState = serde_json::from_str(&out).unwrap();
    assert_eq!(s.spec.node_name, "e810-xxv");
    let st = s.status.unwrap();
    assert!(st
        .checks
        .iter()
        .any(|c| c.name == "ecn" && c.result == kube_rdma_operator::crd::CheckResult::Unsupported));
}

#[test]
fn crds_subcommand_prints_the_committed_yaml() {
    let (code, out, _) = run(op().arg("crds"));
    assert_eq!(code, 0);
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/crds.yaml")).unwrap();
    assert_eq!(out, committed);
}

#[test]
fn version_flag_works_for_both_binaries() {
    assert!(run(op().arg("--version")).1.contains(env!("CARGO_PKG_VERSION")));
    assert!(run(kubectl_rdma().arg("--version")).1.contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn kubectl_rdma_check_exits_1_on_failing_checks_and_shows_remediation() {
    // A profile demanding PFC on 4 (the example has 3).
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata: {name: prio4}\nspec: {pfc: {priorities: [4]}}\n").unwrap();
    let (code, out, err) =
        run(kubectl_rdma().args(["check", "--sim"]).arg(example_path("cx6dx-dual")).arg("--profile").arg(&p));
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("profile prio4"), "{out}");
    assert!(
        out.contains("REMEDIATION\n  ens1f0np0 pfc: dcb pfc set dev ens1f0np0 prio-pfc all:off 4:on"),
        "{out}"
    );
    // The default profile passes.
    let (code, _, err) = run(kubectl_rdma().args(["check", "--sim"]).arg(example_path("cx6dx-dual")));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bad_inputs_fail_with_a_message() {
    let (code, _, err) = run(kubectl_rdma().arg("check"));
    assert_eq!(code, 1);
    assert!(err.contains("--sim FILE or --local"), "{err}");
    let (code, _, err) = run(op().args(["agent", "--once", "--sim", "/nonexistent.yaml"]));
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent.yaml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    let (code, _, err) =
        run(op().args(["agent", "--once", "--profile"]).arg(&p).arg("--sim").arg(example_path("cx6dx-dual")));
    assert_eq!(code, 1);
    assert!(
        err.contains("expected apiVersion kuberdma.io/v1alpha1 kind RoceProfile, found v1 ConfigMap"),
        "{err}"
    );
}
