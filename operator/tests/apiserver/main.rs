//! End to end through the production path on a real API server (etcd and
//! kube-apiserver v1.34.4 from the Go module proxy): the real executables
//! configured by kubeconfig (`KUBECONFIG`, `--kubeconfig`, `--context`, `--as`,
//! ServiceAccount tokens) as users and the chart run them. Each test has its own
//! control plane and processes; faults are made by the server itself.
mod harness;

use std::time::{Duration, Instant};

use harness::*;
use kube_rdma_operator::controller::stale_apply_body;
use kube_rdma_operator::crd::{AGENT_MANAGER, CONTROLLER_MANAGER};
use kube_rdma_operator::publish::status_apply_body;
use serde_json::{json, Value};

const NODE: &str = "node-a";

fn ready(v: Option<&Value>, want: &str) -> bool {
    v.is_some_and(|s| s["status"]["summary"]["ready"] == want)
}

fn agent_conditions(s: &Value) -> Vec<(String, String)> {
    ["RoceReady", "Drifted", "Degraded"]
        .iter()
        .map(|t| {
            (t.to_string(), condition(s, t).map_or("-".into(), |c| c["status"].as_str().unwrap().to_string()))
        })
        .collect()
}

/// The context name of a kubeconfig written by the fixture.
fn current_context(kc: &std::path::Path) -> String {
    let v: Value = serde_yaml::from_str(&std::fs::read_to_string(kc).unwrap()).unwrap();
    v["current-context"].as_str().unwrap().to_string()
}

#[test]
fn the_agent_publishes_its_state_labels_its_node_and_reports_drift_with_an_event() {
    let c = Cluster::new(&[(NODE, json!({"gpu": "yes"}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |d| {
        for pf in &mut d.adapters[0].pfs {
            pf.roce.pfc = vec![];
        }
        d.rdma_netns_mode = nic::simdesc::NetnsMode::Exclusive;
    });
    let agent = c.agent(NODE, &sim, false, &[]);
    let st = c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "False"));
    let status = &st["status"];
    assert_eq!(status["profile"], "default");
    assert_eq!(status["netnsMode"], "exclusive");
    assert_eq!(status["fingerprint"].as_str().unwrap().len(), 16);
    assert!(status["lastHeartbeatTime"].is_string() && status["observedAt"].is_string(), "{status}");
    let node = c.get("nodes", NODE).unwrap();
    let owner = &st["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), &owner["uid"]), (Some("Node"), &node["metadata"]["uid"]));
    assert_eq!(condition(&st, "Drifted").unwrap()["status"], "True");
    // Field managers as the server recorded them.
    let managers: Vec<(&str, &str, &str)> = st["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap(),
                m["operation"].as_str().unwrap(),
                m["subresource"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(managers.contains(&(AGENT_MANAGER, "Apply", "")), "{managers:?}");
    assert!(managers.contains(&(AGENT_MANAGER, "Apply", "status")), "{managers:?}");
    let n = c.wait("nodes", NODE, "node labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("false"))
    });
    assert_eq!(label(&n, "gpu"), Some("yes"), "other labels kept");
    let ev = c.wait_until("drift Event", &[&agent], || {
        c.events().into_iter().find(|e| e["reason"] == "RoceDrift" && e["regarding"]["name"] == NODE)
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["regarding"]["kind"], "Node");
    assert_eq!(ev["reportingInstance"], format!("kube-rdma-agent-{NODE}"));
    let note = ev["note"].as_str().unwrap();
    assert!(note.contains("ens1f0np0/pfc: want 3, have none"), "{note}");

    // kubectl rdma reads it with --kubeconfig and --context, and exits 1: not ready.
    let ctx = current_context(&c.kubeconfig());
    let (code, out, err) = kubectl(&c, &["status", "--context", &ctx]);
    assert_eq!(code, 1, "{out}{err}");
    let row: Vec<&str> = out.lines().find(|l| l.starts_with(NODE)).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], [NODE, "False", "False", "default"], "{out}");
    assert!(row[5].contains("ens1f0np0/pfc"), "{out}");
    assert!(out.contains("1 of 1 nodes not ready: node-a"), "{out}");
    // -o wide: the summary's columns after the narrow ones, as the state has them.
    let (code, out, err) = kubectl(&c, &["status", "-o", "wide"]);
    assert_eq!(code, 1, "{out}{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        [
            "NODE",
            "READY",
            "STALE",
            "PROFILE",
            "PASS/TOTAL",
            "FAILING",
            "HEARTBEAT",
            "PFC",
            "TRUST",
            "ECN",
            "MTU",
            "ROCE",
            "NETNS"
        ],
        "{out}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let sum = &status["summary"];
    assert_eq!(row[..5], [NODE, "False", "False", "default", sum["passTotal"].as_str().unwrap()], "{out}");
    let wide: Vec<&str> =
        ["pfc", "trust", "ecn", "mtu", "roce"].iter().map(|k| sum[*k].as_str().unwrap()).collect();
    assert_eq!(row[7..12], wide[..], "{out}");
    assert_eq!(row[12..], ["exclusive"], "{out}");
    let (code, out, _) = kubectl(&c, &["status", NODE]);
    assert_eq!(code, 1);
    assert!(
        out.contains("REMEDIATION (in this order)\n  dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on"),
        "{out}"
    );
    assert!(out.contains("NETNS exclusive"), "{out}");
    // Problems only, unless --all (or -o wide) asks for every check.
    let passing = |out: &str| out.lines().any(|l| l.starts_with("ens1f0np0  mtu ") && l.contains("Pass"));
    assert!(!passing(&out), "{out}");
    for every in [&["status", NODE, "--all"][..], &["status", NODE, "-o", "wide"]] {
        let (code, out, err) = kubectl(&c, every);
        assert_eq!(code, 1, "{every:?}: {err}");
        assert!(passing(&out), "{every:?}: {out}");
    }
    let (code, out, _) = kubectl(&c, &["status", NODE, "-o", "json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "RdmaNodeState");
    let (code, out, _) = kubectl(&c, &["status", "-o", "yaml"]);
    assert_eq!(code, 1);
    let v: Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(v["kind"], "List");
    assert_eq!(v["items"][0]["metadata"]["name"], NODE);
}

#[test]
fn kubectl_rdma_reads_as_kubectl_does_names_jsonpath_selectors_impersonation_and_not_found() {
    let c = Cluster::new(&[(NODE, json!({"pool": "a"})), ("node-b", json!({"pool": "b"}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, false, &[]);
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    // -o name and -o jsonpath, of one node and of all.
    assert_eq!(
        kubectl(&c, &["status", "-o", "name"]),
        (0, format!("rdmanodestate.kuberdma.io/{NODE}\n"), String::new())
    );
    let (code, out, _) = kubectl(&c, &["status", NODE, "-o", "jsonpath={.status.summary.ready}"]);
    assert_eq!((code, out.as_str()), (0, "True"));
    let (_, out, _) = kubectl(
        &c,
        &["status", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"RoceReady\")].status}{\"\\n\"}{end}"],
    );
    assert_eq!(out, format!("{NODE} True\n"));
    // Not found: stderr, exit 1, the found node still shown.
    let (code, out, err) = kubectl(&c, &["status", NODE, "nope", "-o", "name"]);
    assert_eq!(code, 1);
    assert_eq!(out, format!("rdmanodestate.kuberdma.io/{NODE}\n"));
    assert_eq!(err, "Error from server (NotFound): rdmanodestates.kuberdma.io \"nope\" not found\n");
    // -l selects Nodes: node-b has no state yet, which is a node not ready.
    let (code, out, _) = kubectl(&c, &["status", "-l", "pool in (a,b)"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.lines().any(|l| l.starts_with("node-b") && l.contains("no RdmaNodeState")), "{out}");
    let (code, out, _) = kubectl(&c, &["status", "-l", "pool=a"]);
    assert_eq!(code, 0, "{out}");
    // --as: a user bound only to the chart's view role reads; one bound to nothing gets one line.
    let view = chart_objects(false)
        .into_iter()
        .find(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
        })
        .expect("the chart's view role");
    let view_name = view["metadata"]["name"].as_str().unwrap().to_string();
    c.kubectl_apply(&[
        view,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "viewer"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": view_name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "viewer"}]}),
    ]);
    let (code, out, err) = kubectl(&c, &["status", "--as", "viewer"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = kubectl(&c, &["status", "--as", "nobody", "--as-group", "nogroup"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("Error from server (Forbidden): rdmanodestates.kuberdma.io is forbidden: User \"nobody\" cannot list resource \"rdmanodestates\""),
        "{err}"
    );
    // --request-timeout against a server that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let kc = c.dir.path().join("silent.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: s, cluster: {{server: 'https://{}', insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: s, context: {{cluster: s, user: u}}}}]\ncurrent-context: s\n",
            silent.local_addr().unwrap()
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let (code, _, err) = kubectl_with(&kc, &["status", "--request-timeout", "2s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("Unable to connect to the server: "), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "gave up after {:?}", t0.elapsed());
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(silent);
}

#[test]
fn a_deleted_state_and_a_removed_label_come_back_within_seconds() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, false, &[]);
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    c.wait("nodes", NODE, "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    let old_uid = c.get("rdmanodestates", NODE).unwrap()["metadata"]["uid"].clone();
    c.delete("rdmanodestates", NODE);
    let t0 = Instant::now();
    let st = c.wait("rdmanodestates", NODE, "state recreated", &[&agent], |s| {
        ready(s, "True") && s.is_some_and(|s| s["metadata"]["uid"] != old_uid)
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "recreated after {:?}", t0.elapsed());
    assert!(st["status"]["checks"].as_array().is_some_and(|a| !a.is_empty()));

    c.merge("nodes", NODE, json!({"metadata": {"labels": {"kuberdma.io/roce-ready": null}}}));
    let t0 = Instant::now();
    c.wait("nodes", NODE, "label restored", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "restored after {:?}", t0.elapsed());
}

#[test]
fn the_agent_rides_out_a_restarted_api_server_and_a_compacted_etcd() {
    let mut c = Cluster::new(&[(NODE, json!({"pool": "a"}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, true, &[]);
    let metrics = agent.metrics_addr();
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    // Writes the agent's watches have not seen yet, then everything before them compacted
    // away and kube-apiserver restarted: its watches drop, and resuming from where they were
    // is too old for the new watch cache and for etcd (410 Gone), so they re-list.
    c.merge("nodes", NODE, json!({"metadata": {"annotations": {"e2e/touch": "1"}}}));
    c.api.compact().unwrap();
    c.api.restart().unwrap();
    // A new profile for this node, made after the restart: the agent must see it through
    // its re-established watches and write the new checks.
    c.create(profile("pool-a", json!({"nodeSelector": {"pool": "a"}, "pfc": {"priorities": [4]}})));
    let st = c.wait("rdmanodestates", NODE, "checked against the new profile", &[&agent], |s| {
        s.is_some_and(|s| s["status"]["profile"] == "pool-a" && s["status"]["summary"]["ready"] == "False")
    });
    assert!(st["status"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "pfc" && c["result"] == "Fail"));
    c.wait("nodes", NODE, "label false", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("false"))
    });
    let text = eventually("error metrics", &[&agent], || {
        http_get(metrics, "/metrics").map(|(_, b)| b).filter(|b| {
            sample(b, "kuberdma_api_errors_total{kind=\"transport\"}").is_some_and(|v| v >= 1.0)
                && sample(b, "kuberdma_api_errors_total{kind=\"gone\"}").is_some_and(|v| v >= 1.0)
        })
    });
    assert!(sample(&text, "kuberdma_agent_last_success_timestamp_seconds").unwrap() > 1.0e9, "{text}");
    eventually("healthy again", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
}

#[test]
fn healthz_reports_an_unreachable_api_server_and_recovers() {
    let mut c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, true, &[]);
    let metrics = agent.metrics_addr();
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    eventually("healthy", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
    // kube-apiserver down (until started again below).
    c.api.apiserver.stop(Duration::from_secs(10));
    let (_, body) = eventually("unhealthy while the API is down", &[&agent], || {
        http_get(metrics, "/healthz").filter(|r| r.0 == 503)
    });
    assert!(body.contains("API server unreachable"), "{body}\n{}", agent.log());
    assert!(body.contains("Connection refused") || body.contains("connect"), "names the failure: {body}");
    c.api.restart().unwrap();
    eventually("healthy again", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
    let (_, m) = http_get(metrics, "/metrics").unwrap();
    assert!(sample(&m, "kuberdma_api_errors_total{kind=\"transport\"}").unwrap() >= 1.0, "{m}");
}

#[test]
fn a_stale_agent_comes_back_with_every_condition_and_its_ready_intact() {
    let c = Cluster::new(&[("n1", json!({"gpu": "yes"})), ("n2", json!({"gpu": "yes"}))]);
    c.create(profile("gpu", json!({"nodeSelector": {"gpu": "yes"}, "pfc": {"priorities": [3]}})));
    let s1 = c.sim("n1", "cx6dx-dual", |_| {});
    let s2 = c.sim("n2", "e810-xxv", |_| {});
    let ctl = c.controller(true);
    let cm = ctl.metrics_addr();
    let a1 = c.agent("n1", &s1, false, &[]);
    let mut a2 = c.agent("n2", &s2, false, &[]);
    let p = c.wait("roceprofiles", "gpu", "profile status", &[&ctl, &a1, &a2], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 2)
    });
    assert_eq!(p["status"]["nodesMatched"], 2);
    assert_eq!(p["status"]["conditions"][0]["type"], "Valid");
    let fresh = c.get("rdmanodestates", "n2").unwrap();
    let before = agent_conditions(&fresh);
    assert_eq!(before.iter().filter(|(_, s)| s != "-").count(), 3, "{before:?}");

    // A dead agent: Stale, label unknown, counted as stale; its own fields untouched.
    a2.kill();
    let st = c.wait("rdmanodestates", "n2", "marked stale", &[&ctl], |s| {
        s.is_some_and(|s| condition(s, "Stale").is_some_and(|c| c["status"] == "True"))
    });
    assert_eq!(agent_conditions(&st), before, "the controller's apply removed nothing of the agent's");
    assert_eq!(st["status"]["summary"], fresh["status"]["summary"], "summary.ready stays the agent's");
    assert_eq!(st["status"]["checks"], fresh["status"]["checks"]);
    let owners: Vec<(String, String)> = st["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["manager"].as_str().unwrap().to_string(), m["fieldsV1"].to_string()))
        .collect();
    let of = |who: &str| owners.iter().filter(|(m, _)| m == who).map(|(_, f)| f.clone()).collect::<String>();
    assert!(of(CONTROLLER_MANAGER).contains("k:{\\\"type\\\":\\\"Stale\\\"}"), "{owners:?}");
    assert!(!of(CONTROLLER_MANAGER).contains("f:summary"), "{owners:?}");
    assert!(of(AGENT_MANAGER).contains("f:summary") && of(AGENT_MANAGER).contains("RoceReady"), "{owners:?}");
    c.wait("nodes", "n2", "label unknown", &[&ctl], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("unknown"))
    });
    c.wait("roceprofiles", "gpu", "stale counted", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesStale"] == 1)
    });
    let (code, out, _) = kubectl(&c, &["status"]);
    assert_eq!(code, 1, "{out}");
    let row: Vec<&str> = out.lines().find(|l| l.starts_with("n2")).unwrap().split_whitespace().collect();
    assert_eq!(row[1..3], ["Unknown", "True"], "{out}");
    let m = eventually("controller metrics", &[&ctl], || {
        http_get(cm, "/metrics")
            .map(|r| r.1)
            .filter(|b| sample(b, "kuberdma_node_stale{node=\"n2\"}") == Some(1.0))
    });
    assert_eq!(sample(&m, "kuberdma_node_stale{node=\"n1\"}"), Some(0.0), "{m}");

    // It comes back: Stale False, every condition and summary.ready as before, labelled again.
    let a2 = c.agent("n2", &s2, false, &[]);
    let st = c.wait("rdmanodestates", "n2", "fresh again", &[&ctl, &a2], |s| {
        s.is_some_and(|s| condition(s, "Stale").is_some_and(|c| c["status"] == "False"))
    });
    assert_eq!(agent_conditions(&st), before);
    assert_eq!(st["status"]["summary"]["ready"], "True");
    c.wait("nodes", "n2", "label true", &[&ctl, &a2], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    c.wait("roceprofiles", "gpu", "compliant again", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 2 && p["status"]["nodesStale"] == 0)
    });
    drop(a1);
}

#[test]
fn each_manager_applies_its_own_fields_without_force_and_a_conflicting_apply_gets_409() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    // The exact bodies the agent and the controller send, applied WITHOUT force: they
    // succeed only because no field is owned by the other (a conflict would be a 409).
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let observed =
        kube_rdma_operator::fixtures::SimNode::new(&kube_rdma_operator::fixtures::example("cx6dx-dual"))
            .read();
    let _ = sim;
    let mut st =
        kube_rdma_operator::status::evaluate(&kube_rdma_operator::checks::default_profile(), &observed);
    st.last_heartbeat_time = Some("2026-11-30T01:00:00Z".into());
    kube_rdma_operator::status::carry_transition_times(&mut st.conditions, &[], "2026-11-30T01:00:00Z");
    let obj = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": NODE},
                     "spec": {"nodeName": NODE}});
    c.apply("rdmanodestates", NODE, AGENT_MANAGER, &obj, false, false).unwrap();
    let agent_body = status_apply_body(NODE, &st);
    c.apply("rdmanodestates", NODE, AGENT_MANAGER, &agent_body, true, false).expect("agent status apply");
    let stale_after = Duration::from_secs(1500);
    let marked = c
        .apply(
            "rdmanodestates",
            NODE,
            CONTROLLER_MANAGER,
            &stale_apply_body(NODE, true, stale_after, "2026-11-30T01:30:00Z"),
            true,
            false,
        )
        .expect("controller apply without force: no conflict with the agent");
    assert_eq!(agent_conditions(&marked), agent_conditions(&json!({"status": agent_body["status"]})));
    assert_eq!(condition(&marked, "Stale").unwrap()["status"], "True");
    assert_eq!(marked["status"]["summary"]["ready"], "True");
    // The agent applies again (a fresh heartbeat), still without force: the Stale entry stays.
    let mut again = st.clone();
    again.last_heartbeat_time = Some("2026-11-30T01:31:00Z".into());
    let back = c
        .apply("rdmanodestates", NODE, AGENT_MANAGER, &status_apply_body(NODE, &again), true, false)
        .expect("agent apply without force");
    assert_eq!(condition(&back, "Stale").unwrap()["status"], "True", "not the agent's to remove");
    let fresh = c
        .apply(
            "rdmanodestates",
            NODE,
            CONTROLLER_MANAGER,
            &stale_apply_body(NODE, false, stale_after, "2026-11-30T01:31:05Z"),
            true,
            false,
        )
        .unwrap();
    assert_eq!(condition(&fresh, "Stale").unwrap()["status"], "False");
    assert_eq!(agent_conditions(&fresh), agent_conditions(&back));
    assert_eq!(fresh["status"]["summary"]["ready"], "True");
    assert_eq!(fresh["status"]["lastHeartbeatTime"], "2026-11-30T01:31:00Z");

    // A concurrent writer changing a field the agent owns, without force: 409 naming the owner.
    let other = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": NODE},
                       "status": {"summary": {"ready": "Unknown"}}});
    let e = c.apply("rdmanodestates", NODE, "someone-else", &other, true, false).unwrap_err();
    let kube::Error::Api(s) = &e else { panic!("{e}") };
    assert_eq!(s.code, 409, "{s:?}");
    assert!(
        s.message.contains(AGENT_MANAGER) && s.message.contains(".status.summary.ready"),
        "{}",
        s.message
    );
    // The old design's controller body (READY Unknown) would conflict the same way.
    let old = json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": NODE},
                     "status": {"conditions": [{"type": "Stale", "status": "True", "reason": "NoHeartbeat"}],
                                "summary": {"ready": "Unknown"}}});
    let e = c.apply("rdmanodestates", NODE, CONTROLLER_MANAGER, &old, true, false).unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{e}");
    // Forced, it takes the field; the agent's next (forced) apply takes it back.
    c.apply("rdmanodestates", NODE, "someone-else", &other, true, true).unwrap();
    let restored =
        c.apply("rdmanodestates", NODE, AGENT_MANAGER, &status_apply_body(NODE, &again), true, true).unwrap();
    assert_eq!(restored["status"]["summary"]["ready"], "True");
}

/// A newer release's RoceProfile CRD (one more mode, `Remediate`), then a profile
/// `name` using it, which this version cannot decode.
fn a_profile_of_a_newer_release(c: &Cluster, name: &str) {
    let mut crd = c.get("customresourcedefinitions", "roceprofiles.kuberdma.io").unwrap();
    let modes = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["mode"]["enum"];
    modes.as_array_mut().unwrap().push(json!("Remediate"));
    for k in ["managedFields", "resourceVersion", "uid", "creationTimestamp", "generation"] {
        crd["metadata"].as_object_mut().unwrap().remove(k);
    }
    crd.as_object_mut().unwrap().remove("status");
    c.kubectl_apply(&[crd]);
    let newer = profile(name, json!({"mode": "Remediate", "pfc": {"priorities": [4]}}));
    c.wait_until("the newer CRD serves", &[], || {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(c.client.clone(), &resource("roceprofiles"));
        let obj: kube::api::DynamicObject = serde_json::from_value(newer.clone()).unwrap();
        c.rt.block_on(api.create(&Default::default(), &obj)).ok()
    });
}

#[test]
fn a_profile_written_for_a_newer_crd_is_reported_by_name_and_skipped() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    // A newer release's CRD: one more mode. The API server then accepts such profiles.
    a_profile_of_a_newer_release(&c, "a-newer");
    c.create(profile("good", json!({"pfc": {"priorities": [3]}})));
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let ctl = c.controller(false);
    let agent = c.agent(NODE, &sim, false, &[]);
    let st = c.wait("rdmanodestates", NODE, "checked against the good profile", &[&agent], |s| {
        s.is_some_and(|s| s["status"]["profile"] == "good")
    });
    assert_eq!(st["status"]["summary"]["ready"], "True");
    let p = c.wait("roceprofiles", "a-newer", "condition on the bad profile", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["conditions"][0]["status"] == "False")
    });
    let cond = &p["status"]["conditions"][0];
    assert_eq!((cond["type"].as_str(), cond["reason"].as_str()), (Some("Valid"), Some("CannotDecode")));
    assert!(cond["message"].as_str().unwrap().contains("Remediate"), "{cond}");
    let ev = c.wait_until("InvalidProfile Event", &[&ctl], || {
        c.events().into_iter().find(|e| e["reason"] == "InvalidProfile")
    });
    assert_eq!(ev["regarding"]["name"], "a-newer");
    assert!(agent.log().contains("a-newer"), "the agent names what it skips: {}", agent.log());
    c.wait("roceprofiles", "good", "good counted", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 1)
    });
}

/// The `Overlapping` condition of profile `name` once its status is `want`.
fn overlapping(c: &Cluster, name: &str, want: &str, procs: &[&Proc]) -> Value {
    let p = c.wait("roceprofiles", name, &format!("{name}: Overlapping {want}"), procs, |p| {
        p.and_then(|p| condition(p, "Overlapping")).is_some_and(|c| c["status"] == want)
    });
    condition(&p, "Overlapping").unwrap().clone()
}

/// The overlap Events regarding `name`.
fn overlap_events(c: &Cluster, name: &str) -> Vec<Value> {
    c.events()
        .into_iter()
        .filter(|e| e["reason"] == "OverlappingProfiles" && e["regarding"]["name"] == name)
        .collect()
}

#[test]
fn overlapping_profiles_are_reported_on_both_and_a_name_never_decides_what_is_enforced() {
    let c = Cluster::new(&[(NODE, json!({"gpu": "yes", "rack": "a"}))]);
    // Named to sort first, empty selector, Enforce: it used to take the node.
    c.create(profile("aaa-takeover", json!({"mode": "Enforce", "pfc": {"priorities": [4]}})));
    c.create(profile("good", json!({"nodeSelector": {"gpu": "yes"}, "pfc": {"priorities": [3]}})));
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let ctl = c.controller(false);
    let agent = c.agent(NODE, &sim, false, &[]);
    let procs = [&ctl, &agent];
    // The more specific profile applies, in its own mode; nothing was enforced.
    let st = c.wait("rdmanodestates", NODE, "checked against good", &procs, |s| {
        s.is_some_and(|s| s["status"]["profile"] == "good" && s["status"]["summary"]["ready"] == "True")
    });
    assert_eq!(st["status"]["mode"], "Audit");
    assert!(st["status"]["enforcement"].is_null(), "{:#}", st["status"]);
    // Both profiles say so, naming the node, the other profile and which one applies.
    let t = overlapping(&c, "aaa-takeover", "True", &procs);
    assert_eq!(t["reason"], "MoreSpecificApplies");
    assert_eq!(
        t["message"],
        "node-a also selected by good: good applies there (its nodeSelector is more specific)"
    );
    let g = overlapping(&c, "good", "True", &procs);
    assert_eq!(g["reason"], "MoreSpecificApplies");
    assert!(g["message"]
        .as_str()
        .unwrap()
        .starts_with("node-a also selected by aaa-takeover: this profile applies"));
    // One Event regarding each, naming the node and the other profile.
    for (me, other) in [("aaa-takeover", "good"), ("good", "aaa-takeover")] {
        let ev = c.wait_until(&format!("overlap Event about {me}"), &procs, || overlap_events(&c, me).pop());
        assert_eq!(
            (ev["type"].as_str(), ev["regarding"]["kind"].as_str()),
            (Some("Warning"), Some("RoceProfile"))
        );
        let note = ev["note"].as_str().unwrap();
        assert!(note.contains(NODE) && note.contains(other), "{note}");
    }
    c.wait("roceprofiles", "good", "good counts the node", &procs, |p| {
        p.is_some_and(|p| p["status"]["nodesMatched"] == 1 && p["status"]["nodesCompliant"] == 1)
    });
    assert_eq!(c.get("roceprofiles", "aaa-takeover").unwrap()["status"]["nodesMatched"], 0);

    // A tie: `b-rack` is neither more nor less specific than `good`. It sorts first and
    // asks to enforce PFC on priority 4; the node is checked against it in Audit only.
    c.create(profile(
        "b-rack",
        json!({"nodeSelector": {"rack": "a"}, "mode": "Enforce", "pfc": {"priorities": [4]}}),
    ));
    let st = c.wait("rdmanodestates", NODE, "checked against b-rack", &procs, |s| {
        s.is_some_and(|s| s["status"]["profile"] == "b-rack")
    });
    assert_eq!(st["status"]["mode"], "Audit", "a tie is never enforced");
    assert!(st["status"]["enforcement"].is_null(), "{:#}", st["status"]);
    let pfc =
        st["status"]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "pfc").cloned().unwrap();
    assert_eq!(pfc["result"], "Fail", "PFC left as it was: {pfc}");
    for me in ["aaa-takeover", "good", "b-rack"] {
        let cond = c.wait("roceprofiles", me, "tie reported", &procs, |p| {
            p.and_then(|p| condition(p, "Overlapping")).is_some_and(|c| c["reason"] == "SelectorTie")
        });
        let msg = condition(&cond, "Overlapping").unwrap()["message"].as_str().unwrap().to_string();
        assert!(msg.contains("checked against b-rack in Audit, no profile enforced there"), "{me}: {msg}");
    }
    c.wait_until("an Event about b-rack", &procs, || overlap_events(&c, "b-rack").pop());
    assert!(agent.log().contains("none is more specific"), "{}", agent.log());
    // Once per change, not per pass: two for the first overlap, three for the tie, and
    // no more while it stands (the controller passes every second).
    let count = || c.events().iter().filter(|e| e["reason"] == "OverlappingProfiles").count();
    c.wait_until("five overlap Events", &procs, || (count() == 5).then_some(()));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(count(), 5);

    // Resolved: the others deleted, `good` applies alone and its condition turns False.
    c.delete("roceprofiles", "b-rack");
    c.delete("roceprofiles", "aaa-takeover");
    let g = overlapping(&c, "good", "False", &procs);
    assert_eq!((g["reason"].as_str(), g["message"].as_str()), (Some("NoOverlap"), Some("")));
    c.wait("rdmanodestates", NODE, "back on good", &procs, |s| {
        s.is_some_and(|s| s["status"]["profile"] == "good")
    });
}

#[test]
fn the_api_server_refuses_global_pause_with_pfc_naming_both_fields() {
    let c = Cluster::new(&[]);
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(c.client.clone(), &resource("roceprofiles"));
    let create = |spec: Value| {
        let obj: kube::api::DynamicObject = serde_json::from_value(profile("pause", spec)).unwrap();
        c.rt.block_on(api.create(&Default::default(), &obj))
    };
    match create(json!({"globalPause": true, "pfc": {"priorities": [3]}})) {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains(kube_rdma_operator::validate::RULE_GLOBAL_PAUSE_NOT_WITH_PFC.message),
                "{}",
                s.message
            );
        }
        other => panic!("globalPause with PFC was not refused: {other:?}"),
    }
    assert!(c.get("roceprofiles", "pause").is_none(), "nothing created");
    // Link-level pause alone is a valid (lossy-fabric) profile.
    create(json!({"globalPause": true})).unwrap();
}

/// Requests to our resources the server counted (`apiserver_request_total`), watches aside.
fn our_requests(c: &Cluster) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for ((verb, res, sub, code), n) in c.requests() {
        if verb == "WATCH" || !["nodes", "rdmanodestates", "roceprofiles", "events"].contains(&res.as_str()) {
            continue;
        }
        *out.entry(format!("{verb} {res}{}{} {code}", if sub.is_empty() { "" } else { "/" }, sub))
            .or_insert(0.0) += n;
    }
    out
}

fn delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

#[test]
fn an_idle_agent_sends_only_heartbeats() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, false, &["--heartbeat", "3"]);
    c.wait("rdmanodestates", NODE, "published", &[&agent], |s| ready(s, "True"));
    c.wait("nodes", NODE, "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready").is_some())
    });
    // Settle, then 10 s of idle traffic as kube-apiserver counts it (the agent polls its
    // adapters every second and reads the API through its watches only); the test sends
    // nothing in between.
    std::thread::sleep(Duration::from_secs(2));
    let before = our_requests(&c);
    std::thread::sleep(Duration::from_secs(10));
    let d = delta(&before, &our_requests(&c));
    let hb = d.iter().find(|(k, _)| k == "APPLY rdmanodestates/status 200").map_or(0.0, |(_, n)| *n);
    assert_eq!(d.len(), usize::from(hb > 0.0), "only heartbeats at idle: {d:?}");
    // One every 3 s (+ up to 10 %): 3 or 4 in 10 s.
    assert!((2.0..=4.0).contains(&hb), "{hb} heartbeats in 10 s\n{}", agent.log());
}

#[test]
fn throttled_agents_wait_as_long_as_the_server_asks() {
    // kube-apiserver's own in-flight limit: one mutating request at a time for users outside
    // system:masters, the rest answered 429 with Retry-After: 1 (maxinflight.go).
    let nodes: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    let labelled: Vec<(&str, Value)> = nodes.iter().map(|n| (n.as_str(), json!({}))).collect();
    let c = Cluster::with_args(
        &[
            "--enable-priority-and-fairness=false",
            "--max-mutating-requests-inflight=1",
            "--max-requests-inflight=2",
        ],
        &labelled,
    );
    let objs = chart_objects(false);
    let rbac: Vec<Value> = objs
        .into_iter()
        .filter(|o| {
            matches!(o["kind"].as_str(), Some("ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"))
                && o["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
        })
        .collect();
    c.service_account("kube-rdma", "kube-rdma-agent");
    c.kubectl_apply(&rbac);
    // A writer outside system:masters (which the limit exempts) keeps the one mutating slot
    // busy while the agents start, so their writes meet 429 on a fast machine too: eight
    // agents alone rarely overlap where a write takes a millisecond (CI saw none).
    c.service_account("kube-rdma", "busy-writer");
    c.kubectl_apply(&[
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "busy-writer", "namespace": "kube-rdma"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "busy-writer", "namespace": "kube-rdma"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "busy-writer"},
               "subjects": [{"kind": "ServiceAccount", "name": "busy-writer", "namespace": "kube-rdma"}]}),
    ]);
    let busy = BusyWriter::start(&c.service_account_kubeconfig("kube-rdma", "busy-writer", None));
    let agents: Vec<Proc> = nodes
        .iter()
        .map(|n| {
            let kc = c.service_account_kubeconfig("kube-rdma", "kube-rdma-agent", Some(n));
            let sim = c.sim(n, "cx6dx-dual", |_| {});
            c.agent_as(n, &sim, false, &[], Some(&kc))
        })
        .collect();
    let procs: Vec<&Proc> = agents.iter().collect();
    // The retries of writes the server throttled (watches back off on their own schedule).
    let throttled = || -> Vec<String> {
        agents
            .iter()
            .flat_map(|a| {
                strip_ansi(&a.log())
                    .lines()
                    .filter(|l| l.contains("API call failed; retrying") && l.contains("TooManyRequests"))
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // The writer holds the slot until an agent has been throttled, then gives it up: every
    // agent must still publish, on the server's schedule.
    c.wait_until("an agent's write answered 429", &procs, || (!throttled().is_empty()).then_some(()));
    let (writes, refused) = busy.stop();
    assert!(refused > 0, "the busy writer was never refused in {writes} writes: no limit in force");
    for n in &nodes {
        c.wait("rdmanodestates", n, "published despite throttling", &procs, |s| ready(s, "True"));
    }
    let throttled = throttled();
    for l in &throttled {
        let ms: u64 = l
            .split("delay_ms=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(ms >= 1000, "retried after {ms} ms, the server asked for 1 s: {l}");
    }
}

/// Patches ConfigMaps in a loop from a few concurrent tasks as the holder of a
/// kubeconfig, counting its writes and the server's 429s, until stopped.
struct BusyWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

/// A failed test stops the writer too, rather than leave it writing to a server that is gone.
impl Drop for BusyWriter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl BusyWriter {
    fn start(kc: &std::path::Path) -> BusyWriter {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (kc, flag) = (kc.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let opts = kube_rdma_operator::kubectl::client::ClientOpts {
                    kubeconfig: Some(kc),
                    ..Default::default()
                };
                let client = kube_rdma_operator::kubectl::client::connect(&opts).await.unwrap();
                let api: kube::Api<kube::api::DynamicObject> =
                    kube::Api::namespaced_with(client, "kube-rdma", &resource("configmaps"));
                let tasks = (0..2).map(|t| {
                    let (api, flag) = (api.clone(), flag.clone());
                    tokio::spawn(async move {
                        let (mut writes, mut refused) = (0u64, 0u64);
                        let name = format!("busy-{t}");
                        let pp = kube::api::PatchParams::apply("busy-writer").force();
                        while !flag.load(Ordering::Relaxed) {
                            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": name}, "data": {"n": writes.to_string()}});
                            match api.patch(&name, &pp, &kube::api::Patch::Apply(&body)).await {
                                Err(kube::Error::Api(s)) if s.code == 429 => refused += 1,
                                _ => {}
                            }
                            writes += 1;
                        }
                        (writes, refused)
                    })
                });
                let mut total = (0, 0);
                for t in tasks.collect::<Vec<_>>() {
                    let (w, r) = t.await.unwrap();
                    total = (total.0 + w, total.1 + r);
                }
                total
            })
        });
        BusyWriter { stop, thread: Some(thread) }
    }

    /// Stops the writer: (writes sent, writes refused with 429).
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().map_or((0, 0), |t| t.join().unwrap())
    }
}

#[test]
fn an_enforce_profile_from_a_file_fixes_what_it_may_and_records_the_rest() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |d| {
        for pf in &mut d.adapters[0].pfs {
            pf.roce.ecn = vec![];
            pf.roce.cnp_priority = 3;
        }
        d.adapters[0].pfs[0].mtu = 1500;
    });
    let profile_file = c.dir.path().join("enforce.yaml");
    std::fs::write(
        &profile_file,
        "apiVersion: kuberdma.io/v1alpha1\nkind: RoceProfile\nmetadata: {name: enforce}\n\
         spec: {mode: Enforce, ecn: {priorities: [3]}, cnp: {dscp: 48, priority: 6}, minMtu: 4200}\n",
    )
    .unwrap();
    let agent = c.agent(NODE, &sim, false, &["--profile", &profile_file.display().to_string()]);
    let fixed = |s: &Value| {
        s["status"]["checks"].as_array().is_some_and(|cs| {
            ["ecn", "cnp"].iter().all(|n| {
                cs.iter().any(|c| c["interface"] == "ens1f0np0" && c["name"] == *n && c["result"] == "Pass")
            })
        })
    };
    let st = c.wait("rdmanodestates", NODE, "enforced", &[&agent], |s| s.is_some_and(fixed));
    let status = &st["status"];
    assert_eq!((status["profile"].as_str(), status["mode"].as_str()), (Some("enforce"), Some("Enforce")));
    let mtu = status["enforcement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["interface"] == "ens1f0np0" && r["setting"] == "mtu")
        .cloned()
        .unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(mtu["outcome"], "Refused");
    assert!(mtu["detail"].as_str().unwrap().contains("ip link set dev ens1f0np0 mtu 4200"), "{mtu}");
    // A fixed profile: the agent neither lists nor watches RoceProfiles.
    let after = c.requests();
    let profile_calls: f64 =
        after.iter().filter(|((_, r, _, _), _)| r == "roceprofiles").map(|(_, n)| n).sum();
    assert_eq!(profile_calls, 0.0, "no RoceProfile requests");
}

#[test]
fn a_node_name_of_253_characters_still_gets_its_state_label_and_event() {
    // The longest Node name there is (a DNS subdomain); the Event's reportingInstance
    // would be 269 characters before it is shortened (the server's limit is 128).
    let long = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
    assert_eq!(long.len(), 253);
    let c = Cluster::new(&[(long.as_str(), json!({}))]);
    let sim = c.sim(&long, "cx6dx-dual", |d| {
        for pf in &mut d.adapters[0].pfs {
            pf.roce.pfc = vec![];
        }
    });
    let agent = c.agent(&long, &sim, false, &[]);
    c.wait("rdmanodestates", &long, "state published", &[&agent], |s| ready(s, "False"));
    c.wait("nodes", &long, "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("false"))
    });
    let ev = c.wait_until("drift Event accepted", &[&agent], || {
        c.events().into_iter().find(|e| e["reason"] == "RoceDrift" && e["regarding"]["name"] == long.as_str())
    });
    assert!(ev["reportingInstance"].as_str().unwrap().len() <= 128, "{ev}");
    assert!(!agent.log().contains("Invalid"), "{}", agent.log());
}

/// The chart's objects that grant or limit API access, and its ServiceAccounts' namespace.
fn chart_access(upgrade: bool) -> Vec<Value> {
    chart_objects(upgrade)
        .into_iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                )
            )
        })
        .map(|mut o| {
            // Helm's hook annotations mean nothing to kubectl; the objects are the same.
            if let Some(a) = o["metadata"]["annotations"].as_object_mut() {
                a.retain(|k, _| !k.starts_with("helm.sh/"));
            }
            o
        })
        .collect()
}

/// `kubectl ARGS` as the holder of `kc`; exit status and stderr.
fn kubectl_as(c: &Cluster, kc: &std::path::Path, args: &[&str]) -> (bool, String) {
    let o = kube_rdma_e2e::apiserver::kubectl(kc).args(args).output().unwrap();
    let _ = c;
    (o.status.success(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn the_charts_service_accounts_may_do_their_jobs_and_nothing_more() {
    // n1 has a field of its own when created, as a kubelet-registered Node has many: the
    // server tracks managedFields from then on (an object created with none is not tracked
    // until its first server-side apply: apimachinery managedfields skipnonapplied.go).
    let c = Cluster::new(&[("n1", json!({"pool": "a"})), ("n2", json!({}))]);
    let _ = c.api.kubectl().args(["create", "namespace", "kube-rdma"]).output();
    c.kubectl_apply(&chart_access(false));
    // Policies are enforced once the API server has loaded them.
    std::thread::sleep(Duration::from_secs(3));
    let agent_kc = c.service_account_kubeconfig("kube-rdma", "kube-rdma-agent", Some("n1"));
    let ctl_kc = c.service_account_kubeconfig("kube-rdma", "kube-rdma-controller", None);
    let s1 = c.sim("n1", "cx6dx-dual", |_| {});
    let unlabelled = c.get("nodes", "n1").unwrap();
    let mut agent = c.agent_as("n1", &s1, false, &[], Some(&agent_kc));
    let ctl = c.controller_as(false, Some(&ctl_kc));
    c.wait("rdmanodestates", "n1", "state published under the chart's RBAC", &[&agent, &ctl], |s| {
        ready(s, "True")
    });
    let labelled = c.wait("nodes", "n1", "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    assert!(!agent.log().contains("Forbidden"), "{}", agent.log());
    // The policy does not hold metadata.managedFields (docs/security.md): the server itself
    // rewrote it for the admitted label write, adding the agent's entry.
    let managers = |n: &Value| -> Vec<String> {
        n["metadata"]["managedFields"]
            .as_array()
            .map(|a| a.iter().map(|m| m["manager"].as_str().unwrap_or("").to_string()).collect())
            .unwrap_or_default()
    };
    assert_ne!(labelled["metadata"]["managedFields"], unlabelled["metadata"]["managedFields"]);
    assert!(managers(&labelled).contains(&AGENT_MANAGER.to_string()), "{:?}", managers(&labelled));
    assert!(!managers(&unlabelled).contains(&AGENT_MANAGER.to_string()), "{:?}", managers(&unlabelled));

    // The agent's token (bound to a pod on n1): every other write is refused.
    let refused = [
        (
            vec!["label", "node", "n2", "kuberdma.io/roce-ready=true"],
            "may change only the node its pod runs on, not n2",
        ),
        (vec!["label", "node", "n1", "other=x"], "may change only the kuberdma.io/roce-ready label"),
        (vec!["label", "node", "n1", "kuberdma.io/roce-ready=unknown", "--overwrite"], "only to one of"),
        (vec!["annotate", "node", "n1", "x=y"], "may not change a node's spec, annotations, finalizers"),
        (
            vec![
                "patch",
                "node",
                "n1",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":["kuberdma.io/keep"]}}"#,
            ],
            "finalizers",
        ),
        (
            vec![
                "patch",
                "node",
                "n1",
                "--type=merge",
                "-p",
                r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"u"}]}}"#,
            ],
            "ownerReferences",
        ),
        // (`kubectl cordon` reports a denial but exits 0; the patch it sends, directly:)
        (vec!["patch", "node", "n1", "--type=merge", "-p", r#"{"spec":{"unschedulable":true}}"#], "spec"),
        (
            vec!["apply", "--server-side", "-f", "-"],
            "may write only the RdmaNodeState of the node its pod runs on, not n2",
        ),
        (vec!["get", "secrets", "-A"], "forbidden"),
        (vec!["delete", "rdmanodestate", "n1"], "forbidden"),
    ];
    for (args, want) in refused {
        let mut cmd = kube_rdma_e2e::apiserver::kubectl(&agent_kc);
        cmd.args(&args);
        let o = if args[0] == "apply" {
            use std::io::Write as _;
            let mut ch = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            ch.stdin.take().unwrap().write_all(br#"{"apiVersion":"kuberdma.io/v1alpha1","kind":"RdmaNodeState","metadata":{"name":"n2"},"spec":{"nodeName":"n2"}}"#).unwrap();
            ch.wait_with_output().unwrap()
        } else {
            cmd.output().unwrap()
        };
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "agent may {args:?}: {}{err}", String::from_utf8_lossy(&o.stdout));
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let node1 = c.get("nodes", "n1").unwrap();
    assert!(node1["metadata"]["finalizers"].is_null() && label(&node1, "other").is_none(), "{node1}");
    assert!(
        node1["spec"]["unschedulable"].is_null() && node1["metadata"]["ownerReferences"].is_null(),
        "{node1}"
    );

    // The controller's token: the label to unknown for a stale agent, nothing else.
    agent.kill();
    c.wait("nodes", "n1", "label unknown by the controller", &[&ctl], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("unknown"))
    });
    // (Patches as the controller sends them: kubectl would GET first, which it may not.)
    for (patch, node, want) in [
        (
            json!({"metadata": {"labels": {"kuberdma.io/roce-ready": "true"}}}),
            "n1",
            "only to one of ['unknown']",
        ),
        (
            json!({"metadata": {"labels": {"other": "x"}}}),
            "n2",
            "may change only the kuberdma.io/roce-ready label",
        ),
        (json!({"metadata": {"finalizers": ["kuberdma.io/keep"]}}), "n2", "finalizers"),
        (json!({"spec": {"unschedulable": true}}), "n2", "spec"),
    ] {
        let e = c.merge_as(&ctl_kc, "nodes", node, patch.clone()).unwrap_err();
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 403 && s.message.contains(want)),
            "controller {patch}: {e}"
        );
    }
    for (args, want) in [
        (vec!["get", "node", "n1"], "forbidden"),
        (vec!["create", "clusterrolebinding", "x", "--clusterrole=cluster-admin", "--user=me"], "forbidden"),
    ] {
        let (ok, err) = kubectl_as(&c, &ctl_kc, &args);
        assert!(!ok && err.contains(want), "controller {args:?}: {err}");
    }

    // The controller's other writes under its ServiceAccount: a profile it cannot decode gets
    // its Valid condition (roceprofiles/status patch) and an Event (events create in default).
    a_profile_of_a_newer_release(&c, "a-newer");
    let p = c.wait("roceprofiles", "a-newer", "Valid False by the controller", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["conditions"][0]["status"] == "False")
    });
    assert_eq!(p["status"]["conditions"][0]["reason"], "CannotDecode", "{p}");
    let ev = c.wait_until("InvalidProfile Event by the controller", &[&ctl], || {
        c.events()
            .into_iter()
            .find(|e| e["reason"] == "InvalidProfile" && e["regarding"]["name"] == "a-newer")
    });
    assert_eq!(ev["metadata"]["namespace"], "default", "{ev}");
    // A deleted Node: its state is deleted by the controller (rdmanodestates delete; this
    // control plane runs no garbage collector to act on the state's owner reference).
    assert!(c.get("rdmanodestates", "n1").is_some());
    c.delete("nodes", "n1");
    c.wait("rdmanodestates", "n1", "state of the deleted node deleted", &[&ctl], |s| s.is_none());
    c.wait_until("the controller says it deleted it", &[&ctl], || {
        strip_ansi(&ctl.log()).contains("deleted RdmaNodeState of a deleted node").then_some(())
    });
    for p in [&agent, &ctl] {
        let log = strip_ansi(&p.log());
        assert!(!log.contains("Forbidden") && !log.contains("forbidden"), "{log}");
    }

    // The CRD upgrade hook's account: server-side apply creates a CRD that is missing.
    c.kubectl_apply(
        &chart_access(true)
            .into_iter()
            .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "crd-upgrade")
            .collect::<Vec<_>>(),
    );
    c.delete("customresourcedefinitions", "roceprofiles.kuberdma.io");
    c.wait("customresourcedefinitions", "roceprofiles.kuberdma.io", "CRD gone", &[], |v| v.is_none());
    // Any other account is refused, and told so on one line as kubectl would.
    let o = operator().args(["crds", "--apply", "--kubeconfig"]).arg(&ctl_kc).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "kube-rdma-operator: server-side apply of CustomResourceDefinition rdmanodestates.kuberdma.io: \
             Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io \"rdmanodestates.kuberdma.io\" is forbidden: \
             User \"system:serviceaccount:kube-rdma:kube-rdma-controller\" cannot patch resource"
        ),
        "{err}"
    );
    assert!(!err.contains("Status {") && !err.contains("ApiError"), "{err}");
    let hook_kc = c.service_account_kubeconfig("kube-rdma", "kube-rdma-crd-upgrade", None);
    for attempt in 1..=2 {
        let o = operator().args(["crds", "--apply", "--kubeconfig"]).arg(&hook_kc).output().unwrap();
        assert!(o.status.success(), "hook apply #{attempt}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(c.get("customresourcedefinitions", "roceprofiles.kuberdma.io").is_some());
    let (ok, err) = kubectl_as(&c, &hook_kc, &["delete", "crd", "roceprofiles.kuberdma.io"]);
    assert!(!ok && err.contains("forbidden"), "{err}");
}

/// etcd stopped with SIGSTOP until dropped (SIGCONT): kube-apiserver keeps serving
/// what its watch cache holds, and every request that needs etcd waits out the
/// server's request timeout: a write is answered 504 Timeout (k8s.io/apiserver
/// `pkg/endpoints/handlers/finisher`), a read from etcd gets its connection closed.
struct EtcdFrozen(i32);

impl EtcdFrozen {
    fn new(c: &Cluster) -> Self {
        let pid = c.api.etcd.pid;
        let o = std::process::Command::new("kill").args(["-STOP", &pid.to_string()]).output().unwrap();
        assert!(o.status.success(), "SIGSTOP etcd: {}", String::from_utf8_lossy(&o.stderr));
        EtcdFrozen(pid)
    }
}

impl Drop for EtcdFrozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-CONT", &self.0.to_string()]).output();
    }
}

/// The retries of `with_backoff` after a 504 in `proc`'s log: (attempt, delay in ms).
fn timeout_retries(proc: &Proc) -> Vec<(u32, u64)> {
    let field = |l: &str, k: &str| -> Option<u64> {
        l.split(&format!("{k}=")).nth(1)?.split_whitespace().next()?.trim_matches('"').parse().ok()
    };
    strip_ansi(&proc.log())
        .lines()
        .filter(|l| l.contains("API call failed; retrying") && l.contains("Error from server (Timeout)"))
        .filter_map(|l| Some((field(l, "attempt")? as u32, field(l, "delay_ms")?)))
        .collect()
}

#[test]
fn server_errors_are_backed_off_counted_and_the_state_is_right_once_the_server_recovers() {
    // A 4 s request timeout, so a write that waits on a stopped etcd is answered within seconds.
    let c = Cluster::with_args(&["--request-timeout=4s"], &[(NODE, json!({"gpu": "yes"}))]);
    c.create(profile("gpu", json!({"nodeSelector": {"gpu": "yes"}, "pfc": {"priorities": [3]}})));
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let ctl = c.controller(true);
    let agent = c.agent(NODE, &sim, true, &[]);
    let (am, cm) = (agent.metrics_addr(), ctl.metrics_addr());
    let fresh = c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    c.wait("roceprofiles", "gpu", "compliant", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 1)
    });
    c.wait("nodes", NODE, "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    let server_errors = |addr| {
        http_get(addr, "/metrics").and_then(|(_, b)| sample(&b, "kuberdma_api_errors_total{kind=\"server\"}"))
    };
    assert_eq!((server_errors(am), server_errors(cm)), (Some(0.0), Some(0.0)));

    // etcd stops: the agent's heartbeats (every 2 s) and the controller's Stale mark (no
    // heartbeat for 4 s) are answered 504 by kube-apiserver itself.
    let frozen_at = kube_rdma_operator::status::now_rfc3339();
    let frozen = EtcdFrozen::new(&c);
    c.wait_until("the agent retried a 504 twice and the controller once", &[&agent, &ctl], || {
        let (a, k) = (timeout_retries(&agent), timeout_retries(&ctl));
        (a.iter().any(|(n, _)| *n >= 2) && !k.is_empty()).then_some(())
    });
    for (who, addr) in [("agent", am), ("controller", cm)] {
        let n = server_errors(addr).unwrap();
        assert!(n >= 1.0, "{who}: kuberdma_api_errors_total{{kind=\"server\"}} {n}");
    }
    let (code, body) = eventually("the agent unhealthy while its writes fail", &[&agent], || {
        http_get(am, "/healthz").filter(|r| r.0 == 503)
    });
    assert!(body.contains("Timeout"), "{code}: {body}");
    // kubectl rdma meanwhile: an API error is kubectl's exit 1, on one line in kubectl's words.
    let (code, out, err) = kubectl(&c, &["status"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let kubectls = ["Error from server (", "Unable to connect to the server: "];
    assert!(kubectls.iter().any(|w| err.starts_with(w)) && !err.contains("Status {"), "{err}");
    drop(frozen);

    // Back-off: each retry waits initial·2ⁿ⁻¹ (500 ms, 1 s, 2 s, ... up to 8 s), shortened
    // by up to half for jitter, never less.
    for p in [&agent, &ctl] {
        for (attempt, ms) in timeout_retries(p) {
            let base = (500u64 << (attempt - 1).min(5)).min(8000);
            assert!((base / 2..=base).contains(&ms), "attempt {attempt} waited {ms} ms\n{}", p.log());
        }
    }

    // Recovered: a heartbeat after the outage, not Stale, the agent's conditions and the
    // label as before, the profile counted compliant; both healthy.
    let st =
        c.wait("rdmanodestates", NODE, "a heartbeat after the outage, not stale", &[&agent, &ctl], |s| {
            s.is_some_and(|s| {
                s["status"]["lastHeartbeatTime"].as_str().is_some_and(|t| t > frozen_at.as_str())
                    && condition(s, "Stale").is_none_or(|c| c["status"] == "False")
            })
        });
    assert_eq!(agent_conditions(&st), agent_conditions(&fresh));
    assert_eq!(st["status"]["summary"], fresh["status"]["summary"]);
    assert_eq!(st["status"]["checks"], fresh["status"]["checks"]);
    c.wait("nodes", NODE, "label true", &[&agent, &ctl], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    c.wait("roceprofiles", "gpu", "compliant again", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 1 && p["status"]["nodesStale"] == 0)
    });
    for (who, addr, p) in [("agent", am, &agent), ("controller", cm, &ctl)] {
        eventually(&format!("{who} healthy again"), &[p], || {
            http_get(addr, "/healthz").filter(|r| r.0 == 200)
        });
    }
}
