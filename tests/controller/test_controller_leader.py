"""Lease leader election: create, renew, take over only after expiry, release, never two."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from karmadaquota.controller.leader import LeaderElector, lease_path, may_lead
from karmadaquota.kube.client import JSON, KubeError
from tests.fake_api import FakeApiServer
from tests.polling import until


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


def hold_the_loop(seconds: float) -> None:
    """A recompute that never awaits: the loop runs nothing else meanwhile (issue 46)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def fast_elector(api: FakeApiServer) -> LeaderElector:
    # renewals every 0.1 s, leadership for 1 s past the start of the last one
    return LeaderElector(
        api,
        "karmada-system",
        holder="a",
        lease_duration=3.0,
        renew_deadline=1.0,
        retry_period=0.1,
        request_timeout=1.0,
    )


@pytest.mark.parametrize("threaded", [True, False], ids=["own-thread", "on-the-loop"])
async def test_a_loop_held_past_the_renew_deadline_lapses_no_lease_renewed_from_a_thread(
    threaded: bool,
) -> None:
    """Issue 46: a turn of the controller's loop ran recomputes for seconds, the renewal's
    answer waited behind them past its deadline, and the leader lapsed. Renewed from a
    thread of its own, the Lease is held through a loop held for twice the renew deadline;
    renewed on the loop (before), it lapses."""
    api = leases()
    e = fast_elector(api)
    changes: list[bool] = []
    e.on_change = changes.append
    task = asyncio.create_task(e.run_on_thread() if threaded else e.run())
    try:
        await until(lambda: changes == [True], what="leading")
        hold_the_loop(2.0)
        assert e.is_leader() is threaded
        if threaded:
            assert holder(api) == "a" and changes == [True]  # never lost
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if threaded:
        assert holder(api) == ""  # released by the thread as it stopped
        assert changes == [True, False]


async def test_a_thread_that_cannot_renew_stops_the_writes_of_a_busy_loop() -> None:
    """Fail safe: renewals failing (the API server refuses them) end leadership at its
    deadline, while the loop is held and has heard nothing: the next write finds no
    leadership (`may_lead` reads the clock), whatever the loop was told."""
    api = leases()
    e = fast_elector(api)
    changes: list[bool] = []
    e.on_change = changes.append
    task = asyncio.create_task(e.run_on_thread())
    try:
        await until(lambda: changes == [True], what="leading")

        def refuse(*_: Any) -> None:
            raise KubeError(500, "InternalError", "etcd unavailable")

        api.intercept(refuse, times=10_000, match="/leases/")
        hold_the_loop(2.0)
        assert not e.is_leader() and not may_lead(e, 0.1)
        assert changes == [True]  # not heard yet: the clock alone stopped the writes
        await until(lambda: changes == [True, False])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
