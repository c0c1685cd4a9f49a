"""The chart's ValidatingAdmissionPolicies, their CEL evaluated on admission cases with PyPI
cel-python (scripts/test-delivery runs this; also runnable alone: `python3 scripts/delivery/policy_test.py`).

- The agent's ServiceAccount may set kuberdma.io/roce-ready (true|false) on its own node only
  (by its token's node claim), the controller's may set it to `unknown` on any node; nothing else
  of a Node changes (other labels, annotations, finalizers, ownerReferences, spec); managedFields,
  which the API server rewrites on every write before admission, is not held.
- The agent may write only its own node's RdmaNodeState and post Events only about its Node.
- DRA mode: the driver may write only its own driver's ResourceSlices of its node, and the
  status of claims allocated on its node (its own entries only).
- Each policy goes with its component's nodeLabelPolicy.enabled (the agent's only off with
  unguardedNodeWrites, else the render fails saying why), and none is rendered for a cluster
  without the API (< 1.30).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart  # noqa: E402


def vap(objs: list[dict[str, Any]], component: str = "agent") -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith(f"-{component}-node-label"))


def admit(policy: dict[str, Any], username: str, node_claim: list[str] | None, old: dict[str, Any] | None,
          new: dict[str, Any] | None, operation: str = "UPDATE") -> list[str]:
    """Evaluates the policy as the API server does for `operation` (UPDATE: old and new; CREATE:
    new, oldObject null; DELETE: old, object null): matchConditions first (a non-match admits),
    then the variables in order, then each validation; returns the messages of failed ones."""
    import celpy

    extra = {} if node_claim is None else {"authentication.kubernetes.io/node-name": node_claim}
    request = {"operation": operation, "userInfo": {"username": username, "extra": extra}}
    env = celpy.Environment()
    variables: dict[str, Any] = {}
    act = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old),
           "request": celpy.json_to_cel(request), "variables": celpy.celtypes.MapType(variables)}

    def run(expr: str) -> Any:
        return env.program(env.compile(expr)).evaluate(act)

    if not all(run(m["expression"]) for m in policy["spec"].get("matchConditions", [])):
        return []
    for v in policy["spec"].get("variables", []):
        variables[celpy.celtypes.StringType(v["name"])] = run(v["expression"])
        act["variables"] = celpy.celtypes.MapType(variables)
    return [str(run(v["messageExpression"])) if "messageExpression" in v else v["message"]
            for v in policy["spec"]["validations"] if not run(v["expression"])]


READY = "kuberdma.io/roce-ready"


def node_object(**meta: Any) -> dict[str, Any]:
    """A Node as the API server hands it to admission, with `meta` over its metadata."""
    base = {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}, "annotations": {"a": "b"}}
    return {"metadata": {**base, **meta}, "spec": {"podCIDR": "10.0.0.0/24"}}


def with_labels(obj: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    """`obj` with labels set (None removes one)."""
    out = copy.deepcopy(obj)
    for k, v in labels.items():
        k = k.replace("__", "/").replace("_", ".")
        if v is None:
            out["metadata"]["labels"].pop(k, None)
        else:
            out["metadata"]["labels"][k] = v
    return out


def ready_label(obj: dict[str, Any], value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if value is None:
        out["metadata"]["labels"].pop(READY, None)
    else:
        out["metadata"]["labels"][READY] = value
    return out


def managed(obj: dict[str, Any], entries: list[tuple[str, str]]) -> dict[str, Any]:
    """`obj` with `metadata.managedFields` of (manager, time) Update entries."""
    out = copy.deepcopy(obj)
    out["metadata"]["managedFields"] = [
        {"manager": m, "operation": "Update", "apiVersion": "v1", "time": t, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {}}}} for m, t in entries]
    return out


def node_label_policy_cases(agent: str, controller: str) -> list[tuple[str, str, str, list[str] | None,
                                                                       dict[str, Any], dict[str, Any], bool]]:
    """(component, case, user, node claim, old, new, denied): every metadata change a writer of
    the label might make, for the agent (own node, claim) and the controller (any node)."""
    node = node_object()
    ready = ready_label(node, "true")
    meta = lambda **m: node_object(**{**ready["metadata"], **m})  # noqa: E731
    cases = []
    for comp, user, claim, allowed, refused in (
            ("agent", agent, ["n1"], ["true", "false"], "unknown"),
            ("controller", controller, None, ["unknown"], "true")):
        cases += [
            (comp, f"set the label to {allowed[0]}", user, claim, node, ready_label(node, allowed[0]), False),
            (comp, f"flip the label to {allowed[-1]}", user, claim, ready_label(node, "x"),
             ready_label(node, allowed[-1]), False),
            (comp, f"set the label to {refused}", user, claim, node, ready_label(node, refused), True),
            (comp, "remove the label", user, claim, ready, ready_label(ready, None), True),
            (comp, "another label", user, claim, ready, {**ready, "metadata": {
                **ready["metadata"], "labels": {**ready["metadata"]["labels"], "node-role.kubernetes.io/gpu": ""}}},
             True),
            (comp, "remove another label", user, claim, ready, {**ready, "metadata": {
                **ready["metadata"], "labels": {READY: "true"}}}, True),
            (comp, "cordon", user, claim, ready, {**ready, "spec": {**ready["spec"], "unschedulable": True}}, True),
            (comp, "annotate", user, claim, ready, meta(annotations={"x": "y"}), True),
            (comp, "drop the annotations", user, claim, ready,
             {**ready, "metadata": {k: v for k, v in ready["metadata"].items() if k != "annotations"}}, True),
            # A finalizer would block the Node's deletion; an ownerReference would let the GC delete it.
            (comp, "add a finalizer", user, claim, ready, meta(finalizers=["kuberdma.io/keep"]), True),
            (comp, "add an ownerReference", user, claim, ready, meta(ownerReferences=[{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u1"}]), True),
            (comp, "change generateName", user, claim, ready, meta(generateName="n-"), True),
            (comp, "the label and a finalizer at once", user, claim, node,
             node_object(**{**ready_label(node, allowed[0])["metadata"], "finalizers": ["f"]}), True),
            # managedFields as the API server's field manager rewrites it before admission: the
            # writer's entry with a new time, the previous writer's entry gone with the label it
            # lost. Not held (docs/security.md): holding it would refuse every label write.
            (comp, "set the label: managedFields rewritten by the server", user, claim,
             managed(ready_label(node, "x"), [("kubelet", "2026-01-01T00:00:00Z"), ("previous", "2026-01-01T00:00:00Z")]),
             managed(ready_label(node, allowed[0]), [("kubelet", "2026-01-01T00:00:00Z"), (comp, "2026-01-02T00:00:00Z")]),
             False),
        ]
    other = ready_label(node_object(name="n2", labels={"kubernetes.io/hostname": "n2"}), None)
    cases += [
        ("agent", "another node", agent, ["n1"], other, ready_label(other, "true"), True),
        ("agent", "token without a node claim", agent, None, node, ready_label(node, "true"), True),
        ("controller", "any node", controller, None, ready_label(other, "true"), ready_label(other, "unknown"), False),
        ("agent", "someone else", "system:serviceaccount:kube-system:node-controller", ["n9"], node,
         with_labels(node, other="x"), False),
        ("controller", "someone else", "system:serviceaccount:kube-system:node-controller", None, node,
         meta(finalizers=["f"]), False),
    ]
    return cases


def test_node_label_policy() -> str:
    """The agent's ServiceAccount may set kuberdma.io/roce-ready (true|false) on its own node, the
    controller's may set it to unknown on any node; nothing else of a Node changes."""
    objs = chart.objects(chart.render(None, kube_version="1.30.0"))
    policies = {c: vap(objs, c) for c in ("agent", "controller")}
    for comp, policy in policies.items():
        binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"
                       and o["spec"]["policyName"] == policy["metadata"]["name"])
        assert binding["spec"]["validationActions"] == ["Deny"], binding
        assert policy["spec"]["failurePolicy"] == "Fail"
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                          "resources": ["nodes"]}], rules
    users = {c: f"system:serviceaccount:{chart.NAMESPACE}:{chart.RELEASE}-{c}" for c in ("agent", "controller")}
    cases = node_label_policy_cases(users["agent"], users["controller"])
    for comp, label, user, claim, old, new, denied in cases:
        why = admit(policies[comp], user, claim, old, new)
        assert bool(why) == denied, f"{comp}, {label}: {'admitted' if not why else why}"
        # The other component's policy never matches this user.
        other = "controller" if comp == "agent" else "agent"
        if user in users.values() and user != users[other]:
            assert not admit(policies[other], user, claim, old, new), f"{other} policy matched {comp}: {label}"
    # The agent's own RdmaNodeState, by the same node claim (RBAC cannot name it).
    state_policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                        and o["metadata"]["name"].endswith("-agent-node-state"))
    rules = state_policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["kuberdma.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["rdmanodestates", "rdmanodestates/status"]}], rules
    state = lambda n: {"metadata": {"name": n}, "spec": {"nodeName": n}}  # noqa: E731
    state_cases = [
        ("own state", users["agent"], ["n1"], state("n1"), False),
        ("another node's state", users["agent"], ["n1"], state("n2"), True),
        ("no node claim", users["agent"], None, state("n1"), True),
        ("the controller", users["controller"], None, state("n2"), False),
    ]
    for label, user, claim, obj, denied in state_cases:
        why = admit(state_policy, user, claim, obj, obj)
        assert bool(why) == denied, f"rdmanodestates, {label}: {'admitted' if not why else why}"
    assert not admit(state_policy, users["agent"], ["n1"], state("n1"), state("n1"))
    assert "may write only the RdmaNodeState of the node its pod runs on, not n2" in \
        admit(state_policy, users["agent"], ["n1"], state("n2"), state("n2"))[0]
    all_names = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    # The agent's policy off: only with its writes unguarded, knowingly (else the render says why).
    agent_off = {"nodeLabelPolicy": {"enabled": False}, "unguardedNodeWrites": True}
    for comp, off_agent, left in (("agent", agent_off, ["controller-node-label"]),
                                  ("controller", {"nodeLabelPolicy": {"enabled": False}},
                                   ["agent-node-label", "agent-node-state", "agent-events"])):
        off_values = chart.merged(chart.default_values(), **{comp: {**chart.default_values()[comp], **off_agent}})
        off = chart.objects(chart.render(off_values, kube_version="1.30.0"))
        names = sorted(o["metadata"]["name"] for o in off if o["kind"] == "ValidatingAdmissionPolicy")
        assert names == [n for n in all_names if any(n.endswith(x) for x in left)], names
    silently_off = chart.merged(chart.default_values(), agent={**chart.default_values()["agent"],
                                                               "nodeLabelPolicy": {"enabled": False}})
    err = chart.render_error_for(silently_off, kube_version="1.30.0")
    assert "agent.nodeLabelPolicy.enabled=false" in err and "agent.unguardedNodeWrites=true" in err, err
    old_cluster = chart.merged(chart.default_values(), agent={**chart.default_values()["agent"],
                                                              "unguardedNodeWrites": True})
    assert not [o for o in chart.objects(chart.render(old_cluster, kube_version="1.29.0"))
                if o["kind"] == "ValidatingAdmissionPolicy"], "rendered for a cluster without the API"
    events = test_agent_events_policy(objs, users["agent"], users["controller"])
    return f"{len(cases) + len(state_cases) + events} admission cases evaluated with CEL (cel-python), 4 policies"


def test_agent_events_policy(objs: list[dict[str, Any]], agent: str, controller: str) -> int:
    """The agent may post Events only about its own Node (its RoceDrift Warnings), by its
    token's node claim; the controller's Events are not this policy's."""
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                  and o["metadata"]["name"].endswith("-agent-events"))
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["events"]}], rules

    def event(kind: str, name: str, **more: Any) -> dict[str, Any]:
        return {"metadata": {"generateName": f"{name}.roce-drift-", "namespace": "default"},
                "reason": "RoceDrift", "type": "Warning",
                "regarding": {"apiVersion": "v1", "kind": kind, "name": name}, **more}

    cases = [
        ("drift on its own node", agent, ["n1"], event("Node", "n1"), False),
        ("about another node", agent, ["n1"], event("Node", "n2"), True),
        ("about a Pod", agent, ["n1"], {**event("Pod", "n1"), "regarding": {
            "apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "n1"}}, True),
        ("about its node, naming a related object", agent, ["n1"],
         event("Node", "n1", related={"kind": "Pod", "name": "victim", "namespace": "default"}), True),
        ("without a node claim", agent, None, event("Node", "n1"), True),
        ("the controller, about a RoceProfile", controller, None, event("RoceProfile", "p"), False),
    ]
    for label, user, claim, ev, denied in cases:
        why = admit(policy, user, claim, None, ev, "CREATE")
        assert bool(why) == denied, f"events, {label}: {'admitted' if not why else why}"
    why = admit(policy, agent, ["n1"], None, event("Pod", "x"), "CREATE")
    assert why == ["the kube-rdma agent may post Events only about the node its pod runs on, not about Pod x"], why
    return len(cases)


DRIVER = "rdma.kuberdma.io"


def resource_slice(node: str | None, driver: str = DRIVER, name: str = "s1") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": node or "all", "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "d0"}]}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def claim(node: str, devices: list[dict[str, Any]] | None = None, reserved: bool = True) -> dict[str, Any]:
    """A ResourceClaim allocated on `node` as the scheduler writes it for a node-local pool."""
    status: dict[str, Any] = {"allocation": {
        "devices": {"results": [{"request": "vf", "driver": DRIVER, "pool": node, "device": "vf-1"},
                                {"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u1"}]
    if devices is not None:
        status["devices"] = devices
    return {"metadata": {"name": "c1", "namespace": "tenant"}, "status": status}


def test_dra_policies() -> str:
    """DRA mode: the driver's ServiceAccount may write only ResourceSlices of its own driver and
    node (its token's node claim; a delete judged by the stored slice), and the status of claims
    allocated on its node only, its own driver's status.devices entries only, the allocation and
    reservedFor untouched. Rendered only with the policy API, and the writes granted only then."""
    values = chart.default_values()
    values["dra"]["enabled"] = True
    objs = chart.objects(chart.render(values, kube_version="1.34.0"))
    user = f"system:serviceaccount:{chart.NAMESPACE}:{chart.RELEASE}-device-plugin"
    slices = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"].endswith("-dra-slices"))
    status = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                  and o["metadata"]["name"].endswith("-dra-claim-status"))
    for p in (slices, status):
        binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"
                       and o["spec"]["policyName"] == p["metadata"]["name"])
        assert binding["spec"]["validationActions"] == ["Deny"] and p["spec"]["failurePolicy"] == "Fail", p
    assert slices["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]
    mine, theirs, gpu = resource_slice("n1"), resource_slice("n2"), resource_slice("n1", "gpu.example.com")
    changed = lambda s: {**s, "spec": {**s["spec"], "devices": [{"name": "d1"}]}}  # noqa: E731
    slice_cases = [
        ("create its own", "CREATE", ["n1"], None, mine, False),
        ("update its own", "UPDATE", ["n1"], mine, changed(mine), False),
        ("delete its own", "DELETE", ["n1"], mine, None, False),
        ("create for another node", "CREATE", ["n1"], None, theirs, True),
        ("create for all nodes", "CREATE", ["n1"], None, resource_slice(None), True),
        ("create another driver's", "CREATE", ["n1"], None, gpu, True),
        ("update another node's", "UPDATE", ["n1"], theirs, changed(theirs), True),
        ("update another driver's", "UPDATE", ["n1"], gpu, changed(gpu), True),
        ("delete another node's", "DELETE", ["n1"], theirs, None, True),
        ("delete another driver's", "DELETE", ["n1"], gpu, None, True),
        ("create without a node claim", "CREATE", None, None, mine, True),
    ]
    for label, op, node_claim, old, new, denied in slice_cases:
        why = admit(slices, user, node_claim, old, new, op)
        assert bool(why) == denied, f"slices, {label}: {'admitted' if not why else why}"
    assert not admit(slices, "system:serviceaccount:gpu:gpu-driver", ["n9"], None, gpu, "CREATE"), "another user"
    assert admit(slices, user, ["n1"], None, theirs, "CREATE") == [
        "the kube-rdma DRA driver may write only ResourceSlices of the node its pod runs on (n1), "
        "not one of node n2 (ResourceSlice s1)"]
    assert admit(slices, user, ["n1"], None, gpu, "CREATE") == [
        "the kube-rdma DRA driver may write only ResourceSlices of driver rdma.kuberdma.io, "
        "not of gpu.example.com (ResourceSlice s1)"]
    ours = {"driver": DRIVER, "pool": "n1", "device": "vf-1", "networkData": {"interfaceName": "net1"}}
    other = {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0", "networkData": {"interfaceName": "g"}}
    status_cases = [
        ("its network data on a claim on its node", ["n1"], claim("n1"), claim("n1", [ours]), False),
        ("updating its entry beside another driver's", ["n1"], claim("n1", [other, ours]),
         claim("n1", [other, {**ours, "networkData": {"interfaceName": "net2"}}]), False),
        ("a claim on another node", ["n1"], claim("n2"), claim("n2", [{**ours, "pool": "n2"}]), True),
        ("a claim not allocated", ["n1"], {"metadata": claim("n1")["metadata"], "status": {}},
         {"metadata": claim("n1")["metadata"], "status": {"devices": [ours]}}, True),
        ("another driver's entry", ["n1"], claim("n1"), claim("n1", [other]), True),
        ("removing another driver's entry", ["n1"], claim("n1", [other, ours]), claim("n1", [ours]), True),
        ("releasing the claim", ["n1"], claim("n1"), claim("n1", reserved=False), True),
        ("without a node claim", None, claim("n1"), claim("n1", [ours]), True),
    ]
    for label, node_claim, old, new, denied in status_cases:
        why = admit(status, user, node_claim, old, new)
        assert bool(why) == denied, f"claim status, {label}: {'admitted' if not why else why}"
    assert admit(status, user, ["n1"], claim("n2"), claim("n2", [{**ours, "pool": "n2"}])) == [
        "the kube-rdma DRA driver may write the status only of ResourceClaims allocated on the node its pod "
        "runs on (n1) (ResourceClaim tenant/c1)"]
    safe = chart.objects(chart.render(values))
    assert not [o for o in safe if o["kind"] == "ValidatingAdmissionPolicy"], "no policy without the API"
    return f"{len(slice_cases) + len(status_cases)} admission cases evaluated with CEL (cel-python), 2 policies"


CHECKS: list[tuple[str, Callable[[], str | None]]] = [
    ("policy: agent may label only its own node, write only its state, post Events only about its node; "
     "controller only `unknown` (CEL)", test_node_label_policy),
    ("policy: DRA driver writes only its own node's slices of its driver and claims allocated there (CEL)",
     test_dra_policies),
]


def main() -> int:
    return chart.run_checks(CHECKS)


if __name__ == "__main__":
    sys.exit(main())
