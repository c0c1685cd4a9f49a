"""scripts/test-delivery: the chart, the manifests and the image, checked with real tools.

- Helm's own engine (PyPI helm-python-sdk, Helm v4) renders and lints the chart with the default
  values and ci/full-values.yaml, and validates values against values.schema.json.
- kubernetes-validate --strict (PyPI) checks every rendered built-in object and the CRDs; custom
  resources are checked against the CRDs' own openAPIV3Schema.
- security.py checks privileges, RBAC and resources of every rendered workload.
- scripts/render-manifests --check fails when manifests/ is stale.
- The image is built with podman from statically linked binaries; in it, each binary answers
  --version, every command line the chart renders parses, the device plugin accepts the chart's pool
  config (and sriov-network-device-plugin / k8s-rdma-shared-dev-plugin files) on simulated nodes,
  the CNI installs itself as the init container does and parses every NAD config, and the agent
  checks the example RoceProfile and emits an RdmaNodeState that fits the CRD.

Prints one line per check and ends with `N passed, N failed`; exits 1 when anything failed.
Environment: KUBE_RDMA_SKIP_IMAGE=1 skips the image part (reported as failed, not passed);
KUBE_RDMA_STATIC_TARGET_DIR overrides where the static binaries are built.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import docs_test  # noqa: E402
import dra  # noqa: E402
import monitoring  # noqa: E402
import pool_schema_test  # noqa: E402
import security  # noqa: E402

ROOT = chart.ROOT
EXAMPLES = ROOT / "manifests" / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BINARIES = ["kube-rdma-device-plugin", "kube-rdma-cni", "kube-rdma-operator", "kubectl-rdma"]
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema we have.
KUBE_VERSIONS = ["1.28.0", "1.37.0"]
CUSTOM_GROUPS = ("kuberdma.io/", "k8s.cni.cncf.io/", "monitoring.coreos.com/")


class Suite:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, fn: Callable[[], str | None]) -> bool:
        start = time.monotonic()
        try:
            note = fn()
        except Exception as e:  # every failure is reported, the run goes on
            self.failed += 1
            detail = str(e) if isinstance(e, AssertionError) else traceback.format_exc(limit=3)
            print(f"FAIL {name} ({time.monotonic() - start:.1f}s)\n     " + detail.replace("\n", "\n     "))
            return False
        self.passed += 1
        print(f"ok   {name} ({time.monotonic() - start:.1f}s){' - ' + note if note else ''}")
        return True


def full_values() -> dict[str, Any]:
    return chart.load_values(chart.FULL_VALUES)


def ci_values(name: str) -> dict[str, Any]:
    return chart.load_values(chart.CHART_DIR / "ci" / name)


def ci_files() -> list[str]:
    return sorted(p.name for p in (chart.CHART_DIR / "ci").glob("*.yaml"))


def default_values() -> dict[str, Any]:
    return chart.load_values(chart.CHART_DIR / "values.yaml")


def merged(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out.update(changes)
    return out


def render_error(values: dict[str, Any]) -> str:
    """The error message rendering gives for `values`; fails when rendering succeeds."""
    try:
        chart.render(values)
    except Exception as e:  # helm_python raises HelmValuesError / HelmRenderError
        return str(e)
    raise AssertionError("rendering succeeded but was expected to fail")


# ---------------------------------------------------------------- helm engine: lint, render, schema

def lint(values: dict[str, Any] | None) -> str:
    import helm_python as helm

    report = helm.lint(chart.CHART_DIR, values, strict=True, namespace=chart.NAMESPACE)
    bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    assert not report.get("errors") and not bad, json.dumps(report, indent=1)
    return f"{len(report.get('messages', []))} info message(s)"


def kinds(objs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in objs:
        out[o["kind"]] = out.get(o["kind"], 0) + 1
    return out


def test_render_default() -> str:
    """Default values, as on Kubernetes 1.28 (no ValidatingAdmissionPolicy) and 1.30."""
    # ClusterRoles: agent, controller, CRD hook, and the view aggregation (bound to nothing);
    # Roles: the agent's and the controller's for Events in `default`.
    base = {"ServiceAccount": 4, "ClusterRole": 4, "ClusterRoleBinding": 3, "Role": 2, "RoleBinding": 2,
            "ConfigMap": 1, "Service": 3, "DaemonSet": 2, "Deployment": 1, "Job": 1}
    old = kinds(chart.objects(chart.render(None, kube_version="1.28.0")))
    assert old == base, f"1.28: kinds {old} != {base}"
    new = kinds(chart.objects(chart.render(None, kube_version="1.30.0")))
    # The agent's node-label and node-state policies, the controller's node-label policy.
    want = {**base, "ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3}
    assert new == want, f"1.30: kinds {new} != {want}"
    return ", ".join(f"{k}={v}" for k, v in sorted(new.items()))


def test_render_full() -> str:
    objs = chart.objects(chart.render(full_values()))
    got = kinds(objs)
    for kind, n in {"RoceProfile": 2, "NetworkAttachmentDefinition": 2, "ServiceMonitor": 1,
                    "PrometheusRule": 1, "ConfigMap": 2, "DaemonSet": 2, "Deployment": 1}.items():
        assert got.get(kind) == n, f"{kind}: {got.get(kind)} != {n} in {got}"
    return ", ".join(f"{k}={v}" for k, v in sorted(got.items()))


def test_pool_config_matches_values() -> None:
    values = full_values()
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
    raw = (FIXTURES / "sriovdp-config.json").read_text(encoding="utf-8")
    values = merged(default_values(), pools=[], rawConfig=raw)
    objs = chart.objects(chart.render(values))
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert json.loads(cm["data"]["config.yaml"]) == json.loads(raw), cm["data"]["config.yaml"]


def test_schema_accepts(values: dict[str, Any]) -> None:
    import helm_python as helm

    with helm.Chart.load(chart.CHART_DIR) as c:
        c.validate_schema(c.merge_values(values))


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

    values = merged(default_values(), pools=[pool])
    with helm.Chart.load(chart.CHART_DIR) as c:
        try:
            c.validate_schema(c.merge_values(values))
        except helm.HelmValuesError as e:
            msg = str(e)
        else:
            raise AssertionError(f"schema accepted bad pool {pool}")
    assert expect in msg, f"schema error does not point at {expect!r}:\n{msg}"
    # An install (render) must refuse the same values.
    render_error(values)
    return msg.splitlines()[-1].strip(" -")[:110]


def test_guard(values: dict[str, Any], expect: str) -> str:
    msg = render_error(values)
    assert expect in msg, f"error {msg!r} does not mention {expect!r}"
    return expect


# ---------------------------------------------------------------- kubernetes-validate and CRDs

def kubernetes_validate(docs: list[dict[str, Any]], label: str) -> str:
    return chart.kubernetes_validate(docs, label, KUBE_VERSIONS)


def validate_rendered(values: dict[str, Any] | None, label: str) -> str:
    """kubernetes-validate --strict of the built-in objects, rendered as for each Kubernetes
    version checked (the chart adapts to the cluster's version and APIs)."""
    notes = []
    for version in KUBE_VERSIONS:
        objs = builtin(chart.objects(chart.render(values, kube_version=version)))
        chart.kubernetes_validate(objs, label, [version])
        notes.append(f"{len(objs)} on {version}")
    return ", ".join(notes)


def builtin(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if not o["apiVersion"].startswith(CUSTOM_GROUPS)]


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version of the chart's CRDs."""
    out = {}
    for crd in chart.crd_documents():
        group = crd["spec"]["group"]
        for v in crd["spec"]["versions"]:
            if v.get("served"):
                out[(f"{group}/{v['name']}", crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return out


def structural(schema: Any) -> Any:
    """The openAPIV3Schema as JSON Schema: `nullable: true` becomes a null type alternative."""
    if isinstance(schema, list):
        return [structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: structural(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    elif out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        # Structural schemas prune unknown fields: treat them as errors, like kubectl's strict
        # field validation.
        out["additionalProperties"] = False
    return out


def validate_custom(obj: dict[str, Any]) -> None:
    import jsonschema

    schemas = crd_schemas()
    key = (obj["apiVersion"], obj["kind"])
    assert key in schemas, f"no CRD serves {key}"
    schema = structural(schemas[key])
    # The API server supplies these three for every custom resource; CRD schemas leave them out.
    schema.setdefault("properties", {}).update(
        apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: " + "; ".join(
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_crds_shape() -> str:
    crds = chart.crd_documents()
    found = {(c["spec"]["names"]["kind"], c["spec"]["names"]["plural"], c["spec"]["scope"]) for c in crds}
    want = {("RdmaNodeState", "rdmanodestates", "Cluster"), ("RoceProfile", "roceprofiles", "Cluster")}
    assert found == want, found
    for c in crds:
        assert c["spec"]["group"] == "kuberdma.io", c["spec"]["group"]
        versions = [v["name"] for v in c["spec"]["versions"] if v.get("served") and v.get("storage")]
        assert versions == ["v1alpha1"], versions
        sub = [v.get("subresources", {}) for v in c["spec"]["versions"]]
        assert all("status" in s for s in sub), f"{c['metadata']['name']}: no status subresource"
    return f"{len(crds)} CRDs"


def test_custom_resources(objs: list[dict[str, Any]]) -> str:
    crs = [o for o in objs if o["apiVersion"].startswith("kuberdma.io/")]
    assert crs, "no kuberdma.io object to check"
    for o in crs:
        validate_custom(o)
    return f"{len(crs)} object(s)"


def test_crd_schema_rejects_bad_profile() -> None:
    bad = yaml.safe_load((EXAMPLES / "roceprofile.yaml").read_text(encoding="utf-8"))
    bad["spec"]["mode"] = "Sometimes"
    bad["spec"]["pfc"] = {"priorities": [9]}
    try:
        validate_custom(bad)
    except AssertionError as e:
        assert "mode" in str(e) and "priorities" in str(e), str(e)
        return
    raise AssertionError("a RoceProfile with mode Sometimes and PFC priority 9 was accepted")


def check_nad(nad: dict[str, Any], resources: set[str] | None) -> dict[str, Any]:
    assert nad["apiVersion"] == "k8s.cni.cncf.io/v1" and nad["kind"] == "NetworkAttachmentDefinition"
    resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    prefix, _, pool = resource.partition("/")
    assert prefix and pool, resource
    if resources is not None:
        assert resource in resources, f"{resource} is not one of the pools {sorted(resources)}"
    conf = json.loads(nad["spec"]["config"])
    assert conf["type"] == "kube-rdma-cni", conf
    assert conf["name"] == nad["metadata"]["name"], conf
    assert conf["cniVersion"] == "1.1.0", conf
    assert "ipam" in conf and "type" in conf["ipam"], conf
    return conf


def test_rendered_nads() -> str:
    values = full_values()
    objs = chart.objects(chart.render(values))
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    resources = {f"{p.get('resourcePrefix', values['resourcePrefix'])}/{p['name']}" for p in values["pools"]}
    confs = [check_nad(n, resources) for n in nads]
    assert nads[1]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == "intel.com/e810_vf"
    assert confs[0]["mtu"] == 9000 and nads[0]["metadata"]["namespace"] == "ml-jobs", confs[0]
    assert nads[1]["metadata"]["namespace"] == chart.NAMESPACE, nads[1]["metadata"]
    return f"{len(nads)} NAD(s)"


def test_servicemonitor() -> None:
    objs = chart.objects(chart.render(full_values()))
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    services = [o for o in objs if o["kind"] == "Service"]
    labels = sm["spec"]["selector"]["matchLabels"]
    picked = [s for s in services if all(s["metadata"]["labels"].get(k) == v for k, v in labels.items())]
    assert len(picked) == 3, f"ServiceMonitor selects {len(picked)} services (device plugin, agent, controller)"
    for s in picked:
        assert [p["name"] for p in s["spec"]["ports"]] == ["metrics"], s["spec"]["ports"]
    assert sm["metadata"]["labels"]["release"] == "prometheus", sm["metadata"]["labels"]


def load_examples() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out[path.name] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return out


def test_examples() -> str:
    ex = load_examples()
    nad = ex["network-attachment-definition.yaml"][0]
    conf = check_nad(nad, None)
    pool = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    pods = ex["pod-rdma.yaml"]
    assert pods and all(p["kind"] == "Pod" for p in pods), [p["kind"] for p in pods]
    for pod in pods:
        nets = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        assert nad["metadata"]["name"] in nets, nets
        for c in pod["spec"]["containers"]:
            limits = c["resources"]["limits"]
            assert limits.get(pool) in (1, "1"), f"{c['name']} does not request {pool}: {limits}"
    kubernetes_validate(pods, "examples/pod-rdma.yaml")
    for doc in ex["roceprofile.yaml"]:
        validate_custom(doc)
    return f"NAD {conf['name']} -> {pool}; {len(pods)} pod(s); RoceProfile valid"


def readme_values() -> tuple[str, dict[str, Any]]:
    """The quick start's examples/pools.yaml text and its values merged with examples/my-values.yaml
    (README.md shows both files; the docs test checks that it shows them as they are)."""
    pools = (ROOT / "examples" / "pools.yaml").read_text(encoding="utf-8")
    rest = (ROOT / "examples" / "my-values.yaml").read_text(encoding="utf-8")
    return pools, {**yaml.safe_load(pools), **yaml.safe_load(rest)}


def test_docs_blocks() -> str:
    files = docs_test.doc_files([])
    failures = docs_test.run(files, quiet=True)
    assert not failures, "\n".join(failures)
    return f"{len(files)} files"


def test_readme_example_renders() -> str:
    _, values = readme_values()
    objs = chart.objects(chart.render(values))
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    assert len(nads) == 1, kinds(objs)
    check_nad(nads[0], {"kuberdma.io/rdma_vfs"})
    for o in objs:
        if o["apiVersion"].startswith("kuberdma.io/"):
            validate_custom(o)
    validate_rendered(values, "README example")
    return "pools.yaml + my-values.yaml render and validate"


def test_agent_privileges() -> None:
    d = chart.objects(chart.render(None))
    f = chart.objects(chart.render(full_values()))

    def agent_sc(objs: list[dict[str, Any]]) -> dict[str, Any]:
        ds = next(o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-agent"))
        return ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]

    sd, sf = agent_sc(d), agent_sc(f)
    assert sd.get("runAsNonRoot") is True and "add" not in sd["capabilities"], sd
    assert sf["capabilities"].get("add") == ["NET_ADMIN"] and sf.get("runAsUser") == 0, sf

    def agent_mounts(objs: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
        ds = next(o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-agent"))
        spec = ds["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        return {m["mountPath"]: (vols[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
                for m in spec["containers"][0]["volumeMounts"]}

    # Reading needs no host sysfs; Enforce reads the host's read-only and writes only device
    # attributes and rdma_cm's configfs.
    assert agent_mounts(d) == {"/host/dev": ("/dev", True)}, agent_mounts(d)
    assert agent_mounts(f) == {"/host/dev": ("/dev", True), "/host/sys": ("/sys", True),
                               "/host/sys/devices": ("/sys/devices", False),
                               "/host/sys/kernel/config": ("/sys/kernel/config", False)}, agent_mounts(f)
    # A simulated node is written in its own tree (mounted read-write): no host sysfs or configfs.
    sim = chart.objects(chart.render({**full_values(), "simulatedNode": {"path": "/var/lib/sim"}}))
    assert agent_mounts(sim) == {"/host/dev": ("/dev", True), "/var/lib/sim": ("/var/lib/sim", False)}, \
        agent_mounts(sim)


def effective_values(values: dict[str, Any]) -> dict[str, Any]:
    """`values` merged over the chart's defaults, as Helm does before rendering."""
    import helm_python as helm

    with helm.Chart.load(chart.CHART_DIR) as c:
        return c.merge_values(values)


def test_security(values: dict[str, Any]) -> str:
    values = effective_values(values)
    objs = chart.objects(chart.render(values, upgrade=True))
    problems = security.check_workloads(objs, values) + security.check_rbac(objs) + \
        security.check_rbac_exact(objs, values)
    assert not problems, "\n".join(problems)
    n = sum(1 for o in objs if o["kind"] in security.WORKLOAD_KINDS)
    return f"{n} workload(s) clean"


def test_security_catches_mutations() -> str:
    """The checker is not vacuous: each privilege we might add by mistake is reported."""
    values = effective_values(default_values())
    # Rendered as on `helm upgrade`, so the CRD hook's role is there too; clean before mutating,
    # or every mutation would be "caught" by the same unrelated problem.
    base = chart.objects(chart.render(values, upgrade=True))

    def problems(objs: list[dict[str, Any]]) -> list[str]:
        return security.check_workloads(objs, values) + security.check_rbac(objs) + \
            security.check_rbac_exact(objs, values)

    assert not problems(base), "\n".join(problems(base))

    def c0(o: dict[str, Any]) -> dict[str, Any]:
        return o["spec"]["template"]["spec"]["containers"][0]

    cases = {
        "privileged": lambda o: c0(o)["securityContext"].update(privileged=True),
        "writable root": lambda o: c0(o)["securityContext"].update(readOnlyRootFilesystem=False),
        "root": lambda o: c0(o)["securityContext"].update(runAsNonRoot=False, runAsUser=0),
        "SYS_ADMIN": lambda o: c0(o)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "no requests": lambda o: c0(o)["resources"].pop("requests"),
        "hostNetwork": lambda o: o["spec"]["template"]["spec"].update(hostNetwork=True),
        "secrets": lambda o: o["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        "list pods": lambda o: o["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}),
        # Verbs the binaries never use (issue 21): each one must be reported.
        "get status": lambda o: o["rules"].append(
            {"apiGroups": ["kuberdma.io"], "resources": ["rdmanodestates/status"], "verbs": ["get"]}),
        "update profile status": lambda o: o["rules"].append(
            {"apiGroups": ["kuberdma.io"], "resources": ["roceprofiles/status"], "verbs": ["update"]}),
        "core events": lambda o: o["rules"].append({"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}),
        "events everywhere": lambda o: o["rules"].append(
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}),
        "patch events": lambda o: o["rules"][0]["verbs"].append("patch"),
        "drop the view aggregation": lambda o: o["metadata"]["labels"].pop(
            "rbac.authorization.k8s.io/aggregate-to-view"),
        "hook may get": lambda o: o["rules"][0]["verbs"].append("get"),
        "hook without create": lambda o: o["rules"][0]["verbs"].remove("create"),
    }
    targets = {
        "secrets": ("ClusterRole", "agent"), "list pods": ("ClusterRole", "controller"),
        "get status": ("ClusterRole", "agent"), "update profile status": ("ClusterRole", "controller"),
        "core events": ("ClusterRole", "agent"), "events everywhere": ("ClusterRole", "controller"),
        "patch events": ("Role", "agent"), "drop the view aggregation": ("ClusterRole", "view"),
        "hook may get": ("ClusterRole", "crd-upgrade"), "hook without create": ("ClusterRole", "crd-upgrade"),
    }
    for name, fn in cases.items():
        kind, comp = targets.get(name, ("Deployment", None))
        objs = copy.deepcopy(base)
        target = next(o for o in objs if o["kind"] == kind
                      and (comp is None or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == comp))
        fn(target)
        assert problems(objs), f"mutation '{name}' went unnoticed"
    return f"{len(cases)} mutations caught"


# ---------------------------------------------------------------- manifests

def test_manifests_fresh() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "render-manifests"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_manifests_check_detects_staleness() -> str:
    """`render-manifests --check` fails on an edited copy and passes on a fresh one."""
    script = [sys.executable, str(ROOT / "scripts" / "render-manifests")]
    with tempfile.TemporaryDirectory(prefix="kube-rdma-manifests-") as tmp:
        env = dict(os.environ, KUBE_RDMA_MANIFESTS_DIR=tmp)
        res = subprocess.run(script, env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        fresh = subprocess.run(script + ["--check"], env=env, capture_output=True, text=True)
        assert fresh.returncode == 0, fresh.stderr
        main = Path(tmp, "kube-rdma.yaml")
        main.write_text(main.read_text(encoding="utf-8").replace("--rescan-interval=30", "--rescan-interval=5"),
                        encoding="utf-8")
        stale = subprocess.run(script + ["--check"], env=env, capture_output=True, text=True)
        assert stale.returncode == 1 and "rescan-interval" in stale.stderr, stale.stderr
    return "an edited manifest is reported with its diff"


def test_manifests_validate() -> str:
    """manifests/ is rendered for Kubernetes >= 1.30 (chart.MANIFESTS_KUBE_VERSION)."""
    path = ROOT / "manifests" / "kube-rdma.yaml"
    objs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert objs[0]["kind"] == "Namespace", objs[0]["kind"]
    global KUBE_VERSIONS
    saved, KUBE_VERSIONS = KUBE_VERSIONS, [chart.MANIFESTS_KUBE_VERSION, KUBE_VERSIONS[-1]]
    try:
        return kubernetes_validate(builtin(objs), "manifests/kube-rdma.yaml")
    finally:
        KUBE_VERSIONS = saved


def test_crds_validate() -> str:
    return kubernetes_validate(chart.crd_documents(), "CRDs")


def test_crd_sync() -> str:
    problem = chart.crd_sync_problem()
    assert problem is None, problem + " (run scripts/render-manifests)"
    return "in sync with operator/crds/crds.yaml" if chart.OPERATOR_CRDS.exists() else \
        "operator/crds/crds.yaml not committed yet: chart copy used as is"



# ---------------------------------------------------------------- values schema: typos anywhere

def schema_json() -> dict[str, Any]:
    return json.loads(chart.VALUES_SCHEMA.read_text(encoding="utf-8"))


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def closed_schema_nodes(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(JSON pointer, node) of every object schema that names its keys, anywhere in the schema."""
    out = []

    def walk(node: Any, ptr: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("type") in ("object", ["object", "null"], None):
                out.append((ptr, node))
            for k, v in node.items():
                if k in ("if", "not"):
                    continue  # conditions, not the shape of a values object
                if k == "properties":
                    for name, sub in v.items():
                        walk(sub, f"{ptr}/properties/{name}")
                else:
                    walk(v, f"{ptr}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{ptr}/{i}")
    walk(schema, "")
    return out


def value_objects(schema: dict[str, Any], value: Any, node: dict[str, Any], path: list[Any],
                  out: list[tuple[list[Any], int]]) -> None:
    """Every (path, id of its closed schema node) of an object in `value` that the schema closes."""
    node = resolve(schema, node)
    if isinstance(value, dict):
        if "if" in node and "then" in node:  # selectors: object or list
            value_objects(schema, value, node["then"], path, out)
            return
        if node.get("additionalProperties") is False:
            out.append((path, id(node)))
        for k, v in value.items():
            sub = node.get("properties", {}).get(k)
            if sub is not None:
                value_objects(schema, v, sub, path + [k], out)
    elif isinstance(value, list):
        item = node.get("items") or node.get("else", {}).get("items")
        if item is not None:
            for i, v in enumerate(value):
                value_objects(schema, v, item, path + [i], out)


def with_key(values: dict[str, Any], path: list[Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(values)
    target: Any = out
    for p in path:
        target = target[p]
    target[key] = True
    return out


def test_schema_objects_are_closed() -> str:
    """Every object schema with named keys refuses others (profiles' spec: the CRD's own)."""
    schema = schema_json()
    nodes = closed_schema_nodes(schema)
    open_ = [ptr for ptr, n in nodes if n.get("additionalProperties") is not False]
    assert not open_, f"object schemas that accept unknown keys: {open_}"
    return f"{len(nodes)} object schemas, all closed"


def test_typo_in_every_object_is_rejected() -> str:
    """A misspelt key in ANY values object fails `helm install`. Walks every object of the
    default values and each ci/*.yaml, adds a key no schema knows, and expects the schema error
    to name that object; also checks that every closed object of the schema was reached."""
    import helm_python as helm

    schema = schema_json()
    closed_ids = {id(n): ptr for ptr, n in closed_schema_nodes(schema)}
    seen: set[int] = set()
    tried = 0
    sources = [("values.yaml", default_values())] + [(f, ci_values(f)) for f in ci_files()]
    with helm.Chart.load(chart.CHART_DIR) as c:
        for label, values in sources:
            merged_values = c.merge_values(values)
            objs: list[tuple[list[Any], int]] = []
            value_objects(schema, merged_values, schema, [], objs)
            for path, node_id in objs:
                seen.add(node_id)
                bad = with_key(merged_values, path, "typoKey")
                try:
                    c.validate_schema(bad)
                except helm.HelmValuesError as e:
                    where = "/" + "/".join(map(str, path))
                    assert "typoKey" in str(e) and (where == "/" or where in str(e)), \
                        f"{label}: typo at {where} rejected without naming it:\n{e}"
                else:
                    raise AssertionError(f"{label}: a typo at /{'/'.join(map(str, path))} was accepted")
                tried += 1
    unreached = sorted(ptr for i, ptr in closed_ids.items() if i not in seen)
    assert not unreached, f"closed objects no values file exercises (add them to ci/full-values.yaml): {unreached}"
    return f"{tried} objects in {len(sources)} values files, {len(closed_ids)} schema objects all reached"


def test_named_typos_rejected() -> str:
    """The typos a user makes: `hostnetwork` and `allowEnforc` fail the install, naming the key."""
    d = default_values()
    cases = {
        "devicePlugin.hostnetwork": merged(d, devicePlugin={**d["devicePlugin"], "hostnetwork": False}),
        "agent.allowEnforc": merged(d, agent={**d["agent"], "allowEnforc": True}),
        "metrics.serviceMonitor.enable": merged(d, metrics={**d["metrics"], "serviceMonitor": {"enable": True}}),
        "profiles[0].spec.pfc.priorites": merged(d, profiles=[{"name": "p", "spec": {"pfc": {"priorites": [3]}}}]),
    }
    for key, values in cases.items():
        msg = render_error(values)
        assert key.rsplit(".", 1)[1] in msg, f"{key}: error does not name it: {msg}"
    return ", ".join(cases)


# ---------------------------------------------------------------- migration

native_binary = chart.native_binary


def example_node(tmp: str, node: str, netns: str | None) -> Path:
    """examples/nodes/NODE copied into `tmp`, in RDMA netns mode `netns` when given: pools that
    share HCAs need `shared`, VF pools `exclusive`, or discover fails its rdma-netns check (exit 1)."""
    text = (ROOT / "examples" / "nodes" / node).read_text(encoding="utf-8")
    if netns:
        text = re.sub(r"(?m)^rdmaNetnsMode:.*\n", "", text)
        text = re.sub(r"(?m)^(node: .*\n)", rf"\1rdmaNetnsMode: {netns}\n", text, count=1)
    out = Path(tmp, node)
    out.write_text(text, encoding="utf-8")
    return out


def discover(config: str, node: str, netns: str | None = None) -> dict[str, int]:
    """`kube-rdma-device-plugin discover --config FILE --sim NODE --output json`: resource -> devices."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-migrate-") as tmp:
        cfg = Path(tmp, "config.yaml")
        cfg.write_text(config, encoding="utf-8")
        res = subprocess.run([str(native_binary("kube-rdma-device-plugin")), "discover", "--config", str(cfg),
                              "--sim", str(example_node(tmp, node, netns)), "--output", "json"],
                             capture_output=True, text=True)
    assert res.returncode == 0, res.stderr + res.stdout[-2000:]
    return {p["resource"]: len(p["devices"]) for p in json.loads(res.stdout)["pools"]}


def test_migration_sndp() -> str:
    """ci/migration-sndp-values.yaml: each NAD's resourceName is exactly what the device plugin
    advertises for that sriov-network-device-plugin file (its own prefix, else intel.com)."""
    values = ci_values("migration-sndp-values.yaml")
    rendered = chart.render(values)
    objs = chart.objects(rendered)
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.yaml"]
    assert json.loads(config) == json.loads(values["rawConfig"]), "rawConfig was not passed verbatim"
    advertised = discover(config, "mixed.yaml", "exclusive")
    nads = {n["metadata"]["name"]: n["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
            for n in objs if n["kind"] == "NetworkAttachmentDefinition"}
    assert len(nads) == len(values["networks"]), nads
    for net in values["networks"]:
        resource = nads[net["name"]]
        match = [r for r in advertised if r.rsplit("/", 1)[1] == net["pool"]]
        assert match == [resource], f"network {net['name']}: NAD names {resource}, the plugin advertises {match}"
        assert advertised[resource] > 0, f"{resource} has no device on the simulated node: {advertised}"
        assert f"resources.limits: {resource}: 1" in rendered["kube-rdma/templates/NOTES.txt"]
    assert set(nads.values()) == {"nvidia.com/cx7_rdma_vf", "intel.com/e810_rdma_vf"}, nads
    return f"{nads} == discover {advertised}"


def test_migration_rsdp() -> str:
    values = ci_values("migration-rsdp-values.yaml")
    rendered = chart.render(values)
    config = next(o for o in chart.objects(rendered) if o["kind"] == "ConfigMap")["data"]["config.yaml"]
    advertised = discover(config, "cx6dx-dual.yaml", "shared")
    assert list(advertised) == ["rdma/hca_shared_devices_a"], advertised
    notes = rendered["kube-rdma/templates/NOTES.txt"]
    assert "rdma/hca_shared_devices_a" in notes and "kuberdma.io/" not in notes.split("Check what")[0], notes
    return f"NOTES and discover agree: {advertised}"


def test_network_on_unknown_raw_pool() -> str:
    values = ci_values("migration-sndp-values.yaml")
    values["networks"][0]["pool"] = "cx7_vf"
    msg = render_error(values)
    assert "cx7_vf" in msg and "rawConfig" in msg and "cx7_rdma_vf" in msg, msg
    return msg.split("error calling include: ")[-1][:120]


# ---------------------------------------------------------------- chart knobs

def workload(objs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))


def test_knobs_reach_the_objects() -> str:
    values = full_values()
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
    assert ct["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # Node components: rdmaNodeLabel plus their own nodeSelector; the controller neither.
    assert dp["spec"]["template"]["spec"]["nodeSelector"] == {
        "kuberdma.io/rdma-node": "yes", "feature.node.kubernetes.io/network-sriov.capable": "true"}
    assert "nodeSelector" not in ct["spec"]["template"]["spec"]
    d = chart.objects(chart.render(None))
    sel = workload(d, "DaemonSet", "-agent")["spec"]["template"]["spec"]["nodeSelector"]
    assert sel == {"feature.node.kubernetes.io/rdma.capable": "true"}, sel
    off = chart.objects(chart.render(merged(default_values(), rdmaNodeLabel={"key": "", "value": ""})))
    assert "nodeSelector" not in workload(off, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    nosa = merged(default_values(), controller={**default_values()["controller"],
                                                "serviceAccount": {"create": False, "name": ""}})
    assert "name must name an existing ServiceAccount" in render_error(nosa)
    return "digest, logFormat, podLabels, extraEnv/Args/Volumes, updateStrategy, serviceAccount, probes, nodeSelector"


def test_recursive_read_only() -> str:
    """Read-only host mounts are recursive where the API has the field (>= 1.30), absent before."""
    def ro_mounts(version: str) -> list[dict[str, Any]]:
        objs = chart.objects(chart.render(full_values(), kube_version=version))
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
    values = merged(default_values(), metrics={**default_values()["metrics"], "podMonitor": {"enabled": True}})
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
    both = merged(values, metrics={**values["metrics"], "serviceMonitor": {"enabled": True}})
    assert "not both" in render_error(both)
    return f"selects {len(workloads)} workloads on their metrics port, node from the pod"


def test_rbac_proxy() -> str:
    values = ci_values("rbac-proxy-values.yaml")
    objs = chart.objects(chart.render(values, kube_version="1.31.0"))
    for o in objs:
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
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["scheme"] == "https", sm
    reader = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("metrics-reader"))
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], reader
    pm = merged(values, metrics={**values["metrics"], "serviceMonitor": {"enabled": False},
                                 "podMonitor": {"enabled": True}})
    assert "use metrics.serviceMonitor" in render_error(pm)
    return "daemons on 127.0.0.1, proxies on the metrics ports, https ServiceMonitor, reader role"


# ---------------------------------------------------------------- node label policy (CEL)

def vap(objs: list[dict[str, Any]], component: str = "agent") -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith(f"-{component}-node-label"))


def admit(policy: dict[str, Any], username: str, node_claim: list[str] | None, old: dict[str, Any],
          new: dict[str, Any]) -> list[str]:
    """Evaluates the policy as the API server does for an UPDATE of a Node: matchConditions
    first (a non-match admits), then each validation; returns the messages of failed ones."""
    import celpy

    extra = {} if node_claim is None else {"authentication.kubernetes.io/node-name": node_claim}
    request = {"operation": "UPDATE", "userInfo": {"username": username, "extra": extra}}
    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old),
           "request": celpy.json_to_cel(request)}

    def run(expr: str) -> Any:
        return env.program(env.compile(expr)).evaluate(act)

    if not all(run(m["expression"]) for m in policy["spec"].get("matchConditions", [])):
        return []
    return [str(run(v["messageExpression"])) if "messageExpression" in v else v["message"]
            for v in policy["spec"]["validations"] if not run(v["expression"])]


READY = "kuberdma.io/roce-ready"


def node_object(**meta: Any) -> dict[str, Any]:
    """A Node as the API server hands it to admission, with `meta` over its metadata."""
    base = {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}, "annotations": {"a": "b"}}
    return {"metadata": {**base, **meta}, "spec": {"podCIDR": "10.0.0.0/24"}}


def with_labels(obj: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    """`obj` with labels set (None removes one)."""
    out = copy.deepcopy(obj)
    for k, v in labels.items():
        k = k.replace("__", "/").replace("_", ".")
        if v is None:
            out["metadata"]["labels"].pop(k, None)
        else:
            out["metadata"]["labels"][k] = v
    return out


def ready_label(obj: dict[str, Any], value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if value is None:
        out["metadata"]["labels"].pop(READY, None)
    else:
        out["metadata"]["labels"][READY] = value
    return out


def node_label_policy_cases(agent: str, controller: str) -> list[tuple[str, str, str, list[str] | None,
                                                                       dict[str, Any], dict[str, Any], bool]]:
    """(component, case, user, node claim, old, new, denied): every metadata change a writer of
    the label might make, for the agent (own node, claim) and the controller (any node)."""
    node = node_object()
    ready = ready_label(node, "true")
    meta = lambda **m: node_object(**{**ready["metadata"], **m})  # noqa: E731
    cases = []
    for comp, user, claim, allowed, refused in (
            ("agent", agent, ["n1"], ["true", "false"], "unknown"),
            ("controller", controller, None, ["unknown"], "true")):
        cases += [
            (comp, f"set the label to {allowed[0]}", user, claim, node, ready_label(node, allowed[0]), False),
            (comp, f"flip the label to {allowed[-1]}", user, claim, ready_label(node, "x"),
             ready_label(node, allowed[-1]), False),
            (comp, f"set the label to {refused}", user, claim, node, ready_label(node, refused), True),
            (comp, "remove the label", user, claim, ready, ready_label(ready, None), True),
            (comp, "another label", user, claim, ready, {**ready, "metadata": {
                **ready["metadata"], "labels": {**ready["metadata"]["labels"], "node-role.kubernetes.io/gpu": ""}}},
             True),
            (comp, "remove another label", user, claim, ready, {**ready, "metadata": {
                **ready["metadata"], "labels": {READY: "true"}}}, True),
            (comp, "cordon", user, claim, ready, {**ready, "spec": {**ready["spec"], "unschedulable": True}}, True),
            (comp, "annotate", user, claim, ready, meta(annotations={"x": "y"}), True),
            (comp, "drop the annotations", user, claim, ready,
             {**ready, "metadata": {k: v for k, v in ready["metadata"].items() if k != "annotations"}}, True),
            # A finalizer would block the Node's deletion; an ownerReference would let the GC delete it.
            (comp, "add a finalizer", user, claim, ready, meta(finalizers=["kuberdma.io/keep"]), True),
            (comp, "add an ownerReference", user, claim, ready, meta(ownerReferences=[{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u1"}]), True),
            (comp, "change generateName", user, claim, ready, meta(generateName="n-"), True),
            (comp, "the label and a finalizer at once", user, claim, node,
             node_object(**{**ready_label(node, allowed[0])["metadata"], "finalizers": ["f"]}), True),
        ]
    other = ready_label(node_object(name="n2", labels={"kubernetes.io/hostname": "n2"}), None)
    cases += [
        ("agent", "another node", agent, ["n1"], other, ready_label(other, "true"), True),
        ("agent", "token without a node claim", agent, None, node, ready_label(node, "true"), True),
        ("controller", "any node", controller, None, ready_label(other, "true"), ready_label(other, "unknown"), False),
        ("agent", "someone else", "system:serviceaccount:kube-system:node-controller", ["n9"], node,
         with_labels(node, other="x"), False),
        ("controller", "someone else", "system:serviceaccount:kube-system:node-controller", None, node,
         meta(finalizers=["f"]), False),
    ]
    return cases


def test_node_label_policy() -> str:
    """The agent's ServiceAccount may set kuberdma.io/roce-ready (true|false) on its own node, the
    controller's may set it to unknown on any node; nothing else of a Node changes."""
    objs = chart.objects(chart.render(None, kube_version="1.30.0"))
    policies = {c: vap(objs, c) for c in ("agent", "controller")}
    for comp, policy in policies.items():
        binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"
                       and o["spec"]["policyName"] == policy["metadata"]["name"])
        assert binding["spec"]["validationActions"] == ["Deny"], binding
        assert policy["spec"]["failurePolicy"] == "Fail"
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                          "resources": ["nodes"]}], rules
    users = {c: f"system:serviceaccount:{chart.NAMESPACE}:{chart.RELEASE}-{c}" for c in ("agent", "controller")}
    cases = node_label_policy_cases(users["agent"], users["controller"])
    for comp, label, user, claim, old, new, denied in cases:
        why = admit(policies[comp], user, claim, old, new)
        assert bool(why) == denied, f"{comp}, {label}: {'admitted' if not why else why}"
        # The other component's policy never matches this user.
        other = "controller" if comp == "agent" else "agent"
        if user in users.values() and user != users[other]:
            assert not admit(policies[other], user, claim, old, new), f"{other} policy matched {comp}: {label}"
    # The agent's own RdmaNodeState, by the same node claim (RBAC cannot name it).
    state_policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                        and o["metadata"]["name"].endswith("-agent-node-state"))
    rules = state_policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["kuberdma.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["rdmanodestates", "rdmanodestates/status"]}], rules
    state = lambda n: {"metadata": {"name": n}, "spec": {"nodeName": n}}  # noqa: E731
    state_cases = [
        ("own state", users["agent"], ["n1"], state("n1"), False),
        ("another node's state", users["agent"], ["n1"], state("n2"), True),
        ("no node claim", users["agent"], None, state("n1"), True),
        ("the controller", users["controller"], None, state("n2"), False),
    ]
    for label, user, claim, obj, denied in state_cases:
        why = admit(state_policy, user, claim, obj, obj)
        assert bool(why) == denied, f"rdmanodestates, {label}: {'admitted' if not why else why}"
    assert not admit(state_policy, users["agent"], ["n1"], state("n1"), state("n1"))
    assert "may write only the RdmaNodeState of the node its pod runs on, not n2" in \
        admit(state_policy, users["agent"], ["n1"], state("n2"), state("n2"))[0]
    all_names = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    for comp, left in (("agent", ["controller-node-label"]), ("controller", ["agent-node-label", "agent-node-state"])):
        off_values = merged(default_values(), **{comp: {**default_values()[comp], "nodeLabelPolicy": {"enabled": False}}})
        off = chart.objects(chart.render(off_values, kube_version="1.30.0"))
        names = sorted(o["metadata"]["name"] for o in off if o["kind"] == "ValidatingAdmissionPolicy")
        assert names == [n for n in all_names if any(n.endswith(x) for x in left)], names
    assert not [o for o in chart.objects(chart.render(None, kube_version="1.29.0"))
                if o["kind"] == "ValidatingAdmissionPolicy"], "rendered for a cluster without the API"
    return f"{len(cases) + len(state_cases)} admission cases evaluated with CEL (cel-python), 3 policies"


# ---------------------------------------------------------------- CRD upgrade hook

def test_crd_upgrade_hook() -> str:
    objs = chart.objects(chart.render(None, upgrade=True))
    hooks = [o for o in objs if chart.is_hook(o)]
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
    manifests = (ROOT / "manifests" / "kube-rdma.yaml").read_text(encoding="utf-8")
    assert "crd-upgrade" not in manifests, "the hook belongs to Helm, not to manifests/"
    off = chart.objects(chart.render(merged(default_values(), crds={"upgradeJob": {"enabled": False}})))
    assert not [o for o in off if chart.is_hook(o)]
    return "pre-upgrade Job runs `kube-rdma-operator crds --apply`; RBAC: create/patch of our 2 CRDs"


# ---------------------------------------------------------------- alerts, dashboard, metrics

def monitoring_objects() -> list[dict[str, Any]]:
    return chart.objects(chart.render(full_values()))


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
    values = full_values()
    r = values["metrics"]["prometheusRule"]
    groups = monitoring.prometheus_rule_groups(monitoring_objects())
    alerts = sorted(monitoring.rule_exprs(groups))
    monitoring.promtool_test(groups, r["for"], r["pauseStormFramesPerSecond"], r["staleAfterSeconds"])
    d = default_values()["metrics"]["prometheusRule"]
    dgroups = monitoring.prometheus_rule_groups(chart.objects(chart.render(merged(
        default_values(), metrics={**default_values()["metrics"], "prometheusRule": {**d, "enabled": True}}))))
    monitoring.promtool_test(dgroups, d["for"], d["pauseStormFramesPerSecond"], d["staleAfterSeconds"])
    return f"promtool check + test rules: {', '.join(alerts)}"


def exported_metrics() -> tuple[set[str], list[str]]:
    """Series names the binaries export, scraped from the running daemons, and notes on what
    was scraped where."""
    names = monitoring.exposition_names(monitoring.device_plugin_metrics(
        native_binary("kube-rdma-device-plugin"), ROOT / "examples" / "nodes" / "cx6dx-dual.yaml"))
    notes = ["device plugin (simulated cx6dx-dual) scraped"]
    for who, (text, problem) in api_server_scrapes().items():
        names |= monitoring.exposition_names(text)
        notes.append(f"{who} scraped against a real kube-apiserver" + (f" ({problem})" if problem else ""))
    return names, notes


api_server_binary = chart.api_server_binary


SIM_NODE = "cx6dx-dual"
AGENT_METRICS = ["kuberdma_node_roce_ready", "kuberdma_check_passing", "kuberdma_pfc_pause_frames_total",
                 "kuberdma_rdma_hw_counter_total", "kuberdma_agent_last_success_timestamp_seconds"]
CONTROLLER_METRICS = ["kuberdma_profile_nodes", "kuberdma_node_stale"]


def cluster_seeds() -> list[str]:
    """Our CRDs, a Node for the simulated node (labelled for the example profile), the profile."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": SIM_NODE, "labels": {"kubernetes.io/hostname": SIM_NODE,
                                                      "node-role.kubernetes.io/rdma": ""}}}
    return [chart.OPERATOR_CRDS.read_text(encoding="utf-8"), yaml.safe_dump(node),
            (EXAMPLES / "roceprofile.yaml").read_text(encoding="utf-8")]


def api_server_scrapes() -> dict[str, tuple[str, str | None]]:
    """The agent's and the controller's /metrics (and what did not show up), each running as
    the chart runs it (simulated node for the agent) against a real kube-apiserver, through a
    kubeconfig."""
    op = str(native_binary("kube-rdma-operator"))
    with monitoring.ApiServer(api_server_binary(), cluster_seeds()) as api:
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig), "NODE_NAME": SIM_NODE}
        port = monitoring.free_port()
        agent = monitoring.run_until_scraped(
            [op, "agent", "--sim", str(ROOT / "examples" / "nodes" / f"{SIM_NODE}.yaml"), "--poll-interval=2",
             f"--metrics-addr=127.0.0.1:{port}"], env, port, AGENT_METRICS)
        # The controller needs the agent's RdmaNodeState, which the run above published.
        port = monitoring.free_port()
        controller = monitoring.run_until_scraped(
            [op, "controller", "--interval=1", f"--metrics-addr=127.0.0.1:{port}"], env, port, CONTROLLER_METRICS)
    return {"agent": agent, "controller": controller}


def declared_in(got: Any, want: Any, path: str) -> str | None:
    """Where `got` differs from `want`, ignoring keys `want` does not have (server defaults)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path} is {got!r}"
        for k, v in want.items():
            p = declared_in(got.get(k), v, f"{path}.{k}")
            if p:
                return p
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path} is {got!r}"
        return next((p for i, (g, w) in enumerate(zip(got, want)) if (p := declared_in(g, w, f"{path}[{i}]"))), None)
    return None if got == want else f"{path} is {got!r}, not {want!r}"


def test_crds_apply_against_api_server() -> str:
    """The CRD hook's exact command line, run against a real kube-apiserver through a kubeconfig:
    an outdated CRD (as a first install left it) is brought to what the binary generates."""
    generated = [d for d in yaml.safe_load_all(subprocess.run(
        [str(native_binary("kube-rdma-operator")), "crds"], capture_output=True, text=True, check=True).stdout) if d]
    old = copy.deepcopy(generated)
    for crd in old:  # an older release: no printer columns, one property less
        v = crd["spec"]["versions"][0]
        v.pop("additionalPrinterColumns", None)
        spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
        props = spec.get("properties", {})
        gone = sorted(props)[-1]
        props.pop(gone, None)
        # ... and none of the CEL rules naming it: the API server compiles each rule against the
        # schema and refuses the CRD otherwise.
        spec["x-kubernetes-validations"] = [r for r in spec.get("x-kubernetes-validations", [])
                                            if f"self.{gone}" not in r["rule"]]
    hook = next(o for o in chart.objects(chart.render(None, upgrade=True)) if o["kind"] == "Job")
    c = hook["spec"]["template"]["spec"]["containers"][0]
    cmd = [str(native_binary("kube-rdma-operator"))] + c["args"]
    with monitoring.ApiServer(api_server_binary(), [yaml.safe_dump_all(old)]) as api:
        for attempt in (1, 2):  # the second apply finds nothing to change
            res = subprocess.run(cmd, env={**os.environ, "KUBECONFIG": str(api.kubeconfig)},
                                 capture_output=True, text=True, timeout=60)
            assert res.returncode == 0, f"apply #{attempt}: {res.stdout}{res.stderr}"
        for want in generated:
            got = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{want['metadata']['name']}")
            # The server adds its defaults (names.listKind, conversion, ...): what we declare must
            # be there as declared.
            problem = declared_in(got["spec"], want["spec"], "spec")
            assert problem is None, f"{want['metadata']['name']}: {problem}"
            managers = {m.get("manager") for m in got["metadata"].get("managedFields", [])}
            assert "kube-rdma" in managers, f"no field manager kube-rdma: {managers}"
    return f"{len(generated)} CRDs upgraded by `{' '.join(c['args'])}` (field manager kube-rdma), twice"


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


# ---------------------------------------------------------------- logs

def test_logs_plain_and_json() -> str:
    """Off a terminal the daemons log without ANSI colour; --log-format json gives one JSON object
    per line. The device plugin daemon on a simulated node logs as it starts."""
    dp = native_binary("kube-rdma-device-plugin")
    outs = {}
    for fmt in ("text", "json"):
        with tempfile.TemporaryDirectory(prefix="kube-rdma-logs-") as tmp:
            proc = subprocess.Popen([str(dp), "--log-format", fmt, "--sim", str(ROOT / "examples/nodes/cx6dx-dual.yaml"),
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
    env_fmt = subprocess.run([str(dp), "discover", "--sim", str(ROOT / "examples/nodes/cx6dx-dual.yaml")],
                             capture_output=True, text=True, env={**os.environ, "KUBE_RDMA_LOG_FORMAT": "yaml"})
    assert env_fmt.returncode != 0 and "yaml" in env_fmt.stderr, "a bad KUBE_RDMA_LOG_FORMAT was accepted"
    for b in ("kube-rdma-operator", "kubectl-rdma"):
        res = subprocess.run([str(native_binary(b)), "--log-format", "json", "--help"], capture_output=True, text=True)
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
            proc = subprocess.Popen([str(native_binary("kube-rdma-operator")), "--log-format", fmt, "controller",
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


# ---------------------------------------------------------------- image

def workspace_version() -> str:
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r'\[workspace\.package\][^\[]*?version\s*=\s*"([^"]+)"', text, re.S)
    assert m, "no [workspace.package] version in Cargo.toml"
    return m.group(1)


def static_target_dir() -> Path:
    return Path(os.environ.get("KUBE_RDMA_STATIC_TARGET_DIR") or ROOT / "target-static")


def elf_interpreter(path: Path) -> str | None:
    """The PT_INTERP of a 64-bit little-endian ELF file (None: static, runs without ld.so).

    Layout from the ELF spec (elf(5)): e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38; each
    program header starts with p_type (PT_INTERP = 3), p_offset at +8, p_filesz at +32.
    """
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit LE ELF file"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        p_type, = struct.unpack_from("<I", data, base)
        if p_type == 3:
            off, = struct.unpack_from("<Q", data, base + 8)
            size, = struct.unpack_from("<Q", data, base + 32)
            return data[off:off + size].rstrip(b"\0").decode()
    return None


# The image the tests build: a version of its own, so --version proves the VERSION build arg
# reaches the binaries (KUBE_RDMA_VERSION at compile time) rather than the crate version.
IMAGE_VERSION = f"{workspace_version()}-delivery.1"


def dist_dir() -> Path:
    return static_target_dir() / "dist-delivery"


def build_static(version: str) -> str:
    """scripts/delivery/build-dist --debug with VERSION: what a user runs (release by default;
    debug here because a release build of four binaries takes 15 CPU-minutes)."""
    res = subprocess.run([str(ROOT / "scripts" / "delivery" / "build-dist"), "--debug", "--out", str(dist_dir())],
                         cwd=ROOT, env={**os.environ, "VERSION": version}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    for b in BINARIES:
        interp = elf_interpreter(dist_dir() / b)
        assert interp is None, f"{b} needs the dynamic loader {interp}: it cannot run FROM scratch"
    bad = subprocess.run([str(ROOT / "scripts" / "delivery" / "build-dist"), "--arch", "sparc"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "sparc" in bad.stderr, bad.stderr
    return f"{len(BINARIES)} static binaries in {dist_dir()}"


PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
IMAGE = "localhost/kube-rdma"


def build_image(version: str) -> str:
    src = dist_dir()
    with tempfile.TemporaryDirectory(prefix="kube-rdma-image-") as ctx:
        # A small build context: the Dockerfile and dist/ only (the repo holds GBs of target dirs).
        dist = Path(ctx) / "dist"
        dist.mkdir()
        for b in BINARIES:
            shutil.copy2(src / b, dist / b)
        shutil.copy2(ROOT / "Dockerfile", Path(ctx) / "Dockerfile")
        shutil.copy2(ROOT / ".dockerignore", Path(ctx) / ".dockerignore")
        old = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", f"{IMAGE}:{version}"],
                             capture_output=True, text=True).stdout.strip()
        res = subprocess.run(PODMAN + ["build", "--pull=never", "--build-arg", f"VERSION={version}",
                                       "-t", f"{IMAGE}:{version}", ctx], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    new = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", f"{IMAGE}:{version}"],
                         capture_output=True, text=True).stdout.strip()
    if old and old != new:
        # Drop the image this build replaced, so repeated runs do not pile up layers.
        subprocess.run(["podman", "rmi", old], capture_output=True)
    info = json.loads(subprocess.run(["podman", "image", "inspect", f"{IMAGE}:{version}"],
                                     capture_output=True, text=True, check=True).stdout)[0]
    labels = info.get("Labels") or info.get("Config", {}).get("Labels") or {}
    assert labels.get("org.opencontainers.image.version") == version, labels
    user = info.get("User") or info.get("Config", {}).get("User")
    assert user == "65532:65532", f"image user {user!r}"
    return f"{IMAGE}:{version}, {info['Size'] / 1e6:.0f} MB"


def run_in_image(version: str, args: list[str], mounts: list[str] | None = None, *,
                 extra: list[str] | None = None, stdout_only: bool = False) -> str:
    cmd = PODMAN + ["run", "--rm", "--network", "none", "--read-only",
                    # podman's default rlimits exceed what this sandbox may set; ask for less.
                    "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", *(extra or [])]
    for m in mounts or []:
        cmd += ["-v", m]
    res = subprocess.run(cmd + [f"{IMAGE}:{version}", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(args)} -> {res.returncode}\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    return res.stdout if stdout_only else res.stdout + res.stderr


def test_binary_version(version: str, binary: str) -> str:
    out = run_in_image(version, [f"/usr/bin/{binary}", "--version"])
    assert version in out.split(), f"{binary} --version printed {out!r}, not {version}"
    return out.strip().splitlines()[0]


def device_plugin_config(values: dict[str, Any] | None) -> str:
    objs = chart.objects(chart.render(values))
    return next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.yaml"]


def discover_in_image(version: str, config: str, node: str, netns: str | None = None) -> dict[str, int]:
    """Run the image's device plugin discovery on a simulated node with `config` (in netns mode
    `netns`, see example_node); resource -> devices."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-dp-") as tmp:
        Path(tmp, "config.yaml").write_text(config, encoding="utf-8")
        example_node(tmp, node, netns)
        os.chmod(tmp, 0o755)
        out = run_in_image(version, ["/usr/bin/kube-rdma-device-plugin", "discover", "--output", "json",
                                     "--config", "/cfg/config.yaml", "--sim", f"/cfg/{node}"],
                           [f"{tmp}:/cfg:ro"], stdout_only=True)
    report = json.loads(out)
    return {p["resource"]: len(p["devices"]) for p in report["pools"]}


def test_dp_accepts_chart_config(version: str) -> str:
    """The ConfigMap the chart renders is a config the real device plugin accepts and uses."""
    pools = discover_in_image(version, device_plugin_config(None), "cx6dx-dual.yaml")
    assert list(pools) == ["kuberdma.io/rdma_vfs"] and pools["kuberdma.io/rdma_vfs"] > 0, pools
    full = discover_in_image(version, device_plugin_config(full_values()), "mixed.yaml")
    want = [f"{p.get('resourcePrefix', 'kuberdma.io')}/{p['name']}" for p in full_values()["pools"]]
    assert sorted(full) == sorted(want), f"{full} != {want}"
    return f"default on cx6dx-dual: {pools}; full values: {len(full)} pools"


def test_dp_accepts_raw_sriovdp_config(version: str) -> str:
    raw = (FIXTURES / "sriovdp-config.json").read_text(encoding="utf-8")
    values = merged(default_values(), pools=[], rawConfig=raw)
    pools = discover_in_image(version, device_plugin_config(values), "cx6dx-dual.yaml")
    # sriov-network-device-plugin's default prefix (intel.com) is kept for the pool that sets none.
    assert set(pools) == {"kuberdma.io/cx6_vf", "intel.com/e810_vf"}, pools
    assert pools["kuberdma.io/cx6_vf"] > 0, pools
    return str(pools)


def test_dp_accepts_raw_rdma_shared_config(version: str) -> str:
    raw = (FIXTURES / "rdma-shared-dev-plugin-config.json").read_text(encoding="utf-8")
    values = merged(default_values(), pools=[], rawConfig=raw)
    pools = discover_in_image(version, device_plugin_config(values), "cx6dx-dual.yaml", "shared")
    # k8s-rdma-shared-dev-plugin's prefix (rdma) is kept; one PF's HCA shared 16 ways.
    assert pools == {"rdma/hca_shared_devices_a": 16}, pools
    return str(pools)


def test_chart_command_lines(version: str) -> str:
    """Every command line the chart renders (default and full values) is accepted by the binary
    in the image: clap rejects an unknown flag or a bad value before it acts on a trailing --help."""
    seen = set()
    for values in (None, full_values(), ci_values("rbac-proxy-values.yaml"), dra.dra_values()):
        for o in chart.objects(chart.render(values)):
            if o["kind"] not in security.WORKLOAD_KINDS:
                continue
            spec = o["spec"]["template"]["spec"]
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                if c["name"] == "kube-rbac-proxy":
                    continue  # not our image
                line = tuple(c["command"] + c.get("args", []))
                if line[0].endswith("kube-rdma-cni"):
                    continue  # not clap; its `install` runs for real in another check
                seen.add(line)
    for line in sorted(seen):
        run_in_image(version, [*line, "--help"])
    return f"{len(seen)} distinct command lines"


def test_readme_pools_in_image(version: str) -> str:
    pools_yaml, _ = readme_values()
    pools = discover_in_image(version, pools_yaml, "cx6dx-dual.yaml")
    assert pools.get("kuberdma.io/rdma_vfs", 0) > 0, pools
    return f"README pools.yaml on cx6dx-dual: {pools}"


def test_cni_install_in_image(version: str) -> str:
    """The init container's command: as root without capabilities, into a host-like directory."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-cnibin-") as tmp:
        Path(tmp, "kube-rdma-cni").write_bytes(b"old version")
        run_in_image(version, ["/usr/bin/kube-rdma-cni", "install", "--dest", "/host/cni-bin"],
                     [f"{tmp}:/host/cni-bin"], extra=["--user", "0:0", "--cap-drop", "all",
                                                      "--security-opt", "no-new-privileges"])
        installed = Path(tmp, "kube-rdma-cni")
        want = (dist_dir() / "kube-rdma-cni").read_bytes()
        assert installed.read_bytes() == want, "installed binary differs from the image's"
        assert os.access(installed, os.X_OK), "installed binary is not executable"
        leftovers = [p.name for p in Path(tmp).iterdir() if p.name != "kube-rdma-cni"]
        assert not leftovers, f"temp files left behind: {leftovers}"
    return "replaced an older kube-rdma-cni in place"


def test_cni_accepts_nad_configs(version: str) -> str:
    """Every NAD config (chart-rendered and example) passes the real plugin's config parser: CNI
    STATUS parses the config and answers 0 or 50 (no RDMA here), but 7 for an invalid config."""
    nads = [o for o in chart.objects(chart.render(full_values())) if o["kind"] == "NetworkAttachmentDefinition"]
    nads += load_examples()["network-attachment-definition.yaml"]
    nads += [o for o in chart.objects(chart.render(readme_values()[1]))
             if o["kind"] == "NetworkAttachmentDefinition"]
    dra_mode = copy.deepcopy(full_values())  # the same networks as the DRA driver's NADs
    dra_mode.setdefault("dra", {})["enabled"] = True
    nads += [o for o in chart.objects(chart.render(dra_mode, kube_version="1.34.0"))
             if o["kind"] == "NetworkAttachmentDefinition"]
    confs = [n["spec"]["config"] for n in nads]
    bad = json.dumps({"cniVersion": "1.1.0", "name": "bad", "type": "kube-rdma-cni", "mtu": 99999,
                      "ipam": {"type": "host-local"}})
    codes = []
    for conf in confs + [bad]:
        cmd = PODMAN + ["run", "--rm", "-i", "--network", "none", "--read-only", "--ulimit",
                        "nofile=20000:20000", "--ulimit", "nproc=32768:32768", "-e", "CNI_COMMAND=STATUS",
                        "-e", "CNI_PATH=/usr/bin", f"{IMAGE}:{version}", "/usr/bin/kube-rdma-cni"]
        res = subprocess.run(cmd, input=conf, capture_output=True, text=True, timeout=60)
        code = 0 if res.returncode == 0 and not res.stdout.strip() else json.loads(res.stdout).get("code")
        codes.append(code)
    assert all(c in (0, 50) for c in codes[:-1]), f"codes {codes[:-1]} for {confs}"
    assert codes[-1] == 7, f"an invalid config got code {codes[-1]}, not 7"
    return f"{len(confs)} config(s) parsed (codes {codes[:-1]}); mtu 99999 -> code 7"


def test_agent_once_in_image(version: str) -> str:
    """The example RoceProfile, read by the real agent (non-root, no capabilities) on a simulated
    node; its RdmaNodeState output must fit the chart's CRD."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-agent-") as tmp:
        shutil.copy2(EXAMPLES / "roceprofile.yaml", Path(tmp, "profile.yaml"))
        shutil.copy2(ROOT / "examples" / "nodes" / "cx6dx-dual.yaml", Path(tmp, "node.yaml"))
        os.chmod(tmp, 0o755)
        out = run_in_image(version, ["/usr/bin/kube-rdma-operator", "agent", "--once", "--output", "json",
                                     "--node-name", "node-a", "--sim", "/cfg/node.yaml",
                                     "--profile", "/cfg/profile.yaml"], [f"{tmp}:/cfg:ro"],
                           extra=["--cap-drop", "all"], stdout_only=True)
    state = json.loads(out)
    assert state["status"]["profile"] == "lossless-prio3", state["status"]["profile"]
    validate_custom(state)
    return f"RdmaNodeState node-a: {state['status']['summary']['passTotal']} checks pass, fits the CRD"


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)  # CI logs show progress during the long build
    suite = Suite()
    full = full_values()
    suite.check("chart: lint (default values, strict)", lambda: lint(None))
    for f in ci_files():
        suite.check(f"chart: lint (ci/{f}, strict)", lambda f=f: lint(ci_values(f)))
    suite.check("chart: render default values (Kubernetes 1.28 and 1.30)", test_render_default)
    suite.check("chart: render full values", test_render_full)
    suite.check("chart: schema accepts default values", lambda: test_schema_accepts(default_values()))
    suite.check("chart: schema accepts full values", lambda: test_schema_accepts(full))
    suite.check("chart: values.schema.json is current (scripts/render-manifests)",
                lambda: (lambda p: (_ for _ in ()).throw(AssertionError(p)) if p else "generated")(
                    chart.schema_problem()))
    suite.check("chart: every object schema is closed", test_schema_objects_are_closed)
    suite.check("chart: a typo in any values object is rejected", test_typo_in_every_object_is_rejected)
    suite.check("chart: hostnetwork / allowEnforc / priorites typos are rejected", test_named_typos_rejected)
    for label, (pool, expect) in BAD_POOLS.items():
        suite.check(f"chart: schema rejects pool ({label})",
                    lambda pool=pool, expect=expect: test_schema_rejects(pool, expect))
    d = default_values()
    guards = {
        "duplicate pool": (merged(d, pools=[d["pools"][0], d["pools"][0]]), "defined twice"),
        "network on unknown pool": (merged(d, networks=[{"name": "n", "pool": "nope", "ipam": {"type": "static"}}]),
                                    "not in `pools`"),
        "Enforce profile without allowEnforce": (
            merged(d, profiles=[{"name": "p", "spec": {"mode": "Enforce"}}]), "allowEnforce"),
        "pools and rawConfig together": (merged(d, rawConfig="{}"), "not both"),
        "rawConfig of no known format": (merged(d, pools=[], rawConfig='{"devices": []}'), "none of `pools`"),
    }
    for label, (values, expect) in guards.items():
        suite.check(f"chart: refuses {label}", lambda v=values, e=expect: test_guard(v, e))
    suite.check("chart: device plugin config follows pools", test_pool_config_matches_values)
    suite.check("chart: rawConfig (sriov-network-device-plugin config.json) passed verbatim",
                test_raw_config_verbatim)
    suite.check("chart: knobs reach the objects (full values)", test_knobs_reach_the_objects)
    suite.check("chart: read-only host mounts are recursive on Kubernetes >= 1.30", test_recursive_read_only)
    suite.check("chart: PodMonitor option", test_podmonitor)
    suite.check("chart: metrics behind kube-rbac-proxy (ci/rbac-proxy-values.yaml)", test_rbac_proxy)
    suite.check("chart: CRD upgrade hook (pre-upgrade Job, our binary)", test_crd_upgrade_hook)
    suite.check("migration: sriov-network-device-plugin rawConfig NADs name what discover advertises",
                test_migration_sndp)
    suite.check("migration: k8s-rdma-shared-dev-plugin rawConfig resources in NOTES match discover",
                test_migration_rsdp)
    suite.check("migration: a network on a pool rawConfig lacks is refused with the pools named",
                test_network_on_unknown_raw_pool)
    suite.check("policy: agent may label only its own node and write only its state; controller only `unknown` (CEL)",
                test_node_label_policy)
    suite.check("monitoring: dashboard JSON is valid and every query parses", test_dashboard_valid)
    suite.check("monitoring: alert rules pass promtool check and unit tests", test_rules_promtool)
    suite.check("monitoring: every metric in rules and dashboard is exported by a binary", test_metrics_exist)
    suite.check("logs: no ANSI off a terminal; --log-format json", test_logs_plain_and_json)
    suite.check("crds: the upgrade hook's `crds --apply` against a real kube-apiserver",
                test_crds_apply_against_api_server)
    for f in ["values.yaml"] + ci_files():
        suite.check(f"validate: rendered objects of {f} (kubernetes-validate --strict)",
                    lambda f=f: validate_rendered(default_values() if f == "values.yaml" else ci_values(f), f))
    suite.check("validate: CRDs (kubernetes-validate --strict)", test_crds_validate)
    for name, fn in dra.CHECKS:  # DRA mode: scripts/delivery/dra.py
        suite.check(name, fn)
    for name, fn in pool_schema_test.CHECKS:  # the pool schema against the parser
        suite.check(name, fn)
    suite.check("validate: CRD names, scope, version, status subresource", test_crds_shape)
    suite.check("validate: CRDs match operator/crds/crds.yaml", test_crd_sync)
    suite.check("validate: rendered RoceProfiles against the CRD schema",
                lambda: test_custom_resources(chart.objects(chart.render(full))))
    suite.check("validate: CRD schema rejects a bad RoceProfile", test_crd_schema_rejects_bad_profile)
    suite.check("validate: rendered NetworkAttachmentDefinitions", test_rendered_nads)
    suite.check("validate: ServiceMonitor selects the metrics Services", test_servicemonitor)
    suite.check("validate: manifests/examples (NAD, pod, RoceProfile)", test_examples)
    suite.check("docs: README quick start's pools.yaml + my-values.yaml render and validate",
                test_readme_example_renders)
    suite.check("docs: the docs test catches unmarked, failing and stale blocks", docs_test.self_test)
    suite.check("docs: every `sh test` block of README.md and docs/ runs, with the output it quotes",
                test_docs_blocks)
    suite.check("security: default values", lambda: test_security(default_values()))
    suite.check("security: full values (Enforce, configfs)", lambda: test_security(full))
    suite.check("security: rbac-proxy values", lambda: test_security(ci_values("rbac-proxy-values.yaml")))
    suite.check("security: agent gets NET_ADMIN and writable sysfs only with allowEnforce",
                test_agent_privileges)
    suite.check("security: checker catches added privileges", test_security_catches_mutations)
    suite.check("manifests: up to date (scripts/render-manifests --check)", test_manifests_fresh)
    suite.check("manifests: the staleness check catches an edit", test_manifests_check_detects_staleness)
    suite.check("manifests: kube-rdma.yaml validates", test_manifests_validate)

    if os.environ.get("KUBE_RDMA_SKIP_IMAGE") == "1":
        suite.failed += 1
        print("FAIL image: skipped because KUBE_RDMA_SKIP_IMAGE=1")
    elif not shutil.which("podman"):
        suite.failed += 1
        print("FAIL image: podman is not installed (apt-get install podman runc)")
    else:
        version = IMAGE_VERSION
        if suite.check("image: static binaries via scripts/delivery/build-dist (crt-static, VERSION)",
                       lambda: build_static(version)) and \
                suite.check("image: podman build (FROM scratch, offline)", lambda: build_image(version)):
            for b in BINARIES:
                suite.check(f"image: {b} --version shows the VERSION build arg",
                            lambda b=b: test_binary_version(version, b))
            suite.check("image: the chart's command lines are accepted by the binaries",
                        lambda: test_chart_command_lines(version))
            suite.check("image: device plugin accepts the chart's pool config (simulated nodes)",
                        lambda: test_dp_accepts_chart_config(version))
            suite.check("image: device plugin accepts rawConfig (sriov-network-device-plugin format)",
                        lambda: test_dp_accepts_raw_sriovdp_config(version))
            suite.check("image: device plugin accepts rawConfig (k8s-rdma-shared-dev-plugin format)",
                        lambda: test_dp_accepts_raw_rdma_shared_config(version))
            suite.check("image: device plugin accepts the README's pools.yaml",
                        lambda: test_readme_pools_in_image(version))
            suite.check("image: kube-rdma-cni install (init container, root without capabilities)",
                        lambda: test_cni_install_in_image(version))
            suite.check("image: kube-rdma-cni parses every NetworkAttachmentDefinition config",
                        lambda: test_cni_accepts_nad_configs(version))
            suite.check("image: agent checks the example RoceProfile (non-root, simulated node)",
                        lambda: test_agent_once_in_image(version))
    print(f"{suite.passed} passed, {suite.failed} failed")
    return 1 if suite.failed else 0


if __name__ == "__main__":
    sys.exit(main())
