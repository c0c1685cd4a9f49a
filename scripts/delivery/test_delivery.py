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
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import dra  # noqa: E402
import security  # noqa: E402

ROOT = chart.ROOT
EXAMPLES = ROOT / "manifests" / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BINARIES = ["kube-rdma-device-plugin", "kube-rdma-cni", "kube-rdma-operator", "kubectl-rdma"]
PACKAGES = ["kube-rdma-device-plugin", "kube-rdma-cni", "kube-rdma-operator"]
TRIPLE = "x86_64-unknown-linux-gnu"
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
    objs = chart.objects(chart.render(None))
    got = kinds(objs)
    want = {"ServiceAccount": 3, "ClusterRole": 2, "ClusterRoleBinding": 2, "ConfigMap": 1, "Service": 2,
            "DaemonSet": 2, "Deployment": 1}
    assert got == want, f"kinds {got} != {want}"
    return ", ".join(f"{k}={v}" for k, v in sorted(got.items()))


def test_render_full() -> str:
    objs = chart.objects(chart.render(full_values()))
    got = kinds(objs)
    for kind, n in {"RoceProfile": 2, "NetworkAttachmentDefinition": 2, "ServiceMonitor": 1,
                    "DaemonSet": 2, "Deployment": 1}.items():
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
    "no selectors": ({"name": "rdma_vf"}, "selectors"),
    "empty selectors": ({"name": "rdma_vf", "selectors": {}}, "/pools/0/selectors"),
    "vendor not 4 hex digits": ({"name": "rdma_vf", "selectors": {"vendors": ["15b33"]}}, "/vendors/0"),
    "vendor as a YAML number": ({"name": "rdma_vf", "selectors": {"vendors": [8086]}}, "/vendors/0"),
    "unknown mode": ({"name": "rdma_vf", "mode": "exclusive", "selectors": {"vendors": ["15b3"]}}, "/mode"),
    "unknown policy": ({"name": "rdma_vf", "policy": "random", "selectors": {"vendors": ["15b3"]}}, "/policy"),
    "bad pfNames VF range": ({"name": "rdma_vf", "selectors": {"pfNames": ["ens1f0#a-b"]}}, "/pfNames/0"),
    "link speed as text": ({"name": "rdma_vf", "selectors": {"linkSpeeds": ["100G"]}}, "/linkSpeeds/0"),
    "misspelt selector": ({"name": "rdma_vf", "selectors": {"vendor": ["15b3"]}}, "'vendor' not allowed"),
    "unknown pool key": ({"name": "rdma_vf", "selectors": {"vendors": ["15b3"]}, "numa": 0}, "'numa' not allowed"),
    "shared pool without rdmaHcaMax": (
        {"name": "hca", "mode": "shared", "selectors": {"ifNames": ["ens2f0"]}}, "rdmaHcaMax"),
    "rdmaHcaMax on a vf pool": ({"name": "rdma_vf", "rdmaHcaMax": 4, "selectors": {"vendors": ["15b3"]}},
                                "/pools/0"),
    "PCI address without function": (
        {"name": "rdma_vf", "selectors": {"rootDevices": ["0000:3d:00"]}}, "/rootDevices/0"),
    "empty selector list": ({"name": "rdma_vf", "selectors": []}, "/pools/0/selectors"),
    "bad entry in a selector list": (
        {"name": "rdma_vf", "selectors": [{"vendors": ["15b3"]}, {"linkTypes": ["token-ring"]}]}, "/linkTypes/0"),
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
    with tempfile.TemporaryDirectory(prefix="kube-rdma-kv-") as tmp:
        files = []
        for i, doc in enumerate(docs):
            path = Path(tmp) / f"{i:02d}-{doc['kind']}-{doc['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            files.append(str(path))
        for version in KUBE_VERSIONS:
            res = subprocess.run(["kubernetes-validate", "--strict", "-k", version, *files],
                                 capture_output=True, text=True)
            out = res.stdout + res.stderr
            # Anything but an INFO line (a WARN about a missing schema included) is a failure.
            noise = [line for line in out.splitlines() if line.strip() and not line.startswith("INFO")]
            assert res.returncode == 0 and not noise, f"{label} (k8s {version}):\n{out}"
    return f"{len(docs)} object(s) x k8s {', '.join(KUBE_VERSIONS)}"


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
    assert len(picked) == 2, f"ServiceMonitor selects {len(picked)} services"
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
    """The worked example's pools.yaml text and its values merged with my-values.yaml (README.md)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    pools = next(b for b in blocks if b.lstrip().startswith("pools:"))
    rest = next(b for b in blocks if b.lstrip().startswith("networks:"))
    return pools, {**yaml.safe_load(pools), **yaml.safe_load(rest)}


def test_readme_example_renders() -> str:
    _, values = readme_values()
    objs = chart.objects(chart.render(values))
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    assert len(nads) == 1, kinds(objs)
    check_nad(nads[0], {"kuberdma.io/rdma_vf"})
    for o in objs:
        if o["apiVersion"].startswith("kuberdma.io/"):
            validate_custom(o)
    kubernetes_validate(builtin(objs), "README example")
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

    # Reading needs no host sysfs; Enforce writes through a writable one, with configfs beneath it.
    assert agent_mounts(d) == {"/host/dev": ("/dev", True)}, agent_mounts(d)
    assert agent_mounts(f) == {"/host/dev": ("/dev", True), "/host/sys": ("/sys", False),
                               "/host/sys/kernel/config": ("/sys/kernel/config", False)}, agent_mounts(f)


def test_security(values: dict[str, Any]) -> str:
    objs = chart.objects(chart.render(values))
    problems = security.check_workloads(objs, values) + security.check_rbac(objs) + \
        security.check_rbac_exact(objs)
    assert not problems, "\n".join(problems)
    n = sum(1 for o in objs if o["kind"] in security.WORKLOAD_KINDS)
    return f"{n} workload(s) clean"


def test_security_catches_mutations() -> str:
    """The checker is not vacuous: each privilege we might add by mistake is reported."""
    values = default_values()
    base = chart.objects(chart.render(values))

    def mutate(fn: Callable[[dict[str, Any]], None], kind: str = "Deployment") -> list[str]:
        objs = copy.deepcopy(base)
        fn(next(o for o in objs if o["kind"] == kind))
        return security.check_workloads(objs, values) + security.check_rbac(objs) + \
            security.check_rbac_exact(objs)

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
    }
    for name, fn in cases.items():
        found = mutate(fn, "ClusterRole" if name in ("secrets", "list pods") else "Deployment")
        assert found, f"mutation '{name}' went unnoticed"
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
    path = ROOT / "manifests" / "kube-rdma.yaml"
    objs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert objs[0]["kind"] == "Namespace", objs[0]["kind"]
    return kubernetes_validate(builtin(objs), "manifests/kube-rdma.yaml")


def test_crds_validate() -> str:
    return kubernetes_validate(chart.crd_documents(), "CRDs")


def test_crd_sync() -> str:
    problem = chart.crd_sync_problem()
    assert problem is None, problem + " (run scripts/render-manifests)"
    return "in sync with operator/crds/crds.yaml" if chart.OPERATOR_CRDS.exists() else \
        "operator/crds/crds.yaml not committed yet: chart copy used as is"


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


def build_static() -> str:
    env = dict(os.environ)
    # crt-static links glibc statically: the binaries then run in a `FROM scratch` image. Only the
    # target's units get these flags (`--target` keeps build scripts and proc macros dynamic).
    env["RUSTFLAGS"] = "-C target-feature=+crt-static -C debuginfo=0 -C strip=symbols"
    env["CARGO_TARGET_DIR"] = str(static_target_dir())
    cmd = ["cargo", "build", "--locked", "--target", TRIPLE, "--bins"]
    for p in PACKAGES:
        cmd += ["-p", p]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    out = static_target_dir() / TRIPLE / "debug"
    for b in BINARIES:
        interp = elf_interpreter(out / b)
        assert interp is None, f"{b} needs the dynamic loader {interp}: it cannot run FROM scratch"
    return f"{len(BINARIES)} static binaries in {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}"


PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
IMAGE = "localhost/kube-rdma"


def build_image(version: str) -> str:
    src = static_target_dir() / TRIPLE / "debug"
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
    assert version in out, f"{binary} --version printed {out!r}, no {version}"
    return out.strip().splitlines()[0]


def device_plugin_config(values: dict[str, Any] | None) -> str:
    objs = chart.objects(chart.render(values))
    return next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.yaml"]


def discover_in_image(version: str, config: str, node: str) -> dict[str, int]:
    """Run the image's device plugin discovery on a simulated node with `config`; resource -> devices."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-dp-") as tmp:
        Path(tmp, "config.yaml").write_text(config, encoding="utf-8")
        shutil.copy2(ROOT / "examples" / "nodes" / node, Path(tmp, node))
        os.chmod(tmp, 0o755)
        out = run_in_image(version, ["/usr/bin/kube-rdma-device-plugin", "discover", "--output", "json",
                                     "--config", "/cfg/config.yaml", "--sim", f"/cfg/{node}"],
                           [f"{tmp}:/cfg:ro"], stdout_only=True)
    report = json.loads(out)
    return {p["resource"]: len(p["devices"]) for p in report["pools"]}


def test_dp_accepts_chart_config(version: str) -> str:
    """The ConfigMap the chart renders is a config the real device plugin accepts and uses."""
    pools = discover_in_image(version, device_plugin_config(None), "cx6dx-dual.yaml")
    assert list(pools) == ["kuberdma.io/rdma_vf"] and pools["kuberdma.io/rdma_vf"] > 0, pools
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
    pools = discover_in_image(version, device_plugin_config(values), "cx6dx-dual.yaml")
    # k8s-rdma-shared-dev-plugin's prefix (rdma) is kept; one PF's HCA shared 16 ways.
    assert pools == {"rdma/hca_shared_devices_a": 16}, pools
    return str(pools)


def test_chart_command_lines(version: str) -> str:
    """Every command line the chart renders (default and full values) is accepted by the binary
    in the image: clap rejects an unknown flag or a bad value before it acts on a trailing --help."""
    seen = set()
    for values in (None, full_values()):
        for o in chart.objects(chart.render(values)):
            if o["kind"] not in security.WORKLOAD_KINDS:
                continue
            spec = o["spec"]["template"]["spec"]
            for c in spec.get("initContainers", []) + spec.get("containers", []):
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
    assert pools.get("kuberdma.io/rdma_vf", 0) > 0, pools
    return f"README pools.yaml on cx6dx-dual: {pools}"


def test_cni_install_in_image(version: str) -> str:
    """The init container's command: as root without capabilities, into a host-like directory."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-cnibin-") as tmp:
        Path(tmp, "kube-rdma-cni").write_bytes(b"old version")
        run_in_image(version, ["/usr/bin/kube-rdma-cni", "install", "--dest", "/host/cni-bin"],
                     [f"{tmp}:/host/cni-bin"], extra=["--user", "0:0", "--cap-drop", "all",
                                                      "--security-opt", "no-new-privileges"])
        installed = Path(tmp, "kube-rdma-cni")
        want = (static_target_dir() / TRIPLE / "debug" / "kube-rdma-cni").read_bytes()
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
    suite.check("chart: lint (ci/full-values.yaml, strict)", lambda: lint(full))
    suite.check("chart: render default values", test_render_default)
    suite.check("chart: render full values", test_render_full)
    suite.check("chart: schema accepts default values", lambda: test_schema_accepts(default_values()))
    suite.check("chart: schema accepts full values", lambda: test_schema_accepts(full))
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
    }
    for label, (values, expect) in guards.items():
        suite.check(f"chart: refuses {label}", lambda v=values, e=expect: test_guard(v, e))
    suite.check("chart: device plugin config follows pools", test_pool_config_matches_values)
    suite.check("chart: rawConfig (sriov-network-device-plugin config.json) passed verbatim",
                test_raw_config_verbatim)
    suite.check("validate: rendered default objects (kubernetes-validate --strict)",
                lambda: kubernetes_validate(builtin(chart.objects(chart.render(None))), "default"))
    suite.check("validate: rendered full objects (kubernetes-validate --strict)",
                lambda: kubernetes_validate(builtin(chart.objects(chart.render(full))), "full"))
    suite.check("validate: CRDs (kubernetes-validate --strict)", test_crds_validate)
    for name, fn in dra.CHECKS:  # DRA mode: scripts/delivery/dra.py
        suite.check(name, fn)
    suite.check("validate: CRD names, scope, version, status subresource", test_crds_shape)
    suite.check("validate: CRDs match operator/crds/crds.yaml", test_crd_sync)
    suite.check("validate: rendered RoceProfiles against the CRD schema",
                lambda: test_custom_resources(chart.objects(chart.render(full))))
    suite.check("validate: CRD schema rejects a bad RoceProfile", test_crd_schema_rejects_bad_profile)
    suite.check("validate: rendered NetworkAttachmentDefinitions", test_rendered_nads)
    suite.check("validate: ServiceMonitor selects the metrics Services", test_servicemonitor)
    suite.check("validate: manifests/examples (NAD, pod, RoceProfile)", test_examples)
    suite.check("docs: README worked example renders and validates", test_readme_example_renders)
    suite.check("security: default values", lambda: test_security(default_values()))
    suite.check("security: full values (Enforce, configfs)", lambda: test_security(full))
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
        version = workspace_version()
        if suite.check("image: static binaries (crt-static, glibc)", build_static) and \
                suite.check("image: podman build (FROM scratch, offline)", lambda: build_image(version)):
            for b in BINARIES:
                suite.check(f"image: {b} --version", lambda b=b: test_binary_version(version, b))
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
