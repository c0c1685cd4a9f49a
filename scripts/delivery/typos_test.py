"""A typo in any values object fails the install (scripts/test-delivery runs these as part of the
chart checks, see render_test.py; also runnable alone: `python3 scripts/delivery/typos_test.py`).

- Every object schema of values.schema.json that names its keys refuses any other key.
- Walking every object of values.yaml and each ci/*.yaml, a key no schema knows is refused with
  an error naming that object, and every closed object of the schema is reached by some file.
- The typos a user makes (`hostnetwork`, `allowEnforc`, `priorites`) fail, naming the key.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402


def schema_json() -> dict[str, Any]:
    return json.loads(chart.VALUES_SCHEMA.read_text(encoding="utf-8"))


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def closed_schema_nodes(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(JSON pointer, node) of every object schema that names its keys, anywhere in the schema."""
    out = []

    def walk(node: Any, ptr: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("type") in ("object", ["object", "null"], None):
                out.append((ptr, node))
            for k, v in node.items():
                if k in ("if", "not"):
                    continue  # conditions, not the shape of a values object
                if k == "properties":
                    for name, sub in v.items():
                        walk(sub, f"{ptr}/properties/{name}")
                else:
                    walk(v, f"{ptr}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{ptr}/{i}")
    walk(schema, "")
    return out


def value_objects(schema: dict[str, Any], value: Any, node: dict[str, Any], path: list[Any],
                  out: list[tuple[list[Any], int]]) -> None:
    """Every (path, id of its closed schema node) of an object in `value` that the schema closes."""
    node = resolve(schema, node)
    if isinstance(value, dict):
        if "if" in node and "then" in node:  # selectors: object or list
            value_objects(schema, value, node["then"], path, out)
            return
        if node.get("additionalProperties") is False:
            out.append((path, id(node)))
        for k, v in value.items():
            sub = node.get("properties", {}).get(k)
            if sub is not None:
                value_objects(schema, v, sub, path + [k], out)
    elif isinstance(value, list):
        item = node.get("items") or node.get("else", {}).get("items")
        if item is not None:
            for i, v in enumerate(value):
                value_objects(schema, v, item, path + [i], out)


def with_key(values: dict[str, Any], path: list[Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(values)
    target: Any = out
    for p in path:
        target = target[p]
    target[key] = True
    return out


def test_schema_objects_are_closed() -> str:
    """Every object schema with named keys refuses others (profiles' spec: the CRD's own)."""
    schema = schema_json()
    nodes = closed_schema_nodes(schema)
    open_ = [ptr for ptr, n in nodes if n.get("additionalProperties") is not False]
    assert not open_, f"object schemas that accept unknown keys: {open_}"
    return f"{len(nodes)} object schemas, all closed"


def test_typo_in_every_object_is_rejected() -> str:
    """A misspelt key in ANY values object fails `helm install`. Walks every object of the
    default values and each ci/*.yaml, adds a key no schema knows, and expects the schema error
    to name that object; also checks that every closed object of the schema was reached."""
    import helm_python as helm

    schema = schema_json()
    closed_ids = {id(n): ptr for ptr, n in closed_schema_nodes(schema)}
    seen: set[int] = set()
    tried = 0
    sources = [("values.yaml", chart.default_values())] + [(f, chart.ci_values(f)) for f in chart.ci_files()]
    with helm.Chart.load(chart.CHART_DIR) as c:
        for label, values in sources:
            merged_values = c.merge_values(values)
            objs: list[tuple[list[Any], int]] = []
            value_objects(schema, merged_values, schema, [], objs)
            for path, node_id in objs:
                seen.add(node_id)
                bad = with_key(merged_values, path, "typoKey")
                try:
                    c.validate_schema(bad)
                except helm.HelmValuesError as e:
                    where = "/" + "/".join(map(str, path))
                    assert "typoKey" in str(e) and (where == "/" or where in str(e)), \
                        f"{label}: typo at {where} rejected without naming it:\n{e}"
                else:
                    raise AssertionError(f"{label}: a typo at /{'/'.join(map(str, path))} was accepted")
                tried += 1
    unreached = sorted(ptr for i, ptr in closed_ids.items() if i not in seen)
    assert not unreached, f"closed objects no values file exercises (add them to ci/full-values.yaml): {unreached}"
    return f"{tried} objects in {len(sources)} values files, {len(closed_ids)} schema objects all reached"


def test_named_typos_rejected() -> str:
    """The typos a user makes: `hostnetwork` and `allowEnforc` fail the install, naming the key."""
    d = chart.default_values()
    cases = {
        "devicePlugin.hostnetwork": chart.merged(d, devicePlugin={**d["devicePlugin"], "hostnetwork": False}),
        "agent.allowEnforc": chart.merged(d, agent={**d["agent"], "allowEnforc": True}),
        "metrics.serviceMonitor.enable": chart.merged(d, metrics={**d["metrics"], "serviceMonitor": {"enable": True}}),
        "profiles[0].spec.pfc.priorites": chart.merged(
            d, profiles=[{"name": "p", "spec": {"pfc": {"priorites": [3]}}}]),
    }
    for key, values in cases.items():
        msg = chart.render_error(values)
        assert key.rsplit(".", 1)[1] in msg, f"{key}: error does not name it: {msg}"
    return ", ".join(cases)


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("chart: every object schema is closed", test_schema_objects_are_closed),
    ("chart: a typo in any values object is rejected", test_typo_in_every_object_is_rejected),
    ("chart: hostnetwork / allowEnforc / priorites typos are rejected", test_named_typos_rejected),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
