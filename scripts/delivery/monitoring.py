"""Alerts, dashboard and the metrics they name, checked against the real binaries.

- PromQL is parsed with PyPI promql-parser (a port of Prometheus' own grammar); the rule file with
  Debian's promtool (`check rules`, and `test rules` for the alerts' behaviour).
- The metric names every rule and dashboard query uses must be among the series the binaries
  export: the device plugin is started on a simulated node and scraped over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

# Grafana's own variables, replaced by what Grafana would send before a query is parsed.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$node": ".*", "${node}": ".*"}


def prometheus_rule_groups(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    return rule["spec"]["groups"]


def rule_exprs(groups: list[dict[str, Any]]) -> dict[str, str]:
    return {r.get("alert") or r.get("record"): r["expr"] for g in groups for r in g["rules"]}


def dashboard_exprs(dashboard: dict[str, Any]) -> dict[str, str]:
    out = {}
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            out[f"{panel['title']} / {t['refId']}"] = t["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict) and "label_values(" in q.get("query", ""):
            # label_values(metric, label): the metric must exist too.
            metric = q["query"].split("(", 1)[1].split(",", 1)[0].strip()
            out[f"variable {var['name']}"] = metric
    return out


def grafana_to_promql(expr: str) -> str:
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric a PromQL expression selects (fails on a syntax error)."""
    import promql_parser

    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def check_dashboard(dashboard: dict[str, Any]) -> list[str]:
    """Structural problems of a Grafana dashboard model (empty when fine)."""
    problems = []
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dashboard:
            problems.append(f"no {key}")
    ids = [p.get("id") for p in dashboard.get("panels", [])]
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate panel ids {ids}")
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    for p in dashboard.get("panels", []):
        where = f"panel {p.get('title')!r}"
        grid = p.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")) or grid.get("x", 0) + grid.get("w", 0) > 24:
            problems.append(f"{where}: bad gridPos {grid}")
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            problems.append(f"{where}: no queries")
        uid = p.get("datasource", {}).get("uid", "")
        if uid.startswith("$") and uid.strip("${}") not in variables:
            problems.append(f"{where}: datasource variable {uid} is not defined")
        for t in p.get("targets", []):
            for var in re.findall(r"\$\{?(\w+)", t.get("expr", "")):
                if not var.startswith("__") and var not in variables:
                    problems.append(f"{where}: query uses undefined variable ${var}")
    return problems


def promtool(*args: str, cwd: Path | None = None) -> str:
    res = subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, f"promtool {' '.join(args)}:\n{res.stdout}{res.stderr}"
    return res.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str, want: str, timeout: float = 20.0) -> str:
    """GET `url` until its body contains `want` (the daemon may still be starting)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                last = r.read().decode()
            if want in last:
                return last
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    raise AssertionError(f"{url} never showed {want!r}; last answer:\n{last[:2000]}")


def exposition_names(text: str) -> set[str]:
    """Series names in a Prometheus text exposition (samples and # TYPE families)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def device_plugin_metrics(binary: Path, node: Path) -> str:
    """Runs the device plugin daemon on a simulated node (no kubelet needed to serve metrics)
    and returns its /metrics text."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kube-rdma-dp-metrics-") as tmp:
        proc = subprocess.Popen(
            [str(binary), "--sim", str(node), "--kubelet-dir", tmp, "--cdi-dir", f"{tmp}/cdi",
             "--devinfo-dir", f"{tmp}/devinfo", "--metrics-addr", f"127.0.0.1:{port}", "--no-link-events"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            return scrape(f"http://127.0.0.1:{port}/metrics", "kuberdma_pool_capacity")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def humanize(v: float) -> str:
    """Prometheus' `humanize` for the values the tests produce (SI prefixes, 4 significant digits)."""
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.4g}{prefix}"
    return f"{v:.4g}"


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """The alert annotation templates we write: $labels.X, $value, $value | humanize."""
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    out = out.replace("{{ $value | humanize }}", humanize(value))
    out = out.replace("{{ $value }}", f"{value:g}")
    assert "{{" not in out, f"template the test cannot expand: {template}"
    return out


def with_annotations(test: dict[str, Any], groups: list[dict[str, Any]], values: dict[str, float]) -> None:
    """promtool compares annotations too: expand each rule's templates for the expected alerts."""
    rules = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    for case in (c for t in test["tests"] for c in t["alert_rule_test"]):
        rule = rules[case["alertname"]]
        for exp in case["exp_alerts"]:
            exp["exp_annotations"] = {k: expand(v, exp["exp_labels"], values.get(case["alertname"], 0))
                                      for k, v in rule.get("annotations", {}).items()}


def rule_test_file(rules_path: str, for_: str, storm: float, stale: int) -> dict[str, Any]:
    """A promtool unit test: each alert fires on the series the binaries export (labels as they
    emit them, `node` added by the scrape) and stays silent on healthy ones."""
    node = 'node="n1"'
    minutes = int(re.fullmatch(r"(\d+)m", for_).group(1)) if for_.endswith("m") else 10
    after = f"{minutes + 6}m"
    return {
        "rule_files": [rules_path],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'kuberdma_node_roce_ready{{{node}}}', "values": f"0x{minutes + 10}"},
                {"series": 'kuberdma_node_roce_ready{node="n2"}', "values": f"1x{minutes + 10}"},
                {"series": f'kuberdma_check_passing{{{node},interface="ens1f0np0",check="pfc"}}',
                 "values": f"0x{minutes + 10}"},
                {"series": 'kuberdma_profile_nodes{profile="lossless",state="drifted"}', "values": f"2x{minutes + 10}"},
                {"series": 'kuberdma_profile_nodes{profile="lossless",state="passing"}', "values": f"5x{minutes + 10}"},
                {"series": f'kuberdma_pfc_pause_frames_total{{{node},interface="ens1f0np0",priority="3",direction="rx"}}',
                 "values": f"0+{int(storm * 60 * 2)}x{minutes + 10}"},
                {"series": f'kuberdma_pfc_pause_frames_total{{{node},interface="ens1f0np0",priority="3",direction="tx"}}',
                 "values": f"0+{int(storm * 60 * 2)}x{minutes + 10}"},
                {"series": 'kuberdma_pfc_pause_frames_total{node="n2",interface="ens1f0np0",priority="3",direction="rx"}',
                 "values": f"0+1x{minutes + 10}"},
                {"series": f'kuberdma_pool_capacity{{{node},resource="kuberdma.io/rdma_vfs"}}', "values": f"16x{minutes + 10}"},
                {"series": f'kuberdma_pool_healthy{{{node},resource="kuberdma.io/rdma_vfs"}}', "values": f"0x{minutes + 10}"},
                {"series": 'kuberdma_pool_capacity{node="n2",resource="kuberdma.io/rdma_vfs"}', "values": f"16x{minutes + 10}"},
                {"series": 'kuberdma_pool_healthy{node="n2",resource="kuberdma.io/rdma_vfs"}', "values": f"16x{minutes + 10}"},
                # The agent on n1 last succeeded at t=0; n2's keeps succeeding every minute.
                {"series": f'kuberdma_agent_last_success_timestamp_seconds{{{node}}}', "values": f"0x{minutes + 10}"},
                {"series": 'kuberdma_agent_last_success_timestamp_seconds{node="n2"}', "values": f"0+60x{minutes + 10}"},
                {"series": 'kuberdma_node_stale{node="n3"}', "values": f"1x{minutes + 10}"},
                {"series": 'kuberdma_node_stale{node="n2"}', "values": f"0x{minutes + 10}"},
            ],
            "alert_rule_test": [
                {"eval_time": after, "alertname": "KubeRdmaRoceNotReady",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1"}}]},
                {"eval_time": after, "alertname": "KubeRdmaCheckFailing",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1", "interface": "ens1f0np0",
                                                "check": "pfc"}}]},
                {"eval_time": after, "alertname": "KubeRdmaProfileDrift",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "profile": "lossless", "state": "drifted"}}]},
                {"eval_time": after, "alertname": "KubeRdmaPfcPauseStorm",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", "node": "n1", "interface": "ens1f0np0",
                                                "priority": "3"}}]},
                {"eval_time": after, "alertname": "KubeRdmaPoolNoHealthyDevice",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", "node": "n1",
                                                "resource": "kuberdma.io/rdma_vfs"}}]},
                {"eval_time": after, "alertname": "KubeRdmaAgentStale",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1"}},
                                {"exp_labels": {"severity": "warning", "node": "n3"}}]},
                # n3 has an RdmaNodeState (the controller's series) but no agent series.
                {"eval_time": after, "alertname": "KubeRdmaAgentMetricsAbsent",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n3"}}]},
                {"eval_time": after, "alertname": "KubeRdmaAgentAbsent", "exp_alerts": []},
                # Nothing fires before the `for` period has passed.
                {"eval_time": "1m", "alertname": "KubeRdmaRoceNotReady", "exp_alerts": []},
            ],
        }, {
            # Every agent gone: only the controller's series are left.
            "interval": "1m",
            "input_series": [{"series": 'kuberdma_node_stale{node="n1"}', "values": f"0x{minutes + 10}"}],
            "alert_rule_test": [
                {"eval_time": after, "alertname": "KubeRdmaAgentAbsent",
                 "exp_alerts": [{"exp_labels": {"severity": "warning"}}]},
                {"eval_time": after, "alertname": "KubeRdmaAgentMetricsAbsent",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "node": "n1"}}]},
            ],
        }],
    } if stale < (minutes + 6) * 60 else {}


def promtool_test(groups: list[dict[str, Any]], for_: str, storm: float, stale: int) -> str:
    with tempfile.TemporaryDirectory(prefix="kube-rdma-rules-") as tmp:
        Path(tmp, "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
        out = promtool("check", "rules", "rules.yaml", cwd=Path(tmp))
        test = rule_test_file("rules.yaml", for_, storm, stale)
        assert test, f"staleAfterSeconds {stale} is longer than the unit test's window"
        # The storm series grows by 2x the threshold per second; the drifted profile counts 2.
        with_annotations(test, groups, {"KubeRdmaPfcPauseStorm": storm * 2, "KubeRdmaProfileDrift": 2,
                                        "KubeRdmaPoolNoHealthyDevice": 16})
        Path(tmp, "test.yaml").write_text(yaml.safe_dump(test), encoding="utf-8")
        out += promtool("test", "rules", "test.yaml", cwd=Path(tmp))
    return out


def runbook_problems(groups: list[dict[str, Any]], runbooks_md: str) -> list[str]:
    """Alerts without a runbook_url, or whose link's #anchor is no heading of the runbooks page
    (GitHub's anchors: the heading in lower case)."""
    anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbooks_md, flags=re.M)}
    problems = []
    for g in groups:
        for r in (r for r in g["rules"] if "alert" in r):
            url = r.get("annotations", {}).get("runbook_url", "")
            page, _, anchor = url.partition("#")
            if not page.endswith("docs/runbooks.md") or anchor != r["alert"].lower() or anchor not in anchors:
                problems.append(f"{r['alert']}: runbook_url {url!r} names no section of docs/runbooks.md")
    return problems


def load_json(text: str) -> dict[str, Any]:
    return json.loads(text)


class ApiServer:
    """A real etcd + kube-apiserver (`cargo run -p kube-rdma-operator --example apiserver`, the
    e2e fixture kube_rdma_e2e::ApiServer: v1.34.4 from the Go module proxy) with `seeds` (YAML
    texts) applied, as a context manager: `.kubeconfig` (the admin's) for our binaries,
    `.get(path)` for the test's own reads (the pinned kubectl's `get --raw`)."""

    def __init__(self, binary: Path, seeds: list[str]) -> None:
        self.binary = binary
        self.seeds = seeds

    def __enter__(self) -> "ApiServer":
        self.tmp = tempfile.TemporaryDirectory(prefix="kube-rdma-apiserver-seeds-")
        paths = []
        for i, text in enumerate(self.seeds):
            p = Path(self.tmp.name, f"seed-{i}.yaml")
            p.write_text(text, encoding="utf-8")
            paths.append(str(p))
        # stdin stays open while we run: the control plane stops when it closes.
        # KUBE_RDMA_REPO: the fixture finds e2e/build-peers in this checkout, not in the one whose
        # path cargo compiled in (another clone sharing the target dir keeps the binary fresh).
        env = {**os.environ, "KUBE_RDMA_REPO": str(Path(__file__).resolve().parents[2])}
        self.proc = subprocess.Popen([str(self.binary), *paths], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        lines = [self.proc.stdout.readline().strip() for _ in range(3)]
        if not (lines[1].startswith("kubeconfig: ") and lines[2].startswith("kubectl: ")):
            self.proc.kill()
            raise AssertionError(f"the API server did not start: {lines} {self.proc.stderr.read()[-2000:]}")
        self.url = lines[0]
        self.kubeconfig = Path(lines[1].removeprefix("kubeconfig: "))
        self.kubectl = lines[2].removeprefix("kubectl: ")
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.tmp.cleanup()

    def get(self, path: str) -> dict[str, Any]:
        res = subprocess.run([self.kubectl, f"--kubeconfig={self.kubeconfig}", "get", "--raw", path],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, f"GET {path}: {res.stderr}"
        return json.loads(res.stdout)


def run_until_scraped(cmd: list[str], env: dict[str, str], port: int, wants: list[str],
                      timeout: float = 30.0) -> tuple[str, str | None]:
    """Runs a daemon, scrapes its /metrics until every name in `wants` shows, stops it. Returns
    the last text and, when something never showed or the daemon died, why."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return text, f"{' '.join(cmd[1:2])} exited {proc.returncode}: {proc.stderr.read()[-600:].strip()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                names = exposition_names(text)
                if all(w in names for w in wants):
                    return text, None
            except OSError:
                pass
            time.sleep(0.3)
        return text, (f"{' '.join(cmd[1:2])}: {sorted(set(wants) - exposition_names(text))} never showed in "
                      f"/metrics within {timeout:.0f}s")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
