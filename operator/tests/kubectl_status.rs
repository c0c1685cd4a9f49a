//! `kubectl rdma status` views against a scripted API server: one line per node with
//! heartbeat age and staleness, the named nodes in detail with their remediation in
//! execution order, a named node without state reported as not found, and `-l`
//! selecting Nodes by label (those without a state shown as such).
mod common;

use common::{client, expect, list};
use kube_rdma_operator::checks::default_profile;
use kube_rdma_operator::crd::{RdmaNodeState, RdmaNodeStateSpec};
use kube_rdma_operator::fixtures::{example, with_roce, SimNode};
use kube_rdma_operator::kubectl::view::{details, fetch, summary_table, Detail, Selection};
use kube_rdma_operator::status::evaluate;
use serde_json::json;

fn state(desc: &nic::simdesc::NodeDesc, heartbeat: &str) -> serde_json::Value {
    let n = SimNode::new(desc);
    let mut s = RdmaNodeState::new(&desc.node, RdmaNodeStateSpec { node_name: desc.node.clone() });
    let mut st = evaluate(&default_profile(), &n.read());
    st.last_heartbeat_time = Some(heartbeat.into());
    s.status = Some(st);
    serde_json::to_value(s).unwrap()
}

fn t(s: &str) -> k8s_openapi::jiff::Timestamp {
    s.parse().unwrap()
}

#[tokio::test]
async fn all_nodes_one_line_each_with_heartbeat_age_and_failing_checks() {
    let (client, mut h) = client();
    let bad = state(&with_roce(example("cx6dx-dual"), |r| r.pfc = vec![]), "2026-11-30T01:00:00Z");
    let mut good = state(&example("e810-xxv"), "2026-11-30T01:07:00Z");
    good["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Stale", "status": "True", "reason": "NoHeartbeat", "message": ""}));
    let server = tokio::spawn(async move {
        let items = vec![
            good,
            bad,
            json!({"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": "new"}, "spec": {"nodeName": "new"}}),
        ];
        expect(
            &mut h,
            "GET",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates?",
            200,
            list("kuberdma.io/v1alpha1", "RdmaNodeState", items),
        )
        .await;
    });
    let reports = fetch(client, &Selection::All, None).await.unwrap().reports;
    server.await.unwrap();
    let out = summary_table(&reports, false, t("2026-11-30T01:10:00Z"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NODE", "READY", "STALE", "PROFILE", "PASS/TOTAL", "FAILING", "HEARTBEAT"]
    );
    let cx: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cx[..4], ["cx6dx-dual", "False", "False", "default"]);
    assert!(cx[5].starts_with("ens1f0np0/pfc,ens1f0np0/chain-tos-pfc"), "{out}");
    assert_eq!(cx[6], "10m", "{out}");
    let e8: Vec<&str> = lines[2].split_whitespace().collect();
    // The agent's summary.ready says True, but its agent is stale: READY Unknown.
    assert_eq!(e8[..3], ["e810-xxv", "Unknown", "True"], "stale shows: {out}");
    assert_eq!(e8[6], "3m");
    assert_eq!(lines[3].split_whitespace().take(3).collect::<Vec<_>>(), ["new", "Unknown", "-"]);
    assert!(lines[3].contains("no status yet"), "{out}");
    let ready: Vec<bool> = reports.iter().map(|r| r.ready()).collect();
    assert_eq!(ready, [false, false, false], "drifted, stale, no status");
    let wide = summary_table(&reports, true, t("2026-11-30T01:10:00Z"));
    let wide_lines: Vec<&str> = wide.lines().collect();
    assert_eq!(
        wide_lines[0].split_whitespace().collect::<Vec<_>>(),
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
        ]
    );
    // The narrow table's columns as they were, then the summary's and the netns mode.
    assert_eq!(wide_lines.len(), lines.len());
    for (w, l) in wide_lines.iter().zip(&lines) {
        assert!(w.starts_with(l.trim_end()), "{w:?} does not extend {l:?}");
    }
    let last6 = |line: &str| {
        let t: Vec<String> = line.split_whitespace().map(String::from).collect();
        t[t.len() - 6..].to_vec()
    };
    for (line, r) in wide_lines[1..3].iter().zip(&reports) {
        let s = r.state.as_ref().unwrap().status.as_ref().unwrap();
        let want = [&s.summary.pfc, &s.summary.trust, &s.summary.ecn, &s.summary.mtu, &s.summary.roce]
            .map(|v| v.to_string());
        assert_eq!(last6(line)[..5], want, "{wide}");
        assert_eq!(last6(line)[5], s.netns_mode.as_str(), "{wide}");
    }
    // A node without status: a dash in every wide column.
    assert_eq!(last6(wide_lines[3]), ["-"; 6], "{wide}");
}

#[tokio::test]
async fn named_nodes_in_detail_with_remediation_in_order_and_a_node_without_state_not_found() {
    let (client, mut h) = client();
    let bad = state(
        &with_roce(example("cx6dx-dual"), |r| {
            r.pfc = vec![];
            r.global_pause = true;
        }),
        "2026-11-30T01:00:00Z",
    );
    let server = tokio::spawn(async move {
        expect(&mut h, "GET", "/apis/kuberdma.io/v1alpha1/rdmanodestates/cx6dx-dual", 200, bad).await;
        expect(
            &mut h,
            "GET",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates/nope",
            404,
            common::status_err(404, "NotFound"),
        )
        .await;
    });
    let fetched =
        fetch(client, &Selection::Named(vec!["cx6dx-dual".into(), "nope".into()]), None).await.unwrap();
    server.await.unwrap();
    // kubectl's "not found": reported apart, not shown as a node.
    assert_eq!(fetched.not_found, ["nope"]);
    let reports = fetched.reports;
    assert_eq!(reports.len(), 1);
    let out = details(&reports, Detail::Problems);
    assert!(out.contains("NODE cx6dx-dual  profile default (Audit)  READY False"), "{out}");
    assert!(out.contains("heartbeat "), "{out}");
    assert!(out.lines().any(|l| l.starts_with("ens1f0np0  pfc ") && l.contains("Fail")), "{out}");
    // Problems only: passing checks are not listed.
    assert!(!out.lines().any(|l| l.starts_with("ens1f0np0  mtu ")), "{out}");
    // Pause off before PFC, each command once with the checks that want it.
    let rem: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("REMEDIATION"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    // (Pause with PFC off breaks no chain: only the global-pause check wants it off.)
    assert_eq!(rem[0], "  ethtool -A ens1f0np0 rx off tx off    # ens1f0np0/global-pause", "{out}");
    assert!(
        rem.iter().position(|l| l.contains("ethtool -A ens1f1np1")).unwrap()
            < rem.iter().position(|l| l.contains("dcb pfc set dev ens1f0np0")).unwrap(),
        "{out}"
    );
    assert!(
        rem.contains(
            &"  dcb pfc set dev ens1f0np0 prio-pfc all:off 3:on    # ens1f0np0/pfc, ens1f0np0/chain-tos-pfc"
        ),
        "{out}"
    );
    assert!(!out.contains("nope"), "{out}");
    assert!(!reports[0].ready());
}

#[tokio::test]
async fn a_label_selector_picks_nodes_and_shows_those_without_state() {
    let (client, mut h) = client();
    let good = state(&example("e810-xxv"), "2026-11-30T01:07:00Z");
    let server = tokio::spawn(async move {
        let nodes = list(
            "v1",
            "Node",
            vec![common::node("e810-xxv", json!({"pool": "a"})), common::node("bare", json!({"pool": "a"}))],
        );
        let seen = expect(&mut h, "GET", "/api/v1/nodes?&labelSelector=pool%3Da", 200, nodes).await;
        assert!(seen.uri.contains("labelSelector=pool%3Da"));
        expect(
            &mut h,
            "GET",
            "/apis/kuberdma.io/v1alpha1/rdmanodestates?",
            200,
            list("kuberdma.io/v1alpha1", "RdmaNodeState", vec![good]),
        )
        .await;
    });
    let f = fetch(client, &Selection::Labels("pool=a".into()), None).await.unwrap();
    server.await.unwrap();
    let names: Vec<(&str, bool)> = f.reports.iter().map(|r| (r.name.as_str(), r.state.is_some())).collect();
    assert_eq!(names, [("bare", false), ("e810-xxv", true)]);
    assert!(f.not_found.is_empty());
    let out = summary_table(&f.reports, false, t("2026-11-30T01:10:00Z"));
    assert!(out.lines().any(|l| l.starts_with("bare") && l.contains("no RdmaNodeState")), "{out}");
}

#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_answer_gives_up_after_the_request_timeout() {
    let (client, mut h) = client();
    let server = tokio::spawn(async move {
        // Take the request and never answer it.
        let (_req, _send) = h.next_request().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    });
    let e = fetch(client, &Selection::All, Some(std::time::Duration::from_secs(2))).await.unwrap_err();
    assert_eq!(e.to_string(), "list rdmanodestates: no answer within 2s (--request-timeout)");
    server.abort();
}
