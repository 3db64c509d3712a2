"""Failover under a full quota (issue 38): which evicted replicas are charged, and admission.

Reference figures are written from docs/charging.md ("Failover"): a cluster under a graceful
eviction task is charged the task's replicas until the task ends, except when its purge mode is
Directly (Karmada renders no Work for it), or, for a quota with `failover.evictedReplicas:
Release` (the default), once Karmada reports that cluster not Ready past the grace.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from karmadaquota import charge
from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.controller.index import Interner, aggregate, observe
from karmadaquota.evaluate import QuotaView, evaluate
from karmadaquota.evictions import CLUSTERS_PATH, Readiness, not_ready
from karmadaquota.kinds import Kinds
from karmadaquota.resources import PODS
from tests.conftest import binding_doc
from tests.core.test_kinds import started
from tests.fake_api import FakeApiServer, quota_doc
from tests.webhook.test_webhook_app import post, review

ONE_CPU = {"cpu": "1", "memory": "1Gi"}


def cluster(name: str, ready: str | None, since: str = "2026-11-27T10:00:00Z") -> dict[str, Any]:
    conditions = (
        [] if ready is None else [{"type": "Ready", "status": ready, "lastTransitionTime": since}]
    )
    return {"metadata": {"name": name}, "status": {"conditions": conditions}}


T0 = 1795773600.0  # 2026-11-27T10:00:00Z


def test_not_ready_is_false_or_unknown_with_its_transition_time() -> None:
    assert not_ready(cluster("m1", "True")) is None
    assert not_ready(cluster("m1", None)) is None  # just joined: nothing evicted from it
    got = not_ready(cluster("m1", "Unknown"))
    assert got is not None and got.status == "Unknown" and got.since == T0
    assert not_ready(cluster("m1", "False", since="garbage")).since == float("inf")  # type: ignore[union-attr]


def test_a_cluster_is_released_only_past_the_grace_and_taken_back_when_ready() -> None:
    changes: list[int] = []
    r = Readiness(grace=30, on_change=lambda: changes.append(1))
    r.observe(cluster("m1", "False"))
    r.observe(cluster("m2", "True"))
    assert r.released(T0 + 29.9) == frozenset()
    assert r.releasing(T0 + 10) == {"m1": T0 + 30}
    assert r.next_release(T0 + 10) == T0 + 30
    assert r.released(T0 + 30) == {"m1"}
    assert r.next_release(T0 + 31) is None
    r.observe(cluster("m1", "False"))  # the same state again: nobody is told
    assert len(changes) == 1
    r.observe(cluster("m1", "True"))
    assert r.released(T0 + 100) == frozenset() and len(changes) == 2
    r.observe(cluster("m1", "Unknown"))
    r.forget("m1")  # a Cluster deleted: not known, so never released
    assert r.released(T0 + 100) == frozenset() and len(changes) == 4


def test_an_unreadable_transition_time_is_never_released() -> None:
    r = Readiness()
    r.observe(cluster("m1", "False", since="yesterday"))
    assert r.released(T0 + 10**9) == frozenset()


# ---------------------------------------------------------------------------------------------
# the charge: 4 replicas of 1 cpu moved from m1 (evicted) to m2 by the scheduler


def moved(purge: str | None = None, placed: dict[str, int] | None = None) -> Any:
    doc = binding_doc(4, ONE_CPU, clusters=placed if placed is not None else {"m2": 4})
    doc["spec"]["gracefulEvictionTasks"] = [
        {"fromCluster": "m1", "replicas": 4, **({"purgeMode": purge} if purge else {})}
    ]
    return doc


def pods(c: charge.Charge) -> int:
    return c.total[PODS].nanos // 10**9


def test_a_gracefully_evicted_cluster_is_charged_beside_the_new_placement() -> None:
    c = charge.charge(ResourceBinding.model_validate(moved()))
    assert pods(c) == 8  # m2's 4 and m1's 4, both rendered
    assert set(c.per_cluster) == {"m1", "m2"}
    assert {k: v[PODS].nanos // 10**9 for k, v in c.evicted.items()} == {"m1": 4}
    released = charge.released(c, {"m1"})
    assert pods(released) == 4 and set(released.per_cluster) == {"m2"}
    assert charge.released(c, {"m3"}) is c


def test_a_directly_purged_task_is_not_charged() -> None:
    for mode in ("Directly", "Immediately"):
        c = charge.charge(ResourceBinding.model_validate(moved(mode)))
        assert pods(c) == 4 and set(c.per_cluster) == {"m2"} and not c.evicted


def test_before_rescheduling_the_intent_is_still_charged_when_released() -> None:
    c = charge.charge(ResourceBinding.model_validate(moved(placed={})))
    assert pods(c) == 4
    assert pods(charge.released(c, {"m1"})) == 4  # spec.replicas: the intent before scheduling


def test_several_released_tasks_are_charged_exactly_the_intent() -> None:
    doc = binding_doc(4, ONE_CPU, clusters={"m3": 2})
    doc["spec"]["gracefulEvictionTasks"] = [
        {"fromCluster": "m1", "replicas": 2},
        {"fromCluster": "m2", "replicas": 2},
    ]
    c = charge.charge(ResourceBinding.model_validate(doc))
    assert pods(c) == 6
    # both released: exactly max(spec.replicas 4, m3 2) = 4 — not 6 (nothing released), not 2
    assert pods(charge.released(c, {"m1", "m2"})) == 4


# ---------------------------------------------------------------------------------------------
# admission against a full quota (pods hard 4, used 4)


def quota(mode: str | None = None) -> QuotaView:
    obj: dict[str, Any] = {
        "metadata": {"name": "q", "namespace": "team-a"},
        "spec": {"hard": {"pods": "4"}},
        "status": {"used": {"pods": "4"}},
    }
    if mode is not None:
        obj["spec"]["failover"] = {"evictedReplicas": mode}
    return QuotaView.of(KarmadaQuota.model_validate(obj))


def reviewed(doc: dict[str, Any], released: frozenset[str]) -> charge.Charge:
    return charge.with_released(charge.charge(ResourceBinding.model_validate(doc)), released)


def test_the_schedulers_failover_is_admitted_while_the_evicted_cluster_is_not_ready() -> None:
    old, new = moved(placed={}), moved()
    away = frozenset({"m1"})
    assert evaluate([quota()], reviewed(new, away), reviewed(old, away)).allowed
    # the same failover while m1 is Ready: m1 still runs its 4
    refused = evaluate([quota()], reviewed(new, frozenset()), reviewed(old, frozenset()))
    assert not refused.allowed and "exceeded quota: q" in refused.message
    # Hold keeps the task charged until it ends, not Ready or not
    held = evaluate([quota("Hold")], reviewed(new, away), reviewed(old, away))
    assert not held.allowed


def test_dropping_a_released_task_for_a_new_cluster_is_charged() -> None:
    """The old binding's m1 task was not charged (m1 not Ready): placing 4 more on m3 in its
    stead grows what runs in Ready members by 4, though the strict charge does not move."""
    old = moved()
    new = binding_doc(4, ONE_CPU, clusters={"m2": 4, "m3": 4})
    away = frozenset({"m1"})
    d = evaluate([quota()], reviewed(new, away), reviewed(old, away))
    assert not d.allowed and "requested: pods=4" in d.message


# ---------------------------------------------------------------------------------------------
# the controller's sums


def test_the_index_releases_an_evicted_cluster_only_where_asked() -> None:
    intern = Interner()
    state = observe(moved(), intern)
    assert state.entry is not None
    assert state.entry.evictions == (("m1", None),)
    strict = aggregate([state.entry], [PODS], ())
    assert strict.used[PODS] == 8 * 10**9 and set(strict.per_cluster) == {"m1", "m2"}
    released = aggregate([state.entry], [PODS], (), frozenset({"m1"}))
    assert released.used[PODS] == 4 * 10**9 and set(released.per_cluster) == {"m2"}


def test_a_tasks_end_is_its_creation_plus_its_timeout() -> None:
    doc = moved()
    doc["spec"]["gracefulEvictionTasks"][0]["creationTimestamp"] = "2026-11-27T10:00:00Z"
    entry = observe(doc, Interner()).entry
    assert entry is not None and entry.evictions == (("m1", T0 + 600),)
    doc["spec"]["gracefulEvictionTasks"][0]["gracePeriodSeconds"] = 60
    entry = observe(doc, Interner()).entry
    assert entry is not None and entry.evictions == (("m1", T0 + 60),)


# ---------------------------------------------------------------------------------------------
# the webhook as the program assembles it: its own watch of the Clusters


async def test_the_webhook_admits_the_failover_once_it_sees_the_cluster_not_ready() -> None:
    api = FakeApiServer()
    api.create(CLUSTERS_PATH, cluster("m1", "True"))
    old, new = moved(placed={}), moved()
    for doc in (old, new):
        doc["metadata"]["namespace"] = "ns"
    full = quota_doc(hard={"pods": "4"}, used={"pods": "4"}, namespace="ns")
    async for client in started(api, Kinds.of([]), full):
        _, body = await post(client, "/validate-resourcebinding", review(new, "UPDATE", old=old))
        refused = body["response"]
        assert not refused["allowed"]
        assert (
            "replicas evicted from m1 is Ready: charged until Karmada's eviction ends"
            in (refused["status"]["message"])
        )
        api.update(
            f"{CLUSTERS_PATH}/m1",
            lambda c: c.update(status=cluster("m1", "Unknown")["status"]),
        )
        deadline = time.monotonic() + 5
        while True:  # until the webhook's Cluster watch has delivered the change
            _, body = await post(
                client, "/validate-resourcebinding", review(new, "UPDATE", old=old)
            )
            if body["response"]["allowed"]:
                break
            assert time.monotonic() < deadline, body["response"]["status"]["message"]
            await asyncio.sleep(0.01)
