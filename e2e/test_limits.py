"""Size and resource limits of the real webhook process: a create storm never makes a status
write approach etcd's request limit, oversized reviews get 413 without the process growing, and
slow clients cannot keep an ordinary review waiting."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from e2e.testbed import TestBed, campaign, product
from e2e.testbed.process import memory_kib
from e2e.testbed.storm import binding, retryable, storm
from karmadaquota.kube.client import KubeClient
from karmadaquota.webhook.batcher import REASON_TOO_MANY

pytestmark = pytest.mark.e2e

ETCD_REQUEST_LIMIT = 1536 * 1024  # etcd's --max-request-bytes default
RESERVATION_BYTES = 3 * 1024  # status.pending: ~60 entries, so a 600-create storm meets it


@pytest.fixture(scope="module")
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def hook(testbed: TestBed) -> AsyncIterator[product.WebhookProc]:
    """Controller + one webhook with a small reservation bound, registered for the module."""
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-limits")
    webhook = await product.start_webhook(
        testbed, "webhook-limits", "60s", False, f"--max-reservation-bytes={RESERVATION_BYTES}"
    )
    try:
        await asyncio.to_thread(product.register, testbed, webhook.base, webhook.ca_bundle)
        yield webhook
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        webhook.proc.stop()
        controller.stop()


async def test_a_create_storm_keeps_every_status_write_small(
    testbed: TestBed,
    hook: product.WebhookProc,
    api: KubeClient,
    namespace: str,
    record_property: Callable[[str, Any], None],
) -> None:
    """N creates with room for all (5,000 with KARMADAQUOTA_LONG=1): every version of the quota
    the API server stored stays far under etcd's limit; refusals are only the retryable
    'holds N pending charges … the most its status can carry'; retried, all are admitted and
    counted exactly."""
    count = 5000 if campaign.long_run() else 600
    ns, path = namespace, campaign.RB_PATH.format(ns=namespace)
    await api.post(
        campaign.QUOTA_PATH.format(ns=ns),
        product.quota(ns, "room", {"pods": str(count)}),
    )
    await campaign.converge(api, ns, timeout=30)  # status initialised

    largest = {"object": 0, "reservations": 0, "versions": 0}

    async def watch_sizes() -> None:
        listed = await api.get(campaign.QUOTA_PATH.format(ns=ns))
        rv = listed["metadata"]["resourceVersion"]
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async for _, obj in api.watch(campaign.QUOTA_PATH.format(ns=ns), rv, 60):
                    rv = obj["metadata"]["resourceVersion"]
                    # status.pending, and an old layout's list if the quota still had one
                    st = obj.get("status", {})
                    res = [st.get("pending", []), st.get("reservations", [])]
                    largest["versions"] += 1
                    largest["object"] = max(largest["object"], len(json.dumps(obj)))
                    largest["reservations"] = max(largest["reservations"], len(json.dumps(res)))

    watcher = asyncio.create_task(watch_sizes())
    todo = [f"rb-{i:05d}" for i in range(count)]
    rounds, too_many = 0, 0
    started = time.monotonic()
    stalled = 0
    # bounded: Karmada's controllers retry a refused create too, backing off while nothing
    # moves (a reservation of a create the API server failed after our admission holds the
    # last room until the controller's admission window has passed)
    while todo and time.monotonic() - started < 180:
        rounds += 1
        names = list(todo)
        result = await storm(
            api, path, lambda i, names=names: binding(ns, names[i], cpu="0"), len(names), 100, 300
        )
        # retryable refusals only: karmadaquota's own 'try again' (the bound, its review
        # deadline), the API server's deadline for a webhook call passing (a loaded machine,
        # failing closed), or the room held by a reservation of a create that failed after
        # admission (its quota is full until the controller releases it)
        others = ("context deadline exceeded", f"used: pods={count}, limited: pods={count}")
        assert all(retryable(m) or any(r in m for r in others) for m in result.denied.values()), (
            set(result.denied.values())
        )
        too_many += sum("the most its status can carry" in m for m in result.denied.values())
        # what exists, from the API: a create that timed out at the client may still have
        # been admitted and stored
        live = {b["metadata"]["name"] for b in (await api.get(path))["items"]}
        left = [n for n in todo if n not in live]
        stalled = stalled + 1 if len(left) == len(todo) else 0
        todo = left
        if todo and stalled:
            await asyncio.sleep(min(0.1 * 2**stalled, 2.0))  # client backoff
    elapsed = time.monotonic() - started
    assert not todo, f"{len(todo)} never admitted after {rounds} rounds"
    q = (await campaign.converge(api, ns, timeout=90))[0]
    assert q.converged
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    print(
        f"{count} creates in {elapsed:.1f}s over {rounds} rounds; {too_many} retryable "
        f"refusals ({REASON_TOO_MANY}); largest stored quota {largest['object']} B, "
        f"largest reservation list {largest['reservations']} B over {largest['versions']} versions"
    )
    record_property("largest_quota_bytes", largest["object"])
    assert largest["versions"] > 0
    assert largest["reservations"] <= RESERVATION_BYTES
    assert largest["object"] < ETCD_REQUEST_LIMIT // 4


async def test_oversized_reviews_get_413_and_the_webhook_does_not_grow(
    hook: product.WebhookProc, record_property: Callable[[str, Any], None]
) -> None:
    chunk = b"x" * 65536
    total = 40 * 1024 * 1024

    async def body() -> AsyncIterator[bytes]:
        sent = 0
        while sent < total:
            sent += len(chunk)
            yield chunk

    before = memory_kib(hook.proc.popen.pid)[1]
    statuses = []
    async with aiohttp.ClientSession() as s:
        for _ in range(10):
            try:
                async with s.post(
                    f"{hook.base}/validate-resourcebinding",
                    data=body(),
                    ssl=hook.ssl_context(),
                    # declared, as the API server does: refused before a byte of it is read
                    headers={"Content-Type": "application/json", "Content-Length": str(total)},
                ) as r:
                    statuses.append(r.status)
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                statuses.append(-1)  # the webhook closed while we were still sending
    grown = memory_kib(hook.proc.popen.pid)[1] - before
    print(f"10 × 40 MiB bodies: statuses {statuses}; peak RSS grew {grown} KiB")
    record_property("peak_rss_growth_kib", grown)
    assert 413 in statuses and set(statuses) <= {413, -1}
    assert grown < 16 * 1024  # a buffered body alone would be 40 MiB


async def test_slow_clients_do_not_keep_a_review_waiting(hook: product.WebhookProc) -> None:
    ctx = hook.ssl_context()
    slow: list[asyncio.StreamWriter] = []
    try:
        for _ in range(300):
            _, writer = await asyncio.open_connection("127.0.0.1", hook.port, ssl=ctx)
            writer.write(b"POST /validate-resourcebinding HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append(writer)
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "resource": {
                    "group": "work.karmada.io",
                    "version": "v1alpha2",
                    "resource": "resourcebindings",
                },
                "namespace": "no-quota-here",
                "operation": "CREATE",
                "object": binding("no-quota-here", "b"),
            },
        }
        started = time.monotonic()
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
            s.post(f"{hook.base}/validate-resourcebinding", json=review, ssl=ctx) as r,
        ):
            answer = await r.json()
        print(f"review answered in {time.monotonic() - started:.3f}s beside 300 slow clients")
        assert answer["response"]["allowed"] is True
    finally:
        for w in slow:
            w.close()
