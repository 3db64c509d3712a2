"""The leader admits queued bindings (controller/admit.py) through the reconciler, against a
fake API server: in priority then age order, on the resourceVersion it decided from, never
on a follower, a refused clear leaving the binding queued; Queued/Admitted events."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from karmadaquota import queued
from karmadaquota.controller.admit import Admitter
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import Controller, ReconcilerConfig
from karmadaquota.kube.client import JSON, Conflict, KubeError, NotFound
from tests.polling import until
from tests.test_controller_reconciler import FakeKarmada, Lead, used


class QueueKarmada(FakeKarmada):
    """Adds what admission needs: merge patches of bindings (with the resourceVersion
    precondition and a stand-in for the validating webhook), events, PriorityClasses."""

    def __init__(self) -> None:
        super().__init__()
        self.binding_patches: list[tuple[str, JSON]] = []
        self.events: list[tuple[str, str]] = []  # (reason, involved object name)
        self.classes: dict[str, int] = {}
        # the validating webhook: True admits the clear of this binding
        self.webhook: Callable[[JSON], bool] = lambda _b: True

    def add_queued(self, name: str, replicas: int, quota: str = "q", **kw: Any) -> JSON:
        raw = self.add_binding(name, replicas=replicas, requests={"cpu": "1"}, **kw)
        stored = self.bindings[raw["metadata"]["uid"]]
        stored["metadata"].setdefault("annotations", {})[queued.ANNOTATION] = quota
        stored["spec"]["suspension"] = {"scheduling": True}
        return copy.deepcopy(stored)

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        if method == "PATCH" and "/resourcebindings/" in path:
            assert body is not None
            return self._patch(path.rsplit("/", 1)[1], body)
        if method == "POST" and path.endswith("/events"):
            assert body is not None
            self.events.append((body["reason"], body["involvedObject"]["name"]))
            return body
        if method == "GET" and "/priorityclasses/" in path:
            name = path.rsplit("/", 1)[1]
            if name not in self.classes:
                raise NotFound(404, "NotFound", name)
            return {"value": self.classes[name]}
        return await super().request(method, path, body, params, timeout, content_type)

    def _patch(self, name: str, body: JSON) -> JSON:
        self.binding_patches.append((name, copy.deepcopy(body)))
        b = next((b for b in self.bindings.values() if b["metadata"]["name"] == name), None)
        if b is None:
            raise NotFound(404, "NotFound", name)
        if body["metadata"]["resourceVersion"] != b["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", name)
        if not self.webhook(b):
            raise KubeError(403, "Forbidden", "exceeded quota: q")
        b["metadata"]["annotations"].pop(queued.ANNOTATION, None)
        b["spec"]["suspension"].pop("scheduling", None)
        b["metadata"]["generation"] += 1
        return copy.deepcopy(self._bump(b))


@pytest.fixture
async def env() -> AsyncIterator[tuple[QueueKarmada, Controller, Lead]]:
    api = QueueKarmada()
    lead = Lead()
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(quiet=0.01, max_delay=0.1, member_watch=False),
        admitter=Admitter(api, ControllerMetrics()),
    )
    task = asyncio.create_task(c.run_queues())
    try:
        yield api, c, lead
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def spec(strategy: str = "BestEffortFIFO") -> dict[str, str]:
    return {"onExceed": "Queue", "queueingStrategy": strategy}


def add_quota(api: QueueKarmada, pods: int, strategy: str = "BestEffortFIFO") -> None:
    api.add_quota("q", {"pods": str(pods)})
    api.quotas["q"]["spec"].update(spec(strategy))


def event(c: Controller, raw: JSON, kind: str = "MODIFIED") -> None:
    c.binding_event(kind, raw)


async def test_admits_by_priority_then_age_on_the_version_it_decided_from(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 4)
    api.classes["high"] = 1000
    base = api.add_binding("base", replicas=4, requests={"cpu": "1"}, clusters={"m1": 4})
    api.add_queued("a", 2, created="2026-01-01T00:00:01Z")
    api.add_queued("b", 2, created="2026-01-01T00:00:02Z")
    api.add_queued("vip", 2, created="2026-01-01T00:00:03Z", priority_class="high")
    await c.resync()
    await until(lambda: used(api) == {"pods": "4"})
    assert api.quotas["q"]["status"]["queued"] == 3
    await until(lambda: sorted(r for r, _ in api.events) == ["Queued"] * 3)
    assert api.binding_patches == []

    del api.bindings[base["metadata"]["uid"]]
    c.binding_event("DELETED", base)
    await until(lambda: len(api.binding_patches) == 2)
    # room for two: priority, then age
    assert [n for n, _ in api.binding_patches] == ["vip-deployment", "a-deployment"]
    vip = next(b for b in api.bindings.values() if b["metadata"]["name"] == "vip-deployment")
    assert (
        api.binding_patches[0][1]["metadata"]["resourceVersion"]
        != vip["metadata"]["resourceVersion"]
    )
    await until(lambda: ("Admitted", "vip") in api.events and ("Admitted", "a") in api.events)
    for b in api.bindings.values():  # their updates come back through the watch
        event(c, b)
    await until(lambda: used(api) == {"pods": "4"} and api.quotas["q"]["status"]["queued"] == 1)
    assert c.admitter is not None
    admitted = c.admitter.metrics.queue_admissions.labels("room")._value.get()
    assert admitted == 2


async def test_strict_fifo_admits_nothing_past_a_head_that_does_not_fit(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 4, "StrictFIFO")
    base = api.add_binding("base", replicas=3, requests={"cpu": "1"}, clusters={"m1": 3})
    api.add_queued("big", 3, created="2026-01-01T00:00:01Z")
    api.add_queued("small", 1, created="2026-01-01T00:00:02Z")
    await c.resync()
    await until(lambda: api.quotas["q"].get("status", {}).get("queued") == 2)
    assert api.binding_patches == []  # small fits, but big is the head
    api.quotas["q"]["spec"].update(spec("BestEffortFIFO"))  # now small may pass big
    c.quota_event("MODIFIED", copy.deepcopy(api._bump(api.quotas["q"])))
    await until(lambda: [n for n, _ in api.binding_patches] == ["small-deployment"])
    del base


async def test_a_refused_clear_leaves_it_queued_and_a_follower_never_patches(env: Any) -> None:
    api, c, lead = env
    add_quota(api, 4)
    api.webhook = lambda _b: False  # e.g. another webhook replica admitted something
    api.add_queued("a", 2)
    lead.leader = False
    await c.resync()
    await until(c.idle)
    assert api.binding_patches == [] and api.events == []
    lead.leader = True
    c.leadership_changed(True)
    await until(lambda: len(api.binding_patches) >= 1)
    (a,) = api.bindings.values()
    assert queued.ANNOTATION in a["metadata"]["annotations"]
    assert a["spec"]["suspension"] == {"scheduling": True}
    assert c.admitter is not None
    await until(lambda: c.admitter.metrics.queue_attempts.labels("refused")._value.get() >= 1)
    assert c.admitter.metrics.queue_admissions.labels("room")._value.get() == 0


async def test_a_deleted_quota_releases_its_queue(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 1)
    api.add_queued("a", 2)
    await c.resync()
    await until(lambda: api.quotas["q"].get("status", {}).get("queued") == 1)
    assert api.binding_patches == []
    gone = api.quotas.pop("q")
    c.quota_event("DELETED", gone)
    await until(lambda: [n for n, _ in api.binding_patches] == ["a-deployment"])
    assert c.admitter is not None
    assert c.admitter.metrics.queue_admissions.labels("quota_deleted")._value.get() == 1


async def test_taking_our_annotation_off_alone_is_seen_although_no_generation_moved(
    env: Any,
) -> None:
    """A metadata-only change moves no generation; the index must still re-read it, or a
    binding charged in full again would stay counted as queued (charged nothing)."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    raw = api.add_queued("a", 2)
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    raw["metadata"]["annotations"].pop(queued.ANNOTATION)
    raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1)
    event(c, raw)
    await until(lambda: used(api) == {"pods": "2"})
    assert api.quotas["q"]["status"].get("queued", 0) == 0
    # and back: suspended (by anyone) and unplaced, our annotation alone makes it queued
    raw["metadata"]["annotations"][queued.ANNOTATION] = "q"
    raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1)
    event(c, raw)
    await until(lambda: used(api) == {"pods": "0"})
    assert api.quotas["q"]["status"]["queued"] == 1


async def test_queue_length_is_published_per_quota_and_dropped_when_empty() -> None:
    from karmadaquota import queueing
    from tests.test_queueing import entry

    metrics = ControllerMetrics()
    a = Admitter(QueueKarmada(), metrics)

    def length(quota: str) -> float | None:
        return metrics.registry.get_sample_value(
            "karmadaquota_queue_length", {"quota_namespace": "ns", "quota": quota}
        )

    es: list[queueing.QueueEntry] = [entry("x", 1, 1), entry("y", 1, 2), entry("z", 1, 3, "other")]
    a.publish("ns", es)
    assert (length("team"), length("other")) == (2.0, 1.0)
    a.publish("ns", es[:1])
    assert (length("team"), length("other")) == (1.0, None)
    a.publish("ns", [])
    assert length("team") is None
