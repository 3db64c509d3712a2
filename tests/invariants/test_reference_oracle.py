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
    assert c.total["pods"] == 2 * 3


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
