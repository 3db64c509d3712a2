"""The e2e oracles themselves, without a bed: the reference charge (e2e/testbed/reference.py)
says what docs/charging.md says, and the guard invariant (e2e/testbed/guards.py) counts a
missing guard, or a name a guard lacks, as holding without limit."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from e2e.testbed import reference
from e2e.testbed.guards import GuardInvariant, guarded, may_hold


def binding(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    resource = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w", "namespace": "n"}
    return {
        "metadata": {"name": "w", "namespace": "n", **meta},
        "spec": {"resource": resource, **spec},
    }


def cpu(value: str) -> dict[str, Any]:
    return {"resourceRequest": {"cpu": value}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1500m", Fraction(3, 2)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1e3", Fraction(1000)),
        ("1E", Fraction(10**18)),
        ("0.1", Fraction(1, 10)),
        (268435456, Fraction(268435456)),
        ("-500m", Fraction(-1, 2)),
    ],
)
def test_quantities_are_read_as_kubernetes_writes_them(text: Any, value: Fraction) -> None:
    assert reference.quantity(text) == value


def test_an_unreadable_quantity_is_no_charge() -> None:
    with pytest.raises(ValueError):
        reference.quantity("1.5.0")
    assert reference.charges([binding({"replicas": 1, "replicaRequirements": cpu("x")})]) == []


def test_r_is_the_larger_of_the_replicas_and_what_the_clusters_run() -> None:
    one = {"replicas": 3, "replicaRequirements": cpu("100m")}
    assert reference.charge(binding(one)).total == {
        "count/deployments.apps": 1,
        "pods": 3,
        "count/pods": 3,
        "requests.cpu": Fraction(3, 10),
        "cpu": Fraction(3, 10),
    }
    duplicated = {**one, "clusters": [{"name": "a", "replicas": 3}, {"name": "b", "replicas": 3}]}
    assert reference.charge(binding(duplicated)).total["pods"] == 6
    # a cluster under a graceful eviction task keeps its Work: the task's replicas, else R
    evicted = {
        **one,
        "clusters": [{"name": "b", "replicas": 3}],
        "gracefulEvictionTasks": [{"fromCluster": "a", "replicas": 2}, {"fromCluster": "c"}],
    }
    assert reference.charge(binding(evicted)).total["pods"] == 3 + 2 + 3
    # ... unless purged Directly: Karmada renders no Work for that task
    evicted["gracefulEvictionTasks"][1]["purgeMode"] = "Directly"  # type: ignore[index]
    assert reference.charge(binding(evicted)).total["pods"] == 3 + 2


def test_negative_values_are_charged_as_zero_and_a_queued_binding_as_nothing() -> None:
    assert reference.charge(binding({"replicas": -1, "replicaRequirements": cpu("1")})).total == {
        "count/deployments.apps": 1
    }
    negative = reference.charge(binding({"replicas": 2, "replicaRequirements": cpu("-1")}))
    assert negative.total["requests.cpu"] == 0 and negative.best_effort
    queued = binding(
        {"replicas": 2, "replicaRequirements": cpu("1"), "suspension": {"scheduling": True}},
        annotations={"quota.karmada.io/queued-by": "q"},
    )
    assert reference.charge(queued).total == {}


def test_several_components_are_charged_once_per_target_cluster() -> None:
    spec = {
        "replicas": 1,
        "components": [
            {"name": "a", "replicas": 2, "replicaRequirements": cpu("100m")},
            {"name": "b", "replicas": 1, "replicaRequirements": cpu("1")},
        ],
        "clusters": [{"name": "x", "replicas": 1}, {"name": "y", "replicas": 1}],
    }
    c = reference.charge(binding(spec))
    assert c.total["requests.cpu"] == 2 * Fraction(12, 10)
    assert c.total["pods"] == c.total["count/pods"] == 2 * 3


def test_count_pods_is_charged_as_pods_and_a_pod_is_not_counted_once_more_as_an_object() -> None:
    spec = {"replicas": 2, "clusters": [{"name": "a", "replicas": 2}, {"name": "b", "replicas": 2}]}
    assert reference.charge(binding(spec)).total["count/pods"] == 4
    pod = binding({"replicas": 1, "clusters": [{"name": "a", "replicas": 1}]})
    pod["spec"]["resource"] = {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "n"}
    assert reference.charge(pod).total == {"pods": 1, "count/pods": 1}


def test_core_objects_are_counted_under_their_resource_and_legacy_name_never_replicas() -> None:
    svc = binding({"replicas": 3, "clusters": [{"name": "a", "replicas": 3}]})
    svc["spec"]["resource"] = {"apiVersion": "v1", "kind": "Service", "name": "s"}
    assert reference.charge(svc).total == {"count/services": 1, "services": 1}
    ingress = binding({"replicas": 1})
    ingress["spec"]["resource"] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "name": "i",
    }
    assert reference.charge(ingress).total == {"count/ingresses.networking.k8s.io": 1}
    crd = binding({"replicas": 1})
    crd["spec"]["resource"] = {"apiVersion": "example.io/v1", "kind": "Workload", "name": "w"}
    c = reference.charge(crd)
    assert c.total == {"count/workloads.example.io": 1} and c.uncounted


def with_template(spec: dict[str, Any]) -> dict[str, Any]:
    b = binding(spec)
    b["spec"]["resource"]["resourceVersion"] = "7"
    return b


def stateful_set(replicas: int, *entries: dict[str, Any]) -> dict[str, Any]:
    pod = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "spec": {
            "replicas": replicas,
            "template": {"spec": pod},
            "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": e} for e in entries],
        },
    }


def test_claim_templates_are_charged_per_replica_and_per_entry_and_per_storage_class() -> None:
    b = with_template(
        {"replicas": 3, "clusters": [{"name": "a", "replicas": 2}, {"name": "b", "replicas": 1}]}
    )
    b["spec"]["resource"]["kind"] = "StatefulSet"
    sts = stateful_set(
        3,
        {"resources": {"requests": {"storage": "1Gi"}}},
        {"resources": {"requests": {"storage": "500Mi"}}, "storageClassName": "fast"},
    )
    c = reference.charge(b, sts)
    fast = "fast.storageclass.storage.k8s.io"
    assert {k: v for k, v in c.total.items() if "claim" in k or "storage" in k} == {
        "persistentvolumeclaims": 6,
        "count/persistentvolumeclaims": 6,
        "requests.storage": 3 * (2**30 + 500 * 2**20),
        f"{fast}/persistentvolumeclaims": 3,
        f"{fast}/requests.storage": 3 * 500 * 2**20,
    }
    assert c.total["pods"] == 3 and c.total["requests.cpu"] == Fraction(3, 10)
    # a binding made by hand names no template version: charged from its own fields
    b["spec"]["resource"].pop("resourceVersion")
    assert "persistentvolumeclaims" not in reference.charge(b, sts).total


def deployment(replicas: int, strategy: dict[str, Any] | None, **pod: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "template": {"spec": pod}}
    if strategy is not None:
        spec["strategy"] = strategy
    return {"apiVersion": "apps/v1", "kind": "Deployment", "spec": spec}


def test_a_deployment_is_charged_its_surge_in_every_cluster() -> None:
    b = with_template(
        {"replicas": 5, "clusters": [{"name": "a", "replicas": 3}, {"name": "b", "replicas": 2}]}
    )
    pod = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    assert reference.charge(b, deployment(5, None, **pod)).total["pods"] == 3 + 1 + 2 + 1
    none = {"rollingUpdate": {"maxSurge": 0}}
    assert reference.charge(b, deployment(5, none, **pod)).total["pods"] == 5
    assert reference.charge(b, deployment(5, {"type": "Recreate"}, **pod)).total["pods"] == 5
    two = {"rollingUpdate": {"maxSurge": 2}}
    assert reference.charge(b, deployment(5, two, **pod)).total["count/pods"] == 9


def test_one_replica_is_the_pod_as_kubernetes_charges_it() -> None:
    pod = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "400m"}}}],
        "initContainers": [
            {
                "name": "proxy",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "400m"}},
            },
            {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
        ],
        "overhead": {"cpu": "50m"},
    }
    # max(400m + 400m, 400m + 1) + 50m
    b = with_template({"replicas": 1, "replicaRequirements": cpu("400m")})
    c = reference.charge(b, deployment(1, {"type": "Recreate"}, **pod))
    assert c.total["requests.cpu"] == Fraction(1450, 1000)


def test_a_replication_controller_runs_its_template_s_replicas_in_every_cluster() -> None:
    b = with_template({"clusters": [{"name": "a"}, {"name": "b"}]})
    b["spec"]["resource"] = {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "name": "rc",
        "resourceVersion": "1",
    }
    rc = {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    assert reference.charge(b, rc).total["pods"] == 10
    b["spec"].pop("clusters")
    assert reference.charge(b, rc).total["pods"] == 5  # before it is placed anywhere


def test_scopes_select_as_kubernetes_quota_scopes_select_pods() -> None:
    high = reference.charge(
        binding({"replicas": 1, "replicaRequirements": {**cpu("1"), "priorityClassName": "high"}})
    )
    empty = reference.charge(binding({"replicas": 1, "replicaRequirements": {}}))
    none = reference.charge(binding({"replicas": 0, "replicaRequirements": {}}))
    in_high = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    assert reference.matches({"scopeSelector": in_high}, high)
    assert not reference.matches({"scopeSelector": in_high}, empty)
    assert reference.matches({"scopes": ["BestEffort"]}, empty)
    assert reference.matches({"scopes": ["NotBestEffort"]}, high)
    assert not reference.matches({"scopes": ["BestEffort"]}, none)  # no replicas: no scope
    assert reference.total({"scopes": ["NotBestEffort"]}, [high, empty], "cpu") == 1


def judge(inv: GuardInvariant, reads: dict[str, Any]) -> list[str]:
    values = {("team", m): r for m, r in reads.items()}
    return inv._judge(values, values)


def test_a_missing_guard_or_name_holds_without_limit_once_the_guards_were_set_up() -> None:
    inv = GuardInvariant({"a": None, "b": None}, "n", [guarded("team", {"pods": "4"})])  # type: ignore[dict-item]
    both = {"pods": Fraction(2)}
    # setting up: b has no guard yet, so nothing is judged
    assert judge(inv, {"a": ("1", both), "b": ("", {})}) == [] and inv.polls == 0
    assert judge(inv, {"a": ("1", both), "b": ("1", both)}) == [] and inv.polls == 1
    assert judge(inv, {"a": ("1", both), "b": ("2", {"pods": Fraction(3)})}) != []
    assert any("without bound" in v for v in judge(inv, {"a": ("1", both), "b": ("", {})}))
    assert any("without bound" in v for v in judge(inv, {"a": ("1", both), "b": ("3", {})}))


def test_a_guard_holds_what_both_its_spec_and_status_name() -> None:
    enforced = {"spec": {"hard": {"pods": "2"}}, "status": {"hard": {"pods": "3"}}}
    assert may_hold(enforced) == {"pods": 3}
    assert may_hold({"spec": {"hard": {"pods": "2"}}, "status": {}}) == {}  # not enforced yet
