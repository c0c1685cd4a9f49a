"""Build charts/kube-rdma/values.schema.json (scripts/render-manifests writes it, --check compares).

Written as code so that every object with named keys is closed (`additionalProperties: false`:
a misspelt key is refused by `helm install` with its path) without repeating that in 600 lines
of JSON, so that `profiles[].spec` is the RoceProfile CRD's own schema, kept in step with
charts/kube-rdma/crds/crds.yaml, and so that `pools[]` and `resourcePrefix` are the device plugin's
own config schema (device-plugin/config-schema.json, printed by `kube-rdma-device-plugin
config-schema` from the parser's types; a cargo test fails when it is stale). Free-form maps (labels, annotations, nodeSelector, quantities)
stay open by nature: their keys are data, not options.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import chart

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def closed(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """An object schema that refuses keys it does not name."""
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def array_of(item: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": item, **extra}


def structural(schema: Any) -> Any:
    """A CRD openAPIV3Schema as JSON Schema: `nullable` becomes a null alternative, and objects
    with properties are closed (the API server would prune unknown fields silently)."""
    if isinstance(schema, list):
        return [structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k.startswith("x-kubernetes") or k in ("nullable", "default"):
            continue
        if k == "properties":
            out[k] = {name: structural(sub) for name, sub in v.items()}
        else:
            out[k] = structural(v)
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    elif out.get("type") in ("object", ["object", "null"]) and "properties" in out \
            and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


CONFIG_SCHEMA = Path(__file__).resolve().parents[2] / "device-plugin" / "config-schema.json"


def config_schema() -> dict[str, Any]:
    """The device plugin's schema of its config file (our format, `pools:`)."""
    return json.loads(CONFIG_SCHEMA.read_text(encoding="utf-8"))


def pool_definitions() -> dict[str, Any]:
    """The config schema's definitions (Pool, Selector), with one rule of the chart's own on top:
    each selector in values names at least one key. The device plugin reads `selectors: {}` as
    every device of the node; from the chart that takes a rawConfig, so a pool whose keys were
    all deleted while editing does not silently widen to every VF."""
    defs = copy.deepcopy(config_schema()["definitions"])
    defs["Selector"]["minProperties"] = 1
    return defs


def roce_profile_spec() -> dict[str, Any]:
    for crd in chart.crd_documents():
        if crd["spec"]["names"]["kind"] == "RoceProfile":
            version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
            return structural(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    raise SystemExit("charts/kube-rdma/crds/crds.yaml has no RoceProfile CRD")


def definitions() -> dict[str, Any]:
    return {
        **pool_definitions(),
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "logLevel": {"type": "string", "enum": ["error", "warn", "info", "debug", "trace"]},
        "absPath": {"type": "string", "pattern": "^/"},
        "stringMap": {"type": "object", "additionalProperties": {"type": "string"}},
        "quantityMap": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        # Kubernetes objects passed through to the pod spec unchanged; the API server checks them.
        "k8sObject": {"type": "object"},
        "k8sObjects": array_of({"type": "object"}),
        "resources": closed({
            "requests": {"type": "object", "required": ["cpu", "memory"],
                         "additionalProperties": {"type": ["string", "number"]}},
            "limits": ref("quantityMap"),
        }, ["requests"]),
        "image": closed({
            "repository": {"type": "string", "minLength": 1},
            "tag": {"type": "string"},
            "digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
            "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
        }, ["repository"]),
        "serviceAccount": closed({
            "create": {"type": "boolean"},
            "name": {"type": "string", "pattern": "^(" + DNS_SUBDOMAIN[1:-1] + ")?$", "maxLength": 253},
            "annotations": ref("stringMap"),
        }),
        "probe": ref("k8sObject"),
        "metricsPort": closed({"port": ref("port")}, ["port"]),
        "daemonSetUpdateStrategy": closed({
            "type": {"type": "string", "enum": ["RollingUpdate", "OnDelete"]},
            "rollingUpdate": closed({
                "maxUnavailable": {"type": ["integer", "string"]},
                "maxSurge": {"type": ["integer", "string"]},
            }),
        }),
        "roceProfileSpec": roce_profile_spec(),
    }


def component(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A workload's keys: its own plus scheduling, pod metadata, ServiceAccount and extras."""
    common = {
        "enabled": {"type": "boolean"},
        "logLevel": ref("logLevel"),
        "serviceAccount": ref("serviceAccount"),
        "resources": ref("resources"),
        "nodeSelector": ref("stringMap"),
        "affinity": ref("k8sObject"),
        "tolerations": ref("k8sObjects"),
        "priorityClassName": {"type": "string"},
        "podAnnotations": ref("stringMap"),
        "podLabels": ref("stringMap"),
        "extraArgs": array_of({"type": "string", "pattern": "^-"}),
        "extraEnv": ref("k8sObjects"),
        "extraVolumes": ref("k8sObjects"),
        "extraVolumeMounts": ref("k8sObjects"),
    }
    return closed({**common, **props}, ["resources", *required])


def metrics() -> dict[str, Any]:
    """`metrics`: its Services, ServiceMonitor or PodMonitor, PrometheusRule, Grafana dashboard, kube-rbac-proxy."""
    monitor = closed({
        "enabled": {"type": "boolean"},
        "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
        "labels": ref("stringMap"),
    })
    return closed({
        "service": closed({"enabled": {"type": "boolean"}}),
        # The scrape token's Secret (behind kube-rbac-proxy); a ServiceMonitor only.
        "serviceMonitor": {**monitor, "properties": {**monitor["properties"], "tokenSecret": {"type": "string"}}},
        "podMonitor": monitor,
        "prometheusRule": closed({
            "enabled": {"type": "boolean"},
            "labels": ref("stringMap"),
            "for": {"type": "string", "pattern": "^[0-9]+(s|m|h)$"},
            "pauseStormFramesPerSecond": {"type": "number", "exclusiveMinimum": 0},
            "staleAfterSeconds": {"type": "integer", "minimum": 1},
            "runbookUrl": {"type": "string", "minLength": 1},
        }),
        "grafanaDashboard": closed({
            "enabled": {"type": "boolean"},
            "labels": ref("stringMap"),
            "annotations": ref("stringMap"),
        }),
        "rbacProxy": closed({
            "enabled": {"type": "boolean"},
            "image": ref("image"),
            "upstreamPorts": closed({
                "devicePlugin": ref("port"), "agent": ref("port"), "controller": ref("port"),
            }, ["devicePlugin", "agent", "controller"]),
            "resources": ref("resources"),
            "tls": closed({
                "secretName": {"type": "string"},
                "serverName": {"type": "string"},
                "validityDays": {"type": "integer", "minimum": 1},
            }),
        }),
    })


def schema() -> dict[str, Any]:
    props = {
        "image": ref("image"),
        "imagePullSecrets": ref("k8sObjects"),
        "nameOverride": {"type": "string"},
        "fullnameOverride": {"type": "string"},
        "global": {"type": "object"},
        "logFormat": {"type": "string", "enum": ["text", "json"]},
        # The config file's own: the chart writes it there (templates/_helpers.tpl).
        "resourcePrefix": config_schema()["properties"]["resourcePrefix"],
        "rdmaNodeLabel": closed({
            "key": {"type": "string", "maxLength": 317},
            "value": {"type": "string", "maxLength": 63},
        }, ["key", "value"]),
        "nodeFeatureRule": closed({"create": {"enum": ["auto", "always", "never"]}}, ["create"]),
        # The config's `pools` less its minItems: with rawConfig, pools stay empty.
        "pools": array_of(ref("Pool")),
        "rawConfig": {"type": "string"},
        "simulatedNode": closed({
            # An absolute path (a hostPath), or empty.
            "path": {"type": "string", "pattern": "^(/[^\\0]*)?$", "maxLength": 4096},
        }),
        "profiles": array_of(closed({
            "name": {"type": "string", "pattern": DNS_SUBDOMAIN, "maxLength": 253},
            "labels": ref("stringMap"),
            "spec": ref("roceProfileSpec"),
        }, ["name", "spec"])),
        "networks": array_of(closed({
            "name": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
            "namespace": {"type": "string", "pattern": DNS_LABEL},
            # Device plugin mode (required there; the chart says so): the resourceName annotation.
            "pool": {"type": "string", "minLength": 1},
            # DRA mode: the pod's name for the claim (or the ResourceClaim's name) and its request
            # whose prepared VF the CNI attaches; any of the pod's when left out.
            "claim": {"type": "string", "minLength": 1},
            "request": {"type": "string", "minLength": 1},
            # CNI configuration is checked by kube-rdma-cni itself (and by scripts/test-delivery).
            "ipam": ref("k8sObject"),
            "config": ref("k8sObject"),
        }, ["name"])),
        "devicePlugin": component({
            "rescanInterval": {"type": "integer", "minimum": 1},
            "hostNetwork": {"type": "boolean"},
            "kubeletDir": ref("absPath"),
            "podResourcesDir": ref("absPath"),
            "cdiDir": ref("absPath"),
            "devinfoDir": ref("absPath"),
            "metrics": ref("metricsPort"),
            "updateStrategy": ref("daemonSetUpdateStrategy"),
        }, ["kubeletDir", "podResourcesDir", "cdiDir", "devinfoDir", "metrics"]),
        "cni": closed({"install": {"type": "boolean"}, "binDir": ref("absPath")}),
        "tests": closed({
            "enabled": {"type": "boolean"},
            "pool": {"type": "string"},
            "nodeSelector": ref("stringMap"),
            "tolerations": ref("k8sObjects"),
        }),
        "dra": closed({
            "enabled": {"type": "boolean"},
            "pluginsRegistryDir": ref("absPath"),
            "pluginsDir": ref("absPath"),
            "deviceClasses": array_of(closed({
                "name": {"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN},
                "roceReady": {"type": "boolean"},
                "selector": {"type": "string", "minLength": 1},
            }, ["name"])),
        }, ["pluginsRegistryDir", "pluginsDir"],
            description="DRA mode (resource.k8s.io/v1, Kubernetes >= 1.34): the device plugin DaemonSet runs "
                        "kube-rdma-device-plugin dra (ResourceSlices instead of extended resources), with "
                        "its RBAC and DeviceClasses."),
        "agent": component({
            "pollInterval": {"type": "integer", "minimum": 1},
            "allowEnforce": {"type": "boolean"},
            "readRdmaCmConfigfs": {"type": "boolean"},
            "nodeLabelPolicy": closed({"enabled": {"type": "boolean"}}),
            "unguardedNodeWrites": {"type": "boolean"},
            "metrics": ref("metricsPort"),
            "updateStrategy": ref("daemonSetUpdateStrategy"),
            "readinessProbe": ref("probe"),
            "livenessProbe": ref("probe"),
        }, ["metrics"]),
        "controller": component({
            "replicas": {"type": "integer", "minimum": 0, "maximum": 1},
            "interval": {"type": "integer", "minimum": 1},
            "nodeLabelPolicy": closed({"enabled": {"type": "boolean"}}),
            "metrics": ref("metricsPort"),
            "readinessProbe": ref("probe"),
            "livenessProbe": ref("probe"),
        }, ["metrics"]),
        "crds": closed({
            "upgradeJob": closed({
                "enabled": {"type": "boolean"},
                "resources": ref("resources"),
                "nodeSelector": ref("stringMap"),
                "affinity": ref("k8sObject"),
                "tolerations": ref("k8sObjects"),
                "podAnnotations": ref("stringMap"),
                "podLabels": ref("stringMap"),
            }),
        }),
        "metrics": metrics(),
    }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "kube-rdma chart values (generated by scripts/render-manifests from "
                 "scripts/delivery/values_schema.py; do not edit)",
        **closed(props, ["image", "resourcePrefix", "rdmaNodeLabel", "pools", "devicePlugin", "cni", "agent",
                         "controller"]),
        "definitions": definitions(),
    }


def text() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(text(), end="")
