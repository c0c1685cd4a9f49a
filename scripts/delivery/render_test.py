"""The chart rendered, linted and schema-checked by Helm's own engine (PyPI helm-python-sdk, Helm v4);
scripts/test-delivery runs these first. Also runnable alone: `python3 scripts/delivery/render_test.py`.

- Lint (strict) of the default values and each ci/*.yaml; the objects rendered for the default
  values (Kubernetes 1.28 and 1.30) and for ci/full-values.yaml.
- values.schema.json accepts the default and full values, is what values_schema.py builds, and
  refuses each kind of bad pool (the install refuses it too); typos_test.py's checks of the closed
  schema run among these. The templates refuse what no schema can say (a pool defined twice, ...).
- The device plugin's ConfigMap follows `pools`, or carries `rawConfig` verbatim.
- Chart knobs reach the objects: image digest, log format, pod labels, extra env/args/volumes,
  update strategies, ServiceAccounts, probes, node selectors; read-only host mounts are recursive
  where the API has the field; the PodMonitor option; metrics behind kube-rbac-proxy.
- The CRD upgrade hook: a pre-upgrade Job running our binary's `crds --apply`, with its own RBAC.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import typos_test  # noqa: E402


# ---------------------------------------------------------------- helm engine: lint, render, schema

def lint(values: dict[str, Any] | None) -> str:
    import helm_python as helm

    report = helm.lint(chart.CHART_DIR, values, strict=True, namespace=chart.NAMESPACE)
    bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    assert not report.get("errors") and not bad, json.dumps(report, indent=1)
    return f"{len(report.get('messages', []))} info message(s)"


def test_render_default() -> str:
    """Default values on Kubernetes 1.30 (with ValidatingAdmissionPolicy), on 1.28 (refused,
    saying why, unless agent.unguardedNodeWrites) and with no API list (`helm template` without
    --api-versions: the safe form, the agent's role read-only and no Events Role for it)."""
    # ClusterRoles: agent, controller, CRD hook, `helm test`'s pod, and the view aggregation (bound
    # to nothing); Roles: the agent's and the controller's for Events in `default`.
    base = {"ServiceAccount": 5, "ClusterRole": 5, "ClusterRoleBinding": 4, "Role": 2, "RoleBinding": 2,
            "ConfigMap": 1, "Service": 3, "DaemonSet": 2, "Deployment": 1, "Job": 1, "Pod": 1}
    new = chart.kinds(chart.objects(chart.render(None, kube_version="1.30.0")))
    # The agent's node-label, node-state and events policies, the controller's node-label policy.
    want = {**base, "ValidatingAdmissionPolicy": 4, "ValidatingAdmissionPolicyBinding": 4}
    assert new == want, f"1.30: kinds {new} != {want}"
    err = chart.render_error_for(None, kube_version="1.28.0")
    assert "Kubernetes v1.28.0 does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy" in err \
        and "agent.unguardedNodeWrites=true" in err, err
    unguarded = chart.merged(chart.default_values(),
                             agent={**chart.default_values()["agent"], "unguardedNodeWrites": True})
    old = chart.kinds(chart.objects(chart.render(unguarded, kube_version="1.28.0")))
    assert old == base, f"1.28 unguarded: kinds {old} != {base}"
    safe = chart.kinds(chart.objects(chart.render(None)))
    assert safe == {**base, "Role": 1, "RoleBinding": 1}, f"no API list: kinds {safe}"
    return ", ".join(f"{k}={v}" for k, v in sorted(new.items()))


def test_render_full() -> str:
    objs = chart.objects(chart.render(chart.full_values()))
    got = chart.kinds(objs)
    for kind, n in {"RoceProfile": 2, "NetworkAttachmentDefinition": 2, "ServiceMonitor": 1,
                    "PrometheusRule": 1, "ConfigMap": 2, "DaemonSet": 2, "Deployment": 1}.items():
        assert got.get(kind) == n, f"{kind}: {got.get(kind)} != {n} in {got}"
    return ", ".join(f"{k}={v}" for k, v in sorted(got.items()))


def test_pool_config_matches_values() -> None:
    values = chart.full_values()
    objs = chart.objects(chart.render(values))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    assert cfg["resourcePrefix"] == "kuberdma.io", cfg
    names = [p["name"] for p in cfg["pools"]]
    assert names == [p["name"] for p in values["pools"]], names
    for got, want in zip(cfg["pools"], values["pools"]):
        assert got["selectors"] == want["selectors"], (got, want)
        assert got == want, (got, want)
    shared = next(p for p in cfg["pools"] if p["name"] == "cx6_shared")
    assert shared["rdmaHcaMax"] == 16, shared
    ds = next(o for o in objs if o["kind"] == "DaemonSet" and "device-plugin" in o["metadata"]["name"])
    # full values turn hostNetwork off: link events would show the pod's namespace only.
    assert not ds["spec"]["template"]["spec"].get("hostNetwork"), "hostNetwork despite hostNetwork: false"
    assert "--no-link-events" in ds["spec"]["template"]["spec"]["containers"][0]["args"]
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"]), annotations


def test_raw_config_verbatim() -> None:
    raw = (chart.FIXTURES / "sriovdp-config.json").read_text(encoding="utf-8")
    values = chart.merged(chart.default_values(), pools=[], rawConfig=raw)
    objs = chart.objects(chart.render(values))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert json.loads(cm["data"]["config.yaml"]) == json.loads(raw), cm["data"]["config.yaml"]


def test_schema_accepts(values: dict[str, Any]) -> None:
    import helm_python as helm

    with helm.Chart.load(chart.CHART_DIR) as c:
        c.validate_schema(c.merge_values(values))


def test_schema_is_current() -> str:
    problem = chart.schema_problem()
    assert problem is None, problem
    return "generated"


# A bad pool, and the part of the schema error that shows it was caught for the right reason.
BAD_POOLS: dict[str, tuple[dict[str, Any], str]] = {
    "name with a slash": ({"name": "rdma/vf", "selectors": {"vendors": ["15b3"]}}, "/pools/0/name"),
    "no selectors": ({"name": "rdma_vfs"}, "selectors"),
    "empty selectors": ({"name": "rdma_vfs", "selectors": {}}, "/pools/0/selectors"),
    "vendor not 4 hex digits": ({"name": "rdma_vfs", "selectors": {"vendors": ["15b33"]}}, "/vendors/0"),
    "vendor as a YAML number": ({"name": "rdma_vfs", "selectors": {"vendors": [8086]}}, "/vendors/0"),
    "unknown mode": ({"name": "rdma_vfs", "mode": "exclusive", "selectors": {"vendors": ["15b3"]}}, "/mode"),
    "unknown policy": ({"name": "rdma_vfs", "policy": "random", "selectors": {"vendors": ["15b3"]}}, "/policy"),
    "bad pfNames VF range": ({"name": "rdma_vfs", "selectors": {"pfNames": ["ens1f0#a-b"]}}, "/pfNames/0"),
    "link speed as text": ({"name": "rdma_vfs", "selectors": {"linkSpeeds": ["100G"]}}, "/linkSpeeds/0"),
    "misspelt selector": ({"name": "rdma_vfs", "selectors": {"vendor": ["15b3"]}}, "'vendor' not allowed"),
    "unknown pool key": ({"name": "rdma_vfs", "selectors": {"vendors": ["15b3"]}, "numa": 0}, "'numa' not allowed"),
    "shared pool without rdmaHcaMax": (
        {"name": "hca", "mode": "shared", "selectors": {"ifNames": ["ens2f0"]}}, "rdmaHcaMax"),
    "rdmaHcaMax on a vf pool": ({"name": "rdma_vfs", "rdmaHcaMax": 4, "selectors": {"vendors": ["15b3"]}},
                                "/pools/0"),
    "PCI address without function": (
        {"name": "rdma_vfs", "selectors": {"rootDevices": ["0000:3d:00"]}}, "/rootDevices/0"),
    "empty selector list": ({"name": "rdma_vfs", "selectors": []}, "/pools/0/selectors"),
    "bad entry in a selector list": (
        {"name": "rdma_vfs", "selectors": [{"vendors": ["15b3"]}, {"linkTypes": ["token-ring"]}]}, "/linkTypes/0"),
}


def test_schema_rejects(pool: dict[str, Any], expect: str) -> str:
    import helm_python as helm

    values = chart.merged(chart.default_values(), pools=[pool])
    with helm.Chart.load(chart.CHART_DIR) as c:
        try:
            c.validate_schema(c.merge_values(values))
        except helm.HelmValuesError as e:
            msg = str(e)
        else:
            raise AssertionError(f"schema accepted bad pool {pool}")
    assert expect in msg, f"schema error does not point at {expect!r}:\n{msg}"
    # An install (render) must refuse the same values.
    chart.render_error(values)
    return msg.splitlines()[-1].strip(" -")[:110]


def test_guard(values: dict[str, Any], expect: str) -> str:
    msg = chart.render_error(values)
    assert expect in msg, f"error {msg!r} does not mention {expect!r}"
    return expect


def guards() -> dict[str, tuple[dict[str, Any], str]]:
    """Values rendering refuses, and what its error must mention."""
    d = chart.default_values()
    return {
        "duplicate pool": (chart.merged(d, pools=[d["pools"][0], d["pools"][0]]), "defined twice"),
        "network on unknown pool": (chart.merged(d, networks=[{"name": "n", "pool": "nope",
                                                               "ipam": {"type": "static"}}]),
                                    "not in `pools`"),
        "Enforce profile without allowEnforce": (
            chart.merged(d, profiles=[{"name": "p", "spec": {"mode": "Enforce"}}]), "allowEnforce"),
        "pools and rawConfig together": (chart.merged(d, rawConfig="{}"), "not both"),
        "rawConfig of no known format": (chart.merged(d, pools=[], rawConfig='{"devices": []}'), "none of `pools`"),
    }


# ---------------------------------------------------------------- chart knobs

def workload(objs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))


def test_knobs_reach_the_objects() -> str:
    values = chart.full_values()
    objs = chart.objects(chart.render(values, kube_version="1.31.0"))
    dp = workload(objs, "DaemonSet", "-device-plugin")
    ag = workload(objs, "DaemonSet", "-agent")
    ct = workload(objs, "Deployment", "-controller")
    image = f"{values['image']['repository']}@{values['image']['digest']}"
    for o in (dp, ag, ct):
        spec = o["spec"]["template"]["spec"]
        c0 = spec["containers"][0]
        assert c0["image"] == image, c0["image"]
        assert "--log-format=json" in c0["args"], c0["args"]
        assert o["spec"]["template"]["metadata"]["labels"]["example.com/cost-center"] == "fabric"
        assert {"name": "KUBE_RDMA_EXAMPLE", "value": "1"} in c0["env"], c0["env"]
    assert dp["spec"]["updateStrategy"] == {"type": "OnDelete"}, dp["spec"]["updateStrategy"]
    assert ag["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    assert dp["spec"]["template"]["spec"]["serviceAccountName"] == "rdma-device-plugin"
    sa = next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "rdma-device-plugin")
    assert sa["metadata"]["annotations"] == {"example.com/owner": "fabric-team"}, sa
    assert "--dev-root=/host/dev" in dp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"name": "scratch", "mountPath": "/scratch"} in dp["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert ag["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] == 15
    assert ct["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/livez"
    # Node components: rdmaNodeLabel plus their own nodeSelector; the controller neither.
    assert dp["spec"]["template"]["spec"]["nodeSelector"] == {
        "kuberdma.io/rdma-node": "yes", "feature.node.kubernetes.io/network-sriov.capable": "true"}
    assert "nodeSelector" not in ct["spec"]["template"]["spec"]
    d = chart.objects(chart.render(None))
    sel = workload(d, "DaemonSet", "-agent")["spec"]["template"]["spec"]["nodeSelector"]
    assert sel == {"feature.node.kubernetes.io/rdma.capable": "true"}, sel
    off = chart.objects(chart.render(chart.merged(chart.default_values(), rdmaNodeLabel={"key": "", "value": ""})))
    assert "nodeSelector" not in workload(off, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    nosa = chart.merged(chart.default_values(), controller={**chart.default_values()["controller"],
                                                            "serviceAccount": {"create": False, "name": ""}})
    assert "name must name an existing ServiceAccount" in chart.render_error(nosa)
    return "digest, logFormat, podLabels, extraEnv/Args/Volumes, updateStrategy, serviceAccount, probes, nodeSelector"


def test_recursive_read_only() -> str:
    """Read-only host mounts are recursive where the API has the field (>= 1.30), absent before."""
    def ro_mounts(version: str) -> list[dict[str, Any]]:
        # (Before 1.30 the chart renders the agent only with its writes unguarded, knowingly.)
        values = chart.full_values()
        values.setdefault("agent", {})["unguardedNodeWrites"] = version < "1.30"
        objs = chart.objects(chart.render(values, kube_version=version))
        mounts = []
        for o in objs:
            if o["kind"] == "DaemonSet":
                spec = o["spec"]["template"]["spec"]
                vols = {v["name"]: v for v in spec["volumes"]}
                for c in spec["containers"]:
                    mounts += [m for m in c.get("volumeMounts", [])
                               if m.get("readOnly") and "hostPath" in vols.get(m["name"], {})]
        return mounts
    new = ro_mounts("1.31.0")
    assert new and all(m.get("recursiveReadOnly") == "IfPossible" for m in new), new
    assert all("recursiveReadOnly" not in m for m in ro_mounts("1.28.0"))
    return f"{len(new)} read-only hostPath mounts recursive on 1.31, plain on 1.28"


def test_podmonitor() -> str:
    values = chart.merged(chart.default_values(),
                          metrics={**chart.default_values()["metrics"], "podMonitor": {"enabled": True}})
    objs = chart.objects(chart.render(values))
    pm = next(o for o in objs if o["kind"] == "PodMonitor")
    ep = pm["spec"]["podMetricsEndpoints"][0]
    assert ep["port"] == "metrics" and ep["relabelings"][0]["targetLabel"] == "node", ep
    assert ep["relabelings"][0]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"], ep
    comps = next(e["values"] for e in pm["spec"]["selector"]["matchExpressions"]
                 if e["key"] == "app.kubernetes.io/component")
    workloads = [o for o in objs if o["kind"] in ("DaemonSet", "Deployment")]
    for w in workloads:
        assert w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] in comps
        ports = [p["name"] for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
        assert "metrics" in ports, f"{w['metadata']['name']} has no metrics port"
    both = chart.merged(values, metrics={**values["metrics"], "serviceMonitor": {"enabled": True}})
    assert "not both" in chart.render_error(both)
    return f"selects {len(workloads)} workloads on their metrics port, node from the pod"


def test_rbac_proxy() -> str:
    values = chart.ci_values("rbac-proxy-values.yaml")
    objs = chart.objects(chart.render(values, kube_version="1.31.0"))
    # DRA mode probes its liveness on /livez: it must pass the proxy too.
    dra = chart.merged(values, dra={**values.get("dra", {}), "enabled": True})
    dra_objs = [o for o in chart.objects(chart.render(dra, kube_version="1.34.0")) if o["kind"] == "DaemonSet"]
    for o in objs + dra_objs:
        if o["kind"] not in ("DaemonSet", "Deployment"):
            continue
        spec = o["spec"]["template"]["spec"]
        main, proxy = spec["containers"][0], spec["containers"][-1]
        assert proxy["name"] == "kube-rbac-proxy", [c["name"] for c in spec["containers"]]
        listen = next(a for a in main["args"] if a.startswith("--metrics-addr="))
        assert listen.startswith("--metrics-addr=127.0.0.1:"), listen
        upstream = next(a for a in proxy["args"] if a.startswith("--upstream="))
        assert upstream == f"--upstream=http://{listen.split('=', 1)[1]}/", (upstream, listen)
        assert "ports" not in main, "the daemon itself must not expose the metrics port"
        assert main["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        # The kubelet probes without a token: every probed path passes the proxy unauthenticated
        # (a path outside --allow-paths is 404 from the proxy, one outside --ignore-paths 401).
        flag = lambda name: next(a for a in proxy["args"] if a.startswith(name)).split("=", 1)[1].split(",")
        for probe in ("livenessProbe", "readinessProbe"):
            path = main[probe]["httpGet"]["path"]
            assert path in flag("--allow-paths=") and path in flag("--ignore-paths="), (o["metadata"]["name"], probe, proxy["args"])
    check_scrape_tls(objs, values)
    reader = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("metrics-reader"))
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], reader
    pm = chart.merged(values, metrics={**values["metrics"], "serviceMonitor": {"enabled": False},
                                       "podMonitor": {"enabled": True}})
    assert "use metrics.serviceMonitor" in chart.render_error(pm)
    return "daemons on 127.0.0.1, proxies on the metrics ports, https ServiceMonitor, reader role"


def check_scrape_tls(objs: list[dict[str, Any]], values: dict[str, Any]) -> None:
    """The ServiceMonitor scrapes the proxies as prometheus-operator recommends: the token from a
    Secret (`authorization`, not the deprecated bearerTokenFile), the certificate verified against
    the CA the proxies' certificate was signed with, for the name it carries."""
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    ep = sm["spec"]["endpoints"][0]
    assert ep["scheme"] == "https", ep
    assert "bearerTokenFile" not in ep and not ep["tlsConfig"].get("insecureSkipVerify"), ep
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    token = by_name[("Secret", ep["authorization"]["credentials"]["name"])]
    assert ep["authorization"]["credentials"]["key"] == "token" and ep["authorization"]["type"] == "Bearer", ep
    assert token["type"] == "kubernetes.io/service-account-token", token
    sa = token["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding"
                   and any(s["name"] == sa for s in o.get("subjects", [])))
    assert binding["roleRef"]["name"].endswith("metrics-reader"), binding
    tls = by_name[("Secret", ep["tlsConfig"]["ca"]["secret"]["name"])]
    data = {k: base64.b64decode(v) for k, v in tls["data"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in data.items():
            Path(tmp, k).write_bytes(v)
        verify = subprocess.run(["openssl", "verify", "-CAfile", f"{tmp}/ca.crt", "-verify_hostname",
                                 ep["tlsConfig"]["serverName"], f"{tmp}/tls.crt"], capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    for w in (o for o in objs if o["kind"] in ("DaemonSet", "Deployment")):
        spec = w["spec"]["template"]["spec"]
        proxy = spec["containers"][-1]
        mount = next(m for m in proxy["volumeMounts"] if m["name"] == "rbac-proxy-tls")
        assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in proxy["args"], proxy["args"]
        vol = next(v for v in spec["volumes"] if v["name"] == "rbac-proxy-tls")
        assert vol["secret"]["secretName"] == tls["metadata"]["name"], vol
    # A certificate of the user's own: the chart makes none and points everything at it.
    own = chart.merged(values, metrics={**values["metrics"], "rbacProxy": {
        **values["metrics"]["rbacProxy"], "tls": {"secretName": "my-metrics-cert", "serverName": "m.example"}}})
    own_objs = chart.objects(chart.render(own, kube_version="1.31.0"))
    own_ep = next(o for o in own_objs if o["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
    assert own_ep["tlsConfig"] == {"ca": {"secret": {"name": "my-metrics-cert", "key": "ca.crt"}},
                                   "serverName": "m.example"}, own_ep
    assert not [o for o in own_objs if o["kind"] == "Secret" and o["metadata"]["name"].endswith("metrics-tls")]


# ---------------------------------------------------------------- helm test

def test_helm_test_hook() -> str:
    """`helm test`'s pod needs a RoCE-ready node, a device of the first pool, and reads that
    node's RdmaNodeState with a role that allows that read only; none of it is installed."""
    objs = chart.objects(chart.render(None))
    tests = [o for o in objs if chart.is_hook(o) and o["metadata"]["annotations"]["helm.sh/hook"] == "test"]
    pod = next(o for o in tests if o["kind"] == "Pod")
    spec = pod["spec"]
    assert spec["nodeSelector"]["kuberdma.io/roce-ready"] == "true", spec
    c = spec["containers"][0]
    assert c["command"] + c["args"] == ["/usr/bin/kubectl-rdma", "status", "$(NODE_NAME)"], c
    pool = chart.default_values()["pools"][0]["name"]
    assert c["resources"]["limits"][f"kuberdma.io/{pool}"] == 1, c["resources"]
    role = next(o for o in tests if o["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["kuberdma.io"], "resources": ["rdmanodestates"], "verbs": ["get"]}]
    assert spec["serviceAccountName"] == next(o for o in tests if o["kind"] == "ServiceAccount")["metadata"]["name"]
    manifests = (chart.ROOT / "manifests" / "kube-rdma.yaml").read_text(encoding="utf-8")
    assert "helm.sh/hook: test" not in manifests, "test hooks belong to Helm, not to manifests/"
    other = chart.merged(chart.default_values(), tests={"pool": "nope"})
    assert "tests.pool \"nope\" is not a pool" in chart.render_error(other)
    return f"test pod on a roce-ready node with kuberdma.io/{pool}: 1, reading its RdmaNodeState"


# ---------------------------------------------------------------- CRD upgrade hook

def test_crd_upgrade_hook() -> str:
    objs = chart.objects(chart.render(None, upgrade=True))
    hooks = [o for o in objs if chart.is_hook(o) and o["metadata"]["annotations"]["helm.sh/hook"] != "test"]
    assert sorted(o["kind"] for o in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"], hooks
    for o in hooks:
        ann = o["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == "pre-upgrade", ann
        assert "hook-succeeded" in ann["helm.sh/hook-delete-policy"], ann
    job = next(o for o in hooks if o["kind"] == "Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] + c["args"][:2] == ["/usr/bin/kube-rdma-operator", "crds", "--apply"], c
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks}
    assert weights["Job"] > max(w for k, w in weights.items() if k != "Job"), weights
    manifests = (chart.ROOT / "manifests" / "kube-rdma.yaml").read_text(encoding="utf-8")
    assert "crd-upgrade" not in manifests, "the hook belongs to Helm, not to manifests/"
    off = chart.objects(chart.render(chart.merged(chart.default_values(), crds={"upgradeJob": {"enabled": False}})))
    assert not [o for o in off if chart.is_hook(o) and o["metadata"]["annotations"]["helm.sh/hook"] != "test"]
    # What the hook may do is said the same way where users read it: its RBAC grants create and
    # patch (a server-side apply of a missing CRD is a create), and the docs and values say so.
    role = next(o for o in hooks if o["kind"] == "ClusterRole")
    assert role["rules"][0]["verbs"] == ["create", "patch"], role
    for doc in ("docs/delivery.md", "charts/kube-rdma/values.yaml"):
        text = " ".join((chart.ROOT / doc).read_text(encoding="utf-8").split()).replace("# ", "")
        assert "get and patch" not in text and "`get` and `patch`" not in text, f"{doc} says the hook may get"
        assert re.search(r"create and\s+patch|`create` and `patch`", text), f"{doc} does not say create and patch"
    return "pre-upgrade Job runs `kube-rdma-operator crds --apply`; RBAC: create/patch of our 2 CRDs"


def checks() -> list[tuple[str, Callable[[], str | None]]]:
    out: list[tuple[str, Callable[[], str | None]]] = [
        ("chart: lint (default values, strict)", lambda: lint(None))]
    out += [(f"chart: lint (ci/{f}, strict)", lambda f=f: lint(chart.ci_values(f))) for f in chart.ci_files()]
    out += [
        ("chart: render default values (Kubernetes 1.28 and 1.30)", test_render_default),
        ("chart: render full values", test_render_full),
        ("chart: schema accepts default values", lambda: test_schema_accepts(chart.default_values())),
        ("chart: schema accepts full values", lambda: test_schema_accepts(chart.full_values())),
        ("chart: values.schema.json is current (scripts/render-manifests)", test_schema_is_current),
        *typos_test.CHECKS,
    ]
    out += [(f"chart: schema rejects pool ({label})",
             lambda pool=pool, expect=expect: test_schema_rejects(pool, expect))
            for label, (pool, expect) in BAD_POOLS.items()]
    out += [(f"chart: refuses {label}", lambda v=values, e=expect: test_guard(v, e))
            for label, (values, expect) in guards().items()]
    out += [
        ("chart: device plugin config follows pools", test_pool_config_matches_values),
        ("chart: rawConfig (sriov-network-device-plugin config.json) passed verbatim", test_raw_config_verbatim),
        ("chart: knobs reach the objects (full values)", test_knobs_reach_the_objects),
        ("chart: read-only host mounts are recursive on Kubernetes >= 1.30", test_recursive_read_only),
        ("chart: PodMonitor option", test_podmonitor),
        ("chart: metrics behind kube-rbac-proxy (ci/rbac-proxy-values.yaml)", test_rbac_proxy),
        ("chart: CRD upgrade hook (pre-upgrade Job, our binary)", test_crd_upgrade_hook),
        ("chart: helm test hook (roce-ready node, a pool device, its RdmaNodeState)", test_helm_test_hook),
    ]
    return out


def main() -> int:
    return chart.run_checks(checks())


if __name__ == "__main__":
    sys.exit(main())
