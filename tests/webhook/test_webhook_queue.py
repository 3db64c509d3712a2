"""The queueing route, /mutate-resourcebinding, through the webhook's HTTP surface: a new
binding a Queue quota cannot take comes back with a JSON patch that queues it, and the
validating route then charges it nothing; everything else comes back unpatched."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest
from aiohttp.test_utils import TestClient, TestServer

from karmadaquota import queued
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.refusals import record_refusals
from karmadaquota.webhook.routes import build_app
from tests.fake_api import Replica, quota_doc
from tests.polling import until
from tests.webhook.test_webhook_app import post, review
from tests.webhook_fakes import binding_doc


def queue_quota(
    on_exceed: str = "Queue", strategy: str = "BestEffortFIFO", queued_n: int = 0
) -> Any:
    doc = quota_doc(
        hard={"requests.cpu": "4", "pods": "100"}, used={"requests.cpu": "3", "pods": "3"}
    )
    doc["spec"]["onExceed"] = on_exceed
    doc["spec"]["queueingStrategy"] = strategy
    doc["status"]["queued"] = queued_n
    return doc


async def serve(doc: Any) -> tuple[TestClient[Any, Any], Replica, Webhook]:
    store = Replica(doc)
    cache = store.quota_store()
    webhook = Webhook(cache, Batcher(store), WebhookMetrics())
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    return client, store, webhook


@pytest.fixture
async def queue() -> AsyncIterator[tuple[TestClient[Any, Any], Replica, Webhook]]:
    client, store, webhook = await serve(queue_quota())
    yield client, store, webhook
    await client.close()


def patched(obj: Any, response: Any) -> Any:
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))


async def test_a_binding_that_does_not_fit_is_queued_and_then_charged_nothing(queue: Any) -> None:
    client, store, webhook = queue
    doc = binding_doc("big", replicas=2)
    status, body = await post(client, "/mutate-resourcebinding", review(doc))
    assert status == 200 and body["response"]["allowed"] is True
    out = patched(doc, body["response"])
    assert out["metadata"]["annotations"][queued.ANNOTATION] == "team-a"
    assert out["spec"]["suspension"] == {"scheduling": True}
    # the validating route sees the mutated object: allowed, nothing reserved
    status, body = await post(client, "/validate-resourcebinding", review(out))
    assert body["response"]["allowed"] is True
    assert store.stored().status.reservations == []
    assert webhook.metrics.queued.labels("Exceeded")._value.get() == 1


async def test_a_binding_that_fits_is_not_patched(queue: Any) -> None:
    client, _, _ = queue
    _, body = await post(client, "/mutate-resourcebinding", review(binding_doc("ok")))
    assert body["response"] == {"uid": "req-1", "allowed": True}


async def test_suspended_by_someone_else_or_an_update_is_never_patched(queue: Any) -> None:
    client, _, _ = queue
    theirs = binding_doc("theirs", replicas=2)
    theirs["spec"]["suspension"] = {"scheduling": True}
    _, body = await post(client, "/mutate-resourcebinding", review(theirs))
    assert "patch" not in body["response"]
    big = binding_doc("big", replicas=2)
    _, body = await post(client, "/mutate-resourcebinding", review(big, "UPDATE", old=big))
    assert "patch" not in body["response"]


@pytest.mark.parametrize(
    ("on_exceed", "strategy", "queued_n", "replicas", "queues"),
    [
        ("Refuse", "BestEffortFIFO", 0, 2, False),  # refused by the validating route instead
        ("Queue", "StrictFIFO", 2, 1, True),  # fits, but others are queued ahead
        ("Queue", "BestEffortFIFO", 2, 1, False),  # fits: best effort lets it pass
        ("Queue", "StrictFIFO", 0, 1, False),
    ],
)
async def test_what_each_mode_queues(
    on_exceed: str, strategy: str, queued_n: int, replicas: int, queues: bool
) -> None:
    client, _, _ = await serve(queue_quota(on_exceed, strategy, queued_n))
    try:
        _, body = await post(client, "/mutate-resourcebinding", review(binding_doc("w", replicas)))
        assert ("patch" in body["response"]) is queues
    finally:
        await client.close()


async def test_the_controllers_refused_admission_is_not_recorded_as_a_refusal(queue: Any) -> None:
    """Clearing the suspension of a queued binding that does not fit is refused (it stays
    queued), and is not remembered in status.waiting: the queue is its place."""
    client, store, webhook = queue
    webhook.refusals = record_refusals(store, webhook.batcher, interval=0.05)
    doc = binding_doc("big", replicas=2)
    _, body = await post(client, "/mutate-resourcebinding", review(doc))
    old = patched(doc, body["response"])
    _, body = await post(client, "/validate-resourcebinding", review(doc, "UPDATE", old=old))
    resp = body["response"]
    assert resp["allowed"] is False and resp["status"]["reason"] == "QuotaExceeded"
    # a plain refusal afterwards is recorded: once it is, the first would have been too
    other = binding_doc("other", replicas=2)
    _, body = await post(client, "/validate-resourcebinding", review(other))
    assert body["response"]["allowed"] is False
    await until(lambda: bool(store.stored().status.waiting), what="the plain refusal recorded")
    assert [w.binding for w in store.stored().status.waiting] == ["other"]
    await webhook.refusals.close()


async def test_strict_fifo_counts_what_this_replica_just_queued() -> None:
    """The controller's `status.queued` lags: a small binding right behind a large one this
    replica just queued must not pass it under StrictFIFO (it would under BestEffortFIFO)."""
    for strategy, small_queued in (("StrictFIFO", True), ("BestEffortFIFO", False)):
        client, _, webhook = await serve(queue_quota(strategy=strategy))
        try:
            _, body = await post(client, "/mutate-resourcebinding", review(binding_doc("big", 2)))
            assert "patch" in body["response"]
            _, body = await post(client, "/mutate-resourcebinding", review(binding_doc("small", 1)))
            assert ("patch" in body["response"]) is small_queued, strategy
            if small_queued:
                assert webhook.metrics.queued.labels("BehindQueue")._value.get() == 1
        finally:
            await client.close()
