"""The leader dequeues queued bindings (controller/dequeue.py) through the reconciler, against a
fake API server: in priority then age order, on the resourceVersion it decided from, never
on a follower, a refused clear leaving the binding queued; Queued/Admitted events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from karmadaquota import queued
from karmadaquota.controller.dequeue import Dequeuer
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, KubeError
from tests.conftest import raw_binding
from tests.controller import test_controller_reconciler as rt
from tests.controller.test_controller_reconciler import NS, Lead, controlling, listed, used
from tests.fake_api import FakeApiServer, Ref
from tests.polling import until


def add_queued(api: FakeApiServer, name: str, replicas: int, quota: str = "q", **kw: Any) -> JSON:
    """A binding the webhook queued: our annotation, scheduling suspended."""
    raw = raw_binding(name, namespace=NS, replicas=replicas, requests={"cpu": "1"}, **kw)
    raw["metadata"].setdefault("annotations", {})[queued.ANNOTATION] = quota
    raw["spec"]["suspension"] = {"scheduling": True}
    return api.put_binding(raw)


def add_class(api: FakeApiServer, name: str, value: int) -> None:
    api.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": name}, "value": value}
    )


def binding_patches(api: FakeApiServer) -> list[tuple[str, JSON]]:
    """The merge patches of bindings sent (binding name, body), refused ones included."""
    return [
        (p.rsplit("/", 1)[1], b)
        for m, p, b in api.sent
        if m == "PATCH" and "/resourcebindings/" in p and isinstance(b, dict)
    ]


def events(api: FakeApiServer) -> list[tuple[str, str]]:
    """The events recorded: (reason, involved object name)."""
    return [
        (e["reason"], e["involvedObject"]["name"])
        for e in api.objects(("/api/v1", "events")).values()
    ]


def refuse_clears(api: FakeApiServer) -> None:
    """The validating webhook refuses every update of a binding (e.g. another webhook
    replica admitted something meanwhile)."""

    def webhook(method: str, ref: Ref, _: JSON) -> None:
        if ref.plural == "resourcebindings" and method == "PATCH":
            raise KubeError(403, "Forbidden", "exceeded quota: q")

    api.webhook = webhook


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeApiServer, Controller, Lead]]:
    api = FakeApiServer(rv=100)
    api.create("/api/v1/namespaces", {"metadata": {"name": NS}})
    lead = Lead()
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(quiet=0.01, max_delay=0.1, member_watch=False),
        dequeuer=Dequeuer(api, ControllerMetrics()),
    )
    async with controlling(c):
        yield api, c, lead


def spec(strategy: str = "BestEffortFIFO") -> dict[str, str]:
    return {"onExceed": "Queue", "queueingStrategy": strategy}


def add_quota(api: FakeApiServer, pods: int, strategy: str = "BestEffortFIFO") -> None:
    rt.add_quota(api, "q", {"pods": str(pods)}, spec=spec(strategy))


async def test_admits_by_priority_then_age_on_the_version_it_decided_from(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 4)
    add_class(api, "high", 1000)
    rt.add_binding(api, "base", replicas=4, requests={"cpu": "1"}, clusters={"m1": 4})
    add_queued(api, "a", 2, created="2026-01-01T00:00:01Z")
    add_queued(api, "b", 2, created="2026-01-01T00:00:02Z")
    add_queued(api, "vip", 2, created="2026-01-01T00:00:03Z", priority_class="high")
    await listed(c)
    await until(lambda: used(api) == {"pods": "4"})
    assert rt.quota(api)["status"]["queued"] == 3
    await until(lambda: sorted(r for r, _ in events(api)) == ["Queued"] * 3)
    assert binding_patches(api) == []

    api.delete_binding(NS, "base-deployment")
    await until(lambda: len(binding_patches(api)) == 2)
    # room for two: priority, then age
    assert [n for n, _ in binding_patches(api)] == ["vip-deployment", "a-deployment"]
    vip = next(b for b in api.bindings.values() if b["metadata"]["name"] == "vip-deployment")
    assert (
        binding_patches(api)[0][1]["metadata"]["resourceVersion"]
        != vip["metadata"]["resourceVersion"]
    )
    await until(lambda: ("Admitted", "vip") in events(api) and ("Admitted", "a") in events(api))
    # their updates come back through the watch
    await until(lambda: used(api) == {"pods": "4"} and rt.quota(api)["status"]["queued"] == 1)
    assert c.dequeuer is not None
    admitted = c.dequeuer.metrics.queue_admissions.labels("room")._value.get()
    assert admitted == 2


async def test_strict_fifo_admits_nothing_past_a_head_that_does_not_fit(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 4, "StrictFIFO")
    rt.add_binding(api, "base", replicas=3, requests={"cpu": "1"}, clusters={"m1": 3})
    add_queued(api, "big", 3, created="2026-01-01T00:00:01Z")
    add_queued(api, "small", 1, created="2026-01-01T00:00:02Z")
    await listed(c)
    await until(lambda: rt.quota(api).get("status", {}).get("queued") == 2)
    assert binding_patches(api) == []  # small fits, but big is the head
    api.bump(NS, "q", lambda q: q["spec"].update(spec("BestEffortFIFO")))  # small may pass
    await until(lambda: [n for n, _ in binding_patches(api)] == ["small-deployment"])


async def test_a_refused_clear_leaves_it_queued_and_a_follower_never_patches(env: Any) -> None:
    api, c, lead = env
    add_quota(api, 4)
    refuse_clears(api)
    add_queued(api, "a", 2)
    lead.leader = False
    await listed(c)
    await until(c.idle)
    assert binding_patches(api) == [] and events(api) == []
    lead.leader = True
    c.leadership_changed(True)
    await until(lambda: len(binding_patches(api)) >= 1)
    (a,) = api.bindings.values()
    assert queued.ANNOTATION in a["metadata"]["annotations"]
    assert a["spec"]["suspension"] == {"scheduling": True}
    assert c.dequeuer is not None
    await until(lambda: c.dequeuer.metrics.queue_attempts.labels("refused")._value.get() >= 1)
    assert c.dequeuer.metrics.queue_admissions.labels("room")._value.get() == 0


async def test_a_deleted_quota_releases_its_queue(env: Any) -> None:
    api, c, _ = env
    add_quota(api, 1)
    add_queued(api, "a", 2)
    await listed(c)
    await until(lambda: rt.quota(api).get("status", {}).get("queued") == 1)
    assert binding_patches(api) == []
    api.delete(paths.quota(NS, "q"))
    await until(lambda: [n for n, _ in binding_patches(api)] == ["a-deployment"])
    assert c.dequeuer is not None
    assert c.dequeuer.metrics.queue_admissions.labels("quota_deleted")._value.get() == 1


async def test_taking_our_annotation_off_alone_is_seen_although_no_generation_moved(
    env: Any,
) -> None:
    """A metadata-only change moves no generation; the index must still re-read it, or a
    binding charged in full again would stay counted as queued (charged nothing)."""
    api, c, _ = env
    rt.add_quota(api, "q", {"pods": "10"})
    refuse_clears(api)  # only the test takes the annotation off
    raw = add_queued(api, "a", 2)
    path = f"{paths.bindings(NS)}/{raw['metadata']['name']}"
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    api.update(path, lambda o: o["metadata"]["annotations"].pop(queued.ANNOTATION))
    await until(lambda: used(api) == {"pods": "2"})
    assert rt.quota(api)["status"].get("queued", 0) == 0
    # and back: suspended (by anyone) and unplaced, our annotation alone makes it queued
    api.update(path, lambda o: o["metadata"]["annotations"].update({queued.ANNOTATION: "q"}))
    await until(lambda: used(api) == {"pods": "0"})
    assert rt.quota(api)["status"]["queued"] == 1


async def test_queue_length_is_published_per_quota_and_dropped_when_empty() -> None:
    from karmadaquota import queueing
    from tests.core.test_queueing import entry

    metrics = ControllerMetrics()
    a = Dequeuer(FakeApiServer(), metrics)

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
