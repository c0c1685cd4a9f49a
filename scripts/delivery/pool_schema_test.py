"""The pool config schema against the parser it describes (scripts/test-delivery runs these; also
runnable alone: `python3 scripts/delivery/pool_schema_test.py`).

- device-plugin/config-schema.json (which values_schema.py builds the chart's `pools` from) is what
  `kube-rdma-device-plugin config-schema` prints.
- The device plugin (`discover --config`, its real parser) and that schema (python jsonschema)
  accept and refuse the same configs: valid ones of every key, and one invalid config per rule.
  What JSON Schema cannot say is listed in ONLY_THE_PARSER: the parser must refuse those, and the
  schema is shown to let them through, so the list stays exactly the gap.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402
import values_schema  # noqa: E402

SIM_NODE = chart.ROOT / "examples" / "nodes" / "mixed.yaml"


def pools(*pool: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"pools": list(pool), **top}


def pool(name: str = "a", selectors: Any = None, **keys: Any) -> dict[str, Any]:
    return {"name": name, "selectors": {} if selectors is None else selectors, **keys}


def sel(**keys: Any) -> dict[str, Any]:
    return pool(selectors=keys)


VALID: dict[str, dict[str, Any]] = {
    "the smallest pool (`{}` selects every device)": pools(pool()),
    "every pool key": pools(pool("rdma_a.1", resourcePrefix="example.com", mode="vf", policy="spread",
                                 gpuAffinity=True, excludeTopology=False), resourcePrefix="kuberdma.io"),
    "a shared pool with rdmaHcaMax": pools(pool("hca", mode="shared", rdmaHcaMax=1000)),
    "every selector key": pools(sel(
        vendors=["15b3", "0x8086", "0X15B3", "15B3"], devices=["101e"], deviceIDs=["101d"],
        drivers=["mlx5_core"], pciAddresses=["0000:3d:00.2", "3d:1f.7", "00000000:3d:00.2"],
        pfNames=["ens1f0np0", "ens1f0#0-3,6", "e#1 - 2, 4", "e#+3"],
        rootDevices=["0000:3d:00.0", "0000:3d:00.0#0-7", "3d:00.0#1"],
        linkTypes=["ether", "Ethernet", "ETH", "infiniband", "IB"], isRdma=False, ifNames=["ens2f0"],
        linkSpeeds=[0, 100000], numaNodes=[0, 4294967295])),
    "empty lists": pools(sel(vendors=[], pfNames=[], linkSpeeds=[])),
    "a list of selectors": pools(pool(selectors=[{"vendors": ["15b3"]}, {}])),
    "null for what may be left out": pools(pool(mode=None, policy=None, rdmaHcaMax=None, gpuAffinity=None,
                                                resourcePrefix=None, selectors={"vendors": None, "isRdma": None}),
                                           resourcePrefix=None),
    "a 63-character name and prefix label": pools(pool("a" * 63, resourcePrefix="b" * 63 + ".io")),
    # The API server checks a prefix's length as a whole (IsDNS1123Subdomain), not per label.
    "a prefix label of 64": pools(pool(resourcePrefix="b" * 64 + ".io")),
    "a prefix of 253": pools(pool(resourcePrefix=".".join(["b" * 63] * 3 + ["b" * 61]))),
    "two pools": pools(pool("a"), pool("b")),
}

INVALID: dict[str, dict[str, Any]] = {
    "no pool": pools(),
    "pools null": {"pools": None},
    "an unknown top-level key": pools(pool(), configList=[]),
    "a pool that is no mapping": {"pools": ["a"]},
    "no name": pools({"selectors": {}}),
    "name null": pools(pool(None)),
    "name with a slash": pools(pool("rdma/vf")),
    "name starting with '-'": pools(pool("-a")),
    "name ending with '.'": pools(pool("a.")),
    "name of 64": pools(pool("a" * 64)),
    "name as a number": pools(pool(7)),
    "prefix with upper case": pools(pool(resourcePrefix="Kuberdma.io")),
    "prefix with an empty label": pools(pool(resourcePrefix="a..io")),
    "prefix of 254": pools(pool(resourcePrefix=".".join(["b" * 63] * 3 + ["b" * 62]))),
    "prefix label starting with '-'": pools(pool(), resourcePrefix="-a.io"),
    "unknown mode": pools(pool(mode="exclusive")),
    "mode in upper case": pools(pool(mode="VF")),
    "unknown policy": pools(pool(policy="random")),
    "shared without rdmaHcaMax": pools(pool(mode="shared")),
    "shared with rdmaHcaMax null": pools(pool(mode="shared", rdmaHcaMax=None)),
    "rdmaHcaMax on a vf pool": pools(pool(rdmaHcaMax=4)),
    "rdmaHcaMax 0": pools(pool(mode="shared", rdmaHcaMax=0)),
    "rdmaHcaMax 1001": pools(pool(mode="shared", rdmaHcaMax=1001)),
    "rdmaHcaMax as text": pools(pool(mode="shared", rdmaHcaMax="4")),
    "gpuAffinity as text": pools(pool(gpuAffinity="true")),
    "an unknown pool key": pools(pool(numa=0)),
    "no selectors": pools({"name": "a"}),
    "selectors null": pools({"name": "a", "selectors": None}),
    "an empty selector list": pools(pool(selectors=[])),
    "a selector list with a number": pools(pool(selectors=[1])),
    "selectors as text": pools(pool(selectors="all")),
    "a misspelt selector key": pools(sel(vendor=["15b3"])),
    "a selector key in another case": pools(sel(IsRdma=True)),
    "vendor as a YAML number": pools(sel(vendors=[8086])),
    "vendor of 5 digits": pools(sel(vendors=["15b33"])),
    "vendor of 3 digits after 0x": pools(sel(vendors=["0x15b"])),
    "vendor not hex": pools(sel(vendors=["15g3"])),
    "vendors as text": pools(sel(vendors="15b3")),
    "an empty driver": pools(sel(drivers=[""])),
    "a driver as a number": pools(sel(drivers=[1])),
    "device number above 1f": pools(sel(pciAddresses=["0000:3d:20.0"])),
    "function above 7": pools(sel(pciAddresses=["0000:3d:00.8"])),
    "domain of 3 digits": pools(sel(pciAddresses=["000:3d:00.0"])),
    "PCI address with a range": pools(sel(pciAddresses=["0000:3d:00.0#1"])),
    "PCI address without function": pools(sel(rootDevices=["0000:3d:00"])),
    "root device with a bad range": pools(sel(rootDevices=["0000:3d:00.0#x"])),
    "pfNames range not numbers": pools(sel(pfNames=["ens1f0#a-b"])),
    "pfNames without a name": pools(sel(pfNames=["#1"])),
    "pfNames with an empty range": pools(sel(pfNames=["ens1f0#"])),
    "pfNames range without its end": pools(sel(pfNames=["ens1f0#1-"])),
    "pfNames range of three": pools(sel(pfNames=["ens1f0#1-2-3"])),
    "pfNames with two '#'": pools(sel(pfNames=["ens1f0#1#2"])),
    "pfNames with a slash": pools(sel(pfNames=["a/b"])),
    "pfNames with a space": pools(sel(pfNames=["a b"])),
    "pfNames of 16 characters": pools(sel(pfNames=["abcdefghijklmnop"])),
    "an unknown link type": pools(sel(linkTypes=["token-ring"])),
    "a link type prefix": pools(sel(linkTypes=["ethe"])),
    "isRdma as text": pools(sel(isRdma="yes")),
    "an empty ifName": pools(sel(ifNames=[""])),
    "link speed as text": pools(sel(linkSpeeds=["100G"])),
    "negative NUMA node": pools(sel(numaNodes=[-1])),
    "a fractional link speed": pools(sel(linkSpeeds=[1.5])),
    "a NUMA node past u32": pools(sel(numaNodes=[4294967296])),
}

# What the parser refuses and JSON Schema cannot express.
ONLY_THE_PARSER: dict[str, dict[str, Any]] = {
    "two pools of one name (uniqueness of derived names)": pools(pool("a"), pool("a")),
    "two pools deriving one variable (rail.0, rail_0)": pools(pool("rail.0"), pool("rail_0")),
    "a VF range that runs backwards": pools(sel(pfNames=["ens1f0#3-1"])),
    "a VF index past u32": pools(sel(rootDevices=["0000:3d:00.0#4294967296"])),
    # JSON Schema counts 1.0 as an integer; the parser wants a whole number written as one.
    "a link speed written 1.0": pools(sel(linkSpeeds=[1.0])),
}


def parser_accepts(config: dict[str, Any]) -> bool:
    """The device plugin's own verdict: `discover --config` exits 2 naming the file when the config
    is refused; 0 or 1 (the node checks) when it was read."""
    with tempfile.TemporaryDirectory(prefix="kube-rdma-pool-schema-") as tmp:
        path = Path(tmp, "config.json")
        path.write_text(json.dumps(config), encoding="utf-8")
        res = subprocess.run([str(chart.native_binary("kube-rdma-device-plugin")), "discover", "--config", str(path),
                              "--sim", str(SIM_NODE), "--output", "json"], capture_output=True, text=True)
    if res.returncode in (0, 1):
        return True
    assert res.returncode == 2 and str(path) in res.stderr, \
        f"discover failed for another reason than the config (exit {res.returncode}): {res.stderr[-2000:]}"
    return False


def schema_accepts(config: dict[str, Any]) -> bool:
    import jsonschema

    schema = values_schema.config_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema).is_valid(config)


def test_committed_schema_is_what_the_binary_prints() -> str:
    res = subprocess.run([str(chart.native_binary("kube-rdma-device-plugin")), "config-schema"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    committed = values_schema.CONFIG_SCHEMA.read_text(encoding="utf-8")
    assert res.stdout == committed, (
        f"{values_schema.CONFIG_SCHEMA.relative_to(chart.ROOT)} is stale: run `cargo run -p kube-rdma-device-plugin "
        "-- config-schema > device-plugin/config-schema.json`, then scripts/render-manifests")
    return f"{len(committed)} bytes"


def test_parser_and_schema_agree() -> str:
    wrong = []
    for expect, cases in ((True, VALID), (False, INVALID)):
        for label, config in cases.items():
            by_parser, by_schema = parser_accepts(config), schema_accepts(config)
            if by_parser != expect or by_schema != expect:
                wrong.append(f"{label}: expected {'accepted' if expect else 'refused'}, parser "
                             f"{'accepts' if by_parser else 'refuses'}, schema {'accepts' if by_schema else 'refuses'}")
    for label, config in ONLY_THE_PARSER.items():
        if parser_accepts(config) or not schema_accepts(config):
            wrong.append(f"{label}: expected the parser alone to refuse it (ONLY_THE_PARSER is the gap)")
    assert not wrong, "\n".join(wrong)
    return f"{len(VALID)} valid, {len(INVALID)} invalid configs judged alike; {len(ONLY_THE_PARSER)} only by the parser"


def test_chart_pools_are_the_config_schema() -> str:
    """values.schema.json's pool and selector are the config schema's (the chart adds only that a
    selector names at least one key)."""
    values = json.loads(chart.VALUES_SCHEMA.read_text(encoding="utf-8"))
    config = values_schema.config_schema()
    for name, want in config["definitions"].items():
        got = dict(values["definitions"][name])
        if name == "Selector":
            assert got.pop("minProperties") == 1, got
        assert got == want, f"values.schema.json definitions.{name} differs from the config schema's"
    assert values["properties"]["pools"]["items"] == {"$ref": "#/definitions/Pool"}
    assert values["properties"]["resourcePrefix"] == config["properties"]["resourcePrefix"]
    return ", ".join(config["definitions"])


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("pool schema: device-plugin/config-schema.json is what `config-schema` prints",
     test_committed_schema_is_what_the_binary_prints),
    ("pool schema: the device plugin's parser and the schema accept and refuse the same configs",
     test_parser_and_schema_agree),
    ("pool schema: the chart's pools and resourcePrefix are the config schema's",
     test_chart_pools_are_the_config_schema),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
