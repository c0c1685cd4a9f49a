"""DRA mode checks of the chart and the examples (scripts/test-delivery runs them; also runnable
alone: `python3 scripts/delivery/dra.py`).

- The chart rendered with `dra.enabled: true` gives the DeviceClasses and the driver's RBAC; those
  and every built-in object of manifests/examples/dra/ (ResourceClaimTemplates, Pods) pass
  `kubernetes-validate --strict` for Kubernetes 1.34 (DRA GA, resource.k8s.io/v1) and the newest
  schema we have.
- Every DeviceClass selects our driver and healthy devices; every example request names a class
  the chart renders (or the NVIDIA GPU class, for the alignment example); the driver's opaque
  config in the examples uses only the fields the driver reads.
- The chart refuses a DeviceClass name that is not a DNS subdomain (values schema).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402

EXAMPLES = chart.ROOT / "manifests" / "examples" / "dra"
# DRA is GA (resource.k8s.io/v1) from 1.34; 1.37 is the newest schema kubernetes-validate has.
KUBE_VERSIONS = ["1.34.0", "1.37.0"]
DRIVER = "rdma.kuberdma.io"
FOREIGN_CLASSES = {"gpu.nvidia.com"}
# The fields of the driver's RdmaDeviceConfig (device-plugin/src/dra/claimconfig.rs).
CONFIG_FIELDS = {"apiVersion", "kind", "env", "umad", "rdmaCm"}


def dra_values() -> dict[str, Any]:
    values = chart.load_values(chart.CHART_DIR / "values.yaml")
    values["dra"]["enabled"] = True
    return values


def rendered() -> list[dict[str, Any]]:
    return chart.objects(chart.render(dra_values()))


def examples() -> dict[str, list[dict[str, Any]]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]
            for p in sorted(EXAMPLES.glob("*.yaml"))}


def validate(docs: list[dict[str, Any]], label: str) -> str:
    chart.kubernetes_validate(docs, label, KUBE_VERSIONS)
    kinds = sorted({d["kind"] for d in docs})
    return f"{len(docs)} object(s) ({', '.join(kinds)}) x k8s {', '.join(KUBE_VERSIONS)}"


def test_rendered_validate() -> str:
    objs = [o for o in rendered() if o["kind"] in ("DeviceClass", "ClusterRole", "ClusterRoleBinding")
            and o["metadata"]["name"].endswith(("-dra", DRIVER))]
    assert any(o["kind"] == "DeviceClass" for o in objs), "no DeviceClass rendered"
    return validate(objs, "chart (dra.enabled)")


def test_examples_validate() -> str:
    docs = [d for docs in examples().values() for d in docs]
    assert docs, f"no examples in {EXAMPLES}"
    return validate(docs, "manifests/examples/dra")


def test_classes_select_our_healthy_devices() -> str:
    classes = [o for o in rendered() if o["kind"] == "DeviceClass"]
    for c in classes:
        exprs = [s["cel"]["expression"] for s in c["spec"]["selectors"]]
        assert f'device.driver == "{DRIVER}"' in exprs[0], exprs
        assert 'device.attributes["kuberdma.io"].healthy' in exprs[0], exprs
    ready = [c for c in classes if any("roceReady" in s["cel"]["expression"] for s in c["spec"]["selectors"])]
    assert ready, "no class requires roceReady"
    off = chart.objects(chart.render(chart.load_values(chart.CHART_DIR / "values.yaml")))
    assert not [o for o in off if o["kind"] == "DeviceClass"], "DeviceClasses rendered with dra.enabled false"
    return f"{len(classes)} class(es): {', '.join(c['metadata']['name'] for c in classes)}"


def test_examples_use_known_classes_and_config() -> str:
    known = {o["metadata"]["name"] for o in rendered() if o["kind"] == "DeviceClass"} | FOREIGN_CLASSES
    n = 0
    for name, docs in examples().items():
        for d in docs:
            if d["kind"] != "ResourceClaimTemplate":
                continue
            devices = d["spec"]["spec"]["devices"]
            for r in devices["requests"]:
                cls = r["exactly"]["deviceClassName"]
                assert cls in known, f"{name}: request {r['name']} uses class {cls}, not rendered by the chart"
                n += 1
            for c in devices.get("config", []):
                o = c.get("opaque", {})
                if o.get("driver") == DRIVER:
                    extra = set(o["parameters"]) - CONFIG_FIELDS
                    assert not extra, f"{name}: fields {extra} are not read by the driver"
    return f"{n} request(s) use rendered classes"


def test_schema_refuses_bad_class_name() -> str:
    values = dra_values()
    values["dra"]["deviceClasses"] = [{"name": "RDMA_Class"}]
    try:
        chart.render(values)
    except Exception as e:  # helm-python raises its own error type
        msg = str(e)
        assert "deviceClasses" in msg or "name" in msg, msg
        return "refused: " + msg.splitlines()[0][:120]
    raise AssertionError("a DeviceClass name with capitals and _ was rendered")


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("dra: rendered DeviceClasses and RBAC (kubernetes-validate --strict, 1.34+)", test_rendered_validate),
    ("dra: examples (kubernetes-validate --strict, 1.34+)", test_examples_validate),
    ("dra: DeviceClasses select rdma.kuberdma.io and healthy devices", test_classes_select_our_healthy_devices),
    ("dra: examples use rendered classes and the driver's config fields", test_examples_use_known_classes_and_config),
    ("dra: schema refuses a bad DeviceClass name", test_schema_refuses_bad_class_name),
]


def main() -> int:
    failed = 0
    for name, fn in CHECKS:
        try:
            print(f"ok   {name}: {fn() or ''}")
        except Exception as e:  # report every check, then fail
            failed += 1
            print(f"FAIL {name}: {e}")
    print(f"{len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
