"""Observed usage from member pods: which pods count and what they request (pure)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from karmadaquota.controller.pods import (
    PodTable,
    is_pod_observable,
    pod_requests,
    pod_usage,
)
from karmadaquota.scopes import Expression
from tests.conftest import as_strings


def container(
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    restart: str | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x", "resources": {}}
    if requests is not None:
        c["resources"]["requests"] = requests
    if limits is not None:
        c["resources"]["limits"] = limits
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(
    name: str = "p",
    *,
    namespace: str = "team-a",
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    deleting: bool = False,
    priority_class: str = "",
    overhead: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [container({"cpu": "1", "memory": "1Gi"})]}
    if init:
        spec["initContainers"] = init
    if priority_class:
        spec["priorityClassName"] = priority_class
    if overhead:
        spec["overhead"] = overhead
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("phase", "deleting", "counted"),
    [
        ("Pending", False, True),
        ("Running", False, True),
        ("Unknown", False, True),
        ("Succeeded", False, False),
        ("Failed", False, False),
        ("Running", True, True),  # no grace period given: counted until it is gone
        ("Succeeded", True, False),
    ],
)
def test_which_pods_count(phase: str, deleting: bool, counted: bool) -> None:
    p = pod(phase=phase, deleting=deleting)
    usage = pod_usage(p)
    assert (usage is not None and usage.counts(time.time())) is counted


def _terminating(name: str, at: str, grace: int | None) -> dict[str, Any]:
    p = pod(name)
    p["metadata"]["deletionTimestamp"] = at
    if grace is not None:
        p["metadata"]["deletionGracePeriodSeconds"] = grace
    return p


def test_a_terminating_pod_counts_until_its_deletion_grace_is_over() -> None:
    # Kubernetes' QuotaV1Pod: counted until deletionTimestamp + deletionGracePeriodSeconds
    at = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    p = pod_usage(_terminating("a", "2026-01-01T00:00:00Z", 30))
    assert p is not None and p.terminating
    assert p.counts(at + 29.9)
    assert not p.counts(at + 30)
    unreadable = pod_usage(_terminating("b", "not a time", 30))
    assert unreadable is not None and unreadable.counts(at + 10**9)  # kept: stricter


def test_terminating_pods_are_summed_apart_and_dropped_once_their_grace_is_over() -> None:
    t = PodTable()
    at = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    t.apply("ADDED", pod("a"))
    t.apply("MODIFIED", _terminating("b", "2026-01-01T00:00:00Z", 30))
    names = {"requests.cpu", "pods"}
    seen = t.observed("team-a", names, (), now=at + 1)
    assert as_strings(seen.running) == {"requests.cpu": "2", "pods": "2"}
    assert as_strings(seen.terminating) == {"requests.cpu": "1", "pods": "1"}
    later = t.observed("team-a", names, (), now=at + 31)
    assert as_strings(later.running) == {"requests.cpu": "1", "pods": "1"}
    assert as_strings(later.terminating) == {"requests.cpu": "0", "pods": "0"}


def test_containers_add_up() -> None:
    spec = pod(containers=[container({"cpu": "1"}), container({"cpu": "500m", "memory": "1Gi"})])
    assert as_strings(pod_requests(spec["spec"])) == {"cpu": "1500m", "memory": "1Gi"}


def test_init_containers_take_the_maximum() -> None:
    spec = pod(
        containers=[container({"cpu": "1", "memory": "1Gi"})],
        init=[container({"cpu": "3"}), container({"memory": "512Mi"})],
    )["spec"]
    assert as_strings(pod_requests(spec)) == {"cpu": "3", "memory": "1Gi"}


def test_sidecars_add_and_later_init_containers_fit_next_to_them() -> None:
    # sidecar 500m runs with the app (1 + 0.5); the init container after it needs 2 + 0.5
    spec = pod(
        containers=[container({"cpu": "1"})],
        init=[container({"cpu": "500m"}, restart="Always"), container({"cpu": "2"})],
    )["spec"]
    assert as_strings(pod_requests(spec)) == {"cpu": "2500m"}


def test_overhead_is_added() -> None:
    spec = pod(containers=[container({"cpu": "1"})], overhead={"cpu": "250m"})["spec"]
    assert as_strings(pod_requests(spec)) == {"cpu": "1250m"}


def test_pod_usage_under_quota_names() -> None:
    p = pod(
        containers=[
            container(
                {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "2Gi"}
            )
        ]
    )
    u = pod_usage(p)
    assert u is not None
    assert as_strings(u.usage) == {
        "cpu": "1",
        "requests.cpu": "1",
        "memory": "1Gi",
        "requests.memory": "1Gi",
        "ephemeral-storage": "2Gi",
        "requests.ephemeral-storage": "2Gi",
        "requests.nvidia.com/gpu": "1",
        "pods": "1",
        "count/pods": "1",
    }
    assert u.traits.priority_class == ""
    assert not u.traits.best_effort


def test_best_effort_and_priority_class_traits() -> None:
    be = pod_usage(pod(containers=[container()], priority_class="high"))
    assert be is not None and be.traits.best_effort and be.traits.priority_class == "high"
    limited = pod_usage(pod(containers=[container(limits={"memory": "1Gi"})]))
    assert limited is not None and not limited.traits.best_effort


def test_bad_quantity_counts_the_pod_only() -> None:
    u = pod_usage(pod(containers=[container({"cpu": "lots"})]))
    assert u is not None
    assert as_strings(u.usage) == {"pods": "1", "count/pods": "1"}


@pytest.mark.parametrize(
    ("name", "observable"),
    [
        ("pods", True),
        ("count/pods", True),
        ("cpu", True),
        ("requests.memory", True),
        ("requests.nvidia.com/gpu", True),
        ("hugepages-2Mi", True),
        ("count/deployments.apps", False),
        ("services", False),
    ],
)
def test_pod_observable_names(name: str, observable: bool) -> None:
    assert is_pod_observable(name) is observable


def test_table_events_and_observed_sums() -> None:
    t = PodTable()
    assert t.apply("ADDED", pod("a")) == "team-a"
    assert t.apply("ADDED", pod("b", priority_class="high")) == "team-a"
    assert t.apply("MODIFIED", pod("b", priority_class="high")) is None  # no change
    assert t.apply("ADDED", pod("c", namespace="other")) == "other"
    names = {"requests.cpu", "pods", "count/deployments.apps"}
    assert as_strings(t.observed("team-a", names, (), 0).running) == {
        "requests.cpu": "2",
        "pods": "2",
    }
    high = (Expression("PriorityClass", "In", frozenset({"high"})),)
    assert as_strings(t.observed("team-a", names, high, 0).running) == {
        "requests.cpu": "1",
        "pods": "1",
    }
    # a pod that finishes stops counting; a deleted one too
    assert t.apply("MODIFIED", pod("a", phase="Succeeded")) == "team-a"
    assert t.apply("DELETED", pod("b")) == "team-a"
    assert as_strings(t.observed("team-a", names, (), 0).running) == {
        "requests.cpu": "0",
        "pods": "0",
    }
    assert t.apply("DELETED", pod("b")) is None
    assert len(t) == 1
