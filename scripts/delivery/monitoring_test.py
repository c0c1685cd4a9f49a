"""Alerts, dashboard, metrics and logs of the real binaries (scripts/test-delivery runs these; also
runnable alone: `python3 scripts/delivery/monitoring_test.py`). The helpers are in monitoring.py.

- The dashboard JSON is valid and every query parses (PyPI promql-parser); the alert rules pass
  `promtool check rules` and `promtool test rules`, with full and with default values.
- Every metric a rule or a dashboard query names is exported: scraped from the device plugin on a
  simulated node, and from the agent and the controller against a real kube-apiserver.
- docs/metrics.md lists exactly the metrics the binaries export (those scraped, and the DRA
  driver's, read from its source: it serves only after a kubelet registered it).
- Off a terminal the daemons log without ANSI colour; `--log-format json` gives one JSON object
  per line; a bad KUBE_RDMA_LOG_FORMAT is refused.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import monitoring  # noqa: E402


# ---------------------------------------------------------------- alerts, dashboard, metrics

def monitoring_objects() -> list[dict[str, Any]]:
    return chart.objects(chart.render(chart.full_values()))


def dashboard() -> dict[str, Any]:
    cm = next(o for o in monitoring_objects()
              if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard"))
    assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
    return json.loads(cm["data"]["kube-rdma.json"])


def test_dashboard_valid() -> str:
    d = dashboard()
    problems = monitoring.check_dashboard(d)
    assert not problems, "\n".join(problems)
    exprs = monitoring.dashboard_exprs(d)
    for where, e in exprs.items():
        try:
            monitoring.metric_names(monitoring.grafana_to_promql(e))
        except Exception as ex:
            raise AssertionError(f"{where}: {e!r} does not parse: {ex}") from ex
    titles = " | ".join(p["title"] for p in d["panels"])
    for topic in ("PFC pause frames", "ECN", "Pool devices", "checks"):
        assert topic.lower() in titles.lower(), f"no panel about {topic}: {titles}"
    return f"{len(d['panels'])} panels, {len(exprs)} queries parse"


def test_rules_promtool() -> str:
    values = chart.full_values()
    r = values["metrics"]["prometheusRule"]
    groups = monitoring.prometheus_rule_groups(monitoring_objects())
    alerts = sorted(monitoring.rule_exprs(groups))
    monitoring.promtool_test(groups, r["for"], r["pauseStormFramesPerSecond"], r["staleAfterSeconds"])
    d = chart.default_values()["metrics"]["prometheusRule"]
    dgroups = monitoring.prometheus_rule_groups(chart.objects(chart.render(chart.merged(
        chart.default_values(),
        metrics={**chart.default_values()["metrics"], "prometheusRule": {**d, "enabled": True}}))))
    monitoring.promtool_test(dgroups, d["for"], d["pauseStormFramesPerSecond"], d["staleAfterSeconds"])
    return f"promtool check + test rules: {', '.join(alerts)}"


def test_alerts_link_their_runbooks() -> str:
    """Every alert's runbook_url points at its own section of docs/runbooks.md, and the agent's
    absence has an alert (with a `for`)."""
    groups = monitoring.prometheus_rule_groups(monitoring_objects())
    runbooks = (chart.ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8")
    problems = monitoring.runbook_problems(groups, runbooks)
    assert not problems, "\n".join(problems)
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    for name in ("KubeRdmaAgentAbsent", "KubeRdmaAgentMetricsAbsent"):
        assert rules[name].get("for"), f"{name} has no `for`"
    assert "absent_over_time(" in rules["KubeRdmaAgentAbsent"]["expr"], rules["KubeRdmaAgentAbsent"]
    return f"{len(rules)} alerts, each linking its section of docs/runbooks.md"


@functools.cache
def exported_metrics() -> tuple[frozenset[str], tuple[str, ...]]:
    """Series names the binaries export, scraped from the running daemons (once per run: two
    checks read them), and notes on what was scraped where."""
    names = monitoring.exposition_names(monitoring.device_plugin_metrics(
        chart.native_binary("kube-rdma-device-plugin"), chart.ROOT / "examples" / "nodes" / "cx6dx-dual.yaml"))
    notes = ["device plugin (simulated cx6dx-dual) scraped"]
    for who, (text, problem) in api_server_scrapes().items():
        names |= monitoring.exposition_names(text)
        notes.append(f"{who} scraped against a real kube-apiserver" + (f" ({problem})" if problem else ""))
    return frozenset(names), tuple(notes)


SIM_NODE = "cx6dx-dual"


AGENT_METRICS = ["kuberdma_node_roce_ready", "kuberdma_check_passing", "kuberdma_pfc_pause_frames_total",
                 "kuberdma_rdma_hw_stats_total", "kuberdma_agent_last_success_timestamp_seconds"]


CONTROLLER_METRICS = ["kuberdma_profile_nodes", "kuberdma_node_stale"]


def cluster_seeds() -> list[str]:
    """Our CRDs, a Node for the simulated node (labelled for the example profile), the profile."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": SIM_NODE, "labels": {"kubernetes.io/hostname": SIM_NODE,
                                                      "node-role.kubernetes.io/rdma": ""}}}
    return [chart.CHART_CRDS.read_text(encoding="utf-8"), yaml.safe_dump(node),
            (chart.EXAMPLES / "roceprofile.yaml").read_text(encoding="utf-8")]


def api_server_scrapes() -> dict[str, tuple[str, str | None]]:
    """The agent's and the controller's /metrics (and what did not show up), each running as
    the chart runs it (simulated node for the agent) against a real kube-apiserver, through a
    kubeconfig."""
    op = str(chart.native_binary("kube-rdma-operator"))
    with monitoring.ApiServer(chart.api_server_binary(), cluster_seeds()) as api:
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig), "NODE_NAME": SIM_NODE}
        port = monitoring.free_port()
        agent = monitoring.run_until_scraped(
            [op, "agent", "--sim", str(chart.ROOT / "examples" / "nodes" / f"{SIM_NODE}.yaml"), "--poll-interval=2",
             f"--metrics-addr=127.0.0.1:{port}"], env, port, AGENT_METRICS)
        # The controller needs the agent's RdmaNodeState, which the run above published.
        port = monitoring.free_port()
        controller = monitoring.run_until_scraped(
            [op, "controller", "--interval=1", f"--metrics-addr=127.0.0.1:{port}"], env, port, CONTROLLER_METRICS)
    return {"agent": agent, "controller": controller}


def test_metrics_exist() -> str:
    """Every metric a rule or dashboard query names is exported by a kube-rdma binary."""
    used: dict[str, set[str]] = {}
    groups = monitoring.prometheus_rule_groups(monitoring_objects())
    for alert, e in monitoring.rule_exprs(groups).items():
        for n in monitoring.metric_names(e):
            used.setdefault(n, set()).add(f"alert {alert}")
    for where, e in monitoring.dashboard_exprs(dashboard()).items():
        for n in monitoring.metric_names(monitoring.grafana_to_promql(e)):
            used.setdefault(n, set()).add(f"dashboard {where}")
    exported, notes = exported_metrics()
    missing = {n: sorted(w)[:2] for n, w in sorted(used.items()) if n not in exported}
    assert not missing, "; ".join(notes) + "\nnamed but not exported:\n" + "\n".join(
        f"  {n}  (used by {', '.join(w)})" for n, w in missing.items())
    return f"{len(used)} metric names, all exported ({'; '.join(notes)})"


def documented_metrics() -> set[str]:
    """The metric names docs/metrics.md's tables list (first column)."""
    text = (chart.ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(kuberdma_[a-z0-9_]+)` \|", text, flags=re.M))


def dra_source_metrics() -> set[str]:
    """The families the DRA driver's /metrics page declares, read from its source."""
    src = (chart.ROOT / "device-plugin" / "src" / "dra" / "metrics.rs").read_text(encoding="utf-8")
    code = src.split("#[cfg(test)]")[0]
    return set(re.findall(r'"(kuberdma_[a-z0-9_]+)"', code))


def families(names: set[str]) -> set[str]:
    """Exposition names folded to their families (a histogram's _bucket, _sum, _count)."""
    out = set()
    for n in names:
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix) and n[: -len(suffix)] in names:
                n = n[: -len(suffix)]
        out.add(n)
    return out


def test_metrics_documented() -> str:
    """docs/metrics.md names every exported metric, and nothing that is not exported."""
    exported, notes = exported_metrics()
    exported = families(exported) | dra_source_metrics()
    documented = documented_metrics()
    undocumented = sorted(exported - documented)
    stale = sorted(documented - exported)
    assert not undocumented and not stale, (
        f"exported but not in docs/metrics.md: {undocumented}\n"
        f"in docs/metrics.md but exported by no binary: {stale}\n({'; '.join(notes)})")
    return f"{len(documented)} metrics documented, each exported"


# ---------------------------------------------------------------- logs

def test_logs_plain_and_json() -> str:
    """Off a terminal the daemons log without ANSI colour; --log-format json gives one JSON object
    per line. The device plugin daemon on a simulated node logs as it starts."""
    dp = chart.native_binary("kube-rdma-device-plugin")
    outs = {}
    for fmt in ("text", "json"):
        with tempfile.TemporaryDirectory(prefix="kube-rdma-logs-") as tmp:
            proc = subprocess.Popen([str(dp), "--log-format", fmt,
                                     "--sim", str(chart.ROOT / "examples/nodes/cx6dx-dual.yaml"),
                                     "--kubelet-dir", tmp, "--cdi-dir", f"{tmp}/c", "--devinfo-dir", f"{tmp}/d",
                                     "--no-link-events"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env={k: v for k, v in os.environ.items() if k != "NO_COLOR"})
            time.sleep(1.5)
            proc.terminate()
            outs[fmt] = proc.communicate(timeout=10)[1].decode()
    assert "serving" in outs["text"], outs["text"]
    assert "\x1b[" not in outs["text"], f"ANSI escapes in piped logs: {outs['text'][:300]!r}"
    lines = [ln for ln in outs["json"].splitlines() if ln.strip()]
    assert lines, "no JSON log lines"
    for ln in lines:
        obj = json.loads(ln)
        assert {"timestamp", "level", "fields"} <= set(obj), obj
    env_fmt = subprocess.run([str(dp), "discover", "--sim", str(chart.ROOT / "examples/nodes/cx6dx-dual.yaml")],
                             capture_output=True, text=True, env={**os.environ, "KUBE_RDMA_LOG_FORMAT": "yaml"})
    assert env_fmt.returncode != 0 and "yaml" in env_fmt.stderr, "a bad KUBE_RDMA_LOG_FORMAT was accepted"
    for b in ("kube-rdma-operator", "kubectl-rdma"):
        res = subprocess.run([str(chart.native_binary(b)), "--log-format", "json", "--help"],
                             capture_output=True, text=True)
        assert res.returncode == 0 and "--log-format" in res.stdout, res.stderr
    # The controller, with an API server that refuses connections, logs its retries.
    op = {}
    with tempfile.TemporaryDirectory(prefix="kube-rdma-logs-") as tmp:
        kc = Path(tmp, "kubeconfig")
        kc.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{monitoring.free_port()}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}), encoding="utf-8")
        for fmt in ("text", "json"):
            proc = subprocess.Popen([str(chart.native_binary("kube-rdma-operator")), "--log-format", fmt, "controller",
                                     "--interval=1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env={**os.environ, "KUBECONFIG": str(kc), "RUST_LOG": "debug"})
            time.sleep(3)
            proc.terminate()
            op[fmt] = proc.communicate(timeout=10)[1].decode()
    assert "panicked" not in op["text"], f"the controller panics instead of logging: {op['text'][:400]}"
    assert op["text"].strip() and "\x1b[" not in op["text"], f"controller text logs: {op['text'][:300]!r}"
    for ln in (ln for ln in op["json"].splitlines() if ln.strip()):
        json.loads(ln)
    return (f"device plugin text: {len(outs['text'].splitlines())} plain lines, json: {len(lines)} objects; "
            f"controller text: {len(op['text'].splitlines())} plain lines, json parses")


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("monitoring: dashboard JSON is valid and every query parses", test_dashboard_valid),
    ("monitoring: alert rules pass promtool check and unit tests", test_rules_promtool),
    ("monitoring: every alert links its runbook; the agent's absence alerts", test_alerts_link_their_runbooks),
    ("monitoring: every metric in rules and dashboard is exported by a binary", test_metrics_exist),
    ("monitoring: docs/metrics.md lists exactly the exported metrics", test_metrics_documented),
    ("logs: no ANSI off a terminal; --log-format json", test_logs_plain_and_json),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
