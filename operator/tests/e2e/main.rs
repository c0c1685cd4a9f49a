//! End to end through the production path: the real executables against the API
//! emulator over TLS, configured by kubeconfig (`KUBECONFIG`, `--kubeconfig`,
//! `--context`) as users run them. Each test has its own emulator and processes.
mod harness;

use std::time::Duration;

use harness::*;
use kube_rdma_apiemu::{Fault, CONTEXT, OTHER_CONTEXT};
use serde_json::{json, Value};

const NODE: &str = "node-a";

fn ready(v: Option<&Value>, want: &str) -> bool {
    v.is_some_and(|s| s["status"]["summary"]["ready"] == want)
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
    assert_eq!(st["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(condition(&st, "Drifted").unwrap()["status"], "True");
    let n = c.wait("nodes", NODE, "node labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("false"))
    });
    assert_eq!(label(&n, "gpu"), Some("yes"), "other labels kept");
    let ev = c.wait_until("drift Event", &[&agent], |_| {
        c.events().into_iter().find(|e| e["reason"] == "RoceDrift" && e["regarding"]["name"] == NODE)
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["regarding"]["kind"], "Node");
    let note = ev["note"].as_str().unwrap();
    assert!(note.contains("ens1f0np0/pfc: want 3, have none"), "{note}");

    // kubectl rdma reads it with --kubeconfig and --context, and exits 1: not ready.
    let (code, out, err) = kubectl(&c, &["--context", CONTEXT, "status"]);
    assert_eq!(code, 1, "{out}{err}");
    let row: Vec<&str> = out.lines().find(|l| l.starts_with(NODE)).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], [NODE, "False", "False", "default"], "{out}");
    assert!(row[5].contains("ens1f0np0/pfc"), "{out}");
    assert!(out.contains("1 of 1 nodes not ready: node-a"), "{out}");
    let (code, out, _) = kubectl(&c, &["--context", CONTEXT, "status", NODE]);
    assert_eq!(code, 1);
    assert!(
        out.contains("REMEDIATION (in this order)\n  dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on"),
        "{out}"
    );
    assert!(out.contains("NETNS exclusive"), "{out}");
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
fn a_deleted_state_and_a_removed_label_come_back_within_seconds() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, false, &[]);
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    c.wait("nodes", NODE, "labelled", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });

    c.emu.store().delete("rdmanodestates", None, NODE).unwrap();
    let t0 = std::time::Instant::now();
    let st = c.wait("rdmanodestates", NODE, "state recreated", &[&agent], |s| ready(s, "True"));
    assert!(t0.elapsed() < Duration::from_secs(5), "recreated after {:?}", t0.elapsed());
    assert!(st["status"]["checks"].as_array().is_some_and(|a| !a.is_empty()));

    c.emu
        .store()
        .update("nodes", None, NODE, |n| {
            n["metadata"]["labels"].as_object_mut().map(|l| l.remove("kuberdma.io/roce-ready"));
        })
        .unwrap();
    let t0 = std::time::Instant::now();
    c.wait("nodes", NODE, "label restored", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    assert!(t0.elapsed() < Duration::from_secs(5), "restored after {:?}", t0.elapsed());

    // KUBECONFIG with an explicit --context of the file's second user also reads it.
    let o = kubectl_rdma()
        .env("KUBECONFIG", c.kubeconfig())
        .args(["--context", OTHER_CONTEXT, "status"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.lines().any(|l| l.starts_with(NODE) && l.contains("True")), "{out}");
}

#[test]
fn the_agent_survives_conflicts_server_errors_dropped_and_expired_watches() {
    let c = Cluster::new(&[(NODE, json!({"pool": "a"}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, true, &[]);
    let metrics = agent.metrics_addr();
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));

    // Conflicts and server errors on the writes, dropped and expired watches.
    let f = c.emu.faults();
    let conflicts = f.add(
        Fault::conflict().path_prefix("/apis/kuberdma.io/v1alpha1/rdmanodestates").not_watches().times(2),
    );
    let errors = f.add(
        Fault::internal_error()
            .path_prefix("/apis/kuberdma.io/v1alpha1/rdmanodestates")
            .not_watches()
            .times(2),
    );
    f.add(Fault::drop_watch_after(0).times(3));
    f.add(Fault::expire_watch_after(0).times(3));
    c.emu.disconnect_watches();
    c.emu.compact();

    // A new profile for this node: the agent must see it through the watch and write
    // the new checks through the faults.
    c.emu
        .store()
        .create(profile("pool-a", json!({"nodeSelector": {"pool": "a"}, "pfc": {"priorities": [4]}})))
        .unwrap();
    let st = c.wait("rdmanodestates", NODE, "checked against the new profile", &[&agent], |s| {
        s.is_some_and(|s| s["status"]["profile"] == "pool-a" && s["status"]["summary"]["ready"] == "False")
    });
    assert!(st["status"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "pfc" && c["result"] == "Fail"));
    assert_eq!(f.fired(conflicts), 2);
    assert_eq!(f.fired(errors), 2);
    let text = eventually("error metrics", &[&agent], || {
        http_get(metrics, "/metrics").map(|(_, b)| b).filter(|b| {
            sample(b, "kuberdma_api_errors_total{kind=\"conflict\"}").is_some_and(|v| v >= 2.0)
                && sample(b, "kuberdma_api_errors_total{kind=\"server\"}").is_some_and(|v| v >= 2.0)
        })
    });
    assert!(sample(&text, "kuberdma_agent_last_success_timestamp_seconds").unwrap() > 1.0e9, "{text}");
    // Still alive, still healthy, and the label followed.
    c.wait("nodes", NODE, "label false", &[&agent], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("false"))
    });
    // The label lands during the pass that records the success: healthy right after it.
    eventually("healthy again", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
}

#[test]
fn healthz_reports_an_unreachable_api_server_and_recovers() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, true, &[]);
    let metrics = agent.metrics_addr();
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    // The first pass is complete (label written, success recorded) and healthy.
    eventually("a successful pass", &[&agent], || {
        let m = http_get(metrics, "/metrics")?.1;
        sample(&m, "kuberdma_agent_last_success_timestamp_seconds").filter(|t| *t > 0.0)
    });
    eventually("healthy", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
    let down = c.emu.faults().add(Fault::unavailable());
    c.emu.disconnect_watches();
    let (_, body) = eventually("unhealthy while the API is down", &[&agent], || {
        http_get(metrics, "/healthz").filter(|r| r.0 == 503)
    });
    assert!(body.contains("API server"), "{body}\n{}", agent.log());
    assert!(body.contains("503") || body.contains("ServiceUnavailable"), "names the failure: {body}");
    c.emu.faults().remove(down);
    eventually("healthy again", &[&agent], || http_get(metrics, "/healthz").filter(|r| r.0 == 200));
    let (_, m) = http_get(metrics, "/metrics").unwrap();
    assert!(sample(&m, "kuberdma_api_errors_total{kind=\"server\"}").unwrap() >= 1.0, "{m}");
    assert!(sample(&m, "kuberdma_node_roce_ready").is_some(), "{m}");
}

#[test]
fn the_controller_counts_profiles_and_marks_a_dead_agent_stale_until_it_reports_again() {
    let c = Cluster::new(&[("n1", json!({"gpu": "yes"})), ("n2", json!({"gpu": "yes"}))]);
    c.emu
        .store()
        .create(profile("gpu", json!({"nodeSelector": {"gpu": "yes"}, "pfc": {"priorities": [3]}})))
        .unwrap();
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
    assert_eq!(p["status"]["conditions"][0]["status"], "True");
    // Heartbeats (every 2 s) keep a live agent from going stale (after 4 s).
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        condition(&c.get("rdmanodestates", "n1").unwrap(), "Stale").is_none_or(|s| s["status"] == "False")
    );

    // A dead agent: Stale, READY Unknown, label unknown, counted as stale.
    a2.kill();
    let st = c.wait("rdmanodestates", "n2", "marked stale", &[&ctl], |s| {
        s.is_some_and(|s| condition(s, "Stale").is_some_and(|c| c["status"] == "True"))
    });
    // The controller writes only its Stale condition: the agent's last READY stays.
    assert_eq!(st["status"]["summary"]["ready"], "True");
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
    assert_eq!(sample(&m, "kuberdma_profile_nodes{profile=\"gpu\",state=\"matched\"}"), Some(2.0), "{m}");
    assert_eq!(http_get(cm, "/healthz").map(|r| r.0), Some(200));

    // It comes back: fresh heartbeat, Stale False, ready and labelled again.
    let a2 = c.agent("n2", &s2, false, &[]);
    c.wait("rdmanodestates", "n2", "fresh again", &[&ctl, &a2], |s| {
        s.is_some_and(|s| {
            s["status"]["summary"]["ready"] == "True"
                && condition(s, "Stale").is_none_or(|c| c["status"] == "False")
        })
    });
    c.wait("nodes", "n2", "label true", &[&ctl, &a2], |n| {
        n.is_some_and(|n| label(n, "kuberdma.io/roce-ready") == Some("true"))
    });
    c.wait("roceprofiles", "gpu", "compliant again", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 2 && p["status"]["nodesStale"] == 0)
    });
    drop(a1);
}

#[test]
fn a_profile_that_cannot_be_decoded_is_reported_by_name_and_skipped() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    // Sorted before `good`, and written for a newer CRD (an enum value this version lacks).
    c.emu
        .store()
        .create(profile("a-newer", json!({"mode": "Remediate", "pfc": {"priorities": [4]}})))
        .unwrap();
    c.emu.store().create(profile("good", json!({"pfc": {"priorities": [3]}}))).unwrap();
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
    let ev = c.wait_until("InvalidProfile Event", &[&ctl], |_| {
        c.events().into_iter().find(|e| e["reason"] == "InvalidProfile")
    });
    assert_eq!(ev["regarding"]["name"], "a-newer");
    assert_eq!(ev["regarding"]["kind"], "RoceProfile");
    assert!(agent.log().contains("a-newer"), "the agent names what it skips: {}", agent.log());
    c.wait("roceprofiles", "good", "good counted", &[&ctl], |p| {
        p.is_some_and(|p| p["status"]["nodesCompliant"] == 1)
    });
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
    // Settle, then watch 10 s of idle traffic (the agent polls its node every second).
    std::thread::sleep(Duration::from_secs(2));
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let reqs: Vec<_> = c.emu.log().since(t0).into_iter().filter(|r| !r.watch).collect();
    let hb = reqs
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/rdmanodestates/node-a/status"))
        .count();
    assert!(
        reqs.len() == hb,
        "only heartbeats at idle: {:?}",
        reqs.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>()
    );
    // One every 3 s (+ up to 10 %): 3 or 4 in 10 s.
    assert!((2..=4).contains(&hb), "{hb} heartbeats in 10 s\n{}", agent.log());
    let st = c.get("rdmanodestates", NODE).unwrap();
    assert!(st["status"]["lastHeartbeatTime"].is_string());
}

#[test]
fn throttling_waits_as_long_as_the_server_asks() {
    let c = Cluster::new(&[(NODE, json!({}))]);
    let path = format!("/apis/kuberdma.io/v1alpha1/rdmanodestates/{NODE}/status");
    let throttle =
        c.emu.faults().add(Fault::too_many_requests(2).path(&path).method(http::Method::PATCH).times(1));
    let sim = c.sim(NODE, "cx6dx-dual", |_| {});
    let agent = c.agent(NODE, &sim, false, &[]);
    c.wait("rdmanodestates", NODE, "state published", &[&agent], |s| ready(s, "True"));
    assert_eq!(c.emu.faults().fired(throttle), 1);
    // The log records a status once the answer is sent, just after the store changed.
    let writes = eventually("answered writes in the log", &[&agent], || {
        let w: Vec<_> =
            c.emu.log().records().into_iter().filter(|r| r.method == "PATCH" && r.path == path).collect();
        (w.len() >= 2 && w[1].status != 0).then_some(w)
    });
    assert_eq!(writes[0].status, 429);
    assert_eq!(writes[1].status, 200);
    let waited = writes[1].at - writes[0].at;
    assert!(waited >= Duration::from_secs(2), "retried after {waited:?}, the server asked for 2 s");
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
    let profile_arg = profile_file.display().to_string();
    let agent = c.agent(NODE, &sim, false, &["--profile", &profile_arg]);
    // The description has ECN off and CNPs on priority 3: a pass that sees them
    // on priority 6 with ECN on read back what Enforce wrote into the node's sysfs.
    let fixed = |s: &Value| {
        s["status"]["checks"].as_array().is_some_and(|cs| {
            ["ecn", "cnp"].iter().all(|n| {
                cs.iter().any(|c| c["interface"] == "ens1f0np0" && c["name"] == *n && c["result"] == "Pass")
            })
        })
    };
    let st = c.wait("rdmanodestates", NODE, "enforced", &[&agent], |s| s.is_some_and(fixed));
    let status = &st["status"];
    assert_eq!(status["profile"], "enforce");
    assert_eq!(status["mode"], "Enforce");
    let rec = |iface: &str, setting: &str| {
        status["enforcement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["interface"] == iface && r["setting"] == setting)
            .cloned()
            .unwrap_or_else(|| panic!("{iface}/{setting}: {status:#}"))
    };
    // `enforcement` is the last run's: ECN and CNP are in place now, the MTU is refused.
    let mtu = rec("ens1f0np0", "mtu");
    assert_eq!(mtu["outcome"], "Refused");
    assert!(mtu["detail"].as_str().unwrap().contains("ip link set dev ens1f0np0 mtu 4200"), "{mtu}");
    // What was applied now passes; the refused MTU still fails.
    let check = |name: &str| {
        status["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["interface"] == "ens1f0np0" && c["name"] == name)
            .unwrap()["result"]
            .clone()
    };
    assert_eq!(check("ecn"), "Pass");
    assert_eq!(check("cnp"), "Pass");
    assert_eq!(check("mtu"), "Fail");
    // A fixed profile: the agent does not watch RoceProfiles.
    assert!(
        c.emu.log().records().iter().all(|r| !r.path.contains("roceprofiles")),
        "no RoceProfile requests"
    );
}
