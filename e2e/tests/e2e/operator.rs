//! The operator as the chart installs it: its CRDs as the chart applied them,
//! the agent and the controller as the chart's pods on the simulated node,
//! what their own ServiceAccount tokens may do, and kubectl-rdma when etcd is
//! down. The binaries run on the host are the ones in the running image
//! (copied out of a running container), never a separate build.
//!
//! Every case leaves the cluster as it found it: profiles and objects it made
//! deleted, the chart's values and the simulated node's files restored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kube_rdma_e2e::cluster::{self, NAMESPACE, NODE_NAME};
use serde_json::{json, Value};

use crate::ctx::{eventually, merge, Ctx};
use crate::Case;

const READY_LABEL: &str = "kuberdma.io/roce-ready";
/// The simulated node's RoCE port (e2e/node.yaml); profiles here select only it.
const PORT: &str = "ens1f0np0";

/// The cases that restart nothing and change no chart value: they run while
/// the device plugin's kubelet-restart watch does (see `main.rs`).
pub fn quiet_cases() -> Vec<Case> {
    vec![
        Case {
            name: "operator_crds_print_the_golden_columns_and_default_mode_to_audit",
            run: operator_crds_print_the_golden_columns_and_default_mode_to_audit,
        },
        Case {
            name: "operator_crds_refuse_a_profile_breaking_each_cel_rule_with_its_message",
            run: operator_crds_refuse_a_profile_breaking_each_cel_rule_with_its_message,
        },
        Case {
            name: "operator_crds_apply_by_the_binary_is_accepted_and_changes_nothing",
            run: operator_crds_apply_by_the_binary_is_accepted_and_changes_nothing,
        },
        Case {
            name: "operator_audit_profile_reports_drift_and_leaves_the_node_alone",
            run: operator_audit_profile_reports_drift_and_leaves_the_node_alone,
        },
        Case {
            name: "operator_pod_tokens_may_do_their_jobs_and_nothing_more",
            run: operator_pod_tokens_may_do_their_jobs_and_nothing_more,
        },
    ]
}

/// The cases that upgrade the chart (Enforce, the stale agent) or stop the
/// kubelet or etcd.
pub fn disruptive_cases() -> Vec<Case> {
    vec![
        Case {
            name: "operator_enforce_profile_changes_the_simulated_node_and_converges",
            run: operator_enforce_profile_changes_the_simulated_node_and_converges,
        },
        Case {
            name: "operator_stale_agent_comes_back_with_every_condition_intact",
            run: operator_stale_agent_comes_back_with_every_condition_intact,
        },
        Case {
            name: "operator_etcd_down_kubectl_rdma_says_one_line_then_all_is_well",
            run: operator_etcd_down_kubectl_rdma_says_one_line_then_all_is_well,
        },
    ]
}

// ---- helpers ------------------------------------------------------------------------------

/// Runs `f` when dropped: cleanup that must happen also when a case fails half-way.
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn state(ctx: &Ctx) -> Result<Value> {
    ctx.json(&["get", "rdmanodestate", NODE_NAME])
}

fn condition<'a>(s: &'a Value, ty: &str) -> Option<&'a Value> {
    s["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ty)
}

fn cond_status(s: &Value, ty: &str) -> String {
    condition(s, ty).and_then(|c| c["status"].as_str()).unwrap_or("-").to_string()
}

/// The agent's own conditions and summary: what a stale → fresh cycle must not lose.
fn agent_view(s: &Value) -> Value {
    json!({
        "RoceReady": cond_status(s, "RoceReady"),
        "Drifted": cond_status(s, "Drifted"),
        "Degraded": cond_status(s, "Degraded"),
        "summary": s["status"]["summary"],
        "profile": s["status"]["profile"],
    })
}

/// Deletes RoceProfile `name` (cluster-scoped) and waits until it is gone.
fn delete_profile(ctx: &Ctx, name: &str) -> Result<()> {
    ctx.kubectl(&["delete", "roceprofile", name, "--ignore-not-found", "--wait=true", "--timeout=60s"])?;
    Ok(())
}

fn node_label(ctx: &Ctx) -> Result<Option<String>> {
    let n = ctx.json(&["get", "node", NODE_NAME])?;
    Ok(n["metadata"]["labels"][READY_LABEL].as_str().map(String::from))
}

fn wait_label(ctx: &Ctx, want: &str, timeout: Duration) -> Result<()> {
    eventually(&format!("node label {READY_LABEL}={want}"), timeout, || {
        Ok((node_label(ctx)?.as_deref() == Some(want)).then_some(()))
    })
}

/// A RoceProfile on the simulated node's RoCE port only.
fn profile_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata:\n  name: {name}\nspec:\n  \
         nodeSelector: {{kubernetes.io/hostname: {NODE_NAME}}}\n  \
         interfaceSelector: {{names: [{PORT}]}}\n{spec}"
    )
}

/// `kubectl create -f -` of `yaml` as the holder of `kubeconfig`: exit status and stderr.
pub(crate) fn kubectl_create(kubeconfig: &Path, yaml: &str) -> Result<(bool, String)> {
    let mut child = kube_rdma_e2e::apiserver::kubectl(kubeconfig)
        .args(["create", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    use std::io::Write;
    child.stdin.take().context("kubectl stdin")?.write_all(yaml.as_bytes())?;
    let o = child.wait_with_output()?;
    Ok((o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned()))
}

/// The pid of the chart's `kube-rdma-operator <component>` process of this cluster.
fn component_pid(component: &str) -> Result<i32> {
    for pid in kube_rdma_e2e::node::cgroup_pids() {
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.len() > 1 && args[0] == b"/usr/bin/kube-rdma-operator" && args[1] == component.as_bytes() {
            return Ok(pid);
        }
    }
    bail!("no kube-rdma-operator {component} process in the cluster's cgroups")
}

/// A binary of the running kube-rdma image, copied out of the controller's container.
fn image_binary(ctx: &Ctx, name: &str) -> Result<PathBuf> {
    let pid = component_pid("controller")?;
    let dir = ctx.layout.base.join("e2e-op-bin");
    std::fs::create_dir_all(&dir)?;
    let dst = dir.join(name);
    std::fs::copy(format!("/proc/{pid}/root/usr/bin/{name}"), &dst)
        .with_context(|| format!("copying {name} out of the controller's container"))?;
    Ok(dst)
}

fn run_out(cmd: &mut Command) -> Result<(i32, String, String)> {
    let o = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    Ok((
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

/// The chart's values as `up` installed them.
fn installed_values(ctx: &Ctx) -> PathBuf {
    ctx.layout.base.join("values.yaml")
}

/// `helm upgrade` with `extra` merged over the installed values, rolled out.
fn upgrade_with(ctx: &Ctx, extra: Value) -> Result<()> {
    let mut v: Value = serde_yaml::from_str(&std::fs::read_to_string(installed_values(ctx))?)?;
    merge(&mut v, extra);
    let f = ctx.layout.base.join("values-operator-case.yaml");
    std::fs::write(&f, serde_yaml::to_string(&v)?)?;
    cluster::helm_upgrade(&ctx.layout, &f)?;
    cluster::wait_rollout(&ctx.layout)
}

/// `helm upgrade` back to the installed values.
fn restore_values(ctx: &Ctx) {
    if let Err(e) = cluster::helm_upgrade(&ctx.layout, &installed_values(ctx))
        .and_then(|()| cluster::wait_rollout(&ctx.layout))
    {
        eprintln!("operator: restoring the chart's values failed: {e:#}");
    }
}

/// Every regular file under the simulated node's sysfs, with its content.
fn sim_files(ctx: &Ctx) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                walk(&e.path(), out);
            } else if t.is_file() {
                if let Ok(b) = std::fs::read(e.path()) {
                    out.insert(e.path(), b);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&ctx.layout.sim().join("sys"), &mut out);
    out
}

fn changed(before: &BTreeMap<PathBuf, Vec<u8>>, after: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    after
        .iter()
        .filter(|(p, b)| before.get(*p) != Some(*b))
        .map(|(p, b)| format!("{}={}", p.display(), String::from_utf8_lossy(b).trim()))
        .collect()
}

/// A kubeconfig for the cluster with `token`.
pub(crate) fn token_kubeconfig(ctx: &Ctx, name: &str, token: &str) -> Result<PathBuf> {
    let server = format!("https://{}:6443", kube_rdma_e2e::node::node_ip());
    let text = kube_rdma_e2e::pki::kubeconfig(
        &server,
        &ctx.layout.control().join("pki/ca.crt"),
        name,
        kube_rdma_e2e::pki::Credentials::Token(token),
        name,
    );
    let dir = ctx.layout.base.join("e2e-op-kubeconfigs");
    std::fs::create_dir_all(&dir)?;
    kube_rdma_e2e::pki::write_private(&dir, &format!("{name}.kubeconfig"), &text)
}

/// The API token the kubelet projected into the chart's `component` pod (its own, bound to
/// the pod and, for the agent, carrying the node claim), read from the node's kubelet dir.
pub(crate) fn pod_token(ctx: &Ctx, component: &str) -> Result<String> {
    let pods = ctx.json(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/component={component}"),
    ])?;
    let pod = pods["items"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["status"]["phase"] == "Running"))
        .with_context(|| format!("no running {component} pod"))?;
    let uid = pod["metadata"]["uid"].as_str().context("pod uid")?;
    // The kubelet mounts the token's tmpfs inside the node's mount namespace: read it there.
    let holder = cluster::state()?.created.holder.context("no mount-namespace holder")?;
    let vols = PathBuf::from(format!(
        "/proc/{holder}/root/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected"
    ));
    for e in std::fs::read_dir(&vols).with_context(|| format!("reading {}", vols.display()))? {
        let p = e?.path().join("token");
        if p.exists() {
            return Ok(std::fs::read_to_string(&p)?.trim().to_string());
        }
    }
    bail!("no projected token in {}", vols.display())
}

/// Cuts kubectl's table into cells at the header's column starts, blanks the `volatile`
/// columns, and prints it again aligned as kubectl does (3 spaces between columns).
fn normalise_table(out: &str, volatile: &[&str]) -> String {
    let mut lines = out.lines();
    let header = lines.next().unwrap_or("");
    let mut starts = vec![];
    let mut prev_space = true;
    for (i, ch) in header.char_indices() {
        if ch != ' ' && prev_space {
            starts.push(i);
        }
        prev_space = ch == ' ';
    }
    let cut = |l: &str| -> Vec<String> {
        starts
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let e = starts.get(k + 1).copied().unwrap_or(l.len()).min(l.len());
                l.get(s.min(l.len())..e).unwrap_or("").trim().to_string()
            })
            .collect()
    };
    let head = cut(header);
    let mut rows = vec![head.clone()];
    for l in lines {
        let mut r = cut(l);
        for (k, h) in head.iter().enumerate() {
            if volatile.contains(&h.as_str()) {
                r[k] = "<t>".into();
            }
        }
        rows.push(r);
    }
    let widths: Vec<usize> =
        (0..head.len()).map(|k| rows.iter().map(|r| r[k].len()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join("   ").trim_end().to_string() + "\n"
        })
        .collect()
}

/// Compares `got` with the golden file `name` (KUBE_RDMA_E2E_BLESS=1 rewrites it).
fn golden(name: &str, got: &str) -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/golden").join(name);
    if std::env::var_os("KUBE_RDMA_E2E_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap())?;
        std::fs::write(&path, got)?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(got == want, "{} differs:\n--- want\n{want}--- got\n{got}", path.display());
    Ok(())
}

// ---- CRDs ---------------------------------------------------------------------------------

fn operator_crds_print_the_golden_columns_and_default_mode_to_audit(ctx: &Ctx) -> Result<()> {
    let _cleanup = Defer(|| {
        let _ = delete_profile(ctx, "e2e-golden");
    });
    // The agent's state, settled (no Stale condition: the controller writes one only for an
    // agent that has gone quiet).
    eventually("the node's state ready and not stale", Duration::from_secs(90), || {
        let s = state(ctx)?;
        Ok((s["status"]["summary"]["ready"] == "True" && cond_status(&s, "Stale") != "True").then_some(()))
    })?;
    let out = ctx.kubectl(&["get", "rdmanodestates", "-o", "wide"])?;
    golden("rdmanodestates-wide.txt", &normalise_table(&out, &["HEARTBEAT", "AGE"]))?;

    // No `mode`: the CRD's default (Audit) is stored and printed; the controller counts the node.
    ctx.apply(&profile_yaml("e2e-golden", "  pfc: {priorities: [3]}\n"))?;
    let p = ctx.json(&["get", "roceprofile", "e2e-golden"])?;
    ensure!(p["spec"]["mode"] == "Audit", "mode not defaulted: {}", p["spec"]);
    eventually("the profile's status counts the node compliant", Duration::from_secs(90), || {
        let p = ctx.json(&["get", "roceprofile", "e2e-golden"])?;
        Ok((p["status"]["nodesMatched"] == 1 && p["status"]["nodesCompliant"] == 1).then_some(()))
    })?;
    let out = ctx.kubectl(&["get", "roceprofiles"])?;
    golden("roceprofiles.txt", &normalise_table(&out, &["AGE"]))
}

/// One RoceProfile breaking each CEL rule, keyed by a piece of the rule: every rule the
/// served CRD has must have one here.
const CEL_BREAKERS: &[(&str, &str)] = &[
    (
        "self.cnp.priority in self.pfc.priorities",
        "  pfc: {priorities: [3]}\n  cnp: {dscp: 48, priority: 3}\n",
    ),
    ("exists_one", "  dscpToPriority: [{dscp: 26, priority: 3}, {dscp: 26, priority: 4}]\n"),
    ("self.trust != 'pcp'", "  trust: pcp\n  dscpToPriority: [{dscp: 26, priority: 3}]\n"),
    ("self.bandwidth.sum() == 100", "  ets: {bandwidth: [10, 10, 10, 10, 10, 10, 10, 10]}\n"),
    ("!self.globalPause", "  globalPause: true\n  pfc: {priorities: [3]}\n"),
];

/// Every `x-kubernetes-validations` rule in `schema`, with its message.
fn cel_rules(schema: &Value, out: &mut Vec<(String, String)>) {
    match schema {
        Value::Object(m) => {
            if let Some(Value::Array(rules)) = m.get("x-kubernetes-validations") {
                for r in rules {
                    out.push((
                        r["rule"].as_str().unwrap_or("").to_string(),
                        r["message"].as_str().unwrap_or("").to_string(),
                    ));
                }
            }
            for v in m.values() {
                cel_rules(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| cel_rules(v, out)),
        _ => {}
    }
}

fn operator_crds_refuse_a_profile_breaking_each_cel_rule_with_its_message(ctx: &Ctx) -> Result<()> {
    let crd = ctx.json(&["get", "crd", "roceprofiles.kuberdma.io"])?;
    let mut rules = vec![];
    cel_rules(&crd["spec"]["versions"][0]["schema"], &mut rules);
    ensure!(rules.len() == CEL_BREAKERS.len(), "the served CRD has {} CEL rules: {rules:?}", rules.len());
    let _cleanup = Defer(|| {
        let _ = ctx.kubectl(&["delete", "roceprofiles", "-l", "e2e/cel", "--ignore-not-found"]);
    });
    for (rule, message) in &rules {
        let (_, spec) = CEL_BREAKERS
            .iter()
            .find(|(piece, _)| rule.contains(piece))
            .with_context(|| format!("no breaking profile for the rule {rule:?}"))?;
        let yaml = format!(
            "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata:\n  name: e2e-cel\n  \
             labels: {{e2e/cel: \"1\"}}\nspec:\n{spec}"
        );
        let (ok, err) = kubectl_create(&ctx.layout.kubeconfig(), &yaml)?;
        ensure!(!ok, "a profile breaking {rule:?} was accepted:\n{yaml}");
        ensure!(
            err.contains("is invalid") && err.contains(message.as_str()),
            "refused without the rule's message {message:?}: {err}"
        );
    }
    // And a profile keeping every rule is accepted (the refusals were the rules, not the YAML).
    let good = "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata:\n  name: e2e-cel\n  \
                labels: {e2e/cel: \"1\"}\nspec:\n  pfc: {priorities: [3]}\n  cnp: {dscp: 48, priority: 6}\n  \
                dscpToPriority: [{dscp: 26, priority: 3}]\n  ets: {bandwidth: [10, 10, 10, 10, 10, 10, 10, 30]}\n";
    let (ok, err) = kubectl_create(&ctx.layout.kubeconfig(), good)?;
    ensure!(ok, "a valid profile was refused: {err}");
    Ok(())
}

fn operator_crds_apply_by_the_binary_is_accepted_and_changes_nothing(ctx: &Ctx) -> Result<()> {
    let crds = ["rdmanodestates.kuberdma.io", "roceprofiles.kuberdma.io"];
    let generations = || -> Result<Vec<(String, Value)>> {
        crds.iter()
            .map(|c| {
                let v = ctx.json(&["get", "crd", c])?;
                let established = v["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
                ensure!(established, "{c} not Established: {}", v["status"]);
                Ok((c.to_string(), v["metadata"]["generation"].clone()))
            })
            .collect()
    };
    let before = generations()?;
    let op = image_binary(ctx, "kube-rdma-operator")?;
    for attempt in 1..=2 {
        let (code, out, err) = run_out(
            Command::new(&op).args(["crds", "--apply", "--kubeconfig"]).arg(ctx.layout.kubeconfig()),
        )?;
        ensure!(code == 0, "crds --apply #{attempt} exited {code}: {out}{err}");
    }
    // The chart's CRDs and the binary's are the same: the applies change no spec.
    ensure!(generations()? == before, "generation changed: {before:?} → {:?}", generations()?);
    let crd = ctx.json(&["get", "crd", "roceprofiles.kuberdma.io", "--show-managed-fields"])?;
    let managers: BTreeSet<&str> = crd["metadata"]["managedFields"]
        .as_array()
        .context("managedFields")?
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    ensure!(managers.contains("kube-rdma"), "the binary's field manager is not recorded: {managers:?}");
    Ok(())
}

// ---- agent and controller as the chart's pods ------------------------------------------------

fn operator_audit_profile_reports_drift_and_leaves_the_node_alone(ctx: &Ctx) -> Result<()> {
    let _cleanup = Defer(|| {
        let _ = delete_profile(ctx, "e2e-audit");
    });
    let s = eventually("the node ready on the default profile", Duration::from_secs(90), || {
        let s = state(ctx)?;
        Ok((s["status"]["profile"] == "default" && s["status"]["summary"]["ready"] == "True").then_some(s))
    })?;
    wait_label(ctx, "true", Duration::from_secs(30))?;
    let owner = &s["metadata"]["ownerReferences"][0];
    ensure!(owner["kind"] == "Node" && owner["name"] == NODE_NAME, "owner {owner}");
    let sim_before = sim_files(ctx);

    // PFC wanted on priority 4: the simulated port has it on 3.
    ctx.apply(&profile_yaml("e2e-audit", "  pfc: {priorities: [4]}\n"))?;
    let s = eventually("drift reported against e2e-audit", Duration::from_secs(60), || {
        let s = state(ctx)?;
        Ok((s["status"]["profile"] == "e2e-audit" && s["status"]["summary"]["ready"] == "False").then_some(s))
    })?;
    ensure!(cond_status(&s, "Drifted") == "True", "Drifted: {:?}", condition(&s, "Drifted"));
    let pfc = s["status"]["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["interface"] == PORT && c["name"] == "pfc"))
        .context("no pfc check")?;
    ensure!(pfc["result"] == "Fail", "pfc check {pfc}");
    ensure!(s["status"]["mode"] == "Audit" && s["status"]["enforcement"].is_null(), "{}", s["status"]);
    wait_label(ctx, "false", Duration::from_secs(30))?;
    eventually("the controller counts the node drifted", Duration::from_secs(60), || {
        let p = ctx.json(&["get", "roceprofile", "e2e-audit"])?;
        Ok((p["status"]["nodesDrifted"] == 1 && p["status"]["drifted"] == json!([NODE_NAME])).then_some(()))
    })?;
    let ev = eventually("a RoceDrift Event about the node", Duration::from_secs(30), || {
        let evs = ctx.json(&["-n", "default", "get", "events.events.k8s.io"])?;
        Ok(evs["items"]
            .as_array()
            .and_then(|a| {
                a.iter().find(|e| e["reason"] == "RoceDrift" && e["regarding"]["name"] == NODE_NAME)
            })
            .cloned())
    })?;
    ensure!(ev["type"] == "Warning", "{ev}");
    ensure!(changed(&sim_before, &sim_files(ctx)).is_empty(), "Audit changed the node");

    // The profile gone: back to the default, ready again.
    delete_profile(ctx, "e2e-audit")?;
    eventually("ready again without the profile", Duration::from_secs(60), || {
        let s = state(ctx)?;
        Ok((s["status"]["profile"] == "default" && s["status"]["summary"]["ready"] == "True").then_some(()))
    })?;
    wait_label(ctx, "true", Duration::from_secs(30))
}

fn operator_enforce_profile_changes_the_simulated_node_and_converges(ctx: &Ctx) -> Result<()> {
    let sim_before = sim_files(ctx);
    let _cleanup = Defer(|| {
        // The profile first (the agent then stops writing), the node's files, then the
        // unprivileged agent, which reads them as they were.
        let _ = delete_profile(ctx, "e2e-enforce");
        std::thread::sleep(Duration::from_secs(2));
        for (p, b) in &sim_before {
            if std::fs::read(p).ok().as_ref() != Some(b) {
                let _ = std::fs::write(p, b);
            }
        }
        restore_values(ctx);
    });
    // Enforce needs the chart's allowEnforce: the simulated tree is then mounted read-write.
    upgrade_with(ctx, json!({"agent": {"allowEnforce": true}}))?;
    let ds = ctx.json(&["-n", NAMESPACE, "get", "daemonset", "kube-rdma-agent"])?;
    let caps = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"];
    ensure!(*caps == json!(["NET_ADMIN"]), "agent capabilities {caps}");

    // ECN also on priority 5: sysfs writes (the simulated node's DCB settings are its description's).
    ctx.apply(&profile_yaml("e2e-enforce", "  mode: Enforce\n  ecn: {priorities: [3, 5]}\n"))?;
    let s = eventually("enforced and ready", Duration::from_secs(90), || {
        let s = state(ctx)?;
        Ok((s["status"]["profile"] == "e2e-enforce" && s["status"]["summary"]["ready"] == "True")
            .then_some(s))
    })?;
    ensure!(s["status"]["mode"] == "Enforce", "{}", s["status"]);
    let recs = s["status"]["enforcement"].as_array().context("no enforcement records")?;
    ensure!(
        recs.iter().any(|r| r["interface"] == PORT && r["setting"] == "ecn" && r["outcome"] == "Applied"),
        "no Applied ecn write: {recs:?}"
    );
    ensure!(!recs.iter().any(|r| r["outcome"] == "Failed"), "a write failed: {recs:?}");
    let diff = changed(&sim_before, &sim_files(ctx));
    for want in ["ecn/roce_np/enable/5=1", "ecn/roce_rp/enable/5=1"] {
        ensure!(diff.iter().any(|d| d.contains(PORT) && d.ends_with(want)), "{want} not written: {diff:?}");
    }
    // Converged: the next passes find nothing to write and the tree stays as it is.
    let settled = sim_files(ctx);
    std::thread::sleep(Duration::from_secs(5));
    ensure!(changed(&settled, &sim_files(ctx)).is_empty(), "the agent keeps writing");
    let s = state(ctx)?;
    ensure!(
        s["status"]["summary"]["ready"] == "True" && cond_status(&s, "Drifted") == "False",
        "{}",
        s["status"]
    );
    wait_label(ctx, "true", Duration::from_secs(30))
}

fn operator_stale_agent_comes_back_with_every_condition_intact(ctx: &Ctx) -> Result<()> {
    let _cleanup = Defer(|| {
        if cluster::state().is_ok_and(|st| {
            st.created.daemons.iter().any(|(n, p)| n == "kubelet" && !kube_rdma_e2e::daemon::alive(*p))
        }) {
            let _ = cluster::restart_daemon("kubelet", Duration::from_secs(10));
        }
        restore_values(ctx);
    });
    // A short heartbeat window: heartbeats every 2 s, Stale after 8 s, checked every 2 s.
    upgrade_with(
        ctx,
        json!({"agent": {"extraArgs": ["--heartbeat=2"]},
               "controller": {"interval": 2, "extraArgs": ["--stale-after=8"]}}),
    )?;
    let fresh = eventually("fresh under the new window", Duration::from_secs(60), || {
        let s = state(ctx)?;
        Ok((s["status"]["summary"]["ready"] == "True" && cond_status(&s, "Stale") != "True").then_some(s))
    })?;
    let before = agent_view(&fresh);
    ensure!(
        before["RoceReady"] == "True" && before["Drifted"] == "False" && before["Degraded"] == "False",
        "{before}"
    );
    wait_label(ctx, "true", Duration::from_secs(30))?;

    // The agent killed, and the kubelet stopped first so nothing restarts it.
    cluster::stop_daemon("kubelet", Duration::from_secs(10))?;
    let pid = component_pid("agent")?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)?;
    let stale = eventually("Stale after the heartbeat window", Duration::from_secs(40), || {
        let s = state(ctx)?;
        Ok((cond_status(&s, "Stale") == "True").then_some(s))
    })?;
    ensure!(
        agent_view(&stale) == before,
        "the controller's apply changed the agent's fields: {} → {}",
        before,
        agent_view(&stale)
    );
    ensure!(stale["status"]["checks"] == fresh["status"]["checks"], "checks changed");
    wait_label(ctx, "unknown", Duration::from_secs(30))?;
    let out = ctx.kubectl(&["get", "rdmanodestate", NODE_NAME])?;
    let row: Vec<&str> = out.lines().nth(1).unwrap_or("").split_whitespace().collect();
    ensure!(row.get(1..3) == Some(&["True", "True"][..]), "READY STALE: {out}");

    // The kubelet back: it restarts the container; fresh again with every condition intact.
    cluster::restart_daemon("kubelet", Duration::from_secs(10))?;
    let back = eventually("fresh again", Duration::from_secs(120), || {
        let s = state(ctx)?;
        Ok((cond_status(&s, "Stale") == "False").then_some(s))
    })?;
    ensure!(
        agent_view(&back) == before,
        "lost in the stale → fresh cycle: {} → {}",
        before,
        agent_view(&back)
    );
    ensure!(back["status"]["summary"]["ready"] == "True", "summary.ready {}", back["status"]["summary"]);
    wait_label(ctx, "true", Duration::from_secs(30))?;
    // The kubelet posts the restart count with its next pod status update, which may come
    // after the restarted agent's first apply.
    eventually("the agent container's restart in its pod status", Duration::from_secs(30), || {
        let pod = ctx.json(&["-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=agent"])?;
        let restarts: Vec<i64> = pod["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0))
            .collect();
        ensure!(!restarts.is_empty(), "no agent pod");
        Ok(restarts.iter().all(|n| *n >= 1).then_some(()))
    })
    .context("the agent container was not restarted")?;
    Ok(())
}

// ---- least privilege ---------------------------------------------------------------------------

/// What scripts/delivery/security.py expects each component to be granted, for `ns`:
/// cluster-wide grants and those of Roles in `ns`, as kubectl prints resources
/// (`resource.group`, `resource.group/sub`... see [`can_i_list`]).
fn expected_grants(component: &str, ns: &str) -> Result<BTreeSet<(String, String)>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/delivery");
    let script = format!(
        "import json, sys; sys.path.insert(0, {dir:?}); import security\n\
         print(json.dumps(sorted(security.expected_rbac({{}}, 'v1.34.4')[{component:?}])))",
        dir = dir.display().to_string()
    );
    let out = kube_rdma_e2e::daemon::run(Command::new("python3").args(["-c", &script]))?;
    let rows: Vec<(String, String, String, String)> = serde_json::from_str(&out)?;
    Ok(rows
        .into_iter()
        .filter(|(scope, ..)| scope == "cluster" || scope == ns)
        .map(|(_, group, res, verb)| (kubectl_resource(&group, &res), verb))
        .collect())
}

/// A resource as `kubectl auth can-i --list` prints it.
fn kubectl_resource(group: &str, res: &str) -> String {
    let (r, sub) = res.split_once('/').map_or((res, None), |(r, s)| (r, Some(s)));
    let mut out = r.to_string();
    if !group.is_empty() {
        out.push('.');
        out.push_str(group);
    }
    if let Some(s) = sub {
        out.push('/');
        out.push_str(s);
    }
    out
}

/// `kubectl auth can-i --list` of `kubeconfig`'s holder in `ns`: (resource, verb) pairs of
/// resource rules, without what every authenticated user gets (system:basic-user's
/// self-reviews) and non-resource URLs.
fn can_i_list(kubeconfig: &Path, ns: &str) -> Result<BTreeSet<(String, String)>> {
    let out = kube_rdma_e2e::daemon::run(
        kube_rdma_e2e::apiserver::kubectl(kubeconfig).args(["auth", "can-i", "--list", "-n", ns]),
    )?;
    let mut got = BTreeSet::new();
    for l in out.lines().skip(1) {
        let Some((res, rest)) = l.split_once(char::is_whitespace) else { continue };
        let verbs = rest.rsplit_once('[').map(|(_, v)| v.trim_end().trim_end_matches(']')).unwrap_or("");
        if res.is_empty() || res.starts_with("selfsubject") {
            continue;
        }
        for v in verbs.split_whitespace() {
            got.insert((res.to_string(), v.to_string()));
        }
    }
    Ok(got)
}

fn operator_pod_tokens_may_do_their_jobs_and_nothing_more(ctx: &Ctx) -> Result<()> {
    let other = "e2e-other-node";
    let _cleanup = Defer(|| {
        let _ = ctx.kubectl(&["delete", "node", other, "--ignore-not-found"]);
        let _ = ctx.kubectl(&["delete", "rdmanodestate", other, "--ignore-not-found"]);
        let _ = ctx.kubectl(&["delete", "clusterrolebinding", "e2e-viewer", "--ignore-not-found"]);
    });
    // Another node (an object only: no kubelet behind it).
    ctx.apply(&format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {other}\n"))?;
    let agent = token_kubeconfig(ctx, "agent", &pod_token(ctx, "agent")?)?;
    let controller = token_kubeconfig(ctx, "controller", &pod_token(ctx, "controller")?)?;

    // What each token may do, as the API server answers it, is what security.py expects.
    for (name, kc) in [("agent", &agent), ("controller", &controller)] {
        for ns in ["default", NAMESPACE] {
            let got = can_i_list(kc, ns)?;
            let want = expected_grants(name, ns)?;
            ensure!(
                got == want,
                "{name} in {ns}: granted beyond security.py: {:?}; missing: {:?}",
                got.difference(&want).collect::<Vec<_>>(),
                want.difference(&got).collect::<Vec<_>>()
            );
        }
    }

    let refused = |kc: &Path, args: &[&str], want: &str| -> Result<()> {
        let (code, out, err) = run_out(kube_rdma_e2e::apiserver::kubectl(kc).args(args))?;
        ensure!(code != 0, "{} may {args:?}: {out}", kc.display());
        ensure!(err.contains(want), "{args:?} refused without {want:?}: {err}");
        Ok(())
    };
    // The agent: its own node's label only, its own node's state only.
    refused(
        &agent,
        &["label", "node", other, &format!("{READY_LABEL}=true")],
        "may change only the node its pod runs on",
    )?;
    let other_state = format!(
        "apiVersion: kuberdma.io/v1alpha1\nkind: RdmaNodeState\nmetadata:\n  name: {other}\nspec:\n  nodeName: {other}\n"
    );
    let (ok, err) = kubectl_create(&agent, &other_state)?;
    ensure!(!ok && err.contains("may write only the RdmaNodeState of the node its pod runs on"), "{err}");
    refused(&agent, &["delete", "rdmanodestate", NODE_NAME], "forbidden")?;
    // The controller: the label of another node only to unknown, and no state it may create.
    // (kubectl GETs the node before its patch, which the controller may not either.)
    let to_true = format!(r#"{{"metadata":{{"labels":{{"{READY_LABEL}":"true"}}}}}}"#);
    refused(&controller, &["patch", "node", other, "--type=merge", "-p", &to_true], "forbidden")?;
    let (ok, err) = kubectl_create(&controller, &other_state)?;
    ensure!(!ok && err.contains("forbidden"), "{err}");
    for kc in [&agent, &controller] {
        refused(kc, &["get", "secrets", "-n", NAMESPACE], "forbidden")?;
    }
    let n = ctx.json(&["get", "node", other])?;
    ensure!(n["metadata"]["labels"][READY_LABEL].is_null(), "the other node was labelled: {}", n["metadata"]);
    ensure!(ctx.kubectl(&["get", "rdmanodestate", other]).is_err(), "a state for the other node exists");

    // The aggregated view role: a user bound to `view` only reads our CRDs; unbound, not.
    let admin = ctx.layout.kubeconfig();
    let as_viewer = ["--as", "e2e-viewer", "--as-group", "e2e-viewers"];
    let (code, _, err) = run_out(
        kube_rdma_e2e::apiserver::kubectl(&admin)
            .args(["get", "rdmanodestates,roceprofiles"])
            .args(as_viewer),
    )?;
    ensure!(code != 0 && err.contains("forbidden"), "unbound user read our CRDs: {err}");
    ctx.kubectl(&["create", "clusterrolebinding", "e2e-viewer", "--clusterrole=view", "--user=e2e-viewer"])?;
    let out = eventually("view lets the user read our CRDs", Duration::from_secs(30), || {
        let (code, out, _) = run_out(
            kube_rdma_e2e::apiserver::kubectl(&admin)
                .args(["get", "rdmanodestates,roceprofiles"])
                .args(as_viewer),
        )?;
        Ok((code == 0).then_some(out))
    })?;
    ensure!(out.contains(&format!("rdmanodestate.kuberdma.io/{NODE_NAME}")), "{out}");
    let kr = image_binary(ctx, "kubectl-rdma")?;
    let (code, out, err) =
        run_out(Command::new(&kr).arg("--kubeconfig").arg(&admin).args(["status"]).args(as_viewer))?;
    ensure!(code == 0 && out.contains(NODE_NAME), "kubectl rdma status as a viewer: {code} {out}{err}");
    for verb in
        [&["delete", "rdmanodestate", NODE_NAME][..], &["annotate", "rdmanodestate", NODE_NAME, "x=y"][..]]
    {
        let (code, _, err) = run_out(kube_rdma_e2e::apiserver::kubectl(&admin).args(verb).args(as_viewer))?;
        ensure!(code != 0 && err.contains("forbidden"), "a viewer may {verb:?}: {err}");
    }
    Ok(())
}

// ---- etcd down -----------------------------------------------------------------------------------

fn operator_etcd_down_kubectl_rdma_says_one_line_then_all_is_well(ctx: &Ctx) -> Result<()> {
    let kr = image_binary(ctx, "kubectl-rdma")?;
    let admin = ctx.layout.kubeconfig();
    let status = |timeout: &str| {
        run_out(Command::new(&kr).arg("--kubeconfig").arg(&admin).args([
            "status",
            "--request-timeout",
            timeout,
        ]))
    };
    let (code, out, err) = status("10s")?;
    ensure!(code == 0 && out.contains(NODE_NAME), "before: {code} {out}{err}");

    let _cleanup = Defer(|| {
        if cluster::state().is_ok_and(|st| {
            st.created.daemons.iter().any(|(n, p)| n == "etcd" && !kube_rdma_e2e::daemon::alive(*p))
        }) {
            let _ = cluster::restart_daemon("etcd", Duration::from_secs(10));
        }
    });
    cluster::stop_daemon("etcd", Duration::from_secs(10))?;
    let t0 = std::time::Instant::now();
    let (code, out, err) = status("10s")?;
    let took = t0.elapsed();
    // Every error is exit 1, as kubectl's (docs/cli.md), in kubectl's words: the server
    // answers 504 (etcd gone) or does not answer within the request timeout.
    ensure!(code == 1, "exit {code} with etcd down, not 1: {out}{err}");
    ensure!(err.lines().count() == 1, "not one line: {err:?}");
    ensure!(
        err.starts_with("Unable to connect to the server: ") || err.starts_with("Error from server ("),
        "not kubectl's sentence: {err:?}"
    );
    for debug in ["Api(", "ErrorResponse {", "Status {", "source:", "\\\""] {
        ensure!(!err.contains(debug), "a Debug dump ({debug}): {err}");
    }
    ensure!(took < Duration::from_secs(30), "gave up after {took:?}");
    eprintln!("operator: with etcd down kubectl-rdma said (exit {code}, {took:.1?}): {}", err.trim());

    cluster::restart_daemon("etcd", Duration::from_secs(10))?;
    eventually("kube-apiserver ready again", Duration::from_secs(60), || {
        Ok(ctx.kubectl(&["get", "--raw=/readyz"]).ok().map(|_| ()))
    })?;
    let (code, out, err) = status("10s")?;
    ensure!(code == 0 && out.contains(NODE_NAME), "after etcd is back: {code} {out}{err}");
    // The agent still writes: a removed label comes back.
    ctx.kubectl(&["label", "node", NODE_NAME, &format!("{READY_LABEL}-")])?;
    wait_label(ctx, "true", Duration::from_secs(60))?;
    let s = state(ctx)?;
    ensure!(
        s["status"]["summary"]["ready"] == "True" && cond_status(&s, "Stale") != "True",
        "{}",
        s["status"]
    );
    Ok(())
}
