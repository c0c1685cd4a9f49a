"""DRA mode checks of the chart and the examples (scripts/test-delivery runs them; also runnable
alone: `python3 scripts/delivery/dra.py`).

- With `dra.enabled: true` the device plugin DaemonSet runs `kube-rdma-device-plugin dra` (one
  DaemonSet, one mode: never both for the same devices), with an API token of its own
  ServiceAccount projected into that container only, the kubelet's plugin dirs mounted and
  NODE_NAME from the downward API; the driver's ClusterRoleBinding names that ServiceAccount.
- The chart's DRA command line, run by the real binary (paths mapped into a scratch dir) on a
  simulated node against a real kube-apiserver (v1.34.4, the chart's ServiceAccount token and
  RBAC), serves the kubelet where the mounts put the kubelet's dirs and publishes the node's
  ResourceSlices.
- RBAC grants exactly what the driver calls on each Kubernetes version (1.34, 1.35; 1.36+ adds
  resourceclaims/driver), and the rendered objects pass `kubernetes-validate --strict` for each.
- Every CEL selector of the DeviceClasses, of values.yaml's example class and of the examples in
  manifests/examples/dra/ is compiled and evaluated by the scheduler's own CEL package
  (k8s.io/dynamic-resource-allocation/cel through the Go peer `kube cel`, e2e/peers/kube/cel.go)
  against the devices the driver published, and against each of them without each optional
  attribute: no compile error, no runtime error (which fails an allocation), and the matches
  each class promises.
- Every example request names a class the chart renders (or the NVIDIA GPU class, for the
  alignment example); the driver's opaque config in the examples uses only the fields it reads.
- The chart refuses a DeviceClass name that is not a DNS subdomain, and DRA mode before 1.34.
- NetworkAttachmentDefinitions in DRA mode have no resourceName annotation: the CNI config names
  the driver's prepared dir and the network's claim and request.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import security  # noqa: E402

EXAMPLES = chart.ROOT / "manifests" / "examples" / "dra"
# DRA is GA (resource.k8s.io/v1) from 1.34; 1.36 adds granular claim status authorization; 1.37
# is the newest schema kubernetes-validate has.
KUBE_VERSIONS = ["1.34.0", "1.35.0", "1.36.0", "1.37.0"]
DRIVER = "rdma.kuberdma.io"
FOREIGN_CLASSES = {"gpu.nvidia.com"}
# The fields of the driver's RdmaDeviceConfig (device-plugin/src/dra/claimconfig.rs).
CONFIG_FIELDS = {"apiVersion", "kind", "env", "umad", "rdmaCm"}
SIM_NODE = "cx6dx-dual"
# What the driver publishes on every device (device-plugin/src/dra/slices.rs `attributes`);
# every other attribute may be missing on some device, so selectors must guard it with has().
ALWAYS_PUBLISHED = {"resource.kubernetes.io/pciBusID", "kuberdma.io/pool", "kuberdma.io/pfPciAddress",
                    "kuberdma.io/healthy"}
# Where e2e/build-peers puts the Go peers (outside the clone; never committed).
PEERS_BIN = Path(os.environ.get("KUBE_RDMA_E2E_CACHE") or "/var/cache/kube-rdma-e2e") / "bin"


def dra_values() -> dict[str, Any]:
    values = chart.load_values(chart.CHART_DIR / "values.yaml")
    values["dra"]["enabled"] = True
    return values


def rendered(values: dict[str, Any] | None = None, kube_version: str | None = None) -> list[dict[str, Any]]:
    return chart.objects(chart.render(values or dra_values(), kube_version=kube_version))


def examples() -> dict[str, list[dict[str, Any]]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d]
            for p in sorted(EXAMPLES.glob("*.yaml"))}


def validate(docs: list[dict[str, Any]], label: str, versions: list[str]) -> str:
    chart.kubernetes_validate(docs, label, versions)
    kinds = sorted({d["kind"] for d in docs})
    return f"{len(docs)} object(s) ({', '.join(kinds)}) x k8s {', '.join(versions)}"


def driver_daemonsets(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Workloads running kube-rdma-device-plugin, in either mode."""
    return [o for o in objs if o["kind"] == "DaemonSet"
            and any(c["command"][0].endswith("kube-rdma-device-plugin")
                    for c in o["spec"]["template"]["spec"]["containers"])]


def driver_container(ds: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "device-plugin")


def flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def host_mounts(ds: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """mountPath -> (hostPath, read-only) of a container's hostPath mounts."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
            for m in container.get("volumeMounts", []) if "hostPath" in volumes[m["name"]]}


def test_rendered_validate() -> str:
    notes = []
    for version in KUBE_VERSIONS:
        objs = [o for o in rendered(kube_version=version) if not o["apiVersion"].startswith(chart.CUSTOM_GROUPS)]
        assert any(o["kind"] == "DeviceClass" for o in objs), "no DeviceClass rendered"
        chart.kubernetes_validate(objs, f"chart (dra.enabled, {version})", [version])
        notes.append(f"{len(objs)} on {version}")
    return ", ".join(notes)


def test_examples_validate() -> str:
    docs = [d for docs in examples().values() for d in docs]
    assert docs, f"no examples in {EXAMPLES}"
    return validate(docs, "manifests/examples/dra", [KUBE_VERSIONS[0], KUBE_VERSIONS[-1]])


def test_daemonset_runs_dra_with_its_token() -> str:
    """Issue 25: the DaemonSet never ran `dra`, had no token and the binding named another
    account. In DRA mode: one DaemonSet, running `dra`, its kubelet dirs mounted where its flags
    point, a projected token of its ServiceAccount in that container only, NODE_NAME from the
    downward API; in device plugin mode none of that."""
    for mode, values in (("dra", dra_values()), ("device plugin", chart.load_values(chart.CHART_DIR / "values.yaml"))):
        objs = rendered(values)
        dss = driver_daemonsets(objs)
        assert len(dss) == 1, f"{mode}: {len(dss)} DaemonSets run kube-rdma-device-plugin (one mode per node)"
        ds = dss[0]
        pod = ds["spec"]["template"]["spec"]
        c = driver_container(ds)
        args = c["args"]
        assert pod.get("automountServiceAccountToken") is False, f"{mode}: the pod automounts a token"
        volumes = {v["name"]: v for v in pod["volumes"]}
        token_mounts = {(cc["name"], m["mountPath"]) for cc in pod.get("initContainers", []) + pod["containers"]
                        for m in cc.get("volumeMounts", [])
                        if any("serviceAccountToken" in s for s in volumes[m["name"]].get("projected", {}).get("sources", []))}
        node_name = next(e for e in c["env"] if e["name"] == "NODE_NAME")
        assert node_name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", node_name
        mounts = host_mounts(ds, c)
        if mode == "device plugin":
            assert args[0] != "dra" and not token_mounts, (args, token_mounts)
            extra = [f"{o['kind']}/{o['metadata']['name']}" for o in objs if o["kind"] == "DeviceClass"
                     or (o["kind"] == "ClusterRole" and security._component(o) == "device-plugin")]
            assert not extra, f"device plugin mode renders {extra}"
            continue
        assert args[0] == "dra", args
        for only_dp in ("kubelet-dir", "devinfo-dir"):
            assert flag(args, only_dp) is None, f"--{only_dp} is a device plugin mode flag: {args}"
        # DRA mode reads PodResources too: a VF a device-plugin-mode pod still holds is withheld.
        pr = flag(args, "pod-resources-socket")
        assert pr and mounts.get(os.path.dirname(pr), (None, None))[1] is True, \
            f"--pod-resources-socket is not given or not mounted read-only: {args} {mounts}"
        registry, plugins = flag(args, "plugins-registry-dir"), flag(args, "plugins-dir")
        assert mounts.get(registry) == (registry, False), f"{registry} is not mounted read-write from the host: {mounts}"
        own = f"{plugins}/{DRIVER}"
        assert mounts.get(own) == (own, False), f"{own} is not mounted read-write from the host: {mounts}"
        assert (registry, plugins) == ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"), \
            "the kubelet's default dirs (pkg/kubelet/config/defaults.go)"
        assert token_mounts == {("device-plugin", "/var/run/secrets/kubernetes.io/serviceaccount")}, token_mounts
        token = next(v for v in pod["volumes"] if v["name"] == "api-token")["projected"]["sources"]
        assert {k for s in token for k in s} == {"serviceAccountToken", "configMap", "downwardAPI"}, token
        assert flag(args, "cdi-dir") in mounts, f"--cdi-dir is not mounted: {args}"
        assert driver_container(ds)["livenessProbe"]["httpGet"]["path"] == "/livez", \
            "an API outage must not restart the driver"
    return "dra: `dra`, plugin dirs, projected token, NODE_NAME; device plugin mode: none of it"


def test_binding_names_the_daemonsets_account() -> str:
    """The DRA ClusterRoleBinding's subject is the DaemonSet's serviceAccountName, whatever it is."""
    cases = {"default": {}, "named": {"create": True, "name": "rdma-driver"},
             "existing": {"create": False, "name": "node-rdma"}}
    for label, sa in cases.items():
        values = dra_values()
        values["devicePlugin"]["serviceAccount"].update(sa)
        objs = rendered(values)
        ds = driver_daemonsets(objs)[0]
        want = {"kind": "ServiceAccount", "name": ds["spec"]["template"]["spec"]["serviceAccountName"],
                "namespace": chart.NAMESPACE}
        bindings = [o for o in objs if o["kind"] == "ClusterRoleBinding" and security._component(o) == "device-plugin"]
        assert len(bindings) == 1, f"{label}: {len(bindings)} bindings for the driver"
        assert bindings[0]["subjects"] == [want], f"{label}: {bindings[0]['subjects']} != [{want}]"
        if sa.get("name"):
            assert want["name"] == sa["name"], want
    return ", ".join(cases)


def test_rbac_per_version() -> str:
    """Exactly what the driver calls, per Kubernetes version, and the other security rules, with
    and without kube-rbac-proxy."""
    notes = []
    for proxy in (False, True):
        values = dra_values()
        values["metrics"]["rbacProxy"]["enabled"] = proxy
        for version in KUBE_VERSIONS:
            objs = rendered(values, kube_version=version)
            problems = security.check_workloads(objs, values) + security.check_rbac(objs) + \
                security.check_rbac_exact(objs, values, version)
            assert not problems, f"k8s {version}, rbacProxy {proxy}:\n" + "\n".join(problems)
            role = next(o for o in objs if o["kind"] == "ClusterRole" and security._component(o) == "device-plugin")
            driver_rule = [r for r in role["rules"] if "resourceclaims/driver" in r["resources"]]
            assert bool(driver_rule) == (security.kube_minor(version) >= (1, 36)), (version, driver_rule)
        notes.append(f"rbacProxy={proxy}: " + ", ".join(KUBE_VERSIONS))
    # The checker is not vacuous: a rule the driver never uses is reported.
    objs = rendered(kube_version="1.36.0")
    role = next(o for o in objs if o["kind"] == "ClusterRole" and security._component(o) == "device-plugin")
    role["rules"].append({"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["get", "update"]})
    caught = security.check_rbac_exact(objs, dra_values(), "1.36.0")
    assert len(caught) == 2, caught
    objs = rendered(kube_version="1.35.0")
    assert not [r for o in objs if o["kind"] == "ClusterRole" for r in o["rules"]
                if "resourceclaims/driver" in r["resources"]], "1.35 has no resourceclaims/driver"
    return "; ".join(notes)


def test_refuses_dra_before_1_34() -> str:
    try:
        chart.render(dra_values(), kube_version="1.33.0")
    except Exception as e:  # helm-python raises its own error type
        msg = str(e)
        assert "1.34" in msg and "dra.enabled" in msg, msg
        return "refused: " + msg.splitlines()[0][-100:]
    raise AssertionError("dra.enabled rendered for Kubernetes 1.33")


def test_networks_in_dra_mode_have_no_resource_name() -> str:
    """Issue 25: in DRA mode the chart's NetworkAttachmentDefinition kept the device plugin's
    k8s.v1.cni.cncf.io/resourceName annotation. Multus looks a NAD's resourceName up among the
    pod's devices and claims (multus-cni v4.2.3 pkg/k8sclient getKubernetesDelegate,
    pkg/kubeletclient getDRAResources) and would hand kube-rdma-cni a device plugin ID or a CDI
    name as deviceID. In DRA mode: no annotation, no deviceID, the driver's prepared dir (under
    dra.pluginsDir) and the network's claim/request in the CNI config; no pool needed. Device
    plugin mode keeps the annotation and ignores claim/request, and still needs a pool."""
    nets = [{"name": "rdma-dra-net", "namespace": "default", "claim": "rdma", "request": "vf",
             "ipam": {"type": "host-local", "subnet": "192.168.110.0/24"}, "config": {"rdma": "required"}},
            {"name": "any-claim", "pool": "rdma_vfs", "ipam": {"type": "static"}}]
    for plugins_dir, prepared in (("/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins/rdma.kuberdma.io/prepared"),
                                  ("/data/kubelet/plugins/", "/data/kubelet/plugins/rdma.kuberdma.io/prepared")):
        values = dra_values()
        values["networks"] = copy.deepcopy(nets)
        values["dra"]["pluginsDir"] = plugins_dir
        objs = rendered(values)
        nads = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkAttachmentDefinition"}
        assert set(nads) == {"rdma-dra-net", "any-claim"}, sorted(nads)
        for name, nad in nads.items():
            assert "k8s.v1.cni.cncf.io/resourceName" not in nad["metadata"].get("annotations", {}), nad["metadata"]
            conf = json.loads(nad["spec"]["config"])
            assert "deviceID" not in conf and "pciBusID" not in conf, conf
            assert conf["preparedDir"] == prepared, conf
            ds = driver_daemonsets(objs)[0]
            own = f"{flag(driver_container(ds)['args'], 'plugins-dir').rstrip('/')}/{DRIVER}"
            assert conf["preparedDir"].startswith(own + "/"), f"{conf['preparedDir']} is not under the driver's {own}"
        first = json.loads(nads["rdma-dra-net"]["spec"]["config"])
        assert (first["claim"], first["request"], first["rdma"]) == ("rdma", "vf", "required"), first
        assert "claim" not in json.loads(nads["any-claim"]["spec"]["config"])
    values = chart.load_values(chart.CHART_DIR / "values.yaml")
    values["networks"] = copy.deepcopy(nets[1:])
    values["networks"][0]["claim"] = "rdma"
    nad = next(o for o in rendered(values) if o["kind"] == "NetworkAttachmentDefinition")
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == "kuberdma.io/rdma_vfs", nad
    conf = json.loads(nad["spec"]["config"])
    assert not {"claim", "request", "preparedDir"} & set(conf), conf
    values["networks"] = [{"name": "no-pool", "ipam": {"type": "static"}}]
    try:
        chart.render(values)
    except Exception as e:  # helm-python raises its own error type
        assert "no-pool" in str(e) and "has no pool" in str(e), str(e)
    else:
        raise AssertionError("a device plugin mode network without a pool rendered")
    return "DRA: no resourceName, preparedDir under pluginsDir, claim/request; device plugin mode: resourceName"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, fn: Callable[[], Any], timeout: float, proc: subprocess.Popen | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited {proc.returncode} while waiting for {what}:\n"
                                 f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
        last = fn()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


_published: list[dict[str, Any]] = []


def published_devices() -> list[dict[str, Any]]:
    """The devices `kube-rdma-device-plugin dra` publishes on the simulated node when run with the
    chart's command line (cached: the CEL check reuses them)."""
    if not _published:
        run_chart_command_line()
    return _published


def run_chart_command_line() -> str:
    """The chart's DRA container, run by the real binary: its args with every path under a mount
    moved to the same place under a scratch "host" dir, its ConfigMap as the config file, the
    simulated node in place of /sys and /dev, NODE_NAME as the downward API sets it, and a real
    kube-apiserver in place of the in-cluster API, reached with a token of the chart's
    ServiceAccount under the chart's RBAC (with an RdmaNodeState, so roceReady is published)."""
    import monitoring

    # As for the API server it runs (1.34, which serves the policy API): the driver's writes are
    # granted only there (fail closed). Its token here is bound to no pod, so the admission
    # policies, which want the token's node, are left out (device-plugin/tests/dra_policy.rs
    # runs the driver through them).
    objs = rendered(kube_version="1.34.0")
    ds = driver_daemonsets(objs)[0]
    c = driver_container(ds)
    config = next(o for o in objs if o["kind"] == "ConfigMap"
                  and o["metadata"]["name"] == ds["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"])
    binary = chart.native_binary("kube-rdma-device-plugin")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": SIM_NODE}}
    check = lambda iface, result: {"name": "pfc", "interface": iface, "result": result,  # noqa: E731
                                   "expected": "3", "actual": "3"}
    state = {"apiVersion": "kuberdma.io/v1alpha1", "kind": "RdmaNodeState", "metadata": {"name": SIM_NODE},
             "spec": {"nodeName": SIM_NODE},
             "status": {"checks": [check("ens1f0np0", "Pass"), check("ens1f1np1", "Fail")]}}
    # The driver's ServiceAccount, ClusterRole and binding as the chart renders them.
    rbac = [o for o in objs if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            and security._component(o) == "device-plugin"]
    sa = next(o for o in rbac if o["kind"] == "ServiceAccount")
    assert sa["metadata"]["name"] == ds["spec"]["template"]["spec"]["serviceAccountName"], sa
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": sa["metadata"]["namespace"]}}
    seeds = [yaml.safe_dump(node), yaml.safe_dump_all([namespace, *rbac]), chart.CHART_CRDS.read_text(encoding="utf-8"),
             yaml.safe_dump(state)]
    with tempfile.TemporaryDirectory(prefix="kube-rdma-dra-chart-") as tmp, \
            monitoring.ApiServer(chart.api_server_binary(), seeds) as api:
        kubectl = [api.kubectl, f"--kubeconfig={api.kubeconfig}"]
        # The seed's status is not applied to a resource with a status subresource: the agent's
        # own write is a status apply.
        status_file = Path(tmp, "state-status.yaml")
        status_file.write_text(yaml.safe_dump(state), encoding="utf-8")
        subprocess.run([*kubectl, "apply", "--server-side", "--subresource=status", "-f", str(status_file)],
                       check=True, capture_output=True, text=True)
        token = subprocess.run([*kubectl, "create", "token", sa["metadata"]["name"], "-n", sa["metadata"]["namespace"],
                                "--duration=1h"], check=True, capture_output=True, text=True).stdout.strip()
        kc = yaml.safe_load(api.kubeconfig.read_text(encoding="utf-8"))
        kc["users"] = [{"name": u["name"], "user": {"token": token}} for u in kc["users"]]
        driver_kubeconfig = Path(tmp, "driver.kubeconfig")
        driver_kubeconfig.write_text(yaml.safe_dump(kc), encoding="utf-8")
        # The container's filesystem, as far as the driver sees it: every absolute path of its
        # command line lives under `root` (never on this machine's own /var/lib/kubelet).
        root = Path(tmp, "root")
        for m in [*host_mounts(ds, c), "/etc/kube-rdma"]:
            (root / m.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for k, v in config["data"].items():
            (root / "etc/kube-rdma" / k).write_text(v, encoding="utf-8")
        port = free_port()

        def mapped(arg: str) -> str:
            if arg.startswith("--metrics-addr="):
                return f"--metrics-addr=127.0.0.1:{port}"
            name, eq, value = arg.partition("=")
            return f"{name}={root / value.lstrip('/')}" if eq and value.startswith("/") else arg

        args = [mapped(a) for a in c["args"]]
        env = {**os.environ, "KUBECONFIG": str(driver_kubeconfig), "NODE_NAME": SIM_NODE,
               "RUST_LOG": next(e["value"] for e in c["env"] if e["name"] == "RUST_LOG")}
        cmd = [str(binary), *args, "--sim", str(chart.ROOT / "examples" / "nodes" / f"{SIM_NODE}.yaml")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            registry = root / str(flag(c["args"], "plugins-registry-dir")).lstrip("/")
            own = root / f"{flag(c['args'], 'plugins-dir')}/{DRIVER}".lstrip("/")
            wait_for("the registration socket in the kubelet's plugins_registry mount",
                     lambda: (registry / f"{DRIVER}-reg.sock").is_socket(), 20, proc)
            assert (own / "dra.sock").is_socket(), f"no dra.sock in the plugins/{DRIVER} mount"

            def slices() -> list[dict[str, Any]] | None:
                items = [s for s in api.get("/apis/resource.k8s.io/v1/resourceslices")["items"]
                         if s["spec"]["nodeName"] == SIM_NODE and s["spec"]["driver"] == DRIVER]
                devices = [d for s in items for d in s["spec"].get("devices", [])]
                ready = [d for d in devices if "kuberdma.io/roceReady" in d.get("attributes", {})]
                return items if len(devices) == 16 and len(ready) == 16 else None

            items = wait_for("16 devices with roceReady in the API", slices, 30, proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        assert rc == 0, f"the driver exited {rc} on SIGTERM: {proc.stderr.read()[-2000:] if proc.stderr else ''}"
    _published[:] = [d for s in items for d in s["spec"]["devices"]]
    return f"`{' '.join(c['args'][:1])} ...` served the kubelet's mounts and published {len(_published)} devices"


# ---------------------------------------------------------------- CEL (the scheduler's package)


def cel_peer() -> list[str]:
    """`kube cel`, the Go peer built by e2e/build-peers (cached there until its sources change)."""
    assert shutil.which("go"), "the scheduler's CEL check needs Go: e2e/build-peers builds `kube cel` with it"
    res = subprocess.run([str(chart.ROOT / "e2e" / "build-peers")], cwd=chart.ROOT, capture_output=True, text=True,
                         timeout=3600)
    assert res.returncode == 0, f"e2e/build-peers:\n{res.stderr[-3000:]}"
    return [str(PEERS_BIN / "kube"), "cel"]


def run_cel(cases: list[dict[str, Any]], devices: list[dict[str, Any]]) -> dict[str, Any]:
    res = subprocess.run(cel_peer(), input=json.dumps({"cases": cases, "devices": devices}),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"kube cel: {res.stderr}"
    return json.loads(res.stdout)


def values_example_classes() -> list[dict[str, Any]]:
    """The example DeviceClass entries in values.yaml's `dra.deviceClasses` comment."""
    text = (chart.CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    block = text[text.index("\ndra:\n"):]
    lines = block[block.index("E.g.") + len("E.g.\n"):].splitlines()
    yaml_lines = []
    for line in lines:
        if not line.startswith("  #   "):
            break
        yaml_lines.append(line[len("  #   "):])
    found = yaml.safe_load("\n".join(yaml_lines))
    assert isinstance(found, list) and found and all("name" in c for c in found), yaml_lines
    return found


def selector_cases() -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Every selector chain the scheduler would evaluate for our classes and examples: each
    class alone, and each example request as its class's selectors then its own."""
    values = dra_values()
    values["dra"]["deviceClasses"] = values["dra"]["deviceClasses"] + values_example_classes()
    classes = {o["metadata"]["name"]: [s["cel"]["expression"] for s in o["spec"]["selectors"]]
               for o in rendered(values) if o["kind"] == "DeviceClass"}
    cases = [{"name": f"class {n}", "selectors": s} for n, s in classes.items()]
    for file, docs in examples().items():
        for d in docs:
            if d["kind"] != "ResourceClaimTemplate":
                continue
            for r in d["spec"]["spec"]["devices"]["requests"]:
                ex = r["exactly"]
                if ex["deviceClassName"] not in classes:
                    continue
                own = [s["cel"]["expression"] for s in ex.get("selectors", [])]
                cases.append({"name": f"{file} request {r['name']}", "selectors": classes[ex["deviceClassName"]] + own})
    return cases, classes


def device_variants(published: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The published devices, and one of them without each optional attribute in turn and
    without all of them, plus another driver's device (a GPU): what a selector may meet."""
    ours = [{"driver": DRIVER, "device": d} for d in published]
    full = copy.deepcopy(published[0])
    optional = sorted(set().union(*(d["attributes"] for d in published)) - ALWAYS_PUBLISHED)
    variants = []
    for a in optional:
        d = copy.deepcopy(full)
        del d["attributes"][a]
        d["name"] = f"{full['name']}-without-{a.split('/')[1].lower()}"
        variants.append({"driver": DRIVER, "device": d})
    bare = copy.deepcopy(full)
    bare["attributes"] = {k: v for k, v in full["attributes"].items() if k in ALWAYS_PUBLISHED}
    bare["name"] = f"{full['name']}-always-published-only"
    gpu = {"driver": "gpu.example.com", "device": {"name": "gpu-0", "attributes": {
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:3a"}, "gpu.example.com/memory": {"int": 80}}}}
    return ours + variants + [{"driver": DRIVER, "device": bare}, gpu]


def test_selectors_with_the_schedulers_cel() -> str:
    """Issue 25: `linkSpeedMbps >= 100000` (values.yaml's example) is a CEL runtime error on a
    device without that attribute, and a runtime error fails the allocation. Every selector,
    on every device we publish and on each without each optional attribute: compiles (as the API
    server compiles it, cost included), never errors, and matches what its class promises."""
    published = published_devices()
    attrs = set().union(*(d["attributes"] for d in published))
    assert ALWAYS_PUBLISHED <= attrs, ALWAYS_PUBLISHED - attrs
    optional = attrs - ALWAYS_PUBLISHED
    assert {"kuberdma.io/linkSpeedMbps", "kuberdma.io/roceReady", "resource.kubernetes.io/numaNode",
            "kuberdma.io/netdev", "kuberdma.io/portState"} <= optional, optional
    devices = device_variants(published)
    cases, classes = selector_cases()
    out = run_cel(cases, devices)
    assert not out["compileErrors"], out["compileErrors"]
    errors = [r for r in out["results"] if r.get("error")]
    assert not errors, "\n".join(f"{r['case']} on {r['device']}: {r['error']}" for r in errors)
    match = {(r["case"], r["device"]): r["matches"] for r in out["results"]}
    by_name = {d["device"]["name"]: d["device"] for d in devices}

    def attr(d: str, a: str) -> Any:
        v = by_name[d]["attributes"].get(f"kuberdma.io/{a}")
        return None if v is None else next(iter(v.values()))

    for (case, dev), m in match.items():
        ours = dev != "gpu-0"
        healthy = ours and attr(dev, "healthy") is True
        if case == "class rdma.kuberdma.io":
            assert m == healthy, (case, dev, m)
        if case == "class roce-ready.rdma.kuberdma.io":
            assert m == (healthy and attr(dev, "roceReady") is True), (case, dev, m)
        if case == "class rdma-100g.kuberdma.io":
            speed = attr(dev, "linkSpeedMbps") if ours else None
            assert m == (healthy and speed is not None and speed >= 100000), (case, dev, m)
    ready = [d["device"]["name"] for d in devices if match.get(("class roce-ready.rdma.kuberdma.io", d["device"]["name"]))]
    unready = [d for d in published if attr(d["name"], "roceReady") is False]
    assert ready and unready, "the simulated node publishes ready and unready VFs"
    # Not vacuous: the unguarded selector this replaced errors on a device without the attribute.
    old = run_cel([{"name": "old", "selectors": classes["rdma.kuberdma.io"] +
                    ['device.attributes["kuberdma.io"].linkSpeedMbps >= 100000']}], devices)
    assert any("no such key: linkSpeedMbps" in r.get("error", "") for r in old["results"]), old["results"]
    return (f"{len(cases)} selector chain(s) x {len(devices)} device(s) ({len(published)} published, "
            f"{len(optional)} optional attributes left out in turn, a GPU): no error")


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


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("dra: rendered objects (kubernetes-validate --strict, 1.34-1.37)", test_rendered_validate),
    ("dra: examples (kubernetes-validate --strict, 1.34+)", test_examples_validate),
    ("dra: the DaemonSet runs `dra` with its own projected token, plugin dirs and NODE_NAME",
     test_daemonset_runs_dra_with_its_token),
    ("dra: the driver's ClusterRoleBinding names the DaemonSet's ServiceAccount",
     test_binding_names_the_daemonsets_account),
    ("dra: RBAC is exactly what the driver calls, per Kubernetes version", test_rbac_per_version),
    ("dra: refused before Kubernetes 1.34", test_refuses_dra_before_1_34),
    ("dra: NetworkAttachmentDefinitions have no resourceName; the CNI finds the claim's prepared VF",
     test_networks_in_dra_mode_have_no_resource_name),
    ("dra: the chart's command line runs the driver (real binary, real kube-apiserver, simulated node)",
     run_chart_command_line),
    ("dra: every selector, with the scheduler's CEL, on every device we publish", test_selectors_with_the_schedulers_cel),
    ("dra: DeviceClasses select rdma.kuberdma.io and healthy devices", test_classes_select_our_healthy_devices),
    ("dra: examples use rendered classes and the driver's config fields", test_examples_use_known_classes_and_config),
    ("dra: schema refuses a bad DeviceClass name", test_schema_refuses_bad_class_name),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
