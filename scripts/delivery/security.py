"""Security rules over rendered Kubernetes objects (scripts/test-delivery runs them).

Each workload may have exactly the privileges its job needs and no more:

| component     | root | capabilities          | host access                                         |
|---------------|------|-----------------------|-----------------------------------------------------|
| device-plugin | yes  | none                  | host network (link events); kubelet device-plugins dir, CDI dir, devinfo dir (rw); /dev (ro); /sys (ro) only without host network. DRA mode (dra.enabled): the kubelet's plugins_registry and plugins/rdma.kuberdma.io dirs and the CDI dir (rw) instead of device-plugins and devinfo, and an API token of its own ServiceAccount projected into this container only |
| install-cni   | yes  | none                  | the host's CNI bin dir (rw)                         |
| agent         | only with allowEnforce or readRdmaCmConfigfs | NET_ADMIN only with allowEnforce | host network; /dev (ro); with allowEnforce /sys (ro) and /sys/devices (rw); /sys/kernel/config/rdma_cm (rw) with allowEnforce or readRdmaCmConfigfs (and, without allowEnforce, /sys/kernel/config (ro) to mount it on) |
| controller    | no   | none                  | none                                                |
| crd-upgrade   | no   | none                  | none (pre-upgrade hook Job applying the CRDs)       |
| test          | no   | none                  | none (`helm test`'s pod, reading its node's RdmaNodeState) |
| kube-rbac-proxy (sidecar, metrics.rbacProxy) | no | none | none; the pod's host network              |

Root is needed where a host file is root-owned (kubelet.sock, /opt/cni/bin, configfs); root
without capabilities can still write files it owns, so no CAP_DAC_OVERRIDE is handed out.
"""

from __future__ import annotations

from typing import Any

WORKLOAD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "Job", "Pod"}
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate"}
FORBIDDEN_RESOURCES = {"*", "secrets", "pods/exec", "clusterroles", "clusterrolebindings", "roles",
                       "rolebindings", "serviceaccounts/token"}


def _component(obj: dict[str, Any]) -> str:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", "?")


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def policy(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each (component, container) may have, derived from the chart values."""
    agent = values.get("agent", {})
    dp = values.get("devicePlugin", {})
    enforce = bool(agent.get("allowEnforce"))
    configfs = bool(agent.get("readRdmaCmConfigfs")) or enforce
    cni_bin = values.get("cni", {}).get("binDir", "/opt/cni/bin")
    dra = values.get("dra", {})
    proxy = {"root": False, "caps": set(), "hostNetwork": False, "hostPaths": {}, "token": True}
    if dra.get("enabled"):
        plugin_paths = {dra.get("pluginsRegistryDir"): False,
                        f"{str(dra.get('pluginsDir', '')).rstrip('/')}/rdma.kuberdma.io": False,
                        dp.get("cdiDir"): False,
                        # The PodResources socket (issue 36, D11: VFs a device plugin mode pod
                        # holds are not published), read-only as in device plugin mode.
                        dp.get("podResourcesDir"): True}
    else:
        plugin_paths = {dp.get("kubeletDir"): False, dp.get("cdiDir"): False, dp.get("devinfoDir"): False,
                        # The kubelet's PodResources socket: connect(2) on a socket works on a
                        # read-only mount, so read-only it must be.
                        dp.get("podResourcesDir"): True}
    return {
        **{f"{c}/kube-rbac-proxy": proxy for c in ("device-plugin", "agent", "controller")},
        "crd-upgrade/apply-crds": {"root": False, "caps": set(), "hostNetwork": False, "hostPaths": {}},
        "device-plugin/device-plugin": {
            "root": True, "caps": set(), "hostNetwork": True,
            "hostPaths": {**plugin_paths, "/sys": True, "/dev": True},
            "token": bool(dra.get("enabled")),
        },
        "device-plugin/install-cni": {
            "root": True, "caps": set(), "hostNetwork": False, "hostPaths": {cni_bin: False},
        },
        "agent/agent": {
            "root": enforce or configfs, "caps": {"NET_ADMIN"} if enforce else set(),
            "hostNetwork": True,
            # Only rdma_cm's directory of configfs is writable; without Enforce's host /sys the
            # host's configfs is mounted read-only to hold its mount point.
            "hostPaths": {"/dev": True, **({"/sys": True, "/sys/devices": False} if enforce else {}),
                          **({"/sys/kernel/config/rdma_cm": False} if configfs else {}),
                          **({"/sys/kernel/config": True} if configfs and not enforce else {})},
        },
        "controller/controller": {"root": False, "caps": set(), "hostNetwork": False, "hostPaths": {}},
        # `helm test`'s pod (templates/tests.yaml): reads its node's RdmaNodeState, nothing on the host.
        "test/node-state": {"root": False, "caps": set(), "hostNetwork": False, "hostPaths": {}},
    }


def check_workloads(objs: list[dict[str, Any]], values: dict[str, Any]) -> list[str]:
    """Problems found; empty when every workload follows the policy."""
    problems: list[str] = []
    allowed = policy(values)
    for obj in objs:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = pod_spec(obj)
        comp = _component(obj)
        pod_sc = spec.get("securityContext", {})
        for flag in ("hostPID", "hostIPC"):
            if spec.get(flag):
                problems.append(f"{name}: {flag} is set")
        if comp == "device-plugin" and spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: mounts an API token it never uses")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        token_volumes = {n for n, v in volumes.items()
                         if any("serviceAccountToken" in src for src in v.get("projected", {}).get("sources", []))}
        containers = spec.get("initContainers", []) + spec.get("containers", [])
        host_network_allowed = any(
            allowed.get(f"{comp}/{c['name']}", {}).get("hostNetwork") for c in containers)
        if spec.get("hostNetwork") and not host_network_allowed:
            problems.append(f"{name}: hostNetwork without need")
        for c in containers:
            key = f"{comp}/{c['name']}"
            where = f"{name} container {c['name']}"
            rule = allowed.get(key)
            if rule is None:
                problems.append(f"{where}: no security policy for {key}")
                continue
            sc = c.get("securityContext", {})
            if sc.get("privileged"):
                problems.append(f"{where}: privileged (grant a capability instead)")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: readOnlyRootFilesystem is not true")
            caps = sc.get("capabilities", {})
            if "ALL" not in caps.get("drop", []):
                problems.append(f"{where}: capabilities.drop lacks ALL")
            extra = set(caps.get("add", [])) - rule["caps"]
            if extra:
                problems.append(f"{where}: capabilities {sorted(extra)} beyond {sorted(rule['caps'])}")
            seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
            if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{where}: no seccomp profile")
            non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
            runs_as_root = not non_root or uid == 0
            if runs_as_root and not rule["root"]:
                problems.append(f"{where}: runs as root without need (set runAsNonRoot)")
            if non_root and uid == 0:
                problems.append(f"{where}: runAsNonRoot with runAsUser 0 cannot start")
            res = c.get("resources", {})
            for r in ("cpu", "memory"):
                if r not in res.get("requests", {}):
                    problems.append(f"{where}: no {r} request")
            if "memory" not in res.get("limits", {}):
                problems.append(f"{where}: no memory limit")
            for m in c.get("volumeMounts", []):
                if m["name"] in token_volumes and not rule.get("token"):
                    problems.append(f"{where}: mounts an API token ({m['name']}) it never uses")
                vol = volumes.get(m["name"], {})
                if "hostPath" not in vol:
                    continue
                path = vol["hostPath"]["path"]
                if path not in rule["hostPaths"]:
                    problems.append(f"{where}: hostPath {path} not needed by {key}")
                elif rule["hostPaths"][path] and not m.get("readOnly"):
                    problems.append(f"{where}: hostPath {path} must be mounted read-only")
        mounted = {m["name"] for c in containers for m in c.get("volumeMounts", [])}
        for vname in volumes:
            if vname not in mounted:
                problems.append(f"{name}: volume {vname} is not mounted by any container")
    return problems


def check_rbac(objs: list[dict[str, Any]]) -> list[str]:
    """Least privilege for RBAC: no wildcards, no secrets, no escalation; one role per account."""
    problems: list[str] = []
    sas = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    bound: dict[str, list[tuple[str, str]]] = {}
    for o in objs:
        if o["kind"] in ("ClusterRole", "Role"):
            for rule in o.get("rules", []):
                for v in rule.get("verbs", []):
                    if v in FORBIDDEN_VERBS:
                        problems.append(f"{o['kind']}/{o['metadata']['name']}: verb {v}")
                for r in rule.get("resources", []):
                    if r in FORBIDDEN_RESOURCES:
                        problems.append(f"{o['kind']}/{o['metadata']['name']}: resource {r}")
                if "*" in rule.get("apiGroups", []):
                    problems.append(f"{o['kind']}/{o['metadata']['name']}: apiGroup *")
                if "nonResourceURLs" in rule and not (
                        _component(o) == "metrics-reader" and rule["nonResourceURLs"] == ["/metrics"]
                        and rule.get("verbs") == ["get"]):
                    problems.append(f"{o['kind']}/{o['metadata']['name']}: nonResourceURLs")
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            if o["roleRef"]["name"] in ("cluster-admin", "admin", "edit"):
                problems.append(f"{o['kind']}/{o['metadata']['name']}: binds {o['roleRef']['name']}")
            for s in o.get("subjects", []):
                bound.setdefault(s["name"], []).append((o["roleRef"]["kind"], o["roleRef"]["name"]))
    for sa, roles in bound.items():
        if sa not in sas:
            problems.append(f"binding to unknown ServiceAccount {sa}")
        # One ClusterRole per account, plus the Role for Events in `default` (events.k8s.io
        # validation keeps Events about cluster-scoped objects there).
        for kind in ("ClusterRole", "Role"):
            of_kind = [r for k, r in roles if k == kind]
            if len(of_kind) > 1:
                problems.append(f"ServiceAccount {sa} has several {kind}s: {of_kind}")
    workload_sas = {}
    for o in objs:
        if o["kind"] in WORKLOAD_KINDS:
            workload_sas.setdefault(pod_spec(o).get("serviceAccountName", "default"), []).append(
                o["metadata"]["name"])
    for sa, users in workload_sas.items():
        if sa == "default":
            problems.append(f"{users} use the default ServiceAccount")
        if len(users) > 1:
            problems.append(f"ServiceAccount {sa} shared by {users}")
    return problems


# What each component's code calls (operator/src/agent.rs, publish.rs, controller.rs,
# crd_apply.rs); the chart must grant exactly this, as (scope, apiGroup, resource, verb) with scope
# "cluster" (a ClusterRole) or the namespace of a Role. `patch` on rdmanodestates is server-side
# apply, which also needs `create` when the object does not exist yet; the status subresources are
# only ever applied (patch). Events about cluster-scoped objects must be in `default`
# (k8s.io/kubernetes pkg/apis/core/validation/events.go), so both writers get a Role there.
CRD_NAMES = ("rdmanodestates.kuberdma.io", "roceprofiles.kuberdma.io")
EVENTS_NAMESPACE = "default"
# kube-rbac-proxy (metrics.rbacProxy): authenticate and authorise each scrape.
PROXY_RBAC = {("cluster", "authentication.k8s.io", "tokenreviews", "create"),
              ("cluster", "authorization.k8s.io", "subjectaccessreviews", "create")}
EVENTS_RBAC = {(EVENTS_NAMESPACE, "events.k8s.io", "events", "create")}
EXPECTED_RBAC: dict[str, set[tuple[str, str, str, str]]] = {
    "agent": {
        *(("cluster", "kuberdma.io", "rdmanodestates", v) for v in ("list", "watch", "create", "patch")),
        ("cluster", "kuberdma.io", "rdmanodestates/status", "patch"),
        *(("cluster", "kuberdma.io", "roceprofiles", v) for v in ("list", "watch")),
        # get: the probe of its own Node while the API server looks down.
        *(("cluster", "", "nodes", v) for v in ("get", "list", "watch", "patch")),
        *EVENTS_RBAC,
    },
    "controller": {
        *(("cluster", "kuberdma.io", "roceprofiles", v) for v in ("list", "watch")),
        ("cluster", "kuberdma.io", "roceprofiles/status", "patch"),
        *(("cluster", "kuberdma.io", "rdmanodestates", v) for v in ("list", "watch", "delete")),
        ("cluster", "kuberdma.io", "rdmanodestates/status", "patch"),
        *(("cluster", "", "nodes", v) for v in ("list", "watch", "patch")),
        *EVENTS_RBAC,
    },
    "crd-upgrade": {("cluster", "apiextensions.k8s.io", "customresourcedefinitions", v)
                    for v in ("create", "patch")},
    # `helm test`'s pod: `kubectl rdma status NODE`.
    "test": {("cluster", "kuberdma.io", "rdmanodestates", "get")},
    # Aggregated into the built-in `view` role: read our CRDs.
    "view": {("cluster", "kuberdma.io", r, v) for r in ("rdmanodestates", "roceprofiles")
             for v in ("get", "list", "watch")},
}
# Roles whose rules may carry resourceNames, and the names they must list.
RESOURCE_NAMES = {"crd-upgrade": CRD_NAMES}
AGGREGATE_TO = {"view": "rbac.authorization.k8s.io/aggregate-to-view"}
# The DRA driver (device-plugin/src/dra/: publish.rs, service.rs, status.rs, nodestate.rs). A
# server-side apply that creates a slice is authorized as `create` as well as `patch`.
DRA_RBAC = {
    *(("cluster", "resource.k8s.io", "resourceslices", v) for v in ("list", "watch", "create", "patch", "delete")),
    ("cluster", "resource.k8s.io", "resourceclaims", "get"),
    ("cluster", "resource.k8s.io", "resourceclaims/status", "patch"),
    ("cluster", "", "nodes", "get"),
    *(("cluster", "kuberdma.io", "rdmanodestates", v) for v in ("list", "watch")),
}
# Kubernetes >= 1.36 (DRAResourceClaimGranularStatusAuthorization): writing status.devices also
# needs the driver's own verb on resourceclaims/driver (pkg/registry/resource/utils.go), limited
# to our driver by resourceNames.
DRA_RBAC_136 = {("cluster", "resource.k8s.io", "resourceclaims/driver", "associated-node:patch")}
# Per-resource resourceNames of a component's rules (the rest of its rules name nothing).
RULE_RESOURCE_NAMES = {"device-plugin": {"resourceclaims/driver": ["rdma.kuberdma.io"]}}


def kube_minor(kube_version: str | None) -> tuple[int, int]:
    """(major, minor) of a version string; Helm's default (None) is treated as the newest."""
    if kube_version is None:
        return (1, 10**6)
    major, minor = (int(x) for x in kube_version.lstrip("v").split(".")[:2])
    return (major, minor)


# Writes that only the chart's ValidatingAdmissionPolicies hold to the writer's own node: granted
# only with them (fail closed), or for the agent with agent.unguardedNodeWrites.
AGENT_NODE_WRITES = {
    ("cluster", "kuberdma.io", "rdmanodestates", "create"), ("cluster", "kuberdma.io", "rdmanodestates", "patch"),
    ("cluster", "kuberdma.io", "rdmanodestates/status", "patch"), ("cluster", "", "nodes", "patch"),
    *EVENTS_RBAC,
}
DRA_NODE_WRITES = {
    *(("cluster", "resource.k8s.io", "resourceslices", v) for v in ("create", "patch", "delete")),
    ("cluster", "resource.k8s.io", "resourceclaims/status", "patch"),
    *DRA_RBAC_136,
}
# The first Kubernetes serving admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy.
POLICY_API_SINCE = (1, 30)


def policy_api(kube_version: str | None) -> bool:
    """Whether a render for `kube_version` knows the policy API (chart.render passes it from
    1.30 on; without a version, as `helm template` without --api-versions, it does not)."""
    return kube_version is not None and kube_minor(kube_version) >= POLICY_API_SINCE


def agent_writes(values: dict[str, Any], kube_version: str | None) -> str:
    """charts' kube-rdma.agentWrites: "policy", "unguarded" or "" (read-only)."""
    agent = values.get("agent", {})
    if policy_api(kube_version) and agent.get("nodeLabelPolicy", {}).get("enabled", True):
        return "policy"
    return "unguarded" if agent.get("unguardedNodeWrites") else ""


def expected_rbac(values: dict[str, Any], kube_version: str | None = None) -> dict[str, set[tuple[str, str, str, str]]]:
    """EXPECTED_RBAC for these values (and the cluster's version: the policy API, and in DRA
    mode 1.36's driver rule): the proxy's reviews join every proxied component; in DRA mode
    the device plugin is the DRA driver; writes only the policies hold to one node are left out
    where they are not rendered."""
    out = {k: set(v) for k, v in EXPECTED_RBAC.items()}
    enabled = {c: values.get(k, {}).get("enabled", True)
               for c, k in (("agent", "agent"), ("controller", "controller"), ("device-plugin", "devicePlugin"))}
    for comp in ("agent", "controller"):
        if not enabled[comp]:
            out.pop(comp)
    if "agent" in out and not agent_writes(values, kube_version):
        out["agent"] -= AGENT_NODE_WRITES
    if values.get("dra", {}).get("enabled") and enabled["device-plugin"]:
        out["device-plugin"] = set(DRA_RBAC) | (DRA_RBAC_136 if kube_minor(kube_version) >= (1, 36) else set())
        if not policy_api(kube_version):
            out["device-plugin"] -= DRA_NODE_WRITES
    if values.get("metrics", {}).get("rbacProxy", {}).get("enabled"):
        for comp in ("agent", "controller", "device-plugin"):
            if enabled[comp]:
                out[comp] = out.get(comp, set()) | PROXY_RBAC
    if not values.get("crds", {}).get("upgradeJob", {}).get("enabled", True):
        out.pop("crd-upgrade")
    if not (values.get("tests", {}).get("enabled", True) and enabled["agent"] and enabled["device-plugin"]):
        out.pop("test")
    return out


def granted(objs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str, str]]]:
    """(scope, group, resource, verb) each component's Roles and ClusterRoles grant."""
    out: dict[str, set[tuple[str, str, str, str]]] = {}
    for o in objs:
        if o["kind"] not in ("ClusterRole", "Role") or _component(o) == "metrics-reader":
            continue
        scope = "cluster" if o["kind"] == "ClusterRole" else o["metadata"].get("namespace", "?")
        out.setdefault(_component(o), set()).update(
            (scope, g, r, v) for rule in o.get("rules", []) for g in rule.get("apiGroups", [])
            for r in rule.get("resources", []) for v in rule.get("verbs", []))
    return out


def check_rbac_exact(objs: list[dict[str, Any]], values: dict[str, Any] | None = None,
                     kube_version: str | None = None) -> list[str]:
    """Each component's roles grant exactly expected_rbac(values, kube_version); the device plugin
    has a role only in DRA mode or for its kube-rbac-proxy sidecar; the CRD hook's rules name our
    two CRDs and the DRA driver's per-driver rules our driver; every Role and ClusterRole is bound
    to its component's ServiceAccount, but the aggregated view role, which is bound to nothing and
    carries its aggregation label."""
    problems = []
    values = values or {}
    want_all = expected_rbac(values, kube_version)
    got_all = granted(objs)
    if "device-plugin" in got_all and "device-plugin" not in want_all:
        problems.append("the device plugin has a ClusterRole; it never calls the API server")
    for extra in sorted(set(got_all) - set(want_all)):
        problems.append(f"unexpected role for {extra}")
    for o in objs:
        if o["kind"] not in ("ClusterRole", "Role"):
            continue
        comp = _component(o)
        names = RESOURCE_NAMES.get(comp)
        per_resource = RULE_RESOURCE_NAMES.get(comp, {})
        for rule in o.get("rules", []):
            named = [per_resource[r] for r in rule.get("resources", []) if r in per_resource]
            if named:
                if rule.get("resourceNames") != named[0]:
                    problems.append(f"{comp} rule {rule} is not limited to {named[0]}")
            elif names is not None and sorted(rule.get("resourceNames", [])) != sorted(names):
                problems.append(f"{comp} rule {rule} is not limited to {names}")
            elif names is None and rule.get("resourceNames"):
                problems.append(f"{comp} rule {rule} has resourceNames")
        label = AGGREGATE_TO.get(comp)
        if label is not None and o["metadata"].get("labels", {}).get(label) != "true":
            problems.append(f"ClusterRole {o['metadata']['name']} lacks the label {label}: \"true\"")
        bindings = [b for b in objs if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
                    and b["roleRef"]["kind"] == o["kind"] and b["roleRef"]["name"] == o["metadata"]["name"]
                    and b["metadata"].get("namespace") == o["metadata"].get("namespace")]
        if label is not None and bindings:
            problems.append(f"{o['kind']}/{o['metadata']['name']} is aggregated and must not be bound")
        if label is None and comp != "metrics-reader" and not bindings:
            problems.append(f"{o['kind']}/{o['metadata']['name']} is bound to nothing")
    for comp, want in want_all.items():
        got = got_all.get(comp)
        if got is None:
            problems.append(f"no role for {comp}")
            continue

        def show(t: tuple[str, str, str, str]) -> str:
            where = "cluster-wide" if t[0] == "cluster" else f"in namespace {t[0]}"
            return f"{t[3]} {t[1] or 'core'}/{t[2]} {where}"

        for extra in sorted(got - want):
            problems.append(f"{comp} may {show(extra)}, which it never does")
        for missing in sorted(want - got):
            problems.append(f"{comp} cannot {show(missing)}, which it needs")
    return problems
