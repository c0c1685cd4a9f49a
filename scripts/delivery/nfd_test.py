"""The chart's Node Feature Discovery rule (scripts/test-delivery runs these; also runnable alone:
`python3 scripts/delivery/nfd_test.py`).

- nodeFeatureRule.create: auto renders the NodeFeatureRule only where the cluster serves NFD's
  API, always and never as they say.
- The rule sets exactly the label the device plugin and agent DaemonSets select (the default and
  a changed rdmaNodeLabel), on nodes NFD's own 15b3-only rule already covers and on E810 nodes:
  its matchers name every vendor and E810 PF device id nic's model table knows, and irdma.
- A label NFD may not set is refused at render time, naming the key.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402

NFD_API = "nfd.k8s-sigs.io/v1alpha1/NodeFeatureRule"
# The match operators NFD's v1alpha1 API defines (api/nfd/v1alpha1: MatchOp).
NFD_OPS = {"In", "NotIn", "InRegexp", "Exists", "DoesNotExist", "Gt", "Lt", "GtLt", "IsTrue", "IsFalse"}
NODE_COMPONENTS = ("DaemonSet",)


def rules_of(values: dict[str, Any] | None, *, served: bool) -> list[dict[str, Any]]:
    objs = chart.objects(chart.render(values, api_versions=(NFD_API,) if served else ()))
    return [o for o in objs if o["kind"] == "NodeFeatureRule"]


def with_rule(create: str, **changes: Any) -> dict[str, Any]:
    return chart.merged(chart.default_values(), nodeFeatureRule={"create": create}, **changes)


def node_selectors(values: dict[str, Any] | None) -> dict[str, dict[str, str]]:
    """DaemonSet name -> its pods' nodeSelector."""
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"].get("nodeSelector") or {}
            for o in chart.objects(chart.render(values)) if o["kind"] in NODE_COMPONENTS}


def nic_models() -> dict[str, tuple[str, str]]:
    """nic's simulated models (nic/src: `fn vendor` and `fn pf_device` of the Model table):
    model -> (PCI vendor, PF device id), lower-case hex as NFD reads sysfs."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in (chart.ROOT / "nic" / "src").rglob("*.rs"))

    def table(fn: str) -> dict[str, str]:
        m = re.search(rf"pub fn {fn}\(self\) -> u16 \{{(.*?)\n    \}}", text, re.S)
        assert m, f"no `fn {fn}` in nic/src"
        out = {}
        for arm in re.finditer(r"((?:Model::\w+\s*\|?\s*)+)=>\s*0x([0-9a-fA-F]{4})", m.group(1)):
            for model in re.findall(r"Model::(\w+)", arm.group(1)):
                out[model] = arm.group(2).lower()
        return out

    vendors, devices = table("vendor"), table("pf_device")
    assert vendors and set(vendors) == set(devices), (vendors, devices)
    return {m: (vendors[m], devices[m]) for m in vendors}


def expressions(rule: dict[str, Any], feature: str) -> dict[str, Any]:
    terms = [t for t in rule["matchFeatures"] if t["feature"] == feature]
    assert len(terms) == 1, f"rule {rule['name']!r}: {len(terms)} {feature} terms"
    return terms[0]["matchExpressions"]


def matches(rule: dict[str, Any], vendor: str, device: str, modules: set[str]) -> bool:
    """Whether `rule` holds on a node with that PCI function (an Ethernet one) and modules
    loaded, as NFD evaluates In / Exists (the only operators the rule uses)."""
    attrs = {"vendor": vendor, "device": device, "class": "0200"}
    for term in rule["matchFeatures"]:
        for key, exp in term["matchExpressions"].items():
            assert exp["op"] in NFD_OPS, f"{rule['name']!r}: {key} has op {exp['op']}, not NFD's"
            if term["feature"] == "pci.device":
                assert exp["op"] == "In", exp
                if attrs[key] not in exp["value"]:
                    return False
            elif term["feature"] == "kernel.loadedmodule":
                assert exp["op"] == "Exists", exp
                if key not in modules:
                    return False
            else:
                raise AssertionError(f"{rule['name']!r}: feature {term['feature']} not modelled here")
    return True


def test_rendered_when_nfd_is_served_or_asked() -> str:
    assert rules_of(None, served=False) == [], "auto rendered a NodeFeatureRule without NFD's API"
    assert len(rules_of(None, served=True)) == 1, "auto rendered no NodeFeatureRule although NFD's API is served"
    assert len(rules_of(with_rule("always"), served=False)) == 1, "always rendered no NodeFeatureRule"
    assert rules_of(with_rule("never"), served=True) == [], "never rendered a NodeFeatureRule"
    err = chart.render_error(with_rule("sometimes"))
    assert "create" in err, err
    return "auto: only with nfd.k8s-sigs.io/v1alpha1; always; never"


def test_rule_sets_the_label_the_daemonsets_select() -> str:
    for values in (None, chart.merged(chart.default_values(),
                                      rdmaNodeLabel={"key": "kuberdma.io/rdma-node", "value": "yes"})):
        rule, = rules_of(values, served=True)
        selectors = node_selectors(values)
        assert len(selectors) == 2, f"expected the device plugin and agent DaemonSets: {list(selectors)}"
        for r in rule["spec"]["rules"]:
            for ds, sel in selectors.items():
                assert sel.items() >= r["labels"].items(), f"rule {r['name']!r} sets {r['labels']}, {ds} selects {sel}"
    default = chart.default_values()["rdmaNodeLabel"]
    return f"{default['key']}={default['value']} and a changed rdmaNodeLabel"


def test_rule_matches_every_supported_adapter() -> str:
    """mlx5 nodes (what NFD's own rule covers) and E810 nodes with irdma; not an E810 without
    irdma, nor another Intel NIC with it (X722, 37d2)."""
    spec = rules_of(None, served=True)[0]["spec"]
    assert spec["rules"], "a NodeFeatureRule without rules"
    models = nic_models()
    for model, (vendor, device) in models.items():
        modules = {"irdma", "ice"} if vendor == "8086" else {"mlx5_core", "mlx5_ib"}
        assert any(matches(r, vendor, device, modules) for r in spec["rules"]), \
            f"{model} ({vendor}:{device}) with {sorted(modules)} is labelled by no rule"
        if vendor == "8086":
            assert not any(matches(r, vendor, device, {"ice"}) for r in spec["rules"]), \
                f"{model} without irdma is labelled: it has no RDMA device"
    assert not any(matches(r, "8086", "37d2", {"irdma", "i40e"}) for r in spec["rules"]), "X722 labelled"
    assert not any(matches(r, "14e4", "16d7", {"bnxt_re"}) for r in spec["rules"]), "Broadcom labelled"
    return ", ".join(f"{m} {v}:{d}" for m, (v, d) in sorted(models.items()))


def test_label_nfd_cannot_set_is_refused() -> str:
    bad = chart.merged(chart.default_values(), rdmaNodeLabel={"key": "node-role.kubernetes.io/rdma", "value": "true"})
    err = chart.render_error(bad)
    assert "node-role.kubernetes.io/rdma" in err and "nodeFeatureRule.create=never" in err, err
    # never: the user labels nodes another way, and any key is theirs to choose.
    assert node_selectors(chart.merged(bad, nodeFeatureRule={"create": "never"}))
    err = chart.render_error(with_rule("always", rdmaNodeLabel={"key": "", "value": ""}))
    assert "rdmaNodeLabel.key" in err, err
    assert rules_of(chart.merged(chart.default_values(), rdmaNodeLabel={"key": "", "value": ""}), served=True) == []
    return "a kubernetes.io key and always without a key refused"


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("nfd: NodeFeatureRule rendered where NFD's API is served (auto), always, never",
     test_rendered_when_nfd_is_served_or_asked),
    ("nfd: the rule sets the label the node DaemonSets select", test_rule_sets_the_label_the_daemonsets_select),
    ("nfd: the rule labels mlx5 nodes and E810 nodes with irdma (nic's model ids)",
     test_rule_matches_every_supported_adapter),
    ("nfd: a label NFD may not set is refused", test_label_nfd_cannot_set_is_refused),
]


if __name__ == "__main__":
    sys.exit(chart.run_checks(CHECKS))
