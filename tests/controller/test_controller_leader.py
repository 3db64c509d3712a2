"""Lease leader election: create, renew, take over only after expiry, release, never two."""

from __future__ import annotations

from typing import Any

import pytest

from karmadaquota.controller.leader import LeaderElector, lease_path
from karmadaquota.kube.client import JSON
from tests.fake_api import FakeApiServer


def leases() -> FakeApiServer:
    """The fake API server with the namespace the leases live in."""
    api = FakeApiServer()
    api.create("/api/v1/namespaces", {"metadata": {"name": "karmada-system"}})
    return api


def lease(api: FakeApiServer) -> JSON:
    return api.get_object(lease_path("karmada-system", "karmadaquota-controller"))


def holder(api: FakeApiServer) -> str:
    return str(lease(api).get("spec", {}).get("holderIdentity", ""))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: FakeApiServer, clock: Clock, holder: str, **kw: Any) -> LeaderElector:
    changes: list[bool] = []
    e = LeaderElector(
        api, "karmada-system", holder=holder, clock=clock, on_change=changes.append, **kw
    )
    e.changes = changes  # type: ignore[attr-defined]
    return e


async def test_first_replica_creates_the_lease_and_leads() -> None:
    api, clock = leases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    assert a.is_leader() and holder(api) == "a"
    spec = lease(api)["spec"]
    assert spec["leaseDurationSeconds"] == 10 and spec["leaseTransitions"] == 0


async def test_follower_waits_for_the_lease_to_lapse_then_takes_over() -> None:
    api, clock = leases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    for _ in range(10):  # a keeps renewing: b never gets it
        clock.t += 2
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        assert a.is_leader() and not b.is_leader()
    # a dies; b must observe the record unchanged for a whole lease duration
    clock.t += 9
    assert not await b.try_acquire_or_renew()
    clock.t += 2
    assert await b.try_acquire_or_renew()
    assert holder(api) == "b"
    assert lease(api)["spec"]["leaseTransitions"] == 1


async def test_leader_stops_before_anyone_else_can_start() -> None:
    """Even with renewals failing, a's leadership ends before b may take over."""
    api, clock = leases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    took_over_at = None
    for _ in range(200):
        clock.t += 0.1
        if took_over_at is None and await b.try_acquire_or_renew():
            took_over_at = clock.t
        assert not (a.is_leader() and b.is_leader())
    assert took_over_at is not None
    assert a.remaining() < 0


async def test_leadership_lapses_when_renewals_fail() -> None:
    api, clock = leases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    api.fail = OSError("connection refused")
    clock.t += 6.9
    assert a.is_leader()
    clock.t += 0.2
    assert not a.is_leader()


async def test_release_lets_a_follower_in_at_once() -> None:
    api, clock = leases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    a._notify()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert not a.is_leader() and a.changes == [True, False]  # type: ignore[attr-defined]
    assert holder(api) == ""
    assert await b.try_acquire_or_renew()


async def test_concurrent_update_loses_the_cas() -> None:
    api, clock = leases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_acquire_or_renew()
    await a.release()

    # b read the released lease, but a renews it first: b's PUT conflicts
    async def a_renews_first(*_: Any) -> None:
        assert await a.try_acquire_or_renew()

    api.intercept(a_renews_first, match="/leases/")
    assert not await b.try_acquire_or_renew()
    assert api.calls["PUT leases"] == 3  # a release, a renewal, and b PUT that lost
    assert holder(api) == "a"


async def test_missing_namespace_is_reported_not_raised() -> None:
    api, clock = leases(), Clock()
    e = LeaderElector(api, "nowhere", holder="a", clock=clock)
    assert not await e.try_acquire_or_renew()


def test_deadline_must_leave_room() -> None:
    with pytest.raises(ValueError):
        LeaderElector(FakeApiServer(), "ns", lease_duration=5, renew_deadline=4, request_timeout=2)
