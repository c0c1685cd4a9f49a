"""security.py's rules over every rendered workload and RBAC object (scripts/test-delivery runs
these; also runnable alone: `python3 scripts/delivery/security_test.py`).

- Default, full and rbac-proxy values render workloads and RBAC with exactly the privileges
  security.py allows (rendered as on `helm upgrade`, so the CRD hook's objects are checked too).
- The agent gets NET_ADMIN, root and writable sysfs/configfs only with allowEnforce.
- The checker is not vacuous: each privilege one might add by mistake is reported.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import security  # noqa: E402


def test_agent_privileges() -> None:
    d = chart.objects(chart.render(None))
    f = chart.objects(chart.render(chart.full_values()))

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
    sim = chart.objects(chart.render({**chart.full_values(), "simulatedNode": {"path": "/var/lib/sim"}}))
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
    values = effective_values(chart.default_values())
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


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("security: default values", lambda: test_security(chart.default_values())),
    ("security: full values (Enforce, configfs)", lambda: test_security(chart.full_values())),
    ("security: rbac-proxy values", lambda: test_security(chart.ci_values("rbac-proxy-values.yaml"))),
    ("security: agent gets NET_ADMIN and writable sysfs only with allowEnforce", test_agent_privileges),
    ("security: checker catches added privileges", test_security_catches_mutations),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
