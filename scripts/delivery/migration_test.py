"""Migration from sriov-network-device-plugin and k8s-rdma-shared-dev-plugin, with the real device
plugin (scripts/test-delivery runs these; also runnable alone: `python3 scripts/delivery/migration_test.py`).

- ci/migration-sndp-values.yaml: each NAD's resourceName is what `kube-rdma-device-plugin
  discover` advertises for that rawConfig on a simulated node, and what NOTES tells pods to request.
- ci/migration-rsdp-values.yaml: NOTES names the resources discover advertises.
- A network on a pool the rawConfig lacks is refused, naming the pools it has.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402


def example_node(tmp: str, node: str, netns: str | None) -> Path:
    """examples/nodes/NODE copied into `tmp`, in RDMA netns mode `netns` when given: pools that
    share HCAs need `shared`, VF pools `exclusive`, or discover fails its rdma-netns check (exit 1)."""
    text = (chart.ROOT / "examples" / "nodes" / node).read_text(encoding="utf-8")
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
        res = subprocess.run([str(chart.native_binary("kube-rdma-device-plugin")), "discover", "--config", str(cfg),
                              "--allow-empty-pools",
                              "--sim", str(example_node(tmp, node, netns)), "--output", "json"],
                             capture_output=True, text=True)
    assert res.returncode == 0, res.stderr + res.stdout[-2000:]
    return {p["resource"]: len(p["devices"]) for p in json.loads(res.stdout)["pools"]}


def test_migration_sndp() -> str:
    """ci/migration-sndp-values.yaml: each NAD's resourceName is exactly what the device plugin
    advertises for that sriov-network-device-plugin file (its own prefix, else intel.com)."""
    values = chart.ci_values("migration-sndp-values.yaml")
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
    values = chart.ci_values("migration-rsdp-values.yaml")
    rendered = chart.render(values)
    config = next(o for o in chart.objects(rendered) if o["kind"] == "ConfigMap")["data"]["config.yaml"]
    advertised = discover(config, "cx6dx-dual.yaml", "shared")
    assert list(advertised) == ["rdma/hca_shared_devices_a"], advertised
    notes = rendered["kube-rdma/templates/NOTES.txt"]
    assert "rdma/hca_shared_devices_a" in notes and "kuberdma.io/" not in notes.split("Check what")[0], notes
    return f"NOTES and discover agree: {advertised}"


def test_network_on_unknown_raw_pool() -> str:
    values = chart.ci_values("migration-sndp-values.yaml")
    values["networks"][0]["pool"] = "cx7_vf"
    msg = chart.render_error(values)
    assert "cx7_vf" in msg and "rawConfig" in msg and "cx7_rdma_vf" in msg, msg
    return msg.split("error calling include: ")[-1][:120]


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("migration: sriov-network-device-plugin rawConfig NADs name what discover advertises", test_migration_sndp),
    ("migration: k8s-rdma-shared-dev-plugin rawConfig resources in NOTES match discover", test_migration_rsdp),
    ("migration: a network on a pool rawConfig lacks is refused with the pools named",
     test_network_on_unknown_raw_pool),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
