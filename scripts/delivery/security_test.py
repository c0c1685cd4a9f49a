"""security.py's rules over every rendered workload and RBAC object (scripts/test-delivery runs
these; also runnable alone: `python3 scripts/delivery/security_test.py`).

- Default, full and rbac-proxy values render workloads and RBAC with exactly the privileges
  security.py allows (rendered as on `helm upgrade`, so the CRD hook's objects are checked too).
- The agent gets NET_ADMIN, root and writable sysfs/configfs only with allowEnforce.
- The checker is not vacuous: each privilege one might add by mistake is reported.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import yaml

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
                               "/host/sys/kernel/config/rdma_cm": ("/sys/kernel/config/rdma_cm", False)}, \
        agent_mounts(f)
    # Reading rdma_cm's defaults without Enforce: the host's configfs read-only (the container's
    # own sysfs has no rdma_cm directory to mount on) and only rdma_cm's directory writable.
    cm = chart.objects(chart.render(chart.merged(chart.default_values(), agent={
        **chart.default_values()["agent"], "readRdmaCmConfigfs": True})))
    assert agent_mounts(cm) == {"/host/dev": ("/dev", True), "/sys/kernel/config": ("/sys/kernel/config", True),
                                "/sys/kernel/config/rdma_cm": ("/sys/kernel/config/rdma_cm", False)}, agent_mounts(cm)
    # A simulated node is written in its own tree (mounted read-write): no host sysfs or configfs.
    sim = chart.objects(chart.render({**chart.full_values(), "simulatedNode": {"path": "/var/lib/sim"}}))
    assert agent_mounts(sim) == {"/host/dev": ("/dev", True), "/var/lib/sim": ("/var/lib/sim", False)}, \
        agent_mounts(sim)


def effective_values(values: dict[str, Any]) -> dict[str, Any]:
    """`values` merged over the chart's defaults, as Helm does before rendering."""
    import helm_python as helm

    with helm.Chart.load(chart.CHART_DIR) as c:
        return c.merge_values(values)


def test_security(values: dict[str, Any], kube_version: str | None = None) -> str:
    """Rendered for `kube_version` (with its policy API) or, without one, as `helm template`
    without --api-versions: the safe form, in which no write the policies guard is granted."""
    values = effective_values(values)
    objs = chart.objects(chart.render(values, upgrade=True, kube_version=kube_version))
    problems = security.check_workloads(objs, values) + security.check_rbac(objs) + \
        security.check_rbac_exact(objs, values, kube_version)
    assert not problems, "\n".join(problems)
    n = sum(1 for o in objs if o["kind"] in security.WORKLOAD_KINDS)
    return f"{n} workload(s) clean"


def test_fails_closed() -> str:
    """Without the policy API the agent's node writes are not granted (safe form), before 1.30 or
    with the policy off the render fails saying why, and agent.unguardedNodeWrites grants them
    knowingly."""
    def agent_grants(values: dict[str, Any] | None, kube_version: str | None) -> set[tuple[str, str, str, str]]:
        return security.granted(chart.objects(chart.render(values, kube_version=kube_version))).get("agent", set())

    assert security.AGENT_NODE_WRITES <= agent_grants(None, "1.30.0")
    assert not security.AGENT_NODE_WRITES & agent_grants(None, None), agent_grants(None, None)
    unguarded = chart.merged(chart.default_values(), agent={**chart.default_values()["agent"], "unguardedNodeWrites": True})
    assert security.AGENT_NODE_WRITES <= agent_grants(unguarded, "1.29.0")
    assert security.AGENT_NODE_WRITES <= agent_grants(unguarded, None)
    assert "does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy" in \
        chart.render_error_for(None, kube_version="1.29.0")
    return "granted with the policies or unguardedNodeWrites only"


def test_security_catches_mutations() -> str:
    """The checker is not vacuous: each privilege we might add by mistake is reported."""
    values = effective_values(chart.default_values())
    # Rendered as on `helm upgrade`, so the CRD hook's role is there too; clean before mutating,
    # or every mutation would be "caught" by the same unrelated problem.
    # For 1.30, so that every write the policies guard is granted and can be mutated.
    base = chart.objects(chart.render(values, upgrade=True, kube_version="1.30.0"))

    def problems(objs: list[dict[str, Any]]) -> list[str]:
        return security.check_workloads(objs, values) + security.check_rbac(objs) + \
            security.check_rbac_exact(objs, values, "1.30.0")

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


def test_safe_form_agent_says_it_is_forbidden() -> str:
    """The agent with the safe form's RBAC (no policy API known to the render) on a real
    kube-apiserver, with its ServiceAccount's token: it reads its node, writes nothing, and says
    why on its log and its error metric, naming the refused verb and resource."""
    import monitoring

    node = "cx6dx-dual"
    access = [o for o in chart.objects(chart.render(None))
              if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
              and security._component(o) == "agent"]
    assert not security.AGENT_NODE_WRITES & security.granted(access).get("agent", set()), access
    seeds = [chart.CHART_CRDS.read_text(encoding="utf-8"),
             yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": chart.NAMESPACE}},
                                 {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}, *access])]
    op = str(chart.native_binary("kube-rdma-operator"))
    with monitoring.ApiServer(chart.api_server_binary(), seeds) as api:
        kubectl = [api.kubectl, f"--kubeconfig={api.kubeconfig}"]
        token = subprocess.run([*kubectl, "-n", chart.NAMESPACE, "create", "token", f"{chart.RELEASE}-agent"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        admin = yaml.safe_load(api.kubeconfig.read_text(encoding="utf-8"))
        with tempfile.TemporaryDirectory(prefix="kube-rdma-safe-agent-") as tmp:
            kc = Path(tmp, "agent.kubeconfig")
            kc.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "clusters": admin["clusters"],
                "users": [{"name": "agent", "user": {"token": token}}],
                "contexts": [{"name": "agent", "context": {"cluster": admin["clusters"][0]["name"], "user": "agent"}}],
                "current-context": "agent"}), encoding="utf-8")
            port = monitoring.free_port()
            env = {**os.environ, "KUBECONFIG": str(kc), "NODE_NAME": node}
            with open(Path(tmp, "log"), "w", encoding="utf-8") as err:
                proc = subprocess.Popen([op, "agent", "--sim", str(chart.ROOT / "examples" / "nodes" / f"{node}.yaml"),
                                         "--poll-interval=2", f"--metrics-addr=127.0.0.1:{port}"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=err)
            try:
                deadline, log, metrics, forbidden = time.monotonic() + 60, "", "", None
                health: tuple[int, str] = (0, "")
                while time.monotonic() < deadline and proc.poll() is None:
                    log = Path(tmp, "log").read_text(encoding="utf-8", errors="replace")
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                            metrics = r.read().decode()
                    except OSError:
                        pass
                    forbidden = re.search(r'^kuberdma_api_errors_total\{kind="forbidden"\} [1-9]', metrics, re.M)
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                            health = (r.status, r.read().decode())
                    except urllib.error.HTTPError as e:
                        health = (e.code, e.read().decode())
                    except OSError:
                        pass
                    # Unhealthy after 3 polls without a successful pass: the kubelet restarts it.
                    if "agent pass failed" in log and forbidden and health[0] == 503:
                        break
                    time.sleep(0.5)
            finally:
                proc.kill()
                proc.wait()
        plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
        assert "agent pass failed" in plain and "Forbidden" in plain and f"{chart.RELEASE}-agent" in plain \
            and re.search(r'cannot (patch|create) resource \\?"rdmanodestates\\?"', plain), plain[-3000:]
        assert forbidden, f"no forbidden API error counted:\n{metrics}"
        assert health[0] == 503 and "no successful pass" in health[1], health
        states = api.get("/apis/kuberdma.io/v1alpha1/rdmanodestates")["items"]
        assert not states, f"the read-only agent wrote {states}"
    return "its log: " + next(line for line in plain.splitlines() if "agent pass failed" in line)[-160:]


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("security: default values (no API list: the safe form)", lambda: test_security(chart.default_values())),
    ("security: default values on 1.30", lambda: test_security(chart.default_values(), "1.30.0")),
    ("security: full values (Enforce, configfs)", lambda: test_security(chart.full_values())),
    ("security: full values on 1.34", lambda: test_security(chart.full_values(), "1.34.0")),
    ("security: rbac-proxy values", lambda: test_security(chart.ci_values("rbac-proxy-values.yaml"))),
    ("security: the agent's node writes fail closed", test_fails_closed),
    ("security: the safe form's agent says it is forbidden (real kube-apiserver)",
     test_safe_form_agent_says_it_is_forbidden),
    ("security: agent gets NET_ADMIN and writable sysfs only with allowEnforce", test_agent_privileges),
    ("security: checker catches added privileges", test_security_catches_mutations),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
