"""The CRDs and the rendered objects against the real API's schemas (scripts/test-delivery runs
these; also runnable alone: `python3 scripts/delivery/validate_test.py`).

- The CRD upgrade hook's command line, run against a real kube-apiserver, upgrades outdated CRDs.
- kubernetes-validate --strict (PyPI) checks every built-in object rendered for values.yaml and each
  ci/*.yaml, as for the oldest Kubernetes the chart supports and the newest schema, and the CRDs.
- dra.py's and pool_schema_test.py's checks run here, between those and the rest.
- The CRDs' names, scope, version and status subresource; the chart's copy is the operator's.
- Custom resources (rendered RoceProfiles, the example's, the agent's output) are checked against
  the CRDs' own openAPIV3Schema, which refuses a bad RoceProfile.
- NetworkAttachmentDefinitions name a pool and carry a kube-rdma-cni config; the ServiceMonitor
  selects the three metrics Services; manifests/examples and the README quick start's values
  render and validate.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import dra  # noqa: E402
import monitoring  # noqa: E402
import pool_schema_test  # noqa: E402
import security  # noqa: E402


# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema we have.
KUBE_VERSIONS = ["1.28.0", "1.37.0"]


def kubernetes_validate(docs: list[dict[str, Any]], label: str) -> str:
    return chart.kubernetes_validate(docs, label, KUBE_VERSIONS)


def validate_rendered(values: dict[str, Any] | None, label: str) -> str:
    """kubernetes-validate --strict of the built-in objects, rendered as for each Kubernetes
    version checked (the chart adapts to the cluster's version and APIs)."""
    notes = []
    for version in KUBE_VERSIONS:
        objs = builtin(chart.objects(chart.render(before_policies(values, version), kube_version=version)))
        chart.kubernetes_validate(objs, label, [version])
        notes.append(f"{len(objs)} on {version}")
    return ", ".join(notes)


def before_policies(values: dict[str, Any] | None, version: str) -> dict[str, Any] | None:
    """`values` as a cluster without ValidatingAdmissionPolicy (< 1.30) must have them to render
    with the agent: agent.unguardedNodeWrites (the chart fails closed otherwise)."""
    if security.policy_api(version):
        return values
    out = copy.deepcopy(values) if values is not None else chart.default_values()
    out.setdefault("agent", {})["unguardedNodeWrites"] = True
    return out


def builtin(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if not o["apiVersion"].startswith(chart.CUSTOM_GROUPS)]


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


def test_crds_validate() -> str:
    return kubernetes_validate(chart.crd_documents(), "CRDs")


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
    bad = yaml.safe_load((chart.EXAMPLES / "roceprofile.yaml").read_text(encoding="utf-8"))
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
    values = chart.full_values()
    objs = chart.objects(chart.render(values))
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    resources = {f"{p.get('resourcePrefix', values['resourcePrefix'])}/{p['name']}" for p in values["pools"]}
    confs = [check_nad(n, resources) for n in nads]
    assert nads[1]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == "intel.com/e810_vf"
    assert confs[0]["mtu"] == 9000 and nads[0]["metadata"]["namespace"] == "ml-jobs", confs[0]
    assert nads[1]["metadata"]["namespace"] == chart.NAMESPACE, nads[1]["metadata"]
    return f"{len(nads)} NAD(s)"


def test_servicemonitor() -> None:
    objs = chart.objects(chart.render(chart.full_values()))
    sm = next(o for o in objs if o["kind"] == "ServiceMonitor")
    services = [o for o in objs if o["kind"] == "Service"]
    labels = sm["spec"]["selector"]["matchLabels"]
    picked = [s for s in services if all(s["metadata"]["labels"].get(k) == v for k, v in labels.items())]
    assert len(picked) == 3, f"ServiceMonitor selects {len(picked)} services (device plugin, agent, controller)"
    for s in picked:
        assert [p["name"] for p in s["spec"]["ports"]] == ["metrics"], s["spec"]["ports"]
    assert sm["metadata"]["labels"]["release"] == "prometheus", sm["metadata"]["labels"]


def test_examples() -> str:
    ex = chart.load_examples()
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


def test_readme_example_renders() -> str:
    _, values = chart.readme_values()
    objs = chart.objects(chart.render(values))
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    assert len(nads) == 1, chart.kinds(objs)
    check_nad(nads[0], {"kuberdma.io/rdma_vfs"})
    for o in objs:
        if o["apiVersion"].startswith("kuberdma.io/"):
            validate_custom(o)
    validate_rendered(values, "README example")
    return "pools.yaml + my-values.yaml render and validate"


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
        [str(chart.native_binary("kube-rdma-operator")), "crds"], capture_output=True, text=True,
        check=True).stdout) if d]
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
    cmd = [str(chart.native_binary("kube-rdma-operator"))] + c["args"]
    with monitoring.ApiServer(chart.api_server_binary(), [yaml.safe_dump_all(old)]) as api:
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


def checks() -> list[tuple[str, Callable[[], str | None]]]:
    out: list[tuple[str, Callable[[], str | None]]] = [
        ("crds: the upgrade hook's `crds --apply` against a real kube-apiserver", test_crds_apply_against_api_server),
    ]
    for f in ["values.yaml"] + chart.ci_files():
        out.append((f"validate: rendered objects of {f} (kubernetes-validate --strict)",
                    lambda f=f: validate_rendered(
                        chart.default_values() if f == "values.yaml" else chart.ci_values(f), f)))
    out += [
        ("validate: CRDs (kubernetes-validate --strict)", test_crds_validate),
        *dra.CHECKS,  # DRA mode: scripts/delivery/dra.py
        *pool_schema_test.CHECKS,  # the pool schema against the parser
        ("validate: CRD names, scope, version, status subresource", test_crds_shape),
        ("validate: rendered RoceProfiles against the CRD schema",
         lambda: test_custom_resources(chart.objects(chart.render(chart.full_values())))),
        ("validate: CRD schema rejects a bad RoceProfile", test_crd_schema_rejects_bad_profile),
        ("validate: rendered NetworkAttachmentDefinitions", test_rendered_nads),
        ("validate: ServiceMonitor selects the metrics Services", test_servicemonitor),
        ("validate: manifests/examples (NAD, pod, RoceProfile)", test_examples),
        ("docs: README quick start's pools.yaml + my-values.yaml render and validate", test_readme_example_renders),
    ]
    return out


def main() -> int:
    return chart.run_checks(checks())


if __name__ == "__main__":
    sys.exit(main())
