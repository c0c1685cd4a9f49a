//! The real binaries on the bundled simulated nodes, without a cluster: checks,
//! profile files validated like the CRD, clear errors (never a panic) when there
//! is no usable Kubernetes configuration, the one command-line convention of
//! both binaries (`-o`, exit status, a closed stdout), and kubectl's habits of
//! `kubectl rdma` (errors exit 1 in kubectl's words, `version`, `completion`,
//! `-n`/`-A`, durations).
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
    // The table names the checks that could not be read (ECN without NVIDIA's sysfs), apart from passes.
    let (_, table, _) = run(op().args(["agent", "--once", "--sim"]).arg(example_path("e810-xxv")));
    let want = format!("  UNVERIFIED {}: ", s.status.as_ref().unwrap().summary.unverified);
    assert!(table.lines().nth(1).is_some_and(|l| l.starts_with(&want) && l.contains("/ecn")), "{table}");
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
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/kube-rdma/crds/crds.yaml"))
            .unwrap();
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
        out.contains("REMEDIATION (in this order)\n  dcb pfc set dev ens1f0np0 prio-pfc all:off 4:on    # ens1f0np0/pfc\n"),
        "{out}"
    );
    // The default profile passes.
    let (code, _, err) = run(kubectl_rdma().args(["check", "--sim"]).arg(example_path("cx6dx-dual")));
    assert_eq!(code, 0, "{err}");
}

/// The exit status of an error: kubectl's 1 for `kubectl rdma`, the house's 2 for the daemons' binary.
const KUBECTL_ERROR: i32 = 1;
const OPERATOR_ERROR: i32 = 2;

#[test]
fn bad_inputs_fail_with_a_message_exit_1_from_kubectl_rdma_and_2_from_the_operator() {
    let (code, _, err) = run(kubectl_rdma().arg("check"));
    assert_eq!(code, KUBECTL_ERROR, "a usage error exits 1, as in kubectl");
    assert!(err.contains("--sim") && err.contains("--local"), "{err}");
    assert!(err.ends_with("See 'kubectl rdma check --help' for usage.\n"), "{err}");
    let (code, _, err) = run(op().args(["agent", "--once", "--sim", "/nonexistent.yaml"]));
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent.yaml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    let (code, _, err) =
        run(op().args(["agent", "--once", "--profile"]).arg(&p).arg("--sim").arg(example_path("cx6dx-dual")));
    assert_eq!(code, 2);
    assert!(
        err.contains("expected apiVersion kuberdma.io/v1alpha1 kind RoceProfile, found v1 ConfigMap"),
        "{err}"
    );
    // Formats a command does not offer, and broken templates: usage errors that say why.
    let sim = example_path("cx6dx-dual");
    for (args, want) in [
        (vec!["check", "-o", "wide"], "-o wide does not apply here"),
        (vec!["check", "-o", "name"], "-o name does not apply here"),
        (vec!["check", "-o", "jsonpath={.status"], "unclosed {"),
        (vec!["status", "-o", "xml"], "unknown output format"),
        (
            vec!["status", "--request-timeout", "soon"],
            "'--request-timeout <DURATION>': \"soon\" is not a duration",
        ),
        (vec!["status", "--request-timeout", "99999999999999999999999h"], "out of range"),
        (vec!["status", "n1", "-l", "a=b"], "cannot be used with"),
    ] {
        let mut c = kubectl_rdma();
        c.args(&args);
        if args[0] == "check" {
            c.arg("--sim").arg(&sim);
        }
        let (code, _, err) = run(&mut c);
        assert_eq!(code, KUBECTL_ERROR, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    for flag in [["--context", "x"], ["-n", "default"]] {
        let (code, _, err) = run(kubectl_rdma().args(flag).args(["check", "--sim"]).arg(&sim));
        assert_eq!(code, KUBECTL_ERROR, "{flag:?}");
        assert!(err.starts_with("error: check runs without a cluster: "), "{err}");
    }
    let (code, _, err) = run(op().args(["agent", "--once", "-o", "wide", "--sim"]).arg(&sim));
    assert_eq!(code, 2);
    assert!(err.contains("-o wide does not apply here"), "{err}");
}

/// `kube-rdma-operator agent --once` and `kubectl rdma check` on `sim` with `profile`
/// and `-o format`: (exit code, stdout) of each.
fn both(sim: &std::path::Path, profile: Option<&std::path::Path>, format: &str) -> [(i32, String); 2] {
    let mut a = op();
    a.args(["agent", "--once", "-o", format, "--sim"]).arg(sim);
    let mut k = kubectl_rdma();
    k.args(["check", "-o", format, "--sim"]).arg(sim);
    for c in [&mut a, &mut k] {
        if let Some(p) = profile {
            c.arg("--profile").arg(p);
        }
    }
    [&mut a, &mut k].map(|c| {
        let (code, out, err) = run(c);
        assert!(code == 0 || code == 1, "{format}: {err}");
        (code, out)
    })
}

/// Times differ between two runs; everything else must not.
fn without_times(text: &str) -> String {
    text.lines()
        .filter(|l| !["observedAt", "lastTransitionTime", "lastHeartbeatTime"].iter().any(|t| l.contains(t)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn agent_once_and_kubectl_rdma_check_print_the_same_and_exit_the_same_on_the_same_node() {
    let dir = tempfile::tempdir().unwrap();
    let prio4 = profile_file(dir.path(), "{pfc: {priorities: [4]}}");
    let mut seen = std::collections::BTreeSet::new();
    for example_name in ["cx6dx-dual", "e810-xxv", "mixed"] {
        let sim = example_path(example_name);
        for profile in [None, Some(prio4.as_path())] {
            for format in ["table", "json", "yaml", "jsonpath={.status.summary.ready} {.status.profile}"] {
                let [(ca, oa), (ck, ok)] = both(&sim, profile, format);
                assert_eq!(ca, ck, "{example_name} {profile:?} -o {format}: exit codes differ");
                assert_eq!(without_times(&oa), without_times(&ok), "{example_name} {profile:?} -o {format}");
                if format.starts_with("jsonpath") {
                    let want = if ca == 0 { "True" } else { "False" };
                    assert!(oa.starts_with(want), "exit {ca} and READY {oa}");
                }
                seen.insert(ca);
            }
        }
    }
    assert_eq!(seen, [0, 1].into(), "both verdicts exercised");
}

#[test]
fn a_materialised_node_directory_checks_as_its_description_does() {
    let file = example_path("cx6dx-dual");
    let sim = nic::sim::Sim::from_file(&file).unwrap();
    for format in ["table", "json"] {
        let [(cf, of), _] = both(&file, None, format);
        for (code, out) in both(sim.path(), None, format) {
            assert_eq!((code, without_times(&out)), (cf, without_times(&of)), "-o {format}");
        }
    }
}

#[test]
fn agent_once_refuses_the_loops_options_rather_than_ignoring_them() {
    let sim = example_path("cx6dx-dual");
    for (flag, value, want) in [
        ("--kubeconfig", "/k", "--once runs without a cluster: --kubeconfig does not apply"),
        ("--context", "c", "--once runs without a cluster: --context does not apply"),
        ("--metrics-addr", "127.0.0.1:9411", "cannot be used with '--metrics-addr"),
        ("--poll-interval", "5", "cannot be used with '--poll-interval"),
        ("--heartbeat", "60", "cannot be used with '--heartbeat"),
    ] {
        let (code, out, err) = run(op().args(["agent", "--once", flag, value, "--sim"]).arg(&sim));
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(out.is_empty() && err.contains(want), "{flag}: {err}");
    }
}

#[test]
fn the_agent_loop_refuses_a_node_name_no_node_can_have_before_it_connects() {
    let home = tempfile::tempdir().unwrap();
    let sim = example_path("cx6dx-dual");
    for name in ["", "Node_1", "a..b"] {
        let (code, _, err) =
            run(without_cluster(op().args(["agent", "--sim"]).arg(&sim), home.path()).env("NODE_NAME", name));
        assert_eq!(code, 2, "{name:?}: {err}");
        assert!(err.contains(&format!("{name:?} is not a Node name")), "{name:?}: {err}");
    }
}

#[test]
fn a_closed_stdout_ends_the_output_quietly_with_the_same_exit_status() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let sim = example_path("cx6dx-dual");
    let dir = tempfile::tempdir().unwrap();
    let prio4 = profile_file(dir.path(), "{pfc: {priorities: [4]}}");
    let cmds: [(&str, Command, i32); 4] = [
        (
            "agent --once",
            {
                let mut c = op();
                c.args(["agent", "--once", "-o", "yaml", "--sim"]).arg(&sim);
                c
            },
            0,
        ),
        (
            "check",
            {
                let mut c = kubectl_rdma();
                c.args(["check", "-o", "json", "--sim"]).arg(&sim);
                c
            },
            0,
        ),
        (
            "check, failing",
            {
                let mut c = kubectl_rdma();
                c.args(["check", "--sim"]).arg(&sim).arg("--profile").arg(&prio4);
                c
            },
            1,
        ),
        (
            "crds",
            {
                let mut c = op();
                c.arg("crds");
                c
            },
            0,
        ),
    ];
    for (what, mut c, want) in cmds {
        // A reader that is gone before the first write: every write fails with EPIPE.
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(ours);
        let o = c.stdout(std::process::Stdio::from(OwnedFd::from(theirs))).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "{what}: {err}");
        assert!(err.is_empty(), "{what}: quiet, got {err}");
    }
}

/// `> /dev/full`: the output cannot be written, which is one line on stderr and
/// an error's exit status (2, or kubectl's 1), never a panic; the same for --help.
#[test]
fn a_full_disk_is_one_error_line_and_exit_2() {
    let sim = example_path("cx6dx-dual");
    let cmds: [(&str, Command, i32); 6] = [
        (
            "agent --once",
            {
                let mut c = op();
                c.args(["agent", "--once", "-o", "json", "--sim"]).arg(&sim);
                c
            },
            OPERATOR_ERROR,
        ),
        (
            "check",
            {
                let mut c = kubectl_rdma();
                c.args(["check", "--sim"]).arg(&sim);
                c
            },
            KUBECTL_ERROR,
        ),
        (
            "crds",
            {
                let mut c = op();
                c.arg("crds");
                c
            },
            OPERATOR_ERROR,
        ),
        (
            "kube-rdma-operator --help",
            {
                let mut c = op();
                c.arg("--help");
                c
            },
            OPERATOR_ERROR,
        ),
        (
            "kubectl rdma --version",
            {
                let mut c = kubectl_rdma();
                c.arg("--version");
                c
            },
            KUBECTL_ERROR,
        ),
        (
            "kubectl rdma completion bash",
            {
                let mut c = kubectl_rdma();
                c.args(["completion", "bash"]);
                c
            },
            KUBECTL_ERROR,
        ),
    ];
    for (what, mut c, want) in cmds {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = c.stdout(full).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line, got {err}");
        assert!(err.contains("writing to stdout: No space left on device"), "{what}: {err}");
    }
}

/// mixed.yaml is in shared RDMA netns mode with VFs that have RDMA devices: both
/// commands fail the node-wide `rdma-netns` check with the module option as fix,
/// and exit 1, as `kube-rdma-device-plugin discover` does on the same node
/// (device-plugin/tests/discover_cli.rs).
#[test]
fn shared_netns_mode_fails_agent_once_and_check_with_the_remediation() {
    let sim = example_path("mixed");
    let [(ca, oa), (ck, ok)] = both(&sim, None, "table");
    assert_eq!((ca, ck), (1, 1), "{oa}");
    assert_eq!(without_times(&oa), without_times(&ok));
    assert!(oa.contains("READY False") && oa.contains("NETNS shared"), "{oa}");
    let row = oa.lines().find(|l| l.contains("rdma-netns")).unwrap_or_else(|| panic!("{oa}"));
    assert!(
        row.trim_start().starts_with("node") && row.contains("Fail") && row.contains("exclusive"),
        "{row}"
    );
    assert!(
        oa.contains(
            "echo 'options ib_core netns_mode=0' > /etc/modprobe.d/ib_core.conf    # node/rdma-netns"
        ),
        "{oa}"
    );
    assert!(oa.contains("  reboot    # node/rdma-netns"), "{oa}");
    let [(code, json), _] = both(&sim, None, "json");
    assert_eq!(code, 1);
    let state: RdmaNodeState = serde_json::from_str(&json).unwrap();
    let status = state.status.unwrap();
    let c = status.checks.iter().find(|c| c.name == "rdma-netns").unwrap();
    assert_eq!(c.remediation, nic::NETNS_EXCLUSIVE_FIX);
}

fn profile_file(dir: &std::path::Path, spec: &str) -> std::path::PathBuf {
    let p = dir.join("p.yaml");
    std::fs::write(
        &p,
        format!("apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata: {{name: p}}\nspec: {spec}\n"),
    )
    .unwrap();
    p
}

#[test]
fn a_profile_file_is_validated_like_the_crd_with_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("{pfc: {priorities: [3, 8]}}", "spec.pfc.priorities[1]: 8 is above the maximum 7"),
        (
            "{dscpToPriority: [{dscp: 64, priority: 3}]}",
            "spec.dscpToPriority[0].dscp: 64 is above the maximum 63",
        ),
        ("{pfcPriorities: [3]}", "spec.pfcPriorities: unknown field"),
        ("{mode: Sometimes}", "spec.mode: \"Sometimes\" is not one of \"Audit\", \"Enforce\""),
        ("{pfc: {priorities: [3, 3]}}", "spec.pfc.priorities[1]: duplicate value 3"),
        (
            "{pfc: {priorities: [3]}, cnp: {dscp: 48, priority: 3}}",
            "spec: cnp.priority must not be one of pfc.priorities",
        ),
        (
            "{dscpToPriority: [{dscp: 26, priority: 3}, {dscp: 26, priority: 4}]}",
            "spec: dscpToPriority maps the same dscp more than once",
        ),
        ("{trust: pcp, dscpToPriority: [{dscp: 26, priority: 3}]}", "spec: trust pcp ignores DSCP"),
        ("{ets: {bandwidth: [50, 0, 0, 40, 0, 0, 0, 0]}}", "spec.ets: bandwidth must add up to 100"),
        (
            "{globalPause: true, pfc: {priorities: [3]}}",
            "spec: globalPause must be false when pfc.priorities is set",
        ),
    ];
    for (spec, want) in cases {
        let p = profile_file(dir.path(), spec);
        for cmd in [
            op().args(["agent", "--once", "--profile"]).arg(&p).arg("--sim").arg(example_path("cx6dx-dual")),
            kubectl_rdma().args(["check", "--profile"]).arg(&p).arg("--sim").arg(example_path("cx6dx-dual")),
        ] {
            let (code, out, err) = run(cmd);
            assert_ne!(code, 0, "{spec}: {out}");
            assert!(
                err.contains(&format!("profile {} is invalid: ", p.display())) && err.contains(want),
                "{spec}: {err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

/// Runs `cmd` with no kubeconfig anywhere and no in-cluster environment, plus `env`.
fn without_cluster<'a>(cmd: &'a mut Command, home: &std::path::Path) -> &'a mut Command {
    cmd.env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", home)
}

#[test]
fn missing_or_broken_kubeconfig_is_a_clear_error_not_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let sim = example_path("cx6dx-dual");
    type Case = (&'static str, fn() -> Command, Vec<String>);
    let cmds: [Case; 3] = [
        (
            "agent",
            op,
            vec![
                "agent".into(),
                "--node-name".into(),
                "n1".into(),
                "--sim".into(),
                sim.display().to_string(),
            ],
        ),
        ("controller", op, vec!["controller".into()]),
        ("kubectl rdma status", kubectl_rdma, vec!["status".into()]),
    ];
    for (what, bin, args) in &cmds {
        // Nothing at all.
        let (code, _, err) = run(without_cluster(bin().args(args), home.path()));
        assert_ne!(code, 0, "{what}");
        assert!(!err.contains("panicked") && !err.contains("CryptoProvider"), "{what}: {err}");
        assert!(
            err.contains("no Kubernetes configuration: give --kubeconfig FILE or set KUBECONFIG"),
            "{what}: {err}"
        );
        assert!(err.contains(&format!("{}/.kube/config", home.path().display())), "{what}: {err}");

        // KUBECONFIG or --kubeconfig naming a file that does not exist: the path once, unquoted.
        let nope = home.path().join("nope.yaml");
        let (code, _, err) = run(without_cluster(bin().args(args), home.path()).env("KUBECONFIG", &nope));
        assert_ne!(code, 0, "{what}");
        let want = format!("kubeconfig {} (KUBECONFIG): No such file or directory", nope.display());
        assert!(err.contains(&want), "{what}: {err}");
        assert_eq!(err.matches("nope.yaml").count(), 1, "{what}: {err}");
        let (_, _, err) = run(without_cluster(bin().args(args).arg("--kubeconfig").arg(&nope), home.path()));
        let want = format!("kubeconfig {} (--kubeconfig): No such file or directory", nope.display());
        assert!(err.contains(&want) && !err.contains('"'), "{what}: {err}");

        // A file that is not a kubeconfig.
        let bad = home.path().join("bad.yaml");
        std::fs::write(&bad, "clusters: [[[\n").unwrap();
        let mut args2 = args.clone();
        args2.push("--kubeconfig".into());
        args2.push(bad.display().to_string());
        let (code, _, err) = run(without_cluster(bin().args(&args2), home.path()));
        assert_ne!(code, 0, "{what}");
        assert!(err.contains(&format!("kubeconfig {} (--kubeconfig)", bad.display())), "{what}: {err}");
        assert!(err.contains("YAML"), "{what}: {err}");

        // A context the file does not have.
        let kc = home.path().join("kc.yaml");
        std::fs::write(&kc, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\n").unwrap();
        let mut args3 = args.clone();
        args3.extend(["--kubeconfig".into(), kc.display().to_string(), "--context".into(), "nope".into()]);
        let (code, _, err) = run(without_cluster(bin().args(&args3), home.path()));
        assert_ne!(code, 0, "{what}");
        assert!(err.contains("nope"), "{what}: {err}");

        // In a pod without its service account files.
        let (code, _, err) = run(without_cluster(bin().args(args), home.path())
            .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", "443"));
        assert_ne!(code, 0, "{what}");
        assert!(err.contains("in-cluster configuration"), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

#[test]
fn help_documents_one_exit_status_and_check_offers_no_cluster_flags() {
    let (code, out, _) = run(kubectl_rdma().args(["status", "--help"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("Exit status:")
            && out.contains("1  a check fails, no RoCE interface was found to check"),
        "{out}"
    );
    for flag in [
        "--kubeconfig",
        "--context",
        "--as <USER>",
        "--as-group",
        "--request-timeout",
        "-l, --selector",
        "-o, --output",
    ] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
    let (_, check, _) = run(kubectl_rdma().args(["check", "--help"]));
    for flag in ["--kubeconfig", "--context", "--as", "--request-timeout", "Cluster options"] {
        assert!(!check.contains(flag), "check runs without a cluster, yet offers {flag}: {check}");
    }
    for cmd in ["controller", "crds"] {
        let (_, help, _) = run(op().args([cmd, "--help"]));
        assert!(help.contains("Exit status:"), "{cmd}: {help}");
        assert!(
            !help.contains("a check fails"),
            "{cmd} checks nothing, yet its help says it exits 1 when a check fails: {help}"
        );
    }
    let (_, agent, _) = run(op().args(["agent", "--help"]));
    let exit_help = |t: &str| t[t.find("Exit status:").unwrap_or(t.len())..].to_string();
    // The same verdicts; an error is kubectl's 1 in kubectl rdma and 2 in the operator.
    let verdicts = |t: &str| {
        exit_help(t).lines().take(3).map(|l| l.trim_end_matches(';')).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(verdicts(&check), verdicts(&agent), "one exit status for both");
    assert!(verdicts(&agent).contains("0  all is well"), "{agent}");
    assert!(exit_help(&check).contains("or an error, as kubectl: bad flags"), "{check}");
    assert!(exit_help(&agent).contains("2  a usage or environment error"), "{agent}");
}

#[test]
fn a_host_without_rdma_interfaces_says_what_was_looked_for_and_exits_1() {
    let empty = tempfile::tempdir().unwrap();
    let (code, out, err) = run(kubectl_rdma()
        .args(["check", "--local"])
        .env("KUBE_RDMA_SYSFS_ROOT", empty.path())
        .env("KUBE_RDMA_DEV_ROOT", empty.path()));
    assert_eq!(code, 1, "not ready: nothing to check\n{out}{err}");
    assert!(out.contains("no RDMA-capable interface found"), "{out}");
    for hint in ["lspci -nnk", "rdma link", "KUBE_RDMA_SYSFS_ROOT"] {
        assert!(out.contains(hint), "no hint naming {hint}: {out}");
    }
}

#[test]
fn flags_that_would_be_ignored_are_refused_naming_the_conflict() {
    let home = tempfile::tempdir().unwrap();
    let sim = example_path("cx6dx-dual");
    let sim = sim.to_str().unwrap();
    type Case<'a> = (fn() -> Command, Vec<&'a str>, &'a str);
    let cases: [Case; 8] = [
        // `crds` without --apply only prints: a cluster to reach would be ignored.
        (
            op,
            vec!["crds", "--kubeconfig", "/k"],
            "crds prints the CRDs without a cluster: --kubeconfig applies only with --apply",
        ),
        (
            op,
            vec!["crds", "--context", "c"],
            "crds prints the CRDs without a cluster: --context applies only with --apply",
        ),
        // A simulated node brings its own sysfs and /dev.
        (
            op,
            vec!["agent", "--once", "--sim", sim, "--sysfs-root", "/sys"],
            "'--sim <SIM>' cannot be used with '--sysfs-root <SYSFS_ROOT>'",
        ),
        (
            op,
            vec!["agent", "--node-name", "n1", "--sim", sim, "--dev-root", "/dev"],
            "'--sim <SIM>' cannot be used with '--dev-root <DEV_ROOT>'",
        ),
        // --all lists every check of named nodes in the table, and does nothing elsewhere.
        (
            kubectl_rdma,
            vec!["status", "--all"],
            "--all shows every check of named nodes in the table: name the nodes",
        ),
        (
            kubectl_rdma,
            vec!["status", "--all", "-l", "pool=a"],
            "--all shows every check of named nodes in the table: name the nodes",
        ),
        (
            kubectl_rdma,
            vec!["status", "n1", "--all", "-o", "json"],
            "--all shows every check of named nodes in the table: -o json prints no table",
        ),
        (
            kubectl_rdma,
            vec!["status", "n1", "--all", "-o", "jsonpath={.status}"],
            "-o jsonpath prints no table",
        ),
    ];
    for (bin, args, want) in cases {
        // No cluster anywhere: a refusal must come before any attempt to reach one.
        let (code, out, err) = run(without_cluster(bin().args(&args), home.path()));
        let error = if args[0] == "status" { KUBECTL_ERROR } else { OPERATOR_ERROR };
        assert_eq!(code, error, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("no Kubernetes configuration"), "{args:?} tried to connect: {err}");
    }
    // What they were refused beside still works alone.
    let (code, out, _) = run(op().arg("crds"));
    assert_eq!(code, 0);
    assert!(out.starts_with("---\n"), "{out}");
    let (code, _, err) = run(op().args(["agent", "--once", "--sim", sim]));
    assert_eq!(code, 0, "{err}");
    // --all with a named node and the table is honoured (it needs a cluster: the error is that one).
    let (code, _, err) = run(without_cluster(kubectl_rdma().args(["status", "n1", "--all"]), home.path()));
    assert_eq!(code, KUBECTL_ERROR);
    assert!(err.contains("no Kubernetes configuration"), "{err}");
}

/// A kubeconfig whose server is a local port nothing listens on (bound, then closed).
fn closed_port_kubeconfig(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let kc = dir.join("closed.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    (kc, format!("127.0.0.1:{port}"))
}

#[test]
fn an_unreachable_server_is_kubectls_sentence_and_exit_1_with_no_rust_internals() {
    let home = tempfile::tempdir().unwrap();
    let (kc, host) = closed_port_kubeconfig(home.path());
    let want = format!(
        "The connection to the server {host} was refused - did you specify the right host or port?\n"
    );
    // -n and -A as kubectl takes them on cluster-scoped kinds, and every duration form: accepted, so
    // each of these gets as far as the connection.
    for extra in [
        vec![],
        vec!["-n", "kube-system"],
        vec!["--namespace=default", "-A"],
        vec!["--all-namespaces"],
        vec!["n1", "-o", "json", "-n", "x"],
        vec!["--request-timeout", "1m"],
        vec!["--request-timeout", "500ms"],
        vec!["--request-timeout", "30"],
        vec!["--request-timeout=1m30s"],
    ] {
        let (code, out, err) = run(without_cluster(
            kubectl_rdma().arg("status").args(&extra).arg("--kubeconfig").arg(&kc),
            home.path(),
        ));
        assert_eq!((code, out.as_str(), err.as_str()), (1, "", want.as_str()), "{extra:?}");
    }
    // Flags before the command too, as kubectl's globals.
    let (code, _, err) = run(without_cluster(
        kubectl_rdma().args(["-n", "x", "--kubeconfig"]).arg(&kc).arg("status"),
        home.path(),
    ));
    assert_eq!((code, err.as_str()), (1, want.as_str()));
    // version prints this build's part first, as kubectl version does, then fails the same way.
    let (code, out, err) =
        run(without_cluster(kubectl_rdma().args(["version", "--kubeconfig"]).arg(&kc), home.path()));
    assert_eq!((code, err.as_str()), (1, want.as_str()));
    assert!(out.starts_with(&format!("Client Version: {} (git commit ", env!("CARGO_PKG_VERSION"))), "{out}");
    assert!(!out.contains("Server Version"), "{out}");
}

#[test]
fn version_prints_this_build_as_text_json_or_yaml_without_a_cluster_given_client() {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = run(without_cluster(kubectl_rdma().args(["version", "--client"]), home.path()));
    assert_eq!(code, 0, "{err}");
    let arch = if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH };
    assert!(out.starts_with(&format!("Client Version: {} (git commit ", env!("CARGO_PKG_VERSION"))), "{out}");
    assert!(out.trim_end().ends_with(&format!("linux/{arch})")), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let (code, json, _) =
        run(without_cluster(kubectl_rdma().args(["version", "--client", "-o", "json"]), home.path()));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["clientVersion"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["clientVersion"]["gitCommit"].is_string() && v.get("serverVersion").is_none(), "{v}");
    let (code, yaml, _) =
        run(without_cluster(kubectl_rdma().args(["version", "--client", "-o", "yaml"]), home.path()));
    assert_eq!(code, 0);
    let y: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(y, v);
    // What kubectl version refuses.
    for (args, want) in [
        (vec!["version", "-o", "wide"], "error: invalid value 'wide' for '--output <OUTPUT>'"),
        (vec!["version", "extra"], "error: unexpected argument 'extra' found"),
        (vec!["version", "--client", "--context", "x"], "error: --client prints this build only"),
    ] {
        let (code, out, err) = run(without_cluster(kubectl_rdma().args(&args), home.path()));
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish_name_every_command_and_bash_can_source_it() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(kubectl_rdma().args(["completion", shell]));
        assert_eq!(code, 0, "{shell}: {err}");
        for word in
            ["kubectl-rdma", "status", "check", "version", "completion", "request-timeout", "namespace"]
        {
            assert!(out.contains(word), "{shell}: no {word}");
        }
    }
    let (_, script, _) = run(kubectl_rdma().args(["completion", "bash"]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubectl-rdma.bash");
    std::fs::write(&file, &script).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(syntax.status.success(), "{}", String::from_utf8_lossy(&syntax.stderr));
    // Sourced, it registers a completion for the binary (what `source <(kubectl rdma completion bash)` does).
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p kubectl-rdma", file.display()))
        .output()
        .unwrap();
    assert!(sourced.status.success(), "{}", String::from_utf8_lossy(&sourced.stderr));
    assert!(String::from_utf8_lossy(&sourced.stdout).contains("kubectl-rdma"));
    let (code, _, err) = run(kubectl_rdma().args(["completion", "tcsh"]));
    assert_eq!(code, 1);
    assert!(err.starts_with("error: invalid value 'tcsh' for '<SHELL>'"), "{err}");
}

#[test]
fn usage_errors_are_kubectls_two_lines_and_no_command_is_help() {
    for (args, first, cmd) in [
        (vec!["status", "--foo"], "error: unexpected argument '--foo' found", "kubectl rdma status"),
        (vec!["stat"], "error: unrecognized subcommand 'stat'", "kubectl rdma"),
        (vec!["status", "-o"], "error: a value is required for '--output <OUTPUT>'", "kubectl rdma status"),
    ] {
        let (code, out, err) = run(kubectl_rdma().args(&args));
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}");
        assert!(err.starts_with(first), "{args:?}: {err}");
        assert!(err.ends_with(&format!("\nSee '{cmd} --help' for usage.\n")), "{args:?}: {err}");
        assert!(!err.contains("tip:") && !err.contains("For more information"), "{args:?}: {err}");
    }
    // As a kubectl command group without its subcommand: the help, on stdout, exit 0.
    let (code, out, _) = run(&mut kubectl_rdma());
    assert_eq!(code, 0);
    assert!(out.contains("Usage: kubectl rdma [OPTIONS] <COMMAND>") && out.contains("version"), "{out}");
}

#[test]
fn the_operators_intervals_take_the_same_durations_as_kubectl_rdma() {
    let home = tempfile::tempdir().unwrap();
    let sim = example_path("cx6dx-dual");
    for (args, value) in [
        (vec!["controller", "--interval"], "1m"),
        (vec!["controller", "--stale-after"], "25m"),
        (vec!["controller", "--interval"], "60"),
        (vec!["agent", "--node-name", "n1", "--poll-interval"], "30s"),
        (vec!["agent", "--node-name", "n1", "--heartbeat"], "10m"),
    ] {
        let mut c = op();
        c.args(&args).arg(value);
        if args[0] == "agent" {
            c.arg("--sim").arg(&sim);
        }
        // Parsed: the run gets as far as looking for a cluster.
        let (code, _, err) = run(without_cluster(&mut c, home.path()));
        assert_eq!(code, 2, "{args:?} {value}: {err}");
        assert!(err.contains("no Kubernetes configuration"), "{args:?} {value}: {err}");
    }
    for value in ["soon", "1500ms", "-1s"] {
        let (code, _, err) =
            run(without_cluster(op().arg("controller").arg(format!("--interval={value}")), home.path()));
        assert_eq!(code, 2, "{value}: {err}");
        assert!(
            err.contains(&format!("invalid value '{value}' for '--interval <INTERVAL>'")),
            "{value}: {err}"
        );
    }
}

#[test]
fn run_as_kubectl_complete_rdma_it_answers_kubectls_completion_requests() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl_complete-rdma");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-rdma"), &link).unwrap();
    for (words, want) in [
        (vec!["st"], "status\tShow the agents' view of all nodes, or of the named nodes in detail\n:4\n"),
        (vec!["version", "-o", ""], "json\nyaml\n:4\n"),
        (vec!["completion", "f"], "fish\n:4\n"),
        (vec!["version", "--cl"], "--client\tThis build only; no cluster needed\n:4\n"),
    ] {
        let (code, out, err) = run(Command::new(&link).args(&words));
        assert_eq!((code, out.as_str()), (0, want), "{words:?}: {err}");
    }
    // A path: the shell completes file names (cobra's default directive).
    let (_, out, _) = run(Command::new(&link).args(["check", "--sim", ""]));
    assert_eq!(out, ":0\n");
}
