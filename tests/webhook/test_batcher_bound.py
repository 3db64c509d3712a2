"""The pending charges are bounded by design: every status write stays under etcd's limit."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

from karmadaquota import charge
from karmadaquota.api import KarmadaQuotaStatus, ObjectReference, Reservation
from karmadaquota.evaluate import Decision
from karmadaquota.kube.client import JSON
from karmadaquota.pending import charge_size, encode_pending, pending_size, reservation_size
from karmadaquota.webhook.batcher import (
    DEFAULT_RESERVATION_BYTES,
    REASON_TOO_MANY,
    Batcher,
    BatcherConfig,
    ChargeRequest,
)
from tests.fake_api import Replica, quota_doc
from tests.webhook_fakes import binding

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ETCD_REQUEST_LIMIT = 1536 * 1024  # etcd's --max-request-bytes default


def pending(name: str) -> ChargeRequest:
    b = binding(name, cpu="1", uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, name)))
    return ChargeRequest("ns", name, b.metadata.uid, 1, charge.charge(b), None, False)


def reservation(name: str, reserved: dict[str, str], generation: int = 1) -> Reservation:
    return Reservation(
        reservedBy=ObjectReference(
            apiVersion="work.karmada.io/v1alpha2",
            kind="ResourceBinding",
            name=name,
            namespace="n" * 63,
            uid=str(uuid.uuid4()),
        ),
        reserved=reserved,
        expirationTime="2026-01-01T00:01:00Z",
        generation=generation,
    )


def json_size(obj: object) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def test_reservation_size_is_an_upper_bound_of_its_json() -> None:
    """On the wire a reservation is its `status.pending` entry, plus its group when its charge
    is new: the estimate bounds both, one reservation at a time and for a whole list."""
    cases = [
        reservation("a", {}),
        reservation("b" * 253, {"requests.cpu": "1500m"}, generation=2**63 - 1),
        reservation("c", {f"requests.example.com/r{i}": "9223372036854775807" for i in range(100)}),
        reservation("d%/e", {"pods": "1"}),
    ]
    for r in cases:
        actual = json_size(encode_pending([r]))
        estimate = reservation_size(r) + charge_size(r.reserved)
        assert actual <= estimate <= actual + 1000, r.reservedBy.name
        assert len(json.dumps(encode_pending([r])[0]["bindings"][0])) + 1 <= reservation_size(r)
    many = [reservation(f"rb-{i:05d}", {"pods": str(1 + i % 3)}) for i in range(300)]
    actual = json_size(encode_pending(many))
    assert actual <= pending_size(many) <= actual + 300 * 40 + 3 * 100
    assert pending_size(cases + many) >= json_size(encode_pending(cases + many))


async def test_a_full_reservation_list_refuses_with_a_retryable_429_reason() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "100", "pods": "100"}))
    one = Batcher(store, clock=lambda: NOW)
    assert (await one.submit(pending("probe"))).allowed
    probe = store.stored().status.reservations[0]
    size = reservation_size(probe)
    store.seed(quota_doc(hard={"requests.cpu": "100", "pods": "100"}))

    # room for ten entries of one charge: the group once, ten entries
    bound = charge_size(probe.reserved) + 10 * size
    batcher = Batcher(store, BatcherConfig(max_reservation_bytes=bound), clock=lambda: NOW)
    decisions: list[Decision] = list(
        await asyncio.gather(*(batcher.submit(pending(f"b{i}")) for i in range(15)))
    )
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 5
    assert decisions[10].reason == REASON_TOO_MANY
    assert decisions[10].message == (
        "KarmadaQuota team-a holds 10 pending charges the quota controller has not yet counted, "
        f"the most its status can carry ({bound} bytes); admission resumes as the controller "
        "counts them (is karmadaquota-controller running?); try again"
    )
    kept = store.stored().status.reservations
    assert [r.reservedBy.name for r in kept] == [f"b{i}" for i in range(10)]
    assert pending_size(kept) <= bound

    # a controller outage: the charges expire, and still the bound refuses (fail closed)
    later = Batcher(
        store, BatcherConfig(max_reservation_bytes=bound), clock=lambda: NOW + timedelta(hours=1)
    )
    refused = await later.submit(pending("late"))
    assert not refused.allowed and refused.reason == REASON_TOO_MANY

    # the controller drains what it has observed: room again
    store.bump("ns", "team-a", lambda d: d["status"].pop("pending"))
    store.update(store.stored())
    assert (await batcher.submit(pending("b10"))).allowed


async def test_a_storm_of_5000_creates_never_writes_a_status_over_etcds_limit() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "5000", "pods": "5000"}))
    largest = [0]

    def measure(_: Replica, body: JSON) -> None:
        largest[0] = max(largest[0], json_size(body))

    store.before_put = measure
    batcher = Batcher(store, clock=lambda: NOW)
    todo = [f"rb-{i:05d}" for i in range(5000)]
    admitted = 0
    for _round in range(10):  # bounded: the fake controller drains between rounds
        decisions = await asyncio.gather(*(batcher.submit(pending(n)) for n in todo))
        assert all(d.allowed or d.reason == REASON_TOO_MANY for d in decisions)
        admitted += sum(d.allowed for d in decisions)
        todo = [n for n, d in zip(todo, decisions, strict=True) if not d.allowed]
        if not todo:
            break
        store.bump("ns", "team-a", drain)
        store.update(store.stored())  # the watch delivers the controller's write
    assert admitted == 5000 and not todo
    assert largest[0] <= DEFAULT_RESERVATION_BYTES + 4096 < ETCD_REQUEST_LIMIT


def drain(doc: JSON) -> None:
    """What the controller does once it observed the reserved bindings: usage moves to used."""
    held = KarmadaQuotaStatus.model_validate(doc["status"]).reservations
    count = int(doc["status"]["used"]["pods"]) + len(held)
    doc["status"]["used"] = {"requests.cpu": str(count), "pods": str(count)}
    doc["status"].pop("pending", None)
